"""The base-image catalog: the shipped file, every refusal of parse_catalog, catalog names."""

from __future__ import annotations

import copy
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from reprobuild.bases.catalog import (
    SCHEMA_VERSION,
    BaseEntry,
    Catalog,
    Fact,
    default_catalog_text,
    dump_catalog,
    fact_keys,
    is_catalog_name,
    load_catalog,
    parse_catalog,
    schema,
    write_catalog,
)
from reprobuild.bases.refs import parse_pinned, parse_ref
from reprobuild.errors import CatalogError, ImageRefError

REPO = Path(__file__).resolve().parents[2]
DIGEST = "sha256:" + "ab" * 32
ENTRY: dict[str, Any] = {
    "kind": "cpu",
    "ref": f"python:3.11-slim@{DIGEST}",
    "platform": "linux/amd64",
    "source": "test",
    "verified": True,
    "versions": {
        "python": {"value": "3.11", "source": "py docs"},
        "os": {"value": "debian-12", "source": "os docs"},
    },
}
GPU_VERSIONS: dict[str, Any] = {
    key: {"value": value, "source": f"notes for {key}"}
    for key, value in {
        "python": "3.12",
        "cuda": "12.8.0",
        "cudnn": "9.7.0",
        "nccl": "2.25.1",
        "torch": "2.6.0a0",
        "driver_min": "570",
    }.items()
}


def doc(**entry_over: Any) -> dict[str, Any]:
    entry = copy.deepcopy(ENTRY)
    for key, value in entry_over.items():
        if value is None:
            entry.pop(key)
        else:
            entry[key] = value
    return {"schema_version": SCHEMA_VERSION, "bases": {"py": entry}}


def refused(data: Any, pattern: str) -> CatalogError:
    with pytest.raises(CatalogError, match=pattern) as info:
        parse_catalog(data, "w")
    return info.value


# --------------------------------------------------------------------------- shipped catalog


def test_shipped_catalog_loads_and_every_entry_is_pinned() -> None:
    catalog = load_catalog()
    assert catalog.entries, "the shipped catalog is empty"
    for name, entry in catalog.entries.items():
        assert entry.name == name
        assert entry.kind in ("cpu", "gpu")
        assert entry.ref.pinned and entry.ref.tag, name
        assert entry.ref.digest is not None
        assert entry.ref.by_digest().endswith(entry.ref.digest)
        assert entry.platform
        assert entry.source
        assert entry.python, name
        for key, fact in entry.versions.items():
            assert fact.value and fact.source, (name, key)


def test_shipped_gpu_entries_carry_the_whole_stack() -> None:
    gpu = [e for e in load_catalog().entries.values() if e.kind == "gpu"]
    assert gpu, "the shipped catalog has no GPU (NGC) base"
    for entry in gpu:
        for key in ("cuda", "cudnn", "nccl", "driver_min", "python"):
            assert entry.version(key), (entry.name, key)
        assert entry.version("torch") or entry.version("tensorflow"), entry.name
        assert entry.ref.registry == "nvcr.io", entry.name
        assert entry.entrypoint == ("/opt/nvidia/nvidia_entrypoint.sh",), entry.name


def test_shipped_catalog_matches_images_catalog_yaml() -> None:
    source = (REPO / "images" / "catalog.yaml").read_text("utf-8")
    assert default_catalog_text() == source
    assert load_catalog(REPO / "images" / "catalog.yaml") == load_catalog()


def test_the_wheels_catalog_is_read_without_jsonschema_and_a_named_one_with_it() -> None:
    """The wheel's catalog was checked against the schema above; a build does not import
    jsonschema for it again (1.9 s with jsonschema[format-nongpl] installed). A catalog named
    by path still goes through the schema."""
    program = (
        "import sys; from pathlib import Path; from reprobuild.bases import catalog\n"
        "assert catalog._shipped('catalog.yaml'), 'tests run the installed wheel'\n"
        "catalog.load_catalog(); assert 'jsonschema' not in sys.modules\n"
        f"catalog.load_catalog(Path({str(REPO / 'images' / 'catalog.yaml')!r}))\n"
        "assert 'jsonschema' in sys.modules\n"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_shipped_catalog_is_in_canonical_form() -> None:
    """`resolve --refresh` rewrites the file with dump_catalog: a refresh's diff is its change."""
    source = (REPO / "images" / "catalog.yaml").read_text("utf-8")
    assert dump_catalog(load_catalog()) == source


def test_shipped_schema_is_the_source_trees() -> None:
    import json

    assert schema() == json.loads((REPO / "images" / "catalog.schema.json").read_text())
    assert "cuda" in fact_keys() and "python" in fact_keys()


def test_shipped_catalog_has_the_tiny_projects_base() -> None:
    data = yaml.safe_load((REPO / "tests/data/projects/tiny/reprobuild.yaml").read_text())
    entry = load_catalog().get(data["base"]["cpu"])
    assert entry.kind == "cpu"


# --------------------------------------------------------------------------- parse_catalog


def test_valid_entry_parsed() -> None:
    catalog = parse_catalog(doc(), "t.yaml")
    assert catalog == Catalog(
        {
            "py": BaseEntry(
                name="py",
                kind="cpu",
                ref=parse_ref(f"python:3.11-slim@{DIGEST}"),
                platform="linux/amd64",
                source="test",
                verified=True,
                versions={
                    "python": Fact("3.11", "py docs"),
                    "os": Fact("debian-12", "os docs"),
                },
            )
        }
    )
    entry = catalog.get("py")
    assert entry.python == "3.11" and entry.version("cuda") is None


def test_round_trip_through_dump() -> None:
    data = doc(entrypoint=["/x.sh"], platform_digest="sha256:" + "cd" * 32)
    catalog = parse_catalog(data, "t")
    assert parse_catalog(yaml.safe_load(dump_catalog(catalog)), "t") == catalog
    assert yaml.safe_load(dump_catalog(catalog)) == data


def test_write_catalog_validates_and_replaces(tmp_path: Path) -> None:
    path = tmp_path / "catalog.yaml"
    catalog = parse_catalog(doc(), "t")
    write_catalog(path, catalog)
    assert load_catalog(path) == catalog
    assert [p.name for p in tmp_path.iterdir()] == ["catalog.yaml"]


def test_optional_fields_default() -> None:
    entry = parse_catalog(doc(), "t").get("py")
    assert entry.entrypoint is None
    assert entry.platform_digest is None


def test_gpu_entry_with_the_whole_stack_accepted() -> None:
    entry = parse_catalog(doc(kind="gpu", versions=GPU_VERSIONS), "w").get("py")
    assert entry.kind == "gpu" and entry.version("driver_min") == "570"


@pytest.mark.parametrize("missing", ["cuda", "cudnn", "nccl", "driver_min", "python"])
def test_gpu_entry_must_carry_its_stack(missing: str) -> None:
    versions = {k: v for k, v in GPU_VERSIONS.items() if k != missing}
    refused(
        doc(kind="gpu", versions=versions),
        rf"^w: bases\.py\.versions: '{missing}' is a required property$",
    )


def test_gpu_entry_needs_a_framework() -> None:
    versions = {k: v for k, v in GPU_VERSIONS.items() if k != "torch"}
    refused(
        doc(kind="gpu", versions=versions),
        r"^w: bases\.py\.versions: needs one of: torch, tensorflow$",
    )


def test_tensorflow_is_a_framework_too() -> None:
    versions = {k: v for k, v in GPU_VERSIONS.items() if k != "torch"}
    versions["tensorflow"] = {"value": "2.17.0", "source": "notes"}
    assert parse_catalog(doc(kind="gpu", versions=versions), "w").get("py").kind == "gpu"


def test_empty_bases_is_an_empty_catalog() -> None:
    catalog = parse_catalog({"schema_version": SCHEMA_VERSION, "bases": {}}, "t")
    with pytest.raises(CatalogError, match=r"no base named 'x' in the catalog; known: \(none\)"):
        catalog.get("x")


@pytest.mark.parametrize(
    "data",
    [
        {"schema_version": 1, "bases": {}},
        {"schema_version": 0, "bases": {}},
        {"schema_version": "2", "bases": {}},
        {"schema_version": True, "bases": {}},
        {"bases": {}},
        None,
        [],
        "schema_version: 2",
    ],
)
def test_schema_version_mismatch(data: Any) -> None:
    error = refused(data, f"^w: schema_version must be {SCHEMA_VERSION}, got ")
    assert error.hint is not None and "catalog.schema.json" in error.hint


@pytest.mark.parametrize("bases", [None, [], "x", 1])
def test_bases_must_be_mapping(bases: Any) -> None:
    refused({"schema_version": SCHEMA_VERSION, "bases": bases}, r"^w: bases: .* is not of type")


def test_entry_must_be_mapping() -> None:
    refused(
        {"schema_version": SCHEMA_VERSION, "bases": {"py": "python:3@" + DIGEST}},
        r"^w: bases\.py: .* is not of type 'object'$",
    )


def test_bad_entry_name() -> None:
    data = {"schema_version": SCHEMA_VERSION, "bases": {"Py/3": ENTRY}}
    refused(data, r"^w: bases: 'Py/3' does not match")


def test_long_values_are_named_by_type() -> None:
    error = refused(
        {"schema_version": SCHEMA_VERSION, "bases": ["x" * 100]}, r"^w: bases: a list is not"
    )
    assert len(error.message) < 100


def test_unknown_entry_key() -> None:
    refused(doc(digest=DIGEST), r"^w: bases\.py: Additional properties are not allowed \('digest'")


def test_unknown_version_key() -> None:
    versions = {**ENTRY["versions"], "pythn": {"value": "3", "source": "s"}}
    refused(doc(versions=versions), r"^w: bases\.py\.versions: .*'pythn' was unexpected")


@pytest.mark.parametrize("key", ["kind", "ref", "platform", "source", "verified", "versions"])
def test_missing_required_key(key: str) -> None:
    refused(doc(**{key: None}), rf"^w: bases\.py: '{key}' is a required property$")


@pytest.mark.parametrize("kind", ["tpu", "CPU", "", 1, ["cpu"]])
def test_bad_kind(kind: Any) -> None:
    refused(doc(kind=kind), r"^w: bases\.py\.kind: .* is not one of \['cpu', 'gpu'\]$")


@pytest.mark.parametrize(
    ("field", "value", "pattern"),
    [
        ("verified", "yes", r"bases\.py\.verified: 'yes' is not of type 'boolean'"),
        ("platform", "linux", r"bases\.py\.platform: 'linux' does not match"),
        ("platform_digest", "sha256:abc", r"bases\.py\.platform_digest: 'sha256:abc' does not"),
        ("entrypoint", "/x.sh", r"bases\.py\.entrypoint: '/x.sh' is not of type 'array'"),
        ("entrypoint", [""], r"bases\.py\.entrypoint\.0: '' should be non-empty"),
        ("source", "two\nlines", r"bases\.py\.source: 'two\\nlines' does not match"),
    ],
)
def test_bad_field_values(field: str, value: Any, pattern: str) -> None:
    refused(doc(**{field: value}), "^w: " + pattern)


@pytest.mark.parametrize(
    ("fact", "pattern"),
    [
        ({"value": 3.11, "source": "s"}, r"versions\.python\.value: 3\.11 is not of type 'string'"),
        ({"value": "3.11"}, r"versions\.python: 'source' is a required property"),
        ({"value": "3.11; rm -rf /", "source": "s"}, r"versions\.python\.value: .* does not match"),
        ("3.11", r"versions\.python: '3\.11' is not of type 'object'"),
    ],
)
def test_bad_facts(fact: Any, pattern: str) -> None:
    versions = {**ENTRY["versions"], "python": fact}
    refused(doc(versions=versions), r"^w: bases\.py\." + pattern)


def test_unpinned_ref_refused() -> None:
    error = refused(doc(ref="python:3.11-slim"), "^w: ")
    assert error.message.startswith("w: catalog base 'py' 'python:3.11-slim' is not pinned")


def test_ref_without_a_tag_refused() -> None:
    refused(
        doc(ref=f"python@{DIGEST}"), r"^w: catalog base 'py' ref .* has no tag; write NAME:TAG@"
    )


@pytest.mark.parametrize("ref", ["Python@" + DIGEST, "python@sha256:abc", "py thon@" + DIGEST])
def test_malformed_ref_refused(ref: str) -> None:
    refused(doc(ref=ref), r"^w: invalid")


# --------------------------------------------------------------------------- load_catalog


def test_load_catalog_from_path(tmp_path: Path) -> None:
    path = tmp_path / "catalog.yaml"
    path.write_text(yaml.safe_dump(doc()))
    assert load_catalog(path).get("py").ref.digest == DIGEST


def test_load_catalog_missing_file(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match=r"absent\.yaml: not found"):
        load_catalog(tmp_path / "absent.yaml")


def test_load_catalog_bad_yaml(tmp_path: Path) -> None:
    path = tmp_path / "catalog.yaml"
    path.write_text("schema_version: 2\nbases: [oops\n")
    with pytest.raises(CatalogError, match=re.escape(f"{path}:3:1: invalid YAML")):
        load_catalog(path)


def test_load_catalog_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "catalog.yaml"
    path.write_bytes(b"schema_version: 2\n# \xff\n")
    with pytest.raises(CatalogError, match=r"catalog\.yaml:2:3: is not UTF-8"):
        load_catalog(path)


def test_load_catalog_wrong_schema_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "catalog.yaml"
    path.write_text("schema_version: 9\nbases: {}\n")
    with pytest.raises(CatalogError, match=f"^{re.escape(str(path))}:1: schema_version must be 2"):
        load_catalog(path)


# ------------------------------------------------- a project's base: catalog name or pinned ref
# (plan.plan_build resolves a catalog name through the project's base lock, see
# test_baselock.py; anything else must be a full reference pinned by digest)


@pytest.fixture
def catalog() -> Catalog:
    return parse_catalog(doc(), "t")


def test_catalog_name(catalog: Catalog) -> None:
    assert is_catalog_name("py")
    assert catalog.get("py").ref == parse_ref(f"python:3.11-slim@{DIGEST}")


def test_unknown_name_lists_known(catalog: Catalog) -> None:
    with pytest.raises(CatalogError, match="no base named 'nope' in the catalog; known: py") as e:
        catalog.get("nope")
    assert e.value.hint is not None
    assert "NAME@sha256" in e.value.hint


@pytest.mark.parametrize(
    "value",
    [
        f"python@{DIGEST}",
        f"python:3.12@{DIGEST}",
        f"localhost:5000/team/base@{DIGEST}",
        f"ghcr.io/org/img:1@{DIGEST}",
    ],
)
def test_full_ref_is_not_a_catalog_name(value: str) -> None:
    assert not is_catalog_name(value)
    assert parse_pinned(value) == parse_ref(value)


@pytest.mark.parametrize("value", ["python:3.11", "org/img", "localhost:5000/img"])
def test_bare_tag_refused(value: str) -> None:
    assert not is_catalog_name(value)
    with pytest.raises(ImageRefError, match="is not pinned by digest") as info:
        parse_pinned(value)
    assert info.value.hint is not None
    assert f"reprobuild resolve {value}" in info.value.hint


def test_shipped_names() -> None:
    shipped = load_catalog()
    for name, entry in shipped.entries.items():
        assert is_catalog_name(name)
        assert shipped.get(name).ref == entry.ref
