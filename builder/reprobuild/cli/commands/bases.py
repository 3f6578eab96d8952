"""``reprobuild bases``: the project's locked bases; ``--update`` re-pins them."""

from __future__ import annotations

import argparse
import json

from reprobuild.cli.options import directory, json_flag
from reprobuild.cli.output import err


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "A catalog base (base.cpu/base.gpu: NAME) is pinned to the catalog's digest "
        "in reprobuild.bases.lock the first time the project is rendered or built, and stays "
        "there. This lists each with its status; --update moves it to the catalog's digest."
    )
    directory(parser)
    parser.add_argument(
        "--update",
        nargs="*",
        metavar="NAME",
        help="re-pin these catalog bases (all the project's, when no NAME is given)",
    )
    json_flag(parser)


def run(args: argparse.Namespace) -> int:
    from reprobuild.bases import baselock
    from reprobuild.bases.catalog import load_catalog
    from reprobuild.project.config import load_config

    config = load_config(args.directory)
    catalog = load_catalog()
    if args.update is not None:
        for name, old, new in baselock.update_project(config, args.update, catalog):
            err(f"{name}: {old or '(not locked)'} -> {new}")
    rows = [use.to_dict() for use in baselock.project_bases(config, catalog)]
    if args.json:
        print(json.dumps({"lock": str(baselock.lock_path(config.root)), "bases": rows}, indent=2))
        return 0
    for row in rows:
        pinned = row["locked"] or row["catalog"] or row["base"]
        print(f"{row['variant']}  {row['base']}  {row['status']}  {pinned}")
    return 0
