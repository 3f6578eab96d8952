"""``reprobuild rebuild``: build an image again from its recorded inputs; the same image?"""

from __future__ import annotations

import argparse
import json

from reprobuild.cli.options import _text, directory, json_flag, quiet_flag
from reprobuild.cli.output import EXIT_ERROR, err


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Rebuild IMAGE (built reproducibly: buildah, or the engine's BuildKit where it can) "
        "from the project in "
        "DIRECTORY, the recorded lock, base, SOURCE_DATE_EPOCH and builder version, and "
        "compare image IDs. When they differ, name the first layer that differs and every "
        "file in it that differs. Exit codes: 0 the same image; 1 it differs; 2 a recorded "
        "input is not at hand (the error names it)."
    )
    parser.add_argument("image", type=_text, help="image reference or ID")
    directory(parser)
    quiet_flag(parser)
    json_flag(parser)


def run(args: argparse.Namespace) -> int:
    from reprobuild.checks.rebuild import rebuild, render_table

    log = (lambda _: None) if args.quiet or args.json else err
    report = rebuild(args.image, args.directory, log=log)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2, sort_keys=True))
    else:
        print("\n".join(render_table(report)))
    return 0 if report.match else EXIT_ERROR
