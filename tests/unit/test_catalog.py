"""The base-image catalog: the shipped file, every refusal of parse_catalog, resolve_base."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from reprobuild.catalog import (
    SCHEMA_VERSION,
    BaseEntry,
    Catalog,
    default_catalog_text,
    load_catalog,
    parse_catalog,
    resolve_base,
)
from reprobuild.errors import CatalogError, ImageRefError
from reprobuild.refs import parse_ref

REPO = Path(__file__).resolve().parents[2]
DIGEST = "sha256:" + "ab" * 32
ENTRY: dict[str, Any] = {
    "kind": "cpu",
    "ref": f"python:3.11-slim@{DIGEST}",
    "platform": "linux/amd64",
    "python": "3.11",
    "os": "debian-12",
    "source": "test",
    "verified": True,
}


def doc(**entry_over: Any) -> dict[str, Any]:
    entry = copy.deepcopy(ENTRY)
    for key, value in entry_over.items():
        if value is None:
            entry.pop(key)
        else:
            entry[key] = value
    return {"schema_version": SCHEMA_VERSION, "bases": {"py": entry}}


# --------------------------------------------------------------------------- shipped catalog


def test_shipped_catalog_loads_and_every_entry_is_pinned() -> None:
    catalog = load_catalog()
    assert catalog.entries, "the shipped catalog is empty"
    for name, entry in catalog.entries.items():
        assert entry.name == name
        assert entry.kind in ("cpu", "gpu")
        assert entry.ref.pinned, name
        assert entry.ref.digest is not None
        assert entry.ref.by_digest().endswith(entry.ref.digest)
        assert entry.platform
        assert entry.source


def test_shipped_catalog_matches_images_catalog_yaml() -> None:
    source = (REPO / "images" / "catalog.yaml").read_text("utf-8")
    assert default_catalog_text() == source
    assert load_catalog(REPO / "images" / "catalog.yaml") == load_catalog()


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
                python="3.11",
                os="debian-12",
                verified=True,
            )
        }
    )


def test_optional_fields_default() -> None:
    entry = parse_catalog(doc(python=None, os=None, verified=None), "t").get("py")
    assert entry.python is None
    assert entry.os is None
    assert entry.verified is False


def test_numeric_python_is_kept_as_text() -> None:
    assert parse_catalog(doc(python=3.12), "t").get("py").python == "3.12"


def test_empty_bases_is_an_empty_catalog() -> None:
    catalog = parse_catalog({"schema_version": 1, "bases": {}}, "t")
    with pytest.raises(CatalogError, match=r"no base named 'x' in the catalog; known: \(none\)"):
        catalog.get("x")


@pytest.mark.parametrize(
    "data",
    [
        {"schema_version": 2, "bases": {}},
        {"schema_version": 0, "bases": {}},
        {"schema_version": "1", "bases": {}},
        {"bases": {}},
        None,
        [],
        "schema_version: 1",
    ],
)
def test_schema_version_mismatch(data: Any) -> None:
    with pytest.raises(CatalogError, match=f"^where: schema_version must be {SCHEMA_VERSION}$"):
        parse_catalog(data, "where")


@pytest.mark.parametrize("bases", [None, [], "x", 1])
def test_bases_must_be_mapping(bases: Any) -> None:
    with pytest.raises(CatalogError, match="'bases' must be a mapping"):
        parse_catalog({"schema_version": 1, "bases": bases}, "w")


def test_entry_must_be_mapping() -> None:
    with pytest.raises(CatalogError, match="w: base 'py' must be a mapping"):
        parse_catalog({"schema_version": 1, "bases": {"py": "python:3@" + DIGEST}}, "w")


def test_unknown_entry_key() -> None:
    with pytest.raises(CatalogError, match="w: base 'py' has unknown key 'digest'"):
        parse_catalog(doc(digest=DIGEST), "w")


@pytest.mark.parametrize("key", ["kind", "ref", "platform", "source"])
def test_missing_required_key(key: str) -> None:
    with pytest.raises(CatalogError, match=f"w: base 'py' lacks {key!r}"):
        parse_catalog(doc(**{key: None}), "w")


@pytest.mark.parametrize("kind", ["tpu", "CPU", "", 1, ["cpu"]])
def test_bad_kind(kind: Any) -> None:
    with pytest.raises(CatalogError, match="w: base 'py' kind must be cpu or gpu"):
        parse_catalog(doc(kind=kind), "w")


def test_gpu_kind_accepted() -> None:
    assert parse_catalog(doc(kind="gpu"), "w").get("py").kind == "gpu"


def test_unpinned_ref_refused() -> None:
    with pytest.raises(CatalogError) as info:
        parse_catalog(doc(ref="python:3.11-slim"), "w")
    message = info.value.message
    assert message.startswith("w: catalog base 'py' 'python:3.11-slim' is not pinned by digest")


@pytest.mark.parametrize("ref", ["Python@" + DIGEST, "python@sha256:abc", "py thon@" + DIGEST])
def test_malformed_ref_refused(ref: str) -> None:
    with pytest.raises(CatalogError, match=r"^w: invalid"):
        parse_catalog(doc(ref=ref), "w")


# --------------------------------------------------------------------------- load_catalog


def test_load_catalog_from_path(tmp_path: Path) -> None:
    path = tmp_path / "catalog.yaml"
    path.write_text(yaml.safe_dump(doc()))
    assert load_catalog(path).get("py").ref.digest == DIGEST


def test_load_catalog_missing_file(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match="cannot be read"):
        load_catalog(tmp_path / "absent.yaml")


def test_load_catalog_bad_yaml(tmp_path: Path) -> None:
    path = tmp_path / "catalog.yaml"
    path.write_text("schema_version: 1\nbases: [oops\n")
    with pytest.raises(CatalogError, match=re.escape(f"{path}: cannot be read")):
        load_catalog(path)


def test_load_catalog_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "catalog.yaml"
    path.write_bytes(b"schema_version: 1\n# \xff\n")
    with pytest.raises(CatalogError, match="cannot be read"):
        load_catalog(path)


def test_load_catalog_wrong_schema_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "catalog.yaml"
    path.write_text("schema_version: 9\nbases: {}\n")
    with pytest.raises(CatalogError, match=f"^{re.escape(str(path))}: schema_version must be 1$"):
        load_catalog(path)


# --------------------------------------------------------------------------- resolve_base


@pytest.fixture
def catalog() -> Catalog:
    return parse_catalog(doc(), "t")


def test_resolve_base_catalog_name(catalog: Catalog) -> None:
    assert resolve_base("py", catalog) == parse_ref(f"python:3.11-slim@{DIGEST}")


def test_resolve_base_unknown_name_lists_known(catalog: Catalog) -> None:
    with pytest.raises(CatalogError, match="no base named 'nope' in the catalog; known: py") as e:
        resolve_base("nope", catalog)
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
def test_resolve_base_full_ref(catalog: Catalog, value: str) -> None:
    assert resolve_base(value, catalog) == parse_ref(value)


@pytest.mark.parametrize("value", ["python:3.11", "org/img", "localhost:5000/img"])
def test_resolve_base_bare_tag_refused(catalog: Catalog, value: str) -> None:
    with pytest.raises(ImageRefError, match="is not pinned by digest") as info:
        resolve_base(value, catalog)
    assert info.value.hint is not None
    assert f"reprobuild resolve {value}" in info.value.hint


def test_resolve_base_shipped_name() -> None:
    shipped = load_catalog()
    for name, entry in shipped.entries.items():
        assert resolve_base(name, shipped) == entry.ref
