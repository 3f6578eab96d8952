"""The ENTRYPOINT (``python -m reprobuild_entrypoint``), run as a child process the way the
image runs it, and its init mode (as PID 1 in a new PID namespace, and forced with
``REPROBUILD_FORCE_INIT=1`` where it is not PID 1)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import reprobuild_entrypoint
from helpers import runtime_tmp
from reprobuild_entrypoint.envplan import image_env

RUNTIME_ROOT = str(Path(reprobuild_entrypoint.__file__).resolve().parent.parent)
PY = sys.executable
IMAGE = {
    "REPROBUILD_IMAGE_SEED": "0",
    "REPROBUILD_IMAGE_DETERMINISM": "strict",
    "REPROBUILD_VARIANT": "gpu",
}
DUMP_ENV = "import json, os; print(json.dumps(dict(os.environ)))"


def image_environ(**extra: str) -> dict[str, str]:
    """A container's environment: PATH, the runtime on the path, and the baked image ENV."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": RUNTIME_ROOT,
        "REPROBUILD_MANIFEST_PATH": "/nonexistent/manifest.json",
        **IMAGE,
        **image_env(0, "strict", "gpu"),
        **runtime_tmp(),
        **extra,
    }


def run(
    *command: str, env: dict[str, str] | None = None, timeout: float = 60, stdin: int | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m reprobuild_entrypoint <command>``, importing the runtime under test."""
    return subprocess.run(
        [PY, "-m", "reprobuild_entrypoint", *command],
        env=env if env is not None else image_environ(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        stdin=stdin,
    )


def child_env(result: subprocess.CompletedProcess[str]) -> dict[str, str]:
    assert result.returncode == 0, result.stderr
    env: dict[str, str] = json.loads(result.stdout)
    return env


# ------------------------------------------------------------------------- exec and status


def test_arguments_pass_through_untouched() -> None:
    args = ["a b", "", "--flag", "$HOME", "*", "ünï", "--"]
    result = run("--", PY, "-c", "import json, sys; print(json.dumps(sys.argv[1:]))", *args)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == args


def test_the_command_replaces_the_entrypoint_process() -> None:
    proc = subprocess.Popen(
        [PY, "-m", "reprobuild_entrypoint", PY, "-c", "import os; print(os.getpid())"],
        env=image_environ(),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    out, _ = proc.communicate(timeout=60)
    assert int(out) == proc.pid  # exec, not a child: signals reach the program directly


@pytest.mark.parametrize("status", [0, 1, 3, 42, 255])
def test_exit_status_is_preserved(status: int) -> None:
    assert run("sh", "-c", f"exit {status}").returncode == status


def test_command_not_found_is_127() -> None:
    result = run("definitely-not-a-command-xyz")
    assert result.returncode == 127
    assert "command not found: 'definitely-not-a-command-xyz'" in result.stderr


def test_command_not_executable_is_126(tmp_path: Path) -> None:
    script = tmp_path / "script.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o644)
    result = run(str(script))
    assert result.returncode == 126
    assert "not executable" in result.stderr
    assert run(str(tmp_path)).returncode == 126  # a directory


def test_no_command_is_a_usage_error() -> None:
    result = run()
    assert result.returncode == 2 and "no command given" in result.stderr


@pytest.mark.parametrize(
    ("name", "value", "allowed"),
    [
        ("REPRO_SEED", "abc", "0 to 4294967295"),
        ("REPRO_SEED", "-1", "0 to 4294967295"),
        ("REPRO_SEED", "4294967296", "0 to 4294967295"),
        ("REPRO_DETERMINISM", "lenient", "strict, warn, off"),
        ("REPRO_THREADS", "0", "1 to 1024"),
        ("REPRO_RUN_ID", "../escape", "letters, digits"),
        ("REPROBUILD_BASE_ENTRYPOINT", "/opt/x.sh", "JSON list"),
    ],
)
def test_bad_value_is_one_line_and_status_2(name: str, value: str, allowed: str) -> None:
    result = run("sh", "-c", "echo ran", env=image_environ(**{name: value}))
    assert result.returncode == 2
    assert result.stdout == ""  # the command never ran
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"reprobuild: {name}={value!r}") and allowed in lines[0]


# ------------------------------------------------------------------- environment and summary


def test_summary_line_and_environment() -> None:
    result = run(PY, "-c", DUMP_ENV)
    env = child_env(result)
    for name, value in image_env(0, "strict", "gpu").items():
        assert env[name] == value
    assert env["OMP_WAIT_POLICY"] == "PASSIVE"  # set at run time, not baked
    count = len(image_env(0, "strict", "gpu")) + 1
    assert result.stderr.splitlines() == [
        f"reprobuild: seed 0, mode strict, threads 4, {count} variables set"
    ]


def test_repro_quiet_silences_the_summary() -> None:
    result = run("true", env=image_environ(REPRO_QUIET="1"))
    assert result.returncode == 0 and result.stderr == ""


def test_run_overrides_reach_the_program() -> None:
    result = run(
        PY,
        "-c",
        DUMP_ENV,
        env=image_environ(REPRO_SEED="1234", REPRO_THREADS="2", NCCL_ALGO="Tree", RANK="1"),
    )
    env = child_env(result)
    assert env["PYTHONHASHSEED"] == "1234" and env["OMP_NUM_THREADS"] == "2"
    assert env["NCCL_ALGO"] == "Tree"  # the user's value wins
    assert "seed 1234 (rank 1: seed 1235), mode strict, threads 2" in result.stderr
    assert "1 user-set kept (NCCL_ALGO)" in result.stderr


def test_off_removes_the_baked_variables() -> None:
    result = run(
        PY, "-c", DUMP_ENV, env=image_environ(REPRO_DETERMINISM="off", OMP_NUM_THREADS="3")
    )
    env = child_env(result)
    assert "PYTHONHASHSEED" not in env and "CUBLAS_WORKSPACE_CONFIG" not in env
    assert env["OMP_NUM_THREADS"] == "3"
    assert "mode off: determinism not configured" in result.stderr


HASH_ORDER = "print(list({f'key-{i}' for i in range(40)}))"


def test_string_hash_order_is_fixed_and_off_makes_it_random_again() -> None:
    fixed = {run(PY, "-c", HASH_ORDER).stdout for _ in range(2)}
    assert len(fixed) == 1
    other_seed = run(PY, "-c", HASH_ORDER, env=image_environ(REPRO_SEED="7")).stdout
    assert other_seed not in fixed
    off = {
        run(PY, "-c", HASH_ORDER, env=image_environ(REPRO_DETERMINISM="off")).stdout
        for _ in range(3)
    }
    assert len(off) > 1  # PYTHONHASHSEED removed: random hashing again


# --------------------------------------------------------------------------------- records


def test_run_record(tmp_path: Path) -> None:
    manifest = tmp_path / "manifest.json"
    manifest.write_text(
        json.dumps({"schema_version": 1, "builder_version": "0.1.0", "lock_sha256": "ab" * 32})
    )
    runs = tmp_path / "runs"
    env = image_environ(
        REPRO_RUN_DIR=str(runs),
        REPRO_SEED="5",
        OMP_NUM_THREADS="2",
        REPROBUILD_MANIFEST_PATH=str(manifest),
        CUDA_VERSION="12.4.1",
    )
    result = run(PY, "-c", DUMP_ENV, env=env)
    seen = child_env(result)
    records = list(runs.glob("run-*.json"))
    assert len(records) == 1
    record = json.loads(records[0].read_text())
    assert f"record {records[0]}" in result.stderr
    assert record["schema_version"] == 1 and record["kind"] == "reprobuild.run"
    assert (
        seen["REPRO_RUN_ID"] == record["run_id"]
        and records[0].name == f"run-{record['run_id']}.json"
    )
    assert seen["REPRO_RUN_DIR"] == str(runs)
    assert record["determinism"]["seed"] == 5 and record["determinism"]["mode"] == "strict"
    assert record["distributed"]["rank_seed"] == 5
    for name, value in record["environment"]["set"].items():
        assert seen[name] == value  # every variable it says it set, the program saw
    assert record["environment"]["user_set"] == {"OMP_NUM_THREADS": "2"}
    assert record["threads"]["variables"]["OMP_NUM_THREADS"] == "2"
    assert record["threads"]["variables"]["MKL_NUM_THREADS"] == "4"
    assert record["argv"] == record["command"] == [PY, "-c", DUMP_ENV]
    assert record["image"]["sha256"] == hashlib.sha256(manifest.read_bytes()).hexdigest()
    assert record["image"]["builder_version"] == "0.1.0"
    assert record["image"]["lock_sha256"] == "ab" * 32
    assert record["stack_env"] == {"CUDA_VERSION": "12.4.1"}
    assert record["python"]["version"] and record["host"]["cpu"]["count"]
    assert record["started"].endswith("Z") and record["init"] is False
    assert not list(runs.glob(".*"))  # no temporary file left behind


def test_run_record_without_a_manifest(tmp_path: Path) -> None:
    result = run("true", env=image_environ(REPRO_RUN_DIR=str(tmp_path), REPRO_RUN_ID="job-7.a"))
    assert result.returncode == 0, result.stderr
    record = json.loads((tmp_path / "run-job-7.a.json").read_text())
    assert record["image"] == {"path": "/nonexistent/manifest.json", "sha256": None}


def test_unwritable_run_dir_is_status_2(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = run("sh", "-c", "echo ran", env=image_environ(REPRO_RUN_DIR=str(blocker / "runs")))
    assert result.returncode == 2 and result.stdout == ""
    assert "cannot write the run record" in result.stderr


def test_relative_run_dir_is_exported_absolute(tmp_path: Path) -> None:
    result = subprocess.run(
        [PY, "-m", "reprobuild_entrypoint", PY, "-c", DUMP_ENV],
        env=image_environ(REPRO_RUN_DIR="runs", REPRO_QUIET="1"),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert child_env(result)["REPRO_RUN_DIR"] == str(tmp_path / "runs")


# ---------------------------------------------------------------------- base entrypoint


def test_base_entrypoint_is_chained(tmp_path: Path) -> None:
    base = tmp_path / "nvidia_entrypoint.sh"
    base.write_text('#!/bin/sh\necho "base saw: $*"\nexport FROM_BASE=yes\nexec "$@"\n')
    base.chmod(0o755)
    env = image_environ(
        REPROBUILD_BASE_ENTRYPOINT=json.dumps([str(base)]), REPRO_RUN_DIR=str(tmp_path)
    )
    result = run("sh", "-c", 'echo "program: $FROM_BASE $PYTHONHASHSEED"; exit 5', env=env)
    assert result.returncode == 5
    assert result.stdout.splitlines() == [
        'base saw: sh -c echo "program: $FROM_BASE $PYTHONHASHSEED"; exit 5',
        "program: yes 0",
    ]
    record = json.loads(next(tmp_path.glob("run-*.json")).read_text())
    assert record["base_entrypoint"] == [str(base)]
    assert record["command"][0] == str(base) and record["argv"][0] == "sh"


def test_empty_base_entrypoint_means_none() -> None:
    result = run("sh", "-c", "echo direct", env=image_environ(REPROBUILD_BASE_ENTRYPOINT="[]"))
    assert result.stdout == "direct\n"


# ------------------------------------------------------------------------------- init mode

PROGRAM = textwrap.dedent(
    """
    import os, signal, sys, time

    def on_term(signum, frame):
        # os.write, not print: the signal can land while the main code is still inside
        # print("ready")'s buffered write, and re-entering that buffer raises RuntimeError
        os.write(1, f"handled {signum}\\n".encode())
        sys.exit(7)

    signal.signal(signal.SIGTERM, on_term)
    print("pid", os.getpid(), flush=True)
    read, write = os.pipe()
    if os.fork() == 0:            # a child that orphans a grandchild, then exits
        grandchild = os.fork()
        if grandchild == 0:
            time.sleep(0.3)       # exits after its parent: a zombie for init to reap
            os._exit(0)
        os.write(write, str(grandchild).encode())
        os._exit(0)
    os.wait()
    grandchild = int(os.read(read, 32))
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:  # until init has reaped it (a zombie shows "Z")
        try:
            with open(f"/proc/{grandchild}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):  # reaped before open, or between
            state = "gone"                                # open and read (ESRCH)
            break
        time.sleep(0.05)
    print("grandchild", state, flush=True)
    print("ready", flush=True)
    # short sleeps, not one sleep(60): Python runs a handler between bytecodes, so a SIGTERM
    # that lands after the interpreter's last check and before the sleep's syscall would
    # wait out the whole sleep (this test once hung on it in CI)
    for _ in range(600):
        time.sleep(0.1)
    """
)


def start_supervised(
    tmp_path: Path, prefix: list[str], env: dict[str, str]
) -> subprocess.Popen[str]:
    program = tmp_path / "program.py"
    program.write_text(PROGRAM)
    return subprocess.Popen(
        [*prefix, PY, "-m", "reprobuild_entrypoint", PY, str(program)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def signal_mask(pid: int, field: str = "SigBlk") -> set[int]:
    """A signal set of ``pid`` from /proc/PID/status (a hex bit mask): ``SigBlk`` the blocked
    signals, ``SigCgt`` those with a handler."""
    status = Path(f"/proc/{pid}/status").read_text()
    mask = int(
        next(line for line in status.splitlines() if line.startswith(f"{field}:")).split()[1], 16
    )
    return {signum for signum in range(1, 65) if mask >> (signum - 1) & 1}


def wait_for_ready(proc: subprocess.Popen[str]) -> list[str]:
    assert proc.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line.strip())
        if line.strip() == "ready":
            return lines
    proc.kill()
    _, err = proc.communicate(timeout=10)
    pytest.fail(f"the program never got ready: {lines}; stderr: {err}")


def test_forced_init_forwards_sigterm_and_reaps_orphans(tmp_path: Path) -> None:
    proc = start_supervised(tmp_path, [], image_environ(REPROBUILD_FORCE_INIT="1"))
    try:
        lines = wait_for_ready(proc)
        assert "grandchild gone" in lines, lines  # reaped, not left a zombie ("Z")
        program = int(lines[0].split()[-1])
        init_caught, program_blocked = signal_mask(proc.pid, "SigCgt"), signal_mask(program)
        proc.send_signal(signal.SIGTERM)  # what `docker stop` sends to PID 1
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    # init takes its signals with sigwaitinfo, so it has no handler that could run late; the
    # program gets back the mask init started with, so its own handlers run
    assert not init_caught & {signal.SIGTERM, signal.SIGINT, signal.SIGCHLD}
    assert not program_blocked & {signal.SIGTERM, signal.SIGINT, signal.SIGCHLD}
    assert out.strip() == "handled 15", (out, err)
    assert proc.returncode == 7, (out, err)  # the program's own exit status
    assert "running as init" in err


def test_init_exit_status_of_a_killed_program_is_128_plus_signal() -> None:
    result = run("sh", "-c", "kill -KILL $$", env=image_environ(REPROBUILD_FORCE_INIT="1"))
    assert result.returncode == 128 + signal.SIGKILL


def test_init_mode_keeps_127() -> None:
    assert (
        run("no-such-command-abc", env=image_environ(REPROBUILD_FORCE_INIT="1")).returncode == 127
    )


def test_init_forwards_sigint_to_the_program_group(tmp_path: Path) -> None:
    script = tmp_path / "trap.sh"
    script.write_text(
        "trap 'echo \"got INT\"; exit 9' INT\necho ready\nwhile :; do sleep 0.1; done\n"
    )
    proc = subprocess.Popen(
        [PY, "-m", "reprobuild_entrypoint", "sh", str(script)],
        env=image_environ(REPROBUILD_FORCE_INIT="1", REPRO_QUIET="1"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=20)
    finally:
        proc.kill()
    assert "got INT" in out and proc.returncode == 9


UNSHARE = shutil.which("unshare")


def test_as_pid_1_in_a_new_pid_namespace(tmp_path: Path) -> None:
    """The real thing: PID 1, where the kernel drops default-action signals."""
    if UNSHARE is None or os.geteuid() != 0:
        pytest.fail(
            "this test needs util-linux `unshare` and root (both are on the dev/CI machine)"
        )
    proc = start_supervised(
        tmp_path, [UNSHARE, "--pid", "--fork", "--mount-proc"], image_environ(REPRO_QUIET="1")
    )
    try:
        lines = wait_for_ready(proc)
        assert "grandchild gone" in lines, lines
        # unshare --fork waits for our PID 1; signal the entrypoint itself, as docker stop does
        entry_pid = int(
            subprocess.run(
                ["pgrep", "-P", str(proc.pid)], capture_output=True, text=True, check=True
            ).stdout.split()[0]
        )
        os.kill(entry_pid, signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
    finally:
        proc.kill()
    assert out.strip() == "handled 15", err
    assert proc.returncode == 7


def test_without_a_run_dir_the_record_goes_to_the_temp_dir(tmp_path: Path) -> None:
    """No ``REPRO_RUN_DIR``: the record is written to ``$TMPDIR/reprobuild-run`` for the
    trackers' hooks (``REPRO_RUN_RECORD``, ``REPRO_RUN_ID``), and nothing else changes: no
    ``REPRO_RUN_DIR`` (no framework records), the same summary line."""
    result = run(PY, "-c", DUMP_ENV, env=image_environ(TMPDIR=str(tmp_path)))
    env = child_env(result)
    record = Path(env["REPRO_RUN_RECORD"])
    assert record == tmp_path / "reprobuild-run" / f"run-{env['REPRO_RUN_ID']}.json"
    assert json.loads(record.read_text())["run_id"] == env["REPRO_RUN_ID"]
    assert "REPRO_RUN_DIR" not in env
    assert len(result.stderr.splitlines()) == 1 and "record" not in result.stderr


def test_a_default_record_that_cannot_be_written_is_left_out_quietly(tmp_path: Path) -> None:
    (tmp_path / "reprobuild-run").write_text("")  # a file where the folder would go
    result = run(PY, "-c", DUMP_ENV, env=image_environ(TMPDIR=str(tmp_path)))
    env = child_env(result)
    assert "REPRO_RUN_RECORD" not in env and "REPRO_RUN_ID" not in env
    assert len(result.stderr.splitlines()) == 1
