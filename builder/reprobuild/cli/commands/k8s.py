"""``reprobuild k8s``: Kubernetes manifests for a multi-node torchrun job with the image."""

from __future__ import annotations

import argparse

from reprobuild.cli.options import _int, _text, directory, env_option, output_file


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Write an Indexed Job and its headless Service (standard objects only): "
        "N pods, each running the project's image, pinned by registry digest, under torchrun "
        "with the c10d rendezvous on pod 0; NCCL and a GPU per process with --gpu."
    )
    directory(parser)
    parser.add_argument("--nodes", type=_int, required=True, metavar="N", help="pods (nodes)")
    parser.add_argument(
        "--nproc-per-node", type=_int, metavar="M", help="processes (ranks) per pod (default: 1)"
    )
    parser.add_argument("--gpu", action="store_true", help="the GPU image; M GPUs per pod")
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
    env_option(parser, "every pod")
    output_file(parser)


def run(args: argparse.Namespace) -> int:
    from reprobuild.cluster.k8s import k8s_project
    from reprobuild.cluster.output import check_output, write_output

    check_output(args.output)
    text = k8s_project(
        args.directory,
        nodes=args.nodes,
        nproc_per_node=args.nproc_per_node,
        gpu=args.gpu,
        image=args.image,
        variant=args.variant,
        name=args.name,
        env=args.env,
    )
    write_output(text, args.output)
    if args.output is not None and str(args.output) != "-":
        print(args.output)
    return 0
