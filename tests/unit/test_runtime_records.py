"""The runtime's small pure helpers: records, atomic JSON, the strict-mode hint, launch
parsing, the summary line and wait statuses."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import signal
from pathlib import Path

import pytest

from reprobuild_entrypoint import excepthook, initproc, jsonfile, runrecord
from reprobuild_entrypoint.__main__ import summary
from reprobuild_entrypoint.envplan import plan
from reprobuild_entrypoint.launch import parse_base_entrypoint
from reprobuild_entrypoint.settings import SettingsError, from_environ

MOMENT = dt.datetime(2025, 3, 4, 5, 6, 7, 890000, tzinfo=dt.timezone.utc)  # noqa: UP017


def test_run_ids() -> None:
    assert runrecord.new_run_id(MOMENT, "0a1b2c3d") == "20250304T050607Z-0a1b2c3d"
    assert runrecord.timestamp(MOMENT) == "2025-03-04T05:06:07.890Z"
    assert runrecord.check_run_id("job-7.a_b") == "job-7.a_b"
    for bad in ("", "../x", ".hidden", "a/b", "x" * 129, "sp ace"):
        with pytest.raises(SettingsError, match="REPRO_RUN_ID"):
            runrecord.check_run_id(bad)


def test_record_paths() -> None:
    assert runrecord.run_record_path("/runs", "r1") == Path("/runs/run-r1.json")
    path = runrecord.framework_record_path("/runs", "r1", "pod/a b", 42)
    assert path == Path("/runs/run-r1-frameworks-pod_a_b-42.json")


def test_manifest_info(tmp_path: Path) -> None:
    assert runrecord.manifest_info(tmp_path / "none.json") == {
        "path": str(tmp_path / "none.json"),
        "sha256": None,
    }
    good = tmp_path / "manifest.json"
    good.write_bytes(b'{"schema_version": 1, "lock_sha256": "aa", "base_digest": "sha256:bb"}\n')
    info = runrecord.manifest_info(good)
    assert info["sha256"] == hashlib.sha256(good.read_bytes()).hexdigest()
    assert (info["lock_sha256"], info["base_digest"], info["builder_version"]) == (
        "aa",
        "sha256:bb",
        None,
    )
    for raw, error in ((b"{not json", "not valid JSON"), (b"[1]", "not a JSON object")):
        bad = tmp_path / "bad.json"
        bad.write_bytes(raw)
        info = runrecord.manifest_info(bad)
        assert info["sha256"] == hashlib.sha256(raw).hexdigest() and error in info["error"]


def test_run_record_is_pure_and_complete() -> None:
    env = {"REPRO_SEED": "9", "MKL_NUM_THREADS": "1", "CUDNN_VERSION": "9.1.0", "RANK": "2"}
    settings = from_environ(env)
    record = runrecord.run_record(
        run_id="r",
        started=MOMENT,
        settings=settings,
        env_plan=plan(env, settings),
        argv=["python", "train.py"],
        command=["/base.sh", "python", "train.py"],
        base_entrypoint=["/base.sh"],
        init=True,
        environ=env,
        manifest={"path": "/m", "sha256": None},
        host={"cpu": {}},
    )
    assert record["schema_version"] == runrecord.SCHEMA_VERSION
    assert record["started"] == "2025-03-04T05:06:07.890Z"
    assert record["distributed"]["rank_seed"] == 11
    assert record["environment"]["user_set"] == {"MKL_NUM_THREADS": "1"}
    assert record["threads"]["variables"]["MKL_NUM_THREADS"] == "1"
    assert record["environment"]["set"]["PYTHONHASHSEED"] == "9"
    assert record["stack_env"] == {"CUDNN_VERSION": "9.1.0"}
    json.dumps(record)  # serialisable as is


def test_write_atomic(tmp_path: Path) -> None:
    path = tmp_path / "deeper" / "doc.json"
    jsonfile.write_atomic(path, {"b": 1, "a": [1, 2]})
    assert path.read_text() == '{\n  "a": [\n    1,\n    2\n  ],\n  "b": 1\n}\n'
    jsonfile.write_atomic(path, {"a": 2})
    assert json.loads(path.read_text()) == {"a": 2}
    assert [p.name for p in path.parent.iterdir()] == ["doc.json"]  # no temporary left
    assert path.stat().st_mode & 0o777 == 0o644


def test_write_atomic_failure_leaves_nothing(tmp_path: Path) -> None:
    with pytest.raises(TypeError):
        jsonfile.write_atomic(tmp_path / "doc.json", {1j: "complex keys are not JSON"})
    assert list(tmp_path.iterdir()) == []


TORCH_MESSAGE = (
    "adaptive_avg_pool2d_backward_cuda does not have a deterministic implementation, but you "
    "set 'torch.use_deterministic_algorithms(True)'. You can turn off determinism just for this "
    "operation, or you can use the 'warn_only=True' option, if that's acceptable for your "
    "application."
)


def test_hint_names_the_op_and_the_switch() -> None:
    assert excepthook.hint_for(RuntimeError(TORCH_MESSAGE)) == (
        "reprobuild: adaptive_avg_pool2d_backward_cuda has no deterministic implementation; "
        "run with REPRO_DETERMINISM=warn to allow it with a warning"
    )


def test_hint_follows_the_exception_chain() -> None:
    try:
        try:
            raise RuntimeError(TORCH_MESSAGE)
        except RuntimeError as inner:
            raise ValueError("wrapped by a library") from inner
    except ValueError as outer:
        hint = excepthook.hint_for(outer)
    assert hint is not None and "adaptive_avg_pool2d_backward_cuda" in hint


def test_no_hint_for_other_errors() -> None:
    assert excepthook.hint_for(RuntimeError("CUDA out of memory")) is None
    assert excepthook.hint_for(ValueError(TORCH_MESSAGE)) is None  # only torch's RuntimeError
    assert excepthook.hint_for(None) is None


def test_excepthook_chains_and_prints_after_the_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    seen: list[str] = []
    monkeypatch.setattr(
        "sys.excepthook", lambda t, e, tb: seen.append(f"previous hook: {t.__name__}")
    )
    monkeypatch.setattr(excepthook, "_previous", None)
    excepthook.install()
    excepthook.install()  # twice: still one hook
    import sys

    sys.excepthook(RuntimeError, RuntimeError(TORCH_MESSAGE), None)
    assert seen == ["previous hook: RuntimeError"]
    assert capsys.readouterr().err.startswith("reprobuild: adaptive_avg_pool2d_backward_cuda")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (None, None),
        ("", None),
        ("[]", None),
        ('["/opt/nvidia/nvidia_entrypoint.sh"]', ["/opt/nvidia/nvidia_entrypoint.sh"]),
        ('["/bin/tini", "--"]', ["/bin/tini", "--"]),
    ],
)
def test_base_entrypoint(text: str | None, expected: list[str] | None) -> None:
    assert parse_base_entrypoint(text) == expected


@pytest.mark.parametrize("text", ["/opt/x.sh", '"/opt/x.sh"', '[""]', "[1]", '{"a": 1}', "[null]"])
def test_bad_base_entrypoint(text: str) -> None:
    with pytest.raises(SettingsError, match="REPROBUILD_BASE_ENTRYPOINT"):
        parse_base_entrypoint(text)


def test_summary_lines() -> None:
    env = {"REPRO_SEED": "3", "RANK": "1", "OMP_NUM_THREADS": "2"}
    s = from_environ(env)
    line = summary(s, plan(env, s), Path("/runs/run-x.json"), init=True)
    assert line == (
        "reprobuild: seed 3 (rank 1: seed 4), mode strict, threads 4, 12 variables set, "
        "1 user-set kept (OMP_NUM_THREADS), running as init, record /runs/run-x.json"
    )
    off_env = {"REPRO_DETERMINISM": "off", "REPROBUILD_IMAGE_DETERMINISM": "strict"}
    off = from_environ(off_env)
    assert summary(off, plan(off_env, off), None) == (
        "reprobuild: mode off: determinism not configured, 12 variables removed"
    )


def test_exit_status_from_wait_status() -> None:
    assert initproc.exit_status(3 << 8) == 3
    assert initproc.exit_status(signal.SIGKILL) == 128 + signal.SIGKILL
    assert initproc.exit_status(signal.SIGTERM) == 143


def test_subreaper_is_available_here() -> None:
    # Linux >= 3.4; the init-mode tests rely on it when not PID 1. Undo is not needed: the
    # flag only changes who adopts orphans of this test process.
    pid = os.fork()
    if pid == 0:
        os._exit(0 if initproc.become_subreaper() else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
