"""The image's SBOM: a CycloneDX 1.6 JSON document at :data:`SBOM_PATH`, written by the stamp
step beside the manifest, whose ``sbom_sha256`` records it.

Components: every Python distribution the image holds (the lock's with the lock's hashes, a
GPU base's own marked as such; licence where the metadata says), every Debian package dpkg
says is installed, the base image by digest, the CUDA/cuDNN/NCCL versions a GPU base
declares, the Python interpreter and reprobuild's runtime; reprobuild itself is the tool.

Reproducible by construction, so that it never breaks a bit-identical image: its only time
is SOURCE_DATE_EPOCH's (the manifest's ``created``), its serial number is derived from its
content (a name-based UUID of the sha256 of the document with a zero serial), every
``bom-ref`` is a name, never a random one, and the bytes are canonical JSON (sorted keys).
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import json
import re
import threading
import uuid
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from packaging.utils import canonicalize_name

from reprobuild import __version__
from reprobuild._util import jsonload
from reprobuild._util.threads import start as start_thread
from reprobuild.bases.refs import parse_ref
from reprobuild.errors import ReprobuildError
from reprobuild.imaging.manifest import Manifest

if TYPE_CHECKING:
    from cyclonedx.model import HashType
    from cyclonedx.model.component import Component

    from reprobuild.locks.lockfile import Lock

SBOM_PATH = "/opt/reprobuild/sbom.cdx.json"
# An image is untrusted input: an SBOM file larger than this is refused before parsing.
MAX_SBOM_BYTES = 64 * 1024 * 1024
# The probe's output with the SBOM's facts (dpkg's status of a large base is a few MB).
MAX_FACTS_BYTES = 96 * 1024 * 1024
# The GPU stack facts a base declares (bases.gpustack.declared's keys) that are components.
GPU_COMPONENTS = ("cuda", "cudnn", "nccl")
_HASHES = {"sha256": "SHA-256", "sha384": "SHA-384", "sha512": "SHA-512"}
_DEB_FIELD = re.compile(r"^([A-Za-z0-9][A-Za-z0-9-]*):[ \t]*(.*)$")


def facts_source() -> str:
    """The source of :mod:`reprobuild.imaging.sbomfacts`, to run in a built image."""
    from reprobuild.imaging import sbomfacts

    return Path(sbomfacts.__file__).read_text(encoding="utf-8")


def dpkg_packages(texts: list[str]) -> list[dict[str, str]]:
    """The installed packages of dpkg status texts: one dict per stanza whose Status ends in
    ``installed``, with Package, Version, Architecture (and Source when given), sorted."""
    packages: dict[tuple[str, str], dict[str, str]] = {}
    for text in texts:
        for stanza in re.split(r"\n[ \t]*\n", text):
            fields: dict[str, str] = {}
            for line in stanza.splitlines():
                match = _DEB_FIELD.match(line)
                if match:  # continuation lines (descriptions, conffiles) start with a space
                    fields[match.group(1).lower()] = match.group(2).strip()
            name, version = fields.get("package", ""), fields.get("version", "")
            status = fields.get("status", "install ok installed").split()
            if not name or not version or status[-1:] != ["installed"]:
                continue
            arch = fields.get("architecture", "")
            entry = {"name": name, "version": version, "arch": arch}
            if fields.get("source"):
                entry["source"] = fields["source"]
            packages[(name, arch)] = entry
    return [packages[key] for key in sorted(packages)]


def os_release(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip().isidentifier():
            out[key.strip()] = value.strip().strip("\"'")
    return out


def licence_text(meta: dict[str, Any]) -> str:
    """The licence a distribution's metadata states: License-Expression (PEP 639), else a
    one-line License field, else its classifiers' last parts; "" when it says none."""
    expression = str(meta.get("license_expression") or "").strip()
    if expression:
        return expression
    field = str(meta.get("license") or "").strip()
    if field and "\n" not in field and len(field) <= 100 and field.upper() != "UNKNOWN":
        return field
    names = sorted({str(c).split("::")[-1].strip() for c in meta.get("classifiers") or []})
    return " AND ".join(n for n in names if n)


@functools.cache
def code_sha256() -> str:
    """What the SBOM's bytes depend on in code, beside its inputs: this module's source, the
    CycloneDX library's version and the runtime's (:func:`_runtime`). A key part for a cache
    of SBOMs (a change to any of them is another SBOM)."""
    from importlib.metadata import PackageNotFoundError, version

    from reprobuild_entrypoint import __version__ as runtime_version

    try:
        library = version("cyclonedx-python-lib")
    except PackageNotFoundError:
        library = "?"
    source = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()
    return hashlib.sha256(f"{source} {library} {runtime_version}".encode()).hexdigest()


def preload() -> None:
    """Import the CycloneDX library in a thread of its own (a quarter of a second here), while
    the caller waits on a build: :func:`make_sbom` then finds it loaded. Never fails: an
    import that fails there fails again, and is said, where the SBOM is made."""

    def load() -> None:
        for module in ("cyclonedx.model.bom", "cyclonedx.model.component", "cyclonedx.output.json"):
            try:
                importlib.import_module(module)
            except Exception:  # said again by make_sbom's own import
                return

    start_thread(threading.Thread(target=load, name="reprobuild-sbom-preload", daemon=True))


def make_sbom(manifest: Manifest, lock: Lock, facts: dict[str, Any], epoch: int) -> bytes:
    """The SBOM's canonical bytes (see the module's docstring for what makes them stable)."""
    from cyclonedx.model.bom import Bom
    from cyclonedx.model.component import Component, ComponentType

    bom = Bom(serial_number=uuid.UUID(int=0))
    bom.metadata.timestamp = datetime.fromtimestamp(epoch, UTC)
    image = Component(
        type=ComponentType.CONTAINER,
        name=manifest.name,
        version=manifest.variant,
        bom_ref="image",
        properties=_properties(
            {
                "reprobuild:lock_file": manifest.lock_file,
                "reprobuild:lock_sha256": manifest.lock_sha256,
                "reprobuild:machine": manifest.machine,
                # the sdists' pinned build requirements (none when nothing was built)
                "reprobuild:build_lock_file": (manifest.build_lock or {}).get("file", ""),
                "reprobuild:build_lock_sha256": (manifest.build_lock or {}).get("sha256", ""),
            }
        ),
    )
    bom.metadata.component = image
    bom.metadata.tools.components.add(
        Component(
            type=ComponentType.APPLICATION,
            name="reprobuild",
            version=__version__,
            bom_ref="reprobuild",
            purl=_purl("pypi", "reprobuild", __version__),
        )
    )
    components = [
        *_base(manifest),
        *_runtime(manifest),
        *_python_dists(manifest, lock, facts),
        *_debian(facts),
        *_gpu(manifest),
    ]
    for component in components:
        bom.components.add(component)
    bom.register_dependency(image, components)
    data = json.loads(_serialize(bom))  # once: cyclonedx's serializer is most of the SBOM's time
    digest = hashlib.sha256(_canonical(data)).digest()
    data["serialNumber"] = uuid.UUID(bytes=digest[:16], version=5).urn
    return _canonical(data)


def _serialize(bom: Any) -> str:
    from cyclonedx.output.json import JsonV1Dot6

    text: str = JsonV1Dot6(bom).output_as_string()
    return text


def _canonical(data: Any) -> bytes:
    return (json.dumps(data, sort_keys=True, indent=2, ensure_ascii=False) + "\n").encode()


def _purl(kind: str, name: str, version: str, namespace: str | None = None, **q: str) -> Any:
    from packageurl import PackageURL

    return PackageURL(kind, namespace, name, version, {k: v for k, v in q.items() if v} or None)


def _properties(values: dict[str, str]) -> list[Any]:
    from cyclonedx.model import Property

    return [Property(name=k, value=v) for k, v in sorted(values.items()) if v]


def _base(manifest: Manifest) -> Iterator[Component]:
    from cyclonedx.model.component import Component, ComponentType

    ref = parse_ref(manifest.base_ref)
    name = ref.repository.rsplit("/", 1)[-1].lower()
    repository = f"{ref.registry}/{ref.repository}"
    yield Component(
        type=ComponentType.CONTAINER,
        name=ref.name,
        version=manifest.base_digest,
        bom_ref="base",
        purl=_purl("oci", name, manifest.base_digest, repository_url=repository, tag=ref.tag or ""),
        properties=_properties({"reprobuild:ref": manifest.base_ref}),
    )


def _runtime(manifest: Manifest) -> Iterator[Component]:
    from cyclonedx.model.component import Component, ComponentType

    from reprobuild_entrypoint import __version__ as runtime_version

    yield Component(
        type=ComponentType.LIBRARY,
        name="reprobuild-runtime",
        version=runtime_version,
        bom_ref="reprobuild-runtime",
        description="reprobuild's in-image runtime (reprobuild_entrypoint)",
        purl=_purl("generic", "reprobuild-runtime", runtime_version),
    )
    yield Component(
        type=ComponentType.APPLICATION,
        name="python",
        version=manifest.python_version,
        bom_ref="python",
        purl=_purl("generic", "python", manifest.python_version),
    )


def _licences(facts: dict[str, Any]) -> dict[tuple[str, str], str]:
    """Each installed distribution's licence, by (canonical name, version), from the probe."""
    licences: dict[tuple[str, str], str] = {}
    for meta in facts.get("python") or []:
        if isinstance(meta, dict):
            key = (canonicalize_name(str(meta.get("name", ""))), str(meta.get("version", "")))
            licences.setdefault(key, licence_text(meta))
    return licences


def _hash_types(digests: Iterable[str]) -> list[HashType]:
    """CycloneDX hashes of ``algo:hex`` digests, those of algorithms it names."""
    from cyclonedx.model import HashAlgorithm, HashType

    hashes = []
    for spec in digests:
        algo, _, hexdigest = spec.partition(":")
        if algo in _HASHES:
            hashes.append(HashType(alg=HashAlgorithm(_HASHES[algo]), content=hexdigest))
    return hashes


def _python_dists(manifest: Manifest, lock: Lock, facts: dict[str, Any]) -> Iterator[Component]:
    from cyclonedx.contrib.license.factories import LicenseFactory
    from cyclonedx.model.component import Component, ComponentType

    pinned = {r.name: r for r in lock.requirements}
    licences = _licences(facts)
    factory = LicenseFactory()
    built = {canonicalize_name(b["name"]): b for b in manifest.built_from_source or []}
    for dist in manifest.distributions:
        name = canonicalize_name(dist.name)
        req = pinned.get(name) if dist.origin == "lock" else None
        made = built.get(name) if req is not None and req.source is not None else None
        # A wheel built in the image: its own sha256, and the sdist's beside it.
        digests = (made["wheel_sha256"],) if made else req.hashes if req is not None else ()
        hashes = _hash_types(digests)
        purl = _purl("pypi", name, dist.version, download_url=req.url if req and req.url else "")
        licence = licences.get((name, dist.version), "")
        yield Component(
            type=ComponentType.LIBRARY,
            name=name,
            version=dist.version,
            bom_ref=str(purl) if dist.origin == "lock" else f"{dist.origin}:{purl}",
            purl=purl,
            hashes=hashes,
            licenses=[factory.make_from_string(licence)] if licence else [],
            properties=_properties(
                {
                    "reprobuild:origin": dist.origin,
                    "reprobuild:built_from_sdist": (
                        f"{made['sdist']} {made['sdist_sha256']}" if made else ""
                    ),
                    "reprobuild:source_origin": made.get("origin", "") if made else "",
                }
            ),
        )


def _debian(facts: dict[str, Any]) -> Iterator[Component]:
    from cyclonedx.model.component import Component, ComponentType

    texts = [str(t) for t in facts.get("dpkg") or [] if isinstance(t, str)]
    release = os_release(str(facts.get("os_release") or ""))
    vendor = release.get("ID", "debian").lower() or "debian"
    distro = "-".join(v for v in (vendor, release.get("VERSION_ID", "")) if v)
    for pkg in dpkg_packages(texts):
        purl = _purl("deb", pkg["name"], pkg["version"], vendor, arch=pkg["arch"], distro=distro)
        yield Component(
            type=ComponentType.LIBRARY,
            name=pkg["name"],
            version=pkg["version"],
            bom_ref=str(purl),
            purl=purl,
            properties=_properties({"reprobuild:origin": "base"}),
        )


def _gpu(manifest: Manifest) -> Iterator[Component]:
    from cyclonedx.model.component import Component, ComponentType

    declared = dict(manifest.stack.get("declared") or {})
    if manifest.gpu and manifest.gpu.get("cuda"):
        declared.setdefault("cuda", manifest.gpu["cuda"])
    for key in GPU_COMPONENTS:
        version = str(declared.get(key) or "")
        if version:
            yield Component(
                type=ComponentType.LIBRARY,
                name=key,
                version=version,
                bom_ref=f"nvidia-{key}",
                purl=_purl("generic", key, version, "nvidia"),
                properties=_properties({"reprobuild:origin": "base"}),
            )


def sha256(document: bytes) -> str:
    return hashlib.sha256(document).hexdigest()


def check_document(raw: bytes, what: str) -> dict[str, Any]:
    """A CycloneDX JSON document read back (from an image: untrusted), shallowly checked."""
    data = jsonload.loads(raw, what, max_bytes=MAX_SBOM_BYTES)
    if not isinstance(data, dict) or data.get("bomFormat") != "CycloneDX":
        raise ReprobuildError(f"{what} is not a CycloneDX document")
    return data
