"""The plots of a verify report's page: one named number of the runs' stdout (``loss``), every
run overlaid, and beside it how far each run is from the reference run, step by step, on a
log scale that keeps zero (so identical runs draw a flat zero). Drawn by matplotlib as SVG
text, without pyplot (no global figure state, no display), to be inlined in the page.

Pure but for matplotlib: series in, SVG text out. A series of more than :data:`MAX_DRAWN`
points is thinned for drawing (its differences by the largest in each stretch, so no spike is
lost); the numbers compared are all of them.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from reprobuild.checks.streams import MetricSeries, Number

MAX_DRAWN = 1500
"""The most points drawn per line."""
LINTHRESH = 1e-16
"""The relative difference below which the difference plot is linear (so zero has a place):
float64's machine epsilon is 2.2e-16."""
COLORS = ("#1f5fa8", "#d1495b", "#2e933c", "#8e44ad", "#e08e0b", "#17a2b8", "#6c757d")
"""The runs' colours, in run order (run 1 first)."""
_SVG_START = re.compile(r"^.*?(?=<svg\b)", re.DOTALL)
_METADATA = re.compile(r"<metadata>.*?</metadata>\s*", re.DOTALL)
_XMLNS = re.compile(r'\s+xmlns(?::\w+)?="[^"]*"')


@dataclass(frozen=True)
class Line:
    """One run's series, as its legend names it."""

    label: str
    series: MetricSeries


@dataclass(frozen=True)
class Difference:
    """Steps and the relative difference of one run from the reference run at each."""

    label: str
    steps: tuple[float, ...]
    rel: tuple[float, ...]
    """nan where only one of the two has a finite value."""

    @property
    def largest(self) -> float:
        finite = [r for r in self.rel if not math.isnan(r)]
        return max(finite, default=0.0)


def relative_differences(
    reference: MetricSeries, other: MetricSeries
) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Steps and ``|a - b| / max(|a|, |b|)`` (0 for equal values), point by point while both
    runs printed the same steps, else matched by step (a resumed run starts later)."""
    n = min(len(reference.steps), len(other.steps))
    if reference.steps[:n] == other.steps[:n]:
        pairs = [(reference.steps[i], reference.values[i], other.values[i]) for i in range(n)]
    else:
        theirs = dict(zip(other.steps, other.values, strict=True))
        pairs = [
            (step, value, theirs[step])
            for step, value in zip(reference.steps, reference.values, strict=True)
            if step in theirs
        ]
    steps = tuple(float(step) for step, _, _ in pairs)
    return steps, tuple(_relative(a, b) for _, a, b in pairs)


def _relative(a: Number | None, b: Number | None) -> float:
    if a is None or b is None:
        return 0.0 if a is None and b is None else math.nan
    if a == b:
        return 0.0
    fa, fb = float(a), float(b)
    return abs(fa - fb) / max(abs(fa), abs(fb))


def _thin(
    steps: Sequence[float], values: Sequence[float], *, peaks: bool
) -> tuple[list[float], list[float]]:
    """At most :data:`MAX_DRAWN` points: every k-th, or (``peaks``) the largest of each
    stretch of k, at the step where it is."""
    n = len(steps)
    if n <= MAX_DRAWN:
        return list(steps), list(values)
    k = math.ceil(n / MAX_DRAWN)
    out_s: list[float] = []
    out_v: list[float] = []
    for start in range(0, n, k):
        chunk = range(start, min(start + k, n))
        if peaks:
            best = max(chunk, key=lambda i: -1.0 if math.isnan(values[i]) else values[i])
        else:
            best = start
        out_s.append(steps[best])
        out_v.append(values[best])
    if not peaks and out_s[-1] != steps[-1]:
        out_s.append(steps[-1])
        out_v.append(values[-1])
    return out_s, out_v


def slug(name: str) -> str:
    """A name as it goes into an id: letters, digits, ``-``, ``_``."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", name)


def _figure() -> tuple[Any, Any]:
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    # fixed margins, not a layout engine: constrained layout measured half the drawing time
    figure = Figure(figsize=(5.6, 3.3))
    figure.subplots_adjust(left=0.15, right=0.97, bottom=0.14, top=0.91)
    axes = figure.add_subplot()
    # a few ticks: each one is a line and a text to lay out, most of the drawing time
    axes.xaxis.set_major_locator(MaxNLocator(nbins=6, integer=True))
    axes.yaxis.set_major_locator(MaxNLocator(nbins=6))
    return figure, axes


def _svg(figure: Any, salt: str) -> str:
    import matplotlib
    from matplotlib.backends.backend_svg import FigureCanvasSVG

    buffer = io.StringIO()
    # text as <text> (smaller, selectable, readable in the DOM); ids the same from run to run
    # and distinct per plot
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": salt}):
        canvas: Any = FigureCanvasSVG(figure)
        canvas.print_svg(buffer, metadata={"Date": None})
    text = _SVG_START.sub("", buffer.getvalue(), count=1)
    text = _METADATA.sub("", text, count=1)
    return _XMLNS.sub("", text)


def _marker(axes: Any, step: Number | None, gid: str) -> None:
    if step is None:
        return
    axes.axvline(float(step), color="#000000", linestyle=":", linewidth=1.4, gid=gid)
    low, high = axes.get_xlim()
    left = high > low and (float(step) - low) / (high - low) > 0.6  # the words to its left
    axes.annotate(
        f"first divergence (step {step})",
        xy=(float(step), 1.0),
        xycoords=("data", "axes fraction"),
        xytext=(-3 if left else 3, -3),
        textcoords="offset points",
        fontsize="small",
        ha="right" if left else "left",
        va="top",
        backgroundcolor="#ffffffcc",
    )


def _decade(value: float, _position: object = None) -> str:
    return "0" if value == 0 else f"{value:.0e}".replace("e-0", "e-").replace("e+0", "e")


def _values(name: str, lines: Sequence[Line], marker: Number | None) -> str:
    """Every run's ``name`` over its steps, run 1 solid and wide, the others dashed on top
    (where they agree they lie on it); ``marker``: the step of the first divergence."""
    figure, axes = _figure()
    for index, line in enumerate(lines):
        steps = [float(s) for s in line.series.steps]
        values = [math.nan if v is None else float(v) for v in line.series.values]
        xs, ys = _thin(steps, values, peaks=False)
        axes.plot(
            xs,
            ys,
            color=COLORS[index % len(COLORS)],
            linewidth=2.6 if index == 0 else 1.3,
            linestyle="-" if index == 0 else (0, (4, 2 + index)),
            label=line.label,
            gid=f"series-{slug(name)}-{index + 1}",
        )
    _marker(axes, marker, f"divergence-{slug(name)}-values")
    axes.set_xlabel("step")
    axes.set_ylabel(name)
    axes.set_title(f"{name}, every run")
    axes.grid(True, linewidth=0.4, alpha=0.5)
    axes.legend(fontsize="small")
    return _svg(figure, f"values-{name}")


def _differences(name: str, differences: Sequence[Difference], marker: Number | None) -> str:
    """Each run's relative difference from the reference, on a symmetric log scale: flat on
    zero while the bits agree, a rise where they part."""
    figure, axes = _figure()
    top = LINTHRESH * 10
    for index, diff in enumerate(differences, start=1):
        xs, ys = _thin(diff.steps, diff.rel, peaks=True)
        axes.plot(
            xs,
            ys,
            color=COLORS[index % len(COLORS)],
            linewidth=1.6,
            label=diff.label,
            gid=f"difference-{slug(name)}-{index + 1}",
        )
        top = max(top, diff.largest * 10)
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    axes.set_yscale("symlog", linthresh=LINTHRESH)
    top = min(top, 10.0)
    axes.set_ylim(0, top)
    # decades only, at most six of them, no minor ticks: symlog's own locators place dozens
    # of ticks over 17 decades, and their labels cost more than the lines
    decades = list(range(-16, max(-15, math.ceil(math.log10(top)))))
    stride = max(1, math.ceil(len(decades) / 6))
    axes.yaxis.set_major_locator(FixedLocator([0.0] + [10.0**d for d in decades[::-stride]]))
    axes.yaxis.set_minor_locator(NullLocator())
    axes.yaxis.set_major_formatter(FuncFormatter(_decade))  # plain text: no mathtext to lay out
    _marker(axes, marker, f"divergence-{slug(name)}-differences")
    axes.set_xlabel("step")
    axes.set_ylabel("relative difference")
    axes.set_title(f"{name}: distance from run 1 (0 = same value)")
    axes.grid(True, linewidth=0.4, alpha=0.5)
    if differences:
        axes.legend(fontsize="small")
    return _svg(figure, f"differences-{name}")


FONT_SIZE = 11.0
"""Points, a little over matplotlib's 10: on a phone the plot is drawn at about 2/3 size."""


def values_svg(name: str, lines: Sequence[Line], marker: Number | None) -> str:
    """Every run's ``name`` over its steps, run 1 solid and wide, the others dashed on top
    (where they agree they lie on it); ``marker``: the step of the first divergence."""
    import matplotlib

    with matplotlib.rc_context({"font.size": FONT_SIZE}):
        return _values(name, lines, marker)


def differences_svg(name: str, differences: Sequence[Difference], marker: Number | None) -> str:
    """Each run's relative difference from the reference, on a symmetric log scale: flat on
    zero while the bits agree, a rise where they part."""
    import matplotlib

    with matplotlib.rc_context({"font.size": FONT_SIZE}):
        return _differences(name, differences, marker)
