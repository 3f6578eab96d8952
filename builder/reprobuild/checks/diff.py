"""Compare two stacks: image manifests, run records, or one of each (``reprobuild diff``).

Each input is read into one flat view, :class:`Stack`: ``(group, key) -> value``, plus its
distributions. An input is

- an image reference or ID on the local engine (its manifest, checked against its label);
- a JSON file: an image manifest (``schema_version``, ``lock_sha256``, ``distributions``; also
  the ``{"image", "id", "manifest"}`` that ``reprobuild inspect --json`` and ``image --json``
  print), or a run record (``"kind": "reprobuild.run"``). The framework records the run wrote
  beside its run record (``run-<run id>-frameworks-*.json``) are read too.

Groups and keys (a manifest has ``stack`` and ``run``; a run record has all four):

- ``stack``: ``manifest.sha256``, ``base.name``, ``base.digest``, ``lock.sha256``,
  ``builder.version``, ``python``, ``machine``, ``variant``; ``cuda``, ``cudnn``, ``nccl``,
  ``driver_min`` and every other key of a manifest's optional ``stack`` or ``gpu`` mapping (a
  run record: that mapping as its image section copies it, else ``CUDA_VERSION``,
  ``CUDNN_VERSION``, ``NCCL_VERSION`` from its base image's environment); ``env.<NAME>`` for the
  other stack variables a run saw;
  ``torch.cuda``, ``torch.cudnn``, ``torch.nccl``, ``tensorflow.cuda``, ``tensorflow.cudnn``
  (what a framework the run imported was built with). Any other top-level manifest key is
  compared too, as a dotted path, but ``sbom_sha256``: the SBOM follows from the packages and
  the base compared already.
- ``packages``: the distributions, by normalized name: added, removed, changed. A manifest lists
  every installed one; a run record only the frameworks its program imported, so where a run
  record is involved only the names both sides list are compared (``scope: common``).
- ``host`` (run records): ``kernel``, ``cpu.model``, ``cpu.count``, ``cpu.allowed``,
  ``gpu.devices``, ``gpu.driver``, and the ``*_VISIBLE_DEVICES`` variables.
- ``run``: ``default_seed`` and ``default_mode`` (the image's defaults: a manifest's ``seed`` and
  ``determinism``, a run record's ``image_seed`` and ``image_mode``); for run records also the
  run's own ``seed``, ``mode``, ``threads``, ``rank``, ``world_size``, ``command``, every
  variable the runtime set or found set (``env.<NAME>``) and ``env.removed``.
- ``ranks`` (run records of a distributed job, read from the framework record each rank wrote):
  ``rank <R>.<field>`` for its node rank, local rank, world size, rank seed, backend and
  torchrun restart count, ``rank <R>.torch.seed`` (what torch was seeded with) and
  ``rank <R>.comm.<NAME>`` for its NCCL/gloo variables: two runs of one job compared rank by
  rank. Not the rank's host name (pods and containers are named per deployment).

Rules: a key both inputs carry is compared. A key only one carries is a difference between two
inputs of the same kind (shown as ``(absent)``), except the keys a run knows only when its
program imported a framework; between a manifest and a run record only shared keys are
compared. ``manifest.sha256`` is compared when a run record is involved (equal: the run ran in
that very image); two manifests are compared field by field instead, so two builds of one stack
that differ only in name, creation time or lock file name are identical. Not compared: a
manifest's ``name``, ``created``, ``lock_file``; a run's id, start time, hostname, interpreter
path. Every difference listed counts: :attr:`DiffResult.identical` is true when none is.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from packaging.utils import canonicalize_name

from reprobuild._util import jsonload
from reprobuild.backends.engine import Engine
from reprobuild.checks.imageinfo import read_image
from reprobuild.checks.runrecords import (
    RecordAgreement,
    RunRecords,
    compare_run_records,
    cpu_cause,
)
from reprobuild.checks.verify.report import REPORT_KIND as VERIFY_KIND
from reprobuild.errors import DiffInputError, EngineUnavailableError, ReprobuildError
from reprobuild.imaging.manifest import MANIFEST_LABEL, Distribution, Manifest
from reprobuild_entrypoint.contract import FRAMEWORKS_KIND, RUN_KIND
from reprobuild_entrypoint.runrecord import RUN_ID_PATTERN
from reprobuild_entrypoint.runrecord import SCHEMA_VERSION as RUN_SCHEMA_VERSION

SCHEMA_VERSION = 1
KIND = "reprobuild.diff"
GROUPS = ("stack", "packages", "host", "run", "ranks")
RANK_FIELDS = ("group_rank", "local_rank", "world_size", "rank_seed", "backend", "restart_count")
"""What a rank's framework record (``distributed``) says that two runs of one job must share."""
MANIFEST_SHA256 = ("stack", "manifest.sha256")

Kind = Literal["manifest", "run"]
Key = tuple[str, str]
"""(group, key)"""
PackageScope = Literal["all", "common"]

_MANIFEST_HANDLED = frozenset(
    {
        "schema_version",
        "builder_version",
        "name",
        "variant",
        "base_ref",
        "base_digest",
        "lock_file",
        "lock_sha256",
        "seed",
        "determinism",
        "created",
        "python_version",
        "machine",
        "distributions",
        # The SBOM's sha256 follows from what is compared already (the packages, the base's
        # digest, the stack): listing it would repeat every such difference once more.
        "sbom_sha256",
        "lock_format",
        "lock_selection",
    }
)
"""Manifest keys read by name (or left out); every other top-level key is compared
generically."""
_MANIFEST_STACK_SECTIONS = ("stack", "gpu")
"""Optional manifest mappings whose keys (cuda, cudnn, nccl, driver_min, ...) are stack keys."""
_STACK_ENV_KEYS = {"CUDA_VERSION": "cuda", "CUDNN_VERSION": "cudnn", "NCCL_VERSION": "nccl"}
_HOST_ENV = frozenset({"CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"})
_SHA256_HEX = re.compile(r"(?<![0-9a-f])([0-9a-f]{12})[0-9a-f]{52}(?![0-9a-f])")
_ABSENT: Any = object()


# ------------------------------------------------------------------------------- the views


@dataclass(frozen=True)
class Stack:
    """One input, seen as a stack."""

    source: str
    """What was given: a path or an image reference."""
    kind: Kind
    description: str
    manifest_sha256: str | None
    """The image manifest's sha256: of the manifest itself, or the one the run ran in."""
    values: Mapping[Key, Any]
    packages: Mapping[str, Distribution]
    """Normalized name -> distribution."""
    packages_complete: bool
    """True for a manifest (every installed distribution), False for a run record."""
    partial: frozenset[Key] = frozenset()
    """Keys this input knows only sometimes: never reported as absent from the other."""
    records: RunRecords | None = None
    """A run record's documents, for :func:`reprobuild.checks.runrecords.compare_run_records`."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "kind": self.kind,
            "description": self.description,
            "manifest_sha256": self.manifest_sha256,
        }


@dataclass(frozen=True)
class Difference:
    group: str
    key: str
    a: Any
    b: Any
    missing: Literal["a", "b"] | None = None
    """The side that does not carry the key at all (its value is then null)."""

    def to_dict(self) -> dict[str, Any]:
        data = {"group": self.group, "key": self.key, "a": self.a, "b": self.b}
        if self.missing is not None:
            data["missing"] = self.missing
        return data


@dataclass(frozen=True)
class PackageChange:
    name: str
    a: str
    b: str

    def to_dict(self) -> dict[str, str]:
        return {"name": self.name, "a": self.a, "b": self.b}


@dataclass(frozen=True)
class DiffResult:
    a: Stack
    b: Stack
    differences: tuple[Difference, ...]
    added: tuple[Distribution, ...]
    """In B, not in A."""
    removed: tuple[Distribution, ...]
    """In A, not in B."""
    changed: tuple[PackageChange, ...]
    package_scope: PackageScope
    records: RecordAgreement | None = None
    """Two run records: the answer ``reprobuild verify`` gives for them too (the same
    function); None when a manifest is involved."""
    cause: str | None = None
    """Two run records on different CPUs: why their bits may differ, in one line
    (:func:`reprobuild.checks.runrecords.cpu_cause`)."""

    @property
    def count(self) -> int:
        return len(self.differences) + len(self.added) + len(self.removed) + len(self.changed)

    @property
    def identical(self) -> bool:
        return self.count == 0 and (self.records is None or self.records.agree)

    @property
    def same_image(self) -> bool | None:
        """Whether both name the same image manifest; None when one names none."""
        if self.a.manifest_sha256 is None or self.b.manifest_sha256 is None:
            return None
        return self.a.manifest_sha256 == self.b.manifest_sha256

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "kind": KIND,
            "identical": self.identical,
            "count": self.count,
            "same_image": self.same_image,
            "a": self.a.to_dict(),
            "b": self.b.to_dict(),
            "differences": [d.to_dict() for d in self.differences],
            "packages": {
                "scope": self.package_scope,
                "added": [{"name": d.name, "version": d.version} for d in self.added],
                "removed": [{"name": d.name, "version": d.version} for d in self.removed],
                "changed": [c.to_dict() for c in self.changed],
            },
            "run_records": None if self.records is None else self.records.to_dict(),
            "cause": self.cause,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

    def lines(self) -> list[str]:
        """The human report: what A and B are, the differences under a heading per group,
        and last ``identical`` or ``N difference(s)``."""
        out = [f"a  {self.a.description}", f"b  {self.b.description}"]
        width = max((len(d.key) for d in self.differences), default=0)
        for group in GROUPS:
            if group == "packages":
                items = self._package_lines()
            else:
                items = [
                    f"{d.key.ljust(width)}  {show_value(d.a, d.missing == 'a')} -> "
                    f"{show_value(d.b, d.missing == 'b')}"
                    for d in self.differences
                    if d.group == group
                ]
            if items:
                out.append(group)
                out.extend(f"  {item}" for item in items)
        if self.package_scope == "common" and "manifest" in (self.a.kind, self.b.kind):
            out.append(
                "note: packages compared only where both list them (a run record "
                "lists the frameworks its program imported)"
            )
        if self.count == 0 and self.records is not None and not self.records.agree:
            out.append(
                f"run records differ first at {self.records.first} "
                f"({len(self.records.differences)} in all, as verify compares them)"
            )
        if self.cause is not None:
            out.append(f"cause: {self.cause}")
        out.append(
            "identical"
            if self.identical
            else f"{self.count} difference{'' if self.count == 1 else 's'}"
        )
        return out

    def _package_lines(self) -> list[str]:
        rows: list[tuple[str, str]] = []
        rows += [(canonicalize_name(d.name), f"- {d.name}=={d.version}") for d in self.removed]
        rows += [(canonicalize_name(d.name), f"+ {d.name}=={d.version}") for d in self.added]
        rows += [(canonicalize_name(c.name), f"~ {c.name} {c.a} -> {c.b}") for c in self.changed]
        return [line for _, line in sorted(rows)]


def show_value(value: Any, missing: bool) -> str:
    """A value as ``diff`` prints it: ``(absent)``, ``(none)``, a command as a shell line,
    sha256 digests cut short."""
    if missing:
        return "(absent)"
    if value is None:
        return "(none)"
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        text = shlex.join(value)
    elif isinstance(value, str):
        text = value
    else:
        text = json.dumps(value, sort_keys=True)
    return _SHA256_HEX.sub(r"\1...", text)


# ------------------------------------------------------------------------------ comparing


def _equal(a: Any, b: Any) -> bool:
    if a == b and type(a) is type(b):
        return True
    scalars = (int, float, str)
    if (
        isinstance(a, scalars)
        and isinstance(b, scalars)
        and not isinstance(a, bool)
        and not isinstance(b, bool)
    ):
        return str(a) == str(b)  # "12" in one document, 12 in another
    return False


def compare(a: Stack, b: Stack) -> DiffResult:
    """Pure: two views in, their differences out (see the module docstring for the rules)."""
    differences = _value_differences(a, b)
    scope: PackageScope = "all" if a.packages_complete and b.packages_complete else "common"
    added, removed, changed = _package_differences(a, b, scope)
    return DiffResult(a, b, tuple(differences), tuple(added), tuple(removed), tuple(changed), scope)


def _value_differences(a: Stack, b: Stack) -> list[Difference]:
    """The keys that differ, grouped in GROUPS order, each group in document order."""
    keys = list(a.values) + [key for key in b.values if key not in a.values]
    if a.kind == b.kind == "manifest":  # two manifests: compared field by field instead
        keys = [key for key in keys if key != MANIFEST_SHA256]
    differences = [d for key in keys if (d := _difference(a, b, key)) is not None]
    differences.sort(key=lambda d: GROUPS.index(d.group))  # stable: keeps document order
    return differences


def _difference(a: Stack, b: Stack, key: tuple[str, str]) -> Difference | None:
    """How ``key`` differs between ``a`` and ``b``, or None where it does not count."""
    va, vb = a.values.get(key, _ABSENT), b.values.get(key, _ABSENT)
    group, name = key
    if va is not _ABSENT and vb is not _ABSENT:
        return None if _equal(va, vb) else Difference(group, name, va, vb)
    if a.kind != b.kind or key in a.partial or key in b.partial:
        return None  # a key one kind of input cannot know, or a run knows only sometimes
    if va is _ABSENT:
        return Difference(group, name, None, vb, "a")
    return Difference(group, name, va, None, "b")


def _package_differences(
    a: Stack, b: Stack, scope: PackageScope
) -> tuple[list[Distribution], list[Distribution], list[PackageChange]]:
    """(added, removed, changed) over every name (scope "all") or the shared ones."""
    names = (
        a.packages.keys() | b.packages.keys()
        if scope == "all"
        else a.packages.keys() & b.packages.keys()
    )
    added: list[Distribution] = []
    removed: list[Distribution] = []
    changed: list[PackageChange] = []
    for name in sorted(names):
        pa, pb = a.packages.get(name), b.packages.get(name)
        if pa is None and pb is not None:
            added.append(pb)
        elif pb is None and pa is not None:
            removed.append(pa)
        elif pa is not None and pb is not None and pa.version != pb.version:
            changed.append(PackageChange(pb.name, pa.version, pb.version))
    return added, removed, changed


def diff(a: str, b: str, *, engine: Engine | None = None) -> DiffResult:
    """``reprobuild diff A B``: read both inputs (files or images) and compare them."""
    engine = engine if engine is not None else Engine()  # connects only if an image is named
    return compare_inputs(load(a, engine), load(b, engine))


def compare_inputs(stack_a: Stack, stack_b: Stack) -> DiffResult:
    """:func:`compare`, and for two run records also how their records agree and the CPU
    cause: the whole answer of ``reprobuild diff`` for two inputs already read."""
    result = compare(stack_a, stack_b)
    if stack_a.records is not None and stack_b.records is not None:
        result = replace(
            result,
            records=compare_run_records(stack_a.records, stack_b.records),
            cause=cpu_cause(stack_a.records, stack_b.records),
        )
    return result


# -------------------------------------------------------------------------------- reading


def _looks_like_path(value: str) -> bool:
    """An image reference never starts with '.', '/' or '~' nor ends with '.json'."""
    return value.startswith((".", "/", "~")) or value.lower().endswith(".json")


def load(value: str, engine: Engine | None = None) -> Stack:
    """A file when ``value`` names one (or can only be a path), a W&B run when it names a run
    directory, an MLflow run when it is ``runs:/<id>`` (or a bare run ID with
    ``MLFLOW_TRACKING_URI`` set), a W&B run online when it is ``ENTITY/PROJECT/RUN_ID``, else an
    image on the engine."""
    from reprobuild.checks import mlflowruns, wandbruns

    path = Path(value)
    if wandbruns.is_run_dir(path):
        return load_file(wandbruns.stack_file(path, value), source=value)
    run_id = None if path.exists() else mlflowruns.run_id_of(value)
    if run_id is not None:
        with mlflowruns.temporary_dir() as tmp:
            return load_file(mlflowruns.download(run_id, Path(tmp)), source=f"runs:/{run_id}")
    run_path = None if path.exists() else wandbruns.run_path_of(value)
    if run_path is not None:
        with wandbruns.temporary_dir() as tmp:
            return load_file(wandbruns.download(run_path, Path(tmp)), source=run_path)
    if path.exists() or _looks_like_path(value):
        return load_file(path, source=value)
    return load_image(engine if engine is not None else Engine(), value)


def load_file(path: Path, *, source: str | None = None) -> Stack:
    source = source if source is not None else str(path)
    try:
        raw = jsonload.read_file(path, source, error=DiffInputError)
    except FileNotFoundError:
        raise DiffInputError(
            f"{source}: no such file",
            hint="give an image manifest, a run record (run-<id>.json), or an image reference",
        ) from None
    except IsADirectoryError:
        raise DiffInputError(
            f"{source} is a directory: give the manifest.json or run-<id>.json in it"
        ) from None
    except OSError as exc:
        raise DiffInputError(f"{source}: cannot read it: {exc.strerror or exc}") from None
    data = jsonload.loads(raw, source, error=DiffInputError)
    return from_document(data, source=source, raw=raw, directory=path.parent)


def load_image(engine: Engine, ref: str) -> Stack:
    try:
        if engine.image_id(ref) is None:
            raise DiffInputError(
                f"{ref!r} is neither a file nor an image on this engine",
                hint="give a manifest.json or run record path, or an image reference or ID "
                "(`docker images`)",
            )
        info = read_image(engine, ref)
    except EngineUnavailableError as exc:
        raise DiffInputError(
            f"{ref!r} is not a file, and it cannot be looked up as an image: {exc.message}",
            hint=exc.hint,
        ) from None
    except DiffInputError:
        raise
    except ReprobuildError as exc:
        message = exc.message if ref in exc.message else f"{ref}: {exc.message}"
        raise DiffInputError(message, hint=exc.hint) from None
    sha256 = info.labels.get(MANIFEST_LABEL) or _canonical_sha256(info.manifest.to_dict())
    return from_manifest(
        info.manifest.to_dict(),
        source=ref,
        sha256=sha256,
        what=f"image {ref} ({info.id[:19]})",
    )


def from_document(
    data: Any, *, source: str, raw: bytes | None = None, directory: Path | None = None
) -> Stack:
    """Detect what a parsed JSON document is and read it. ``raw``: the file's bytes (a bare
    manifest's sha256 is that of its bytes); ``directory``: where a run record's framework
    records lie."""
    if not isinstance(data, dict):
        raise DiffInputError(
            f"{source} is not a JSON object, so neither an image manifest nor a run record"
        )
    kind = data.get("kind")
    if kind == RUN_KIND:
        frameworks = _framework_records(directory, data) if directory is not None else []
        return from_run_record(data, source=source, frameworks=frameworks)
    if kind == FRAMEWORKS_KIND:
        raise DiffInputError(
            f"{source} is a framework record: give the run record run-<run id>.json beside it"
        )
    if kind == VERIFY_KIND:
        raise DiffInputError(
            f"{source} is a verify report: give two run records "
            "(`reprobuild verify --keep DIR` keeps them in DIR/run-<n>/records)"
        )
    if kind is not None:
        raise DiffInputError(
            f"{source}: unknown document kind {kind!r}: expected an image manifest or a run "
            f"record (kind {RUN_KIND!r})"
        )
    if _is_manifest(data):
        sha256 = hashlib.sha256(raw).hexdigest() if raw is not None else _canonical_sha256(data)
        return from_manifest(data, source=source, sha256=sha256, what=f"manifest {source}")
    wrapped = data.get("manifest")
    if isinstance(wrapped, dict) and _is_manifest(wrapped) and "image" in data:
        # `reprobuild inspect --json` / `reprobuild image --json`
        labels = data.get("labels")
        label = labels.get(MANIFEST_LABEL) if isinstance(labels, dict) else None
        image = f" of image {data['image']}" if isinstance(data.get("image"), str) else ""
        return from_manifest(
            wrapped,
            source=source,
            sha256=label if isinstance(label, str) else _canonical_sha256(wrapped),
            what=f"manifest{image} in {source}",
        )
    raise DiffInputError(
        f"{source} is neither an image manifest (schema_version, lock_sha256, distributions) "
        f"nor a run record (kind {RUN_KIND!r})"
    )


def _is_manifest(data: Mapping[str, Any]) -> bool:
    return all(key in data for key in ("schema_version", "lock_sha256", "distributions"))


def _canonical_sha256(data: Mapping[str, Any]) -> str:
    """The sha256 a manifest's bytes have in its image (Manifest.to_json's form)."""
    return hashlib.sha256((json.dumps(data, sort_keys=True, indent=2) + "\n").encode()).hexdigest()


def _ref_name(ref: Any) -> Any:
    return ref.split("@", 1)[0] if isinstance(ref, str) else ref


def _flatten(value: Any, prefix: str) -> Iterator[tuple[str, Any]]:
    """Dotted paths to the leaves of nested mappings; null leaves are left out (a section
    with nothing set says no more than a section that is not there)."""
    if isinstance(value, dict):
        for key in sorted(value, key=str):
            yield from _flatten(value[key], f"{prefix}.{key}" if prefix else str(key))
    elif value is not None:
        yield prefix, value


def from_manifest(data: Mapping[str, Any], *, source: str, sha256: str, what: str) -> Stack:
    """A manifest (as a dict) to its view. Checked as a :class:`Manifest` first; the view is
    read from the dict, so keys a newer manifest adds are compared too."""
    try:
        manifest = Manifest.from_dict(dict(data))
    except ReprobuildError as exc:
        raise DiffInputError(f"{source}: {exc.message}", hint=exc.hint) from None
    values: dict[Key, Any] = {
        MANIFEST_SHA256: sha256,
        ("stack", "base.name"): _ref_name(manifest.base_ref),
        ("stack", "base.digest"): manifest.base_digest,
        ("stack", "lock.sha256"): manifest.lock_sha256,
        ("stack", "builder.version"): manifest.builder_version,
        ("stack", "python"): manifest.python_version,
        ("stack", "machine"): manifest.machine,
        ("stack", "variant"): manifest.variant,
    }
    if manifest.lock_description is not None:  # format and extras/groups, in newer images
        values[("stack", "lock.format")] = manifest.lock_description
    for section in _MANIFEST_STACK_SECTIONS:  # the GPU stack: cuda, cudnn, nccl, driver_min...
        if isinstance(data.get(section), dict):
            for key, value in _flatten(data[section], ""):
                values.setdefault(("stack", key), value)
                if values[("stack", key)] != value:  # both sections name it, differently
                    values[("stack", f"{section}.{key}")] = value
    for name in sorted(data):
        if name in _MANIFEST_HANDLED or (
            name in _MANIFEST_STACK_SECTIONS and isinstance(data[name], dict)
        ):
            continue
        for key, value in _flatten(data[name], name):
            values[("stack", key)] = value
    values[("run", "default_seed")] = manifest.seed
    values[("run", "default_mode")] = manifest.determinism
    packages: dict[str, Distribution] = {
        canonicalize_name(d.name): d for d in manifest.distributions
    }
    return Stack(
        source=source,
        kind="manifest",
        description=f"{what}: {manifest.name} ({manifest.variant}), {len(packages)} "
        f"distributions, manifest sha256 {sha256[:12]}",
        manifest_sha256=sha256,
        values=values,
        packages=packages,
        packages_complete=True,
    )


def _dig(data: Any, *path: str) -> Any:
    for name in path:
        if not isinstance(data, dict) or name not in data:
            return _ABSENT
        data = data[name]
    return data


def _section(data: Mapping[str, Any], name: str) -> dict[str, Any]:
    value = data.get(name)
    return value if isinstance(value, dict) else {}


def _cudnn(value: Any) -> Any:
    """torch reports cuDNN as an int: 90100 is 9.1.0 (8902 was 8.9.2 before cuDNN 9)."""
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        major, rest = divmod(value, 10000) if value >= 10000 else divmod(value, 1000)
        return f"{major}.{rest // 100}.{rest % 100}"
    return value


def _gpu_devices(gpu: Any) -> Any:
    if gpu is None:
        return "none"
    devices = _dig(gpu, "devices")
    if not isinstance(devices, list):
        return "unknown"
    if not devices:
        return "none"
    names: dict[str, int] = {}
    for device in devices:
        name = str(_dig(device, "name")) if isinstance(device, dict) else str(device)
        cap = _dig(device, "compute_cap")
        label = f"{name} (sm {cap})" if isinstance(cap, str) else name
        names[label] = names.get(label, 0) + 1
    return ", ".join(label if n == 1 else f"{n} x {label}" for label, n in names.items())


def from_run_record(
    data: Mapping[str, Any], *, source: str, frameworks: Sequence[Mapping[str, Any]] = ()
) -> Stack:
    """A run record (and the framework records of its run) to its view."""
    version = data.get("schema_version")
    if version != RUN_SCHEMA_VERSION:
        raise DiffInputError(
            f"{source}: run record schema_version {version!r} is not supported (this "
            f"reprobuild reads {RUN_SCHEMA_VERSION})",
            hint="use the reprobuild release whose runtime wrote the record",
        )
    values: dict[Key, Any] = {}
    partial: set[Key] = set()

    def put(group: str, key: str, value: Any) -> None:
        if value is not _ABSENT:
            values[(group, key)] = value

    image = _section(data, "image")
    sha256 = _dig(image, "sha256")
    put(*MANIFEST_SHA256, sha256)
    put("stack", "base.name", _ref_name(_dig(image, "base_ref")))
    put("stack", "base.digest", _dig(image, "base_digest"))
    put("stack", "lock.sha256", _dig(image, "lock_sha256"))
    put("stack", "builder.version", _dig(image, "builder_version"))
    put("stack", "python", _dig(data, "python", "version"))
    put("stack", "machine", _dig(data, "host", "machine"))
    put("stack", "variant", _dig(data, "determinism", "variant"))
    for section in _MANIFEST_STACK_SECTIONS:  # the image manifest's GPU stack, when it has one
        for key, value in _flatten(_section(image, section), ""):
            values.setdefault(("stack", key), value)
    stack_env = _section(data, "stack_env")
    for name in sorted(stack_env):
        if name in _STACK_ENV_KEYS:
            values.setdefault(("stack", _STACK_ENV_KEYS[name]), stack_env[name])
        else:
            put("host" if name in _HOST_ENV else "stack", f"env.{name}", stack_env[name])
    seen = _frameworks(frameworks)
    for key, value in seen.stack.items():
        put("stack", key, value)
        partial.add(("stack", key))

    put("host", "kernel", _dig(data, "host", "kernel"))
    for field_name in ("model", "count", "allowed", "level", "vendor"):
        put("host", f"cpu.{field_name}", _dig(data, "host", "cpu", field_name))
    for key, value in _dispatch(frameworks).items():
        put("host", f"dispatch.{key}", value)
        partial.add(("host", f"dispatch.{key}"))
    gpu = _dig(data, "host", "gpu")
    if gpu is not _ABSENT:
        put("host", "gpu.devices", _gpu_devices(gpu))
        driver = _dig(gpu, "driver_version") if gpu is not None else None
        put("host", "gpu.driver", None if driver is _ABSENT else driver)

    put("run", "default_seed", _dig(data, "determinism", "image_seed"))
    put("run", "default_mode", _dig(data, "determinism", "image_mode"))
    put("run", "seed", _dig(data, "determinism", "seed"))
    put("run", "mode", _dig(data, "determinism", "mode"))
    put("run", "threads", _dig(data, "threads", "requested"))
    put("run", "cpu", _dig(data, "cpu", "mode"))
    put("run", "cpu.level", _dig(data, "cpu", "level"))
    put("run", "rank", _dig(data, "distributed", "rank"))
    put("run", "world_size", _dig(data, "distributed", "world_size"))
    put("run", "command", _dig(data, "command"))
    env = _section(data, "environment")
    effective = {**_section(env, "set"), **_section(env, "user_set")}
    for name in sorted(effective):
        put("run", f"env.{name}", effective[name])
    put("run", "env.removed", _dig(env, "removed"))

    for rank, value in _rank_values(frameworks):
        put("ranks", rank, value)

    run_id = data.get("run_id")
    where = (
        f"in image manifest {sha256[:12]}"
        if isinstance(sha256, str)
        else "outside an image (no manifest)"
    )
    return Stack(
        source=source,
        kind="run",
        description=f"run record {source}: run {run_id} {where}, "
        f"{len(frameworks)} framework record{'' if len(frameworks) == 1 else 's'}",
        manifest_sha256=sha256 if isinstance(sha256, str) else None,
        values=values,
        packages=seen.packages,
        packages_complete=False,
        partial=frozenset(partial),
        records=RunRecords(data, tuple(frameworks)),
    )


def _dispatch(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """What the CPU libraries dispatched to (``cpu_dispatch`` of the framework records)."""
    out: dict[str, Any] = {}
    for record in records:
        found = record.get("cpu_dispatch")
        if isinstance(found, dict):
            out.update({str(k): v for k, v in found.items()})
    return dict(sorted(out.items()))


def _rank_values(records: Sequence[Mapping[str, Any]]) -> Iterator[tuple[str, Any]]:
    """``rank <R>.<field>`` values from the ranks' framework records, in rank order."""
    ranks: dict[int, Mapping[str, Any]] = {}
    for record in records:
        dist = record.get("distributed")
        if isinstance(dist, dict) and isinstance(dist.get("rank"), int):
            ranks[dist["rank"]] = record
    for rank in sorted(ranks):
        record = ranks[rank]
        dist = record["distributed"]
        for name in RANK_FIELDS:
            yield f"rank {rank}.{name}", dist.get(name)
        seed = _dig(record, "framework_settings", "torch", "seed")
        if seed is not _ABSENT:
            yield f"rank {rank}.torch.seed", seed
        comm = dist.get("comm_settings")
        for name in sorted(comm) if isinstance(comm, dict) else ():
            yield f"rank {rank}.comm.{name}", comm[name]


@dataclass
class _Seen:
    packages: dict[str, Distribution] = field(default_factory=dict)
    stack: dict[str, Any] = field(default_factory=dict)


def _frameworks(records: Sequence[Mapping[str, Any]]) -> _Seen:
    """What the run's processes saw: framework versions (as distributions) and what torch and
    TensorFlow were built with. Processes that disagree are shown joined with ' | '."""
    versions: dict[str, dict[str, set[str]]] = {}
    stack: dict[str, set[str]] = {}
    for record in records:
        settings = record.get("framework_settings")
        if not isinstance(settings, dict):
            continue
        for module, entry in settings.items():
            if not isinstance(entry, dict):
                continue
            if isinstance(entry.get("version"), str):
                normalized = canonicalize_name(str(module))
                versions.setdefault(normalized, {}).setdefault(str(module), set()).add(
                    entry["version"]
                )
            built: dict[str, Any] = {}
            if module == "torch":
                built = {
                    "torch.cuda": entry.get("cuda", _ABSENT),
                    "torch.cudnn": _cudnn(entry.get("cudnn_version", _ABSENT)),
                    "torch.nccl": entry.get("nccl_version", _ABSENT),
                }
            elif module == "tensorflow" and isinstance(entry.get("build_info"), dict):
                info = entry["build_info"]
                built = {
                    "tensorflow.cuda": info.get("cuda_version", _ABSENT),
                    "tensorflow.cudnn": info.get("cudnn_version", _ABSENT),
                }
            for key, value in built.items():
                if value is not _ABSENT:
                    stack.setdefault(key, set()).add(json.dumps(value))
    seen = _Seen()
    for name, by_module in versions.items():
        module = sorted(by_module)[0]
        seen.packages[name] = Distribution(module, " | ".join(sorted(by_module[module])))
    for key, encoded in stack.items():
        decoded = [json.loads(v) for v in sorted(encoded)]
        seen.stack[key] = decoded[0] if len(decoded) == 1 else " | ".join(map(str, decoded))
    return seen


def _framework_records(directory: Path, record: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The framework records beside a run record: ``run-<run id>-frameworks-*.json``."""
    run_id = record.get("run_id")
    if not isinstance(run_id, str) or not RUN_ID_PATTERN.fullmatch(run_id):
        return []
    found: list[dict[str, Any]] = []
    for path in sorted(directory.glob(f"run-{run_id}-frameworks-*.json")):
        try:
            data = jsonload.read_json_file(path, str(path), error=DiffInputError)
        except OSError as exc:
            raise DiffInputError(f"{path}: cannot read it: {exc.strerror or exc}") from None
        if (
            isinstance(data, dict)
            and data.get("kind") == FRAMEWORKS_KIND
            and data.get("run_id") == run_id
        ):
            found.append(data)
    return found
