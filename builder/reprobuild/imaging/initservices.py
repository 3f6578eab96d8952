"""What ``reprobuild init`` (:mod:`reprobuild.project.init`, a lower layer) needs from above
it: a lock read for one selection, and a catalog base for a Python."""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from reprobuild.backends.engine import Engine
from reprobuild.bases.catalog import (
    BaseEntry,
    eol_warning,
    is_catalog_name,
    load_catalog,
    python_eol,
)
from reprobuild.bases.refs import ImageRef, parse_pinned
from reprobuild.errors import BasePullError, UnknownBaseError
from reprobuild.imaging import platforms
from reprobuild.imaging.backendask import BackendAsker, ask_timeout
from reprobuild.locks import fetchnet
from reprobuild.locks.buildlock import compile_build_lock
from reprobuild.locks.lockfile import Lock, Selection, format_of_file, load_lock
from reprobuild.locks.lockpython import lock_python
from reprobuild.locks.selectors import lock_selectors
from reprobuild.locks.sourcearchive import with_archives
from reprobuild.locks.wheels import Target, fetch_sources, locate_sdists
from reprobuild.project.init import BaseFacts, Services


def read_lock(
    path: Path, python: str, extras: tuple[str, ...], groups: tuple[str, ...]
) -> tuple[str, tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """Validate the lock for CPython ``python`` on linux x86_64 with these extras/groups; its
    notes say which platforms a native lock covers (:func:`platforms.coverage_note`)."""
    selection = Selection(python=python, extras=extras, groups=groups)
    lock = load_lock(path, selection)
    options = lock.options
    indexes = tuple(u for u in (options.index_url, *options.extra_index_urls) if u)
    names = tuple(r.name for r in lock.requirements)
    covers = platforms.coverage_note(path, selection)
    notes = (*lock.notes, *((covers,) if covers else ()))
    return lock.render(index_options=True), names, indexes, notes


def build_lock_text(lock: Lock, python: str, uv: str, base: Callable[[], ImageRef]) -> str | None:
    """The build-requirements lock for the sdists ``lock`` builds on CPython ``python``
    (:mod:`reprobuild.locks.buildlock`), each sdist fetched and hash-checked first and its
    build backend asked what more it needs in the pinned ``base()`` (called only when there
    is an sdist; pulled by digest where the engine lacks it;
    :mod:`reprobuild.imaging.backendask`); None when it builds none. A lock
    that gives hashes only (requirements, Pipfile.lock) has its sdists found on the index
    first (:func:`~reprobuild.locks.wheels.locate_sdists`: only for packages with no fitting
    wheel in the host's cache)."""

    def log(line: str) -> None:
        print(f"note: {line}", file=sys.stderr)

    lock = locate_sdists(lock, Selection(python=python), log=log)
    lock = with_archives(lock)  # git commits and project folders, packed on the host
    if not lock.sources:
        return None
    engine = Engine()
    image = engine.ensure_base(base(), log=log)
    ask = BackendAsker(engine, image, ".".join(python.split(".")[:2]), Path(uv), ask_timeout(), log)
    with tempfile.TemporaryDirectory(prefix="reprobuild-sdists-") as tmp:
        archives = fetch_sources(lock, Path(tmp), log=log)
        return compile_build_lock(lock, python, archives, uv, ask=ask, log=log)


def ask_base(base: str) -> ImageRef:
    """The base ``init`` asks the sdists' build backends in: the one it chose (``--base``'s
    pinned ref or a catalog name), where the image's wheel-build stage will build them."""
    if not is_catalog_name(base):
        return parse_pinned(base, what="--base")
    return catalog_entry(base).ref


def catalog_entry(name: str) -> BaseEntry:
    """The catalog's entry ``name``; one the catalog lacks is refused as ``--base``'s."""
    try:
        return load_catalog().get(name)
    except UnknownBaseError as exc:
        raise UnknownBaseError(f"--base: {exc.message}", hint=exc.hint) from None


def base_for(python: str, gpu: bool) -> str | None:
    """The first catalog base (by name) of that kind whose Python is ``python`` (X.Y)."""
    catalog = load_catalog()
    for name in sorted(catalog.entries):
        entry = catalog.entries[name]
        have = ".".join((entry.python or "").split(".")[:2])
        if have == python and (entry.kind == "gpu") == gpu:
            return name
    return None


def base_facts(ref: str) -> BaseFacts | None:
    """What ``init --base REF`` reads off the base: a catalog name's CPython from the catalog
    (refused if it holds no such name), else the base's own python3, run
    once by digest with no network and a timeout (:func:`~reprobuild.imaging.image.
    base_probe`, whose answer the build reuses from the cache)."""
    from reprobuild.imaging.baseprobe import base_probe

    if is_catalog_name(ref):
        entry = catalog_entry(ref)
        python = ".".join((entry.python or "").split(".")[:2])
        return BaseFacts(python=python) if python else None
    pinned = parse_pinned(ref, what="--base")
    engine = Engine()
    engine.ensure_base(pinned, lambda line: print(line, file=sys.stderr))
    target = Target.from_probe(base_probe(engine, pinned))
    glibc = ".".join(map(str, target.glibc)) if target.glibc else None
    return BaseFacts(python=target.python_version, machine=target.machine, glibc=glibc)


def python_eol_warning(python: str) -> str | None:
    """One line when CPython ``python`` is past its upstream end of life (the catalog's
    ``python_eol`` against today's date)."""
    return eol_warning(python, python_eol(load_catalog(), python), time.strftime("%Y-%m"))


def init_services() -> Services:
    """The services of ``reprobuild init``."""
    from uv import find_uv_bin

    def build_lock(
        path: Path, python: str, base: str, extras: tuple[str, ...], groups: tuple[str, ...]
    ) -> str | None:
        lock = load_lock(path, Selection(python=python, extras=extras, groups=groups))
        try:
            return build_lock_text(lock, python, str(find_uv_bin()), lambda: ask_base(base))
        except BasePullError as exc:
            if not is_catalog_name(base):
                raise
            # the user gave no base: say which one init chose, and why it needed it now
            raise BasePullError(
                f"{exc.message} (catalog base {base}, which init chose for CPython {python}: "
                f"{path.name} builds sdists, whose build backends init asks in that base)",
                hint=f"give one this engine has or can pull: reprobuild init --base "
                f"REF@sha256:<digest> (an image with CPython {python})",
            ) from None

    return Services(
        read_lock=read_lock,
        base_for=base_for,
        lock_format=format_of_file,
        eol_warning=python_eol_warning,
        uv=str(find_uv_bin()),
        build_lock=build_lock,
        base_facts=base_facts,
        lock_python=lock_python,
        resolver_env=lambda: (fetchnet.isolated_env(), fetchnet.find_links()),
        selectors=lock_selectors,
    )
