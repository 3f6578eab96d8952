"""How many CPUs this process can use: its affinity mask, capped by its cgroup's CPU quota.

``docker run --cpuset-cpus`` narrows the affinity mask; ``docker run --cpus`` (a Kubernetes CPU
limit) sets a quota instead, which ``os.cpu_count()`` and the mask do not show: cgroup v2
``cpu.max`` (``"150000 100000"``, or ``"max 100000"`` for none), cgroup v1
``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` (quota -1 for none). The limit that applies is the
smallest along the cgroup's path, so ancestors are read too.

Start-up (``_startup``) uses it to say, once, when the fixed thread count is above what the
container can use. Parsers are pure; the readers answer None rather than fail, and import
nothing beyond ``os``: this runs at interpreter start.
"""

from __future__ import annotations

import os

CGROUP_ROOT = "/sys/fs/cgroup"
PROC_CGROUP = "/proc/self/cgroup"
V1_CPU_MOUNTS = ("cpu", "cpu,cpuacct", "cpuacct,cpu")


def parse_cpu_max(text: str) -> float | None:
    """cgroup v2 ``cpu.max``: CPUs allowed (quota / period), or None when unlimited."""
    parts = text.split()
    if len(parts) != 2 or parts[0] == "max":
        return None
    return _ratio(parts[0], parts[1])


def parse_cfs(quota: str, period: str) -> float | None:
    """cgroup v1 ``cpu.cfs_quota_us`` and ``cpu.cfs_period_us``; None when unlimited (-1)."""
    return _ratio(quota.strip(), period.strip())


def _ratio(quota: str, period: str) -> float | None:
    if not (quota.isascii() and quota.isdigit() and period.isascii() and period.isdigit()):
        return None
    if int(quota) == 0 or int(period) == 0:
        return None
    return int(quota) / int(period)


def parse_proc_cgroup(text: str) -> tuple[str | None, str | None]:
    """``/proc/self/cgroup``: (the v2 path, the v1 path of the ``cpu`` controller)."""
    v2 = v1 = None
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            v2 = parts[2]
        elif "cpu" in parts[1].split(","):
            v1 = parts[2]
    return v2, v1


def _dirs(mount: str, path: str | None) -> list[str]:
    """``mount/path`` and its ancestors up to ``mount``, those that exist. In a container the
    path may name the host's view (cgroup v1), which does not exist: the mount is then the
    container's own cgroup."""
    out = [mount]
    parts = [p for p in (path or "").split("/") if p]
    for i in range(1, len(parts) + 1):
        candidate = os.path.join(mount, *parts[:i])
        if os.path.isdir(candidate):
            out.append(candidate)
    return out


def _read(path: str) -> str | None:
    try:
        with open(path, "rb") as fh:  # bytes: no text codec to import at start-up
            return fh.read(4096).decode("utf-8", "replace")
    except OSError:
        return None


def quota_cpus(root: str = CGROUP_ROOT, proc_cgroup: str = PROC_CGROUP) -> float | None:
    """The smallest CPU quota along this process's cgroup path, in CPUs; None without one."""
    text = _read(proc_cgroup)
    v2_path, v1_path = parse_proc_cgroup(text or "")
    limits: list[float] = []
    if v2_path is not None:
        for folder in _dirs(root, v2_path):
            value = _read(os.path.join(folder, "cpu.max"))
            limit = None if value is None else parse_cpu_max(value)
            if limit is not None:
                limits.append(limit)
    for name in V1_CPU_MOUNTS:
        mount = os.path.join(root, name)
        if not os.path.isdir(mount):
            continue
        for folder in _dirs(mount, v1_path):
            quota = _read(os.path.join(folder, "cpu.cfs_quota_us"))
            period = _read(os.path.join(folder, "cpu.cfs_period_us"))
            limit = None if quota is None or period is None else parse_cfs(quota, period)
            if limit is not None:
                limits.append(limit)
        break
    return min(limits) if limits else None


def affinity_cpus() -> int | None:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


def usable(affinity: int | None, quota: float | None) -> float | None:
    """The CPUs a process can keep busy: the smaller of the two, None when neither is known."""
    known = [value for value in (affinity, quota) if value is not None]
    return min(known) if known else None


def available(root: str = CGROUP_ROOT, proc_cgroup: str = PROC_CGROUP) -> float | None:
    """CPUs this process can use: affinity mask capped by the cgroup quota."""
    return usable(affinity_cpus(), quota_cpus(root, proc_cgroup))


def notice(threads: int, source: str, found: float) -> str:
    """The start-up line when ``threads`` (from ``source``) is above the ``found`` CPUs."""
    fit = max(1, int(found))
    origin = "the default" if source == "default" else f"from {source}"
    cpus = "1 CPU" if found == 1 else f"{found:g} CPUs"
    return (
        f"{threads} threads ({origin}) fixed for determinism, but this container can use "
        f"{cpus}: runs are slower, results unchanged; REPRO_THREADS={fit} is faster here "
        f"but gives other results than {threads} threads"
    )
