"""``reprobuild diff`` names why two runs on different CPUs may give other bits (issue 31):
the pure cause function on record variants, then real run records written by the runtime
natively and emulated as another CPU by qemu-user."""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from helpers import DATA
from reprobuild.checks.runrecords import RunRecords, cpu_cause
from reprobuild.cli import main

RUN_HOST = DATA / "diff" / "run-host.json"


def record(
    mode: str = "native", level: str | None = None, host_level: str = "x86-64-v3", **cpu: Any
) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(RUN_HOST.read_text())
    data = copy.deepcopy(data)
    data["cpu"] = {"mode": mode, "level": level}
    data["host"]["cpu"].update({"level": host_level, "vendor": "AuthenticAMD", **cpu})
    return data


def frameworks(**dispatch: Any) -> dict[str, Any]:
    return {"kind": "reprobuild.frameworks", "cpu_dispatch": dispatch}


def cause(a: dict[str, Any], b: dict[str, Any], fa: Any = (), fb: Any = ()) -> str | None:
    return cpu_cause(RunRecords(a, tuple(fa)), RunRecords(b, tuple(fb)))


def test_native_runs_on_two_levels_are_expected_to_differ() -> None:
    line = cause(record(host_level="x86-64-v4"), record(host_level="x86-64-v3"))
    assert line == (
        "native mode on AVX-512 vs AVX2: expected to differ (each library dispatches by CPU); "
        "use portable (REPRO_CPU=portable) for the same bits on every x86-64 CPU"
    )


def test_native_runs_on_two_models_of_one_level_name_the_models() -> None:
    a = record(model="AMD EPYC 7B13")
    b = record(model="Intel(R) Xeon(R) CPU @ 2.20GHz", vendor="GenuineIntel")
    line = cause(a, b)
    assert line is not None
    assert line.startswith(
        "native mode on AMD EPYC 7B13 vs Intel(R) Xeon(R) CPU @ 2.20GHz (both AVX2): "
        "expected to differ"
    )


def test_an_emulated_cpu_is_named_beside_its_level() -> None:
    """verify --cpu records the CPU qemu emulated: the cause names it on any host (on an
    AVX-512 host the levels differ and only levels were named, so "Haswell" went missing)."""
    a = record(host_level="x86-64-v4")
    b = record(host_level="x86-64-v3")
    b["cpu"]["emulator"] = ["/usr/bin/qemu-x86_64-static", "-cpu", "Haswell"]
    assert cause(a, b) == (
        "native mode on AVX-512 vs AVX2 (Haswell, emulated by qemu): expected to differ (each "
        "library dispatches by CPU); use portable (REPRO_CPU=portable) for the same bits on "
        "every x86-64 CPU"
    )
    same_level = record(host_level="x86-64-v3", model="AMD EPYC 7B13")
    line = cause(same_level, b) or ""
    assert line.startswith("native mode on AMD EPYC 7B13 vs Haswell (emulated by qemu) (both")


def test_one_cpu_no_cause() -> None:
    assert cause(record(), record()) is None
    old = json.loads(RUN_HOST.read_text())  # a record from before issue 31: no cpu section
    assert cause(old, copy.deepcopy(old)) is None


def test_native_against_portable_is_expected_to_differ() -> None:
    line = cause(record(), record("portable", "x86-64-v2"))
    assert line == (
        "CPU mode native vs portable (x86-64-v2): expected to differ (they pin other kernels); "
        "run both in the same mode"
    )


def test_portable_on_two_cpus_expects_the_same_bits() -> None:
    a = record("portable", "x86-64-v2", host_level="x86-64-v4")
    b = record("portable", "x86-64-v2", host_level="x86-64-v2")
    same = {"aten_capability": "DEFAULT", "openblas_core": "Nehalem"}
    line = cause(a, b, [frameworks(**same)], [frameworks(**same)])
    assert line == (
        "portable mode (x86-64-v2) on AVX-512 vs SSE4.2: the same bits are expected; outputs "
        "that differ are a reprobuild bug worth reporting"
    )


def test_portable_with_a_framework_that_is_not_portable_expects_other_bits() -> None:
    """TensorFlow: the runtime records ``portable: false`` for it in portable mode (and says
    so at start-up); two CPUs are then expected to differ, not "a reprobuild bug"."""
    a = record("portable", "x86-64-v2", host_level="x86-64-v4")
    b = record("portable", "x86-64-v2", host_level="x86-64-v3")
    same = {"aten_capability": "DEFAULT"}
    tf = {**frameworks(**same), "framework_settings": {"tensorflow": {"portable": False}}}
    line = cause(a, b, [tf], [tf])
    assert line == (
        "portable mode (x86-64-v2) on AVX-512 vs AVX2, but tensorflow is not portable across "
        "CPUs (the run's start-up notice says why): expected to differ; the same CPU model "
        "gives the same bits"
    )
    assert cause(a, copy.deepcopy(a), [tf], [tf]) is None  # one CPU: the same bits
    torch_only = {**frameworks(**same), "framework_settings": {"torch": {"seed": 1}}}
    assert "bug worth reporting" in (cause(a, b, [torch_only], [torch_only]) or "")


def test_portable_with_a_library_that_dispatched_differently_names_it() -> None:
    a = record("portable", "x86-64-v2", host_level="x86-64-v4")
    b = record("portable", "x86-64-v2")
    line = cause(
        a,
        b,
        [frameworks(aten_capability="DEFAULT", openblas_core="Nehalem")],
        [frameworks(aten_capability="DEFAULT", openblas_core="Haswell")],
    )
    assert line == (
        "portable mode (x86-64-v2), but the libraries dispatched differently: "
        "openblas_core 'Nehalem' vs 'Haswell'"
    )


def test_the_diff_report_carries_the_cause(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(record(host_level="x86-64-v4")))
    b.write_text(json.dumps(record()))
    assert main(["diff", str(a), str(b)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert "  cpu.level  x86-64-v4 -> x86-64-v3" in out
    assert out[-2].startswith("cause: native mode on AVX-512 vs AVX2: expected to differ")
    assert main(["diff", "--json", str(a), str(b)]) == 1
    assert json.loads(capsys.readouterr().out)["cause"].startswith("native mode on AVX-512")


@pytest.mark.heavy
def test_real_records_native_and_emulated_as_nehalem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The runtime writes the run record in the emulated process (the command it then execs
    runs natively: only the record matters here)."""
    qemu = shutil.which("qemu-x86_64-static")
    if qemu is None:
        pytest.fail("qemu-x86_64-static not found: apt-get install qemu-user-static")
    base = {k: v for k, v in os.environ.items() if not k.startswith(("REPRO_", "REPROBUILD_"))}
    paths = []
    for name, prefix in (("host", []), ("nehalem", [qemu, "-cpu", "Nehalem"])):
        folder = tmp_path / name
        folder.mkdir()
        env = {**base, "REPRO_RUN_DIR": str(folder), "REPRO_RUN_ID": name, "REPRO_QUIET": "1"}
        done = subprocess.run(
            [*prefix, sys.executable, "-m", "reprobuild_entrypoint", "--", "true"],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        paths.append(folder / f"run-{name}.json")
    emulated = json.loads(paths[1].read_text())
    assert emulated["host"]["cpu"]["level"] == "x86-64-v2"
    assert emulated["host"]["cpu"]["vendor"] == "GenuineIntel"
    main(["diff", str(paths[0]), str(paths[1])])
    out = capsys.readouterr().out.splitlines()
    here = json.loads(paths[0].read_text())["host"]["cpu"]["level"]
    assert here in ("x86-64-v3", "x86-64-v4")  # CI and this machine: AVX2 or wider
    name = {"x86-64-v3": "AVX2", "x86-64-v4": "AVX-512"}[here]
    assert any(line.split() == ["cpu.level", here, "->", "x86-64-v2"] for line in out), out
    assert out[-2].startswith(f"cause: native mode on {name} vs SSE4.2: expected to differ")


def test_native_runs_on_two_aarch64_cpus_name_what_each_adds() -> None:
    """aarch64 has one level (armv8-a): two CPUs of it are told apart by the features the
    kernels dispatch on and SVE's width (a Neoverse V1 against a Cortex-A57, say)."""
    a57 = record(host_level="armv8-a", model=None, features=["asimd", "fp"])
    v1 = record(
        host_level="armv8-a",
        model=None,
        features=["asimd", "asimddp", "asimdhp", "bf16", "fp", "i8mm", "sve"],
        sve_vector_bits=256,
    )
    assert cause(a57, v1) == (
        "native mode on Armv8-A (NEON only) vs Armv8-A (asimdhp, asimddp, i8mm, bf16, sve "
        "256-bit): expected to differ (each library dispatches by CPU); use portable "
        "(REPRO_CPU=portable) for the same bits on every aarch64 CPU"
    )
    wider = record(host_level="armv8-a", model=None, features=["sve"], sve_vector_bits=512)
    narrower = record(host_level="armv8-a", model=None, features=["sve"], sve_vector_bits=128)
    line = cause(wider, narrower) or ""  # SVE's width alone picks other kernels
    assert line.startswith("native mode on Armv8-A (sve 512-bit) vs Armv8-A (sve 128-bit): ")
    assert cause(a57, copy.deepcopy(a57)) is None
    pa = record("portable", "armv8-a", host_level="armv8-a", model=None, features=["asimd"])
    pb = record("portable", "armv8-a", host_level="armv8-a", model=None, features=["sve"])
    line = cause(pa, pb) or ""
    assert line.startswith("portable mode (armv8-a) on Armv8-A (NEON only)")
    assert "the same bits are expected" in line
