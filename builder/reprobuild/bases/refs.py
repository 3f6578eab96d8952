"""Image references: parse, validate and pin ``[registry/]repo[:tag][@sha256:...]``.

A value that fails here never reaches a Dockerfile: the grammar is Docker's own
(distribution/reference) and admits no whitespace, quotes or shell metacharacters.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from reprobuild.errors import ImageRefError

DEFAULT_REGISTRY = "docker.io"
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_PATH_RE = re.compile(rf"^{_COMPONENT}(?:/{_COMPONENT})*$")
_TAG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
# A content digest as registries and manifests write it.
DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
_HOST_RE = re.compile(
    r"^(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)(?:\.(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?))*"
    r"(?::[0-9]{1,5})?$"
)


@dataclass(frozen=True)
class ImageRef:
    """A parsed reference. ``registry`` is the host (``docker.io`` when none was written)."""

    registry: str
    repository: str
    tag: str | None = None
    digest: str | None = None
    explicit_registry: bool = False

    @property
    def pinned(self) -> bool:
        return self.digest is not None

    @property
    def name(self) -> str:
        """The name as a user writes it: registry only when it was written."""
        if self.explicit_registry:
            return f"{self.registry}/{self.repository}"
        repo = self.repository
        if repo.startswith("library/") and repo.count("/") == 1:
            repo = repo.removeprefix("library/")
        return repo

    @property
    def api_repository(self) -> str:
        """The repository as the Registry HTTP API names it (``library/`` for Hub officials)."""
        return self.repository

    def with_digest(self, digest: str) -> ImageRef:
        return ImageRef(self.registry, self.repository, self.tag, digest, self.explicit_registry)

    def __str__(self) -> str:
        out = self.name
        if self.tag:
            out += f":{self.tag}"
        if self.digest:
            out += f"@{self.digest}"
        return out

    def by_digest(self) -> str:
        """``name@digest``: the form that ``FROM`` uses; the tag is dropped because the
        digest alone decides what is pulled."""
        if not self.digest:
            raise ImageRefError(f"{self} is not pinned by digest")
        return f"{self.name}@{self.digest}"


def is_loopback(registry: str) -> bool:
    """True for localhost and literal loopback addresses (127.0.0.0/8, [::1]), with or without
    a port: registries Docker itself allows over plain HTTP."""
    host = registry
    if host.startswith("["):
        host = host[1 : host.find("]")] if "]" in host else host
    elif host.count(":") == 1:
        host = host.rsplit(":", 1)[0]
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def parse_ref(text: str) -> ImageRef:
    """Parse a reference, raising ImageRefError with the bad value and the allowed form."""
    allowed = "expected [REGISTRY/]NAME[:TAG][@sha256:<64 hex>]"
    if not isinstance(text, str) or not text or text != text.strip() or len(text) > 512:
        raise ImageRefError(f"invalid image reference {text!r}: {allowed}")
    rest = text
    digest: str | None = None
    if "@" in rest:
        rest, digest = rest.split("@", 1)
        if not DIGEST_RE.fullmatch(digest):
            raise ImageRefError(
                f"invalid digest {digest!r} in image reference {text!r}: "
                "expected sha256: followed by 64 lowercase hex digits"
            )
    tag: str | None = None
    last = rest.rsplit("/", 1)[-1]
    if ":" in last:
        rest, tag = rest.rsplit(":", 1)
        if not _TAG_RE.fullmatch(tag):
            raise ImageRefError(f"invalid tag {tag!r} in image reference {text!r}: {allowed}")
    registry = DEFAULT_REGISTRY
    explicit = False
    first, _, remainder = rest.partition("/")
    if remainder and ("." in first or ":" in first or first == "localhost"):
        if not _HOST_RE.fullmatch(first):
            raise ImageRefError(f"invalid registry {first!r} in image reference {text!r}")
        registry, rest, explicit = first, remainder, True
    if not _PATH_RE.fullmatch(rest):
        raise ImageRefError(
            f"invalid repository name {rest!r} in image reference {text!r}: "
            "lowercase letters, digits and . _ - / separators only"
        )
    if registry == DEFAULT_REGISTRY and "/" not in rest:
        rest = f"library/{rest}"
    return ImageRef(registry, rest, tag, digest, explicit)


def parse_pinned(text: str, *, what: str = "base image") -> ImageRef:
    """Parse a reference that must carry a digest; a bare tag is refused with the fix."""
    ref = parse_ref(text)
    if not ref.pinned:
        raise ImageRefError(
            f"{what} {text!r} is not pinned by digest: a tag can move, a digest cannot",
            hint=f"run `reprobuild resolve {text}` and use the NAME@sha256:... it prints",
        )
    return ref
