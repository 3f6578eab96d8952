"""The import hook against the real frameworks: torch 2.13 and numpy 2.4 (CPU builds).

These tests need torch and numpy installed in the interpreter that runs pytest
(``pip install torch==2.13.0 numpy==2.4.6``); they fail, never skip, when either is missing.
Each program runs in a child interpreter started with the runtime's .pth hook.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path
from typing import Any

import pytest

import reprobuild_entrypoint
from helpers import runtime_tmp
from reprobuild_entrypoint.envplan import image_env

pytestmark = pytest.mark.heavy

RUNTIME_ROOT = str(Path(reprobuild_entrypoint.__file__).resolve().parent.parent)
PY = sys.executable
LAUNCH = (
    "import runpy, site, sys; site.addsitedir(sys.argv[1]); sys.argv = sys.argv[2:]; "
    "runpy.run_path(sys.argv[0], run_name='__main__')"
)
HINT = (
    "reprobuild: max_unpooling2d_forward_out has no deterministic implementation; "
    "run with REPRO_DETERMINISM=warn to allow it with a warning"
)


@pytest.fixture(scope="module", autouse=True)
def _frameworks_installed() -> None:
    missing = [name for name in ("torch", "numpy") if importlib.util.find_spec(name) is None]
    if missing:
        pytest.fail(
            f"{', '.join(missing)} not installed: these tests need them "
            "(pip install torch==2.13.0 numpy==2.4.6)"
        )


@pytest.fixture(scope="module")
def site_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("site")
    (folder / "reprobuild.pth").write_text(
        f"{RUNTIME_ROOT}\nimport reprobuild_entrypoint._startup\n"
    )
    return folder


def container_env(mode: str = "strict", **extra: str) -> dict[str, str]:
    """A CPU image's environment (seed 0), as baked, plus the run's own variables."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.environ.get("HOME", "/root"),
        "REPRO_QUIET": "1",
        "REPROBUILD_IMAGE_SEED": "0",
        "REPROBUILD_IMAGE_DETERMINISM": mode,
        "REPROBUILD_VARIANT": "cpu",
        **image_env(0, mode, "cpu"),
        **runtime_tmp(),
        **extra,
    }


def program(site: Path, source: str) -> list[str]:
    script = site.parent / f"program_{uuid.uuid4().hex}.py"
    script.write_text(textwrap.dedent(source))
    return [PY, "-c", LAUNCH, str(site), str(script)]


def run(site: Path, source: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        program(site, source), env=env, capture_output=True, text=True, timeout=300, check=False
    )


def output(result: subprocess.CompletedProcess[str]) -> Any:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------------------- numpy

NUMPY = """
    import json, sys
    before = "numpy" in sys.modules
    import numpy as np
    print(json.dumps({
        "imported_before": before,
        "rand": np.random.rand(),
        "expected": np.random.RandomState(SEED).rand(),
        "rng": [np.random.default_rng().random(), np.random.default_rng().random()],
        "explicit": np.random.default_rng(1).random(),
        "explicit_expected": np.random.Generator(np.random.PCG64(1)).random(),
    }))
"""


def test_numpy_is_seeded_when_the_program_imports_it(site_dir: Path) -> None:
    data = output(run(site_dir, NUMPY.replace("SEED", "3"), container_env(REPRO_SEED="3")))
    assert data["imported_before"] is False  # start-up itself never imported numpy
    assert data["rand"] == data["expected"]
    assert data["explicit"] == data["explicit_expected"]  # explicit seeds untouched
    assert data["rng"][0] != data["rng"][1]  # unseeded generators: distinct streams...
    again = output(run(site_dir, NUMPY.replace("SEED", "3"), container_env(REPRO_SEED="3")))
    assert again["rng"] == data["rng"]  # ...and reproducible


def test_numpy_under_off_is_left_alone(site_dir: Path) -> None:
    env = container_env(REPRO_DETERMINISM="off")
    runs = [output(run(site_dir, NUMPY.replace("SEED", "0"), env)) for _ in range(2)]
    assert runs[0]["rand"] != runs[1]["rand"] and runs[0]["rng"] != runs[1]["rng"]


# ------------------------------------------------------------------------------- torch

TORCH = """
    import json, sys
    import torch
    b = torch.backends
    from reprobuild_entrypoint import frameworks
    print(json.dumps({
        "numpy_pulled_in_by_torch": "numpy" in sys.modules,
        "deterministic": torch.are_deterministic_algorithms_enabled(),
        "warn_only": torch.is_deterministic_algorithms_warn_only_enabled(),
        "cudnn_deterministic": b.cudnn.deterministic,
        "cudnn_benchmark": b.cudnn.benchmark,
        "legacy_matmul_tf32": b.cuda.matmul.allow_tf32,
        "legacy_cudnn_tf32": b.cudnn.allow_tf32,  # must stay readable (no mixed-API error)
        "precision": [b.cuda.matmul.fp32_precision, b.cudnn.conv.fp32_precision,
                      b.cudnn.rnn.fp32_precision],
        "threads": torch.get_num_threads(),
        "rand": torch.rand(3).tolist(),
        "expected": torch.rand(3, generator=torch.Generator().manual_seed(SEED)).tolist(),
        "record": frameworks.RECORD["torch"],
        "excepthook": sys.excepthook.__module__,
    }))
"""


def test_torch_strict(site_dir: Path) -> None:
    data = output(run(site_dir, TORCH.replace("SEED", "0"), container_env()))
    assert data["deterministic"] is True and data["warn_only"] is False
    assert data["cudnn_deterministic"] is True and data["cudnn_benchmark"] is False
    assert data["legacy_matmul_tf32"] is False and data["legacy_cudnn_tf32"] is False
    assert "tf32" not in data["precision"]
    assert data["threads"] == 4
    assert data["rand"] == data["expected"]
    assert data["excepthook"] == "reprobuild_entrypoint.excepthook"
    record = data["record"]
    assert record["version"].startswith("2.13.0") and record["seed"] == 0
    assert record["num_threads_set"] == 4 and record["num_threads_source"] == "default"
    assert record["tf32"]["cudnn.allow_tf32"] is False


INDUCTOR = """
import json, sys, time
start = time.perf_counter()
import torch
loaded = "torch._inductor" in sys.modules
import torch._inductor.config as inductor_config
print(json.dumps({
    "inductor_loaded_by_import_torch": loaded,
    "deterministic": torch.are_deterministic_algorithms_enabled(),
    "inductor_deterministic": inductor_config.deterministic,
}))
"""


def test_torch_deterministic_without_loading_inductor(site_dir: Path) -> None:
    """use_deterministic_algorithms imports Inductor and Dynamo (doubling `import torch`); the
    hook sets the core flag and leaves Inductor's to TORCHINDUCTOR_DETERMINISTIC, so Inductor
    stays unloaded yet comes up deterministic when the program does load it."""
    data = output(run(site_dir, INDUCTOR, container_env()))
    assert data == {
        "inductor_loaded_by_import_torch": False,
        "deterministic": True,
        "inductor_deterministic": True,
    }


def test_torch_warn_with_rank_and_threads(site_dir: Path) -> None:
    env = container_env(REPRO_DETERMINISM="warn", REPRO_SEED="10", RANK="2", REPRO_THREADS="2")
    data = output(run(site_dir, TORCH.replace("SEED", "12"), env))
    assert data["deterministic"] is True and data["warn_only"] is True
    assert data["threads"] == 2
    assert data["rand"] == data["expected"]  # rank 2 of seed 10: 12
    # under a launcher (RANK set) the hook is there in warn mode too: it names a lost peer
    assert data["excepthook"] == "reprobuild_entrypoint.excepthook"
    alone = container_env(REPRO_DETERMINISM="warn", REPRO_SEED="10", REPRO_THREADS="2")
    data = output(run(site_dir, TORCH.replace("SEED", "10"), alone))
    assert data["excepthook"] != "reprobuild_entrypoint.excepthook"  # otherwise strict only


def test_torch_follows_a_user_set_thread_count(site_dir: Path) -> None:
    data = output(run(site_dir, TORCH.replace("SEED", "0"), container_env(OMP_NUM_THREADS="3")))
    # left alone, torch would cap 3 at the host's physical cores: set explicitly instead
    assert data["threads"] == 3 and data["record"]["num_threads_set"] == 3
    assert data["record"]["num_threads_source"] == "OMP_NUM_THREADS (user-set)"


FIRST_PARALLEL_VML = """
    import hashlib, json, torch
    from reprobuild_entrypoint import frameworks
    x = torch.linspace(-50, 50, 2400, dtype=torch.float64)  # two of ATen's 2,048-value chunks
    first, later = torch.sin(x), torch.sin(x)
    print(json.dumps({
        "first": hashlib.sha256(first.numpy().tobytes()).hexdigest(),
        "later": hashlib.sha256(later.numpy().tobytes()).hexdigest(),
        "vml": frameworks.RECORD["torch"]["onemkl_vml"],
    }))
"""


def test_a_first_parallel_vml_call_gives_the_bits_of_every_later_one(site_dir: Path) -> None:
    """oneMKL's vector math (behind torch.sin, exp, tanh on CPU) sets itself up on its first
    call, and two threads entering at once raced: without the hook's one serial call first,
    a process's first parallel sin gave other bits in one chunk in 6 of 30 fresh processes at
    2 threads on a 2-CPU host (issue 31). Each process here is a fresh one; with two CPUs or
    more, 20 of them would have shown the race about 99 times in 100."""
    env = container_env(REPRO_THREADS="2")
    runs = [output(run(site_dir, FIRST_PARALLEL_VML, env)) for _ in range(20)]
    assert {r["vml"] for r in runs} == {"set up on the main thread before any parallel call"}
    assert all(r["first"] == r["later"] for r in runs), [r["first"][:8] for r in runs]
    assert len({r["first"] for r in runs}) == 1


def test_torch_untouched_under_off(site_dir: Path) -> None:
    env = container_env(REPRO_DETERMINISM="off")
    source = "import json, torch\nprint(json.dumps(torch.are_deterministic_algorithms_enabled()))"
    assert output(run(site_dir, source, env)) is False


BENCHMARK_ON = """
    import json, torch
    cudnn = torch.backends.cudnn
    cudnn.benchmark = True  # the line many training scripts carry
    attribute = cudnn.benchmark
    with cudnn.flags(enabled=True, benchmark=True, deterministic=True):
        inside_flags = cudnn.benchmark
    torch._C._set_cudnn_benchmark(True)
    from reprobuild_entrypoint import frameworks
    entry = frameworks.RECORD.get("torch", {})
    print(json.dumps({
        "attribute": attribute,
        "inside_flags": inside_flags,
        "core": torch._C._get_cudnn_benchmark(),
        "refused": entry.get("cudnn_benchmark_refused"),
        "held": entry.get("cudnn_benchmark_held"),
    }))
"""


def test_a_program_turning_cudnn_benchmark_on_is_held_off(site_dir: Path) -> None:
    """cuDNN's benchmark mode picks algorithms by timing them, per process: on an H200 two runs
    of a script with ``cudnn.benchmark = True`` differed by an ulp under the runtime. Every way
    in is held off in strict and warn, with one line on stderr; ``off`` leaves it alone."""
    for mode in ("strict", "warn"):
        env = {**container_env(REPRO_DETERMINISM=mode), "REPRO_QUIET": ""}
        result = run(site_dir, BENCHMARK_ON, env)
        assert output(result) == {
            "attribute": False,
            "inside_flags": False,
            "core": False,
            "refused": 3,
            "held": "held off",
        }, mode
        lines = [line for line in result.stderr.splitlines() if "cudnn.benchmark" in line]
        assert lines == [
            "reprobuild: cudnn.benchmark = True is held off: cuDNN would pick its algorithms by "
            "timing them, and runs would differ in their bits (REPRO_DETERMINISM=off allows it)"
        ], result.stderr
    off = output(run(site_dir, BENCHMARK_ON, container_env(REPRO_DETERMINISM="off")))
    assert off == {
        "attribute": True, "inside_flags": True, "core": True, "refused": None, "held": None
    }  # fmt: skip


NONDETERMINISTIC_OP = """
    import torch
    x = torch.ones(1, 1, 2, 2)
    indices = torch.zeros(1, 1, 2, 2, dtype=torch.long)
    torch.nn.functional.max_unpool2d(x, indices, 2)
    print("finished")
"""


def test_strict_nondeterministic_op_fails_with_a_hint(site_dir: Path) -> None:
    result = run(site_dir, NONDETERMINISTIC_OP, container_env())
    assert result.returncode == 1  # the status and traceback are torch's own
    assert "finished" not in result.stdout
    lines = result.stderr.strip().splitlines()
    assert lines[0] == "Traceback (most recent call last):"
    assert "RuntimeError: max_unpooling2d_forward_out does not have a deterministic" in lines[-2]
    assert lines[-1] == HINT


def test_warn_nondeterministic_op_runs_with_a_warning(site_dir: Path) -> None:
    result = run(site_dir, NONDETERMINISTIC_OP, container_env(REPRO_DETERMINISM="warn"))
    assert result.returncode == 0 and result.stdout == "finished\n"
    assert "does not have a deterministic implementation" in result.stderr
    assert "reprobuild:" not in result.stderr


# -------------------------------------------------------------------------- DataLoader

LOADER = """
    import hashlib, json, random
    import numpy as np
    import torch
    from torch.utils.data import DataLoader, Dataset

    class Augmented(Dataset):
        def __len__(self):
            return 16

        def __getitem__(self, i):  # NumPy, random and torch augmentation inside the workers
            return torch.tensor([i, np.random.rand(), random.random(), torch.rand(1).item(),
                                 np.random.default_rng().random()], dtype=torch.float64)

    if __name__ == "__main__":
        batches = [b for epoch in range(2)
                   for b in DataLoader(Augmented(), batch_size=4, shuffle=True, num_workers=2)]
        values = torch.cat(batches)
        print(json.dumps({"digest": hashlib.sha256(values.numpy().tobytes()).hexdigest(),
                          "distinct": len(set(values[:, 1].tolist()))}))
"""


def test_dataloader_workers_with_numpy_augmentation_reproduce(site_dir: Path) -> None:
    first = output(run(site_dir, LOADER, container_env()))
    second = output(run(site_dir, LOADER, container_env()))
    assert first == second
    assert first["distinct"] == 32  # the two workers do not repeat each other's draws
    off = [output(run(site_dir, LOADER, container_env(REPRO_DETERMINISM="off"))) for _ in range(2)]
    assert off[0]["digest"] != off[1]["digest"]


def test_records_through_the_entrypoint(site_dir: Path, tmp_path: Path) -> None:
    """The whole path: entrypoint -> run record; program with DataLoader workers -> one
    framework record, written by the main process only."""
    env = {**container_env(REPRO_RUN_DIR=str(tmp_path)), "PYTHONPATH": RUNTIME_ROOT}
    result = subprocess.run(
        [PY, "-m", "reprobuild_entrypoint", *program(site_dir, LOADER)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    (run_file,) = [p for p in tmp_path.glob("run-*.json") if "-frameworks-" not in p.name]
    record = json.loads(run_file.read_text())
    frameworks = list(tmp_path.glob(f"run-{record['run_id']}-frameworks-*.json"))
    assert len(frameworks) == 1, frameworks
    settings = json.loads(frameworks[0].read_text())
    assert set(settings["framework_settings"]) == {"numpy", "torch"}
    torch_entry = settings["framework_settings"]["torch"]
    assert torch_entry["deterministic_algorithms"] is True
    assert torch_entry["deterministic_algorithms_at_exit"] is True
    assert torch_entry["cudnn_version"] is None  # CPU build: asked at exit, answered None
    assert torch_entry["cudnn_benchmark_at_exit"] is False
    assert torch_entry["cudnn_benchmark_refused"] == 0
    assert settings["startup"]["pid"] == settings["pid"] and settings["errors"] == []
