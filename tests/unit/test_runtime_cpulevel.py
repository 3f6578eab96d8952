"""REPRO_CPU (issue 31): levels read from the CPU, the pins a portable run gets, the refusal
of a level above the CPU, and what the run record says. Fast: no framework is imported."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from helpers import runtime_tmp
from reprobuild_entrypoint import cpulevel, envplan, runrecord
from reprobuild_entrypoint.settings import SettingsError, from_environ

V2 = frozenset({"cx16", "lahf_lm", "popcnt", "pni", "sse4_1", "sse4_2", "ssse3"})
V3 = V2 | {"avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave"}
V4 = V3 | {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}


@pytest.mark.parametrize(
    ("flags", "level"),
    [
        (frozenset({"sse", "sse2"}), "x86-64"),
        (V2 - {"popcnt"}, "x86-64"),
        (V2, "x86-64-v2"),
        (V3 - {"fma"}, "x86-64-v2"),
        (V3, "x86-64-v3"),
        (V4, "x86-64-v4"),
        (V2 | {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}, "x86-64-v2"),
    ],
)
def test_level_of_needs_every_flag_of_every_level_below(flags: frozenset[str], level: str) -> None:
    assert cpulevel.level_of(flags) == level


def test_cpuinfo_flags_are_read_from_the_first_processor() -> None:
    text = "processor\t: 0\nflags\t\t: fpu sse4_2 avx2\n\nprocessor\t: 1\nflags\t\t: fpu\n"
    assert cpulevel.parse_cpuinfo_flags(text) == {"fpu", "sse4_2", "avx2"}
    assert cpulevel.parse_cpuinfo_flags("") == frozenset()


def _regs(
    leaf1_ecx: int, leaf7_ebx: int = 0, ext_ecx: int = 0
) -> dict[int, tuple[int, int, int, int]]:
    return {1: (0, 0, leaf1_ecx, 0), 7: (0, leaf7_ebx, 0, 0), 0x80000001: (0, 0, ext_ecx, 0)}


# Haswell's bits: SSE3 0, SSSE3 9, FMA 12, CX16 13, SSE4.1 19, SSE4.2 20, MOVBE 22,
# POPCNT 23, XSAVE 26, OSXSAVE 27, AVX 28, F16C 29; leaf 7: BMI1 3, AVX2 5, BMI2 8;
# 0x80000001: LAHF 0, ABM 5.
HASWELL_ECX = sum(1 << b for b in (0, 9, 12, 13, 19, 20, 22, 23, 26, 27, 28, 29))
HASWELL_EBX7 = sum(1 << b for b in (3, 5, 8))
AVX512_EBX7 = sum(1 << b for b in (16, 17, 28, 30, 31))


def test_cpuid_bits_give_the_level_only_with_the_os_enabling_the_registers() -> None:
    regs = _regs(HASWELL_ECX, HASWELL_EBX7, 0b100001)
    assert cpulevel.level_of(cpulevel.flags_from_cpuid(regs, 0x7)) == "x86-64-v3"
    # The OS does not save the AVX registers (XCR0 without bits 1, 2): AVX cannot be used.
    assert cpulevel.level_of(cpulevel.flags_from_cpuid(regs, 0x3)) == "x86-64-v2"
    assert cpulevel.level_of(cpulevel.flags_from_cpuid(regs, None)) == "x86-64-v2"
    wide = _regs(HASWELL_ECX, HASWELL_EBX7 | AVX512_EBX7, 0b100001)
    assert cpulevel.level_of(cpulevel.flags_from_cpuid(wide, 0xE7)) == "x86-64-v4"
    assert cpulevel.level_of(cpulevel.flags_from_cpuid(wide, 0x7)) == "x86-64-v3"


def test_this_cpu_is_read_with_cpuid_and_agrees_with_proc_cpuinfo() -> None:
    found = cpulevel.detect()
    assert found["source"] == "cpuid"
    with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
        listed = cpulevel.parse_cpuinfo_flags(fh.read())
    assert found["level"] == cpulevel.level_of(listed)
    assert found["vendor"] in ("GenuineIntel", "AuthenticAMD", "HygonGenuine")


def test_a_level_above_the_cpu_is_one_line_naming_both() -> None:
    found: dict[str, object] = {"level": "x86-64-v2", "flags": sorted(V2), "source": "cpuid"}
    line = cpulevel.check("x86-64-v3", found)
    assert line is not None and "\n" not in line
    assert "x86-64-v3" in line and "this CPU is x86-64-v2" in line and "avx" in line
    assert cpulevel.check("x86-64-v2", found) is None
    assert cpulevel.check("x86-64-v3", {"level": "x86-64-v4", "flags": []}) is None
    assert cpulevel.check("x86-64-v3", {"level": None, "flags": []}) is None  # unknown: go on
    arm = cpulevel.check("x86-64-v2", {"level": None, "flags": [], "machine": "aarch64"})
    assert arm == (
        "this run is pinned to CPU level x86-64-v2 (REPRO_CPU), a level of x86_64, but this "
        "machine is aarch64: use REPRO_CPU=portable (armv8-a) or REPRO_CPU=native"
    )


@pytest.mark.parametrize(
    ("environ", "cpu", "source"),
    [
        ({}, "native", "default"),
        ({"REPRO_CPU": "Portable"}, "portable", "REPRO_CPU"),
        ({"REPROBUILD_IMAGE_CPU": "x86-64-v3"}, "x86-64-v3", "REPROBUILD_IMAGE_CPU"),
        ({"REPROBUILD_IMAGE_CPU": "portable", "REPRO_CPU": "native"}, "native", "REPRO_CPU"),
        ({"REPRO_CPU": " "}, "native", "default"),
    ],
)
def test_repro_cpu_wins_over_the_image_default(
    environ: dict[str, str], cpu: str, source: str
) -> None:
    settings = from_environ(environ)
    assert (settings.cpu, settings.cpu_source) == (cpu, source)


@pytest.mark.parametrize("name", ["REPRO_CPU", "REPROBUILD_IMAGE_CPU"])
def test_a_bad_cpu_mode_names_the_value_and_the_allowed_ones(name: str) -> None:
    with pytest.raises(SettingsError) as caught:
        from_environ({name: "avx512"})
    message = str(caught.value)
    assert f"{name}='avx512'" in message
    assert "native, portable, x86-64-v2, x86-64-v3, armv8-a" in message


def test_portable_pins_every_library_and_native_pins_none() -> None:
    native = envplan.image_env(0, "strict", "cpu")
    portable = envplan.image_env(0, "strict", "cpu", cpu="portable")
    assert portable == envplan.image_env(0, "strict", "cpu", cpu="x86-64-v2")
    assert {k: v for k, v in portable.items() if native.get(k) != v} == {
        "ATEN_CPU_CAPABILITY": "default",
        "ONEDNN_MAX_CPU_ISA": "SSE41",
        "MKL_CBWR": "COMPATIBLE",
        "NPY_DISABLE_CPU_FEATURES": "X86_V3 X86_V4 AVX512_ICL AVX512_SPR",
        "OPENBLAS_CORETYPE": "Nehalem",
    }
    v3 = envplan.image_env(0, "strict", "cpu", cpu="x86-64-v3")
    assert v3["ATEN_CPU_CAPABILITY"] == "avx2" and v3["OPENBLAS_CORETYPE"] == "Haswell"
    assert envplan.image_env(0, "off", "cpu", cpu="portable") == {}
    with pytest.raises(ValueError, match="CPU mode 'sse'"):
        envplan.image_env(0, "strict", "cpu", cpu="sse")


def test_a_native_run_of_a_portable_image_loses_the_pins_but_keeps_the_users() -> None:
    image = {
        "REPROBUILD_IMAGE_CPU": "portable",
        **envplan.image_env(0, "strict", "cpu", cpu="portable"),
    }
    plan = envplan.plan(
        {**image, "REPRO_CPU": "native"}, from_environ(image | {"REPRO_CPU": "native"})
    )
    assert set(plan.remove) == {
        "ATEN_CPU_CAPABILITY",
        "NPY_DISABLE_CPU_FEATURES",
        "ONEDNN_MAX_CPU_ISA",
        "OPENBLAS_CORETYPE",
    }
    assert plan.set["MKL_CBWR"] == "AUTO,STRICT"
    mine = {**image, "REPRO_CPU": "native", "OPENBLAS_CORETYPE": "Zen"}
    plan = envplan.plan(mine, from_environ(mine))
    assert plan.user_set == {"OPENBLAS_CORETYPE": "Zen"}
    # And planning again on the result changes nothing.
    environ = dict(image)
    settings = from_environ({**image, "REPRO_CPU": "native"})
    envplan.apply(envplan.plan(environ, settings), environ)
    assert "ATEN_CPU_CAPABILITY" not in environ
    again = dict(environ)
    envplan.apply(envplan.plan(again, settings), again)
    assert again == environ


def test_the_run_record_says_the_mode_level_and_pins() -> None:
    settings = from_environ({"REPRO_CPU": "portable"})
    section = runrecord.cpu_section(settings, {"requested": "portable", "refused": None})
    assert section["mode"] == "portable" and section["level"] == "x86-64-v2"
    assert section["pins"]["OPENBLAS_CORETYPE"] == "Nehalem"
    assert runrecord.cpu_section(from_environ({}))["mode"] == "native"
    off = from_environ({"REPRO_CPU": "portable", "REPRO_DETERMINISM": "off"})
    assert runrecord.cpu_section(off)["mode"] == "native"


def _entrypoint(env: dict[str, str], *command: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("REPRO_", "REPROBUILD_"))}
    return subprocess.run(
        [sys.executable, "-m", "reprobuild_entrypoint", "--", *command],
        env={**base, **runtime_tmp(), **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_entrypoint_sets_the_pins_and_records_them(tmp_path: pytest.TempPathFactory) -> None:
    show = "import os; print(os.environ['ATEN_CPU_CAPABILITY'], os.environ['MKL_CBWR'])"
    result = _entrypoint(
        {"REPRO_CPU": "portable", "REPRO_RUN_DIR": str(tmp_path)}, sys.executable, "-c", show
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["default", "COMPATIBLE"]
    assert ", cpu portable (x86-64-v2), " in result.stderr
    (record,) = tmp_path.glob("run-*.json")  # type: ignore[attr-defined]
    import json

    data = json.loads(record.read_text())
    assert data["cpu"]["mode"] == "portable" and data["cpu"]["source"] == "REPRO_CPU"
    assert data["host"]["cpu"]["level"] == cpulevel.detect()["level"]
    assert data["host"]["cpu"]["flags_source"] == "cpuid"


def test_a_bad_repro_cpu_stops_the_entrypoint_with_one_line() -> None:
    result = _entrypoint({"REPRO_CPU": "fast"}, "true")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "reprobuild: REPRO_CPU='fast' is not a CPU mode: use one of native, portable, "
        "x86-64-v2, x86-64-v3, armv8-a"
    ]


def test_warn_mode_below_the_level_runs_native(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        cpulevel, "detect", lambda: {"level": "x86-64-v2", "flags": sorted(V2), "source": "t"}
    )
    settings = from_environ({"REPRO_CPU": "x86-64-v3", "REPRO_DETERMINISM": "warn"})
    refusal, found = cpulevel.resolve(settings)
    assert refusal is not None and found is not None
    cpulevel.fall_back(settings, refusal)
    assert settings.cpu == "native"
    assert settings.cpu_source == "native instead of x86-64-v3 (REPRO_CPU): CPU below it"
    assert "ATEN_CPU_CAPABILITY" not in envplan.wanted_env(settings)
    # A native run reads nothing.
    assert cpulevel.resolve(from_environ({})) == (None, None)
