"""buildah's RUN steps get open-file and process limits within this process's hard limits:
buildah 1.39 otherwise asks for 1048576 of each, which needs CAP_SYS_RESOURCE (Debian 13's
first RUN failed with "error setting rlimit type 7"). The build itself runs in
tests/engine/test_buildah.py; here, the arguments against real limits set in a child."""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from reprobuild.backends import buildah


def parse(args: list[str]) -> dict[str, tuple[int, int]]:
    assert args[::2] == ["--ulimit"] * (len(args) // 2)
    found = {}
    for spec in args[1::2]:
        name, _, value = spec.partition("=")
        soft, _, hard = value.partition(":")
        found[name] = (int(soft), int(hard))
    return found


def test_within_this_process_hard_limits() -> None:
    found = parse(buildah.ulimits())
    assert set(found) == {"nofile", "nproc"}
    for name, kind in (("nofile", resource.RLIMIT_NOFILE), ("nproc", resource.RLIMIT_NPROC)):
        soft, hard = found[name]
        assert soft == hard > 0
        limit = resource.getrlimit(kind)[1]
        assert limit == resource.RLIM_INFINITY or hard <= limit, (name, hard, limit)
    assert found["nofile"][1] <= buildah.NOFILE_MAX
    assert found["nproc"][1] <= buildah.NPROC_MAX


def test_follows_a_lowered_hard_limit() -> None:
    code = (
        "import json, resource\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (300, 300))\n"
        "resource.setrlimit(resource.RLIMIT_NPROC, (200, 200))\n"
        "from reprobuild.backends import buildah\n"
        "print(json.dumps(buildah.ulimits()))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert parse(json.loads(out.stdout)) == {"nofile": (300, 300), "nproc": (200, 200)}


def test_a_base_buildah_cannot_build_on_gets_a_hint(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """buildah's own message for a schema 2 base with uncompressed layers (pushed from Engine
    26's containerd store after a classic build) says nothing of what to do; bud adds it."""
    from reprobuild.backends import buildah
    from reprobuild.errors import BuildError

    tail = (
        "Error: creating build container: preparing image configuration: resetting recorded "
        'compression for "containers-storage:[overlay@/var/lib/containers/storage]@f45d": '
        'preparing updated manifest, layer "sha256:0982": unsupported MIME type for compression: '
        "application/vnd.docker.image.rootfs.diff.tar"
    )

    def failing(*args: object, **kwargs: object) -> None:
        raise BuildError("buildah build failed: Error: creating build container", log_tail=tail)

    monkeypatch.setattr(buildah, "_stream", failing)
    monkeypatch.setattr(buildah, "require", lambda: "buildah")
    with pytest.raises(BuildError) as caught:
        buildah.bud(tmp_path, None, epoch=0)
    assert caught.value.hint is not None and "media types" in caught.value.hint
    assert "docker buildx build --push" in caught.value.hint

    def other(*args: object, **kwargs: object) -> None:
        raise BuildError("buildah build failed: exit 1", log_tail="RUN false: exit status 1")

    monkeypatch.setattr(buildah, "_stream", other)
    with pytest.raises(BuildError) as caught:
        buildah.bud(tmp_path, None, epoch=0)
    assert caught.value.hint is None


def test_a_mount_left_in_the_build_folder_leaves_the_build_error_alone(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A failed RUN that leaves a mount in buildah's TMPDIR (our temporary folder): the
    build's error is what the user hears, not the clean-up's EBUSY traceback."""
    from reprobuild.backends import buildah
    from reprobuild.errors import BuildError

    if os.geteuid() != 0:
        pytest.fail("needs root (it mounts a tmpfs): run the suite as CI does")
    mounted: list[Path] = []

    def failing(argv: list[str], what: str, log: object, tmp: Path, **kwargs: object) -> None:
        busy = tmp / "bind1"
        busy.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(busy)], check=True)
        mounted.append(busy)
        raise BuildError("buildah build failed: exit 126", log_tail="runtime: exit status 126")

    monkeypatch.setattr(buildah, "_stream", failing)
    monkeypatch.setattr(buildah, "require", lambda: "buildah")
    try:
        with pytest.raises(BuildError, match="exit 126"):
            buildah.bud(tmp_path, None, epoch=0)
    finally:
        for busy in mounted:
            subprocess.run(["umount", str(busy)], check=False)
            shutil.rmtree(busy.parent, ignore_errors=True)
    assert mounted


@pytest.mark.parametrize(("value", "expected"), [("1", 1), ("2", 2), (" 8 ", 8), ("64", 64)])
def test_buildah_jobs_come_from_the_environment(value: str, expected: int) -> None:
    """REPROBUILD_BUILDAH_JOBS: how many stages buildah builds at once (--jobs)."""
    assert buildah.jobs({buildah.JOBS_VAR: value}) == expected


@pytest.mark.parametrize(("cpus", "expected"), [(1, 1), (2, 2), (3, 3), (4, 4), (16, 4)])
def test_buildah_builds_a_stage_per_cpu_by_default_at_most_four(
    monkeypatch: pytest.MonkeyPatch, cpus: int, expected: int
) -> None:
    """Unset or empty: one stage per CPU the process may run on (its affinity, as a cgroup's
    cpuset or `taskset` leaves it), at most four."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda _: set(range(cpus)))
    assert buildah.jobs({}) == buildah.jobs({buildah.JOBS_VAR: ""}) == expected


@pytest.mark.parametrize("value", ["0", "65", "-1", "two", "2.5", "1e3", "$(id)"])
def test_a_bad_buildah_jobs_value_is_one_line_naming_it(value: str) -> None:
    from reprobuild.errors import ReprobuildError

    with pytest.raises(ReprobuildError) as info:
        buildah.jobs({buildah.JOBS_VAR: value})
    assert f"REPROBUILD_BUILDAH_JOBS={value!r} is not a whole number from 1 to 64" in str(
        info.value
    )
