"""Cleanup as a property, buildah builds (issue #30): a `reprobuild image --builder buildah`
stopped by a signal at any moment leaves nothing behind: no buildah working container, no temp
dir (buildah's own ``buildahNNN`` ones included), no stamp or scratch name in buildah's storage,
no tag in the engine; the exit code says which signal.

The signal is sent at several offsets (0, 10, 50, 100, 300 ms) after the first output line of
each phase (a RUN step, a COPY step, the build's COMMIT with the probe after it, the stamp
build, the stamp's COMMIT with the load into the engine after it): a fixed delay saw only one
moment, and the moments buildah is not expecting a signal (creating a step's container,
committing) are the ones that used to leave working containers. SIGINT goes to the process
group, as a Ctrl-C at a terminal does; SIGTERM to the process, as a CI's cancel does. The grid
is compact (each phase, offset and signal at least once) so the family takes minutes.

A pull stopped between writing an image's record and its manifest leaves a broken image on
which every `buildah images` fails: the stopped run removes it (and the listing must work
after each of these runs).

After SIGKILL, which cannot clean up, the next build removes what the dead run left in
buildah's storage too (its probe container, its stamp name, the image its build finished after
it was gone), in the same one ``note: removed N leftovers`` line as the engine's.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from helpers import DATA, published_image, run_cli, tar_context
from hostile_harness import assert_clean_failure

pytestmark = [pytest.mark.engine, pytest.mark.registry]


@pytest.fixture(autouse=True)
def _buildah_installed() -> None:
    """scripts/setup installs buildah: a machine without it fails here, never skips."""
    if shutil.which("buildah") is None:
        pytest.fail("buildah is not installed; run `scripts/setup`")


# (phase, the line that starts it)
PHASES = {
    # the venv is installed by package group: the foot ("[1/3]") adds the user ("STEP 3/4:
    # RUN") and installs the first group in place, each other group is installed in a stage
    # of its own ("[2/3] STEP 2/2: RUN"), and the final stage ("[3/3]", FROM the foot) copies
    # them in ("STEP 2/N: COPY --from")
    "run-step": r"^(\[\d+/\d+\] )?STEP 3/\d+: RUN ",
    "pip-step": r"^\[\d+/\d+\] STEP 2/2: RUN ",
    "copy-step": r"^(\[\d+/\d+\] )?STEP 2/\d+: COPY --from",
    "commit-probe": r"^COMMIT$",
    "stamp-build": r"^STEP 2/3: COPY manifest",
    "stamp-commit-load": r"^COMMIT reprobuild-scratch/",
}
GRID = [
    ("run-step", 0, signal.SIGINT),
    ("run-step", 50, signal.SIGTERM),
    ("pip-step", 10, signal.SIGTERM),
    ("pip-step", 100, signal.SIGINT),
    ("copy-step", 0, signal.SIGTERM),
    ("copy-step", 50, signal.SIGINT),
    ("commit-probe", 0, signal.SIGINT),
    ("commit-probe", 10, signal.SIGTERM),
    ("commit-probe", 300, signal.SIGINT),
    ("stamp-build", 0, signal.SIGTERM),
    ("stamp-build", 100, signal.SIGINT),
    ("stamp-commit-load", 0, signal.SIGINT),
    ("stamp-commit-load", 50, signal.SIGTERM),
    ("stamp-commit-load", 300, signal.SIGTERM),
]


def _buildah(*args: str, check: bool = True) -> str:
    """buildah's output; a listing that fails fails the test (an empty one would pass every
    check of what was left: a broken image in the storage makes `buildah images` fail)."""
    done = subprocess.run(["buildah", *args], capture_output=True, text=True, check=False)
    assert done.returncode == 0 or not check, f"buildah {' '.join(args)}: {done.stderr[-500:]}"
    return done.stdout


def _containers() -> dict[str, str]:
    """buildah's working containers: ID -> name."""
    out = _buildah(
        "containers",
        "--notruncate",
        "--noheading",
        "--format",
        "{{.ContainerID}} {{.ContainerName}}",
    )
    return dict(line.split(" ", 1) for line in out.splitlines() if " " in line)


def _names() -> set[str]:
    out = _buildah("images", "--format", "{{.Name}}:{{.Tag}}")
    return {line.strip() for line in out.splitlines()}


def _engine_tags(docker_client) -> set[str]:  # type: ignore[no-untyped-def]
    """The engine's tags, in one API call (images.list() inspects each image afterwards, and
    fails when another session removes one in between)."""
    return {t for image in docker_client.api.images() for t in image.get("RepoTags") or []}


def _owned_temps(pid: int) -> list[Path]:
    tmp = Path(tempfile.gettempdir())
    return [p for p in tmp.iterdir() if p.name.startswith("reprobuild-") and f"-{pid}-" in p.name]


def _start(root: Path, base_ref: str, tag: str, cache: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "SOURCE_DATE_EPOCH": "0", "XDG_CACHE_HOME": str(cache)}
    return subprocess.Popen(
        [sys.executable, "-m", "reprobuild", "image", str(root), "--base", base_ref,
         "--tag", tag, "--no-cache", "--builder", "buildah"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        start_new_session=True,  # its own process group, as a shell gives a job
        preexec_fn=_default_signals,
    )  # fmt: skip


def _default_signals() -> None:
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)


def _read_until(proc: subprocess.Popen[str], pattern: str, seen: list[str]) -> threading.Thread:
    """Read stderr line by line into ``seen`` (in a thread, to the end); return when a line
    matches ``pattern`` (the thread keeps reading so the pipe never fills)."""
    found = threading.Event()
    assert proc.stderr is not None
    stream = proc.stderr

    def reader() -> None:
        for line in stream:
            seen.append(line)
            if re.match(pattern, line):
                found.set()
        found.set()

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    assert found.wait(timeout=600), "the phase never started"
    return thread


def _wait_or_explain(proc: subprocess.Popen[str], seen: list[str], seconds: float = 180) -> None:
    """Wait for the stopped build; one that does not end fails with what it was doing: its
    last lines and its process tree (state, kernel wait channel), for a hang seen only in CI."""
    try:
        proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        ps = ["ps", "-e", "--forest", "-o", "pid,ppid,sid,stat,wchan:24,etimes,args"]
        listing = subprocess.run(ps, capture_output=True, text=True, check=False).stdout
        tree = [ln for ln in listing.splitlines() if re.search(r"buildah|reprobuild|runc|crun", ln)]
        stack = ""
        spy = Path(sys.executable).with_name("py-spy")  # the test extra's
        if spy.exists():
            dump = [str(spy), "dump", "--pid", str(proc.pid)]
            stack = subprocess.run(dump, capture_output=True, text=True, check=False).stdout
        pytest.fail(
            f"the build did not end within {seconds:g} s of the signal\n"
            + "its processes:\n" + "\n".join(tree) + f"\nits stack:\n{stack}"
            + "its last lines:\n" + "".join(seen[-15:])
        )  # fmt: skip


def _close(proc: subprocess.Popen[str]) -> None:
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            with contextlib.suppress(OSError, ValueError):
                stream.close()


def _eventually(check: Callable[[], None], seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            check()
            return
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


@pytest.fixture(scope="module")
def own_base(base_ref: str, docker_client) -> Iterator[tuple[str, str]]:  # type: ignore[no-untyped-def]
    """A base of this module's own (the test base and one layer more) and that layer's diff
    ID: every image of these builds descends from it, which tells their working containers
    from those of other builds on the same machine (other sessions build the same project
    on the same base, and reproducibly, so into the same image IDs)."""
    context = tar_context(
        {"Dockerfile": (f"FROM {base_ref}\nRUN echo {uuid.uuid4().hex} > /id\n".encode(), 0o644)}
    )
    with published_image(docker_client, context, "buildah-signals") as base:
        layer = docker_client.images.get(base).attrs["RootFS"]["Layers"][-1]
        try:
            yield base, layer
        finally:
            subprocess.run(["buildah", "rmi", base], capture_output=True, check=False)


def _ours(layer: str, containers: set[str]) -> set[str]:
    """The containers among ``containers`` whose image is built on ``layer``."""
    by_image = _buildah(
        "containers", "--notruncate", "--noheading", "--format", "{{.ContainerID}} {{.ImageID}}"
    )
    found = set()
    for line in by_image.splitlines():
        container, _, image = line.partition(" ")
        if container in containers:
            diffs = _buildah(
                "inspect",
                "--type",
                "image",
                "--format",
                "{{.OCIv1.RootFS.DiffIDs}}",
                image,
                check=False,  # the image may have gone since
            )
            if layer in diffs:
                found.add(container)
    return found


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    shutil.copytree(DATA / "projects" / "tiny", root)
    return root


@pytest.mark.parametrize(
    ("phase", "offset_ms", "signum"),
    GRID,
    ids=[f"{p}-{ms}ms-{signal.Signals(s).name}" for p, ms, s in GRID],
)
def test_signal_in_every_phase_of_a_buildah_build_leaves_nothing(  # type: ignore[no-untyped-def]
    phase: str,
    offset_ms: int,
    signum: int,
    tiny: Path,
    tmp_path: Path,
    own_base: tuple[str, str],
    docker_client,
) -> None:
    base_ref, layer = own_base
    tag = f"reprobuild-hostile/buildah-signal:{uuid.uuid4().hex[:8]}"
    containers = set(_containers())
    names = _names()
    tags = _engine_tags(docker_client)
    proc = _start(tiny, base_ref, tag, tmp_path / "cache")
    seen: list[str] = []
    try:
        reader = _read_until(proc, PHASES[phase], seen)
        if proc.poll() is not None:
            pytest.fail("the build ended before the phase: " + "".join(seen[-20:]))
        time.sleep(offset_ms / 1000)
        if signum == signal.SIGINT:
            os.killpg(proc.pid, signum)  # Ctrl-C: the whole foreground group
        else:
            proc.send_signal(signum)
        _wait_or_explain(proc, seen)
        reader.join(timeout=30)
        out = proc.stdout.read() if proc.stdout else ""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        _close(proc)
    done = subprocess.CompletedProcess(proc.args, proc.returncode, out, "".join(seen))
    name = signal.Signals(signum).name
    assert_clean_failure(
        done, f"interrupted by {name}", exit_code=128 + signum, build_log_allowed=True
    )

    def nothing_left() -> None:
        assert _owned_temps(proc.pid) == []
        left = _ours(layer, set(_containers()) - containers)
        assert left == set(), "buildah working containers left"
        assert {n for n in _names() - names if f":{proc.pid}-" in n} == set()
        now = _engine_tags(docker_client)
        assert tag not in now
        assert {t for t in now - tags if f":{proc.pid}-" in t} == set()

    _eventually(nothing_left)


@pytest.mark.parametrize(
    ("offset_ms", "signum"),
    [
        (0, signal.SIGTERM),
        (50, signal.SIGINT),
        (300, signal.SIGTERM),
    ],
    ids=["0ms-SIGTERM", "50ms-SIGINT", "300ms-SIGTERM"],
)
def test_signal_while_buildah_pulls_the_base_leaves_nothing(  # type: ignore[no-untyped-def]
    offset_ms: int, signum: int, tiny: Path, tmp_path: Path, base_ref: str, docker_client
) -> None:
    """The pull phase: a base of its own (one layer more than the test base), so buildah
    must pull it from the loopback registry."""
    context = tar_context(
        {"Dockerfile": (f"FROM {base_ref}\nRUN echo {uuid.uuid4().hex} > /id\n".encode(), 0o644)}
    )
    with published_image(docker_client, context, "buildah-pull") as base:
        layer = docker_client.images.get(base).attrs["RootFS"]["Layers"][-1]
        try:
            containers = set(_containers())
            tag = f"reprobuild-hostile/buildah-pull:{uuid.uuid4().hex[:8]}"
            proc = _start(tiny, base, tag, tmp_path / "cache")
            seen: list[str] = []
            try:
                reader = _read_until(proc, r"^buildah: pulling ", seen)
                time.sleep(offset_ms / 1000)
                if signum == signal.SIGINT:
                    os.killpg(proc.pid, signum)
                else:
                    proc.send_signal(signum)
                _wait_or_explain(proc, seen)
                reader.join(timeout=30)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
                _close(proc)
            done = subprocess.CompletedProcess(proc.args, proc.returncode, "", "".join(seen))
            name = signal.Signals(signum).name
            assert_clean_failure(
                done, f"interrupted by {name}", exit_code=128 + signum, build_log_allowed=True
            )

            def nothing_left() -> None:
                assert _owned_temps(proc.pid) == []
                # only containers on this base count: other builds may share buildah's storage
                assert _ours(layer, set(_containers()) - containers) == set()
                # no image record without its manifest (buildah pull stopped between the
                # two), on which every `buildah images` fails
                _names()

            _eventually(nothing_left)
        finally:
            subprocess.run(["buildah", "rmi", base], capture_output=True, check=False)


def _start_time(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[19])


def _runs_for(token: str) -> list[int]:
    """Processes whose TMPDIR is a temp dir of the run ``token`` (its buildah)."""
    found = []
    for proc_dir in Path("/proc").iterdir():
        if not proc_dir.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            environ = (proc_dir / "environ").read_bytes().split(b"\0")
            if any(e.startswith(b"TMPDIR=") and f"-{token}-".encode() in e for e in environ):
                found.append(int(proc_dir.name))
    return found


def test_sigkill_leftovers_in_buildah_storage_are_reaped_by_the_next_run(  # type: ignore[no-untyped-def]
    tiny: Path, tmp_path: Path, own_base: tuple[str, str], docker_client
) -> None:
    """SIGKILL in a RUN step: buildah, told by the kernel (SIGINT as its parent-death
    signal), stops that step and removes its container itself. What a kill at other moments
    leaves is made here under the dead run's name, as the engine test does: a probe container,
    a stamp name and a finished build's image recorded in its iid file. The next build removes
    them all and says so in one note line; the build after says nothing."""
    base_ref, layer = own_base
    cache = tmp_path / "cache"
    tag = f"reprobuild-hostile/buildah-kill:{uuid.uuid4().hex[:8]}"
    containers = set(_containers())
    proc = _start(tiny, base_ref, tag, cache)
    seen: list[str] = []
    made: list[str] = []
    iid_dir: Path | None = None
    try:
        _read_until(proc, PHASES["pip-step"], seen)
        token = f"{proc.pid}-{_start_time(proc.pid)}"
        proc.kill()
        proc.wait(timeout=60)
        # The orphaned buildah ends on its own: it stops the step at the SIGINT the kernel
        # sends it at our death, or (ignoring it between steps) finishes the build.
        deadline = time.monotonic() + 300
        while _runs_for(token) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not _runs_for(token), "buildah still runs 300 s after its run was killed"
        _close(proc)
        left = _ours(layer, set(_containers()) - containers)
        assert left == set(), "buildah left its build container"
        # What a kill at other moments leaves, named after the dead run.
        probe = f"reprobuild-{token}-{uuid.uuid4().hex[:16]}"
        subprocess.run(["buildah", "from", "--pull=never", "--quiet", "--name", probe, base_ref],
                       check=True, capture_output=True)  # fmt: skip
        made.append(probe)
        image = subprocess.run(
            ["buildah", "commit", "--quiet", probe], check=True, capture_output=True, text=True
        ).stdout.strip()
        iid_dir = Path(tempfile.mkdtemp(prefix=f"reprobuild-iid-{token}-"))
        (iid_dir / "iid").write_text(f"sha256:{image}")
        stamp = f"reprobuild-scratch/hostile-kill:{token}-{uuid.uuid4().hex[:16]}"
        subprocess.run(["buildah", "tag", base_ref, stamp], check=True, capture_output=True)

        again = run_cli(
            "image", str(tiny), "--base", base_ref, "--tag", tag, "-q", "--builder", "buildah",
            env={"XDG_CACHE_HOME": str(cache)},
        )  # fmt: skip
        assert again.returncode == 0, again.stderr[-3000:]
        notes = [ln for ln in again.stderr.splitlines() if ln.startswith("note: removed")]
        assert len(notes) == 1, again.stderr
        assert re.search(rf"killed \(pid (\d+, )*{proc.pid}\b", notes[0]), notes[0]
        count = int(re.search(r"removed (\d+) leftover", notes[0])[1])  # type: ignore[index]
        assert count >= 4, notes[0]  # probe container, image, stamp name, iid temp dir
        assert probe not in _containers().values()
        assert not iid_dir.exists()
        assert not _buildah("images", "-q", "--filter", f"id={image}").strip()
        assert f"localhost/{stamp}" not in _names()
        third = run_cli(
            "image", str(tiny), "--base", base_ref, "--tag", tag, "-q", "--builder", "buildah",
            env={"XDG_CACHE_HOME": str(cache)},
        )  # fmt: skip
        assert third.returncode == 0 and "note: removed" not in third.stderr, third.stderr
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        _close(proc)
        for name in made:
            subprocess.run(["buildah", "rm", name], capture_output=True, check=False)
        if iid_dir is not None:
            shutil.rmtree(iid_dir, ignore_errors=True)
        with contextlib.suppress(Exception):
            docker_client.images.remove(tag)
