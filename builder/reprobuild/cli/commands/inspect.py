"""``reprobuild inspect``: print an image's manifest."""

from __future__ import annotations

import argparse
import json

from reprobuild.cli.options import json_flag


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("image", help="image reference or ID")
    json_flag(parser)


def run(args: argparse.Namespace) -> int:
    from reprobuild.backends.engine import Engine
    from reprobuild.checks.imageinfo import read_image

    info = read_image(Engine(), args.image)
    if args.json:
        print(json.dumps(info.to_dict(), indent=2, sort_keys=True))
        return 0
    m = info.manifest
    print(f"image        {info.image} ({info.id[:19]})")
    print(f"name         {m.name} ({m.variant})")
    print(f"base         {m.base_ref}")
    print(f"lock         {m.lock_file} sha256:{m.lock_sha256}")
    if m.lock_description:
        print(f"lock format  {m.lock_description}")
    print(f"python       {m.python_version} ({m.machine})")
    print(f"seed / mode  {m.seed} / {m.determinism}")
    print(f"built by     reprobuild {m.builder_version}, created {m.created}")
    if m.build:
        how = "reproducible" if m.build.get("reproducible") else "not reproducible"
        print(f"built with   {m.build.get('builder')} {m.build.get('builder_version')} ({how})")
    print(f"distributions ({len(m.distributions)}):")
    for dist in m.distributions:
        print(f"  {dist.name}=={dist.version}")
    return 0
