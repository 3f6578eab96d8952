"""Hashed requirements files (``pip-compile --generate-hashes``, ``uv pip compile
--generate-hashes``, ``uv export``) into pinned requirements."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path

from packaging.requirements import InvalidRequirement
from packaging.requirements import Requirement as _PackagingRequirement
from packaging.utils import (
    canonicalize_name,
)
from packaging.version import InvalidVersion, Version

from reprobuild.errors import LockfileError
from reprobuild.locks.records import (
    ALLOWED_HASHES,
    NAME_RE,
    PATH_RE,
    REGENERATE_HINT,
    SHELL_RE,
    VCS_PREFIXES,
    IndexOptions,
    Requirement,
    SourcePin,
    check_duplicates,
    check_hash,
    hash_problem,
    index_url_problem,
    normal_marker,
    physical_lines,
    quoted,
    sorted_requirements,
    wheel_file_version,
)
from reprobuild.locks.sources import git_pin
from reprobuild.locks.urlwheels import unhashed, wheel_filename, wheel_url_problem

# pip's comment rule: '#' at the start of a line or after whitespace.
_COMMENT_RE = re.compile(r"(^|\s+)#.*$")


_ALLOWED_OPTIONS = (
    "--index-url/-i, --extra-index-url, --find-links/-f (and --hash after a requirement)"
)


_VALUE_OPTIONS: Mapping[str, str] = {
    "--index-url": "--index-url",
    "-i": "--index-url",
    "--extra-index-url": "--extra-index-url",
    "--find-links": "--find-links",
    "-f": "--find-links",
}


# Options that change nothing once every requirement is hashed: accepted and dropped.
_IGNORED_FLAGS = frozenset({"--require-hashes"})


def _logical_lines(text: str) -> Iterator[tuple[int, str]]:
    """pip's join_lines: backslash continuations; a comment line ends a continuation."""
    start = 0
    parts: list[str] = []
    for number, line in enumerate(physical_lines(text), start=1):
        is_comment = _COMMENT_RE.match(line) is not None
        if not line.endswith("\\") or is_comment:
            if is_comment:
                line = " " + line
            if parts:
                parts.append(line)
                yield start, "".join(parts)
                parts = []
            else:
                yield number, line
        else:
            if not parts:
                start = number
            parts.append(line[:-1])
    if parts:
        yield start, "".join(parts)


def parse_requirements(text: str, path: Path) -> tuple[tuple[Requirement, ...], IndexOptions]:
    """Parse hashed requirements text; return the requirements (sorted) and index options.
    A git requirement is refused (see :func:`read_requirements` for a lock that may hold them)."""
    requirements, options, _sources = _parse(text, Path(path), allow_sources=False)
    return requirements, options


def read_requirements(
    text: str, path: Path
) -> tuple[tuple[Requirement, ...], IndexOptions, tuple[SourcePin, ...]]:
    """Like :func:`parse_requirements`, and also the git requirements pinned by commit
    (``name @ git+https://host/repo.git@<40-hex commit>``), as source pins."""
    return _parse(text, Path(path), allow_sources=True)


def _parse(
    text: str, path: Path, *, allow_sources: bool
) -> tuple[tuple[Requirement, ...], IndexOptions, tuple[SourcePin, ...]]:
    requirements: list[Requirement] = []
    sources: list[SourcePin] = []
    index_url: str | None = None
    index_url_line = 0
    extra: list[str] = []
    find_links: list[str] = []
    for number, raw in _logical_lines(text):
        line = _COMMENT_RE.sub("", raw).strip()
        if not line:
            continue
        shell = SHELL_RE.search(line)
        if shell is not None:
            raise LockfileError(
                path,
                number,
                f"{quoted(line)}: {shell.group()!r} is shell syntax, which is not allowed in a "
                "lockfile (no '$(', '${' or backticks; environment variables are not expanded)",
            )
        if line.startswith("-"):
            for option, value in _parse_option_line(line, number, path):
                if option == "--index-url":
                    if index_url is not None and index_url != value:
                        raise LockfileError(
                            path,
                            number,
                            f"--index-url {quoted(value)} conflicts with --index-url "
                            f"{quoted(index_url)} at line {index_url_line}: give one --index-url "
                            "and put other indexes in --extra-index-url",
                        )
                    index_url, index_url_line = value, number
                elif option == "--extra-index-url":
                    if value not in extra:
                        extra.append(value)
                elif value not in find_links:
                    find_links.append(value)
            continue
        if allow_sources and _GIT_LINE_RE.match(line):
            sources.append(_git_requirement(line, number, path))
        else:
            requirements.append(_parse_requirement_line(line, number, path))
    if not requirements and not sources:
        raise LockfileError(
            path,
            None,
            "holds no requirements: an empty lock would install nothing",
            hint=REGENERATE_HINT,
        )
    check_duplicates(requirements, path)
    options = IndexOptions(
        index_url=index_url, extra_index_urls=tuple(extra), find_links=tuple(find_links)
    )
    _check_source_duplicates(sources, requirements, path)
    return sorted_requirements(requirements), options, tuple(sorted(sources, key=lambda p: p.name))


def _check_source_duplicates(
    sources: list[SourcePin], requirements: list[Requirement], path: Path
) -> None:
    """Refuse a git requirement whose package is listed again (from git or an index)."""
    names = [p.name for p in sources] + [r.name for r in requirements]
    for pin in sources:
        if names.count(pin.name) > 1:
            raise LockfileError(
                path,
                pin.line,
                f"{pin.name} is listed twice (once from git): one source per package",
                hint=REGENERATE_HINT,
            )


# ``name[extras] @ git+...`` (what `uv export` and `pip freeze` write for a git dependency).
_GIT_LINE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[^\]]*\])?\s*@\s*git\+", re.IGNORECASE)


def _git_requirement(line: str, number: int, path: Path) -> SourcePin:
    """``name @ git+https://host/repo.git@<commit>[#subdirectory=x]``: a git source; hashes
    after it are dropped (pip cannot hash a VCS checkout; the host hashes the archive)."""
    req_text, _tokens = _split_requirement_line(line)
    head, marker_text = _split_marker(req_text)
    if marker_text is not None:
        raise LockfileError(
            path,
            number,
            f"{quoted(req_text)}: a marker on a git requirement is not supported: the git "
            "source is built for the image's platform whatever the marker says",
            hint="drop the marker, or lock the package from an index",
        )
    name_text, _, url = head.partition("@")
    name = canonicalize_name(name_text.split("[", 1)[0].strip())
    url = url.strip()
    base, _, fragment = url.partition("#")
    subdirectory = None
    for part in fragment.split("&") if fragment else []:
        key, _, value = part.partition("=")
        if key == "subdirectory":
            subdirectory = value
    # the ref is after the last '@' of the path (an ssh URL's user sits before the host)
    scheme_end = base.find("://")
    at = base.rfind("@")
    slash = base.find("/", scheme_end + 3) if scheme_end >= 0 else -1
    ref: str | None = None
    if at > slash >= 0:
        base, ref = base[:at], base[at + 1 :]
    return git_pin(name, "0", base, ref, path, number, subdirectory=subdirectory)


def _refuse_option(option: str, line: str, number: int, path: Path) -> LockfileError:
    if option in ("-e", "--editable"):
        problem = (
            f"{quoted(line)}: editable requirements ({option}) cannot be pinned or hashed; "
            f"only 'name==version --hash=...' lines and {_ALLOWED_OPTIONS}"
        )
        hint = "with uv export, pass --no-emit-project (and --no-editable)"
    elif option in ("-r", "--requirement", "-c", "--constraint"):
        problem = (
            f"{quoted(line)}: {option} includes another file, which is not followed: a lock must "
            "be "
            f"one self-contained file; allowed options are {_ALLOWED_OPTIONS}"
        )
        hint = "compile the included files into this one lock"
    elif option == "--hash":
        problem = (
            f"{quoted(line)}: --hash must follow a requirement on the same (continued) line; "
            f"allowed options on their own line are {_ALLOWED_OPTIONS}"
        )
        hint = "end the requirement's line with ' \\' before its --hash lines"
    else:
        problem = (
            f"{quoted(line)}: option {option} is not allowed; "
            f"allowed options are {_ALLOWED_OPTIONS}"
        )
        hint = "remove the option; reprobuild sets pip's install options itself"
    return LockfileError(path, number, problem, hint=hint)


def _parse_option_line(line: str, number: int, path: Path) -> list[tuple[str, str]]:
    """Parse a line of global options into ``(canonical option, value)`` pairs."""
    if any(q in line for q in "'\""):
        raise LockfileError(
            path,
            number,
            f"{quoted(line)}: quotes are not allowed in an option line; write bare URLs",
        )
    tokens = line.split()
    out: list[tuple[str, str]] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if not token.startswith("-"):
            raise LockfileError(
                path,
                number,
                f"{quoted(line)}: unexpected text {quoted(token)} after an option: one value per "
                "option",
            )
        if token in _IGNORED_FLAGS:
            continue
        if token.startswith("--") and "=" in token:
            option, _, value = token.partition("=")
        elif token in _VALUE_OPTIONS:
            option = token
            if i >= len(tokens) or tokens[i].startswith("-"):
                raise LockfileError(
                    path, number, f"{quoted(line)}: option {token} needs a value (a URL)"
                )
            value = tokens[i]
            i += 1
        elif token[:2] in ("-i", "-f") and not token.startswith("--"):
            option, value = token[:2], token[2:]
        else:
            option, value = token, ""
        if option not in _VALUE_OPTIONS:
            raise _refuse_option(option, line, number, path)
        canonical = _VALUE_OPTIONS[option]
        _check_option_value(canonical, value, number, path)
        out.append((canonical, value))
    return out


def _check_option_value(option: str, value: str, number: int, path: Path) -> None:
    if not value:
        raise LockfileError(path, number, f"option {option} needs a value (a URL)")
    if option == "--find-links" and value.startswith("/"):
        if PATH_RE.fullmatch(value) is None:
            raise LockfileError(
                path,
                number,
                f"--find-links {quoted(value)}: a path may hold only letters, digits and "
                "'._~/+,=@%-' (no whitespace, quotes or shell characters)",
            )
        return
    problem = index_url_problem(value, what=option)
    if problem is not None:
        if option == "--find-links" and "://" not in value and ":" not in value:
            problem = (
                f"--find-links {quoted(value)} is neither an http(s)/file URL nor an absolute path "
                "(a relative path depends on the directory pip runs in)"
            )
        raise LockfileError(path, number, problem)


def _split_requirement_line(line: str) -> tuple[str, list[str]]:
    """Split ``requirement --hash=...`` into the requirement text and its option tokens."""
    match = re.search(r"\s-", line)
    if match is None:
        return line, []
    return line[: match.start()].strip(), line[match.start() :].split()


def _split_marker(req_text: str) -> tuple[str, str | None]:
    """``(head, marker text or None)``. A URL may itself hold ';', so there it needs ' ;'."""
    is_url = "@" in req_text.split(";", 1)[0] or "://" in req_text
    if is_url:
        marker_split = re.search(r"\s;", req_text)
        if marker_split is None:
            return req_text.strip(), None
        return req_text[: marker_split.start()].strip(), req_text[marker_split.end() :]
    head, sep, rest = req_text.partition(";")
    return head.strip(), (rest if sep else None)


def _split_head(head: str, req_text: str, number: int, path: Path) -> tuple[str, str, str]:
    """``(name as written, text after the extras, extras text)``; refuses what is not data."""

    def refuse(problem: str) -> LockfileError:
        return LockfileError(path, number, problem, hint=REGENERATE_HINT)

    if any(q in head for q in "'\""):
        raise refuse(
            f"{quoted(req_text)}: quotes are only allowed inside an environment marker (after ';')"
        )
    if any(c in head for c in "$\\"):
        raise refuse(f"{quoted(req_text)}: '$' and '\\' are not allowed in a requirement")
    name_match = re.match(r"[^\s\[\]=<>!~@;(),]+", head)
    if name_match is None:
        raise refuse(f"{quoted(req_text)} does not start with a package name")
    raw_name = name_match.group()
    if "://" in head[: name_match.end() + 3] or raw_name.startswith((".", "/")):
        raise _refuse_bare_reference(req_text, raw_name, number, path)
    if not NAME_RE.fullmatch(raw_name):
        raise refuse(
            f"{quoted(raw_name)} is not a valid package name (PEP 508: letters, digits, '.', '_' "
            "and '-', starting and ending with a letter or digit)"
        )
    rest = head[name_match.end() :].lstrip()
    extras_text = ""
    if rest.startswith("["):
        close = rest.find("]")
        if close < 0:
            raise refuse(f"{quoted(req_text)}: unclosed '[' in the extras")
        extras_text, rest = rest[: close + 1], rest[close + 1 :].strip()
    return raw_name, rest, extras_text


def _requirement_marker(
    marker_text: str | None, req_text: str, number: int, path: Path
) -> str | None:
    if marker_text is None:
        return None
    if not marker_text.strip():
        raise LockfileError(
            path, number, f"{quoted(req_text)}: ';' must be followed by an environment marker"
        )
    try:
        return normal_marker(marker_text.strip())
    except ValueError as exc:
        raise LockfileError(
            path, number, f"marker {quoted(marker_text.strip())} {exc}", hint=REGENERATE_HINT
        ) from exc


def _check_hashes_present(hashes: list[str], req_text: str, number: int, path: Path) -> None:
    if not hashes:
        raise LockfileError(
            path,
            number,
            f"{quoted(req_text)} has no --hash: every requirement needs at least one "
            f"'--hash=sha256:<hex>' (pip's hash-checking mode is all-or-nothing)",
            hint="compile with --generate-hashes (uv export writes hashes by default)",
        )
    if not any(h.startswith("sha256:") for h in hashes):
        algos = ", ".join(sorted({h.partition(":")[0] for h in hashes}))
        raise LockfileError(
            path,
            number,
            f"{quoted(req_text)} is hashed only with {algos}: hermetic builds match the cached "
            "wheels by sha256, so each requirement needs a '--hash=sha256:<64 hex>' "
            "(sha384/sha512 may be given beside it)",
            hint=REGENERATE_HINT,
        )


def _parse_requirement_line(line: str, number: int, path: Path) -> Requirement:
    req_text, option_tokens = _split_requirement_line(line)
    hashes = _parse_hash_options(option_tokens, req_text, number, path)
    head, marker_text = _split_marker(req_text)
    _name, rest, extras_text = _split_head(head, req_text, number, path)
    marker = _requirement_marker(marker_text, req_text, number, path)
    url: str | None = None
    if rest.startswith("@"):
        url, version = _direct_wheel(rest[1:].strip(), _name, hashes, req_text, number, path)
    else:
        version = _check_pin(rest, req_text, number, path)
    try:
        parsed = _PackagingRequirement(head + (f" ; {marker}" if marker else ""))
    except InvalidRequirement as exc:
        first = str(exc).splitlines()[0] if str(exc) else "invalid requirement"
        raise LockfileError(
            path,
            number,
            f"{quoted(req_text)} is not a valid PEP 508 requirement ({quoted(first)[1:-1]})",
            hint=REGENERATE_HINT,
        ) from exc
    if extras_text and not parsed.extras:
        raise LockfileError(
            path, number, f"{quoted(req_text)}: empty extras '[]'", hint=REGENERATE_HINT
        )
    _check_hashes_present(hashes, req_text, number, path)
    return Requirement(
        name=canonicalize_name(parsed.name),
        version=version,
        hashes=tuple(sorted(set(hashes))),
        extras=tuple(sorted({canonicalize_name(e) for e in parsed.extras})),
        marker=marker,
        url=url,
        line=number,
    )


def _direct_wheel(
    url: str, name: str, hashes: list[str], req_text: str, number: int, path: Path
) -> tuple[str, str]:
    """``name @ https://host/x.whl[#sha256=<hex>]``: a wheel the host fetches from its URL
    (:mod:`reprobuild.locks.urlwheels`). Return the URL (its hash fragment moved into
    ``hashes``) and the wheel's version; anything but a wheel's https URL is refused."""
    base, _, fragment = url.partition("#")
    if url.lower().startswith(VCS_PREFIXES) or not base.lower().endswith(".whl"):
        raise _refuse_direct_reference(url, req_text, number, path)
    for part in fragment.split("&") if fragment else []:
        algo, _, digest = part.partition("=")
        normal = check_hash(f"{algo}:{digest}")
        if normal is None:
            raise LockfileError(
                path,
                number,
                f"{quoted(req_text)}: the URL's fragment {quoted(part)} is not "
                f"'<algorithm>=<hex digest>' with algorithm {ALLOWED_HASHES}",
                hint=REGENERATE_HINT,
            )
        hashes.append(normal)
    problem = wheel_url_problem(base, what=f"{name}: wheel")
    if problem is not None:
        raise LockfileError(path, number, problem)
    if not hashes:
        hashes.append(f"sha256:{unhashed(base, path, number, name)}")
    version = wheel_file_version(wheel_filename(base), name, req_text, number, path)
    return base, version


def _parse_hash_options(tokens: list[str], req_text: str, number: int, path: Path) -> list[str]:
    hashes: list[str] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if token == "--hash":
            if i >= len(tokens):
                raise LockfileError(path, number, f"{quoted(req_text)}: --hash needs a value")
            value = tokens[i]
            i += 1
        elif token.startswith("--hash="):
            value = token.removeprefix("--hash=")
        elif token.startswith("-"):
            option = token.partition("=")[0]
            raise LockfileError(
                path,
                number,
                f"{quoted(req_text)}: option {option} is not allowed on a requirement line; "
                "only --hash=<algo>:<hex> follows a requirement",
                hint="remove the option; reprobuild sets pip's install options itself",
            )
        else:
            raise LockfileError(
                path,
                number,
                f"{quoted(req_text)}: unexpected text {quoted(token)} among the --hash options",
            )
        normal = check_hash(value)
        if normal is None:
            raise LockfileError(path, number, hash_problem(value), hint=REGENERATE_HINT)
        hashes.append(normal)
    return hashes


def _refuse_bare_reference(req_text: str, first: str, number: int, path: Path) -> LockfileError:
    lowered = first.lower()
    if lowered.startswith(VCS_PREFIXES):
        problem = (
            f"{quoted(req_text)}: VCS requirements cannot be hashed; only "
            "'name==version --hash=sha256:...'"
        )
    else:
        problem = (
            f"{quoted(req_text)}: a bare URL or path is not a pinned requirement; only "
            "'name==version --hash=sha256:...'"
        )
    return LockfileError(path, number, problem, hint="publish a wheel and pin it by version")


def _check_pin(spec: str, req_text: str, number: int, path: Path) -> str:
    """Return the version pinned by ``spec`` (``'==1.0'``) or refuse."""
    spec = spec.strip()
    if spec.startswith("(") and spec.endswith(")"):
        spec = spec[1:-1].strip()
    want = "every requirement must be pinned to one exact version with '==' (e.g. 'numpy==2.4.6')"
    if not spec:
        raise LockfileError(
            path, number, f"{quoted(req_text)} has no version: {want}", hint=REGENERATE_HINT
        )
    if "," in spec:
        raise LockfileError(
            path, number, f"{quoted(req_text)} has more than one version specifier: {want}"
        )
    match = re.fullmatch(r"(~=|===|==|!=|<=|>=|<|>)\s*(\S+)", spec)
    if match is None:
        raise LockfileError(
            path, number, f"{quoted(req_text)}: {quoted(spec)} is not a version specifier"
        )
    op, version = match.groups()
    if op == "===":
        raise LockfileError(
            path,
            number,
            f"{quoted(req_text)} uses arbitrary equality '===': {want}",
            hint=REGENERATE_HINT,
        )
    if op != "==":
        raise LockfileError(
            path, number, f"{quoted(req_text)} is not pinned ('{op}'): {want}", hint=REGENERATE_HINT
        )
    if version.endswith(".*"):
        raise LockfileError(
            path,
            number,
            f"{quoted(req_text)} pins a wildcard '=={version}': {want}",
            hint=REGENERATE_HINT,
        )
    try:
        Version(version)
    except InvalidVersion as exc:
        raise LockfileError(
            path, number, f"{quoted(version)} is not a valid version (PEP 440): {want}"
        ) from exc
    return version


def _refuse_direct_reference(url: str, req_text: str, number: int, path: Path) -> LockfileError:
    """``name @ URL``: the wheel cache and the image install by name and version from an
    index, so a URL requirement either fails a hermetic build or fetches at build time."""
    if url.lower().startswith(VCS_PREFIXES):
        problem = (
            f"{quoted(req_text)}: VCS requirements cannot be hashed or installed hermetically; "
            "only 'name==version --hash=sha256:...'"
        )
    else:
        problem = (
            f"{quoted(req_text)}: direct references ('name @ URL', https:// or file:) are not "
            "accepted, a hermetic build installs wheels by name and version; only "
            "'name==version --hash=sha256:...'"
        )
    return LockfileError(
        path,
        number,
        problem,
        hint="pin the wheel by version and name its index with --index-url, "
        "--extra-index-url or --find-links",
    )
