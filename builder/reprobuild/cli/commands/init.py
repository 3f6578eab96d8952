"""``reprobuild init``: write the project's ``reprobuild.yaml`` from what its directory holds."""

from __future__ import annotations

import argparse

from reprobuild.cli.options import _path, _text
from reprobuild.cli.output import err


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Write DIR/reprobuild.yaml, commented, from the project's lock (uv.lock, poetry.lock, "
        "Pipfile.lock, pdm.lock, pylock.toml or a hashed requirements file, used in place; "
        "unhashed requirements or a pyproject.toml alone are resolved into requirements.lock "
        "with sha256 hashes). Never overwrites a file."
    )
    parser.add_argument(
        "directory", nargs="?", default=".", type=_path, help="project directory (default: .)"
    )
    parser.add_argument(
        "--lock",
        metavar="FILE",
        type=_text,
        help="the lock, relative to DIR, whatever its name (e.g. requirements_lock_3_12.txt or "
        "a renamed uv.lock: its format is read from its content); default: found by name",
    )
    parser.add_argument(
        "--python", type=_text, help="the image's Python, X.Y (default: what the lock needs)"
    )
    parser.add_argument(
        "--extra", action="append", default=[], type=_text, help="an extra to install"
    )
    parser.add_argument(
        "--group", action="append", default=[], type=_text, help="a dependency group"
    )
    parser.add_argument("--gpu", action="store_true", help="a GPU image (default: from the lock)")
    parser.add_argument(
        "--base",
        type=_text,
        help="base image REF@sha256:... (default: a catalog base); the sdists' build "
        "backends are asked what they build with in it",
    )
    parser.add_argument(
        "--record-hashes",
        action="store_true",
        help="fetch each wheel the lock names by URL with no hash once, and record its sha256 "
        "in reprobuild.hashes.toml beside the lock (commit it; builds check against it)",
    )
    parser.add_argument(
        "--exclude-newer",
        metavar="DAY",
        type=_text,
        help="resolve unhashed requirements with only what the index had before DAY "
        "(YYYY-MM-DD, e.g. the project's last commit): the versions it was written for",
    )
    parser.add_argument(
        "--command",
        dest="run_command",
        type=_text,
        help="the default command, e.g. 'python train.py'",
    )


def run(args: argparse.Namespace) -> int:
    import contextlib
    import shlex

    from reprobuild.errors import UsageError
    from reprobuild.imaging.initservices import init_services
    from reprobuild.locks import hashrecord
    from reprobuild.locks.urlwheels import sha256_of_url
    from reprobuild.project.init import InitOptions, init_project

    try:
        words = tuple(shlex.split(args.run_command)) if args.run_command else ()
    except ValueError as exc:  # an unclosed quote
        raise UsageError(f"--command {args.run_command!r}: {exc}") from None
    options = InitOptions(
        python=args.python,
        extras=tuple(args.extra),
        groups=tuple(args.group),
        gpu=args.gpu,
        base=args.base,
        command=words,
        lock=args.lock,
        exclude_newer=args.exclude_newer,
    )
    recording = (
        hashrecord.recording(sha256_of_url, err) if args.record_hashes else contextlib.nullcontext()
    )
    with recording:
        result = init_project(args.directory, options, init_services(), log=err)
    for path in result.written:
        print(f"wrote {path}")
    return 0
