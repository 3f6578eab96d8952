"""The ``reprobuild`` command: parse arguments, call the library, map errors to exit codes.

``main.py`` holds the top-level parser, the dispatch, the signal handling and the exit codes;
``options.py`` the options several commands share; ``commands/`` one module per command,
found through a registry that imports a command's module only when that command runs.
"""

from reprobuild.cli.main import build_parser, entrypoint, main

__all__ = ["build_parser", "entrypoint", "main"]
