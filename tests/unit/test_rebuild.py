"""The pure parts of `reprobuild rebuild` (issue 11): the epoch read back from a manifest,
layers compared entry by entry, and a table that an image's own paths cannot break."""

from __future__ import annotations

import io
import tarfile

import pytest

from reprobuild.checks.rebuild import (
    FileFacts,
    LayerDiff,
    RebuildReport,
    _diff_files,
    _facts,
    epoch_of,
    render_table,
)
from reprobuild.errors import RebuildInputError


def test_epoch_round_trips_the_manifest_created() -> None:
    assert epoch_of("1970-01-01T00:00:00Z") == 0
    assert epoch_of("2023-11-14T22:13:20Z") == 1700000000


@pytest.mark.parametrize("created", ["", "yesterday", "2023-11-14 22:13:20", "2023-11-14T22:13:20"])
def test_epoch_refuses_what_is_not_a_time(created: str) -> None:
    with pytest.raises(RebuildInputError, match="is not a time of the form"):
        epoch_of(created)


def _layer(files: dict[str, bytes], mtime: int = 0) -> tarfile.TarFile:
    """An image archive holding one layer ``layer.tar`` with ``files``."""
    inner = io.BytesIO()
    with tarfile.open(fileobj=inner, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), mtime, 0o644
            tar.addfile(info, io.BytesIO(data))
    outer = io.BytesIO()
    with tarfile.open(fileobj=outer, mode="w") as tar:
        info = tarfile.TarInfo("layer.tar")
        info.size = len(inner.getvalue())
        tar.addfile(info, io.BytesIO(inner.getvalue()))
    outer.seek(0)
    return tarfile.open(fileobj=outer)


def test_files_that_differ_in_content_time_or_presence_are_named() -> None:
    a = _facts(_layer({"app/a.py": b"x", "app/b.py": b"same", "app/gone.py": b""}), "layer.tar")
    b = _facts(_layer({"app/a.py": b"y", "app/b.py": b"same", "app/new.py": b""}), "layer.tar")
    diffs = _diff_files(a, b)
    assert [d.path for d in diffs] == ["app/a.py", "app/gone.py", "app/new.py"]
    assert diffs[0].recorded is not None and diffs[0].rebuilt is not None
    assert diffs[0].recorded.sha256 != diffs[0].rebuilt.sha256
    assert diffs[1].rebuilt is None and diffs[2].recorded is None
    later = _facts(_layer({"app/b.py": b"same"}, mtime=86400), "layer.tar")
    (moved,) = _diff_files({"app/b.py": a["app/b.py"]}, later)
    assert moved.recorded is not None and moved.rebuilt is not None
    assert (moved.recorded.mtime, moved.rebuilt.mtime) == (
        "1970-01-01T00:00:00Z",
        "1970-01-02T00:00:00Z",
    )


def test_table_escapes_control_characters_in_paths_and_steps() -> None:
    facts = FileFacts("file", 1, "0644", "0:0", "1970-01-01T00:00:00Z", "ab" * 32)
    from reprobuild.checks.rebuild import FileDiff

    evil = "app/x\n  + app/forged.py\x1b[2J"
    layer = LayerDiff(2, 3, "COPY\nforged", "sha256:a", "sha256:b", (FileDiff(evil, facts, None),))
    lines = render_table(RebuildReport("img", "sha256:1", "sha256:2", layer=layer))
    assert all(line.isprintable() for line in lines)
    assert sum("forged.py" in line for line in lines) == 2  # the - row and the + (absent) row
    assert any("(absent)" in line for line in lines)


def test_match_says_so() -> None:
    lines = render_table(RebuildReport("img", "sha256:1", "sha256:1"))
    assert lines[-1] == "result    the same image: the recorded inputs give it again"


def test_mtime_beyond_any_calendar_is_shown_as_a_number() -> None:
    from reprobuild.checks.rebuild import _when

    assert _when(1700000000) == "2023-11-14T22:13:20Z"
    assert _when(8**11 * 10**12) == f"@{8**11 * 10**12!r}"
