"""``_startup`` (run at every interpreter start through the venv's .pth file) and the import
hook under it. Standard library only: frameworks are played by small fake packages here; the
real torch and numpy are in test_runtime_frameworks.py.

Two ways to start an interpreter with the hook, both in child processes:

- ``venv``: a real virtual environment whose site-packages holds the same .pth file as the image
  (``<runtime root>`` and ``import reprobuild_entrypoint._startup``): true interpreter start;
- ``launch``: ``site.addsitedir()`` on a folder with that .pth, then the program with runpy; for
  programs that need packages (fake or real) from PYTHONPATH.
"""

from __future__ import annotations

import importlib
import json
import os
import random
import subprocess
import sys
import textwrap
import uuid
import venv
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

import reprobuild_entrypoint
from helpers import runtime_tmp
from reprobuild_entrypoint import cpus, importhook
from reprobuild_entrypoint._startup import CPUS_CHECKED
from reprobuild_entrypoint.envplan import image_env
from reprobuild_entrypoint.frameworks import CONFIGURATORS

RUNTIME_ROOT = str(Path(reprobuild_entrypoint.__file__).resolve().parent.parent)
PTH = f"{RUNTIME_ROOT}\nimport reprobuild_entrypoint._startup\n"
PY = sys.executable
LAUNCH = (
    "import runpy, site, sys; site.addsitedir(sys.argv[1]); sys.argv = sys.argv[2:]; "
    "runpy.run_path(sys.argv[0], run_name='__main__')"
)


def base_env(**extra: str) -> dict[str, str]:
    """A minimal environment. The CPU check is marked done, so that what a test sees on stderr
    does not depend on the CPUs of the machine running it (the CPU tests below remove it)."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "REPRO_QUIET": "1",
        **runtime_tmp(),
        CPUS_CHECKED: "test",
        **extra,
    }


def image_env_vars(seed: int = 0, mode: str = "strict", **extra: str) -> dict[str, str]:
    """The environment of a container of an image built with this seed and mode."""
    return base_env(
        REPROBUILD_IMAGE_SEED=str(seed),
        REPROBUILD_IMAGE_DETERMINISM=mode,
        REPROBUILD_VARIANT="cpu",
        **image_env(seed, mode, "cpu"),
        **extra,
    )


@pytest.fixture(scope="module")
def venv_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("venv")
    venv.EnvBuilder(with_pip=False, symlinks=True).create(root)
    python = root / "bin" / "python"
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    Path(purelib, "_reprobuild_runtime.pth").write_text(PTH)
    return python


@pytest.fixture(scope="module")
def site_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("site")
    (folder / "reprobuild.pth").write_text(PTH)
    return folder


def in_venv(
    python: Path, code: str, env: dict[str, str], *flags: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [python, *flags, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def launch(
    site: Path, source: str, env: dict[str, str], path: tuple[Path, ...] = ()
) -> subprocess.CompletedProcess[str]:
    script = site.parent / f"program_{uuid.uuid4().hex}.py"
    script.write_text(textwrap.dedent(source))
    env = {**env, "PYTHONPATH": os.pathsep.join(str(p) for p in path)}
    return subprocess.run(
        [PY, "-c", LAUNCH, str(site), str(script)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def first_random(seed: int) -> float:
    return random.Random(seed).random()


# ------------------------------------------------------------------ at interpreter start


def test_python_starts_and_random_is_seeded(venv_python: Path) -> None:
    result = in_venv(venv_python, "import random; print(random.random())", image_env_vars(0))
    assert result.returncode == 0, result.stderr
    assert float(result.stdout) == first_random(0)


def test_repro_seed_and_rank_choose_the_seed(venv_python: Path) -> None:
    code = "import random; print(random.random())"
    assert float(
        in_venv(venv_python, code, image_env_vars(0, REPRO_SEED="5")).stdout
    ) == first_random(5)
    ranked = in_venv(venv_python, code, image_env_vars(0, REPRO_SEED="5", RANK="3"))
    assert float(ranked.stdout) == first_random(8)  # (seed + rank) mod 2**32


def test_off_leaves_random_alone(venv_python: Path) -> None:
    code = "import random, sys; print(random.random(), len(sys.meta_path))"
    env = image_env_vars(0, REPRO_DETERMINISM="off")
    outs = {in_venv(venv_python, code, env).stdout for _ in range(3)}
    assert len(outs) == 3
    plain = in_venv(
        venv_python, "import sys; print(len(sys.meta_path))", base_env(REPRO_DETERMINISM="off")
    )
    assert {o.split()[1] for o in outs} == {plain.stdout.strip()}
    # the one finder ``off`` installs watches wandb alone (the stack in its runs), not random
    watched = in_venv(
        venv_python,
        "import sys; print(sorted(getattr(sys.meta_path[0], 'callbacks', {})))",
        base_env(REPRO_DETERMINISM="off"),
    )
    assert watched.stdout.strip() == "['wandb']", watched.stderr


def test_no_framework_is_imported_by_us(venv_python: Path) -> None:
    code = (
        "import sys; print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('numpy', 'torch', 'tensorflow', 'keras', 'reprobuild_entrypoint'))))"
    )
    result = in_venv(venv_python, "import json; " + code, image_env_vars(0))
    assert json.loads(result.stdout) == [
        "reprobuild_entrypoint",
        "reprobuild_entrypoint._startup",
        "reprobuild_entrypoint.contract",  # constants only: the names host and image share
        "reprobuild_entrypoint.envplan",
        "reprobuild_entrypoint.importhook",
        "reprobuild_entrypoint.settings",
    ]


def test_startup_imports_nothing_heavy(venv_python: Path, tmp_path: Path) -> None:
    """The start-up cost guard: compared with the same interpreter in a venv without the .pth
    file, only these modules are added (no typing, dataclasses, collections, json, re, ...)."""
    bare = tmp_path / "bare"
    venv.EnvBuilder(with_pip=False, symlinks=True).create(bare)
    code = "import sys; print(' '.join(sorted(sys.modules)))"
    env = image_env_vars(0)
    del env[CPUS_CHECKED]  # the first interpreter of a tree looks at the CPUs too
    with_hook = set(in_venv(venv_python, code, env).stdout.split())
    without = set(in_venv(bare / "bin" / "python", code, env).stdout.split())
    added = with_hook - without
    allowed = {
        "__future__",
        "reprobuild_entrypoint",
        "reprobuild_entrypoint._startup",
        "reprobuild_entrypoint.contract",  # constants only
        "reprobuild_entrypoint.cpus",
        "reprobuild_entrypoint.envplan",
        "reprobuild_entrypoint.importhook",
        "reprobuild_entrypoint.settings",
        "atexit",
    }
    assert added <= allowed, f"start-up imported {sorted(added - allowed)}"


def test_bad_seed_stops_every_interpreter_with_status_2(venv_python: Path) -> None:
    result = in_venv(venv_python, "print('ran')", image_env_vars(0, REPRO_SEED="x"))
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.splitlines() == [
        "reprobuild: REPRO_SEED='x' is not a valid seed: use a whole number from 0 to 4294967295"
    ]


def test_entrypoint_with_isolated_mode_as_in_the_image(venv_python: Path) -> None:
    # ENTRYPOINT ["/opt/venv/bin/python", "-I", "-m", "reprobuild_entrypoint"]: -I ignores
    # PYTHONPATH; the .pth file is what puts the runtime on the path.
    result = subprocess.run(
        [
            venv_python,
            "-I",
            "-m",
            "reprobuild_entrypoint",
            str(venv_python),
            "-c",
            "import os, random; print(os.environ['PYTHONHASHSEED'], random.random())",
        ],
        env=image_env_vars(0, REPRO_SEED="9", REPRO_QUIET="0"),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    hash_seed, number = result.stdout.split()
    assert hash_seed == "9" and float(number) == first_random(9)
    assert result.stderr.startswith("reprobuild: seed 9, mode strict")
    assert "PYTHONHASHSEED" not in result.stderr  # consistent: no warning


def test_bypassed_entrypoint_applies_the_environment(venv_python: Path) -> None:
    code = "import os; print(os.environ['OMP_NUM_THREADS'], os.environ['PYTHONHASHSEED'])"
    env = image_env_vars(0, REPRO_THREADS="8", REPRO_SEED="3", REPRO_QUIET="0")
    result = in_venv(venv_python, code, env)
    assert result.stdout.split() == ["8", "3"]  # libraries read these later: still in time
    # but this interpreter's own string hashing was fixed before start-up code ran: say so
    assert "started with PYTHONHASHSEED=0, not the run's 3" in result.stderr
    user = in_venv(venv_python, code, {**env, "OMP_NUM_THREADS": "2", "PYTHONHASHSEED": "3"})
    assert user.stdout.split() == ["2", "3"] and user.stderr == ""


def test_hash_order_fixed_with_the_image_env_and_random_under_off(venv_python: Path) -> None:
    code = "print(list({f'k{i}' for i in range(40)}))"
    fixed = {in_venv(venv_python, code, image_env_vars(0)).stdout for _ in range(2)}
    assert len(fixed) == 1
    off = image_env_vars(0)
    off.pop("PYTHONHASHSEED")
    assert len({in_venv(venv_python, code, off).stdout for _ in range(3)}) > 1


# ------------------------------------------------------- thread count above the CPUs


def on_one_cpu(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run with the affinity mask narrowed to one CPU, as ``docker run --cpuset-cpus 0``."""
    one = min(os.sched_getaffinity(0))
    return subprocess.run(
        argv,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        preexec_fn=lambda: os.sched_setaffinity(0, {one}),
    )


ONE_CPU: float = cpus.usable(1, cpus.quota_cpus()) or 1
"""What start-up finds on one CPU: 1, or less where the tests run under a smaller quota
(``usable`` is never None here: the affinity is given)."""


def cpu_env(**extra: str) -> dict[str, str]:
    env = image_env_vars(0, **{"REPRO_QUIET": "0", **extra})
    del env[CPUS_CHECKED]
    return env


# The program starts a child interpreter (as a launcher or a spawned worker would), which
# starts another: only the first says it, and all three see the marker.
TREE = """
import os, subprocess, sys
print(os.environ.get("REPROBUILD_CPUS_CHECKED"), flush=True)
if len(sys.argv) < 3:
    subprocess.run([sys.executable, __file__, *sys.argv[1:], "x"], check=True)
"""


def test_threads_above_the_cpus_said_once_per_process_tree(
    venv_python: Path, tmp_path: Path
) -> None:
    program = tmp_path / "tree.py"
    program.write_text(TREE)
    result = on_one_cpu([str(venv_python), str(program)], cpu_env())
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [f"{ONE_CPU:g}"] * 3
    assert result.stderr.splitlines() == ["reprobuild: " + cpus.notice(4, "default", ONE_CPU)]
    assert "4 threads (the default) fixed for determinism" in result.stderr


def test_threads_from_repro_threads_are_named(venv_python: Path) -> None:
    result = on_one_cpu([str(venv_python), "-c", "pass"], cpu_env(REPRO_THREADS="2"))
    assert result.stderr.splitlines() == ["reprobuild: " + cpus.notice(2, "REPRO_THREADS", ONE_CPU)]
    assert "from REPRO_THREADS" in result.stderr


@pytest.mark.parametrize(
    "extra",
    [
        {"REPRO_THREADS": "1"},  # not above the CPUs
        {"REPRO_QUIET": "1"},
        {"REPRO_DETERMINISM": "off"},  # no fixed count to speak of
    ],
)
def test_no_cpu_line(venv_python: Path, extra: dict[str, str]) -> None:
    if extra.get("REPRO_THREADS") == "1" and ONE_CPU < 1:
        pytest.skip("a CPU quota under one CPU: one thread is above it")
    code = "import os; print(os.environ.get('REPROBUILD_CPUS_CHECKED'))"
    result = on_one_cpu([str(venv_python), "-c", code], cpu_env(**extra))
    assert result.returncode == 0 and result.stderr == ""
    expected = "None" if extra.get("REPRO_DETERMINISM") == "off" else f"{ONE_CPU:g}"
    assert result.stdout.strip() == expected


def test_cpu_line_comes_before_the_entrypoint_summary_and_only_once(venv_python: Path) -> None:
    code = "import subprocess, sys; subprocess.run([sys.executable, '-c', 'pass'])"
    entrypoint = [str(venv_python), "-I", "-m", "reprobuild_entrypoint"]
    result = on_one_cpu([*entrypoint, str(venv_python), "-c", code], cpu_env())
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 2, result.stderr
    assert lines[0] == "reprobuild: " + cpus.notice(4, "default", ONE_CPU)
    assert lines[1].startswith("reprobuild: seed 0, mode strict, threads 4")


def test_framework_names_match_the_configurators(venv_python: Path) -> None:
    code = "import json, reprobuild_entrypoint._startup as s; print(json.dumps(s.FRAMEWORKS))"
    assert set(json.loads(in_venv(venv_python, code, image_env_vars(0)).stdout)) == set(
        CONFIGURATORS
    )


# -------------------------------------------------------------------- the import hook


@pytest.fixture
def packages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, str]]:
    """A folder on sys.path and a unique prefix for package names made in it."""
    monkeypatch.syspath_prepend(str(tmp_path))
    prefix = f"fake_{uuid.uuid4().hex[:8]}"
    yield tmp_path, prefix
    for name in [m for m in sys.modules if m.startswith(prefix)]:
        del sys.modules[name]


def make_package(root: Path, name: str, init: str, **submodules: str) -> None:
    (root / name).mkdir()
    (root / name / "__init__.py").write_text(textwrap.dedent(init))
    for sub, source in submodules.items():
        (root / name / f"{sub}.py").write_text(textwrap.dedent(source))
    importlib.invalidate_caches()


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, bool]] = []

    def __call__(self, name: str, module: ModuleType) -> None:
        self.calls.append((name, bool(getattr(module, "DONE", False))))


def with_hook(callbacks: dict[str, importhook.Callback]) -> importhook.PostImportFinder:
    return importhook.install(callbacks)


def test_callback_runs_after_the_module_is_complete(packages: tuple[Path, str]) -> None:
    root, p = packages
    make_package(root, f"{p}_a", f"from {p}_a import sub\nDONE = True\n", sub=f"import {p}_a\n")
    seen = Recorder()
    finder = importhook.install({f"{p}_a": seen})
    try:
        module = importlib.import_module(f"{p}_a")
    finally:
        importhook.uninstall(finder)
    assert seen.calls == [(f"{p}_a", True)]
    assert module.__loader__.__class__.__name__ == "SourceFileLoader"  # not our wrapper
    assert module.__spec__ is not None and module.__spec__.loader is module.__loader__


def test_nested_watched_imports_wait_for_the_outermost(packages: tuple[Path, str]) -> None:
    root, p = packages
    outer, inner = f"{p}_outer", f"{p}_inner"
    make_package(root, inner, "DONE = True\n")
    make_package(root, outer, f"import {inner}\nDONE = True\n")
    order: list[tuple[str, bool]] = []

    def callback(name: str, module: ModuleType) -> None:
        order.append((name, bool(getattr(sys.modules.get(outer), "DONE", False))))

    finder = importhook.install({outer: callback, inner: callback})
    try:
        importlib.import_module(outer)
    finally:
        importhook.uninstall(finder)
    # inner completed first, but its callback waited until outer had finished too
    assert order == [(inner, True), (outer, True)]


def test_failed_import_gets_no_callback(packages: tuple[Path, str]) -> None:
    root, p = packages
    make_package(root, f"{p}_bad", "raise ImportError('broken on purpose')\n")
    seen = Recorder()
    finder = importhook.install({f"{p}_bad": seen})
    try:
        with pytest.raises(ImportError, match="broken on purpose"):
            importlib.import_module(f"{p}_bad")
    finally:
        importhook.uninstall(finder)
    assert seen.calls == [] and f"{p}_bad" not in sys.modules


def test_unwatched_and_missing_modules_are_not_touched(packages: tuple[Path, str]) -> None:
    root, p = packages
    make_package(root, f"{p}_other", "DONE = True\n", sub="X = 1\n")
    seen = Recorder()
    finder = importhook.install({f"{p}_missing": seen, f"{p}_other.sub": seen})
    try:
        importlib.import_module(f"{p}_other.sub")  # submodules are never watched
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(f"{p}_missing")
    finally:
        importhook.uninstall(finder)
    assert seen.calls == []
    assert finder.find_spec("json") is None


def test_already_imported_modules_get_their_callback_at_install(packages: tuple[Path, str]) -> None:
    root, p = packages
    make_package(root, f"{p}_early", "DONE = True\n")
    importlib.import_module(f"{p}_early")
    seen = Recorder()
    importhook.uninstall(importhook.install({f"{p}_early": seen}))
    assert seen.calls == [(f"{p}_early", True)]


def test_callback_errors_reach_the_import_statement(packages: tuple[Path, str]) -> None:
    root, p = packages
    make_package(root, f"{p}_c", "DONE = True\n")

    def fail(name: str, module: ModuleType) -> None:
        raise RuntimeError("cannot configure")

    finder = importhook.install({f"{p}_c": fail})
    try:
        with pytest.raises(RuntimeError, match="cannot configure"):
            importlib.import_module(f"{p}_c")
    finally:
        importhook.uninstall(finder)


def test_callback_importing_a_watched_module(packages: tuple[Path, str]) -> None:
    root, p = packages
    first, second = f"{p}_first", f"{p}_second"
    make_package(root, first, "DONE = True\n")
    make_package(root, second, "DONE = True\n")
    order: list[str] = []

    def on_first(name: str, module: ModuleType) -> None:
        order.append(name)
        importlib.import_module(second)
        order.append("after import in callback")

    def on_second(name: str, module: ModuleType) -> None:
        order.append(name)

    finder = importhook.install({first: on_first, second: on_second})
    try:
        importlib.import_module(first)
    finally:
        importhook.uninstall(finder)
    assert order == [first, "after import in callback", second]


# ------------------------------------------------------------------ fake frameworks

FAKE_TENSORFLOW = """
    CALLS = []
    COMPLETE = False
    __version__ = "2.99.0-fake"

    class _NS:
        pass

    random = _NS()
    random.set_seed = lambda seed: CALLS.append(["tf.random.set_seed", seed])
    config = _NS()
    config.experimental = _NS()
    config.experimental.enable_op_determinism = lambda: CALLS.append(["enable_op_determinism"])
    _tf32 = [True]

    def _enable_tf32(enabled):
        _tf32[0] = enabled
        CALLS.append(["enable_tensor_float_32_execution", enabled])

    config.experimental.enable_tensor_float_32_execution = _enable_tf32
    config.experimental.tensor_float_32_execution_enabled = lambda: _tf32[0]

    import keras  # as TF 2.21 does: keras is imported while tensorflow initialises

    COMPLETE = True
"""

FAKE_KERAS = """
    import os, sys
    __version__ = "3.99.0-fake"
    BACKEND = os.environ.get("KERAS_BACKEND", "tensorflow")
    if BACKEND == "tensorflow":
        import tensorflow

    class backend:
        @staticmethod
        def backend():
            return BACKEND

    class utils:
        @staticmethod
        def set_random_seed(seed):
            import tensorflow  # the real one imports tensorflow whenever it is installed
            assert tensorflow.COMPLETE, "keras seeded while tensorflow was half imported"
            tensorflow.CALLS.append(["keras.utils.set_random_seed", seed])
"""

FAKE_KERAS_INTERNALS = {
    "src/__init__.py": "",
    "src/utils/__init__.py": "",
    "src/utils/rng_utils.py": "GLOBAL_RANDOM_SEED = 'global_random_seed'\n",
    "src/backend/__init__.py": "",
    "src/backend/common/__init__.py": "",
    "src/backend/common/global_state.py": (
        "STATE = {}\ndef set_global_attribute(name, value):\n    STATE[name] = value\n"
    ),
    "src/random/__init__.py": "",
    "src/random/seed_generator.py": "GLOBAL_SEED_GENERATOR = 'global_seed_generator'\n",
}

FAKE_TORCH_BROKEN = """
    __version__ = "0.0-fake"
    def manual_seed(seed):
        raise RuntimeError("no generator in this build")
"""


@pytest.fixture(scope="module")
def fakes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fakes")
    for name, source in (
        ("tensorflow", FAKE_TENSORFLOW),
        ("keras", FAKE_KERAS),
        ("torch", FAKE_TORCH_BROKEN),
    ):
        (root / name).mkdir()
        (root / name / "__init__.py").write_text(textwrap.dedent(source))
    for rel, source in FAKE_KERAS_INTERNALS.items():
        (root / "keras" / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / "keras" / rel).write_text(source)
    return root


REPORT = textwrap.dedent(
    """
    import json, sys
    from reprobuild_entrypoint import frameworks
    tf = sys.modules.get("tensorflow")
    print(json.dumps({"calls": tf.CALLS if tf else None, "record": frameworks.RECORD,
                      "tensorflow_loaded": tf is not None}))
"""
)


def report(result: subprocess.CompletedProcess[str]) -> dict[str, object]:
    assert result.returncode == 0, result.stderr
    data: dict[str, object] = json.loads(result.stdout.splitlines()[-1])
    return data


@pytest.mark.parametrize("first", ["tensorflow", "keras"])
def test_tensorflow_and_keras_strict(site_dir: Path, fakes: Path, first: str) -> None:
    result = launch(
        site_dir,
        f"import {first}\n" + REPORT,
        image_env_vars(0, REPRO_SEED="4", RANK="1"),
        (fakes,),
    )
    data = report(result)
    calls = data["calls"]
    assert isinstance(calls, list)
    assert ["tf.random.set_seed", 5] in calls  # the rank seed
    assert ["enable_op_determinism"] in calls
    assert ["enable_tensor_float_32_execution", False] in calls
    assert ["keras.utils.set_random_seed", 5] in calls  # after tensorflow completed (asserted)
    record = data["record"]
    assert isinstance(record, dict)
    assert record["tensorflow"]["op_determinism"] is True
    assert record["tensorflow"]["tensor_float_32"] is False
    assert record["keras"]["method"] == "keras.utils.set_random_seed"


def test_tensorflow_warn_mode_leaves_op_determinism_off(site_dir: Path, fakes: Path) -> None:
    env = image_env_vars(0, REPRO_DETERMINISM="warn", REPRO_QUIET="0")
    result = launch(site_dir, "import tensorflow\n" + REPORT, env, (fakes,))
    calls = report(result)["calls"]
    assert isinstance(calls, list)
    assert ["enable_op_determinism"] not in calls
    assert ["enable_tensor_float_32_execution", False] in calls
    assert "tensorflow has no warn-only determinism" in result.stderr


def test_keras_on_torch_backend_never_imports_tensorflow(site_dir: Path, fakes: Path) -> None:
    source = """
        import json, random, sys
        import keras
        from keras.src.backend.common import global_state
        print(json.dumps({"tf": "tensorflow" in sys.modules, "state": global_state.STATE,
                          "random": random.random()}))
    """
    result = launch(
        site_dir, source, image_env_vars(0, REPRO_SEED="6", KERAS_BACKEND="torch"), (fakes,)
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["tf"] is False
    assert data["state"] == {"global_random_seed": 6, "global_seed_generator": None}
    assert data["random"] == first_random(6)  # re-seeded, as keras.utils.set_random_seed does


def test_strict_failure_to_configure_fails_the_import(site_dir: Path, fakes: Path) -> None:
    result = launch(site_dir, "import torch\nprint('after')\n", image_env_vars(0), (fakes,))
    assert result.returncode == 1 and "after" not in result.stdout
    assert (
        "DeterminismError: reprobuild: could not configure torch for determinism: " in result.stderr
    )
    assert (
        "RuntimeError: no generator in this build (REPRO_DETERMINISM=warn runs without it)"
        in result.stderr
    )


def test_warn_failure_to_configure_is_a_warning(site_dir: Path, fakes: Path) -> None:
    env = image_env_vars(0, REPRO_DETERMINISM="warn", REPRO_QUIET="0")
    result = launch(site_dir, "import torch\nprint('after')\n", env, (fakes,))
    assert result.returncode == 0 and result.stdout == "after\n"
    assert result.stderr.splitlines() == [
        "reprobuild: could not configure torch for determinism: RuntimeError: no generator in "
        "this build; going on without it (REPRO_DETERMINISM=warn)"
    ]


def test_framework_record_written_at_exit_by_the_main_process_only(
    venv_python: Path, fakes: Path, tmp_path: Path
) -> None:
    source = """
        import multiprocessing, os, sys, tensorflow
        def work(_):
            import tensorflow
            frameworks = sys.modules.get("reprobuild_entrypoint.frameworks")
            return os.getpid(), bool(frameworks and frameworks.RECORD)
        if __name__ == "__main__":
            ctx = multiprocessing.get_context("spawn")  # fresh interpreters: start-up runs in them
            with ctx.Pool(2) as pool:
                results = pool.map(work, range(4))
            assert all(configured for _, configured in results), results
            assert os.getpid() not in {pid for pid, _ in results}
    """
    runs = tmp_path / "runs"
    script = tmp_path / "pool.py"
    script.write_text(textwrap.dedent(source))
    env = image_env_vars(0, REPRO_RUN_DIR=str(runs), REPRO_RUN_ID="r1", PYTHONPATH=str(fakes))
    result = subprocess.run(
        [venv_python, str(script)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    files = list(runs.glob("run-r1-frameworks-*.json"))
    assert len(files) == 1, files
    record = json.loads(files[0].read_text())
    assert record["schema_version"] == 1 and record["kind"] == "reprobuild.frameworks"
    assert record["run_id"] == "r1" and record["startup"]["seed"] == 0
    assert set(record["framework_settings"]) == {"tensorflow", "keras"}
    assert record["framework_settings"]["tensorflow"]["version"] == "2.99.0-fake"
    assert files[0].name.endswith(f"-{record['pid']}.json")


def test_no_framework_record_without_a_framework(site_dir: Path, tmp_path: Path) -> None:
    env = image_env_vars(0, REPRO_RUN_DIR=str(tmp_path), REPRO_RUN_ID="r2")
    assert launch(site_dir, "import random\n", env).returncode == 0
    assert list(tmp_path.iterdir()) == []
