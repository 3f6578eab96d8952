"""`resolve --refresh`: an entry re-read from its registry, with a fake registry here (the
real loopback registry is exercised in tests/engine/test_refresh_live.py)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from reprobuild.bases import gpustack as stack
from reprobuild.bases.catalog import BaseEntry, dump_catalog, load_catalog, parse_catalog
from reprobuild.bases.refresh import changes, refreshed_entry, tag_ref
from reprobuild.bases.refs import ImageRef, parse_ref
from reprobuild.bases.registry import DOCKER_MANIFEST, OCI_INDEX, Resolved
from reprobuild.cli import main

INDEX = "sha256:" + "11" * 32
PLATFORM = "sha256:" + "22" * 32
CONFIG = "sha256:" + "33" * 32
ENV = [
    "PATH=/usr/local/bin:/usr/bin",
    "CUDA_VERSION=12.8.0.038",
    "CUDNN_VERSION=9.7.0.66",
    "NCCL_VERSION=2.25.1",
    "NVIDIA_PYTORCH_VERSION=25.01",
    "PYTORCH_VERSION=2.6.0a0+ecf3bae",
    "PIP_CONSTRAINT=/etc/pip/constraint.txt",
]
LABELS = {"com.nvidia.cuda.version": "9.0", "com.nvidia.nccl.version": "2.25.1"}


class FakeRegistry:
    def __init__(self, env: list[str], labels: dict[str, str], *, index: bool = True) -> None:
        self.env, self.labels, self.index = env, labels, index
        self.calls: list[tuple[str, str]] = []

    def resolve(self, ref: ImageRef | str, *, platform: str = "linux/amd64") -> Resolved:
        ref = parse_ref(str(ref))
        self.calls.append(("resolve", str(ref)))
        assert ref.digest is None, "a refresh resolves the tag, not the old digest"
        return Resolved(
            ref=ref.with_digest(INDEX if self.index else PLATFORM),
            media_type=OCI_INDEX if self.index else DOCKER_MANIFEST,
            platform=platform,
            platform_digest=PLATFORM,
            config_digest=CONFIG,
        )

    def image_config(self, ref: ImageRef | str, *, platform: str = "linux/amd64") -> dict[str, Any]:
        self.calls.append(("config", str(ref)))
        return {
            "config": {
                "Env": self.env,
                "Labels": self.labels,
                "Entrypoint": ["/opt/nvidia/nvidia_entrypoint.sh"],
            }
        }


@pytest.fixture
def entry() -> BaseEntry:
    return load_catalog().get("ngc-pytorch-25.01")


def test_refresh_reads_digest_and_versions_from_the_registry(entry: BaseEntry) -> None:
    fake = FakeRegistry(ENV, LABELS)
    new = refreshed_entry(entry, fake, today="2026-11-22")
    assert fake.calls[0] == ("resolve", "nvcr.io/nvidia/pytorch:25.01-py3")
    # the config is read by the digest just resolved: digest and versions are one image's
    assert fake.calls[1] == ("config", f"nvcr.io/nvidia/pytorch@{INDEX}")
    assert new.ref == parse_ref(f"nvcr.io/nvidia/pytorch:25.01-py3@{INDEX}")
    assert new.platform_digest == PLATFORM
    assert new.verified is True
    assert "2026-11-22" in new.source and "nvcr.io" in new.source
    assert new.version("cuda") == "12.8.0.038"  # from ENV, never the label's literal 9.0
    assert new.version("cudnn") == "9.7.0.66"
    assert new.version("torch") == "2.6.0a0+ecf3bae"
    assert new.version("ngc_release") == "25.01"
    assert "ENV CUDA_VERSION" in new.versions["cuda"].source
    assert "ENV NVIDIA_PYTORCH_VERSION" in new.versions["ngc_release"].source
    assert new.version("driver_min") == "570.26"
    assert "CUDA 12.8.0.038" in new.versions["driver_min"].source
    # what the image does not declare keeps its old value and source
    assert new.versions["python"] == entry.versions["python"]
    assert new.entrypoint == ("/opt/nvidia/nvidia_entrypoint.sh",)


def test_refreshed_entry_is_valid_catalog_data(entry: BaseEntry) -> None:
    new = refreshed_entry(entry, FakeRegistry(ENV, LABELS), today="2026-11-22")
    catalog = load_catalog().with_entry(new)
    assert parse_catalog(yaml.safe_load(dump_catalog(catalog)), "t").get(new.name) == new


def test_a_single_platform_tag_has_no_platform_digest(entry: BaseEntry) -> None:
    new = refreshed_entry(entry, FakeRegistry(ENV, {}, index=False), today="d")
    assert new.ref.digest == PLATFORM and new.platform_digest is None


def test_cuda_only_in_the_label_is_not_taken(entry: BaseEntry) -> None:
    env = [e for e in ENV if not e.startswith("CUDA_VERSION=")]
    new = refreshed_entry(entry, FakeRegistry(env, LABELS), today="d")
    assert new.versions["cuda"] == entry.versions["cuda"]  # unchanged, not "9.0"


def test_changes_lists_what_moved(entry: BaseEntry) -> None:
    new = refreshed_entry(entry, FakeRegistry(ENV, LABELS), today="d")
    moved = {c.field: (c.old, c.new) for c in changes(entry, new)}
    assert moved["digest"] == (entry.ref.digest, INDEX)
    assert "cuda" not in moved  # the catalog had it right
    assert moved["cudnn"] == ("9.7.0", "9.7.0.66")
    assert moved["verified"] == ("False", "True")
    assert "python" not in moved
    assert changes(new, new) == []


def test_tag_ref_drops_only_the_digest(entry: BaseEntry) -> None:
    assert str(tag_ref(entry.ref)) == "nvcr.io/nvidia/pytorch:25.01-py3"


def test_stack_ignores_the_ngc_cuda_label() -> None:
    declared = stack.declared(
        {}, {"com.nvidia.cuda.version": "9.0", "com.nvidia.cudnn.version": "9"}
    )
    assert "cuda" not in declared and declared["cudnn"] == "9"


# ------------------------------------------------------------------------------ the CLI


def test_refresh_needs_a_catalog_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["resolve", "--refresh", "x", "--catalog", str(tmp_path / "none.yaml")])
    assert code == 1
    err = capsys.readouterr().err
    assert "no such catalog file" in err and "--catalog FILE" in err


def test_refresh_of_an_unknown_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "catalog.yaml"
    path.write_text(dump_catalog(load_catalog()))
    before = path.read_bytes()
    assert main(["resolve", "--refresh", "nope", "--catalog", str(path)]) == 1
    assert "no base named 'nope' in the catalog" in capsys.readouterr().err
    assert path.read_bytes() == before


def test_refresh_failure_leaves_the_catalog_as_it_was(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A registry that does not answer: an error, and the file untouched."""
    catalog = load_catalog()
    entry = catalog.get("ngc-pytorch-25.01")
    closed = parse_ref(f"127.0.0.1:9/nvidia/pytorch:25.01-py3@{entry.ref.digest}")
    path = tmp_path / "catalog.yaml"
    path.write_text(dump_catalog(catalog.with_entry(replace(entry, ref=closed))))
    before = path.read_bytes()
    assert main(["resolve", "--refresh", "ngc-pytorch-25.01", "--catalog", str(path)]) == 1
    assert capsys.readouterr().err.startswith("error: ")
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["catalog.yaml"]
