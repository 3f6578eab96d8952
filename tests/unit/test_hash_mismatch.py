"""pip's hash-mismatch report as one line (reprobuild.locks.wheels._hash_mismatch), read from
pip's real output: the lock names hashes, not files, so a file pip took whose hash the lock
lacks is named with its file name and never called tampered with (issue 51: a lock read for
CPython 3.13 on a 3.11 base was reported as a tampered numpy wheel)."""

from __future__ import annotations

from pathlib import Path

import pytest

from reprobuild.locks.lockfile import load_lock
from reprobuild.locks.wheels import _hash_mismatch

URL = (
    "https://files.pythonhosted.org/packages/b7/ce/149a00dd41f10bc29e5921b496af8b574d8413afcd5e30"
    "dfa0ed46c2cc5e/six-1.17.0-py2.py3-none-any.whl"
)
GOT = "4721f391ed90541fddacab5acf947aa0d3dc7d27b2e1e8eda2be8970586c3274"
REPORT = (
    "ERROR: THESE PACKAGES DO NOT MATCH THE HASHES FROM THE REQUIREMENTS FILE. If you have "
    "updated the package versions, please update the hashes. Otherwise, examine the package "
    "contents carefully; someone may have tampered with them.\n"
    "    six==1.17.0 from {url}{tail}:\n"
    "        Expected sha256 " + "0" * 64 + "\n"
    "             Got        " + GOT + "\n\n"
)


@pytest.mark.parametrize(
    "tail", [" (from -r /tmp/r.txt (line 1))", ""], ids=["pip-23-and-later", "url-only"]
)
def test_the_file_pip_took_is_named_and_not_called_tampered(tmp_path: Path, tail: str) -> None:
    lock_path = tmp_path / "requirements.lock"
    lock_path.write_text("# a lock\nsix==1.17.0 --hash=sha256:" + "0" * 64 + "\n")
    error = _hash_mismatch(load_lock(lock_path), REPORT.format(url=URL, tail=tail))
    assert error is not None
    assert error.message == (
        f"{lock_path}:2: the file pip took for six==1.17.0 (six-1.17.0-py2.py3-none-any.whl) "
        f"has sha256 {GOT}, which is none of the lock's hashes for it"
    )
    assert "tampered" not in error.message + (error.hint or "")
    assert "another Python or platform than the base's" in (error.hint or "")


def test_other_output_is_not_a_mismatch(tmp_path: Path) -> None:
    lock_path = tmp_path / "requirements.lock"
    lock_path.write_text("six==1.17.0 --hash=sha256:" + "0" * 64 + "\n")
    assert _hash_mismatch(load_lock(lock_path), "ERROR: No matching distribution\n") is None
