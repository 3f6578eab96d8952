"""Lockfiles from public projects, read for the image's platform (linux x86_64, CPython 3.11).

Each lock in ``tests/data/lockfiles/wild/`` is copied byte for byte from the project's sdist
on PyPI (the README there names the sdist, its sha256 and the licence); ``export-*.txt`` beside
it is what the format's own tool exported from that lock. A reading either equals the export
package by package (markers evaluated for the image) or is refused in one line that names the
file, the line and the reason.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from helpers import exported_pins, run_cli
from reprobuild.bases.catalog import load_catalog
from reprobuild.errors import LockfileError
from reprobuild.locks.lockfile import Selection, load_lock
from reprobuild.project.config import load_config

WILD = Path(__file__).resolve().parent.parent / "data" / "lockfiles" / "wild"


@pytest.mark.parametrize(
    ("lock", "selection", "export"),
    [
        # uv.lock (uv 0.13.9 export); the transformers extra takes torch 2.9.0 from PyPI
        ("outlines-1.3.3/uv.lock", Selection(), "export-main.txt"),
        ("outlines-1.3.3/uv.lock", Selection(extras=("transformers",)),
         "export-extra-transformers.txt"),
        ("outlines-1.3.3/uv.lock", Selection(default_groups=True), "export-default-groups.txt"),
        # uv.lock with conflicting extras (uv 0.13.9 export): torch 2.9.1 locked four times,
        # told apart by uv's conflict markers, which hold against the set of extras chosen
        ("nanochat-92d63d4/uv.lock", Selection(extras=("cpu",)), "export-extra-cpu.txt"),
        ("nanochat-92d63d4/uv.lock", Selection(extras=("gpu",)), "export-extra-gpu.txt"),
        ("nanochat-92d63d4/uv.lock", Selection(), "export-main.txt"),
        # poetry.lock, lock-version 2.1 (Poetry 2.5.1 + poetry-plugin-export 1.10.1)
        ("robyn-0.69.0/poetry.lock", Selection(), "export-main.txt"),
        ("robyn-0.69.0/poetry.lock", Selection(extras=("templating",)),
         "export-extra-templating.txt"),
        # poetry.lock, lock-version 1.1 ([metadata.files]) as Poetry 1.2 wrote it, with groups
        # (Poetry 1.2.2 + poetry-plugin-export 1.2.0, the Poetry that wrote it)
        ("robyn-0.44.0/poetry.lock", Selection(), "export-main.txt"),
        ("robyn-0.44.0/poetry.lock", Selection(extras=("templating",)),
         "export-extra-templating.txt"),
        ("robyn-0.44.0/poetry.lock", Selection(groups=("test",)), "export-group-test.txt"),
        ("robyn-0.44.0/poetry.lock", Selection(groups=("dev",)), "export-group-dev.txt"),
        ("robyn-0.44.0/poetry.lock", Selection(default_groups=True), "export-main.txt"),
    ],
)  # fmt: skip
def test_wild_lock_matches_the_tools_export(lock: str, selection: Selection, export: str) -> None:
    path = WILD / lock
    ours = {r.name: r.version for r in load_lock(path, selection).requirements}
    theirs = exported_pins(path.parent / export)
    assert ours == theirs
    assert len(ours) > 10


def test_nanochat_extras_choose_one_torch_each() -> None:
    """nanochat's cpu extra takes torch 2.9.1+cpu from the PyTorch CPU index and no CUDA
    wheel; its gpu extra 2.9.1+cu128 from the cu128 index; no extra, PyPI's 2.9.1 with its
    nvidia-* wheels. Evaluating each conflict marker one extra value at a time (as pip does a
    package's extras) let `extra != 'extra-8-nanochat-cpu'` hold for the value `cpu`, and
    both PyPI's torch and the CPU index's applied."""
    path = WILD / "nanochat-92d63d4" / "uv.lock"
    cpu = load_lock(path, Selection(extras=("cpu",)))
    gpu = load_lock(path, Selection(extras=("gpu",)))
    plain = load_lock(path)
    pins = {
        name: {r.name: r.version for r in lock.requirements}
        for name, lock in (("cpu", cpu), ("gpu", gpu), ("plain", plain))
    }
    assert pins["cpu"]["torch"] == "2.9.1+cpu"
    assert not any(n.startswith("nvidia-") for n in pins["cpu"])
    assert cpu.options.extra_index_urls == ("https://download.pytorch.org/whl/cpu",)
    assert pins["gpu"]["torch"] == "2.9.1+cu128"
    assert gpu.options.extra_index_urls == ("https://download.pytorch.org/whl/cu128",)
    assert pins["plain"]["torch"] == "2.9.1" and "nvidia-cudnn-cu12" in pins["plain"]
    assert plain.options.extra_index_urls == ()


def test_robyn_main_dependencies_come_from_project_not_tool_poetry() -> None:
    """robyn lists maturin in [tool.poetry.dependencies] but not in [project].dependencies:
    Poetry 2 ignores it (its export has no maturin, the lock holds none); reading it as a
    dependency refused a lock Poetry accepts."""
    assert "maturin" in (WILD / "robyn-0.69.0" / "pyproject.toml").read_text()
    lock = load_lock(WILD / "robyn-0.69.0" / "poetry.lock")
    assert "maturin" not in {r.name for r in lock.requirements}


def test_robyn_044_reads_as_poetry_1_does() -> None:
    """robyn 0.44.0's lock-version 1.1 file was written by Poetry 1.2, whose content-hash
    covers [tool.poetry] only: Poetry 1.x does not read [project], so maturin (in
    [tool.poetry.dependencies], not in [project].dependencies) is a main dependency, and jinja2
    (optional, for the templating extra) is locked `optional = false` because commitizen in
    the dev group needs it, so Poetry's export takes it with main. Reading [project] and the
    pyproject's optional flag, as for a Poetry 2 lock, left both out."""
    folder = WILD / "robyn-0.44.0"
    text = (folder / "pyproject.toml").read_text()
    assert 'maturin = "0.14.12"' in text and "'jinja2 == 3.0.1'" not in text
    assert 'jinja2 = { version = "3.0.1", optional = true }' in text
    assert "[metadata.files]" in (folder / "poetry.lock").read_text().splitlines()
    ours = {r.name: r.version for r in load_lock(folder / "poetry.lock").requirements}
    assert ours["maturin"] == "0.14.12" and ours["jinja2"] == "3.0.1"
    assert ours == exported_pins(folder / "export-main.txt")


def test_qcs_sdk_040_fresh_but_locks_no_files() -> None:
    """qcs-sdk-python 0.4.0: a lock-version 1.1 file Poetry 1.1.15 exports without a warning
    (not stale, unlike 0.1.0's), with no main dependencies (its export is empty, and so is our
    reading); its dev group is refused in one line, as Poetry 1.1 locked no files for attrs
    and nine others (`attrs = []` in [metadata.files]): nothing to check a wheel against."""
    path = WILD / "qcs-sdk-python-0.4.0" / "poetry.lock"
    assert load_lock(path).requirements == ()
    assert exported_pins(path.parent / "export-main.txt") == {}
    with pytest.raises(LockfileError) as info:
        load_lock(path, Selection(groups=("dev",)))
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{path}:249: package attrs 22.1.0 has no wheel"), message
    assert "(no files at all locked)" in message
    assert "attrs==22.1.0" in (path.parent / "export-group-dev.txt").read_text()
    assert "attrs = []" in path.read_text().splitlines()


def test_robyn_group_matches_poetry_export() -> None:
    """robyn's test group is declared twice (pytest-codspeed ==1.2.2 in [dependency-groups],
    3.0.0 in [tool.poetry.group.test]): walking the graph from both finds two versions, while
    Poetry's export of a lock-version 2.1 file takes the groups and markers recorded on each
    package (3.0.0 only), as reprobuild now does."""
    text = (WILD / "robyn-0.69.0" / "pyproject.toml").read_text()
    assert '"pytest-codspeed==1.2.2"' in text and 'pytest-codspeed = "3.0.0"' in text
    path = WILD / "robyn-0.69.0" / "poetry.lock"
    ours = {r.name: r.version for r in load_lock(path, Selection(groups=("test",))).requirements}
    assert ours == exported_pins(path.parent / "export-group-test.txt")


@pytest.mark.parametrize(
    ("lock", "export", "line", "reason"),
    [
        # locked by an older PDM without inherit_metadata; PDM 2.26.1 itself refuses to
        # export it (export-refused.txt).
        ("polyfactory-2.12.0/pdm.lock", "export-refused.txt", 8,
         r"was locked without the inherit_metadata strategy"),
        # poetry.lock in the 1.1 layout ([metadata.files]): its content-hash is not the
        # pyproject.toml's (the lock holds black, click... that pyproject no longer asks for);
        # Poetry 1.1.15 itself says so (export-warning.txt) but exports anyway.
        ("qcs-sdk-python-0.1.0/poetry.lock", "export-warning.txt", 104,
         r"is stale: its content-hash 'e08cfb07ab22776bd\.\.\.' is not the hash"),
        # a plain ranged requirements.txt, as gradio_client's build reads it
        ("gradio-client-2.7.2/requirements.txt", "requirements.txt", 1,
         r"'fsspec' has no version: every requirement must be pinned"),
    ],
)  # fmt: skip
def test_wild_lock_refused_in_one_line(lock: str, export: str, line: int, reason: str) -> None:
    path = WILD / lock
    with pytest.raises(LockfileError) as info:
        load_lock(path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{path}:{line}: "), message
    assert re.search(reason, message), message
    evidence = (path.parent / export).read_text()
    if lock.startswith("polyfactory"):
        assert "inherit_metadata" in evidence
    elif lock.startswith("qcs"):
        assert "not up to date with the latest changes in pyproject.toml" in evidence
        assert "[metadata.files]" in path.read_text().splitlines()


def test_pyannote_julius_is_built_from_its_sdist() -> None:
    """julius 0.2.7 has no wheel on PyPI: pyannote-audio's uv.lock locks its sdist (url and
    sha256), which becomes the one record built in the image; every other pin is a wheel."""
    path = WILD / "pyannote-audio-4.0.7" / "uv.lock"
    lock = load_lock(path)
    assert [(r.name, r.version) for r in lock.sources] == [("julius", "0.2.7")]
    (julius,) = lock.sources
    assert julius.source is not None and julius.source.filename == "julius-0.2.7.tar.gz"
    assert julius.hashes == (julius.source.sha256,)
    assert julius.source.sha256 in path.read_text()
    ours = {r.name: r.version for r in lock.requirements}
    assert ours == exported_pins(path.parent / "export-main.txt")


@pytest.mark.parametrize(
    ("folder", "lock", "refused"),
    [
        ("outlines-1.3.3", "uv.lock", None),
        ("robyn-0.69.0", "poetry.lock", None),
        ("robyn-0.44.0", "poetry.lock", None),
        # julius 0.2.7: built from its sdist, whose backend init asks in a container from the
        # base (--base: the catalog's is not reachable from CI), hence the engine
        pytest.param(
            "pyannote-audio-4.0.7",
            "uv.lock",
            None,
            marks=[pytest.mark.engine, pytest.mark.registry],
        ),
        # black itself is in [packages] as an editable path '.': the project, copied by
        # `include` as every lock's own project is (`pipenv requirements` exports `-e .`)
        ("black-20.8b1", "Pipfile.lock", None),
        ("polyfactory-2.12.0", "pdm.lock", r"pdm\.lock:8: was locked without"),
        ("qcs-sdk-python-0.1.0", "poetry.lock", r"poetry\.lock:104: is stale"),
    ],
)
def test_cli_init_and_render_on_a_copy(
    tmp_path: Path, request: pytest.FixtureRequest, folder: str, lock: str, refused: str | None
) -> None:
    """`reprobuild init` then `render`, as a user runs them: the rendered requirements.lock
    pins what the tool exports, or init refuses in one line and writes nothing. gradio_client's
    ranged requirements.txt, which init resolves against the index, has its own test below."""
    project = tmp_path / folder
    shutil.copytree(WILD / folder, project)
    before = sorted(p.name for p in project.iterdir())
    engine = request.node.get_closest_marker("engine") is not None
    base = ("--base", request.getfixturevalue("base_ref")) if engine else ()
    proc = run_cli("init", str(project), "--command", "python train.py", *base)
    if refused is not None:
        assert proc.returncode == 1 and proc.stdout == ""
        errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
        assert len(errors) == 1 and re.search(refused, errors[0]), proc.stderr
        assert sorted(p.name for p in project.iterdir()) == before
        return
    assert proc.returncode == 0, proc.stderr
    assert load_config(project).lock == project / lock
    rendered = run_cli("render", str(project), "-o", str(tmp_path / "ctx"))
    assert rendered.returncode == 0, rendered.stderr
    text = (tmp_path / "ctx" / "requirements.lock").read_text()
    pins = dict(re.findall(r"^([A-Za-z0-9._-]+)==(\S+) --hash=sha256:", text, re.MULTILINE))
    # a package locked as an sdist only is named in a comment: the image builds its wheel
    built = dict(re.findall(r"^# ([A-Za-z0-9._-]+)==(\S+): built from ", text, re.MULTILINE))
    assert {**pins, **built} == exported_pins(project / "export-main.txt")


@pytest.mark.parametrize(
    ("extra", "export", "kind"),
    [
        ((), "export-main.txt", "gpu"),  # PyPI's torch 2.9.1 with its nvidia-* wheels
        (("--extra", "gpu"), "export-extra-gpu.txt", "gpu"),  # 2.9.1+cu128, the cu128 index
        (("--extra", "cpu"), "export-extra-cpu.txt", "cpu"),  # 2.9.1+cpu, no CUDA wheel
    ],
)
def test_nanochat_init_then_render_with_no_flag(
    tmp_path: Path, extra: tuple[str, ...], export: str, kind: str
) -> None:
    """The front door as a newcomer walks through it: `init` (with or without an extra),
    then `render DIR` with no flag. A lock that carries CUDA as wheels gets the plain Python
    base as its GPU image's base (the wheels are its CUDA), and render builds that image with
    no --gpu; before, init wanted an NGC base for CPython 3.11 and refused."""
    project = tmp_path / "nanochat"
    shutil.copytree(WILD / "nanochat-92d63d4", project)
    proc = run_cli("init", str(project), "--command", "python train.py", *extra)
    assert proc.returncode == 0, proc.stderr
    config = load_config(project)
    python = config.select.python
    assert python is not None and f"uv.lock read for CPython {python} (the newest" in proc.stderr
    base = f"python-{python}-slim-bookworm"
    if kind == "gpu":
        assert config.gpu_only and config.base_cpu is None
        assert config.base_gpu == base
        assert "carries CUDA as wheels" in proc.stderr
    else:
        assert config.base_cpu == base and not config.gpu_only
    rendered = run_cli("render", str(project), "-o", str(tmp_path / "ctx"))
    assert rendered.returncode == 0, rendered.stderr
    text = (tmp_path / "ctx" / "requirements.lock").read_text()
    pins = dict(re.findall(r"^([A-Za-z0-9._-]+)==(\S+) --hash=sha256:", text, re.MULTILINE))
    assert pins == exported_pins(project / export, python)
    assert f"REPROBUILD_VARIANT={kind}" in (tmp_path / "ctx" / "Dockerfile").read_text()


@pytest.mark.parametrize("lock", sorted(str(p.relative_to(WILD)) for p in WILD.glob("*/*.lock")))
def test_pruning_foreign_wheels_keeps_lines_and_toml(lock: str) -> None:
    """Blanking other platforms' wheel lines (what the readers do first) on real locks:
    line numbers and TOML validity must not change."""
    import tomllib

    text = (WILD / lock).read_text()
    pruned = Selection().prune_foreign_wheels(text)
    assert pruned.count("\n") == text.count("\n")
    if lock.endswith("uv.lock"):  # wheels for macOS, Windows, other Pythons are there
        assert len(pruned) < len(text)
    if not lock.endswith("Pipfile.lock"):
        tomllib.loads(pruned)


def test_init_resolves_a_ranged_requirements_file_from_the_wild(tmp_path: Path) -> None:
    """gradio_client's plain ranged requirements.txt (no pins, no hashes), as a research repo
    has it: `reprobuild init` resolves it with the pinned uv against this machine's index into
    a hashed requirements.lock, every pin inside the file's ranges, leaving the file as it was;
    `render` then takes that lock. (Resolved now, so the versions are whatever the index has:
    the test checks the ranges and the hashes, not fixed versions.)"""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    project = tmp_path / "gradio-client"
    shutil.copytree(WILD / "gradio-client-2.7.2", project)
    source = (project / "requirements.txt").read_bytes()
    proc = run_cli("init", str(project), "--command", "python train.py")
    assert proc.returncode == 0, proc.stderr
    assert "resolved requirements.txt with uv pip compile into requirements.lock" in proc.stderr
    assert (project / "requirements.txt").read_bytes() == source
    assert load_config(project).lock == project / "requirements.lock"
    lock = load_lock(project / "requirements.lock")
    pins = {r.name: r for r in lock.requirements}  # names are canonical (PEP 503)
    wanted = [Requirement(line) for line in source.decode().split("\n") if line.strip()]
    for requirement in wanted:
        pinned = pins[canonicalize_name(requirement.name)]
        assert requirement.specifier.contains(pinned.version, prereleases=True), (
            requirement,
            pinned.version,
        )
    assert all(r.hashes for r in lock.requirements)
    rendered = run_cli("render", str(project), "-o", str(tmp_path / "ctx"))
    assert rendered.returncode == 0, rendered.stderr
    text = (tmp_path / "ctx" / "requirements.lock").read_text()
    assert set(re.findall(r"^([A-Za-z0-9._-]+)==", text, re.MULTILINE)) >= {
        "fsspec",
        "httpx",
    }


def test_microast_torch_has_wheels_only_for_other_pythons() -> None:
    """MicroAST's pdm.lock pins torch 2.1.2, whose wheels are for CPython 3.8 to 3.11: read
    for 3.12 it is refused in one line that says so. The wheels for other Pythons are pruned
    from the text before parsing, which made the message claim 'no files at all locked'."""
    path = WILD / "microast-9898cce" / "pdm.lock"
    with pytest.raises(LockfileError) as info:
        load_lock(path, Selection(python="3.12"))
    message = str(info.value)
    assert "\n" not in message
    assert message == (
        f"{path}:474: package torch 2.1.2 has no wheel for CPython 3.12 on linux x86_64 (its "
        "wheels are for other platforms or Pythons) and no hashed sdist to build one from; "
        "nor do package torchvision 0.16.2 (line 513), package triton 2.1.0 (line 538)"
    )  # every package that lacks one, not only the first
    assert 'name = "torch"' in path.read_text().splitlines()[473]
    pins = {r.name: r.version for r in load_lock(path, Selection(python="3.11")).requirements}
    assert pins["torch"] == "2.1.2"


def test_oyez_pylock_leaves_out_the_project_itself(tmp_path: Path) -> None:
    """`uv export --format pylock.toml` writes the project as `directory = { path = ".",
    editable = true }`: like uv.lock's root it is not installed from the lock (the image's
    `include` copies its source), while every other package is read."""
    path = WILD / "oyez-sa-asr-5549f45" / "pylock.toml"
    text = path.read_text()
    assert 'name = "oyez-sa-asr"\ndirectory = { path = ".", editable = true }' in text
    requirements = load_lock(path).requirements
    assert "oyez-sa-asr" not in {r.name for r in requirements}
    assert len(requirements) == text.count("[[packages]]") - 1  # each entry but the project's
    # a directory other than the lock's own folder is still refused, at its line
    moved = tmp_path / "pylock.toml"
    moved.write_text(text.replace('directory = { path = "."', 'directory = { path = "../x"'))
    with pytest.raises(LockfileError) as info:
        load_lock(moved)
    line = text.splitlines().index('name = "oyez-sa-asr"')
    assert str(info.value) == (
        f"{moved}:{line}: package oyez-sa-asr comes from a directory: only wheels (with "
        "hashes) are accepted"
    )


@pytest.mark.parametrize(
    ("folder", "lock"),
    [
        ("microast-9898cce", "pdm.lock"),
        ("sc-gnn-12a882e", "poetry.lock"),
        ("rl-replications-19d890d", "uv.lock"),
        ("oyez-sa-asr-5549f45", "pylock.toml"),
    ],
)
def test_front_door_with_no_flag(tmp_path: Path, folder: str, lock: str) -> None:
    """ML projects' own locks from GitHub (issue 51's survey): `init DIR` and `render DIR`
    with no flag at all, and the image pins every package the lock's reading gives for the
    CPython init chose."""
    project = tmp_path / folder
    shutil.copytree(WILD / folder, project)
    import tomllib

    if (
        not tomllib.loads((project / "pyproject.toml").read_text())
        .get("project", {})
        .get("scripts")
    ):
        (project / "train.py").write_text("print('train')\n")  # else init runs the script
    proc = run_cli("init", str(project))
    assert proc.returncode == 0, proc.stderr
    config = load_config(project)
    assert config.lock == project / lock
    rendered = run_cli("render", str(project), "-o", str(tmp_path / "ctx"))
    assert rendered.returncode == 0, rendered.stderr
    text = (tmp_path / "ctx" / "requirements.lock").read_text()
    pinned = set(re.findall(r"^([A-Za-z0-9._-]+)==", text, re.MULTILINE))  # markers kept
    python = config.select.python  # a native lock's; else the CPython of the base init chose
    if python is None:
        base = load_catalog().entries[config.base_cpu or config.base_gpu or ""]
        python = ".".join((base.python or "").split(".")[:2])
    assert pinned == {
        r.name for r in load_lock(project / lock, Selection(python=python)).requirements
    }


def _poetry_install_pins(path: Path) -> dict[str, str]:
    """What `poetry install --dry-run` says it installs (skipped packages left out)."""
    found = re.findall(
        r"^  [•-] (?:Installing|Updating|Downgrading) (\S+) \((?:\S+ -> )?([^)]+)\)$",
        path.read_text(),
        re.MULTILINE,
    )
    return dict(found)


def test_tianshou_virtualenv_locked_twice_reads_as_poetry_install() -> None:
    """tianshou 1.0.0 declares virtualenv twice (`^20.4.3,...` and, for win32, `<20.16.4`),
    locked as 20.16.3 and 20.24.6, both of which satisfy the unmarked constraint. `poetry
    install` (1.7.1, which wrote the lock, and 2.5.1) takes 20.24.6 on linux
    (install-main.txt); Poetry's export refuses the lock (export-refused.txt), as reprobuild
    did ('2 locked package entries satisfy'). The reading is what `poetry install` installs,
    plus pygame: optional in [tool.poetry.dependencies] but locked `optional = false` (the dev
    group needs it), which reprobuild takes as Poetry's export does (see robyn 0.44.0)."""
    folder = WILD / "tianshou-1.0.0"
    lock = folder / "poetry.lock"
    text = lock.read_text()
    assert text.count('name = "virtualenv"') == 2
    assert 'version = "20.16.3"' in text and 'version = "20.24.6"' in text
    assert "virtualenv (<20.16.4)" in (folder / "export-refused.txt").read_text()
    ours = {r.name: r.version for r in load_lock(lock).requirements}
    assert ours["virtualenv"] == "20.24.6"
    installed = _poetry_install_pins(folder / "install-main.txt")
    assert len(installed) == 59 and installed["virtualenv"] == "20.24.6"
    assert ours == {**installed, "pygame": "2.5.2"}


def test_tianshou_init_and_render_with_no_flag(tmp_path: Path) -> None:
    """`reprobuild init` then `render` on a copy of tianshou's folder, no flag: the rendered
    requirements.lock pins virtualenv 20.24.6 and nothing of 20.16.3."""
    project = tmp_path / "tianshou"
    shutil.copytree(WILD / "tianshou-1.0.0", project)
    proc = run_cli("init", str(project), "--command", "python train.py")
    assert proc.returncode == 0, proc.stderr
    assert load_config(project).lock == project / "poetry.lock"
    rendered = run_cli("render", str(project), "-o", str(tmp_path / "ctx"))
    assert rendered.returncode == 0, rendered.stderr
    text = (tmp_path / "ctx" / "requirements.lock").read_text()
    pins = dict(re.findall(r"^([A-Za-z0-9._-]+)==(\S+) --hash=sha256:", text, re.MULTILINE))
    assert pins["virtualenv"] == "20.24.6" and "20.16.3" not in text
    installed = _poetry_install_pins(project / "install-main.txt")
    assert pins == {**installed, "pygame": "2.5.2"}
