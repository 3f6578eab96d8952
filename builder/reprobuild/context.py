"""Write a rendered build context to disk: all of it or nothing."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from reprobuild.errors import OutputError
from reprobuild.fsutil import replace_dir
from reprobuild.render import FileEntry


def write_tree(files: dict[str, FileEntry], root: Path, *, epoch: int) -> None:
    """Write files under an existing empty ``root``; mtimes fixed to ``epoch`` so layer
    contents do not depend on when the context was written."""
    for rel, entry in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(entry.data)
        os.chmod(path, entry.mode)
    for dirpath, _dirs, names in os.walk(root, topdown=False):
        for name in names:
            os.utime(Path(dirpath) / name, (epoch, epoch), follow_symlinks=False)
        os.utime(dirpath, (epoch, epoch))


def write_context(files: dict[str, FileEntry], out: Path, *, epoch: int) -> None:
    """Write the context to ``out`` atomically: staged beside it, then swapped in whole."""
    out = out.absolute()
    if out.exists() and not out.is_dir():
        raise OutputError(f"output {str(out)!r} exists and is not a directory")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        staged = Path(tempfile.mkdtemp(prefix=f".{out.name}.new.", dir=out.parent))
    except OSError as exc:
        raise OutputError(f"cannot write to {str(out.parent)!r}: {exc.strerror}") from None
    try:
        write_tree(files, staged, epoch=epoch)
        os.chmod(staged, 0o755)
        replace_dir(staged, out)
    except OSError as exc:
        shutil.rmtree(staged, ignore_errors=True)
        raise OutputError(
            f"cannot write the context to {str(out)!r}: {exc.strerror or exc}"
        ) from None
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        raise
