"""``reprobuild verify`` without an engine: argument checks, the CLI's shapes and errors,
output-file and run-record comparison on plain directories, and the report record."""

from __future__ import annotations

import datetime as dt
import gc
import json
import os
import stat
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from reprobuild.backends.engine import Engine
from reprobuild.checks.runrecords import RunRecords, compare_run_records
from reprobuild.checks.streams import Divergence, JsonDifference, numeric_distance
from reprobuild.checks.verify import (
    DataMount,
    Failure,
    FileDigest,
    GpuRequest,
    RunReport,
    VerifyReport,
    _DockerLauncher,
    _LocalLauncher,
    check_writable,
    collect_outputs,
    compare_outputs,
    default_report_path,
    parse_data,
    parse_env_option,
    parse_gpus,
    parse_output,
    verify_spec_from_args,
)
from reprobuild.cli import build_parser, main
from reprobuild.errors import OutputError, ReprobuildError, VerifyError, VerifyUsageError

# ----------------------------------------------------------------------------- arguments


@pytest.mark.parametrize(
    ("given", "parsed"),
    [
        ("metrics.json", "metrics.json"),
        ("ckpt/", "ckpt/"),
        ("./a/../b.bin", "b.bin"),
        ("/out/metrics.json", "metrics.json"),
        ("/out", "."),
        (".", "."),
    ],
)
def test_parse_output(given: str, parsed: str) -> None:
    assert parse_output(given) == parsed


@pytest.mark.parametrize("bad", ["/etc/passwd", "../x", "a/../../x", ""])
def test_parse_output_refuses_paths_outside_out(bad: str) -> None:
    with pytest.raises(VerifyUsageError) as info:
        parse_output(bad)
    assert info.value.exit_code == 2


def test_parse_data(tmp_path: Path) -> None:
    assert parse_data(str(tmp_path)) == DataMount(tmp_path, "/data")
    assert parse_data(f"{tmp_path}:/datasets/x/") == DataMount(tmp_path, "/datasets/x")
    for bad in (f"{tmp_path}:relative", f"{tmp_path}:/out", f"{tmp_path}:/out/sub", ":/data"):
        with pytest.raises(VerifyUsageError):
            parse_data(bad)
    with pytest.raises(VerifyError, match="does not exist"):
        parse_data(str(tmp_path / "missing"))


def test_parse_env(monkeypatch: pytest.MonkeyPatch) -> None:
    assert parse_env_option("A=1=2") == ("A", "1=2")
    assert parse_env_option("EMPTY=") == ("EMPTY", "")
    monkeypatch.setenv("FROM_HOST", "yes")
    assert parse_env_option("FROM_HOST") == ("FROM_HOST", "yes")
    monkeypatch.delenv("NOT_SET_ANYWHERE", raising=False)
    for bad in ("1A=x", "A B=x", "NOT_SET_ANYWHERE", "REPRO_RUN_DIR=/x", "REPRO_OUTPUT_DIR=/x"):
        with pytest.raises(VerifyUsageError):
            parse_env_option(bad)


def test_parse_gpus() -> None:
    assert parse_gpus("all") == GpuRequest("all", -1)
    assert parse_gpus("2") == GpuRequest("2", 2)
    assert parse_gpus('"device=0,1"') == GpuRequest("device=0,1", 0, ("0", "1"))
    assert parse_gpus("device=GPU-3a6b") == GpuRequest("device=GPU-3a6b", 0, ("GPU-3a6b",))
    assert parse_gpus("2").cuda_visible_devices() == "0,1"
    assert parse_gpus("device=1,3").cuda_visible_devices() == "1,3"
    assert parse_gpus("all").cuda_visible_devices() is None
    for bad in ("0", "-1", "some", "device=", "device=0;rm"):
        with pytest.raises(VerifyUsageError, match="not a GPU request"):
            parse_gpus(bad)


def test_verify_spec_from_args_checks_everything(tmp_path: Path) -> None:
    spec = verify_spec_from_args(
        "img",
        ["python", "train.py"],
        runs=3,
        outputs=["metrics.json", "/out/metrics.json", "ckpt/"],
        data=[str(tmp_path)],
        env=["A=1"],
        seed=5,
        mode="warn",
        gpus="all",
    )
    assert spec.command == ("python", "train.py")
    assert spec.outputs == ("metrics.json", "ckpt/")  # duplicates dropped
    assert spec.env == (("A", "1"),)
    assert (spec.runs, spec.seed, spec.mode, spec.local) == (3, 5, "warn", False)
    assert verify_spec_from_args(None, ["true"], local=True).local

    bad: list[tuple[dict[str, object], str]] = [
        ({"image": None}, "no IMAGE"),
        ({"command": []}, "no command"),
        ({"runs": 1}, "--runs 1"),
        ({"runs": 17}, "--runs 17"),
        ({"seed": 2**32}, "--seed"),
        ({"seed": -1}, "--seed"),
        ({"mode": "fast"}, "--mode"),
        ({"env": ["REPRO_SEED=1"], "seed": 1}, "both given"),
        ({"data": [f"{tmp_path}:/d", f"{tmp_path}:/d"]}, "two mounts"),
        ({"local": True}, "takes no IMAGE"),
        ({"image": None, "local": True, "data": [str(tmp_path)]}, "--data"),
        ({"image": None, "local": True, "network": True}, "--network"),
    ]
    for changes, message in bad:
        kwargs: dict[str, Any] = {"image": "img", "command": ["true"], **changes}
        image, command = kwargs.pop("image"), kwargs.pop("command")
        with pytest.raises(VerifyUsageError, match=message):
            verify_spec_from_args(image, command, **kwargs)


# ---------------------------------------------------------------------------- CLI shapes


def parse(*argv: str) -> tuple[str | None, list[str], int, list[str], bool]:
    args = build_parser().parse_args(["verify", *argv])
    # --runs not given: None on the command line, DEFAULT_RUNS (or one per --cpu leg) in the spec
    runs = 2 if args.runs is None else args.runs
    return args.image, args.cmd, runs, args.output, args.local


def test_cli_shapes() -> None:
    # options before IMAGE, between IMAGE and `--`, and the command's own options kept
    assert parse("IMG", "--", "python", "x.py", "--runs", "5") == (
        "IMG",
        ["python", "x.py", "--runs", "5"],
        2,
        [],
        False,
    )
    assert parse("--runs", "3", "IMG", "--", "python") == ("IMG", ["python"], 3, [], False)
    assert parse("IMG", "--runs", "4", "--output", "m.json", "--", "python", "-c", "1") == (
        "IMG",
        ["python", "-c", "1"],
        4,
        ["m.json"],
        False,
    )
    assert parse("IMG", "python", "x.py") == ("IMG", ["python", "x.py"], 2, [], False)
    # --local: no IMAGE, the command after `--`
    assert parse("--local", "--", "python", "x.py") == (None, ["python", "x.py"], 2, [], True)
    assert parse("--local", "--runs", "3", "--", "python") == (None, ["python"], 3, [], True)
    assert parse("IMG") == ("IMG", [], 2, [], False)
    # the command's own options are never verify's
    assert parse("--local", "--", "python", "-c", "1", "--runs", "5") == (
        None,
        ["python", "-c", "1", "--runs", "5"],
        2,
        [],
        True,
    )
    assert parse("IMG", "--", "python", "-u", "x.py") == (
        "IMG",
        ["python", "-u", "x.py"],
        2,
        [],
        False,
    )


def run_main(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["verify", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_cli_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_main(capsys, "IMG")
    assert (code, out) == (2, "")
    assert err.splitlines() == [
        "error: no command to run",
        "hint: give it after `--`: reprobuild verify IMAGE -- python train.py",
    ]
    code, _, err = run_main(capsys)
    assert code == 2 and err.startswith("error: no IMAGE to run")
    code, _, err = run_main(capsys, "IMG", "--local", "--", "python")
    assert code == 2 and "--local runs on this host: it takes no IMAGE" in err
    code, _, err = run_main(capsys, "IMG", "--runs", "x", "--", "python")
    assert code == 2 and "invalid int value" in err
    code, _, err = run_main(capsys, "--gpus", "lots", "IMG", "--", "python")
    assert code == 2 and err.startswith("error: --gpus 'lots' is not a GPU request\nhint: ")


def test_engine_not_running(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    for var in ("DOCKER_CONTEXT", "DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(tmp_path)
    # docker-py leaks the socket of its failed connect: collect it here (see test_cli.py)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        try:
            code, out, err = run_main(capsys, "some/image:1", "--", "python", "train.py")
        finally:
            gc.collect()
    assert (code, out) == (1, "")
    lines = err.splitlines()
    assert lines[0].startswith(f"error: no Docker engine answers at unix://{tmp_path}/no-engine")
    assert lines[1] == "hint: start one (`sudo systemctl start docker`, or `scripts/setup-engine`)"
    assert len(lines) == 2
    assert list(tmp_path.iterdir()) == []  # no report: nothing ran


# ------------------------------------------------------------------------------- outputs


def write(root: Path, files: dict[str, bytes]) -> Path:
    for name, data in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return root


def test_collect_outputs(tmp_path: Path) -> None:
    root = write(tmp_path, {"m.json": b"{}", "ckpt/a.bin": b"a", "ckpt/sub/b.bin": b"b", "x": b""})
    found = collect_outputs(root, ["m.json", "ckpt/", "missing.txt"])
    assert list(found) == ["ckpt/a.bin", "ckpt/sub/b.bin", "m.json"]
    assert found["m.json"] == FileDigest(
        "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a", 2
    )
    assert list(collect_outputs(root, ["ckpt"])) == ["ckpt/a.bin", "ckpt/sub/b.bin"]
    assert len(collect_outputs(root, ["."])) == 4


def compare(
    tmp_path: Path, a: dict[str, bytes], b: dict[str, bytes], outputs: list[str]
) -> list[Divergence]:
    dirs = [write(tmp_path / "1", a), write(tmp_path / "2", b)]
    dirs[0].mkdir(exist_ok=True)
    dirs[1].mkdir(exist_ok=True)
    return compare_outputs(dirs, [collect_outputs(d, outputs) for d in dirs])


def test_identical_outputs(tmp_path: Path) -> None:
    files = {"m.json": b'{"a": 1}', "ckpt/w.bin": bytes(range(256))}
    assert compare(tmp_path, files, dict(files), ["m.json", "ckpt/"]) == []


def test_binary_output_first_differing_byte(tmp_path: Path) -> None:
    (div,) = compare(
        tmp_path, {"ckpt.bin": b"HEAD\x00\x01\x02"}, {"ckpt.bin": b"HEAD\x00\x09\x02"}, ["ckpt.bin"]
    )
    assert (div.where, div.file, div.offset, div.runs) == ("output", "ckpt.bin", 5, (1, 2))
    assert div.detail.startswith("ckpt.bin differs between run 1 and run 2: sha256 ")


def test_json_output_key_path(tmp_path: Path) -> None:
    a = json.dumps({"config": {"lr": 0.1}, "final": {"loss": 0.5, "wall": 12.5}}).encode()
    b = json.dumps({"config": {"lr": 0.1}, "final": {"loss": 0.5, "wall": 13.0}}).encode()
    (div,) = compare(tmp_path, {"m.json": a}, {"m.json": b}, ["m.json"])
    assert (div.file, div.key, div.a, div.b) == ("m.json", "final.wall", "12.5", "13.0")
    assert div.numeric is not None and div.numeric.abs_diff == 0.5
    assert [d.where for d in div.json_differences] == ["final.wall"]
    assert div.detail == "m.json: final.wall differs between run 1 and run 2"


def test_json_output_same_values_other_bytes(tmp_path: Path) -> None:
    (div,) = compare(
        tmp_path, {"m.json": b'{"a": 1, "b": 2}'}, {"m.json": b'{"b": 2, "a": 1}'}, ["m.json"]
    )
    assert div.key is None and "the same JSON values in other bytes" in div.detail


def test_text_output_first_line(tmp_path: Path) -> None:
    (div,) = compare(
        tmp_path, {"log.txt": b"a\nloss 0.5\nz\n"}, {"log.txt": b"a\nloss 0.75\nz\n"}, ["log.txt"]
    )
    assert (div.file, div.line, div.a, div.b) == ("log.txt", 2, "loss 0.5", "loss 0.75")
    assert div.numeric is not None and div.numeric.abs_diff == 0.25


def test_output_written_by_one_run_only(tmp_path: Path) -> None:
    (div,) = compare(tmp_path, {"ckpt/a": b"1", "ckpt/b": b"2"}, {"ckpt/a": b"1"}, ["ckpt/"])
    assert (div.file, div.detail) == ("ckpt/b", "ckpt/b: run 2 did not write it, run 1 did")


def test_record_differences_name_the_stack() -> None:
    record = {
        "run_id": "r1",
        "started": "t1",
        "framework_records": "x",
        "host": {"hostname": "c1", "cpu": {"model": "AMD EPYC"}, "gpu": None},
        "determinism": {"seed": 7},
    }
    other = json.loads(json.dumps(record))
    other.update(run_id="r2", started="t2")
    other["host"]["hostname"] = "c2"
    assert compare_run_records(RunRecords(record), RunRecords(other)).agree
    other["host"]["cpu"]["model"] = "Intel Xeon"
    frameworks = ({"framework_settings": {"torch": {"version": "2.13.0"}}},)
    newer = ({"framework_settings": {"torch": {"version": "2.14.0"}}},)
    found = compare_run_records(RunRecords(record, frameworks), RunRecords(other, newer))
    assert [d.where for d in found.differences] == ["host.cpu.model", "frameworks.torch.version"]
    assert found.first == "host.cpu.model"
    # a killed run wrote no framework record: that is no difference in the stack
    found = compare_run_records(RunRecords(record, frameworks), RunRecords(other))
    assert [d.where for d in found.differences] == ["host.cpu.model"]


def rank_record(rank: int, seed: int) -> dict[str, object]:
    return {
        "pid": 1000 + seed,
        "argv": ["train.py"],
        "distributed": {"rank": rank},
        "framework_settings": {"torch": {"seed": seed}, "numpy": {"legacy_seed": seed}},
    }


def test_ranks_of_one_node_compare_rank_by_rank_whatever_order_they_were_read() -> None:
    """Two torchrun ranks on one node write their records in whatever order their process
    ids come: the comparison must not depend on it (a Slurm job's two runs did, by pid)."""
    record = {"run_id": "r", "determinism": {"seed": 0}}
    first = RunRecords(record, (rank_record(2, 2), rank_record(3, 3)))
    second = RunRecords(record, (rank_record(3, 3), rank_record(2, 2)))
    assert compare_run_records(first, second).agree
    wrong = RunRecords(record, (rank_record(3, 4), rank_record(2, 2)))
    found = compare_run_records(first, wrong)
    assert 'framework_ranks["rank 3"].torch.seed' in [d.where for d in found.differences]


# -------------------------------------------------------------------------------- report


def sample_report() -> VerifyReport:
    numeric = numeric_distance("1.5", "1.75")
    assert numeric is not None
    divergence = Divergence(
        where="stdout",
        runs=(1, 2),
        detail="line 3 differs between run 1 and run 2",
        line=3,
        column=6,
        a="loss 1.5",
        b="loss 1.75",
        numeric=numeric,
    )
    run = RunReport(
        run=1,
        exit_code=0,
        killed=False,
        elapsed_s=1.25,
        stdout_lines=3,
        stdout_sha256="ab" * 32,
        stderr_tail=("reprobuild: seed 7",),
        outputs={"m.json": FileDigest("cd" * 32, 10)},
        run_record={"schema_version": 1, "kind": "reprobuild.run", "host": {"cpu": {}}},
        framework_records=({"kind": "reprobuild.frameworks"},),
    )
    other = RunReport(
        run=2,
        exit_code=137,
        killed=True,
        elapsed_s=1.5,
        stdout_lines=3,
        stdout_sha256="ef" * 32,
        record_differences=(JsonDifference(("host", "cpu", "model"), "changed", "a", "b"),),
    )
    return VerifyReport(
        result="diverged",
        summary="stdout line 3 differs between run 1 and run 2",
        command=("python", "train.py"),
        image="team/x:cpu-1",
        image_id="sha256:" + "0" * 64,
        runs_requested=2,
        seed=5,
        mode="strict",
        outputs=("m.json", "ckpt/"),
        data=(DataMount(Path("/srv/data"), "/data"),),
        env={"A": "1"},
        gpus="all",
        network=False,
        started="2026-01-02T03:04:05.006Z",
        elapsed_s=2.5,
        stopped_early=True,
        lines_compared=2,
        runs=(run, other),
        divergence=divergence,
        failure=Failure("run 2 failed", run=2, exit_code=3, stderr_tail=("boom",), hint="h"),
    )


def test_report_round_trip() -> None:
    report = sample_report()
    data = json.loads(report.to_json())
    assert data["schema_version"] == 1 and data["kind"] == "reprobuild.verify"
    assert data["local"] is False
    assert VerifyReport.from_dict(data) == report
    assert VerifyReport.from_json(report.to_json()) == report


def test_report_refuses_other_documents() -> None:
    data = sample_report().to_dict()
    for changes in ({"schema_version": 2}, {"kind": "reprobuild.run"}):
        with pytest.raises(ReprobuildError):
            VerifyReport.from_dict({**data, **changes})
    del data["runs"]
    with pytest.raises(ReprobuildError, match="runs"):
        VerifyReport.from_dict(data)
    with pytest.raises(ReprobuildError, match="not valid JSON"):
        VerifyReport.from_json("{")


def test_report_describes_the_divergence() -> None:
    lines = sample_report().describe()
    assert lines[0] == "diverged: stdout line 3 differs between run 1 and run 2"
    assert lines[1:4] == [
        "  run 1: 'loss 1.5'",
        "  run 2: 'loss 1.75'",
        "  numbers: 1.5 vs 1.75, abs 0.25, rel 0.142857, 2097152 ulps (float32), "
        "1125899906842624 ulps (float64)",
    ]
    assert "  run records differ at: host.cpu.model" in lines
    assert lines[-1] == "  stopped early: runs killed after 2.5 s"


def test_report_path_may_hold_an_earlier_report_or_nothing(tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    check_writable(report)  # nothing there
    report.touch()
    check_writable(report)
    report.write_text(sample_report().to_json())
    check_writable(report)
    report.write_text(json.dumps({"kind": "reprobuild.verify_resume", "result": "identical"}))
    check_writable(report)  # a `verify --resume-at` report
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b'{"loss": 0.25}\n', "is not a reprobuild verify report"),  # the program's results
        (b"root:x:0:0:root:/root:/bin/bash\n", "is not a reprobuild verify report"),
        (b'{"kind": "reprobuild.run"}', "is not a reprobuild verify report"),
        (b'[{"kind": "reprobuild.verify"}]', "is not a reprobuild verify report"),
        (b"\xff\xfe", "is not a reprobuild verify report"),
        (b"[" * 100_000, "is not a reprobuild verify report"),
    ],
    ids=["results", "passwd", "run-record", "list", "not-utf8", "deep"],
)
def test_report_path_never_replaces_other_files(
    tmp_path: Path, content: bytes, expected: str
) -> None:
    report = tmp_path / "r.json"
    report.write_bytes(content)
    with pytest.raises(OutputError, match=expected) as info:
        check_writable(report)
    assert "\n" not in info.value.message
    assert report.read_bytes() == content
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_report_path_never_replaces_a_symlink_or_a_fifo(tmp_path: Path) -> None:
    target = tmp_path / "earlier.json"
    target.write_text(sample_report().to_json())
    (tmp_path / "link.json").symlink_to(target)
    with pytest.raises(OutputError, match="is a symlink"):
        check_writable(tmp_path / "link.json")
    os.mkfifo(tmp_path / "fifo.json")
    with pytest.raises(OutputError, match="is not a regular file"):
        check_writable(tmp_path / "fifo.json")


def test_default_report_path() -> None:
    moment = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    # under .reprobuild/ (git-ignored), never loose in the project root
    assert default_report_path("sha256:0123456789abcdef", moment) == Path(
        ".reprobuild/verify/reprobuild-verify-0123456789ab-20260102T030405Z.json"
    )
    assert default_report_path(None, moment).name == "reprobuild-verify-local-20260102T030405Z.json"
    assert not os.path.isabs(default_report_path(None, moment))


# ------------------------------------------------------------------- what a container gets


class FakeContainers:
    def __init__(self) -> None:
        self.created: list[tuple[str, dict[str, Any]]] = []

    def create(self, image: str, **kwargs: Any) -> FakeContainers:
        self.created.append((image, kwargs))
        return self

    def start(self) -> None:
        return None


def test_container_gets_mounts_env_and_gpus(tmp_path: Path) -> None:
    """What `docker run` would be asked for (no engine: the client is a fake; CI has no GPU,
    so --gpus is checked here as the device request it becomes)."""
    data = tmp_path / "data"
    data.mkdir()
    spec = verify_spec_from_args(
        "img",
        ["python", "train.py"],
        data=[f"{data}:/datasets"],
        env=["A=1"],
        seed=3,
        mode="warn",
        gpus="device=0,1",
    )
    launcher = _DockerLauncher(spec, "sha256:" + "a" * 64)
    fake = FakeContainers()
    launcher._engine = Engine(SimpleNamespace(containers=fake))
    out, records = tmp_path / "out", tmp_path / "records"
    out.mkdir()
    records.mkdir()
    launcher.start(0, out, records)
    ((image, kwargs),) = fake.created
    assert image == "sha256:" + "a" * 64  # the ID: every run gets the same image
    assert kwargs["command"] == ["python", "train.py"]
    assert kwargs["environment"] == {
        "REPRO_RUN_DIR": "/reprobuild-run",
        "REPRO_OUTPUT_DIR": "/out",
        "REPRO_IMAGE": image,  # the MLflow tags name the image: a container cannot see it
        "A": "1",
        "REPRO_SEED": "3",
        "REPRO_DETERMINISM": "warn",
    }
    mounts = {m["Target"]: (m["Source"], m["ReadOnly"], m["Type"]) for m in kwargs["mounts"]}
    assert mounts == {
        "/out": (str(out), False, "bind"),
        "/reprobuild-run": (str(records), False, "bind"),
        "/datasets": (str(data), True, "bind"),
    }
    (request,) = kwargs["device_requests"]
    assert request["DeviceIDs"] == ["0", "1"] and request["Capabilities"] == [["gpu"]]
    assert kwargs["network_disabled"] is True
    # the owner label finds what a SIGKILLed verify left: <pid>-<process start time>
    pid, start = kwargs["labels"].pop("io.reprobuild.owner").split("-")
    assert int(pid) == os.getpid() and start.isdigit()
    assert kwargs["labels"] == {"io.reprobuild.verify": "1"}
    assert stat.S_IMODE(out.stat().st_mode) == 0o777  # the image's user writes there


def test_local_environment_is_the_images(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "2")  # the user's: kept, recorded as user-set
    monkeypatch.setenv("REPRO_RUN_ID", "stale")
    monkeypatch.setenv("PYTHONPATH", "/mine")
    spec = verify_spec_from_args(
        None, ["python", "x.py"], local=True, seed=9, gpus="2", env=["B=2"]
    )
    launcher = _LocalLauncher(spec)
    launcher.prepare(tmp_path)
    env = launcher.environment(tmp_path / "out", tmp_path / "rec")
    assert env["REPROBUILD_IMAGE_SEED"] == "0" and env["REPROBUILD_VARIANT"] == "gpu"
    assert env["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8" and env["PYTHONHASHSEED"] == "0"
    assert env["OMP_NUM_THREADS"] == "2"
    assert "REPRO_RUN_ID" not in env
    assert env["PYTHONPATH"] == os.pathsep.join(
        [str(tmp_path / "shim"), str(tmp_path / "runtime"), "/mine"]
    )
    assert (tmp_path / "runtime" / "reprobuild_entrypoint" / "_startup.py").is_file()
    assert (env["REPRO_SEED"], env["B"], env["CUDA_VISIBLE_DEVICES"]) == ("9", "2", "0,1")
    assert env["REPRO_OUTPUT_DIR"] == str(tmp_path / "out")
    assert env["REPRO_RUN_DIR"] == str(tmp_path / "rec")


def test_sitecustomize_ships_as_package_data_in_the_wheel() -> None:
    """--local's sitecustomize is a real .py file in the installed package, not a string."""
    import importlib.resources

    from reprobuild.checks.verify.launchers import sitecustomize_source

    shipped = importlib.resources.files("reprobuild.checks.verify") / "shim" / "sitecustomize.py"
    assert "site-packages" in str(shipped)
    source = sitecustomize_source()
    assert source == shipped.read_bytes()
    assert b"import reprobuild_entrypoint._startup" in source
    compile(source, "sitecustomize.py", "exec")


def test_the_summary_names_the_image_s_platform(monkeypatch: pytest.MonkeyPatch) -> None:
    """verify's summary says which platform the image is for, and that it ran emulated where
    this host is another machine; a config that names none (or names garbage) adds nothing."""
    import platform

    from reprobuild.checks.verify import launchers

    monkeypatch.setattr(platform, "machine", lambda: "x86_64")
    assert launchers.platform_note("amd64") == ", linux/amd64"
    assert launchers.platform_note("arm64") == ", linux/arm64 (emulated)"
    monkeypatch.setattr(platform, "machine", lambda: "aarch64")
    assert launchers.platform_note("arm64") == ", linux/arm64"
    for nothing in ("", None, 64, "arm64; rm -rf /", "linux/arm64"):
        assert launchers.platform_note(nothing) == ""
