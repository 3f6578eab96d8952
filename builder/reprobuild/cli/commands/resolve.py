"""``reprobuild resolve``: pin a tag to its digest, or refresh a catalog entry (``--refresh``)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from reprobuild.cli.options import json_flag

_USAGE_HINT = "usage: reprobuild resolve REF | reprobuild resolve --refresh NAME [--dry-run]"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.usage = (
        "reprobuild resolve REF [--platform P] [--json]\n"
        "       reprobuild resolve --refresh NAME [--catalog FILE] [--dry-run] [--json]"
    )
    parser.add_argument("ref", nargs="?", help="image reference, e.g. python:3.11-slim")
    parser.add_argument("--platform", default="linux/amd64", help="platform for multi-arch tags")
    parser.add_argument(
        "--refresh",
        metavar="NAME",
        help="re-resolve catalog entry NAME's tag: digest from the Registry API, versions "
        "and entrypoint from the image's config; rewrites the catalog file",
    )
    parser.add_argument(
        "--catalog",
        type=Path,
        default=Path("images/catalog.yaml"),
        metavar="FILE",
        help="the catalog file --refresh rewrites (default: images/catalog.yaml)",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="with --refresh: show the changes, write nothing"
    )
    json_flag(parser)


def run(args: argparse.Namespace) -> int:
    from reprobuild.bases.registry import resolve
    from reprobuild.errors import UsageError

    if (args.ref is None) == (args.refresh is None):
        raise UsageError(
            "resolve takes an image reference or --refresh NAME (one of them)", hint=_USAGE_HINT
        )
    if args.refresh is not None:
        return _refresh(args)
    if args.dry_run:
        raise UsageError("--dry-run goes with --refresh NAME", hint=_USAGE_HINT)
    resolved = resolve(args.ref, platform=args.platform)
    if args.json:
        print(json.dumps(resolved.to_dict(), indent=2, sort_keys=True))
        return 0
    print(str(resolved.ref))
    if resolved.platform_digest != resolved.ref.digest:
        print(f"# {resolved.platform}: {resolved.platform_digest}", file=sys.stderr)
    return 0


def _refresh(args: argparse.Namespace) -> int:
    from reprobuild.bases.refresh import refresh_catalog
    from reprobuild.bases.registry import RegistryClient

    with RegistryClient() as client:
        done = refresh_catalog(args.catalog, args.refresh, client, dry_run=args.dry_run)
    if args.json:
        doc = {
            "name": done.entry.name,
            "written": done.written,
            "changes": [{"field": c.field, "old": c.old, "new": c.new} for c in done.changes],
            "entry": done.entry.to_dict(),
        }
        print(json.dumps(doc, indent=2, sort_keys=True))
        return 0
    verb = "changed" if done.written else "would change"
    print(f"{done.entry.name}: {done.entry.ref}")
    for change in done.changes:
        print(f"  {verb} {change.line()}")
    if not done.changes:
        print("  unchanged: the catalog already matches the registry")
    return 0
