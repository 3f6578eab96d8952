"""The lock readers stay thin (issue 38), and so does the rest of the house (issue 52): no
function in a reader (the bases lock's too), in what they share, or anywhere in the builder and
the runtime, ranks above C in radon's cyclomatic complexity (A-B simple, C moderate, D and
worse complex).

Each reader writes into the shared record (:class:`reprobuild.locks.native.Pins`) through the
shared opening (``open_toml_lock``/``open_json_lock``); a reader that grows a D-rank function
is a reader that has started to do again what they share. Measured on the installed modules.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
from radon.complexity import cc_rank, cc_visit

READERS = (
    "reprobuild.locks.uvlock",
    "reprobuild.locks.poetrylock",
    "reprobuild.locks.pdmlock",
    "reprobuild.locks.pipfilelock",
    "reprobuild.locks.requirements",
    "reprobuild.locks.pylock",
    "reprobuild.locks.native",
    "reprobuild.locks.records",
    "reprobuild.locks.lockfile",
    "reprobuild.bases.baselock",  # the project's lock of its bases
    # init and the project file (issue 51): init gathers facts, chooses once, writes last
    "reprobuild.project.init",
    "reprobuild.project.config",
)


def _blocks(module: str) -> list[tuple[str, int, str]]:
    """(name, complexity, rank) of every function and method radon sees in ``module``."""
    source = Path(importlib.import_module(module).__file__ or "").read_text()
    out: list[tuple[str, int, str]] = []
    for block in cc_visit(source):
        out.append((block.fullname, block.complexity, cc_rank(block.complexity)))
        for method in getattr(block, "methods", []):
            out.append((method.fullname, method.complexity, cc_rank(method.complexity)))
    return out


@pytest.mark.parametrize("module", READERS)
def test_no_reader_function_ranks_above_c(module: str) -> None:
    blocks = _blocks(module)
    assert blocks, f"radon found no function in {module}"
    worse = [f"{name} {rank} ({score})" for name, score, rank in blocks if rank > "C"]
    assert not worse, f"{module}: above radon rank C: {', '.join(worse)}"


def test_no_function_in_the_house_ranks_above_c() -> None:
    """Issue 52: no function of the builder or the runtime above rank C (the lint's mccabe
    gate counts branches only; radon counts boolean operators and comprehensions too)."""
    import reprobuild
    import reprobuild_entrypoint

    worse: list[str] = []
    for package in (reprobuild, reprobuild_entrypoint):
        root = Path(package.__file__ or "").parent
        for path in sorted(root.rglob("*.py")):
            for block in cc_visit(path.read_text()):
                for one in (block, *getattr(block, "methods", [])):
                    if cc_rank(one.complexity) > "C":
                        rel = path.relative_to(root.parent)
                        worse.append(f"{rel}: {one.fullname} {cc_rank(one.complexity)}")
    assert not worse, f"above radon rank C: {', '.join(worse)}"


def test_the_rank_check_sees_a_branchy_function() -> None:
    branches = "\n".join(f"    if x == {i}:\n        return {i}" for i in range(25))
    source = f"def branchy(x):\n{branches}\n    return -1\n"
    ((block,),) = [cc_visit(source)]
    assert cc_rank(block.complexity) == "D"
