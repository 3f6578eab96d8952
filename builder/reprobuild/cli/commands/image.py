"""``reprobuild image``: render, build, stamp and tag the project's image."""

from __future__ import annotations

import argparse
import json
import sys

from reprobuild.backends.builders import BUILDERS
from reprobuild.cli.options import _text, directory, json_flag, quiet_flag, variant_options
from reprobuild.cli.output import err


def add_arguments(parser: argparse.ArgumentParser) -> None:
    directory(parser)
    variant_options(parser)
    parser.add_argument(
        "--tag",
        metavar="NAME[:TAG]",
        type=_text,
        help="image tag (default: NAME:<cpu|gpu|VARIANT>-<first 12 hex of the lock's sha256>, "
        "then -<8 hex of the selection> when select: names extras or groups)",
    )
    parser.add_argument(
        "--builder",
        choices=BUILDERS,
        default="auto",
        help="auto (buildah where installed: the same inputs give the same image ID; else "
        "the engine's BuildKit where it builds reproducibly; else buildx if installed, else "
        "classic; says which and why), buildah (daemonless), buildx, "
        "buildkit (the engine's BuildKit: reproducible on Engine 26 with the containerd image "
        "store, says so), classic (the engine's own builder, not reproducible)",
    )
    parser.add_argument(
        "--push",
        metavar="REGISTRY/NAME[:TAG]",
        type=_text,
        help="then push it to a registry (--builder buildah), as `reprobuild push` does: only "
        "the layers the registry lacks move; the layers and bytes sent go to stderr, and "
        "compose, k8s and slurm pin the image by its pushed digest",
    )
    parser.add_argument(
        "--platform",
        metavar="OS/ARCH",
        type=_text,
        help="the platform to build for: linux/amd64 or linux/arm64 (default: this machine's). "
        "The lock's markers and wheels are read for it and the base's image for it is used (an "
        "index pinned by digest gives its entry). Another machine's platform builds with "
        "buildah, its steps run under qemu-user (binfmt_misc), and the default tag ends in "
        "-ARCH. Several, comma-separated, with --push NAME:TAG: each platform's image is built "
        "and pushed as NAME:TAG-ARCH, then an OCI image index of them is put at NAME:TAG, "
        "whose one digest is printed",
    )
    parser.add_argument("--no-cache", action="store_true", help="build without the engine's cache")
    quiet_flag(parser)
    json_flag(parser)


def run(args: argparse.Namespace) -> int:
    from reprobuild.imaging.image import build_image
    from reprobuild.imaging.platformindex import IndexResult

    quiet = args.quiet or args.json
    log = (lambda _: None) if quiet else err
    result = build_image(
        args.directory,
        gpu=args.gpu,
        tag=args.tag,
        base=args.base,
        online=args.online,
        ca_cert=args.ca_cert,
        builder=args.builder,
        no_cache=args.no_cache,
        log=log,
        note=err,
        variant=args.variant,
        push=args.push,
        platform=args.platform,
        # the wheel fetch's live bar where stderr is a terminal (never stdout: it carries
        # the tag or the JSON); plain lines through log elsewhere
        bar=None if quiet else sys.stderr,
    )
    if args.json:
        print(json.dumps(result.to_dict(), indent=2, sort_keys=True))
        return 0
    report = result if isinstance(result, IndexResult) else result.push
    if report is not None and not args.quiet:
        err(report.summary())
    print(result.image)
    return 0
