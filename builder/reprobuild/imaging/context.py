"""Write a rendered build context to disk: all of it or nothing."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import stat
import tempfile
from pathlib import Path

from reprobuild._util.fsutil import replace_dir
from reprobuild.errors import OutputError
from reprobuild.imaging.render import FileEntry


def write_tree(files: dict[str, FileEntry], root: Path, *, epoch: int) -> None:
    """Write files under an existing empty ``root``; mtimes fixed to ``epoch`` so layer
    contents do not depend on when the context was written."""
    for rel, entry in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(entry.data)
        os.chmod(path, entry.mode)
    clamp_times(root, epoch)


def clamp_times(root: Path, epoch: int, *, linked_at: int | None = None) -> None:
    """Set the mtime of everything under ``root`` (and of ``root``) to ``epoch``. Also for
    what is added to a context after :func:`write_tree` (the wheels): buildah 1.39 records a
    digest of each RUN bind mount's source, mtimes included, in the image's history, so a
    wheel downloaded on another day gave another image ID there (issue 29).

    A file with other names (the wheels are hard links into the wheel cache) keeps its time
    when that is already ``linked_at`` (ns): the cache gives every wheel that one fixed time
    (:data:`reprobuild.locks.wheels.CACHED_MTIME_NS`), so the link is used as it is, with no
    copy. Any other linked file first becomes a copy of its own, so no time set here reaches
    another name of it."""
    for dirpath, _dirs, names in os.walk(root, topdown=False):
        for name in names:
            path = Path(dirpath) / name
            st = path.lstat()
            if st.st_nlink > 1 and stat.S_ISREG(st.st_mode):
                if linked_at is not None and st.st_mtime_ns == linked_at:
                    continue
                _own_copy(path, st.st_mode)
            os.utime(path, (epoch, epoch), follow_symlinks=False)
        os.utime(dirpath, (epoch, epoch))


_FICLONE = 0x40049409  # linux/fs.h: share the extents (btrfs, XFS); EOPNOTSUPP on ext4


def _own_copy(path: Path, mode: int) -> None:
    """Replace ``path`` by a copy with an inode of its own (a reflink where the file system
    has them, else the bytes), under the same name and mode; the other names keep theirs."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as dst, open(path, "rb") as src:
            try:
                fcntl.ioctl(dst.fileno(), _FICLONE, src.fileno())
                cloned = True
            except OSError:
                cloned = False
        if not cloned:
            shutil.copyfile(path, tmp)  # sendfile(2): in the kernel, no pass through Python
        os.chmod(tmp, stat.S_IMODE(mode))
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


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
