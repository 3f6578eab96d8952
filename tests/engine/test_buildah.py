"""Issue 11's proof on real tools: the buildah builder gives the same image for the same
inputs. Two ``--no-cache`` builds of the tiny project give the same image ID in the engine and,
pushed under two tags to the loopback registry, the same registry digest; a third build under a
clock moved 40 days ahead (Debian's faketime) gives the same ID again. Inside the new layers
every file time is SOURCE_DATE_EPOCH, every .pyc is hash-based and /etc/shadow holds no day.
The classic builder still works and its manifest says it is not reproducible."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import docker.errors
import pytest

from helpers import (
    REGISTRY,
    MakeProject,
    MakeTag,
    build_json,
    published_image,
    registry_digest,
    run_cli,
    tar_context,
)
from reprobuild._util import leftovers
from reprobuild.backends.engine import Engine
from reprobuild.imaging.render import layers_epoch
from reprobuild.locks.wheels import CACHED_MTIME_NS

if TYPE_CHECKING:
    from docker import DockerClient

pytestmark = [pytest.mark.engine, pytest.mark.registry]
EPOCH = 1700000000  # not 0: a time that no tool writes by default
LAYERS = layers_epoch(EPOCH)  # what buildah builds the layers under the stamp at
ENV = {"SOURCE_DATE_EPOCH": str(EPOCH)}


def buildah_version() -> str:
    out = subprocess.run(["buildah", "version", "--json"], capture_output=True, check=True)
    return str(json.loads(out.stdout)["version"])


def buildah_containers() -> set[str]:
    out = subprocess.run(
        ["buildah", "containers", "--quiet", "--notruncate"], capture_output=True, check=True
    )
    return set(out.stdout.decode().split())


def buildah_names() -> set[str]:
    out = subprocess.run(
        ["buildah", "images", "--format", "{{.Name}}:{{.Tag}}"], capture_output=True, check=True
    )
    return set(out.stdout.decode().split())


def new_layers(
    docker_client: DockerClient, tag: str, base_ref: str
) -> Iterator[tuple[tarfile.TarInfo, bytes]]:
    """Every entry of the layers the build added above the base, with a regular file's first
    16 bytes, read from a `docker save` of the image."""
    base_layers = set(docker_client.images.get(base_ref).attrs["RootFS"]["Layers"])
    image = docker_client.images.get(tag)
    saved = b"".join(image.save(named=False))
    with tarfile.open(fileobj=io.BytesIO(saved)) as outer:
        index = outer.extractfile("manifest.json")
        assert index is not None
        layers = json.load(index)[0]["Layers"]
        diff_ids = image.attrs["RootFS"]["Layers"]
        for path, diff_id in zip(layers, diff_ids, strict=True):
            if diff_id in base_layers:
                continue
            raw = outer.extractfile(path)
            assert raw is not None
            with tarfile.open(fileobj=io.BytesIO(raw.read())) as layer:
                for member in layer.getmembers():
                    fh = layer.extractfile(member) if member.isfile() else None
                    yield member, (fh.read(16) if fh else b"")


def test_same_inputs_same_image_on_any_day(
    project: MakeProject,
    base_ref: str,
    unique_tag: MakeTag,
    docker_client: DockerClient,
    request: pytest.FixtureRequest,
) -> None:
    root = project("tiny")
    containers_before = buildah_containers()
    run_id = uuid.uuid4().hex[:12]
    repository = f"{REGISTRY}/reprobuild-test/repro-{run_id}"
    pushed = [f"{repository}:{n}" for n in ("one", "two")]

    def untag_pushed() -> None:  # --push tags the image with each REF on the engine, as docker
        for ref in pushed:
            with contextlib.suppress(docker.errors.ImageNotFound):
                docker_client.images.remove(ref)

    request.addfinalizer(untag_pushed)
    tags = [unique_tag("repro"), unique_tag("repro"), unique_tag("repro")]
    first, second = (
        build_json(str(root), "--base", base_ref, "--builder", "buildah", "--no-cache",
                   "--tag", tag, "--push", ref, env=ENV)
        for tag, ref in zip(tags[:2], pushed, strict=True)
    )  # fmt: skip
    # The third build: the clock 40 days on (reprobuild, git and pip see it; buildah's own
    # clock is not moved by libfaketime, which is why --timestamp must not depend on it).
    later = subprocess.run(
        ["faketime", "-f", "+40d", sys.executable, "-m", "reprobuild", "image", "--json",
         str(root), "--base", base_ref, "--builder", "buildah", "--no-cache", "--tag", tags[2]],
        capture_output=True, text=True, env={**os.environ, **ENV}, check=False, timeout=900,
    )  # fmt: skip
    assert later.returncode == 0, later.stderr[-3000:]
    third = json.loads(later.stdout)

    ids = [first["id"], second["id"], third["id"]]
    print("image IDs:", ids, "registry digests:", first["digest"], second["digest"])
    assert ids[0].startswith("sha256:") and len(set(ids)) == 1, ids
    assert {docker_client.images.get(t).id for t in tags} == {ids[0]}
    assert first["digest"] == second["digest"]
    assert [registry_digest(ref) for ref in pushed] == [first["digest"]] * 2
    # --push reports what moved (the first may find its layers there: the same inputs on an
    # earlier run gave the same blobs), and nothing for the same image again
    report = first["push"]
    assert report["reference"] == f"{repository}@{first['digest']}"
    assert report["layers"] == len(docker_client.images.get(tags[0]).attrs["RootFS"]["Layers"])
    assert report["sent_bytes"] + report["present_bytes"] > 0, report
    assert (second["push"]["sent_layers"], second["push"]["sent_bytes"]) == (0, 0), second
    assert second["push"]["present_bytes"] == report["sent_bytes"] + report["present_bytes"]
    # and the engine knows the image by its pushed digest (compose, k8s and slurm pin by it)
    digests = docker_client.images.get(tags[0]).attrs["RepoDigests"]
    assert f"{repository}@{first['digest']}" in digests, digests
    untag_pushed()

    build = first["manifest"]["build"]
    from uv import find_uv_bin

    assert build == {
        "builder": "buildah",
        "builder_version": buildah_version(),
        "reproducible": True,
        # uv installed the wheels (a CPU mount install on the host's machine): the very binary
        "installer": "uv",
        "installer_sha256": hashlib.sha256(Path(find_uv_bin()).read_bytes()).hexdigest(),
    }
    labels = docker_client.images.get(tags[0]).attrs["Config"]["Labels"]
    assert labels["io.reprobuild.build.builder"] == "buildah"
    assert labels["io.reprobuild.build.builder-version"] == buildah_version()
    assert labels["io.reprobuild.build.reproducible"] == "true"
    assert docker_client.images.get(tags[0]).attrs["Created"].startswith("2023-11-14T22:13:20")

    # What is inside: no time but the layers' epoch (1980, whatever the commit's: a commit
    # rebuilds nothing under the stamp) and the project's on what the stamp adds,
    # hash-based bytecode, no day in /etc/shadow.
    entries = list(new_layers(docker_client, tags[0], base_ref))
    names = [m.name for m, _ in entries]
    assert "opt/reprobuild/manifest.json" in names and "app/hello.py" in names
    assert {m.name: m.mtime for m, _ in entries if m.mtime not in (LAYERS, EPOCH)} == {}
    stamped = {m.name for m, _ in entries if m.mtime == EPOCH}
    assert {"opt/reprobuild/manifest.json", "opt/reprobuild/sbom.cdx.json"} <= stamped, stamped
    assert stamped <= {
        "opt",
        "opt/reprobuild",
        "opt/reprobuild/manifest.json",
        "opt/reprobuild/sbom.cdx.json",
    }
    pycs = {m.name: head for m, head in entries if m.name.endswith(".pyc")}
    assert len(pycs) > 10
    # PEP 552: the flags word after the magic number; bit 0 set means hash-based
    assert [name for name, head in pycs.items() if not head[4] & 1] == []
    assert [n for n in names if n.startswith(("var/log/", "root/.cache/", "tmp/"))] == []
    # The wheels went in through RUN --mount: no wheelhouse, no lock copy, no pip and no
    # mount point reached a layer.
    assert [n for n in names if n.startswith((".reprobuild", "tmp/reprobuild"))] == []
    assert [n for n in names if n.endswith(".whl") or "site-packages/pip/" in n] == []
    # uv left no binary, cache or uv_cache.json (the install's wall clock) behind, and no RECORD
    # names one; INSTALLER says who installed it.
    assert [n for n in names if n.endswith("/uv") or "uv_cache" in n or "uv-cache" in n] == []
    records = docker_client.containers.run(
        tags[0],
        ["-c", "cat /opt/venv/lib/python3*/site-packages/*.dist-info/RECORD | grep -c uv_cache; "
               "awk 1 /opt/venv/lib/python3*/site-packages/*.dist-info/INSTALLER | sort -u"],
        entrypoint=["sh"], remove=True, network_disabled=True,
    ).decode()  # fmt: skip
    assert records.split() == ["0", "uv"], records
    assert "opt/venv/bin/python" in names
    shadow = docker_client.containers.run(
        tags[0], ["-c", "grep ^repro: /etc/shadow"], entrypoint=["sh"], user="0", remove=True
    ).decode()
    assert shadow.split(":")[2] == "", shadow

    # The image works, and buildah kept nothing of ours: no working containers, no names.
    out = docker_client.containers.run(tags[0], remove=True, network_disabled=True).decode()
    assert out.strip().startswith("hello from tiny"), out
    assert buildah_containers() - containers_before == set()
    assert not [n for n in buildah_names() if "reprobuild-scratch" in n]
    assert not [t for i in docker_client.images.list() for t in i.tags if f":{os.getpid()}-" in t]


def cached_wheels(cache: Path) -> dict[str, tuple[int, int, int]]:
    """Each cached wheel's inode, mtime and link count."""
    return {
        p.name: (p.stat().st_ino, p.stat().st_mtime_ns, p.stat().st_nlink)
        for p in (cache / "reprobuild" / "wheels").glob("*/*.whl")
    }


def test_wheels_downloaded_on_another_day_give_the_same_image(
    project: MakeProject, base_ref: str, unique_tag: MakeTag, tmp_path: Path
) -> None:
    """The wheels reach buildah's RUN --mount from the wheel cache, where their mtimes are
    the day each was downloaded; buildah 1.39 digests a bind mount's source, mtimes included,
    into the history (issue 29). A cache whose wheels came on another day gives the same
    image: the cache gives every wheel one fixed mtime, and the build uses its links into the
    cache as they are (no copy), changing no cached file's bytes."""
    root = project("tiny")
    cache = tmp_path / "cache"
    env = {**ENV, "XDG_CACHE_HOME": str(cache)}

    def build() -> str:
        args = ("--base", base_ref, "--builder", "buildah", "--no-cache")
        return str(build_json(str(root), *args, "--tag", unique_tag("days"), env=env)["id"])

    first = build()  # downloads into the empty cache, at the cache's one fixed time
    before = cached_wheels(cache)
    assert before and {links for *_, links in before.values()} == {1}, before
    assert {mtime for _, mtime, _ in before.values()} == {CACHED_MTIME_NS}, before
    day = 86400 * 10**9
    for n, wheel in enumerate(sorted((cache / "reprobuild" / "wheels").glob("*/*.whl"))):
        stamp = wheel.stat().st_mtime_ns - (40 + n) * day  # each downloaded another day
        os.utime(wheel, ns=(stamp, stamp))
    moved = cached_wheels(cache)
    second = build()
    print("image IDs:", first, second)
    assert first.startswith("sha256:") and second == first
    # the same files (inodes) at the cache's time again, their bytes as the index says
    after = cached_wheels(cache)
    assert {n: ino for n, (ino, *_) in after.items()} == {n: i for n, (i, *_) in moved.items()}
    assert {mtime for _, mtime, _ in after.values()} == {CACHED_MTIME_NS}, after
    index = json.loads(next((cache / "reprobuild" / "wheels").glob("*/.index.json")).read_text())
    for wheel in (cache / "reprobuild" / "wheels").glob("*/*.whl"):
        assert hashlib.sha256(wheel.read_bytes()).hexdigest() == index[wheel.name][2]


def test_a_cached_build_equals_a_clean_one(
    project: MakeProject, base_ref: str, unique_tag: MakeTag
) -> None:
    """buildah's layer cache keeps builds fast but must never change what they give: after a
    new commit (another SOURCE_DATE_EPOCH; buildah's cache does not look at --timestamp) and
    after a code-only change, a build that reuses cached layers gives the same image as a
    --no-cache build of the same inputs."""
    root = project("tiny")

    def build(epoch: int, *extra: str) -> str:
        env = {"SOURCE_DATE_EPOCH": str(epoch)}
        args = ("--base", base_ref, "--builder", "buildah", "--tag", unique_tag("cached"))
        return str(build_json(str(root), *args, *extra, env=env)["id"])

    build(EPOCH)  # the cache, at one epoch
    later = EPOCH + 86400
    assert build(later) == build(later, "--no-cache")
    (root / "hello.py").write_text((root / "hello.py").read_text() + "print('changed')\n")
    assert build(later) == build(later, "--no-cache")


def test_an_image_the_engine_holds_is_tagged_not_loaded_again(
    project: MakeProject, base_ref: str, unique_tag: MakeTag, docker_client: DockerClient
) -> None:
    """A rebuild that gives an image the engine already holds (same ID) only tags it: no
    archive of the whole image, no load. Once the engine lost it, the next build loads it."""
    root = project("tiny")
    tags = [unique_tag("held"), unique_tag("held"), unique_tag("held")]

    def build(tag: str) -> str:
        args = ("--base", base_ref, "--builder", "buildah", "--tag", tag)
        proc = run_cli("image", str(root), *args, env=ENV)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return proc.stderr

    build(tags[0])  # loaded, or tagged: an earlier test may have left this very image
    held = docker_client.images.get(tags[0]).id
    log = build(tags[1])
    assert f"the engine already holds {held[:19]}: tagging it {tags[1]}" in log, log[-2000:]
    assert docker_client.images.get(tags[1]).id == held
    for tag in tags[:2]:
        docker_client.images.remove(tag, force=True)
    log = build(tags[2])
    assert "the engine already holds" not in log, log[-2000:]
    assert docker_client.images.get(tags[2]).id == held
    run = docker_client.containers.run(tags[2], remove=True)
    assert b"hello from tiny" in run


def test_a_code_only_change_loads_only_the_new_layers(
    project: MakeProject, base_ref: str, unique_tag: MakeTag, docker_client: DockerClient
) -> None:
    """After a code-only change, buildah pushes to reprobuild's one-push registry only the
    layers the engine lacks, and the engine gets the image under buildah's ID (the same as a
    --no-cache build's) with the new code in it. Without an earlier build of the lock in the
    engine, the whole image goes in."""
    root = project("tiny")
    first, second, clean = unique_tag("inc"), unique_tag("inc"), unique_tag("inc")

    def build(tag: str, *extra: str) -> str:
        args = ("--base", base_ref, "--builder", "buildah", "--tag", tag, *extra)
        proc = run_cli("image", str(root), *args, env=ENV)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return proc.stderr

    build(first)
    layers = docker_client.images.get(first).attrs["RootFS"]["Layers"]
    (root / "hello.py").write_text(
        (root / "hello.py").read_text() + f"print('changed {uuid.uuid4().hex}')\n"
    )
    log = build(second)
    # the graph-driver store holds a chain (the first N layers); the containerd store holds
    # blobs, so a layer above the changed one that is the same (the stamp's) is held too
    found = re.search(r"loaded (\d+) new layer\(s\) into the engine; it already held the "
                      r"(first|other) (\d+) of (\d+)", log)  # fmt: skip
    assert found, log[-3000:]
    new, held, total = (int(found.group(i)) for i in (1, 3, 4))
    assert total == len(layers) and held + new == total and 1 <= new <= 3
    image = docker_client.images.get(second)
    now = image.attrs["RootFS"]["Layers"]
    if found.group(2) == "first":
        assert now[:held] == layers[:held]
    else:
        assert len(set(now) & set(layers)) == held
    assert b"changed" in docker_client.containers.run(second, remove=True)
    assert build(clean, "--no-cache") and docker_client.images.get(clean).id == image.id
    # no engine image of this lock: the whole archive, as before. Other tests build "tiny" too
    # and keep their images, so the lock is made this test's own (a comment changes its sha256)
    for tag in (first, second, clean):
        docker_client.images.remove(tag, force=True)
    lockfile = root / "requirements.lock"
    lockfile.write_text(lockfile.read_text() + f"# {uuid.uuid4().hex}\n")
    (root / "hello.py").write_text((root / "hello.py").read_text() + "print('again')\n")
    assert "new layer(s)" not in build(first)
    lock = docker_client.images.get(first).labels["io.reprobuild.lock.sha256"]
    assert lock != image.labels["io.reprobuild.lock.sha256"]
    held = docker_client.images.list(filters={"label": f"io.reprobuild.lock.sha256={lock}"})
    assert len(held) == 1
    assert b"again" in docker_client.containers.run(first, remove=True)


def test_classic_builder_says_it_is_not_reproducible(
    project: MakeProject, base_ref: str, unique_tag: MakeTag
) -> None:
    result = build_json(
        str(project("tiny")), "--base", base_ref, "--builder", "classic", "--tag", unique_tag()
    )
    build = result["manifest"]["build"]
    assert build["builder"] == "classic"
    assert build["reproducible"] is False
    assert build["builder_version"]  # the engine's version


def test_auto_picks_buildah_says_so_and_reaps_a_killed_runs_stamp_image(
    project: MakeProject, base_ref: str, unique_tag: MakeTag, docker_client: DockerClient
) -> None:
    """The default builder is buildah where it is installed: the build log says so in one line
    and the labels say reproducible. A stamp image that a killed run (SIGKILL: no clean-up)
    left in buildah's storage is removed first, with a note; a live run's is kept."""
    subprocess.run(["buildah", "pull", "--quiet", "--tls-verify=false", base_ref],
                   capture_output=True, check=True)  # fmt: skip
    dead = f"reprobuild-scratch/killed:{2**22 + 17}-1-{uuid.uuid4().hex[:16]}"  # no such pid
    live = f"reprobuild-scratch/alive:{leftovers.owner()}-{uuid.uuid4().hex[:16]}"  # this test
    for name in (dead, live):
        subprocess.run(["buildah", "tag", base_ref, name], capture_output=True, check=True)
    try:
        tag = unique_tag()
        proc = run_cli("image", str(project("tiny")), "--base", base_ref, "--tag", tag, env=ENV)
        assert proc.returncode == 0, proc.stderr[-3000:]
        lines = proc.stderr.splitlines()
        said = "builder: buildah (auto: reproducible, the same inputs give the same image ID)"
        assert said in lines, proc.stderr[-3000:]
        assert any(
            ln.startswith("note: removed 1 leftover of an earlier run that was killed (pid ")
            for ln in lines
        ), proc.stderr[-3000:]
        labels = docker_client.images.get(tag).labels
        assert labels["io.reprobuild.build.builder"] == "buildah"
        assert labels["io.reprobuild.build.reproducible"] == "true"
        names = buildah_names()
        assert f"localhost/{dead}" not in names
        assert f"localhost/{live}" in names  # its owner (this process) still runs
        # the build's layers stay buildah's cache under the project's name (a chain without
        # a name is what buildah rmi prunes with the stamp image)
        assert "localhost/reprobuild-cache/reprobuild-test-tiny:cpu" in names
    finally:
        subprocess.run(["buildah", "rmi", dead, live], capture_output=True, check=False)


def _broken_image(base_ref: str) -> str:
    """An image in buildah's real storage whose record has lost its manifest: what a pull
    stopped between writing the record and its data items leaves (tests/hostile's signal tests
    stop real pulls, but hit that moment only now and then). Made by committing a working
    container and removing the stored manifest, as the storage itself would have it."""
    container = subprocess.run(
        ["buildah", "from", "--pull=never", "--quiet", base_ref],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    try:
        image = subprocess.run(
            ["buildah", "commit", "--quiet", container], capture_output=True, text=True, check=True
        ).stdout.strip()
    finally:
        subprocess.run(["buildah", "rm", container], capture_output=True, check=False)
    store = subprocess.run(
        ["buildah", "info", "--format", "{{.store.GraphRoot}} {{.store.GraphDriverName}}"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    (Path(store[0]) / f"{store[1]}-images" / image / "manifest").unlink()
    # buildah 1.28 fails the listing on it, or only logs it, by what else the storage holds
    listing = subprocess.run(["buildah", "images", "-q"], capture_output=True, text=True)
    assert image in listing.stderr, listing.stderr
    return image


def test_a_broken_image_is_named_and_only_a_killed_pulls_is_removed(
    project: MakeProject, base_ref: str, unique_tag: MakeTag
) -> None:
    """A broken image in buildah's storage (a record without its manifest) makes
    `buildah images` fail (or, by what else the storage holds, log an error), reprobuild's
    search for leftovers included. One that is not ours: the build works, says so in one
    warning line with the command that removes it where it cannot search, and leaves it.
    Once a killed run's pull is on record as the one that broke it (its temp dir, with what
    was broken before it: nothing), the next build removes it in its note."""
    subprocess.run(["buildah", "pull", "--quiet", "--tls-verify=false", base_ref],
                   capture_output=True, check=True)  # fmt: skip
    image = _broken_image(base_ref)
    dead = f"{2**22 + 17}-1"  # no such pid
    pull_dir: Path | None = None
    try:
        root = project("tiny")
        first = run_cli("image", str(root), "--base", base_ref, "--builder", "buildah",
                        "--tag", unique_tag(), env=ENV)  # fmt: skip
        assert first.returncode == 0, first.stderr[-3000:]
        warnings = [ln for ln in first.stderr.splitlines() if ln.startswith("warning: ")]
        said = (
            f"warning: buildah's storage holds a broken image {image[:12]} (its record without "
            "its manifest: a pull or commit stopped half-way, not by this run): `buildah "
            "images` fails and leftovers of killed runs cannot be found until `buildah rmi "
            f"{image}` removes it"
        )
        # Where the reaping's listing fails on it, one warning; whether buildah 1.28 fails on a
        # broken image or only logs it cannot be told beforehand (the same storage has given
        # both within seconds, with nothing written between: the fresh-engine runs), so either
        # is right here; the warning's own conditions are unit-tested (test_buildah_broken.py).
        assert warnings in ([], [said]), first.stderr[-3000:]
        assert image in subprocess.run(["buildah", "images", "-q"], capture_output=True,
                                       text=True).stderr  # fmt: skip

        pull_dir = Path(tempfile.mkdtemp(prefix=f"reprobuild-pull-{dead}-"))
        (pull_dir / "broken-before").write_text("")
        second = run_cli("image", str(root), "--base", base_ref, "--builder", "buildah",
                         "--tag", unique_tag(), env=ENV)  # fmt: skip
        assert second.returncode == 0, second.stderr[-3000:]
        assert "warning: " not in second.stderr, second.stderr[-3000:]
        notes = [ln for ln in second.stderr.splitlines() if ln.startswith("note: removed ")]
        assert len(notes) == 1, second.stderr
        assert re.search(rf"killed \(pid (\d+, )*{dead.split('-')[0]}\b", notes[0]), notes[0]
        assert not pull_dir.exists()
        assert buildah_names()  # the listing works again
        assert image not in subprocess.run(["buildah", "images", "-q", "--no-trunc"],
                                           capture_output=True, text=True).stdout  # fmt: skip
    finally:
        subprocess.run(["buildah", "rmi", image], capture_output=True, check=False)
        if pull_dir is not None:
            shutil.rmtree(pull_dir, ignore_errors=True)


def test_missing_buildah_says_how_to_install_it(project: MakeProject, tmp_path: Path) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    proc = run_cli("image", str(project("tiny")), "--builder", "buildah", env={"PATH": str(empty)})
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [
        "error: builder 'buildah' asked for, but `buildah` is not installed",
        "hint: install it (Debian/Ubuntu: `apt-get install buildah`; Fedora: `dnf install "
        "buildah`), or use --builder classic",
    ]


def test_push_with_auto_and_no_buildah_says_how_to_install_it(
    project: MakeProject, base_ref: str, tmp_path: Path
) -> None:
    """--push with the default --builder auto where buildah is missing: one error line naming
    the builder auto picked and how to get buildah, before anything is built."""
    empty = tmp_path / "bin"
    empty.mkdir()
    proc = run_cli(
        "image", str(project("tiny")), "--base", base_ref, "--push", f"{REGISTRY}/x/y:z",
        env={"PATH": str(empty)},
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    # what the engine offers: classic on Debian 12, buildx on Debian 13 (/usr/bin/docker is
    # probed by its path, and Debian 13's has the buildx plugin)
    offered = Engine().resolve_builder("auto")
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert errors == [
        f"error: --push needs the buildah builder, and --builder auto picked {offered} (buildah "
        "is not installed or not usable here)"
    ], proc.stderr
    assert "hint: install it (Debian/Ubuntu: `apt-get install buildah`" in proc.stderr
    assert "STEP" not in proc.stderr and "Step " not in proc.stderr


def test_push_needs_buildah(project: MakeProject) -> None:
    proc = run_cli(
        "image", str(project("tiny")), "--builder", "classic", "--push", f"{REGISTRY}/x/y:z"
    )
    assert proc.returncode == 1
    assert (
        proc.stderr.splitlines()[0]
        == "error: --push needs --builder buildah (got --builder classic)"
    )


def _default_signals() -> None:
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_interrupted_buildah_build_leaves_nothing(
    project: MakeProject,
    base_ref: str,
    unique_tag: MakeTag,
    docker_client: DockerClient,
    signum: int,
) -> None:
    """Stopped while buildah runs a RUN step: no image under the tag, no buildah working
    container, no scratch image in buildah or the engine, no temp dir."""
    root = project("tiny")
    tag = unique_tag("stopped")
    before = buildah_containers()
    proc = subprocess.Popen(
        [sys.executable, "-m", "reprobuild", "image", str(root), "--base", base_ref,
         "--builder", "buildah", "--no-cache", "--tag", tag],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, **ENV}, preexec_fn=_default_signals,
    )  # fmt: skip
    deadline = time.monotonic() + 300
    assert proc.stderr is not None
    seen: list[str] = []
    for line in proc.stderr:  # the build log streams to stderr
        seen.append(line)
        if "STEP" in line and ": RUN " in line:
            break
        assert time.monotonic() < deadline
    else:
        raise AssertionError("the build never reached a RUN step: " + "".join(seen[-20:]))
    time.sleep(1)
    proc.send_signal(signum)
    _out, err = proc.communicate(timeout=180)
    assert proc.returncode == 128 + signum, err[-2000:]
    assert f"error: interrupted by {signal.Signals(signum).name}" in err
    assert not [t for i in docker_client.images.list() for t in i.tags if t == tag]
    assert buildah_containers() - before == set()
    assert not [n for n in buildah_names() if "reprobuild-scratch" in n]
    scratch = f":{proc.pid}-"
    assert not [t for i in docker_client.images.list() for t in i.tags if scratch in t]
    assert not [p for p in Path("/tmp").iterdir() if f"-{proc.pid}-" in p.name]


def test_failed_buildah_build_leaves_nothing(
    project: MakeProject, base_ref: str, unique_tag: MakeTag, docker_client: DockerClient
) -> None:
    """A base whose python3 can make no venv (its venv module removed; uv, like pip, installs
    into a venv): the install step's RUN fails inside buildah. One error line, exit 1, and
    nothing left: no image under the tag, no buildah working container, no scratch image, no
    temp dir."""
    broken = tar_context(
        {
            "Dockerfile": (
                f"FROM {base_ref}\nRUN rm -rf /usr/lib/python3.11/venv\n".encode(),
                0o644,
            )
        }
    )
    with published_image(docker_client, broken, "no-venv") as base:
        root = project("tiny")
        tag = unique_tag("failed")
        before = buildah_containers()
        proc = subprocess.Popen(
            [sys.executable, "-m", "reprobuild", "image", str(root), "--base", base,
             "--builder", "buildah", "--tag", tag, "-q"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **ENV},
        )  # fmt: skip
        _out, err = proc.communicate(timeout=600)
        assert proc.returncode == 1, err[-3000:]
        errors = [ln for ln in err.splitlines() if ln.startswith("error: ")]
        assert len(errors) == 1 and errors[0].startswith("error: buildah build failed: "), err[
            -3000:
        ]
        assert "No module named venv" in err  # the log tail says why
        assert not [t for i in docker_client.images.list() for t in i.tags if t == tag]
        assert buildah_containers() - before == set()
        assert not [n for n in buildah_names() if "reprobuild-scratch" in n]
        assert not [t for i in docker_client.images.list() for t in i.tags if f":{proc.pid}-" in t]
        assert not [p for p in Path("/tmp").iterdir() if f"-{proc.pid}-" in p.name]
        subprocess.run(["buildah", "rmi", base], capture_output=True, check=False)


def rebuild_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return run_cli("rebuild", *args, env=ENV)


def test_a_committed_code_change_reuses_every_layer_under_the_app(
    project: MakeProject, base_ref: str, unique_tag: MakeTag, docker_client: DockerClient
) -> None:
    """A commit moves SOURCE_DATE_EPOCH (the project's last commit time). The layers under the
    stamp are built at an epoch of their own, so a commit that changes only the app shares
    every layer but the app's and the stamp's with the build before it (before, the epoch in
    the first step rebuilt them all: every wheel installed again). The image still carries
    the commit's time: its config's created and its created label."""
    root = project("tiny")
    tags = [unique_tag("commit-a"), unique_tag("commit-b")]
    build_json(str(root), "--base", base_ref, "--builder", "buildah", "--tag", tags[0], env=ENV)
    (root / "hello.py").write_text((root / "hello.py").read_text() + "# another commit\n")
    later = EPOCH + 86400
    build_json(
        str(root), "--base", base_ref, "--builder", "buildah", "--tag", tags[1],
        env={"SOURCE_DATE_EPOCH": str(later)},
    )  # fmt: skip
    first, second = (docker_client.images.get(tag).attrs for tag in tags)
    layers = [image["RootFS"]["Layers"] for image in (first, second)]
    assert len(layers[0]) == len(layers[1]) > 2
    assert layers[0][:-2] == layers[1][:-2]  # the base and every dependency layer
    assert layers[0][-2] != layers[1][-2] and layers[0][-1] != layers[1][-1]  # app, stamp
    assert second["Created"].startswith("2023-11-15T22:13:20")
    assert second["Config"]["Labels"]["org.opencontainers.image.created"] == "2023-11-15T22:13:20Z"
    assert first["Config"]["Labels"]["org.opencontainers.image.created"] == "2023-11-14T22:13:20Z"


def test_rebuild_check(
    project: MakeProject, base_ref: str, unique_tag: MakeTag, docker_client: DockerClient
) -> None:
    """Untouched project: the same image (exit 0). One byte of app code changed: exit 1,
    naming the app layer and that one file, as a table and as JSON."""
    root = project("tiny")
    tag = unique_tag("rebuild")
    build_json(str(root), "--base", base_ref, "--builder", "buildah", "--tag", tag, env=ENV)

    same = rebuild_cli(tag, str(root), "--json")
    assert same.returncode == 0, same.stderr[-3000:]
    report = json.loads(same.stdout)
    assert report["match"] is True and report["recorded_id"] == report["rebuilt_id"]

    source = (root / "hello.py").read_bytes()
    (root / "hello.py").write_bytes(source.replace(b"print(", b"print ("))  # one byte more
    table = rebuild_cli(tag, str(root), "-q")
    assert table.returncode == 1, table.stderr[-3000:]
    print(table.stdout)
    # buildah's history names the step "COPY dir:<sha256 of the directory> in /app/"
    assert re.search(
        r"differs from layer \d+ of \d+: .*COPY dir:[0-9a-f]{64} in /app/", table.stdout
    )
    assert "  - app/hello.py " in table.stdout and "  + app/hello.py " in table.stdout

    differ = rebuild_cli(tag, str(root), "--json")
    assert differ.returncode == 1, differ.stderr[-3000:]
    report = json.loads(differ.stdout)
    assert report["match"] is False
    layer = report["layer"]
    assert re.search(r"COPY dir:[0-9a-f]{64} in /app/", layer["created_by"]), layer["created_by"]
    assert [f["path"] for f in layer["files"]] == ["app/hello.py"]
    (changed,) = layer["files"]
    assert changed["rebuilt"]["size"] == changed["recorded"]["size"] + 1
    assert (
        changed["rebuilt"]["sha256"] == hashlib.sha256((root / "hello.py").read_bytes()).hexdigest()
    )
    assert changed["recorded"]["sha256"] == hashlib.sha256(source).hexdigest()
    assert changed["recorded"]["mtime"] == changed["rebuilt"]["mtime"] == "1980-01-01T00:00:00Z"
    assert changed["recorded"]["owner"] == "0:0" and changed["recorded"]["mode"] == "0644"
    # the rebuilt image is never left behind
    assert not [
        t
        for i in docker_client.images.list()
        for t in i.tags
        if "rebuild:" in t and t.startswith("reprobuild-scratch/")
    ]


def test_rebuild_names_the_missing_input(
    project: MakeProject, base_ref: str, unique_tag: MakeTag, tmp_path: Path
) -> None:
    """A project with a recorded git revision that is no longer checked out: exit 2, the
    error names the revision. An image without a manifest, and one built with the classic
    builder: exit 2, one error line each."""
    root = project("tiny")
    git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "one"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
    tag = unique_tag("rebuild-git")
    run = run_cli(
        "image", str(root), "--base", base_ref, "--builder", "buildah", "--tag", tag, "-q"
    )
    assert run.returncode == 0, run.stderr[-3000:]
    (root / "hello.py").write_text("print('changed')\n")
    proc = run_cli("rebuild", tag, str(root), "-q")
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines[0].startswith("error: the project ")
    assert f"is not at the recorded revision {head.stdout.strip()}" in lines[0]
    assert "uncommitted changes" in lines[0]

    bare = run_cli("rebuild", base_ref, str(root))
    assert bare.returncode == 2
    assert bare.stderr.startswith("error: ") and "was not built by reprobuild" in bare.stderr

    classic = unique_tag("rebuild-classic")
    build_json(str(root), "--base", base_ref, "--builder", "classic", "--tag", classic)
    proc = run_cli("rebuild", classic, str(root))
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[0] == (
        f"error: {classic} was built with 'classic' and is marked not reproducible; only a "
        "reproducible build (--builder buildah, or buildkit where the engine builds it "
        "reproducibly; no apt packages) can be checked"
    )


def test_the_code_step_built_apart_gives_the_whole_builds_image(
    base_ref: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """reprobuild builds the steps under the code and the code's step (``COPY app/ /app/``) in
    two buildah builds, the second FROM the first's ID, and keeps the first by its inputs: the
    image must be the one a single build of the whole Dockerfile gives, byte for byte (buildah
    1.28 and 1.39 both record the step's parent by its ID). After a code-only change the layers
    under the code come from the record, and the image is the one a --no-cache build of the
    whole Dockerfile gives; a changed file under the code (another input) builds them again."""
    from reprobuild.backends import buildah
    from reprobuild.bases.refs import parse_ref
    from reprobuild.imaging import buildahbuild as image

    monkeypatch.setenv("REPROBUILD_CACHE_DIR", str(tmp_path / "cache"))
    buildah.pull(parse_ref(base_ref))
    ctx = tmp_path / "ctx"
    (ctx / "app").mkdir(parents=True)
    (ctx / "data").mkdir()
    (ctx / "data" / "input.txt").write_text("one\n")
    (ctx / "Dockerfile").write_text(
        f"FROM {base_ref}\nCOPY data/ /data/\nRUN cat /data/input.txt > /copied\n"
        f'ENV A=1\nWORKDIR /app\nCMD ["python", "x.py"]\n{image.APP_STEP}'
    )

    def code(text: str) -> None:
        (ctx / "app" / "x.py").write_text(text)
        for path in (ctx, *ctx.rglob("*")):
            os.utime(path, (EPOCH, EPOCH))

    made: list[str] = []

    def apart(*, no_cache: bool = False) -> tuple[str, list[str]]:
        lines: list[str] = []
        built = image.bud_code_last(
            ctx, epoch=EPOCH, no_cache=no_cache, network=False, version="t", log=lines.append
        )
        made.append(built)
        return built, lines

    def whole() -> str:
        built = buildah.bud(ctx, None, epoch=EPOCH, no_cache=True, network=False)
        made.append(built)
        return built

    try:
        code("print(1)\n")
        first, lines = apart(no_cache=True)
        assert first == whole()
        assert not any(image.LAYERS_REUSED in line for line in lines)
        code("print(2)\n")
        second, lines = apart()
        assert any(image.LAYERS_REUSED in line for line in lines), lines
        assert second != first and second == whole()
        (ctx / "data" / "input.txt").write_text("two\n")
        code("print(2)\n")
        third, lines = apart()
        assert not any(image.LAYERS_REUSED in line for line in lines), lines
        assert third not in (first, second) and third == whole()
    finally:
        for built in reversed(made):  # children first: buildah keeps a parent with a child
            subprocess.run(["buildah", "rmi", built], capture_output=True, check=False)
