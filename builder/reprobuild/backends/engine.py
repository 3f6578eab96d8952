"""The only module that talks to the Docker engine.

Builds go through one of three builders, chosen by ``--builder`` (default ``auto``):
- ``buildx``: ``docker buildx build --load`` (BuildKit; needs the buildx plugin);
- ``buildkit``: the engine's built-in BuildKit: ``DOCKER_BUILDKIT=1 docker build`` with a
  client that still speaks BuildKit without buildx (Docker CLI < 23, e.g. Debian 12's 20.10
  client), else ``docker buildx build --builder default`` (the engine's own BuildKit through
  buildx's docker driver: Debian 13 has a 26.1 client and buildx 0.13, and no older client);
- ``classic``: the engine's classic builder through the Docker SDK (works on every engine).
``auto`` (build.choose_builder) picks buildah where it works, else the engine's BuildKit where
it builds reproducibly (:meth:`Engine.buildkit_reproducible`), else buildx when present, else
classic.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import docker
import docker.errors
import docker.types
import docker.utils
import requests

from reprobuild._util import leftovers
from reprobuild._util.threads import start as start_thread
from reprobuild.backends.builders import Builder
from reprobuild.backends.procstream import run_streamed
from reprobuild.bases.refs import DIGEST_RE, ImageRef
from reprobuild.errors import BasePullError, BuildError, EngineError, EngineUnavailableError

Log = Callable[[str], None]
_TAIL = 25


def _quiet(_: str) -> None:
    return None


@dataclass(frozen=True)
class RunResult:
    exit_code: int
    stdout: bytes
    stderr: bytes


@dataclass(frozen=True)
class SealedRun:
    """How :meth:`Engine.run_sealed` runs a container: as ``user``, with ``environment``,
    for at most ``timeout`` seconds, then reads back ``fetch`` (at most ``max_bytes``)."""

    user: str
    environment: tuple[tuple[str, str], ...] = ()
    timeout: float = 600.0
    fetch: str | None = None
    max_bytes: int = 1 << 20


@dataclass(frozen=True)
class SealedResult:
    run: RunResult
    fetched: bytes | None
    timed_out: bool = False


@dataclass(frozen=True)
class Bind:
    """A host path mounted into a container."""

    host: Path
    container: str
    read_only: bool = False


@dataclass(frozen=True)
class Gpus:
    """GPUs for a container, as ``docker run --gpus`` takes them: ``count`` -1 for all, or
    ``device_ids`` naming them."""

    count: int
    device_ids: tuple[str, ...] = ()


class StreamingContainer:
    """A started container whose output is read as it comes (``reprobuild verify``)."""

    def __init__(self, container: Any) -> None:
        self._container = container

    def stdout(self) -> Iterator[bytes]:
        stream: Iterator[bytes] = self._container.logs(
            stdout=True, stderr=False, stream=True, follow=True
        )
        return stream

    def stderr(self) -> Iterator[bytes]:
        stream: Iterator[bytes] = self._container.logs(
            stdout=False, stderr=True, stream=True, follow=True
        )
        return stream

    def wait(self) -> int:
        return int(self._container.wait().get("StatusCode", -1))

    def kill(self) -> None:
        with contextlib.suppress(docker.errors.DockerException):
            self._container.kill()

    def terminate(self) -> None:
        """SIGTERM, as ``docker stop`` sends first (``verify --resume-at``)."""
        with contextlib.suppress(docker.errors.DockerException):
            self._container.kill(signal="SIGTERM")

    def oom_killed(self) -> bool | None:
        """The engine's word (State.OOMKilled) on whether the kernel killed it for memory;
        None when the engine cannot say."""
        try:
            self._container.reload()
        except docker.errors.DockerException:
            return None
        state = self._container.attrs.get("State") or {}
        value = state.get("OOMKilled")
        return value if isinstance(value, bool) else None

    def close(self) -> None:
        with contextlib.suppress(docker.errors.DockerException):
            self._container.remove(force=True)


_T = TypeVar("_T")
PULL_DEADLINE_ENV = "REPROBUILD_PULL_TIMEOUT"
DEFAULT_PULL_DEADLINE = 1800.0


def pull_deadline() -> float:
    """How long a base pull may take in all, from ``$REPROBUILD_PULL_TIMEOUT`` (seconds)."""
    raw = os.environ.get(PULL_DEADLINE_ENV, "").strip()
    if not raw:
        return DEFAULT_PULL_DEADLINE
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 < value <= 86400:
        raise EngineError(
            f"{PULL_DEADLINE_ENV}={raw[:40]!r} is not a number of seconds between 0 and 86400"
        )
    return value


def _within(seconds: float, work: Callable[[], _T], message: str, *, hint: str) -> _T:
    """``work()``'s result, or EngineError(message) once ``seconds`` have passed.

    The engine's client bounds each socket read, not a call: a pull from a registry that
    stalls waits on the engine as long as the engine waits. The call runs in a daemon
    thread; on expiry the command fails and the thread is left to the process's exit."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = work()
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=run, name="reprobuild-engine-wait", daemon=True)
    start_thread(thread)
    thread.join(seconds)
    if thread.is_alive():
        raise EngineError(message, hint=hint)
    if "error" in box:
        raise box["error"]
    value: _T = box["value"]
    return value


def _tar_kind(member: tarfile.TarInfo | None) -> str:
    """What a tar member is, in words (for "X is a symlink, not a regular file")."""
    if member is None:
        return "missing from the archive"
    if member.issym():
        return f"a symlink (to {member.linkname[:80]!r})"
    if member.islnk():
        return "a hard link"
    if member.isdir():
        return "a directory"
    return "a special file"


@dataclass(frozen=True)
class PushOutcome:
    """What a push did: the registry's manifest digest, and each layer (by the first 12 hex
    of its diff ID, as the engine names it) ``sent`` or ``present`` (the registry had it)."""

    digest: str
    layers: dict[str, str]


_PUSHED_DIGEST_RE = re.compile(r"\bdigest: (sha256:[0-9a-f]{64}) size: \d+")
"""A push's last status line, ``TAG: digest: sha256:... size: N``: where the engine's
containerd image store names the pushed digest (it sends no ``aux``; moby#48331)."""


def _layer_done(status: str) -> bool:
    """A push's last word on a layer: sent, or the registry had it (or mounted it)."""
    return status in ("Pushed", "Layer already exists") or status.startswith("Mounted from")


def _one_line(text: str) -> str:
    return " ".join(text.split())[:300]


class Engine:
    """A connection to one Docker engine (DOCKER_HOST or the local socket)."""

    def __init__(self, client: docker.DockerClient | None = None, *, connections: int = 10) -> None:
        self._client = client
        self._connections = connections  # a streaming run holds ~3 connections open at once
        self._buildkit_reproducible: tuple[bool, str] | None = None
        self._transfer: docker.DockerClient | None = None
        self._injected = client is not None

    @property
    def client(self) -> docker.DockerClient:
        if self._client is None:
            try:
                client = docker.from_env(max_pool_size=self._connections)
                client.ping()
            except docker.errors.DockerException as exc:
                where = os.environ.get("DOCKER_HOST", "the local socket")
                raise EngineUnavailableError(
                    f"no Docker engine answers at {where}: {_short(exc)}",
                    hint="start one (`sudo systemctl start docker`, or `scripts/setup-engine`)",
                ) from None
            self._client = client
        return self._client

    @property
    def transfer_client(self) -> docker.DockerClient:
        """A client whose requests wait as long as the engine takes: for moving whole images
        (load, save). A CUDA-wheel image is several GB, and the engine answers a load only
        when it has unpacked every layer: docker-py's default 60 s read timeout failed such
        a load on a loaded 2-CPU host (Engine 26.1.5). Every other call keeps the default."""
        if self._transfer is None:
            client = self.client  # the engine answers (or the one error says it does not)
            if self._injected:  # a client handed in (tests) is used as it is
                return client
            self._transfer = docker.from_env(timeout=None, max_pool_size=2)
        return self._transfer

    # ---- images ----------------------------------------------------------------------------
    def image_id(self, ref: str) -> str | None:
        try:
            return str(self.client.images.get(ref).id)
        except docker.errors.ImageNotFound:
            return None
        except docker.errors.APIError as exc:
            raise EngineError(f"cannot inspect image {ref!r}: {_short(exc)}") from None

    def layer_chains(self, label: str, value: str) -> list[list[str]]:
        """The layers (diff IDs, bottom first) of every image labelled ``label=value``."""
        try:
            images = self.client.images.list(filters={"label": f"{label}={value}"})
        except docker.errors.DockerException as exc:
            raise EngineError(f"cannot list images: {_short(exc)}") from None
        return [_rootfs_layers(image.attrs) for image in images]

    def layers(self, ref: str) -> list[str]:
        """The layers of image ``ref`` (diff IDs, bottom first); empty when it is not here."""
        try:
            return _rootfs_layers(self.client.images.get(ref).attrs)
        except docker.errors.ImageNotFound:
            return []
        except docker.errors.APIError as exc:
            raise EngineError(f"cannot inspect image {ref!r}: {_short(exc)}") from None

    def inspect(self, ref: str) -> dict[str, Any]:
        try:
            attrs: dict[str, Any] = self.client.images.get(ref).attrs
            return attrs
        except docker.errors.ImageNotFound:
            raise EngineError(
                f"no image {ref!r} on this engine", hint="build it with `reprobuild image`"
            ) from None
        except docker.errors.APIError as exc:
            raise EngineError(f"cannot inspect image {ref!r}: {_short(exc)}") from None

    def ensure_base(self, ref: ImageRef, log: Log = _quiet) -> str:
        """Make the digest-pinned base present locally, pulling it by digest when absent."""
        pinned = ref.by_digest()
        found = self.image_id(pinned)
        if found:
            return found
        log(f"pulling {pinned}")
        repo = f"{ref.registry}/{ref.repository}" if ref.explicit_registry else ref.name
        seconds = pull_deadline()
        client = self.client
        try:
            image = _within(
                seconds,
                lambda: client.images.pull(repo, tag=ref.digest),
                f"pulling base {pinned} did not finish within {seconds:g}s",
                hint=f"check the registry answers, or set {PULL_DEADLINE_ENV} (seconds)",
            )
        except (docker.errors.APIError, requests.RequestException) as exc:
            raise BasePullError(
                f"cannot pull base {pinned}: {_short(exc)}",
                hint="check the registry is reachable, or load the image with `docker load`",
            ) from None
        return str(image.id)

    def save(self, image: str, dest: Path) -> None:
        """``docker save`` of one image into the file ``dest``."""
        try:
            with dest.open("wb") as out:
                for chunk in self.transfer_client.images.get(image).save(named=False):
                    out.write(chunk)
        except (docker.errors.DockerException, requests.RequestException) as exc:
            raise EngineError(f"cannot save image {image!r}: {_short(exc)}") from None

    def load(self, archive: Path | Iterable[bytes]) -> None:
        """``docker load`` of a docker-archive, into the engine this client talks to
        (``DOCKER_HOST`` included): a file, or chunks of one as they are written (sent
        chunked, so the engine reads while the writer writes)."""
        what = archive.name if isinstance(archive, Path) else "the image archive"
        try:
            if isinstance(archive, Path):
                with archive.open("rb") as data:
                    self.transfer_client.images.load(data)
            else:
                self.transfer_client.images.load(archive)
        except (OSError, docker.errors.DockerException, requests.RequestException) as exc:
            raise EngineError(f"cannot load {what} into the engine: {_short(exc)}") from None

    def entrypoint_of(self, image: str) -> tuple[str, ...]:
        """The image's ENTRYPOINT as configured (empty when it has none)."""
        entry = (self.inspect(image).get("Config") or {}).get("Entrypoint") or []
        return tuple(str(part) for part in entry)

    def tag(self, image: str, ref: str) -> None:
        repo, _, tag = ref.rpartition(":") if ":" in ref.rsplit("/", 1)[-1] else (ref, "", "latest")
        try:
            self.client.images.get(image).tag(repo, tag)
        except docker.errors.APIError as exc:
            raise EngineError(f"cannot tag {image} as {ref}: {_short(exc)}") from None

    def push(self, name: str, tag: str, log: Log = _quiet) -> PushOutcome:
        """Push ``name:tag`` (tagged on this engine) to its registry. The engine sends only
        the layers the registry lacks (it asks for each blob first). Returns the registry's
        manifest digest and what became of each layer, by its short diff ID."""
        layers: dict[str, str] = {}
        digest = ""
        try:
            stream = self.transfer_client.api.push(name, tag=tag, stream=True, decode=True)
            for message in stream:
                if not isinstance(message, dict):
                    continue
                if message.get("error"):
                    raise EngineError(
                        f"pushing {name}:{tag} failed: {_one_line(str(message['error']))}",
                        hint="check that the registry answers and that you are logged in "
                        "to it (`docker login`)",
                    )
                aux = message.get("aux")
                if isinstance(aux, dict) and isinstance(aux.get("Digest"), str):
                    digest = aux["Digest"]
                layer, status = message.get("id"), message.get("status")
                said = _PUSHED_DIGEST_RE.search(status) if isinstance(status, str) else None
                if said is not None and not digest:  # the containerd store says it only here
                    digest = said.group(1)
                if isinstance(layer, str) and isinstance(status, str) and _layer_done(status):
                    layers[layer] = "sent" if status == "Pushed" else "present"
                    log(f"  {layer}: {status}")
        except (docker.errors.DockerException, requests.RequestException) as exc:
            raise EngineError(f"pushing {name}:{tag} failed: {_short(exc)}") from None
        if not DIGEST_RE.fullmatch(digest):
            raise EngineError(f"pushing {name}:{tag}: the engine named no manifest digest")
        return PushOutcome(digest, layers)

    def tags_under(self, prefix: str) -> list[str]:
        """Every tag on the engine that starts with ``prefix`` (e.g. ``reprobuild-scratch/``)."""
        try:
            # One request: the client's images.list() inspects every image in turn (0.46 s
            # for 77 images here, at every build's reap)
            images = self.client.api.images()
        except docker.errors.DockerException as exc:
            raise EngineError(f"cannot list images: {_short(exc)}") from None
        return sorted(
            t
            for image in images
            for t in (image.get("RepoTags") or [])
            if isinstance(t, str) and t.startswith(prefix)
        )

    def untag(self, ref: str) -> None:
        """Remove a tag (never fails: used in clean-up paths)."""
        with contextlib.suppress(docker.errors.DockerException):
            self.client.images.remove(ref, noprune=False)

    def read_file(self, image: str, path: str, *, max_bytes: int = 16 * 1024 * 1024) -> bytes:
        """Read one regular file out of an image without running it.

        An image is untrusted input: a symlink, directory or device at ``path`` is refused (a
        link could point anywhere), and so is a file larger than ``max_bytes``; the archive
        is read at most that far (plus tar's own headers)."""
        try:
            container = self.client.containers.create(
                image, entrypoint=["/nonexistent"], command=[], labels=leftovers.labels()
            )
        except docker.errors.DockerException as exc:
            raise EngineError(f"cannot open image {image!r}: {_short(exc)}") from None
        try:
            return self._read_archive(container.id, image, path, max_bytes)
        except tarfile.TarError as exc:
            raise EngineError(f"cannot read {path} out of {image}: {_short(exc)}") from None
        except docker.errors.NotFound:
            raise EngineError(f"{image} has no {path}") from None
        except (docker.errors.APIError, requests.RequestException) as exc:
            raise EngineError(f"cannot read {path} out of {image}: {_short(exc)}") from None
        finally:
            with contextlib.suppress(docker.errors.DockerException, requests.RequestException):
                container.remove(force=True)

    def _read_archive(self, container: str, image: str, path: str, max_bytes: int) -> bytes:
        # docker-py's get_archive hides the response, so a refused archive could not be
        # closed unread; the engine then blocks writing it and holds the container. Ask the
        # same endpoint directly and close the response whatever happens.
        api = self.client.api
        url = api._url("/containers/{0}/archive", container)
        resp = api._get(url, params={"path": path}, stream=True)
        with contextlib.closing(resp):
            api._raise_for_status(resp)
            too_big = EngineError(f"{path} in {image} is larger than {max_bytes} bytes")
            stat = docker.utils.decode_json_header(
                resp.headers.get("X-Docker-Container-Path-Stat") or "e30="
            )
            if isinstance(stat, dict) and int(stat.get("size") or 0) > max_bytes:
                raise too_big
            buf = io.BytesIO()
            for chunk in resp.iter_content(64 * 1024):
                buf.write(chunk)
                if buf.tell() > max_bytes + 64 * 1024:
                    raise too_big
        buf.seek(0)
        with tarfile.open(fileobj=buf) as tar:
            member = tar.next()
            if member is None or not member.isreg():
                kind = _tar_kind(member)
                raise EngineError(f"{path} in {image} is {kind}, not a regular file")
            if member.size > max_bytes:
                raise too_big
            fh = tar.extractfile(member)
            if fh is None:
                raise EngineError(f"{path} in {image} is not a regular file")
            return fh.read()

    # ---- containers ------------------------------------------------------------------------
    def owned_containers(self) -> list[tuple[str, str]]:
        """(id, owner token) of every container carrying reprobuild's owner label."""
        try:
            # sparse: one request, no per-container inspect that races with removals
            found = self.client.containers.list(
                all=True, sparse=True, filters={"label": leftovers.OWNER_LABEL}
            )
        except docker.errors.DockerException as exc:
            raise EngineError(f"cannot list containers: {_short(exc)}") from None
        return [
            (str(c.id), str((c.attrs.get("Labels") or {}).get(leftovers.OWNER_LABEL, "")))
            for c in found
        ]

    def remove_container(self, container_id: str) -> bool:
        """Remove a container, running or not; False when it could not be removed."""
        try:
            self.client.containers.get(container_id).remove(force=True)
        except docker.errors.NotFound:
            return True
        except docker.errors.DockerException:
            return False
        return True

    def run(
        self,
        image: str,
        command: list[str],
        *,
        entrypoint: list[str] | None = None,
        environment: dict[str, str] | None = None,
        user: str | None = None,
        network: bool = False,
        timeout: float = 600.0,
    ) -> RunResult:
        """Run a container to completion and return its exit code and output; one that has
        not exited after ``timeout`` seconds is removed and the run fails."""
        try:
            container = self.client.containers.create(
                image,
                command=command,
                entrypoint=entrypoint,
                environment=environment or {},
                user=user,
                network_disabled=not network,
                labels=leftovers.labels(),
            )
        except docker.errors.DockerException as exc:
            raise EngineError(f"cannot start a container from {image}: {_short(exc)}") from None
        try:
            try:
                container.start()
            except docker.errors.DockerException as exc:  # e.g. no such executable in it
                raise EngineError(f"cannot start a container from {image}: {_short(exc)}") from None
            try:
                status = container.wait(timeout=timeout)
            except requests.RequestException:
                raise EngineError(
                    f"a container from {image} did not exit within {timeout:g}s; removed it"
                ) from None
            out = container.logs(stdout=True, stderr=False)
            err = container.logs(stdout=False, stderr=True)
            return RunResult(int(status.get("StatusCode", 1)), out, err)
        finally:
            container.remove(force=True)

    def run_sealed(
        self, image: str, command: list[str], files: Path, run: SealedRun
    ) -> SealedResult:
        """Run ``command`` in a container from ``image`` with no network at all (network
        mode ``none``) as ``run.user``, the tar archive ``files`` unpacked at ``/`` first
        (ownership as its headers say); once it exits, read back the regular file
        ``run.fetch`` (None when it is missing or larger than ``run.max_bytes``). A container
        still running after ``run.timeout`` seconds is removed: ``timed_out`` says so. The
        container is removed whatever happens."""
        try:
            container = self.client.containers.create(
                image,
                command=command,
                entrypoint=[],
                environment=dict(run.environment),
                user=run.user,
                network_mode="none",
                labels=leftovers.labels(),
            )
        except docker.errors.DockerException as exc:
            raise EngineError(f"cannot start a container from {image}: {_short(exc)}") from None
        try:
            with files.open("rb") as data:
                if not container.put_archive("/", data):
                    raise EngineError(f"cannot copy files into a container from {image}")
            container.start()
            try:
                status = container.wait(timeout=run.timeout)
            except requests.RequestException:
                return SealedResult(RunResult(-1, b"", b""), None, timed_out=True)
            result = RunResult(
                int(status.get("StatusCode", 1)),
                container.logs(stdout=True, stderr=False),
                container.logs(stdout=False, stderr=True),
            )
            return SealedResult(result, self._fetch(container.id, image, run))
        except (docker.errors.DockerException, requests.RequestException) as exc:
            raise EngineError(f"a container from {image} failed: {_short(exc)}") from None
        finally:
            with contextlib.suppress(docker.errors.DockerException, requests.RequestException):
                container.remove(force=True)

    def _fetch(self, container: str, image: str, run: SealedRun) -> bytes | None:
        if run.fetch is None:
            return None
        try:
            return self._read_archive(container, image, run.fetch, run.max_bytes)
        except (docker.errors.NotFound, EngineError, tarfile.TarError):
            return None

    def start_streaming(
        self,
        image: str,
        command: list[str],
        *,
        what: str,
        environment: dict[str, str],
        binds: Iterable[Bind] = (),
        network: bool | str = False,
        gpus: Gpus | None = None,
        labels: dict[str, str] | None = None,
        hostname: str | None = None,
        entrypoint: list[str] | None = None,
    ) -> StreamingContainer:
        """Create and start a container (``what`` names it in errors), its output to be read
        as it streams; the caller closes it (which removes it). ``network``: False (none),
        True (the default bridge), or the name of a network (:meth:`create_network`), where
        the container is reachable as ``hostname``. ``entrypoint``: replaces the image's."""
        mounts = [
            docker.types.Mount(b.container, str(b.host), type="bind", read_only=b.read_only)
            for b in binds
        ]
        requests = None
        if gpus is not None:
            requests = [
                docker.types.DeviceRequest(
                    count=gpus.count,
                    device_ids=list(gpus.device_ids) or None,
                    capabilities=[["gpu"]],
                )
            ]
        extra: dict[str, Any] = {}
        if entrypoint is not None:
            extra["entrypoint"] = entrypoint
        if isinstance(network, str):
            extra["network"] = network
            if hostname is not None:
                extra["hostname"] = hostname
                extra["networking_config"] = {
                    network: self.client.api.create_endpoint_config(aliases=[hostname])
                }
        try:
            container = self.client.containers.create(
                image,
                command=command,
                environment=environment,
                mounts=mounts,
                network_disabled=network is False,
                device_requests=requests,
                labels=labels or {},
                **extra,
            )
        except docker.errors.DockerException as exc:
            raise EngineError(f"cannot create {what}: {_short(exc)}") from None
        try:
            container.start()
        except docker.errors.DockerException as exc:
            with contextlib.suppress(docker.errors.DockerException):
                container.remove(force=True)
            hint = "is a GPU runtime (NVIDIA Container Toolkit) installed?" if gpus else None
            raise EngineError(f"cannot start {what}: {_short(exc)}", hint=hint) from None
        return StreamingContainer(container)

    def create_network(self, name: str, labels: dict[str, str]) -> None:
        """A bridge network with no route out (``internal``), for one multi-node run."""
        try:
            self.client.networks.create(name, driver="bridge", internal=True, labels=labels)
        except docker.errors.DockerException as exc:
            raise EngineError(f"cannot create network {name}: {_short(exc)}") from None

    def remove_networks(self, labels: dict[str, str]) -> int:
        """Remove every network that carries all ``labels`` (its containers gone first);
        how many were removed. Errors are swallowed: this is clean-up."""
        filters = {"label": [f"{k}={v}" for k, v in labels.items()]}
        try:
            found = self.client.networks.list(filters=filters)
        except (docker.errors.DockerException, EngineUnavailableError):
            return 0
        removed = 0
        for network in found:
            with contextlib.suppress(docker.errors.DockerException):
                network.remove()
                removed += 1
        return removed

    def remove_containers(self, labels: dict[str, str]) -> int:
        """Force-remove every container (running or not) that carries all ``labels``; how
        many were removed. Errors are swallowed: this is clean-up."""
        filters = {"label": [f"{k}={v}" for k, v in labels.items()]}
        try:
            found = self.client.containers.list(all=True, filters=filters)
        except (docker.errors.DockerException, EngineUnavailableError):
            return 0
        removed = 0
        for container in found:
            with contextlib.suppress(docker.errors.DockerException):
                container.remove(force=True)
                removed += 1
        return removed

    def close(self) -> None:
        if self._client is not None:
            with contextlib.suppress(Exception):
                self._client.close()

    # ---- builds ----------------------------------------------------------------------------
    def server_version(self) -> str:
        """The engine's version (what the classic and built-in BuildKit builders are)."""
        try:
            return str(self.client.version().get("Version", ""))
        except docker.errors.DockerException as exc:
            raise EngineError(f"cannot read the engine's version: {_short(exc)}") from None

    def buildkit_reproducible(self) -> tuple[bool, str]:
        """Whether this engine's BuildKit gives the same image ID for the same inputs, and
        why (not). It needs BuildKit 0.13's ``rewrite-timestamp`` exporter option (file times
        in the new layers clamped to SOURCE_DATE_EPOCH), which Engine 26 vendors. Measured on
        Engine 26.1.5 with buildx 0.13.1 (Debian 13, scripts/test-debian13): the engine's own
        image exporter (``--load``, ``type=image``) ignores the option with the default
        graph-driver store (two ``--no-cache`` builds, two image IDs) and refuses it with the
        containerd store ("conflicts with unpack"); buildx's docker driver writes a clamped
        archive (``type=docker,dest=FILE,rewrite-timestamp=true``) only with the containerd
        store ("Docker exporter is not supported for the docker driver" without it; a
        ``docker-container`` builder would need the moby/buildkit image from Docker Hub, which
        these machines cannot reach). So: True with the containerd store and buildx >= 0.13,
        where :meth:`build` with ``epoch`` writes that archive and loads it. Asked once per
        Engine (a build asks it twice: to choose the builder, then to build)."""
        if self._buildkit_reproducible is None:
            self._buildkit_reproducible = self._ask_buildkit_reproducible()
        return self._buildkit_reproducible

    def image_store(self) -> tuple[str, bool]:
        """The engine's storage driver (``overlay2``, ``overlayfs``...) and whether it keeps
        images in the containerd store (``features.containerd-snapshotter``)."""
        try:
            info = self.client.info()
        except docker.errors.DockerException as exc:
            raise EngineError(f"cannot read the engine's info: {_short(exc)}") from None
        status = {str(k): str(v) for k, v in (info.get("DriverStatus") or [])}
        driver = str(info.get("Driver") or "?")
        return driver, status.get("driver-type") == "io.containerd.snapshotter.v1"

    def _ask_buildkit_reproducible(self) -> tuple[bool, str]:
        version = self.server_version()
        try:
            major = int(version.split(".")[0])
        except ValueError:
            major = 0
        if major < 26:
            return False, (
                f"Engine {version} vendors a BuildKit older than 0.13, which cannot clamp "
                "file times to SOURCE_DATE_EPOCH"
            )
        driver, containerd = self.image_store()
        if not containerd:
            return False, (
                f"Engine {version} keeps images in the {driver} graph driver "
                "store, whose exporter ignores rewrite-timestamp and where buildx's docker "
                "driver writes no image archive"
            )
        cli = _buildx_client()
        found = _buildx_version(cli) if cli else None
        if found is None or found < (0, 13):
            return False, f"Engine {version}'s containerd store needs buildx 0.13 or later"
        return True, (
            f"Engine {version} with the containerd image store and buildx "
            f"{'.'.join(map(str, found))} clamps file times to SOURCE_DATE_EPOCH "
            "(rewrite-timestamp)"
        )

    def resolve_builder(self, builder: Builder) -> Builder:
        if builder == "buildah":
            raise EngineError(
                "buildah builds go through reprobuild.backends.buildah, not the engine"
            )
        if builder == "auto":
            return "buildx" if _buildx_client() else "classic"
        if builder == "buildx" and not _buildx_client():
            raise EngineError(
                "builder 'buildx' asked for, but `docker buildx` is not installed",
                hint="install the buildx plugin or use --builder classic",
            )
        if builder == "buildkit" and not legacy_buildkit_client() and not _buildx_client():
            raise EngineError(
                "builder 'buildkit' needs a Docker CLI older than 23 or the buildx plugin; "
                "neither found",
                hint="install the buildx plugin (Debian 13: docker-buildx), or --builder classic",
            )
        return builder

    def build(
        self,
        context: Path,
        tag: str,
        *,
        builder: Builder = "auto",
        log: Log = _quiet,
        no_cache: bool = False,
        network: bool = True,
        epoch: int | None = None,
    ) -> str:
        """Build ``context/Dockerfile`` and tag the result; return the image ID.

        The tag is applied only when the whole build succeeded. ``network`` False: RUN steps
        get no network at all (a hermetic build needs none, and so proves it needs none).
        ``epoch`` (``builder`` ``buildkit`` only, and only where :meth:`buildkit_reproducible`
        says True): the engine's BuildKit through ``docker buildx build --builder default``
        with SOURCE_DATE_EPOCH as a build argument (the image's and history's ``created``),
        written by the docker exporter with ``rewrite-timestamp=true`` (file times in the new
        layers clamped) to an archive in a temporary folder, then loaded into the engine.
        """
        chosen = self.resolve_builder(builder)
        if epoch is not None and chosen != "buildkit":
            raise EngineError(
                f"a build from SOURCE_DATE_EPOCH needs builder buildkit, not {chosen}"
            )
        if chosen == "classic":
            return self._build_classic(context, tag, log, no_cache, network)
        return self._build_cli(context, tag, chosen, log, no_cache, network, epoch)

    def _build_classic(
        self, context: Path, tag: str, log: Log, no_cache: bool, network: bool
    ) -> str:
        tail: deque[str] = deque(maxlen=_TAIL)
        image_id: str | None = None
        try:
            stream = self.client.api.build(
                path=str(context),
                tag=tag,
                rm=True,
                forcerm=True,
                decode=True,
                pull=False,
                nocache=no_cache,
                network_mode=None if network else "none",
            )
            for chunk in stream:
                if "stream" in chunk:
                    for line in str(chunk["stream"]).splitlines():
                        if line.strip():
                            tail.append(line)
                            log(line)
                if "aux" in chunk and isinstance(chunk["aux"], dict) and "ID" in chunk["aux"]:
                    image_id = str(chunk["aux"]["ID"])
                if "error" in chunk:
                    tail.append(str(chunk["error"]).strip())
                    raise BuildError(
                        f"docker build failed: {str(chunk['error']).strip().splitlines()[-1]}",
                        log_tail="\n".join(tail),
                    )
        except docker.errors.APIError as exc:
            raise BuildError(
                f"docker build failed: {_short(exc)}", log_tail="\n".join(tail)
            ) from None
        if image_id is None:
            image_id = self.image_id(tag)
        if image_id is None:
            raise BuildError("docker build finished without an image", log_tail="\n".join(tail))
        return image_id

    def _build_cli(
        self,
        context: Path,
        tag: str,
        builder: Builder,
        log: Log,
        no_cache: bool,
        network: bool,
        epoch: int | None = None,
    ) -> str:
        env = dict(os.environ)
        legacy = legacy_buildkit_client() if builder == "buildkit" and epoch is None else None
        if epoch is not None:
            cli = _buildx_client()
            assert cli is not None
            argv = [cli, "buildx", "build", "--builder", "default", "--provenance=false"]
            argv += ["--build-arg", f"SOURCE_DATE_EPOCH={int(epoch)}"]
        elif legacy is not None:
            argv = [legacy, "build"]
            env["DOCKER_BUILDKIT"] = "1"
        else:
            cli = _buildx_client()
            assert cli is not None
            argv = [cli, "buildx", "build", "--load", "--provenance=false"]
            if builder == "buildkit":  # the engine's own BuildKit, whatever builder is selected
                argv[3:3] = ["--builder", "default"]
        env["BUILDKIT_PROGRESS"] = "plain"
        with tempfile.TemporaryDirectory(prefix=leftovers.temp_prefix("iid")) as tmp:
            iidfile = Path(tmp) / "iid"
            archive = Path(tmp) / "image.tar"
            if epoch is not None:
                # The engine's image exporter refuses rewrite-timestamp ("conflicts with
                # unpack", moby/buildkit#4230); the docker exporter writes a clamped archive,
                # loaded afterwards. Its new layers uncompressed, as buildah's archive has them:
                # gzip took 51 s and the rewrite (gunzip, clamp, gzip) 62 s of a 192 s cold
                # build of images/digits-torch (Engine 26.1.5, 2 CPUs); the base keeps its blobs.
                argv += [
                    "--output",
                    f"type=docker,dest={archive},rewrite-timestamp=true,compression=uncompressed",
                ]
            argv += ["--progress=plain", "--iidfile", str(iidfile), "-t", tag]
            if no_cache:
                argv.append("--no-cache")
            if not network:
                argv.append("--network=none")
            argv.append(str(context))
            run_streamed(argv, "docker build", log, env=env, stop_wait_s=10.0)
            if epoch is None:
                return iidfile.read_text().strip()
            self.load(archive)  # the tag appears only now, after the whole build worked
            image_id = self.image_id(tag)
            if image_id is None:
                raise BuildError(f"the built image {tag} is not in the engine after its load")
            return image_id


def _short(exc: BaseException) -> str:
    text = getattr(exc, "explanation", None) or str(exc)
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    return " ".join(str(text).split())[:300]


def _docker_clients() -> Iterable[str]:
    seen: set[str] = set()
    for candidate in (shutil.which("docker"), "/usr/bin/docker", "/usr/local/bin/docker"):
        if candidate and os.access(candidate, os.X_OK):
            real = os.path.realpath(candidate)
            if real not in seen:
                seen.add(real)
                yield candidate


def _buildx_client() -> str | None:
    for cli in _docker_clients():
        probe = subprocess.run([cli, "buildx", "version"], capture_output=True, check=False)
        if probe.returncode == 0:
            return cli
    return None


def _buildx_version(cli: str) -> tuple[int, int] | None:
    """buildx's (major, minor), from ``docker buildx version`` (``github.com/docker/buildx
    0.13.1+ds1 ...`` on Debian 13, ``... v0.13.1 ...`` upstream)."""
    probe = subprocess.run([cli, "buildx", "version"], capture_output=True, text=True, check=False)
    words = probe.stdout.split()
    if probe.returncode != 0 or len(words) < 2:
        return None
    parts = words[1].lstrip("v").split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (ValueError, IndexError):
        return None


def _rootfs_layers(attrs: dict[str, Any]) -> list[str]:
    """An image's layers (diff IDs, bottom first) from its inspect attributes."""
    return [str(layer) for layer in (attrs.get("RootFS") or {}).get("Layers") or []]


def legacy_buildkit_client() -> str | None:
    for cli in _docker_clients():
        probe = subprocess.run(
            [cli, "version", "--format", "{{json .Client.Version}}"],
            capture_output=True,
            text=True,
            check=False,
        )
        try:
            major = int(json.loads(probe.stdout.strip() or '""').split(".")[0])
        except (ValueError, json.JSONDecodeError):
            continue
        if major < 23:
            return cli
    return None
