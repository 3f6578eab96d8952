"""Resolve image tags to digests through the Registry HTTP API v2.

A tag names whatever the registry says today; the digest this module returns names the
bytes for good. For a multi-arch tag the top-level (index) digest is the pin and the
per-platform manifest digest is recorded beside it. Every body fetched is checked
against its sha256 before it is trusted.

Only anonymous access is supported: a Bearer challenge is answered with an anonymous
token from the realm it names; a Basic challenge (credentials required) is an error.
"""

from __future__ import annotations

import copy
import hashlib
import os
from collections.abc import Mapping
from types import TracebackType
from typing import Any, BinaryIO

import requests
import urllib3

from reprobuild import __version__
from reprobuild._util import jsonload
from reprobuild.bases.httpdeadline import (
    DEADLINE_ENV,
    MAX_ERROR_BODY_BYTES,
    MAX_REDIRECTS,
    Challenge,
    DeadlineAdapter,
    Watchdog,
    deadline_from_env,
    failure_reason,
    host_of,
    parse_challenges,
    registry_message,
)
from reprobuild.bases.oci import (
    ACCEPT_MANIFESTS,
    ARCH_ALIASES,
    DOCKER_MANIFEST,
    DOCKER_MANIFEST_LIST,
    INDEX_TYPES,
    MANIFEST_TYPES,
    OCI_INDEX,
    OCI_MANIFEST,
    Platform,
    Resolved,
    check_digest,
    parse_platform,
    platform_matches,
    platform_of,
    select_platform,
    sha256_of,
)
from reprobuild.bases.refs import ImageRef, is_loopback, parse_ref
from reprobuild.errors import RegistryError

__all__ = [
    "ACCEPT_MANIFESTS",
    "DEADLINE_ENV",
    "DOCKER_MANIFEST",
    "DOCKER_MANIFEST_LIST",
    "INSECURE_REGISTRIES_ENV",
    "OCI_INDEX",
    "OCI_MANIFEST",
    "Challenge",
    "RegistryClient",
    "Resolved",
    "parse_challenges",
    "resolve",
]

INSECURE_REGISTRIES_ENV = "REPROBUILD_INSECURE_REGISTRIES"
DOCKER_HUB_API_HOST = "registry-1.docker.io"
_DOCKER_HUB_NAMES = frozenset({"docker.io", "index.docker.io", "registry-1.docker.io"})
# Registries must accept manifests of at least 4 MiB (OCI distribution spec); refuse more.
MAX_MANIFEST_BYTES = 4 * 1024 * 1024
# Image configs and token answers are small too; an error body is read only this far.
MAX_CONFIG_BYTES = 8 * 1024 * 1024
MAX_TOKEN_BYTES = 1024 * 1024
_CHUNK = 64 * 1024


# --- the client ----------------------------------------------------------------------------


def _env_insecure() -> frozenset[str]:
    raw = os.environ.get(INSECURE_REGISTRIES_ENV, "")
    return frozenset(part.strip().lower() for part in raw.split(",") if part.strip())


class RegistryClient:
    """Anonymous, read-only Registry HTTP API v2 client.

    Bearer tokens are cached per (realm, scope) for the client's lifetime (a token the
    registry stops accepting is fetched again once). Use it as a context manager, or call
    :meth:`close`, to release the session it created.

    ``timeout`` bounds each connect and each socket read; ``deadline`` (seconds, default
    ``$REPROBUILD_REGISTRY_TIMEOUT`` or 60) bounds all the client's waits together, from its
    creation: one client serves one command. Every body is read at most a few MiB far.
    """

    def __init__(
        self,
        session: requests.Session | None = None,
        *,
        timeout: float = 30.0,
        deadline: float | None = None,
        insecure_registries: frozenset[str] = frozenset(),
    ) -> None:
        self._own_session = session is None
        self.session = session if session is not None else requests.Session()
        self.session.max_redirects = MAX_REDIRECTS
        self.deadline = deadline if deadline is not None else deadline_from_env()
        self._watchdog = Watchdog(self.deadline)
        adapter = DeadlineAdapter(self._watchdog)
        self.session.mount("http://", adapter)
        self.session.mount("https://", adapter)
        self.timeout = min(timeout, self.deadline)
        self.insecure_registries = (
            frozenset(r.lower() for r in insecure_registries) | _env_insecure()
        )
        self._tokens: dict[tuple[str, str], str] = {}
        # which (realm, scope) answered for a (host, repository), so later requests send
        # the cached token up front instead of collecting a 401 first
        self._auth_for: dict[tuple[str, str], tuple[str, str]] = {}
        self._configs: dict[str, dict[str, Any]] = {}
        self._headers = {"User-Agent": f"reprobuild/{__version__}"}

    # -- lifetime --

    def close(self) -> None:
        if self._own_session:
            self.session.close()

    def __enter__(self) -> RegistryClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- addressing --

    def registry_url(self, registry: str) -> str:
        """``scheme://host`` of a registry's API: http for loopback and insecure ones."""
        host = DOCKER_HUB_API_HOST if registry.lower() in _DOCKER_HUB_NAMES else registry
        insecure = is_loopback(registry) or registry.lower() in self.insecure_registries
        return f"{'http' if insecure else 'https'}://{host}"

    def _url(self, ref: ImageRef, kind: str, reference: str) -> str:
        return f"{self.registry_url(ref.registry)}/v2/{ref.api_repository}/{kind}/{reference}"

    # -- public API --

    def resolve(self, ref: ImageRef | str, *, platform: str = "linux/amd64") -> Resolved:
        """Pin ``ref`` by digest and find its manifest for ``platform``.

        A ref that already carries a digest is checked to exist and kept; its tag, if any,
        is not consulted (the digest decides what is pulled).
        """
        image = parse_ref(ref) if isinstance(ref, str) else ref
        want = parse_platform(platform)
        top_digest = self._head_digest(image)
        body, media_type, top_digest = self.get_manifest(
            image, top_digest or self._reference(image)
        )
        pinned = image.with_digest(top_digest)
        manifest = self._decode(body, pinned, "manifest")
        media_type = self._media_type(manifest, media_type)

        if media_type in INDEX_TYPES:
            entry_platform, entry = self._select_entry(manifest, pinned, want)
            platform_digest = entry["digest"]
            body, sub_type, platform_digest = self.get_manifest(pinned, platform_digest)
            sub = self._decode(body, pinned, f"manifest {platform_digest}")
            sub_type = self._media_type(sub, sub_type)
            if sub_type not in MANIFEST_TYPES:
                raise RegistryError(
                    f"{pinned}: the {entry_platform} entry {platform_digest} is a {sub_type}, "
                    "not an image manifest"
                )
            return Resolved(
                ref=pinned,
                media_type=media_type,
                platform=str(entry_platform),
                platform_digest=platform_digest,
                config_digest=self._config_digest(sub),
            )

        if media_type not in MANIFEST_TYPES:
            raise RegistryError(
                f"{pinned}: unsupported manifest type {media_type or '(none)'!r}",
                hint="only OCI and Docker v2 manifests and indexes are supported",
            )
        config_digest = self._config_digest(manifest)
        found = self._single_platform(pinned, config_digest)
        if found is not None and not platform_matches(found, want):
            raise RegistryError(
                f"{pinned} is a single-platform image for {found}, not {want}",
                hint=f"ask for platform {found}, or use a tag published for {want}",
            )
        return Resolved(
            ref=pinned,
            media_type=media_type,
            platform=str(found) if found is not None else None,
            platform_digest=top_digest,
            config_digest=config_digest,
        )

    def get_manifest(self, ref: ImageRef, reference: str) -> tuple[bytes, str, str]:
        """GET a manifest by tag or digest: (body, media type, digest), the digest checked.

        For a digest reference the body must hash to it; for a tag, to the registry's
        ``Docker-Content-Digest`` (or the body's own hash when the header is missing).
        """
        by_digest = ":" in reference  # a tag cannot hold a colon
        if by_digest:
            check_digest(reference, f"{ref}")
        url = self._url(ref, "manifests", reference)
        resp = self._request("GET", ref, url, {"Accept": ACCEPT_MANIFESTS}, stream=True)
        with resp:
            self._raise_for_status(resp, ref, url, reference)
            body = self._read(resp, url, limit=MAX_MANIFEST_BYTES)
            media_type = resp.headers.get("Content-Type", "").split(";")[0].strip()
            header_digest = resp.headers.get("Docker-Content-Digest")
        actual = sha256_of(body)
        if by_digest and header_digest is not None and header_digest != reference:
            raise RegistryError(
                f"{url}: registry says digest {header_digest}, but {reference} was asked for; "
                "refusing it"
            )
        expected = reference if by_digest else header_digest
        if expected is None:  # a tag, and no Docker-Content-Digest: the body names itself
            return body, media_type, actual
        check_digest(expected, url)
        if actual != expected:
            raise RegistryError(
                f"{url}: manifest content does not match its digest "
                f"(expected {expected}, got {actual}); refusing it",
                hint="the registry, or something between it and you, altered the manifest",
            )
        return body, media_type, expected

    def put_manifest(self, ref: ImageRef, reference: str, body: bytes, media_type: str) -> str:
        """PUT a manifest (an image index, say) under a tag of ``ref``'s repository: its
        digest, the body's own sha256, which the registry's ``Docker-Content-Digest`` must
        name too. Anonymous, as every request here: a registry that wants a login for pushing
        is one error saying so."""
        url = self._url(ref, "manifests", reference)
        headers = {"Content-Type": media_type}
        try:
            resp = self._request(
                "PUT", ref, url, headers, stream=True, data=body, access="pull,push"
            )
        except RegistryError as exc:
            if "HTTP 401" not in exc.message and "anonymous token" not in exc.message:
                raise
            raise RegistryError(
                f"{ref.registry} wants a login to push to {ref.name}, and reprobuild puts "
                "manifests anonymously only",
                hint="push each platform with --platform P --push, then join them with "
                "`docker buildx imagetools create` or `crane index append`",
            ) from None
        with resp:
            self._raise_for_status(resp, ref, url, reference)
            said = resp.headers.get("Docker-Content-Digest")
        digest = sha256_of(body)
        if said is not None and said != digest:
            raise RegistryError(
                f"{url}: the registry took the manifest as {said}, but its bytes are {digest}; "
                "refusing it",
                hint="the registry, or something between it and you, altered the manifest",
            )
        return digest

    def get_blob(self, ref: ImageRef, digest: str, *, max_bytes: int = MAX_CONFIG_BYTES) -> bytes:
        """GET a (small: config) blob by digest, at most ``max_bytes``, checked against it."""
        check_digest(digest, f"a blob of {ref}")
        url = self._url(ref, "blobs", digest)
        resp = self._request("GET", ref, url, {}, stream=True)
        with resp:
            self._raise_for_status(resp, ref, url, digest, what="blob")
            data = self._read(resp, url, limit=max_bytes)
        actual = sha256_of(data)
        if actual != digest:
            raise RegistryError(
                f"{url}: blob content does not match its digest "
                f"(expected {digest}, got {actual}); refusing it"
            )
        return data

    def copy_blob(self, ref: ImageRef, digest: str, out: BinaryIO) -> int:
        """GET a blob of any size by digest into ``out``, checked against it as it streams;
        its size. A blob whose bytes do not hash to ``digest`` is an error (``out`` then holds
        bytes that must not be used)."""
        check_digest(digest, f"a blob of {ref}")
        url = self._url(ref, "blobs", digest)
        resp = self._request("GET", ref, url, {}, stream=True)
        hasher = hashlib.sha256()
        size = 0
        with resp:
            self._raise_for_status(resp, ref, url, digest, what="blob")
            try:
                with self._watchdog.armed():
                    for chunk in resp.iter_content(_CHUNK):
                        if self._watchdog.expired():
                            raise self._expired(url)
                        hasher.update(chunk)
                        out.write(chunk)
                        size += len(chunk)
            except (requests.RequestException, urllib3.exceptions.HTTPError) as exc:
                reason = (
                    failure_reason(exc, self.timeout)
                    if isinstance(exc, requests.RequestException)
                    else type(exc).__name__
                )
                raise RegistryError(f"{url}: download failed: {reason}") from None
        actual = f"sha256:{hasher.hexdigest()}"
        if actual != digest:
            raise RegistryError(
                f"{url}: blob content does not match its digest "
                f"(expected {digest}, got {actual}); refusing it"
            )
        return size

    def image_config(self, ref: ImageRef | str, *, platform: str = "linux/amd64") -> dict[str, Any]:
        """The platform image's config JSON: ``config.Env``, ``config.Labels``, ``os``..."""
        resolved = self.resolve(ref, platform=platform)
        if resolved.config_digest is None:
            raise RegistryError(f"{resolved.ref}: the manifest names no config blob")
        return copy.deepcopy(self._config_json(resolved.ref, resolved.config_digest))

    # -- internals --

    @staticmethod
    def _reference(ref: ImageRef) -> str:
        return ref.digest or ref.tag or "latest"

    def _head_digest(self, ref: ImageRef) -> str | None:
        """The Docker-Content-Digest a HEAD answers, or None when GET has to find out."""
        reference = self._reference(ref)
        url = self._url(ref, "manifests", reference)
        resp = self._request("HEAD", ref, url, {"Accept": ACCEPT_MANIFESTS})
        with resp:
            if resp.status_code == 404:
                self._raise_for_status(resp, ref, url, reference)
            if not resp.ok:
                return None  # e.g. a registry without HEAD: GET says what is wrong
            digest = resp.headers.get("Docker-Content-Digest")
        if digest is None:
            return None
        check_digest(digest, f"{url}")
        if ref.digest is not None and digest != ref.digest:
            raise RegistryError(
                f"{url}: registry says digest {digest}, but {ref.digest} was asked for; refusing it"
            )
        return digest

    def _select_entry(
        self, index: Mapping[str, Any], ref: ImageRef, want: Platform
    ) -> tuple[Platform, Mapping[str, Any]]:
        raw = index.get("manifests")
        if not isinstance(raw, list):
            raise RegistryError(f"{ref}: malformed index: no manifests list")
        entries: list[tuple[Platform, Mapping[str, Any]]] = []
        for entry in raw:
            if not isinstance(entry, Mapping):
                continue
            platform = platform_of(entry)
            if platform is not None and isinstance(entry.get("digest"), str):
                entries.append((platform, entry))
        chosen = select_platform(entries, want)
        if chosen is None:
            available = sorted({str(p) for p, _ in entries})
            listed = ", ".join(available) if available else "none"
            raise RegistryError(
                f"{ref} has no image for platform {want}; available: {listed}",
                hint="pick one of the available platforms",
            )
        platform, entry = entries[chosen]
        check_digest(entry["digest"], f"the {platform} entry of {ref}")
        return platform, entry

    def _config_digest(self, manifest: Mapping[str, Any]) -> str | None:
        config = manifest.get("config")
        digest = config.get("digest") if isinstance(config, Mapping) else None
        return digest if isinstance(digest, str) else None

    def _single_platform(self, ref: ImageRef, config_digest: str | None) -> Platform | None:
        """The platform a single-arch image's config declares (None if it declares none)."""
        if config_digest is None:
            return None
        config = self._config_json(ref, config_digest)
        os_, arch = config.get("os"), config.get("architecture")
        if not isinstance(os_, str) or not isinstance(arch, str) or not os_ or not arch:
            return None
        variant = config.get("variant")
        return Platform(
            os_.lower(),
            ARCH_ALIASES.get(arch.lower(), arch.lower()),
            variant.lower() if isinstance(variant, str) and variant else None,
        )

    def _config_json(self, ref: ImageRef, digest: str) -> dict[str, Any]:
        """A config blob, parsed; cached by digest (content-addressed, so never stale)."""
        cached = self._configs.get(digest)
        if cached is None:
            cached = self._decode(self.get_blob(ref, digest), ref, f"config {digest}")
            self._configs[digest] = cached
        return cached

    @staticmethod
    def _media_type(document: Mapping[str, Any], header_type: str) -> str:
        """The manifest's own mediaType wins over Content-Type (some registries send json)."""
        declared = document.get("mediaType")
        if isinstance(declared, str) and declared:
            return declared
        if header_type in INDEX_TYPES | MANIFEST_TYPES:
            return header_type
        # an OCI document may omit mediaType: tell them apart by shape
        if isinstance(document.get("manifests"), list):
            return OCI_INDEX
        if isinstance(document.get("config"), Mapping):
            return OCI_MANIFEST
        return header_type

    @staticmethod
    def _decode(data: bytes, ref: ImageRef, what: str) -> dict[str, Any]:
        document = jsonload.loads(data, f"{ref}: {what}", error=RegistryError)
        if not isinstance(document, dict):
            raise RegistryError(f"{ref}: {what} is not a JSON object")
        return document

    def _expired(self, url: str) -> RegistryError:
        url = self._watchdog.waiting_on or url
        return RegistryError(
            f"registry {host_of(url)} did not answer within {self.deadline:g}s",
            hint=f"set {DEADLINE_ENV} (seconds) to wait longer",
        )

    def _read(self, resp: requests.Response, url: str, *, limit: int) -> bytes:
        """The body, at most ``limit`` bytes, within the client's deadline."""
        declared = resp.headers.get("Content-Length", "")
        if declared.strip().isdigit() and int(declared) > limit:
            raise RegistryError(
                f"{url}: response of {int(declared)} bytes is larger than {limit}; refusing it"
            )
        chunks: list[bytes] = []
        size = 0
        try:
            with self._watchdog.armed():
                for chunk in resp.iter_content(_CHUNK):
                    if self._watchdog.expired():
                        raise self._expired(url)
                    size += len(chunk)
                    if size > limit:
                        raise RegistryError(
                            f"{url}: response larger than {limit} bytes; refusing it"
                        )
                    chunks.append(chunk)
        except (requests.RequestException, urllib3.exceptions.HTTPError, OSError) as exc:
            if self._watchdog.expired():
                raise self._expired(url) from None
            reason = (
                failure_reason(exc, self.timeout)
                if isinstance(exc, requests.RequestException)
                else (type(exc).__name__)
            )
            raise RegistryError(f"{url}: download failed: {reason}") from None
        if self._watchdog.expired():
            raise self._expired(url)
        return b"".join(chunks)

    # -- HTTP and auth --

    def _send(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        *,
        stream: bool = False,
        params: Mapping[str, str] | None = None,
        base: str,
        data: bytes | None = None,
    ) -> requests.Response:
        remaining = self._watchdog.remaining()
        if remaining <= 0:
            raise self._expired(url)
        # connecting is bounded by what is left (no socket to shut yet); reading by the
        # per-read timeout, and all of it by the watchdog
        wait = min(self.timeout, remaining)
        try:
            with self._watchdog.armed():
                resp = self.session.request(
                    method,
                    url,
                    headers={**self._headers, **headers},
                    params=params,
                    data=data,
                    timeout=(wait, self.timeout),
                    allow_redirects=True,
                    stream=stream,
                )
        except (requests.RequestException, urllib3.exceptions.HTTPError, OSError) as exc:
            if self._watchdog.expired():
                raise self._expired(url) from None
            if not isinstance(exc, requests.RequestException):
                raise RegistryError(f"could not reach {base}: {type(exc).__name__}") from None
            reason = failure_reason(exc, self.timeout)
            hint = None
            if isinstance(exc, requests.exceptions.SSLError):
                hint = (
                    f"if this registry speaks plain HTTP, add its host to {INSECURE_REGISTRIES_ENV}"
                )
            raise RegistryError(f"could not reach {base}: {reason}", hint=hint) from None
        if self._watchdog.expired():
            resp.close()
            raise self._expired(url)
        return resp

    def _request(
        self,
        method: str,
        ref: ImageRef,
        url: str,
        headers: Mapping[str, str],
        *,
        stream: bool = False,
        data: bytes | None = None,
        access: str = "pull",
    ) -> requests.Response:
        base = self.registry_url(ref.registry)
        target = (base, ref.api_repository)
        auth_key = self._auth_for.get(target)
        sent_token = self._tokens.get(auth_key) if auth_key is not None else None
        first = dict(headers)
        if sent_token is not None:
            first["Authorization"] = f"Bearer {sent_token}"
        resp = self._send(method, url, first, stream=stream, base=base, data=data)
        if resp.status_code != 401:
            return resp

        challenges = parse_challenges(resp.headers.get("WWW-Authenticate", ""))
        resp.close()
        bearer = next((c for c in challenges if c.scheme == "bearer"), None)
        if bearer is None:
            schemes = ", ".join(sorted({c.scheme.capitalize() for c in challenges})) or "none"
            raise RegistryError(
                f"{base} refused anonymous access to {ref} (HTTP 401, auth scheme {schemes}); "
                "registry credentials are not supported yet",
                hint="run `docker login` and `docker pull`, then read the digest with "
                "`docker inspect --format '{{index .RepoDigests 0}}' IMAGE`",
            )
        realm = bearer.params.get("realm", "")
        if not realm.startswith(("https://", "http://")):
            raise RegistryError(f"{url} answered HTTP 401 with a Bearer challenge without a realm")
        scope = bearer.params.get("scope") or f"repository:{ref.api_repository}:{access}"
        key = (realm, scope)
        if sent_token is not None and self._tokens.get(key) == sent_token:
            del self._tokens[key]  # the registry no longer takes it (expired): fetch anew
        token = self._token(realm, bearer.params.get("service"), scope, key)
        self._auth_for[target] = key
        retry = self._send(
            method,
            url,
            {**headers, "Authorization": f"Bearer {token}"},
            stream=stream,
            base=base,
            data=data,
        )
        if retry.status_code == 401:
            message = self._error_message(retry, url)
            detail = f": {message}" if message else ""
            raise RegistryError(
                f"{base} refused anonymous access to {ref} (HTTP 401{detail}); "
                "the image does not exist or is private",
                hint="check the name; private images need credentials, which are not supported yet",
            )
        return retry

    def _token(self, realm: str, service: str | None, scope: str, key: tuple[str, str]) -> str:
        cached = self._tokens.get(key)
        if cached is not None:
            return cached
        params = {"scope": scope}
        if service:
            params["service"] = service
        resp = self._send(
            "GET", realm, {"Accept": "application/json"}, params=params, base=realm, stream=True
        )
        with resp:
            if not resp.ok:
                raise RegistryError(
                    f"token service {realm} refused an anonymous token for {scope} "
                    f"(HTTP {resp.status_code})",
                    hint="the image may be private; credentials are not supported yet",
                )
            raw = self._read(resp, realm, limit=MAX_TOKEN_BYTES)
        try:
            body = jsonload.loads(raw, "token answer", error=RegistryError)
        except RegistryError:
            body = None
        token = (body.get("token") or body.get("access_token")) if isinstance(body, dict) else None
        if not isinstance(token, str) or not token:
            raise RegistryError(f"token service {realm} answered without a token for {scope}")
        self._tokens[key] = token
        return token

    def _error_message(self, resp: requests.Response, url: str) -> str:
        """The registry's own words for an error answer (read a short way), or ''."""
        try:
            with resp:
                return registry_message(self._read(resp, url, limit=MAX_ERROR_BODY_BYTES))
        except RegistryError as exc:
            if self._watchdog.expired():
                raise exc from None
            return ""

    def _raise_for_status(
        self,
        resp: requests.Response,
        ref: ImageRef,
        url: str,
        reference: str,
        *,
        what: str = "manifest",
    ) -> None:
        status = resp.status_code
        if 200 <= status < 300:
            return
        message = self._error_message(resp, url)
        detail = f": {message}" if message else ""
        if status == 404:
            if what == "blob":
                raise RegistryError(f"{ref}: no such blob {reference} at {url} (HTTP 404)")
            name = f"{ref.name}@{reference}" if ":" in reference else f"{ref.name}:{reference}"
            raise RegistryError(
                f"no such image/tag: {name} (HTTP 404 from {self.registry_url(ref.registry)})",
                hint="check the name and tag",
            )
        if status == 403:
            raise RegistryError(f"{url}: access denied (HTTP 403{detail})")
        if status == 429:
            raise RegistryError(
                f"{url}: rate limited by the registry (HTTP 429)",
                hint="wait and retry; Docker Hub limits anonymous pulls",
            )
        raise RegistryError(f"{url}: registry answered HTTP {status}{detail}")


def resolve(ref: str, *, platform: str = "linux/amd64") -> Resolved:
    """Resolve ``ref`` with a short-lived client."""
    with RegistryClient() as client:
        return client.resolve(ref, platform=platform)
