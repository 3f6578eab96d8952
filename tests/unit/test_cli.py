"""The ``reprobuild`` command in-process: main(argv) -> exit code, no engine, no network.

``image`` and ``resolve`` are pointed at endpoints that cannot answer (a missing socket, a
closed loopback port) to check the error path a user sees.
"""

from __future__ import annotations

import argparse
import gc
import os
import socket
import stat
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest

from reprobuild import __version__
from reprobuild.cli import build_parser, main

Snapshot = dict[str, tuple[str, bytes, int, int]]
EPOCH = 1700000000


def snapshot(root: Path) -> Snapshot:
    """Every file and directory under root: kind, bytes, permission bits, mtime."""
    out: Snapshot = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            st = path.lstat()
            rel = path.relative_to(root).as_posix()
            if stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", b"", stat.S_IMODE(st.st_mode), int(st.st_mtime))
            else:
                assert stat.S_ISREG(st.st_mode), f"{rel} is not a regular file"
                out[rel] = ("file", path.read_bytes(), stat.S_IMODE(st.st_mode), int(st.st_mtime))
    return out


@pytest.fixture
def tiny(project: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", str(EPOCH))
    return project("tiny")


def render(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["render", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# --------------------------------------------------------------------------- render


def test_render_writes_context_and_prints_out(
    tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "ctx"
    code, stdout, stderr = render(capsys, str(tiny), "-o", str(out))
    assert (code, stderr) == (0, "")
    assert stdout == f"{out}\n"
    files = snapshot(out)
    for rel in (
        "Dockerfile",
        "requirements.lock",
        "wheels/.keep",
        "app/hello.py",
        "app/src/__init__.py",
        "app/src/tinyapp/greet.py",
        "runtime/reprobuild_entrypoint/__main__.py",
    ):
        assert files[rel][0] == "file", rel
    assert files["app/hello.py"][1] == (tiny / "hello.py").read_bytes()
    assert not any("__pycache__" in rel or rel.endswith(".pyc") for rel in files)
    dockerfile = files["Dockerfile"][1].decode()
    assert dockerfile.startswith("# ")
    assert "FROM python@sha256:" in dockerfile
    assert 'org.opencontainers.image.title="reprobuild-test/tiny"' in dockerfile
    assert 'io.reprobuild.seed="7"' in dockerfile
    assert 'io.reprobuild.determinism="warn"' in dockerfile
    assert f"ENV SOURCE_DATE_EPOCH={EPOCH} " in dockerfile
    assert 'CMD ["python", "hello.py"]' in dockerfile
    assert files["requirements.lock"][1].startswith(b"# Rendered by reprobuild")
    # Nothing but the context was written beside it.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ctx", "tiny"]


def test_render_default_output_under_project(
    tiny: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, stdout, _ = render(capsys, str(tiny))
    assert code == 0
    out = tiny.resolve() / ".reprobuild" / "context-cpu"
    assert stdout == f"{out}\n"
    assert (out / "Dockerfile").is_file()


def test_render_default_directory_is_cwd(
    tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tiny)
    code, _, _ = render(capsys, "-o", str(tmp_path / "ctx"))
    assert code == 0
    assert (tmp_path / "ctx" / "app" / "hello.py").is_file()


def test_second_render_replaces_output(
    tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "ctx"
    assert render(capsys, str(tiny), "-o", str(out))[0] == 0
    first = snapshot(out)
    (out / "stale.txt").write_text("left over\n")
    (out / "app" / "old.py").write_text("gone\n")
    (tiny / "hello.py").write_text("print('v2')\n")
    assert render(capsys, str(tiny), "-o", str(out))[0] == 0
    second = snapshot(out)
    assert "stale.txt" not in second
    assert "app/old.py" not in second
    assert second["app/hello.py"][1] == b"print('v2')\n"
    assert set(second) == set(first)
    # No staging or set-aside directories remain beside OUT.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ctx", "tiny"]


def test_render_is_byte_identical_across_runs(
    tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    assert render(capsys, str(tiny), "-o", str(a))[0] == 0
    assert render(capsys, str(tiny), "-o", str(b))[0] == 0
    snap_a, snap_b = snapshot(a), snapshot(b)
    assert snap_a == snap_b
    assert snap_a  # not vacuous
    assert {mtime for *_, mtime in snap_a.values()} == {EPOCH}
    assert int(a.stat().st_mtime) == EPOCH
    assert stat.S_IMODE(a.stat().st_mode) == 0o755


def test_render_modes(tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tiny / "hello.py").chmod(0o755)
    (tiny / "src" / "tinyapp" / "greet.py").chmod(0o600)
    out = tmp_path / "ctx"
    assert render(capsys, str(tiny), "-o", str(out))[0] == 0
    files = snapshot(out)
    assert files["app/hello.py"][2] == 0o755
    assert files["app/src/tinyapp/greet.py"][2] == 0o644
    assert files["Dockerfile"][2] == 0o644


def test_render_epoch_changes_labels_and_mtimes(
    tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert render(capsys, str(tiny), "-o", str(tmp_path / "a"))[0] == 0
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "0")
    assert render(capsys, str(tiny), "-o", str(tmp_path / "b"))[0] == 0
    a = (tmp_path / "a" / "Dockerfile").read_text()
    b = (tmp_path / "b" / "Dockerfile").read_text()
    assert "2023-11-14T22:13:20Z" in a
    assert "1970-01-01T00:00:00Z" in b
    assert int((tmp_path / "b" / "Dockerfile").stat().st_mtime) == 0


def test_render_bad_lock_leaves_no_output(
    tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tiny / "requirements.lock").write_text("six==1.17.0\n")  # no hash
    out = tmp_path / "ctx"
    code, stdout, stderr = render(capsys, str(tiny), "-o", str(out))
    assert code == 1
    assert stdout == ""
    lines = stderr.splitlines()
    assert len([ln for ln in lines if ln.startswith("error: ")]) == 1
    assert lines[0].startswith("error: ")
    assert "requirements.lock:1" in lines[0]
    assert all(ln.startswith(("error: ", "hint: ")) for ln in lines)
    assert "Traceback" not in stderr
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny"]


def test_render_bad_lock_keeps_previous_output(
    tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "ctx"
    assert render(capsys, str(tiny), "-o", str(out))[0] == 0
    before = snapshot(out)
    (tiny / "requirements.lock").write_text("six==1.17.0\n")
    assert render(capsys, str(tiny), "-o", str(out))[0] == 1
    assert snapshot(out) == before


def test_render_bad_config_error_and_hint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, stdout, stderr = render(capsys, str(tmp_path), "-o", str(tmp_path / "ctx"))
    assert code == 1
    assert stdout == ""
    assert stderr.splitlines() == [
        f"error: {tmp_path.resolve() / 'reprobuild.yaml'}: not found",
        f"hint: run `reprobuild init {tmp_path}` to write one from the project's lock, "
        "or see the README's project format",
    ]
    assert not (tmp_path / "ctx").exists()


def test_render_output_is_a_file(
    tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "ctx"
    out.write_text("keep me\n")
    code, _, stderr = render(capsys, str(tiny), "-o", str(out))
    assert code == 1
    assert "exists and is not a directory" in stderr
    assert out.read_text() == "keep me\n"


def test_render_bad_source_date_epoch(
    tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "yesterday")
    code, _, stderr = render(capsys, str(tiny), "-o", str(tmp_path / "ctx"))
    assert code == 1
    assert stderr.startswith("error: SOURCE_DATE_EPOCH 'yesterday' must be a non-negative integer")
    assert not (tmp_path / "ctx").exists()


def test_render_gpu_without_gpu_lock(
    tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, stderr = render(capsys, str(tiny), "--gpu", "-o", str(tmp_path / "ctx"))
    assert code == 1
    assert "--gpu needs a gpu_lock" in stderr


def test_render_unpinned_base_flag(
    tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, stderr = render(
        capsys, str(tiny), "--base", "python:3.11", "-o", str(tmp_path / "ctx")
    )
    assert code == 1
    lines = stderr.splitlines()
    assert lines[0] == (
        "error: --base 'python:3.11' is not pinned by digest: a tag can move, a digest cannot"
    )
    assert lines[1].startswith("hint: run `reprobuild resolve python:3.11`")


def test_render_ca_cert_without_online(
    tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pem = tmp_path / "ca.pem"
    pem.write_text("-----BEGIN CERTIFICATE-----\n")
    code, _, stderr = render(capsys, str(tiny), "--ca-cert", str(pem), "-o", str(tmp_path / "c"))
    assert code == 1
    assert "--ca-cert is only used with --online" in stderr


# --------------------------------------------------------------------------- usage


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"reprobuild {__version__}\n"


def test_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for command in ("render", "image", "inspect", "resolve"):
        assert command in out


def test_help_tells_a_user_what_reprobuild_is(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not the module docstring (which describes the code) but the product, its main commands
    and where to read more, in lines that fit an 80-column terminal."""
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "parse arguments" not in out
    assert "Lockfiles in, pinned and deterministic training images out." in out
    for command in ("image [DIR]", "verify IMAGE -- CMD", "diff A B"):
        assert f"reprobuild {command}" in out
    assert "docs/" in out  # where to read more
    assert "Exit codes: 0 success, 1 error, 2 bad usage" in out
    assert max(len(line) for line in out.splitlines()) <= 80


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    [commands] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(commands.choices)


@pytest.mark.parametrize("command", sorted(_subparsers(build_parser())))
def test_a_commands_help_is_the_whole_parsers(
    command: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """main() adds a command's arguments only when it is chosen; build_parser(), which the CLI
    reference is made from, adds them all: both give the same help."""
    monkeypatch.setenv("COLUMNS", "80")
    assert main([command, "--help"]) == 0
    assert capsys.readouterr().out == _subparsers(build_parser())[command].format_help()


@pytest.mark.parametrize(
    "argv",
    [
        ["frobnicate"],
        [],
        ["render", "--no-such-flag"],
        ["image", "--builder", "nope"],
        ["inspect"],
    ],
)
def test_bad_usage_exits_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "usage: reprobuild" in captured.err


# --------------------------------------------------------------------------- engine / registry


def test_image_without_engine(
    tiny: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    cache = tmp_path / "cache"
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    monkeypatch.setenv("REPROBUILD_CACHE_DIR", str(cache))
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent.sock")
    for var in ("DOCKER_CONTEXT", "DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH"):
        monkeypatch.delenv(var, raising=False)
    before = snapshot(tiny)

    # docker-py leaks the socket of its failed connect (unixconn.connect); collect it here, with
    # ResourceWarning ignored, so it is not reported against some later test.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        try:
            code = main(["image", str(tiny), "--tag", "reprobuild-test/never:1", "-q"])
        finally:
            gc.collect()

    captured = capsys.readouterr()
    assert code == 1
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 2, captured.err
    assert lines[0].startswith("error: no Docker engine answers at unix:///nonexistent.sock")
    assert lines[1].startswith("hint: ")
    assert "start" in lines[1]
    # Nothing was written: no context under the project, no temp dirs, no cache entries.
    assert snapshot(tiny) == before
    assert not (tiny / ".reprobuild").exists()
    assert list(scratch.iterdir()) == []
    assert not cache.exists() or not any(cache.rglob("*"))


def closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@pytest.mark.parametrize("extra", [[], ["--json"]])
def test_resolve_unreachable_registry(extra: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    port = closed_port()
    code = main(["resolve", f"127.0.0.1:{port}/team/img:1", *extra])
    captured = capsys.readouterr()
    assert code == 1
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert lines[0] == f"error: could not reach http://127.0.0.1:{port}: connection refused"
    assert all(ln.startswith(("error: ", "hint: ")) for ln in lines)


def test_resolve_malformed_ref(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["resolve", "Bad Ref"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: invalid repository name 'Bad Ref'")


def test_resolve_bad_platform(capsys: pytest.CaptureFixture[str]) -> None:
    port = closed_port()
    assert main(["resolve", f"127.0.0.1:{port}/img:1", "--platform", "amd64"]) == 1
    assert capsys.readouterr().err.startswith("error: invalid platform 'amd64'")


@pytest.mark.parametrize(
    "argv",
    [
        ["resolve"],
        ["resolve", "python:3.11", "--refresh", "py"],
        ["resolve", "python:3.11", "--dry-run"],
    ],
)
def test_resolve_needs_a_ref_or_refresh(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "--refresh" in err
    assert "usage: reprobuild resolve" in err


def test_builder_nonsense_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    """issue 11: --builder names one of the builders, buildah among them."""
    from reprobuild.cli import main

    assert main(["image", ".", "--builder", "nonsense"]) == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'nonsense'" in err
    assert "'buildah'" in err


def test_rebuild_image_empty_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    from reprobuild.cli import main

    assert main(["rebuild", ""]) == 2
    assert capsys.readouterr().err.splitlines()[0] == (
        "error: IMAGE is empty; give a value or leave the option out"
    )
