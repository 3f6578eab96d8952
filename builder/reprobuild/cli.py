"""The ``reprobuild`` command: parse arguments, call the library, map errors to exit codes.

Exit codes: 0 success, 1 a reprobuild error (printed as one ``error:`` line), 2 bad usage,
130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from reprobuild import __version__
from reprobuild.engine import BUILDERS

if TYPE_CHECKING:
    from reprobuild.render import RenderSpec

EXIT_ERROR = 1
EXIT_USAGE = 2


def _directory(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "directory",
        nargs="?",
        default=".",
        type=Path,
        help="project directory holding reprobuild.yaml (default: .)",
    )


def _variant_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--gpu", action="store_true", help="the GPU variant (gpu_lock on base.gpu)")
    parser.add_argument(
        "--base", metavar="REF@DIGEST", help="use this digest-pinned base instead of the project's"
    )
    parser.add_argument(
        "--online",
        action="store_true",
        help="install from the indexes inside the build instead of host-fetched wheels",
    )
    parser.add_argument(
        "--ca-cert",
        type=Path,
        metavar="PEM",
        help="CA bundle for --online installs behind a TLS-intercepting proxy; "
        "used in the build stage only, never in the final image",
    )


def _json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON on stdout")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="reprobuild", description=__doc__.splitlines()[0] if __doc__ else None
    )
    parser.add_argument("--version", action="version", version=f"reprobuild {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    render = sub.add_parser("render", help="write the build context (Dockerfile, lock, runtime)")
    _directory(render)
    _variant_options(render)
    render.add_argument(
        "-o",
        "--output",
        type=Path,
        metavar="OUT",
        help="output directory (default: DIR/.reprobuild/context-cpu|gpu)",
    )

    image = sub.add_parser("image", help="render, build, stamp and tag the image")
    _directory(image)
    _variant_options(image)
    image.add_argument(
        "--tag",
        metavar="NAME[:TAG]",
        help="image tag (default: NAME:cpu-<first 12 hex of the lock's sha256>)",
    )
    image.add_argument(
        "--builder",
        choices=BUILDERS,
        default="auto",
        help="auto (buildx if installed, else classic), buildx, buildkit, classic",
    )
    image.add_argument("--no-cache", action="store_true", help="build without the engine's cache")
    image.add_argument("-q", "--quiet", action="store_true", help="do not stream the build log")
    _json_flag(image)

    inspect = sub.add_parser("inspect", help="print an image's manifest")
    inspect.add_argument("image", help="image reference or ID")
    _json_flag(inspect)

    resolve = sub.add_parser(
        "resolve", help="pin a tag: print NAME:TAG@sha256:... from its registry"
    )
    resolve.add_argument("ref", help="image reference, e.g. python:3.11-slim")
    resolve.add_argument("--platform", default="linux/amd64", help="platform for multi-arch tags")
    _json_flag(resolve)
    return parser


def _err(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def cmd_render(args: argparse.Namespace) -> int:
    from reprobuild.context import write_context
    from reprobuild.plan import make_spec
    from reprobuild.render import render_context

    config, spec = make_spec(
        args.directory, gpu=args.gpu, base=args.base, online=args.online, ca_cert=args.ca_cert
    )
    spec = _with_local_base_entrypoint(spec)
    out = args.output or config.root / ".reprobuild" / f"context-{spec.variant}"
    write_context(render_context(spec), out, epoch=spec.epoch)
    print(out)
    return 0


def _with_local_base_entrypoint(spec: RenderSpec) -> RenderSpec:
    """`render` needs no engine, but the base's ENTRYPOINT (chained by ours) is only known
    from the base's config: read it when a local engine has the base, else say so."""
    from dataclasses import replace

    from reprobuild.build import base_entrypoint
    from reprobuild.engine import Engine
    from reprobuild.errors import EngineError

    if spec.base_entrypoint is not None:
        return spec
    engine = Engine()
    try:
        if engine.image_id(spec.base.by_digest()) is not None:
            return replace(spec, base_entrypoint=base_entrypoint(engine, spec))
    except EngineError:
        pass
    _err(
        f"note: {spec.base.by_digest()} is not in the catalog nor on a local engine, so its own "
        "ENTRYPOINT (if any) is not chained in this render; `reprobuild image` reads it from "
        "the pulled base"
    )
    return spec


def cmd_image(args: argparse.Namespace) -> int:
    from reprobuild.build import build_image

    log = (lambda _: None) if args.quiet or args.json else _err
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
    )
    if args.json:
        print(json.dumps(result.to_dict(), indent=2, sort_keys=True))
    else:
        print(result.image)
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
    from reprobuild.engine import Engine
    from reprobuild.imageinfo import read_image

    info = read_image(Engine(), args.image)
    if args.json:
        print(json.dumps(info.to_dict(), indent=2, sort_keys=True))
        return 0
    m = info.manifest
    print(f"image        {info.image} ({info.id[:19]})")
    print(f"name         {m.name} ({m.variant})")
    print(f"base         {m.base_ref}")
    print(f"lock         {m.lock_file} sha256:{m.lock_sha256}")
    print(f"python       {m.python_version} ({m.machine})")
    print(f"seed / mode  {m.seed} / {m.determinism}")
    print(f"built by     reprobuild {m.builder_version}, created {m.created}")
    print(f"distributions ({len(m.distributions)}):")
    for dist in m.distributions:
        print(f"  {dist.name}=={dist.version}")
    return 0


def cmd_resolve(args: argparse.Namespace) -> int:
    from reprobuild.registry import resolve

    resolved = resolve(args.ref, platform=args.platform)
    if args.json:
        print(json.dumps(resolved.to_dict(), indent=2, sort_keys=True))
        return 0
    print(str(resolved.ref))
    if resolved.platform_digest != resolved.ref.digest:
        print(f"# {resolved.platform}: {resolved.platform_digest}", file=sys.stderr)
    return 0


COMMANDS = {
    "render": cmd_render,
    "image": cmd_image,
    "inspect": cmd_inspect,
    "resolve": cmd_resolve,
}


def main(argv: Sequence[str] | None = None) -> int:
    from reprobuild.errors import BuildError, ReprobuildError

    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: --help/--version exit 0, bad usage exits 2
        return int(exc.code or 0)
    try:
        return COMMANDS[args.command](args)
    except BuildError as exc:
        if exc.log_tail and getattr(args, "quiet", False):
            _err(exc.log_tail)
        _err(f"error: {exc.message}")
        if exc.hint:
            _err(f"hint: {exc.hint}")
        return EXIT_ERROR
    except ReprobuildError as exc:
        _err(f"error: {exc.message}")
        if exc.hint:
            _err(f"hint: {exc.hint}")
        return exc.exit_code
    except KeyboardInterrupt:
        _err("error: interrupted")
        return 130


def entrypoint() -> None:
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:  # e.g. `reprobuild inspect IMG | head`: the reader left early
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 0
    sys.exit(code)
