"""``reprobuild sbom IMAGE [-o FILE]``: the SBOM an image carries, checked against its
manifest (whose sha256 is the image's label) before a byte of it is given out."""

from __future__ import annotations

from pathlib import Path

from reprobuild._util.fsutil import write_atomic
from reprobuild.backends.engine import Engine
from reprobuild.build.sbom import MAX_SBOM_BYTES, SBOM_PATH, check_document, sha256
from reprobuild.checks.imageinfo import read_image
from reprobuild.errors import ReprobuildError, shorten


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


def export_sbom(engine: Engine, image: str, output: Path | None) -> bytes:
    """Read the SBOM; with ``output``, write it there whole (never a half-written file)."""
    if output is not None and output.is_dir():
        raise ReprobuildError(f"-o {shorten(str(output))} is a directory; give a file name")
    raw = read_sbom(engine, image)
    if output is not None:
        try:
            write_atomic(output, raw)
        except OSError as exc:
            raise ReprobuildError(
                f"cannot write the SBOM to {shorten(str(output))}: {exc.strerror or exc}"
            ) from None
    return raw
