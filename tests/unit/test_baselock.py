"""The project's base lock: a catalog name is pinned on first use and stays pinned."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from reprobuild.bases import baselock
from reprobuild.bases.catalog import Catalog, load_catalog
from reprobuild.bases.refs import parse_ref
from reprobuild.cli import main
from reprobuild.errors import CatalogError
from reprobuild.imaging.plan import plan_build, record_base_platform, record_new_base
from reprobuild.imaging.render import RenderSpec
from reprobuild.project.config import ProjectConfig

NAME = "python-3.11-slim-bookworm"
OTHER = "sha256:" + "ee" * 32


def moved(catalog: Catalog, name: str = NAME) -> Catalog:
    """The catalog as a later release might ship it: the same name, another digest."""
    entry = catalog.get(name)
    return catalog.with_entry(replace(entry, ref=entry.ref.with_digest(OTHER)))


def make_spec(
    directory: Path, *, log: Callable[[str], None] = lambda _: None, **options: Any
) -> tuple[ProjectConfig, RenderSpec]:
    """What ``render`` and ``image`` do: plan (reading only), then record a new base."""
    plan = plan_build(directory, **options)
    record_new_base(plan, log)
    return plan.config, plan.spec


@pytest.fixture
def fresh(project: Callable[[str], Path]) -> Path:
    """The tiny project without its committed lock: as a new project starts."""
    root = project("tiny")
    baselock.lock_path(root).unlink()
    return root


def test_first_render_records_the_catalog_digest(fresh: Path) -> None:
    notes: list[str] = []
    _, spec = make_spec(fresh, log=notes.append)
    entry = load_catalog().get(NAME)
    assert spec.base == entry.ref
    assert spec.base_entrypoint == entry.entrypoint
    lock = baselock.load_base_lock(fresh)
    assert lock.bases[NAME].ref == entry.ref
    assert lock.bases[NAME].versions["python"] == entry.version("python")
    assert len(notes) == 1 and "recorded" in notes[0] and "commit it" in notes[0]
    # the file is a typed JSON record with a schema version, and a second render is silent
    doc = json.loads(baselock.lock_path(fresh).read_text())
    assert doc["schema_version"] == baselock.SCHEMA_VERSION
    notes.clear()
    make_spec(fresh, log=notes.append)
    assert notes == []


def test_a_newer_catalog_does_not_move_a_locked_project(fresh: Path) -> None:
    make_spec(fresh)
    notes: list[str] = []
    _, spec = make_spec(fresh, catalog=moved(load_catalog()), log=notes.append)
    assert spec.base == load_catalog().get(NAME).ref  # still the recorded digest
    assert len(notes) == 1
    assert "stays on" in notes[0] and OTHER in notes[0] and "--update" in notes[0]


def test_update_moves_the_lock_to_the_catalog(fresh: Path) -> None:
    make_spec(fresh)
    newer = moved(load_catalog())
    [(name, old, new)] = baselock.update(fresh, [NAME], newer)
    assert (name, old, new) == (NAME, load_catalog().get(NAME).ref.digest, OTHER)
    _, spec = make_spec(fresh, catalog=newer)
    assert spec.base.digest == OTHER
    assert baselock.status(NAME, baselock.load_base_lock(fresh), newer) == "locked"


def test_a_base_removed_from_the_catalog_still_builds_from_the_lock(fresh: Path) -> None:
    make_spec(fresh)
    empty = Catalog({})
    _, spec = make_spec(fresh, catalog=empty)
    assert spec.base == load_catalog().get(NAME).ref
    assert baselock.status(NAME, baselock.load_base_lock(fresh), empty) == "not-in-catalog"


def test_base_flag_and_pinned_refs_bypass_the_lock(fresh: Path) -> None:
    ref = "127.0.0.1:5000/x/base@sha256:" + "ab" * 32
    _, spec = make_spec(fresh, base=ref)
    assert spec.base == parse_ref(ref)
    assert not baselock.lock_path(fresh).exists()


def test_planning_writes_nothing(fresh: Path) -> None:
    """Planning only computes: the new base comes back for the command to record."""
    plan = plan_build(fresh)
    assert not baselock.lock_path(fresh).exists()
    assert plan.new_base is not None and plan.new_base.ref == plan.spec.base


def test_unknown_catalog_name_is_not_recorded(fresh: Path) -> None:
    text = (fresh / "reprobuild.yaml").read_text().replace(NAME, "pyton-3.11")
    (fresh / "reprobuild.yaml").write_text(text)
    with pytest.raises(CatalogError, match=r"no base named 'pyton-3\.11'"):
        make_spec(fresh)
    assert not baselock.lock_path(fresh).exists()


@pytest.mark.parametrize(
    ("text", "pattern"),
    [
        ("{", r"reprobuild\.bases\.lock is not valid JSON: .* \(line 1\)"),
        ('{"schema_version": 9, "bases": {}}', "schema_version must be 1"),
        ('{"schema_version": 1, "bases": []}', "'bases' must be a mapping"),
        ('{"schema_version": 1, "bases": {"a/b": {}}}', "must be a catalog name"),
        (
            '{"schema_version": 1, "bases": {"x": {"ref": "python:3.11", "platform": "p"}}}',
            "is not pinned by digest",
        ),
        (
            '{"schema_version": 1, "bases": {"x": {"ref": "python@sha256:'
            + "ab" * 32
            + '", "platform": "linux/amd64", "entrypoint": "sh"}}}',
            "entrypoint must be null or a list",
        ),
        (
            '{"schema_version": 1, "bases": {"x": {"ref": "python@sha256:' + "ab" * 32 + '"}}}',
            "lacks its platform",
        ),
        (
            '{"schema_version": 1, "bases": {"x": {"ref": "python@sha256:'
            + "ab" * 32
            + '", "platform": "linux/amd64", "entrypoint": null, '
            + '"platforms": {"linux/arm64": "latest"}}}}',
            "platforms must map OS/ARCH to sha256:<64 hex>",
        ),
    ],
)
def test_a_damaged_lock_is_refused_with_its_path(fresh: Path, text: str, pattern: str) -> None:
    baselock.lock_path(fresh).write_text(text)
    with pytest.raises(CatalogError, match=pattern) as info:
        make_spec(fresh)
    assert str(baselock.lock_path(fresh)) in info.value.message
    assert info.value.hint and "version control" in info.value.hint


def test_a_platform_built_for_records_its_image_once(fresh: Path) -> None:
    """``image --platform linux/arm64`` on a catalog base (an index): the index's arm64
    image, by its own digest, in the base lock beside the index digest; once."""
    plan = plan_build(fresh)
    record_new_base(plan, lambda _: None)
    assert plan.base_name == NAME
    before = baselock.lock_path(fresh).read_text()
    assert '"platforms"' not in before  # a lock without platforms reads as before
    arm = "sha256:" + "a1" * 32
    notes: list[str] = []
    record_base_platform(plan, "linux/arm64", arm, notes.append)
    assert len(notes) == 1 and "recorded its linux/arm64 image" in notes[0]
    locked = baselock.load_base_lock(fresh).bases[NAME]
    assert locked.platforms == {"linux/arm64": arm}
    assert locked.ref == load_catalog().get(NAME).ref  # the index stays the pin
    notes.clear()
    record_base_platform(plan, "linux/arm64", arm, notes.append)  # again: silent, unchanged
    assert notes == []
    with pytest.raises(CatalogError, match=r"records sha256:a1a1.* for linux/arm64, and its index"):
        record_base_platform(plan, "linux/arm64", "sha256:" + "b2" * 32, notes.append)
    assert baselock.load_base_lock(fresh).bases[NAME].platforms == {"linux/arm64": arm}
    # a base given by digest is not the project's to record
    assert plan_build(fresh, base=str(locked.ref)).base_name is None


def test_an_index_builds_platforms_from_plans_made_before_the_first(fresh: Path) -> None:
    """``image --platform linux/amd64,linux/arm64`` plans both platforms before building
    either, so both plans hold the base as new. The first records it and its platform; the
    second's record is silent and keeps the first's platform."""
    amd, arm = plan_build(fresh), plan_build(fresh, machine="aarch64")
    assert amd.new_base is not None and arm.new_base is not None
    notes: list[str] = []
    record_new_base(amd, notes.append)
    record_base_platform(amd, "linux/amd64", "sha256:" + "a1" * 32, notes.append)
    assert [n for n in notes if "recorded" in n] == notes and len(notes) == 2
    notes.clear()
    record_new_base(arm, notes.append)
    record_base_platform(arm, "linux/arm64", "sha256:" + "b2" * 32, notes.append)
    assert len(notes) == 1 and "recorded its linux/arm64 image" in notes[0]
    assert baselock.load_base_lock(fresh).bases[NAME].platforms == {
        "linux/amd64": "sha256:" + "a1" * 32,
        "linux/arm64": "sha256:" + "b2" * 32,
    }


# ------------------------------------------------------------------------------ the CLI


def test_bases_command_lists_and_updates(fresh: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bases", str(fresh), "--json"]) == 0
    [row] = json.loads(capsys.readouterr().out)["bases"]
    assert (row["variant"], row["base"], row["status"], row["locked"]) == (
        "cpu",
        NAME,
        "unlocked",
        None,
    )
    assert main(["bases", str(fresh), "--update"]) == 0
    captured = capsys.readouterr()
    assert f"{NAME}: (not locked) -> sha256:" in captured.err
    assert captured.out.split()[:3] == ["cpu", NAME, "locked"]
    assert baselock.lock_path(fresh).is_file()


def test_bases_update_of_a_name_the_project_does_not_use(
    fresh: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["bases", str(fresh), "--update", "ngc-pytorch-25.01"]) == 1
    err = capsys.readouterr().err
    assert "'ngc-pytorch-25.01' is not a catalog base this project uses" in err
    assert not baselock.lock_path(fresh).exists()


def test_committed_locks_match_the_shipped_catalog() -> None:
    """Every project in this repo keeps a lock, and it agrees with the catalog we ship."""
    repo = Path(__file__).resolve().parents[2]
    catalog = load_catalog()
    locks = sorted(repo.glob("images/*/reprobuild.bases.lock")) + sorted(
        repo.glob("tests/data/projects/*/reprobuild.bases.lock")
    )
    assert len(locks) >= 6
    for path in locks:
        lock = baselock.load_base_lock(path.parent)
        for name in lock.bases:
            assert baselock.status(name, lock, catalog) == "locked", (path, name)
