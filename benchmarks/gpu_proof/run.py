"""GPU proof kit (issue 15): one command that proves the GPU path on a real NVIDIA GPU.

    scripts/gpu-proof [--quick] [--dry-run] [--only NAME ...] [--out PATH]

On a host with an NVIDIA GPU and PyTorch (no Docker, no network, reprobuild run from this tree):

- determinism: each program in ``programs/`` runs twice bare and twice under the runtime
  (``reprobuild verify --local --gpus all``); per program, whether the bare runs differ (the
  control) and whether the runs under the runtime are identical, bit for bit;
- strict refusal: an op with no deterministic kernel fails under strict mode with the
  runtime's hint (and completes bare);
- driver: the runtime's NVML, nvidia-smi and procfs probes against the real driver, checked
  against an independent reading (nvidia-smi, /proc/driver/nvidia/version, libcuda, torch);
  the stack probe's CUDA/cuDNN/NCCL against what torch reports once CUDA is up;
- cost: the CNN loop's wall time under ``strict`` against ``off``, as a ratio, in this run.

Without CUDA (or with ``--dry-run``) the CPU half of every program runs instead, the GPU checks
are reported "not run", it prints "no GPU: the GPU checks did not run" and exits 3.

Exit status: 0 every GPU check passed; 1 a check failed or the kit itself broke; 3 no GPU.
Writes a JSON report (default ``benchmarks/results/gpu-proof-<UTC date>.json``) and a table.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import ctypes
import datetime as _dt
import hashlib
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
PROGRAMS_DIR = HERE / "programs"
BUILDER = ROOT / "builder"
ENTRYPOINT = ROOT / "entrypoint"
SCHEMA = "reprobuild.gpu-proof/1"
NO_GPU = "no GPU: the GPU checks did not run"

PASS, FAIL, ERROR, NOT_RUN, MEASURED = "pass", "fail", "error", "not run", "measured"
EXIT_OK, EXIT_FAIL, EXIT_NO_GPU = 0, 1, 3

# Norm-wise error of the float32 product against float64: IEEE float32 stays near 1e-7 (a few
# 1e-6 at most for these sizes), TF32 (10-bit mantissa) near 1e-4. Between the two.
TF32_ERROR = 2e-5
HINT_MARKER = "has no deterministic implementation; run with REPRO_DETERMINISM=warn"
_HOST_ENV = ("CUDA", "CUBLAS", "CUDNN", "NCCL", "NVIDIA", "TORCH", "REPRO", "PYTORCH", "OMP_")
"""Host variables that bear on the results, recorded as found (bare runs see them)."""
NOTE = re.compile(r"gpu-proof ([a-z_]+)=(\S+)")


@dataclass(frozen=True)
class Program:
    name: str
    control: str
    """``differ``: two bare runs differ; ``tf32``: bare runs use TF32 (the bits move with it)."""
    what: str


PROGRAMS = (
    Program("scatter_atomics", "differ", "index_add_/scatter_add_ with float atomics"),
    Program("conv_backward", "differ", "conv backward through cuDNN, benchmark mode"),
    Program("matmul_tf32", "tf32", "float32 matmul with TF32 asked for"),
    Program("cnn_train", "differ", "small CNN training loop, unseeded"),
)
REFUSAL = "strict_refusal"
COST_PROGRAM = "cnn_train"
NAMES = (*(p.name for p in PROGRAMS), REFUSAL, "driver", "cost")


@dataclass(frozen=True)
class Plan:
    gpu: bool
    scale: str
    """``cpu`` (the CPU half), ``quick`` or ``full``."""
    timeout_s: int
    """For one run (two side by side)."""
    cost_rounds: int
    budget_s: float
    """Checks not started by then are reported "not run" (the whole must end within 8 min);
    the driver check, a few seconds, always runs."""


def make_plan(gpu: bool, quick: bool) -> Plan:
    if not gpu:
        return Plan(False, "cpu", 240, 1, 900.0)
    if quick:
        return Plan(True, "quick", 120, 1, 150.0)
    return Plan(True, "full", 150, 2, 380.0)


@dataclass
class Proc:
    argv: list[str]
    exit_code: int | None
    stdout: bytes
    stderr: str
    elapsed_s: float
    timed_out: bool = False

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.stdout).hexdigest()

    def tail(self, lines: int = 6) -> list[str]:
        return self.stderr.splitlines()[-lines:]


def run_proc(argv: Sequence[str], env: dict[str, str], timeout_s: float, cwd: Path = ROOT) -> Proc:
    """Run to the end, or past ``timeout_s`` stop it: SIGTERM to its process group, then
    SIGKILL to the group and to every process that was below it (``reprobuild verify``'s runs
    live in sessions of their own)."""
    start = time.monotonic()
    try:
        child = subprocess.Popen(
            list(argv),
            env=env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    except OSError as exc:
        return Proc(list(argv), None, b"", f"cannot start: {exc}", time.monotonic() - start)
    try:
        out, err = child.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        below = descendants(child.pid)  # verify's runs sit in sessions of their own
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.pid, signal.SIGTERM)
        out, err = b"", b""
        for grace in (10, 10):
            try:
                out, err = child.communicate(timeout=grace)  # output so far is kept on retry
                break
            except subprocess.TimeoutExpired:
                for pid in below:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, signal.SIGKILL)
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(child.pid, signal.SIGKILL)
        text = err.decode(errors="replace")
        return Proc(list(argv), None, out, text, time.monotonic() - start, timed_out=True)
    elapsed = time.monotonic() - start
    return Proc(list(argv), child.returncode, out, err.decode(errors="replace"), elapsed)


def descendants(pid: int) -> list[int]:
    """Every process below ``pid``, from /proc (empty where there is none)."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = entry.read_text().rsplit(")", 1)[1].split()
            parents.setdefault(int(fields[1]), []).append(int(entry.parent.name))
    found: list[int] = []
    todo = [pid]
    while todo:
        for kid in parents.get(todo.pop(), []):
            found.append(kid)
            todo.append(kid)
    return found


def notes(stderr_lines: Sequence[str]) -> dict[str, str]:
    """``gpu-proof KEY=VALUE`` lines a program wrote on stderr."""
    found: dict[str, str] = {}
    for line in stderr_lines:
        match = NOTE.search(line)
        if match:
            found[match.group(1)] = match.group(2)
    return found


def _float(text: str | None) -> float | None:
    try:
        return None if text is None else float(text)
    except ValueError:
        return None


class Kit:
    """Runs the programs: bare, under ``reprobuild verify --local``, under the runtime alone."""

    def __init__(self, python: str, plan: Plan, work: Path) -> None:
        self.python = python
        self.plan = plan
        self.work = work
        self.device = "cuda" if plan.gpu else "cpu"
        self.env = dict(os.environ)
        self.env.pop("REPRO_DETERMINISM", None)  # bare means bare
        self.env["PYTHONPATH"] = os.pathsep.join(
            [str(BUILDER), str(ENTRYPOINT), *filter(None, [os.environ.get("PYTHONPATH")])]
        )
        self.env.setdefault("PYTHONUNBUFFERED", "1")
        self._count = 0

    def program(self, name: str) -> list[str]:
        script = PROGRAMS_DIR / f"{name}.py"
        return [self.python, str(script), "--device", self.device, "--scale", self.plan.scale]

    def bare(self, name: str, runs: int = 2) -> list[Proc]:
        """``runs`` bare runs side by side, as verify runs them."""
        argv = self.program(name)
        with concurrent.futures.ThreadPoolExecutor(runs) as pool:
            futures = [
                pool.submit(run_proc, argv, self.env, self.plan.timeout_s) for _ in range(runs)
            ]
            return [f.result() for f in futures]

    def verify(self, name: str, mode: str | None = None) -> tuple[dict[str, Any] | None, Proc]:
        """Two runs under ``reprobuild verify --local``; its saved report (None if none)."""
        self._count += 1
        report = self.work / f"verify-{self._count}-{name}.json"
        argv = [self.python, "-m", "reprobuild", "verify", "--local", "-q"]
        if self.plan.gpu:
            argv += ["--gpus", "all"]
        if mode is not None:
            argv += ["--mode", mode]
        argv += ["--report", str(report), "--", *self.program(name)]
        proc = run_proc(argv, self.env, self.plan.timeout_s + 60)
        data: dict[str, Any] | None = None
        with contextlib.suppress(OSError, ValueError):
            data = json.loads(report.read_text())
        return data, proc

    def runtime_env(self, mode: str, tag: str) -> dict[str, str]:
        """The runtime alone, one process, started as ``verify --local`` starts each of its
        runs: ``python -m reprobuild_entrypoint -- CMD`` with a ``sitecustomize`` that starts
        the hook in the program's interpreter and the image's variables for seed 0, strict."""
        from reprobuild_entrypoint.envplan import image_env

        shim = self.work / "shim"
        shim.mkdir(exist_ok=True)
        (shim / "sitecustomize.py").write_text("import reprobuild_entrypoint._startup  # noqa\n")
        variant = "gpu" if self.plan.gpu else "cpu"
        env = dict(self.env)
        for name in ("REPRO_RUN_ID", "REPROBUILD_BASE_ENTRYPOINT", "REPROBUILD_MANIFEST_PATH"):
            env.pop(name, None)
        env.update(
            REPROBUILD_IMAGE_SEED="0",
            REPROBUILD_IMAGE_DETERMINISM="strict",
            REPROBUILD_VARIANT=variant,
            REPRO_DETERMINISM=mode,
        )
        for key, value in image_env(0, "strict", variant).items():
            env.setdefault(key, value)
        records, out = self.work / f"records-{tag}", self.work / f"out-{tag}"
        records.mkdir()
        out.mkdir()
        env.update(REPRO_RUN_DIR=str(records), REPRO_OUTPUT_DIR=str(out))
        env["PYTHONPATH"] = os.pathsep.join([str(shim), env["PYTHONPATH"]])
        return env

    def under_runtime(self, name: str, mode: str, tag: str) -> Proc:
        argv = [self.python, "-m", "reprobuild_entrypoint", "--", *self.program(name)]
        return run_proc(argv, self.runtime_env(mode, tag), self.plan.timeout_s)


# ------------------------------------------------------------------------------- the checks


def _verify_runs(report: dict[str, Any] | None) -> list[dict[str, Any]]:
    runs = (report or {}).get("runs") or []
    return [r for r in runs if isinstance(r, dict)]


def _run_failure(procs: Sequence[Proc]) -> str | None:
    for i, proc in enumerate(procs):
        if proc.timed_out:
            return f"bare run {i + 1} ran past {proc.elapsed_s:.0f} s"
        if proc.exit_code != 0:
            tail = " | ".join(proc.tail(3))
            return f"bare run {i + 1} exited {proc.exit_code}: {tail}"
    return None


def _torch_settings(report: dict[str, Any] | None) -> dict[str, Any] | None:
    """What the runtime set in torch, from run 1's framework record."""
    runs = _verify_runs(report)
    for record in runs[0].get("framework_records") or [] if runs else []:
        settings = (record.get("framework_settings") or {}).get("torch")
        if isinstance(settings, dict):
            return settings
    return None


def _run_record_gpu(report: dict[str, Any] | None) -> dict[str, Any] | None:
    """What the runtime's own GPU probe and check found in run 1 (``host.gpu``, ``gpu_check``)."""
    runs = _verify_runs(report)
    record = (runs[0].get("run_record") if runs else None) or {}
    host = record.get("host") or {}
    if not host.get("gpu") and not record.get("gpu_check"):
        return None
    return {"host_gpu": host.get("gpu"), "gpu_check": record.get("gpu_check")}


def determinism_check(kit: Kit, program: Program) -> dict[str, Any]:
    bare = kit.bare(program.name)
    report, proc = kit.verify(program.name)
    runs = _verify_runs(report)
    entry: dict[str, Any] = {
        "name": program.name,
        "what": program.what,
        "control": program.control,
        "bare": [
            {
                "exit_code": p.exit_code,
                "stdout_sha256": p.sha256,
                "elapsed_s": round(p.elapsed_s, 2),
            }
            for p in bare
        ],
        "runtime": {
            "result": (report or {}).get("result"),
            "summary": (report or {}).get("summary"),
            "stdout_sha256": [r.get("stdout_sha256") for r in runs],
            "exit_codes": [r.get("exit_code") for r in runs],
            "divergence": (report or {}).get("divergence"),
            "torch_settings": _torch_settings(report),
            "run_record_gpu": _run_record_gpu(report),
        },
        "bare_runs_differ": None,
        "runtime_runs_identical": None,
    }
    failure = _run_failure(bare)
    if report is None:
        tail = " | ".join(proc.tail(4))
        failure = failure or f"verify wrote no report (exit {proc.exit_code}): {tail}"
    elif report.get("result") == "failed":
        failed = (report.get("failure") or {}).get("message") or report.get("summary")
        tails = [" | ".join((r.get("stderr_tail") or [])[-3:]) for r in runs]
        failure = failure or f"a run under the runtime failed: {failed}: {tails[:1]}"
    if failure is not None:
        entry.update(status=ERROR, detail=failure)
        return entry
    entry["bare_runs_differ"] = bare[0].sha256 != bare[1].sha256
    entry["runtime_runs_identical"] = report is not None and report.get("result") == "identical"
    if program.control == "tf32":
        bare_err = _float(notes(bare[0].stderr.splitlines()).get("rel_err"))
        run_err = _float(notes(runs[0].get("stderr_tail") or []).get("rel_err")) if runs else None
        runtime_sha = runs[0].get("stdout_sha256") if runs else None
        entry["tf32"] = {
            "bare_rel_err": bare_err,
            "runtime_rel_err": run_err,
            "threshold": TF32_ERROR,
            "bare_uses_tf32": None if bare_err is None else bare_err > TF32_ERROR,
            "runtime_ieee": None if run_err is None else run_err <= TF32_ERROR,
            "bits_differ_bare_vs_runtime": bare[0].sha256 != runtime_sha,
        }
        entry["control_shown"] = entry["tf32"]["bare_uses_tf32"]
        ok = bool(entry["runtime_runs_identical"] and entry["tf32"]["runtime_ieee"])
    else:
        entry["control_shown"] = entry["bare_runs_differ"]
        ok = bool(entry["runtime_runs_identical"])
    entry["status"] = PASS if ok else FAIL
    entry["detail"] = _determinism_detail(entry)
    return entry


def _determinism_detail(entry: dict[str, Any]) -> str:
    if entry["control"] == "tf32":
        tf32 = entry["tf32"]
        control = (
            f"bare error {tf32['bare_rel_err']} ({'TF32' if tf32['bare_uses_tf32'] else 'IEEE'})"
        )
        runtime = f"runtime error {tf32['runtime_rel_err']}"
    else:
        control = "bare runs differ" if entry["bare_runs_differ"] else "bare runs identical"
        runtime = ""
    same = "identical" if entry["runtime_runs_identical"] else "DIFFER"
    shown = "" if entry["control_shown"] else " (control did not show the problem)"
    return f"{control}{shown}; runtime runs {same}" + (f"; {runtime}" if runtime else "")


def refusal_check(kit: Kit) -> dict[str, Any]:
    bare = kit.bare(REFUSAL, runs=1)[0]
    report, proc = kit.verify(REFUSAL)
    runs = _verify_runs(report)
    tails = [line for r in runs for line in (r.get("stderr_tail") or [])]
    hint = next((line for line in tails if HINT_MARKER in line), None)
    entry: dict[str, Any] = {
        "name": REFUSAL,
        "what": "put_ with repeated indices (no deterministic kernel) under strict mode",
        "bare_exit_code": bare.exit_code,
        "bare_completed": bare.exit_code == 0 and b"completed" in bare.stdout,
        "runtime_result": (report or {}).get("result"),
        "runtime_exit_codes": [r.get("exit_code") for r in runs],
        "hint": hint,
        "stderr_tail": tails[-6:],
    }
    if report is None:
        entry.update(status=ERROR, detail=f"verify wrote no report: {' | '.join(proc.tail(4))}")
        return entry
    refused = bool(runs) and all(r.get("exit_code") not in (0, None) for r in runs)
    entry["refused"] = refused
    ok = bool(entry["bare_completed"] and refused and hint)
    entry["status"] = PASS if ok else FAIL
    entry["detail"] = (
        f"bare {'completed' if entry['bare_completed'] else f'exit {bare.exit_code}'}; "
        f"strict {'refused' if refused else 'did NOT refuse'}; "
        f"hint {'printed' if hint else 'MISSING'}"
    )
    return entry


def cost_check(kit: Kit) -> dict[str, Any]:
    """CNN loop wall time, strict against off, alternating, best of the rounds each."""
    times: dict[str, list[float]] = {"strict": [], "off": []}
    errors: list[str] = []
    for round_ in range(kit.plan.cost_rounds):
        for mode in ("strict", "off"):
            proc = kit.under_runtime(COST_PROGRAM, mode, f"cost-{mode}-{round_}")
            loop = _float(notes(proc.stderr.splitlines()).get("loop_s"))
            if proc.exit_code != 0 or loop is None:
                errors.append(f"{mode}: exit {proc.exit_code}: {' | '.join(proc.tail(3))}")
            else:
                times[mode].append(loop)
    entry: dict[str, Any] = {
        "name": "cost",
        "what": f"{COST_PROGRAM} loop wall time, REPRO_DETERMINISM=strict vs off",
        "loop_s": times,
    }
    if errors or not times["strict"] or not times["off"]:
        entry.update(status=ERROR, detail="; ".join(errors) or "no timing")
        return entry
    strict, off = min(times["strict"]), min(times["off"])
    entry.update(
        strict_s=strict,
        off_s=off,
        ratio=strict / off,
        status=MEASURED,
        detail=f"strict {strict:.3f} s / off {off:.3f} s = {strict / off:.2f}x",
    )
    return entry


# ----------------------------------------------------------------------------------- driver


def _nvidia_smi_raw() -> dict[str, Any]:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return {"error": "not on PATH"}
    fields = "driver_version,name,uuid,compute_cap"
    try:
        done = subprocess.run(
            [smi, f"--query-gpu={fields}", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"error": str(exc)}
    if done.returncode != 0:
        return {"error": f"exit {done.returncode}: {done.stderr.strip()[:200]}"}
    rows = [[c.strip() for c in line.split(",")] for line in done.stdout.splitlines() if line]
    keys = fields.split(",")
    return {"path": smi, "gpus": [dict(zip(keys, row, strict=False)) for row in rows]}


def _proc_version(path: Path = Path("/proc/driver/nvidia/version")) -> dict[str, Any]:
    try:
        text = path.read_text()
    except OSError as exc:
        return {"error": exc.strerror or str(exc)}
    match = re.search(r"Kernel Module(?: for [^ ]+)?\s+([0-9]+(?:\.[0-9]+)+)", text)
    return {
        "first_line": text.splitlines()[0] if text else "",
        "driver_version": match and match[1],
    }


def _libcuda_version() -> dict[str, Any]:
    """cuDriverGetVersion from libcuda: the CUDA driver API version, read apart from NVML."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
        value = ctypes.c_int(0)
        status = lib.cuDriverGetVersion(ctypes.byref(value))
    except (OSError, AttributeError) as exc:
        return {"error": str(exc)}
    if status != 0:
        return {"error": f"cuDriverGetVersion returned {status}"}
    return {"raw": value.value, "version": f"{value.value // 1000}.{value.value % 1000 // 10}"}


def _uuid(value: object) -> str | None:
    text = str(value or "").strip().lower()
    return text.removeprefix("gpu-") or None


def driver_readings() -> dict[str, Any]:
    """The runtime's three probes, each alone, and the independent readings."""
    from reprobuild_entrypoint import gpuinfo

    probes = {p: gpuinfo.discover({"REPROBUILD_GPU_PROBES": p}) for p in gpuinfo.PROBES}
    return {
        "runtime_probes": probes,
        "nvidia_smi": _nvidia_smi_raw(),
        "procfs": _proc_version(),
        "libcuda": _libcuda_version(),
    }


def stack_probe(kit: Kit) -> dict[str, Any]:
    """``python -m reprobuild_entrypoint.probe --stack``: the image probe's stack section."""
    argv = [kit.python, "-m", "reprobuild_entrypoint.probe", "--stack"]
    proc = run_proc(argv, kit.env, 180)
    try:
        data = json.loads(proc.stdout)
    except ValueError:
        return {"error": f"exit {proc.exit_code}: {' | '.join(proc.tail(3))}"}
    return dict((data.get("frameworks") or {}).get("torch") or {})


def _from_runtime(done: Sequence[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The runtime's torch settings and GPU record from the first run under it that has them."""
    settings: dict[str, Any] = {}
    gpu: dict[str, Any] = {}
    for check in done:
        runtime = check.get("runtime") or {}
        settings = settings or dict(runtime.get("torch_settings") or {})
        gpu = gpu or dict(runtime.get("run_record_gpu") or {})
    return settings, gpu


def driver_check(kit: Kit, facts: dict[str, Any], done: Sequence[dict[str, Any]]) -> dict[str, Any]:
    from reprobuild.bases.gpustack import reported
    from reprobuild_entrypoint import drivercheck

    readings = driver_readings()
    probe = stack_probe(kit)
    entry: dict[str, Any] = {
        "name": "driver",
        "what": "runtime's NVML/nvidia-smi/procfs probes and stack probe vs the real driver",
        **readings,
        "stack_probe": probe,
        "torch": {k: facts.get(k) for k in ("torch", "cuda_built", "cudnn", "nccl", "devices")},
    }
    problems: list[str] = []

    def agree(label: str, values: dict[str, Any]) -> None:
        seen = {k: v for k, v in values.items()}
        if None in seen.values() or len(set(map(str, seen.values()))) != 1:
            problems.append(f"{label}: {seen}")

    settings, record_gpu = _from_runtime(done)
    entry["runtime_record"] = {"torch_settings": settings, **record_gpu}
    probes = readings["runtime_probes"]
    smi_raw = readings["nvidia_smi"].get("gpus") or [{}]
    versions = {
        "nvml": probes["nvml"].get("driver_version"),
        "nvidia-smi probe": probes["nvidia-smi"].get("driver_version"),
        "procfs probe": probes["procfs"].get("driver_version"),
        "nvidia-smi": smi_raw[0].get("driver_version"),
        "/proc": readings["procfs"].get("driver_version"),
    }
    if record_gpu:  # the runtime's own probe, inside a run under verify --local --gpus all
        versions["run record"] = (record_gpu.get("host_gpu") or {}).get("driver_version")
    agree("driver version", versions)
    agree(
        "CUDA driver API version",
        {
            "nvml": probes["nvml"].get("cuda_driver_version"),
            "libcuda": readings["libcuda"].get("version"),
        },
    )
    nvml_devices = probes["nvml"].get("devices") or []
    torch_devices = facts.get("devices") or []
    for label, key, norm in (
        ("GPU name", "name", str),
        ("GPU UUID", "uuid", _uuid),
        ("compute capability", "compute_cap", str),
    ):
        count = max(len(nvml_devices), len(torch_devices), 1)
        for i in range(count):

            def pick(rows: Sequence[Any], i: int = i, key: str = key) -> Any:
                return rows[i].get(key) if i < len(rows) else None

            agree(
                f"{label} (GPU {i})",
                {
                    "nvml": norm(pick(nvml_devices)),
                    "nvidia-smi probe": norm(pick(probes["nvidia-smi"].get("devices") or [])),
                    "nvidia-smi": norm(pick(smi_raw)),
                    "torch": norm(pick(torch_devices)),
                },
            )
    as_reported = reported(
        {
            "probe": probe,
            "torch": {k: facts.get(v) for k, v in _STACK.items()},
            "record": {k: settings.get(v) for k, v in _RECORD_STACK.items()},
        }
    )
    entry["stack_compared"] = as_reported
    for key in ("cuda", "cudnn", "nccl"):
        values = {
            "stack probe": as_reported.get(f"probe.{key}"),
            "torch": as_reported.get(f"torch.{key}"),
        }
        if settings:  # the runtime's framework record, written at the program's exit
            values["run record"] = as_reported.get(f"record.{key}")
        agree(f"stack {key}", values)
    driver = probes["nvml"].get("driver_version")
    requirement = drivercheck.required_driver(facts.get("cuda_built"))
    verdict = drivercheck.check(
        driver, requirement, gpu_count=probes["nvml"].get("count"), mode="strict", allow_cpu=False
    )
    entry["requirement"] = None if requirement is None else requirement._asdict()
    entry["verdict"] = verdict.as_dict()
    if verdict.status == drivercheck.REFUSE:
        problems.append(f"the driver check refuses a driver CUDA runs on: {verdict.message}")
    entry["problems"] = problems
    entry["status"] = FAIL if problems else PASS
    entry["detail"] = (
        "; ".join(problems)[:600]
        if problems
        else (
            f"driver {driver}, CUDA driver {probes['nvml'].get('cuda_driver_version')}, "
            f"verdict {verdict.status} ({verdict.finding}); all readings agree"
        )
    )
    return entry


_STACK = {"cuda": "cuda_built", "cudnn": "cudnn", "nccl": "nccl"}
_RECORD_STACK = {"cuda": "cuda", "cudnn": "cudnn_version", "nccl": "nccl_version"}


# ----------------------------------------------------------------------------------- report


def read_facts(python: str, env: dict[str, str]) -> dict[str, Any]:
    proc = run_proc([python, str(PROGRAMS_DIR / "facts.py")], env, 180)
    try:
        facts = json.loads(proc.stdout.decode().strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"torch": None, "error": f"exit {proc.exit_code}: {' | '.join(proc.tail(3))}"}
    return dict(facts)


def preflight(kit: Kit) -> list[str]:
    """``reprobuild verify`` must start from this tree with this interpreter, which may lack
    the builder's dependencies (Docker SDK, PyYAML, Jinja2): ``verify --local`` needs none."""
    proc = run_proc([kit.python, "-m", "reprobuild", "verify", "--help"], kit.env, 60)
    if proc.exit_code == 0:
        return []
    last = proc.tail(1)[0] if proc.tail(1) else f"exit {proc.exit_code}"
    return [f"`reprobuild verify` does not start from this tree with {kit.python}: {last}"]


def summarize(checks: Sequence[dict[str, Any]]) -> dict[str, int]:
    out = {PASS: 0, FAIL: 0, ERROR: 0, NOT_RUN: 0, MEASURED: 0}
    for check in checks:
        out[check["status"]] = out.get(check["status"], 0) + 1
    return out


def table(report: dict[str, Any]) -> str:
    rows = [("check", "status", "bare differ", "runtime identical", "detail")]
    for check in report["checks"]:
        rows.append(
            (
                check["name"],
                check["status"],
                _yes(check.get("bare_runs_differ")),
                _yes(check.get("runtime_runs_identical")),
                str(check.get("detail") or ""),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(r[:4], widths, strict=True)) + "  " + r[4]
        for r in rows
    ]
    for half in report.get("cpu_half") or []:
        lines.append(f"cpu half: {half['name']}: {half['detail']}")
    return "\n".join(lines)


def _yes(value: object) -> str:
    return "-" if value is None else ("yes" if value else "no")


def cpu_half_entry(check: dict[str, Any]) -> dict[str, Any]:
    """A check run on the CPU: what it found, under ``outcome``, never as a status."""
    outcome = {PASS: "ran", FAIL: "ran", MEASURED: "ran"}.get(check["status"], check["status"])
    half = {k: v for k, v in check.items() if k != "status"}
    half["outcome"] = outcome
    return half


def not_run(name: str, reason: str) -> dict[str, Any]:
    return {"name": name, "status": NOT_RUN, "detail": reason}


def write_report(path: Path, report: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(report, indent=2, sort_keys=True, default=str) + "\n")
    tmp.replace(path)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    doc = __doc__ or ""
    parser = argparse.ArgumentParser(prog="scripts/gpu-proof", description=doc.split("\n\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="smaller programs (about 2 min)")
    parser.add_argument(
        "--dry-run", action="store_true", help="the CPU half only, as on a host without a GPU"
    )
    parser.add_argument(
        "--only",
        action="append",
        choices=NAMES,
        metavar="NAME",
        help=f"run only these checks (repeatable): {', '.join(NAMES)}",
    )
    parser.add_argument("--out", type=Path, help="the JSON report (default benchmarks/results/)")
    parser.add_argument(
        "--python", default=sys.executable, help="the interpreter with torch (default: this one)"
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    sys.path[:0] = [str(BUILDER), str(ENTRYPOINT)]  # run from the tree, never installed
    started = _dt.datetime.now(_dt.UTC)
    t0 = time.monotonic()
    selected = set(args.only or NAMES)
    out = args.out or ROOT / "benchmarks" / "results" / f"gpu-proof-{started:%Y-%m-%d}.json"
    with tempfile.TemporaryDirectory(prefix="gpu-proof-") as tmp:
        work = Path(tmp)
        probe_env = Kit(args.python, make_plan(False, False), work).env
        facts = read_facts(args.python, probe_env)
        cuda = bool(facts.get("cuda_available"))
        gpu = cuda and not args.dry_run
        plan = make_plan(gpu, args.quick)
        kit = Kit(args.python, plan, work)
        why = "--dry-run" if args.dry_run else "CUDA is not available to torch"
        checks: list[dict[str, Any]] = []
        kit_errors: list[str] = []
        if facts.get("torch") is None:
            kit_errors.append(f"torch is not importable by {args.python}: {facts.get('error')}")
        else:
            kit_errors.extend(preflight(kit))
        done: list[dict[str, Any]] = []  # the driver check reads the runtime's records here
        steps: list[tuple[str, Callable[[], dict[str, Any]]]] = [
            *((p.name, lambda p=p: determinism_check(kit, p)) for p in PROGRAMS),
            (REFUSAL, lambda: refusal_check(kit)),
            ("cost", lambda: cost_check(kit)),
            ("driver", lambda: driver_check(kit, facts, done)),
        ]
        for name, step in steps:
            if name not in selected:
                continue
            if kit_errors:
                done.append(not_run(name, "the kit cannot run here (see kit_errors)"))
            elif name == "driver" and not gpu:
                done.append(not_run(name, f"no GPU ({why})"))
            elif name != "driver" and time.monotonic() - t0 > plan.budget_s:
                done.append(not_run(name, f"time budget of {plan.budget_s:.0f} s spent"))
            else:
                print(f"gpu-proof: {name} ...", file=sys.stderr, flush=True)
                try:
                    done.append(step())
                except Exception as exc:  # one broken check must not lose the others
                    done.append({"name": name, "status": ERROR, "detail": f"{exc!r}"[:400]})
        cpu_half: list[dict[str, Any]] = []
        if gpu:
            checks = done
        else:
            for check in done:
                if check["status"] == NOT_RUN:
                    checks.append(check)
                    continue
                cpu_half.append(cpu_half_entry(check))
                checks.append(not_run(check["name"], f"no GPU ({why}); its CPU half ran"))
                if check["status"] == ERROR:
                    kit_errors.append(f"{check['name']} (CPU half): {check.get('detail')}")
    report: dict[str, Any] = {
        "schema": SCHEMA,
        "started": started.isoformat(timespec="seconds"),
        "elapsed_s": round(time.monotonic() - t0, 1),
        "mode": "dry-run" if args.dry_run else ("quick" if args.quick else "full"),
        "scale": plan.scale,
        "gpu": gpu,
        "message": None if gpu else NO_GPU,
        "host": {
            "platform": platform.platform(),
            "machine": platform.machine(),
            "python": args.python,
            "torch": facts,
            "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith(_HOST_ENV)},
        },
        "checks": checks,
        "cpu_half": cpu_half,
        "kit_errors": kit_errors,
        "summary": summarize(checks),
    }
    write_report(out, report)
    print(table(report))
    print(f"report: {out} ({report['elapsed_s']} s)")
    for error in kit_errors:
        print(f"error: {error}", file=sys.stderr)
    if kit_errors:
        return EXIT_FAIL
    if not gpu:
        print(NO_GPU)
        return EXIT_NO_GPU
    return EXIT_OK if report["summary"][FAIL] + report["summary"][ERROR] == 0 else EXIT_FAIL


if __name__ == "__main__":
    sys.exit(main())
