"""The exit record (issue 12): as init, the entrypoint writes how the command ended, so a
preempted run (``docker stop``: SIGTERM, the program saves and exits 0) is told apart from one
that finished."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

from unit.test_runtime_entrypoint import PY, image_environ, start_supervised, wait_for_ready


def exit_records(run_dir: Path) -> list[dict[str, object]]:
    return [json.loads(p.read_text()) for p in sorted(run_dir.glob("run-*-exit.json"))]


def test_a_signalled_run_says_it_ended_by_signal(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    env = image_environ(REPROBUILD_FORCE_INIT="1", REPRO_RUN_DIR=str(runs), REPRO_QUIET="1")
    proc = start_supervised(tmp_path, [], env)
    try:
        wait_for_ready(proc)
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    finally:
        proc.kill()
    [record] = exit_records(runs)
    assert record["kind"] == "reprobuild.run_exit"
    assert record["ended_by"] == "signal"
    assert record["signals_received"] == ["SIGTERM"]
    assert record["exit_status"] == proc.returncode == 7
    assert record["killed_by"] is None
    # the run record is still the one readers find first
    from reprobuild.checks.runrecords import read_run_dir

    found = read_run_dir(runs).record
    assert found is not None and found["kind"] == "reprobuild.run"


def test_a_run_that_finishes_says_exit(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    env = image_environ(REPROBUILD_FORCE_INIT="1", REPRO_RUN_DIR=str(runs), REPRO_QUIET="1")
    result = subprocess.run(
        [PY, "-m", "reprobuild_entrypoint", PY, "-c", "raise SystemExit(3)"],
        env=env,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 3
    [record] = exit_records(runs)
    assert (record["ended_by"], record["exit_status"], record["signals_received"]) == (
        "exit",
        3,
        [],
    )


def test_killed_by_a_signal_is_named(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    env = image_environ(REPROBUILD_FORCE_INIT="1", REPRO_RUN_DIR=str(runs), REPRO_QUIET="1")
    subprocess.run(
        [PY, "-m", "reprobuild_entrypoint", "sh", "-c", "kill -KILL $$"],
        env=env,
        capture_output=True,
        timeout=60,
        check=False,
    )
    [record] = exit_records(runs)
    assert (record["ended_by"], record["killed_by"]) == ("signal", "SIGKILL")
