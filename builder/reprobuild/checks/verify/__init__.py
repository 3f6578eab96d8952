"""``reprobuild verify``: run one command N times side by side and prove the runs identical,
or name the first place where they diverge.

Every run starts fresh from the same image (or, with ``--local``, the same host interpreter
under the same runtime) with the same seed and settings. The runs go at the same time; their
stdout streams in and is compared line by line as it arrives
(:class:`~reprobuild.checks.streams.StreamComparator`): each line as a terminal shows it
(progress-bar redraws folded, :mod:`reprobuild.checks.terminal`) with its wall-clock fields
left out and counted
(:mod:`reprobuild.checks.volatile`; ``--ignore`` adds patterns, ``--no-default-ignore`` compares the
bytes as written), so the first differing line stops every run at
once (containers are killed) instead of waiting for hours of training to end. When all runs
exit with status 0 and print the same lines, the declared output files are compared by
sha256; a JSON file that differs gets a structured diff (the key path), a text file the first
differing line, anything else the first differing byte.

Each run gets its own host directories, mounted into its container:

- ``/out`` (``$REPRO_OUTPUT_DIR``): the run's output directory; ``--output PATH`` names files
  or directories under it to compare (``metrics.json``, ``ckpt/``);
- ``/reprobuild-run`` (``$REPRO_RUN_DIR``): where the runtime writes the run record and the
  framework records; the report carries them, and how each run's records differ from run 1's
  (host, CPU, GPU, stack), so a divergence can be traced to its cause.

The result is a schema-versioned JSON report (:class:`VerifyReport`) written atomically:
``identical`` (exit 0), ``diverged`` or ``failed`` (exit 1: a run exited non-zero, or no run
wrote a declared output).

Containers are started through :meth:`reprobuild.backends.engine.Engine.start_streaming` (the
engine module is the only one that talks to Docker); local runs are plain processes.

The package, one job per module: :mod:`~reprobuild.checks.verify.spec` (the arguments, checked),
:mod:`~reprobuild.checks.verify.launchers` (containers or local processes),
:mod:`~reprobuild.checks.verify.watcher` (following the runs' output live),
:mod:`~reprobuild.checks.verify.outputs` (the declared output files, read without following links),
:mod:`~reprobuild.checks.verify.report` (the saved record) and
:mod:`~reprobuild.checks.verify.run` (all of it together, and the clean-up on any exit, signals
included). Run records are compared by
:mod:`reprobuild.checks.runrecords`, the same functions ``reprobuild diff`` uses.
"""

from reprobuild.checks.verify.launchers import (
    OWNER_LABEL,
    VERIFY_LABEL,
    _DockerLauncher,
    _LocalLauncher,
)
from reprobuild.checks.verify.outputs import (
    MAX_FILE_BYTES,
    MAX_OUTPUT_FILES,
    TEXT_LIMIT,
    UnsafeOutputError,
    collect_outputs,
    compare_outputs,
    file_divergence,
)
from reprobuild.checks.verify.report import (
    REPORT_DIR,
    REPORT_KIND,
    REPORT_PREFIX,
    RESULTS,
    SCHEMA_VERSION,
    Failure,
    FileDigest,
    RunReport,
    VerifyReport,
    VerifyResult,
    check_writable,
    default_report_path,
)
from reprobuild.checks.verify.run import WORKDIR_PREFIX, VerifyInterrupted, verify
from reprobuild.checks.verify.spec import (
    DEFAULT_DATA_DIR,
    DEFAULT_RUNS,
    MAX_RUNS,
    DataMount,
    GpuRequest,
    VerifySpec,
    parse_data,
    parse_env_option,
    parse_gpus,
    parse_output,
    verify_spec_from_args,
)
from reprobuild.errors import VerifyError, VerifyUsageError
from reprobuild_entrypoint.contract import OUT_DIR, RECORD_DIR

__all__ = [
    "DEFAULT_DATA_DIR",
    "DEFAULT_RUNS",
    "MAX_FILE_BYTES",
    "MAX_OUTPUT_FILES",
    "MAX_RUNS",
    "OUT_DIR",
    "OWNER_LABEL",
    "RECORD_DIR",
    "REPORT_DIR",
    "REPORT_KIND",
    "REPORT_PREFIX",
    "RESULTS",
    "SCHEMA_VERSION",
    "TEXT_LIMIT",
    "VERIFY_LABEL",
    "WORKDIR_PREFIX",
    "DataMount",
    "Failure",
    "FileDigest",
    "GpuRequest",
    "RunReport",
    "UnsafeOutputError",
    "VerifyError",
    "VerifyInterrupted",
    "VerifyReport",
    "VerifyResult",
    "VerifySpec",
    "VerifyUsageError",
    "_DockerLauncher",
    "_LocalLauncher",
    "check_writable",
    "collect_outputs",
    "compare_outputs",
    "default_report_path",
    "file_divergence",
    "parse_data",
    "parse_env_option",
    "parse_gpus",
    "parse_output",
    "verify",
    "verify_spec_from_args",
]
