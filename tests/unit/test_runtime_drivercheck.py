"""The driver table and its pure evaluator: which driver a CUDA version needs, and what a
GPU image does with a host driver in each determinism mode. No GPU, no I/O."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from reprobuild_entrypoint import cuda_drivers, drivercheck
from reprobuild_entrypoint.drivercheck import (
    CheckResult,
    DriverRequirement,
    check,
    compare_versions,
    image_requirement,
    parse_version,
    required_driver,
)

CUDA_12_6 = DriverRequirement("12.6", "560.28.03", "525.60.13", "CUDA 12.6 GA")
TOO_OLD_12_6 = (
    "the host driver 535.104.05 is older than 560.28.03, which CUDA 12.6 in this image needs: "
    "upgrade the driver, or use an image built on an older NGC release (reprobuild image --gpu "
    "with base.gpu set to one); REPRO_DETERMINISM=warn runs anyway"
)
FULLWIDTH = "\uff15\uff15\uff10.54.15"  # "550.54.15" in fullwidth digits: not a version
NO_GPU = "no NVIDIA GPU is visible in this GPU image (was the container started with --gpus all?)"

# ------------------------------------------------------------------------------- the table


def test_every_row_is_well_formed_and_sourced() -> None:
    assert "docs.nvidia.com/cuda/" in cuda_drivers.SOURCE and "Table 3" in cuda_drivers.SOURCE
    releases = [row[0] for row in cuda_drivers.ROWS]
    assert len(set(releases)) == len(releases)
    for release, driver_min, compat, label in cuda_drivers.ROWS:
        version = parse_version(release)
        assert version is not None and len(version) == 3, release
        assert parse_version(driver_min) is not None, release
        assert compat == cuda_drivers.COMPAT_FLOORS[version[0]][0], release
        assert label.startswith(f"CUDA {version[0]}.{version[1]}"), (release, label)
        assert ("GA" in label) == (version[2] == 0 or release == "11.0.2"), (release, label)


def test_the_table_runs_from_11_0_to_13_x_newest_first_and_never_asks_for_less() -> None:
    versions = [v(row[0]) for row in cuda_drivers.ROWS]
    assert versions == sorted(versions, reverse=True)
    assert cuda_drivers.ROWS[-1][0] == "11.0.2" and cuda_drivers.ROWS[0][0].startswith("13.")
    drivers = [v(row[1]) for row in reversed(cuda_drivers.ROWS)]
    for older, newer in itertools.pairwise(drivers):
        assert compare_versions(older, newer) <= 0
    assert {int(row[0].split(".")[0]) for row in cuda_drivers.ROWS} == {11, 12, 13}


@pytest.mark.parametrize(
    ("cuda", "driver_min", "compat", "label"),
    [
        ("12.6", "560.28.03", "525.60.13", "CUDA 12.6 GA"),
        ("12.6.0", "560.28.03", "525.60.13", "CUDA 12.6 GA"),
        ("12.6.3", "560.35.05", "525.60.13", "CUDA 12.6 Update 3"),
        ("12.8.0.038", "570.26", "525.60.13", "CUDA 12.8 GA"),  # NGC's CUDA_VERSION
        ("12.4.1", "550.54.15", "525.60.13", "CUDA 12.4 Update 1"),
        ("12.3.2", "545.23.08", "525.60.13", "CUDA 12.3 Update 1"),  # no row: the one below
        ("12.0", "525.60.13", "525.60.13", "CUDA 12.0 GA"),
        ("13.0", "580.65.06", "580", "CUDA 13.0 GA"),
        ("13.0.3", "580.95.05", "580", "CUDA 13.0 Update 2"),
        ("13.2.2", "595.71.05", "580", "CUDA 13.2 Update 2"),
        ("11.8", "520.61.05", "450.80.02", "CUDA 11.8 GA"),
        ("11.0", "450.51.05", "450.80.02", "CUDA 11.0.2 GA"),  # 11.0's GA is 11.0.2
        ("11.0.1", "450.51.05", "450.80.02", "CUDA 11.0.2 GA"),  # the RC: the GA row
        (" 12.6 ", "560.28.03", "525.60.13", "CUDA 12.6 GA"),
    ],
)
def test_required_driver(cuda: str, driver_min: str, compat: str, label: str) -> None:
    assert required_driver(cuda) == DriverRequirement(cuda, driver_min, compat, label)


@pytest.mark.parametrize(
    "cuda", ["12.7", "14.0", "13.9", "10.2", "9.0", "12", "", "cuda12.6", "12.6-1", "x.y", None]
)
def test_unknown_or_malformed_cuda_has_no_requirement(cuda: str | None) -> None:
    assert required_driver(cuda) is None


# ----------------------------------------------------------------------- version handling


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("560.35.03", (560, 35, 3)),
        ("570.26", (570, 26)),
        ("580", (580,)),
        (" 550.54.15\n", (550, 54, 15)),
        ("", None),
        ("[N/A]", None),
        ("550..54", None),
        ("v550.54.15", None),
        ("550.54.15-beta", None),
        (FULLWIDTH, None),
        ("1.2.3.4.5.6.7", None),
        (None, None),
        (550, None),
    ],
)
def test_parse_version(text: object, parsed: tuple[int, ...] | None) -> None:
    assert parse_version(text) == parsed


def v(text: str) -> tuple[int, ...]:
    version = parse_version(text)
    assert version is not None
    return version


def test_compare_versions_is_numeric_per_field() -> None:
    assert compare_versions(v("560.35.03"), v("560.35.3")) == 0
    assert compare_versions(v("580"), v("580.65.06")) == -1
    assert compare_versions(v("580.65.06"), v("580")) == 1
    assert compare_versions(v("535.104.05"), v("535.86.09")) == 1  # 104 > 86, not "1" < "8"
    assert compare_versions(v("570.26"), v("570.124.06")) == -1


# ----------------------------------------------------------------------------- evaluation


def verdict(
    host: str | None,
    requirement: DriverRequirement | None = CUDA_12_6,
    *,
    gpu_count: int | None = 1,
    mode: str = "strict",
    allow_cpu: bool = False,
) -> CheckResult:
    return check(host, requirement, gpu_count=gpu_count, mode=mode, allow_cpu=allow_cpu)


@pytest.mark.parametrize("host", ["560.28.03", "560.28.3", "560.28.03.1", "560.35.05", "570.86.10"])
def test_equal_or_newer_driver_is_ok_in_every_mode(host: str) -> None:
    for mode in ("strict", "warn", "off"):
        assert verdict(host, mode=mode) == ("ok", "ok", None)


def test_older_driver_is_refused_in_strict_with_both_versions_and_the_fix() -> None:
    result = verdict("535.104.05")
    assert result.status == "refuse" and result.finding == "driver_too_old"
    assert result.message == TOO_OLD_12_6


@pytest.mark.parametrize("host", ["560.28.02", "560.28", "560", "559.99.99"])
def test_just_below_the_boundary_is_refused(host: str) -> None:
    assert verdict(host).status == "refuse"


def test_older_driver_warns_in_warn_mode_and_is_recorded_in_off() -> None:
    warned = verdict("535.104.05", mode="warn")
    assert warned.status == "warn" and warned.finding == "driver_too_old"
    assert warned.message is not None
    assert warned.message.startswith(
        "the host driver 535.104.05 is older than 560.28.03, which CUDA 12.6 in this image "
        "needs; running anyway (mode warn): upgrade the driver"
    )
    off = verdict("535.104.05", mode="off")
    assert off.status == "ok" and off.finding == "driver_too_old" and off.message


def test_below_the_major_floor_is_its_own_finding() -> None:
    result = verdict("520.61.05")
    assert (result.status, result.finding) == ("refuse", "driver_below_compat")
    assert "older than 560.28.03" in (result.message or "")


@pytest.mark.parametrize("host", [None, "", "[N/A]", "garbage", "550.54.15-beta", FULLWIDTH])
@pytest.mark.parametrize("mode", ["strict", "warn"])
def test_unknown_driver_warns_and_never_refuses(host: str | None, mode: str) -> None:
    result = verdict(host, mode=mode)
    assert (result.status, result.finding) == ("warn", "unknown_driver")
    assert result.message is not None and "560.28.03" in result.message


def test_unknown_requirement_warns() -> None:
    result = verdict("550.54.15", None)
    assert (result.status, result.finding) == ("warn", "unknown_requirement")
    assert result.message == (
        "cannot check the host driver 550.54.15: this GPU image names neither its CUDA version "
        "nor a minimum driver"
    )


def test_cuda_newer_than_the_table_checks_the_major_floor_only() -> None:
    newer = DriverRequirement("13.9", None, "580", "unknown")
    assert (verdict("575.57.08", newer).status, verdict("575.57.08", newer).finding) == (
        "refuse",
        "driver_below_compat",
    )
    result = verdict("600.10", newer)
    assert (result.status, result.finding) == ("warn", "unknown_requirement")
    assert "no minimum driver is known for CUDA 13.9" in (result.message or "")
    assert "at least 580, the floor of CUDA 13.x" in (result.message or "")


def test_no_gpu() -> None:
    strict = verdict("550.54.15", gpu_count=0)
    assert strict == (
        "refuse",
        "no_gpu",
        f"{NO_GPU}; REPRO_ALLOW_CPU=1 runs it without one",
    )
    assert verdict(None, None, gpu_count=0).status == "refuse"  # nothing found at all
    allowed = verdict(None, gpu_count=0, allow_cpu=True)
    assert (allowed.status, allowed.finding) == ("ok", "no_gpu")
    warned = verdict(None, gpu_count=0, mode="warn")
    assert (
        warned.status == "warn" and warned.message == f"{NO_GPU}; running without one (mode warn)"
    )
    assert verdict(None, gpu_count=0, mode="off").status == "ok"


def test_an_unknown_gpu_count_is_not_no_gpu() -> None:
    assert verdict("560.28.03", gpu_count=None).status == "ok"
    assert verdict("535.104.05", gpu_count=None).status == "refuse"


def test_every_message_is_one_line() -> None:
    requirements = [CUDA_12_6, None, DriverRequirement("13.9", None, "580", "unknown")]
    for host in (None, "garbage", "520.61.05", "535.104.05", "600.1"):
        for requirement in requirements:
            for mode in ("strict", "warn", "off"):
                for count in (0, 1, None):
                    message = verdict(host, requirement, gpu_count=count, mode=mode).message
                    assert message is None or "\n" not in message


# -------------------------------------------------------------------- the image's requirement


def test_manifest_gpu_section_wins() -> None:
    manifest = {
        "gpu": {"cuda": "12.6", "driver_min": "560.28.03", "driver_min_compat": "525.60.13"}
    }
    assert image_requirement(manifest, {"CUDA_VERSION": "12.4.1"}) == DriverRequirement(
        "12.6", "560.28.03", "525.60.13", "manifest"
    )
    # a builder that knows better than the table (a newer toolkit) is believed
    newer = {"gpu": {"cuda": "14.0", "driver_min": "610.10"}}
    assert image_requirement(newer, {}) == DriverRequirement("14.0", "610.10", None, "manifest")


def test_a_malformed_manifest_value_falls_back_to_the_table() -> None:
    manifest = {"gpu": {"cuda": "12.6", "driver_min": "latest", "driver_min_compat": 525}}
    assert image_requirement(manifest, {}) == CUDA_12_6


def test_cuda_version_from_the_image_environment() -> None:
    manifests: list[dict[str, Any]] = [{"gpu": {}}, {"variant": "gpu"}, {"gpu": "not a mapping"}]
    for manifest in manifests:
        requirement = image_requirement(manifest, {"CUDA_VERSION": "12.4.1"})
        assert requirement is not None and requirement.driver_min == "550.54.15"


def test_nothing_to_go_on() -> None:
    assert image_requirement({"gpu": {}}, {}) is None
    assert image_requirement({}, {"CUDA_VERSION": "13.9"}) == DriverRequirement(
        "13.9", None, "580", "unknown"
    )
    assert image_requirement({"gpu": {"cuda": "garbage"}}, {}) == DriverRequirement(
        "garbage", None, None, "unknown"
    )
    result = check(
        "550.54.15",
        image_requirement({"gpu": {"cuda": "garbage"}}, {}),
        gpu_count=1,
        mode="strict",
        allow_cpu=False,
    )
    assert result.status == "warn"


def test_constants_used_by_messages() -> None:
    assert drivercheck.NO_GPU_MESSAGE == NO_GPU
    assert drivercheck.FIX in TOO_OLD_12_6
