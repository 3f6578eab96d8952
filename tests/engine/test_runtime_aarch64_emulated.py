"""The runtime's aarch64 CPU reading (issue 53) on an emulated aarch64 CPU: the runtime's
source run in scripts/make-base's arm64 base under qemu-aarch64, once as a Cortex-A57
(Advanced SIMD only) and once as qemu's ``max`` CPU with 256-bit SVE. ``QEMU_CPU`` is read by
qemu-user from the process environment, so ``docker run -e`` picks the CPU.

Emulated: the base is made once (about 4 min on 2 cores, then reused); each run takes seconds.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

pytestmark = [pytest.mark.engine, pytest.mark.registry, pytest.mark.heavy, pytest.mark.emulated]

ROOT = Path(__file__).resolve().parents[2]
SHOW = (
    "import json; from reprobuild_entrypoint import cpulevel, envplan; "
    "print(json.dumps({'found': cpulevel.detect(), "
    "'portable': envplan.level_name('portable', envplan.this_machine())}))"
)


@pytest.fixture(scope="module")
def arm_base() -> str:
    if not Path("/proc/sys/fs/binfmt_misc/qemu-aarch64").exists():
        pytest.fail("qemu-aarch64 is not registered with binfmt_misc: run scripts/setup")
    proc = subprocess.run(
        [str(ROOT / "scripts" / "make-base")],
        env={**os.environ, "REPROBUILD_BASE_ARCH": "arm64"},
        capture_output=True,
        text=True,
        timeout=1500,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()[-1]


def _show(base: str, qemu_cpu: str) -> dict[str, object]:
    argv = ["docker", "run", "--rm", "--platform", "linux/arm64", "-e", f"QEMU_CPU={qemu_cpu}"]
    argv += ["-e", "PYTHONPATH=/src", "-v", f"{ROOT / 'entrypoint'}:/src:ro"]
    argv += ["--entrypoint", "python3", base, "-c", SHOW]
    proc = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


def test_cortex_a57_is_armv8_a_with_advanced_simd_only(arm_base: str) -> None:
    shown = _show(arm_base, "cortex-a57")
    assert shown["portable"] == "armv8-a"
    assert shown["found"] == {
        "level": "armv8-a",
        "flags": ["asimd", "fp"],
        "source": "getauxval",
        "vendor": None,
        "machine": "aarch64",
        "sve_vector_bits": None,
    }


def test_qemu_max_shows_sve_and_its_vector_length(arm_base: str) -> None:
    shown = _show(arm_base, "max,sve-default-vector-length=32")
    found = shown["found"]
    assert isinstance(found, dict)
    assert found["level"] == "armv8-a" and found["source"] == "getauxval"
    assert {"asimddp", "asimdhp", "sve", "sve2", "bf16", "i8mm"} <= set(found["flags"])
    assert found["sve_vector_bits"] == 256
