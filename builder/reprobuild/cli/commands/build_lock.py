"""``reprobuild build-lock``: pin the build requirements of the sdists the project's lock builds."""

from __future__ import annotations

import argparse

from reprobuild.cli.options import directory
from reprobuild.cli.output import err


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Fetch (sha256-checked) each sdist the project's lock builds (for a hashed "
        "requirements file or a Pipfile.lock, which give hashes only, first found on the "
        "package's index by a locked sha256, for each package with no fitting wheel in the "
        "host's wheel cache), read its [build-system] "
        "requires (setuptools' legacy default where none) and resolve them with the pinned uv "
        "into a hashed lock for the image's Python and platform: the file reprobuild.yaml's "
        "build_lock names (build-requirements.lock when it names none). `render` refuses a "
        "missing or stale one and names this command."
    )
    directory(parser)


def run(args: argparse.Namespace) -> int:
    from uv import find_uv_bin

    from reprobuild.imaging.initservices import build_lock_text
    from reprobuild.imaging.plan import catalog_python, lock_selection
    from reprobuild.locks.buildlock import BUILD_LOCK_NAME, write_build_lock
    from reprobuild.locks.lockfile import load_lock
    from reprobuild.project.config import load_config

    config = load_config(args.directory)
    base = config.base_cpu or config.base_gpu
    selection = lock_selection(config, config.lock, catalog_python(config, base, None))
    lock = load_lock(config.lock, selection)
    text = build_lock_text(lock, selection.python, str(find_uv_bin()))
    if text is None:
        err(f"note: {config.lock.name} builds no package from an sdist: no build lock is needed")
        return 0
    path = config.build_lock or config.root / BUILD_LOCK_NAME
    write_build_lock(path, text)
    print(path)
    if config.build_lock is None:
        err(f"note: name it in reprobuild.yaml: build_lock: {BUILD_LOCK_NAME}")
    return 0
