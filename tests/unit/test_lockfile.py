"""Lockfile parsing: real-world locks in ``good/``, a corpus of refusals in ``bad/``.

Each ``bad/<file>`` has a sidecar ``<file>.expected`` holding a substring of the error message
(``file:line:`` prefix included), or a Python regex when it starts with ``re:``.
Rendered forms of the good locks are kept whole in ``rendered/``; after an intended change,
regenerate them with
``REPROBUILD_REGENERATE_GOLDEN=1 python -m pytest tests/unit/test_lockfile.py``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import random
import re
from pathlib import Path

import pytest

from reprobuild.errors import LockfileError
from reprobuild.locks.lockfile import (
    SNIFF_BYTES,
    IndexOptions,
    Lock,
    Requirement,
    format_of_file,
    is_pylock_name,
    load_lock,
    parse_lock_bytes,
    parse_pylock,
    parse_requirements,
    sniff_format,
)

DATA = Path(__file__).resolve().parent.parent / "data" / "lockfiles"
GOOD = DATA / "good"
NATIVE = DATA / "native"
BAD = DATA / "bad"
RENDERED = DATA / "rendered"

GOOD_FILES = sorted(p.name for p in GOOD.iterdir() if p.is_file())
BAD_FILES = sorted(p.name for p in BAD.iterdir() if p.is_file() and p.suffix != ".expected")

SIX_WHEEL = "sha256:4721f391ed90541fddacab5acf947aa0d3dc7d27b2e1e8eda2be8970586c3274"
SIX_SDIST = "sha256:ff70335d468e7eb6ec65b95b99d3a2836546063f63acc5171de367e834932a81"
TORCH_CPU = "sha256:6746dbcbeb526eb61330b76b41ff1b4eb848951103a892eeb080dfa2b264667b"


def _sha(seed: str) -> str:
    return hashlib.sha256(seed.encode()).hexdigest()


def _by_name(lock: Lock) -> dict[str, list[Requirement]]:
    out: dict[str, list[Requirement]] = {}
    for req in lock.requirements:
        out.setdefault(req.name, []).append(req)
    return out


def _without_lines(requirements: tuple[Requirement, ...]) -> list[Requirement]:
    return [dataclasses.replace(r, line=0) for r in requirements]


# --------------------------------------------------------------------------- bad corpus


def test_bad_corpus_is_complete() -> None:
    assert len(BAD_FILES) >= 18
    for name in BAD_FILES:
        assert (BAD / f"{name}.expected").is_file(), f"{name} has no .expected sidecar"
    orphans = [
        p.name
        for p in BAD.glob("*.expected")
        if not (BAD / p.name.removesuffix(".expected")).is_file()
    ]
    assert not orphans


@pytest.mark.parametrize("name", BAD_FILES)
def test_bad_lockfile_is_refused(name: str) -> None:
    expected = (BAD / f"{name}.expected").read_text(encoding="utf-8").rstrip("\n")
    with pytest.raises(LockfileError) as info:
        load_lock(BAD / name)
    err = info.value
    assert type(err) is LockfileError
    message = str(err)
    assert "\n" not in message and "\r" not in message
    assert err.hint is None or "\n" not in err.hint
    assert message.startswith(f"{BAD / name}:"), message
    if expected.startswith("re:"):
        assert re.search(expected[3:], message), f"{message!r} !~ {expected[3:]!r}"
    else:
        assert expected in message
    if err.line is not None:
        assert message.startswith(f"{BAD / name}:{err.line}: ")


# --------------------------------------------------------------------------- good locks


@pytest.mark.parametrize("name", GOOD_FILES)
def test_good_lockfile_loads_and_round_trips(name: str) -> None:
    path = GOOD / name
    lock = load_lock(path)
    assert lock.path == path
    assert lock.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert lock.format == ("pylock" if name.startswith("pylock") else "requirements")
    assert lock.requirements
    keys = [(r.name, r.marker or "") for r in lock.requirements]
    assert keys == sorted(keys)
    for req in lock.requirements:
        assert req.hashes and list(req.hashes) == sorted(set(req.hashes))
        assert req.line > 0

    text = lock.render(index_options=True)
    assert text == load_lock(path).render(index_options=True)
    assert text.endswith("\n") and "\r" not in text
    assert lock.sha256 in text.splitlines()[0]
    requirements, options = parse_requirements(text, Path("rendered.txt"))
    assert _without_lines(requirements) == _without_lines(lock.requirements)
    assert options == lock.options

    bare = lock.render(index_options=False)
    assert not [line for line in bare.splitlines() if line.startswith("-")]
    requirements, options = parse_requirements(bare, Path("rendered.txt"))
    assert _without_lines(requirements) == _without_lines(lock.requirements)
    assert options == IndexOptions()

    # Rendering the rendered text again changes nothing but the header's sha256.
    again = parse_lock_bytes(text.encode(), Path("rendered.txt"))
    assert again.render(index_options=True).splitlines()[1:] == text.splitlines()[1:]


@pytest.mark.parametrize("name", GOOD_FILES)
def test_rendered_text_matches_golden(name: str) -> None:
    text = load_lock(GOOD / name).render(index_options=True)
    golden = RENDERED / f"{name}.rendered"
    if os.environ.get("REPROBUILD_REGENERATE_GOLDEN") == "1":
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text, encoding="utf-8", newline="\n")
    assert golden.read_text(encoding="utf-8") == text


def test_uv_pip_compile_output() -> None:
    lock = load_lock(GOOD / "uv-pip-compile.txt")
    assert [(r.name, r.version, r.line) for r in lock.requirements] == [
        ("numpy", "2.4.6", 3),
        ("six", "1.17.0", 77),
    ]
    numpy, six = lock.requirements
    assert len(numpy.hashes) == 72
    assert numpy.hashes[0] == (
        "sha256:001fbb8e08d942dd57599e781f2472269ee7f2755fae407b4f67b2f0b17da3f1"
    )
    assert six.hashes == (SIX_WHEEL, SIX_SDIST)
    assert six.marker is None and six.url is None and six.extras == ()
    assert lock.options == IndexOptions()


def test_pip_compile_output_with_index_options() -> None:
    lock = load_lock(GOOD / "pip-compile.txt")
    assert lock.options == IndexOptions(
        index_url="https://download.pytorch.org/whl/cpu",
        extra_index_urls=("https://pypi.org/simple",),
        find_links=("/opt/wheels",),
    )
    reqs = _by_name(lock)
    assert sorted(reqs) == [
        "filelock",
        "fsspec",
        "jinja2",
        "markupsafe",
        "mpmath",
        "networkx",
        "numpy",
        "setuptools",  # listed under pip-compile's "unsafe" comment, still a requirement
        "sympy",
        "torch",
        "typing-extensions",
    ]
    (torch,) = reqs["torch"]
    assert torch.version == "2.13.0+cpu"
    assert torch.hashes == (TORCH_CPU,)
    assert torch.line_text() == f"torch==2.13.0+cpu --hash={TORCH_CPU}"
    assert reqs["sympy"][0].line == 258  # the multi-line "# via" block before it is skipped
    assert len(reqs["markupsafe"][0].hashes) == 151


def test_uv_export_with_markers() -> None:
    lock = load_lock(GOOD / "uv-export.txt")
    got = [(r.name, r.version, r.marker) for r in lock.requirements]
    assert got == [
        ("colorama", "0.4.6", 'sys_platform == "win32"'),
        ("numpy", "2.2.6", 'python_full_version < "3.11"'),
        ("numpy", "2.4.6", 'python_full_version >= "3.11"'),
        ("six", "1.17.0", None),
        ("tomli", "2.5.0", 'python_full_version < "3.11"'),
    ]
    colorama = lock.requirements[0]
    assert colorama.line == 3
    assert colorama.line_text() == (
        'colorama==0.4.6 ; sys_platform == "win32" '
        "--hash=sha256:08695f5cb7ed6e0531a20572697297273c47b8cae5a63ffc6d6ed5c201be6e44 "
        "--hash=sha256:4f1d9991f5acc0ca119f9d443620b77f9d6b33703e51011c16baf57afb285fc6"
    )


def test_pylock_from_uv_export() -> None:
    lock = load_lock(GOOD / "pylock.toml")
    assert lock.format == "pylock"
    assert lock.options == IndexOptions(index_url="https://pypi.org/simple")
    got = [(r.name, r.version, r.marker, r.line) for r in lock.requirements]
    assert got == [
        ("colorama", "0.4.6", 'sys_platform == "win32"', 7),
        ("numpy", "2.2.6", 'python_full_version < "3.11"', 15),
        ("numpy", "2.4.6", 'python_full_version >= "3.11"', 28),
        ("six", "1.17.0", None, 40),
        ("tomli", "2.5.0", 'python_full_version < "3.11"', 47),
    ]
    six = _by_name(lock)["six"][0]
    assert six.hashes == (SIX_WHEEL,)  # the sdist's hash is not offered to pip
    assert [len(r.hashes) for r in lock.requirements] == [1, 4, 3, 1, 2]


def test_pylock_with_wheel_tables_and_two_indexes() -> None:
    lock = load_lock(GOOD / "pylock.torch-cpu.toml")
    assert lock.options == IndexOptions(
        index_url="https://download.pytorch.org/whl/cpu",
        extra_index_urls=("https://pypi.org/simple",),
    )
    reqs = _by_name(lock)
    assert sorted(reqs) == ["filelock", "torch", "typing-extensions"]
    assert reqs["torch"][0] == Requirement(
        name="torch", version="2.13.0+cpu", hashes=(TORCH_CPU,), line=12
    )
    typing = reqs["typing-extensions"][0]
    assert typing.line == 25
    assert typing.marker == 'python_version >= "3.9"'
    assert [h.split(":")[0] for h in typing.hashes] == ["sha256", "sha512"]
    assert not any("dc983d19" in h for h in typing.hashes)  # sdist hash left out
    assert reqs["filelock"][0].line == 40


def test_hand_edited_requirements() -> None:
    lock = load_lock(GOOD / "hand-edited.txt")
    assert lock.options == IndexOptions(
        index_url="https://download.pytorch.org/whl/cpu",
        extra_index_urls=("https://pypi.org/simple",),
        find_links=("/opt/wheels", "file:///srv/wheels"),
    )
    pyyaml, requests, torch = lock.requirements
    assert pyyaml.name == "pyyaml" and pyyaml.line == 8
    assert all(re.fullmatch(r"sha256:[0-9a-f]{64}", h) for h in pyyaml.hashes)  # lower-cased
    assert len(pyyaml.hashes) == 2
    assert requests.extras == ("security", "socks")
    assert requests.marker == 'python_version >= "3.9" and sys_platform == "linux"'
    assert len(requests.hashes) == 2  # the repeated sha256 is kept once
    assert {h.split(":")[0] for h in requests.hashes} == {"sha256", "sha384"}
    assert torch.version == "2.13.0+cpu"
    assert torch.url is None  # direct references ('name @ URL') are refused
    assert torch.line_text() == f"torch==2.13.0+cpu --hash={TORCH_CPU}"
    assert requests.line_text().startswith(
        'requests[security,socks]==2.32.5 ; python_version >= "3.9" and sys_platform == '
        '"linux" --hash=sha256:'
    )


def test_render_layout() -> None:
    lock = load_lock(GOOD / "hand-edited.txt")
    lines = lock.render(index_options=True).splitlines()
    assert lines[0].startswith("# ") and lines[1].startswith("# ")
    assert lines[2:6] == [
        "--index-url https://download.pytorch.org/whl/cpu",
        "--extra-index-url https://pypi.org/simple",
        "--find-links /opt/wheels",
        "--find-links file:///srv/wheels",
    ]
    assert lines[6:] == [r.line_text() for r in lock.requirements]
    assert str(lock.path) not in lock.render(index_options=True)  # content-addressed only


# --------------------------------------------------------------------------- edge cases


def test_bom_and_crlf_are_accepted(tmp_path: Path) -> None:
    text = (
        f"six==1.17.0 \\\r\n    --hash=sha256:{_sha('six')}\r\n"
        f"\r\nnumpy==2.4.6 --hash=sha256:{_sha('np')}\r\n"
    )
    data = b"\xef\xbb\xbf" + text.encode()
    path = tmp_path / "requirements.txt"
    path.write_bytes(data)
    lock = load_lock(path)
    assert [(r.name, r.line) for r in lock.requirements] == [("numpy", 4), ("six", 1)]
    assert lock.sha256 == hashlib.sha256(data).hexdigest()


def test_comment_line_ends_a_continuation_like_pip(tmp_path: Path) -> None:
    text = f"six==1.17.0 --hash=sha256:{_sha('six')} \\\n    # via -r requirements.in\n"
    requirements, _ = parse_requirements(text, tmp_path / "r.txt")
    assert [r.name for r in requirements] == ["six"]


def test_same_package_with_different_markers_is_allowed() -> None:
    text = (
        f"numpy==2.2.6 ; python_version < '3.11' --hash=sha256:{_sha('a')}\n"
        f"numpy==2.4.6 ; python_version >= '3.11' --hash=sha256:{_sha('b')}\n"
    )
    requirements, _ = parse_requirements(text, Path("r.txt"))
    assert [r.version for r in requirements] == ["2.2.6", "2.4.6"]


def test_identical_index_options_are_collapsed() -> None:
    text = (
        "--index-url https://pypi.org/simple\n-i https://pypi.org/simple\n"
        "--extra-index-url https://a.example/simple --extra-index-url=https://a.example/simple\n"
        f"six==1.17.0 --hash=sha256:{_sha('six')}\n"
    )
    _, options = parse_requirements(text, Path("r.txt"))
    assert options == IndexOptions(
        index_url="https://pypi.org/simple", extra_index_urls=("https://a.example/simple",)
    )


def test_long_offending_text_is_shortened_to_one_line() -> None:
    clauses = "platform_machine != 'x' and " * 5
    marker = f"python_version >= '3.11' and {clauses}os_name == 'posix'"
    text = f"numpy>=1.0 ; {marker} --hash=sha256:{_sha('np')}\n"
    with pytest.raises(LockfileError) as info:
        parse_requirements(text, Path("r.txt"))
    message = str(info.value)
    assert message.startswith("r.txt:1: \"numpy>=1.0 ; python_version >= '3.11' and")
    assert '..." is not pinned' in message
    assert len(message) < 250 and "\n" not in message


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(LockfileError) as info:
        load_lock(tmp_path / "nope.txt")
    assert info.value.line is None
    assert str(info.value).startswith(f"{tmp_path / 'nope.txt'}: ")
    assert isinstance(info.value.__cause__, OSError)


def test_directory(tmp_path: Path) -> None:
    with pytest.raises(LockfileError, match="is a directory") as info:
        load_lock(tmp_path)
    assert info.value.line is None


def test_unreadable_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "requirements.txt"
    path.write_text("six==1.17.0\n")

    def deny(name: object, *args: object, **kwargs: object) -> int:
        raise PermissionError(13, "Permission denied", str(name))

    monkeypatch.setattr("reprobuild._util.boundedread.os.open", deny)
    with pytest.raises(LockfileError, match="cannot read: Permission denied"):
        load_lock(path)


def test_format_is_chosen_by_file_name_else_by_content(tmp_path: Path) -> None:
    """A lock under its tool's name is read as that; under any other name (`lock:` and
    `init --lock` take any), its content says which format it is; text that is none of them
    is read as a requirements file, and refused where it is not one."""
    assert is_pylock_name(Path("pylock.toml"))
    assert is_pylock_name(Path("x/pylock.dev.toml"))
    assert not is_pylock_name(Path("pylock..toml"))
    assert not is_pylock_name(Path("pyproject.toml"))
    assert not is_pylock_name(Path("pylock.txt"))
    other = tmp_path / "locks.toml"
    other.write_text((GOOD / "pylock.toml").read_text())
    lock = load_lock(other)
    assert lock.format == "pylock"
    assert lock.requirements == load_lock(GOOD / "pylock.toml").requirements
    for folder, fmt in (("poetry-1.1", "poetry"), ("poetry-2.1", "poetry"), ("pdm", "pdm"),
                        ("pipenv", "pipfile"), ("uv-extras", "uv")):  # fmt: skip
        (native,) = [p for p in (NATIVE / folder).iterdir() if p.name.endswith(".lock")]
        assert format_of_file(native) == fmt
        assert sniff_format(native.read_bytes()[:SNIFF_BYTES]) == fmt, native
    not_a_lock = tmp_path / "notes.toml"
    not_a_lock.write_text('title = "x"\n')
    assert format_of_file(not_a_lock) == "requirements"
    with pytest.raises(LockfileError, match=r"notes\.toml:1: "):
        load_lock(not_a_lock)


def test_pylock_inline_packages_array_names_the_line(tmp_path: Path) -> None:
    text = (
        'lock-version = "1.0"\n'
        "packages = [\n"
        '  { name = "six", version = "1.17.0", wheels = [{ url = "https://h.example/'
        f'six-1.17.0-py2.py3-none-any.whl", hashes = {{ sha256 = "{_sha("six")}" }} }}] }},\n'
        '  { name = "numpy", version = "2.4.6", sdist = { path = "numpy-2.4.6.tar.gz", '
        f'hashes = {{ sha256 = "{_sha("np")}" }} }} }},\n'
        "]\n"
    )
    with pytest.raises(LockfileError) as info:
        parse_pylock(text, tmp_path / "pylock.toml")
    assert info.value.line == 4
    assert "package numpy: its sdist has no 'url'" in str(info.value)


def test_records_are_frozen() -> None:
    req = Requirement(name="six", version="1.17.0", hashes=(SIX_WHEEL,))
    with pytest.raises(dataclasses.FrozenInstanceError):
        req.version = "1.16.0"  # type: ignore[misc]
    assert req.line_text() == f"six==1.17.0 --hash={SIX_WHEEL}"
    assert hash(req) == hash(Requirement(name="six", version="1.17.0", hashes=(SIX_WHEEL,)))


@pytest.mark.parametrize("name", GOOD_FILES)
def test_mutated_locks_load_or_raise_lockfile_error(name: str) -> None:
    """A seeded mutation fuzz (no Hypothesis here): whatever the bytes, either a Lock whose
    rendering parses back to the same requirements, or a one-line LockfileError."""
    rng = random.Random(f"lockfile-{name}")
    data = (GOOD / name).read_bytes()
    tokens = [
        *(c.encode() for c in "=<>~!;@[]()\\\"'`$#:/.,-_ \t\n\r+*{}%&|?"),
        b"\x00",
        b"\xff",
        "\u202e".encode(),
        b"--hash",
        b" ; ",
        b"===",
        b"[[packages]]",
        b"\\\n",
        b"\n-e .\n",
        b"${X}",
        b"$(",
        b"git+",
    ]
    for _ in range(150):
        mutated = bytearray(data)
        for _ in range(rng.randint(1, 3)):
            pos = rng.randrange(len(mutated) + 1)
            roll = rng.random()
            if roll < 0.5:
                mutated[pos:pos] = rng.choice(tokens)
            elif roll < 0.8:
                del mutated[pos : pos + rng.randint(1, 20)]
            else:
                mutated[pos:pos] = data[rng.randrange(len(data)) :][: rng.randint(1, 120)]
        try:
            lock = parse_lock_bytes(bytes(mutated), GOOD / name)
        except LockfileError as err:
            assert "\n" not in str(err) and "\r" not in str(err)
            continue
        text = lock.render(index_options=True)
        assert not any(bad in text for bad in ("$(", "${", "`", "\x00", "\r"))
        requirements, options = parse_requirements(text, Path("rendered.txt"))
        assert _without_lines(requirements) == _without_lines(lock.requirements)
        assert options == lock.options


def test_plain_http_index_is_accepted_on_loopback_only(tmp_path: Path) -> None:
    lock = tmp_path / "requirements.lock"
    lock.write_text(
        "--index-url http://127.0.0.1:5000/simple\n--extra-index-url http://localhost/simple\n"
        f"six==1.17.0 --hash=sha256:{'a' * 64}\n"
    )
    options = load_lock(lock).options
    assert options.index_url == "http://127.0.0.1:5000/simple"
    assert options.extra_index_urls == ("http://localhost/simple",)


def test_sha512_beside_sha256_is_accepted(tmp_path: Path) -> None:
    lock = tmp_path / "requirements.lock"
    lock.write_text(f"six==1.17.0 --hash=sha512:{'b' * 128} --hash=sha256:{'a' * 64}\n")
    (req,) = load_lock(lock).requirements
    assert [h.split(":")[0] for h in req.hashes] == ["sha256", "sha512"]
