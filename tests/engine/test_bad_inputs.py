"""The bad-input corpus: each case breaks a copy of the tiny project in one way and runs the
real CLI against the real engine. Every case must give one ``error:`` line naming the bad
value (plus at most a ``hint:`` line; a failed build shows its log tail above it), a
non-zero exit, no image under the requested tag and no output directory."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from helpers import run_cli

pytestmark = [pytest.mark.engine, pytest.mark.registry]
GOOD_LOCK_LINE = (
    "six==1.17.0 --hash=sha256:ff70335d468e7eb6ec65b95b99d3a2836546063f63acc5171de367e834932a81\n"
)


def yaml_replace(old: str, new: str) -> Callable[[Path], None]:
    def edit(root: Path) -> None:
        path = root / "reprobuild.yaml"
        text = path.read_text()
        assert old in text, old
        path.write_text(text.replace(old, new))

    return edit


def write(rel: str, data: str | bytes) -> Callable[[Path], None]:
    def edit(root: Path) -> None:
        path = root / rel
        path.write_bytes(data if isinstance(data, bytes) else data.encode())

    return edit


def remove(rel: str) -> Callable[[Path], None]:
    return lambda root: (root / rel).unlink()


@dataclass(frozen=True)
class Case:
    edit: Callable[[Path], None] | None
    expected: str
    command: str = "image"
    args: tuple[str, ...] = ()
    with_base: bool = True
    exit_code: int = 1
    extra: list[str] = field(default_factory=list)


CASES: dict[str, Case] = {
    "no-config": Case(remove("reprobuild.yaml"), "reprobuild.yaml: not found"),
    "yaml-syntax": Case(
        write("reprobuild.yaml", "name: [unclosed\n"), "reprobuild.yaml:2:1: invalid YAML"
    ),
    "unknown-key-typo": Case(
        yaml_replace("seed: 7", "seeds: 7"), "unknown key 'seeds'; allowed keys: name, lock"
    ),
    "name-uppercase": Case(
        yaml_replace("reprobuild-test/tiny", "Tiny"), "name 'Tiny' is not a valid image name"
    ),
    "lock-missing": Case(remove("requirements.lock"), "lock 'requirements.lock' does not exist"),
    "lock-escapes-project": Case(
        yaml_replace("lock: requirements.lock", "lock: ../x.lock"),
        "lock '../x.lock' must be a relative path inside the project",
    ),
    "base-bare-tag": Case(
        yaml_replace("cpu: python-3.11-slim-bookworm", "cpu: python:3.11-slim"),
        "base.cpu 'python:3.11-slim' is not pinned by digest",
        with_base=False,
    ),
    "base-unknown-catalog-name": Case(
        yaml_replace("cpu: python-3.11-slim-bookworm", "cpu: pyton-3.11"),
        "no base named 'pyton-3.11' in the catalog",
        with_base=False,
    ),
    "base-short-digest": Case(
        yaml_replace("cpu: python-3.11-slim-bookworm", "cpu: python@sha256:abc"),
        "invalid digest 'sha256:abc'",
        with_base=False,
    ),
    "base-shell-injection": Case(
        yaml_replace(
            "cpu: python-3.11-slim-bookworm", "cpu: 'python;rm -rf /@sha256:" + "a" * 64 + "'"
        ),
        "invalid repository name 'python;rm -rf /'",
        with_base=False,
    ),
    "seed-negative": Case(yaml_replace("seed: 7", "seed: -1"), "seed -1 must be an integer from 0"),
    "seed-string": Case(yaml_replace("seed: 7", "seed: lucky"), "seed 'lucky' must be an integer"),
    "determinism-unknown": Case(
        yaml_replace("determinism: warn", "determinism: maybe"),
        "determinism 'maybe' must be one of: strict, warn, off",
    ),
    "include-missing": Case(
        yaml_replace("- hello.py", "- missing.py"), "include 'missing.py' does not exist"
    ),
    "include-absolute": Case(
        yaml_replace("- hello.py", "- /etc/passwd"),
        "include '/etc/passwd' must be a relative path inside the project",
    ),
    "apt-unpinned": Case(
        yaml_replace("seed: 7", "seed: 7\napt: [curl]"),
        "apt entry 'curl' must be 'package=version'",
    ),
    "apt-shell": Case(
        yaml_replace("seed: 7", "seed: 7\napt: ['curl=1; rm -rf /']"),
        "apt entry 'curl=1; rm -rf /' must be 'package=version'",
    ),
    "command-control-char": Case(
        yaml_replace('command: ["python", "hello.py"]', 'command: ["python", "a\\nb"]'),
        "command word 'python\\na' contains a control character".replace("python\\na", "a\\nb"),
    ),
    "lock-unpinned": Case(
        write("requirements.lock", "six>=1.0 --hash=sha256:" + "a" * 64 + "\n"),
        "requirements.lock:1: 'six>=1.0",
    ),
    "lock-no-hash": Case(
        write("requirements.lock", "six==1.17.0\n"), "requirements.lock:1: 'six==1.17.0'"
    ),
    "lock-command-substitution": Case(
        write(
            "requirements.lock",
            GOOD_LOCK_LINE + "idna==3.10 $(touch /pwned) --hash=sha256:" + "a" * 64 + "\n",
        ),
        "requirements.lock:2:",
    ),
    "lock-not-utf8": Case(
        write("requirements.lock", GOOD_LOCK_LINE.encode() + b"# caf\xe9\n"), "requirements.lock:2"
    ),
    "lock-duplicate-versions": Case(
        write("requirements.lock", GOOD_LOCK_LINE + "six==1.16.0 --hash=sha256:" + "b" * 64 + "\n"),
        "requirements.lock:2",
    ),
    "lock-editable": Case(
        write("requirements.lock", "-e git+https://example.com/x.git#egg=x\n"),
        "requirements.lock:1",
    ),
    "lock-wrong-hash": Case(
        write("requirements.lock", "six==1.17.0 --hash=sha256:" + "0" * 64 + "\n"),
        "requirements.lock:1: the file pip took for six==1.17.0 "
        "(six-1.17.0-py2.py3-none-any.whl) has sha256 "
        "4721f391ed90541fddacab5acf947aa0d3dc7d27b2e1e8eda2be8970586c3274, "
        "which is none of the lock's hashes for it",
    ),
    "gpu-without-gpu-lock": Case(None, "--gpu needs a gpu_lock", args=("--gpu",)),
    "tag-invalid": Case(None, "invalid repository name 'Bad Tag'", args=("--tag", "Bad Tag:x")),
    "base-flag-unpinned": Case(
        None,
        "--base '127.0.0.1:5000/x:latest' is not pinned by digest",
        args=("--base", "127.0.0.1:5000/x:latest"),
        with_base=False,
    ),
    "ca-without-online": Case(
        None,
        "--ca-cert is only used with --online",
        args=("--ca-cert", "/etc/ssl/certs/ca-certificates.crt"),
    ),
    "ca-not-pem": Case(
        None, "is not a PEM certificate bundle", args=("--online", "--ca-cert", "/etc/hostname")
    ),
    "build-fails-midway": Case(
        yaml_replace("seed: 7", "seed: 7\napt: ['no-such-package-xyz=1.0']"), "build failed: "
    ),
    "render-bad-lock": Case(
        write("requirements.lock", "six==1.17.0\n"), "requirements.lock:1", command="render"
    ),
}


def _scratch_tags(docker_client) -> set[str]:  # type: ignore[no-untyped-def]
    """Scratch tags on the engine (compared before/after, so other builds do not count)."""
    return {
        tag
        for image in docker_client.images.list()
        for tag in image.tags
        if tag.startswith("reprobuild-scratch/")
    }


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_input(name: str, base_ref: str, tmp_path: Path, docker_client) -> None:  # type: ignore[no-untyped-def]
    import docker.errors

    case = CASES[name]
    root = tmp_path / "project"
    shutil.copytree(Path(__file__).parent.parent / "data" / "projects" / "tiny", root)
    if case.edit:
        case.edit(root)
    tag = f"reprobuild-bad/{name}:{uuid.uuid4().hex[:8]}"
    out = tmp_path / "out"
    args = [case.command, str(root), *case.args]
    if case.with_base and "--base" not in case.args:
        args += ["--base", base_ref]
    if case.command == "image" and "--tag" not in case.args:
        args += ["--tag", tag, "-q"]
    if case.command == "render":
        args += ["-o", str(out)]
    scratch_before = _scratch_tags(docker_client)
    proc = run_cli(*args)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == case.exit_code, proc.stderr
    # A failed build prints its log's tail first; the error line always ends the output.
    if name != "build-fails-midway":
        assert lines and lines[0].startswith("error: "), proc.stderr
    error_lines = [ln for ln in lines if ln.startswith("error: ")]
    assert len(error_lines) == 1, proc.stderr
    assert case.expected in error_lines[0], error_lines[0]
    after = lines[lines.index(error_lines[0]) + 1 :]
    assert len(after) <= 1 and all(ln.startswith("hint: ") for ln in after), proc.stderr
    assert proc.stdout == ""
    with pytest.raises(docker.errors.ImageNotFound):
        docker_client.images.get(tag)
    assert not out.exists()
    leftovers = [p.name for p in tmp_path.iterdir() if p.name not in {"project"}]
    assert leftovers == []
    assert _scratch_tags(docker_client) <= scratch_before, "a scratch tag was left behind"
