"""What `init` writes, `render` takes as it is (issue 38): for every lock in the tests' data
(wild, native, good and bad), init either refuses it in one line and writes nothing, or writes
a project that render, with no flag at all, turns into a build context.

Run in-process (the same library calls the two commands make) to keep it to seconds; the CLI
path of the same property has its own tests (test_wild_locks, test_init)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reprobuild.bases.catalog import load_catalog
from reprobuild.errors import ReprobuildError
from reprobuild.imaging.context import write_context
from reprobuild.imaging.initservices import init_services
from reprobuild.imaging.plan import Plan, plan_build, record_new_base
from reprobuild.imaging.render import render_context
from reprobuild.locks.lockfile import format_of_file
from reprobuild.project.config import load_config
from reprobuild.project.init import Choice, InitOptions, init_project

LOCKS = Path(__file__).resolve().parent.parent / "data" / "lockfiles"
NOT_LOCKS = ("pyproject.toml", "Pipfile", "README.md", "LICENSE")
COMMAND = ("python", "train.py")


def _is_lock(path: Path) -> bool:
    if path.name in NOT_LOCKS or path.name.startswith("export-") or path.suffix == ".expected":
        return False
    if path.name == "sync-dry-run.txt":
        return False
    if format_of_file(path) != "requirements":
        return True
    try:
        return "--hash" in path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False


CASES = sorted(str(p.relative_to(LOCKS)) for p in LOCKS.rglob("*") if p.is_file() and _is_lock(p))


def _project(tmp_path: Path, lock: str) -> tuple[Path, str]:
    """A project folder holding the lock (and, for a native lock, its folder's files)."""
    source = LOCKS / lock
    project = tmp_path / "proj"
    if source.parent.parent.name in ("wild", "native"):
        shutil.copytree(source.parent, project)
    else:
        project.mkdir(parents=True)
        shutil.copy(source, project / source.name)
    (project / "train.py").write_text("print('train')\n")
    return project, source.name


@pytest.mark.parametrize("lock", CASES)
def test_what_init_accepts_render_takes_with_no_flag(tmp_path: Path, lock: str) -> None:
    project, name = _project(tmp_path, lock)
    before = sorted(p.name for p in project.iterdir())
    try:
        result = init_project(project, InitOptions(lock=name, command=COMMAND), init_services())
    except ReprobuildError as exc:  # refused: one line, nothing written
        assert "\n" not in exc.message
        assert sorted(p.name for p in project.iterdir()) == before
        return
    planned = plan_build(project)  # no --gpu, --base, --variant: what init wrote
    _plan_keeps_inits_choice(result.choice, planned)
    record_new_base(planned, lambda _line: None)
    out = tmp_path / "ctx"
    write_context(
        render_context(planned.spec), out, epoch=planned.spec.epoch, project=project,
        protected=(), reprobuild_owned=False,
    )  # fmt: skip
    assert (out / "Dockerfile").is_file() and (out / "requirements.lock").is_file()


def _plan_keeps_inits_choice(choice: Choice | None, planned: Plan) -> None:
    """issue 51: what image would build is what init chose: the variant, the base, the
    CPython and the set of packages."""
    assert choice is not None
    config = planned.config
    assert planned.spec.variant == ("gpu" if choice.gpu else "cpu")
    assert (config.base_gpu if choice.gpu else config.base_cpu) == choice.base
    entry = load_catalog().entries[choice.base]  # init chose a catalog base (no --base here)
    assert ".".join((entry.python or "").split(".")[:2]) == choice.python
    if choice.lock.native:
        assert config.select.python == choice.python
    assert {r.name for r in planned.spec.lock.requirements} == set(choice.lock.names)


def test_the_property_covers_enough_locks(tmp_path: Path) -> None:
    """Not vacuous: locks of every format are in it, and init accepts some of each."""
    accepted = set()
    for number, lock in enumerate(CASES):
        project, name = _project(tmp_path / str(number), lock)
        try:
            init_project(project, InitOptions(lock=name, command=COMMAND), init_services())
        except ReprobuildError:
            continue
        accepted.add(lock)
    formats = {format_of_file(LOCKS / c) for c in accepted}
    assert formats == {"uv", "poetry", "pdm", "pipfile", "pylock", "requirements"}
    assert len(CASES) >= 100 and len(accepted) >= 20


# Command words as a user types them after --command: numbers, flags with `=`, quotes,
# YAML's words (true, null, ~), octal-looking and sexagesimal numbers, any printable text.
_TYPED = [
    *("20000", "1e-3", "3.10", "010", "0x1F", "1_000", "1:30", "true", "off", "null", "~"),
    *("--total-timesteps", "--lr=3e-4", "-n", "'q'", '"q"', "#x", "x #y", "&a", "*a", "!tag"),
    *("%p", "@at", "`t`", "a:", "a: b", "[a]", "{a}", "-", "- x", "a b", " ", "\\", "é"),
    *("\u2028", "\x85"),
]
_WORDS = st.one_of(
    st.sampled_from(_TYPED),
    st.text(
        alphabet=st.characters(exclude_categories=["Cs"], min_codepoint=32).filter(
            lambda c: c != "\x7f"
        ),
        min_size=1,
        max_size=20,
    ),
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(words=st.lists(_WORDS, min_size=1, max_size=5))
def test_every_command_word_init_writes_reads_back_as_itself(
    tmp_path: Path, words: list[str]
) -> None:
    """issue 51: `--command 'python ppo.py --total-timesteps 20000'` wrote 20000 unquoted and
    image refused init's own file (`command word 20000 must be a string`)."""
    project = Path(tempfile.mkdtemp(dir=tmp_path))
    shutil.copy(LOCKS.parent / "projects" / "tiny" / "requirements.lock", project)
    command = ("python", *words)
    init_project(project, InitOptions(command=command), init_services())
    assert load_config(project).command == command
