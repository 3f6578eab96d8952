"""``reprobuild image --platform``: the platforms an image is built for, the machine each
means to a lock (``platform_machine``, the wheels' tags), whether this host can run that
machine's programs (natively, or under qemu-user registered with binfmt_misc), and the base's
image for it (an index pinned by digest gives its entry's digest; a single-platform base of
another platform is refused).
"""

from __future__ import annotations

import platform as host
from dataclasses import dataclass, replace
from pathlib import Path

from reprobuild.bases.oci import ARCH_ALIASES
from reprobuild.bases.refs import ImageRef
from reprobuild.errors import RegistryError, ReprobuildError
from reprobuild.imaging.render import RenderSpec
from reprobuild.locks.lockfile import Selection, format_of_file, load_lock

__all__ = [
    "MACHINES",
    "SUPPORTED",
    "BuildPlatform",
    "check_builder",
    "coverage_note",
    "for_platform",
    "host_platform",
    "of_image",
    "parse_platforms",
    "platform_base",
    "platform_named",
    "require_runnable",
    "tag_for",
    "targets_of",
]

# The platforms reprobuild builds for, and the machine (``platform.machine()``, the wheel
# tags' and the lock markers' name) each one means.
_MACHINES = {"linux/amd64": "x86_64", "linux/arm64": "aarch64"}
SUPPORTED = tuple(_MACHINES)
# An image's architecture (its config's, as OCI names it) -> the machine Linux's `uname -m`
# gives: wider than what reprobuild builds for, since a job file may name any image.
MACHINES = {
    "amd64": "x86_64",
    "arm64": "aarch64",
    "ppc64le": "ppc64le",
    "s390x": "s390x",
    "riscv64": "riscv64",
}
BINFMT = Path("/proc/sys/fs/binfmt_misc")
# How a host gets arm64 emulation (scripts/setup-binfmt does this).
ENABLE_HINT = (
    "as root: apt-get install qemu-user-static; mount -t binfmt_misc binfmt_misc "
    "/proc/sys/fs/binfmt_misc (unless mounted); then write the line of "
    "/usr/lib/binfmt.d/qemu-{machine}.conf to /proc/sys/fs/binfmt_misc/register "
    "(a checkout's scripts/setup-binfmt does all of it)"
)


@dataclass(frozen=True)
class BuildPlatform:
    """One platform an image is built for: ``linux/arm64`` and its machine ``aarch64``."""

    name: str
    machine: str

    @property
    def arch(self) -> str:
        return self.name.split("/", 1)[1]

    @property
    def native(self) -> bool:
        """True when this host runs the platform's programs without emulation."""
        return self.machine == _host_machine()


def _host_machine() -> str:
    machine = host.machine().lower()
    return MACHINES.get(machine, machine)  # (some systems say amd64 or arm64)


def platform_named(machine: str | None) -> str | None:
    """``--platform``'s value for an image of ``machine`` (``aarch64`` -> ``linux/arm64``):
    None for this host's own machine, or a machine given as none."""
    if not machine or machine == _host_machine():
        return None
    for name, its in _MACHINES.items():
        if its == machine:
            return name
    raise ReprobuildError(
        f"the image is for {machine}, which reprobuild does not build for; it builds for "
        f"{', '.join(_MACHINES.values())}"
    )


def host_platform() -> BuildPlatform:
    """This host's own platform (linux/amd64 on an x86-64 host)."""
    machine = _host_machine()
    arch = ARCH_ALIASES.get(machine, machine)
    return BuildPlatform(f"linux/{arch}", machine)


def _one(text: str, given: str) -> BuildPlatform:
    parts = text.strip().lower().split("/")
    if len(parts) in (2, 3) and all(parts):
        arch = ARCH_ALIASES.get(parts[1], parts[1])
        name = f"{parts[0]}/{arch}"
        variant_ok = len(parts) == 2 or (arch, parts[2]) in (("arm64", "v8"), ("amd64", "v1"))
        if name in _MACHINES and variant_ok:
            return BuildPlatform(name, _MACHINES[name])
    raise ReprobuildError(
        f"--platform {given!r}: {text.strip()!r} is not a platform reprobuild builds for; "
        f"allowed: {', '.join(SUPPORTED)} (comma-separated for several)"
    )


def parse_platforms(text: str) -> tuple[BuildPlatform, ...]:
    """``--platform``'s value: one platform or several, comma-separated, each once."""
    if not isinstance(text, str) or not text.strip():
        raise ReprobuildError(
            f"--platform {text!r} names no platform; allowed: {', '.join(SUPPORTED)}"
        )
    out: list[BuildPlatform] = []
    for item in text.split(","):
        chosen = _one(item, text)
        if chosen in out:
            raise ReprobuildError(f"--platform {text!r} names {chosen.name} twice")
        out.append(chosen)
    return tuple(out)


def require_runnable(target: BuildPlatform, binfmt: Path = BINFMT) -> None:
    """A build for ``target`` runs its programs (the base's python3, pip, the probe): natively,
    or under qemu-user registered with the kernel's binfmt_misc (the F flag: inside containers
    too). Else one line saying how to enable it."""
    if target.native:
        return
    entry = binfmt / f"qemu-{target.machine}"
    try:
        enabled = entry.read_text(encoding="utf-8").splitlines()[:1] == ["enabled"]
    except OSError:
        enabled = False
    if not enabled:
        raise ReprobuildError(
            f"--platform {target.name}: this {_host_machine()} machine cannot run "
            f"{target.machine} programs ({entry} is not "
            f"{'enabled' if entry.exists() else 'registered'}), and a build runs the base's",
            hint=ENABLE_HINT.format(machine=target.machine),
        )


def platform_base(base: ImageRef, target: BuildPlatform) -> ImageRef:
    """The base's image for ``target``, pinned by its own manifest digest: an index's entry
    for the platform, or the base itself when it is a single-platform image of that platform.
    An index without the platform, or a single-platform image of another, is one error."""
    from reprobuild.bases.registry import RegistryClient

    try:
        with RegistryClient() as client:
            resolved = client.resolve(base, platform=target.name)
    except RegistryError as exc:
        said = exc.message if base.by_digest() in exc.message else f"base {base}: {exc.message}"
        raise RegistryError(f"--platform {target.name}: {said}", hint=exc.hint) from None
    return resolved.ref.with_digest(resolved.platform_digest)


def targets_of(text: str | None) -> tuple[BuildPlatform, ...]:
    """``--platform``'s platforms (none: not given, the host's), each checked runnable here."""
    if text is None:
        return ()
    targets = parse_platforms(text)
    for target in targets:
        require_runnable(target)
    return targets


def check_builder(target: BuildPlatform | None, builder: str) -> None:
    """A build for another machine than the host's is buildah's: reprobuild gives the engine's
    builders no ``--platform`` (Engine 20.10's BuildKit, the one such a build could use here,
    is not reproducible; classic has none)."""
    if target is None or target.native or builder == "buildah":
        return
    raise ReprobuildError(
        f"--platform {target.name} builds with buildah only, and the builder here is {builder}",
        hint="install buildah (apt-get install buildah) and use --builder auto or buildah",
    )


def for_platform(spec: RenderSpec, target: BuildPlatform | None) -> tuple[RenderSpec, str | None]:
    """``spec`` for ``target``: its base checked to have the platform (an index, or a
    single-platform image of it) and, for another machine than the host's, pinned to that
    platform's own manifest digest (the engine and buildah then pull that very image). An
    sdist build stage is refused there: its build lock is resolved for x86_64. With the
    platform's manifest digest (None: no ``--platform``, nothing asked of the registry)."""
    if target is None:
        return spec, None
    base = platform_base(spec.base, target)
    if target.native:
        return spec, base.digest
    if spec.build_lock is not None:
        raise ReprobuildError(
            f"--platform {target.name}: the lock builds packages from source, and the build "
            f"lock ({spec.build_lock.path.name}) is resolved for x86_64 only",
            hint="lock wheels for those packages, or build for the host's platform",
        )
    return replace(spec, base=base), base.digest


def of_image(attrs: dict[str, object]) -> BuildPlatform | None:
    """The platform an image's config names (``docker image inspect``'s Os and Architecture),
    where it is one reprobuild builds for and not this host's; None otherwise."""
    name = f"{attrs.get('Os') or 'linux'}/{attrs.get('Architecture') or ''}"
    if name not in _MACHINES or name == host_platform().name:
        return None
    return BuildPlatform(name, _MACHINES[name])


def tag_for(tag: str, target: BuildPlatform | None) -> str:
    """The default tag, with ``-ARCH`` for another machine than the host's: an arm64 build
    does not take the amd64 image's tag."""
    return tag if target is None or target.native else f"{tag}-{target.arch}"


def coverage_note(path: Path, selection: Selection) -> str | None:
    """What ``init`` says of a native lock's platforms: those it has a wheel (or sdist) of
    every package for, as read for ``selection`` on each machine; for a platform it does not
    cover, the first package that has none. None for a lock that gives hashes only (a
    requirements file, Pipfile.lock: which files they are is known only to the index)."""
    if format_of_file(path) not in {"uv", "poetry", "pdm"}:
        return None
    covered: list[str] = []
    lacking: list[str] = []
    for name, machine in _MACHINES.items():
        try:
            load_lock(path, replace(selection, machine=machine))
        except ReprobuildError as exc:
            lacking.append(f"not {name}: {exc.message}")
            continue
        covered.append(name)
    if not covered:
        return None
    said = f"{path.name} covers {' and '.join(covered)}"
    if lacking:
        return f"{said} only ({'; '.join(lacking)})"
    return (
        f"{said} (`reprobuild image --platform linux/arm64` builds the arm64 image; "
        "`--platform linux/amd64,linux/arm64 --push REGISTRY/NAME:TAG` both, under one index "
        "digest)"
    )
