"""What an sdist's build backend asks for at build time, asked in the pinned base.

An sdist's ``[build-system] requires`` is not all it builds with: PEP 517's
``get_requires_for_build_wheel`` hook names more (setuptools answers with ``setup_requires``:
seqeval 1.2.2 asks for ``setuptools_scm``, without which it builds as version 0.0.0). The
hook is the backend's own code, from the wild, so it is never run on the host: each sdist's
backend is asked in a container from the pinned base, with no network at all (network mode
``none``), as the unprivileged user 65534, with HOME and TMPDIR its own, stopped after
``REPROBUILD_ASK_TIMEOUT`` seconds (300 unless set). The container holds a venv with the build
lock's wheels of that round (fetched and sha256-checked on the host, installed by reprobuild's
pinned uv with ``--require-hashes --no-index --offline``), as the wheel-build stage's venv
will, and the sdist unpacked (plain files and folders only).

The hook is called with ``pyproject_hooks`` (pypa's PEP 517 caller): its
``BuildBackendHookCaller`` writes the hook's input and reads its answer on the host; its
runner here carries its in-process script and input into the container and the answer out.
:func:`reprobuild.locks.buildlock.compile_build_lock` resolves the answers with the static
requires and asks again until they bring nothing new.
"""

from __future__ import annotations

import io
import re
import tarfile
import tempfile
import tomllib
import warnings
import zipfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from packaging.requirements import InvalidRequirement, Requirement
from pyproject_hooks import BackendUnavailable, BuildBackendHookCaller, HookMissing

from reprobuild._util.envnum import env_seconds
from reprobuild.backends.engine import Engine, RunResult, SealedRun
from reprobuild.locks.buildlock import BuildLockError, sdist_member
from reprobuild.locks.lockfile import load_lock
from reprobuild.locks.records import quoted
from reprobuild.locks.wheels import Target, fetch_wheels

__all__ = ["HOOK", "BackendAsker", "ask_timeout", "requirements_of"]

HOOK = "get_requires_for_build_wheel"
TIMEOUT_ENV = "REPROBUILD_ASK_TIMEOUT"
DEFAULT_TIMEOUT = 300.0
ROOT = "/.reprobuild-ask"
USER = 65534
LEGACY_BACKEND = "setuptools.build_meta:__legacy__"
# The wheels the build lock resolves are for this platform (buildlock.UV_PLATFORM).
_TARGET_GLIBC = (2, 28)
_MAX_ANSWER = 1 << 20
_MAX_REQUIREMENTS = 200
# $1: the source tree, $2: the hook. Values reach the shell as arguments, never as its text.
_DRIVER = (
    "set -e\n"
    'python3 -m venv --without-pip "$R/venv"\n'
    '"$R/uv" pip install --quiet --python "$R/venv/bin/python" --no-index '
    '--find-links "$R/wheels" --require-hashes --only-binary :all: -r "$R/requirements.txt"\n'
    'cd "$1"\n'
    'exec "$R/venv/bin/python" -I "$R/hook/_in_process.py" "$2" "$R/hook/ctl"\n'
)
_ENV = {
    "R": ROOT,
    "HOME": f"{ROOT}/home",
    "TMPDIR": f"{ROOT}/home",
    "LC_ALL": "C.UTF-8",
    "TZ": "UTC",
    "PYTHONHASHSEED": "0",
    "PYTHONDONTWRITEBYTECODE": "1",
    "SOURCE_DATE_EPOCH": "315532800",
    "UV_NO_CONFIG": "1",
    "UV_OFFLINE": "1",
    "UV_NO_CACHE": "1",
    "UV_NO_PROGRESS": "1",
    "UV_PYTHON_DOWNLOADS": "never",
}
# What a hook that reached for the network says when there is none (Python's and requests').
_NETWORK = re.compile(
    r"URLError|gaierror|NewConnectionError|ConnectionError|ConnectTimeout|MaxRetryError|"
    r"Network is unreachable|name resolution|Name or service not known|No address associated|"
    r"Connection refused|nodename nor servname",
    re.IGNORECASE,
)
_RAISED = re.compile(r"^(?:[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt)|error)\b[^ ]*:?")


def ask_timeout() -> float:
    """Seconds one ask may take (``$REPROBUILD_ASK_TIMEOUT``, default 300)."""
    return env_seconds(TIMEOUT_ENV, DEFAULT_TIMEOUT, most=86400, error=BuildLockError)


@dataclass(frozen=True)
class BackendAsker:
    """Asks sdists' build backends for their build requirements in ``image`` (a pinned base
    the engine has) for CPython ``python`` (X.Y); the callable
    :func:`~reprobuild.locks.buildlock.compile_build_lock` takes as ``ask``."""

    engine: Engine
    image: str
    python: str
    uv: Path
    timeout: float = DEFAULT_TIMEOUT
    log: Callable[[str], None] = print

    def __call__(self, archive: Path, pins: Path) -> tuple[str, ...]:
        """What the backend of the sdist ``archive`` asks for (:data:`HOOK`) in a venv with
        the hashed pins of ``pins`` (a build lock's text) installed; checked requirements."""
        backend, backend_path = backend_of(archive)
        tree = _source_tree(archive)
        self.log(f"asking the build backend of {archive.name} for its build requirements")
        with tempfile.TemporaryDirectory(prefix="reprobuild-ask-") as tmp:
            target = Target(self.python, "x86_64", _TARGET_GLIBC)
            wheels = fetch_wheels(load_lock(pins), target, Path(tmp) / "wheels", log=self.log)
            files = _Files(archive, pins, tuple(wheels), self.uv, Path(tmp) / "files.tar")
            try:
                caller = BuildBackendHookCaller(
                    tree, backend, backend_path, runner=self._runner(files),
                    python_executable=f"{ROOT}/venv/bin/python",
                )  # fmt: skip
            except ValueError as exc:  # backend-path outside the tree
                raise BuildLockError(
                    f"{archive.name}: [build-system] backend-path {backend_path!r}: {exc}"
                ) from None
            answer = _answer(caller, archive.name, backend)
        return requirements_of(answer, archive.name)

    def _runner(self, files: _Files) -> Callable[..., None]:
        def run(
            cmd: Sequence[str],
            cwd: str | None = None,
            extra_environ: Mapping[str, str] | None = None,
        ) -> None:
            _python, script, hook, control = cmd
            files.pack(Path(script), Path(control) / "input.json")
            env = {**_ENV, **(extra_environ or {})}
            sealed = SealedRun(
                user=f"{USER}:{USER}", environment=tuple(env.items()), timeout=self.timeout,
                fetch=f"{ROOT}/hook/ctl/output.json", max_bytes=_MAX_ANSWER,
            )  # fmt: skip
            argv = ["/bin/sh", "-c", _DRIVER, "sh", cwd or ROOT, hook]
            done = self.engine.run_sealed(self.image, argv, files.tar, sealed)
            name = files.archive.name
            if done.timed_out:
                raise BuildLockError(
                    f"asking the build backend of {name} for its build requirements ({HOOK}) "
                    f"did not finish within {self.timeout:g} s; stopped",
                    hint=f"a slower backend may be given longer: {TIMEOUT_ENV}=<seconds>",
                )
            if done.run.exit_code != 0 or done.fetched is None:
                raise _failure(name, done.run)
            (Path(control) / "output.json").write_bytes(done.fetched)

        return run


def _answer(caller: BuildBackendHookCaller, name: str, backend: str) -> object:
    """The hook's return value, or one line on why there is none."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the backend's own warnings (file, line its own)
            return caller.get_requires_for_build_wheel()
    except BackendUnavailable as exc:
        raise BuildLockError(
            f"the build backend {quoted(backend)} of {name} cannot be imported in the base: "
            f"{_last_words(exc.traceback) or 'no traceback'}"
        ) from None
    except HookMissing:
        return []
    except (ValueError, KeyError, TypeError, AttributeError, OSError):
        raise BuildLockError(
            f"the build backend of {name} gave no readable answer to {HOOK} "
            "(pyproject_hooks' output.json is not its JSON)"
        ) from None


def requirements_of(answer: object, name: str) -> tuple[str, ...]:
    """The hook's answer as requirement strings: a list of PEP 508 requirements by name (no
    URL: the build lock pins from the index), at most 200; else one line naming the value."""
    if not isinstance(answer, list) or not all(isinstance(a, str) for a in answer):
        shown = quoted(repr(answer)[:80])
        raise BuildLockError(
            f"the build backend of {name} answered {HOOK} with {shown}, not a list of "
            "requirement strings"
        )
    if len(answer) > _MAX_REQUIREMENTS:
        raise BuildLockError(
            f"the build backend of {name} asked for {len(answer)} build requirements "
            f"({HOOK}); at most {_MAX_REQUIREMENTS} are taken"
        )
    out: list[str] = []
    for text in answer:
        try:
            parsed = Requirement(text)
        except InvalidRequirement:
            raise BuildLockError(
                f"the build backend of {name} asked for {quoted(text[:120])} ({HOOK}), which "
                "is not a valid requirement (PEP 508: NAME[extras] specifier; marker)"
            ) from None
        if parsed.url:
            raise BuildLockError(
                f"the build backend of {name} asked for {quoted(text[:120])} ({HOOK}): a "
                "direct URL, which the build lock cannot pin from the index"
            )
        if str(parsed) not in out:
            out.append(str(parsed))
    return tuple(out)


def _failure(name: str, run: RunResult) -> BuildLockError:
    """One line on a hook (or its venv's install) that failed in the container."""
    text = (run.stderr or run.stdout).decode("utf-8", "replace")
    words = _last_words(text)
    if _NETWORK.search(text):
        return BuildLockError(
            f"the build backend of {name} reached for the network while asked for its build "
            f"requirements ({HOOK}), and it has none there: {words[:200]}",
            hint="a build that downloads cannot be pinned: lock a wheel of that package instead",
        )
    status = f"exit status {run.exit_code}" if run.exit_code else "no answer written"
    return BuildLockError(
        f"the build backend of {name} failed when asked for its build requirements ({HOOK}): "
        f"{words[:200] or status}"
    )


def _last_words(text: str) -> str:
    """A failure's last exception (or ``error:``) line, else its last line."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    found = next((ln for ln in reversed(lines) if _RAISED.match(ln)), None)
    return " ".join((found or (lines[-1] if lines else "")).split())


def backend_of(archive: Path) -> tuple[str, list[str] | None]:
    """The sdist's ``[build-system] build-backend`` and ``backend-path`` (setuptools' legacy
    backend where it names none, as pip and build take it)."""
    data = sdist_member(archive, "pyproject.toml")
    if data is None:
        return LEGACY_BACKEND, None
    try:
        system = tomllib.loads(data.decode("utf-8-sig")).get("build-system")
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise BuildLockError(
            f"{archive.name}: its pyproject.toml is not valid TOML ({str(exc)[:80]})"
        ) from None
    if not isinstance(system, dict):
        return LEGACY_BACKEND, None
    backend = system.get("build-backend", LEGACY_BACKEND)
    path = system.get("backend-path")
    if not isinstance(backend, str) or not re.fullmatch(r"[\w.]+(:[\w.]+)?", backend):
        raise BuildLockError(
            f"{archive.name}: [build-system] build-backend {quoted(str(backend)[:80])} is not "
            "a module path (MODULE[:OBJECT])"
        )
    if path is not None and not (isinstance(path, list) and all(isinstance(p, str) for p in path)):
        raise BuildLockError(f"{archive.name}: [build-system] backend-path is not a list of paths")
    return backend, path


def _source_tree(archive: Path) -> str:
    """Where the sdist's tree lies in the container: its one top folder (build_sdists' rule:
    unless a ``setup.py`` sits beside it), else the unpack folder itself."""
    tops: set[str] = set()
    root_setup = False
    for name, _data in _members(archive, read=False):
        parts = PurePosixPath(name).parts
        tops.add(parts[0])
        root_setup = root_setup or parts == ("setup.py",)
    if len(tops) == 1 and not root_setup:
        return f"{ROOT}/src/{tops.pop()}"
    return f"{ROOT}/src"


def _members(archive: Path, *, read: bool = True) -> list[tuple[str, bytes | None]]:
    """The sdist's plain files and folders (folders with None), names checked to stay inside
    it; a link or device is refused in one line, as the wheel-build stage refuses it."""
    out: list[tuple[str, bytes | None]] = []
    try:
        if archive.name.endswith(".zip"):
            with zipfile.ZipFile(archive) as zf:
                for info in zf.infolist():
                    name = _safe(info.filename, archive.name)
                    data = None if info.is_dir() or not read else zf.read(info)
                    out.append((name, data if not info.is_dir() else None))
            return out
        with tarfile.open(archive, "r:*") as tf:
            for member in tf:
                name = _safe(member.name, archive.name)
                if member.isdir():
                    out.append((name, None))
                elif member.isfile():
                    handle = tf.extractfile(member) if read else None
                    out.append((name, handle.read() if handle is not None else b""))
                else:
                    raise BuildLockError(
                        f"{archive.name}: member {quoted(member.name[:120])} is not a plain "
                        "file or folder"
                    )
    except (OSError, tarfile.TarError, zipfile.BadZipFile) as exc:
        raise BuildLockError(f"{archive.name}: cannot read the source archive: {exc}") from None
    return out


def _safe(name: str, archive: str) -> str:
    rel = PurePosixPath(name.removeprefix("./") or ".")
    if rel.is_absolute() or ".." in rel.parts or str(rel) == ".":
        raise BuildLockError(
            f"{archive}: member {quoted(name[:120])} would be written outside its folder"
        )
    return str(rel)


@dataclass(frozen=True)
class _Files:
    """What the container gets, as one tar archive unpacked at ``/``: under
    :data:`ROOT` (all the user's), uv, the wheels and their pins, the sdist's tree, the
    hook's script and input."""

    archive: Path
    pins: Path
    wheels: tuple[Path, ...]
    uv: Path
    tar: Path

    def pack(self, script: Path, hook_input: Path) -> None:
        top = ROOT.lstrip("/")
        with tarfile.open(self.tar, "w", format=tarfile.PAX_FORMAT) as out:
            for folder in ("", "/home", "/wheels", "/hook", "/hook/ctl", "/src"):
                _add(out, top + folder, None)
            _add(out, f"{top}/uv", self.uv.read_bytes(), mode=0o755)
            _add(out, f"{top}/requirements.txt", self.pins.read_bytes())
            for wheel in self.wheels:
                _add(out, f"{top}/wheels/{wheel.name}", wheel.read_bytes())
            _add(out, f"{top}/hook/_in_process.py", script.read_bytes())
            _add(out, f"{top}/hook/ctl/input.json", hook_input.read_bytes())
            made: set[str] = set()
            for name, data in _members(self.archive):
                parents = PurePosixPath(name).parents
                # every folder made with the user's ownership, listed in the sdist or not
                for parent in [*reversed(parents), *([name] if data is None else [])]:
                    if str(parent) != "." and str(parent) not in made:
                        made.add(str(parent))
                        _add(out, f"{top}/src/{parent}", None)
                if data is not None:
                    _add(out, f"{top}/src/{name}", data)


def _add(out: tarfile.TarFile, name: str, data: bytes | None, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.uid = info.gid = USER
    info.mtime = 315532800
    if data is None:
        info.type = tarfile.DIRTYPE
        info.mode = 0o755
        out.addfile(info)
        return
    info.size = len(data)
    info.mode = mode
    out.addfile(info, io.BytesIO(data))
