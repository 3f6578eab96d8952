"""The HTML page of a verify report (``reprobuild report``, ``verify --html``) or of a diff
(``diff --html``): one self-contained file that opens on an air-gapped laptop and in a CI
artifact, with no script and nothing fetched (a Content-Security-Policy forbids any request).

A verify page says the verdict first, in plain words, with the command, image and stack; then
one pair of plots per named number the runs printed (what verify read from their stdout,
``runs[].series``), the first divergent step marked; then the runs' stack differences as
``reprobuild diff`` names them. A diff page is that table alone, changed rows first.
"""

from __future__ import annotations

import html
import shlex
import stat
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reprobuild import __version__
from reprobuild._util import jsonload
from reprobuild._util.fsutil import write_atomic
from reprobuild.checks.diff import (
    GROUPS,
    DiffResult,
    Stack,
    compare_inputs,
    from_run_record,
    show_value,
)
from reprobuild.checks.plots import (
    Difference,
    Line,
    differences_svg,
    relative_differences,
    slug,
    values_svg,
)
from reprobuild.checks.streams import MetricSeries, Number
from reprobuild.checks.verify.report import REPORT_KIND, RunReport, VerifyReport, steps_map
from reprobuild.checks.verify.resume import RESUME_KIND
from reprobuild.errors import DiffInputError, OutputError, ReprobuildError, UsageError

GENERATOR = "reprobuild"
"""The page's ``<meta name="generator">``: an existing file is replaced only when it has it."""
_MARK = f'<meta name="generator" content="{GENERATOR}">'
_CSP = "default-src 'none'; style-src 'unsafe-inline'"
_CSS = """
body{font:16px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0 auto;
max-width:72rem;padding:0 .8rem 2rem;color:#1b1b1b;background:#fff}
h1{font-size:1.5rem;margin:.8rem 0 .3rem}h2{font-size:1.2rem;margin:1.6rem 0 .4rem}
h3{font-size:1.05rem;margin:1rem 0 .2rem}
.verdict{border-left:.45rem solid #888;padding:.4rem .8rem;background:#f5f5f5}
.identical{border-color:#2e933c}.diverged{border-color:#d1495b}.failed{border-color:#e08e0b}
code,pre,.mono{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:.9em}
pre{white-space:pre-wrap;overflow-wrap:anywhere;background:#f5f5f5;padding:.4rem}
dl{display:grid;grid-template-columns:max-content 1fr;gap:.15rem .8rem;margin:.4rem 0}
dt{font-weight:600}dd{margin:0;overflow-wrap:anywhere}
.scroll{overflow-x:auto}table{border-collapse:collapse;margin:.3rem 0;font-size:.92em}
th,td{border:1px solid #ccc;padding:.2rem .45rem;text-align:left;vertical-align:top;
overflow-wrap:break-word}tr.changed td{background:#fdecea}
.runs td:nth-child(n+2){white-space:nowrap}
table.stack-diff{table-layout:fixed;width:100%;min-width:20rem}
.stack-diff th:nth-child(1){width:5.8em}.stack-diff th:nth-child(2){width:26%}
.stack-diff td{overflow-wrap:anywhere}
@media (max-width:40rem){
table.stack-diff,.stack-diff thead,.stack-diff tbody{display:block;min-width:0}
.stack-diff tr{display:grid;grid-template-columns:1fr 1fr;border:1px solid #ccc;border-top:0}
.stack-diff thead tr{border-top:1px solid #ccc}.stack-diff th,.stack-diff td{border:0}
.stack-diff th:nth-child(n){width:auto}.stack-diff td:nth-child(-n+2){padding-bottom:0}}
.plots{display:flex;flex-wrap:wrap;gap:.6rem}
.plots figure{flex:1 1 22rem;margin:0;min-width:0}
.plots svg{width:100%;height:auto}
"""


# --------------------------------------------------------------------------- reading, writing


def read_report(path: Path) -> dict[str, Any]:
    """A verify report (or a resume check's) from ``path``, checked for its kind."""
    shown = repr(str(path))
    try:
        raw = jsonload.read_file(path, shown, error=UsageError)
    except FileNotFoundError:
        raise UsageError(f"{shown}: no such file", hint="give a verify report") from None
    except IsADirectoryError:
        raise UsageError(f"{shown} is a directory: give a verify report") from None
    except OSError as exc:
        raise UsageError(f"{shown}: cannot read it: {exc.strerror or exc}") from None
    data = jsonload.loads(raw, shown, error=UsageError)
    kind = data.get("kind") if isinstance(data, dict) else None
    if not isinstance(data, dict) or kind not in (REPORT_KIND, RESUME_KIND):
        raise UsageError(
            f"{shown} is not a verify report (kind {kind!r}; allowed: {REPORT_KIND!r}, "
            f"{RESUME_KIND!r})",
            hint="give the JSON report `reprobuild verify` wrote (its --report)",
        )
    return data


def check_page_path(path: Path, option: str) -> None:
    """Fail before any work when the page could not go to ``path``: a directory, a link, a
    special file, or an existing file that is not a page reprobuild wrote (it is never
    replaced), or a folder that does not exist."""
    shown = repr(str(path))
    if not path.name.endswith((".html", ".htm")):
        raise OutputError(f"{option} {shown}: give a file name ending in .html")
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        if not path.absolute().parent.is_dir():
            raise OutputError(f"{option} {shown}: no such directory") from None
        return
    if stat.S_ISLNK(mode) or not stat.S_ISREG(mode):
        raise OutputError(f"{option} {shown} is not a regular file; give a new file name")
    with path.open("rb") as handle:
        head = handle.read(4096).decode("utf-8", "replace")
    if _MARK not in head:
        raise OutputError(
            f"{option} {shown} exists and is not a page reprobuild wrote; it replaces only one",
            hint="give a new file name, or remove the file first",
        )


def write_page(path: Path, text: str, option: str) -> None:
    """Atomically, after :func:`check_page_path`."""
    check_page_path(path, option)
    try:
        write_atomic(path, text)
    except OSError as exc:
        raise OutputError(f"cannot write {str(path)!r}: {exc.strerror or exc}") from None


# --------------------------------------------------------------------------------- building


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _document(title: str, body: Iterable[str]) -> str:
    return "".join(
        [
            '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">',
            _MARK,
            f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">',
            '<meta name="viewport" content="width=device-width,initial-scale=1">',
            f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>\n",
            *body,
            f"\n<footer><p>Written by reprobuild {_e(__version__)}.</p></footer>",
            "</body></html>\n",
        ]
    )


def _dl(items: Iterable[tuple[str, str]]) -> str:
    rows = "".join(f"<dt>{_e(k)}</dt><dd>{v}</dd>" for k, v in items)
    return f"<dl>{rows}</dl>"


def _table(head: Sequence[str], rows: Iterable[tuple[Sequence[str], str]], cls: str) -> str:
    """``rows``: (cells, already-escaped), row class."""
    th = "".join(f"<th>{_e(h)}</th>" for h in head)
    body = "".join(
        f'<tr class="{c}">' + "".join(f"<td>{cell}</td>" for cell in cells) + "</tr>"
        for cells, c in rows
    )
    return f'<div class="scroll"><table class="{cls}"><thead><tr>{th}</tr></thead>' + (
        f"<tbody>{body}</tbody></table></div>"
    )


# ------------------------------------------------------------------------------- diff table


@dataclass(frozen=True)
class Row:
    group: str
    key: str
    a: str
    b: str
    changed: bool


def diff_rows(result: DiffResult) -> list[Row]:
    """Every key both inputs were compared on: the changed rows first (as ``diff`` lists them,
    packages included), then the same ones, by group and key."""
    changed = [
        Row(
            d.group,
            d.key,
            show_value(d.a, d.missing == "a"),
            show_value(d.b, d.missing == "b"),
            True,
        )
        for d in result.differences
    ]
    changed += [Row("packages", d.name, "(absent)", d.version, True) for d in result.added]
    changed += [Row("packages", d.name, d.version, "(absent)", True) for d in result.removed]
    changed += [Row("packages", c.name, c.a, c.b, True) for c in result.changed]
    seen = {(r.group, r.key) for r in changed}
    same = [
        Row(
            group,
            key,
            show_value(value, False),
            show_value(result.b.values[group, key], False),
            False,
        )
        for (group, key), value in result.a.values.items()
        if (group, key) not in seen and (group, key) in result.b.values
    ]
    order = {group: index for index, group in enumerate(GROUPS)}

    def key(row: Row) -> tuple[int, str]:
        return order.get(row.group, len(order)), row.key

    return sorted(changed, key=key) + sorted(same, key=key)


def _diff_section(result: DiffResult, a_name: str, b_name: str) -> str:
    rows = diff_rows(result)
    same_packages = len(set(result.a.packages) & set(result.b.packages)) - len(result.changed)
    parts = [
        _table(
            ["group", "key", a_name, b_name],
            (
                (
                    [_e(r.group), f'<span class="mono">{_e(r.key)}</span>', _e(r.a), _e(r.b)],
                    "changed" if r.changed else "same",
                )
                for r in rows
            ),
            "stack-diff",
        )
    ]
    notes = []
    if same_packages > 0:
        notes.append(f"{same_packages} package(s) the same in both.")
    if result.count == 0 and result.records is not None and not result.records.agree:
        notes.append(
            f"Run records differ first at {_e(result.records.first)} "
            f"({len(result.records.differences)} in all, as verify compares them)."
        )
    if result.cause is not None:
        notes.append(f"Cause: {_e(result.cause)}")
    verdict = (
        "identical"
        if result.identical
        else f"{result.count} difference{'' if result.count == 1 else 's'}"
    )
    notes.append(f"<strong>{_e(verdict)}</strong>")
    parts.append("".join(f"<p>{n}</p>" for n in notes))
    return "".join(parts)


def diff_page(result: DiffResult) -> str:
    """The page of ``reprobuild diff A B --html``."""
    verdict = "identical" if result.identical else "diverged"
    words = (
        "A and B are the same stack."
        if result.identical
        else f"A and B differ in {result.count} place{'' if result.count == 1 else 's'} "
        "(the highlighted rows, first in the table)."
    )
    body = [
        f"<h1>reprobuild diff: {'identical' if result.identical else 'different'}</h1>",
        f'<section class="verdict {verdict}" id="verdict"><p>{_e(words)}</p>',
        _dl([("A", _e(result.a.description)), ("B", _e(result.b.description))]),
        "</section><h2>The stacks, side by side</h2>",
        _diff_section(result, "A", "B"),
    ]
    return _document("reprobuild diff", body)


# ------------------------------------------------------------------------------- the plots


def _plotted(series: Sequence[Mapping[str, MetricSeries]], first: str | None) -> list[str]:
    """The names to plot: those with two points or more in some run, ``first`` (the number
    that diverged first) first, then by name."""
    names = {
        name
        for run in series
        for name in run
        if any(len(r[name].steps) > 1 for r in series if name in r)
    }
    return sorted(names, key=lambda name: (name != first, name))


def _metric_sections(
    labels: Sequence[str],
    shorts: Sequence[str],
    series: Sequence[Mapping[str, MetricSeries]],
    markers: Mapping[str, Number],
    first: str | None = None,
) -> str:
    """``labels``: each run's legend; ``shorts``: its short name (``run 2``, ``resumed``);
    ``first``: the number that diverged first, plotted first."""
    names = _plotted(series, first)
    if not names:
        return (
            "<p>No numbers to plot: no number was printed twice or more, named "
            "(<code>loss 0.41</code>, <code>acc: 0.9</code>, <code>step 3</code>) or on a line "
            "of numbers alone (<code>99 8.376</code>).</p>"
        )
    out = []
    for name in names:
        lines = [
            Line(label, run[name]) for label, run in zip(labels, series, strict=True) if name in run
        ]
        diffs: list[Difference] = []
        reference = series[0].get(name)
        for short, run in list(zip(shorts, series, strict=True))[1:]:
            if reference is None or name not in run:
                continue
            steps, rel = relative_differences(reference, run[name])
            diffs.append(Difference(f"{short} vs {shorts[0]}", steps, rel))
        marker = markers.get(name)
        out.append(_metric_section(name, lines, diffs, marker))
    return "".join(out)


def _metric_section(
    name: str, lines: Sequence[Line], diffs: Sequence[Difference], marker: Number | None
) -> str:
    said = []
    for diff in diffs:
        first = next((s for s, r in zip(diff.steps, diff.rel, strict=True) if r != 0), None)
        if first is None:
            said.append(f"{diff.label}: the same value at all {len(diff.steps)} common steps")
        else:
            said.append(
                f"{diff.label}: first differs at step {_number(first)}, largest relative "
                f"difference {diff.largest:.3g}"
            )
    marker_attr = "" if marker is None else f' data-divergence-step="{_e(marker)}"'
    return (
        f'<section class="metric" id="metric-{_e(slug(name))}" data-metric="{_e(name)}"'
        f"{marker_attr}><h3>{_e(name)}</h3>"
        '<div class="plots"><figure class="values">'
        + values_svg(name, lines, marker)
        + '</figure><figure class="differences">'
        + differences_svg(name, diffs, marker)
        + "</figure></div>"
        + "".join(f"<p>{_e(s)}.</p>" for s in said)
        + "</section>"
    )


def _number(value: float) -> str:
    return str(int(value)) if value == int(value) else f"{value:g}"


# ------------------------------------------------------------------------------ verify page


def run_label(report: VerifyReport, run: RunReport) -> str:
    """What a run was, for its legend: its number, and its CPU (``--cpu``), its job
    (``--nodes``), the control (``--mode off``)."""
    parts = []
    if report.cpus and run.run <= len(report.cpus):
        leg = report.cpus[run.run - 1]
        model = _dig(run.run_record, "host", "cpu", "model")
        how = "this machine's CPU" if leg == "native" else "emulated by qemu"
        parts.append(f"CPU {leg} ({how}{f', {model}' if isinstance(model, str) else ''})")
    if report.nodes is not None:
        per = report.nproc_per_node or 1
        parts.append(f"torchrun job of {report.nodes} nodes x {per} (rank 0)")
    if report.mode == "off":
        parts.append("control: determinism off")
    head = f"run {run.run}" + (" (reference)" if run.run == 1 else "")
    return head + (": " + ", ".join(parts) if parts else "")


def _dig(data: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


def _stack(run: RunReport, source: str) -> Stack | None:
    if run.run_record is None:
        return None
    try:
        return from_run_record(run.run_record, source=source, frameworks=run.framework_records)
    except (DiffInputError, AttributeError, KeyError, TypeError, ValueError):
        return None  # a record this reprobuild cannot read (another schema, edited by hand)


def _verdict_words(report: VerifyReport) -> str:
    control = report.mode == "off"
    if report.result == "identical":
        lines = f"{report.lines_compared} stdout line{'' if report.lines_compared == 1 else 's'}"
        outputs = f" and {len(report.outputs)} declared output(s)" if report.outputs else ""
        text = (
            f"Reproduced. The {len(report.runs)} runs printed the same {lines}{outputs}, "
            "bit for bit."
        )
        if control:
            text += " (This was the control, with determinism off: it happened to agree.)"
        return text
    if report.result == "diverged" and report.divergence is not None:
        div = report.divergence
        first, other = div.runs
        if div.where == "stdout":
            where = f"stdout line {div.line}"
            if div.value and div.value in report.divergence_steps:
                where += f", {div.value} at step {_number(report.divergence_steps[div.value])}"
            elif div.epoch:
                where += f", {div.epoch}"
        else:
            where = f"output {div.file or ''}".strip()
        text = f"Not reproduced. Run {first} and run {other} parted at {where}."
        if control:
            text += " This was the control, with determinism off: parting is what it shows."
        return text
    message = report.failure.message if report.failure is not None else report.summary
    return f"Could not conclude: {message}"


def _stack_items(report: VerifyReport) -> list[tuple[str, str]]:
    items: list[tuple[str, str]] = [
        ("command", f"<code>{_e(shlex.join(report.command))}</code>"),
        (
            "image",
            "this host (--local)"
            if report.local
            else _e(report.image)
            + (f' <span class="mono">{_e(report.image_id)}</span>' if report.image_id else ""),
        ),
    ]
    stack = _stack(report.runs[0], "run 1") if report.runs else None
    if stack is not None:
        shown = [
            f"{key} {show_value(value, False)}"
            for (group, key), value in sorted(stack.values.items())
            if group == "stack"
        ]
        shown += [f"{d.name} {d.version}" for d in stack.packages.values()]
        items.append(("stack (run 1)", _e(", ".join(shown))))
    else:
        items.append(
            (
                "stack",
                "no run record this reprobuild reads (none: the image has no reprobuild runtime)",
            )
        )
    settings = [
        f"seed {report.seed if report.seed is not None else '(image default)'}",
        f"mode {report.mode or '(image default)'}",
    ]
    if report.trial is not None:
        settings.append(f"trial {report.trial}")
    if report.cpus:
        settings.append(f"--cpu {','.join(report.cpus)}")
    if report.nodes is not None:
        settings.append(f"--nodes {report.nodes}")
    items.append(("settings", _e(", ".join(settings))))
    items.append(("started", _e(f"{report.started}, {report.elapsed_s:g} s")))
    return items


def _divergence_items(report: VerifyReport) -> str:
    div = report.divergence
    if div is None:
        return ""
    first, other = div.runs
    items = [("what", _e(div.detail))]
    if div.a is not None or div.b is not None:
        items.append((f"run {first}", f"<pre>{_e(div.a)}</pre>"))
        items.append((f"run {other}", f"<pre>{_e(div.b)}</pre>"))
    if div.numeric is not None:
        items.append(
            ("numbers", _e((f"{div.value} " if div.value else "") + div.numeric.describe()))
        )
    if report.cpu_cause:
        items.append(("cause", _e(report.cpu_cause)))
    return "<h2>Where they parted</h2>" + _dl(items)


def _runs_table(report: VerifyReport, labels: Sequence[str]) -> str:
    rows = []
    for run, label in zip(report.runs, labels, strict=True):
        ended = "killed by verify" if run.killed else f"exit {run.exit_code}"
        rows.append(
            ([_e(label), _e(ended), _e(run.stdout_lines), _e(f"{run.elapsed_s:g} s")], "run")
        )
    return _table(["run", "ended", "stdout lines", "time"], rows, "runs")


def _stack_diffs(report: VerifyReport) -> str:
    first = _stack(report.runs[0], "run 1") if report.runs else None
    if first is None:
        return (
            "<p>No run records to compare (none that this reprobuild reads: the image has no "
            "reprobuild runtime, or they are of another schema).</p>"
        )
    out = []
    for run in report.runs[1:]:
        other = _stack(run, f"run {run.run}")
        if other is None:
            out.append(f"<p>Run {run.run} wrote no run record.</p>")
            continue
        out.append(f"<h3>run 1 and run {run.run}</h3>")
        out.append(_diff_section(compare_inputs(first, other), "run 1", f"run {run.run}"))
    return "".join(out)


def verify_page(report: VerifyReport) -> str:
    """The page of one verify report."""
    labels = [run_label(report, run) for run in report.runs]
    truncated = any(run.series_truncated for run in report.runs)
    body = [
        f"<h1>reprobuild verify: {_e(report.result)}</h1>",
        f'<section class="verdict {_e(report.result)}" id="verdict">',
        f"<p><strong>{_e(_verdict_words(report))}</strong></p>",
        f"<p>{_e(report.summary)}</p>",
        _dl(_stack_items(report)),
        "</section>",
        _divergence_items(report),
        "<h2>The runs</h2>",
        _runs_table(report, labels),
        "<h2>What they printed, step by step</h2>",
        "<p>For each number, two plots. The first: the number as every run printed it, run 1 "
        "wide and the others dashed on top of it. The second: how far each run is from run 1 "
        "(relative difference, log scale; 0 means the same value as printed). The dotted line "
        "marks the first divergence.</p>",
        _metric_sections(
            labels,
            [f"run {run.run}" for run in report.runs],
            [run.series for run in report.runs],
            report.divergence_steps,
            report.divergence.value if report.divergence is not None else None,
        ),
        "<p>Some numbers were left out (over 12 names, 50,000 points or 200,000 lines a run).</p>"
        if truncated
        else "",
        "<h2>The stacks, as <code>reprobuild diff</code> compares the run records</h2>",
        _stack_diffs(report),
    ]
    return _document(f"reprobuild verify: {report.result}", body)


# ------------------------------------------------------------------------------ resume page

_LEG_LABELS = {
    "straight": "straight run (reference, never stopped)",
    "stopped": "stopped run (SIGTERM after epoch {k})",
    "resumed": "resumed run (from the stopped run's checkpoint)",
}


def resume_page(data: Mapping[str, Any]) -> str:
    """The page of a ``verify --resume-at K`` report."""
    try:
        legs = [leg for leg in data["legs"] if isinstance(leg, dict)]
        k = int(data["resume_at"])
        result, summary = str(data["result"]), str(data["summary"])
        series = [
            {str(n): MetricSeries.from_dict(s) for n, s in (leg.get("series") or {}).items()}
            for leg in legs
        ]
        markers = steps_map(data.get("divergence_steps"))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ReprobuildError(f"resume report is missing or has a bad field: {exc}") from None
    labels = [
        _LEG_LABELS.get(str(leg.get("name")), str(leg.get("name"))).format(k=k) for leg in legs
    ]
    if result == "identical":
        words = f"Resuming is exact: stopped after epoch {k} and resumed, the run ended as the "
        words += "straight run did, bit for bit."
    elif result == "diverged":
        words = (
            f"Resuming is not exact: after epoch {k} the resumed run parts from the straight run."
        )
    else:
        words = f"Could not conclude: {summary}"
    differences = data.get("differences") or []
    first = differences[0] if differences and isinstance(differences[0], dict) else None
    detail = ""
    if first is not None:
        items = [(str(k2), f"<pre>{_e(v)}</pre>") for k2, v in first.items() if k2 != "where"]
        detail = "<h2>Where they parted</h2>" + _dl(items)
    image = data.get("image")
    body = [
        f"<h1>reprobuild verify --resume-at {k}: {_e(result)}</h1>",
        f'<section class="verdict {_e(result)}" id="verdict"><p><strong>{_e(words)}</strong></p>',
        f"<p>{_e(summary)}</p>",
        _dl(
            [
                ("command", f"<code>{_e(shlex.join(map(str, data.get('command') or [])))}</code>"),
                ("image", "this host (--local)" if image is None else _e(image)),
            ]
        ),
        "</section>",
        detail,
        "<h2>The legs</h2>",
        _table(
            ["leg", "ended", "stdout lines"],
            (
                (
                    [_e(label), _e(f"exit {leg.get('exit_code')}"), _e(leg.get("stdout_lines"))],
                    "run",
                )
                for leg, label in zip(legs, labels, strict=True)
            ),
            "runs",
        ),
        "<h2>What they printed, step by step</h2>",
        _metric_sections(
            labels,
            [str(leg.get("name")) for leg in legs],
            series,
            markers,
        ),
    ]
    return _document(f"reprobuild verify --resume-at {k}: {result}", body)


def report_page(data: Mapping[str, Any]) -> str:
    """The page of a report as read by :func:`read_report`."""
    if data.get("kind") == RESUME_KIND:
        return resume_page(data)
    return verify_page(VerifyReport.from_dict(data))
