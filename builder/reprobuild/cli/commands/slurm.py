"""``reprobuild slurm``: an sbatch script for a multi-node torchrun job with the image."""

from __future__ import annotations

import argparse

from reprobuild.cli.options import _int, _text, directory, env_option, output_file

RUNTIMES = ("podman", "apptainer", "pyxis")  # reprobuild.cluster.slurm.RUNTIMES, not imported


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Write an sbatch script: one task per node (srun), each running the project's image, "
        "pinned by registry digest, under torchrun with the c10d rendezvous on the job's first "
        "node; node i holds ranks i*M..i*M+M-1; run records and outputs per node in one "
        "directory every node sees; --gpus-per-node and NCCL with --gpu."
    )
    directory(parser)
    parser.add_argument("--nodes", type=_int, required=True, metavar="N", help="nodes")
    parser.add_argument(
        "--nproc-per-node", type=_int, metavar="M", help="processes (ranks) per node (default: 1)"
    )
    parser.add_argument("--gpu", action="store_true", help="the GPU image; M GPUs per node")
    parser.add_argument(
        "--runtime",
        metavar="R",
        type=_text,
        default="podman",
        help=f"how the nodes run the image: {', '.join(RUNTIMES)} (default: podman)",
    )
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
    env_option(parser, "every node")
    output_file(parser)


def run(args: argparse.Namespace) -> int:
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
    )
    write_output(text, args.output)
    if args.output is not None and str(args.output) != "-":
        print(args.output)
    return 0
