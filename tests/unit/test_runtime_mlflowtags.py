"""The runtime's MLflow run context provider (reprobuild_entrypoint.mlflowtags): the tags it
computes, and, through a real MLflow with a SQLite store, that MLflow finds it by its entry
point alone and tags a run started by an unmodified script."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from reprobuild.imaging.runtimefiles import runtime_package
from reprobuild_entrypoint import mlflowtags, stackfacts

MANIFEST = {
    "schema_version": 1,
    "builder_version": "0.1.0",
    "name": "reprobuild-test/mlflow",
    "variant": "cpu",
    "base_ref": "127.0.0.1:5000/b@sha256:" + "a" * 64,
    "base_digest": "sha256:" + "a" * 64,
    "lock_file": "requirements.lock",
    "lock_sha256": "b" * 64,
    "seed": 7,
    "determinism": "strict",
    "gpu": None,
}


@pytest.fixture
def manifest(tmp_path: Path) -> Path:
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(MANIFEST))
    return path


def test_tags_name_the_image_lock_seed_and_rank(manifest: Path) -> None:
    import hashlib

    env = {"REPRO_SEED": "11", "RANK": "3", "WORLD_SIZE": "4", "REPRO_IMAGE": "img@sha256:x"}
    tags = mlflowtags.run_tags(env, manifest)
    assert tags["reprobuild.manifest_sha256"] == hashlib.sha256(manifest.read_bytes()).hexdigest()
    assert tags["reprobuild.lock_sha256"] == "b" * 64
    assert tags["reprobuild.image"] == "reprobuild-test/mlflow"
    assert tags["reprobuild.image.ref"] == "img@sha256:x"
    assert (tags["reprobuild.seed"], tags["reprobuild.rank"]) == ("11", "3")
    assert tags["reprobuild.rank_seed"] == "14"
    assert tags["reprobuild.world_size"] == "4"
    assert tags["reprobuild.cpu.mode"] in ("native", "portable")
    assert "reprobuild.run_id" not in tags  # no run record: nothing made up
    assert all(value not in ("", "None") for value in tags.values())


def test_tags_take_host_facts_from_the_run_record(manifest: Path, tmp_path: Path) -> None:
    record = {
        "run_id": "r1",
        "cpu": {"mode": "portable", "level": "x86-64-v2"},
        "host": {
            "cpu": {"model": "Some CPU", "level": "x86-64-v3"},
            "gpu": {"driver_version": "550.1", "devices": [{"name": "H100"}, {"name": "H100"}]},
        },
    }
    (tmp_path / "run-r1.json").write_text(json.dumps(record))
    env = {"REPRO_RUN_DIR": str(tmp_path), "REPRO_RUN_ID": "r1"}
    tags = mlflowtags.run_tags(env, manifest)
    assert tags["reprobuild.run_id"] == "r1"
    assert (tags["reprobuild.cpu.mode"], tags["reprobuild.cpu.level"]) == ("portable", "x86-64-v2")
    assert (tags["reprobuild.cpu.model"], tags["reprobuild.cpu.isa_level"]) == (
        "Some CPU",
        "x86-64-v3",
    )
    assert (tags["reprobuild.gpu.count"], tags["reprobuild.gpu.names"]) == ("2", "H100")
    assert tags["reprobuild.gpu.driver"] == "550.1"
    files = stackfacts.artifact_files(env, manifest)
    assert files == [manifest, tmp_path / "run-r1.json"]


def test_a_bad_setting_is_one_warning_and_no_tags(
    manifest: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("REPROBUILD_MANIFEST_PATH", str(manifest))
    monkeypatch.setenv("REPRO_SEED", "not-a-seed")
    monkeypatch.setattr(mlflowtags, "_WARNED", [])
    context = mlflowtags.RunContext()
    assert context.in_context()
    assert context.tags() == {} and context.tags() == {}
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("reprobuild: MLflow tags: left out")
    assert "REPRO_SEED" in lines[0]


def test_not_in_context_outside_an_image(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("REPROBUILD_MANIFEST_PATH", str(tmp_path / "absent.json"))
    monkeypatch.delenv("REPRO_RUN_ID", raising=False)
    assert not mlflowtags.RunContext().in_context()


def _write_runtime(root: Path) -> Path:
    runtime = root / "runtime"
    for rel, (data, _mode) in runtime_package().items():
        (runtime / rel).parent.mkdir(parents=True, exist_ok=True)
        (runtime / rel).write_bytes(data)
    return runtime


def test_the_shipped_dist_info_registers_the_provider(tmp_path: Path) -> None:
    runtime = _write_runtime(tmp_path)
    dists = list(metadata.distributions(path=[str(runtime)]))
    assert [d.metadata["Name"] for d in dists] == [mlflowtags.DIST_NAME]
    points = [e for e in dists[0].entry_points if e.group == "mlflow.run_context_provider"]
    assert [e.value for e in points] == ["reprobuild_entrypoint.mlflowtags:RunContext"]
    assert points[0].load() is mlflowtags.RunContext


def test_the_probe_leaves_the_runtime_record_out(tmp_path: Path) -> None:
    """The manifest (and so the SBOM) lists the stack the lock installed, not the runtime."""
    runtime = _write_runtime(tmp_path)
    code = "import json, reprobuild_entrypoint.probe as p; print(json.dumps(p.distributions()))"
    out = subprocess.run(
        [sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(runtime)!r}); {code}"],
        capture_output=True,
        text=True,
        check=True,
    )
    names = {d["name"] for d in json.loads(out.stdout)}
    assert "mlflow" in names and "reprobuild-mlflow" not in names


def test_the_probe_runs_as_source_on_a_bare_base() -> None:
    """The builder probes a base with ``python3 -c <the probe's source>`` (no file, no
    runtime): the runtime-record filter must not need ``__file__`` (it did, and every
    uncached base probe failed as "has no working python3")."""
    from reprobuild_entrypoint import probe

    source = Path(probe.__file__).read_text()
    out = subprocess.run(
        [sys.executable, "-I", "-c", source], capture_output=True, text=True, check=True
    )
    names = {d["name"] for d in json.loads(out.stdout)["distributions"]}
    assert "pytest" in names


SCRIPT = """
import mlflow
with mlflow.start_run() as run:
    for step in range(3):
        mlflow.log_metric("loss", 1.0 / (step + 1), step=step)
print(run.info.run_id)
"""


# Reading the SQLite store in this process: MLflow's store uses a loader SQLAlchemy deprecates.
@pytest.mark.filterwarnings("ignore::sqlalchemy.exc.SADeprecationWarning")
def test_real_mlflow_tags_an_unmodified_run(manifest: Path, tmp_path: Path) -> None:
    """MLflow itself (SQLite store) loads the provider through the entry point on the path and
    tags the run; the manifest and run record are logged as artifacts at exit."""
    import mlflow

    runtime = _write_runtime(tmp_path)
    (tmp_path / "run-r9.json").write_text(json.dumps({"run_id": "r9"}))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    env = {
        **os.environ,
        "PYTHONPATH": str(runtime),
        "REPROBUILD_MANIFEST_PATH": str(manifest),
        "REPRO_RUN_DIR": str(tmp_path),
        "REPRO_RUN_ID": "r9",
        "REPRO_SEED": "5",
        "MLFLOW_TRACKING_URI": uri,
    }
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "reprobuild:" not in proc.stderr
    run_id = proc.stdout.split()[-1]
    client = mlflow.MlflowClient(uri)
    tags = client.get_run(run_id).data.tags
    assert tags["reprobuild.seed"] == "5"
    assert tags["reprobuild.run_id"] == "r9"
    assert tags["reprobuild.lock_sha256"] == "b" * 64
    logged = sorted(a.path for a in client.list_artifacts(run_id, mlflowtags.ARTIFACT_DIR))
    assert logged == ["reprobuild/manifest.json", "reprobuild/run-r9.json"]


class _Run:
    class info:  # the shape of MLflow's Run.info
        run_id = "abc"


class _HangingMlflow:
    """An MLflow whose server accepts and never answers: every upload blocks."""

    def __init__(self) -> None:
        import threading

        self.release = threading.Event()
        self.calls: list[tuple[str, str, str]] = []

    def active_run(self) -> type[_Run]:
        return _Run

    def MlflowClient(self) -> _HangingMlflow:  # MLflow's name
        return self

    def log_artifact(self, run_id: str, path: str, artifact_path: str) -> None:
        self.calls.append((run_id, path, artifact_path))
        self.release.wait(60)


def test_the_upload_at_exit_is_bounded_and_says_so_once(
    manifest: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import time

    fake = _HangingMlflow()
    monkeypatch.setitem(sys.modules, "mlflow", fake)
    monkeypatch.setenv("REPROBUILD_MANIFEST_PATH", str(manifest))
    monkeypatch.delenv("REPRO_RUN_ID", raising=False)
    monkeypatch.setattr(mlflowtags, "_WARNED", [])
    started = time.monotonic()
    try:
        mlflowtags.upload_artifacts(timeout=0.5)
    finally:
        fake.release.set()
    assert time.monotonic() - started < 5
    assert fake.calls == [("abc", str(manifest), "reprobuild")]
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        "reprobuild: MLflow tags: the run record was not logged as an artifact within 0.5 s; "
        "left out"
    ]


def test_diff_reads_mlflow_run_ids_only_as_such(monkeypatch: pytest.MonkeyPatch) -> None:
    from reprobuild.checks import mlflowruns

    run = "0123456789abcdef0123456789abcdef"
    assert mlflowruns.ARTIFACT_DIR == mlflowtags.ARTIFACT_DIR
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert mlflowruns.run_id_of(f"runs:/{run}") == run
    assert mlflowruns.run_id_of(run) is None  # without a tracking URI: an image ID prefix
    assert mlflowruns.run_id_of("runs:/not-an-id") is None
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:9")
    assert mlflowruns.run_id_of(run) == run
    assert mlflowruns.run_id_of(run.upper()) is None


def test_diff_of_a_run_on_an_unreachable_server_is_one_error_line(tmp_path: Path) -> None:
    from helpers import run_cli

    env = {
        **os.environ,
        "MLFLOW_TRACKING_URI": "http://127.0.0.1:9",
        "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0",
    }
    proc = run_cli("diff", "runs:/" + "a" * 32, str(tmp_path / "x.json"), env=env, timeout=120)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert lines[0].startswith("error: runs:/" + "a" * 32 + ": cannot read"), lines
    assert "127.0.0.1:9" in lines[0]


VERIFIED = """
import mlflow
with mlflow.start_run():
    for step in range(3):
        mlflow.log_metric("loss", 1.0 / (step + 1), step=step)
        print("step", step, "loss", 1.0 / (step + 1))
"""


@pytest.mark.filterwarnings("ignore::sqlalchemy.exc.SADeprecationWarning")
def test_verify_mlflow_tags_both_verified_runs_with_the_verdict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``verify --local --mlflow``: each run's MLflow run is tagged by the runtime (its run
    record's id), and verify finds both by that tag and logs the verdict on them."""
    import mlflow

    from helpers import run_cli

    monkeypatch.chdir(tmp_path)  # the store's artifacts go to ./mlruns
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = mlflow.MlflowClient(uri)
    client.search_experiments()  # the schema exists before the two runs open it side by side
    (tmp_path / "train.py").write_text(VERIFIED)
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri, "GIT_PYTHON_REFRESH": "quiet"}
    report = tmp_path / "report.json"
    args = ("verify", "--local", "--mlflow", "--report", str(report), "-q", "--")
    proc = run_cli(*args, sys.executable, "train.py", cwd=tmp_path, env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    runs = client.search_runs(["0"])
    assert len(runs) == 2, proc.stderr
    record_ids = {r["run_record"]["run_id"] for r in json.loads(report.read_text())["runs"]}
    assert {r.data.tags["reprobuild.run_id"] for r in runs} == record_ids
    assert {r.data.tags.get("reprobuild.verify.result") for r in runs} == {"identical"}, proc.stderr
    assert "mlflow: verdict 'identical' logged to 2 run(s)" in proc.stderr


def test_verify_mlflow_without_a_tracking_uri_is_one_error_line(tmp_path: Path) -> None:
    from helpers import run_cli

    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    proc = run_cli("verify", "--local", "--mlflow", "--", "true", cwd=tmp_path, env=env)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[0] == (
        "error: --mlflow needs MLFLOW_TRACKING_URI: set it to the tracking server the runs log to"
    )


@pytest.mark.parametrize(
    ("uri", "flags", "expected"),
    [
        (
            "http://172.17.0.1:5000",
            (),
            "error: --mlflow: the runs' containers have no network to reach "
            "http://172.17.0.1:5000: add --network",
        ),
        (
            "http://127.0.0.1:5000",
            ("--network",),
            "error: --mlflow: http://127.0.0.1:5000 is this host's loopback, which the runs' "
            "containers cannot reach (a container's loopback is its own)",
        ),
        (
            "http://localhost:5000",
            ("--nodes", "2"),
            "error: --mlflow with --nodes: each run's containers are on an internal network "
            "with no route to http://localhost:5000",
        ),
    ],
)
def test_verify_mlflow_in_image_mode_refuses_a_server_the_containers_cannot_reach(
    tmp_path: Path, uri: str, flags: tuple[str, ...], expected: str
) -> None:
    """One error line before any image is looked at (the image named here does not exist)."""
    from helpers import run_cli

    env = {**os.environ, "MLFLOW_TRACKING_URI": uri}
    args = ("verify", "reprobuild-test/absent:1", "--mlflow", *flags, "--", "true")
    proc = run_cli(*args, cwd=tmp_path, env=env)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines()[0] == expected


def test_verify_mlflow_sets_what_the_runs_need_unless_given(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from reprobuild.checks import mlflowruns

    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://172.17.0.1:5000")
    added = mlflowruns.run_env(["A=1"], local=False, network=True, nodes=None)
    assert added == [
        "MLFLOW_TRACKING_URI=http://172.17.0.1:5000",
        "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT=true",
    ]
    given = ["MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT=false"]
    assert mlflowruns.run_env(given, local=True, network=False, nodes=None) == [
        "MLFLOW_TRACKING_URI=http://172.17.0.1:5000"
    ]
