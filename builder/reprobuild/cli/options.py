"""Options that several commands share, each defined once, and the argument converters.

The converters keep their names: argparse prints a converter's ``__name__`` in its usage
errors (``argument --trials: invalid _int value: 'x'``), so the names are part of the output.
"""

from __future__ import annotations

import argparse
from pathlib import Path


class Empty(str):
    """An option given as the empty string (typically an unset variable in CI): refused after
    parsing with one usage error, never taken as "not given" or as the current directory."""


def _text(value: str) -> str:
    return value if value else Empty()


def _path(value: str) -> Path | str:
    return Path(value) if value else Empty()


def _int(value: str) -> int | str:
    return int(value) if value else Empty()


def directory(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "directory",
        nargs="?",
        default=".",
        type=_path,
        help="project directory holding reprobuild.yaml (default: .)",
    )


def variant_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--variant",
        metavar="NAME",
        type=_text,
        help="a variant from the project's matrix: (its lock, base, CPU or GPU); "
        "list them with `reprobuild matrix`",
    )
    parser.add_argument("--gpu", action="store_true", help="the GPU variant (gpu_lock on base.gpu)")
    parser.add_argument(
        "--base",
        metavar="REF@DIGEST",
        type=_text,
        help="use this digest-pinned base instead of the project's",
    )
    parser.add_argument(
        "--online",
        action="store_true",
        help="install from the indexes inside the build instead of host-fetched wheels",
    )
    parser.add_argument(
        "--ca-cert",
        type=_path,
        metavar="PEM",
        help="CA bundle for --online installs behind a TLS-intercepting proxy; "
        "used in the build stage only, never in the final image",
    )


def env_option(parser: argparse.ArgumentParser, where: str) -> None:
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help=f"set NAME to VALUE in {where}, after reprobuild's own variables; repeatable, a "
        "later NAME wins; the value is literal text ($ is not expanded)",
    )


def json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON on stdout")


def quiet_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-q", "--quiet", action="store_true", help="do not stream the build log")


def output_file(parser: argparse.ArgumentParser) -> None:
    """-o for the commands that write one generated file (compose, k8s)."""
    parser.add_argument(
        "-o",
        "--output",
        type=_path,
        metavar="FILE",
        help="write here, atomically (default, or -: stdout)",
    )


def nodes_options(parser: argparse.ArgumentParser, unit: str) -> None:
    """``--nodes N`` (required) and ``--nproc-per-node M`` for the commands that write a
    multi-node job (k8s, slurm); ``unit``: what a node is called there (``pod``, ``node``)."""
    parser.add_argument(
        "--nodes",
        type=_int,
        required=True,
        metavar="N",
        help="nodes" if unit == "node" else f"{unit}s (nodes)",
    )
    parser.add_argument(
        "--nproc-per-node",
        type=_int,
        metavar="M",
        help=f"processes (ranks) per {unit} (default: 1)",
    )
    parser.add_argument("--gpu", action="store_true", help=f"the GPU image; M GPUs per {unit}")


def job_image_options(parser: argparse.ArgumentParser) -> None:
    """``--variant``, ``--image`` and ``--name``: which image a cluster job runs, its name."""
    parser.add_argument("--variant", metavar="NAME", type=_text, help="this variant's image")
    parser.add_argument(
        "--image",
        metavar="REF",
        type=_text,
        help="this image (a pushed tag or NAME@sha256:...) instead of the project's default tag",
    )
    parser.add_argument(
        "--name", metavar="NAME", type=_text, help="job name (default: from the project name)"
    )


def print_written(output: Path | str | None) -> None:
    """What the job writers print: the file they wrote (nothing when it went to stdout)."""
    if output is not None and str(output) != "-":
        print(output)
