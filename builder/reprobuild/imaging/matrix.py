"""A project's variants as a CI build matrix: the one list a workflow reads, never copies.

``reprobuild matrix --format github`` prints ``{"include": [...]}`` on one line for
``echo "matrix=$(...)" >> "$GITHUB_OUTPUT"`` and ``strategy.matrix: ${{ fromJSON(...) }}``.
Each entry names the variant, whether it is a GPU build, the runner labels it needs, its lock
(relative to the project) and the tag ``reprobuild image --variant`` gives it by default.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from reprobuild.bases.baselock import pin
from reprobuild.bases.catalog import Catalog, is_catalog_name, load_catalog
from reprobuild.bases.refs import parse_pinned
from reprobuild.errors import ConfigError, ReprobuildError, UsageError
from reprobuild.imaging.plan import catalog_python, default_tag, read_lock
from reprobuild.imaging.platforms import BuildPlatform, parse_platforms, tag_for
from reprobuild.project.config import ProjectConfig, Variant
from reprobuild_entrypoint.contract import SEED_VAR, TRIAL_VAR
from reprobuild_entrypoint.settings import SEED_MAX
from reprobuild_entrypoint.trials import trial_seed

Format = Literal["github", "json"]
FORMATS: tuple[Format, ...] = ("github", "json")


def check_base(config: ProjectConfig, variant: Variant, catalog: Catalog) -> None:
    """Refuse a base ``image --variant`` would refuse: a catalog name must be in the project's
    base lock or the catalog (nothing is recorded here), anything else pinned by digest."""
    base = variant.base or ""
    try:
        if is_catalog_name(base):
            pin(config.root, base, catalog)
        else:
            parse_pinned(base, what="base")
    except ReprobuildError as exc:
        message = exc.message if len(exc.message) <= 240 else exc.message[:237] + "..."
        raise ConfigError(
            config.where_base(variant),
            f"matrix variant {variant.name}: {message}",
            hint=exc.hint or "use a catalog name or NAME@sha256:<64 hex>",
        ) from None


def entry(
    config: ProjectConfig,
    variant: Variant,
    catalog: Catalog | None = None,
    target: BuildPlatform | None = None,
) -> dict[str, Any]:
    """One matrix entry. Reads (and so validates) the variant's lock for its hash, and checks
    its base as ``image`` would. ``target``: the entry of one platform (``--platform``), its
    lock read for that machine (one that does not cover it is an error naming the package),
    its tag the one ``image --platform`` gives."""
    catalog = catalog or load_catalog()
    check_base(config, variant, catalog)
    python = catalog_python(config, variant.base, catalog)
    lock = read_lock(config, variant.lock, python, target.machine if target else None)
    tag = default_tag(config.name, variant.name, lock.sha256, lock.choice)
    return {
        "variant": variant.name,
        "gpu": variant.gpu,
        "runs-on": list(variant.runner),
        "lock": variant.lock.relative_to(config.root).as_posix(),
        "base": variant.base,
        **({"platform": target.name} if target else {}),
        "tag": tag_for(tag, target),
    }


MAX_TRIALS = 1000
"""GitHub Actions runs at most 256 jobs from one matrix; 1000 leaves room for other CIs."""


def matrix(
    config: ProjectConfig,
    *,
    trials: int | None = None,
    seed: int | None = None,
    platforms: str | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """The GitHub Actions matrix of every variant, in the order the config lists them.
    ``platforms``: ``--platform``'s value; an entry per variant and platform, each naming its
    ``platform`` (the value of ``image --platform`` that builds it).

    ``trials``: a run matrix instead, one entry per variant and trial ``k`` in ``0..trials-1``
    of the experiment seed (``seed``, else the project's), each with the ``env`` that runs it
    (``REPRO_SEED``, ``REPRO_TRIAL``) and the run seed the runtime derives from them
    (:func:`reprobuild_entrypoint.trials.trial_seed`)."""
    variants = config.variants
    if not variants:
        raise ConfigError(
            config.config_path,
            "no variants to build: set base.cpu, or gpu_lock and base.gpu, or a matrix:",
        )
    if trials is not None and not 1 <= trials <= MAX_TRIALS:
        raise UsageError(f"--trials {trials}: use a whole number from 1 to {MAX_TRIALS}")
    if seed is not None and not 0 <= seed <= SEED_MAX:
        raise UsageError(f"--seed {seed}: use a whole number from 0 to {SEED_MAX}")
    if seed is not None and trials is None:
        raise UsageError("--seed applies to trials: give --trials N too")
    targets: tuple[BuildPlatform | None, ...] = parse_platforms(platforms) if platforms else (None,)
    catalog = load_catalog()
    builds = [entry(config, v, catalog, t) for v in variants for t in targets]
    if trials is None:
        return {"include": builds}
    experiment = config.seed if seed is None else seed
    return {
        "include": [
            {
                **build,
                "trial": k,
                "experiment_seed": experiment,
                "seed": trial_seed(experiment, k),
                "env": {SEED_VAR: str(experiment), TRIAL_VAR: str(k)},
            }
            for build in builds
            for k in range(trials)
        ]
    }


def dumps(document: dict[str, Any], fmt: Format) -> str:
    """``github``: one compact line (a $GITHUB_OUTPUT value must be one line);
    ``json``: indented for people."""
    if fmt == "github":
        return json.dumps(document, separators=(",", ":"))
    return json.dumps(document, indent=2)
