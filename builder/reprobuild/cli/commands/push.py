"""``reprobuild push IMAGE REF``: an image built earlier, to a registry."""

from __future__ import annotations

import argparse
import json

from reprobuild.cli.options import _text, json_flag, quiet_flag
from reprobuild.cli.output import err


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Push IMAGE (a tag or an image ID on the engine, built earlier) to a registry as REF. "
        "The engine asks the registry for each layer first and sends only those it lacks: "
        "after a one-package bump, that package's layer, the app's and the stamp's. Prints "
        "NAME@sha256:<digest> on stdout and the layers and bytes sent on stderr. The engine "
        "then knows the image by that digest, and compose, k8s and slurm pin it by it."
    )
    parser.add_argument("image", type=_text, help="image tag or ID on the engine")
    parser.add_argument(
        "ref", type=_text, metavar="REF", help="where to push: [REGISTRY/]NAME[:TAG]"
    )
    quiet_flag(parser)
    json_flag(parser)


def run(args: argparse.Namespace) -> int:
    from reprobuild.backends.engine import Engine
    from reprobuild.imaging.push import push_image, registry_manifest

    quiet = args.quiet or args.json
    report = push_image(
        Engine(),
        args.image,
        args.ref,
        read_manifest=registry_manifest,
        log=(lambda _: None) if quiet else err,
    )
    if args.json:
        print(json.dumps(report.to_dict(), indent=2, sort_keys=True))
        return 0
    if not args.quiet:
        err(report.summary())
    print(report.reference)
    return 0
