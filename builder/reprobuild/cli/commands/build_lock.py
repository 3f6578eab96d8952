"""``reprobuild build-lock``: pin the build requirements of the sdists the project's lock builds."""

from __future__ import annotations

import argparse

from reprobuild.cli.options import _text, directory
from reprobuild.cli.output import err


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Fetch (sha256-checked) each sdist the project's lock builds (for a hashed "
        "requirements file or a Pipfile.lock, which give hashes only, first found on the "
        "package's index by a locked sha256, for each package with no fitting wheel in the "
        "host's wheel cache), read its [build-system] "
        "requires (setuptools' legacy default where none), ask its build backend what more it "
        "builds with (PEP 517 get_requires_for_build_wheel, run in a container from the "
        "project's pinned base, or --base, with no network, as an unprivileged user) and "
        "resolve them all with the pinned uv, again until the answers bring nothing new, "
        "into a hashed lock for the image's Python and platform: the file reprobuild.yaml's "
        "build_lock names (build-requirements.lock when it names none). `render` refuses a "
        "missing or stale one and names this command."
    )
    directory(parser)
    parser.add_argument(
        "--base",
        metavar="REF@DIGEST",
        type=_text,
        help="ask the build backends in this digest-pinned base instead of the project's",
    )


def run(args: argparse.Namespace) -> int:
    from uv import find_uv_bin

    from reprobuild.imaging.initservices import build_lock_text
    from reprobuild.imaging.plan import catalog_python, lock_selection, project_base
    from reprobuild.locks.buildlock import BUILD_LOCK_NAME, write_build_lock
    from reprobuild.locks.lockfile import load_lock
    from reprobuild.project.config import load_config

    config = load_config(args.directory)
    base = config.base_cpu or config.base_gpu
    selection = lock_selection(config, config.lock, catalog_python(config, base, None))
    lock = load_lock(config.lock, selection)
    text = build_lock_text(
        lock, selection.python, str(find_uv_bin()), lambda: project_base(config, args.base)
    )
    if text is None:
        err(f"note: {config.lock.name} builds no package from an sdist: no build lock is needed")
        return 0
    path = config.build_lock or config.root / BUILD_LOCK_NAME
    write_build_lock(path, text)
    print(path)
    if config.build_lock is None:
        err(f"note: name it in reprobuild.yaml: build_lock: {BUILD_LOCK_NAME}")
    return 0
