"""A project's variants as a CI build matrix: the one list a workflow reads, never copies.

``reprobuild matrix --format github`` prints ``{"include": [...]}`` on one line for
``echo "matrix=$(...)" >> "$GITHUB_OUTPUT"`` and ``strategy.matrix: ${{ fromJSON(...) }}``.
Each entry names the variant, whether it is a GPU build, the runner labels it needs, its lock
(relative to the project) and the tag ``reprobuild image --variant`` gives it by default.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from reprobuild.config import ProjectConfig, Variant
from reprobuild.errors import ConfigError
from reprobuild.lockfile import load_lock
from reprobuild.plan import default_tag

Format = Literal["github", "json"]
FORMATS: tuple[Format, ...] = ("github", "json")


def entry(config: ProjectConfig, variant: Variant) -> dict[str, Any]:
    """One matrix entry. Reads (and so validates) the variant's lock for its hash."""
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
    return {"include": [entry(config, v) for v in variants]}


def dumps(document: dict[str, Any], fmt: Format) -> str:
    """``github``: one compact line (a $GITHUB_OUTPUT value must be one line);
    ``json``: indented for people."""
    if fmt == "github":
        return json.dumps(document, separators=(",", ":"))
    return json.dumps(document, indent=2)
