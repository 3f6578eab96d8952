"""An OCI runtime bundle of an image, for Slurm's own containers (``srun --container``).

One job: unpack ``NAME@sha256:<digest>`` from its registry into a directory every node sees:

- ``rootfs/``: the image's layers applied in order (whiteouts honoured). The manifest is
  fetched by the digest asked for and checked against it (an index: its linux/amd64 entry); the
  config blob against the manifest's config digest; every layer, as it downloads, against its
  digest in the manifest and, as it unpacks, its uncompressed bytes against the config's
  ``rootfs.diff_ids``. Any mismatch: an error and nothing left behind (the bundle is made beside
  the target and renamed into place only when every layer checked).
- ``config.json``: an OCI runtime configuration (read by runc or crun) for the image's user,
  working directory, environment and entrypoint; the node's network and host name (no network
  or UTS namespace: torchrun's rendezvous reaches the other nodes by name, as on the host);
  the node's ``/etc/hosts`` and ``/etc/resolv.conf``; the root file system read-only (every
  node shares it), ``/tmp`` and ``/dev/shm`` in memory.
- ``config.json.in``: the same with the job's two directories mounted, written as
  ``@REPRO_JOB_DIR@`` and ``@REPRO_DATA@``: the sbatch script fills them in per job
  (:mod:`reprobuild.cluster.slurm`), as Slurm reads the mounts from the bundle's config.
- ``reprobuild-bundle.json``: what was unpacked (the image, its manifest, config and layer
  digests); the script refuses a bundle of another image.

A directory that already holds a bundle of the same image is kept as it is; any other
existing, non-empty directory is refused, never overwritten.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import tarfile
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO, cast

from reprobuild.bases.oci import (
    INDEX_TYPES,
    MANIFEST_TYPES,
    parse_platform,
    platform_of,
    select_platform,
)
from reprobuild.bases.refs import ImageRef, parse_ref
from reprobuild.bases.registry import RegistryClient
from reprobuild.errors import ReprobuildError
from reprobuild_entrypoint.contract import DATA_DIR

RECORD = "reprobuild-bundle.json"
TEMPLATE = "config.json.in"
JOB_DIR_MARK = "@REPRO_JOB_DIR@"
DATA_MARK = "@REPRO_DATA@"
JOB_MOUNT = "/reprobuild-job"
"""Where the job's directory is mounted (each node finds its runs/ and out/ in it)."""
KIND = "reprobuild.oci-bundle"
_GZIP = (
    "application/vnd.oci.image.layer.v1.tar+gzip",
    "application/vnd.docker.image.rootfs.diff.tar.gzip",
)
_PLAIN = ("application/vnd.oci.image.layer.v1.tar",)
_DOWNLOAD_DEADLINE_S = 3600.0
_MOUNT_POINTS = ("data", "reprobuild-job", "tmp", "proc", "sys", "dev", "etc")


class BundleError(ReprobuildError):
    """An image that cannot be unpacked into a bundle, or a directory that cannot hold one."""


@dataclass(frozen=True)
class Bundle:
    path: Path
    image: str
    reused: bool


class _Hashing(io.RawIOBase):
    """A reader that hashes what passes through it (the uncompressed layer: its diff_id)."""

    def __init__(self, raw: BinaryIO) -> None:
        super().__init__()
        self.raw = raw
        self.hasher = hashlib.sha256()

    def readable(self) -> bool:
        return True

    def read(self, n: int | None = -1) -> bytes:
        data = self.raw.read(-1 if n is None else n)
        self.hasher.update(data)
        return data

    def drain(self) -> str:
        while self.read(1 << 20):
            pass
        return f"sha256:{self.hasher.hexdigest()}"


def unpack(
    image: str,
    directory: Path,
    *,
    client: RegistryClient | None = None,
    log: Callable[[str], None] = lambda _: None,
) -> Bundle:
    """Unpack ``image`` (``NAME@sha256:<digest>``) into ``directory`` as an OCI bundle."""
    ref = parse_ref(image)
    if ref.digest is None:
        raise BundleError(f"image {image!r} is not pinned by a registry digest")
    directory = directory.absolute()
    existing = _existing(directory, image)
    if existing is not None:
        return existing
    own = client is None
    registry = client if client is not None else RegistryClient(deadline=_DOWNLOAD_DEADLINE_S)
    directory.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{directory.name}.partial-", dir=directory.parent))
    try:
        manifest_digest, manifest, config_digest, config = _manifest(registry, ref)
        rootfs = work / "rootfs"
        rootfs.mkdir()
        layers = manifest.get("layers") or []
        diff_ids = (config.get("rootfs") or {}).get("diff_ids") or []
        if len(layers) != len(diff_ids):
            raise BundleError(
                f"{image}: the manifest lists {len(layers)} layer(s), its config "
                f"{len(diff_ids)} diff_id(s)"
            )
        for n, (layer, diff_id) in enumerate(zip(layers, diff_ids, strict=True), 1):
            log(f"layer {n}/{len(layers)} {layer.get('digest')}")
            _layer(registry, ref, layer, str(diff_id), rootfs, work)
        _mount_points(rootfs)
        runtime = runtime_config(config, rootfs)
        (work / "config.json").write_text(json.dumps(runtime, indent=2) + "\n")
        with_job = job_config(runtime)
        (work / TEMPLATE).write_text(json.dumps(with_job, indent=2) + "\n")
        record = {
            "kind": KIND,
            "image": image,
            "manifest": manifest_digest,
            "config": config_digest,
            "layers": [layer.get("digest") for layer in layers],
            "diff_ids": diff_ids,
        }
        (work / RECORD).write_text(json.dumps(record, indent=2) + "\n")
        if directory.exists():
            directory.rmdir()  # empty (checked): the bundle takes its place
        work.rename(directory)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    finally:
        if own:
            registry.close()
    return Bundle(directory, image, reused=False)


def _existing(directory: Path, image: str) -> Bundle | None:
    if not directory.exists():
        return None
    if not directory.is_dir():
        raise BundleError(f"--bundle {directory} is not a directory")
    record = directory / RECORD
    if record.is_file():
        try:
            data = json.loads(record.read_text())
        except (OSError, ValueError):
            data = {}
        if data.get("kind") == KIND and data.get("image") == image:
            return Bundle(directory, image, reused=True)
        raise BundleError(
            f"--bundle {directory} holds a bundle of {data.get('image')!r}, not {image}",
            hint="give another directory (one bundle per image)",
        )
    if any(directory.iterdir()):
        raise BundleError(
            f"--bundle {directory} exists and is not empty: reprobuild will not overwrite it",
            hint="give a new or empty directory",
        )
    return None


def _manifest(
    registry: RegistryClient, ref: ImageRef
) -> tuple[str, dict[str, Any], str, dict[str, Any]]:
    """The image manifest (an index's linux/amd64 entry) and its config, each checked."""
    assert ref.digest is not None
    body, media_type, digest = registry.get_manifest(ref, ref.digest)
    manifest = json.loads(body)
    media_type = manifest.get("mediaType") or media_type
    if media_type in INDEX_TYPES:
        entries = [
            (platform, entry)
            for entry in manifest.get("manifests") or []
            if (platform := platform_of(entry)) is not None
        ]
        chosen = select_platform(entries, parse_platform("linux/amd64"))
        if chosen is None:
            raise BundleError(f"{ref}: the index has no linux/amd64 image")
        body, media_type, digest = registry.get_manifest(ref, str(entries[chosen][1]["digest"]))
        manifest = json.loads(body)
        media_type = manifest.get("mediaType") or media_type
    if media_type not in MANIFEST_TYPES:
        raise BundleError(f"{ref}: unsupported manifest type {media_type!r}")
    config_digest = str((manifest.get("config") or {}).get("digest"))
    config = json.loads(registry.get_blob(ref, config_digest))
    return digest, manifest, config_digest, config


def _layer(
    registry: RegistryClient,
    ref: ImageRef,
    layer: Mapping[str, Any],
    diff_id: str,
    rootfs: Path,
    work: Path,
) -> None:
    digest = str(layer.get("digest"))
    media_type = str(layer.get("mediaType"))
    if media_type not in (*_GZIP, *_PLAIN):
        raise BundleError(
            f"{ref}: layer {digest} is {media_type}: only tar and tar+gzip layers are unpacked"
        )
    with tempfile.TemporaryFile(dir=work) as blob:
        registry.copy_blob(ref, digest, blob)  # checked against its digest
        blob.seek(0)
        raw: BinaryIO = cast(BinaryIO, gzip.GzipFile(fileobj=blob)) if media_type in _GZIP else blob
        stream = _Hashing(raw)
        with tarfile.open(fileobj=stream, mode="r|") as tar:
            for member in tar:
                _apply(tar, member, rootfs)
        actual = stream.drain()
    if actual != diff_id:
        raise BundleError(
            f"{ref}: layer {digest} unpacks to {actual}, not its diff_id {diff_id}; refusing it",
            hint="the registry, or something between it and you, altered the layer",
        )


def _inside(rootfs: Path, name: str) -> Path:
    """The member's path in the root file system; refused if it would leave it."""
    parts = [p for p in PurePosixPath(name).parts if p not in ("/", ".")]
    if ".." in parts:
        raise BundleError(f"layer member {name!r} leaves the root file system")
    target = rootfs.joinpath(*parts)
    parent = os.path.realpath(target.parent)
    if parent != str(rootfs) and not parent.startswith(f"{rootfs}{os.sep}"):
        raise BundleError(f"layer member {name!r} is written through a link out of the image")
    return target


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.is_symlink() or path.exists():
        path.unlink()


def _apply(tar: tarfile.TarFile, member: tarfile.TarInfo, rootfs: Path) -> None:
    """One member of a layer over the layers below it (OCI whiteouts)."""
    if not [p for p in PurePosixPath(member.name).parts if p not in ("/", ".")]:
        return  # the root itself
    target = _inside(rootfs, member.name)
    name = target.name
    if name == ".wh..wh..opq":  # opaque directory: what lower layers put there goes
        for child in list(target.parent.iterdir()):
            _remove(child)
        return
    if name.startswith(".wh."):
        _remove(target.with_name(name[len(".wh.") :]))
        return
    if member.islnk():
        _inside(rootfs, member.linkname)
    if target.is_symlink() or (target.exists() and not (member.isdir() and target.is_dir())):
        _remove(target)  # a file replaced (never written through an old link)
    extract: Any = tar.extract
    if hasattr(tarfile, "fully_trusted_filter"):
        extract(member, rootfs, numeric_owner=True, filter="fully_trusted")
    else:  # pragma: no cover - Python without extraction filters
        extract(member, rootfs, numeric_owner=True)


def _mount_points(rootfs: Path) -> None:
    """The directories and files the runtime mounts over: made now, as the root file system
    is read-only when the job runs."""
    for name in _MOUNT_POINTS:
        path = rootfs / name
        if not path.is_symlink():
            path.mkdir(exist_ok=True)
    for name in ("hosts", "resolv.conf"):
        path = rootfs / "etc" / name
        if not path.exists() and not path.is_symlink():
            path.touch()


def _user(config: Mapping[str, Any], rootfs: Path) -> dict[str, int]:
    """The image's USER as numbers (a name looked up in the image's /etc/passwd)."""
    user = str(config.get("User") or "0")
    name, _, group = user.partition(":")
    if name.isdigit():
        uid = int(name)
        gid = int(group) if group.isdigit() else uid
        return {"uid": uid, "gid": gid}
    passwd = rootfs / "etc" / "passwd"
    for line in passwd.read_text(errors="replace").splitlines() if passwd.is_file() else []:
        fields = line.split(":")
        if len(fields) > 3 and fields[0] == name:
            return {"uid": int(fields[2]), "gid": int(group) if group.isdigit() else int(fields[3])}
    raise BundleError(f"the image's user {user!r} is not in its /etc/passwd")


def _mount(destination: str, kind: str, source: str, options: list[str]) -> dict[str, Any]:
    return {"destination": destination, "type": kind, "source": source, "options": options}


def runtime_config(image_config: Mapping[str, Any], rootfs: Path) -> dict[str, Any]:
    """The OCI runtime configuration that runs the image as its own config says."""
    config = image_config.get("config") or {}
    args = [*(config.get("Entrypoint") or []), *(config.get("Cmd") or [])]
    nosuid = ["nosuid", "noexec", "nodev"]
    return {
        "ociVersion": "1.0.2",
        "process": {
            "terminal": False,
            "user": _user(config, rootfs),
            "args": args or ["/bin/sh"],
            "env": list(config.get("Env") or []),
            "cwd": config.get("WorkingDir") or "/",
            "noNewPrivileges": True,
        },
        # the bundle's rootfs/ (Slurm 22.05 runs <bundle>/rootfs whatever this says)
        "root": {"path": "rootfs", "readonly": True},
        "mounts": [
            _mount("/proc", "proc", "proc", []),
            _mount("/dev", "tmpfs", "tmpfs", ["nosuid", "strictatime", "mode=755", "size=65536k"]),
            _mount(
                "/dev/pts",
                "devpts",
                "devpts",
                ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"],
            ),
            _mount("/dev/shm", "tmpfs", "shm", [*nosuid, "mode=1777"]),
            _mount("/dev/mqueue", "mqueue", "mqueue", nosuid),
            _mount("/sys", "bind", "/sys", ["rbind", *nosuid, "ro"]),
            _mount("/tmp", "tmpfs", "tmpfs", ["nosuid", "nodev", "mode=1777"]),
            _mount("/etc/hosts", "bind", "/etc/hosts", ["bind", "ro"]),
            _mount("/etc/resolv.conf", "bind", "/etc/resolv.conf", ["bind", "ro"]),
        ],
        "linux": {
            # no network, UTS or user namespace: the node's network and name, as podman
            # --network=host --uts=host
            "namespaces": [{"type": "pid"}, {"type": "ipc"}, {"type": "mount"}],
            "maskedPaths": ["/proc/kcore", "/proc/keys", "/proc/timer_list", "/sys/firmware"],
            "readonlyPaths": ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys"],
        },
    }


def job_config(runtime: Mapping[str, Any]) -> dict[str, Any]:
    """``runtime`` with the job's directory and data mounted (their host paths as marks)."""
    config: dict[str, Any] = json.loads(json.dumps(runtime))
    config["mounts"] += [
        _mount(DATA_DIR, "bind", DATA_MARK, ["rbind", "ro"]),
        _mount(JOB_MOUNT, "bind", JOB_DIR_MARK, ["rbind", "rw"]),
    ]
    return config
