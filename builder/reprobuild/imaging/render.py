"""Render a build context: spec in, files out. Pure: no engine, no network, no clock.

The same spec and file contents always give byte-identical output, which is what the golden
files under tests/golden/ hold this module to.
"""

from __future__ import annotations

import hashlib
import importlib.resources
import json
import posixpath
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

import jinja2

from reprobuild.bases.refs import ImageRef
from reprobuild.errors import ReprobuildError
from reprobuild.imaging.layers import (
    INSTALL_SCRIPT,
    Group,
    group_files,
    in_place,
    install_script,
    plan_groups,
)
from reprobuild.locks.lockfile import Lock
from reprobuild_entrypoint import MANIFEST_PATH
from reprobuild_entrypoint.contract import LABEL_PREFIX
from reprobuild_entrypoint.envplan import image_env

Kind = Literal["cpu", "gpu"]
USER = "repro"
UID = 10001
ENTRYPOINT = ("/opt/venv/bin/python", "-I", "-m", "reprobuild_entrypoint")
DEFAULT_COMMAND = ("python",)
# Keys of labels that render sets; the stamp step adds the manifest-derived ones.
LOCK_LABEL = f"{LABEL_PREFIX}lock.sha256"
# The project's name (reprobuild.yaml's name): the engine's earlier builds of a project by it.
TITLE_LABEL = "org.opencontainers.image.title"


@dataclass(frozen=True)
class FileEntry:
    data: bytes
    mode: int = 0o644


@dataclass(frozen=True)
class RenderSpec:
    """Everything that decides the rendered context."""

    name: str
    variant: Kind
    base: ImageRef
    lock: Lock
    seed: int
    determinism: str
    builder_version: str
    # The image's default CPU mode, baked as REPROBUILD_IMAGE_CPU with its pins (issue 31);
    # nothing is baked for native, so native images render as before.
    cpu: str = "native"
    # The machine the image is for (``image --platform``): which levels ``portable`` pins.
    machine: str = "x86_64"
    command: tuple[str, ...] = ()
    apt: tuple[str, ...] = ()
    online: bool = False
    ca_cert: bytes | None = None
    epoch: int = 0
    revision: str | None = None
    # Install the wheels straight into the image through RUN --mount (buildah; the lock and
    # wheelhouse never reach a layer) instead of a build stage and a copy of its venv. Hermetic
    # builds only: an --online build keeps the stage (its CA bundle, its index options).
    mount_install: bool = False
    version: str | None = None
    # The base image's own ENTRYPOINT (NGC images have one): ours replaces it and chains it.
    # None: not known (a render without the base at hand); `image` always knows it.
    base_entrypoint: tuple[str, ...] | None = None
    # The pinned build requirements of the sdists the lock builds
    # (reprobuild.locks.buildlock); None when it builds none.
    build_lock: Lock | None = None
    # Seconds one sdist's build may run in that stage (reprobuild.yaml's build_timeout).
    build_timeout: int = 3600
    # The sha256 of the uv binary in the context (``uv``), where uv installs the wheels in the
    # image instead of pip: a hermetic RUN --mount install into a venv of its own (CPU), the
    # host's pinned uv able to run on the base (reprobuild.imaging.image.uv_installer). Its
    # sha256 is in the step's text: another uv, another step. None: pip, as before.
    uv_sha256: str | None = None
    app_files: dict[str, FileEntry] = field(default_factory=dict)
    runtime_files: dict[str, FileEntry] = field(default_factory=dict)
    # The project's own package (under src/ or at the top), which its lock holds as the
    # (editable) project root and so does not install: /app/src or /app on the import path, as
    # `uv run` and `poetry run` find it (reprobuild.imaging.plan.own_src_path). None: nothing.
    app_import_path: str | None = None


CREATED_LABEL = "org.opencontainers.image.created"


def layers_epoch(epoch: int) -> int:
    """The epoch buildah builds an image's layers at, under the stamp: BUILD_EPOCH (1980), or
    the project's own where that is earlier (no file is ever newer than SOURCE_DATE_EPOCH).
    Not the project's: its last commit time moves with every commit, and with it every step's
    text and file times, so a committed code change would rebuild every layer. The stamp
    gives the image the project's epoch (its config's created and the created label)."""
    return min(epoch, BUILD_EPOCH)


def epoch_iso(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def static_labels(spec: RenderSpec) -> dict[str, str]:
    """Labels known before the build. OCI keys plus io.reprobuild.* keys."""
    labels = {
        CREATED_LABEL: epoch_iso(spec.epoch),
        TITLE_LABEL: spec.name,
        "org.opencontainers.image.base.name": spec.base.name
        + (f":{spec.base.tag}" if spec.base.tag else ""),
        "org.opencontainers.image.base.digest": spec.base.digest or "",
        f"{LABEL_PREFIX}builder.version": spec.builder_version,
        LOCK_LABEL: spec.lock.sha256,
        f"{LABEL_PREFIX}seed": str(spec.seed),
        f"{LABEL_PREFIX}determinism": spec.determinism,
        f"{LABEL_PREFIX}variant": spec.variant,
    }
    if spec.revision:
        labels["org.opencontainers.image.revision"] = spec.revision
    if spec.version:
        labels["org.opencontainers.image.version"] = spec.version
    return labels


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def dockerfile_str(value: object) -> str:
    """Quote a value for a Dockerfile LABEL/ENV: a double-quoted string in which backslash,
    quote and ``$`` are escaped, so the value is data and never expands or ends the line."""
    text = str(value)
    if _CONTROL.search(text):
        raise ReprobuildError(f"value {text!r} contains a control character and cannot be a label")
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$")
    return f'"{escaped}"'


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("reprobuild.imaging", "templates"),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["dockerfile_str"] = dockerfile_str
    env.filters["tojson"] = lambda v: json.dumps(list(v))
    return env


def determinism_env(spec: RenderSpec) -> dict[str, str]:
    """The image's determinism variables, with the CPU mode it defaults to when not native."""
    env = image_env(spec.seed, spec.determinism, spec.variant, cpu=spec.cpu, machine=spec.machine)
    if spec.cpu != "native":
        env["REPROBUILD_IMAGE_CPU"] = spec.cpu
    return env


def _requirements_sha256(spec: RenderSpec) -> str | None:
    """The sha256 of the requirements a native lock renders to (its pins follow from the lock,
    its selection and the Python: buildah's cache must see all three); None for the other
    formats, whose pins follow from the lock's bytes alone."""
    if spec.lock.choice is None:
        return None
    text = spec.lock.render(index_options=spec.online).encode()
    return hashlib.sha256(text).hexdigest()


def layered(spec: RenderSpec) -> bool:
    """Whether the venv is built as layers by package (:mod:`reprobuild.imaging.layers`): a
    hermetic RUN --mount install by uv (buildah, BuildKit from an epoch; a CPU image)."""
    return spec.mount_install and not spec.online and spec.uv_sha256 is not None


def package_groups(spec: RenderSpec) -> tuple[Group, ...]:
    """The venv's package layers where the image has them, else none."""
    return plan_groups(spec.lock) if layered(spec) else ()


def render_dockerfile(spec: RenderSpec) -> str:
    if not spec.base.digest:
        raise ReprobuildError(f"base {spec.base} is not pinned by digest")
    template = _environment().get_template("Dockerfile.j2")
    groups = package_groups(spec)
    return template.render(
        builder_version=spec.builder_version,
        lock_name=spec.lock.path.name,
        lock_sha256=spec.lock.sha256,
        requirements_sha256=_requirements_sha256(spec),
        base_pinned=spec.base.by_digest(),
        epoch=spec.epoch,
        created=epoch_iso(spec.epoch),
        online=spec.online,
        mount_install=spec.mount_install and not spec.online,
        ca_cert=spec.ca_cert is not None,
        apt=spec.apt,
        uid=UID,
        user=USER,
        seed=spec.seed,
        determinism=spec.determinism,
        variant=spec.variant,
        has_app=bool(spec.app_files),
        app_import_path=spec.app_import_path,
        base_entrypoint=json.dumps(list(spec.base_entrypoint)) if spec.base_entrypoint else "",
        determinism_env=sorted(determinism_env(spec).items()),
        entrypoint=ENTRYPOINT,
        command=spec.command or DEFAULT_COMMAND,
        labels=sorted(static_labels(spec).items()),
        build_sources=bool(spec.lock.sources),
        build_epoch=BUILD_EPOCH,
        build_timeout=spec.build_timeout,
        wheel_count=len(spec.lock.wheel_requirements),
        uv_sha256=spec.uv_sha256 if spec.mount_install and not spec.online else None,
        layered=layered(spec),
        groups=groups,
        in_place=in_place(groups),
        install_script=INSTALL_SCRIPT,
        install_sha256=hashlib.sha256(install_script()).hexdigest(),
        uv_record=UV_RECORD,
        built_requirements=BUILT_REQUIREMENTS,
    )


# The wheels the wheel-build stage built, as requirements for the same install as the lock's
# (built.json: each wheel's file and sha256): ``NAME @ file:///...whl --hash=sha256:...``. One
# resolution, every hash checked: a locked wheel that depends on a package built from its sdist
# (omegaconf on antlr4-python3-runtime, hydra's stack) finds it, which an install of the lock
# alone cannot (its dependency is in no wheelhouse). argv[1]: the folder holding them.
BUILT_REQUIREMENTS = (
    "import json, sys; d = sys.argv[1]; "
    "[print(b['name'] + ' @ file://' + d + '/' + b['wheel'] + ' --hash=' + b['wheel_sha256']) "
    "for b in json.load(open(d + '/built.json'))]"
)


# uv writes uv_cache.json into each dist-info it installs (the install's wall clock, for its
# own cache checks) and lists it in RECORD: both go, in the install's own step, or no two
# builds would give the same layer. Nothing else of uv's install depends on the day or the run
# (its .pyc files are the same bytes with 1, 2 or 8 workers: tests/engine/test_buildah.py).
UV_RECORD = (
    "import pathlib, sysconfig; p = pathlib.Path(sysconfig.get_paths()['purelib']); "
    "[(r.write_bytes(b''.join(line for line in r.read_bytes().splitlines(True) "
    "if not line.startswith(f.parent.name.encode() + b'/uv_cache.json,'))), f.unlink()) "
    "for f in sorted(p.glob('*.dist-info/uv_cache.json')) for r in [f.parent / 'RECORD']]"
)


# The wheel-build stage's SOURCE_DATE_EPOCH (1980-01-01, the earliest time a zip file holds):
# the built wheels depend on their inputs alone, never on the project's commit time.
BUILD_EPOCH = 315532800
BUILD_DIR = "build"
# Where the context holds reprobuild's pinned uv: in a folder, which the steps mount (the
# Dockerfile's ``source=bin``), not the file itself.
UV_IN_CONTEXT = "bin/uv"


def build_files(spec: RenderSpec) -> dict[str, FileEntry]:
    """The wheel-build stage's files (``build/``): the build lock as pip reads it, the list
    of sdists to build (``sources.json``) and the build script; the host adds ``sdists/`` and
    ``wheels/``. Empty when the lock builds nothing."""
    sources = [r for r in spec.lock.sources if r.source is not None]
    if not sources:
        return {}
    if spec.build_lock is None:
        raise ReprobuildError(
            f"{spec.lock.path.name} builds packages from their sdists but no build lock was given"
        )
    listed = [
        {
            "name": r.name,
            "version": r.version,
            "filename": r.source.filename,
            "sha256": r.source.sha256,
        }
        for r in sources
        if r.source is not None
    ]
    script = (
        importlib.resources.files("reprobuild.imaging")
        .joinpath("templates/build_sdists.py")
        .read_text(encoding="utf-8")
    )
    return {
        f"{BUILD_DIR}/requirements.lock": FileEntry(
            spec.build_lock.render(index_options=False).encode()
        ),
        f"{BUILD_DIR}/sources.json": FileEntry(
            (json.dumps(listed, indent=2, sort_keys=True) + "\n").encode()
        ),
        f"{BUILD_DIR}/build_sdists.py": FileEntry(script.encode()),
    }


WHEELS_KEEP = "wheels/.keep"


def render_context(spec: RenderSpec) -> dict[str, FileEntry]:
    """The whole build context as relative path -> file. ``wheels/`` is left for the
    image command to fill (hermetic mode); ``app/`` holds the project's include files."""
    files: dict[str, FileEntry] = {
        "Dockerfile": FileEntry(render_dockerfile(spec).encode()),
        "requirements.lock": FileEntry(spec.lock.render(index_options=spec.online).encode()),
    }
    if not spec.online:
        files[WHEELS_KEEP] = FileEntry(b"")
    if spec.online and spec.ca_cert is not None:
        files["ca/ca.pem"] = FileEntry(spec.ca_cert)
    files.update(build_files(spec))
    if layered(spec):  # the stages' install script, even where every package is an sdist
        files.update(
            (rel, FileEntry(data)) for rel, data in group_files(package_groups(spec)).items()
        )
    for rel, entry in spec.app_files.items():
        files[f"app/{rel}"] = entry
    for rel, entry in spec.runtime_files.items():
        files[f"runtime/{rel}"] = entry
    return dict(sorted(files.items()))


def render_stamp(
    image: str, manifest_json: bytes, labels: dict[str, str], sbom_json: bytes | None = None
) -> dict[str, FileEntry]:
    """The second, tiny build that adds the manifest file (and the SBOM, beside it: one layer)
    and its labels on top of ``image``."""
    from reprobuild.imaging.sbom import SBOM_PATH

    files = {posixpath.basename(MANIFEST_PATH): FileEntry(manifest_json)}
    if sbom_json is not None:
        files[posixpath.basename(SBOM_PATH)] = FileEntry(sbom_json)
    folder = posixpath.dirname(MANIFEST_PATH)  # the SBOM's too (tests/unit/test_sbom.py)
    text = (
        _environment()
        .get_template("Stamp.j2")
        .render(image=image, files=sorted(files), folder=folder, labels=sorted(labels.items()))
    )
    return {"Dockerfile": FileEntry(text.encode()), **files}
