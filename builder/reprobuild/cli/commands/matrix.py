"""``reprobuild matrix``: the project's variants (or variants x trials) as a CI build matrix."""

from __future__ import annotations

import argparse

from reprobuild.cli.options import _int, _text, directory


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Print every variant of the project (its matrix:, else cpu and gpu) with "
        "its runner labels, lock and default tag. --format github: one line "
        '{"include": [...]}, for $GITHUB_OUTPUT and fromJSON; json: indented.'
    )
    directory(parser)
    parser.add_argument(
        "--format",
        choices=("github", "json"),
        default="json",
        help="github: one compact line; json: indented (default)",
    )
    parser.add_argument(
        "--trials",
        type=_int,
        metavar="N",
        help="a run matrix: one entry per variant and trial 0..N-1, with the REPRO_SEED and "
        "REPRO_TRIAL that run it and the derived run seed",
    )
    parser.add_argument(
        "--platform",
        metavar="OS/ARCH[,...]",
        type=_text,
        help="an entry per variant and platform (linux/amd64, linux/arm64; comma-separated), "
        "each with the platform that `image --platform` builds and that platform's default "
        "tag; a lock that does not cover a platform is an error naming the package",
    )
    parser.add_argument(
        "--seed",
        type=_int,
        metavar="S",
        help="the experiment seed of the trials (default: the project's seed)",
    )


def run(args: argparse.Namespace) -> int:
    from reprobuild.imaging.matrix import dumps, matrix
    from reprobuild.project.config import load_config

    document = matrix(
        load_config(args.directory), trials=args.trials, seed=args.seed, platforms=args.platform
    )
    print(dumps(document, args.format))
    return 0
