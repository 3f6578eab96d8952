"""``reprobuild verify IMAGE --cpu native,Haswell,Nehalem`` (issue 31): the legs checked
against the real qemu-x86_64-static's model list, the bad inputs refused in one line, and the
runtime's side (the command started under the emulator, the record naming it). The real legs
in containers are in tests/engine/test_verify_cpu.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from reprobuild.checks.verify import verify_spec_from_args
from reprobuild.checks.verify.emulation import (
    EMULATOR_IN_CONTAINER,
    QEMU,
    cpu_models,
    emulator_env,
    parse_cpu_help,
)
from reprobuild.checks.verify.launchers import sitecustomize_source
from reprobuild.cli import main
from reprobuild.errors import VerifyError, VerifyUsageError
from reprobuild_entrypoint.launch import parse_emulator, under_emulator
from reprobuild_entrypoint.settings import SettingsError

IMAGE = "example:1"
PROGRAM = ["python", "train.py"]


@pytest.fixture
def qemu() -> str:
    found = shutil.which(QEMU)
    if found is None:
        pytest.fail(f"{QEMU} not found: apt-get install qemu-user-static (scripts/setup does)")
    return found


def test_one_run_per_leg_in_order(qemu: str) -> None:
    spec = verify_spec_from_args(IMAGE, PROGRAM, cpus="native, Haswell,Nehalem")
    assert spec.cpus == ("native", "Haswell", "Nehalem")
    assert spec.runs == 3
    assert spec.qemu == qemu
    assert {"Haswell", "Nehalem", "Haswell-noTSX", "max"} <= set(cpu_models(qemu))
    native_only = verify_spec_from_args(IMAGE, PROGRAM, cpus="native,native")
    assert (native_only.runs, native_only.qemu) == (2, None)
    assert verify_spec_from_args(IMAGE, PROGRAM).cpus == ()


# Excerpts of `qemu-x86_64-static -cpu help` as Debian's packages print it.
QEMU_7_2 = """\
Available CPUs:
x86 486                   (alias configured by machine type)
x86 Haswell               (alias configured by machine type)
x86 Haswell-v1            Intel Core Processor (Haswell)
x86 Nehalem               (alias configured by machine type)
x86 max                   Enables all features supported by the accelerator in the current host

Recognized CPUID flags:
  3dnow 3dnowext 3dnowprefetch abm ace2 ace2-en acpi adx aes amd-no-ssb
"""
QEMU_10_0 = """\
Available CPUs:
  486                   (alias configured by machine type)
  Haswell               (alias configured by machine type)
  Haswell-v1            Intel Core Processor (Haswell)
  Nehalem               (alias configured by machine type)
  pentium-v1
  max                   Enables all features supported by the accelerator in the current host

Recognized CPUID flags:
  3dnow 3dnowext 3dnowprefetch abm ace2 ace2-en acpi adx aes amd-no-ssb
  amd-psfd amd-ssbd amd-stibp amx-bf16 amx-complex amx-fp16 amx-int8
"""


def test_cpu_help_of_qemu_7_and_10() -> None:
    """Debian 12's qemu 7.2 prefixes each model with ``x86``; Debian 13's 10.0 indents them
    under ``Available CPUs:`` and indents the CPUID flags too, which are not models."""
    assert parse_cpu_help(QEMU_7_2) == ("486", "Haswell", "Haswell-v1", "Nehalem", "max")
    assert parse_cpu_help(QEMU_10_0) == (
        "486", "Haswell", "Haswell-v1", "Nehalem", "pentium-v1", "max",
    )  # fmt: skip
    assert parse_cpu_help("") == ()


def test_an_unknown_model_is_one_line_naming_it_and_the_allowed(
    qemu: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["verify", IMAGE, "--cpu", "native,Haswel", "--", *PROGRAM])
    assert code == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(
        f"error: --cpu 'Haswel': not a CPU model {QEMU} emulates; use native or one of "
    )
    assert " Haswell, " in lines[0] and " Nehalem, " in lines[0]
    assert "Haswell-v1" not in lines[0]  # the versions are left to `-cpu help`


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"cpus": "native"}, "name 2 to 16 CPUs"),
        ({"cpus": ",".join(["native"] * 17)}, "name 2 to 16 CPUs"),
        ({"cpus": "native,,Haswell"}, "an empty CPU name"),
        ({"cpus": "native,Haswell", "runs": 3}, "does not go with --runs"),
        ({"cpus": "native,Haswell", "gpus": "all"}, "does not go with --gpus"),
        ({"cpus": "native,Haswell", "nodes": 2}, "does not go with --nodes"),
    ],
)
def test_bad_legs_are_refused(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(VerifyUsageError, match=match):
        verify_spec_from_args(IMAGE, PROGRAM, **kwargs)  # type: ignore[arg-type]
    with pytest.raises(VerifyUsageError, match="does not go with --local"):
        verify_spec_from_args(None, PROGRAM, local=True, cpus="native,Haswell")


def test_no_qemu_installed_is_one_clear_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(VerifyError, match=f"--cpu needs {QEMU}"):
        verify_spec_from_args(IMAGE, PROGRAM, cpus="native,Haswell")
    # every leg native: no emulator needed
    assert verify_spec_from_args(IMAGE, PROGRAM, cpus="native,native").qemu is None
    code = main(["verify", IMAGE, "--cpu", "native,Nehalem", "--", *PROGRAM])
    assert code != 0
    err = capsys.readouterr().err
    assert err.startswith(f"error: --cpu needs {QEMU} to emulate other CPUs, and it is not")
    assert "apt-get install qemu-user-static" in err


def test_resume_at_and_cpu_do_not_mix(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["verify", IMAGE, "--cpu", "native,native", "--resume-at", "1", "--", "true"])
    assert code == 2
    assert "drop --cpu" in capsys.readouterr().err


def test_the_runtime_starts_the_command_under_the_emulator(tmp_path: Path) -> None:
    emulator = parse_emulator(emulator_env("Haswell"))
    assert emulator == [EMULATOR_IN_CONTAINER, "-cpu", "Haswell"]
    assert parse_emulator(None) is None and parse_emulator(" ") is None
    for bad in ("[]", '"qemu"', "[1]", "{"):
        with pytest.raises(SettingsError, match="REPROBUILD_EMULATOR"):
            parse_emulator(bad)
    # qemu-user opens the program by its path: a bare name is looked up on PATH first
    binary = Path(sys.executable).resolve()
    path = f"{tmp_path}:{binary.parent}"
    assert under_emulator(emulator, [binary.name, "-c", "1"], path) == [
        *emulator,
        str(binary),
        "-c",
        "1",
    ]
    assert under_emulator(emulator, ["/bin/true"], path) == [*emulator, "/bin/true"]
    assert under_emulator(emulator, ["no-such-program"], path)[-1] == "no-such-program"
    script = tmp_path / "run.sh"
    script.write_text("#!/bin/sh -e\necho hi\n")
    script.chmod(0o755)
    assert under_emulator(emulator, ["run.sh", "a"], str(tmp_path)) == [
        *emulator,
        "/bin/sh",
        "-e",
        str(script),
        "a",
    ]
    assert json.loads(emulator_env("Nehalem"))[-1] == "Nehalem"


SHOW_LEVEL = "from reprobuild_entrypoint import cpulevel; print(cpulevel.detect()['level'])"


@pytest.mark.heavy
def test_an_emulated_runtime_keeps_its_command_emulated(qemu: str, tmp_path: Path) -> None:
    """The runtime run by qemu as Nehalem reads Nehalem's level (and refuses a pin above it);
    its command is Nehalem too only when the runtime is told the emulator: an exec leaves
    qemu-user's emulation, so without it the command runs on this machine's CPU."""
    runtime = Path(sys.modules["reprobuild_entrypoint"].__file__ or "").parent.parent
    host_level = subprocess.run(
        [sys.executable, "-c", SHOW_LEVEL],
        env={**os.environ, "PYTHONPATH": str(runtime)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert host_level != "x86-64-v2"  # this machine is above Nehalem's level
    emulator = [qemu, "-cpu", "Nehalem"]
    shim = tmp_path / "shim"  # the start-up hook in every Python, as the image's .pth line
    shim.mkdir()
    (shim / "sitecustomize.py").write_bytes(sitecustomize_source())
    python = Path(sys.executable).resolve()  # a binary: qemu-user loads no script (a shim)

    def run(cpu: str, told: bool) -> subprocess.CompletedProcess[str]:
        env = {
            "PATH": f"{python.parent}:/usr/bin:/bin",
            "PYTHONPATH": f"{shim}:{runtime}",
            "REPRO_QUIET": "1",
            "REPRO_CPU": cpu,
            "REPRO_RUN_DIR": str(tmp_path / f"{cpu}-{told}"),
            **({"REPROBUILD_EMULATOR": json.dumps(emulator)} if told else {}),
        }
        argv = [*emulator, sys.executable, "-m", "reprobuild_entrypoint"]
        return subprocess.run(
            [*argv, "--", python.name, "-c", SHOW_LEVEL],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )

    told = run("native", told=True)
    assert told.returncode == 0, told.stderr
    assert told.stdout.split() == ["x86-64-v2"]
    (record,) = (tmp_path / "native-True").glob("run-*.json")
    assert json.loads(record.read_text())["cpu"]["emulator"] == emulator
    untold = run("native", told=False)
    assert untold.stdout.split() == [host_level]
    refused = run("x86-64-v3", told=True)
    assert refused.returncode == 3
    line = "pinned to CPU level x86-64-v3 (REPRO_CPU), but this CPU is x86-64-v2"
    assert line in refused.stderr
    # refused by the entrypoint, not by the hook in its interpreter: the record says why
    (record,) = (tmp_path / "x86-64-v3-True").glob("run-*.json")
    assert line in json.loads(record.read_text())["cpu"]["refused"]
