"""The buildah builder: daemonless, and the one that gives the same image for the same inputs.

``buildah bud --timestamp EPOCH`` sets the config's ``created``, every history time and the
mtime of every file in the new layers to the epoch, so with a render that writes nothing
time- or host-dependent (see templates/Dockerfile.j2) two builds give the same image ID on
any day. This module only runs the ``buildah`` binary; engine.py still owns the Docker engine.
Images go into the engine through ``buildah push IMAGE docker-archive:PIPE:NAME:TAG`` read by
the engine's ``docker load`` while buildah writes it (:func:`archive_stream`, build.py), which
keeps the image ID (the sha256 of the config, which the push does not change).
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import re
import resource
import shutil
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from reprobuild._util import leftovers
from reprobuild._util.envnum import env_count
from reprobuild.backends import procstream
from reprobuild.backends.engine import RunResult
from reprobuild.backends.procstream import run_captured, run_streamed
from reprobuild.bases.refs import ImageRef
from reprobuild.errors import BuildError, EngineError

Log = Callable[[str], None]
NETWORK_DEADLINE_S = 900.0  # a pull or a push that takes longer is stopped (overall, not idle)
INSTALL_HINT = (
    "install it (Debian/Ubuntu: `apt-get install buildah`; Fedora: `dnf install buildah`), "
    "or use --builder classic"
)


def _quiet(_: str) -> None:
    return None


def binary() -> str | None:
    return shutil.which("buildah")


def require() -> str:
    found = binary()
    if found is None:
        raise EngineError(
            "builder 'buildah' asked for, but `buildah` is not installed", hint=INSTALL_HINT
        )
    return found


def usable() -> bool:
    """buildah is installed and can open its storage as this user (``buildah info``: rootful,
    or rootless with subordinate IDs set up). What ``--builder auto`` asks; never fails."""
    cli = binary()
    if cli is None:
        return False
    try:
        _capture([cli, "info", "--format", "{{.store.GraphDriverName}}"], "buildah info", 30)
    except EngineError:
        return False
    return True


def version() -> str:
    """buildah's version, e.g. ``1.28.2`` (recorded in the manifest: another version may
    write other bytes)."""
    out = _capture([require(), "version", "--json"], "buildah version")
    try:
        data = json.loads(out)
        return str(data["version"])
    except (ValueError, KeyError, TypeError):
        raise EngineError(f"cannot read buildah's version from {out[:80]!r}") from None


def insecure(ref: ImageRef) -> bool:
    """A loopback registry speaks plain HTTP (Docker allows 127.0.0.0/8 by default too)."""
    if not ref.explicit_registry:
        return False
    host = ref.registry.rsplit(":", 1)[0] if ref.registry.count(":") == 1 else ref.registry
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _tls(ref: ImageRef) -> list[str]:
    return ["--tls-verify=false"] if insecure(ref) else []


def image_id(name: str) -> str | None:
    """The ID of the image ``name`` in buildah's storage, or None when there is none."""
    try:
        out = _capture(
            [require(), "inspect", "--type", "image", "--format", "{{.FromImageID}}", name],
            "buildah inspect",
        )
    except EngineError:
        return None
    return out.strip()


def stored_manifest(image: str) -> tuple[bytes, dict[str, Any]]:
    """The manifest buildah stored for ``image`` (for an image it committed: the layers as
    plain tar, by their diff IDs), byte for byte, and the image's OCI config, from one
    ``buildah inspect``."""
    out = _capture([require(), "inspect", "--type", "image", image], "buildah inspect")
    try:
        found = json.loads(out)
        manifest, config = found["Manifest"], found["OCIv1"]
    except (ValueError, KeyError, TypeError):
        manifest = config = None
    if not isinstance(manifest, str) or not manifest or not isinstance(config, dict):
        raise EngineError(f"cannot read the manifest of {image} from buildah")
    return manifest.encode(), config


def config(image: str) -> dict[str, Any]:
    """The OCI config of ``image`` in buildah's storage (labels, ``rootfs.diff_ids``)."""
    out = _capture([require(), "inspect", "--type", "image", image], "buildah inspect")
    try:
        found = json.loads(out)["OCIv1"]
    except (ValueError, KeyError, TypeError):
        raise EngineError(f"cannot read the config of {image} from buildah") from None
    if not isinstance(found, dict):
        raise EngineError(f"cannot read the config of {image} from buildah")
    return found


def has_image(name: str) -> bool:
    return image_id(name) is not None


def pull(ref: ImageRef, log: Log = _quiet) -> None:
    """Make the digest-pinned base present in buildah's storage."""
    pinned = ref.by_digest()
    if has_image(pinned):
        return
    log(f"buildah: pulling {pinned}")
    with _tmpdir("pull") as tmp:
        # A pull stopped at the wrong moment (Ctrl-C, SIGTERM, the deadline, its run killed)
        # leaves an image record without its manifest, on which every later listing of the
        # storage fails. What the listing stumbles on now is not this pull's; it is written
        # down (atomically) for the next run too, in case this one is killed.
        before = broken_image()
        mark = tmp / (BROKEN_BEFORE + ".part")
        mark.write_text(before or "")
        mark.rename(tmp / BROKEN_BEFORE)
        try:
            _stream(
                [require(), "pull", "--quiet", *_tls(ref), pinned],
                f"pulling {pinned}",
                log,
                tmp,
                deadline_s=NETWORK_DEADLINE_S,
            )
        except BaseException:
            remove_broken(before)
            raise


# How containers/storage names an image whose record it has but one of whose data items (the
# manifest, the config) it has not: written half-way by a pull or commit that was stopped.
# buildah's own advice is to remove it; until then `buildah images` fails.
# (In a log line the quotes come escaped.)
_BROKEN_RE = re.compile(r'locating item named \\?"[^"]*" for image with ID \\?"([0-9a-f]{64})')
BROKEN_BEFORE = "broken-before"  # in a pull's temp dir: the broken image seen before it
BROKEN_SETTLE_S = 1.0  # still broken this much later: no pull in flight (remove_broken)


def broken_image() -> str | None:
    """The ID of the first broken image buildah's listing names (see ``_BROKEN_RE``), or None
    when it names none (or there is no buildah)."""
    cli = binary()
    if cli is None:
        return None
    try:
        listing = subprocess.run(
            [cli, "images", "--quiet", "--no-trunc"],
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    # Whether the listing fails on it or only logs it ("exists in local storage but may be
    # corrupted") depends on what else the storage holds (buildah 1.28): both name it.
    found = _BROKEN_RE.search(listing.stderr)
    return found[1] if found else None


def remove_broken(before: str | None) -> list[str]:
    """Remove the broken images a stopped pull left: each one the listing names, as long as it
    is not ``before`` (the one it named before the pull: someone else's, left alone, and the
    listing cannot see past it). Return the IDs removed. Never fails: clean-up."""
    removed: list[str] = []
    while len(removed) < 16:
        image = broken_image()
        if image is None or image == before or image in removed:
            break
        time.sleep(BROKEN_SETTLE_S)  # a pull going on elsewhere has it broken for a moment only
        if broken_image() != image or not _rmi(image):
            break
        removed.append(image)
    return removed


# buildah (containers/image) on a base whose manifest names its layers with media types it
# cannot carry into the new image's manifest (seen with bases the classic builder made in
# Engine 26's containerd store, once pushed: uncompressed Docker layers, or Docker layer types
# under another manifest type)
UNCARRIED_LAYER_TYPE = "unsupported MIME type for compression"


def bud(
    context: Path,
    tag: str | None,
    *,
    epoch: int,
    log: Log = _quiet,
    no_cache: bool = False,
    network: bool = True,
    layers: bool = True,
    dockerfile: Path | None = None,
    platform: str | None = None,
) -> str:
    """Build ``context/Dockerfile`` (or ``dockerfile``, wherever it is) into buildah's
    storage as ``tag`` (None: untagged);
    return the image ID (64 hex, no prefix). One layer per step (``--layers``; ``layers=False``:
    one layer for the whole build, committed once, for a build no later one reuses); OCI format
    (Docker's format records the build container's ID and hostname); every time from
    ``epoch``; a failed build removes its working containers. An image built FROM an
    untagged one records only its ID in its history, where a tag would record the tag's
    (run-specific) name. ``platform`` (``linux/arm64``): the image's, where it is not the
    host's; its RUN steps then run under qemu-user (binfmt_misc)."""
    argv = [
        require(),
        "bud",
        *(["--platform", platform] if platform else []),
        f"--layers={str(layers).lower()}",
        "--format",
        "oci",
        "--timestamp",
        str(epoch),
        "--pull=never",
        "--force-rm",
        "--network",
        "private" if network else "none",
    ]
    argv += ulimits()
    if (stages := jobs()) > 1:  # 1 is buildah's own default
        argv += ["--jobs", str(stages)]
    if no_cache:
        argv.append("--no-cache")
    if dockerfile is not None:
        argv += ["--file", str(dockerfile)]
    # buildah's TMPDIR too: a RUN that failed or was stopped may leave a bind mount in it (seen
    # on Debian 13's buildah 1.39), unmounted below before the clean-up; should one still hold
    # the folder, the build's own error is the one line to say, and the next run reaps it
    with tempfile.TemporaryDirectory(
        prefix=leftovers.temp_prefix("iid"), ignore_cleanup_errors=True
    ) as tmp:
        iid = Path(tmp) / IID_FILE
        argv += ["--iidfile", str(iid), *(["-t", tag] if tag else []), str(context)]
        try:
            _stream(argv, "buildah build", log, Path(tmp), gentle=True)
        except BaseException as exc:
            # a stopped RUN's bind mounts, left in buildah's TMPDIR, would keep it on disk
            leftovers.unmount_under(Path(tmp))
            # Stopped (or failed) after buildah wrote the image: it is no one's.
            if iid.is_file():
                remove_images([tag or iid.read_text().strip().removeprefix("sha256:")])
            if (
                isinstance(exc, BuildError)
                and UNCARRIED_LAYER_TYPE in exc.log_tail
                and exc.hint is None
            ):
                raise BuildError(
                    str(exc),
                    log_tail=exc.log_tail,
                    hint="the base's manifest names its layers with media types buildah "
                    "cannot carry into a new image (as a base the classic builder made in "
                    "Engine 26's containerd store does, once pushed): push the base from a "
                    "BuildKit build (`docker buildx build --push`), or use `--builder buildkit`",
                ) from None
            raise
        return iid.read_text().strip().removeprefix("sha256:")


# How many of a Dockerfile's stages buildah builds at once (--jobs): the package groups of a
# layered venv are stages that need nothing of each other.
JOBS_VAR = "REPROBUILD_BUILDAH_JOBS"
MOST_JOBS = 64


def jobs(environ: Mapping[str, str] | None = None) -> int:
    """``REPROBUILD_BUILDAH_JOBS``, else :func:`default_jobs`; anything but a whole number from
    1 to 64 is one line naming it. The image is the same whatever it is: each stage's layers
    depend on its own inputs, and the final stage waits for them all."""
    return env_count(JOBS_VAR, default_jobs(), most=MOST_JOBS, environ=environ)


# The most stages at once by default: a group's install unpacks and writes its wheels, so the
# stages are bound by the disk as much as by the CPUs (docs/benchmarks.md, "buildah's stages
# side by side").
MOST_DEFAULT_JOBS = 4


def default_jobs() -> int:
    """One stage per CPU this process may run on, at most :data:`MOST_DEFAULT_JOBS`."""
    return max(1, min(len(os.sched_getaffinity(0)), MOST_DEFAULT_JOBS))


# The most buildah asks for on its own (define.RLimitDefaultValue in 1.39), and the process
# limit buildah 1.28 sets for itself at start (so a RUN step cannot be given more there).
NOFILE_MAX = 1 << 20
NPROC_MAX = 32768


def ulimits() -> list[str]:
    """``--ulimit`` arguments that keep the RUN steps' open-file and process limits within this
    process's hard limits. Without them buildah 1.39 (Debian 13) asks the runtime for 1048576
    of each, above a lower hard limit, which needs CAP_SYS_RESOURCE: where that is missing
    the first RUN fails with "error setting rlimit type 7: operation not permitted". A limit
    belongs to the build's processes, not to the image: no config, history or layer records
    it, so the image ID is the one built without these arguments."""
    args: list[str] = []
    for name, kind, cap in (
        ("nofile", resource.RLIMIT_NOFILE, NOFILE_MAX),
        ("nproc", resource.RLIMIT_NPROC, NPROC_MAX),
    ):
        hard = resource.getrlimit(kind)[1]
        value = cap if hard == resource.RLIM_INFINITY else min(hard, cap)
        args += ["--ulimit", f"{name}={value}:{value}"]
    return args


def push(
    image: str,
    destination: str,
    *,
    tls_verify: bool = True,
    compress: bool = True,
    log: Log = _quiet,
) -> str:
    """Push ``image`` to ``destination`` (``docker-archive:FILE:NAME:TAG`` or ``docker://REF``);
    return the pushed manifest's digest. ``compress=False``: layers go as plain tar."""
    with tempfile.TemporaryDirectory(prefix=leftovers.temp_prefix("iid")) as tmp:
        digestfile = Path(tmp) / "digest"
        argv = [require(), "push", "--quiet", "--digestfile", str(digestfile)]
        if not tls_verify:
            argv.append("--tls-verify=false")
        if not compress:
            argv.append("--disable-compression")
        _stream(
            [*argv, image, destination],
            f"pushing to {destination}",
            log,
            Path(tmp),
            deadline_s=NETWORK_DEADLINE_S,
        )
        return digestfile.read_text().strip()


@contextlib.contextmanager
def archive_stream(
    image: str, name: str, *, chunk: int = 1 << 20, deadline_s: float = NETWORK_DEADLINE_S
) -> Iterator[Iterator[bytes]]:
    """``buildah push IMAGE docker-archive:`` into a pipe, given as chunks of bytes for the
    engine's load to read while buildah writes them: the two overlap, where an archive file
    is written whole and then read whole (8.5 s and 12.0 s for a 1.3 GB image here).

    The archive names the image ``name``. Leaving the block waits for buildah; a push that
    failed raises EngineError with buildah's own message, also when it made the load fail
    first (a cut-off archive). buildah is stopped when the block is left early (the load
    failed, Ctrl-C) and after ``deadline_s`` in all, so a stalled push ends the read."""
    cli = require()
    with tempfile.TemporaryFile() as errors, _tmpdir() as tmp:
        read_end, write_end = os.pipe()
        try:
            proc = subprocess.Popen(
                [cli, "push", "--quiet", image, f"docker-archive:/dev/fd/{write_end}:{name}"],
                env=_env(tmp),
                pass_fds=(write_end,),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=errors,
            )
        except OSError as exc:
            os.close(read_end)
            raise EngineError(f"cannot start buildah push: {exc}") from None
        finally:
            os.close(write_end)  # buildah holds the only write end: its exit ends the stream
        expired = threading.Event()

        def expire() -> None:
            expired.set()
            procstream.kill(proc)

        timer = threading.Timer(deadline_s, expire)
        timer.daemon = True
        timer.start()

        def failure() -> EngineError | None:
            if procstream.reap(proc) in (None, 0):
                return None
            errors.seek(0)
            text = errors.read()[-2000:].decode(errors="replace").strip()
            last = text.splitlines()[-1] if text else f"exit {proc.returncode}"
            if expired.is_set():
                last = f"stopped after {deadline_s:.0f} s"
            return EngineError(f"buildah push of {image[:12]} into the engine failed: {last}")

        with os.fdopen(read_end, "rb") as reader:
            try:
                chunks = iter(lambda: reader.read1(chunk), b"")
                yield chunks
                for _ in chunks:  # whatever the load left, a chunk at a time (never all at once)
                    pass
                procstream.wait_for(proc, None)
            except BaseException:
                failed = None
                if procstream.wait_for(proc, 1) is not None:
                    failed = failure()  # a buildah that already failed explains the rest
                if failed is not None:
                    raise failed from None
                raise
            finally:
                timer.cancel()
                procstream.terminate(proc, 10)
        failed = failure()
        if failed is not None:
            raise failed


CACHE_REPO = "reprobuild-cache/"
IID_FILE = "iid"
IMAGE_PREFIX = "image:"  # Storage.owned_containers: an image, not a container
PULL_PREFIX = "pull:"  # ... and a dead run's pull, which may have left a broken image


def cache_name(project: str, variant: str) -> str:
    return f"{CACHE_REPO}{project.replace('/', '-')}:{variant}"


def keep(
    image: str, project: str, variant: str, *, held: str | None, drop: Sequence[str] = ()
) -> None:
    """Name a build's final (stamped) image ``reprobuild-cache/<project>:<variant>`` in
    buildah's storage. ``buildah rmi`` also removes the parents it leaves without a name or a
    child, and a build's cached layers are such parents: with no named image on top of the
    chain, removing the build's images would take the whole layer cache with it, and every
    build would be cold. The name goes on the stamped image, never on the scratch image under
    it: buildah writes the name of the image a step is built FROM into the history ("FROM
    <name>", else "FROM <short ID>"), so a named scratch image would change the next stamp.
    The name moves to the new image (a name is on one image at a time), then the previous
    build's image under it, if another, is removed, down to the layers the new one shares with
    it, in the same ``buildah rmi`` as ``drop`` (the run's own names: one process, not two).
    ``held``: the image under the name before the build (:func:`image_id`, read once by the
    caller; None: none). Never fails: a cache."""
    cli = binary()
    if cli is None or not image:
        remove_images(drop)
        return
    gone = list(drop)
    if held != image:  # else a rebuild that changed nothing: the image is the one named already
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run(
                [cli, "tag", image, cache_name(project, variant)],
                capture_output=True, check=False, timeout=120,
            )  # fmt: skip
        if held is not None:
            gone.insert(0, held)
    if gone:
        _rmi(*gone)


def forget(project: str, variant: str) -> None:
    """Remove the project's cached chain, down to the layers other names hold (what
    ``--no-cache`` asks for: start over). Never fails."""
    remove_images([cache_name(project, variant)])


def remove_images(names: Sequence[str]) -> None:
    """Remove images from buildah's storage (never fails: clean-up)."""
    for name in names:
        _rmi(name)


def _rmi(*names: str) -> bool:
    """``buildah rmi NAME...`` (each one removed, whatever becomes of the others); whether all
    went. Never fails: clean-up."""
    cli = binary()
    if cli is None:
        return False
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        done = subprocess.run([cli, "rmi", *names], capture_output=True, check=False, timeout=120)
        return done.returncode == 0
    return False


class Prober:
    """Runs the image probes in buildah's own storage (a working container, no network), so
    that a buildah build need not load its scratch image into the Docker engine (a
    docker-archive of the whole image and a ``docker load``: about 20 s for a 1.3 GB image
    here) just to probe it. The same two calls as :class:`reprobuild.backends.engine.Engine` offers
    the manifest code: ``run`` and ``inspect``."""

    def run(
        self,
        image: str,
        command: list[str],
        *,
        entrypoint: list[str] | None = None,
        environment: dict[str, str] | None = None,
        timeout: float = 600.0,
    ) -> RunResult:
        cli = require()
        # Named after this run, so that the next run removes it if this one is killed.
        container = leftovers.container_name(uuid.uuid4().hex[:16])
        with _tmpdir() as tmp:
            try:
                made = _gentle(
                    [
                        cli,
                        "from",
                        "--pull=never",
                        "--quiet",
                        *ulimits(),
                        "--name",
                        container,
                        image,
                    ],
                    "buildah from",
                    tmp,
                    timeout=600,
                )
                if made.returncode != 0:
                    raise EngineError(f"buildah from failed: {_last(made.stderr)}")
                argv = [cli, "run", "--network", "none"]
                for name, value in (environment or {}).items():
                    argv += ["--env", f"{name}={value}"]
                argv += [container, "--", *(entrypoint or []), *command]
                proc = _gentle(argv, "buildah run", tmp, timeout=timeout, ran="the probe")
                return RunResult(proc.returncode, proc.stdout, proc.stderr)
            finally:
                remove_container(container)

    def inspect(self, image: str) -> dict[str, Any]:
        """The image's config as the engine's inspect names it: ``{"Config": {"Env": [...],
        "Labels": {...}}}`` (what the GPU stack is read from)."""
        found = config(image).get("config")
        return {"Config": found if isinstance(found, dict) else {}}


class Storage:
    """buildah's storage as a :class:`leftovers.OwnedEngine`, so that the next run reaps what
    a run killed before its clean-up left there: the stamp images (``reprobuild-scratch/...``,
    named after their owner), the probe's working containers (``reprobuild-<owner>-...``),
    and the image a build finished after its run was gone (buildah is stopped with SIGINT,
    which it heeds only during a RUN step, so it may finish the build instead; the image ID
    is in the dead run's ``iid`` file; ``buildah rmi`` removes its record, and layers that
    other images are built on stay). buildah's build containers are not left behind: it is
    stopped only where it removes them itself (procstream.run_streamed ``gentle``), unless it
    ignores SIGINT for longer than the stop wait (60 s) and is killed. A pull its run's death
    stopped may have left a broken image (:func:`pull`): found from the dead run's temp dir.
    ``warn`` gets one line when the storage cannot be listed for a broken image not ours."""

    def __init__(self, warn: Callable[[str], None] | None = None) -> None:
        self._warn = warn

    def owned_containers(self) -> list[tuple[str, str]]:
        cli = binary()
        if cli is None:
            return []
        try:
            out = _capture([cli, "containers", "--format", "{{.ContainerName}}"], "buildah")
        except EngineError:
            return []
        owned = []
        for name in out.split():
            token = leftovers.container_owner(name)
            if token is not None:
                owned.append((name, token))
        for folder, token in leftovers.dead_temp_dirs("iid"):
            with contextlib.suppress(OSError):
                image = (folder / IID_FILE).read_text().strip().removeprefix("sha256:")
                if image and image_id(image) is not None:
                    owned.append((IMAGE_PREFIX + image, token))
        # A run killed while buildah pulled: the pull, stopped by the kernel's signal, may
        # have left a broken image. Looked for only once the run is known to be gone (in
        # remove_container), since a live pull's image is broken until it has finished.
        for folder, token in leftovers.dead_temp_dirs("pull"):
            if (folder / BROKEN_BEFORE).is_file():
                owned.append((PULL_PREFIX + str(folder), token))
        return owned

    def remove_container(self, container_id: str) -> bool:
        if container_id.startswith(IMAGE_PREFIX):
            image = container_id.removeprefix(IMAGE_PREFIX)
            remove_images([image])
            return image_id(image) is None
        if container_id.startswith(PULL_PREFIX):
            folder = Path(container_id.removeprefix(PULL_PREFIX))
            try:
                before = (folder / BROKEN_BEFORE).read_text().strip()
            except OSError:
                return False
            return bool(remove_broken(before or None))
        return remove_container(container_id)

    def tags_under(self, prefix: str) -> list[str]:
        cli = binary()
        if cli is None:
            return []
        listing = [cli, "images", "--noheading", "--format", "{{.Name}}:{{.Tag}}"]
        try:
            # Only the images named under the prefix (buildah names them localhost/...): a
            # store of a few hundred images takes seconds to list in full, at every build.
            out = _capture([*listing, "--filter", f"reference=localhost/{prefix}*"], "buildah")
        except EngineError:
            try:
                out = _capture(listing, "buildah images")
            except EngineError as exc:
                found = _BROKEN_RE.search(str(exc))
                if found is not None and self._warn is not None:
                    self._warn(
                        f"warning: buildah's storage holds a broken image {found[1][:12]} (its "
                        "record without its manifest: a pull or commit stopped half-way, not "
                        "by this run): `buildah images` fails and leftovers of killed runs "
                        f"cannot be found until `buildah rmi {found[1]}` removes it"
                    )
                return []
        names = (line.strip().removeprefix("localhost/") for line in out.splitlines())
        return [name for name in names if name.startswith(prefix)]

    def untag(self, ref: str) -> None:
        remove_images([ref])


def remove_container(name: str) -> bool:
    """``buildah rm NAME``; whether it is gone. Never fails: clean-up."""
    cli = binary()
    if cli is None:
        return False
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        done = subprocess.run([cli, "rm", name], capture_output=True, check=False, timeout=120)
        return done.returncode == 0
    return False


@contextlib.contextmanager
def _tmpdir(kind: str = "buildah") -> Iterator[Path]:
    """A temp dir named after this run for buildah's own temp files (its TMPDIR): buildah
    killed half-way leaves a ``buildahNNN`` dir there, which goes with ours, or with the next
    run's reaping when this one was killed too. ``kind`` "pull": a pull's (Storage)."""
    with tempfile.TemporaryDirectory(prefix=leftovers.temp_prefix(kind)) as tmp:
        yield Path(tmp)


def _env(tmp: Path) -> dict[str, str]:
    return {**os.environ, "TMPDIR": str(tmp)}


def _last(stderr: bytes) -> str:
    text = stderr.decode(errors="replace").strip()
    return text.splitlines()[-1][-300:] if text else "no message"


def _gentle(
    argv: list[str], what: str, tmp: Path, *, timeout: float, ran: str | None = None
) -> subprocess.CompletedProcess[bytes]:
    """Run a short buildah command (``from``, ``run``) captured and gently stopped
    (procstream.run_captured); ``ran`` names it in the timeout message."""
    try:
        return run_captured(argv, timeout=timeout, env=_env(tmp))
    except subprocess.TimeoutExpired:
        raise EngineError(f"{ran or what} ran over {timeout:.0f} s in buildah") from None
    except OSError as exc:
        raise EngineError(f"{what} failed: {exc}") from None


def _capture(argv: list[str], what: str, timeout: float = 60) -> str:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=timeout)
    except (OSError, subprocess.SubprocessError) as exc:
        raise EngineError(f"{what} failed: {exc}") from None
    if proc.returncode != 0:
        raise EngineError(f"{what} failed: {proc.stderr.strip()[-300:]}")
    return proc.stdout


def _stream(
    argv: list[str],
    what: str,
    log: Log,
    tmp: Path,
    *,
    deadline_s: float | None = None,
    gentle: bool = False,
) -> None:
    """Run buildah (procstream.run_streamed) with its temp files in ``tmp``. Interrupted, it
    is stopped and waited for: ``gentle`` (a build) with SIGINT, which it heeds where it can
    remove its working containers itself; a pull or a push, which have none, with SIGTERM."""
    run_streamed(
        argv, what, log, env=_env(tmp), deadline_s=deadline_s, stop_wait_s=60.0, gentle=gentle
    )
