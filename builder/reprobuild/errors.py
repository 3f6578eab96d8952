"""The one error hierarchy: every failure a user can cause is a ReprobuildError.

Each subclass carries the data that explains it and writes its own one-line message;
the CLI prints ``error: <message>`` (plus an optional hint) and exits non-zero.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

# The exit codes, stated once: every command and error class uses these.
EXIT_OK = 0
EXIT_ERROR = 1  # a reprobuild error, printed as one `error:` line; also "they differ"
EXIT_USAGE = 2  # bad usage, as argparse exits


def signal_exit_code(signum: int) -> int:
    """A shell's status for a process stopped by signal ``signum``: 128 + N (130 for SIGINT,
    143 for SIGTERM, 129 for SIGHUP)."""
    return 128 + signum


class ReprobuildError(Exception):
    """Base class. ``message`` is one line; ``hint`` says what to do about it."""

    exit_code = EXIT_ERROR

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message


class UsageError(ReprobuildError):
    """Bad command-line usage that argparse cannot catch (exit code 2, as argparse uses)."""

    exit_code = EXIT_USAGE


class ConfigError(ReprobuildError):
    """reprobuild.yaml is missing, malformed, or holds a bad value."""

    def __init__(self, path: Path | str, problem: str, *, hint: str | None = None) -> None:
        super().__init__(f"{path}: {problem}", hint=hint)
        self.path = Path(path)
        self.problem = problem


class LockfileError(ReprobuildError):
    """A lockfile line that cannot be installed reproducibly (file:line names it)."""

    def __init__(
        self,
        path: Path | str,
        line: int | None,
        problem: str,
        *,
        hint: str | None = None,
    ) -> None:
        where = f"{path}:{line}" if line is not None else f"{path}"
        super().__init__(f"{where}: {problem}", hint=hint)
        self.path = Path(path)
        self.line = line
        self.problem = problem


class ImageRefError(ReprobuildError):
    """An image reference that is malformed or not pinned by digest."""


class CatalogError(ReprobuildError):
    """The base-image catalog is invalid or has no such entry."""


class UnknownBaseError(CatalogError):
    """A base name that is neither in the catalog nor in the project's base lock."""


class RegistryError(ReprobuildError):
    """The registry refused or could not answer a request."""


class EngineError(ReprobuildError):
    """The Docker engine is unreachable or a build/run on it failed."""


class EngineUnavailableError(EngineError):
    """No Docker engine answers."""


class BasePullError(EngineError):
    """A base the engine lacks could not be pulled from its registry."""


class BuildError(EngineError):
    """``docker build`` failed; ``log_tail`` holds the last lines of its output."""

    def __init__(self, message: str, *, log_tail: str = "", hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.log_tail = log_tail


class ImageNotBuiltError(ReprobuildError):
    """The image to compose for is not on this engine."""

    def __init__(self, ref: str, build_command: str | None) -> None:
        how = f"; build it with `{build_command}`" if build_command else ""
        super().__init__(f"no image {ref} on this engine{how}")
        self.ref = ref
        self.build_command = build_command


class OutputError(ReprobuildError):
    """An output path cannot be written."""


class WriteError(OutputError):
    """A file reprobuild writes into the project (or beside it) cannot be written: a read-only
    project, a full disk. Names what it tried to write and where."""

    def __init__(
        self, what: str, path: Path | str, reason: str, *, hint: str | None = None
    ) -> None:
        super().__init__(f"cannot write {what} {path}: {reason}", hint=hint)
        self.what = what
        self.path = Path(path)
        self.reason = reason


class VerifyError(ReprobuildError):
    """``reprobuild verify`` cannot run what it was asked to, or a run did not finish."""


class VerifyUsageError(VerifyError):
    """A bad argument to ``reprobuild verify`` (exit code 2, as for other bad usage)."""

    exit_code = EXIT_USAGE


class JsonReport(Protocol):
    """What an error carries of a saved report: its JSON text (verify's ``VerifyReport`` is
    one). A protocol, so that this lowest module names no type of the layers above it."""

    def to_json(self) -> str: ...


class RunFailedError(VerifyError):
    """A run failed (non-zero exit) or wrote none of a declared output. The report was written
    first; ``stderr_tail`` holds the last lines of the failed run's stderr."""

    def __init__(
        self,
        message: str,
        *,
        report: JsonReport,
        report_path: Path,
        stderr_tail: str = "",
        hint: str | None = None,
    ) -> None:
        super().__init__(message, hint=hint)
        self.report = report
        self.report_path = report_path
        self.stderr_tail = stderr_tail


class DiffInputError(ReprobuildError):
    """An input of ``reprobuild diff`` that cannot be read. Exit code 2, as diff(1) uses for
    trouble, so that 1 always means "the stacks differ"."""

    exit_code = EXIT_USAGE


class RebuildInputError(ReprobuildError):
    """``reprobuild rebuild``: an input the image's manifest records is not at hand (the
    project at another revision, another lock, base, builder or builder version)."""

    exit_code = EXIT_USAGE


def shorten(value: object, limit: int = 80) -> str:
    """``repr(value)`` for a one-line message, cut to ``limit`` characters with '...'."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
