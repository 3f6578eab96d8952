"""Packages locked as an sdist only become records that say "build from this archive".

The uv.lock in ``tests/data/sdist-project/`` was written by uv 0.9 for a project that pins two
real sdist-only packages (antlr4-python3-runtime 4.9.3, docopt 0.6.2).
"""

from __future__ import annotations

import hashlib
import re
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from reprobuild.errors import LockfileError
from reprobuild.locks.lockfile import load_lock, parse_lock_bytes
from reprobuild.locks.records import Requirement, SourceArchive

PROJECT = Path(__file__).resolve().parent.parent / "data" / "projects" / "sdist"
ANTLR = "sha256:f224469b4168294902bb1efa80a8bf7855f24c99aef99cbefc1bcd3cce77881b"


def _h(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.fixture(params=["pip", "uv"])
def frontend(request: pytest.FixtureRequest) -> dict[str, str]:
    """The stage script's build frontend, as the stage sets it: pip (the venv's own, here),
    or reprobuild's pinned uv (``REPROBUILD_UV``: a CPU image installed by uv)."""
    if request.param == "pip":
        return {}
    from reprobuild.imaging.image import pinned_uv

    uv = pinned_uv()
    if uv is None:
        pytest.fail("reprobuild's pinned uv is missing (scripts/install installs it)")
    return {"REPROBUILD_UV": str(uv)}


def test_uv_lock_sdist_only_packages_become_source_records() -> None:
    lock = load_lock(PROJECT / "uv.lock")
    assert [r.name for r in lock.sources] == ["antlr4-python3-runtime", "docopt"]
    antlr = lock.sources[0]
    assert antlr.version == "4.9.3" and antlr.hashes == (ANTLR,)
    assert antlr.source is not None
    assert antlr.source.filename == "antlr4-python3-runtime-4.9.3.tar.gz"
    assert antlr.source.sha256 == ANTLR
    assert antlr.source.url is not None and antlr.source.url.startswith("https://files.")
    assert lock.wheel_requirements == ()
    rendered = lock.render(index_options=False)
    # never handed to pip's index install; named in a comment only
    assert "--hash" not in rendered
    assert "# docopt==0.6.2: built from docopt-0.6.2.tar.gz sha256:" in rendered


def _uv(sdist: str, wheels: str = "") -> bytes:
    return (
        'version = 1\nrequires-python = ">=3.11"\n\n[[package]]\nname = "demo"\nversion = "1.0"\n'
        'source = { virtual = "." }\ndependencies = [{ name = "tiny" }]\n\n'
        '[[package]]\nname = "tiny"\nversion = "0.1"\n'
        'source = { registry = "https://pypi.org/simple" }\n'
        f"{sdist}{wheels}"
    ).encode()


def test_a_wheel_that_fits_wins_over_the_sdist() -> None:
    sdist = f'sdist = {{ url = "https://h.example/tiny-0.1.tar.gz", hash = "sha256:{_h("s")}" }}\n'
    wheels = (
        "wheels = [\n"
        '    { url = "https://h.example/tiny-0.1-py3-none-any.whl", '
        f'hash = "sha256:{_h("w")}" }},\n'
        "]\n"
    )
    lock = parse_lock_bytes(_uv(sdist, wheels), Path("uv.lock"))
    (tiny,) = lock.requirements
    assert tiny.source is None and tiny.hashes == (f"sha256:{_h('w')}",)


@pytest.mark.parametrize(
    ("sdist", "problem"),
    [
        ('sdist = { url = "https://h.example/tiny-0.1.tar.gz" }\n', r"has no hash"),
        (
            'sdist = { url = "https://h.example/tiny-0.1.tar.gz", hash = "md5:abc" }\n',
            r"md5 is too weak",
        ),
        (
            'sdist = { url = "https://h.example/other-0.1.tar.gz", '
            f'hash = "sha256:{_h("s")}" }}\n',
            r"sdist 'other-0\.1\.tar\.gz' is not an sdist of tiny 0\.1",
        ),
        (
            f'sdist = {{ url = "http://h.example/tiny-0.1.tar.gz", hash = "sha256:{_h("s")}" }}\n',
            r"plain http:// is only allowed to a loopback host",
        ),
    ],
)
def test_a_bad_sdist_is_one_line_at_its_place(sdist: str, problem: str) -> None:
    with pytest.raises(LockfileError, match=problem) as info:
        parse_lock_bytes(_uv(sdist), Path("uv.lock"))
    assert info.value.line == 14
    assert "\n" not in str(info.value).split("\nhint")[0]


def test_no_wheel_and_no_sdist_is_still_refused() -> None:
    with pytest.raises(
        LockfileError, match=r"has no wheel for CPython 3\.11 .* and no hashed sdist"
    ):
        parse_lock_bytes(_uv(""), Path("uv.lock"))


def test_pylock_sdist_only_package_is_a_source_record(tmp_path: Path) -> None:
    text = (
        'lock-version = "1.0"\ncreated-by = "t"\n\n[[packages]]\nname = "docopt"\n'
        'version = "0.6.2"\n[packages.sdist]\n'
        'url = "https://h.example/docopt-0.6.2.tar.gz"\n'
        f'hashes = {{ sha256 = "{_h("d")}" }}\n'
    )
    lock = parse_lock_bytes(text.encode(), tmp_path / "pylock.toml")
    (docopt,) = lock.sources
    assert docopt.source == SourceArchive(
        "docopt-0.6.2.tar.gz", f"sha256:{_h('d')}", url="https://h.example/docopt-0.6.2.tar.gz"
    )


def test_source_archive_checks_itself() -> None:
    good = f"sha256:{_h('x')}"
    SourceArchive("pkg-1.0.tar.gz", good, local=Path("/tmp/pkg-1.0.tar.gz"))
    with pytest.raises(ValueError, match=r"not a \.tar\.gz or \.zip"):
        SourceArchive("pkg-1.0.whl", good, url="https://h.example/pkg-1.0.whl")
    with pytest.raises(ValueError, match="sha256"):
        SourceArchive("pkg-1.0.tar.gz", "sha256:xyz", url="https://h.example/pkg-1.0.tar.gz")
    with pytest.raises(ValueError, match="exactly one"):
        SourceArchive("pkg-1.0.tar.gz", good)
    req = Requirement(
        "pkg",
        "1.0",
        (good,),
        source=SourceArchive("pkg-1.0.zip", good, url="file:///x/pkg-1.0.zip"),
    )
    assert req.source is not None and req.source.hex == good[7:]


# ---------------------------------------------------------------- the build-dependency lock


def _sdist(tmp_path: Path, name: str, pyproject: str | None) -> Path:
    """A tiny sdist ``name-1.0.tar.gz`` with a setup.py and, when given, a pyproject.toml."""
    import io
    import tarfile

    path = tmp_path / f"{name}-1.0.tar.gz"
    with tarfile.open(path, "w:gz") as tf:
        files = {"setup.py": "from setuptools import setup\nsetup()\n"}
        if pyproject is not None:
            files["pyproject.toml"] = pyproject
        for rel, text in files.items():
            info = tarfile.TarInfo(f"{name}-1.0/{rel}")
            info.size = len(text.encode())
            tf.addfile(info, io.BytesIO(text.encode()))
    return path


def test_build_requires_reads_pyproject_or_takes_the_legacy_default(tmp_path: Path) -> None:
    from reprobuild.locks.buildlock import LEGACY_REQUIRES, BuildLockError, build_requires

    assert build_requires(_sdist(tmp_path, "plain", None)) == LEGACY_REQUIRES
    no_system = _sdist(tmp_path, "tool", "[tool.black]\nline-length = 99\n")
    assert build_requires(no_system) == LEGACY_REQUIRES
    hatch = _sdist(tmp_path, "hatch", '[build-system]\nrequires = ["hatchling>=1.20"]\n')
    assert build_requires(hatch) == ("hatchling>=1.20",)
    bad = _sdist(tmp_path, "bad", '[build-system]\nrequires = ["not a req !"]\n')
    with pytest.raises(BuildLockError, match=r"bad-1\.0\.tar\.gz: build requirement"):
        build_requires(bad)


def test_build_lock_is_resolved_hashed_and_checked_for_staleness(tmp_path: Path) -> None:
    """The real resolver (the pinned uv) against this machine's local index (no network):
    the legacy default of two sdists gives setuptools and wheel, every pin hashed; render's
    check takes it for these inputs and refuses it as stale once an sdist's hash moves."""
    import dataclasses

    from uv import find_uv_bin

    from reprobuild.locks.buildlock import (
        BuildLockError,
        compile_build_lock,
        inputs_key,
        load_build_lock,
    )
    from reprobuild.locks.records import IndexOptions

    lock = load_lock(PROJECT / "uv.lock")
    local = dataclasses.replace(lock, options=IndexOptions(index_url="file:///opt/pypi/simple"))
    archives = {
        "antlr4-python3-runtime": _sdist(tmp_path, "antlr4-python3-runtime", None),
        "docopt": _sdist(tmp_path, "docopt", None),
    }
    asked: list[tuple[str, str]] = []

    def ask(archive: Path, pins: Path) -> tuple[str, ...]:  # a legacy setuptools backend's
        asked.append((archive.name, pins.read_text()))  # answer with no setup_requires
        return ()

    text = compile_build_lock(
        local, "3.11", archives, str(find_uv_bin()), ask=ask, log=lambda _: None
    )
    # each backend asked once, with the round's hashed pins installed
    assert sorted(name for name, _ in asked) == sorted(a.name for a in archives.values())
    assert all("setuptools==" in pins and "--hash=sha256:" in pins for _, pins in asked)
    assert f"# reprobuild build lock for: {inputs_key(lock, '3.11')}\n" in text
    assert "build backend asks for" not in text
    path = tmp_path / "build-requirements.lock"
    path.write_text(text)
    build = load_build_lock(path, lock, "3.11", tmp_path)
    assert build is not None
    assert {r.name for r in build.requirements} >= {"setuptools", "wheel"}
    assert all(r.hashes for r in build.requirements)
    with pytest.raises(BuildLockError, match=r"is stale: .* on CPython 3\.12") as info:
        load_build_lock(path, lock, "3.12", tmp_path)
    assert info.value.hint is not None and "reprobuild build-lock" in info.value.hint
    with pytest.raises(BuildLockError, match=r"names no build_lock"):
        load_build_lock(None, lock, "3.11", tmp_path)
    with pytest.raises(BuildLockError, match=r"its build_lock gone\.lock does not exist"):
        load_build_lock(tmp_path / "gone.lock", lock, "3.11", tmp_path)


def test_the_missing_build_lock_counts_its_sdists_in_english(tmp_path: Path) -> None:
    """One sdist is "1 package from its sdist", not "1 packages from their sdists" (rejax's
    pdm.lock builds gym alone)."""
    import dataclasses

    from reprobuild.locks.buildlock import BuildLockError, load_build_lock

    lock = load_lock(PROJECT / "uv.lock")
    assert len(lock.sources) == 2
    with pytest.raises(BuildLockError, match=r"builds 2 packages from their sdists \("):
        load_build_lock(None, lock, "3.11", tmp_path)
    dropped = lock.sources[1].name
    one = dataclasses.replace(
        lock, requirements=tuple(r for r in lock.requirements if r.name != dropped)
    )
    with pytest.raises(BuildLockError, match=r"builds 1 package from its sdist \(") as info:
        load_build_lock(None, one, "3.11", tmp_path)
    assert "its pinned build requirements" in info.value.message


def test_render_adds_the_wheel_build_stage(tmp_path: Path) -> None:
    """The committed test project renders an sdist-build stage before the image's, with the
    build lock's pins, the sdists to build and their install beside the locked wheels."""
    import shutil

    from helpers import run_cli

    root = tmp_path / "p"
    shutil.copytree(PROJECT, root)
    proc = run_cli("render", str(root), "-o", str(tmp_path / "ctx"))
    assert proc.returncode == 0, proc.stderr
    ctx = tmp_path / "ctx"
    dockerfile = (ctx / "Dockerfile").read_text()
    assert "AS sdist-build" in dockerfile
    assert "SOURCE_DATE_EPOCH=315532800" in dockerfile
    assert "--no-build-isolation" in (ctx / "build" / "build_sdists.py").read_text()
    assert "COPY --from=sdist-build /.reprobuild-build/out/ /opt/reprobuild/built/" in dockerfile
    sources = (ctx / "build" / "sources.json").read_text()
    assert ANTLR in sources and "docopt-0.6.2.tar.gz" in sources
    assert "--hash=sha256:" in (ctx / "build" / "requirements.lock").read_text()
    # stale: made for other inputs (as after a relock that moved an sdist)
    build = root / "build-requirements.lock"
    text = build.read_text()
    key = text.split("# reprobuild build lock for: sha256:", 1)[1][:64]
    build.write_text(text.replace(key, "0" * 64))
    proc = run_cli("render", str(root), "-o", str(tmp_path / "ctx2"))
    assert proc.returncode == 1
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "build_lock build-requirements.lock is stale" in errors[0]
    assert not (tmp_path / "ctx2").exists()


@pytest.mark.engine
@pytest.mark.registry
def test_init_writes_the_build_lock_and_names_it(tmp_path: Path, base_ref: str) -> None:
    """`reprobuild init` on a uv.lock of sdists only: the sdists are fetched from PyPI
    (143 kB, hash-checked), their legacy build requirements resolved with the pinned uv into
    build-requirements.lock, which reprobuild.yaml names and `render` takes. Their backends
    are asked what more they build with in a container from the base (--base: the catalog's
    is not reachable from CI), hence the engine."""
    import shutil

    from helpers import run_cli

    root = tmp_path / "p"
    root.mkdir()
    for name in ("uv.lock", "pyproject.toml", "hello.py"):
        shutil.copy(PROJECT / name, root / name)
    proc = run_cli(
        "init", str(root), "--command", "python hello.py", "--python", "3.11", "--base", base_ref
    )
    assert proc.returncode == 0, proc.stderr
    assert "uv.lock builds 2 packages from their sdists" in proc.stderr
    config = (root / "reprobuild.yaml").read_text()
    assert "\nbuild_lock: build-requirements.lock" in config
    text = (root / "build-requirements.lock").read_text()
    assert "# antlr4-python3-runtime==4.9.3 builds with: setuptools>=40.8.0, wheel" in text
    assert re.search(r"^setuptools==\S+ \\$", text, re.M)
    rendered = run_cli("render", str(root), "-o", str(tmp_path / "ctx"))
    assert rendered.returncode == 0, rendered.stderr
    assert (tmp_path / "ctx" / "build" / "sources.json").is_file()


_CEXT_SETUP = """from setuptools import Extension, setup
setup(name="cext_demo", version="0.1", ext_modules=[Extension("cext_demo", ["cext_demo.c"])])
"""
_CEXT_C = """#include <Python.h>
static PyObject *where(PyObject *self, PyObject *args) { return PyUnicode_FromString(__FILE__); }
static PyMethodDef M[] = {{"where", where, METH_NOARGS, NULL}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef D = {PyModuleDef_HEAD_INIT, "cext_demo", NULL, -1, M};
PyMODINIT_FUNC PyInit_cext_demo(void) { return PyModule_Create(&D); }
"""


def test_a_c_extension_sdist_built_twice_gives_the_same_bytes(
    tmp_path: Path, frontend: dict[str, str]
) -> None:
    """The wheel-build stage's own script (templates/build_sdists.py), run on this machine's
    gcc and CPython under two different build roots with the stage's environment: the same
    wheel bytes, and no build path in the compiled extension (``-ffile-prefix-map``; without
    it, with debug info, the two wheels differ: the second half checks that, so the test
    can fail)."""
    import io
    import json
    import os
    import subprocess
    import sys
    import tarfile
    import zipfile

    import reprobuild.imaging

    script = Path(reprobuild.imaging.__file__).parent / "templates" / "build_sdists.py"
    sdist = io.BytesIO()
    with tarfile.open(fileobj=sdist, mode="w:gz") as tf:
        for rel, text in (("setup.py", _CEXT_SETUP), ("cext_demo.c", _CEXT_C)):
            info = tarfile.TarInfo(f"cext_demo-0.1/{rel}")
            info.size, info.mode = len(text.encode()), 0o644
            tf.addfile(info, io.BytesIO(text.encode()))
    data = sdist.getvalue()
    digest = "sha256:" + hashlib.sha256(data).hexdigest()

    def build(name: str, prefix_map: bool) -> tuple[str, bytes]:
        root = tmp_path / name / "reprobuild-build"
        (root / "sdists").mkdir(parents=True)
        (root / "sdists" / "cext_demo-0.1.tar.gz").write_bytes(data)
        listed = [{"name": "cext-demo", "version": "0.1", "filename": "cext_demo-0.1.tar.gz"}]
        listed[0]["sha256"] = digest
        (root / "sources.json").write_text(json.dumps(listed))
        # -g: debug info names the build folder (DW_AT_comp_dir), whatever the interpreter's
        # own CFLAGS say
        flags = f"-g -ffile-prefix-map={root}/src=." if prefix_map else "-g"
        env = {
            **os.environ,
            "REPROBUILD_BUILD_ROOT": str(root),
            "SOURCE_DATE_EPOCH": "315532800",
            "PYTHONHASHSEED": "0",
            "TZ": "UTC",
            "PIP_NO_INDEX": "1",
            "CFLAGS": flags,
            **frontend,
        }
        proc = subprocess.run(
            [sys.executable, "-I", str(script)], env=env, capture_output=True, text=True
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        (built,) = json.loads((root / "out" / "built.json").read_text())
        assert built["sdist_sha256"] == digest
        wheel = root / "out" / built["wheel"]
        assert built["wheel_sha256"] == "sha256:" + hashlib.sha256(wheel.read_bytes()).hexdigest()
        with zipfile.ZipFile(wheel) as zf:
            so = next(n for n in zf.namelist() if n.endswith(".so"))
            return built["wheel_sha256"], zf.read(so)

    first, so = build("a", prefix_map=True)
    second, _ = build("b", prefix_map=True)
    assert first == second
    assert str(tmp_path).encode() not in so
    third, _ = build("c", prefix_map=False)
    fourth, _ = build("d", prefix_map=False)
    assert third != fourth  # the build path leaks without the map


@pytest.mark.parametrize("mount_install", [True, False])
def test_a_lock_of_wheels_and_sdists_installs_both(mount_install: bool) -> None:
    """pyannote-audio's uv.lock (117 wheels, julius as an sdist): both install paths (one
    stage with RUN --mount; the deps stage for the classic builder) install the hashed wheels
    and the built ones in one resolution (a locked wheel may depend on a built one: omegaconf
    on antlr4), the built ones as hashed file requirements from the stage's built.json."""
    import dataclasses

    from reprobuild.bases.refs import parse_ref
    from reprobuild.imaging.render import RenderSpec, render_dockerfile

    wild = PROJECT.parent.parent / "lockfiles" / "wild" / "pyannote-audio-4.0.7" / "uv.lock"
    spec = RenderSpec(
        name="t/x",
        variant="cpu",
        base=parse_ref("127.0.0.1:5000/a/b@sha256:" + "ab" * 32),
        lock=load_lock(wild),
        seed=0,
        determinism="warn",
        builder_version="0",
        build_lock=load_lock(PROJECT / "build-requirements.lock"),
        mount_install=mount_install,
    )
    text = render_dockerfile(spec)
    where = "/.reprobuild" if mount_install else "/tmp/reprobuild"
    built = "/opt/reprobuild/built" if mount_install else "/tmp/reprobuild/built"
    listed = text.index(f'"$BUILT_REQUIREMENTS" {built} > {where}/built.txt')
    assert listed < text.index(f"-r {where}/requirements.lock -r {where}/built.txt")
    assert "--no-deps" not in text and "built/*.whl" not in text
    assert text.index("AS sdist-build") < text.index("COPY --from=sdist-build")
    only = render_dockerfile(dataclasses.replace(spec, lock=load_lock(PROJECT / "uv.lock")))
    assert f"-r {where}/requirements.lock -r {where}/built.txt" in only  # sdists only


def test_the_built_wheels_become_hashed_file_requirements(tmp_path: Path) -> None:
    """What the install step reads the stage's built.json into: one ``NAME @ file://`` line
    per built wheel with its sha256, in the stage's order, run by the base's python3."""
    import json
    import sys

    from reprobuild.imaging.render import BUILT_REQUIREMENTS

    built = [
        {"name": "antlr4-python3-runtime", "wheel": "antlr4_python3_runtime-4.9.3-py3-none-any.whl",
         "wheel_sha256": "sha256:" + "a" * 64, "version": "4.9.3"},
        {"name": "docopt", "wheel": "docopt-0.6.2-py2.py3-none-any.whl",
         "wheel_sha256": "sha256:" + "b" * 64, "version": "0.6.2"},
    ]  # fmt: skip
    (tmp_path / "built.json").write_text(json.dumps(built))
    out = subprocess.run(
        [sys.executable, "-I", "-c", BUILT_REQUIREMENTS, str(tmp_path)],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert out.splitlines() == [
        f"antlr4-python3-runtime @ file://{tmp_path}/antlr4_python3_runtime-4.9.3-py3-none-any.whl"
        f" --hash=sha256:{'a' * 64}",
        f"docopt @ file://{tmp_path}/docopt-0.6.2-py2.py3-none-any.whl --hash=sha256:{'b' * 64}",
    ]


def _stage_inputs(root: Path, files: dict[str, str], *more: tuple[str, dict[str, str]]) -> None:
    """The stage's inputs under ``root``: one sdist ``bad_demo-0.1.tar.gz`` made of ``files``
    (and one ``NAME-0.1.tar.gz`` for each of ``more``, in that order) and the
    ``sources.json`` that names them with their sha256."""
    import io
    import json
    import tarfile

    listed = []
    (root / "sdists").mkdir(parents=True)
    for name, members in (("bad-demo", files), *more):
        stem = f"{name.replace('-', '_')}-0.1"
        sdist = io.BytesIO()
        with tarfile.open(fileobj=sdist, mode="w:gz") as tf:
            for rel, text in members.items():
                info = tarfile.TarInfo(f"{stem}/{rel}")
                info.size, info.mode = len(text.encode()), 0o644
                tf.addfile(info, io.BytesIO(text.encode()))
        (root / "sdists" / f"{stem}.tar.gz").write_bytes(sdist.getvalue())
        digest = "sha256:" + hashlib.sha256(sdist.getvalue()).hexdigest()
        listed.append(
            {"name": name, "version": "0.1", "filename": f"{stem}.tar.gz", "sha256": digest}
        )
    (root / "sources.json").write_text(json.dumps(listed))


def _run_stage_script(
    tmp_path: Path,
    files: dict[str, str],
    *more: tuple[str, dict[str, str]],
    **env_extra: str,
) -> subprocess.CompletedProcess[str]:
    """The wheel-build stage's script on this machine, on one sdist made of ``files`` (and
    those of ``more``)."""
    import os
    import sys

    import reprobuild.imaging

    script = Path(reprobuild.imaging.__file__).parent / "templates" / "build_sdists.py"
    root = tmp_path / "reprobuild-build"
    _stage_inputs(root, files, *more)
    env = {
        **os.environ,
        "REPROBUILD_BUILD_ROOT": str(root),
        "SOURCE_DATE_EPOCH": "315532800",
        "PIP_NO_INDEX": "1",
        **env_extra,
    }
    return subprocess.run(
        [sys.executable, "-I", str(script)], env=env, capture_output=True, text=True, timeout=120
    )


def test_a_build_that_hangs_is_stopped_in_one_line(
    tmp_path: Path, frontend: dict[str, str]
) -> None:
    """A build past REPROBUILD_SDIST_TIMEOUT is stopped, with what it started (its own
    process group), and said in the one line the image build reports."""
    import time

    setup = "import time\ntime.sleep(300)\n"
    started = time.monotonic()
    proc = _run_stage_script(
        tmp_path, {"setup.py": setup}, REPROBUILD_SDIST_TIMEOUT="3", **frontend
    )
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert time.monotonic() - started < 60
    last = proc.stderr.strip().splitlines()[-1]
    assert last == "reprobuild: building bad-demo 0.1 did not finish within 3 s; stopped", last


def test_a_build_that_fails_names_its_last_words(tmp_path: Path, frontend: dict[str, str]) -> None:
    """A build that fails (here: one that really fetches a page, with the dead proxy the stage
    sets, as it has no network) is one line naming the package and the build's own last
    error: the exception, not pip's frame around it."""
    setup = "import urllib.request\nurllib.request.urlopen('https://pypi.org/simple/', timeout=9)\n"
    dead = "http://127.0.0.1:9"
    proc = _run_stage_script(
        tmp_path, {"setup.py": setup}, https_proxy=dead, HTTPS_PROXY=dead, no_proxy="", **frontend
    )
    assert proc.returncode == 1, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(
        "reprobuild: building bad-demo 0.1 from its sdist failed: urllib.error.URLError: "
    ), last
    # the build's own last lines are in the log (uv's are shown only where a build fails)
    assert "ConnectionRefusedError: [Errno 111]" in proc.stdout, proc.stdout[-3000:]
    assert not (tmp_path / "reprobuild-build" / "out" / "built.json").exists()


_GOOD_SETUP = "from setuptools import setup\nsetup(name={name!r}, version='0.1', py_modules=[])\n"


def test_a_build_that_gives_another_project_s_wheel_is_refused(
    tmp_path: Path, frontend: dict[str, str]
) -> None:
    """The built wheel's file name goes into the install as a requirement: one of another
    project than the sdist's is refused in one line, and nothing reaches out/."""
    proc = _run_stage_script(
        tmp_path, {"setup.py": _GOOD_SETUP.format(name="other-demo")}, **frontend
    )
    assert proc.returncode == 1, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last == (
        "reprobuild: building bad-demo gave the wheel 'other_demo-0.1-py3-none-any.whl', not a "
        "wheel of bad-demo (NAME-VERSION-TAGS.whl)"
    ), last
    assert not (tmp_path / "reprobuild-build" / "out" / "built.json").exists()


def test_the_sdists_build_side_by_side_and_land_in_the_lock_s_order(
    tmp_path: Path, frontend: dict[str, str]
) -> None:
    """Two sdists, built at once (each in its own tree, home and wheel folder): both wheels in
    out/, built.json in the lock's order whichever finished first, and each build's lines led
    by its package."""
    import json
    import os

    slow = "import time\ntime.sleep(2)\n" + _GOOD_SETUP.format(name="bad-demo")
    fast = {"setup.py": _GOOD_SETUP.format(name="fast-demo")}
    proc = _run_stage_script(tmp_path, {"setup.py": slow}, ("fast-demo", fast), **frontend)
    assert proc.returncode == 0, proc.stderr[-2000:] + proc.stdout[-2000:]
    out = tmp_path / "reprobuild-build" / "out"
    built = json.loads((out / "built.json").read_text())
    assert [b["name"] for b in built] == ["bad-demo", "fast-demo"]
    assert sorted(p.name for p in out.glob("*.whl")) == sorted(b["wheel"] for b in built)
    lines = proc.stdout.splitlines()
    assert "[fast-demo] building fast-demo 0.1 from fast_demo-0.1.tar.gz" in lines
    # the frontend's own lines, not the backend's (setuptools' every step)
    assert not [ln for ln in lines if "running bdist_wheel" in ln], lines
    if (os.cpu_count() or 1) > 1:  # side by side: the fast one was done before the slow one
        done = [ln.split("]")[0] for ln in lines if "Successfully built" in ln]
        assert done == ["[fast-demo", "[bad-demo"], lines


def test_a_failed_build_stops_the_others_and_is_the_one_line(
    tmp_path: Path, frontend: dict[str, str]
) -> None:
    """One sdist's build fails while another's would run for minutes: the other is stopped at
    once, and the one line names the one that failed of its own accord."""
    import time

    fails = {"setup.py": "raise RuntimeError('no compiler for this')\n"}
    hangs = {"setup.py": "import time\ntime.sleep(300)\n"}
    started = time.monotonic()
    proc = _run_stage_script(tmp_path, hangs, ("fails-demo", fails), **frontend)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert time.monotonic() - started < 60
    last = proc.stderr.strip().splitlines()[-1]
    assert last == (
        "reprobuild: building fails-demo 0.1 from its sdist failed: "
        "RuntimeError: no compiler for this"
    ), last
    assert not (tmp_path / "reprobuild-build" / "out" / "built.json").exists()


@pytest.fixture(scope="module")
def open_venv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A venv of Debian's own CPython (readable by every user, as the stage's is) with
    setuptools and wheel from the machine's local index: the stage's build venv, on the host."""
    import os
    import shutil

    python = shutil.which("python3", path="/usr/bin")
    if python is None:
        pytest.fail("Debian's /usr/bin/python3 is missing (scripts/setup installs it)")
    root = Path(tempfile.mkdtemp(prefix="reprobuild-stage-venv-", dir="/tmp"))
    os.chmod(root, 0o755)
    venv = root / "venv"
    subprocess.run([python, "-m", "venv", str(venv)], check=True, capture_output=True)
    index = "file:///opt/pypi/simple"
    subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--index-url", index,
         "setuptools", "wheel"],
        check=True, capture_output=True,
    )  # fmt: skip
    yield venv
    shutil.rmtree(root)


def test_a_build_that_writes_outside_its_tree_fails_in_one_line(
    tmp_path: Path, open_venv: Path, frontend: dict[str, str]
) -> None:
    """As the stage runs it (REPROBUILD_BUILD_USER=65534: an unprivileged user, HOME and
    TMPDIR its own folder), a build that writes outside its own tree fails, in one line, and
    what it meant to write is not there."""
    import os
    import shutil

    import reprobuild.imaging

    target = Path("/usr/local/lib") / f"reprobuild-outside-{os.getpid()}"
    setup = (
        "from pathlib import Path\n"
        f"Path({str(target)!r}).write_text('written by a build')\n"
        "from setuptools import setup\n"
        "setup(name='bad-demo', version='0.1', py_modules=[])\n"
    )
    base = Path(tempfile.mkdtemp(prefix="reprobuild-stage-", dir="/tmp"))
    try:
        os.chmod(base, 0o755)
        root = base / "reprobuild-build"
        _stage_inputs(root, {"setup.py": setup})
        script = Path(reprobuild.imaging.__file__).parent / "templates" / "build_sdists.py"
        shutil.copy(script, base / "build_sdists.py")
        os.chmod(base / "build_sdists.py", 0o644)
        if frontend:  # where the build's user can run it, as the stage mounts it
            shutil.copy(frontend["REPROBUILD_UV"], base / "uv")
            os.chmod(base / "uv", 0o755)
            frontend = {"REPROBUILD_UV": str(base / "uv")}
        env = {
            **frontend,
            "PATH": "/usr/bin:/bin",
            "REPROBUILD_BUILD_ROOT": str(root),
            "REPROBUILD_BUILD_USER": "65534",
            "SOURCE_DATE_EPOCH": "315532800",
            "PIP_NO_INDEX": "1",
        }
        proc = subprocess.run(
            [str(open_venv / "bin" / "python"), "-I", str(base / "build_sdists.py")],
            env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
        last = proc.stderr.strip().splitlines()[-1]
        assert last.startswith("reprobuild: building bad-demo 0.1 from its sdist failed: "), last
        assert "Permission denied" in proc.stdout + proc.stderr
        assert not target.exists()
        # what the build left is the stage's root's again (copied into the image as is)
        assert (root / "out").stat().st_uid == 0
    finally:
        target.unlink(missing_ok=True)
        shutil.rmtree(base)
