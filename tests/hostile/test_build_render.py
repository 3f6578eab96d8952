"""Hostile inputs to render / image / compose (issue #10): output paths that would destroy
the user's files, include entries that are not regular files, a wheel cache that a bad lock
or a damaged file must not spoil, empty options, out-of-range SOURCE_DATE_EPOCH.

Every case: the right exit code, one ``error:`` line naming the bad value, nothing changed
in the project, the output location, the wheel cache, the engine or the temp dir.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from helpers import DATA, run_cli
from hostile_harness import Snapshot, assert_clean_failure

pytestmark = [pytest.mark.engine, pytest.mark.registry]

Setup = Callable[[Path, Path], list[str]]  # (project, tmp) -> extra CLI args


@dataclass
class Case:
    setup: Setup
    expected: str
    command: str = "render"
    exit_code: int = 1
    env: dict[str, str] = field(default_factory=dict)


def _out(rel: str) -> Setup:
    """-o at a path relative to the project (files made by ``make``)."""

    def setup(root: Path, tmp: Path) -> list[str]:
        return ["-o", str(root / rel) if rel else str(root)]

    return setup


def _user_dir(where: str) -> Setup:
    def setup(root: Path, tmp: Path) -> list[str]:
        target = (root if where == "project" else tmp) / "notes"
        target.mkdir()
        (target / "todo.txt").write_text("my own notes\n")
        return ["-o", str(target)]

    return setup


def _git_dir(root: Path, tmp: Path) -> list[str]:
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    return ["-o", str(root / ".git")]


def _parent_of_project(root: Path, tmp: Path) -> list[str]:
    return ["-o", str(root.parent)]


def _symlink_to_project(root: Path, tmp: Path) -> list[str]:
    (tmp / "link").symlink_to(root)
    return ["-o", str(tmp / "link")]


def _through_symlink_into_include(root: Path, tmp: Path) -> list[str]:
    (tmp / "link").symlink_to(root)
    return ["-o", str(tmp / "link" / "src")]


def _existing_file(root: Path, tmp: Path) -> list[str]:
    (tmp / "precious.txt").write_text("keep me\n")
    return ["-o", str(tmp / "precious.txt")]


def _under_a_file(root: Path, tmp: Path) -> list[str]:
    (tmp / "precious.txt").write_text("keep me\n")
    return ["-o", str(tmp / "precious.txt" / "ctx")]


def _marker_not_a_file(root: Path, tmp: Path) -> list[str]:
    out = tmp / "ctx"
    (out / ".reprobuild-context").mkdir(parents=True)
    (out / "data.bin").write_bytes(b"\0" * 10)
    return ["-o", str(out)]


def _unwritable_parent(root: Path, tmp: Path) -> list[str]:
    return ["-o", "/proc/reprobuild-no-such/ctx"]


def _include_fifo_in_dir(root: Path, tmp: Path) -> list[str]:
    os.mkfifo(root / "src" / "pipe")
    return []


def _include_fifo_named(root: Path, tmp: Path) -> list[str]:
    os.mkfifo(root / "pipe")
    cfg = root / "reprobuild.yaml"
    cfg.write_text(cfg.read_text().replace("  - src\n", "  - src\n  - pipe\n"))
    return []


def _include_socket(root: Path, tmp: Path) -> list[str]:
    sock = socket.socket(socket.AF_UNIX)
    here = Path.cwd()
    os.chdir(root / "src")  # by a short name: a socket's whole path is at most 107 bytes
    try:
        sock.bind("app.sock")
    finally:
        os.chdir(here)
        sock.close()
    return []


def _include_device(root: Path, tmp: Path) -> list[str]:
    import stat

    try:
        os.mknod(root / "src" / "zero", stat.S_IFCHR | 0o666, os.makedev(1, 5))
    except PermissionError:  # no CAP_MKNOD: a FIFO is the non-regular file then
        os.mkfifo(root / "src" / "zero")
    return []


def _include_symlink_leaving(root: Path, tmp: Path) -> list[str]:
    (root / "src" / "passwd").symlink_to("/etc/passwd")
    return []


def _args(*extra: str) -> Setup:
    def setup(root: Path, tmp: Path) -> list[str]:
        return [*extra]

    return setup


PINNED = "127.0.0.1:5000/reprobuild-hostile/any@sha256:" + "a" * 64


def _compose_fifo(root: Path, tmp: Path) -> list[str]:
    os.mkfifo(tmp / "compose.yml")
    return ["--image", PINNED, "-o", str(tmp / "compose.yml")]


def _compose_over_own(root: Path, tmp: Path) -> list[str]:
    (tmp / "compose.yml").write_text("services:\n  train:\n    image: hand-written\n")
    return ["--image", PINNED, "-o", str(tmp / "compose.yml")]


def _k8s_over_own(root: Path, tmp: Path) -> list[str]:
    (tmp / "job.yml").write_text("apiVersion: batch/v1\nkind: Job\n")
    return ["--nodes", "2", "--image", PINNED, "-o", str(tmp / "job.yml")]


def _compose_over_symlink(root: Path, tmp: Path) -> list[str]:
    (tmp / "compose.yml").symlink_to("/etc/passwd")
    return ["--image", PINNED, "-o", str(tmp / "compose.yml")]


def _compose_dir(root: Path, tmp: Path) -> list[str]:
    return ["--image", PINNED, "-o", str(tmp)]


def _compose_under_file(root: Path, tmp: Path) -> list[str]:
    (tmp / "precious.txt").write_text("keep me\n")
    return ["--image", PINNED, "-o", str(tmp / "precious.txt" / "compose.yml")]


def _job(*extra: str) -> Setup:
    """A multi-node rendering (compose --nodes / k8s) written to a file in the work dir: the
    bad shape must be refused before the engine is asked and before the file exists."""

    def setup(root: Path, tmp: Path) -> list[str]:
        return ["--image", PINNED, *extra, "-o", str(tmp / "job.yml")]

    return setup


def _epoch(value: str) -> dict[str, str]:
    return {"SOURCE_DATE_EPOCH": value}


CASES: dict[str, Case] = {
    # -o: never the project, what holds it, what it includes, or a directory the user made
    "render-o-is-project": Case(_out(""), "is the project"),
    "render-o-user-dir-in-project": Case(_user_dir("project"), "reprobuild did not write"),
    "render-o-user-dir-elsewhere": Case(_user_dir("tmp"), "reprobuild did not write"),
    "render-o-include-dir": Case(_out("src"), "which the project includes"),
    "render-o-include-file": Case(_out("hello.py"), "which the project includes"),
    "render-o-git-dir": Case(_git_dir, ".git"),
    "render-o-contains-project": Case(_parent_of_project, "contains the project"),
    "render-o-symlink-to-project": Case(_symlink_to_project, "is a symlink"),
    "render-o-through-symlink-into-include": Case(
        _through_symlink_into_include, "which the project includes"
    ),
    "render-o-existing-file": Case(_existing_file, "exists and is not a directory"),
    "render-o-under-a-file": Case(_under_a_file, "precious.txt"),
    "render-o-marker-is-a-dir": Case(_marker_not_a_file, "reprobuild did not write"),
    "render-o-unwritable-parent": Case(_unwritable_parent, "/proc/reprobuild-no-such"),
    # include: regular files and directories only; never opened when not regular
    "render-include-fifo-in-dir": Case(_include_fifo_in_dir, "src/pipe is a FIFO"),
    "render-include-fifo-named": Case(_include_fifo_named, "pipe is a FIFO"),
    "render-include-socket": Case(_include_socket, "src/app.sock is a socket"),
    "render-include-device": Case(_include_device, "src/zero is"),
    "render-include-symlink-leaves": Case(_include_symlink_leaving, "symlink (src/passwd)"),
    "image-include-fifo": Case(_include_fifo_in_dir, "src/pipe is a FIFO", command="image"),
    # empty options (an unset variable in CI): usage errors, never "not given" or "."
    "render-o-empty": Case(_args("-o", ""), "--output is empty", exit_code=2),
    "render-base-empty": Case(_args("--base", ""), "--base is empty", exit_code=2),
    "render-variant-empty": Case(_args("--variant", ""), "--variant is empty", exit_code=2),
    "image-base-empty": Case(_args("--base", ""), "--base is empty", "image", 2),
    "image-tag-empty": Case(_args("--tag", ""), "--tag is empty", "image", 2),
    "image-ca-cert-empty": Case(
        _args("--online", "--ca-cert", ""), "--ca-cert is empty", "image", 2
    ),
    "compose-o-fifo": Case(_compose_fifo, "is not a regular file", "compose"),
    "compose-o-is-dir": Case(_compose_dir, "is a directory", "compose"),
    "compose-o-hand-written": Case(_compose_over_own, "reprobuild did not write it", "compose"),
    "compose-o-symlink": Case(_compose_over_symlink, "is a symlink", "compose"),
    "k8s-o-hand-written": Case(_k8s_over_own, "reprobuild did not write it", "k8s"),
    "compose-o-under-a-file": Case(_compose_under_file, "precious.txt", "compose"),
    "compose-o-empty": Case(_args("-o", ""), "--output is empty", "compose", 2),
    "compose-image-empty": Case(_args("--image", ""), "--image is empty", "compose", 2),
    # multi-node jobs (issue 13): bad shapes, before any engine call and any file
    "compose-nodes-zero": Case(_job("--nodes", "0"), "--nodes 0 is not allowed", "compose", 2),
    "compose-nproc-zero": Case(
        _job("--nodes", "2", "--nproc-per-node", "0"),
        "--nproc-per-node 0 is not allowed",
        "compose",
        2,
    ),
    "compose-world-too-big": Case(
        _job("--nodes", "8", "--nproc-per-node", "9"),
        "is a world size of 72, above the project's max_world_size 64",
        "compose",
        2,
    ),
    "compose-nproc-without-nodes": Case(
        _job("--nproc-per-node", "2"), "--nproc-per-node goes with --nodes", "compose", 2
    ),
    "k8s-nodes-zero": Case(_job("--nodes", "0"), "--nodes 0 is not allowed", "k8s", 2),
    "k8s-bad-name": Case(
        _job("--nodes", "2", "--name", "Bad_Name"), "job name 'Bad_Name' is not allowed", "k8s"
    ),
    # SOURCE_DATE_EPOCH out of range: one line, not a traceback from datetime or utime
    "render-epoch-negative": Case(_args(), "SOURCE_DATE_EPOCH '-1'", env=_epoch("-1")),
    "render-epoch-fraction": Case(_args(), "SOURCE_DATE_EPOCH '1.5'", env=_epoch("1.5")),
    "render-epoch-past-9999": Case(
        _args(), "SOURCE_DATE_EPOCH '253402300800'", env=_epoch("253402300800")
    ),
    "render-epoch-huge": Case(_args(), "SOURCE_DATE_EPOCH '9999", env=_epoch("9" * 5000)),
    # issue 11: --builder buildah and --push
    "image-push-empty": Case(
        _args("--builder", "buildah", "--push", ""), "--push is empty", "image", 2
    ),
    "image-push-digest": Case(
        _args("--builder", "buildah", "--push", "127.0.0.1:5000/x/y@sha256:" + "a" * 64),
        "not a digest reference",
        "image",
    ),
    "image-push-no-registry": Case(
        _args("--builder", "buildah", "--push", "team/model:v1"), "names no registry", "image"
    ),
    "image-push-shell": Case(
        _args("--builder", "buildah", "--push", "127.0.0.1:5000/x/y:$(touch /tmp/pwned)"),
        "$(touch /tmp/pwned)",
        "image",
    ),
    "image-push-classic": Case(
        _args("--builder", "classic", "--push", "127.0.0.1:5000/x/y:z"),
        "--push needs --builder buildah",
        "image",
    ),
    "image-epoch-huge": Case(
        _args(), "SOURCE_DATE_EPOCH '1000000000000'", "image", env=_epoch("1" + "0" * 12)
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_hostile_render_image(name: str, tmp_path: Path, base_ref: str, docker_client) -> None:  # type: ignore[no-untyped-def]
    case = CASES[name]
    root = tmp_path / "project"
    shutil.copytree(DATA / "projects" / "tiny", root)
    work = tmp_path / "work"
    work.mkdir()
    cache = tmp_path / "cache"
    args = case.setup(root, work)
    tag = f"reprobuild-hostile/{name}:{uuid.uuid4().hex[:8]}"
    if case.command == "render" and "-o" not in args:
        args = [*args, "-o", str(work / "out")]
    if case.command == "image":
        args = [*args, "-q"]
        if "--tag" not in args:
            args += ["--tag", tag]
        if "--base" not in args:
            args += ["--base", base_ref]
    # The engine is compared only for `image` (render and compose build nothing): other
    # engineers' builds on the shared engine would otherwise read as leftovers.
    engine = docker_client if case.command == "image" else None
    snap = Snapshot.take([root, work, cache], engine)
    proc = run_cli(
        case.command, str(root), *args, env={"XDG_CACHE_HOME": str(cache), **case.env}, timeout=120
    )
    assert_clean_failure(proc, case.expected, exit_code=case.exit_code)
    snap.assert_unchanged(engine)


def test_directory_argument_empty(tmp_path: Path) -> None:
    """`reprobuild render ""`: not the current directory."""
    snap = Snapshot.take([tmp_path])
    proc = run_cli("render", "", cwd=tmp_path, env={"XDG_CACHE_HOME": str(tmp_path / "c")})
    assert_clean_failure(proc, "DIRECTORY is empty", exit_code=2)
    snap.assert_unchanged()


def test_render_replaces_its_own_output(tmp_path: Path) -> None:
    """The marker is what makes a second render to the same -o legal."""
    root = tmp_path / "project"
    shutil.copytree(DATA / "projects" / "tiny", root)
    out = tmp_path / "ctx"
    env = {"XDG_CACHE_HOME": str(tmp_path / "c")}
    for _ in range(2):
        proc = run_cli("render", str(root), "-o", str(out), env=env)
        assert proc.returncode == 0, proc.stderr
    assert (out / ".reprobuild-context").is_file()
    assert (out / "Dockerfile").is_file()


# --------------------------------------------------------------------------- wheel cache


@pytest.fixture(scope="module")
def good_cache(base_ref, tmp_path_factory, docker_client) -> Iterator[Path]:  # type: ignore[no-untyped-def]
    """A wheel cache filled by one good build of the tiny project."""
    import docker.errors

    cache = tmp_path_factory.mktemp("cache")
    root = tmp_path_factory.mktemp("p") / "tiny"
    shutil.copytree(DATA / "projects" / "tiny", root)
    tag = f"reprobuild-hostile/cache-fill:{uuid.uuid4().hex[:8]}"
    try:
        proc = run_cli(
            "image", str(root), "--base", base_ref, "--tag", tag, "-q",
            env={"XDG_CACHE_HOME": str(cache)},
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]
        yield cache
    finally:
        with contextlib.suppress(docker.errors.ImageNotFound):
            docker_client.images.remove(tag, force=True)


def _wheel(cache: Path, stem: str) -> Path:
    return next((cache / "reprobuild" / "wheels").glob(f"*/{stem}-*.whl"))


def _wrong_hash(root: Path, cache: Path) -> str:
    lock = root / "requirements.lock"
    text = lock.read_text()
    good = "4721f391ed90541fddacab5acf947aa0d3dc7d27b2e1e8eda2be8970586c3274"
    other = "ff70335d468e7eb6ec65b95b99d3a2836546063f63acc5171de367e834932a81"
    lock.write_text(text.replace(good, "0" * 64).replace(other, "1" * 64))
    return "none of the lock's hashes"


def _damaged_same_stamp(root: Path, cache: Path) -> str:
    wheel = _wheel(cache, "six")
    st = wheel.stat()
    data = bytearray(wheel.read_bytes())
    data[len(data) // 2] ^= 0xFF
    wheel.write_bytes(bytes(data))
    os.utime(wheel, ns=(st.st_atime_ns, st.st_mtime_ns))
    return "does not match the sha256"


def _cache_is_a_file(root: Path, cache: Path) -> str:
    shutil.rmtree(cache)
    cache.write_text("not a directory\n")
    return "cannot use the wheel cache"


CACHE_CASES: dict[str, Callable[[Path, Path], str]] = {
    "wrong-hash-keeps-good-wheel": _wrong_hash,
    "damaged-wheel-same-size-and-mtime": _damaged_same_stamp,
    "cache-dir-is-a-file": _cache_is_a_file,
}


@pytest.mark.parametrize("name", sorted(CACHE_CASES))
def test_hostile_wheel_cache(  # type: ignore[no-untyped-def]
    name: str, tmp_path: Path, base_ref: str, good_cache: Path, docker_client
) -> None:
    root = tmp_path / "project"
    shutil.copytree(DATA / "projects" / "tiny", root)
    cache = tmp_path / "cache"
    shutil.copytree(good_cache, cache)
    expected = CACHE_CASES[name](root, cache)
    tag = f"reprobuild-hostile/{name}:{uuid.uuid4().hex[:8]}"
    snap = Snapshot.take([root, cache], docker_client)
    proc = run_cli(
        "image", str(root), "--base", base_ref, "--tag", tag, "-q",
        env={"XDG_CACHE_HOME": str(cache)},
    )  # fmt: skip
    assert_clean_failure(proc, expected)
    snap.assert_unchanged(docker_client)
