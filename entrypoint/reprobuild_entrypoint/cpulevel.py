"""The x86-64 level of the CPU a run is on, and what a portable run pins each library to.

Issue 31 ("same bits on another machine"): every CPU library dispatches by instruction set,
so the same program gives other bits on another CPU. A portable run pins each library to one
level, before the library loads (environment variables, set by :mod:`envplan`), and the import
hook switches what has no variable (:mod:`frameworks`). Measured on torch 2.13.0+cpu, MKL
2024.2, oneDNN 3.12, NumPy 2.4.6 (docs/determinism.md, "Across CPUs"):

- ``x86-64-v2`` (``REPRO_CPU=portable``, every x86-64 CPU NumPy 2.4 and torch wheels run on:
  SSE4.2 and POPCNT): ATen's DEFAULT kernels, oneDNN capped at SSE4.1 and then switched off in
  torch, oneMKL's ``COMPATIBLE`` branch, NumPy without its X86_V3 and higher dispatch, OpenBLAS's
  Nehalem kernels.
- ``x86-64-v3`` (AVX2, FMA): the same at the AVX2 level; only for the CPUs that have it.

A pin above the CPU kills the process with SIGILL (ATen, OpenBLAS), so the runtime compares
the level with the CPU first (:func:`check`). The CPU is read with the ``cpuid`` instruction
itself (a few bytes of machine code run through ctypes), because that is what the libraries
read and what an emulator (``qemu-x86_64 -cpu Nehalem``) answers for the CPU it emulates;
``/proc/cpuinfo`` (the host's, even under qemu-user) is the fallback where code cannot be
mapped executable. Standard library only; ctypes and mmap are imported only when asked.

On aarch64 (issue 53) there is one level, ``armv8-a``: Advanced SIMD (NEON), which every
aarch64 CPU has. A portable run pins ATen, oneDNN, NumPy and OpenBLAS to it
(:data:`~reprobuild_entrypoint.envplan.PINS`). The features the kernels dispatch on (half
precision, dot product, SVE and its vector length, BF16, I8MM) are read with
``getauxval(AT_HWCAP/AT_HWCAP2)`` and ``prctl(PR_SVE_GET_VL)``, which is what the libraries read
and what qemu-user answers for the CPU it emulates (``QEMU_CPU``); ``/proc/cpuinfo`` under
qemu-user is the host's x86 file, so its ``Features`` line is only the fallback.
"""

from __future__ import annotations

import platform
from collections.abc import Mapping

from reprobuild_entrypoint.envplan import AARCH64_LEVELS, level_name, normal_machine, this_machine

TYPE_CHECKING = False
if TYPE_CHECKING:
    from reprobuild_entrypoint.settings import Settings

LEVELS = ("x86-64", "x86-64-v2", "x86-64-v3", "x86-64-v4")
"""The x86-64 micro-architecture levels (psABI), lowest first."""

_LEVEL_FLAGS = {
    "x86-64-v2": ("cx16", "lahf_lm", "popcnt", "pni", "sse4_1", "sse4_2", "ssse3"),
    "x86-64-v3": ("avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave"),
    "x86-64-v4": ("avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"),
}
"""/proc/cpuinfo flag names each level adds to the one below it."""


def level_of(flags: set[str] | frozenset[str]) -> str:
    """The highest level all of whose flags (and those of the levels below) are in ``flags``."""
    found = LEVELS[0]
    for level in LEVELS[1:]:
        if not all(flag in flags for flag in _LEVEL_FLAGS[level]):
            break
        found = level
    return found


def missing(level: str, flags: set[str] | frozenset[str]) -> list[str]:
    """The flags of ``level`` (and the levels below it) that ``flags`` lacks."""
    out: list[str] = []
    for name in LEVELS[1 : LEVELS.index(level) + 1]:
        out.extend(flag for flag in _LEVEL_FLAGS[name] if flag not in flags)
    return out


def parse_cpuinfo_flags(text: str) -> frozenset[str]:
    """The ``flags`` of the first processor in /proc/cpuinfo text."""
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == "flags":
            return frozenset(value.split())
    return frozenset()


# cpuid(leaf, subleaf, uint32_t out[4]) and xgetbv(0), x86-64 System V calling convention:
#   push rbx; mov eax,edi; mov ecx,esi; mov r8,rdx; cpuid;
#   mov [r8],eax; mov [r8+4],ebx; mov [r8+8],ecx; mov [r8+12],edx; pop rbx; ret
_CPUID_CODE = bytes.fromhex("5389f889f14989d00fa241890041895804418948084189500c5bc3")
#   xor ecx,ecx; xgetbv; shl rdx,32; or rax,rdx; ret
_XGETBV_CODE = bytes.fromhex("31c90f01d048c1e2204809d0c3")

# (leaf, register index in eax/ebx/ecx/edx, bit) -> /proc/cpuinfo name
_CPUID_BITS = {
    (1, 2, 0): "pni",
    (1, 2, 9): "ssse3",
    (1, 2, 12): "fma",
    (1, 2, 13): "cx16",
    (1, 2, 19): "sse4_1",
    (1, 2, 20): "sse4_2",
    (1, 2, 22): "movbe",
    (1, 2, 23): "popcnt",
    (1, 2, 26): "xsave",
    (1, 2, 29): "f16c",
    (1, 3, 25): "sse",
    (1, 3, 26): "sse2",
    (7, 1, 3): "bmi1",
    (7, 1, 8): "bmi2",
    (7, 1, 16): "avx512f",
    (7, 1, 17): "avx512dq",
    (7, 1, 28): "avx512cd",
    (7, 1, 30): "avx512bw",
    (7, 1, 31): "avx512vl",
    (0x80000001, 2, 0): "lahf_lm",
    (0x80000001, 2, 5): "abm",
}
_OS_AVX = (1, 2, 28)  # avx: counts only with OS support (OSXSAVE and XCR0 bits 1, 2)
_OS_AVX2 = (7, 1, 5)
_XCR0_AVX = 0x6
_XCR0_AVX512 = 0xE0


def flags_from_cpuid(
    regs: dict[int, tuple[int, int, int, int]], xcr0: int | None
) -> frozenset[str]:
    """/proc/cpuinfo-style flag names from the registers of leaves 1, 7 and 0x80000001 and
    from XCR0 (None: the OS does not enable XSAVE). Pure, for tests."""
    flags = set()
    for (leaf, reg, bit), name in _CPUID_BITS.items():
        if leaf in regs and regs[leaf][reg] >> bit & 1:
            flags.add(name)
    os_avx = xcr0 is not None and xcr0 & _XCR0_AVX == _XCR0_AVX
    if os_avx and 1 in regs and regs[1][_OS_AVX[1]] >> _OS_AVX[2] & 1:
        flags.add("avx")
        if 7 in regs and regs[7][_OS_AVX2[1]] >> _OS_AVX2[2] & 1:
            flags.add("avx2")
    if xcr0 is None or xcr0 & _XCR0_AVX512 != _XCR0_AVX512 or "avx" not in flags:
        flags -= set(_LEVEL_FLAGS["x86-64-v4"])
    return frozenset(flags)


def _read_cpuid() -> tuple[frozenset[str], str]:
    """Flags and vendor from the ``cpuid`` instruction. Raises OSError (or ValueError) where
    executable memory cannot be had."""
    import ctypes
    import mmap

    page = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    page.write(_CPUID_CODE)
    page.seek(64)
    page.write(_XGETBV_CODE)
    address = ctypes.addressof(ctypes.c_char.from_buffer(page))
    out = (ctypes.c_uint32 * 4)()
    function = ctypes.CFUNCTYPE(None, ctypes.c_uint32, ctypes.c_uint32, ctypes.c_void_p)(address)

    def call(leaf: int) -> tuple[int, int, int, int]:
        function(leaf, 0, ctypes.addressof(out))
        return (out[0], out[1], out[2], out[3])

    highest = call(0)
    vendor = b"".join(
        value.to_bytes(4, "little") for value in (highest[1], highest[3], highest[2])
    ).decode("ascii", "replace")
    regs = {1: call(1)}
    if highest[0] >= 7:
        regs[7] = call(7)
    if call(0x80000000)[0] >= 0x80000001:
        regs[0x80000001] = call(0x80000001)
    xcr0 = None
    if regs[1][2] >> 27 & 1:  # OSXSAVE: xgetbv is allowed
        xcr0 = int(ctypes.CFUNCTYPE(ctypes.c_uint64)(address + 64)())
    # The page stays mapped (one page, once per process): ctypes still holds an export of it.
    _PAGES.append(page)
    return flags_from_cpuid(regs, xcr0), vendor


_PAGES: list[object] = []


CPUINFO = "/proc/cpuinfo"
X86_64 = ("x86_64", "amd64")
AARCH64 = ("aarch64", "arm64")

AT_HWCAP = 16
AT_HWCAP2 = 26
PR_SVE_GET_VL = 51
_SVE_VL_LEN_MASK = 0xFFFF

# Linux arm64 uapi/asm/hwcap.h: bit -> the feature's /proc/cpuinfo name; only the features
# ATen, oneDNN, OpenBLAS and NumPy dispatch on.
_HWCAP_BITS = {
    0: "fp",
    1: "asimd",
    9: "fphp",
    10: "asimdhp",
    12: "asimdrdm",
    20: "asimddp",
    22: "sve",
    23: "asimdfhm",
}
_HWCAP2_BITS = {
    1: "sve2",
    9: "svei8mm",
    12: "svebf16",
    13: "i8mm",
    14: "bf16",
    23: "sme",
}
AARCH64_FEATURES = frozenset(_HWCAP_BITS.values()) | frozenset(_HWCAP2_BITS.values())
"""The aarch64 features a run record lists (:func:`detect`)."""

_AARCH64_LEVEL_FEATURES = {"armv8-a": ("fp", "asimd")}
"""What each aarch64 level needs: ``armv8-a`` is floating point and Advanced SIMD (NEON),
mandatory in every Armv8-A CPU that runs Linux."""


def features_from_hwcap(hwcap: int, hwcap2: int) -> frozenset[str]:
    """/proc/cpuinfo-style feature names from ``getauxval(AT_HWCAP)`` and ``(AT_HWCAP2)``.
    Pure, for tests."""
    names = {name for bit, name in _HWCAP_BITS.items() if hwcap >> bit & 1}
    names.update(name for bit, name in _HWCAP2_BITS.items() if hwcap2 >> bit & 1)
    return frozenset(names)


def parse_cpuinfo_features(text: str) -> frozenset[str]:
    """The ``Features`` of the first processor in an aarch64 /proc/cpuinfo text (empty for an
    x86 file, which is what qemu-user shows)."""
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == "Features":
            return frozenset(value.split())
    return frozenset()


def sve_vector_bits(prctl_result: int) -> int | None:
    """The SVE vector length in bits from ``prctl(PR_SVE_GET_VL)``; None when it failed (no
    SVE: -1). The low 16 bits are the length in bytes, the rest flags."""
    if prctl_result < 0:
        return None
    return (prctl_result & _SVE_VL_LEN_MASK) * 8


def aarch64_level_of(features: set[str] | frozenset[str]) -> str | None:
    """``armv8-a`` when ``features`` has floating point and Advanced SIMD, else None."""
    found = None
    for level in AARCH64_LEVELS:
        if not all(name in features for name in _AARCH64_LEVEL_FEATURES[level]):
            break
        found = level
    return found


def _read_hwcap() -> tuple[int, int, int]:
    """``getauxval(AT_HWCAP)``, ``getauxval(AT_HWCAP2)`` and ``prctl(PR_SVE_GET_VL)`` through
    ctypes. Raises OSError (or AttributeError) where libc has no such function."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    getauxval = libc.getauxval
    getauxval.restype = ctypes.c_ulong
    getauxval.argtypes = [ctypes.c_ulong]
    prctl = libc.prctl
    prctl.restype = ctypes.c_int
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    hwcap = int(getauxval(AT_HWCAP))
    hwcap2 = int(getauxval(AT_HWCAP2))
    sve = int(prctl(PR_SVE_GET_VL, 0, 0, 0, 0)) if hwcap >> 22 & 1 else -1
    return hwcap, hwcap2, sve


def detect_aarch64(cpuinfo: str = CPUINFO) -> dict[str, object]:
    """:func:`detect` on aarch64: ``{"level", "flags", "source", "vendor", "machine",
    "sve_vector_bits"}``; ``flags`` are the :data:`AARCH64_FEATURES` the CPU has."""
    sve_bits: int | None = None
    try:
        hwcap, hwcap2, sve = _read_hwcap()
        features = features_from_hwcap(hwcap, hwcap2)
        sve_bits = sve_vector_bits(sve)
        source = "getauxval"
    except (OSError, AttributeError, TypeError, ValueError) as exc:
        try:
            with open(cpuinfo, "rb") as fh:
                features = parse_cpuinfo_features(fh.read().decode("utf-8", "replace"))
        except OSError:
            features = frozenset()
        source = f"{cpuinfo} (getauxval unavailable: {type(exc).__name__})"
        if not features:
            source = "unreadable"
    return {
        "level": aarch64_level_of(features),
        "flags": sorted(features & AARCH64_FEATURES),
        "source": source,
        "vendor": None,
        "machine": "aarch64",
        "sve_vector_bits": sve_bits,
    }


def detect(cpuinfo: str = CPUINFO) -> dict[str, object]:
    """The CPU's flags relevant to the levels, its level and where they were read:
    ``{"level", "flags", "source", "vendor"}``. Never raises; ``level`` is None off x86-64 or
    when nothing could be read. On aarch64 (:func:`detect_aarch64`) the level is ``armv8-a`` and
    ``machine`` and ``sve_vector_bits`` are added."""
    machine = platform.machine().lower()
    if machine in AARCH64:
        return detect_aarch64(cpuinfo)
    if machine not in X86_64:
        return {
            "level": None,
            "flags": [],
            "source": f"not x86-64 ({machine})",
            "vendor": None,
            "machine": machine,
        }
    try:
        flags, vendor = _read_cpuid()
        source: str = "cpuid"
    except (OSError, ValueError, AttributeError, TypeError) as exc:
        vendor = None
        try:
            with open(cpuinfo, "rb") as fh:
                flags = parse_cpuinfo_flags(fh.read().decode("utf-8", "replace"))
            source = f"{cpuinfo} (cpuid unavailable: {type(exc).__name__})"
        except OSError:
            return {"level": None, "flags": [], "source": "unreadable", "vendor": None}
    known = {flag for names in _LEVEL_FLAGS.values() for flag in names}
    return {
        "level": level_of(flags),
        "flags": sorted(flags & known),
        "source": source,
        "vendor": vendor,
    }


def check(level: str, found: Mapping[str, object]) -> str | None:
    """None when a CPU with ``found`` (from :func:`detect`) runs code of ``level``; else the one
    line that says why not, naming both. A level of the other machine (``x86-64-v2`` on aarch64,
    ``armv8-a`` on x86-64) is refused whatever the CPU."""
    have = found.get("level")
    machine = found.get("machine")
    if not isinstance(machine, str):
        machine = "x86_64"  # detect() names the machine everywhere but on x86-64
    machine = normal_machine(machine)
    level_machine = "aarch64" if level in AARCH64_LEVELS else "x86_64"
    if machine != level_machine:
        baseline = level_name("portable", machine) if machine in ("x86_64", "aarch64") else None
        this = f"{machine} ({have})" if isinstance(have, str) else machine
        instead = f"REPRO_CPU=portable ({baseline}) or " if baseline else ""
        return (
            f"this run is pinned to CPU level {level} (REPRO_CPU), a level of {level_machine}, "
            f"but this machine is {this}: use {instead}REPRO_CPU=native"
        )
    if level_machine == "aarch64":
        return None  # one level, which every aarch64 CPU has
    if not isinstance(have, str) or have not in LEVELS:
        return None  # unknown: the libraries' own checks decide
    if LEVELS.index(have) >= LEVELS.index(level):
        return None
    flags = found.get("flags")
    lacks = missing(level, frozenset(flags) if isinstance(flags, list) else frozenset())
    return (
        f"this run is pinned to CPU level {level} (REPRO_CPU), but this CPU is {have} "
        f"(no {', '.join(lacks[:4])}{', ...' if len(lacks) > 4 else ''}): the pinned libraries "
        "would die with SIGILL; use REPRO_CPU=portable (x86-64-v2) or REPRO_CPU=native"
    )


def resolve(settings: Settings) -> tuple[str | None, dict[str, object] | None]:
    """For a portable run: ``(refusal, found)``, the line of :func:`check` (None when the CPU
    runs the pinned level) and what :func:`detect` read. A native run reads nothing:
    ``(None, None)``."""
    level = level_name(settings.cpu, this_machine())
    if level is None or settings.mode == "off":
        return None, None
    found = detect()
    return check(level, found), found


def fall_back(settings: Settings, refusal: str) -> None:
    """Warn mode below the level: run native instead (a pin above the CPU is SIGILL)."""
    settings.cpu_source = f"native instead of {settings.cpu} ({settings.cpu_source}): CPU below it"
    settings.cpu = "native"
