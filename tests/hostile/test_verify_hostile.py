"""Hostile inputs to ``reprobuild verify`` (issues 9 and 10): bad --output and --report paths,
programs that plant symbolic links in their output directory, write huge or deeply nested
records, die by SIGKILL, and a verify stopped by a signal while its containers run.

Each case asserts the exit code, one ``error:`` line naming the bad value, no traceback, and
nothing left behind: no container (verify's containers carry ``io.reprobuild.owner``), no
``reprobuild-*`` temp dir, no file in the project or the current directory.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from helpers import run_cli
from hostile_harness import Snapshot, assert_clean_failure
from reprobuild.checks.runrecords import MAX_DEPTH, compare_run_records, read_run_dir
from reprobuild.checks.streams import Divergence
from reprobuild.checks.verify import (
    FileDigest,
    UnsafeOutputError,
    collect_outputs,
    file_divergence,
    verify_spec_from_args,
)
from reprobuild.checks.verify.run import _killed_how
from reprobuild.errors import VerifyUsageError

OWNER_LABEL = "io.reprobuild.owner"


def _verify(cwd: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {"XDG_CACHE_HOME": str(cwd / "xdg-cache")}
    return run_cli("verify", "-q", *args, cwd=cwd, env=env, timeout=timeout)


def _py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


@pytest.fixture
def workspace(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """(cwd: must stay empty, where reports may go)."""
    cwd = tmp_path / "cwd"
    reports = tmp_path / "reports"
    cwd.mkdir()
    reports.mkdir()
    yield cwd, reports


# ------------------------------------------------------------------ arguments, no runs at all


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        ("../escape.txt", "points outside the output directory"),
        ("a/../../escape.txt", "points outside the output directory"),
        ("/out/../etc/passwd", "points outside the output directory"),
        ("/etc/passwd", "give a path relative to the run's output directory"),
        ("x" * 5000, "longer than 4096 characters"),
        ("", "give a path relative to the run's output directory"),
    ],
)
def test_bad_output_path_is_refused_before_any_run(
    workspace: tuple[Path, Path], output: str, expected: str
) -> None:
    cwd, reports = workspace
    marker = cwd.parent / f"ran-{uuid.uuid4().hex[:8]}"
    snap = Snapshot.take([cwd, reports])
    proc = _verify(
        cwd,
        "--local",
        "--report",
        str(reports / "r.json"),
        "--output",
        output,
        "--",
        *_py(f"open({str(marker)!r}, 'w')"),
    )
    assert_clean_failure(proc, expected, exit_code=2)
    assert not marker.exists()
    snap.assert_unchanged()


@pytest.mark.parametrize(
    ("option", "value", "expected"),
    [
        ("--output", "a\0b", "NUL character"),
        ("--data", "/tmp\0/x:/data", "NUL character"),
    ],
)
def test_nul_bytes_are_refused(option: str, value: str, expected: str) -> None:
    # a NUL cannot travel in argv: the library function the CLI calls is the door
    kwargs: dict[str, Any] = {"outputs": [value]} if option == "--output" else {"data": [value]}
    with pytest.raises(VerifyUsageError, match=expected):
        verify_spec_from_args("img", ["true"], **kwargs)


@pytest.mark.parametrize(
    ("report", "expected"),
    [
        ("missing-dir/deeper/r.json", "cannot write the report"),
        ("a-file.txt/r.json", "cannot write the report"),
        ("a-dir", "is a directory"),
        ("results.json", "is not a reprobuild verify report"),  # the program's own results
        ("a-file.txt", "is not a reprobuild verify report"),
        ("passwd-link", "is a symlink"),
    ],
)
def test_unwritable_report_is_found_before_any_run(
    workspace: tuple[Path, Path], report: str, expected: str
) -> None:
    cwd, reports = workspace
    (reports / "a-file.txt").write_text("x")
    (reports / "a-dir").mkdir()
    (reports / "results.json").write_text('{"loss": 0.25}\n')
    (reports / "passwd-link").symlink_to("/etc/passwd")
    marker = cwd.parent / f"ran-{uuid.uuid4().hex[:8]}"
    snap = Snapshot.take([cwd, reports])
    proc = _verify(
        cwd,
        "--local",
        "--report",
        str(reports / report),
        "--",
        *_py(f"open({str(marker)!r}, 'w')"),
    )
    assert_clean_failure(proc, expected, exit_code=1)
    assert not marker.exists(), "a run started before the report path was checked"
    snap.assert_unchanged()


def test_default_report_goes_under_dot_reprobuild(workspace: tuple[Path, Path]) -> None:
    cwd, _ = workspace
    proc = _verify(cwd, "--local", "--", *_py("print('same')"))
    assert proc.returncode == 0, proc.stderr
    assert [p.name for p in cwd.iterdir()] == [".reprobuild"]
    (report,) = (cwd / ".reprobuild" / "verify").iterdir()
    assert report.name.startswith("reprobuild-verify-local-")
    assert proc.stdout.splitlines()[-1] == f"report: {report}"


# ---------------------------------------------------- what the program leaves in its output


def _plant(code: str) -> list[str]:
    """A program that plants something in its output directory, then prints one line."""
    return _py(f"import os; out = os.environ['REPRO_OUTPUT_DIR']; {code}; print('done')")


@pytest.mark.parametrize(
    ("plant", "output", "expected"),
    [
        ("os.symlink('/etc', out + '/logs')", "logs/passwd", "/logs is a symbolic link"),
        ("os.symlink('/etc', out + '/logs')", "logs/", "/logs is a symbolic link"),
        ("os.symlink('/etc/passwd', out + '/m.json')", "m.json", "/m.json is a symbolic link"),
        (
            "os.makedirs(out + '/a'); os.symlink('/etc', out + '/a/b')",
            "a/b/hostname",
            "/a/b is a symbolic link",
        ),
    ],
)
def test_local_output_symlink_is_never_followed(
    workspace: tuple[Path, Path], plant: str, output: str, expected: str
) -> None:
    cwd, reports = workspace
    report = reports / "r.json"
    snap = Snapshot.take([cwd])
    proc = _verify(
        cwd, "--local", "--report", str(report), "--output", output, "--", *_plant(plant)
    )
    line = assert_clean_failure(proc, expected, exit_code=1)
    assert "root:" not in proc.stderr and "root:" not in line
    data = json.loads(report.read_text())
    assert data["result"] == "failed"
    assert all(not run["outputs"] for run in data["runs"]), "a host file was hashed"
    snap.assert_unchanged()


def test_links_inside_a_declared_directory_are_skipped(workspace: tuple[Path, Path]) -> None:
    cwd, reports = workspace
    report = reports / "r.json"
    plant = (
        "os.makedirs(out + '/ckpt'); open(out + '/ckpt/w.bin', 'wb').write(b'w'); "
        "os.symlink('/etc/passwd', out + '/ckpt/passwd'); os.symlink('/etc', out + '/ckpt/etc')"
    )
    proc = _verify(
        cwd, "--local", "--report", str(report), "--output", "ckpt/", "--", *_plant(plant)
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(report.read_text())
    assert [list(run["outputs"]) for run in data["runs"]] == [["ckpt/w.bin"]] * 2


def test_collect_outputs_refuses_too_many_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import reprobuild.checks.verify.outputs as outputs

    monkeypatch.setattr(outputs, "MAX_OUTPUT_FILES", 10)
    (tmp_path / "many").mkdir()
    for i in range(11):
        (tmp_path / "many" / f"{i}.bin").write_bytes(b"x")
    with pytest.raises(UnsafeOutputError, match="more than 10 output files under /out"):
        collect_outputs(tmp_path, ["many/"])
    assert len(collect_outputs(tmp_path, ["many/0.bin"])) == 1


def test_collect_outputs_refuses_a_huge_file_before_reading_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import reprobuild.checks.verify.outputs as outputs

    monkeypatch.setattr(outputs, "MAX_FILE_BYTES", 1 << 20)
    with (tmp_path / "big.bin").open("wb") as fh:
        fh.truncate((1 << 20) + 1)  # sparse: costs no disk
    with pytest.raises(UnsafeOutputError, match=r"/out/big.bin holds 1048577 bytes"):
        collect_outputs(tmp_path, ["big.bin"])


def test_deeply_nested_json_outputs_are_compared_as_text(tmp_path: Path) -> None:
    depth = 100_000
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text("[" * depth + "1" + "]" * depth)
    b.write_text("[" * depth + "2" + "]" * depth)
    da = FileDigest("aa" * 32, a.stat().st_size)
    db = FileDigest("bb" * 32, b.stat().st_size)
    found = file_divergence("m.json", a, b, (1, 2), da, db)
    assert isinstance(found, Divergence) and found.offset == depth
    assert found.key is None  # no JSON walk: it would have blown the stack


def test_huge_and_deep_run_records_are_read_bounded(tmp_path: Path) -> None:
    (tmp_path / "run-0-huge.json").write_bytes(b'{"a": "' + b"x" * (17 << 20) + b'"}')
    (tmp_path / "run-1-frameworks-deep.json").write_text("[" * 10_000 + "]" * 10_000)
    (tmp_path / "run-2-frameworks-link.json").symlink_to("/etc/passwd")
    records = read_run_dir(tmp_path)
    assert records.record is not None and "larger than" in records.record["error"]
    deep, link = records.frameworks
    assert f"deeper than {MAX_DEPTH} levels" in deep["error"]
    assert "cannot read run-2-frameworks-link.json" in link["error"]
    assert compare_run_records(records, records).agree


def test_program_writing_a_deep_run_record_does_not_crash_verify(
    workspace: tuple[Path, Path],
) -> None:
    cwd, reports = workspace
    report = reports / "r.json"
    code = (
        "import os; d = os.environ['REPRO_RUN_DIR']; "
        "open(d + '/run-0000.json', 'w').write('[' * 200000 + ']' * 200000); print('x')"
    )
    proc = _verify(cwd, "--local", "--report", str(report), "--", *_py(code))
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    data = json.loads(report.read_text())
    assert "deeper than 64 levels" in data["runs"][0]["run_record"]["error"]


# ------------------------------------------------------------------------ how a run ended


@pytest.mark.parametrize(
    ("code", "oom", "expected"),
    [
        (137, False, "was killed by signal 9 (SIGKILL)"),
        (137, None, "was killed by signal 9 (SIGKILL)"),
        (137, True, "was killed for lack of memory (out of memory; exit status 137)"),
        (143, None, "was killed by signal 15 (SIGTERM)"),
        (3, None, "exited with status 3"),
    ],
)
def test_oom_is_said_only_when_the_engine_says_so(
    code: int, oom: bool | None, expected: str
) -> None:
    assert _killed_how(code, oom) == expected


def test_local_sigkilled_program_is_not_called_oom(workspace: tuple[Path, Path]) -> None:
    cwd, reports = workspace
    snap = Snapshot.take([cwd])
    proc = _verify(
        cwd,
        "--local",
        "--report",
        str(reports / "r.json"),
        "--",
        *_py("import os, signal; os.kill(os.getpid(), signal.SIGKILL)"),
    )
    # the runtime's banner is the run's stderr, shown above the error like a build log
    line = assert_clean_failure(
        proc, "was killed by signal 9 (SIGKILL)", exit_code=1, build_log_allowed=True
    )
    assert "memory" not in line
    snap.assert_unchanged()


def test_a_huge_command_is_cut_in_the_error(workspace: tuple[Path, Path]) -> None:
    cwd, reports = workspace
    code = "import sys; sys.exit(3)  # " + "x" * 3000
    proc = _verify(cwd, "--local", "--report", str(reports / "r.json"), "--", *_py(code))
    line = assert_clean_failure(proc, "exited with status 3", exit_code=1, build_log_allowed=True)
    assert "xxx..." in line


# ------------------------------------------------------------------------------- signals


def _wait_for(predicate: Any, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError("timed out")


def _start_verify(cwd: Path, *args: str, tmp: Path | None = None) -> subprocess.Popen[str]:
    env = {**os.environ, "XDG_CACHE_HOME": str(cwd.parent / "xdg"), "SOURCE_DATE_EPOCH": "0"}
    if tmp is not None:
        env["TMPDIR"] = str(tmp)
    return subprocess.Popen(
        [sys.executable, "-m", "reprobuild", "verify", "-q", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _as_completed(proc: subprocess.Popen[str]) -> subprocess.CompletedProcess[str]:
    out, err = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_sigterm_to_local_verify_kills_its_runs(workspace: tuple[Path, Path]) -> None:
    cwd, reports = workspace
    pids = cwd.parent / "pids"
    pids.mkdir()
    private_tmp = cwd.parent / "tmp"  # its own TMPDIR: other users of /tmp are no noise here
    private_tmp.mkdir()
    code = f"import os, time; open({str(pids)!r} + '/%d' % os.getpid(), 'w'); time.sleep(300)"
    proc = _start_verify(
        cwd, "--local", "--report", str(reports / "r.json"), "--", *_py(code), tmp=private_tmp
    )
    _wait_for(lambda: len(list(pids.iterdir())) == 2)
    proc.send_signal(signal.SIGTERM)
    done = _as_completed(proc)
    assert_clean_failure(done, "interrupted by SIGTERM", exit_code=143)
    for pid_file in pids.iterdir():
        with pytest.raises(ProcessLookupError):
            os.kill(int(pid_file.name), 0)
    assert list(private_tmp.iterdir()) == [], "scratch directories left behind"
    assert not (reports / "r.json").exists()
    assert list(cwd.iterdir()) == []


# ----------------------------------------------------------------- on the engine, for real


@pytest.fixture(scope="module")
def image(base_ref: str, docker_client: Any) -> str:
    """The pinned test base (python3, no reprobuild runtime): what these cases test is verify
    itself, and it needs no build (nor the engine's bridge network). Pulled by digest from
    the loopback registry when the engine lacks it (no tag is made)."""
    docker_client.images.pull(base_ref)
    return base_ref


def _owned_by(docker_client: Any, pid: int) -> list[str]:
    """States of the containers verify process ``pid`` labelled as its own (sparse: no
    inspect per container, which races with their removal)."""
    found = docker_client.containers.list(all=True, sparse=True, filters={"label": OWNER_LABEL})
    return [
        str(c.attrs.get("State"))
        for c in found
        if (c.attrs.get("Labels") or {}).get(OWNER_LABEL, "").startswith(f"{pid}-")
    ]


@pytest.mark.engine
@pytest.mark.registry
@pytest.mark.parametrize(
    ("signum", "exit_code", "name"),
    [
        (signal.SIGTERM, 143, "SIGTERM"),
        (signal.SIGINT, 130, "SIGINT"),
        (signal.SIGHUP, 129, "SIGHUP"),
    ],
)
def test_signal_to_verify_removes_every_container(
    image: str,
    docker_client: Any,
    workspace: tuple[Path, Path],
    signum: int,
    exit_code: int,
    name: str,
) -> None:
    cwd, reports = workspace
    snap = Snapshot.take([cwd, reports], docker_client)
    proc = _start_verify(
        cwd,
        image,
        "--report",
        str(reports / "r.json"),
        "--",
        "python3",
        "-c",
        "import time; print('up', flush=True); time.sleep(300)",
    )
    try:
        _wait_for(lambda: _owned_by(docker_client, proc.pid).count("running") == 2)
        proc.send_signal(signum)
        done = _as_completed(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert_clean_failure(done, f"interrupted by {name}", exit_code=exit_code)
    assert _owned_by(docker_client, proc.pid) == []
    snap.assert_unchanged(docker_client)


@pytest.mark.engine
@pytest.mark.registry
@pytest.mark.parametrize(
    ("plant", "output", "expected"),
    [
        ("os.symlink('/etc', '/out/logs')", "logs/passwd", "/out/logs is a symbolic link"),
        ("os.symlink('/etc', '/out/logs')", "logs/", "/out/logs is a symbolic link"),
        ("os.symlink('/etc/shadow', '/out/m.json')", "m.json", "/out/m.json is a symbolic link"),
    ],
)
def test_container_output_symlink_never_reaches_host_files(
    image: str,
    docker_client: Any,
    workspace: tuple[Path, Path],
    plant: str,
    output: str,
    expected: str,
) -> None:
    cwd, reports = workspace
    report = reports / "r.json"
    snap = Snapshot.take([cwd], docker_client)
    proc = _verify(
        cwd,
        image,
        "--report",
        str(report),
        "--output",
        output,
        "--",
        "python3",
        "-c",
        f"import os; {plant}; print('done')",
    )
    line = assert_clean_failure(proc, expected, exit_code=1)
    assert "root:" not in proc.stderr and "root:" not in line
    data = json.loads(report.read_text())
    assert all(not run["outputs"] for run in data["runs"])
    snap.assert_unchanged(docker_client)


@pytest.mark.engine
@pytest.mark.registry
def test_container_sigkill_is_not_called_oom(
    image: str, docker_client: Any, workspace: tuple[Path, Path]
) -> None:
    cwd, reports = workspace
    snap = Snapshot.take([cwd], docker_client)
    proc = _verify(
        cwd,
        image,
        "--report",
        str(reports / "r.json"),
        "--",
        "sh",
        "-c",
        # not as PID 1 (the kernel spares it signals it does not handle)
        'python3 -c "import os; os.kill(os.getpid(), 9)"; exit $?',
    )
    line = assert_clean_failure(
        proc, "was killed by signal 9 (SIGKILL)", exit_code=1, build_log_allowed=True
    )
    assert "memory" not in line
    snap.assert_unchanged(docker_client)


@pytest.mark.engine
@pytest.mark.registry
def test_unwritable_report_starts_no_container(
    image: str, docker_client: Any, workspace: tuple[Path, Path]
) -> None:
    cwd, reports = workspace
    (reports / "file").write_text("x")
    snap = Snapshot.take([cwd, reports], docker_client)
    proc = _verify(
        cwd, image, "--report", str(reports / "file" / "r.json"), "--", "python3", "-c", "1"
    )
    assert_clean_failure(proc, "cannot write the report", exit_code=1)
    snap.assert_unchanged(docker_client)


@pytest.mark.engine
@pytest.mark.registry
def test_sigkilled_verify_leftovers_are_reaped_by_the_next_verify(
    image: str, docker_client: Any, workspace: tuple[Path, Path]
) -> None:
    """SIGKILL skips every clean-up: the runs' containers and the work dir stay. The next
    verify finds them by their owner token (a dead process), removes them and says so."""
    cwd, reports = workspace
    private_tmp = cwd.parent / "tmp"
    private_tmp.mkdir()
    sleeper = ["--", "python3", "-c", "import time; print('up', flush=True); time.sleep(300)"]
    proc = _start_verify(cwd, image, "--report", str(reports / "a.json"), *sleeper, tmp=private_tmp)
    try:
        _wait_for(lambda: _owned_by(docker_client, proc.pid).count("running") == 2)
        proc.kill()
        proc.communicate(timeout=60)
        assert len(_owned_by(docker_client, proc.pid)) == 2, "SIGKILL cannot remove them"
        workdirs = [p for p in private_tmp.iterdir() if p.name.startswith("reprobuild-verify-")]
        assert len(workdirs) == 1, workdirs
        again = _start_verify(
            cwd, image, "--report", str(reports / "b.json"), "--", "python3", "-c", "print(1)",
            tmp=private_tmp,
        )  # fmt: skip
        done = _as_completed(again)
        assert done.returncode == 0, done.stderr[-3000:]
        notes = [ln for ln in done.stderr.splitlines() if ln.startswith("note: removed")]
        assert len(notes) == 1, done.stderr
        assert f"{proc.pid}" in notes[0], notes[0]
        assert _owned_by(docker_client, proc.pid) == []
        assert not workdirs[0].exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        for cid in docker_client.containers.list(
            all=True, sparse=True, filters={"label": OWNER_LABEL}
        ):
            if (cid.attrs.get("Labels") or {}).get(OWNER_LABEL, "").startswith(f"{proc.pid}-"):
                cid.remove(force=True)


# ------------------------------------------------------------ stdout: patterns and sheer size


@pytest.mark.parametrize(
    ("patterns", "expected"),
    [
        (["("], "--ignore '(' is not a regular expression"),
        (["x*"], "--ignore 'x*' matches the empty string"),
        ([""], "--ignore '' matches the empty string"),
        (["a" * 1001], "longer than 1000 characters"),
        (["a"] * 65, "at most 64 patterns"),
    ],
)
def test_bad_ignore_patterns_are_refused_before_any_run(
    workspace: tuple[Path, Path], patterns: list[str], expected: str
) -> None:
    cwd, reports = workspace
    marker = cwd.parent / f"ran-{uuid.uuid4().hex[:8]}"
    snap = Snapshot.take([cwd, reports])
    options = [arg for pattern in patterns for arg in ("--ignore", pattern)]
    proc = _verify(
        cwd,
        "--local",
        "--report",
        str(reports / "r.json"),
        *options,
        "--",
        *_py(f"open({str(marker)!r}, 'w')"),
    )
    assert_clean_failure(proc, expected, exit_code=2)
    assert not marker.exists()
    snap.assert_unchanged()


ENDLESS_LINE = """
import os, sys
chunk = (b"loss 0.25 " * 6554)[:65536]
for _ in range(int(sys.argv[1])):
    os.write(1, chunk)
    os.write(1, b"\\r" + chunk[:100])
"""


@pytest.mark.parametrize("default_ignore", [True, False])
def test_a_program_that_never_ends_its_line_cannot_exhaust_memory(
    workspace: tuple[Path, Path], default_ignore: bool
) -> None:
    """192 MiB on stdout without a newline (and redraws): verify's memory stays bounded, the
    line is compared by its kept part and its length, and the runs are identical."""
    cwd, reports = workspace
    script = cwd.parent / "endless.py"
    script.write_text(ENDLESS_LINE)
    report = reports / "r.json"
    flags = [] if default_ignore else ["--no-default-ignore"]
    code = (
        "import resource, subprocess, sys\n"
        "proc = subprocess.run(sys.argv[1:])\n"
        "peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
        "print(proc.returncode, peak)\n"
    )
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            code,
            sys.executable,
            "-m",
            "reprobuild",
            "verify",
            "-q",
            "--local",
            *flags,
            "--report",
            str(report),
            "--",
            sys.executable,
            str(script),
            "3072",
        ],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=600,
        check=False,
    )
    returncode, peak_kib = (int(x) for x in probe.stdout.split()[-2:])
    assert returncode == 0, probe.stderr[-2000:]
    data = json.loads(report.read_text())
    assert data["result"] == "identical"
    assert data["runs"][0]["stdout_lines"] == 1
    # RUSAGE_CHILDREN's peak is the largest child: verify itself, or a run; 192 MiB of output
    # held by verify would show as well over 400 MiB (str plus the reference queue).
    assert peak_kib < 250 * 1024, f"peak RSS {peak_kib} KiB"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--resume-at", "0"], "--resume-at 0: give the epoch after which to stop"),
        (["--resume-at", "2", "--report", "missing-dir/deeper/r.json"], "cannot write the report"),
        (["--resume-at", "2", "--ignore", "("], "is not a regular expression"),
    ],
)
def test_resume_check_refuses_bad_input_before_any_leg(
    workspace: tuple[Path, Path], args: list[str], expected: str
) -> None:
    cwd, reports = workspace
    marker = cwd.parent / f"ran-{uuid.uuid4().hex[:8]}"
    snap = Snapshot.take([cwd, reports])
    if "--report" not in args:
        args = [*args, "--report", str(reports / "r.json")]
    proc = _verify(cwd, "--local", *args, "--", *_py(f"open({str(marker)!r}, 'w')"))
    assert_clean_failure(proc, expected, exit_code=2 if "report" not in expected else None)
    assert not marker.exists()
    snap.assert_unchanged()
