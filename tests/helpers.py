"""Helpers the tests import (``from helpers import ...``); conftest.py holds only fixtures.

Everything that touches the engine here leaves nothing behind that another test, or the next
run on the same engine, could come to depend on: tags are unique per call and removed after.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import requests
from packaging.markers import Marker
from packaging.utils import canonicalize_name

from reprobuild.backends.engine import Engine
from reprobuild.locks.lockfile import Selection

if TYPE_CHECKING:
    # The Docker SDK ships no type information (mypy sees it as Any); the name documents intent.
    from docker import DockerClient

DATA = Path(__file__).parent / "data"
REPO = Path(__file__).parent.parent
REGISTRY_PORT = os.environ.get("REPROBUILD_REGISTRY_PORT", "5000")
REGISTRY = f"127.0.0.1:{REGISTRY_PORT}"
STATE_DIR = Path(os.environ.get("REPROBUILD_STATE_DIR", "/var/lib/reprobuild-dev"))
# Set by conftest for the whole session: the runtime's TMPDIR when a test runs it on the host.
RUNTIME_TMP_VAR = "REPROBUILD_TEST_RUNTIME_TMP"


def runtime_tmp() -> dict[str, str]:
    """``{"TMPDIR": ...}`` for an environment the in-image runtime runs in on the host, so
    that its default run records land in the session's temporary folder, not in /tmp."""
    return {"TMPDIR": os.environ[RUNTIME_TMP_VAR]}


# What the `project` fixture returns: copy tests/data/projects/NAME to a temp dir, give its path.
MakeProject = Callable[[str], Path]


class MakeTag(Protocol):
    """What the `unique_tag` fixture returns: a throwaway tag, removed after the test."""

    def __call__(self, stem: str = ...) -> str: ...


def run_cli(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 900
) -> subprocess.CompletedProcess[str]:
    """Run the installed ``reprobuild`` exactly as a user would, in a child process."""
    full_env = {**os.environ, "SOURCE_DATE_EPOCH": "0", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "reprobuild", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=full_env,
        timeout=timeout,
        check=False,
    )


def image_labels(docker_client: DockerClient, tag: str) -> dict[str, str]:
    return dict(docker_client.images.get(tag).attrs["Config"]["Labels"] or {})


def build_json(*args: str, **kw: Any) -> dict[str, Any]:
    proc = run_cli("image", "--json", *args, **kw)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data: dict[str, Any] = json.loads(proc.stdout)
    return data


def tar_context(files: dict[str, tuple[bytes, int]]) -> io.BytesIO:
    """An in-memory build context: {name: (content, mode)}."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, (data, mode) in sorted(files.items()):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    return buf


@contextlib.contextmanager
def published_image(
    docker_client: DockerClient, context: io.BytesIO, stem: str, *, keep_local: bool = True
) -> Iterator[str]:
    """Build ``context``, push it to the loopback registry under a tag unique to this call,
    and yield its digest reference (``REGISTRY/reprobuild-test/STEM@sha256:...``). With
    ``keep_local=False`` the engine's copy is removed before the yield, so whoever uses the
    reference must pull it from the registry.

    Afterwards only what this call made is untagged (never by image ID, never forced: images
    built on it keep it as a parent). Docker drops a repository's digest references together
    with its last tag, so the digest reference is removed only if it is still there, and any
    other failure is an error, not something to swallow."""
    import docker.errors

    repo = f"{REGISTRY}/reprobuild-test/{stem}"
    tag = uuid.uuid4().hex[:16]
    if Engine(docker_client).image_store()[1]:
        # the API's classic builder leaves uncompressed layers in the containerd store, pushed
        # as such under a Docker schema 2 manifest, which buildah cannot build on (the hint in
        # buildah.bud); BuildKit's layers are gzipped, as any base in a registry
        subprocess.run(
            ["docker", "build", "-q", "-t", f"{repo}:{tag}", "-"],
            input=context.getvalue(),
            check=True,
            capture_output=True,
            env={**os.environ, "DOCKER_BUILDKIT": "1"},
        )
    else:
        docker_client.images.build(
            fileobj=context, custom_context=True, tag=f"{repo}:{tag}", rm=True
        )
    tagged = True
    try:
        for line in docker_client.images.push(repo, tag=tag, stream=True, decode=True):
            if "error" in line:
                raise RuntimeError(f"pushing {repo}:{tag} failed: {line['error']}")
        digests = docker_client.images.get(f"{repo}:{tag}").attrs["RepoDigests"]
        digest_ref = next(d for d in digests if d.startswith(f"{repo}@"))
        if not keep_local:
            docker_client.images.remove(f"{repo}:{tag}")
            tagged = False
            with contextlib.suppress(docker.errors.ImageNotFound):
                docker_client.images.remove(digest_ref)
        yield digest_ref
    finally:
        if tagged:
            docker_client.images.remove(f"{repo}:{tag}")
    with contextlib.suppress(docker.errors.ImageNotFound):
        docker_client.images.remove(digest_ref)


def run_record_paths(folder: Path) -> list[Path]:
    """The run records (``run-<id>.json``) in a run directory, without the framework records
    (``-frameworks-``) and exit records (``-exit.json``) written beside them."""
    return sorted(
        p
        for p in folder.glob("run-*.json")
        if "-frameworks-" not in p.name and not p.name.endswith("-exit.json")
    )


# ---- a stand-in engine for multi-node renderings (compose --nodes, k8s) ----

FAKE_ID = "sha256:" + "ab" * 32


def fake_manifest(*names: str) -> bytes:
    """A real manifest (tests/data/diff) with these distributions instead of its own."""
    data = json.loads((DATA / "diff" / "manifest-tiny.json").read_text())
    model = data["distributions"][0]
    data["distributions"] = [model | {"name": n} for n in names]
    return json.dumps(data).encode()


class FakeImageEngine:
    """Stands in for reprobuild.backends.engine.Engine: one image, its labels, CMD, manifest."""

    def __init__(self, tag: str, dists: tuple[str, ...], variant: str = "cpu") -> None:
        from reprobuild.imaging.manifest import MANIFEST_LABEL

        self.tag = tag
        self.raw = fake_manifest(*dists)
        labels = {
            "io.reprobuild.variant": variant,
            MANIFEST_LABEL: hashlib.sha256(self.raw).hexdigest(),
        }
        self.attrs = {
            "Id": FAKE_ID,
            "RepoDigests": [],
            "Config": {"Labels": labels, "Cmd": ["python", "train.py"]},
        }
        self.read: list[str] = []

    def image_id(self, ref: str) -> str | None:
        return FAKE_ID if ref in (self.tag, FAKE_ID) else None

    def inspect(self, ref: str) -> dict[str, Any]:
        return self.attrs

    def read_file(self, image: str, path: str, *, max_bytes: int = 0) -> bytes:
        self.read.append(path)
        return self.raw


# `--env` values that YAML or an expander could take for something else: each must reach the
# container as the same string (tests/unit/test_userenv.py, test_kube.py, test_compose*.py).
TRICKY_ENV_VALUES: dict[str, str] = {
    "QUOTES": "it's \"quoted\" 'twice'",
    "HASH": "a # not a comment",
    "COLON": "key: value",
    "DASH": "- leading dash",
    "STAR": "*alias",
    "AMP": "&anchor",
    "BANG": "!!python/object:os.system",
    "UNICODE": "h\u00e9llo \u2014 \u4e16\u754c \U0001f680 \u200b\u00a0",
    "YES": "yes",
    "NO": "no",
    "NULL": "null",
    "TILDE": "~",
    "HEX": "0x10",
    "OCTAL": "010",
    "FLOAT": "1e3",
    "EMPTY": "",
    "SPACES": "  padded  ",
    "DOLLARS": "$HOME ${X:?boom} $(whoami) $$ $",
    "FLOW": "[a, {b: c}]",
    "BLOCK": "| >- ? %TAG @at `tick`",
    "BACKSLASH": "C:\\temp\\new \\n",
    "EQUALS": "a=b=c",
}


def exported_pins(path: Path, python: str = "3.11") -> dict[str, str]:
    """``name==version ; marker`` lines of a tool's export file, markers evaluated for the
    image (CPython ``python`` on linux x86_64)."""
    return parse_export(path.read_text(), path.name, python)


def parse_export(text: str, label: str = "the export", python: str = "3.11") -> dict[str, str]:
    """``name==version ; marker`` lines of a tool's export (``uv export``, ``poetry export``,
    ``pipenv requirements``, ``pdm export``), markers evaluated for the image."""
    env = Selection(python=python).environment()
    out: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "-")):
            continue
        spec, _, marker = line.partition(";")
        if marker.strip() and not Marker(marker.strip()).evaluate(env):
            continue
        name, sep, version = spec.strip().partition("==")
        assert sep, f"{label}: {line!r} is not pinned"
        out[canonicalize_name(name)] = version.strip()
    return out


MANIFEST_TYPES = (
    "application/vnd.oci.image.manifest.v1+json, "
    "application/vnd.docker.distribution.manifest.v2+json"
)


def registry_manifest(repository: str, reference: str) -> dict[str, Any]:
    """The loopback registry's image manifest of ``repository`` at ``reference`` (a tag or a
    digest)."""
    answer = requests.get(
        f"http://{REGISTRY}/v2/{repository}/manifests/{reference}",
        headers={"Accept": MANIFEST_TYPES},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text[:500]
    document: dict[str, Any] = answer.json()
    return document


def registry_digest(ref: str) -> str:
    """The loopback registry's digest of ``ref`` (REGISTRY/REPO:TAG)."""
    name, tag = ref.rsplit(":", 1)
    repo = name.split("/", 1)[1]
    answer = requests.head(
        f"http://{REGISTRY}/v2/{repo}/manifests/{tag}",
        headers={
            "Accept": "application/vnd.oci.image.manifest.v1+json, "
            "application/vnd.docker.distribution.manifest.v2+json, "
            "application/vnd.oci.image.index.v1+json"
        },
        timeout=10,
    )
    assert answer.status_code == 200, (ref, answer.status_code)
    return answer.headers["Docker-Content-Digest"]


# --- source pins: a git repository and a uv workspace made for a test (issue 39) -----------


def _uv_bin() -> str:
    from uv import find_uv_bin

    return str(find_uv_bin())


def git_in(cwd: Path, *args: str) -> str:
    proc = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
    )
    return proc.stdout.strip()


def make_git_package(root: Path, name: str = "gitdep", version: str = "1.2.0") -> str:
    """A one-commit git repository holding a setuptools package; its commit."""
    root.mkdir(parents=True)
    (root / "src" / name).mkdir(parents=True)
    (root / "pyproject.toml").write_text(
        f'[project]\nname = "{name}"\nversion = "{version}"\n\n[build-system]\n'
        'requires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n'
    )
    (root / "src" / name / "__init__.py").write_text("VALUE = 42\n")
    git_in(root, "init", "-q", "-b", "main")
    git_in(root, "add", "-A")
    git_in(root, "commit", "-qm", "init")
    return git_in(root, "rev-parse", "HEAD")


def make_uv_workspace(tmp: Path, rev: str = "") -> tuple[Path, str]:
    """A uv project with an editable workspace member (packages/core) and a git dependency,
    locked by uv; the project folder and the git commit."""
    commit = make_git_package(tmp / "gitdep")
    project = tmp / "proj"
    (project / "packages" / "core" / "src" / "core").mkdir(parents=True)
    (project / "pyproject.toml").write_text(
        '[project]\nname = "demo"\nversion = "0.1.0"\nrequires-python = ">=3.11"\n'
        'dependencies = ["gitdep", "core"]\n\n[tool.uv.sources]\n'
        f'gitdep = {{ git = "file://{tmp}/gitdep", rev = "{rev or commit}" }}\n'
        'core = { workspace = true }\n\n[tool.uv.workspace]\nmembers = ["packages/*"]\n\n'
        '[build-system]\nrequires = ["setuptools>=61"]\n'
        'build-backend = "setuptools.build_meta"\n'
    )
    (project / "packages" / "core" / "pyproject.toml").write_text(
        '[project]\nname = "core"\nversion = "0.3.0"\n\n[build-system]\n'
        'requires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n'
    )
    (project / "packages" / "core" / "src" / "core" / "__init__.py").write_text('NAME = "core"\n')
    subprocess.run(
        [_uv_bin(), "lock", "--offline", "--quiet"], cwd=project, check=True, capture_output=True
    )
    return project, commit


def make_pure_wheel(folder: Path, name: str, tag: str = "py3-none-any") -> Path:
    """A real, installable wheel of ``name`` 1.0 whose module's ``NAME`` is ``name``."""
    import zipfile

    mod = name.replace("-", "_")
    path = folder / f"{mod}-1.0-{tag}.whl"
    info = f"{mod}-1.0.dist-info"
    files = {
        f"{mod}/__init__.py": f"NAME = {name!r}\n".encode(),
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n".encode(),
        f"{info}/WHEEL": f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
        f"Tag: {tag}\n".encode(),
    }
    record = "".join(f"{n},,\n" for n in [*files, f"{info}/RECORD"])
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as zf:
        for n, data in files.items():
            zf.writestr(n, data)
        zf.writestr(f"{info}/RECORD", record)
    return path
