"""``reprobuild verify``: run a command N times side by side and prove the runs identical."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reprobuild.cli.options import _int, json_flag
from reprobuild.cli.output import EXIT_ERROR, err
from reprobuild_entrypoint.settings import MODES

if TYPE_CHECKING:
    from collections.abc import Callable

    from reprobuild.checks.verify.report import VerifyReport
    from reprobuild.checks.verify.spec import VerifySpec

_USAGE = (
    "reprobuild verify IMAGE [OPTIONS] -- CMD ...\n"
    "       reprobuild verify --local [OPTIONS] -- CMD ...\n"
    "       reprobuild verify --slurm SCRIPT [--runs N] [-e KEY=VALUE] [--keep DIR] [--json]"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.usage = _USAGE
    parser.description = (
        "Run CMD in N fresh containers from IMAGE (or N times on this host with "
        "--local), with the same seed, side by side; compare stdout line by line as it "
        "streams (as a terminal shows it: progress bars by their final state, wall-clock "
        "fields such as `3s 2ms/step` or `12.3it/s` left out and counted) and the --output "
        "files by sha256. Exit 0: identical; 1: diverged (the first "
        "divergence is shown; the runs are stopped at once) or a run failed."
    )
    parser.add_argument("image", nargs="?", metavar="IMAGE", help="image reference or ID")
    parser.add_argument(
        "cmd",
        nargs=argparse.REMAINDER,
        action=_VerifyCommand,
        metavar="CMD",
        help="the command, after `--` (options may come between IMAGE and `--`)",
    )
    _options(parser)


def _options(parser: argparse.ArgumentParser) -> None:
    """verify's options: on its parser, and again for those written between IMAGE and `--`."""
    _run_options(parser)
    _program_options(parser)
    _comparison_options(parser)


def _run_options(parser: argparse.ArgumentParser) -> None:
    """Where and how many times the runs happen, and what they see."""
    parser.add_argument(
        "--local",
        action="store_true",
        help="run on this host under the same runtime, without an engine (no IMAGE)",
    )
    parser.add_argument(
        "--slurm",
        type=Path,
        metavar="SCRIPT",
        help="submit this sbatch script (from `reprobuild slurm`) --runs times, one job after "
        "the other, with sbatch --wait from this directory; compare the jobs' stdout, each "
        "node's run records and every output file (no IMAGE, no CMD)",
    )
    parser.add_argument("--runs", type=int, metavar="N", help="runs (default: 2)")
    parser.add_argument(
        "--cpu",
        metavar="LIST",
        help="one run per CPU named, e.g. native,Haswell,Nehalem: `native` is this machine's, "
        "the others are emulated by qemu-user (qemu-x86_64-static -cpu MODEL); the runs are "
        "compared as usual, and a divergence names its CPU cause",
    )
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


def _program_options(parser: argparse.ArgumentParser) -> None:
    """What every run's program is told: seed, trial, determinism, devices, nodes."""
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


def _comparison_options(parser: argparse.ArgumentParser) -> None:
    """What is compared, where the report goes, what is printed."""
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
        "--html",
        type=Path,
        metavar="FILE",
        help="also write the report's HTML page (as `reprobuild report` does): the verdict, "
        "plots of the numbers the runs printed, the stack diff; checked writable first",
    )
    parser.add_argument(
        "--keep",
        type=Path,
        metavar="DIR",
        help="keep each run's output and records in DIR/run-<n>/{out,records}",
    )
    parser.add_argument(
        "--mlflow",
        action="store_true",
        help="pass MLFLOW_TRACKING_URI to every run and tag the MLflow runs they start with "
        "the verdict (the server must be reachable from the runs: --local, or --network and "
        "an address the containers reach, such as the Docker bridge's)",
    )
    parser.add_argument(
        "--wandb",
        action="store_true",
        help="run W&B offline in every run (WANDB_MODE=offline, its directory on the run's "
        "record mount), keep the runs' W&B directories under --keep DIR and write the verdict "
        "into each (files/reprobuild/verify.json, uploaded by `wandb sync`)",
    )
    parser.add_argument(
        "-q", "--quiet", action="store_true", help="no progress (run 1's stdout) on stderr"
    )
    json_flag(parser)


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
                prog="reprobuild verify", usage=_USAGE, add_help=False
            )
            _options(options)
            options.parse_args(head, namespace=namespace)
            if namespace.local and not was_local and namespace.image is not None:
                options.error(
                    f"--local runs on this host: it takes no IMAGE (got {namespace.image!r})"
                )
        setattr(namespace, self.dest, command)


def run(args: argparse.Namespace) -> int:
    import json

    from reprobuild.checks.verify import verify, verify_spec_from_args
    from reprobuild.errors import RunFailedError

    if args.slurm is not None:
        return _slurm(args)
    _add_tracker_env(args)
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
        cpus=args.cpu,
    )
    log = (lambda _: None) if args.quiet or args.json else err
    if args.resume_at is not None and (args.nodes is not None or args.cpu is not None):
        from reprobuild.errors import VerifyUsageError

        drop = "--nodes" if args.nodes is not None else "--cpu"
        raise VerifyUsageError(f"--resume-at checks one container's resume; drop {drop}")
    if args.html is not None:
        from reprobuild.checks.page import check_page_path

        check_page_path(args.html, "--html")
    if args.resume_at is not None:
        return _resume(spec, args, log)
    try:
        result = verify(spec, report_path=args.report, keep=args.keep, log=log)
    except RunFailedError as exc:
        if args.json:
            print(exc.report.to_json(), end="")
        if exc.stderr_tail:
            err(exc.stderr_tail)
        _page(args.html, json.loads(exc.report.to_json()))
        raise
    _page(args.html, result.report.to_dict())
    if args.json:
        print(result.report.to_json(), end="")
        err(f"report: {result.path}")
    else:
        print("\n".join(result.lines()))
    _log_tracker_verdict(args, result.report, result.path)
    return 0 if result.report.identical else EXIT_ERROR


def _add_tracker_env(args: argparse.Namespace) -> None:
    """``--mlflow`` / ``--wandb``: the runs' environment for the tracker, added to ``--env``."""
    if args.mlflow:
        from reprobuild.checks.mlflowruns import run_env

        args.env.extend(run_env(args.env, local=args.local, network=args.network, nodes=args.nodes))
    if args.wandb:
        from reprobuild.checks import wandbruns

        args.env.extend(wandbruns.run_env(args.env, local=args.local, keep=args.keep))


def _log_tracker_verdict(args: argparse.Namespace, report: VerifyReport, path: Path) -> None:
    """``--mlflow`` / ``--wandb``: the verdict logged to the runs the tracker holds."""
    ids = [str((r.run_record or {}).get("run_id")) for r in report.runs if r.run_record]
    if args.mlflow:
        from reprobuild.checks.mlflowruns import log_verdict

        err(log_verdict(ids, report.result, report.summary, str(path)))
    if args.wandb and args.keep is not None:
        from reprobuild.checks import wandbruns

        keep = args.keep.absolute()
        err(wandbruns.log_verdict(keep, ids, report.result, report.summary, str(path)))


_NOT_WITH_SLURM = (
    "image",
    "cmd",
    "local",
    "cpu",
    "output",
    "data",
    "seed",
    "resume_at",
    "trial",
    "mode",
    "gpus",
    "network",
    "nodes",
    "nproc_per_node",
    "ignore",
    "report",
    "html",
    "mlflow",
)


def _slurm(args: argparse.Namespace) -> int:
    """``verify --slurm SCRIPT``: the jobs of the script compared (checks/verify/slurm.py)."""
    import json

    from reprobuild.checks.verify.slurm import verify_slurm
    from reprobuild.errors import VerifyUsageError

    for name in _NOT_WITH_SLURM:
        value = getattr(args, name)
        if value not in (None, False, []):
            option = "IMAGE" if name == "image" else "CMD" if name == "cmd" else name
            shown = option if option.isupper() else "--" + option.replace("_", "-")
            raise VerifyUsageError(
                f"{shown} does not go with --slurm: the script names the image, the program "
                "and the job (set variables with -e KEY=VALUE)"
            )
    env = []
    for item in args.env:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise VerifyUsageError(f"-e {item!r} is not KEY=VALUE")
        env.append((name, value))
    log = (lambda _: None) if args.quiet or args.json else err
    result = verify_slurm(args.slurm, runs=args.runs or 2, keep=args.keep, env=env, log=log)
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        print("\n".join(result.lines()))
    return 0 if result.identical else EXIT_ERROR


def _resume(spec: VerifySpec, args: argparse.Namespace, log: Callable[[str], None]) -> int:
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
    err(f"report: {path}")
    _page(args.html, report)
    return 0 if report["result"] == "identical" else EXIT_ERROR


def _page(path: Path | None, report: dict[str, Any]) -> None:
    """``--html``: the report's page, as ``reprobuild report`` writes it."""
    if path is None:
        return
    from reprobuild.checks.page import report_page, write_page

    write_page(path, report_page(report), "--html")
    err(f"page: {path.absolute()}")
