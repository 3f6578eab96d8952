"""``reprobuild sbom IMAGE [-o FILE]``: the SBOM an image carries, checked against its
manifest (whose sha256 is the image's label) before a byte of it is given out."""

from __future__ import annotations

import stat
from pathlib import Path

from reprobuild._util.fsutil import write_atomic
from reprobuild.backends.engine import Engine
from reprobuild.checks.imageinfo import read_image
from reprobuild.errors import ReprobuildError, shorten
from reprobuild.imaging.sbom import MAX_SBOM_BYTES, SBOM_PATH, check_document, sha256


def read_sbom(engine: Engine, image: str) -> bytes:
    """The image's SBOM bytes, as built: its sha256 must be the one the manifest records."""
    info = read_image(engine, image)
    want = info.manifest.sbom_sha256
    if want is None:
        raise ReprobuildError(
            f"{image} carries no SBOM (built by reprobuild {info.manifest.builder_version}, "
            "before images had one)",
            hint="build it again with this reprobuild: `reprobuild image`",
        )
    raw = engine.read_file(image, SBOM_PATH, max_bytes=MAX_SBOM_BYTES)
    got = sha256(raw)
    if got != want:
        raise ReprobuildError(
            f"{image}: {SBOM_PATH} has sha256 {got[:12]}... but the manifest records "
            f"{want[:12]}...; the image was altered after it was built"
        )
    check_document(raw, f"{image}: {SBOM_PATH}")
    return raw


def check_output(output: Path) -> None:
    """Refuse an ``-o`` before the image is read: a directory, a symlink, a FIFO or device,
    or an existing file that is not an SBOM (only an earlier SBOM, or an empty file, is
    replaced: a mistyped -o onto a source file must not destroy it)."""
    if output.is_dir():
        raise ReprobuildError(f"-o {shorten(str(output))} is a directory; give a file name")
    try:
        mode = output.lstat().st_mode
    except OSError:
        return  # nothing there yet (or unreadable: the write says why)
    if not stat.S_ISREG(mode):
        raise ReprobuildError(
            f"-o {shorten(str(output))} is not a regular file; give a file name, or - for stdout"
        )
    try:
        with output.open("rb") as fh:
            head = fh.read(MAX_SBOM_BYTES + 1)
    except OSError as exc:
        raise ReprobuildError(f"cannot read -o {shorten(str(output))}: {exc.strerror}") from None
    if head.strip():
        try:
            check_document(head, "x")
        except ReprobuildError:
            raise ReprobuildError(
                f"-o {shorten(str(output))} exists and is not a CycloneDX SBOM; -o replaces "
                "only an earlier SBOM (or an empty file)",
                hint="give a new file name, or remove the file first",
            ) from None


def export_sbom(engine: Engine, image: str, output: Path | None) -> bytes:
    """Read the SBOM; with ``output`` (not ``-``), write it there whole (a temp file, then a
    rename: never half a file); else return it for stdout."""
    if output is not None and str(output) != "-":
        check_output(output)
    raw = read_sbom(engine, image)
    if output is not None and str(output) != "-":
        try:
            write_atomic(output, raw)
        except OSError as exc:
            raise ReprobuildError(
                f"cannot write the SBOM to {shorten(str(output))}: {exc.strerror or exc}"
            ) from None
    return raw
