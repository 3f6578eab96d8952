"""The CLI's SIGTERM/SIGHUP handler raises where the program is, like Ctrl-C. Where that is a
finalizer (a ``__del__``, a weakref callback) Python drops the exception ("Exception ignored")
and the program ran on: a build stopped that way went on to the end (issue 30, the buildah pull
phase). These programs spend half their time in a finalizer, so a signal lands in one about
every other time; each must stop, at once, with the signal's exception."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

_PROGRAM = """\
import sys, time, weakref
import importlib
cli = importlib.import_module("reprobuild.cli.main")  # the module (the package exports main())
cli._install_signal_handlers()

def spin(seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass

class Dropped:
    def __del__(self):
        spin(0.002)

class Plain:
    pass

def once(kind):
    if kind == "del":
        Dropped()
    else:
        obj = Plain()
        ref = weakref.ref(obj, lambda _ref: spin(0.002))
        del obj
        del ref

print("ready", flush=True)
try:
    while True:
        once(sys.argv[1])
        spin(0.002)
except KeyboardInterrupt as exc:
    print("stopped by", getattr(exc, "signum", "SIGINT"), flush=True)
    sys.exit(3)
"""


def _default_signals() -> None:
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)


def _signalled(argv: list[str], signum: int, after_s: float) -> subprocess.Popen[str]:
    """Start ``argv`` (signals at their defaults), wait for its ``ready`` line, and send it
    ``signum`` ``after_s`` later."""
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=_default_signals,
    )  # fmt: skip
    assert proc.stdout is not None
    assert proc.stdout.readline() == "ready\n"
    time.sleep(after_s)
    proc.send_signal(signum)
    return proc


@pytest.mark.parametrize("kind", ["del", "weakref"])
@pytest.mark.parametrize(
    "signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT], ids=lambda s: signal.Signals(s).name
)
def test_a_signal_landing_in_a_finalizer_still_stops_the_program(
    kind: str, signum: int, tmp_path: os.PathLike[str]
) -> None:
    script = os.path.join(tmp_path, "loop.py")
    with open(script, "w") as f:
        f.write(textwrap.dedent(_PROGRAM))
    for attempt in range(10):
        proc = _signalled([sys.executable, script, kind], signum, 0.05 + attempt * 0.013)
        try:
            out, errors = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, errors = proc.communicate()
            pytest.fail(f"attempt {attempt}: the signal was lost and the program ran on: {errors}")
        expected = "SIGINT" if signum == signal.SIGINT else str(int(signum))
        assert (proc.returncode, out) == (3, f"stopped by {expected}\n"), errors
        assert "Exception ignored" not in errors


_LOGGING = """\
import sys
import importlib
cli = importlib.import_module("reprobuild.cli.main")
image = importlib.import_module("reprobuild.cli.commands.image")
from reprobuild.cli.output import err

def run(args):
    print("ready", flush=True)
    n = 0
    while True:  # a build log: lines, one after another, as fast as they come
        n += 1
        err(f"STEP {n}: LABEL " + "x" * (n % 9000))

image.run = run
sys.argv = ["reprobuild", "image", "."]
cli.entrypoint()
"""


@pytest.mark.parametrize(
    "signum", [signal.SIGTERM, signal.SIGINT], ids=lambda s: signal.Signals(s).name
)
def test_the_interrupted_line_stands_on_its_own_after_a_build_log(
    signum: int, tmp_path: os.PathLike[str]
) -> None:
    """A signal lands while the build log is being written, often between a line and its
    newline (print writes them apart): the ``error: interrupted`` line still starts a line
    of its own (CI saw ``...python="3.11.2"error: interrupted by SIGINT``)."""
    script = os.path.join(tmp_path, "log.py")
    with open(script, "w") as f:
        f.write(_LOGGING)
    name = signal.Signals(signum).name
    for attempt in range(20):
        proc = _signalled([sys.executable, script], signum, 0.02 + attempt * 0.007)
        _, errors = proc.communicate(timeout=30)
        assert proc.returncode == 128 + signum, errors[-500:]
        ends = [ln for ln in errors.splitlines() if "error: " in ln]
        assert ends == [f"error: interrupted by {name}"], (attempt, [e[-80:] for e in ends])
        assert errors.endswith(f"\nerror: interrupted by {name}\n")
