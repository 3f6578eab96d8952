"""Which Linux x86_64 NVIDIA driver each CUDA toolkit release needs: a data table, no code
that does I/O. :mod:`~reprobuild_entrypoint.drivercheck` evaluates it.

Two numbers per release, both from NVIDIA's CUDA Toolkit release notes (:data:`SOURCE`),
section "CUDA Driver":

- ``driver_min``: the driver that gives the toolkit its **full feature set**, from Table 3,
  "CUDA Toolkit and Corresponding Driver Versions" (the driver packaged with that release).
  Every row of Table 3 from CUDA 11.0 GA to the newest release the notes list is here, one
  to one, named by its row label; the 11.0.1 RC row and the CUDA 10 and older rows are left
  out. ``12.6`` means the GA release, ``12.6.3`` Update 3 (the toolkit's own version numbers:
  ``CUDA_VERSION`` of nvidia/cuda images, the first three fields of NGC's).
- ``driver_min_compat``: the floor of the toolkit's **major** family under *minor version
  compatibility* (CUDA 11 and later): any driver from it up runs every 11.x (12.x, 13.x)
  toolkit, with a limited feature set (no JIT of PTX newer than the driver, no API the driver
  lacks). From Table 2, "CUDA Toolkit and Minimum Required Driver Version for CUDA Minor
  Version Compatibility" and its footnotes: :data:`COMPAT_FLOORS`.

Forward compatibility, which this table does not model: NGC images (and nvidia/cuda ones with
the ``cuda-compat-<major>-<minor>`` package) carry a newer user-mode driver under
``/usr/local/cuda/compat`` (its version in the ``CUDA_DRIVER_VERSION`` variable), which NGC's
own entrypoint puts in front of the host's. It lets an image run on a host driver older than
``driver_min``, even one from an older major family, but only on NVIDIA data-center GPUs
(and a few NGC-ready RTX SKUs) whose host driver is on a branch that forward compatibility
supports. Whether that holds is known only once CUDA starts, after this check; the check
therefore compares the host's kernel-mode driver with the table, and a run that relies on
forward compatibility goes on with ``REPRO_DETERMINISM=warn`` (see drivercheck).

Rows are (release, driver_min, driver_min_compat, Table 3 row label), newest first as NVIDIA
prints them. Updating: append the new rows of Table 3 from the newest release notes, check the
floors in Table 2, and set :data:`SOURCE` to the page read.
"""

from __future__ import annotations

SOURCE = (
    "NVIDIA, 'CUDA Toolkit 13.2 Update 2 - Release Notes', section 2.2 'CUDA Driver': "
    "Table 2 'CUDA Toolkit and Minimum Required Driver Version for CUDA Minor Version "
    "Compatibility' and Table 3 'CUDA Toolkit and Corresponding Driver Versions' (Linux "
    "x86_64 column), https://docs.nvidia.com/cuda/archive/13.2.2/cuda-toolkit-release-notes/"
    "index.html; rows cross-checked against the 13.1 notes' copy of Table 3"
)
"""Where every row and floor below was read."""

COMPAT_FLOORS: dict[int, tuple[str, str]] = {
    13: ("580", "Table 2: 13.x >= 580 (13.0 GA itself needs 580.65.06)"),
    12: (
        "525.60.13",
        "Table 2: 12.x >= 525 (the CUDA 12.0-12.x notes print >=525.60.13, the 12.0 GA driver)",
    ),
    11: (
        "450.80.02",
        "Table 2 footnote: minor version compatibility across 11.x needs the Tesla Recommended "
        "Driver 450.80.02 (11.0 GA shipped with an older one)",
    ),
}
"""Per CUDA major: (minor-version-compatibility floor, where it was read)."""

ROWS: tuple[tuple[str, str, str, str], ...] = (
    ("13.2.2", "595.71.05", "580", "CUDA 13.2 Update 2"),
    ("13.2.1", "595.58.03", "580", "CUDA 13.2 Update 1"),
    ("13.2.0", "595.45.04", "580", "CUDA 13.2 GA"),
    ("13.1.1", "590.48.01", "580", "CUDA 13.1 Update 1"),
    ("13.1.0", "590.44.01", "580", "CUDA 13.1 GA"),
    ("13.0.2", "580.95.05", "580", "CUDA 13.0 Update 2"),
    ("13.0.1", "580.82.07", "580", "CUDA 13.0 Update 1"),
    ("13.0.0", "580.65.06", "580", "CUDA 13.0 GA"),
    ("12.9.1", "575.57.08", "525.60.13", "CUDA 12.9 Update 1"),
    ("12.9.0", "575.51.03", "525.60.13", "CUDA 12.9 GA"),
    ("12.8.1", "570.124.06", "525.60.13", "CUDA 12.8 Update 1"),
    ("12.8.0", "570.26", "525.60.13", "CUDA 12.8 GA"),
    ("12.6.3", "560.35.05", "525.60.13", "CUDA 12.6 Update 3"),
    ("12.6.2", "560.35.03", "525.60.13", "CUDA 12.6 Update 2"),
    ("12.6.1", "560.35.03", "525.60.13", "CUDA 12.6 Update 1"),
    ("12.6.0", "560.28.03", "525.60.13", "CUDA 12.6 GA"),
    ("12.5.1", "555.42.06", "525.60.13", "CUDA 12.5 Update 1"),
    ("12.5.0", "555.42.02", "525.60.13", "CUDA 12.5 GA"),
    ("12.4.1", "550.54.15", "525.60.13", "CUDA 12.4 Update 1"),
    ("12.4.0", "550.54.14", "525.60.13", "CUDA 12.4 GA"),
    ("12.3.1", "545.23.08", "525.60.13", "CUDA 12.3 Update 1"),
    ("12.3.0", "545.23.06", "525.60.13", "CUDA 12.3 GA"),
    ("12.2.2", "535.104.05", "525.60.13", "CUDA 12.2 Update 2"),
    ("12.2.1", "535.86.09", "525.60.13", "CUDA 12.2 Update 1"),
    ("12.2.0", "535.54.03", "525.60.13", "CUDA 12.2 GA"),
    ("12.1.1", "530.30.02", "525.60.13", "CUDA 12.1 Update 1"),
    ("12.1.0", "530.30.02", "525.60.13", "CUDA 12.1 GA"),
    ("12.0.1", "525.85.12", "525.60.13", "CUDA 12.0 Update 1"),
    ("12.0.0", "525.60.13", "525.60.13", "CUDA 12.0 GA"),
    ("11.8.0", "520.61.05", "450.80.02", "CUDA 11.8 GA"),
    ("11.7.1", "515.48.07", "450.80.02", "CUDA 11.7 Update 1"),
    ("11.7.0", "515.43.04", "450.80.02", "CUDA 11.7 GA"),
    ("11.6.2", "510.47.03", "450.80.02", "CUDA 11.6 Update 2"),
    ("11.6.1", "510.47.03", "450.80.02", "CUDA 11.6 Update 1"),
    ("11.6.0", "510.39.01", "450.80.02", "CUDA 11.6 GA"),
    ("11.5.2", "495.29.05", "450.80.02", "CUDA 11.5 Update 2"),
    ("11.5.1", "495.29.05", "450.80.02", "CUDA 11.5 Update 1"),
    ("11.5.0", "495.29.05", "450.80.02", "CUDA 11.5 GA"),
    ("11.4.4", "470.82.01", "450.80.02", "CUDA 11.4 Update 4"),
    ("11.4.3", "470.82.01", "450.80.02", "CUDA 11.4 Update 3"),
    ("11.4.2", "470.57.02", "450.80.02", "CUDA 11.4 Update 2"),
    ("11.4.1", "470.57.02", "450.80.02", "CUDA 11.4 Update 1"),
    ("11.4.0", "470.42.01", "450.80.02", "CUDA 11.4.0 GA"),
    ("11.3.1", "465.19.01", "450.80.02", "CUDA 11.3.1 Update 1"),
    ("11.3.0", "465.19.01", "450.80.02", "CUDA 11.3.0 GA"),
    ("11.2.2", "460.32.03", "450.80.02", "CUDA 11.2.2 Update 2"),
    ("11.2.1", "460.32.03", "450.80.02", "CUDA 11.2.1 Update 1"),
    ("11.2.0", "460.27.03", "450.80.02", "CUDA 11.2.0 GA"),
    ("11.1.1", "455.32", "450.80.02", "CUDA 11.1.1 Update 1"),
    ("11.1.0", "455.23", "450.80.02", "CUDA 11.1 GA"),
    ("11.0.3", "450.51.06", "450.80.02", "CUDA 11.0.3 Update 1"),
    ("11.0.2", "450.51.05", "450.80.02", "CUDA 11.0.2 GA"),
)
"""(CUDA release, driver_min, driver_min_compat, Table 3 row label), newest first.

CUDA 11.0's GA release is 11.0.2 (11.0.1 was the RC): its driver_min is below its family's
compatibility floor, because the floor came with a later 450 driver. CUDA 12.7 was never
released. 12.3.2 and 13.0.3 exist but have no row of their own in Table 3: a release without a
row gets the newest row of its minor version below it."""
