"""``reprobuild init``: a reprobuild.yaml (and, when needed, a resolved requirements.lock) from
what a project already has, checked by loading the result with the real config loader and
lock readers. Resolution runs the pinned uv against this machine's package index."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from helpers import run_cli
from reprobuild.errors import ReprobuildError
from reprobuild.imaging.initservices import init_services
from reprobuild.imaging.plan import read_lock
from reprobuild.locks.lockfile import load_lock
from reprobuild.project.config import LockSelection, load_config
from reprobuild.project.init import InitError, InitOptions, init_project

NATIVE = Path(__file__).resolve().parent.parent / "data" / "lockfiles" / "native"


def _uv_project(tmp_path: Path) -> Path:
    project = tmp_path / "demo"
    shutil.copytree(NATIVE / "uv-extras", project)
    (project / "train.py").write_text("print('train')\n")
    (project / "data").mkdir()
    (project / "data" / "big.bin").write_bytes(b"\0" * 10)
    (project / ".venv").mkdir()
    return project


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (InitOptions(python="3.11\nx"), r"--python '3\.11\\nx' is not a Python version"),
        (InitOptions(extras=("a b",)), r"--extra 'a b' is not a name"),
        (InitOptions(groups=("$(x)",)), r"--group '\$\(x\)' is not a name"),
        (InitOptions(base="img\n#"), r"--base 'img\\n#' is not an image reference"),
        (InitOptions(command=("python", "a\nb")), r"--command word 'a\\nb' holds a control"),
    ],
)
def test_init_refuses_option_values_it_cannot_write(
    tmp_path: Path, options: InitOptions, expected: str
) -> None:
    project = _uv_project(tmp_path)
    with pytest.raises(InitError, match=expected):
        init_project(project, options, init_services())
    assert not (project / "reprobuild.yaml").exists()


def test_init_uses_a_uv_lock_in_place(tmp_path: Path) -> None:
    project = _uv_project(tmp_path)
    result = init_project(project, InitOptions(), init_services())
    assert result.written == [project / "reprobuild.yaml"]
    config = load_config(project)
    assert config.lock == project / "uv.lock"
    assert config.base_cpu == "python-3.11-slim-bookworm"
    assert config.command == ("python", "train.py")
    assert config.include == ("train.py",)  # no data/, no .venv, no lock, no pyproject
    assert {r.name for r in load_lock(config.lock).requirements} == {
        "jinja2",
        "markupsafe",
        "numpy",
    }


def test_init_with_an_extra_writes_the_selection(tmp_path: Path) -> None:
    project = _uv_project(tmp_path)
    result = init_project(project, InitOptions(extras=("symbolic",)), init_services())
    assert result.written == [project / "reprobuild.yaml"]  # the lock is used in place
    assert any("extras symbolic" in n for n in result.notes)
    config = load_config(project)
    assert config.lock == project / "uv.lock"
    assert config.select == LockSelection(python="3.11", extras=("symbolic",))
    lock = read_lock(config, config.lock, None)
    assert {r.name for r in lock.requirements} == {
        "jinja2",
        "markupsafe",
        "numpy",
        "sympy",
        "mpmath",
    }


def test_init_resolves_unhashed_requirements(tmp_path: Path) -> None:
    (tmp_path / "requirements.txt").write_text("numpy>=1.26\njinja2\n")
    (tmp_path / "main.py").write_text("print(1)\n")
    result = init_project(tmp_path, InitOptions(), init_services())
    assert result.written == [tmp_path / "requirements.lock", tmp_path / "reprobuild.yaml"]
    lock = load_lock(tmp_path / "requirements.lock")
    assert {r.name for r in lock.requirements} == {"numpy", "jinja2", "markupsafe"}
    assert load_config(tmp_path).command == ("python", "main.py")


def test_init_never_overwrites(tmp_path: Path) -> None:
    project = _uv_project(tmp_path)
    (project / "reprobuild.yaml").write_text("mine\n")
    with pytest.raises(InitError, match=r"reprobuild\.yaml: already exists; init never"):
        init_project(project, InitOptions(), init_services())
    assert (project / "reprobuild.yaml").read_text() == "mine\n"
    other = tmp_path / "other"
    other.mkdir()
    (other / "requirements.txt").write_text("numpy\n")
    (other / "requirements.lock").write_text("# hand-made\n")
    (other / "train.py").write_text("")
    # the hashed lock wins over the unhashed requirements: used in place, never rewritten
    with pytest.raises(ReprobuildError):
        init_project(other, InitOptions(), init_services())
    assert (other / "requirements.lock").read_text() == "# hand-made\n"
    assert not (other / "reprobuild.yaml").exists()


def test_init_refuses_an_ambiguous_command_and_nothing_is_written(tmp_path: Path) -> None:
    project = _uv_project(tmp_path)
    (project / "main.py").write_text("")
    with pytest.raises(
        InitError,
        match=r"cannot tell which command .*python train\.py, "
        r"python main\.py",
    ):
        init_project(project, InitOptions(), init_services())
    assert sorted(p.name for p in project.iterdir() if p.name.startswith(("reprobuild", "."))) == [
        ".venv"
    ]
    init_project(project, InitOptions(command=("python", "main.py")), init_services())
    assert load_config(project).command == ("python", "main.py")


def test_init_refuses_a_lock_that_fits_no_python(tmp_path: Path) -> None:
    project = _uv_project(tmp_path)
    text = (project / "uv.lock").read_text()
    (project / "uv.lock").write_text(
        text.replace('requires-python = ">=3.11"', 'requires-python = ">=3.12"')
    )
    with pytest.raises(ReprobuildError, match=r"excludes Python 3\.11|no wheel for CPython"):
        init_project(project, InitOptions(), init_services())
    assert not (project / "reprobuild.yaml").exists()


def test_init_without_any_lock(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("")
    with pytest.raises(InitError, match=r"no lock or requirements found"):
        init_project(tmp_path, InitOptions(), init_services())


# --- through the command line ---------------------------------------------------------------


def _cli_project(tmp_path: Path, folder: str, lock: str, old: str, new: str) -> Path:
    project = tmp_path / "p"
    shutil.copytree(NATIVE / folder, project)
    (project / "train.py").write_text("")
    for export in project.glob("export-*.txt"):
        export.unlink()
    target = project / ("pyproject.toml" if lock == "pyproject.toml" else lock)
    text = target.read_text()
    assert old in text
    target.write_text(text.replace(old, new, 1))
    return project


_HASH = "85ece4451f492d0c13c5dd7c13a64681a86afae63a5f347908daf103ce6d2f67"  # jinja2 3.1.6


@pytest.mark.parametrize(
    ("folder", "edited", "old", "new", "expected"),
    [
        (
            "uv-extras",
            "uv.lock",
            _HASH,
            _HASH[:-2] + "zz",
            r"uv\.lock:\d+: package jinja2 3\.1\.6: hash",
        ),
        (
            "uv-extras",
            "uv.lock",
            'requires-python = ">=3.11"',
            'requires-python = ">=3.14"',
            r"uv\.lock:3: requires-python '>=3\.14' excludes Python 3\.13, the image's Python "
            r"\(nor does it fit any older CPython, down to 3\.8\)",
        ),
        (
            "uv-extras",
            "uv.lock",
            "version = 1\n",
            "version = 2\n",
            r"uv\.lock:1: uv\.lock version '2' is not supported",
        ),
        (
            "poetry-2.1",
            "pyproject.toml",
            '"numpy>=2"',
            '"numpy>=2.1"',
            r"poetry\.lock:\d+: is stale: its content-hash",
        ),
        (
            "pipenv",
            "Pipfile.lock",
            '"index": "local"',
            '"index": "internal"',
            r"Pipfile\.lock:\d+: package \S+ names index 'internal'",
        ),
    ],
)
def test_cli_init_bad_lock_one_error_exit_1_nothing_written(
    tmp_path: Path, folder: str, edited: str, old: str, new: str, expected: str
) -> None:

    project = _cli_project(tmp_path, folder, edited, old, new)
    before = sorted(p.name for p in project.iterdir())
    proc = run_cli("init", str(project))
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout == ""
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and re.search(expected, errors[0]), proc.stderr
    assert all(ln.startswith(("error:", "hint:")) for ln in proc.stderr.splitlines())
    assert sorted(p.name for p in project.iterdir()) == before


def test_cli_init_then_render(tmp_path: Path) -> None:

    project = _uv_project(tmp_path)
    proc = run_cli("init", str(project), "--extra", "symbolic")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [f"wrote {project / 'reprobuild.yaml'}"]
    # the newest Python the lock allows (its wheels are cp311 only), and why not a newer one
    assert re.search(
        r"note: uv\.lock read for CPython 3\.11 \(the newest the lock allows; CPython 3\.13: "
        r"package markupsafe 3\.0\.3 has no wheel for CPython 3\.13\), extras symbolic",
        proc.stderr,
    ), proc.stderr
    again = run_cli("init", str(project))
    assert again.returncode == 1
    assert again.stderr.splitlines()[0] == (
        f"error: {project / 'reprobuild.yaml'}: already exists; init never overwrites it"
    )
    rendered = run_cli("render", str(project), "-o", str(tmp_path / "ctx"))
    assert rendered.returncode == 0, rendered.stderr
    text = (tmp_path / "ctx" / "requirements.lock").read_text()
    assert "sympy==1.14.0 --hash=sha256:" in text


# ---------------------------------------------------------------------- naming the lock

GOOD = NATIVE.parent / "good"
WILD = NATIVE.parent / "wild"


def _hashed_lock_text() -> str:
    """A real hashed requirements lock (the example's), to copy under other names."""
    return (
        Path(__file__).resolve().parents[2] / "images" / "digits-torch" / "requirements.lock"
    ).read_text()


def _hashed_lock_body() -> str:
    """The same lock without its header (which names the Python it was resolved for)."""
    return "".join(
        ln for ln in _hashed_lock_text().splitlines(keepends=True) if not ln.startswith("#")
    )


def _bare_project(tmp_path: Path) -> Path:
    project = tmp_path / "proj"
    project.mkdir(parents=True)
    (project / "train.py").write_text("print('train')\n")
    return project


def test_cli_init_lock_names_a_requirements_lock_of_any_name(tmp_path: Path) -> None:
    """`--lock requirements_lock_3_11.txt`: used in place, written as `lock:`, and render
    takes it with no flag (before: 'no lock or requirements found'). The name's Python is the
    header's (3.11): one that says another is refused (tests/unit/test_lock_python.py)."""
    project = _bare_project(tmp_path)
    (project / "requirements_lock_3_11.txt").write_text(_hashed_lock_text())
    (project / "other.txt").write_text("numpy\n")  # unhashed: not a lock, never chosen
    proc = run_cli("init", str(project), "--lock", "requirements_lock_3_11.txt")
    assert proc.returncode == 0, proc.stderr
    config = load_config(project)
    assert config.lock == project / "requirements_lock_3_11.txt"
    rendered = run_cli("render", str(project), "-o", str(tmp_path / "ctx"))
    assert rendered.returncode == 0, rendered.stderr


def test_cli_init_finds_the_one_hashed_txt_and_asks_when_there_are_several(
    tmp_path: Path,
) -> None:
    project = _bare_project(tmp_path)
    (project / "eval.txt").write_text(_hashed_lock_text())
    proc = run_cli("init", str(project))
    assert proc.returncode == 0, proc.stderr
    assert load_config(project).lock == project / "eval.txt"
    other = _bare_project(tmp_path / "two")
    for name in ("eval.txt", "train-lock.txt"):
        (other / name).write_text(_hashed_lock_text())
    before = sorted(p.name for p in other.iterdir())
    refused = run_cli("init", str(other))
    assert refused.returncode == 1 and refused.stdout == ""
    assert refused.stderr.splitlines() == [
        f"error: {other}: several hashed requirements files (eval.txt, train-lock.txt): init "
        "cannot tell which one is the lock",
        f"hint: name it: reprobuild init --lock eval.txt {other}",
    ]
    assert sorted(p.name for p in other.iterdir()) == before


def test_cli_init_lock_reads_a_renamed_native_lock_by_its_content(tmp_path: Path) -> None:
    """nanochat's uv.lock kept as locks/uv-any.lock beside its pyproject.toml's copy: read as a
    uv.lock (its content says so), extras and all, and render takes `lock:` as written."""
    project = _bare_project(tmp_path)
    shutil.copy(WILD / "nanochat-92d63d4" / "pyproject.toml", project / "pyproject.toml")
    (project / "locks").mkdir()
    shutil.copy(WILD / "nanochat-92d63d4" / "uv.lock", project / "locks" / "uv-any.lock")
    shutil.copy(WILD / "nanochat-92d63d4" / "pyproject.toml", project / "locks" / "pyproject.toml")
    proc = run_cli(
        "init", str(project), "--lock", "locks/uv-any.lock", "--extra", "cpu",
        "--command", "python train.py",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    config = load_config(project)
    assert config.lock == project / "locks" / "uv-any.lock"
    assert config.select.extras == ("cpu",)
    rendered = run_cli("render", str(project), "-o", str(tmp_path / "ctx"))
    assert rendered.returncode == 0, rendered.stderr
    assert "torch==2.9.1+cpu --hash=sha256:" in (tmp_path / "ctx" / "requirements.lock").read_text()


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("../outside.txt", r"--lock '\.\./outside\.txt' is not a plain path inside the project"),
        ("/etc/hostname", r"--lock '/etc/hostname' is not a relative path"),
        ("missing.txt", r"--lock 'missing\.txt': .*missing\.txt does not exist or is not a file"),
        ("a;b$(x).txt", r"--lock 'a;b\$\(x\)\.txt' is not a plain path inside the project"),
        ("link.txt", r"--lock 'link\.txt': .*link\.txt is a symlink"),
    ],
)
def test_cli_init_lock_refuses_bad_values(tmp_path: Path, value: str, expected: str) -> None:
    project = _bare_project(tmp_path)
    (tmp_path / "outside.txt").write_text(_hashed_lock_text())
    (project / "link.txt").symlink_to(tmp_path / "outside.txt")
    before = sorted(p.name for p in project.iterdir())
    proc = run_cli("init", str(project), "--lock", value)
    assert proc.returncode != 0 and proc.stdout == ""
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and re.search(expected, errors[0]), proc.stderr
    assert sorted(p.name for p in project.iterdir()) == before


# ------------------------------------------------------------------------ the Python


def test_a_requirements_lock_is_for_the_python_its_header_names(tmp_path: Path) -> None:
    """pip-compile writes the Python it resolved for in its header: init builds on that
    Python's catalog base, says why, and warns once when it is past its end of life."""
    project = _bare_project(tmp_path)
    header = (
        "#\n# This file is autogenerated by pip-compile with Python 3.9\n"
        "# by the following command:\n#\n#    pip-compile --generate-hashes\n#\n"
    )
    (project / "requirements.txt").write_text(header + _hashed_lock_body())
    proc = run_cli("init", str(project))
    assert proc.returncode == 0, proc.stderr
    assert load_config(project).base_cpu == "python-3.9-slim-bookworm"
    assert "note: requirements.txt is for CPython 3.9 (its resolver's header says so)" in (
        proc.stderr
    )
    warnings = [ln for ln in proc.stderr.splitlines() if ln.startswith("warning:")]
    assert warnings == [
        "warning: CPython 3.9 reached its upstream end of life in 2025-10 (PEP 596 (Python 3.9 "
        "release schedule)): the image builds, but that Python gets no more security fixes"
    ]
    rendered = run_cli("render", str(project), "-o", str(tmp_path / "ctx"))
    assert rendered.returncode == 0, rendered.stderr
    assert warnings[0] in rendered.stderr.splitlines()


def test_a_lock_that_does_not_say_is_for_the_default_python(tmp_path: Path) -> None:
    project = _bare_project(tmp_path)
    (project / "requirements.txt").write_text(_hashed_lock_body())
    proc = run_cli("init", str(project))
    assert proc.returncode == 0, proc.stderr
    assert load_config(project).base_cpu == "python-3.11-slim-bookworm"
    assert "does not say which Python it was made for; --python X.Y if not 3.11" in proc.stderr
    assert "warning:" not in proc.stderr


def test_the_catalog_has_a_cpu_base_for_every_python_from_3_8() -> None:
    from reprobuild.bases.catalog import eol_warning, load_catalog, python_eol

    catalog = load_catalog()
    for python in ("3.8", "3.9", "3.10", "3.11", "3.12", "3.13"):
        entry = catalog.entries[f"python-{python}-slim-bookworm"]
        assert entry.kind == "cpu" and entry.python == python and entry.ref.digest
        assert entry.versions["python_eol"].source.startswith("PEP ")
    assert eol_warning("3.13", python_eol(catalog, "3.13"), "2026-11-27") is None
    assert eol_warning("3.10", python_eol(catalog, "3.10"), "2026-09-30") is None
    assert eol_warning("3.10", python_eol(catalog, "3.10"), "2026-10-01") is not None


def test_init_gpu_on_a_lock_without_cuda_wheels_takes_the_ngc_python(tmp_path: Path) -> None:
    """`--gpu` on a lock with no CUDA wheels of its own means an NGC base, whose CPython is
    3.12: the lock is read for that Python, and where it does not fit, one error says what
    to do instead (relock, or name a GPU base with the lock's own Python)."""
    project = _uv_project(tmp_path)  # numpy and markupsafe: cp311 wheels only
    proc = run_cli("init", str(project), "--gpu")
    assert proc.returncode == 1 and proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert lines[0].startswith("error: ") and "has no wheel for CPython 3.12" in lines[0]
    assert lines[1] == (
        "hint: the NGC bases carry CPython 3.12: relock for it, or give a GPU base with CPython "
        f"3.11: reprobuild init --gpu --base REF@sha256:<digest> {project}"
    )
    assert not (project / "reprobuild.yaml").exists()


def _fake_uv(tmp_path: Path) -> Path:
    """A stand-in for the pinned uv: records its argv, prints one hashed pin."""
    fake = tmp_path / "fake-uv"
    pin = "numpy==1.26.4 --hash=sha256:" + "a" * 64
    fake.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {tmp_path / "argv.txt"}\necho "{pin}"\n')
    fake.chmod(0o755)
    return fake


def test_init_resolves_as_of_a_day_with_exclude_newer(tmp_path: Path) -> None:
    """purejaxrl (github.com/luchris429/purejaxrl at 31756b1, 2024-09-09) has an unhashed
    requirements.txt: resolved today it gets gymnax 1.0, whose step() its wrappers cannot
    unpack, and the run fails; resolved before 2024-09-10 it gets gymnax 0.0.8 and trains."""
    import dataclasses

    project = tmp_path / "p"
    project.mkdir()
    (project / "requirements.txt").write_text("numpy\n")
    (project / "train.py").write_text("import numpy\n")
    services = dataclasses.replace(init_services(), uv=str(_fake_uv(tmp_path)))
    result = init_project(project, InitOptions(exclude_newer="2024-09-10"), services)
    argv = (tmp_path / "argv.txt").read_text().split("\n")
    assert argv[argv.index("--exclude-newer") + 1] == "2024-09-10"
    assert (
        (project / "requirements.lock")
        .read_text()
        .startswith(
            "# Resolved by `reprobuild init` from requirements.txt with uv pip compile "
            "--generate-hashes --exclude-newer 2024-09-10\n"
        )
    )
    assert result.notes[0].endswith(", with what the index had before 2024-09-10")
    # without it, the note says the versions are today's, and how to ask for a day
    (project / "requirements.lock").unlink()
    (project / "reprobuild.yaml").unlink()
    result = init_project(project, InitOptions(), services)
    assert "--exclude-newer" not in (tmp_path / "argv.txt").read_text()
    assert result.notes[0].endswith(
        ": the newest versions the index has today, which may not be the ones the project was "
        "written for (`--exclude-newer YYYY-MM-DD` resolves as of a day)"
    )


@pytest.mark.parametrize("day", ["2024-13-01", "2024-9-10", "yesterday", "2024-09-10T00:00"])
def test_init_refuses_an_exclude_newer_that_is_not_a_day(tmp_path: Path, day: str) -> None:
    (tmp_path / "requirements.txt").write_text("numpy\n")
    (tmp_path / "train.py").write_text("")
    with pytest.raises(InitError, match=r"--exclude-newer '.*' is not a day like 2024-09-10"):
        init_project(tmp_path, InitOptions(exclude_newer=day), init_services())
    assert not (tmp_path / "reprobuild.yaml").exists()


def test_init_refuses_exclude_newer_for_a_lock_used_in_place(tmp_path: Path) -> None:
    project = _uv_project(tmp_path)
    with pytest.raises(InitError, match=r"--exclude-newer 2024-09-10: uv\.lock is used in place"):
        init_project(project, InitOptions(exclude_newer="2024-09-10"), init_services())
    assert not (project / "reprobuild.yaml").exists()


def test_init_pins_the_build_requirements_of_the_sdists_it_resolves_to(tmp_path: Path) -> None:
    """purejaxrl's requirements.txt resolved before 2024-09-10 brings gym 0.26.2 (brax's), an
    sdist only: init wrote requirements.lock but no build lock (the lock was not on disk yet
    when it looked), and `reprobuild image` then failed on "gym==0.26.2 has no wheel for
    CPython 3.11", its hint about markers. init now reads the resolved lock for its sdists as
    it does a lock used in place."""
    import dataclasses

    project = tmp_path / "p"
    project.mkdir()
    (project / "requirements.txt").write_text("numpy\n")
    (project / "train.py").write_text("import numpy\n")
    seen: list[tuple[str, str]] = []

    def build_lock(
        path: Path, python: str, base: str, extras: tuple[str, ...], groups: tuple[str, ...]
    ) -> str:
        seen.append((path.name, path.read_text()))
        return "# reprobuild build lock for: sha256:0\n# numpy 1.26.4 builds with: setuptools\n"

    services = dataclasses.replace(
        init_services(), uv=str(_fake_uv(tmp_path)), build_lock=build_lock
    )
    result = init_project(project, InitOptions(), services)
    assert [name for name, _ in seen] == ["requirements.lock"]
    assert seen[0][1] == (project / "requirements.lock").read_text()
    assert result.written == [
        project / "requirements.lock",
        project / "build-requirements.lock",
        project / "reprobuild.yaml",
    ]
    assert load_config(project).build_lock == project / "build-requirements.lock"
    assert (
        "requirements.lock builds 1 package from its sdist: its build requirements are pinned "
        "in build-requirements.lock"
    ) in result.notes
