"""``reprobuild compose``: a compose file that trains (and verifies) with the project's image."""

from __future__ import annotations

import argparse

from reprobuild.cli.options import _int, _text, directory, env_option, output_file, print_written


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Write a compose file for the project's built image, pinned by digest or "
        "ID: a `train` service, two `verify-a`/`verify-b` runs (profile verify), run records "
        "in runs/<service>/, outputs in out/<service>/, ./data read-only at /data."
    )
    directory(parser)
    parser.add_argument(
        "--gpu", action="store_true", help="the GPU image; reserve all GPUs for every run"
    )
    parser.add_argument(
        "--variant",
        metavar="NAME",
        type=_text,
        help="the image of this variant of the project's matrix (see `reprobuild matrix`)",
    )
    parser.add_argument(
        "--image",
        metavar="REF",
        type=_text,
        help="this image (tag, ID, or NAME@sha256:...) instead of the project's default tag",
    )
    parser.add_argument(
        "--nodes",
        type=_int,
        metavar="N",
        help="a multi-node torchrun job instead: one service per node on a private network, "
        "node 0 hosting the c10d rendezvous (gloo on CPU, NCCL with --gpu)",
    )
    parser.add_argument(
        "--nproc-per-node",
        type=_int,
        metavar="M",
        help="with --nodes: training processes (ranks) per node (default: 1)",
    )
    env_option(parser, "every service that runs the program")
    output_file(parser)


def run(args: argparse.Namespace) -> int:
    from reprobuild.cluster.compose import compose_project
    from reprobuild.cluster.output import check_output, write_output

    check_output(args.output)
    result = compose_project(
        args.directory,
        gpu=args.gpu,
        image=args.image,
        variant=args.variant,
        nodes=args.nodes,
        nproc_per_node=args.nproc_per_node,
        env=args.env,
    )
    write_output(result.text, args.output)
    print_written(args.output)
    return 0
