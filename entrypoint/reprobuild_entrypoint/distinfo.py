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

from __future__ import annotations

import os
import re

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
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


def under_launcher(environ: Mapping[str, str]) -> bool:
    return bool(environ.get("RANK", "").strip())


def _int(text: str | None) -> int | None:
    if text is None:
        return None
    text = text.strip()
    return int(text) if text.isascii() and text.isdigit() else None


def distributed_info(
    environ: Mapping[str, str], rank_seed: int | None, hostname: str | None
) -> dict[str, Any]:
    """The rank's identity and communication settings, from the launcher's environment."""
    out: dict[str, Any] = {name: _int(environ.get(var)) for name, var in LAUNCHER_INTS}
    out.update({name: environ.get(var) for name, var in LAUNCHER_TEXT})
    out["rank_seed"] = rank_seed
    out["host"] = hostname
    out["comm_settings"] = {
        name: environ[name] for name in sorted(environ) if name.startswith(COMM_PREFIXES)
    }
    return out


BACKEND: dict[str, Any] = {}
"""What ``torch.distributed.init_process_group`` set up in this process (filled by the wrapper
:func:`watch_init_process_group` installs): the backend, and the timeout when one was given."""


TIMEOUT_VAR = "REPRO_DIST_TIMEOUT_S"
TIMEOUT_MAX_S = 86400


def timeout_from(environ: Mapping[str, str]) -> int | None:
    """``REPRO_DIST_TIMEOUT_S``: the collective timeout given to ``init_process_group`` when
    the program gives none (None: unset or empty, torch's own default). It bounds how long a
    rank waits on a peer whose node vanished without closing its connections. A bad value is
    one ValueError line."""
    text = environ.get(TIMEOUT_VAR, "").strip()
    if not text:
        return None
    if not text.isdigit() or not 1 <= int(text) <= TIMEOUT_MAX_S:
        raise ValueError(
            f"{TIMEOUT_VAR}={text[:40]!r} is not allowed: use a whole number of seconds from 1 "
            f"to {TIMEOUT_MAX_S}, or leave it empty for torch's default"
        )
    return int(text)


def watch_init_process_group(torch: Any) -> bool:
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
    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        given = timeout_from(os.environ)
        if given is not None and kwargs.get("timeout") is None and len(args) < 3:
            import datetime

            kwargs["timeout"] = datetime.timedelta(seconds=given)
            BACKEND["timeout_source"] = TIMEOUT_VAR
        elif kwargs.get("timeout") is not None:
            BACKEND["timeout_source"] = "program"
        result = original(*args, **kwargs)
        learn_peers(os.environ)
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


# A gloo/NCCL transport error names the peer it lost by address: "[172.20.0.3]:6563".
_PEER = re.compile(r"\[(\d{1,3}(?:\.\d{1,3}){3}|[0-9a-fA-F:]*:[0-9a-fA-F:]+)\]:(\d+)")
RESOLVE_TIMEOUT_S = 3.0


NODES_VAR = "REPRO_DIST_NODES"
"""The job's node names, comma-separated, as the renderers write them (``node-0,node-1`` in
compose; ``<job>-0.<job>,...`` in Kubernetes)."""
NODES_MAX = 1024
_NODE_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252})")
PEERS: dict[str, str] = {}
"""Address -> node name, learnt once the process group is up (every node is then on the
network). A lost node's name must come from here: once its container stops, Docker's DNS no
longer knows it, and a reverse lookup at failure time gives nothing."""
_LEARNING: list[Any] = []


def node_names(environ: Mapping[str, str]) -> tuple[str, ...]:
    """The names in ``REPRO_DIST_NODES`` that look like host names (others are skipped:
    the variable is a hint, never a reason to fail a rank)."""
    words = environ.get(NODES_VAR, "").split(",")[:NODES_MAX]
    return tuple(w.strip() for w in words if _NODE_NAME.fullmatch(w.strip()))


def _forward(name: str) -> list[str]:
    import socket

    try:
        infos = socket.getaddrinfo(name, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        return []
    return [str(info[4][0]) for info in infos]


def learn_peers(environ: Mapping[str, str], resolve: Callable[[str], list[str]] = _forward) -> None:
    """Look up every node's address in a daemon thread (the rank does not wait for it) and
    remember which name each address belongs to, for :func:`lost_peer_line`."""
    names = node_names(environ)
    if not names:
        return
    import threading

    def learn() -> None:
        for name in names:
            for address in resolve(name):
                PEERS.setdefault(address, name)

    worker = threading.Thread(target=learn, name="reprobuild-peers", daemon=True)
    _LEARNING.append(worker)
    worker.start()


def _known(address: str) -> str | None:
    """The node name learnt for ``address``, waiting (bounded) for a lookup still running."""
    for worker in _LEARNING:
        worker.join(RESOLVE_TIMEOUT_S)
    return PEERS.get(address)


def _only_other(environ: Mapping[str, str], host: str) -> str | None:
    """In a job of two nodes, the node that is not this one (by its first DNS label: k8s
    lists ``job-1.job``, the pod's host name is ``job-1``): a peer lost at an address nobody
    learnt (a network that masquerades its members, say) can only be that one. None with
    more nodes, or when this node is not in the list."""
    names = node_names(environ)
    mine = host.split(".", 1)[0]
    others = [n for n in names if n.split(".", 1)[0] != mine]
    if len(names) == 2 and len(others) == 1:
        return f"{others[0]} (the only other node)"
    return None


def _reverse(address: str) -> str | None:
    """The name the network gives ``address`` (Docker's DNS answers with the container's
    name, ``<project>_node-1_1.<project>_job``); None when it has none. Bounded: a resolver
    that does not answer within :data:`RESOLVE_TIMEOUT_S` must not hold the failing process."""
    import contextlib
    import socket
    import threading

    found: list[str] = []

    def ask() -> None:
        with contextlib.suppress(OSError):
            found.append(socket.gethostbyaddr(address)[0])

    worker = threading.Thread(target=ask, daemon=True)
    worker.start()
    worker.join(RESOLVE_TIMEOUT_S)
    return found[0] if found else None


def lost_peer_line(
    exc: BaseException | None,
    environ: Mapping[str, str],
    resolve: Callable[[str], str | None] = _reverse,
    known: Callable[[str], str | None] = _known,
) -> str | None:
    """One line naming the peer a rank lost, when ``exc`` (or its cause) is a collective that
    failed on a connection to another address; None otherwise. torchrun's own summary names
    only the ranks on this node that failed, not the node that went away. The name is the
    node's as learnt at start (``known``), else what a reverse lookup gives now."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        match = _PEER.search(str(exc)) if isinstance(exc, RuntimeError) else None
        if match is not None:
            address, port = match.groups()
            import platform

            host = environ.get("HOSTNAME") or platform.node() or "this node"
            name = known(address) or resolve(address) or _only_other(environ, host)
            where = f"{name} at {address}:{port}" if name else f"{address}:{port} (no name)"
            rank = environ.get("RANK", "?")
            return (
                f"reprobuild: rank {rank} on {host} lost its connection to {where}: that node "
                "stopped or its rank failed first; see its log"
            )
        exc = exc.__cause__ or exc.__context__
    return None
