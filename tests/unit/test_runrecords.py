"""One comparison layer for run records: ``reprobuild diff`` and ``reprobuild verify`` give
the same answer to "do these two runs' records agree, and where do they first differ"."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from helpers import DATA, run_cli
from reprobuild.checks.diff import diff
from reprobuild.checks.runrecords import compare_run_records, read_run_dir

NUMPY_DIR = DATA / "diff" / "host-numpy"
RUN_IMAGE = DATA / "diff" / "run-image.json"


def _run_dir(root: Path, name: str, record: dict[str, Any], frameworks: Path | None) -> Path:
    """A run's record directory as the runtime leaves it (verify's REPRO_RUN_DIR)."""
    folder = root / name
    folder.mkdir()
    run_id = record["run_id"]
    (folder / f"run-{run_id}.json").write_text(json.dumps(record))
    if frameworks is not None:
        data = json.loads(frameworks.read_text())
        data["run_id"] = run_id
        (folder / f"run-{run_id}-frameworks-x-1.json").write_text(json.dumps(data))
    return folder


def _record(folder: Path) -> Path:
    (found,) = (p for p in folder.glob("run-*.json") if "-frameworks-" not in p.name)
    return found


def _both_answers(a: Path, b: Path) -> tuple[Any, Any]:
    """(verify's answer, diff's answer) for the run records in directories a and b."""
    verify_answer = compare_run_records(read_run_dir(a), read_run_dir(b))
    diff_answer = diff(str(_record(a)), str(_record(b))).records
    return verify_answer, diff_answer


@pytest.mark.parametrize(
    ("change", "first"),
    [
        (None, None),
        (lambda r: r["host"].update(kernel="6.99.0-other"), "host.kernel"),
        (lambda r: r["determinism"].update(seed=12345), "determinism.seed"),
    ],
)
def test_diff_and_verify_give_the_same_answer(tmp_path: Path, change: Any, first: Any) -> None:
    base = json.loads(RUN_IMAGE.read_text())
    other = json.loads(json.dumps(base))
    other.update(run_id="20261122T090000Z-0123abcd", started="2026-11-22T09:00:00Z")
    other["host"]["hostname"] = "another-container"
    if change is not None:
        change(other)
    (frameworks,) = NUMPY_DIR.glob("*-frameworks-*.json")
    a = _run_dir(tmp_path, "a", base, frameworks)
    b = _run_dir(tmp_path, "b", other, frameworks)
    verify_answer, diff_answer = _both_answers(a, b)
    assert diff_answer == verify_answer
    assert verify_answer.agree is (first is None)
    assert verify_answer.first == first
    assert diff(str(_record(a)), str(_record(b))).identical is (first is None)


def test_verify_report_and_diff_cli_agree_on_real_runs(tmp_path: Path) -> None:
    """Both commands end to end on the same two run records: verify --local --keep writes
    them and reports record_differences; diff --json reads the kept files."""
    keep, report = tmp_path / "keep", tmp_path / "report.json"
    proc = run_cli(
        "verify",
        "--local",
        "-q",
        "--keep",
        str(keep),
        "--report",
        str(report),
        "--",
        "python",
        "-c",
        "print(1)",
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    runs = json.loads(report.read_text())["runs"]
    records = [_record(keep / f"run-{n}" / "records") for n in (1, 2)]
    diffed = run_cli("diff", "--json", *map(str, records), cwd=tmp_path)
    answer = json.loads(diffed.stdout)["run_records"]
    assert answer["differences"] == runs[1]["record_differences"]
    assert answer["agree"] is (runs[1]["record_differences"] == [])
    shutil.rmtree(keep)
