"""Issue 14: what determinism costs on CPU, by thread count, and whether oneDNN may stay on.

Used by ``runtime_bench.py --threads-table``. Two "real-world" scripts (workloads/torch_cnn.py,
workloads/keras_lstm.py) run in these configurations:

- ``bare``: on the host, in a venv installed from the same locked wheels as the image;
- ``off``: in the image, ``REPRO_DETERMINISM=off``;
- ``strict`` is the runtime as built: in strict mode TensorFlow runs oneDNN's kernels (its own
  default; the runtime's default since issue 14), under op determinism;
- ``strict-eigen`` (Keras only): strict with ``TF_ENABLE_ONEDNN_OPTS=0`` (Eigen's kernels, the
  runtime's default before issue 14);
- ``strict-nocnr`` (torch only): strict with ``MKL_CBWR`` empty (oneMKL's conditional
  numerical reproducibility off), to see what that costs and whether the bits still repeat;
- ``strict-nofill`` (torch only): strict with ``fill_uninitialized_memory`` off, to see what
  that part of torch's deterministic mode costs;
- ``off-mklfixed`` (torch only): ``off`` with ``MKL_DYNAMIC=FALSE``, as strict sets it (and as
  ``torch.set_num_threads``, which strict calls, forces). ``off`` leaves oneMKL's dynamic
  adjustment on, and oneMKL then may run fewer threads than it was given: this row tells the
  cost of strict from the cost of oneMKL really running the thread count it was given;

each at the runtime's default thread count, at the container's CPU count and at 1, plus
``auto`` (no count set: each framework picks its own) for bare and off. In ``off`` and bare
runs the count is set by the workload itself (``BENCH_THREADS``, the runtime's variables set
before the framework loads), and so is the seed (``BENCH_SEED=0``, strict's seed, so that all
configurations train the same trajectory); strict runs get ``REPRO_THREADS``, as a user would,
and an unmodified script.

The host has few CPUs and other jobs may share them, so nothing here is an absolute figure:
every configuration runs once per round, rounds repeat (A B C ... A B C ...), configurations
that are compared run next to each other within a round, and a ratio is the median over rounds
of the two configurations' times in the same round. Image runs go through the image's
ENTRYPOINT, by ``docker exec`` into one long-lived container, timed inside it.

Determinism: every strict run prints its validation losses in full; runs of one configuration
(same seed, same thread count) must print the same bits. Distinct outputs are counted per
configuration, and compared across thread counts and oneDNN on/off. Probes on the suite's
keras_conv.py add oneDNN on/off at the CPU's best instruction set and capped at SSE4.1.
"""

from __future__ import annotations

import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker

HERE = Path(__file__).resolve().parent
WORKLOADS = HERE / "workloads"
LOCK = HERE.parent / "tests" / "data" / "projects" / "determinism" / "requirements.lock"
SCRIPTS = ("torch_cnn", "keras_lstm")
QUIET = {"REPRO_QUIET": "1", "TF_CPP_MIN_LOG_LEVEL": "3"}
IMAGE_PY = "/opt/venv/bin/python"
QUIET_IDLE = 0.9  # a group of runs starts once the CPUs were this idle over QUIET_WINDOW_S
QUIET_WINDOW_S = 2.0
# ... or after this long, whatever the host is doing (BENCH_QUIET_MAX_WAIT_S: on a host that is
# never idle, waiting only lengthens the run; the paired ratios still hold)
QUIET_MAX_WAIT_S = float(os.environ.get("BENCH_QUIET_MAX_WAIT_S", "90"))
CONTENDED = 0.15  # a run during which others used more of the CPUs than this is contended


def cpu_seconds() -> tuple[float, float]:
    """(busy, elapsed) CPU-seconds of the whole host so far, from /proc/stat. Containers share
    the host's kernel, so this sees their processes too; steal (a busy hypervisor) counts as
    busy, as it is capacity that our runs did not get."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    user, nice, system, idle, iowait, irq, softirq, steal = fields
    tick = os.sysconf("SC_CLK_TCK")
    busy = user + nice + system + irq + softirq + steal
    return busy / tick, (busy + idle + iowait) / tick


def wait_quiet() -> float:
    """Wait until the host's CPUs were QUIET_IDLE idle over a window (at most
    QUIET_MAX_WAIT_S); returns the seconds waited."""
    start = time.monotonic()
    while time.monotonic() - start < QUIET_MAX_WAIT_S:
        busy0, total0 = cpu_seconds()
        time.sleep(QUIET_WINDOW_S)
        busy1, total1 = cpu_seconds()
        if total1 > total0 and 1 - (busy1 - busy0) / (total1 - total0) >= QUIET_IDLE:
            break
    return time.monotonic() - start


@dataclass(frozen=True)
class Config:
    script: str  # a workload's name, or a path in the image (the determinism suite's scripts)
    mode: str  # bare | off | off-mklfixed | strict | strict-eigen | strict-nofill | strict-nocnr
    threads: int | None  # None: auto (bare and off only) / the runtime's default (strict)
    label_threads: str  # "auto", "default", "nproc" or "1"
    isa: str | None = None  # ONEDNN_MAX_CPU_ISA, for the determinism probes

    @property
    def label(self) -> str:
        name = Path(self.script).stem
        isa = f" isa={self.isa}" if self.isa else ""
        return f"{name} {self.mode} {self.label_threads}{isa}"


COUNTS = ("auto", "default", "nproc", "1")


def configs(
    default_threads: int,
    nproc: int,
    only: tuple[str, ...] = COUNTS,
    scripts: tuple[str, ...] = SCRIPTS,
) -> list[Config]:
    """One round, in order. The configurations compared with each other run side by side
    (bare, off, strict, strict-eigen at one thread count), so that a ratio compares runs a
    few seconds apart, whatever else the host is doing."""
    counts = [("auto", None), ("default", default_threads), ("nproc", nproc), ("1", 1)]
    counts = [(label, count) for label, count in counts if label in only]
    out: list[Config] = []
    for script in scripts:
        if script == "keras_lstm":
            modes = ["bare", "off", "strict", "strict-eigen"]
        else:
            modes = ["bare", "off", "off-mklfixed", "strict", "strict-nofill", "strict-nocnr"]
        for label, count in counts:
            for mode in modes:
                if label != "auto" or mode in ("bare", "off"):
                    out.append(Config(script, mode, count, label))
    return out


def probes(default_threads: int) -> list[Config]:
    """Determinism probes, on the suite's own Keras script (tests/engine/test_determinism.py):
    oneDNN on and off, each at the CPU's best instruction set and capped at SSE4.1
    (``ONEDNN_MAX_CPU_ISA``): does oneDNN keep the suite's run-to-run guarantee, and do the
    bits follow the CPU's instruction set with oneDNN off too?"""
    script = "/app/scripts/keras_conv.py"
    return [
        Config(script, mode, default_threads, "default", isa)
        for mode in ("strict", "strict-eigen")
        for isa in (None, "SSE41")
    ]


def ensure_host_venv(venv: Path, wheels: Path) -> Path:
    """The bare host's interpreter: a venv holding exactly the lock, from the wheel cache."""
    python = venv / "bin" / "python"
    if python.exists():
        return python
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            "--no-index",
            "--find-links",
            str(wheels),
            "--require-hashes",
            "-r",
            str(LOCK),
        ],
        check=True,
    )
    return python


class Runner:
    """Runs one configuration once, on the host or in the container; returns the timer's JSON."""

    def __init__(self, image: str, host_python: Path) -> None:
        self.client = docker.from_env()
        self.image = image
        self.host_python = host_python
        self.entrypoint = self.client.images.get(image).attrs["Config"]["Entrypoint"]
        self.container = self.client.containers.run(
            image,
            ["infinity"],
            entrypoint=["sleep"],
            name=f"reprobuild-bench-threads-{uuid.uuid4().hex[:10]}",
            detach=True,
            network_disabled=True,
            volumes={str(HERE): {"bind": "/bench", "mode": "ro"}},
        )

    def close(self) -> None:
        self.container.remove(force=True)

    def exec(self, argv: list[str], env: dict[str, str] | None = None) -> str:
        code, (out, err) = self.container.exec_run(
            argv, environment=env or {}, workdir="/bench/workloads", demux=True
        )
        if code != 0:
            raise RuntimeError(f"{argv} exited {code}: {(err or b'').decode()[-2000:]}")
        return (out or b"").decode()

    def run(self, config: Config) -> dict[str, Any]:
        script = config.script if "/" in config.script else f"{config.script}.py"
        env = dict(QUIET)
        if config.isa:
            env["ONEDNN_MAX_CPU_ISA"] = config.isa
        if config.mode in ("bare", "off", "off-mklfixed"):
            env["BENCH_SEED"] = "0"  # the runtime's seed in strict: the same trajectory
            if config.threads is not None:
                env["BENCH_THREADS"] = str(config.threads)
        if config.mode.startswith("strict") and config.label_threads != "default":
            env["REPRO_THREADS"] = str(config.threads)
        if config.mode in ("off", "off-mklfixed"):
            env["REPRO_DETERMINISM"] = "off"
        if config.mode == "off-mklfixed":
            env["BENCH_MKL_FIXED"] = "1"
        if config.mode == "strict-eigen":
            env["TF_ENABLE_ONEDNN_OPTS"] = "0"
        if config.mode == "strict-nofill":
            env["BENCH_TORCH_NOFILL"] = "1"
        if config.mode == "strict-nocnr":
            env["MKL_CBWR"] = ""  # oneMKL's conditional numerical reproducibility left off
        busy0, total0 = cpu_seconds()
        if config.mode == "bare":
            host_env = {
                "PATH": f"{self.host_python.parent}:/usr/bin:/bin",
                "HOME": os.environ.get("HOME", "/root"),
                "PYTHONUNBUFFERED": "1",  # as the image sets it
                **env,
            }
            proc = subprocess.run(
                [sys.executable, "-I", "-S", "_timed.py", str(self.host_python), script],
                cwd=WORKLOADS,
                env=host_env,
                capture_output=True,
                text=True,
                check=True,
            )
            raw = proc.stdout
        else:
            timer = [IMAGE_PY, "-I", "-S", "/bench/workloads/_timed.py"]
            raw = self.exec([*timer, *self.entrypoint, "python", script], env)
        busy1, total1 = cpu_seconds()
        result: dict[str, Any] = json.loads(raw.strip().splitlines()[-1])
        if result["rc"] != 0:
            raise RuntimeError(f"{config.label} exited {result['rc']}:\n{result['stderr_tail']}")
        others = max(0.0, busy1 - busy0 - result["cpu_s"])
        result["others"] = round(others / (total1 - total0), 3) if total1 > total0 else None
        return result


def split_output(stdout: str) -> tuple[str, float | None]:
    """(the loss lines, the training time the script printed)."""
    losses, train = [], None
    for line in stdout.splitlines():
        if line.startswith("train_s "):
            train = float(line.split()[1])
        else:
            losses.append(line)
    return "\n".join(losses), train


def paired_ratio(a: dict[str, Any], b: dict[str, Any], key: str) -> dict[str, Any]:
    """a / b per round (both measured in the same round, side by side): the median, the range,
    and how many rounds went in. Rounds where either run was contended (others used more than
    CONTENDED of the CPUs) are left out, unless fewer than 3 quiet rounds are left."""
    pairs = list(zip(a[key], b[key], a["others"], b["others"], strict=True))
    quiet = [(x, y) for x, y, ox, oy in pairs if max(ox or 0, oy or 0) <= CONTENDED]
    used = quiet if len(quiet) >= 3 else [(x, y) for x, y, _, _ in pairs]
    values = [x / y for x, y in used if x is not None and y]
    return {
        "median": round(statistics.median(values), 3),
        "min": round(min(values), 3),
        "max": round(max(values), 3),
        "rounds": len(values),
        "quiet_only": used is quiet,
    }


def measure(
    image: str,
    host_python: Path,
    rounds: int,
    raw_out: Path,
    log: Any = print,
    counts: tuple[str, ...] = COUNTS,
    scripts: tuple[str, ...] = SCRIPTS,
) -> dict[str, Any]:
    runner = Runner(image, host_python)
    try:
        # Not `nproc`: GNU nproc honours OMP_NUM_THREADS, which the image sets.
        cpus = "import os; print(len(os.sched_getaffinity(0)))"
        nproc = int(runner.exec([IMAGE_PY, "-I", "-S", "-c", cpus]).strip())
        default = int(
            runner.exec(
                [
                    IMAGE_PY,
                    "-c",
                    "from reprobuild_entrypoint.settings import DEFAULT_THREADS as d; print(d)",
                ]
            ).strip()
        )
        table = configs(default, nproc, counts, scripts)
        if "keras_lstm" in scripts:  # the oneDNN probes belong to the Keras question
            table += probes(default)
        samples: dict[str, list[dict[str, Any]]] = {c.label: [] for c in table}
        log(f"{len(table)} configurations x {rounds} rounds; container nproc {nproc}")
        for script in scripts:  # warm the page cache on both sides; not measured
            for mode in ("bare", "strict"):
                runner.run(Config(script, mode, default, "default"))
        started = time.time()
        for round_no in range(rounds):
            group = None
            for config in table:
                if (config.script, config.label_threads) != group:  # runs compared: one gate
                    group = (config.script, config.label_threads)
                    waited = wait_quiet()
                result = runner.run(config)
                result["waited_s"], waited = round(waited, 1), 0.0
                samples[config.label].append(result)
                log(
                    f"round {round_no + 1}/{rounds} {config.label:40s} "
                    f"{result['wall_s']:7.2f} s  others {result['others']:.2f}  "
                    f"waited {result['waited_s']:4.0f} s  ({time.time() - started:6.0f} s in)"
                )
        raw_out.parent.mkdir(exist_ok=True)
        raw_out.write_text(json.dumps(samples) + "\n")  # kept whatever summarising does
        return summarise(table, samples, nproc, default, image, rounds)
    finally:
        runner.close()


def summarise(
    table: list[Config],
    samples: dict[str, list[dict[str, Any]]],
    nproc: int,
    default: int,
    image: str,
    rounds: int,
) -> dict[str, Any]:
    rows: dict[str, dict[str, Any]] = {}
    for config in table:
        runs = samples[config.label]
        outputs = [split_output(r["stdout"]) for r in runs]
        rows[config.label] = {
            "script": config.script,
            "mode": config.mode,
            "threads": config.label_threads,
            "thread_count": config.threads,
            "wall_s": [round(r["wall_s"], 3) for r in runs],
            "cpu_s": [round(r["cpu_s"], 3) for r in runs],
            "others": [r["others"] for r in runs],
            "waited_s": [r["waited_s"] for r in runs],
            "train_s": [t for _, t in outputs],
            "median_wall_s": round(statistics.median(r["wall_s"] for r in runs), 3),
            "median_cpu_s": round(statistics.median(r["cpu_s"] for r in runs), 3),
            "distinct_outputs": len({loss for loss, _ in outputs}),
            "output": outputs[0][0],
        }

    def ratio(script: str, a: str, b: str, key: str = "wall_s") -> dict[str, Any] | None:
        ra, rb = rows.get(f"{script} {a}"), rows.get(f"{script} {b}")
        if ra is None or rb is None:
            return None
        return paired_ratio(ra, rb, key)

    ratios: dict[str, dict[str, dict[str, Any]]] = {}
    for script in SCRIPTS:
        r: dict[str, dict[str, Any] | None] = {}
        for t in ("default", "nproc", "1"):
            r[f"strict/off @{t}"] = ratio(script, f"strict {t}", f"off {t}")
            r[f"strict/off @{t} (training only)"] = ratio(
                script, f"strict {t}", f"off {t}", "train_s"
            )
            r[f"strict/off @{t} (CPU time)"] = ratio(script, f"strict {t}", f"off {t}", "cpu_s")
            r[f"off/bare @{t}"] = ratio(script, f"off {t}", f"bare {t}")
            r[f"strict/bare @{t}"] = ratio(script, f"strict {t}", f"bare {t}")
            if script == "torch_cnn":
                r[f"strict-nofill/off @{t}"] = ratio(script, f"strict-nofill {t}", f"off {t}")
                r[f"strict-nofill/strict @{t}"] = ratio(script, f"strict-nofill {t}", f"strict {t}")
                r[f"strict-nocnr/off @{t}"] = ratio(script, f"strict-nocnr {t}", f"off {t}")
                r[f"strict-nocnr/strict @{t}"] = ratio(script, f"strict-nocnr {t}", f"strict {t}")
                r[f"off-mklfixed/off @{t}"] = ratio(script, f"off-mklfixed {t}", f"off {t}")
                r[f"strict/off-mklfixed @{t}"] = ratio(script, f"strict {t}", f"off-mklfixed {t}")
                r[f"strict/off-mklfixed @{t} (CPU time)"] = ratio(
                    script, f"strict {t}", f"off-mklfixed {t}", "cpu_s"
                )
            if script == "keras_lstm":
                r[f"strict-eigen/off @{t}"] = ratio(script, f"strict-eigen {t}", f"off {t}")
                r[f"strict-eigen/strict @{t}"] = ratio(script, f"strict-eigen {t}", f"strict {t}")
        r["off default/off nproc"] = ratio(script, "off default", "off nproc")
        r["strict default/strict nproc"] = ratio(script, "strict default", "strict nproc")
        r["strict 1/strict nproc"] = ratio(script, "strict 1", "strict nproc")
        r["off auto/bare auto"] = ratio(script, "off auto", "bare auto")
        r["strict default/bare auto"] = ratio(script, "strict default", "bare auto")
        r["strict nproc/bare auto"] = ratio(script, "strict nproc", "bare auto")
        if script == "keras_lstm":
            r["strict-eigen nproc/bare auto"] = ratio(script, "strict-eigen nproc", "bare auto")
        ratios[script] = {k: v for k, v in r.items() if v is not None}

    determinism: dict[str, Any] = {}
    for script in SCRIPTS:
        # bare and off runs are seeded by the script (BENCH_SEED): identical runs there mean
        # seeding alone was enough for this script on this host; strict runs are not seeded
        for mode in (
            "bare",
            "off",
            "off-mklfixed",
            "strict",
            "strict-eigen",
            "strict-nofill",
            "strict-nocnr",
        ):
            per_count = {
                t: rows[f"{script} {mode} {t}"]
                for t in ("auto", "default", "nproc", "1")
                if f"{script} {mode} {t}" in rows
            }
            if not per_count:
                continue
            determinism[f"{script} {mode}"] = {
                "runs_per_thread_count": rounds,
                "bit_identical_run_to_run": {
                    t: row["distinct_outputs"] == 1 for t, row in per_count.items()
                },
                # only meaningful where each count is identical run to run
                "same_bits_across_thread_counts": (
                    len({row["output"] for row in per_count.values()}) == 1
                    if all(row["distinct_outputs"] == 1 for row in per_count.values())
                    else None
                ),
            }
    if "keras_lstm strict nproc" in rows and "keras_lstm strict-eigen nproc" in rows:
        determinism["keras_lstm onednn on == off (same bits)"] = (
            rows["keras_lstm strict nproc"]["output"]
            == rows["keras_lstm strict-eigen nproc"]["output"]
        )
    for t in ("default", "nproc", "1"):
        fixed, off = rows.get(f"torch_cnn off-mklfixed {t}"), rows.get(f"torch_cnn off {t}")
        strict = rows.get(f"torch_cnn strict {t}")
        if fixed and off and strict:
            # does oneMKL's dynamic adjustment change the bits, and is it all that tells
            # strict's bits from off's (both train from seed 0)?
            determinism[f"torch_cnn @{t}: off-mklfixed == off (same bits)"] = (
                fixed["output"] == off["output"]
            )
            determinism[f"torch_cnn @{t}: off-mklfixed == strict (same bits)"] = (
                fixed["output"] == strict["output"]
            )
    probe_rows = {label: row for label, row in rows.items() if label.startswith("keras_conv ")}
    if probe_rows:
        determinism["keras_conv (suite) bit_identical_run_to_run"] = {
            label: row["distinct_outputs"] == 1 for label, row in probe_rows.items()
        }
        for mode in ("strict", "strict-eigen"):
            best = probe_rows.get(f"keras_conv {mode} default")
            capped = probe_rows.get(f"keras_conv {mode} default isa=SSE41")
            if best and capped:
                determinism[f"keras_conv {mode}: same bits at SSE4.1 as at the CPU's best ISA"] = (
                    best["output"] == capped["output"]
                )
    return {
        "schema": 1,
        "what": "issue 14: CPU cost of determinism by thread count (runtime_bench --threads-table)",
        "image": image,
        "rounds": rounds,
        "container_nproc": nproc,
        "runtime_default_threads": default,
        "host": {
            "cpu_count": os.cpu_count(),
            "cpu_model": _cpu_model(),
            "python": platform.python_version(),
            "loadavg_at_end": os.getloadavg(),
        },
        "ratio_method": (
            "median over rounds of the per-round ratio of the two configurations' wall times "
            "(CPU time: user+sys of the process tree; training only: the time the script "
            f"printed for its training loop); rounds where either run had others using more "
            f"than {CONTENDED:.0%} of the CPUs are left out unless fewer than 3 remain; each "
            f"group of compared runs starts after the host was {QUIET_IDLE:.0%} idle for "
            f"{QUIET_WINDOW_S:g} s (waiting at most {QUIET_MAX_WAIT_S:g} s)"
        ),
        "rows": rows,
        "ratios": ratios,
        "determinism": determinism,
    }


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def print_table(data: dict[str, Any]) -> None:
    print(
        f"image {data['image']}; container nproc {data['container_nproc']}, runtime default "
        f"{data['runtime_default_threads']} threads; {data['rounds']} rounds, medians"
    )
    print(f"{'configuration':34s} {'wall s':>8s} {'train s':>8s}  outputs")
    for label, row in data["rows"].items():
        train = [t for t in row["train_s"] if t is not None]
        train_text = f"{statistics.median(train):8.2f}" if train else "       -"
        print(
            f"{label:34s} {row['median_wall_s']:8.2f} {train_text}  "
            f"{row['distinct_outputs']} distinct"
        )
    for script, ratios in data["ratios"].items():
        print(f"-- ratios, {script}")
        for name, value in ratios.items():
            quiet = "quiet" if value["quiet_only"] else "ALL, contended"
            print(
                f"   {name:42s} {value['median']:6.3f}  ({value['min']:.2f}-{value['max']:.2f}, "
                f"{value['rounds']} rounds, {quiet})"
            )
    print("-- determinism")
    for name, value in data["determinism"].items():
        print(f"   {name}: {value}")


def default_wheels() -> Path:
    from reprobuild.locks.wheels import cache_root

    tag = f"cp{sys.version_info.major}{sys.version_info.minor}-{platform.machine()}"
    libc, version = platform.libc_ver()
    found = sorted((cache_root() / "wheels").glob(f"{tag}-{libc}{version}"))
    return found[0] if found else cache_root() / "wheels" / f"{tag}-{libc}{version}"


def main(
    image: str,
    host_venv: Path,
    rounds: int,
    out: Path,
    counts: tuple[str, ...] = COUNTS,
    scripts: tuple[str, ...] = SCRIPTS,
) -> int:
    # SIGTERM/SIGHUP unwind like Ctrl-C, so measure()'s finally removes the bench container
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.default_int_handler)
    host_python = ensure_host_venv(host_venv, default_wheels())
    raw = out.with_name(out.stem + ".raw.json")
    data = measure(
        image,
        host_python,
        rounds,
        raw,
        log=lambda m: print(m, file=sys.stderr, flush=True),
        counts=counts,
        scripts=scripts,
    )
    out.parent.mkdir(exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    tmp.replace(out)
    print_table(data)
    print(f"results: {out}")
    return 0
