"""The in-image runtime runs on every CPython a lock may need, 3.8 to 3.13 (issue 38).

Images of locks made for CPython 3.8 and 3.9 carry the same runtime (the entrypoint, the
start-up hook, the probe and the SBOM's facts, which run in the image's own interpreter).
No CPython 3.8 can be had on these machines (Debian's oldest, bullseye, has 3.9: the engine
tests run the runtime there for real), so its source is checked with vermin, which knows
the version each syntax form and standard-library name needs. Before this test, eight
modules had unquoted ``X | None`` annotations without ``from __future__ import
annotations`` (evaluated at import on 3.8 and 3.9), and the runtime called
``os.waitstatus_to_exitcode`` (3.9) and ``zip(strict=...)`` (3.10)."""

from __future__ import annotations

import subprocess
import sysconfig
from pathlib import Path

import reprobuild.imaging.sbomfacts
import reprobuild_entrypoint

OLDEST = "3.8"
VERMIN = str(Path(sysconfig.get_path("scripts")) / "vermin")  # the pinned one (test extra)


def test_the_runtime_needs_nothing_newer_than_python_3_8() -> None:
    runtime = Path(reprobuild_entrypoint.__file__).resolve().parent
    sbomfacts = Path(reprobuild.imaging.sbomfacts.__file__).resolve()
    sources = [*sorted(str(p) for p in runtime.glob("*.py")), str(sbomfacts)]
    proc = subprocess.run(
        [VERMIN, "--no-tips", "--violations", f"--target={OLDEST}-",
         "--backport", "typing", "--no-parse-comments", *sources],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert len(sources) > 20


def test_every_runtime_module_defers_its_annotations() -> None:
    """``from __future__ import annotations`` in every module with code: an annotation such as
    ``str | None`` is then never evaluated, on any Python."""
    runtime = Path(reprobuild_entrypoint.__file__).resolve().parent
    missing = [
        p.name
        for p in sorted(runtime.glob("*.py"))
        if p.name != "__init__.py" and "from __future__ import annotations" not in p.read_text()
    ]
    assert missing == []
