"""The report page's content, without a browser: the named numbers verify keeps from stdout,
the differences the plots draw, what the page says and escapes, the diff table's order, and
the refusals of ``reprobuild report``, ``verify --html`` and ``diff --html``."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

from helpers import DATA, run_cli
from hostile_harness import assert_clean_failure
from reprobuild.checks import diff, streams
from reprobuild.checks.page import diff_page, diff_rows, report_page, run_label
from reprobuild.checks.plots import relative_differences
from reprobuild.checks.streams import (
    MAX_SERIES,
    MetricSeries,
    SeriesCollector,
    StdoutLine,
    StreamComparator,
    named_numbers,
    number_columns,
)
from reprobuild.checks.verify.report import RunReport, VerifyReport

DIFF_DATA = DATA / "diff"
RUN_IMAGE = DIFF_DATA / "run-image.json"
RUN_HOST = DIFF_DATA / "run-host.json"


def test_named_numbers_are_the_names_before_numbers() -> None:
    assert named_numbers("Epoch 2/5 - loss: 0.41 - val_loss=0.5 lr=1e-3") == [
        ("Epoch", "2"),
        ("loss", "0.41"),
        ("val_loss", "0.5"),
        ("lr", "1e-3"),
    ]
    assert named_numbers("took 3 s, at 1700000000.25 with 4 threads") == []
    assert named_numbers("torch 2.13.0") == [("torch", "2.13")]


def test_series_follow_the_step_counter_or_count() -> None:
    collector = SeriesCollector()
    collector.feed(1, "setting up")
    collector.feed(2, "epoch 1 step 10 loss 0.5 acc: 0.25")
    collector.feed(3, "epoch 1 step 20 loss nan acc: 0.5")
    collector.feed(4, "val 0.75")
    collector.feed(5, "val 0.8")
    series = collector.series()
    assert series["loss"] == MetricSeries((10, 20), (0.5, None))
    assert series["acc"] == MetricSeries((10, 20), (0.25, 0.5))
    assert series["val"] == MetricSeries((1, 2), (0.75, 0.8))
    assert "epoch" not in series and "step" not in series
    assert collector.steps_at(3) == {"loss": 20, "acc": 20, "val": 1}
    assert collector.steps_at(5) == {"val": 2}
    assert not collector.truncated


def test_series_are_bounded() -> None:
    collector = SeriesCollector()
    collector.feed(1, " ".join(f"m{i} {i}" for i in range(MAX_SERIES + 3)))
    assert len(collector.series()) == MAX_SERIES and collector.truncated
    collector.feed(2, f"huge {10**40}")
    assert isinstance(collector.series()["m0"].values[0], int)


def test_series_stop_reading_after_the_line_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(streams, "MAX_LINES", 2)
    collector = SeriesCollector()
    for line in range(1, 4):
        collector.feed(line, f"loss {line}")
    collector.feed(4, "done")
    assert collector.series()["loss"] == MetricSeries((1, 2), (1, 2)) and collector.truncated
    quiet = SeriesCollector()
    for line in range(1, 5):
        quiet.feed(line, "loss 1" if line < 3 else "no numbers")
    assert not quiet.truncated  # past the bound, but nothing left out


@pytest.mark.parametrize(
    ("line", "columns"),
    [
        ("99 8.376", [(1, "99"), (2, "8.376")]),
        ("  3, 0.5, -1e-3 ", [(1, "3"), (2, "0.5"), (3, "-1e-3")]),
        ("7\tnan\t-inf | 2.5E+3", [(1, "7"), (2, "nan"), (3, "-inf"), (4, "2.5E+3")]),
        ("0x1p-2 ; .5", [(1, "0x1p-2"), (2, ".5")]),
        ("0.25", [(1, "0.25")]),
        ("t loss", []),  # a header
        ("10/100 8.3", []),  # a progress count
        ("torch 2.13.0", []),
        ("2.13.0 1", []),  # a version is no pair of numbers
        ("2026-11-27 12:00:01 0.5", []),
        ("[1 2]", []),
        ("tensor(0.5)", []),
        ("1 2,", []),
        ("1,,2", []),
        ("3s 0.5", []),
        ("", []),
    ],
)
def test_number_columns_take_lines_of_bare_numbers_only(
    line: str, columns: list[tuple[int, str]]
) -> None:
    assert number_columns(line) == columns


def test_bare_columns_are_series_stepped_by_their_first_integer() -> None:
    collector = SeriesCollector()
    for line, text in enumerate(
        ["t loss grad", "99 8.5 -1", "199 8.25 nan", "299 -8e-1 inf", "Epoch 1/5 done"], start=1
    ):
        collector.feed(line, text)
    series = collector.series()
    assert series == {
        "column 2": MetricSeries((99, 199, 299), (8.5, 8.25, -0.8)),
        "column 3": MetricSeries((99, 199, 299), (-1, None, None)),
    }
    assert collector.steps_at(3) == {"column 2": 199, "column 3": 199}


def test_bare_columns_without_an_integer_count_their_lines() -> None:
    collector = SeriesCollector()
    for line, text in enumerate(["0.5 0.25", "warming up", "0.4 2.5 7", "0.3"], start=1):
        collector.feed(line, text)
    series = collector.series()
    # "0.4 2.5 7": the 7 is its step; "0.3" has none, so it is column 1's third point
    assert series["column 1"] == MetricSeries((1, 7, 3), (0.5, 0.4, 0.3))
    assert series["column 2"] == MetricSeries((1, 7), (0.25, 2.5))
    assert "column 3" not in series


def test_a_line_that_names_a_number_is_read_for_its_names_only() -> None:
    collector = SeriesCollector()
    collector.feed(1, "5 loss 0.25 0.5")
    collector.feed(2, "step 6 loss 0.125")
    assert collector.series() == {"loss": MetricSeries((1, 6), (0.25, 0.125))}


def test_bare_columns_share_the_series_bound() -> None:
    collector = SeriesCollector()
    collector.feed(1, " ".join(str(i + 0.5) for i in range(MAX_SERIES + 2)))
    assert len(collector.series()) == MAX_SERIES and collector.truncated
    assert "column 1" in collector.series() and f"column {MAX_SERIES + 1}" not in collector.series()


def test_a_divergence_on_a_line_of_columns_names_its_column() -> None:
    comparator = StreamComparator(2)
    comparator.feed(0, StdoutLine.plain("99 8.5 -1.25"))
    divergence = comparator.feed(1, StdoutLine.plain("99 8.5 -1.5"))
    assert divergence is not None and divergence.value == "column 3"
    assert divergence.detail == "line 1 differs between run 1 and run 2 (column 3)"
    comparator = StreamComparator(2)
    comparator.feed(0, StdoutLine.plain("99 8.5"))
    divergence = comparator.feed(1, StdoutLine.plain("99 8.5 1"))  # not the same columns
    assert divergence is not None and divergence.value is None


def test_the_page_plots_columns_and_says_which_lines_it_reads() -> None:
    series = {"column 2": MetricSeries((99, 199), (8.5, 8.25))}
    runs = [{**r.to_dict(), "series": {k: v.to_dict() for k, v in series.items()}}
            for r in _report().runs]  # fmt: skip
    page = report_page(_report(runs=runs).to_dict())
    assert '<section class="metric" id="metric-column_2" data-metric="column 2">' in page
    assert page.count("<svg") == 2 and 'id="series-column_2-2"' in page
    empty = [{**r.to_dict(), "series": {}} for r in _report().runs]
    page = report_page(_report(runs=empty).to_dict())
    assert "on a line of numbers alone (<code>99 8.376</code>)" in page


def test_relative_differences() -> None:
    a = MetricSeries((1, 2, 3), (1.0, 2.0, None))
    assert relative_differences(a, a) == ((1.0, 2.0, 3.0), (0.0, 0.0, 0.0))
    b = MetricSeries((1, 2, 3), (1.0, 2.5, 3.0))
    _steps, rel = relative_differences(a, b)
    assert rel[:2] == (0.0, 0.2) and math.isnan(rel[2])
    resumed = MetricSeries((3, 2), (5.0, 2.0))  # other steps: matched by step
    assert relative_differences(a, resumed)[0] == (2.0, 3.0)


def _report(**changes: object) -> VerifyReport:
    run = RunReport(
        run=1,
        exit_code=0,
        killed=False,
        elapsed_s=1.0,
        stdout_lines=3,
        stdout_sha256="0" * 64,
        series={"loss": MetricSeries((1, 2, 3), (0.5, 0.4, 0.3))},
    )
    data = VerifyReport(
        result="identical",
        summary="2 runs of `python <script>` on this host (--local): 3 stdout lines, bit for bit",
        command=("python", "<script>alert(1)</script>", "--url=http://example.org/x"),
        image=None,
        image_id=None,
        runs_requested=2,
        seed=None,
        mode=None,
        outputs=(),
        data=(),
        env={},
        gpus=None,
        network=False,
        started="2026-11-27T10:00:00Z",
        elapsed_s=1.0,
        stopped_early=False,
        lines_compared=3,
        runs=(run, RunReport.from_dict({**run.to_dict(), "run": 2})),
    ).to_dict()
    data.update(changes)
    return VerifyReport.from_dict(data)


def test_the_page_says_the_verdict_first_and_escapes_what_the_runs_gave() -> None:
    page = report_page(_report().to_dict())
    body = page[page.index("<body") :]
    assert body.index("Reproduced. The 2 runs printed the same 3 stdout lines") < body.index("<svg")
    assert "<script" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'' in page
    assert page.count("<svg") == 2  # loss: the values and the differences
    assert "no run record this reprobuild reads (none: the image has no reprobuild runtime)" in page


def test_a_failed_run_cannot_conclude() -> None:
    failure = {"message": "run 2 of 2: `python t.py` exited with status 3", "run": 2,
               "exit_code": 3, "stderr_tail": ["Traceback"], "hint": None}  # fmt: skip
    page = report_page(_report(result="failed", failure=failure).to_dict())
    assert "Could not conclude: run 2 of 2: `python t.py` exited with status 3" in page
    assert 'class="verdict failed"' in page


def test_an_unreadable_run_record_leaves_the_stack_out() -> None:
    runs = [{**r.to_dict(), "run_record": {"schema_version": 99}} for r in
            _report().runs]  # fmt: skip
    page = report_page(_report(runs=runs).to_dict())
    assert "no run record this reprobuild reads (none: the image has no reprobuild runtime)" in page


def test_a_report_without_series_says_so() -> None:
    runs = [{**r.to_dict(), "series": {}} for r in _report().runs]
    page = report_page(_report(runs=runs).to_dict())
    assert "<svg" not in page and "No numbers to plot" in page


def test_diff_rows_put_the_changed_ones_first() -> None:
    result = diff.compare_inputs(diff.load_file(RUN_IMAGE), diff.load_file(RUN_HOST))
    rows = diff_rows(result)
    changed = [r.changed for r in rows]
    assert changed[0] and not changed[-1] and changed == sorted(changed, reverse=True)
    assert sum(changed) == result.count
    page = diff_page(result)
    assert page.index('class="changed"') < page.index('class="same"')
    assert f"{result.count} differences" in page


def test_diff_html_writes_the_table(tmp_path: Path) -> None:
    page = tmp_path / "diff.html"
    proc = run_cli("diff", str(RUN_IMAGE), str(RUN_HOST), "--html", str(page))
    assert proc.returncode == 1, proc.stderr
    assert f"page: {page}" in proc.stderr and proc.stdout.splitlines()[-1].endswith("differences")
    text = page.read_text()
    assert "<h1>reprobuild diff: different</h1>" in text and "stack-diff" in text


def test_report_writes_and_rewrites_its_page(tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    report.write_text(_report().to_json())
    proc = run_cli("report", str(report))
    assert proc.returncode == 0, proc.stderr
    page = tmp_path / "r.html"
    assert f"page: {page}" in proc.stderr and "Reproduced." in page.read_text()
    proc = run_cli("report", str(report), "-o", str(page))  # its own page: replaced
    assert proc.returncode == 0, proc.stderr


def test_report_refuses_what_is_not_a_verify_report(tmp_path: Path) -> None:
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"kind": "reprobuild.diff"}))
    proc = run_cli("report", str(other), "-o", str(tmp_path / "x.html"))
    assert_clean_failure(proc, "is not a verify report (kind 'reprobuild.diff'", exit_code=2)
    proc = run_cli("report", str(tmp_path / "missing.json"))
    assert_clean_failure(proc, "no such file", exit_code=2)
    assert not (tmp_path / "x.html").exists()


def test_a_page_never_replaces_a_file_it_did_not_write(tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    report.write_text(_report().to_json())
    mine = tmp_path / "notes.html"
    mine.write_text("<p>my notes</p>")
    proc = run_cli("report", str(report), "-o", str(mine))
    assert_clean_failure(proc, "exists and is not a page reprobuild wrote")
    assert mine.read_text() == "<p>my notes</p>"
    proc = run_cli("report", str(report), "-o", str(tmp_path / "page.txt"))
    assert_clean_failure(proc, "give a file name ending in .html")
    proc = run_cli("report", str(report), "-o", str(tmp_path / "no" / "page.html"))
    assert_clean_failure(proc, "no such directory")


def test_verify_html_is_checked_before_any_run(tmp_path: Path) -> None:
    mine = tmp_path / "notes.html"
    mine.write_text("mine")
    proc = run_cli(
        "verify", "--local", "--html", str(mine), "--report", str(tmp_path / "r.json"),
        "--", sys.executable, "-c", "open('ran', 'w')",
        cwd=tmp_path,
    )  # fmt: skip
    assert_clean_failure(proc, "exists and is not a page reprobuild wrote")
    assert not (tmp_path / "ran").exists() and mine.read_text() == "mine"


def test_the_legend_says_what_each_run_was() -> None:
    report = _report(cpus=["native", "Haswell"], mode="off", nodes=2, nproc_per_node=4)
    first, second = (run_label(report, run) for run in report.runs)
    assert first == (
        "run 1 (reference): CPU native (this machine's CPU), torchrun job of 2 nodes x 4 "
        "(rank 0), control: determinism off"
    )
    assert second.startswith("run 2: CPU Haswell (emulated by qemu)")
    assert run_label(_report(), _report().runs[1]) == "run 2"


@pytest.mark.parametrize(
    ("series", "expected"),
    [
        ({"loss": {"steps": [1, 2], "values": ["0.5", 0.4]}}, "values are numbers or null"),
        ({"loss": {"steps": [1, True], "values": [0.5, 0.4]}}, "steps are numbers"),
        ({"loss": {"steps": [1], "values": [0.5, 0.4]}}, "as many steps as values"),
        ({"loss": {"steps": [1]}}, "'values'"),
        (["loss"], "has a bad field"),
    ],
)
def test_a_report_with_bad_series_is_refused(tmp_path: Path, series: object, expected: str) -> None:
    data = _report().to_dict()
    data["runs"][1]["series"] = series
    report = tmp_path / "r.json"
    report.write_text(json.dumps(data))
    proc = run_cli("report", str(report))
    assert_clean_failure(proc, expected)
    assert not (tmp_path / "r.html").exists()


def test_a_resume_report_with_bad_steps_is_refused(tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    report.write_text(
        json.dumps(
            {"kind": "reprobuild.verify_resume", "legs": [], "resume_at": 2, "result": "diverged",
             "summary": "x", "divergence_steps": {"loss": "2"}}
        )
    )  # fmt: skip
    assert_clean_failure(run_cli("report", str(report)), "divergence_steps maps names to numbers")
