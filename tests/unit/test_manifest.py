"""The image manifest: canonical JSON, a stable sha256, a strict reader."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

import pytest

from reprobuild.errors import ReprobuildError
from reprobuild.imaging.manifest import BUILD_LABEL, SCHEMA_VERSION, Distribution, Manifest


def manifest(**over: Any) -> Manifest:
    values: dict[str, Any] = dict(
        builder_version="0.1.0",
        name="team/demo",
        variant="cpu",
        base_ref="python:3.11-slim@sha256:" + "ab" * 32,
        base_digest="sha256:" + "ab" * 32,
        lock_file="requirements.lock",
        lock_sha256="cd" * 32,
        seed=7,
        determinism="warn",
        created="1970-01-01T00:00:00Z",
        python_version="3.11.9",
        machine="x86_64",
        distributions=(Distribution("idna", "3.10"), Distribution("six", "1.17.0")),
        sbom_sha256="ef" * 32,
        lock_format="uv.lock",
        lock_selection={"extras": ["cpu"], "groups": [], "default_groups": True},
        built_from_source=[
            {
                "name": "docopt",
                "version": "0.6.2",
                "sdist": "docopt-0.6.2.tar.gz",
                "sdist_sha256": "sha256:" + "12" * 32,
                "wheel": "docopt-0.6.2-py2.py3-none-any.whl",
                "wheel_sha256": "sha256:" + "34" * 32,
            }
        ],
        build_lock={"file": "build-requirements.lock", "sha256": "56" * 32},
    )
    values.update(over)
    return Manifest(**values)


FIELDS = [f.name for f in dataclasses.fields(Manifest)]


def test_to_json_is_canonical() -> None:
    raw = manifest().to_json()
    assert isinstance(raw, bytes)
    assert raw.endswith(b"}\n")
    assert not raw.endswith(b"\n\n")
    data = json.loads(raw)
    assert list(data) == sorted(data)
    assert list(data["distributions"][0]) == ["name", "origin", "version"]
    assert raw == (json.dumps(data, sort_keys=True, indent=2) + "\n").encode()
    assert b'\n  "builder_version": "0.1.0",\n' in raw
    assert data["schema_version"] == SCHEMA_VERSION
    assert set(data) == set(FIELDS)


def test_to_json_independent_of_construction_order() -> None:
    a = manifest()
    kwargs = {f: getattr(a, f) for f in reversed(FIELDS)}
    b = Manifest(**kwargs)
    assert a.to_json() == b.to_json()


def test_sha256_is_sha_of_the_canonical_bytes() -> None:
    m = manifest()
    assert m.sha256 == hashlib.sha256(m.to_json()).hexdigest()
    assert m.sha256 == manifest().sha256
    assert len(m.sha256) == 64


def test_sha256_changes_with_any_field() -> None:
    base = manifest().sha256
    assert manifest(seed=8).sha256 != base
    assert manifest(distributions=(Distribution("idna", "3.10"),)).sha256 != base
    assert manifest(created="1970-01-01T00:00:01Z").sha256 != base


def test_non_ascii_is_escaped_and_stable() -> None:
    raw = manifest(name="café").to_json()
    assert raw.isascii()
    assert Manifest.from_json(raw).name == "café"


def test_round_trip() -> None:
    m = manifest()
    again = Manifest.from_json(m.to_json())
    assert again == m
    assert again.to_json() == m.to_json()
    assert isinstance(again.distributions, tuple)
    assert all(isinstance(d, Distribution) for d in again.distributions)


def test_round_trip_no_distributions() -> None:
    m = manifest(distributions=())
    assert Manifest.from_json(m.to_json()) == m


def test_from_json_ignores_key_order_and_whitespace() -> None:
    m = manifest()
    compact = json.dumps(m.to_dict(), separators=(",", ":")).encode()
    assert Manifest.from_json(compact) == m


def test_to_dict_lists_distributions() -> None:
    data = manifest().to_dict()
    assert data["distributions"] == [
        {"name": "idna", "version": "3.10", "origin": "lock"},
        {"name": "six", "version": "1.17.0", "origin": "lock"},
    ]


def test_manifest_without_origin_reads_as_lock() -> None:
    """Images built before distributions carried an origin still read back."""
    data = manifest().to_dict()
    for dist in data["distributions"]:
        del dist["origin"]
    assert Manifest.from_dict(data) == manifest()


def test_manifest_without_stack_or_gpu_reads_back() -> None:
    """Optional sections: CPU images and images built before them have neither."""
    data = manifest().to_dict()
    del data["stack"], data["gpu"]
    assert Manifest.from_dict(data) == manifest()


def test_gpu_manifest_labels_carry_the_stack_and_driver() -> None:
    m = dataclasses.replace(
        manifest(),
        stack={"labels": {"io.reprobuild.cuda": "12.6", "io.reprobuild.torch": "2.6.0a0"}},
        gpu={"cuda": "12.6", "driver_min": "560.28.03"},
    )
    labels = m.labels()
    assert labels["io.reprobuild.cuda"] == "12.6"
    assert labels["io.reprobuild.torch"] == "2.6.0a0"
    assert labels["io.reprobuild.driver.min"] == "560.28.03"
    assert Manifest.from_json(m.to_json()) == m


def test_labels() -> None:
    m = manifest()
    assert m.labels() == {
        "io.reprobuild.manifest.sha256": m.sha256,
        "io.reprobuild.python": "3.11.9",
    }


@pytest.mark.parametrize("version", [2, 0, "1", None])
def test_wrong_schema_version_refused(version: object) -> None:
    data = manifest().to_dict()
    data["schema_version"] = version
    with pytest.raises(ReprobuildError) as info:
        Manifest.from_json(json.dumps(data).encode())
    assert f"manifest schema_version {version!r} is not supported" in info.value.message
    assert f"reads {SCHEMA_VERSION}" in info.value.message
    assert info.value.hint is not None


def test_missing_schema_version_refused() -> None:
    data = manifest().to_dict()
    del data["schema_version"]
    with pytest.raises(ReprobuildError, match="schema_version None is not supported"):
        Manifest.from_dict(data)


@pytest.mark.parametrize(
    "field",
    [
        f
        for f in FIELDS
        if f
        not in (
            "schema_version",
            "stack",
            "gpu",
            "build",
            "sbom_sha256",
            "lock_format",
            "lock_selection",
            "built_from_source",
            "build_lock",
        )
    ],
)
def test_missing_field_named(field: str) -> None:
    data = manifest().to_dict()
    del data[field]
    with pytest.raises(ReprobuildError, match=f"manifest is missing field '{field}'"):
        Manifest.from_dict(data)


def test_a_manifest_from_before_the_sbom_keeps_its_bytes() -> None:
    """Images built before the SBOM have no sbom_sha256: read back, the manifest is the same
    bytes (its sha256 is a label of the image), and it says there is no SBOM."""
    data = manifest().to_dict()
    del data["sbom_sha256"]
    raw = (json.dumps(data, sort_keys=True, indent=2) + "\n").encode()
    old = Manifest.from_json(raw)
    assert old.sbom_sha256 is None
    assert old.to_json() == raw
    assert Manifest.from_json(manifest().to_json()).sbom_sha256 == "ef" * 32


def test_a_manifest_from_before_the_lock_format_keeps_its_bytes() -> None:
    """Images built before manifests named the lock's format and selection: read back, the
    same bytes, and no format to show."""
    data = manifest().to_dict()
    del data["lock_format"], data["lock_selection"]
    raw = (json.dumps(data, sort_keys=True, indent=2) + "\n").encode()
    old = Manifest.from_json(raw)
    assert old.lock_format is None and old.lock_selection is None
    assert old.lock_description is None
    assert old.to_json() == raw


def test_the_lock_is_described_by_format_and_selection() -> None:
    assert manifest().lock_description == "uv.lock (extras cpu; default groups)"
    plain = manifest(lock_format="requirements", lock_selection=None)
    assert plain.lock_description == "requirements"
    main = manifest(lock_selection={"extras": [], "groups": [], "default_groups": False})
    assert main.lock_description == "uv.lock (main only)"


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("lock_format", 7),
        ("lock_selection", ["cpu"]),
        ("lock_selection", {"extras": "cpu", "groups": [], "default_groups": False}),
        ("lock_selection", {"extras": [], "groups": []}),
    ],
)
def test_a_bad_lock_format_or_selection_is_refused(key: str, value: object) -> None:
    data = manifest().to_dict()
    data[key] = value
    with pytest.raises(ReprobuildError, match=f"manifest field '{key}' is not"):
        Manifest.from_dict(data)


@pytest.mark.parametrize("value", ["", "EF" * 32, "ef" * 31, 7, ["ef" * 32]])
def test_a_bad_sbom_sha256_is_refused(value: object) -> None:
    data = manifest().to_dict()
    data["sbom_sha256"] = value
    with pytest.raises(ReprobuildError, match="'sbom_sha256' is not a sha256 hex digest"):
        Manifest.from_dict(data)


def test_distribution_without_version() -> None:
    data = manifest().to_dict()
    data["distributions"] = [{"name": "six"}]
    with pytest.raises(ReprobuildError, match="manifest is missing field 'version'"):
        Manifest.from_dict(data)


@pytest.mark.parametrize("raw", [b"", b"{", b"not json", b"{'a': 1}", b"\xff\xfe\x00"])
def test_invalid_json_refused(raw: bytes) -> None:
    with pytest.raises(ReprobuildError, match="manifest is not valid JSON"):
        Manifest.from_json(raw)


@pytest.mark.parametrize("raw", [b"[]", b"1", b'"x"', b"null"])
def test_not_an_object_refused(raw: bytes) -> None:
    with pytest.raises(ReprobuildError, match="manifest is not a JSON object"):
        Manifest.from_json(raw)


def test_build_is_optional_and_recorded_in_labels() -> None:
    """Images built before the field existed still load; a recorded build is in the labels."""
    data = manifest().to_dict()
    del data["build"]
    assert Manifest.from_dict(data).build == {}
    assert not any(k.startswith(BUILD_LABEL) for k in Manifest.from_dict(data).labels())
    data["build"] = {"builder": "buildah", "builder_version": "1.28.2", "reproducible": True}
    labels = Manifest.from_dict(data).labels()
    assert labels[BUILD_LABEL + "builder"] == "buildah"
    assert labels[BUILD_LABEL + "builder-version"] == "1.28.2"
    assert labels[BUILD_LABEL + "reproducible"] == "true"


def test_build_must_be_an_object() -> None:
    data = manifest().to_dict()
    data["build"] = ["buildah"]
    with pytest.raises(ReprobuildError, match="manifest field 'build' is not a JSON object"):
        Manifest.from_dict(data)


def test_a_manifest_from_before_sdist_builds_keeps_its_bytes_and_bad_entries_are_refused() -> None:
    """Images built before issue 39 have no built_from_source/build_lock: the same bytes read
    back; a malformed entry is one error naming the field."""
    data = manifest().to_dict()
    del data["built_from_source"], data["build_lock"]
    raw = (json.dumps(data, sort_keys=True, indent=2) + "\n").encode()
    old = Manifest.from_json(raw)
    assert old.built_from_source is None and old.build_lock is None
    assert old.to_json() == raw
    assert Manifest.from_json(manifest().to_json()) == manifest()
    bad = manifest().to_dict()
    bad["built_from_source"] = [{"name": "docopt"}]
    with pytest.raises(ReprobuildError, match="'built_from_source' is not a list of"):
        Manifest.from_dict(bad)
    bad = manifest().to_dict()
    bad["build_lock"] = {"file": 1}
    with pytest.raises(ReprobuildError, match="'build_lock' is not"):
        Manifest.from_dict(bad)
