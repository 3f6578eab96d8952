"""reprobuild's wheel-build stage: build each locked source archive into a wheel.

Runs inside the image build, on the pinned base, with the interpreter of a venv that holds
exactly the build lock's wheels (installed with --require-hashes --no-index). Standard
library only. Each archive's sha256 is checked again, it is unpacked to a fixed path
(``/.reprobuild-build/src/NAME``: no random temp dir reaches a compiled file), members that
would land outside it are refused, and it is built under SOURCE_DATE_EPOCH with no build
isolation and no index: by ``uv build --wheel`` where the stage has reprobuild's pinned uv
(``REPROBUILD_UV``), else by ``pip wheel --no-deps``, with the pip ensurepip would install
(unpacked, ``REPROBUILD_PIP``) or the venv's own. Both call the same build backend hook in
the same venv, so the wheels are the same bytes. The sdists build side by side, one per CPU,
each in its own folders. The wheels and ``built.json``
(each wheel's sha256 beside its sdist's) go to ``/.reprobuild-build/out``, their times
set to the epoch.

Each build runs as an unprivileged user where ``REPROBUILD_BUILD_USER`` names one (the
stage does: a build that writes outside its own folder then fails, with HOME and TMPDIR
inside it), and is stopped after ``REPROBUILD_SDIST_TIMEOUT`` seconds (3600 unless set). A
failure is one line (``reprobuild: ...``, the build's last line of output in it) that the
image build reports as its error.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import threading
import zipfile
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path, PurePosixPath
from typing import Any, NoReturn

# The stage's fixed build root (a test runs the script on the host under another).
ROOT = Path(os.environ.get("REPROBUILD_BUILD_ROOT", "/.reprobuild-build"))
OUT = ROOT / "out"
# pip's and uv's own frame around a failed build (their boxes, causes and notes): never the
# build's last words
FRAME = (
    "\N{MULTIPLICATION SIGN}", "╰─>", "├─▶", "╰─▶", "│", "note: ", "hint: ", "cause: ",
    "error: subprocess-exited-with-error", "error: metadata-generation-failed",
    "error: Failed to build ",
)  # fmt: skip
# A Python exception's line (``urllib.error.URLError: <urlopen error ...>``) or ``error: ...``
RAISED = re.compile(r"(?:[A-Za-z_][\w.]*(?:Error|Exception|Exit)|error)\b[^ ]*:")
# uv's own lines in a build's output (the rest is the build backend's)
UV_OWN = re.compile(r"(?:Building (?:wheel|source distribution)\b|Successfully built |warning: )")
# A wheel's file name (PEP 427, tags without spaces or quotes): it goes into the image's install
# as a requirement line (``NAME @ file:///...``), so anything else is refused, as is a wheel of
# another project than the sdist's.
WHEEL_NAME = re.compile(
    r"^([A-Za-z0-9_.]+)-[A-Za-z0-9_.!+]+(?:-[0-9][A-Za-z0-9_.]*)?(?:-[A-Za-z0-9_.]+){3}\.whl$"
)


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return "sha256:" + digest.hexdigest()


def fail(message: str) -> NoReturn:
    # the image build's error line is the last one that starts so (backends.procstream)
    print(f"reprobuild: {message}", file=sys.stderr, flush=True)
    sys.exit(1)


def build_user() -> tuple[int, int] | None:
    """The uid and gid the builds run as (``REPROBUILD_BUILD_USER=UID[:GID]``), if any."""
    text = os.environ.get("REPROBUILD_BUILD_USER", "")
    if not text:
        return None
    uid, _, gid = text.partition(":")
    return int(uid), int(gid or uid)


def own(root: Path, user: tuple[int, int]) -> None:
    for folder, dirs, files in os.walk(root):
        os.chown(folder, *user)
        for name in dirs + files:
            os.lchown(os.path.join(folder, name), *user)


class Builds:
    """The builds running side by side: their output, one line at a time (each line led by its
    package where more than one runs), and a stop for all of them once one has failed."""

    def __init__(self, jobs: int) -> None:
        self.jobs = jobs
        self.lock = threading.Lock()
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.failed = threading.Event()

    def say(self, label: str, line: str) -> None:
        with self.lock:
            print(f"[{label}] {line}" if self.jobs > 1 else line, flush=True)

    def stop_all(self) -> None:
        """Stop every build still running (those reaped are no longer listed)."""
        self.failed.set()
        with self.lock:
            for proc in self.procs.values():
                with contextlib.suppress(OSError):
                    os.killpg(proc.pid, 9)


def run_build(
    argv: list[str],
    what: str,
    cwd: Path,
    user: tuple[int, int] | None,
    builds: Builds,
    shown: Callable[[str], bool],
) -> str | None:
    """Run one build in ``cwd``, its output streamed (the lines ``shown`` takes; a failed
    build's last 40 lines all); stop it past the time limit. A failure
    is one line (returned, not raised: builds run in threads) naming ``what`` and the build's
    last words. HOME and TMPDIR are a folder of the build's own beside its tree
    (``ROOT/home/NAME``); its wheel goes to a folder of its own (``ROOT/built/NAME``)."""
    limit = float(os.environ.get("REPROBUILD_SDIST_TIMEOUT", "3600"))
    env = dict(os.environ)
    home = ROOT / "home" / cwd.name
    home.mkdir(parents=True, exist_ok=True)
    env.update(HOME=str(home), TMPDIR=str(home))
    # No terminal's width: uv wraps its error report to COLUMNS, which would cut the build's
    # last words (the exception) across lines that no longer read as one.
    for var in ("COLUMNS", "LINES"):
        env.pop(var, None)

    # Its own session (process group): a stop reaches what it started too. The user is dropped
    # by Popen itself where it can (3.9+: no Python runs between fork and exec, which matters
    # with builds started from several threads); 3.8 has only preexec_fn for it.
    who: dict[str, Any] = {"start_new_session": True}
    if user is not None and sys.version_info >= (3, 9):
        who.update(user=user[0], group=user[1], extra_groups=[])
    elif user is not None:
        uid, gid = user

        def drop() -> None:
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)

        who["preexec_fn"] = drop

    if user is not None:
        for folder in (cwd, home, ROOT / "built" / cwd.name):
            own(folder, user)
    with builds.lock:
        if builds.failed.is_set():
            return None
        proc = subprocess.Popen(
            argv, cwd=str(cwd), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, **who
        )  # fmt: skip
        builds.procs[what] = proc
    assert proc.stdout is not None
    expired = threading.Event()

    def stop() -> None:
        expired.set()
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, 9)

    timer = threading.Timer(limit, stop)
    timer.daemon = True
    timer.start()
    tail: deque[tuple[str, bool]] = deque(maxlen=40)
    try:
        for raw in proc.stdout:
            line = raw.decode("utf-8", "replace").rstrip()
            said = shown(line)
            if said:
                builds.say(cwd.name, line)
            if line.strip():
                tail.append((line, said))
        code = proc.wait()
    finally:
        timer.cancel()
        with builds.lock:  # reaped: its process group id may be another's now
            builds.procs.pop(what, None)
    if expired.is_set():
        return f"building {what} did not finish within {limit:g} s; stopped"
    if code != 0 and not builds.failed.is_set():
        for line, said in tail:  # what the build said last, where it was not shown
            if not said:
                builds.say(cwd.name, line)
        words = last_words([line.strip() for line, _ in tail])
        return f"building {what} from its sdist failed: {words[:200]}"
    return None


def last_words(tail: list[str]) -> str:
    """What a failed build said last about why: its last exception or ``error:`` line, not
    the frontend's frame around it; else its last line mentioning an error; else its last line."""
    own = [ln for ln in tail if not ln.startswith(FRAME)]
    for wanted in (RAISED.match, lambda ln: "error" in ln.lower()):
        found = next((ln for ln in reversed(own) if wanted(ln)), None)
        if found is not None:
            return found
    return tail[-1] if tail else ""


def safe_name(name: str, filename: str) -> PurePosixPath:
    rel = PurePosixPath(name.lstrip("./") or ".")
    if rel.is_absolute() or ".." in rel.parts:
        fail(f"{filename}: member {name!r} would be written outside its build folder")
    return rel


def unpack(archive: Path, dest: Path) -> None:
    """Unpack ``archive`` into ``dest``; only plain files and folders, all inside ``dest``."""
    if archive.name.endswith(".zip"):
        with zipfile.ZipFile(archive) as zf:
            for info in zf.infolist():
                rel = safe_name(info.filename, archive.name)
                target = dest / rel
                if info.is_dir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                with zf.open(info) as src, target.open("wb") as out:
                    shutil.copyfileobj(src, out)
                mode = (info.external_attr >> 16) & 0o777
                target.chmod(0o755 if mode & 0o111 else 0o644)
        return
    with tarfile.open(archive, "r:gz") as tf:
        for member in tf:
            rel = safe_name(member.name, archive.name)
            target = dest / rel
            if member.isdir():
                target.mkdir(parents=True, exist_ok=True)
            elif member.isfile():
                target.parent.mkdir(parents=True, exist_ok=True)
                data = tf.extractfile(member)
                assert data is not None
                with data, target.open("wb") as out:
                    shutil.copyfileobj(data, out)
                target.chmod(0o755 if member.mode & 0o111 else 0o644)
            else:  # links, devices: an sdist needs none
                fail(f"{archive.name}: member {member.name!r} is not a plain file or folder")


def pip() -> list[str]:
    """How the stage runs pip: the unpacked wheel ensurepip would install
    (``REPROBUILD_PIP``), else the build venv's own."""
    runnable = os.environ.get("REPROBUILD_PIP", "")
    return [sys.executable, runnable] if runnable else [sys.executable, "-m", "pip"]


def frontend(wheels: Path, tree: Path) -> tuple[list[str], Callable[[str], bool]]:
    """The command that builds ``tree`` into a wheel in ``wheels`` (no dependencies, no build
    isolation: the venv holds the build lock's wheels; no index, no cache, no config file),
    and which of its lines the log shows. pip shows its own lines only; uv streams the build
    backend's too (a C extension's every compiler line): the log takes uv's own, as pip's,
    and a failed build's last lines all."""
    uv = os.environ.get("REPROBUILD_UV", "")
    if uv:
        argv = [
            uv, "--no-config", "--offline", "--no-cache", "--no-progress", "--no-python-downloads",
            "build", "--wheel", "--no-build-isolation", "--no-index", "--python", sys.executable,
            "--out-dir", str(wheels), str(tree),
        ]  # fmt: skip
        return argv, lambda line: UV_OWN.match(line) is not None
    argv = [
        *pip(), "wheel", "--no-deps", "--no-build-isolation", "--no-index", "--use-pep517",
        "--no-cache-dir", "--wheel-dir", str(wheels), str(tree),
    ]  # fmt: skip
    return argv, lambda line: True


def build(source: dict[str, str], tree: Path, user: tuple[int, int] | None, builds: Builds) -> str:
    """Build one unpacked sdist into its own wheel folder; the wheel's path, or a failure's
    line (``reprobuild: ...`` left to the caller)."""
    what = f"{source['name']} {source['version']}"
    wheels = ROOT / "built" / source["name"]
    wheels.mkdir(parents=True)
    builds.say(source["name"], f"building {what} from {source['filename']}")
    argv, shown = frontend(wheels, tree)
    error = run_build(argv, what, ROOT / "src" / source["name"], user, builds, shown)
    if error is not None or builds.failed.is_set():
        return error or ""
    # uv writes a .gitignore into its output folder
    new = sorted(p for p in wheels.iterdir() if p.name != ".gitignore")
    if len(new) != 1 or not new[0].name.endswith(".whl"):
        return f"building {source['name']} gave {[p.name for p in new]}, not one wheel"
    match = WHEEL_NAME.match(new[0].name)
    if match is None or normalize(match[1]) != normalize(source["name"]):
        return (
            f"building {source['name']} gave the wheel {new[0].name!r}, not a wheel of "
            f"{source['name']} (NAME-VERSION-TAGS.whl)"
        )
    return str(new[0])


def normalize(name: str) -> str:
    """A project name as PEP 503 compares it."""
    return re.sub(r"[-_.]+", "-", name).lower()


def main() -> None:
    os.umask(0o022)
    epoch = int(os.environ["SOURCE_DATE_EPOCH"])
    sources = json.loads((ROOT / "sources.json").read_text())
    OUT.mkdir()
    user = build_user()
    trees: list[Path] = []
    for source in sources:  # every archive checked and unpacked before any build starts
        archive = ROOT / "sdists" / source["filename"]
        got = sha256(archive)
        if got != source["sha256"]:
            fail(f"{source['filename']} has {got}, not the locked {source['sha256']}")
        dest = ROOT / "src" / source["name"]
        dest.mkdir(parents=True)
        unpack(archive, dest)
        tops = [p for p in dest.iterdir() if p.is_dir()]
        trees.append(tops[0] if len(tops) == 1 and not (dest / "setup.py").exists() else dest)
    # Side by side, one per CPU: each build has its own tree, HOME, TMPDIR and wheel folder,
    # so the bytes of none depend on another's; the first failure stops the rest.
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    builds = Builds(max(1, min(len(sources), cpus or 1)))
    results: list[str] = [""] * len(sources)

    def one(index: int) -> None:
        results[index] = build(sources[index], trees[index], user, builds)
        if not results[index].endswith(".whl"):
            builds.stop_all()

    with ThreadPoolExecutor(max_workers=builds.jobs) as pool:
        list(pool.map(one, range(len(sources))))
    if builds.failed.is_set():
        # the first that failed of its own accord, in the lock's order (not one stopped for it)
        fail(next((r for r in results if r and not r.endswith(".whl")), "a build failed"))
    built: list[dict[str, str]] = []
    for index, source in enumerate(sources):  # (zip(strict=) is 3.10's; the base may be 3.8)
        result = results[index]
        wheel = OUT / Path(result).name
        shutil.move(result, wheel)
        if user is not None:  # written by the build's user; the stage's files are root's
            os.chown(wheel, 0, 0)
        built.append(
            {
                "name": source["name"],
                "version": source["version"],
                "sdist": source["filename"],
                "sdist_sha256": source["sha256"],
                "wheel": wheel.name,
                "wheel_sha256": sha256(wheel),
            }
        )
    (OUT / "built.json").write_text(json.dumps(built, indent=2, sort_keys=True) + "\n")
    for path in OUT.iterdir():
        os.utime(path, (epoch, epoch))


if __name__ == "__main__":
    main()
