"""``reprobuild verify`` on real containers (issue 5): one small image
(tests/data/projects/verify, standard-library scripts) and, marked heavy, the
images/regression-torch example with PyTorch.

- a deterministic script: identical, with both run records in the report;
- the wall clock and os.urandom: reported at the right line with both values;
- a checkpoint with random bytes behind an identical stdout: caught through --output;
- a JSON metrics file differing in one key: reported with the key path;
- a script that diverges at once and then runs for 60 s: stopped within seconds;
- a failing command, an unknown image: clear errors;
- seed, mode, data mounts and variables reach the runs.
"""

from __future__ import annotations

import json
import random
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from helpers import DATA, REPO, build_json, run_cli

pytestmark = [pytest.mark.engine, pytest.mark.registry]


@pytest.fixture(scope="module")
def image(base_ref, docker_client) -> Iterator[str]:  # type: ignore[no-untyped-def]
    tag = f"reprobuild-test/verify:{uuid.uuid4().hex[:12]}"
    build_json(str(DATA / "projects" / "verify"), "--base", base_ref, "--tag", tag)
    yield tag
    docker_client.images.remove(tag, force=True)


def verify(
    tmp_path: Path, *args: str, timeout: float = 300
) -> tuple[int, str, str, dict[str, Any]]:
    """Run `reprobuild verify ARGS --report <tmp>`; returns exit code, stdout, stderr, report."""
    report = tmp_path / f"report-{uuid.uuid4().hex[:8]}.json"
    split = args.index("--")
    argv = [*args[:split], "--report", str(report), *args[split:]]
    proc = run_cli("verify", *argv, cwd=tmp_path, timeout=timeout)
    data: dict[str, Any] = json.loads(report.read_text()) if report.exists() else {}
    return proc.returncode, proc.stdout, proc.stderr, data


def test_deterministic_script_is_identical(image: str, docker_client, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    code, out, err, report = verify(
        tmp_path, image, "--output", "metrics.json", "--output", "ckpt/", "--", "python", "det.py"
    )
    assert code == 0, err
    assert out.splitlines()[0].startswith(
        f"identical: 2 runs of `python det.py` from {image} (sha256:"
    )
    assert out.splitlines()[0].endswith(": 6 stdout lines and 2 output file(s), bit for bit")
    assert "), linux/amd64: 6 stdout lines" in out.splitlines()[0]  # the image's platform
    assert out.splitlines()[1] == f"report: {tmp_path / next(tmp_path.glob('report-*')).name}"
    assert report["schema_version"] == 1 and report["kind"] == "reprobuild.verify"
    assert report["result"] == "identical" and report["divergence"] is None
    assert report["image_id"] == docker_client.images.get(image).id
    assert report["lines_compared"] == 6
    labels = docker_client.images.get(image).attrs["Config"]["Labels"]
    first, second = report["runs"]
    assert first["outputs"] == second["outputs"]
    assert set(first["outputs"]) == {"metrics.json", "ckpt/weights.bin"}
    assert first["stdout_sha256"] == second["stdout_sha256"]
    for run in (first, second):
        assert (run["exit_code"], run["killed"]) == (0, False)
        record = run["run_record"]
        assert record["kind"] == "reprobuild.run"
        assert record["determinism"]["seed"] == 7  # the image's seed
        assert record["image"]["sha256"] == labels["io.reprobuild.manifest.sha256"]
    assert first["run_record"]["run_id"] != second["run_record"]["run_id"]
    assert second["record_differences"] == []  # same image, same host: same stack
    # the report is the only thing left behind, written whole
    assert [p.name for p in tmp_path.iterdir()] == [Path(report_path(tmp_path)).name]
    assert not list(
        docker_client.containers.list(
            all=True, filters={"label": "io.reprobuild.verify", "ancestor": image}
        )
    )


def report_path(tmp_path: Path) -> str:
    (only,) = tmp_path.glob("report-*.json")
    return str(only)


def test_json_flag_prints_the_report(image: str, tmp_path: Path) -> None:
    code, out, err, report = verify(
        tmp_path, image, "--json", "--runs", "3", "--", "python", "det.py"
    )
    assert code == 0, err
    assert json.loads(out) == report
    assert len(report["runs"]) == 3
    assert err.splitlines()[-1].startswith("report: ")


@pytest.mark.parametrize(
    ("script", "line", "prefix", "where"),
    [("clock.py", 3, "step 2 at ", ""), ("urandom.py", 2, "token ", " (token)")],
)
def test_divergent_line_is_reported_with_both_values(
    image: str, tmp_path: Path, script: str, line: int, prefix: str, where: str
) -> None:
    code, out, err, report = verify(tmp_path, image, "--", "python", script)
    assert code == 1, err
    div = report["divergence"]
    assert (div["where"], div["line"], div["runs"]) == ("stdout", line, [1, 2])
    assert div["a"].startswith(prefix) and div["b"].startswith(prefix) and div["a"] != div["b"]
    assert report["lines_compared"] == line - 1
    numeric = div["numeric"]
    assert numeric["a"] == div["a"][len(prefix) :] and numeric["b"] == div["b"][len(prefix) :]
    assert numeric["abs_diff"] > 0 and numeric["rel_diff"] > 0
    if script == "clock.py":
        assert numeric["ulps"] > 0  # floats: their distance in ulps
    else:
        assert numeric["ulps"] is None  # integers: exact
        assert numeric["abs_diff"] == abs(int(numeric["a"]) - int(numeric["b"]))
    lines = out.splitlines()
    # the value's name when one stands before it ("at" does not name anything)
    assert lines[0] == f"diverged: stdout line {line} differs between run 1 and run 2{where}"
    assert lines[1] == f"  run 1: {div['a']!r}"
    assert lines[2] == f"  run 2: {div['b']!r}"
    name = "token " if script == "urandom.py" else ""
    assert lines[3].startswith(f"  numbers: {name}{numeric['a']} vs {numeric['b']}, abs ")


def test_checkpoint_is_caught_through_output(image: str, tmp_path: Path) -> None:
    code, _out, err, report = verify(tmp_path, image, "--", "python", "ckpt.py")
    assert code == 0, err  # stdout alone is identical ...
    code, out, err, report = verify(
        tmp_path, image, "--output", "ckpt.bin", "--", "python", "ckpt.py"
    )
    assert code == 1, err  # ... the checkpoint is not
    div = report["divergence"]
    # after the 6-byte header come 64 random bytes: the first differs from the other run's
    # at offset 6, except 1 time in 256 when the two draws begin with the same byte (a fresh
    # CI run saw offset 7)
    assert (div["where"], div["file"]) == ("output", "ckpt.bin")
    assert 6 <= div["offset"] < 70
    first, second = (r["outputs"]["ckpt.bin"] for r in report["runs"])
    assert first["size"] == second["size"] == 70 and first["sha256"] != second["sha256"]
    assert f"sha256 {first['sha256'][:12]}... vs {second['sha256'][:12]}..." in div["detail"]
    assert f"  first differing byte at offset {div['offset']}" in out.splitlines()


def test_json_metrics_differing_in_one_key(image: str, tmp_path: Path) -> None:
    code, out, err, report = verify(
        tmp_path, image, "--output", "/out/metrics.json", "--", "python", "metrics.py"
    )
    assert code == 1, err
    div = report["divergence"]
    assert (div["file"], div["key"]) == ("metrics.json", "timing.train_s")
    assert [d["where"] for d in div["json_differences"]] == ["timing.train_s"]
    assert div["numeric"] is not None and div["numeric"]["abs_diff"] > 0
    assert out.splitlines()[0] == (
        "diverged: output metrics.json: timing.train_s differs between run 1 and run 2"
    )


def test_early_stop(image: str, docker_client, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    start = time.monotonic()
    code, out, err, report = verify(tmp_path, image, "--", "python", "early.py")
    elapsed = time.monotonic() - start
    assert code == 1, err
    assert report["divergence"]["line"] == 1
    assert report["stopped_early"] is True
    for run in report["runs"]:
        assert run["killed"] is True and run["exit_code"] == 137
    assert elapsed < 20, f"verify took {elapsed:.1f} s: the runs were not stopped at once"
    print(f"early stop: divergence on line 1, verify returned after {elapsed:.2f} s")
    assert "stopped early: runs killed after" in out
    assert not list(
        docker_client.containers.list(
            all=True, filters={"label": "io.reprobuild.verify", "ancestor": image}
        )
    )


def test_failing_command(image: str, tmp_path: Path) -> None:
    code, out, err, report = verify(tmp_path, image, "--", "python", "fail.py")
    assert (code, out) == (1, "")
    lines = err.splitlines()
    assert lines[-3] == "FileNotFoundError: /data/train.csv"
    assert lines[-4] == "warning 29: something noisy"
    assert lines[-2].startswith("error: run ")
    assert lines[-2].endswith(" of 2: `python fail.py` exited with status 3")
    assert (
        lines[-1]
        == f"hint: the last lines of its stderr are above; report: {report_path(tmp_path)}"
    )
    assert report["result"] == "failed"
    assert report["failure"]["exit_code"] == 3
    assert report["failure"]["stderr_tail"][-1] == "FileNotFoundError: /data/train.csv"


def test_command_not_found(image: str, tmp_path: Path) -> None:
    code, _out, err, report = verify(tmp_path, image, "--", "no-such-program")
    assert code == 1
    assert "reprobuild: command not found: 'no-such-program'" in err
    assert "`no-such-program` exited with status 127" in err
    assert report["failure"]["exit_code"] == 127


def test_unknown_image(docker_client, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    missing = f"reprobuild-test/no-such-image:{uuid.uuid4().hex[:12]}"
    proc = run_cli("verify", missing, "--", "python", "train.py", cwd=tmp_path)
    assert (proc.returncode, proc.stdout) == (1, "")
    assert proc.stderr.splitlines() == [
        f"error: no image {missing!r} on this engine",
        "hint: build it with `reprobuild image`, or pull it first (`docker pull IMAGE`)",
    ]
    assert list(tmp_path.iterdir()) == []


def test_seed_and_mode_reach_the_runs(image: str, tmp_path: Path) -> None:
    code, _out, err, report = verify(tmp_path, image, "--seed", "5", "--", "python", "det.py")
    assert code == 0, err
    assert f"[1] epoch 1 loss {random.Random(5).random()!r}" in err.splitlines()
    assert report["seed"] == 5
    assert report["runs"][0]["run_record"]["determinism"]["seed_source"] == "REPRO_SEED"
    # the control: with the runtime off, `random` is unseeded and the first line differs
    code, _out, err, report = verify(tmp_path, image, "--mode", "off", "--", "python", "det.py")
    assert code == 1, err
    assert report["divergence"]["line"] == 1
    assert report["runs"][0]["run_record"]["determinism"]["mode"] == "off"


def test_data_mount_env_and_keep(image: str, tmp_path: Path) -> None:
    data = tmp_path / "dataset"
    data.mkdir()
    (data / "train.csv").write_text("x,y\n1,2\n")
    keep = tmp_path / "kept"
    program = (
        "import os, pathlib\n"
        "env = os.environ\n"
        "print(pathlib.Path('/data/train.csv').read_text().splitlines()[1], env['GREETING'])\n"
        "try:\n"
        "    pathlib.Path('/data/new').write_text('x')\n"
        "except OSError as exc:\n"
        "    print('data is read-only:', exc.errno == 30)\n"
        "pathlib.Path(env['REPRO_OUTPUT_DIR'], 'seen.txt').write_text(env['GREETING'])\n"
    )
    code, _out, err, report = verify(
        tmp_path,
        "--data",
        str(data),
        "-e",
        "GREETING=hello",
        "--keep",
        str(keep),
        "--output",
        "seen.txt",
        image,
        "--",
        "python",
        "-c",
        program,
    )
    assert code == 0, err
    assert "[1] 1,2 hello" in err.splitlines()
    assert "[1] data is read-only: True" in err.splitlines()
    assert report["data"] == [{"host": str(data), "container": "/data"}]
    assert report["env"] == {"GREETING": "hello"}
    for n in (1, 2):
        assert (keep / f"run-{n}" / "out" / "seen.txt").read_text() == "hello"
        assert list((keep / f"run-{n}" / "records").glob("run-*.json"))
    assert not (data / "new").exists()


@pytest.mark.heavy
def test_regression_example_reproduces_and_fails_without_the_runtime(  # type: ignore[no-untyped-def]
    base_ref, docker_client, unique_tag, tmp_path: Path
) -> None:
    """The seed documents' classic case: an unseeded PyTorch regression, reproduced bit for
    bit through the image (stdout, the saved weights and the metrics file), and caught
    diverging when the runtime is off."""
    tag = unique_tag("regression-torch")
    build_json(str(REPO / "images" / "regression-torch"), "--base", base_ref, "--tag", tag)
    outputs = ("--output", "model.pt", "--output", "metrics.json")
    code, out, err, report = verify(tmp_path, tag, *outputs, "--", "python", "train.py")
    assert code == 0, err
    assert report["result"] == "identical"
    assert report["lines_compared"] == 12
    assert set(report["runs"][0]["outputs"]) == {"model.pt", "metrics.json"}
    assert "[1] epoch  1 loss " in err
    frameworks = report["runs"][0]["framework_records"]
    assert frameworks and "torch" in frameworks[0]["framework_settings"]

    code, out, err, report = verify(
        tmp_path, tag, "--mode", "off", *outputs, "--", "python", "train.py"
    )
    assert code == 1, err
    div = report["divergence"]
    assert div["where"] == "stdout" and div["line"] == 1
    assert div["a"].startswith("epoch  1 loss ") and div["numeric"]["abs_diff"] > 0
    assert report["stopped_early"] is True
    assert out.splitlines()[0] == (
        "diverged: stdout line 1 differs between run 1 and run 2 (epoch 1, loss)"
    )


def test_html_page_of_container_runs(image: str, docker_client, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """`verify IMAGE --html`: the page of real container runs names the image and plots the
    loss the runs printed; its stack table compares the two run records, which name the
    image's manifest."""
    page = tmp_path / "verify.html"
    code, _out, err, report = verify(tmp_path, image, "--html", str(page), "--", "python", "det.py")
    assert code == 0, err
    assert f"page: {page}" in err
    text = page.read_text()
    assert "Reproduced. The 2 runs printed the same 6 stdout lines, bit for bit." in text
    assert image in text and report["image_id"] in text
    assert report["runs"][0]["series"]["loss"]["steps"] == [1, 2, 3, 4, 5]
    assert 'data-metric="loss"' in text and text.count("<svg") == 2
    labels = docker_client.images.get(image).attrs["Config"]["Labels"]
    sha = labels["io.reprobuild.manifest.sha256"]
    assert '<span class="mono">manifest.sha256</span>' in text and f"{sha[:12]}" in text
    assert 'class="changed"' not in text  # same image, same host: no row differs
    assert "://" not in text
