"""The OCI bundle ``reprobuild slurm --runtime oci`` unpacks: layers applied in order with their
whiteouts, every layer checked against its digest and diff_id, nothing left behind when a check
fails, no layer member written outside the root file system, a user's directory never
overwritten. A stand-in registry serves the blobs here (the engine tests unpack a real image
from the loopback registry and run it under Slurm with runc)."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from pathlib import Path
from typing import Any, BinaryIO, cast

import pytest

from reprobuild.cluster import bundle
from reprobuild.cluster.bundle import BundleError, unpack

REPO = "127.0.0.1:5000/team/ddp"


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def layer(*members: tuple[str, bytes | None, str]) -> bytes:
    """An uncompressed layer: (name, file bytes or None for a directory, symlink target)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, data, link in members:
            info = tarfile.TarInfo(name)
            if link:
                info.type, info.linkname = tarfile.SYMTYPE, link
                tar.addfile(info)
            elif data is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            else:
                info.size, info.mode = len(data), 0o644
                tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


class FakeRegistry:
    """Serves one image: its manifest, config and gzip layers, by digest."""

    def __init__(self, layers: list[bytes], *, diff_ids: list[str] | None = None) -> None:
        self.blobs: dict[str, bytes] = {}
        entries = []
        for plain in layers:
            packed = gzip.compress(plain, mtime=0)
            self.blobs[sha(packed)] = packed
            entries.append(
                {
                    "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": sha(packed),
                    "size": len(packed),
                }
            )
        config = {
            "config": {
                "User": "1000:1000",
                "Env": ["PATH=/opt/venv/bin:/usr/bin:/bin"],
                "Entrypoint": ["/opt/venv/bin/python", "-I", "-m", "reprobuild_entrypoint"],
                "WorkingDir": "/app",
            },
            "rootfs": {"type": "layers", "diff_ids": diff_ids or [sha(p) for p in layers]},
        }
        raw = json.dumps(config).encode()
        self.blobs[sha(raw)] = raw
        manifest = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": sha(raw)},
            "layers": entries,
        }
        self.manifest = json.dumps(manifest).encode()
        self.image = f"{REPO}@{sha(self.manifest)}"

    def get_manifest(self, ref: Any, reference: str) -> tuple[bytes, str, str]:
        assert reference == sha(self.manifest)
        return self.manifest, "application/vnd.oci.image.manifest.v1+json", reference

    def get_blob(self, ref: Any, digest: str) -> bytes:
        return self.blobs[digest]

    def copy_blob(self, ref: Any, digest: str, out: BinaryIO) -> int:
        out.write(self.blobs[digest])
        return len(self.blobs[digest])

    def close(self) -> None:
        pass


def run_unpack(registry: FakeRegistry, where: Path) -> bundle.Bundle:
    return unpack(registry.image, where, client=cast(Any, registry))


def test_layers_apply_in_order_with_whiteouts(tmp_path: Path) -> None:
    base = layer(
        ("etc", None, ""),
        ("etc/passwd", b"root:x:0:0::/root:/bin/sh\n", ""),
        ("app", None, ""),
        ("app/old.py", b"old", ""),
        ("app/keep.py", b"v1", ""),
        ("cache", None, ""),
        ("cache/a", b"a", ""),
        ("lib64", None, "usr/lib"),
    )
    top = layer(
        ("app/.wh.old.py", b"", ""),
        ("app/keep.py", b"v2", ""),
        ("cache/.wh..wh..opq", b"", ""),
        ("cache/b", b"b", ""),
    )
    registry = FakeRegistry([base, top])
    made = run_unpack(registry, tmp_path / "bundle")
    root = made.path / "rootfs"
    assert not (root / "app" / "old.py").exists()
    assert (root / "app" / "keep.py").read_bytes() == b"v2"
    assert sorted(p.name for p in (root / "cache").iterdir()) == ["b"]
    assert (root / "lib64").is_symlink()
    for mount_point in ("data", "reprobuild-job", "tmp", "proc", "sys", "dev"):
        assert (root / mount_point).is_dir()
    config = json.loads((made.path / "config.json").read_text())
    assert config["process"]["user"] == {"uid": 1000, "gid": 1000}
    assert config["process"]["cwd"] == "/app"
    assert config["process"]["args"][:2] == ["/opt/venv/bin/python", "-I"]
    assert config["root"] == {"path": "rootfs", "readonly": True}
    namespaces = {n["type"] for n in config["linux"]["namespaces"]}
    assert namespaces == {"pid", "ipc", "mount"}  # the node's network and host name
    template = (made.path / bundle.TEMPLATE).read_text()
    assert bundle.JOB_DIR_MARK in template and bundle.DATA_MARK in template
    record = json.loads((made.path / bundle.RECORD).read_text())
    assert record["image"] == registry.image and len(record["diff_ids"]) == 2
    # the same image again: kept as it is
    assert run_unpack(registry, tmp_path / "bundle").reused


def test_a_layer_that_unpacks_to_another_diff_id_leaves_nothing(tmp_path: Path) -> None:
    plain = layer(("etc", None, ""), ("etc/x", b"x", ""))
    registry = FakeRegistry([plain], diff_ids=[sha(b"something else")])
    with pytest.raises(BundleError, match="not its diff_id"):
        run_unpack(registry, tmp_path / "bundle")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "members",
    [
        (("../escape", b"x", ""),),
        (("out", None, "/tmp"), ("out/escape", b"x", "")),
    ],
)
def test_a_member_outside_the_root_is_refused(
    tmp_path: Path, members: tuple[tuple[str, bytes | None, str], ...]
) -> None:
    registry = FakeRegistry([layer(*members)])
    with pytest.raises(BundleError, match=r"leaves the root file system|through a link out"):
        run_unpack(registry, tmp_path / "b")
    assert list(tmp_path.iterdir()) == []


def test_a_directory_of_the_user_s_is_never_overwritten(tmp_path: Path) -> None:
    registry = FakeRegistry([layer(("etc", None, ""))])
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    with pytest.raises(BundleError, match="exists and is not empty"):
        run_unpack(registry, mine)
    assert (mine / "notes.txt").read_text() == "keep"
    other = FakeRegistry([layer(("usr", None, ""))])
    run_unpack(other, tmp_path / "b")
    with pytest.raises(BundleError, match="holds a bundle of"):
        run_unpack(registry, tmp_path / "b")


def test_an_unpinned_image_is_refused(tmp_path: Path) -> None:
    with pytest.raises(BundleError, match="not pinned by a registry digest"):
        unpack(f"{REPO}:latest", tmp_path / "b")
