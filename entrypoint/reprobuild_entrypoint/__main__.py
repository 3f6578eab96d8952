"""The image's ENTRYPOINT: prepare the process, then ``exec`` the command.

``exec`` replaces this process with the program, so signals sent to the container reach the
program directly and its exit status is the container's.
"""

from __future__ import annotations

import os
import sys


def main(argv: list[str]) -> int:
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        print("reprobuild-entrypoint: no command given (set CMD or pass one)", file=sys.stderr)
        return 2
    try:
        os.execvp(argv[0], argv)
    except FileNotFoundError:
        print(f"reprobuild-entrypoint: command not found: {argv[0]!r}", file=sys.stderr)
        return 127
    except PermissionError:
        print(f"reprobuild-entrypoint: command not executable: {argv[0]!r}", file=sys.stderr)
        return 126
    return 0  # pragma: no cover - execvp does not return


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
