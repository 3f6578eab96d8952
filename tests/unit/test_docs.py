"""The docs site (docs/) held to the code, so that a page cannot drift from what it describes.

scripts/test builds the site with warnings as errors (the CLI reference is generated from the
parser there); these tests check what a build cannot:

- the architecture page names every package and module under builder/reprobuild/ and nothing
  that is not there (a ``cli`` package counts as one entry: its per-command modules are not
  listed);
- the project-file and variants pages name every key ``reprobuild.yaml`` accepts;
- the reference pages of the JSON documents (the image manifest, the run records, the verify
  report, ``diff --json``) name every field the code writes, found by building real documents
  with the code; and the manifest's JSON Schema, derived from its dataclass, accepts real
  manifests and refuses a field the code does not write.
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import json
import re
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from helpers import REPO
from reprobuild.checks import diff
from reprobuild.checks.streams import Divergence, JsonDifference, MetricSeries, NumericDiff
from reprobuild.checks.verify.report import (
    Failure,
    FileDigest,
    RunReport,
    StdoutCompare,
    VerifyReport,
)
from reprobuild.checks.verify.spec import DataMount
from reprobuild.checks.volatile import Ignored, RuleCount
from reprobuild.imaging.manifest import Distribution, Manifest
from reprobuild.project import config
from reprobuild_entrypoint import runrecord
from reprobuild_entrypoint.envplan import plan
from reprobuild_entrypoint.settings import from_environ

DOCS = REPO / "docs"
SOURCE = REPO / "builder" / "reprobuild"
ARCHITECTURE = DOCS / "explanation" / "architecture.md"
DIFF_DATA = REPO / "tests" / "data" / "diff"


def page(relative: str) -> str:
    return (DOCS / relative).read_text(encoding="utf-8")


# ------------------------------------------------------------------------- architecture


def modules_in_tree(root: Path) -> set[str]:
    """Every package and module under ``root`` as a dotted name (``reprobuild.imaging.image``);
    a package by its own name, never as ``__init__``. Whatever is under ``reprobuild.cli`` is
    the CLI's own business: ``reprobuild.cli`` is one entry, a module or a package."""
    names: set[str] = set()
    for path in root.rglob("*.py"):
        parts = [root.name, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        name = ".".join(parts)
        if name.startswith("reprobuild.cli."):
            name = "reprobuild.cli"
        names.add(name)
    return names


def modules_on_page(text: str) -> list[str]:
    """The first cell of each row of the page's module table: one dotted name in backticks."""
    section = text.split("\n## Modules\n", 1)[1].split("\n## ", 1)[0]
    names = []
    for line in section.splitlines():
        found = re.match(r"\| `(reprobuild(?:\.\w+)*)` \|", line)
        if found:
            names.append(found.group(1))
    return names


def test_the_architecture_page_names_every_module_and_only_those() -> None:
    on_page = modules_on_page(ARCHITECTURE.read_text(encoding="utf-8"))
    in_tree = modules_in_tree(SOURCE)
    assert len(on_page) == len(set(on_page)), "a module has two rows"
    assert sorted(in_tree - set(on_page)) == [], f"add a row to {ARCHITECTURE.name}"
    assert sorted(set(on_page) - in_tree) == [], "no such module: remove the row"


def test_the_architecture_check_sees_a_missing_and_an_extra_module(tmp_path: Path) -> None:
    """The check itself: a new module or a removed one is a difference; a cli package's own
    modules are not."""
    root = tmp_path / "reprobuild"
    for name in ("__init__.py", "errors.py", "imaging/__init__.py", "imaging/new.py"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("")
    for name in ("cli/__init__.py", "cli/image.py", "cli/verify.py"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("")
    assert modules_in_tree(root) == {
        "reprobuild",
        "reprobuild.errors",
        "reprobuild.imaging",
        "reprobuild.imaging.new",
        "reprobuild.cli",
    }
    text = "\n## Modules\n\n| `reprobuild` | x |\n| `reprobuild.gone` | y |\n\n## Next\n| `z` |"
    assert modules_on_page(text) == ["reprobuild", "reprobuild.gone"]


def test_the_architecture_page_names_every_layer() -> None:
    text = ARCHITECTURE.read_text(encoding="utf-8")
    layers = {p.name for p in SOURCE.iterdir() if (p / "__init__.py").exists()}
    layers |= {"cli", "errors"}
    block = text.split("\n## Layers\n", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"^\s*(?:> )?([\w|, ]+?)\s{2,}", block, re.M))
    words = {w.strip() for entry in named for w in re.split(r"[|,]", entry)}
    assert layers <= words, f"layers not in the layer diagram: {sorted(layers - words)}"


# ------------------------------------------------------------------------- project file


def test_the_project_file_page_names_every_key() -> None:
    text = page("reference/project-file.md")
    for key in config.KEYS:
        assert re.search(rf"^{key}:", text, re.M), f"reprobuild.yaml key {key!r} not shown"
    for key in config.BASE_KEYS:
        assert re.search(rf"^  {key}:", text, re.M), f"base.{key} not shown"
    variants = page("how-to/variants.md")
    for key in config.VARIANT_KEYS:
        assert f"| `{key}` |" in variants, f"matrix key {key!r} has no row"


# ------------------------------------------------------------------------ JSON documents


def _rows(text: str) -> list[tuple[str, str]]:
    """(first cell, whole row) of every table row on the page."""
    return [(line.split("|")[1], line) for line in text.splitlines() if line.startswith("| `")]


def _has_row(rows: list[tuple[str, str]], path: str) -> list[str]:
    """The rows of ``path`` itself (a list's items, ``P[]``, are described in the row of
    ``P``)."""
    path = path.removesuffix("[]")
    cells = (f"`{path}`", f"`{path}.*`")
    return [row for first, row in rows if any(cell in first for cell in cells)]


def _has_subrows(rows: list[tuple[str, str]], path: str) -> bool:
    return any(f"`{path}." in first or f"`{path}[]." in first for first, _ in rows)


def undocumented(
    document: Any, text: str, open_paths: frozenset[str] = frozenset(), path: str = ""
) -> Iterator[str]:
    """Each field path of ``document`` the page does not name. A field ``P.k`` is named by
    `` `P.k` `` anywhere on the page, or by the word ``k`` in a table row of its own for
    ``P`` (first cell `` `P` `` or `` `P.*` ``); a top-level field by `` `k` ``. Fields are
    followed down only as far as the page gives them rows; ``open_paths`` hold data-keyed
    mappings (variable names, file names) whose keys are not fields."""
    rows = _rows(text)
    if isinstance(document, list):
        if document:
            yield from undocumented(document[0], text, open_paths, path + "[]")
        return
    if not isinstance(document, dict) or path in open_paths:
        return
    parent_rows = _has_row(rows, path) if path else []
    for key, value in document.items():
        child = f"{path}.{key}" if path else key
        named = (
            f"`{child}`" in text
            or _has_subrows(rows, child)
            or any(re.search(rf"(?<![\w.]){re.escape(key)}(?![\w])", row) for row in parent_rows)
        )
        if not named:
            yield child
            continue
        if _has_row(rows, child) or _has_subrows(rows, child):
            yield from undocumented(value, text, open_paths, child)


def test_the_field_check_sees_an_undocumented_field() -> None:
    text = "| `a` | x |\n| `a.b` | `c`, `d` |\n"
    assert list(undocumented({"a": {"b": {"c": 1, "d": 2}}}, text)) == []
    assert list(undocumented({"a": {"b": {"c": 1, "e": 2}}, "f": 0}, text)) == ["a.b.e", "f"]


def a_manifest(**over: Any) -> Manifest:
    fields: dict[str, Any] = {
        "builder_version": "0.1.0",
        "name": "team/model",
        "variant": "gpu",
        "base_ref": "nvcr.io/nvidia/pytorch@sha256:" + "a" * 64,
        "base_digest": "sha256:" + "a" * 64,
        "lock_file": "requirements.lock",
        "lock_sha256": "b" * 64,
        "seed": 7,
        "determinism": "strict",
        "created": "2023-11-14T22:13:20Z",
        "python_version": "3.12.3",
        "machine": "x86_64",
        "distributions": (Distribution("torch", "2.6.0", "base"), Distribution("six", "1.17.0")),
        "stack": {"declared": {"cuda": "12.8"}, "reported": {}, "labels": {}},
        "gpu": {"cuda": "12.8", "driver_min": "570.26", "driver_source": "CUDA 12.8 GA"},
        "build": {"builder": "buildah", "builder_version": "1.28.2", "reproducible": True},
    }
    fields.update(over)
    return Manifest(**fields)


def _schemas() -> Any:
    spec = importlib.util.spec_from_file_location(
        "reprobuild_schemas", DOCS / "_ext" / "reprobuild_schemas.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_manifest_page_names_every_field() -> None:
    document = a_manifest().to_dict()
    text = page("reference/manifest.md")
    open_paths = frozenset({"stack.declared", "stack.reported", "stack.labels"})
    assert list(undocumented(document, text, open_paths)) == []


def test_the_manifest_schema_accepts_real_manifests_and_refuses_others() -> None:
    schema = _schemas().manifest_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    written = a_manifest().to_dict()
    jsonschema.validate(written, schema)
    cpu = a_manifest(variant="cpu", stack={}, gpu=None, build={}).to_dict()
    jsonschema.validate(cpu, schema)
    old = json.loads((DIFF_DATA / "manifest-tiny.json").read_text())
    jsonschema.validate(old, schema)  # an image built before `build` existed
    Manifest.from_dict(old)  # ... which the code reads too
    for bad in (
        {**written, "extra": 1},
        {**written, "seed": "7"},
        {**written, "schema_version": 2},
    ):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)
    missing = dict(written)
    del missing["lock_sha256"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(missing, schema)


def test_the_run_record_page_names_every_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manifest_file = tmp_path / "manifest.json"
    manifest_file.write_bytes(a_manifest().to_json())
    env = {"REPRO_SEED": "9", "REPRO_TRIAL": "2", "MKL_NUM_THREADS": "1", "RANK": "1"}
    settings = from_environ(env)
    record = runrecord.run_record(
        run_id="r",
        started=dt.datetime(2025, 3, 4, 5, 6, 7, tzinfo=dt.UTC),
        settings=settings,
        env_plan=plan(env, settings),
        argv=["python", "train.py"],
        command=["/base.sh", "python", "train.py"],
        base_entrypoint=["/base.sh"],
        init=True,
        environ={**env, "CUDA_VERSION": "12.8"},
        manifest=runrecord.manifest_info(manifest_file),
        host=runrecord.host_info(None),
    )
    exit_record = runrecord.exit_record("r", 143, [15])
    monkeypatch.setenv("RANK", "0")
    frameworks = types.ModuleType("frameworks")
    frameworks.RECORD = {"numpy": {"version": "2.4.6"}}  # type: ignore[attr-defined]
    frameworks.ERRORS = []  # type: ignore[attr-defined]
    framework_record = runrecord.framework_record("r", {"pid": 1}, frameworks)
    assert "distributed" in framework_record
    text = page("reference/run-record.md")
    open_paths = frozenset(
        {
            "environment.set",
            "environment.user_set",
            "threads.variables",
            "stack_env",
            "startup",
            "framework_settings",
            "distributed.comm_settings",
        }
    )
    for document in (record, exit_record, framework_record):
        assert list(undocumented(document, text, open_paths)) == []


def a_verify_report() -> VerifyReport:
    numeric = NumericDiff("0.4123", "0.4124", 0.0001, 0.0002, 7, 1)
    json_difference = JsonDifference(("history", 2, "loss"), "changed", 1.0, 2.0, numeric)
    divergence = Divergence(
        where="stdout",
        runs=(1, 2),
        detail="stdout line 2 differs",
        line=2,
        column=5,
        file="m.json",
        key="loss",
        offset=3,
        a="loss 0.4123",
        b="loss 0.4124",
        numeric=numeric,
        json_differences=(json_difference,),
        epoch="epoch 1",
        value="loss",
        a_compared="loss 0.4123 <duration>",
        b_compared="loss 0.4124 <duration>",
    )
    ignored = Ignored(
        redraws=3,
        redrawn_lines=1,
        lines=1,
        rules=[RuleCount("duration", r"\d+s", 1, 1, 2, "6s", "6s")],
    )
    run = RunReport(
        run=1,
        exit_code=0,
        killed=False,
        elapsed_s=1.5,
        stdout_lines=3,
        stdout_sha256="c" * 64,
        stderr_tail=("done",),
        outputs={"metrics.json": FileDigest("d" * 64, 10)},
        run_record={"kind": "reprobuild.run"},
        framework_records=({"kind": "reprobuild.frameworks"},),
        record_differences=(json_difference,),
        ignored=ignored,
        series={"loss": MetricSeries((1, 2), (0.5, None))},
        series_truncated=True,
    )
    return VerifyReport(
        result="diverged",
        summary="stdout line 2 differs",
        command=("python", "train.py"),
        image="team/model:cpu",
        image_id="sha256:" + "e" * 64,
        runs_requested=2,
        seed=0,
        mode="strict",
        outputs=("metrics.json",),
        data=(DataMount(Path("/data"), "/data"),),
        env={"A": "1"},
        gpus=None,
        network=False,
        started="2026-11-25T10:00:00Z",
        elapsed_s=2.0,
        stopped_early=True,
        lines_compared=1,
        runs=(run, run),
        stdout_compare=StdoutCompare(True, True, ("lr=(?P<value>\\S+)",)),
        divergence=divergence,
        output_differences=(divergence,),
        failure=Failure("run 2 exited with status 1", 2, 1, ("Traceback",), "fix it"),
        trial=3,
        nodes=2,
        nproc_per_node=1,
        divergence_steps={"loss": 2},
    )


def test_the_verify_report_page_names_every_field() -> None:
    document = a_verify_report().to_dict()
    text = page("reference/verify-report.md")
    # output_differences: "in the same form as `divergence`", which the page details
    assert "in the same form as `divergence`" in text
    assert document["output_differences"][0].keys() == document["divergence"].keys()
    open_paths = frozenset(
        {
            "env",
            "runs[].outputs",
            "runs[].run_record",
            "runs[].framework_records[]",
            "runs[].series",
            "divergence_steps",
            "output_differences[]",
        }
    )
    assert list(undocumented(document, text, open_paths)) == []
    assert VerifyReport.from_dict(document).to_dict() == document  # a real, readable report


def test_the_diff_json_page_names_every_field(tmp_path: Path) -> None:
    old = json.loads((DIFF_DATA / "manifest-tiny.json").read_text())
    new = {
        **old,
        "distributions": [{"name": "six", "version": "1.16.0"}, {"name": "x", "version": "1"}],
    }
    (tmp_path / "new.json").write_text(json.dumps(new))
    packages = diff.diff(str(DIFF_DATA / "manifest-tiny.json"), str(tmp_path / "new.json"))
    assert packages.added and packages.removed and packages.changed
    runs = diff.diff(str(DIFF_DATA / "run-image.json"), str(DIFF_DATA / "run-host.json"))
    assert runs.records is not None and any(d.missing for d in runs.differences)
    text = page("reference/diff-json.md")
    for result in (packages, runs):
        assert list(undocumented(result.to_dict(), text)) == []
