"""The stack in every Weights & Biases run a program in the image starts, with no change to it.

W&B has no provider hook like MLflow's, and its environment cannot carry a run's config
(measured on wandb 0.31: ``WANDB_TAGS`` and the like are replaced by ``init(tags=...)``, and
``WANDB_CONFIG_PATHS`` is no longer split, so a plain path fails its settings validation and
stops the program). So the start-up hook (:mod:`~reprobuild_entrypoint._startup`) calls
:func:`install` right after the program imports ``wandb``, and :func:`install`:

- sets ``WANDB_DOCKER`` to ``REPRO_IMAGE`` (the pinned image) unless it is set: W&B records it
  as the run's Docker image, and that variable is one W&B honours whatever ``init`` is given;
- wraps ``wandb.init`` so that, after the real ``init`` returned the run, :func:`stamp` adds
  the stack's facts (:mod:`~reprobuild_entrypoint.stackfacts`, the same the MLflow tags carry)
  to the run's config under the one key ``reprobuild``, and the manifest and run record as
  files of the run (``reprobuild/``). The program's own ``tags=``, ``config=``, ``group=`` and
  every other argument go to W&B unchanged; the wrapper returns W&B's own run.

A failure here is one ``reprobuild: W&B: ...`` line on stderr, once per process, never an
exception into the program: the run goes on without the stack. ``init``'s own errors are W&B's
and propagate as they would without the runtime.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from reprobuild_entrypoint.contract import IMAGE_VAR

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

CONFIG_KEY = "reprobuild"
FILES_DIR = "reprobuild"
MANIFEST_NAME = "manifest.json"
DOCKER_VAR = "WANDB_DOCKER"
WRAPPED = "__reprobuild_wrapped__"

_WARNED: list[str] = []


def warn(message: str) -> None:
    """One line on stderr, once per process."""
    if not _WARNED:
        _WARNED.append(message)
        sys.stderr.write(f"reprobuild: W&B: {message}\n")
        sys.stderr.flush()


def install(wandb: Any) -> None:
    """Called once ``wandb`` is imported: the Docker variable and the wrapped ``init``."""
    try:
        _install(wandb)
    except Exception as exc:  # best effort: never fail the program over its stack
        warn(f"the stack is left out of its runs ({type(exc).__name__}: {exc})")


def _install(wandb: Any) -> None:
    from reprobuild_entrypoint.stackfacts import in_context

    if not in_context(os.environ):
        return
    image = os.environ.get(IMAGE_VAR, "").strip()
    if image and not os.environ.get(DOCKER_VAR):
        os.environ[DOCKER_VAR] = image
    original = getattr(wandb, "init", None)
    if not callable(original) or getattr(original, WRAPPED, False):
        return
    wrapped = wrap_init(original)
    wandb.init = wrapped
    # ``wandb.sdk.init`` and ``wandb.sdk.wandb_init.init`` are the same function: a program
    # that calls either gets the stack too.
    sdk = getattr(wandb, "sdk", None)
    for holder in (sdk, getattr(sdk, "wandb_init", None)):
        if holder is not None and getattr(holder, "init", None) is original:
            holder.init = wrapped


def wrap_init(original: Callable[..., Any]) -> Callable[..., Any]:
    import functools

    @functools.wraps(original)
    def init(*args: Any, **kwargs: Any) -> Any:
        run = original(*args, **kwargs)
        stamp(run)
        return run

    setattr(init, WRAPPED, True)
    return init


def stamp(run: Any) -> None:
    """Add the stack to ``run``: its config's ``reprobuild`` key, and its two files."""
    if run is None:
        return
    try:
        _stamp(run)
    except Exception as exc:  # best effort: never fail the program over its stack
        first = (str(exc).splitlines() or [""])[0][:200]
        warn(f"the stack is left out of this run ({type(exc).__name__}: {first})")


def _stamp(run: Any) -> None:
    from reprobuild_entrypoint import runrecord
    from reprobuild_entrypoint.stackfacts import artifact_files, run_facts

    manifest = runrecord.default_manifest_path(os.environ)
    facts = run_facts(os.environ, manifest)
    config = run.config
    held = config.get(CONFIG_KEY) if hasattr(config, "get") else None
    if held is None or _is_ours(held):
        # a resumed run holds an earlier session's stack: this session's replaces it
        config.update({CONFIG_KEY: facts}, allow_val_change=True)
    else:
        warn(f"the run's config has its own {CONFIG_KEY!r} key: left as the program set it")
    if getattr(run, "disabled", False):
        return
    files = artifact_files(os.environ, manifest)
    _save_files(run, [(MANIFEST_NAME if p == manifest else p.name, p) for p in files])


def _is_ours(value: Any) -> bool:
    """A stack this hook wrote (in an earlier session of a resumed run): a mapping with the
    manifest's sha256 or the seed's source, which every stack names."""
    return hasattr(value, "keys") and bool({"manifest_sha256", "seed_source"} & set(value.keys()))


def _save_files(run: Any, files: list[tuple[str, Path]]) -> None:
    """Copy the files into the run's own folder (``files/reprobuild/<name>``) and have W&B keep
    them (uploaded at once when online; kept in the offline run directory otherwise)."""
    import shutil

    if not files:
        return
    run_dir = Path(run.dir)
    target = run_dir / FILES_DIR
    target.mkdir(parents=True, exist_ok=True)
    for name, path in files:
        copy = target / name
        shutil.copyfile(path, copy)
        run.save(str(copy), base_path=str(run_dir), policy="now", glob=False)
