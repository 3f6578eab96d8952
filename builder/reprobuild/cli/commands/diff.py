"""``reprobuild diff``: compare two images' stacks, two run records, or one of each."""

from __future__ import annotations

import argparse
from pathlib import Path

from reprobuild.cli.options import json_flag
from reprobuild.cli.output import EXIT_ERROR, err


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Compare the stacks of A and B: image manifests (an image on this engine, "
        "or a manifest.json), run records (run-<id>.json), MLflow runs started in a reprobuild "
        "image (runs:/<id>, or a bare run ID with MLFLOW_TRACKING_URI set), W&B runs started "
        "in one (a run directory, wandb/offline-run-*, or ENTITY/PROJECT/RUN_ID online with "
        "WANDB_API_KEY set), or one of each. "
        "Exit 0: identical; "
        "1: they differ; 2: bad usage or an input that cannot be read."
    )
    parser.add_argument(
        "a",
        metavar="A",
        help="image reference or ID, manifest.json, run record, MLflow run (runs:/<id>), W&B "
        "run directory, or W&B run online (ENTITY/PROJECT/RUN_ID)",
    )
    parser.add_argument("b", metavar="B", help="the same, compared with A")
    json_flag(parser)
    parser.add_argument(
        "--html",
        type=Path,
        metavar="FILE",
        help="also write the comparison as an HTML page (a table, changed rows first); an "
        "existing file is replaced only when it is a page reprobuild wrote",
    )


def run(args: argparse.Namespace) -> int:
    from reprobuild.checks.diff import diff

    if args.html is not None:
        from reprobuild.checks.page import check_page_path

        check_page_path(args.html, "--html")
    result = diff(args.a, args.b)
    if args.html is not None:
        from reprobuild.checks.page import diff_page, write_page

        write_page(args.html, diff_page(result), "--html")
        err(f"page: {args.html.absolute()}")
    if args.json:
        print(result.to_json(), end="")
    else:
        print("\n".join(result.lines()))
    return 0 if result.identical else EXIT_ERROR
