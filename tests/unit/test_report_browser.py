"""The verify report's page in a real browser: real ``verify --local`` runs of a small training
curve (tests/data/projects/report/curve.py) write their reports and pages (``--html``); headless
Chromium (Debian's package, installed by scripts/setup) takes a screenshot of each and dumps its
DOM, and the DOM is checked: the plots are there, one line per run, the legends say what each
run was, the divergence marker is drawn at the step the JSON report names (read off the drawn
axis), and nothing in the page points outside it.

Cases: an identical pair, the control (``--mode off``: diverged at epoch 37), a trio (three
identical runs, with the ``cpus`` the report of ``--cpu native,Haswell,Nehalem`` carries:
``--cpu`` itself needs an image and qemu, which tests/engine/test_verify_cpu.py runs) and a
resume check that parts after epoch 20."""

from __future__ import annotations

import html
import json
import re
import shutil
import struct
import subprocess
import sys
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from helpers import DATA, run_cli

CURVE = DATA / "projects" / "report" / "curve.py"
PART = 37
RESUME_AT = 20


def chromium() -> str:
    found = shutil.which("chromium")
    assert found is not None, "Debian's chromium is missing: scripts/setup installs it"
    return found


def _browser(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         "--hide-scrollbars", "--no-first-run", "--disable-extensions", *args],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


@dataclass
class Node:
    tag: str
    attrs: dict[str, str]
    children: list[Node] = field(default_factory=list)
    text: str = ""

    def walk(self) -> list[Node]:
        out = [self]
        for child in self.children:
            out += child.walk()
        return out

    def find(self, tag: str | None = None, **attrs: str) -> list[Node]:
        return [
            n
            for n in self.walk()
            if (tag is None or n.tag == tag)
            and all(n.attrs.get(k.replace("_", "-")) == v for k, v in attrs.items())
        ]

    def all_text(self) -> str:
        return self.text + "".join(c.all_text() for c in self.children)


_VOID = {"meta", "br", "hr", "img", "input", "link", "col", "area", "base", "wbr", "source"}


class _Tree(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#root", {})
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(node)
        if tag not in _VOID:
            self.stack.append(node)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.stack[-1].children.append(Node(tag, {k: v or "" for k, v in attrs}))

    def handle_endtag(self, tag: str) -> None:
        for index in range(len(self.stack) - 1, 0, -1):
            if self.stack[index].tag == tag:
                del self.stack[index:]
                return

    def handle_data(self, data: str) -> None:
        self.stack[-1].text += data


@dataclass(frozen=True)
class Opened:
    dom: Node
    raw: str
    screenshot: Path


def open_in_chromium(page: Path, shots: Path) -> Opened:
    """The page as Chromium has it after loading: a screenshot, and its DOM."""
    shot = shots / (page.stem + ".png")
    proc = _browser("--window-size=1100,1600", f"--screenshot={shot}", page.as_uri())
    assert shot.is_file(), proc.stderr[-2000:]
    dumped = _browser("--dump-dom", page.as_uri())
    assert dumped.returncode == 0 and "<body" in dumped.stdout, dumped.stderr[-2000:]
    tree = _Tree()
    tree.feed(dumped.stdout)
    return Opened(tree.root, dumped.stdout, shot)


def png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", head[16:24])
    return width, height


_PATH_X = re.compile(r"M\s*([-\d.]+)\s+[-\d.]+\s*L\s*([-\d.]+)")


def marker_step(figure: Node, gid: str) -> float:
    """The step at which the marker ``gid`` is drawn, read off the figure's x axis: its
    x position against the positions of two x tick labels."""
    (marker,) = figure.find("g", id=gid)
    (path,) = marker.find("path")
    match = _PATH_X.search(path.attrs["d"])
    assert match is not None and match.group(1) == match.group(2), path.attrs["d"]  # vertical
    x = float(match.group(1))
    ticks: list[tuple[float, float]] = []
    for tick in figure.walk():
        if not re.fullmatch(r"xtick_\d+", tick.attrs.get("id", "")):
            continue
        uses = tick.find("use")
        label = "".join(t.all_text() for t in tick.find("text")).strip().replace("\u2212", "-")
        if uses and label:
            ticks.append((float(uses[0].attrs["x"]), float(label)))
    assert len(ticks) >= 2, "the x axis has tick labels"
    (x0, s0), (x1, s1) = ticks[0], ticks[-1]
    return s0 + (x - x0) * (s1 - s0) / (x1 - x0)


def assert_self_contained(opened: Opened) -> None:
    """Nothing the page holds can make a request: no script, no element that loads anything,
    every reference an in-page fragment, no URL of any scheme, and a CSP that forbids all."""
    assert "://" not in opened.raw
    for node in opened.dom.walk():
        assert node.tag not in {"script", "link", "img", "iframe", "object", "embed", "base"}
        for name, value in node.attrs.items():
            if name in {"src", "href", "xlink:href", "action", "poster", "data", "srcset"}:
                assert value.startswith("#"), (node.tag, name, value)
        assert "url(" not in node.attrs.get("style", "").replace("url(#", "")
    (csp,) = opened.dom.find("meta", http_equiv="Content-Security-Policy")
    assert csp.attrs["content"].startswith("default-src 'none'")


def metric_sections(opened: Opened) -> dict[str, Node]:
    return {
        n.attrs["data-metric"]: n
        for n in opened.dom.find("section")
        if "metric" in n.attrs.get("class", "").split()
    }


def legend(figure: Node) -> str:
    return " | ".join(t.all_text().strip() for t in figure.find("text"))


# ------------------------------------------------------------------------- the real runs


@dataclass(frozen=True)
class Case:
    report: dict[str, Any]
    page: Path


def _verify(work: Path, name: str, *args: str) -> Case:
    report, page = work / f"{name}.json", work / f"{name}.html"
    proc = run_cli(
        "verify", "--local", "-q", "--report", str(report), "--html", str(page), *args,
        cwd=work, timeout=300,
    )  # fmt: skip
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    assert f"page: {page}" in proc.stderr
    return Case(json.loads(report.read_text()), page)


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Case]:
    work = tmp_path_factory.mktemp("report")
    py, curve = sys.executable, str(CURVE)
    resume = (
        "--resume-at", str(RESUME_AT),
        "--", py, curve, "--part", "1", "--sleep", "0.05", "--epochs", "30", "--no-rng",
    )  # fmt: skip
    out = {
        "identical": _verify(work, "identical", "--", py, curve),
        "control": _verify(work, "control", "--mode", "off", "--", py, curve),
        "resume": _verify(work, "resume", *resume),
    }
    trio = _verify(work, "trio-run", "--runs", "3", "--", py, curve)
    data = {**trio.report, "cpus": ["native", "Haswell", "Nehalem"]}
    (work / "trio.json").write_text(json.dumps(data))
    proc = run_cli("report", str(work / "trio.json"), "-o", str(work / "trio.html"), cwd=work)
    assert proc.returncode == 0, proc.stderr
    out["trio"] = Case(data, work / "trio.html")
    return out


# ------------------------------------------------------------------------------- the tests


def test_identical_pair_draws_flat_zero(cases: dict[str, Case], tmp_path: Path) -> None:
    case = cases["identical"]
    assert case.report["result"] == "identical" and case.report["divergence_steps"] == {}
    opened = open_in_chromium(case.page, tmp_path)
    assert png_size(opened.screenshot) == (1100, 1600)
    assert_self_contained(opened)
    (verdict,) = opened.dom.find("section", id="verdict")
    assert verdict.all_text().strip().startswith("Reproduced. The 2 runs printed the same 60")
    sections = metric_sections(opened)
    assert set(sections) == {"loss", "acc"}
    for name, section in sections.items():
        values, differences = section.find("figure")
        assert len(values.find("g", id=f"series-{name}-1")) == 1
        assert len(values.find("g", id=f"series-{name}-2")) == 1
        assert values.find("g", id=f"divergence-{name}-values") == []
        assert "data-divergence-step" not in section.attrs
        assert "run 2 vs run 1: the same value at all 60 common steps" in section.all_text()
        (line,) = differences.find("g", id=f"difference-{name}-2")
        (path,) = line.find("path")
        ys = {y for y in re.findall(r"[-\d.]+ ([-\d.]+)", path.attrs["d"])}
        assert len(ys) == 1, "identical runs draw one flat line (at zero)"


def test_diverged_control_marks_the_step_the_report_names(
    cases: dict[str, Case], tmp_path: Path
) -> None:
    case = cases["control"]
    div = case.report["divergence"]
    assert case.report["result"] == "diverged" and div["value"] == "loss"
    printed = int(re.match(r"epoch (\d+) ", div["a"]).group(1))  # type: ignore[union-attr]
    assert printed == PART and case.report["divergence_steps"]["loss"] == PART
    opened = open_in_chromium(case.page, tmp_path)
    assert_self_contained(opened)
    (verdict,) = opened.dom.find("section", id="verdict")
    assert f"parted at stdout line {div['line']}, loss at step {PART}" in verdict.all_text()
    assert "the control" in verdict.all_text()
    section = metric_sections(opened)["loss"]
    assert section.attrs["data-divergence-step"] == str(PART)
    values, differences = section.find("figure")
    assert marker_step(values, "divergence-loss-values") == pytest.approx(PART, abs=0.05)
    assert marker_step(differences, "divergence-loss-differences") == pytest.approx(PART, abs=0.05)
    assert "control: determinism off" in legend(values)
    assert f"run 2 vs run 1: first differs at step {PART}" in section.all_text()


def test_cpu_trio_names_each_cpu(cases: dict[str, Case], tmp_path: Path) -> None:
    case = cases["trio"]
    opened = open_in_chromium(case.page, tmp_path)
    assert_self_contained(opened)
    values, differences = metric_sections(opened)["loss"].find("figure")
    text = legend(values)
    assert "run 1 (reference): CPU native (this machine's CPU" in text
    assert "run 2: CPU Haswell (emulated by qemu" in text
    assert "run 3: CPU Nehalem (emulated by qemu" in text
    for run in (1, 2, 3):
        assert len(values.find("g", id=f"series-loss-{run}")) == 1
    assert "run 2 vs run 1" in legend(differences) and "run 3 vs run 1" in legend(differences)
    assert values.find("g", id="divergence-loss-values") == []
    (verdict,) = opened.dom.find("section", id="verdict")
    assert verdict.all_text().strip().startswith("Reproduced. The 3 runs printed the same 60")
    tables = opened.dom.find("table", **{"class": "stack-diff"})
    assert len(tables) == 2  # run 1 against run 2, and against run 3


def test_resume_check_marks_the_first_epoch_after_resuming(
    cases: dict[str, Case], tmp_path: Path
) -> None:
    case = cases["resume"]
    assert case.report["result"] == "diverged"
    first = case.report["differences"][0]
    assert first["straight"].startswith(f"epoch {RESUME_AT + 1} ")
    assert case.report["divergence_steps"]["loss"] == RESUME_AT + 1
    opened = open_in_chromium(case.page, tmp_path)
    assert_self_contained(opened)
    values, _ = metric_sections(opened)["loss"].find("figure")
    text = legend(values)
    assert "straight run (reference" in text and "resumed run (from the stopped" in text
    assert f"stopped run (SIGTERM after epoch {RESUME_AT})" in text
    assert marker_step(values, "divergence-loss-values") == pytest.approx(RESUME_AT + 1, abs=0.05)


# ------------------------------------------------------- bare columns, and the tables' widths

COLUMNS = DATA / "projects" / "report" / "columns.py"
COLUMNS_PART = 149
SIZES = ((1280, 900), (390, 844))
"""A laptop's window and a phone's (an iPhone 14's CSS pixels)."""
_MEASURE = """
function measure(frame) {
  const doc = frame.contentDocument, win = frame.contentWindow, cells = [];
  for (const cell of doc.querySelectorAll("table th, table td")) {
    const box = cell.getBoundingClientRect(), style = win.getComputedStyle(cell);
    const text = doc.createRange();
    text.selectNodeContents(cell);
    cells.push({
      table: cell.closest("table").className,
      text: cell.textContent,
      width_em: (box.width - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight))
        / parseFloat(style.fontSize),
      height_lines: text.getBoundingClientRect().height / parseFloat(style.lineHeight),
    });
  }
  const wraps = [...doc.querySelectorAll(".scroll")].map(s => s.scrollWidth - s.clientWidth);
  const out = document.createElement("pre");
  out.id = "measured";
  out.textContent = JSON.stringify({width: win.innerWidth, cells: cells, overflow: wraps});
  document.body.append(out);
}
"""


def measure_tables(page: Path, width: int, height: int, work: Path) -> dict[str, Any]:
    """Every table cell of ``page`` as laid out in a ``width`` x ``height`` viewport: an iframe
    of that size holds the page, unchanged (its CSP forbids scripts inside it), and a script of
    the frame around it measures each cell (its width in em, its text's height in lines)."""
    frame = work / f"measure-{page.stem}-{width}.html"
    frame.write_text(
        f'<!DOCTYPE html><html><body style="margin:0"><script>{_MEASURE}</script>'
        f'<iframe style="border:0;width:{width}px;height:{height}px" onload="measure(this)" '
        f'srcdoc="{html.escape(page.read_text(), quote=True)}"></iframe></body></html>'
    )
    profile = work / f"profile-{width}"  # its own, apart from any other Chromium running
    dumped = _browser(f"--user-data-dir={profile}", "--window-size=1400,1000", "--dump-dom",
                      frame.as_uri())  # fmt: skip
    found = re.search(r'<pre id="measured">(.*?)</pre>', dumped.stdout, re.DOTALL)
    assert found is not None, dumped.stderr[-2000:]
    measured: dict[str, Any] = json.loads(html.unescape(found.group(1)))
    assert measured["width"] == width
    return measured


def _long_record(path: Path) -> dict[str, Any]:
    """A run record whose command and environment hold what stretches a table: a long path,
    a long command line, a 64-digit token."""
    record: dict[str, Any] = json.loads(path.read_text())
    command = [
        "python",
        "/home/alice/projects/transformer-reproduction/experiments/2026-11/ablations/"
        "train_with_gradient_checkpointing.py",
        "--config=/data/shared/configs/ablation-lr-warmup-cosine-schedule.yaml",
    ]
    record["command"] = record["argv"] = command
    record["environment"]["set"]["HF_HOME"] = (
        "/scratch/alice/cache/huggingface/hub/models--meta-llama--Llama-3.1-8B/snapshots/"
        "0e9e39f249a16976918f6564b8830bc894c89659"
    )
    record["environment"]["set"]["WANDB_RUN_ID"] = "e3b0c442" * 8
    return record


@pytest.fixture(scope="module")
def columns(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Case]:
    """Real ``verify --local`` runs of columns.py (identical, and the control), and the
    identical one's report again with two run records, so that its page has a stack table."""
    work = tmp_path_factory.mktemp("columns")
    py, script = sys.executable, str(COLUMNS)
    out = {
        "identical": _verify(work, "identical", "--", py, script),
        "control": _verify(work, "control", "--mode", "off", "--", py, script),
    }
    data = json.loads(json.dumps(out["identical"].report))
    data["runs"][0]["run_record"] = _long_record(DATA / "diff" / "run-image.json")
    data["runs"][1]["run_record"] = json.loads((DATA / "diff" / "run-host.json").read_text())
    (work / "stacks.json").write_text(json.dumps(data))
    proc = run_cli("report", str(work / "stacks.json"), "-o", str(work / "stacks.html"))
    assert proc.returncode == 0, proc.stderr
    out["stacks"] = Case(data, work / "stacks.html")
    return out


def test_unlabeled_columns_are_plotted(columns: dict[str, Case], tmp_path: Path) -> None:
    case = columns["identical"]
    series = case.report["runs"][0]["series"]
    assert sorted(series) == ["column 2", "column 3", "loss"]  # loss: the last line names it
    assert series["column 2"]["steps"][:3] == [9, 19, 29] and len(series["column 2"]["steps"]) == 30
    opened = open_in_chromium(case.page, tmp_path)
    assert_self_contained(opened)
    sections = metric_sections(opened)
    assert set(sections) == {"column 2", "column 3"}  # one loss point: nothing to draw
    for name, section in sections.items():
        values, _ = section.find("figure")
        gid = name.replace(" ", "_")
        assert len(values.find("g", id=f"series-{gid}-1")) == 1
        assert len(values.find("g", id=f"series-{gid}-2")) == 1
        assert f"{name}, every run" in legend(values)
        assert "run 2 vs run 1: the same value at all 30 common steps" in section.all_text()


def test_a_diverged_column_is_marked_at_its_step(columns: dict[str, Case], tmp_path: Path) -> None:
    case = columns["control"]
    div = case.report["divergence"]
    assert case.report["result"] == "diverged" and div["value"] == "column 2"
    assert div["a"].startswith(f"{COLUMNS_PART} ")
    assert case.report["divergence_steps"]["column 2"] == COLUMNS_PART
    opened = open_in_chromium(case.page, tmp_path)
    (verdict,) = opened.dom.find("section", id="verdict")
    assert f"column 2 at step {COLUMNS_PART}" in verdict.all_text()
    first = next(n for n in opened.dom.find("section") if "data-metric" in n.attrs)
    assert first.attrs["data-metric"] == "column 2"  # the one that parted, first
    values, _ = first.find("figure")
    step = marker_step(values, "divergence-column_2-values")
    assert step == pytest.approx(COLUMNS_PART, abs=0.05)


@pytest.mark.parametrize(("width", "height"), SIZES)
def test_tables_keep_readable_columns(
    columns: dict[str, Case], tmp_path: Path, width: int, height: int
) -> None:
    """No cell narrower than 2.5 em (about five letters), no short word broken across lines, no
    table wider than the page; the long command, path and token break inside their cells."""
    page = columns["stacks"].page
    measured = measure_tables(page, width, height, tmp_path)
    cells = measured["cells"]
    assert {c["table"] for c in cells} == {"runs", "stack-diff"}
    assert sum(c["table"] == "stack-diff" for c in cells) > 30
    narrow = [c for c in cells if c["width_em"] < 2.5]  # the old CSS: 1.9 em, and 1.1 on a phone
    assert narrow == [], narrow[:3]
    broken = [c for c in cells if re.fullmatch(r"\S{1,12}", c["text"]) and c["height_lines"] > 1.3]
    assert broken == [], broken[:3]
    assert measured["overflow"] == [0] * len(measured["overflow"])
    (command,) = [c for c in cells if c["text"].startswith("python /home/alice/")]
    assert command["height_lines"] > 1.3  # broken inside its cell, not stretching the table
    shot = tmp_path / f"stacks-{width}.png"
    _browser(f"--user-data-dir={tmp_path / 'shot'}", f"--window-size={width},{height}",
             f"--screenshot={shot}", page.as_uri())  # fmt: skip
    assert png_size(shot) == (width, height)
