"""``reprobuild sbom``: print (or write) the CycloneDX SBOM an image carries."""

from __future__ import annotations

import argparse
import sys

from reprobuild.cli.options import _path, _text


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Print the image's CycloneDX 1.6 SBOM (/opt/reprobuild/sbom.cdx.json), checked against "
        "the sha256 its manifest records, or write it to FILE (only an earlier SBOM or an "
        "empty file is replaced)."
    )
    parser.add_argument("image", type=_text, help="image reference or ID")
    parser.add_argument(
        "-o",
        "--output",
        type=_path,
        metavar="FILE",
        help="write here, atomically (default, or -: stdout)",
    )


def run(args: argparse.Namespace) -> int:
    from reprobuild.backends.engine import Engine
    from reprobuild.checks.sbom import export_sbom

    raw = export_sbom(Engine(), args.image, args.output)
    if args.output is None or str(args.output) == "-":
        sys.stdout.buffer.write(raw)
    else:
        print(args.output)
    return 0
