"""The only module that talks to the Docker engine.

Builds go through one of three builders, chosen by ``--builder`` (default ``auto``):
- ``buildx``: ``docker buildx build --load`` (BuildKit; needs the buildx plugin);
- ``buildkit``: ``DOCKER_BUILDKIT=1 docker build`` with a client that still speaks BuildKit
  without buildx (Docker CLI < 23, e.g. Debian's 20.10 client);
- ``classic``: the engine's classic builder through the Docker SDK (works on every engine).
``auto`` picks buildx when present, else classic.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import docker
import docker.errors
import docker.types

from reprobuild.errors import BuildError, EngineError, EngineUnavailableError
from reprobuild.refs import ImageRef

Builder = Literal["auto", "buildx", "buildkit", "classic"]
BUILDERS: tuple[Builder, ...] = ("auto", "buildx", "buildkit", "classic")
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


class Engine:
    """A connection to one Docker engine (DOCKER_HOST or the local socket)."""

    def __init__(self, client: docker.DockerClient | None = None, *, connections: int = 10) -> None:
        self._client = client
        self._connections = connections  # a streaming run holds ~3 connections open at once

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

    # ---- images ----------------------------------------------------------------------------
    def image_id(self, ref: str) -> str | None:
        try:
            return str(self.client.images.get(ref).id)
        except docker.errors.ImageNotFound:
            return None
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
        try:
            image = self.client.images.pull(repo, tag=ref.digest)
        except docker.errors.APIError as exc:
            raise EngineError(
                f"cannot pull base {pinned}: {_short(exc)}",
                hint="check the registry is reachable, or load the image with `docker load`",
            ) from None
        return str(image.id)

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

    def untag(self, ref: str) -> None:
        """Remove a tag (never fails: used in clean-up paths)."""
        with contextlib.suppress(docker.errors.DockerException):
            self.client.images.remove(ref, noprune=False)

    def read_file(self, image: str, path: str) -> bytes:
        """Read one file out of an image without running it."""
        try:
            container = self.client.containers.create(
                image, entrypoint=["/nonexistent"], command=[]
            )
        except docker.errors.DockerException as exc:
            raise EngineError(f"cannot open image {image!r}: {_short(exc)}") from None
        try:
            stream, _ = container.get_archive(path)
            buf = io.BytesIO(b"".join(stream))
            with tarfile.open(fileobj=buf) as tar:
                member = tar.next()
                fh = tar.extractfile(member) if member else None
                if fh is None:
                    raise EngineError(f"{path} in {image} is not a regular file")
                return fh.read()
        except docker.errors.NotFound:
            raise EngineError(f"{image} has no {path}") from None
        finally:
            container.remove(force=True)

    # ---- containers ------------------------------------------------------------------------
    def run(
        self,
        image: str,
        command: list[str],
        *,
        entrypoint: list[str] | None = None,
        environment: dict[str, str] | None = None,
        user: str | None = None,
        network: bool = False,
    ) -> RunResult:
        """Run a container to completion and return its exit code and output."""
        try:
            container = self.client.containers.create(
                image,
                command=command,
                entrypoint=entrypoint,
                environment=environment or {},
                user=user,
                network_disabled=not network,
            )
        except docker.errors.DockerException as exc:
            raise EngineError(f"cannot start a container from {image}: {_short(exc)}") from None
        try:
            container.start()
            status = container.wait()
            out = container.logs(stdout=True, stderr=False)
            err = container.logs(stdout=False, stderr=True)
            return RunResult(int(status.get("StatusCode", 1)), out, err)
        finally:
            container.remove(force=True)

    def start_streaming(
        self,
        image: str,
        command: list[str],
        *,
        what: str,
        environment: dict[str, str],
        binds: Iterable[Bind] = (),
        network: bool = False,
        gpus: Gpus | None = None,
        labels: dict[str, str] | None = None,
    ) -> StreamingContainer:
        """Create and start a container (``what`` names it in errors), its output to be read
        as it streams; the caller closes it (which removes it)."""
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
        try:
            container = self.client.containers.create(
                image,
                command=command,
                environment=environment,
                mounts=mounts,
                network_disabled=not network,
                device_requests=requests,
                labels=labels or {},
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
    def resolve_builder(self, builder: Builder) -> Builder:
        if builder == "auto":
            return "buildx" if _buildx_client() else "classic"
        if builder == "buildx" and not _buildx_client():
            raise EngineError(
                "builder 'buildx' asked for, but `docker buildx` is not installed",
                hint="install the buildx plugin or use --builder classic",
            )
        if builder == "buildkit" and not _legacy_buildkit_client():
            raise EngineError(
                "builder 'buildkit' needs a Docker CLI older than 23 (no buildx); none found",
                hint="use --builder buildx (with the plugin) or --builder classic",
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
    ) -> str:
        """Build ``context/Dockerfile`` and tag the result; return the image ID.

        The tag is applied only when the whole build succeeded.
        """
        chosen = self.resolve_builder(builder)
        if chosen == "classic":
            return self._build_classic(context, tag, log, no_cache)
        return self._build_cli(context, tag, chosen, log, no_cache)

    def _build_classic(self, context: Path, tag: str, log: Log, no_cache: bool) -> str:
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
        self, context: Path, tag: str, builder: Builder, log: Log, no_cache: bool
    ) -> str:
        env = dict(os.environ)
        if builder == "buildx":
            cli = _buildx_client()
            assert cli is not None
            argv = [cli, "buildx", "build", "--load", "--provenance=false"]
        else:
            cli = _legacy_buildkit_client()
            assert cli is not None
            argv = [cli, "build"]
            env["DOCKER_BUILDKIT"] = "1"
        env["BUILDKIT_PROGRESS"] = "plain"
        with tempfile.TemporaryDirectory(prefix="reprobuild-iid-") as tmp:
            iidfile = Path(tmp) / "iid"
            argv += ["--progress=plain", "--iidfile", str(iidfile), "-t", tag]
            if no_cache:
                argv.append("--no-cache")
            argv.append(str(context))
            tail: deque[str] = deque(maxlen=_TAIL)
            try:
                proc = subprocess.Popen(
                    argv,
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    errors="replace",
                )
            except OSError as exc:
                raise EngineError(f"cannot run {cli}: {exc.strerror}") from None
            assert proc.stdout is not None
            for line in proc.stdout:
                line = line.rstrip("\n")
                tail.append(line)
                log(line)
            if proc.wait() != 0:
                last = next(
                    (ln for ln in reversed(tail) if "ERROR" in ln or "error" in ln),
                    tail[-1] if tail else "",
                )
                raise BuildError(f"docker build failed: {last.strip()}", log_tail="\n".join(tail))
            return iidfile.read_text().strip()


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


def _legacy_buildkit_client() -> str | None:
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
