"""The top of the ``reprobuild`` command: its parser, the dispatch to a command's ``run``, the
signal handling, and the one place that turns errors into messages and exit codes.

Exit codes: 0 success, 1 a reprobuild error (printed as one ``error:`` line), 2 bad usage,
128+N stopped by signal N (130 Ctrl-C, 143 SIGTERM, 129 SIGHUP), after cleaning up.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
import weakref
from collections.abc import Sequence
from types import FrameType
from typing import TYPE_CHECKING, Any

from reprobuild import __version__
from reprobuild.cli.commands import COMMANDS
from reprobuild.cli.options import Empty
from reprobuild.cli.output import EXIT_ERROR, err
from reprobuild.errors import signal_exit_code

if TYPE_CHECKING:
    _SubParsers = argparse._SubParsersAction[argparse.ArgumentParser]
else:
    _SubParsers = argparse._SubParsersAction

# What `reprobuild --help` tells a user (the module docstring above is for readers of the code).
_DESCRIPTION = """\
Lockfiles in, pinned and deterministic training images out. reprobuild builds
a container image from a project's hashed lockfile on a base pinned by digest,
and checks that runs of that image repeat, bit for bit.

main commands:
  reprobuild image [DIR]          build the image of the project in DIR
  reprobuild verify IMAGE -- CMD  run CMD twice, prove the runs identical
  reprobuild diff A B             what differs between two images or runs"""
_EPILOG = """\
`reprobuild COMMAND --help` lists a command's options. The docs (docs/ in the
source) describe reprobuild.yaml, the catalog, the runtime and every command.
Exit codes: 0 success, 1 error, 2 bad usage, 130 interrupted."""


class _Commands(_SubParsers):
    """The COMMAND argument. A command's parser gets its arguments from the command's module
    when that command is chosen (or when a whole parser is asked for), so `reprobuild --help`
    imports no command module."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._loaded: set[str] = set()

    def load(self, name: str) -> None:
        if name not in self._loaded:
            self._loaded.add(name)
            COMMANDS[name].load().add_arguments(self._name_parser_map[name])

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Sequence[Any] | str | None,
        option_string: str | None = None,
    ) -> None:
        if isinstance(values, list) and values and values[0] in COMMANDS:
            self.load(values[0])
        super().__call__(parser, namespace, values, option_string)


def build_parser(*, lazy: bool = False) -> argparse.ArgumentParser:
    """The whole parser, every command's arguments included (the CLI reference is made from
    it); ``lazy=True`` leaves each command's arguments to be added when it is chosen."""
    parser = argparse.ArgumentParser(
        prog="reprobuild",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"reprobuild {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", action=_Commands)
    assert isinstance(sub, _Commands)
    for name, info in COMMANDS.items():
        sub.add_parser(name, help=info.summary)
        if not lazy:
            sub.load(name)
    return parser


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised where the program is, like Ctrl-C: ``finally`` and ``with``
    blocks run, so a stopped build removes its scratch tags, containers and temp dirs."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _on_signal(signum: int, frame: FrameType | None) -> None:
    if _unsafe(frame):
        _raise_later(signum)
        return
    for sig in (signal.SIGTERM, signal.SIGHUP):  # a second signal must not cut the clean-up
        signal.signal(sig, signal.SIG_IGN)
    raise Stopped(signum)


def _on_sigint(signum: int, frame: FrameType | None) -> None:
    """Ctrl-C as Python's own handler answers it (KeyboardInterrupt), but not where a raise
    would be dropped or would leave a thread half-started (:func:`_unsafe`)."""
    if _unsafe(frame):
        _raise_later(signum)
        return
    raise KeyboardInterrupt


_THREAD_START = threading.Thread.start.__code__


def _unsafe(frame: FrameType | None) -> bool:
    """Whether a raise at ``frame`` would go wrong, so the signal is raised again once the main
    thread has left it:

    - in a finalizer (``__del__``, a weakref callback), Python drops it ("Exception ignored")
      and the command runs on;
    - in ``Thread.start()``, which waits for the new thread to say it runs, the thread is left
      half-started, and the command's exit prints "Exception ignored in thread started by ...
      KeyError" after its one error line. The product's own threads start with the signals
      held back (:mod:`reprobuild._util.threads`); this covers the threads libraries start
      (a ThreadPoolExecutor's workers, say)."""
    while frame is not None:
        code = frame.f_code
        if code is _THREAD_START:
            return True
        if code.co_name in ("__del__", "_on_unraisable") or code.co_filename == weakref.__file__:
            return True
        frame = frame.f_back
    return False


def _trip_when_safe(signum: int, main: int) -> None:
    import time

    for _ in range(4000):  # at most about 2 s: a finalizer that long is the program's own loop
        time.sleep(0.0005)
        if not _unsafe(sys._current_frames().get(main)):
            break
    signal.pthread_kill(main, signum)  # a real signal: it also ends a wait the main thread is in


def _raise_later(signum: int) -> None:
    main = threading.main_thread().ident
    with contextlib.suppress(RuntimeError):  # the interpreter is shutting down: nothing runs on
        threading.Thread(target=_trip_when_safe, args=(signum, main), daemon=True).start()


def _on_unraisable(hook: Any, unraisable: Any) -> None:
    """Python drops an exception raised in a finalizer (a ``__del__``, a weakref callback) with
    "Exception ignored", and the build would run on. The handler does not raise in the ones it
    can see; for the others, this hook raises the signal again once the finalizer is left."""
    exc = unraisable.exc_value
    if isinstance(exc, Stopped):
        with contextlib.suppress(ValueError):  # not the main thread: the handler stays as it is
            signal.signal(exc.signum, _on_signal)  # _on_signal set SIG_IGN: answer once more
        _raise_later(exc.signum)
    elif isinstance(exc, KeyboardInterrupt):
        _raise_later(signal.SIGINT)
    else:
        hook(unraisable)


def _install_signal_handlers() -> None:
    import functools

    try:
        for sig in (signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(sig) == signal.SIG_DFL:
                signal.signal(sig, _on_signal)
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            signal.signal(signal.SIGINT, _on_sigint)
    except ValueError:  # not the main thread (main() called from a test's thread)
        return
    sys.unraisablehook = functools.partial(_on_unraisable, sys.unraisablehook)


def _check_empty(args: argparse.Namespace) -> None:
    from reprobuild.errors import UsageError

    for name, value in vars(args).items():
        if isinstance(value, Empty):
            option = "DIRECTORY" if name == "directory" else "--" + name.replace("_", "-")
            if name == "image" and args.command == "rebuild":
                option = "IMAGE"
            raise UsageError(
                f"{option} is empty; give a value or leave the option out",
                hint="an unset variable in a script expands to an empty argument",
            )


def main(argv: Sequence[str] | None = None) -> int:
    from reprobuild.errors import BuildError, ReprobuildError

    parser = build_parser(lazy=True)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: --help/--version exit 0, bad usage exits 2
        return int(exc.code or 0)
    try:
        _check_empty(args)
        return COMMANDS[args.command].load().run(args)
    except BuildError as exc:
        # The build log was not streamed (-q, or --json keeping stderr for errors): its tail
        # says why the build failed.
        if exc.log_tail and (getattr(args, "quiet", False) or getattr(args, "json", False)):
            err(exc.log_tail)
        err(f"error: {exc.message}")
        if exc.hint:
            err(f"hint: {exc.hint}")
        return EXIT_ERROR
    except ReprobuildError as exc:
        err(f"error: {exc.message}")
        if exc.hint:
            err(f"hint: {exc.hint}")
        return exc.exit_code
    except KeyboardInterrupt as exc:
        signum = exc.signum if isinstance(exc, Stopped) else signal.SIGINT
        err(f"error: interrupted by {signal.Signals(signum).name}")
        return signal_exit_code(signum)


def entrypoint() -> None:
    _install_signal_handlers()
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:  # e.g. `reprobuild inspect IMG | head`: the reader left early
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 0
    sys.exit(code)
