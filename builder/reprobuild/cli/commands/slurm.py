"""``reprobuild slurm``: an sbatch script for a multi-node torchrun job with the image."""

from __future__ import annotations

import argparse

from reprobuild.cli.options import (
    _path,
    _text,
    directory,
    env_option,
    job_image_options,
    nodes_options,
    output_file,
    print_written,
)

RUNTIMES = (
    "podman",
    "apptainer",
    "pyxis",
    "oci",
)  # reprobuild.cluster.slurm.RUNTIMES, not imported


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Write an sbatch script: one task per node (srun), each running the project's image, "
        "pinned by registry digest, under torchrun with the c10d rendezvous on the job's first "
        "node; node i holds ranks i*M..i*M+M-1; run records and outputs per node in one "
        "directory every node sees; --gpus-per-node and NCCL with --gpu."
    )
    directory(parser)
    nodes_options(parser, "node")
    parser.add_argument(
        "--runtime",
        metavar="R",
        type=_text,
        default="podman",
        help=f"how the nodes run the image: {', '.join(RUNTIMES)} (default: podman)",
    )
    parser.add_argument(
        "--bundle",
        metavar="DIR",
        type=_path,
        help="with --runtime oci: unpack the image here (a directory every node sees), each "
        "layer checked against the image's digests; kept if it holds the image already",
    )
    job_image_options(parser)
    env_option(parser, "every node")
    output_file(parser)


def run(args: argparse.Namespace) -> int:
    from reprobuild.cli.output import err
    from reprobuild.cluster.output import check_output, write_output
    from reprobuild.cluster.slurm import slurm_project

    check_output(args.output)
    text = slurm_project(
        args.directory,
        nodes=args.nodes,
        nproc_per_node=args.nproc_per_node,
        gpu=args.gpu,
        runtime=args.runtime,
        image=args.image,
        variant=args.variant,
        name=args.name,
        env=args.env,
        bundle=args.bundle,
        log=err,
    )
    write_output(text, args.output)
    print_written(args.output)
    return 0
