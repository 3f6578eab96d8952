"""The probe step of ``reprobuild image``: what the built image holds, read by running it
once (its distributions, Python, the SBOM's facts, a GPU image's stack), checked against the
lock, into the manifest and the SBOM."""

from __future__ import annotations

import contextlib
import hashlib
import json
from dataclasses import replace
from typing import Any, Protocol

from reprobuild import __version__
from reprobuild._util import jsonload
from reprobuild._util.fsutil import write_atomic
from reprobuild.backends.engine import RunResult
from reprobuild.bases import gpustack as stacklib
from reprobuild.errors import (
    EngineError,
    ReprobuildError,
)
from reprobuild.imaging import sbom
from reprobuild.imaging.manifest import BUILT_KEYS, Distribution, Manifest
from reprobuild.imaging.render import (
    RenderSpec,
    epoch_iso,
)
from reprobuild.locks.lockfile import Lock
from reprobuild.locks.wheels import cache_root
from reprobuild_entrypoint.contract import MODE_VAR

# One process in the built image, the runtime off (the start-up hook configures nothing while
# frameworks are imported): the runtime's probe (``--stack``: GPU images also report their
# frameworks' build facts) and the SBOM's facts (reprobuild.imaging.sbomfacts, whose source is
# the first argument), printed as one JSON object. One container, not one each: a container
# start is about 0.4 s of a code-only rebuild.
PROBE = [
    "/opt/venv/bin/python",
    "-I",
    "-c",
    "import json, sys\n"
    "from reprobuild_entrypoint import probe\n"
    "facts = {'__name__': 'sbomfacts'}\n"
    "exec(compile(sys.argv[1], 'sbomfacts.py', 'exec'), facts)\n"
    "out = {'probe': probe.probe(), 'sbom': facts['facts']()}\n"
    "if '--stack' in sys.argv[2:]:\n"
    "    out['probe']['frameworks'] = probe.frameworks()\n"
    "json.dump(out, sys.stdout, sort_keys=True, default=str)\n",
]


class Prober(Protocol):
    """Where the built image is probed: the engine, or buildah's storage (buildah.Prober)."""

    def run(
        self,
        image: str,
        command: list[str],
        *,
        entrypoint: list[str] | None = None,
        environment: dict[str, str] | None = None,
    ) -> RunResult: ...

    def inspect(self, image: str) -> dict[str, Any]: ...


class ProbeCache:
    """The image probe's answer kept by what it can depend on: the image's layers but the
    project's code (the probe runs ``python -I``: /app is not on its path), the image's
    environment, and the probe's command and environment. A code-only rebuild then probes
    nothing (about a second of a few here); any other change is a new key. Only where the
    layer with the code is known to be the last (``COPY app/ /app/``, as the Dockerfile
    renders it): else every layer is in the key."""

    def __init__(self, inner: Prober, config: dict[str, Any], *, app: bool) -> None:
        self._inner, self._config = inner, config
        self._layers = self._without_app(config) if app else self._all_layers(config)

    @staticmethod
    def _all_layers(config: dict[str, Any]) -> list[str]:
        return [str(d) for d in (config.get("rootfs") or {}).get("diff_ids") or []]

    @classmethod
    def _without_app(cls, config: dict[str, Any]) -> list[str]:
        layers = cls._all_layers(config)
        history = [h for h in config.get("history") or [] if not h.get("empty_layer")]
        last = str(history[-1].get("created_by", "")) if history else ""
        if layers and "COPY" in last and last.rstrip().endswith(" /app/"):
            return layers[:-1]
        return layers

    def key(self, command: list[str], entrypoint: list[str] | None, env: dict[str, str]) -> str:
        config = self._config.get("config") or {}
        what = [self._layers, sorted(config.get("Env") or []), entrypoint, command, env]
        return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()

    def run(
        self,
        image: str,
        command: list[str],
        *,
        entrypoint: list[str] | None = None,
        environment: dict[str, str] | None = None,
    ) -> RunResult:
        env = environment or {}
        cached = cache_root() / "probes" / f"v1-{self.key(command, entrypoint, env)}.json"
        with contextlib.suppress(OSError):
            if cached.is_file() and cached.stat().st_size <= sbom.MAX_FACTS_BYTES:
                return RunResult(0, cached.read_bytes(), b"")
        result = self._inner.run(image, command, entrypoint=entrypoint, environment=env)
        if result.exit_code == 0:
            with contextlib.suppress(OSError):  # only a cache
                write_atomic(cached, result.stdout)
        return result

    def inspect(self, image: str) -> dict[str, Any]:
        found = self._config.get("config")
        return {"Config": found if isinstance(found, dict) else {}}


def check_installed(lock: Lock, dists: tuple[Distribution, ...]) -> None:
    """The image's venv must hold exactly what the lock pins: nothing more, nothing else. A
    lock may pin a package twice, each under a marker (one version per machine): the image's
    is one of them."""
    pinned: dict[str, list[str]] = {}
    for r in lock.requirements:
        pinned.setdefault(r.name, []).append(r.version)
    for dist in dists:
        versions = pinned.get(dist.name)
        if versions is None:
            raise ReprobuildError(
                f"the image holds {dist.name}=={dist.version}, which the lock does not pin"
            )
        if dist.version not in versions:
            raise ReprobuildError(
                f"the image holds {dist.name}=={dist.version} but the lock pins "
                f"{' or '.join(versions)}"
            )
    installed = {d.name for d in dists}
    absent = sorted(
        r.name for r in lock.requirements if r.marker is None and r.name not in installed
    )
    if absent:
        raise ReprobuildError(f"locked distributions missing from the image: {', '.join(absent)}")


def image_manifest(
    engine: Prober, spec: RenderSpec, image: str, build: dict[str, Any]
) -> tuple[Manifest, bytes]:
    """The manifest and the SBOM (:mod:`reprobuild.imaging.sbom`) of the built image; the
    manifest records the SBOM's sha256."""
    gpu = spec.variant == "gpu"
    result = engine.run(
        image,
        [sbom.facts_source(), *(["--stack"] if gpu else [])],
        entrypoint=PROBE,
        environment={MODE_VAR: "off", "REPRO_QUIET": "1"},
    )
    if result.exit_code != 0:
        raise EngineError(
            f"the probe failed in the built image (exit {result.exit_code}): "
            f"{result.stderr.decode(errors='replace').strip()[-300:]}"
        )
    what = "the probe output of the built image"
    out = jsonload.loads(result.stdout, what, max_bytes=sbom.MAX_FACTS_BYTES, error=EngineError)
    if not isinstance(out, dict) or not all(
        isinstance(out.get(k), dict) for k in ("probe", "sbom")
    ):
        raise EngineError(f"{what} is not a JSON object with a probe and the SBOM's facts")
    probe, facts = out["probe"], out["sbom"]
    dists = tuple(
        sorted(
            Distribution(d["name"], d["version"], "lock" if d.get("in_venv", True) else "base")
            for d in probe["distributions"]
        )
    )
    check_installed(spec.lock, tuple(d for d in dists if d.origin == "lock"))
    built = built_from_source(engine, spec, image)
    stack, gpu_facts = gpu_stack(engine, image, probe, dists) if gpu else ({}, None)
    manifest = Manifest(
        builder_version=spec.builder_version,
        name=spec.name,
        variant=spec.variant,
        base_ref=str(spec.base),
        base_digest=spec.base.digest or "",
        lock_file=spec.lock.path.name,
        lock_sha256=spec.lock.sha256,
        lock_format=spec.lock.format_name,
        lock_selection=spec.lock.choice.to_dict() if spec.lock.choice else None,
        seed=spec.seed,
        determinism=spec.determinism,
        created=epoch_iso(spec.epoch),
        python_version=str(probe["python"]["version"]),
        machine=str(probe["platform"]["machine"]),
        distributions=dists,
        stack=stack,
        gpu=gpu_facts,
        build=build,
        built_from_source=built,
        build_lock=(
            {"file": spec.build_lock.path.name, "sha256": spec.build_lock.sha256}
            if spec.build_lock is not None
            else None
        ),
    )
    document = sbom_document(manifest, spec.lock, facts, spec.epoch)
    return replace(manifest, sbom_sha256=sbom.sha256(document)), document


def sbom_document(manifest: Manifest, lock: Lock, facts: dict[str, Any], epoch: int) -> bytes:
    """:func:`sbom.make_sbom`, kept by everything it is made of: the manifest (before it records
    the SBOM's sha256), the lock's requirements, the probe's facts, the epoch, and the code that
    makes it (reprobuild's version, the sha256 of the module's source, CycloneDX's version). A
    code-only rebuild then makes none: CycloneDX's model and serializer took 0.2 to 0.4 s of a
    2.4 s torch rebuild here."""
    what = [
        __version__,
        sbom.code_sha256(),
        manifest.to_json().decode(),
        repr(lock.requirements),
        facts,
        epoch,
    ]
    key = hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()
    cached = cache_root() / "sboms" / f"v1-{key}.json"
    with contextlib.suppress(OSError):
        if cached.is_file() and cached.stat().st_size <= sbom.MAX_SBOM_BYTES:
            return cached.read_bytes()
    document = sbom.make_sbom(manifest, lock, facts, epoch)
    with contextlib.suppress(OSError):  # only a cache
        write_atomic(cached, document)
    return document


BUILT_JSON = "/opt/reprobuild/built/built.json"


def built_from_source(engine: Prober, spec: RenderSpec, image: str) -> list[dict[str, str]] | None:
    """What the wheel-build stage built (its ``built.json`` in the image), checked against
    the lock: one entry per sdist the lock builds, each with the locked sdist's sha256."""
    if spec.build_lock is None or not spec.lock.sources:
        return None
    result = engine.run(image, [BUILT_JSON], entrypoint=["cat"])
    what = f"{BUILT_JSON} in the built image"
    if result.exit_code != 0:
        raise EngineError(f"cannot read {what}: {result.stderr.decode(errors='replace')[-200:]}")
    data = jsonload.loads(result.stdout, what, max_bytes=1 << 20, error=EngineError)
    want = {r.name: r.source.sha256 for r in spec.lock.sources if r.source is not None}
    if not isinstance(data, list) or not all(
        isinstance(b, dict) and all(isinstance(b.get(k), str) for k in BUILT_KEYS) for b in data
    ):
        raise EngineError(f"{what} is not a list of {{{', '.join(BUILT_KEYS)}}}")
    got = {b["name"]: b["sdist_sha256"] for b in data}
    if got != want:
        raise EngineError(f"{what} does not list the lock's sdists: {sorted(got)}")
    # A git commit or a project folder packed on the host: where it came from (the commit).
    origins = {r.name: r.source.origin for r in spec.lock.sources if r.source and r.source.origin}
    return [
        {k: str(b[k]) for k in BUILT_KEYS}
        | ({"origin": origins[b["name"]]} if b["name"] in origins else {})
        for b in sorted(data, key=lambda b: b["name"])
    ]


def gpu_stack(
    engine: Prober, image: str, probe: dict[str, Any], dists: tuple[Distribution, ...]
) -> tuple[dict[str, Any], dict[str, str] | None]:
    """CUDA, cuDNN, NCCL and framework versions as the base declares them (its ENV and
    labels), as the frameworks report them (the --stack probe; no GPU needed) and as the
    lock's CUDA wheels installed in the image say, plus the minimum host driver the CUDA
    version needs, for the in-image host check. ``gpu.stack`` says where CUDA came from:
    ``base`` (an NGC base declares it) or ``wheels`` (the lock's own, on a plain base: such
    an image runs on CPU too)."""
    from reprobuild_entrypoint.drivercheck import required_driver

    frameworks = probe.get("frameworks", {})
    config = engine.inspect(image).get("Config") or {}
    declared = stacklib.declared(stacklib.parse_env(config.get("Env")), config.get("Labels") or {})
    reported = stacklib.reported(frameworks)
    wheels = stacklib.from_wheels([(d.name, d.version) for d in dists if d.origin == "lock"])
    stack: dict[str, Any] = {"declared": declared, "reported": reported}
    if wheels:
        stack["wheels"] = wheels
    constraint = probe.get("pip_constraint") or {}
    if constraint.get("sha256"):
        stack["pip_constraint"] = {"path": constraint["path"], "sha256": constraint["sha256"]}
    stack["labels"] = stacklib.stack_labels(stack)
    cuda = (
        declared.get("cuda")
        or reported.get("torch.cuda")
        or reported.get("tensorflow.cuda")
        or wheels.get("cuda", {}).get("value")
    )
    if not cuda:
        return stack, None
    gpu = {"cuda": cuda, "stack": "base" if declared.get("cuda") else "wheels"}
    requirement = required_driver(cuda)
    if requirement is not None:
        facts = {
            "driver_min": requirement.driver_min,
            "driver_min_compat": requirement.driver_min_compat,
            "driver_source": requirement.source,
        }
        gpu.update({k: v for k, v in facts.items() if v})
    return stack, gpu
