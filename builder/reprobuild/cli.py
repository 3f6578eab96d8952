"""The ``reprobuild`` command: parse arguments, call the library, map errors to exit codes.

Exit codes: 0 success, 1 a reprobuild error (printed as one ``error:`` line), 2 bad usage,
128+N stopped by signal N (130 Ctrl-C, 143 SIGTERM, 129 SIGHUP), after cleaning up.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from reprobuild import __version__
from reprobuild.backends.builders import BUILDERS
from reprobuild_entrypoint.settings import MODES

if TYPE_CHECKING:
    from collections.abc import Callable

    from reprobuild.build.render import RenderSpec
    from reprobuild.checks.verify.spec import VerifySpec

EXIT_ERROR = 1
EXIT_USAGE = 2
# What `reprobuild --help` tells a user (the module docstring above is for readers of the code).
_DESCRIPTION = """\
Lockfiles in, pinned and deterministic training images out. reprobuild builds
a container image from a project's hashed lockfile on a base pinned by digest,
and checks that runs of that image repeat, bit for bit.

main commands:
  reprobuild image [DIR]          build the image of the project in DIR
  reprobuild verify IMAGE -- CMD  run CMD twice, prove the runs identical
  reprobuild diff A B             what differs between two images or runs"""
_EPILOG = """\
`reprobuild COMMAND --help` lists a command's options. The README describes
reprobuild.yaml, the base catalog, the determinism runtime and every command.
Exit codes: 0 success, 1 error, 2 bad usage, 130 interrupted."""
_VERIFY_USAGE = (
    "reprobuild verify IMAGE [OPTIONS] -- CMD ...\n"
    "       reprobuild verify --local [OPTIONS] -- CMD ..."
)


class _Empty(str):
    """An option given as the empty string (typically an unset variable in CI): refused after
    parsing with one usage error, never taken as "not given" or as the current directory."""


def _text(value: str) -> str:
    return value if value else _Empty()


def _path(value: str) -> Path | str:
    return Path(value) if value else _Empty()


def _int(value: str) -> int | str:
    return int(value) if value else _Empty()


def _directory(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "directory",
        nargs="?",
        default=".",
        type=_path,
        help="project directory holding reprobuild.yaml (default: .)",
    )


def _variant_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--variant",
        metavar="NAME",
        type=_text,
        help="a variant from the project's matrix: (its lock, base, CPU or GPU); "
        "list them with `reprobuild matrix`",
    )
    parser.add_argument("--gpu", action="store_true", help="the GPU variant (gpu_lock on base.gpu)")
    parser.add_argument(
        "--base",
        metavar="REF@DIGEST",
        type=_text,
        help="use this digest-pinned base instead of the project's",
    )
    parser.add_argument(
        "--online",
        action="store_true",
        help="install from the indexes inside the build instead of host-fetched wheels",
    )
    parser.add_argument(
        "--ca-cert",
        type=_path,
        metavar="PEM",
        help="CA bundle for --online installs behind a TLS-intercepting proxy; "
        "used in the build stage only, never in the final image",
    )


def _env_option(parser: argparse.ArgumentParser, where: str) -> None:
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help=f"set NAME to VALUE in {where}, after reprobuild's own variables; repeatable, a "
        "later NAME wins; the value is literal text ($ is not expanded)",
    )


def _json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON on stdout")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="reprobuild",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"reprobuild {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    render = sub.add_parser("render", help="write the build context (Dockerfile, lock, runtime)")
    _directory(render)
    _variant_options(render)
    render.add_argument(
        "-o",
        "--output",
        type=_path,
        metavar="OUT",
        help="output directory (default: DIR/.reprobuild/context-<cpu|gpu|VARIANT>)",
    )

    image = sub.add_parser("image", help="render, build, stamp and tag the image")
    _directory(image)
    _variant_options(image)
    image.add_argument(
        "--tag",
        metavar="NAME[:TAG]",
        type=_text,
        help="image tag (default: NAME:<cpu|gpu|VARIANT>-<first 12 hex of the lock's sha256>)",
    )
    image.add_argument(
        "--builder",
        choices=BUILDERS,
        default="auto",
        help="auto (buildah where installed: the same inputs give the same image ID; else "
        "buildx if installed, else classic; says which), buildah (daemonless), buildx, "
        "buildkit, classic (the engine's own builder, not reproducible)",
    )
    image.add_argument(
        "--push",
        metavar="REGISTRY/NAME[:TAG]",
        type=_text,
        help="also push the image straight to a registry (--builder buildah)",
    )
    image.add_argument("--no-cache", action="store_true", help="build without the engine's cache")
    image.add_argument("-q", "--quiet", action="store_true", help="do not stream the build log")
    _json_flag(image)

    matrix = sub.add_parser(
        "matrix",
        help="print the project's variants as a CI build matrix (JSON)",
        description="Print every variant of the project (its matrix:, else cpu and gpu) with "
        "its runner labels, lock and default tag. --format github: one line "
        '{"include": [...]}, for $GITHUB_OUTPUT and fromJSON; json: indented.',
    )
    _directory(matrix)
    matrix.add_argument(
        "--format",
        choices=("github", "json"),
        default="json",
        help="github: one compact line; json: indented (default)",
    )
    matrix.add_argument(
        "--trials",
        type=_int,
        metavar="N",
        help="a run matrix: one entry per variant and trial 0..N-1, with the REPRO_SEED and "
        "REPRO_TRIAL that run it and the derived run seed",
    )
    matrix.add_argument(
        "--seed",
        type=_int,
        metavar="S",
        help="the experiment seed of the trials (default: the project's seed)",
    )

    rebuild = sub.add_parser(
        "rebuild",
        help="build an image again from the inputs its manifest records; same image?",
        description="Rebuild IMAGE (built with --builder buildah) from the project in "
        "DIRECTORY, the recorded lock, base, SOURCE_DATE_EPOCH and builder version, and "
        "compare image IDs. When they differ, name the first layer that differs and every "
        "file in it that differs. Exit codes: 0 the same image; 1 it differs; 2 a recorded "
        "input is not at hand (the error names it).",
    )
    rebuild.add_argument("image", type=_text, help="image reference or ID")
    _directory(rebuild)
    rebuild.add_argument("-q", "--quiet", action="store_true", help="do not stream the build log")
    _json_flag(rebuild)

    inspect = sub.add_parser("inspect", help="print an image's manifest")
    inspect.add_argument("image", help="image reference or ID")
    _json_flag(inspect)

    sbom = sub.add_parser("sbom", help="print (or write) the CycloneDX SBOM an image carries")
    sbom.add_argument("image", type=_text, help="image reference or ID")
    sbom.add_argument(
        "-o",
        "--output",
        type=_path,
        metavar="FILE",
        help="write here, atomically (default, or -: stdout)",
    )

    resolve = sub.add_parser(
        "resolve",
        help="pin a tag: print NAME:TAG@sha256:... from its registry, or refresh a catalog entry",
        usage="reprobuild resolve REF [--platform P] [--json]\n"
        "       reprobuild resolve --refresh NAME [--catalog FILE] [--dry-run] [--json]",
    )
    resolve.add_argument("ref", nargs="?", help="image reference, e.g. python:3.11-slim")
    resolve.add_argument("--platform", default="linux/amd64", help="platform for multi-arch tags")
    resolve.add_argument(
        "--refresh",
        metavar="NAME",
        help="re-resolve catalog entry NAME's tag: digest from the Registry API, versions "
        "and entrypoint from the image's config; rewrites the catalog file",
    )
    resolve.add_argument(
        "--catalog",
        type=Path,
        default=Path("images/catalog.yaml"),
        metavar="FILE",
        help="the catalog file --refresh rewrites (default: images/catalog.yaml)",
    )
    resolve.add_argument(
        "--dry-run", action="store_true", help="with --refresh: show the changes, write nothing"
    )
    _json_flag(resolve)

    bases = sub.add_parser(
        "bases",
        help="show the project's locked bases (reprobuild.bases.lock); --update re-pins them",
        description="A catalog base (base.cpu/base.gpu: NAME) is pinned to the catalog's digest "
        "in reprobuild.bases.lock the first time the project is rendered or built, and stays "
        "there. This lists each with its status; --update moves it to the catalog's digest.",
    )
    _directory(bases)
    bases.add_argument(
        "--update",
        nargs="*",
        metavar="NAME",
        help="re-pin these catalog bases (all the project's, when no NAME is given)",
    )
    _json_flag(bases)

    verify = sub.add_parser(
        "verify",
        help="run a command N times side by side and prove the runs identical",
        usage=_VERIFY_USAGE,
        description="Run CMD in N fresh containers from IMAGE (or N times on this host with "
        "--local), with the same seed, side by side; compare stdout line by line as it "
        "streams (as a terminal shows it: progress bars by their final state, wall-clock "
        "fields such as `3s 2ms/step` or `12.3it/s` left out and counted) and the --output "
        "files by sha256. Exit 0: identical; 1: diverged (the first "
        "divergence is shown; the runs are stopped at once) or a run failed.",
    )
    verify.add_argument("image", nargs="?", metavar="IMAGE", help="image reference or ID")
    verify.add_argument(
        "cmd",
        nargs=argparse.REMAINDER,
        action=_VerifyCommand,
        metavar="CMD",
        help="the command, after `--` (options may come between IMAGE and `--`)",
    )
    _verify_options(verify)

    diff = sub.add_parser(
        "diff",
        help="compare two images' stacks, two run records, or one of each",
        description="Compare the stacks of A and B: image manifests (an image on this engine, "
        "or a manifest.json), run records (run-<id>.json), or one of each. Exit 0: identical; "
        "1: they differ; 2: bad usage or an input that cannot be read.",
    )
    diff.add_argument("a", metavar="A", help="image reference or ID, manifest.json, or run record")
    diff.add_argument("b", metavar="B", help="the same, compared with A")
    _json_flag(diff)

    compose = sub.add_parser(
        "compose",
        help="write a compose file that trains (and verifies) with the project's built image",
        description="Write a compose file for the project's built image, pinned by digest or "
        "ID: a `train` service, two `verify-a`/`verify-b` runs (profile verify), run records "
        "in runs/<service>/, outputs in out/<service>/, ./data read-only at /data.",
    )
    _directory(compose)
    compose.add_argument(
        "--gpu", action="store_true", help="the GPU image; reserve all GPUs for every run"
    )
    compose.add_argument(
        "--variant",
        metavar="NAME",
        type=_text,
        help="the image of this variant of the project's matrix (see `reprobuild matrix`)",
    )
    compose.add_argument(
        "--image",
        metavar="REF",
        type=_text,
        help="this image (tag, ID, or NAME@sha256:...) instead of the project's default tag",
    )
    compose.add_argument(
        "--nodes",
        type=_int,
        metavar="N",
        help="a multi-node torchrun job instead: one service per node on a private network, "
        "node 0 hosting the c10d rendezvous (gloo on CPU, NCCL with --gpu)",
    )
    compose.add_argument(
        "--nproc-per-node",
        type=_int,
        metavar="M",
        help="with --nodes: training processes (ranks) per node (default: 1)",
    )
    _env_option(compose, "every service that runs the program")
    compose.add_argument(
        "-o",
        "--output",
        type=_path,
        metavar="FILE",
        help="write here, atomically (default, or -: stdout)",
    )

    k8s = sub.add_parser(
        "k8s",
        help="write Kubernetes manifests for a multi-node torchrun job with the project's image",
        description="Write an Indexed Job and its headless Service (standard objects only): "
        "N pods, each running the project's image, pinned by registry digest, under torchrun "
        "with the c10d rendezvous on pod 0; NCCL and a GPU per process with --gpu.",
    )
    _directory(k8s)
    k8s.add_argument("--nodes", type=_int, required=True, metavar="N", help="pods (nodes)")
    k8s.add_argument(
        "--nproc-per-node", type=_int, metavar="M", help="processes (ranks) per pod (default: 1)"
    )
    k8s.add_argument("--gpu", action="store_true", help="the GPU image; M GPUs per pod")
    k8s.add_argument("--variant", metavar="NAME", type=_text, help="this variant's image")
    k8s.add_argument(
        "--image",
        metavar="REF",
        type=_text,
        help="this image (a pushed tag or NAME@sha256:...) instead of the project's default tag",
    )
    k8s.add_argument(
        "--name", metavar="NAME", type=_text, help="job name (default: from the project name)"
    )
    _env_option(k8s, "every pod")
    k8s.add_argument(
        "-o",
        "--output",
        type=_path,
        metavar="FILE",
        help="write here, atomically (default, or -: stdout)",
    )
    return parser


def _verify_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--local",
        action="store_true",
        help="run on this host under the same runtime, without an engine (no IMAGE)",
    )
    parser.add_argument("--runs", type=int, default=2, metavar="N", help="runs (default: 2)")
    parser.add_argument(
        "--output",
        action="append",
        default=[],
        metavar="PATH",
        help="a file or dir/ under the run's output directory /out ($REPRO_OUTPUT_DIR) to "
        "compare; repeatable (e.g. --output metrics.json --output ckpt/)",
    )
    parser.add_argument(
        "--data",
        action="append",
        default=[],
        metavar="HOST[:CONTAINER]",
        help="mount a host path read-only (default at /data); repeatable",
    )
    parser.add_argument(
        "-e",
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set a variable in every run; repeatable",
    )
    parser.add_argument("--seed", type=_int, metavar="N", help="REPRO_SEED for every run")
    parser.add_argument(
        "--resume-at",
        type=_int,
        metavar="K",
        help="check resuming: a straight run, one stopped by SIGTERM after epoch K and resumed "
        "from its output directory with REPRO_RESUME=1; their final outputs must match",
    )
    parser.add_argument(
        "--trial",
        type=_int,
        metavar="K",
        help="REPRO_TRIAL for every run: trial K of the seed, whose run seed is derived from both",
    )
    parser.add_argument(
        "--mode", choices=MODES, help="REPRO_DETERMINISM for every run (off: the control)"
    )
    parser.add_argument(
        "--gpus", metavar="SPEC", help="GPUs for each run: all, N, or device=0,1 (as docker run)"
    )
    parser.add_argument(
        "--network", action="store_true", help="give the containers a network (default: none)"
    )
    parser.add_argument(
        "--nodes",
        type=_int,
        metavar="N",
        help="every run is a torchrun job of N containers on a network of its own (CMD is "
        "the program: python SCRIPT ARGS); rank 0's stdout and outputs are compared",
    )
    parser.add_argument(
        "--nproc-per-node",
        type=_int,
        metavar="M",
        help="with --nodes: processes (ranks) per node (default: 1)",
    )
    parser.add_argument(
        "--ignore",
        action="append",
        default=[],
        metavar="REGEX",
        help="leave what this regex matches (or its group `value`) out of the stdout "
        "comparison, counted in the report; repeatable",
    )
    parser.add_argument(
        "--no-default-ignore",
        dest="default_ignore",
        action="store_false",
        help="compare stdout as written: no folding of progress-bar redraws, no built-in "
        "wall-clock fields (durations, rates, ETAs, timestamps) left out",
    )
    parser.add_argument(
        "--report",
        type=Path,
        metavar="PATH",
        help="where to save the JSON report (default: .reprobuild/verify/"
        "reprobuild-verify-<image id 12 hex | local>-<UTC time>.json; checked writable first)",
    )
    parser.add_argument(
        "--keep",
        type=Path,
        metavar="DIR",
        help="keep each run's output and records in DIR/run-<n>/{out,records}",
    )
    parser.add_argument(
        "-q", "--quiet", action="store_true", help="no progress (run 1's stdout) on stderr"
    )
    _json_flag(parser)


class _VerifyCommand(argparse.Action):
    """CMD of `reprobuild verify`: everything after IMAGE. Options written between IMAGE and
    `--` are verify's own (`verify IMAGE --runs 3 -- python x.py`); with --local given before
    it, the word argparse took for IMAGE is the command's first."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        command = [str(v) for v in values] if isinstance(values, list) else []
        if namespace.local and namespace.image is not None:
            # `verify --local -- python -c ...`: argparse took the command's first word for
            # IMAGE; the rest is the command's own, options included
            setattr(namespace, self.dest, [namespace.image, *command])
            namespace.image = None
            return
        if command and command[0].startswith("-"):
            split = command.index("--") if "--" in command else len(command)
            head, command = command[:split], command[split + 1 :]
            was_local = namespace.local
            options = argparse.ArgumentParser(
                prog="reprobuild verify", usage=_VERIFY_USAGE, add_help=False
            )
            _verify_options(options)
            options.parse_args(head, namespace=namespace)
            if namespace.local and not was_local and namespace.image is not None:
                options.error(
                    f"--local runs on this host: it takes no IMAGE (got {namespace.image!r})"
                )
        setattr(namespace, self.dest, command)


def _err(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def cmd_render(args: argparse.Namespace) -> int:
    from reprobuild.build.context import write_context
    from reprobuild.build.plan import make_spec
    from reprobuild.build.render import render_context

    config, spec = make_spec(
        args.directory,
        gpu=args.gpu,
        base=args.base,
        online=args.online,
        ca_cert=args.ca_cert,
        log=_err,
        variant_name=args.variant,
    )
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
    from reprobuild.build.image import base_entrypoint
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
    from reprobuild.build.image import build_image

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
        note=_err,
        variant=args.variant,
        push=args.push,
    )
    if args.json:
        print(json.dumps(result.to_dict(), indent=2, sort_keys=True))
    else:
        print(result.image)
    return 0


def cmd_rebuild(args: argparse.Namespace) -> int:
    from reprobuild.checks.rebuild import rebuild, render_table

    log = (lambda _: None) if args.quiet or args.json else _err
    report = rebuild(args.image, args.directory, log=log)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2, sort_keys=True))
    else:
        print("\n".join(render_table(report)))
    return 0 if report.match else 1


def cmd_matrix(args: argparse.Namespace) -> int:
    from reprobuild.build.matrix import dumps, matrix
    from reprobuild.project.config import load_config

    document = matrix(load_config(args.directory), trials=args.trials, seed=args.seed)
    print(dumps(document, args.format))
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
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


def cmd_sbom(args: argparse.Namespace) -> int:
    from reprobuild.backends.engine import Engine
    from reprobuild.checks.sbom import export_sbom

    raw = export_sbom(Engine(), args.image, args.output)
    if args.output is None or str(args.output) == "-":
        sys.stdout.buffer.write(raw)
    else:
        print(args.output)
    return 0


def cmd_resolve(args: argparse.Namespace) -> int:
    from reprobuild.bases.registry import resolve
    from reprobuild.errors import UsageError

    usage = "usage: reprobuild resolve REF | reprobuild resolve --refresh NAME [--dry-run]"
    if (args.ref is None) == (args.refresh is None):
        raise UsageError(
            "resolve takes an image reference or --refresh NAME (one of them)", hint=usage
        )
    if args.refresh is not None:
        return _refresh(args)
    if args.dry_run:
        raise UsageError("--dry-run goes with --refresh NAME", hint=usage)
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


def cmd_bases(args: argparse.Namespace) -> int:
    from reprobuild.bases import baselock
    from reprobuild.bases.catalog import load_catalog
    from reprobuild.project.config import load_config

    config = load_config(args.directory)
    catalog = load_catalog()
    if args.update is not None:
        for name, old, new in baselock.update_project(config, args.update, catalog):
            _err(f"{name}: {old or '(not locked)'} -> {new}")
    rows = [use.to_dict() for use in baselock.project_bases(config, catalog)]
    if args.json:
        print(json.dumps({"lock": str(baselock.lock_path(config.root)), "bases": rows}, indent=2))
        return 0
    for row in rows:
        pinned = row["locked"] or row["catalog"] or row["base"]
        print(f"{row['variant']}  {row['base']}  {row['status']}  {pinned}")
    return 0


def _verify_resume(spec: VerifySpec, args: argparse.Namespace, log: Callable[[str], None]) -> int:
    """``verify --resume-at K``: straight, stopped after epoch K, resumed (verify/resume.py)."""
    import json

    from reprobuild.checks.verify.resume import run_resume_check

    report, path = run_resume_check(
        spec, args.resume_at, report_path=args.report, keep=args.keep, log=log
    )
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(report["summary"])
    _err(f"report: {path}")
    return 0 if report["result"] == "identical" else EXIT_ERROR


def cmd_verify(args: argparse.Namespace) -> int:
    from reprobuild.checks.verify import verify, verify_spec_from_args
    from reprobuild.errors import RunFailedError

    spec = verify_spec_from_args(
        args.image,
        args.cmd,
        local=args.local,
        runs=args.runs,
        outputs=args.output,
        data=args.data,
        env=args.env,
        seed=args.seed,
        trial=args.trial,
        mode=args.mode,
        gpus=args.gpus,
        network=args.network,
        ignore=args.ignore,
        default_ignore=args.default_ignore,
        nodes=args.nodes,
        nproc_per_node=args.nproc_per_node,
    )
    log = (lambda _: None) if args.quiet or args.json else _err
    if args.resume_at is not None and args.nodes is not None:
        from reprobuild.errors import VerifyUsageError

        raise VerifyUsageError("--resume-at checks one container's resume; drop --nodes")
    if args.resume_at is not None:
        return _verify_resume(spec, args, log)
    try:
        result = verify(spec, report_path=args.report, keep=args.keep, log=log)
    except RunFailedError as exc:
        if args.json:
            print(exc.report.to_json(), end="")
        if exc.stderr_tail:
            _err(exc.stderr_tail)
        raise
    if args.json:
        print(result.report.to_json(), end="")
        _err(f"report: {result.path}")
    else:
        print("\n".join(result.lines()))
    return 0 if result.report.identical else EXIT_ERROR


def cmd_diff(args: argparse.Namespace) -> int:
    from reprobuild.checks.diff import diff

    result = diff(args.a, args.b)
    if args.json:
        print(result.to_json(), end="")
    else:
        print("\n".join(result.lines()))
    return 0 if result.identical else EXIT_ERROR


def cmd_compose(args: argparse.Namespace) -> int:
    from reprobuild.cluster.compose import check_output, compose_project, write_output

    check_output(args.output)
    result = compose_project(
        args.directory,
        gpu=args.gpu,
        image=args.image,
        variant=args.variant,
        nodes=args.nodes,
        nproc_per_node=args.nproc_per_node,
        env=args.env,
    )
    write_output(result.text, args.output)
    if args.output is not None and str(args.output) != "-":
        print(args.output)
    return 0


def cmd_k8s(args: argparse.Namespace) -> int:
    from reprobuild.cluster.compose import check_output, write_output
    from reprobuild.cluster.k8s import k8s_project

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
    if args.output is not None and str(args.output) != "-":
        print(args.output)
    return 0


COMMANDS = {
    "render": cmd_render,
    "image": cmd_image,
    "matrix": cmd_matrix,
    "inspect": cmd_inspect,
    "sbom": cmd_sbom,
    "rebuild": cmd_rebuild,
    "resolve": cmd_resolve,
    "bases": cmd_bases,
    "verify": cmd_verify,
    "diff": cmd_diff,
    "compose": cmd_compose,
    "k8s": cmd_k8s,
}


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised where the program is, like Ctrl-C: ``finally`` and ``with``
    blocks run, so a stopped build removes its scratch tags, containers and temp dirs."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _on_signal(signum: int, _frame: object) -> None:
    for sig in (signal.SIGTERM, signal.SIGHUP):  # a second signal must not cut the clean-up
        signal.signal(sig, signal.SIG_IGN)
    raise Stopped(signum)


def _install_signal_handlers() -> None:
    for sig in (signal.SIGTERM, signal.SIGHUP):
        try:
            if signal.getsignal(sig) == signal.SIG_DFL:
                signal.signal(sig, _on_signal)
        except ValueError:  # not the main thread (main() called from a test's thread)
            return


def _check_empty(args: argparse.Namespace) -> None:
    from reprobuild.errors import UsageError

    for name, value in vars(args).items():
        if isinstance(value, _Empty):
            option = "DIRECTORY" if name == "directory" else "--" + name.replace("_", "-")
            if name == "image" and args.command == "rebuild":
                option = "IMAGE"
            raise UsageError(
                f"{option} is empty; give a value or leave the option out",
                hint="an unset variable in a script expands to an empty argument",
            )


def main(argv: Sequence[str] | None = None) -> int:
    from reprobuild.errors import BuildError, ReprobuildError

    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: --help/--version exit 0, bad usage exits 2
        return int(exc.code or 0)
    try:
        _check_empty(args)
        return COMMANDS[args.command](args)
    except BuildError as exc:
        # The build log was not streamed (-q, or --json keeping stderr for errors): its tail
        # says why the build failed.
        if exc.log_tail and (getattr(args, "quiet", False) or getattr(args, "json", False)):
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
    except KeyboardInterrupt as exc:
        signum = exc.signum if isinstance(exc, Stopped) else signal.SIGINT
        _err(f"error: interrupted by {signal.Signals(signum).name}")
        return 128 + signum


def entrypoint() -> None:
    _install_signal_handlers()
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:  # e.g. `reprobuild inspect IMG | head`: the reader left early
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 0
    sys.exit(code)
