"""What a rank of a distributed job was: the ``distributed`` section of its framework record.

A launcher (torchrun, a Kubernetes Indexed Job running torchrun) starts one Python process per
rank and tells it who it is through the environment. Each such process writes its own framework
record (``run-<id>-frameworks-<host>-<pid>.json``, see :mod:`~reprobuild_entrypoint.runrecord`);
this module gives that record the rank's identity, its seed, the communication backend it
initialised and the NCCL/gloo settings it ran with, so that two jobs can be compared rank by
rank (``reprobuild diff``).

Under torch elastic (torchrun) a worker that is restarted (``--max-restarts``) is a new process
with the same ``RANK`` when the membership is unchanged: it seeds with the same rank seed and so
replays the first attempt's random streams from the start (it does not continue them). When the
membership changes, ranks are reassigned and a process's seed follows its new rank, not the
node. ``restart_count`` says which attempt a record belongs to.

Pure where it can be (:func:`distributed_info` takes the environment); standard library only.
"""

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

LAUNCHER_INTS = (
    ("rank", "RANK"),
    ("local_rank", "LOCAL_RANK"),
    ("world_size", "WORLD_SIZE"),
    ("group_rank", "GROUP_RANK"),
    ("local_world_size", "LOCAL_WORLD_SIZE"),
    ("restart_count", "TORCHELASTIC_RESTART_COUNT"),
    ("max_restarts", "TORCHELASTIC_MAX_RESTARTS"),
)
"""Record field -> the variable torchrun sets in every worker."""
LAUNCHER_TEXT = (
    ("elastic_run_id", "TORCHELASTIC_RUN_ID"),
    ("master_addr", "MASTER_ADDR"),
    ("master_port", "MASTER_PORT"),
    ("backend_requested", "REPRO_DIST_BACKEND"),
)
COMM_PREFIXES = ("NCCL_", "GLOO_", "TORCH_NCCL_", "TORCH_GLOO_", "TORCH_DISTRIBUTED_")
"""Variables that change how the collectives run (algorithm, interface, timeouts)."""


def under_launcher(environ: "Mapping[str, str]") -> bool:
    return bool(environ.get("RANK", "").strip())


def _int(text: "str | None") -> "int | None":
    if text is None:
        return None
    text = text.strip()
    return int(text) if text.isascii() and text.isdigit() else None


def distributed_info(
    environ: "Mapping[str, str]", rank_seed: "int | None", hostname: "str | None"
) -> "dict[str, Any]":
    """The rank's identity and communication settings, from the launcher's environment."""
    out: dict[str, Any] = {name: _int(environ.get(var)) for name, var in LAUNCHER_INTS}
    out.update({name: environ.get(var) for name, var in LAUNCHER_TEXT})
    out["rank_seed"] = rank_seed
    out["host"] = hostname
    out["comm_settings"] = {
        name: environ[name] for name in sorted(environ) if name.startswith(COMM_PREFIXES)
    }
    return out


BACKEND: "dict[str, Any]" = {}
"""What ``torch.distributed.init_process_group`` set up in this process (filled by the wrapper
:func:`watch_init_process_group` installs): the backend, and the timeout when one was given."""


def watch_init_process_group(torch: "Any") -> bool:
    """Wrap ``torch.distributed.init_process_group`` so the record can say which backend the
    process group really got (a program may destroy the group before exit, after which torch
    no longer knows). The wrapper calls the original with the same arguments and returns what
    it returns; it only reads ``get_backend()`` afterwards."""
    dist = getattr(torch, "distributed", None)
    if dist is None or not dist.is_available():
        return False
    original = getattr(dist, "init_process_group", None)
    if original is None or getattr(original, "__reprobuild__", False):
        return False
    import functools

    @functools.wraps(original)
    def init_process_group(*args: "Any", **kwargs: "Any") -> "Any":
        result = original(*args, **kwargs)
        try:
            BACKEND["backend"] = str(dist.get_backend())
        except Exception as exc:  # never fail the program over its record
            BACKEND["backend"] = f"unknown ({type(exc).__name__})"
        timeout = kwargs.get("timeout")
        if timeout is not None:
            BACKEND["timeout_s"] = getattr(timeout, "total_seconds", lambda: None)()
        return result

    init_process_group.__reprobuild__ = True  # type: ignore[attr-defined]
    dist.init_process_group = init_process_group
    return True
