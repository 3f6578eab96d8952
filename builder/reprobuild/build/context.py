"""Write a rendered build context to disk: all of it or nothing."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path

from reprobuild._util.fsutil import replace_dir
from reprobuild.build.render import FileEntry
from reprobuild.errors import OutputError


def write_tree(files: dict[str, FileEntry], root: Path, *, epoch: int) -> None:
    """Write files under an existing empty ``root``; mtimes fixed to ``epoch`` so layer
    contents do not depend on when the context was written."""
    for rel, entry in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(entry.data)
        os.chmod(path, entry.mode)
    clamp_times(root, epoch)


def clamp_times(root: Path, epoch: int) -> None:
    """Set the mtime of everything under ``root`` (and of ``root``) to ``epoch``. Not for the
    wheels added after :func:`write_tree`: they are hard links into the wheel cache, whose
    integrity check reads size and mtime, so changing theirs changed the cache (buildah 1.39
    records a digest of each RUN bind mount's source, mtimes included: there a wheel
    downloaded on another day still gives another image ID; issue 29)."""
    for dirpath, _dirs, names in os.walk(root, topdown=False):
        for name in names:
            os.utime(Path(dirpath) / name, (epoch, epoch), follow_symlinks=False)
        os.utime(dirpath, (epoch, epoch))


MARKER = ".reprobuild-context"
_MARKER_TEXT = b"Written by `reprobuild render`; the next render replaces this directory whole.\n"
_HINT = "give -o a new or empty directory outside the project's sources"


def _shown(path: Path) -> str:
    text = str(path)
    return repr(text if len(text) <= 80 else "..." + text[-77:])


def _is_ours(out: Path) -> bool:
    """An existing directory may be replaced only when it is empty or a previous render wrote
    it (it holds the marker file): never a directory the user made."""
    names = os.listdir(out)
    if not names:
        return True
    marker = out / MARKER
    return MARKER in names and stat.S_ISREG(marker.lstat().st_mode)


def check_output(
    out: Path,
    *,
    project: Path | None = None,
    protected: tuple[Path, ...] = (),
    reprobuild_owned: bool = False,
) -> Path:
    """The output directory, made absolute with its parent's symlinks resolved, once it is
    certain that replacing it destroys nothing but an earlier render: not the project nor a
    directory holding it, not inside ``protected`` (what a render copies), not a symlink or a
    file, and absent, empty or marked as a render's output (``reprobuild_owned``: the default
    output under the project's ``.reprobuild/``, which renders before the marker wrote)."""
    try:
        out = out.absolute()
        parent = out.parent.resolve()
        out = parent / out.name
        if out.name in ("", ".", ".."):
            raise OutputError(f"output {_shown(out)} is not a directory name", hint=_HINT)
        if project is not None:
            root = project.resolve()
            if out == root or root.is_relative_to(out):
                what = "is" if out == root else "contains"
                raise OutputError(
                    f"output {_shown(out)} {what} the project {_shown(root)}; a render "
                    "replaces its output whole",
                    hint=_HINT,
                )
            for inner in protected:
                inner = inner.resolve()
                if out.is_relative_to(inner) or inner.is_relative_to(out):
                    raise OutputError(
                        f"output {_shown(out)} overlaps {_shown(inner)}, which the project "
                        "includes or needs",
                        hint=_HINT,
                    )
        if out.is_symlink():
            raise OutputError(f"output {_shown(out)} is a symlink", hint=_HINT)
        if out.exists():
            if not out.is_dir():
                raise OutputError(f"output {_shown(out)} exists and is not a directory")
            if not reprobuild_owned and not _is_ours(out):
                raise OutputError(
                    f"output {_shown(out)} is a non-empty directory that reprobuild did not "
                    f"write (no {MARKER}); it is never replaced",
                    hint=_HINT,
                )
    except OSError as exc:
        raise OutputError(f"cannot use output {_shown(out)}: {exc.strerror or exc}") from None
    return out


def write_context(
    files: dict[str, FileEntry],
    out: Path,
    *,
    epoch: int,
    project: Path | None = None,
    protected: tuple[Path, ...] = (),
    reprobuild_owned: bool = False,
) -> None:
    """Write the context to ``out`` atomically: staged beside it, then swapped in whole.
    ``out`` must pass :func:`check_output`; the written tree carries the marker file that
    lets the next render replace it."""
    out = check_output(out, project=project, protected=protected, reprobuild_owned=reprobuild_owned)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        staged = Path(tempfile.mkdtemp(prefix=f".{out.name}.new.", dir=out.parent))
    except OSError as exc:
        raise OutputError(
            f"cannot write the build context {_shown(out)}: cannot create a directory in "
            f"{_shown(out.parent)}: {exc.strerror}"
        ) from None
    try:
        write_tree({**files, MARKER: FileEntry(_MARKER_TEXT)}, staged, epoch=epoch)
        os.chmod(staged, 0o755)
        replace_dir(staged, out)
    except OSError as exc:
        shutil.rmtree(staged, ignore_errors=True)
        raise OutputError(
            f"cannot write the context to {_shown(out)}: {exc.strerror or exc}"
        ) from None
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        raise
