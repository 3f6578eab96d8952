"""Cleanup as a property (issue #10): a `reprobuild image` stopped by a real signal while the
engine builds leaves nothing behind (scratch tags, probe containers, temp dirs, the final
tag); one killed by SIGKILL, which cannot clean up, is cleaned up after by the next run, which
says so in one note line."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from helpers import DATA, run_cli
from hostile_harness import Snapshot, assert_clean_failure

pytestmark = [pytest.mark.engine, pytest.mark.registry]
OWNER_LABEL = "io.reprobuild.owner"


def _start_time(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[19])


def _owned_temps(pid: int) -> list[Path]:
    tmp = Path(tempfile.gettempdir())
    return [p for p in tmp.iterdir() if p.name.startswith("reprobuild-") and f"-{pid}-" in p.name]


def _default_signals() -> None:
    """In the child: SIGINT and SIGHUP back to their defaults. A suite started in the
    background or under nohup passes them down ignored, and reprobuild (like any program)
    keeps an inherited SIG_IGN, so the signals under test would never arrive."""
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)


def _start_build(root: Path, base_ref: str, tag: str, cache: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "SOURCE_DATE_EPOCH": "0", "XDG_CACHE_HOME": str(cache)}
    return subprocess.Popen(
        [sys.executable, "-m", "reprobuild", "image", str(root), "--base", base_ref,
         "--tag", tag, "-q", "--no-cache", "--builder", "classic"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        preexec_fn=_default_signals,
    )  # fmt: skip


def _wait_until_building(proc: subprocess.Popen[str], docker_client: Any) -> Path:
    """Block until the engine is inside this run's build: its context holds the wheels and a
    build step's container is running (a RUN step lasts seconds; a fixed sleep instead raced
    with a fast engine, which finished the whole build before the signal was sent)."""
    before = {c.id for c in docker_client.containers.list(all=True, sparse=True)}
    deadline = time.monotonic() + 120
    ctx: Path | None = None
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        if ctx is None:
            ctx = next(
                (
                    tmp
                    for tmp in _owned_temps(proc.pid)
                    if tmp.name.startswith("reprobuild-ctx-")
                    and any(tmp.glob("context-*/wheels/*.whl"))
                ),
                None,
            )
        if ctx is not None:
            running = docker_client.containers.list(sparse=True, filters={"status": "running"})
            if any(c.id not in before for c in running):
                return ctx
        time.sleep(0.05)
    raise AssertionError("the build never started")


def _eventually(check: Callable[[], None], seconds: float = 30) -> None:
    """Engine-side clean-up (the daemon cancelling a build) may lag the process's exit."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            check()
            return
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def _owned_engine(docker_client: Any, pid: int) -> list[str]:
    tags = [
        t
        for image in docker_client.images.list()
        for t in image.tags
        if t.startswith("reprobuild-scratch/") and f":{pid}-" in t
    ]
    listed = docker_client.containers.list(all=True, sparse=True, filters={"label": OWNER_LABEL})
    containers = [
        c.id
        for c in listed
        if (c.attrs.get("Labels") or {}).get(OWNER_LABEL, "").startswith(f"{pid}-")
    ]
    return tags + containers


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    shutil.copytree(DATA / "projects" / "tiny", root)
    return root


@pytest.mark.parametrize(
    ("signum", "code"),
    [(signal.SIGTERM, 143), (signal.SIGINT, 130), (signal.SIGHUP, 129)],
    ids=["SIGTERM", "SIGINT", "SIGHUP"],
)
def test_signal_during_build_leaves_nothing(  # type: ignore[no-untyped-def]
    signum: int, code: int, tiny: Path, tmp_path: Path, base_ref: str, docker_client
) -> None:
    cache = tmp_path / "cache"
    tag = f"reprobuild-hostile/signal:{uuid.uuid4().hex[:8]}"
    snap = Snapshot.take([tiny], docker_client)
    proc = _start_build(tiny, base_ref, tag, cache)
    try:
        _wait_until_building(proc, docker_client)
        assert proc.poll() is None, "the build ended before the signal could be sent"
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    assert_clean_failure(done, f"interrupted by {signal.Signals(signum).name}", exit_code=code)

    def nothing_left() -> None:
        assert _owned_temps(proc.pid) == []
        assert _owned_engine(docker_client, proc.pid) == []
        assert tag not in {t for image in docker_client.images.list() for t in image.tags}
        snap.assert_unchanged(docker_client)

    _eventually(nothing_left)


def test_sigkill_leftovers_are_reaped_by_the_next_run(  # type: ignore[no-untyped-def]
    tiny: Path, tmp_path: Path, base_ref: str, docker_client
) -> None:
    import docker.errors

    cache = tmp_path / "cache"
    tag = f"reprobuild-hostile/kill:{uuid.uuid4().hex[:8]}"
    proc = _start_build(tiny, base_ref, tag, cache)
    container = None
    scratch = ""
    try:
        ctx = _wait_until_building(proc, docker_client)
        token = f"{proc.pid}-{_start_time(proc.pid)}"
        proc.kill()
        proc.communicate(timeout=60)
        assert ctx.exists(), "SIGKILL cannot clean up: the context dir must still be there"
        # What a kill in the probe and between build and untag leaves: a labelled container
        # and a scratch tag, both naming the dead run.
        container = docker_client.containers.create(
            base_ref, command=["true"], labels={OWNER_LABEL: token}
        )
        scratch = f"reprobuild-scratch/hostile-kill:{token}-{uuid.uuid4().hex[:16]}"
        repo, _, stag = scratch.rpartition(":")
        docker_client.images.get(base_ref).tag(repo, stag)

        again = run_cli(
            "image", str(tiny), "--base", base_ref, "--tag", tag, "-q",
            env={"XDG_CACHE_HOME": str(cache)},
        )  # fmt: skip
        assert again.returncode == 0, again.stderr[-3000:]
        notes = [ln for ln in again.stderr.splitlines() if ln.startswith("note: removed")]
        assert len(notes) == 1, again.stderr
        # (other runs killed on this engine may be named beside it)
        assert re.search(rf"killed \(pid (\d+, )*{proc.pid}\b", notes[0]), notes[0]
        assert not ctx.exists()
        with pytest.raises(docker.errors.NotFound):
            docker_client.containers.get(container.id)
        with pytest.raises(docker.errors.ImageNotFound):
            docker_client.images.get(scratch)
        assert _owned_engine(docker_client, proc.pid) == []
        # Reaped once: the run after says nothing.
        third = run_cli(
            "image", str(tiny), "--base", base_ref, "--tag", tag, "-q",
            env={"XDG_CACHE_HOME": str(cache)},
        )  # fmt: skip
        assert third.returncode == 0 and "note: removed" not in third.stderr, third.stderr
    finally:
        if proc.poll() is None:
            proc.kill()
        if container is not None:
            with contextlib.suppress(docker.errors.DockerException):
                container.remove(force=True)
        for ref in (scratch, tag):
            with contextlib.suppress(docker.errors.DockerException):
                if ref:
                    docker_client.images.remove(ref)


def test_live_runs_are_never_reaped(  # type: ignore[no-untyped-def]
    tiny: Path, tmp_path: Path, base_ref: str, docker_client
) -> None:
    """A container and a temp dir of a run that is still alive (this test process) stay."""
    import docker.errors

    token = f"{os.getpid()}-{_start_time(os.getpid())}"
    container = docker_client.containers.create(
        base_ref, command=["true"], labels={OWNER_LABEL: token}
    )
    held = Path(tempfile.mkdtemp(prefix=f"reprobuild-ctx-{token}-"))
    tag = f"reprobuild-hostile/live:{uuid.uuid4().hex[:8]}"
    try:
        proc = run_cli(
            "image", str(tiny), "--base", base_ref, "--tag", tag, "-q",
            env={"XDG_CACHE_HOME": str(tmp_path / "cache")},
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert f"pid {os.getpid()})" not in proc.stderr
        assert held.is_dir()
        docker_client.containers.get(container.id)
    finally:
        shutil.rmtree(held, ignore_errors=True)
        with contextlib.suppress(docker.errors.DockerException):
            container.remove(force=True)
        with contextlib.suppress(docker.errors.DockerException):
            docker_client.images.remove(tag)
