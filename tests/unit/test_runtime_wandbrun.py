"""The runtime's W&B hook (reprobuild_entrypoint.wandbrun): real ``wandb.init()`` runs in
offline mode (no server), started under the runtime's start-up hook exactly as in an image (a
.pth file), and their ``run-*.wandb`` files read back with wandb's own protobuf classes: the
stack is in each run's config, its Docker image and its files, and the program's own tags,
config and group are as it set them."""

from __future__ import annotations

import hashlib
import json
import os
import struct
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path
from typing import Any

import pytest

import reprobuild_entrypoint
from reprobuild.checks import wandbruns
from reprobuild_entrypoint import wandbrun
from reprobuild_entrypoint._startup import CPUS_CHECKED
from wandblog import WandbRun, offline_runs, payloads, read_run, run_file

RUNTIME_ROOT = str(Path(reprobuild_entrypoint.__file__).resolve().parent.parent)
LAUNCH = (
    "import runpy, site, sys; site.addsitedir(sys.argv[1]); sys.argv = sys.argv[2:]; "
    "runpy.run_path(sys.argv[0], run_name='__main__')"
)
IMAGE = "127.0.0.1:5000/reprobuild-test/wandb@sha256:" + "c" * 64
MANIFEST = {
    "schema_version": 1,
    "builder_version": "0.1.0",
    "name": "reprobuild-test/wandb",
    "variant": "cpu",
    "base_ref": "127.0.0.1:5000/b@sha256:" + "a" * 64,
    "lock_file": "requirements.lock",
    "lock_sha256": "b" * 64,
    "seed": 7,
    "determinism": "warn",
    "gpu": None,
}

PLAIN = """
import wandb
run = wandb.init(project="plain")
for step in range(3):
    run.log({"loss": 1.0 / (step + 1)})
run.finish()
"""

OWN = """
import wandb
with wandb.init(
    project="own", tags=["mine", "baseline"], config={"lr": 0.1, "layers": [64, 32]},
    group="sweep-1", job_type="train", notes="the script's own",
) as run:
    run.config.update({"epochs": 2})
    run.log({"loss": 0.5})
"""


@pytest.fixture(scope="module")
def site_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("site")
    (folder / "reprobuild.pth").write_text(
        f"{RUNTIME_ROOT}\nimport reprobuild_entrypoint._startup\n"
    )
    return folder


def _image(where: Path, run_id: str = "r1") -> dict[str, str]:
    """A manifest and a run record as an image and its entrypoint leave them; the variables
    that point at them, and a W&B that stays offline and inside ``where``."""
    manifest = where / "manifest.json"
    manifest.write_text(json.dumps(MANIFEST))
    records = where / "records"
    records.mkdir(exist_ok=True)
    record = {"run_id": run_id, "host": {"cpu": {"model": "Some CPU", "level": "x86-64-v3"}}}
    (records / f"run-{run_id}.json").write_text(json.dumps(record))
    return {
        "REPROBUILD_MANIFEST_PATH": str(manifest),
        "REPRO_RUN_DIR": str(records),
        "REPRO_RUN_ID": run_id,
        "REPRO_IMAGE": IMAGE,
        "REPRO_DETERMINISM": "warn",
        "REPRO_QUIET": "1",
        CPUS_CHECKED: "test",
        "WANDB_MODE": "offline",
        "WANDB_DIR": str(where),
        "WANDB_CONFIG_DIR": str(where / "wandb-config"),
        "WANDB_CACHE_DIR": str(where / "wandb-cache"),
        "WANDB_DATA_DIR": str(where / "wandb-data"),
    }


def _launch(
    site: Path, where: Path, source: str, *, entrypoint: bool = False, **env: str
) -> subprocess.CompletedProcess[str]:
    """Run ``source`` under the start-up hook; ``entrypoint``: under the image's entrypoint
    too, which writes the real run record (and sets ``REPRO_RUN_ID``) first."""
    script = where / "train.py"
    script.write_text(textwrap.dedent(source))
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "REPRO"))}
    image = _image(where)
    first: list[str] = []
    if entrypoint:
        del image["REPRO_RUN_ID"]
        (where / "records" / "run-r1.json").unlink()
        first = [sys.executable, "-m", "reprobuild_entrypoint", "--"]
    return subprocess.run(
        [*first, sys.executable, "-c", LAUNCH, str(site), str(script)],
        env={**clean, **image, **env},
        cwd=where,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def _runs(where: Path) -> list[WandbRun]:
    return [read_run(run_file(d)) for d in offline_runs(where / "wandb")]


def _ours(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("reprobuild:")]


@pytest.fixture(scope="module")
def seeded(
    site_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, tuple[Path, subprocess.CompletedProcess[str]]]:
    """Seed -> (its folder, the finished process) of the plain script."""
    out = {}
    for seed in ("11", "12"):
        where = tmp_path_factory.mktemp(f"seed{seed}")
        out[seed] = (where, _launch(site_dir, where, PLAIN, entrypoint=True, REPRO_SEED=seed))
    return out


def test_an_unmodified_run_carries_the_stack(
    seeded: dict[str, tuple[Path, subprocess.CompletedProcess[str]]],
) -> None:
    for seed, (where, proc) in seeded.items():
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert _ours(proc.stderr) == []
        (run,) = _runs(where)
        stack = run.config[wandbrun.CONFIG_KEY]
        manifest = (where / "manifest.json").read_bytes()
        assert stack["seed"] == stack["rank_seed"] == int(seed)
        assert stack["seed_source"] == "REPRO_SEED"
        assert stack["manifest_sha256"] == hashlib.sha256(manifest).hexdigest()
        assert (stack["lock_sha256"], stack["lock_file"]) == ("b" * 64, "requirements.lock")
        assert stack["base"] == MANIFEST["base_ref"]
        assert (stack["image"], stack["image.ref"]) == ("reprobuild-test/wandb", IMAGE)
        assert (stack["determinism"], stack["cpu.mode"]) == ("warn", "native")
        record = where / "records" / f"run-{stack['run_id']}.json"  # the entrypoint's, real
        assert json.loads(record.read_text())["kind"] == "reprobuild.run"
        assert stack["cpu.model"] == json.loads(record.read_text())["host"]["cpu"]["model"]
        assert isinstance(stack["threads"], int)
        assert run.docker == IMAGE
        assert {"reprobuild/manifest.json", f"reprobuild/{record.name}"} <= set(run.files)
        files = offline_runs(where / "wandb")[0] / "files" / "reprobuild"
        assert (files / "manifest.json").read_bytes() == manifest
        assert (files / record.name).read_bytes() == record.read_bytes()
        assert "history" in run.kinds  # the run itself went on: its three steps are there


def test_another_seed_shows_in_the_run(
    seeded: dict[str, tuple[Path, subprocess.CompletedProcess[str]]],
) -> None:
    stacks = {seed: _runs(where)[0].config["reprobuild"] for seed, (where, _) in seeded.items()}
    assert (stacks["11"]["seed"], stacks["12"]["seed"]) == (11, 12)
    ignore = ("seed", "rank_seed", "run_id")
    same = {k: v for k, v in stacks["11"].items() if k not in ignore}
    assert same == {k: v for k, v in stacks["12"].items() if k not in ignore}


def test_diff_of_two_offline_runs_names_the_seed(
    seeded: dict[str, tuple[Path, subprocess.CompletedProcess[str]]],
) -> None:
    from helpers import run_cli

    a, b = (offline_runs(where / "wandb")[0] for where, _ in seeded.values())
    proc = run_cli("diff", str(a), str(b), "--json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert report["a"]["source"] == str(a)
    seeds = [d for d in report["differences"] if d["key"] == "seed"]
    assert seeds and (seeds[0]["a"], seeds[0]["b"]) == (11, 12), report["differences"]
    same = run_cli("diff", str(a), str(a))
    assert same.returncode == 0, same.stdout + same.stderr


def test_diff_of_a_wandb_run_without_the_stack_is_one_error_line(tmp_path: Path) -> None:
    from helpers import run_cli

    run_dir = tmp_path / "offline-run-20260101_000000-abc"
    (run_dir / "files").mkdir(parents=True)
    (run_dir / "run-abc.wandb").write_bytes(b":W&B\xe1\xbe\x00")
    proc = run_cli("diff", str(run_dir), str(run_dir))
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[0] == (
        f"error: {run_dir} is a W&B run with no run record or manifest under files/reprobuild/"
    )


def test_diff_names_the_runtimes_folder() -> None:
    from reprobuild.checks import wandbruns

    assert f"files/{wandbrun.FILES_DIR}" == wandbruns.FILES_DIR
    assert wandbruns.MANIFEST_NAME == wandbrun.MANIFEST_NAME


def test_the_programs_own_tags_config_and_group_are_kept(site_dir: Path, tmp_path: Path) -> None:
    proc = _launch(site_dir, tmp_path, OWN, REPRO_SEED="5", REPRO_DETERMINISM="off")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _ours(proc.stderr) == []
    (run,) = _runs(tmp_path)
    assert run.tags == ["mine", "baseline"]
    assert (run.group, run.job_type) == ("sweep-1", "train")
    config = {k: v for k, v in run.config.items() if k != "_wandb"}
    stack = config.pop("reprobuild")
    assert config == {"lr": 0.1, "layers": [64, 32], "epochs": 2}
    assert stack["seed"] == 5 and stack["determinism"] == "off"  # off: the stack all the same


def test_the_users_own_docker_image_and_reprobuild_key_are_theirs(
    site_dir: Path, tmp_path: Path
) -> None:
    """A ``WANDB_DOCKER`` the user set is kept; a program whose config already has a
    ``reprobuild`` key keeps it, with one line; a disabled run is left alone."""
    source = """
    import wandb
    run = wandb.init(project="p", config={"reprobuild": "mine"})
    run.finish()
    wandb.init(mode="disabled").finish()
    print("done")
    """
    proc = _launch(site_dir, tmp_path, source, WANDB_DOCKER="theirs:1")
    assert proc.returncode == 0 and proc.stdout.strip() == "done", proc.stderr[-3000:]
    assert _ours(proc.stderr) == [
        "reprobuild: W&B: the run's config has its own 'reprobuild' key: left as the program set it"
    ]
    (run,) = _runs(tmp_path)
    assert run.config["reprobuild"] == "mine" and run.docker == "theirs:1"
    assert "reprobuild/manifest.json" in run.files


class _Config(dict[str, Any]):
    def update(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError("config locked\nsecond line")


class _Run:
    config = _Config()
    disabled = False


class _Wandb:
    """A wandb whose ``init`` returns a run that refuses every config change."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def init(self, **kwargs: Any) -> _Run:
        self.calls.append(kwargs)
        return _Run()


def test_a_failure_is_one_line_and_the_run_is_the_programs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(wandbrun, "_WARNED", [])
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps(MANIFEST))
    monkeypatch.setenv("REPROBUILD_MANIFEST_PATH", str(manifest))
    monkeypatch.delenv("WANDB_DOCKER", raising=False)
    monkeypatch.delenv("REPRO_IMAGE", raising=False)
    fake = _Wandb()
    wandbrun.install(fake)
    wandbrun.install(fake)  # twice: wrapped once
    first, second = fake.init(tags=["t"]), fake.init(project="p")
    assert isinstance(first, _Run) and isinstance(second, _Run)
    assert fake.calls == [{"tags": ["t"]}, {"project": "p"}]
    assert capsys.readouterr().err.splitlines() == [
        "reprobuild: W&B: the stack is left out of this run (RuntimeError: config locked)"
    ]
    assert "WANDB_DOCKER" not in os.environ


class _ResumedConfig(dict[str, Any]):
    def update(self, *args: Any, **kwargs: Any) -> None:
        assert kwargs.pop("allow_val_change") is True  # W&B refuses a changed value otherwise
        super().update(*args, **kwargs)


class _ResumedRun:
    """A run resumed from an earlier session: its config holds that session's stack."""

    disabled = True  # no files: the config is what is looked at here

    def __init__(self) -> None:
        self.config = _ResumedConfig(reprobuild={"seed": 3, "seed_source": "REPRO_SEED"}, lr=1)


def test_a_resumed_runs_stack_is_this_sessions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(wandbrun, "_WARNED", [])
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps(MANIFEST))
    monkeypatch.setenv("REPROBUILD_MANIFEST_PATH", str(manifest))
    monkeypatch.setenv("REPRO_SEED", "4")
    run = _ResumedRun()
    wandbrun.stamp(run)
    assert run.config["reprobuild"]["seed"] == 4 and run.config["lr"] == 1
    assert capsys.readouterr().err == ""


def test_outside_an_image_wandb_is_left_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REPROBUILD_MANIFEST_PATH", str(tmp_path / "absent.json"))
    monkeypatch.delenv("REPRO_RUN_ID", raising=False)
    fake = _Wandb()
    init = fake.init
    wandbrun.install(fake)
    assert fake.init == init


def test_the_reader_refuses_a_damaged_file(tmp_path: Path) -> None:
    """The test's own decoder checks what it reads: a flipped byte is an error, not a run."""
    good = bytearray(b":W&B\xe1\xbe\x00")
    payload = b"\x0a\x03abc"
    good += struct.pack("<IHB", zlib.crc32(bytes([1]) + payload), len(payload), 1) + payload
    assert payloads(bytes(good)) == [payload]
    good[-1] ^= 1
    with pytest.raises(ValueError, match="bad record"):
        payloads(bytes(good))


LIGHTNING = """
import lightning as L
import torch
from lightning.pytorch.loggers import WandbLogger
from torch.utils.data import DataLoader, TensorDataset


class Model(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, _):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.log("loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


x = torch.randn(32, 4)
logger = WandbLogger(project="lightning", tags=["lit"], config={"batch": 8}, group="g")
trainer = L.Trainer(
    max_epochs=2, logger=logger, log_every_n_steps=1, enable_progress_bar=False,
    enable_model_summary=False, enable_checkpointing=False,
)
trainer.fit(Model(), DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=8))
"""


@pytest.mark.heavy
def test_a_lightning_wandb_logger_run_carries_the_stack(site_dir: Path, tmp_path: Path) -> None:
    """Lightning's ``WandbLogger`` opens the run itself (``wandb.init(**its arguments)``): the
    run carries the stack beside the logger's own tags, config and group."""
    proc = _launch(site_dir, tmp_path, LIGHTNING, REPRO_SEED="21")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _ours(proc.stderr) == []
    (run,) = _runs(tmp_path)
    assert run.config["reprobuild"]["seed"] == 21
    assert run.config["reprobuild"]["manifest_sha256"]
    assert run.tags == ["lit"] and run.group == "g"
    assert run.config["batch"] == 8
    assert "reprobuild/manifest.json" in run.files
    assert run.kinds.count("history") >= 8  # 2 epochs of 4 steps, each step logged


def _online_env(tmp_path: Path, url: str | None, key: str | None = "k" * 40) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env.update(WANDB_CONFIG_DIR=str(tmp_path / "wandb-config"), WANDB_SILENT="true")
    if url is not None:
        env["WANDB_BASE_URL"] = url
    if key is not None:
        env[wandbruns.KEY_VAR] = key
    return env


def test_diff_of_two_runs_online_through_wandbs_api_against_a_fake_server(
    seeded: dict[str, tuple[Path, subprocess.CompletedProcess[str]]], tmp_path: Path
) -> None:
    """``diff ENTITY/PROJECT/RUN_ID ...``: the two runs' ``reprobuild/`` files (those the
    real offline runs above carry) served by a FAKE W&B server (tests/wandbfake.py: no real
    one is reachable here), read through wandb's own ``Api`` pointed at it."""
    from helpers import run_cli
    from wandbfake import fake_server

    runs = {}
    for seed, (where, _) in seeded.items():
        folder = offline_runs(where / "wandb")[0] / "files" / wandbrun.FILES_DIR
        files = {f"{wandbrun.FILES_DIR}/{p.name}": p.read_bytes() for p in folder.iterdir()}
        runs[f"team/proj/run{seed}"] = files
    with fake_server(runs) as server:
        env = _online_env(tmp_path, server.url)
        proc = run_cli("diff", "team/proj/run11", "team/proj/run12", "--json", env=env)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        report = json.loads(proc.stdout)
        assert report["a"]["source"] == "team/proj/run11"
        seeds = [d for d in report["differences"] if d["key"] == "seed"]
        assert seeds and (seeds[0]["a"], seeds[0]["b"]) == (11, 12), report["differences"]
        same = run_cli("diff", "team/proj/run11", "team/proj/run11", env=env)
        assert same.returncode == 0, same.stdout + same.stderr
        assert {"Run", "RunFiles"} <= set(server.operations)
        missing = run_cli("diff", "team/proj/nosuch", "team/proj/run11", env=env)
    assert missing.returncode == 2
    lines = missing.stderr.splitlines()
    assert lines[0].startswith("error: team/proj/nosuch: cannot read this W&B run: ")
    assert "Could not find run" in lines[0] and len(lines) <= 2, missing.stderr


def test_diff_of_a_run_online_without_a_key_is_one_line(tmp_path: Path) -> None:
    from helpers import run_cli

    proc = run_cli(
        "diff", "team/proj/run1", "team/proj/run2", env=_online_env(tmp_path, None, None)
    )
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[0].startswith(
        "error: team/proj/run1 is no file here; read as a W&B run (ENTITY/PROJECT/RUN_ID) it "
        "needs WANDB_API_KEY: set it"
    ), proc.stderr


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("team/proj/abc123", "team/proj/abc123"),
        ("my-team/my.project/run_1", "my-team/my.project/run_1"),
        ("localhost/ns/image", None),  # a registry on this host: an image
        ("registry.example.com/ns/image", None),
        ("127.0.0.1:5000/ns/image", None),
        ("team/proj/abc:tag", None),
        ("team/abc123", None),
        ("runs:/0123", None),
    ],
)
def test_what_names_a_wandb_run_online(value: str, expected: str | None) -> None:
    assert wandbruns.run_path_of(value) == expected


def test_verify_wandb_usage_errors() -> None:
    from reprobuild.errors import VerifyUsageError

    keep = Path("/tmp/keep")
    with pytest.raises(VerifyUsageError, match="drop --local"):
        wandbruns.run_env([], local=True, keep=keep)
    with pytest.raises(VerifyUsageError, match="--wandb needs --keep DIR"):
        wandbruns.run_env([], local=False, keep=None)
    with pytest.raises(VerifyUsageError, match="drop -e WANDB_MODE=online"):
        wandbruns.run_env(["WANDB_MODE=online"], local=False, keep=keep)
    assert wandbruns.run_env([], local=False, keep=keep) == [
        "WANDB_MODE=offline",
        "WANDB_DIR=/reprobuild-run",
    ]
    assert wandbruns.run_env(["WANDB_MODE=offline"], local=False, keep=keep) == [
        "WANDB_DIR=/reprobuild-run"
    ]


def test_verify_wandb_cli_without_keep_is_one_error_line() -> None:
    from helpers import run_cli

    proc = run_cli("verify", "some-image", "--wandb", "--", "true")
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[0].startswith("error: --wandb needs --keep DIR"), proc.stderr


def test_verify_wandb_writes_the_verdict_into_the_runs_that_carry_its_records(
    seeded: dict[str, tuple[Path, subprocess.CompletedProcess[str]]], tmp_path: Path
) -> None:
    """The verdict goes into each kept offline run whose run record is a verified run's, as a
    file of the run; a run that carries another record is left alone."""
    import shutil

    keep = tmp_path / "keep"
    ids = []
    for index, (where, _) in enumerate(seeded.values(), start=1):
        source = offline_runs(where / "wandb")[0]
        target = keep / f"run-{index}" / "records" / "wandb" / source.name
        shutil.copytree(source, target)
        record = next((target / "files" / wandbrun.FILES_DIR).glob("run-*.json"))
        ids.append(json.loads(record.read_text())["run_id"])
    line = wandbruns.log_verdict(keep, ids[:1], "identical", "2 runs identical", "/r.json")
    assert line.startswith("wandb: verdict 'identical' written to 1 offline run(s): "), line
    first, second = wandbruns.offline_runs(keep)
    verdict = json.loads((first / "files" / wandbrun.FILES_DIR / "verify.json").read_text())
    assert verdict["result"] == "identical" and verdict["run_ids"] == ids[:1]
    assert not (second / "files" / wandbrun.FILES_DIR / "verify.json").exists()
    none = wandbruns.log_verdict(keep, ["other"], "identical", "", "/r.json")
    assert none.startswith("wandb: no offline W&B run under"), none
