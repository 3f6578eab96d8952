"""``reprobuild k8s``: Kubernetes manifests for a multi-node torchrun job with the image."""

from __future__ import annotations

import argparse

from reprobuild.cli.options import (
    directory,
    env_option,
    job_image_options,
    nodes_options,
    output_file,
    print_written,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Write an Indexed Job and its headless Service (standard objects only): "
        "N pods, each running the project's image, pinned by registry digest, under torchrun "
        "with the c10d rendezvous on pod 0; NCCL and a GPU per process with --gpu."
    )
    directory(parser)
    nodes_options(parser, "pod")
    job_image_options(parser)
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
    print_written(args.output)
    return 0
