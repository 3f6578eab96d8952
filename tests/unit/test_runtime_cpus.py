"""CPUs a container can use (affinity and cgroup quota), from fake cgroup trees: no limits
need to be set on the machine running the tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from reprobuild_entrypoint import cpus


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("max 100000\n", None),
        ("200000 100000\n", 2.0),
        ("150000 100000", 1.5),
        ("50000 100000\n", 0.5),
        ("", None),
        ("garbage", None),
        ("0 100000", None),
        ("100000 0", None),
        ("-1 100000", None),
    ],
)
def test_parse_cpu_max(text: str, expected: float | None) -> None:
    assert cpus.parse_cpu_max(text) == expected


@pytest.mark.parametrize(
    ("quota", "period", "expected"),
    [("-1\n", "100000\n", None), ("300000\n", "100000\n", 3.0), ("x", "100000", None)],
)
def test_parse_cfs(quota: str, period: str, expected: float | None) -> None:
    assert cpus.parse_cfs(quota, period) == expected


def test_parse_proc_cgroup() -> None:
    assert cpus.parse_proc_cgroup("0::/\n") == ("/", None)
    v1 = "12:pids:/docker/abc\n4:cpu,cpuacct:/docker/abc\n1:name=systemd:/docker/abc\n"
    assert cpus.parse_proc_cgroup(v1) == (None, "/docker/abc")
    assert cpus.parse_proc_cgroup("nonsense\n") == (None, None)


def fake_tree(tmp_path: Path, proc: str, files: dict[str, str]) -> tuple[str, str]:
    root = tmp_path / "cgroup"
    root.mkdir()
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    proc_cgroup = tmp_path / "proc-self-cgroup"
    proc_cgroup.write_text(proc)
    return str(root), str(proc_cgroup)


def test_v2_container_with_private_namespace(tmp_path: Path) -> None:
    # docker run --cpus 1.5 on cgroup v2: the container's cgroup is the mount's root
    root, proc = fake_tree(tmp_path, "0::/\n", {"cpu.max": "150000 100000\n"})
    assert cpus.quota_cpus(root, proc) == 1.5


def test_v2_smallest_limit_along_the_path_wins(tmp_path: Path) -> None:
    root, proc = fake_tree(
        tmp_path,
        "0::/kubepods/pod1/ctr\n",
        {
            "kubepods/cpu.max": "max 100000\n",
            "kubepods/pod1/cpu.max": "100000 100000\n",
            "kubepods/pod1/ctr/cpu.max": "400000 100000\n",
        },
    )
    assert cpus.quota_cpus(root, proc) == 1.0


def test_v2_without_a_limit(tmp_path: Path) -> None:
    root, proc = fake_tree(tmp_path, "0::/\n", {"cpu.max": "max 100000\n"})
    assert cpus.quota_cpus(root, proc) is None


def test_v1_host_path_absent_in_the_container_reads_the_mount(tmp_path: Path) -> None:
    # cgroup v1 container: /proc/self/cgroup names the host's path, the mount is our own cgroup
    root, proc = fake_tree(
        tmp_path,
        "4:cpu,cpuacct:/docker/0123abcd\n",
        {"cpu,cpuacct/cpu.cfs_quota_us": "200000\n", "cpu,cpuacct/cpu.cfs_period_us": "100000\n"},
    )
    assert cpus.quota_cpus(root, proc) == 2.0


def test_v1_unlimited(tmp_path: Path) -> None:
    root, proc = fake_tree(
        tmp_path,
        "4:cpu,cpuacct:/\n",
        {"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"},
    )
    assert cpus.quota_cpus(root, proc) is None


def test_nothing_readable(tmp_path: Path) -> None:
    assert cpus.quota_cpus(str(tmp_path / "none"), str(tmp_path / "none")) is None


def test_usable_is_the_smaller_of_affinity_and_quota() -> None:
    assert cpus.usable(8, 2.0) == 2.0
    assert cpus.usable(2, None) == 2
    assert cpus.usable(None, 1.5) == 1.5
    assert cpus.usable(None, None) is None


def test_notice_names_the_count_its_source_and_the_cpus() -> None:
    line = cpus.notice(4, "default", 2)
    assert line.startswith("4 threads (the default) fixed for determinism")
    assert "this container can use 2 CPUs" in line
    assert "REPRO_THREADS=2" in line
    quota = cpus.notice(8, "REPRO_THREADS", 1.5)
    assert "8 threads (from REPRO_THREADS)" in quota and "can use 1.5 CPUs" in quota
    assert "REPRO_THREADS=1 " in quota  # a whole count at most the CPUs
    assert "can use 1 CPU:" in cpus.notice(2, "default", 1)
    assert "REPRO_THREADS=1 " in cpus.notice(2, "default", 0.5)
