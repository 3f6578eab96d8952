"""Hostile inputs, config/YAML/lockfile/pylock/matrix family (issue #10).

Each case spoils one file of a copy of the `tiny` project and runs `image --tag`, `render -o`
or `matrix` on it: the command must fail with one `error:` line naming the bad value, leave
the project, the output location and the wheel cache unchanged, and leave no tag, container or
temp dir behind (tests/hostile_harness.py). Inputs that used to hang (a FIFO), blow up memory
(nested aliases, a huge file) or be silently misread (`seed: 010`) are all here.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from helpers import run_cli
from hostile_harness import Snapshot, assert_clean_failure

pytestmark = [pytest.mark.engine, pytest.mark.registry]

SHA256 = "2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae"
SHA512 = "ab" * 64
DIGEST = "sha256:" + "cd" * 32
Mutate = Callable[[Path], None]


def _yaml(text: str) -> Mutate:
    """Append ``text`` to reprobuild.yaml."""

    def mutate(root: Path) -> None:
        path = root / "reprobuild.yaml"
        path.write_text(path.read_text() + text)

    return mutate


def _replace_yaml(old: str, new: str) -> Mutate:
    def mutate(root: Path) -> None:
        path = root / "reprobuild.yaml"
        text = path.read_text()
        assert old in text
        path.write_text(text.replace(old, new))

    return mutate


def _append_bytes(root: Path, data: bytes) -> None:
    with (root / "reprobuild.yaml").open("ab") as fh:
        fh.write(data)


def _lock(text: str) -> Mutate:
    def mutate(root: Path) -> None:
        (root / "requirements.lock").write_text(text)

    return mutate


def _pylock(text: str) -> Mutate:
    def mutate(root: Path) -> None:
        (root / "pylock.toml").write_text(text)
        _replace_yaml("lock: requirements.lock", "lock: pylock.toml")(root)

    return mutate


def _fifo(name: str) -> Mutate:
    def mutate(root: Path) -> None:
        (root / name).unlink()
        os.mkfifo(root / name)

    return mutate


def _huge(name: str, size: int) -> Mutate:
    def mutate(root: Path) -> None:
        with (root / name).open("r+b") as fh:
            fh.truncate(size)  # sparse: the size is what counts, not what the disk holds

    return mutate


def _bases_lock(text: str) -> Mutate:
    def mutate(root: Path) -> None:
        (root / "reprobuild.bases.lock").write_text(text)

    return mutate


def _symlink(name: str, target: str) -> Mutate:
    def mutate(root: Path) -> None:
        (root / name).unlink()
        (root / name).symlink_to(target)

    return mutate


def _pylock_text(*, hashes: str, index: str = "") -> str:
    return (
        'lock-version = "1.0"\ncreated-by = "hand"\n\n[[packages]]\nname = "six"\n'
        f'version = "1.17.0"\n{index}'
        'wheels = [{ url = "https://files.example.org/six-1.17.0-py2.py3-none-any.whl", '
        f"hashes = {{ {hashes} }} }}]\n"
    )


BILLION_LAUGHS = "lol: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"l{i}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n"
    for i in range(9)
)


@dataclass(frozen=True)
class Case:
    id: str
    mutate: Mutate
    expected: str
    exit_code: int = 1


CASES: list[Case] = [
    # ------------------------------------------------ reprobuild.yaml: YAML surprises
    Case("billion-laughs", _yaml(BILLION_LAUGHS), "anchor &a is not allowed"),
    Case("alias-in-flow", _yaml("apt: [*nothing]\n"), "alias *nothing is not allowed"),
    Case("duplicate-key", _yaml("seed: 8\n"), "key 'seed' is given twice"),
    Case("duplicate-nested-key", _replace_yaml("  cpu:", "  gpu: x\n  gpu:"), "key 'gpu'"),
    Case("seed-octal", _replace_yaml("seed: 7", "seed: 010"), "number '010' is not a plain"),
    Case("seed-sexagesimal", _replace_yaml("seed: 7", "seed: 1:30"), "number '1:30'"),
    Case("seed-hex", _replace_yaml("seed: 7", "seed: 0x1F"), "number '0x1F'"),
    Case("seed-underscore", _replace_yaml("seed: 7", "seed: 1_000"), "number '1_000'"),
    Case("seed-yes", _replace_yaml("seed: 7", "seed: yes"), "seed 'yes' must be an integer"),
    Case(
        "determinism-yes",
        _replace_yaml("determinism: warn", "determinism: yes"),
        "determinism 'yes' must be one of",
    ),
    Case(
        "matrix-gpu-yes",
        _yaml("matrix:\n  - name: big\n    gpu: yes\n"),
        "gpu 'yes' must be true or false",
    ),
    Case("python-tag", _yaml("x: !!python/object:os.system {}\n"), "invalid YAML"),
    Case("deep-nesting", _yaml("deep: " + "[" * 5000 + "]" * 5000 + "\n"), "reprobuild.yaml"),
    Case(
        "long-unknown-key",
        _yaml("k" * 900 + ": 1\n"),
        "unknown key 'kkkkk",
    ),
    Case("long-name", _replace_yaml("name: reprobuild-test/tiny", "name: " + "A" * 5000), "..."),
    # ------------------------------------------------ reprobuild.yaml: what the file is
    Case("config-fifo", _fifo("reprobuild.yaml"), "is not a regular file"),
    Case("config-device", _symlink("reprobuild.yaml", "/dev/zero"), "is not a regular file"),
    Case("config-huge", _huge("reprobuild.yaml", 2 << 20), "is 2.0 MiB, over the 1.0 MiB limit"),
    Case("config-not-utf8", lambda root: _append_bytes(root, b"# \xff\n"), "is not UTF-8"),
    # ------------------------------------------------ the lock
    # a direct-URL wheel is fetched on the host (locks/urlwheels.py): over https only
    Case(
        "lock-direct-http-wheel",
        _lock(
            f"six @ http://files.example.org/six-1.17.0-py2.py3-none-any.whl "
            f"--hash=sha256:{SHA256}\n"
        ),
        "plain http:// is only allowed to a loopback host",
    ),
    Case(
        "lock-direct-file-url",
        _lock(f"six @ file:///srv/six-1.17.0-py2.py3-none-any.whl --hash=sha256:{SHA256}\n"),
        "scheme 'file' is not allowed, only https:// (http:// to a loopback host)",
    ),
    Case(
        "lock-direct-sdist-url",
        _lock(f"six @ https://files.example.org/six-1.17.0.tar.gz --hash=sha256:{SHA256}\n"),
        "direct references ('name @ URL'",
    ),
    Case(
        "lock-sha512-only",
        _lock(f"six==1.17.0 --hash=sha512:{SHA512}\n"),
        "is hashed only with sha512",
    ),
    Case(
        "lock-index-url-http",
        _lock(f"--index-url http://pypi.example.org/simple\nsix==1.17.0 --hash=sha256:{SHA256}\n"),
        "plain http:// is only allowed to a loopback host",
    ),
    Case(
        "lock-extra-index-url-http",
        _lock(f"--extra-index-url http://10.1.2.3/simple\nsix==1.17.0 --hash=sha256:{SHA256}\n"),
        "plain http:// is only allowed to a loopback host",
    ),
    Case(
        "lock-find-links-http",
        _lock(f"-f http://wheels.example.org/\nsix==1.17.0 --hash=sha256:{SHA256}\n"),
        "plain http:// is only allowed to a loopback host",
    ),
    Case("lock-fifo", _fifo("requirements.lock"), "is not a regular file"),
    Case("lock-huge", _huge("requirements.lock", 17 << 20), "over the 16.0 MiB limit"),
    Case(
        "lock-long-line",
        _lock("six==1.17.0" + "x" * 20000 + f" --hash=sha256:{SHA256}\n"),
        "requirements.lock:1:",
    ),
    Case(
        "lock-long-index",
        _lock(f"--index-url ftp://{'h' * 9000}/simple\nsix==1.17.0 --hash=sha256:{SHA256}\n"),
        "scheme 'ftp' is not allowed",
    ),
    # ------------------------------------------------ pylock.toml
    Case(
        "pylock-sha512-only",
        _pylock(_pylock_text(hashes=f'sha512 = "{SHA512}"')),
        "has no sha256 hash (only sha512)",
    ),
    Case(
        "pylock-http-index",
        _pylock(
            _pylock_text(
                hashes=f'sha256 = "{SHA256}"', index='index = "http://pypi.example.org/simple"\n'
            )
        ),
        "plain http:// is only allowed to a loopback host",
    ),
    Case(
        "pylock-deep-nesting",
        _pylock('lock-version = "1.0"\nx = ' + "[" * 5000 + "]" * 5000 + "\n"),
        "pylock.toml",
    ),
    # ------------------------------------------------ reprobuild.bases.lock
    Case("bases-lock-fifo", _fifo("reprobuild.bases.lock"), "is not a regular file"),
    Case("bases-lock-huge", _huge("reprobuild.bases.lock", 2 << 20), "over the 1.0 MiB limit"),
    Case(
        "bases-lock-duplicate-key",
        _bases_lock('{"schema_version": 1, "schema_version": 1, "bases": {}}'),
        "key 'schema_version' is given twice",
    ),
    Case(
        "bases-lock-deep-nesting",
        _bases_lock("[" * 100000 + "]" * 100000),
        "reprobuild.bases.lock",
    ),
]


def _run(command: str, root: Path, tmp_path: Path, tag: str) -> tuple[list[str], Path]:
    out = tmp_path / "out"
    if command == "image":
        return ["image", "--tag", tag, str(root)], out
    if command == "render":
        return ["render", "-o", str(out), str(root)], out
    return ["matrix", str(root)], out


def _check(
    case_mutate: Mutate,
    expected: str,
    exit_code: int,
    command: str,
    project: Callable[[str], Path],
    tmp_path: Path,
    docker_client: Any,
    unique_tag: Callable[[str], str],
) -> None:
    root = project("tiny")
    case_mutate(root)
    cache = tmp_path / "xdg-cache"
    cache.mkdir()
    argv, out = _run(command, root, tmp_path, unique_tag("hostile-config"))
    snap = Snapshot.take([root, cache, out], docker_client)
    proc = run_cli(*argv, env={"XDG_CACHE_HOME": str(cache)}, timeout=120)
    assert_clean_failure(proc, expected, exit_code=exit_code)
    assert not out.exists(), "render -o created its output"
    snap.assert_unchanged(docker_client)


@pytest.mark.parametrize("command", ["image", "render", "matrix"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_bad_project_file_fails_cleanly(
    case: Case,
    command: str,
    project: Callable[[str], Path],
    tmp_path: Path,
    docker_client: Any,
    unique_tag: Callable[[str], str],
) -> None:
    _check(
        case.mutate,
        case.expected,
        case.exit_code,
        command,
        project,
        tmp_path,
        docker_client,
        unique_tag,
    )


# ---------------------------------------------------------------- matrix: a variant's base

MATRIX_BASES = [
    ("tag-only", "python:3.11-slim", "is not pinned by digest"),
    ("unknown-catalog-name", "no-such-base", "no base named 'no-such-base'"),
    ("bad-digest", "python@sha256:xyz", "invalid digest"),
    ("shell-text", "$(touch /tmp/pwned)", "invalid repository name"),
    (
        "long-ref",
        "registry.example.com/" + "a" * 3000 + "@" + DIGEST,
        "is longer than 512 characters",
    ),
]


@pytest.mark.parametrize("command", ["matrix", "image", "render"])
@pytest.mark.parametrize(
    ("label", "base", "expected"), MATRIX_BASES, ids=[m[0] for m in MATRIX_BASES]
)
def test_matrix_variant_base_is_checked_like_image(
    label: str,
    base: str,
    expected: str,
    command: str,
    project: Callable[[str], Path],
    tmp_path: Path,
    docker_client: Any,
    unique_tag: Callable[[str], str],
) -> None:
    variant = json.dumps({"name": "cpu2", "base": base})
    mutate = _yaml(f"matrix:\n  - {variant}\n")
    root = project("tiny")
    mutate(root)
    cache = tmp_path / "xdg-cache"
    cache.mkdir()
    out = tmp_path / "out"
    argv = {
        "matrix": ["matrix", str(root)],
        "image": ["image", "--variant", "cpu2", "--tag", unique_tag("hostile-config"), str(root)],
        "render": ["render", "--variant", "cpu2", "-o", str(out), str(root)],
    }[command]
    snap = Snapshot.take([root, cache, out], docker_client)
    proc = run_cli(*argv, env={"XDG_CACHE_HOME": str(cache)}, timeout=120)
    line = assert_clean_failure(proc, expected)
    if command == "matrix":
        assert "matrix variant" in line and "cpu2" in line
    assert not out.exists()
    snap.assert_unchanged(docker_client)


def test_determinism_off_is_the_documented_mode(project: Callable[[str], Path]) -> None:
    """The README's `determinism: off` (YAML 1.1 would read it as false) is the mode "off"."""
    root = project("tiny")
    _replace_yaml("determinism: warn", "determinism: off")(root)
    proc = run_cli("render", "-o", str(root.parent / "ctx"), str(root))
    assert proc.returncode == 0, proc.stderr
    dockerfile = (root.parent / "ctx" / "Dockerfile").read_text()
    assert "REPROBUILD_IMAGE_DETERMINISM=off" in dockerfile
