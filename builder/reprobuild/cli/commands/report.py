"""``reprobuild report``: the HTML page of a verify report (plots of what the runs printed)."""

from __future__ import annotations

import argparse
from pathlib import Path

from reprobuild.cli.output import err


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Write the HTML page of a verify report: the verdict in words, one plot per number "
        "the runs printed (loss, accuracy, ...) with every run overlaid and the first "
        "divergence marked, the distance between runs on a log scale, and the runs' stack "
        "differences. One self-contained file: no script, nothing fetched."
    )
    parser.add_argument(
        "report", type=Path, metavar="REPORT", help="the JSON report `reprobuild verify` wrote"
    )
    parser.add_argument(
        "-o",
        "--output",
        type=Path,
        metavar="FILE",
        help="the page to write, ending in .html (default: REPORT with .html for .json); "
        "an existing file is replaced only when it is a page reprobuild wrote",
    )


def run(args: argparse.Namespace) -> int:
    from reprobuild.checks.page import check_page_path, read_report, report_page, write_page

    output: Path = args.output or args.report.with_suffix(".html")
    check_page_path(output, "--output")
    write_page(output, report_page(read_report(args.report)), "--output")
    err(f"page: {output.absolute()}")
    return 0
