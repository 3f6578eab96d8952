"""A project's variants as a CI build matrix: the one list a workflow reads, never copies.

``reprobuild matrix --format github`` prints ``{"include": [...]}`` on one line for
``echo "matrix=$(...)" >> "$GITHUB_OUTPUT"`` and ``strategy.matrix: ${{ fromJSON(...) }}``.
Each entry names the variant, whether it is a GPU build, the runner labels it needs, its lock
(relative to the project) and the tag ``reprobuild image --variant`` gives it by default.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from reprobuild.baselock import pin
from reprobuild.catalog import Catalog, is_catalog_name, load_catalog
from reprobuild.config import ProjectConfig, Variant
from reprobuild.errors import ConfigError, ReprobuildError
from reprobuild.lockfile import load_lock
from reprobuild.plan import default_tag
from reprobuild.refs import parse_pinned

Format = Literal["github", "json"]
FORMATS: tuple[Format, ...] = ("github", "json")


def check_base(config: ProjectConfig, variant: Variant, catalog: Catalog) -> None:
    """Refuse a base ``image --variant`` would refuse: a catalog name must be in the project's
    base lock or the catalog (nothing is recorded here), anything else pinned by digest."""
    base = variant.base or ""
    try:
        if is_catalog_name(base):
            pin(config.root, base, catalog, record=False)
        else:
            parse_pinned(base, what="base")
    except ReprobuildError as exc:
        message = exc.message if len(exc.message) <= 240 else exc.message[:237] + "..."
        raise ConfigError(
            config.config_path,
            f"matrix variant {variant.name}: {message}",
            hint=exc.hint or "use a catalog name or NAME@sha256:<64 hex>",
        ) from None


def entry(
    config: ProjectConfig, variant: Variant, catalog: Catalog | None = None
) -> dict[str, Any]:
    """One matrix entry. Reads (and so validates) the variant's lock for its hash, and checks
    its base as ``image`` would."""
    check_base(config, variant, catalog or load_catalog())
    lock = load_lock(variant.lock)
    return {
        "variant": variant.name,
        "gpu": variant.gpu,
        "runs-on": list(variant.runner),
        "lock": variant.lock.relative_to(config.root).as_posix(),
        "base": variant.base,
        "tag": default_tag(config.name, variant.name, lock.sha256),
    }


def matrix(config: ProjectConfig) -> dict[str, list[dict[str, Any]]]:
    """The GitHub Actions matrix of every variant, in the order the config lists them."""
    variants = config.variants
    if not variants:
        raise ConfigError(
            config.config_path,
            "no variants to build: set base.cpu, or gpu_lock and base.gpu, or a matrix:",
        )
    catalog = load_catalog()
    return {"include": [entry(config, v, catalog) for v in variants]}


def dumps(document: dict[str, Any], fmt: Format) -> str:
    """``github``: one compact line (a $GITHUB_OUTPUT value must be one line);
    ``json``: indented for people."""
    if fmt == "github":
        return json.dumps(document, separators=(",", ":"))
    return json.dumps(document, indent=2)
