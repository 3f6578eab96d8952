"""Sphinx configuration for reprobuild's documentation.

Built with warnings as errors by scripts/test (``sphinx-build -W --keep-going -b html docs
docs/_build/html``), against the INSTALLED reprobuild: the CLI reference is generated from its
argparse parser and the JSON Schemas from its typed records, so a renamed option or field
breaks the build. No network: no intersphinx.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "_ext"))

project = "reprobuild"
author = "the reprobuild authors"
copyright = "the reprobuild authors, Apache License 2.0"

extensions = [
    "myst_parser",
    "sphinx_argparse_cli",
    "reprobuild_schemas",
]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]
myst_enable_extensions = ["colon_fence", "deflist"]
# Headings become link targets (#heading-slug), as on GitHub.
myst_heading_anchors = 3
html_theme = "furo"
html_title = "reprobuild"
# Reproducible output: no "last updated" wall-clock stamps.
html_last_updated_fmt = None
# The figures, commands and tables are text; nothing is fetched at build time.
nitpicky = False
