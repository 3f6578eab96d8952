"""``reprobuild render``: write the build context (Dockerfile, lock, runtime), build nothing."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from reprobuild.cli.options import _path, directory, variant_options
from reprobuild.cli.output import err

if TYPE_CHECKING:
    from reprobuild.imaging.render import RenderSpec


def add_arguments(parser: argparse.ArgumentParser) -> None:
    directory(parser)
    variant_options(parser)
    parser.add_argument(
        "-o",
        "--output",
        type=_path,
        metavar="OUT",
        help="output directory (default: DIR/.reprobuild/context-<cpu|gpu|VARIANT>)",
    )


def run(args: argparse.Namespace) -> int:
    from reprobuild.imaging.context import write_context
    from reprobuild.imaging.plan import plan_build, record_new_base
    from reprobuild.imaging.render import render_context

    planned = plan_build(
        args.directory,
        gpu=args.gpu,
        base=args.base,
        online=args.online,
        ca_cert=args.ca_cert,
        variant_name=args.variant,
    )
    record_new_base(planned, err)
    config, spec = planned.config, planned.spec
    spec = _with_local_base_entrypoint(spec)
    out = args.output or config.root / ".reprobuild" / f"context-{args.variant or spec.variant}"
    write_context(
        render_context(spec),
        out,
        epoch=spec.epoch,
        project=config.root,
        protected=(*(config.root / i for i in config.include), config.root / ".git"),
        reprobuild_owned=args.output is None,
    )
    print(out)
    return 0


def _with_local_base_entrypoint(spec: RenderSpec) -> RenderSpec:
    """`render` needs no engine, but the base's ENTRYPOINT (chained by ours) is only known
    from the base's config: read it when a local engine has the base, else say so."""
    from dataclasses import replace

    from reprobuild.backends.engine import Engine
    from reprobuild.errors import EngineError
    from reprobuild.imaging.image import base_entrypoint

    if spec.base_entrypoint is not None:
        return spec
    engine = Engine()
    try:
        if engine.image_id(spec.base.by_digest()) is not None:
            return replace(spec, base_entrypoint=base_entrypoint(engine, spec))
    except EngineError:
        pass
    err(
        f"note: {spec.base.by_digest()} is not in the catalog nor on a local engine, so its own "
        "ENTRYPOINT (if any) is not chained in this render; `reprobuild image` reads it from "
        "the pulled base"
    )
    return spec
