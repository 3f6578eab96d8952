"""REPRO_CPU on aarch64 (issue 53): the features read from getauxval, the one level
``armv8-a``, the pins a portable run gets there, the refusal of a level of the other machine,
and an arm64 image's baked ENV. Pure: the machine is faked; the hwcap values are the ones
qemu-aarch64 answered (docs/explanation/determinism.md, "aarch64")."""

from __future__ import annotations

import platform
import types
from pathlib import Path
from typing import Any

import pytest

from reprobuild_entrypoint import __main__ as entry
from reprobuild_entrypoint import cpulevel, envplan, frameworks, runrecord
from reprobuild_entrypoint.settings import from_environ

# getauxval(AT_HWCAP), (AT_HWCAP2) under qemu-aarch64 7.2 with QEMU_CPU=cortex-a57 and =max
CORTEX_A57 = (0x8FB, 0x0)
QEMU_MAX = (0xECFFFFFB, 0x7F877FFF)

AARCH64_CPUINFO = (
    "processor\t: 0\nBogoMIPS\t: 50.00\n"
    "Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimddp\n"
    "CPU implementer\t: 0x41\nCPU part\t: 0xd0c\n"
)
X86_CPUINFO = "processor\t: 0\nvendor_id\t: GenuineIntel\nflags\t\t: fpu sse sse2 avx2\n"


def test_hwcap_bits_name_the_features_the_kernels_dispatch_on() -> None:
    assert cpulevel.features_from_hwcap(*CORTEX_A57) == {"fp", "asimd"}
    assert cpulevel.features_from_hwcap(*QEMU_MAX) == {
        "fp",
        "asimd",
        "fphp",
        "asimdhp",
        "asimdrdm",
        "asimddp",
        "sve",
        "asimdfhm",
        "sve2",
        "svei8mm",
        "svebf16",
        "i8mm",
        "bf16",
        "sme",
    }
    assert cpulevel.features_from_hwcap(1 << 22, 1 << 23) == {"sve", "sme"}
    assert cpulevel.features_from_hwcap(0, 0) == frozenset()


def test_the_cpuinfo_fallback_reads_features_and_nothing_from_an_x86_file() -> None:
    assert cpulevel.parse_cpuinfo_features(AARCH64_CPUINFO) >= {"fp", "asimd", "asimddp"}
    # qemu-user shows the host's /proc/cpuinfo: an x86 file has no Features line
    assert cpulevel.parse_cpuinfo_features(X86_CPUINFO) == frozenset()


@pytest.mark.parametrize(
    ("result", "bits"), [(-1, None), (64, 512), (32, 256), (0x10000 | 16, 128)]
)
def test_the_sve_vector_length_is_the_low_16_bits_in_bytes(result: int, bits: int | None) -> None:
    assert cpulevel.sve_vector_bits(result) == bits


def test_armv8_a_needs_floating_point_and_advanced_simd() -> None:
    assert cpulevel.aarch64_level_of(frozenset({"fp", "asimd"})) == "armv8-a"
    assert cpulevel.aarch64_level_of(frozenset({"fp"})) is None
    assert cpulevel.aarch64_level_of(frozenset()) is None


def _on_aarch64(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(platform, "machine", lambda: "aarch64")  # what detect() reads
    for module in (envplan, cpulevel):  # what the plan reads (os.uname, as the hook does)
        monkeypatch.setattr(module, "this_machine", lambda: "aarch64")


def test_detect_on_aarch64_reads_getauxval(monkeypatch: pytest.MonkeyPatch) -> None:
    _on_aarch64(monkeypatch)
    monkeypatch.setattr(cpulevel, "_read_hwcap", lambda: (*QEMU_MAX, 64))
    found = cpulevel.detect()
    assert found["level"] == "armv8-a" and found["source"] == "getauxval"
    assert found["machine"] == "aarch64" and found["sve_vector_bits"] == 512
    flags = found["flags"]
    assert isinstance(flags, list) and {"sve", "sve2", "bf16", "i8mm"} <= set(flags)
    monkeypatch.setattr(cpulevel, "_read_hwcap", lambda: (*CORTEX_A57, -1))
    found = cpulevel.detect()
    assert (found["flags"], found["sve_vector_bits"]) == (["asimd", "fp"], None)


def test_detect_falls_back_to_cpuinfo_and_says_so(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _on_aarch64(monkeypatch)

    def no_libc() -> tuple[int, int, int]:
        raise OSError("no libc")

    monkeypatch.setattr(cpulevel, "_read_hwcap", no_libc)
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(AARCH64_CPUINFO)
    found = cpulevel.detect(str(cpuinfo))
    assert found["level"] == "armv8-a"
    assert found["source"] == f"{cpuinfo} (getauxval unavailable: OSError)"
    cpuinfo.write_text(X86_CPUINFO)
    found = cpulevel.detect(str(cpuinfo))
    assert (found["level"], found["source"], found["flags"]) == (None, "unreadable", [])


def test_portable_is_the_machines_baseline() -> None:
    assert envplan.level_name("portable") == "x86-64-v2"  # the default machine: x86-64
    assert envplan.level_name("portable", "x86_64") == "x86-64-v2"
    assert envplan.level_name("portable", "aarch64") == "armv8-a"
    assert envplan.level_name("portable", "arm64") == "armv8-a"
    assert envplan.level_name("x86-64-v3", "aarch64") == "x86-64-v3"  # check() refuses it
    assert envplan.level_name("native", "aarch64") is None


def test_an_arm64_image_bakes_the_aarch64_pins_and_an_amd64_image_the_x86_ones() -> None:
    native = envplan.image_env(0, "strict", "cpu", machine="aarch64")
    assert native == envplan.image_env(0, "strict", "cpu")
    arm = envplan.image_env(0, "strict", "cpu", cpu="portable", machine="aarch64")
    assert arm == envplan.image_env(0, "strict", "cpu", cpu="armv8-a")
    assert {k: v for k, v in arm.items() if native.get(k) != v} == {
        "ATEN_CPU_CAPABILITY": "default",
        "ONEDNN_MAX_CPU_ISA": "ADVANCED_SIMD",
        "NPY_DISABLE_CPU_FEATURES": "ASIMDHP ASIMDDP ASIMDFHM SVE",
        "OPENBLAS_CORETYPE": "ARMV8",
    }
    amd = envplan.image_env(0, "strict", "cpu", cpu="portable", machine="amd64")
    assert amd == envplan.image_env(0, "strict", "cpu", cpu="portable")
    assert amd["OPENBLAS_CORETYPE"] == "Nehalem" and amd["MKL_CBWR"] == "COMPATIBLE"


def test_a_portable_run_on_aarch64_is_allowed_and_a_level_of_the_other_machine_refused() -> None:
    arm: dict[str, object] = {"level": "armv8-a", "flags": ["asimd", "fp"], "machine": "aarch64"}
    assert cpulevel.check("armv8-a", arm) is None
    assert cpulevel.check("armv8-a", {"level": None, "flags": [], "machine": "aarch64"}) is None
    line = cpulevel.check("x86-64-v3", arm)
    assert line == (
        "this run is pinned to CPU level x86-64-v3 (REPRO_CPU), a level of x86_64, but this "
        "machine is aarch64 (armv8-a): use REPRO_CPU=portable (armv8-a) or REPRO_CPU=native"
    )
    x86: dict[str, object] = {"level": "x86-64-v3", "flags": [], "source": "cpuid"}
    assert cpulevel.check("armv8-a", x86) == (
        "this run is pinned to CPU level armv8-a (REPRO_CPU), a level of aarch64, but this "
        "machine is x86_64 (x86-64-v3): use REPRO_CPU=portable (x86-64-v2) or REPRO_CPU=native"
    )
    ppc = cpulevel.check("armv8-a", {"level": None, "flags": [], "machine": "ppc64le"})
    assert ppc is not None and ppc.endswith("but this machine is ppc64le: use REPRO_CPU=native")


def test_resolve_on_aarch64_pins_armv8_a(monkeypatch: pytest.MonkeyPatch) -> None:
    _on_aarch64(monkeypatch)
    monkeypatch.setattr(cpulevel, "_read_hwcap", lambda: (*CORTEX_A57, -1))
    refusal, found = cpulevel.resolve(from_environ({"REPRO_CPU": "portable"}))
    assert refusal is None and found is not None and found["level"] == "armv8-a"
    refusal, _ = cpulevel.resolve(from_environ({"REPRO_CPU": "x86-64-v2"}))
    assert refusal is not None and "a level of x86_64, but this machine is aarch64" in refusal


def test_an_arm64_images_baked_pins_are_ours_at_run_time(monkeypatch: pytest.MonkeyPatch) -> None:
    _on_aarch64(monkeypatch)
    baked = envplan.image_env(0, "strict", "cpu", cpu="portable", machine="aarch64")
    environ = {**baked, "REPROBUILD_IMAGE_CPU": "portable"}
    settings = from_environ(environ)
    plan = envplan.plan(environ, settings)
    assert plan.user_set == {} and plan.remove == ()
    assert plan.set["ONEDNN_MAX_CPU_ISA"] == "ADVANCED_SIMD"
    native = from_environ({**environ, "REPRO_CPU": "native"})
    assert set(envplan.plan(environ, native).remove) == {
        "ATEN_CPU_CAPABILITY",
        "ONEDNN_MAX_CPU_ISA",
        "NPY_DISABLE_CPU_FEATURES",
        "OPENBLAS_CORETYPE",
    }
    section = runrecord.cpu_section(settings)
    assert section["level"] == "armv8-a" and section["pins"]["OPENBLAS_CORETYPE"] == "ARMV8"


def test_the_record_lists_the_aarch64_features_and_sve_length() -> None:
    cpu: dict[str, Any] = {}
    found: dict[str, object] = {
        "level": "armv8-a",
        "flags": ["asimd", "fp", "sve"],
        "source": "getauxval",
        "vendor": None,
        "machine": "aarch64",
        "sve_vector_bits": 256,
    }
    entry._record_cpu(cpu, found)
    assert cpu == {
        "level": "armv8-a",
        "vendor": None,
        "flags_source": "getauxval",
        "features": ["asimd", "fp", "sve"],
        "sve_vector_bits": 256,
    }
    x86: dict[str, Any] = {}
    entry._record_cpu(x86, {"level": "x86-64-v3", "flags": ["avx"], "source": "cpuid"})
    assert set(x86) == {"level", "vendor", "flags_source"}  # as before issue 53


def test_torch_on_armv8_a_runs_without_onednn(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(frameworks, "_exact_sqrt", lambda torch: "patched")
    torch = types.SimpleNamespace(backends=types.SimpleNamespace())
    torch.backends.mkldnn = types.SimpleNamespace(enabled=True)
    out = frameworks._torch_portable(torch, "armv8-a")  # type: ignore[arg-type]
    assert out["mkldnn_enabled"] is False and torch.backends.mkldnn.enabled is False
