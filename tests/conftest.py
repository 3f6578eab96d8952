"""Shared fixtures. Engine and registry fixtures FAIL (never skip) when what they need is
missing: a test that quietly skips because no engine is up proves nothing. `scripts/setup`
starts the engine and the loopback registry and publishes the test base image."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from helpers import DATA, RUNTIME_TMP_VAR, STATE_DIR, MakeProject, MakeTag, build_json

if TYPE_CHECKING:
    from docker import DockerClient

# Public projects kept byte for byte as test data bring their own tests (rl-replicas'
# tests/integration_tests/test_ppo.py): they run inside the images built from them, never here.
collect_ignore_glob = ["data/projects/wild-*"]


# Under pytest-xdist (.ci/run: ``-n 2 --dist loadgroup``) each worker may have an engine and a
# buildah storage of its own (scripts/worker-engines, named in REPROBUILD_TEST_ENGINES). Then
# the engine tests spread over the workers a module at a time (module fixtures build once),
# the users of the session's determinism image together, and a worker's checks of the
# engine's or buildah's whole state (no working container, no tag left) see only its own.
# Without one engine per worker, every engine test runs on ONE worker, in the suite's order.
ENGINE_GROUP = "engine"
ENGINES_VAR = "REPROBUILD_TEST_ENGINES"
# The session image the most modules share: its users run on one worker, and first (the
# biggest group starts first, so the others fill the other worker around it).
DETERMINISM_GROUP = "engine-determinism"
# A test that asks for one of these reaches the engine, whatever its markers say.
ENGINE_FIXTURES = frozenset({"docker_client", "base_ref", "unique_tag", "determinism_image"})
# The worker's own temporary folder, removed when the worker ends.
_WORKER_TMP = pytest.StashKey[Path]()
# Whether every worker has an engine of its own.
_SPREAD = pytest.StashKey[bool]()


def pytest_configure(config: pytest.Config) -> None:
    """Each xdist worker gets a temporary folder of its own (TMPDIR, for this process and the
    commands it runs): the hostile tests check that a failed command leaves no folder of
    reprobuild's in the temporary folder, which a build on the other worker is filling. And,
    where REPROBUILD_TEST_ENGINES names one per worker, its own engine and buildah storage."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker:
        return
    own = Path(tempfile.gettempdir()) / f"rbtests-{worker}-{os.getpid()}"
    own.mkdir(exist_ok=True)
    own.chmod(0o1777)  # as /tmp is: a command run as another user may write there too
    config.stash[_WORKER_TMP] = own
    os.environ["TMPDIR"] = str(own)
    tempfile.tempdir = None  # gettempdir() reads TMPDIR again
    workers = int(config.workerinput["workercount"])  # type: ignore[attr-defined]
    config.stash[_SPREAD] = _own_engine(worker, workers)


def _own_engine(worker: str, workers: int) -> bool:
    """Point this worker (gwK) at the K-th entry of REPROBUILD_TEST_ENGINES,
    ``DOCKER_HOST|CONTAINERS_STORAGE_CONF`` (an empty part keeps what is set); whether every
    worker has one."""
    entries = os.environ.get(ENGINES_VAR, "").split()
    if len(entries) < workers or not worker.startswith("gw"):
        return False
    host, _, storage = entries[int(worker[2:])].partition("|")
    if host:
        os.environ["DOCKER_HOST"] = host
    if storage:
        os.environ["CONTAINERS_STORAGE_CONF"] = storage
    return True


def pytest_unconfigure(config: pytest.Config) -> None:
    own = config.stash.get(_WORKER_TMP, None)
    if own is not None:
        shutil.rmtree(own, ignore_errors=True)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    spread = config.stash.get(_SPREAD, False)
    engine = [item for item in items if _reaches_engine(item)]
    shared = {item.path for item in engine if "determinism_image" in _fixtures(item)}
    for item in engine:
        if not spread:
            group = ENGINE_GROUP
        elif item.path in shared:
            group = DETERMINISM_GROUP
        else:
            group = f"{ENGINE_GROUP}:{item.path.relative_to(config.rootpath)}"
        item.add_marker(pytest.mark.xdist_group(group))
    if spread:  # the longest groups first, so that neither is left to run alone at the end:
        # the determinism image's users (xdist's first group, on one worker), then the public
        # projects' journeys (its second, on the other); the order within each part is kept
        first = [item for item in engine if item.path in shared]
        first += [i for i in engine if i.path not in shared and i.get_closest_marker("journey")]
        firsts = set(map(id, first))
        items[:] = first + [item for item in items if id(item) not in firsts]


def _fixtures(item: pytest.Item) -> set[str]:
    return set(getattr(item, "fixturenames", ()))


def _reaches_engine(item: pytest.Item) -> bool:
    marked = item.get_closest_marker("engine") or item.get_closest_marker("registry")
    return bool(marked or ENGINE_FIXTURES & _fixtures(item))


@pytest.fixture(scope="session", autouse=True)
def runtime_tmpdir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The temporary directory the in-image runtime gets when a test runs it on the host
    (``helpers.RUNTIME_TMP_VAR``): without REPRO_RUN_DIR it writes its run record into
    ``$TMPDIR/reprobuild-run`` (a container's own /tmp), which on the host would be the
    machine's /tmp, left behind by every test."""
    path = tmp_path_factory.mktemp("runtime-tmp")
    os.environ[RUNTIME_TMP_VAR] = str(path)
    yield path
    os.environ.pop(RUNTIME_TMP_VAR, None)


@pytest.fixture(scope="session", autouse=True)
def no_sdist_lookup() -> Iterator[None]:
    """No index is read to tell a hash-only lock's sdists from its wheels (init and build-lock
    would read PyPI for every package of the suite's requirements and Pipfile locks that the
    wheel cache lacks, and refuse the locks whose made-up hashes PyPI does not have): the
    tests of that lookup turn it on against a file:// index of their own."""
    old = os.environ.get("REPROBUILD_SDIST_LOOKUP")
    os.environ["REPROBUILD_SDIST_LOOKUP"] = "0"
    yield
    if old is None:
        os.environ.pop("REPROBUILD_SDIST_LOOKUP", None)
    else:
        os.environ["REPROBUILD_SDIST_LOOKUP"] = old


@pytest.fixture(scope="session", autouse=True)
def machine_wheels() -> Iterator[None]:
    """The machine's own wheel folders handed to the fetch the documented way,
    ``REPROBUILD_FIND_LINKS``: the fetch reads no ``PIP_*`` variable, and the suite's torch
    2.13 CPU (images/digits-torch, the determinism project) lies in this CI's
    ``PIP_FIND_LINKS`` folder (/opt/wheels), on no index it reaches. A value already set is
    kept; only absolute folders that exist are passed on."""
    var = "REPROBUILD_FIND_LINKS"
    old = os.environ.get(var)
    folders = [p for p in os.environ.get("PIP_FIND_LINKS", "").split() if Path(p).is_absolute()]
    folders = [p for p in folders if Path(p).is_dir()]
    if old is None and folders:
        os.environ[var] = " ".join(folders)
    indexes_var = "REPROBUILD_LOCAL_INDEXES"
    old_indexes = os.environ.get(indexes_var)
    indexes = _pip_local_indexes()
    if old_indexes is None and indexes:
        os.environ[indexes_var] = " ".join(indexes)
    yield
    if old is None:
        os.environ.pop(var, None)
    if old_indexes is None:
        os.environ.pop(indexes_var, None)


def _pip_local_indexes() -> list[str]:
    """The local (``file://``) simple indexes this machine's pip configuration names (a PyPI
    mirror on disk: /opt/pypi here), for ``REPROBUILD_LOCAL_INDEXES``: the fetch reads no pip
    configuration, and without them every engine test downloads its wheels from PyPI (CI
    went from 29 to 81 min when the fetch was isolated)."""
    try:
        out = subprocess.run(
            [sys.executable, "-m", "pip", "config", "list"],
            capture_output=True, text=True, timeout=60, check=False,
        ).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return []
    found: list[str] = []
    for line in out.splitlines():
        key, _, value = line.partition("=")
        if key.rsplit(".", 1)[-1] not in ("extra-index-url", "index-url"):
            continue
        for url in value.strip().strip("'\"").split():
            path = url.removeprefix("file://")
            if url.startswith("file:///") and Path(path).is_dir() and path not in found:
                found.append(path)
    return found


@pytest.fixture(scope="session")
def docker_client() -> Iterator[DockerClient]:
    import docker

    try:
        # Generous: removing a multi-GB image on a busy 2-core host can take minutes.
        client = docker.from_env(timeout=600)
        client.ping()
    except Exception as exc:
        pytest.fail(f"no Docker engine answers ({exc}); start one with `scripts/setup`")
    yield client
    client.close()


@pytest.fixture(scope="session")
def base_ref(docker_client: DockerClient) -> str:
    """The test base, pinned by digest in the loopback registry (checked to be there), and
    pulled into the engine where it lacks it (never removed: other tests may be using it).
    The pull-by-digest path is covered with a base of its own
    (test_image_cpu.py::test_base_is_pulled_by_digest_from_the_registry)."""
    ref = os.environ.get("REPROBUILD_TEST_BASE")
    state = STATE_DIR / "base-cpu.ref"
    if not ref:
        if not state.is_file():
            pytest.fail(f"no test base image recorded in {state}; run `scripts/setup`")
        ref = state.read_text().strip()
    import requests

    name, digest = ref.split("@")
    registry, repo = name.split("/", 1)
    try:
        answer = requests.head(
            f"http://{registry}/v2/{repo}/manifests/{digest}",
            headers={
                "Accept": "application/vnd.docker.distribution.manifest.v2+json, "
                "application/vnd.oci.image.manifest.v1+json"
            },
            timeout=10,
        )
    except requests.RequestException as exc:
        pytest.fail(f"loopback registry {registry} is not answering ({exc}); run `scripts/setup`")
    if answer.status_code != 200:
        pytest.fail(
            f"{ref} is not in the loopback registry (HTTP {answer.status_code}); "
            "run `scripts/setup`"
        )
    import docker.errors

    try:  # the engine holds it too, whichever test runs first (a worker's engine starts empty)
        docker_client.images.get(ref)
    except docker.errors.ImageNotFound:
        pulled = subprocess.run(
            ["docker", "pull", "-q", ref], capture_output=True, text=True, timeout=600, check=False
        )
        if pulled.returncode != 0:
            pytest.fail(f"the engine cannot pull {ref}: {pulled.stderr.strip()[-500:]}")
    return ref


@pytest.fixture(scope="session")
def determinism_image(base_ref: str, docker_client: DockerClient) -> Iterator[str]:
    """tests/data/projects/determinism built once per session (torch, tensorflow-cpu with
    Keras 3, scikit-learn, tqdm: about 3 GB) under a unique tag, removed at the end."""
    tag = f"reprobuild-test/determinism:{uuid.uuid4().hex[:12]}"
    build_json(str(DATA / "projects" / "determinism"), "--base", base_ref, "--tag", tag)
    yield tag
    docker_client.images.remove(tag, force=True)


@pytest.fixture
def project(tmp_path: Path) -> MakeProject:
    """Copy a project from tests/data/projects into a temp dir and return its path."""

    def copy(name: str) -> Path:
        dest = tmp_path / name
        shutil.copytree(DATA / "projects" / name, dest)
        return dest

    return copy


@pytest.fixture
def unique_tag(docker_client: DockerClient) -> Iterator[MakeTag]:
    """Make throwaway image tags; every image tagged with one is removed afterwards."""
    made: list[str] = []

    def make(stem: str = "img") -> str:
        tag = f"reprobuild-test/{stem}:{uuid.uuid4().hex[:12]}"
        made.append(tag)
        return tag

    yield make
    import docker.errors

    for tag in made:
        with contextlib.suppress(docker.errors.ImageNotFound):  # the test may not have built it
            docker_client.images.remove(tag, force=True)
