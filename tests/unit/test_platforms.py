"""``reprobuild image --platform`` (issue 53), without an engine: the value read and refused,
emulation checked through a binfmt_misc folder, the lock's markers and wheels read for the
machine, the default tag and the builder. The base's platform is checked against a real
registry in tests/engine/test_arm64.py."""

from __future__ import annotations

import platform as host
from pathlib import Path
from typing import Any

import pytest

from helpers import run_cli
from reprobuild.errors import LockfileError, ReprobuildError
from reprobuild.imaging import platforms
from reprobuild.imaging.imageprobe import check_installed
from reprobuild.imaging.manifest import Distribution
from reprobuild.imaging.platforms import BuildPlatform, parse_platforms
from reprobuild.locks.lockfile import load_lock
from reprobuild.locks.native import Selection
from reprobuild.locks.wheels import Target, for_target

WILD = Path(__file__).resolve().parents[1] / "data" / "lockfiles" / "wild"
LOCK = Path(__file__).resolve().parents[1] / "data" / "arm64-torch" / "requirements.lock"
ARM = BuildPlatform("linux/arm64", "aarch64")
AMD = BuildPlatform("linux/amd64", "x86_64")
on_x86 = pytest.mark.skipif(host.machine() != "x86_64", reason="an x86-64 host's view")


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("linux/arm64", (ARM,)),
        ("linux/aarch64", (ARM,)),
        ("Linux/ARM64/v8", (ARM,)),
        ("linux/amd64", (AMD,)),
        ("linux/x86_64", (AMD,)),
        ("linux/amd64,linux/arm64", (AMD, ARM)),
    ],
)
def test_platforms_are_read(text: str, want: tuple[BuildPlatform, ...]) -> None:
    assert parse_platforms(text) == want


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("arm64", "'arm64'"),
        ("linux/riscv64", "'linux/riscv64'"),
        ("windows/amd64", "'windows/amd64'"),
        ("linux/arm64/v7", "'linux/arm64/v7'"),
        ("linux/amd64,", "''"),
        ("", "names no platform"),
    ],
)
def test_a_value_that_is_no_platform_is_one_line_naming_it(text: str, named: str) -> None:
    with pytest.raises(ReprobuildError) as caught:
        parse_platforms(text)
    message = caught.value.message
    assert named in message and "\n" not in message
    assert "linux/amd64, linux/arm64" in message


def test_a_platform_twice_is_refused() -> None:
    with pytest.raises(ReprobuildError, match="names linux/arm64 twice"):
        parse_platforms("linux/arm64,linux/aarch64")


@on_x86
def test_emulation_is_read_from_binfmt_misc(tmp_path: Path) -> None:
    platforms.require_runnable(AMD, tmp_path)  # native: nothing asked
    with pytest.raises(ReprobuildError) as caught:
        platforms.require_runnable(ARM, tmp_path)
    assert "not registered" in caught.value.message
    assert "qemu-aarch64.conf" in (caught.value.hint or "")
    (tmp_path / "qemu-aarch64").write_text("disabled\ninterpreter /usr/bin/qemu-aarch64-static\n")
    with pytest.raises(ReprobuildError, match="is not enabled"):
        platforms.require_runnable(ARM, tmp_path)
    (tmp_path / "qemu-aarch64").write_text("enabled\ninterpreter /usr/bin/qemu-aarch64-static\n")
    platforms.require_runnable(ARM, tmp_path)


@on_x86
def test_another_machine_builds_with_buildah_only_and_tags_apart() -> None:
    platforms.check_builder(ARM, "buildah")
    platforms.check_builder(AMD, "classic")
    platforms.check_builder(None, "classic")
    with pytest.raises(ReprobuildError, match="buildah only, and the builder here is buildkit"):
        platforms.check_builder(ARM, "buildkit")
    assert platforms.tag_for("p:cpu-abc", ARM) == "p:cpu-abc-arm64"
    assert platforms.tag_for("p:cpu-abc", AMD) == "p:cpu-abc"
    assert platforms.tag_for("p:cpu-abc", None) == "p:cpu-abc"


def test_the_platforms_asked_for_are_checked_runnable_each(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []
    monkeypatch.setattr(platforms, "require_runnable", lambda target: seen.append(target.name))
    assert platforms.targets_of(None) == ()
    assert platforms.targets_of("linux/amd64,linux/arm64") == (AMD, ARM)
    assert seen == ["linux/amd64", "linux/arm64"]


def test_an_image_is_rebuilt_for_its_own_machine() -> None:
    assert platforms.platform_named(None) is None
    assert platforms.platform_named(host.machine()) is None  # this host's: no --platform
    other = "aarch64" if host.machine() == "x86_64" else "x86_64"
    assert platforms.platform_named(other) in platforms.SUPPORTED
    with pytest.raises(ReprobuildError, match="for riscv64, which reprobuild does not build"):
        platforms.platform_named("riscv64")


@on_x86
def test_the_fetch_reads_markers_for_the_target_machine() -> None:
    lock = load_lock(LOCK)
    arm = for_target(lock, Target("3.11", "aarch64", (2, 36)))
    pins = {(r.name, r.version) for r in arm.requirements}
    assert ("torch", "2.9.1") in pins and ("torch", "2.13.0+cpu") not in pins
    assert "setuptools" not in {r.name for r in arm.requirements}
    assert all(r.marker is None for r in arm.requirements)  # pip would read them for the host
    assert for_target(lock, Target("3.11", "x86_64", (2, 36))) is lock


def test_the_image_may_hold_either_of_a_package_s_marked_pins() -> None:
    lock = load_lock(LOCK)
    held = [Distribution(r.name, r.version, "lock") for r in lock.requirements]
    arm = tuple(d for d in held if (d.name, d.version) not in {("torch", "2.13.0+cpu")})
    check_installed(lock, tuple(d for d in arm if d.name != "setuptools"))
    with pytest.raises(ReprobuildError, match=r"torch==2.0 but the lock pins 2\.\d.* or 2\."):
        check_installed(lock, (Distribution("torch", "2.0", "lock"),))


def test_a_native_lock_is_read_for_the_machine() -> None:
    """A public uv.lock (tests/data/lockfiles/wild) forks torch's CUDA wheels by machine."""
    lock = WILD / "rl-replications-19d890d" / "uv.lock"
    x86 = {r.name for r in load_lock(lock, Selection(machine="x86_64")).requirements}
    arm = load_lock(lock, Selection(machine="aarch64")).requirements
    assert "nvidia-cudnn-cu12" in x86 and "triton" in x86
    assert not any(r.name.startswith("nvidia-") or r.name == "triton" for r in arm)
    assert ("torch", "2.5.1") in {(r.name, r.version) for r in arm}


def test_a_native_lock_without_a_wheel_for_the_machine_is_one_located_line() -> None:
    lock = WILD / "pyannote-audio-4.0.7" / "uv.lock"
    with pytest.raises(LockfileError) as caught:
        load_lock(lock, Selection(machine="aarch64"))
    line = str(caught.value)
    assert "torchcodec 0.10.0 has no wheel for CPython 3.11 on linux aarch64" in line
    assert line.startswith(f"{lock}:4722: ") and "\n" not in line


def test_the_cli_refuses_a_bad_platform_in_one_line(tmp_path: Path) -> None:
    proc = run_cli("image", str(LOCK.parent), "--platform", "linux/sparc", cwd=tmp_path)
    assert proc.returncode != 0
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1, proc.stderr
    assert "'linux/sparc'" in lines[0] and "linux/arm64" in lines[0]


def test_pip_s_no_matching_distribution_names_the_lock_line_and_the_target() -> None:
    from reprobuild.locks.wheels import _no_wheel

    lock = load_lock(LOCK)
    stderr = (
        "ERROR: Could not find a version that satisfies the requirement torch==2.13.0+cpu "
        "(from versions: 2.9.1)\nERROR: No matching distribution found for torch==2.13.0+cpu\n"
    )
    found = _no_wheel(lock, stderr, Target("3.11", "aarch64", (2, 36)))
    assert found is not None
    assert found.message == (
        f"{LOCK}:179: torch==2.13.0+cpu has no wheel for CPython 3.11 on linux aarch64 "
        "(cp311-aarch64-glibc2.36) on the indexes asked"
    )
    assert found.hint is not None and found.hint.startswith(
        "if its index has only its sdist, `reprobuild build-lock` finds it by the locked hash"
    )
    assert _no_wheel(lock, "ERROR: something else\n", Target("3.11", "aarch64", None)) is None


def test_a_single_platform_image_s_k8s_job_selects_nodes_of_its_arch() -> None:
    import kubernetes_validate

    from helpers import FakeImageEngine
    from reprobuild.cluster.k8s import KUBERNETES_VERSION, KubeSpec, job
    from reprobuild.cluster.nodes import JobShape
    from reprobuild.cluster.pinning import pin_image

    engine = FakeImageEngine("p:cpu-1", ("torch",))
    engine.attrs["Architecture"] = "arm64"
    assert pin_image(engine, "p:cpu-1").architecture == "arm64"
    del engine.attrs["Architecture"]
    assert pin_image(engine, "p:cpu-1").architecture == ""
    pushed = "registry.example/team/ddp@sha256:" + "d" * 64
    shape, command = JobShape(2, 1), ("python", "t.py")
    arm = job(KubeSpec("ddp", pushed, shape, command, 0, "strict", "p", arch="arm64"))
    pod = arm["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"kubernetes.io/arch": "arm64"}
    kubernetes_validate.validate(arm, KUBERNETES_VERSION, strict=True)
    unknown = job(KubeSpec("ddp", pushed, shape, command, 0, "strict", "p"))
    assert "nodeSelector" not in unknown["spec"]["template"]["spec"]


def test_init_says_which_platforms_a_native_lock_covers() -> None:
    from reprobuild.imaging.initservices import read_lock

    both = WILD / "rl-replications-19d890d" / "uv.lock"
    notes = read_lock(both, "3.11", (), ())[3]
    assert "uv.lock covers linux/amd64 and linux/arm64 (`reprobuild image --platform" in notes[-1]
    one = WILD / "pyannote-audio-4.0.7" / "uv.lock"
    said = platforms.coverage_note(one, Selection())
    assert said is not None and said.startswith("uv.lock covers linux/amd64 only (not linux/arm64:")
    assert "torchcodec 0.10.0 has no wheel for CPython 3.11 on linux aarch64" in said
    assert platforms.coverage_note(LOCK, Selection()) is None  # hashes only: the index knows


def test_an_index_digest_is_pinned_by_the_platform_image_the_engine_holds() -> None:
    """``image --platform A,B --push`` prints REGISTRY/NAME@sha256:<index>: compose, k8s and
    slurm take it. The engine holds the platforms' images by their own digests (it pushed
    them), not the index: the job files name the index, read from this host's image."""
    from helpers import FakeImageEngine
    from reprobuild.cluster.pinning import pin_image
    from reprobuild.cluster.slurm import SlurmSpec, render
    from reprobuild.errors import ImageNotBuiltError

    name = "127.0.0.1:5000/team/ddp"
    index, amd, arm = (f"{name}@sha256:{c * 64}" for c in "abc")
    host = platforms.host_platform().name
    other = "linux/arm64" if host == "linux/amd64" else "linux/amd64"
    entries = [(other, arm.rsplit("@", 1)[1]), (host, amd.rsplit("@", 1)[1])]
    engine = FakeImageEngine(amd, ("torch",))  # the host's image; the other's is not here
    engine.attrs["Architecture"] = "amd64"
    asked: list[str] = []

    def read_index(ref: object) -> list[tuple[str, str]]:
        asked.append(str(getattr(ref, "digest", "")))
        return entries

    from reprobuild.cluster import pinning

    pinned = pinning.pin_index(engine, index, read_index)
    assert pinned is not None and asked == ["sha256:" + "a" * 64]
    assert (pinned.reference, pinned.requested) == (index, index)
    assert pinned.architecture == ""  # any of its platforms: no node selector
    assert pinned.platforms == (other, host)
    assert pinned.labels["io.reprobuild.variant"] == "cpu"
    # nothing of the index on the engine: one line that says how to get it
    bare = FakeImageEngine("p:cpu-1", ("torch",))
    with pytest.raises(ReprobuildError, match="is an image index, and none of its images"):
        pinning.pin_index(bare, index, read_index)
    assert pinning.pin_index(bare, index, lambda ref: None) is None  # a single image
    assert pinning.pin_index(bare, "p:cpu-1", read_index) is None  # no digest: not asked
    # a digest no registry answers for (none listens on port 1): not built, as before
    with pytest.raises(ImageNotBuiltError):
        pin_image(bare, "127.0.0.1:1/team/ddp@sha256:" + "e" * 64)
    from reprobuild.cluster.job import NodesJob
    from reprobuild.cluster.nodes import JobShape

    job = NodesJob(
        image=index, shape=JobShape(2, 1), command=("python", "t.py"), seed=0,
        determinism="strict", project="p", workdir="/app",
    )  # fmt: skip
    script = render(SlurmSpec(job, "ddp", platforms=pinned.platforms))
    assert f"the image is an index of {other} and {host}: each node runs" in script
    assert 'uname -m)" !=' not in script  # no machine check: any of its machines


def test_an_arm64_image_bakes_the_aarch64_pins_and_refuses_an_x86_level(tmp_path: Path) -> None:
    """``cpu: portable`` means each machine's baseline: an arm64 image bakes the armv8-a pins
    (OpenBLAS ARMV8, oneDNN Advanced SIMD), an amd64 one the x86-64-v2 pins, as before. A level
    of the other machine is refused at its line: the runtime would refuse every run."""
    import shutil

    from reprobuild.errors import ConfigError
    from reprobuild.imaging.plan import plan_build
    from reprobuild.imaging.render import determinism_env

    project = tmp_path / "arm64-torch"
    shutil.copytree(LOCK.parent, project)
    config = project / "reprobuild.yaml"
    config.write_text(config.read_text().replace("seed: 0\n", "seed: 0\ncpu: portable\n"))
    arm = determinism_env(plan_build(project, machine="aarch64").spec)
    amd = determinism_env(plan_build(project).spec)
    assert (arm["OPENBLAS_CORETYPE"], arm["ONEDNN_MAX_CPU_ISA"]) == ("ARMV8", "ADVANCED_SIMD")
    assert (amd["OPENBLAS_CORETYPE"], amd["ONEDNN_MAX_CPU_ISA"]) == ("Nehalem", "SSE41")
    config.write_text(config.read_text().replace("cpu: portable", "cpu: x86-64-v3"))
    with pytest.raises(ConfigError) as info:
        plan_build(project, machine="aarch64")
    assert info.value.message.startswith(f"{config}:")
    assert (
        "cpu: x86-64-v3 is a level of x86_64, and this image is for aarch64" in info.value.message
    )
    plan_build(project)  # for x86_64 it is one


def test_verify_takes_an_index_digest_and_runs_the_image_of_it_held_here(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from helpers import FAKE_ID, FakeImageEngine
    from reprobuild.checks.verify import run as verify_run
    from reprobuild.cluster import pinning
    from reprobuild.errors import VerifyError

    name = "127.0.0.1:5000/team/ddp"
    index, amd = f"{name}@sha256:{'a' * 64}", f"{name}@sha256:{'b' * 64}"
    monkeypatch.setattr(
        pinning,
        "registry_index",
        lambda ref: [(platforms.host_platform().name, "sha256:" + "b" * 64)],
    )
    notes: list[str] = []
    engine: Any = FakeImageEngine(amd, ("torch",))
    assert verify_run._check_image(engine, index, notes.append) == FAKE_ID
    assert "is an image index of linux/" in notes[0]
    monkeypatch.setattr(pinning, "registry_index", lambda ref: None)  # a single image, not held
    with pytest.raises(VerifyError, match="no image"):
        verify_run._check_image(engine, index, notes.append)


@on_x86
def test_an_image_of_another_machine_names_its_platform() -> None:
    assert platforms.of_image({"Os": "linux", "Architecture": "arm64"}) == ARM
    assert platforms.of_image({"Os": "linux", "Architecture": "amd64"}) is None  # the host's
    assert platforms.of_image({"Os": "linux", "Architecture": "s390x"}) is None  # not built
    assert platforms.of_image({}) is None
