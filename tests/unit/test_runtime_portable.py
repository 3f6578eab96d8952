"""REPRO_CPU=portable against the real torch 2.13 and NumPy 2.4, natively and on other CPUs
emulated by qemu-user (issue 31).

Under qemu-user an ``exec`` leaves emulation, so the emulated process is the program's own
interpreter, started with the runtime's start-up hook (the image venv's .pth line, as
``reprobuild verify --local`` does with its sitecustomize): the hook plans the environment in
the emulated process, before torch and NumPy load. ``qemu-x86_64-static`` comes from Debian's
``qemu-user-static`` (scripts/setup installs it); these tests fail, never skip, without it.

Emulation caveats (docs/determinism.md): qemu 7.2 emulates no AVX-512, computes
``rsqrtps``/``rcpps`` exactly where real chips approximate, and mis-computes oneDNN's AVX2 LSTM.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import reprobuild_entrypoint
from helpers import runtime_tmp
from reprobuild_entrypoint.envplan import image_env

pytestmark = pytest.mark.heavy

RUNTIME_ROOT = str(Path(reprobuild_entrypoint.__file__).resolve().parent.parent)
PROGRAM = Path(__file__).resolve().parent.parent / "data" / "portable" / "train.py"
LAUNCH = (
    "import runpy, site, sys; site.addsitedir(sys.argv[1]); sys.argv = sys.argv[2:]; "
    "runpy.run_path(sys.argv[0], run_name='__main__')"
)
QEMU = "qemu-x86_64-static"
EMULATED_TIMEOUT_S = 1200


@pytest.fixture(scope="module")
def site_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("site")
    (folder / "reprobuild.pth").write_text(
        f"{RUNTIME_ROOT}\nimport reprobuild_entrypoint._startup\n"
    )
    return folder


@pytest.fixture(scope="module")
def qemu() -> str:
    found = shutil.which(QEMU)
    if found is None:
        pytest.fail(f"{QEMU} not found: apt-get install qemu-user-static (scripts/setup does)")
    return found


def image_environment(cpu: str, **extra: str) -> dict[str, str]:
    """A CPU image's environment (seed 0, strict, native as baked), plus the run's."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.environ.get("HOME", "/root"),
        "REPRO_QUIET": "1",
        "REPROBUILD_IMAGE_SEED": "0",
        "REPROBUILD_IMAGE_DETERMINISM": "strict",
        "REPROBUILD_VARIANT": "cpu",
        **image_env(0, "strict", "cpu"),
        **runtime_tmp(),
        "REPRO_THREADS": "2",
        "REPRO_CPU": cpu,
        **extra,
    }


def run_program(
    site: Path,
    program: Path,
    cpu: str,
    emulate: tuple[str, str] | None = None,
    timeout: float = 600,
    extra: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-c", LAUNCH, str(site), str(program)]
    if emulate is not None:
        qemu, model = emulate
        argv = [qemu, "-cpu", model, *argv]
    return subprocess.run(
        argv,
        env=image_environment(cpu, **(extra or {})),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def result_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [line for line in result.stdout.splitlines() if line.startswith("loss ")]
    assert len(lines) == 1, result.stdout
    return lines[0]


def test_portable_float32_sqrt_is_exact_and_the_record_says_what_dispatched(
    site_dir: Path, tmp_path: Path
) -> None:
    program = tmp_path / "sqrt.py"
    program.write_text(
        "import numpy as np, torch\n"
        "x = torch.rand(1_000_000) * 10\n"
        "exact = torch.from_numpy(np.sqrt(x.numpy()))\n"
        "a = torch.sqrt(x); b = x.sqrt(); c = x.clone().sqrt_()\n"
        "d = torch._foreach_sqrt([x])[0]; e = [x.clone()]; torch._foreach_sqrt_(e)\n"
        "out = torch.empty(0); torch.sqrt(x, out=out)\n"
        "y = x[:4].clone().requires_grad_(); y.sqrt().sum().backward()\n"
        "assert y.grad is not None and y.grad.dtype == torch.float32\n"
        "wide = x.double(); assert torch.sqrt(wide).dtype == torch.float64\n"
        # the float64 way, taken where autograd records the op
        "g = x.clone().requires_grad_().sqrt().detach()\n"
        # a transposed view: same strides back, and the same bits
        "square = x.view(1000, 1000).t(); tr = square.sqrt()\n"
        "assert tr.stride() == square.stride(), tr.stride()\n"
        "tr = tr.t().reshape(-1)\n"
        "import warnings; warnings.simplefilter('error')  # NaN for -1, no NumPy warning\n"
        "assert torch.sqrt(torch.tensor([-1.0])).isnan().all()\n"
        "print(*[int((t != exact).sum()) for t in (a, b, c, d, e[0], out, g, tr)])\n"
    )
    records = tmp_path / "records"
    records.mkdir()
    extra = {"REPRO_RUN_DIR": str(records), "REPRO_RUN_ID": "portable-sqrt"}
    portable = run_program(site_dir, program, "portable", extra=extra)
    assert portable.returncode == 0, portable.stderr
    assert portable.stdout.split() == ["0"] * 8
    native = run_program(site_dir, program, "native")
    assert native.returncode == 0, native.stderr
    # oneMKL VML's float32 sqrt, what a native run keeps: not correctly rounded.
    assert all(int(n) > 0 for n in native.stdout.split())

    (record_file,) = records.glob("run-portable-sqrt-frameworks-*.json")
    record = json.loads(record_file.read_text())
    dispatch = record["cpu_dispatch"]
    assert dispatch["aten_capability"] == "DEFAULT"
    assert dispatch["mkldnn_enabled"] is False and dispatch["nnpack_enabled"] is False
    assert dispatch["MKL_CBWR"] == "COMPATIBLE" and dispatch["ONEDNN_MAX_CPU_ISA"] == "SSE41"
    assert dispatch["numpy_dispatch"] == []
    assert dispatch["openblas_core"] == "Nehalem"
    assert dispatch["float32_sqrt"].startswith("exact")
    portable_settings = record["framework_settings"]["torch"]["portable"]
    assert portable_settings["level"] == "x86-64-v2"


def test_same_bits_natively_and_emulated_as_haswell_and_nehalem(site_dir: Path, qemu: str) -> None:
    """The issue's proof: an unseeded program with conv, batchnorm, GELU, dropout, default
    Adam and NumPy noise; portable gives one result on three CPUs, native does not."""
    native = result_line(run_program(site_dir, PROGRAM, "portable"))
    haswell = result_line(
        run_program(site_dir, PROGRAM, "portable", (qemu, "Haswell-noTSX"), EMULATED_TIMEOUT_S)
    )
    nehalem = result_line(
        run_program(site_dir, PROGRAM, "portable", (qemu, "Nehalem"), EMULATED_TIMEOUT_S)
    )
    assert haswell == native
    assert nehalem == native
    # The control: native mode gives other bits on another CPU.
    native_mode = result_line(run_program(site_dir, PROGRAM, "native"))
    native_haswell = result_line(
        run_program(site_dir, PROGRAM, "native", (qemu, "Haswell-noTSX"), EMULATED_TIMEOUT_S)
    )
    assert native_haswell != native_mode


def test_a_level_above_the_cpu_is_refused_in_one_line_not_sigill(
    site_dir: Path, qemu: str, tmp_path: Path
) -> None:
    program = tmp_path / "never.py"
    program.write_text("import torch\nprint('started')\n")
    refused = run_program(
        site_dir, program, "x86-64-v3", (qemu, "Nehalem"), extra={"REPRO_QUIET": "0"}
    )
    assert refused.returncode == 3
    assert "started" not in refused.stdout
    lines = [line for line in refused.stderr.splitlines() if "TCG doesn't support" not in line]
    assert lines == [
        "reprobuild: this run is pinned to CPU level x86-64-v3 (REPRO_CPU), but this CPU is "
        "x86-64-v2 (no avx, avx2, bmi1, bmi2, ...): the pinned libraries would die with SIGILL; "
        "use REPRO_CPU=portable (x86-64-v2) or REPRO_CPU=native"
    ]


def test_warn_mode_below_the_level_says_so_and_runs_native(
    site_dir: Path, qemu: str, tmp_path: Path
) -> None:
    program = tmp_path / "show.py"
    program.write_text("import os\nprint(os.environ.get('ATEN_CPU_CAPABILITY'))\n")
    done = run_program(
        site_dir,
        program,
        "x86-64-v3",
        (qemu, "Nehalem"),
        extra={"REPRO_QUIET": "0", "REPRO_DETERMINISM": "warn"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["None"]
    assert "this CPU is x86-64-v2" in done.stderr and "; running native" in done.stderr
