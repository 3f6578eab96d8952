"""Image references: Docker's grammar, Hub normalisation, digest pinning, round trips."""

from __future__ import annotations

import pytest

from reprobuild.bases.refs import ImageRef, is_loopback, parse_pinned, parse_ref
from reprobuild.errors import ImageRefError

DIGEST = "sha256:" + "0123456789abcdef" * 4


@pytest.mark.parametrize(
    ("text", "registry", "repository", "tag", "digest", "explicit"),
    [
        ("python", "docker.io", "library/python", None, None, False),
        ("python:3.11-slim", "docker.io", "library/python", "3.11-slim", None, False),
        (f"python@{DIGEST}", "docker.io", "library/python", None, DIGEST, False),
        (f"python:3.11@{DIGEST}", "docker.io", "library/python", "3.11", DIGEST, False),
        ("nvidia/cuda:12.4.1-runtime", "docker.io", "nvidia/cuda", "12.4.1-runtime", None, False),
        ("library/python:3", "docker.io", "library/python", "3", None, False),
        ("docker.io/library/python:3", "docker.io", "library/python", "3", None, True),
        ("docker.io/python", "docker.io", "library/python", None, None, True),
        ("ghcr.io/org/img:v1", "ghcr.io", "org/img", "v1", None, True),
        ("nvcr.io/nvidia/pytorch:24.05-py3", "nvcr.io", "nvidia/pytorch", "24.05-py3", None, True),
        ("localhost/img", "localhost", "img", None, None, True),
        ("localhost:5000/img:t", "localhost:5000", "img", "t", None, True),
        ("127.0.0.1:5000/a/b/c", "127.0.0.1:5000", "a/b/c", None, None, True),
        (
            f"registry.example.com:5000/team/base:1@{DIGEST}",
            "registry.example.com:5000",
            "team/base",
            "1",
            DIGEST,
            True,
        ),
        ("a_b__c-d--e/x.y:T_a.g-1", "docker.io", "a_b__c-d--e/x.y", "T_a.g-1", None, False),
        ("a.b/img", "a.b", "img", None, None, True),
        ("myhost:5000/img", "myhost:5000", "img", None, None, True),
        ("Registry.Example.COM/img", "Registry.Example.COM", "img", None, None, True),
    ],
)
def test_parse_ref(
    text: str,
    registry: str,
    repository: str,
    tag: str | None,
    digest: str | None,
    explicit: bool,
) -> None:
    ref = parse_ref(text)
    assert ref == ImageRef(registry, repository, tag, digest, explicit)
    assert ref.pinned is (digest is not None)
    assert ref.api_repository == repository


def test_hub_short_name_and_library_prefix() -> None:
    ref = parse_ref("python:3.11")
    assert ref.repository == "library/python"
    assert ref.name == "python"
    # A user-written library/ prefix is also dropped from the display name.
    assert parse_ref("library/python").name == "python"
    # Only one level: library/a/b keeps it (it is not a Hub official image).
    assert parse_ref("library/a/b").name == "library/a/b"
    # A non-library two-level Hub name gets no prefix.
    assert parse_ref("user/repo").repository == "user/repo"


def test_first_component_without_dot_or_port_is_a_path() -> None:
    ref = parse_ref("myregistry/img")
    assert ref.registry == "docker.io"
    assert ref.repository == "myregistry/img"
    assert not ref.explicit_registry


@pytest.mark.parametrize(
    "text",
    [
        "python",
        "python:3.11",
        f"python@{DIGEST}",
        f"python:3.11-slim-bookworm@{DIGEST}",
        "user/repo:tag",
        "docker.io/library/python:3.11",
        "ghcr.io/org/img:v1",
        "localhost/img",
        "localhost:5000/img:latest",
        f"registry.example.com:5000/team/base:1@{DIGEST}",
        "127.0.0.1:5000/a/b/c:x",
    ],
)
def test_str_round_trips(text: str) -> None:
    ref = parse_ref(text)
    assert str(ref) == text
    assert parse_ref(str(ref)) == ref


def test_str_normalises_library_prefix() -> None:
    assert str(parse_ref("library/python:3")) == "python:3"
    assert str(parse_ref("docker.io/python")) == "docker.io/library/python"


@pytest.mark.parametrize(
    ("text", "pinned"),
    [
        (f"python:3.11@{DIGEST}", f"python@{DIGEST}"),
        (f"python@{DIGEST}", f"python@{DIGEST}"),
        (f"localhost:5000/img:t@{DIGEST}", f"localhost:5000/img@{DIGEST}"),
        (f"docker.io/library/python:3@{DIGEST}", f"docker.io/library/python@{DIGEST}"),
        (f"user/repo:tag@{DIGEST}", f"user/repo@{DIGEST}"),
    ],
)
def test_by_digest_drops_the_tag(text: str, pinned: str) -> None:
    assert parse_ref(text).by_digest() == pinned


def test_by_digest_of_unpinned_ref_refused() -> None:
    with pytest.raises(ImageRefError, match=r"python:3\.11 is not pinned by digest"):
        parse_ref("python:3.11").by_digest()


def test_with_digest_keeps_everything_else() -> None:
    ref = parse_ref("localhost:5000/img:t")
    pinned = ref.with_digest(DIGEST)
    assert pinned == ImageRef("localhost:5000", "img", "t", DIGEST, True)
    assert ref.digest is None  # frozen: the original is untouched


@pytest.mark.parametrize(
    "digest",
    [
        "sha256:" + "0" * 63,
        "sha256:" + "0" * 65,
        "sha256:" + "A" * 64,
        "sha256:" + "g" * 64,
        "sha512:" + "0" * 128,
        "0" * 64,
        "",
        "sha256:" + "0" * 64 + "@sha256:" + "0" * 64,
    ],
)
def test_bad_digest_refused(digest: str) -> None:
    with pytest.raises(ImageRefError, match="invalid digest"):
        parse_ref(f"python@{digest}")


@pytest.mark.parametrize("tag", ["", "-lead", ".lead", "a" * 129, "a b", "a/b", "a$b", "a+b"])
def test_bad_tag_refused(tag: str) -> None:
    with pytest.raises(ImageRefError):
        parse_ref(f"python:{tag}")


def test_longest_tag_accepted() -> None:
    assert parse_ref("python:" + "a" * 128).tag == "a" * 128


@pytest.mark.parametrize(
    "text",
    ["Python", "python/Sub:1", "user/Repo", "docker.io/Library/python", "localhost:5000/Img"],
)
def test_uppercase_repository_refused(text: str) -> None:
    with pytest.raises(ImageRefError, match="invalid repository name"):
        parse_ref(text)


@pytest.mark.parametrize(
    "text",
    [
        "",
        " python",
        "python ",
        "python\n",
        "py thon",
        "python;id",
        "python:3`id`",
        "$(id)/img",
        "a//b",
        "/python",
        "python/",
        "-python",
        "python-",
        "a..b",
        "x" * 513,
    ],
)
def test_malformed_refs_refused(text: str) -> None:
    with pytest.raises(ImageRefError):
        parse_ref(text)


@pytest.mark.parametrize(
    "text",
    [
        "python\n:3.11",
        f"python\n@{DIGEST}",
        f"python:3.11\n@{DIGEST}",
        f"localhost:5000/img\n@{DIGEST}",
    ],
)
def test_embedded_newline_refused(text: str) -> None:
    # The module promises a grammar with no whitespace; a newline would split a FROM line.
    with pytest.raises(ImageRefError):
        parse_ref(text)


def test_bad_registry_host_refused() -> None:
    with pytest.raises(ImageRefError, match="invalid registry"):
        parse_ref("bad_host.example.com/img")
    with pytest.raises(ImageRefError, match="invalid registry"):
        parse_ref("host.example.com:port/img")


def test_non_string_refused() -> None:
    with pytest.raises(ImageRefError):
        parse_ref(None)  # type: ignore[arg-type]  # the point: a non-string at run time


def test_parse_pinned_accepts_digest() -> None:
    ref = parse_pinned(f"python:3.11@{DIGEST}")
    assert ref.digest == DIGEST
    assert ref.tag == "3.11"


@pytest.mark.parametrize("text", ["python:3.11", "python", "localhost:5000/img:t"])
def test_parse_pinned_refuses_tag_with_resolve_hint(text: str) -> None:
    with pytest.raises(ImageRefError) as info:
        parse_pinned(text, what="base.cpu")
    assert info.value.message.startswith(f"base.cpu {text!r} is not pinned by digest")
    assert info.value.hint is not None
    assert f"reprobuild resolve {text}" in info.value.hint


def test_parse_pinned_passes_syntax_errors_through() -> None:
    with pytest.raises(ImageRefError, match="invalid repository name"):
        parse_pinned(f"Python@{DIGEST}")


@pytest.mark.parametrize(
    ("registry", "loopback"),
    [
        ("localhost", True),
        ("localhost:5000", True),
        ("127.0.0.1", True),
        ("127.0.0.1:5000", True),
        ("127.1.2.3:80", True),
        ("[::1]", True),
        ("docker.io", False),
        ("localhost.example.com", False),
        ("10.0.0.1:5000", False),
        ("ghcr.io", False),
    ],
)
def test_is_loopback(registry: str, loopback: bool) -> None:
    assert is_loopback(registry) is loopback


@pytest.mark.parametrize("registry", ["127.example.com", "127.example.com:443"])
def test_hostname_starting_with_127_is_not_loopback(registry: str) -> None:
    # A DNS name that merely starts with "127." is a remote host: treating it as loopback
    # would make the registry client talk plain HTTP to it.
    assert parse_ref(f"{registry}/img").registry == registry
    assert is_loopback(registry) is False
