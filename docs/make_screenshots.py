"""Regenerate the screenshots of docs/how-to/read-a-verify-report.md.

Runs two real ``reprobuild verify --local`` of the test curve
(tests/data/projects/report/curve.py): an identical pair, and the control (``--mode off``,
which parts at epoch 37); writes each page with ``--html``; opens it in headless Chromium
(Debian's ``chromium``, as scripts/setup installs it) and keeps the top of the page as a PNG,
reduced to 64 colours with Pillow (matplotlib's own dependency) to stay small.

    .venv/bin/python docs/make_screenshots.py
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from PIL import Image

DOCS = Path(__file__).resolve().parent
CURVE = DOCS.parent / "tests" / "data" / "projects" / "report" / "curve.py"
OUT = DOCS / "how-to" / "img"
WIDTH, HEIGHT = 900, 1300


def page(work: Path, name: str, *options: str) -> Path:
    html = work / f"{name}.html"
    subprocess.run(
        [sys.executable, "-m", "reprobuild", "verify", "--local", "-q", *options,
         "--report", str(work / f"{name}.json"), "--html", str(html),
         "--", "python3", "curve.py"],
        cwd=work, check=False, capture_output=True,
    )  # fmt: skip
    if not html.is_file():
        sys.exit(f"make_screenshots: verify wrote no page for {name}")
    return html


def screenshot(html: Path, png: Path) -> None:
    chromium = shutil.which("chromium")
    if chromium is None:
        sys.exit("make_screenshots: no chromium (scripts/setup installs it)")
    raw = html.with_suffix(".png")
    subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         "--hide-scrollbars",
         f"--window-size={WIDTH},{HEIGHT}", f"--screenshot={raw}", html.as_uri()],
        check=True, capture_output=True,
    )  # fmt: skip
    with Image.open(raw) as image:
        image.convert("RGB").quantize(colors=64).save(png, optimize=True)
    print(f"{png.relative_to(DOCS.parent)}: {png.stat().st_size} bytes")


def main() -> None:
    OUT.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        shutil.copy(CURVE, work / "curve.py")
        screenshot(page(work, "identical"), OUT / "verify-identical.png")
        screenshot(page(work, "diverged", "--mode", "off"), OUT / "verify-diverged.png")


if __name__ == "__main__":
    main()
