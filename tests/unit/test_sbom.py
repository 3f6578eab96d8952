"""The image's SBOM, made from a manifest, a lock and the facts read in the image: valid
CycloneDX 1.6, and the same bytes for the same inputs (the image stays bit-identical)."""

from __future__ import annotations

import json
import posixpath
import uuid
from pathlib import Path
from typing import Any

import pytest
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator

from helpers import DATA
from reprobuild.imaging import sbom
from reprobuild.imaging.manifest import Distribution, Manifest
from reprobuild.imaging.render import render_stamp
from reprobuild.locks.lockfile import Lock, load_lock, parse_lock_bytes
from reprobuild_entrypoint import MANIFEST_PATH

LOCK = DATA / "projects" / "tiny" / "requirements.lock"

STATUS = """\
Package: bash
Essential: yes
Status: install ok installed
Priority: required
Architecture: amd64
Version: 5.2.15-2+b7
Description: GNU Bourne Again SHell
 Bash is an sh-compatible command language interpreter.
 .
 Version: 9.9 (a continuation line is not a field)

Package: removed-one
Status: deinstall ok config-files
Architecture: amd64
Version: 1.0

Package: libc6
Status: install ok installed
Architecture: amd64
Source: glibc
Version: 2.36-9+deb12u10
"""

FACTS: dict[str, Any] = {
    "dpkg": [STATUS, "Package: tzdata\nArchitecture: all\nVersion: 2025b-0+deb12u1\n"],
    "os_release": 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\nVERSION_ID="12"\n',
    "python": [
        {"name": "idna", "version": "3.10", "license_expression": "", "license": "",
         "classifiers": ["License :: OSI Approved :: BSD License"]},
        {"name": "Six", "version": "1.17.0", "license_expression": "", "license": "MIT",
         "classifiers": []},
    ],
}  # fmt: skip


def manifest(**over: Any) -> Manifest:
    values: dict[str, Any] = dict(
        builder_version="0.1.0",
        name="team/demo",
        variant="cpu",
        base_ref="127.0.0.1:5000/team/python@sha256:" + "ab" * 32,
        base_digest="sha256:" + "ab" * 32,
        lock_file="requirements.lock",
        lock_sha256="cd" * 32,
        seed=7,
        determinism="warn",
        created="1970-01-01T00:00:00Z",
        python_version="3.11.2",
        machine="x86_64",
        distributions=(Distribution("idna", "3.10"), Distribution("six", "1.17.0")),
    )
    values.update(over)
    return Manifest(**values)


def make(m: Manifest | None = None, lock: Lock | None = None, epoch: int = 0) -> bytes:
    return sbom.make_sbom(m or manifest(), lock or load_lock(LOCK), FACTS, epoch)


def components(raw: bytes) -> dict[str, dict[str, Any]]:
    return {c["bom-ref"]: c for c in json.loads(raw)["components"]}


def test_valid_cyclonedx_1_6() -> None:
    raw = make()
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(raw.decode()) is None
    data = json.loads(raw)
    assert (data["bomFormat"], data["specVersion"]) == ("CycloneDX", "1.6")


def test_same_inputs_same_bytes_and_a_serial_from_the_content() -> None:
    raw = make()
    assert make() == raw
    assert raw == (json.dumps(json.loads(raw), sort_keys=True, indent=2) + "\n").encode()
    serial = json.loads(raw)["serialNumber"]
    assert serial.startswith("urn:uuid:") and uuid.UUID(serial[9:]).version == 5
    other = make(manifest(python_version="3.11.3"))
    assert json.loads(other)["serialNumber"] != serial


def test_the_build_keeps_sboms_by_everything_they_are_made_of(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """imageprobe.sbom_document: the SBOM make_sbom gives, made once per set of inputs; any
    input that changes (the manifest, the lock, the facts, the epoch) is another SBOM, made
    anew."""
    from reprobuild.imaging import imageprobe

    monkeypatch.setenv("REPROBUILD_CACHE_DIR", str(tmp_path))
    lock = load_lock(LOCK)
    made: list[int] = []
    real = sbom.make_sbom

    def counted(*args: Any) -> bytes:
        made.append(1)
        return real(*args)

    monkeypatch.setattr(sbom, "make_sbom", counted)
    first = imageprobe.sbom_document(manifest(), lock, FACTS, 0)
    assert first == real(manifest(), lock, FACTS, 0)
    assert imageprobe.sbom_document(manifest(), lock, FACTS, 0) == first
    assert len(made) == 1 and len(list((tmp_path / "sboms").iterdir())) == 1
    changed_lock = parse_lock_bytes(LOCK.read_bytes().replace(b"six==1.17.0", b"six==1.16.0"), LOCK)
    others = [
        (manifest(python_version="3.11.3"), lock, FACTS, 0),
        (
            manifest(distributions=(Distribution("idna", "3.10"), Distribution("six", "1.16.0"))),
            changed_lock,
            FACTS,
            0,
        ),
        (manifest(), lock, {**FACTS, "dpkg": [STATUS]}, 0),
        (manifest(), lock, FACTS, 1_700_000_000),
    ]
    for args in others:
        assert imageprobe.sbom_document(*args) == real(*args) != first
    assert len(made) == 5


def test_its_only_time_is_source_date_epoch() -> None:
    assert json.loads(make(epoch=0))["metadata"]["timestamp"] == "1970-01-01T00:00:00+00:00"
    later = make(epoch=1_700_000_000)
    assert json.loads(later)["metadata"]["timestamp"] == "2023-11-14T22:13:20+00:00"
    assert sbom.sha256(later) != sbom.sha256(make(epoch=0))


def test_python_distributions_carry_the_locks_hashes_and_their_licence() -> None:
    lock = load_lock(LOCK)
    found = components(make(lock=lock))
    six = found["pkg:pypi/six@1.17.0"]
    assert six["purl"] == "pkg:pypi/six@1.17.0"
    want = [
        h.partition(":")[2] for h in next(r for r in lock.requirements if r.name == "six").hashes
    ]
    assert [h["content"] for h in six["hashes"]] == want
    assert {h["alg"] for h in six["hashes"]} == {"SHA-256"}
    assert six["licenses"] == [{"license": {"id": "MIT"}}]
    assert found["pkg:pypi/idna@3.10"]["licenses"] == [{"license": {"name": "BSD License"}}]


def test_a_lock_change_is_a_changed_component() -> None:
    text = LOCK.read_bytes().replace(b"six==1.17.0", b"six==1.16.0")
    lock = parse_lock_bytes(text, LOCK)
    m = manifest(distributions=(Distribution("idna", "3.10"), Distribution("six", "1.16.0")))
    before, after = components(make()), components(make(m, lock))
    assert set(before) - set(after) == {"pkg:pypi/six@1.17.0"}
    assert set(after) - set(before) == {"pkg:pypi/six@1.16.0"}


def test_debian_packages_base_image_gpu_stack_and_runtime() -> None:
    gpu = manifest(
        variant="gpu",
        stack={"declared": {"cuda": "12.6.3", "cudnn": "9.6.0", "nccl": "2.23.4", "other": "1"}},
        gpu={"cuda": "12.6.3"},
        distributions=(Distribution("idna", "3.10"), Distribution("torch", "2.6.0", "base")),
    )
    found = components(make(gpu))
    debs = sorted(k for k in found if k.startswith("pkg:deb/"))
    assert debs == [
        "pkg:deb/debian/bash@5.2.15-2%2Bb7?arch=amd64&distro=debian-12",
        "pkg:deb/debian/libc6@2.36-9%2Bdeb12u10?arch=amd64&distro=debian-12",
        "pkg:deb/debian/tzdata@2025b-0%2Bdeb12u1?arch=all&distro=debian-12",
    ]
    assert found[debs[0]]["version"] == "5.2.15-2+b7"
    base = found["base"]
    assert base["version"] == "sha256:" + "ab" * 32
    assert base["purl"] == (
        "pkg:oci/python@sha256:" + "ab" * 32 + "?repository_url=127.0.0.1:5000/team/python"
    )
    assert {found[f"nvidia-{k}"]["version"] for k in ("cuda", "cudnn", "nccl")} == {
        "12.6.3", "9.6.0", "2.23.4",
    }  # fmt: skip
    assert (
        "base:pkg:pypi/torch@2.6.0" in found and "hashes" not in found["base:pkg:pypi/torch@2.6.0"]
    )
    assert found["reprobuild-runtime"]["version"] == "0.1.0"
    assert found["python"]["version"] == "3.11.2"
    data = json.loads(make(gpu))
    assert data["metadata"]["tools"]["components"][0]["name"] == "reprobuild"
    (root,) = [d for d in data["dependencies"] if d["ref"] == "image"]
    assert set(root["dependsOn"]) == set(found)


def test_dpkg_status_parsing() -> None:
    got = sbom.dpkg_packages([STATUS, "garbage\n\n\n", ""])
    assert [(p["name"], p["version"]) for p in got] == [
        ("bash", "5.2.15-2+b7"),
        ("libc6", "2.36-9+deb12u10"),
    ]
    assert got[1]["source"] == "glibc"


@pytest.mark.parametrize(
    ("meta", "want"),
    [
        ({"license_expression": "Apache-2.0 OR MIT", "license": "BSD"}, "Apache-2.0 OR MIT"),
        ({"license": "MIT"}, "MIT"),
        ({"license": "UNKNOWN"}, ""),
        ({"license": "a whole\nlicence text"}, ""),
        ({"classifiers": ["License :: OSI Approved :: MIT License"]}, "MIT License"),
        ({}, ""),
    ],
)
def test_licence_text(meta: dict[str, Any], want: str) -> None:
    assert sbom.licence_text(meta) == want


def test_the_stamp_puts_the_sbom_beside_the_manifest() -> None:
    assert posixpath.dirname(sbom.SBOM_PATH) == posixpath.dirname(MANIFEST_PATH)
    files = render_stamp("scratch:1", b"{}", {}, b'{"bomFormat": "CycloneDX"}\n')
    assert files[posixpath.basename(sbom.SBOM_PATH)].data == b'{"bomFormat": "CycloneDX"}\n'
    dockerfile = files["Dockerfile"].data.decode()
    assert "COPY manifest.json sbom.cdx.json /opt/reprobuild/\n" in dockerfile


def test_check_document_refuses_what_is_not_cyclonedx(tmp_path: Path) -> None:
    from reprobuild.errors import ReprobuildError

    assert sbom.check_document(make(), "x")["bomFormat"] == "CycloneDX"
    with pytest.raises(ReprobuildError, match="is not a CycloneDX document"):
        sbom.check_document(b"[]", "the SBOM")


def test_rebuild_says_whether_the_sboms_are_the_same() -> None:
    from reprobuild.checks.rebuild import RebuildReport, render_table

    a, b = "ab" * 32, "cd" * 32
    same = render_table(
        RebuildReport("img", "sha256:1", "sha256:1", sbom_recorded=a, sbom_rebuilt=a)
    )
    assert f"sbom      the same (sha256 {a[:12]}...)" in same
    differs = RebuildReport("img", "sha256:1", "sha256:2", sbom_recorded=a, sbom_rebuilt=b)
    assert f"sbom      differs: recorded sha256 {a[:12]}..., rebuilt {b[:12]}..." in render_table(
        differs
    )
    assert differs.to_dict()["sbom_rebuilt"] == b
    old = render_table(RebuildReport("img", "sha256:1", "sha256:1", sbom_rebuilt=b))
    assert "sbom      the recorded image has none (built before images had one)" in old
