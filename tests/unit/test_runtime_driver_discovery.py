"""GPU discovery for GPU images (``gpuinfo``), from recorded probe outputs (tests/data/gpu) and
a fake NVML library: no GPU, no NVML, no nvidia-smi needed."""

from __future__ import annotations

import ctypes
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from reprobuild_entrypoint import gpuinfo, hostinfo

SAMPLES = Path(__file__).resolve().parent.parent / "data" / "gpu"
H100 = "NVIDIA H100 80GB HBM3"
QUERY = ["--query-gpu=name,driver_version,compute_cap,uuid", "--format=csv,noheader"]
SMI_ONLY = {"REPROBUILD_GPU_PROBES": "nvidia-smi"}


def sample(name: str) -> str:
    return (SAMPLES / name).read_text()


def no_nvml() -> Any:
    raise OSError("libnvidia-ml.so.1: cannot open shared object file: No such file or directory")


class FakeSmi:
    """Stands in for ``subprocess.run`` of nvidia-smi: one answer whatever the query."""

    def __init__(self, status: int, output: str) -> None:
        self.status, self.output = status, output
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        self.calls.append(list(argv))
        return subprocess.CompletedProcess(list(argv), self.status, self.output, "")


def discover(
    tmp_path: Path,
    smi: FakeSmi | None,
    *,
    load: Callable[[], Any] = no_nvml,
    environ: dict[str, str] | None = None,
    proc: str | None = None,
    nodes: Sequence[str] = (),
) -> dict[str, Any]:
    proc_file = tmp_path / "version"
    if proc is not None:
        proc_file.write_text(proc)
    dev = tmp_path / "dev"
    dev.mkdir(exist_ok=True)
    for node in nodes:
        (dev / node).touch()
    return gpuinfo.discover(
        environ if environ is not None else {},
        load=load,
        nvidia_smi="/usr/bin/nvidia-smi" if smi is not None else "",
        run=smi if smi is not None else FakeSmi(127, ""),
        proc_version=proc_file,
        dev_dir=dev,
    )


# ------------------------------------------------------------------------------ nvidia-smi


def test_one_h100_from_nvidia_smi(tmp_path: Path) -> None:
    smi = FakeSmi(0, sample("nvidia-smi-h100x1.csv"))
    info = discover(tmp_path, smi)
    assert smi.calls == [["/usr/bin/nvidia-smi", *QUERY]]
    assert info == {
        "method": "nvidia-smi",
        "source": "/usr/bin/nvidia-smi",
        "driver_version": "550.54.15",
        "cuda_driver_version": None,
        "count": 1,
        "devices": [
            {
                "index": 0,
                "name": H100,
                "uuid": "GPU-0b2c4e6f-8a1d-4c3e-9f5b-7d1e3a5c7b90",
                "compute_cap": "9.0",
            }
        ],
        "cuda_visible_devices": None,
        "visible": None,
        "tried": [
            "nvml: libnvidia-ml.so.1: cannot open shared object file: No such file or directory"
        ],
    }


def test_eight_h100s_from_nvidia_smi(tmp_path: Path) -> None:
    info = discover(tmp_path, FakeSmi(0, sample("nvidia-smi-h100x8.csv")))
    assert info["count"] == 8 and info["driver_version"] == "550.54.15"
    assert [d["index"] for d in info["devices"]] == list(range(8))
    assert {d["name"] for d in info["devices"]} == {H100}
    assert {d["compute_cap"] for d in info["devices"]} == {"9.0"}
    assert len({d["uuid"] for d in info["devices"]}) == 8


def test_nvidia_smi_failure_falls_back_to_procfs(tmp_path: Path) -> None:
    info = discover(
        tmp_path,
        FakeSmi(9, sample("nvidia-smi-no-driver.txt")),
        proc=sample("proc-driver-version-open.txt"),
        nodes=["nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia0", "nvidia1"],
    )
    assert info["method"] == "procfs" and info["driver_version"] == "550.54.15"
    assert info["count"] == 2 and info["devices"] is None  # counted from /dev/nvidia<N>
    assert info["tried"][1] == (
        "nvidia-smi: exit status 9: NVIDIA-SMI has failed because it couldn't communicate with "
        "the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running."
    )


@pytest.mark.parametrize(
    "proc", ["proc-driver-version-open.txt", "proc-driver-version-proprietary.txt"]
)
def test_procfs_without_device_nodes_is_no_gpu(tmp_path: Path, proc: str) -> None:
    """/proc/driver/nvidia is readable in a container started without --gpus: the driver is
    there, the GPUs are not."""
    info = discover(tmp_path, None, proc=sample(proc), nodes=["nvidiactl"])
    assert (info["method"], info["driver_version"], info["count"]) == ("procfs", "550.54.15", 0)


@pytest.mark.parametrize(
    ("status", "output"),
    [
        (0, ""),
        (0, "\n\n"),
        (0, "garbage\n"),
        (0, "No devices were found\n"),
        (0, "NVIDIA H100 80GB HBM3, not-a-driver, 9.0, GPU-1\n"),
        (0, "NVIDIA H100 80GB HBM3, 550.54.15\n"),
        (6, "No devices were found\n"),
        (9, sample("nvidia-smi-no-driver.txt")),
        (255, "\x00\xff binary junk"),
    ],
)
def test_malformed_outputs_find_nothing(tmp_path: Path, status: int, output: str) -> None:
    info = discover(tmp_path, FakeSmi(status, output), proc="not the driver's file\n")
    assert (info["method"], info["driver_version"], info["count"], info["devices"]) == (
        None,
        None,
        0,
        [],
    )
    assert [t.split(":")[0] for t in info["tried"]] == ["nvml", "nvidia-smi", "procfs"]


def test_nothing_at_all(tmp_path: Path) -> None:
    info = discover(tmp_path, None)
    assert info["method"] is None and info["count"] == 0
    assert info["tried"][1:] == [
        "nvidia-smi: not on PATH",
        f"procfs: no driver version in {tmp_path / 'version'}",
    ]


def test_nvidia_smi_that_cannot_run(tmp_path: Path) -> None:
    def hangs(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        raise subprocess.TimeoutExpired(list(argv), hostinfo.NVIDIA_SMI_TIMEOUT_S)

    info = gpuinfo.discover(
        SMI_ONLY, nvidia_smi="nvidia-smi", run=hangs, proc_version=tmp_path / "x"
    )
    assert info["method"] is None and info["tried"][0].startswith("nvidia-smi: TimeoutExpired")
    assert hostinfo.NVIDIA_SMI_TIMEOUT_S == 10


def test_probes_can_be_narrowed(tmp_path: Path) -> None:
    def must_not_load() -> Any:
        raise AssertionError("NVML was probed")

    info = discover(
        tmp_path,
        FakeSmi(0, sample("nvidia-smi-h100x1.csv")),
        load=must_not_load,
        environ=SMI_ONLY,
    )
    assert info["method"] == "nvidia-smi" and info["tried"] == []
    only_procfs = discover(
        tmp_path,
        FakeSmi(0, sample("nvidia-smi-h100x1.csv")),
        load=must_not_load,
        environ={"REPROBUILD_GPU_PROBES": "procfs"},
        proc=sample("proc-driver-version-proprietary.txt"),
    )
    assert only_procfs["method"] == "procfs"


def test_the_name_may_stand_anywhere_in_the_query() -> None:
    """The field order docs/determinism.md shows (driver first, name second), with a comma in
    the name."""
    fields = ("driver_version", "name", "uuid", "compute_cap")
    rows = hostinfo.parse_nvidia_smi(
        "550.54.15, NVIDIA H100 80GB HBM3, GPU-0b2c, 9.0\n"
        "550.54.15, Odd, Board, GPU-1f3e, [N/A]\n"
        "550.54.15, too few\n",
        fields,
    )
    assert rows == [
        {"driver_version": "550.54.15", "name": H100, "uuid": "GPU-0b2c", "compute_cap": "9.0"},
        {
            "driver_version": "550.54.15",
            "name": "Odd, Board",
            "uuid": "GPU-1f3e",
            "compute_cap": None,
        },
    ]


# ------------------------------------------------------------------------------------ NVML


def _set(ref: Any, value: int) -> None:
    ref._obj.value = value  # ctypes.byref(x)._obj is x


class FakeNvml:
    """The NVML functions the runtime calls, answering like an 8 x H100 node on 550.54.15
    (CUDA 12.4). ``fail`` maps a function name to the nvmlReturn_t it returns instead;
    ``missing`` names functions the library lacks (an old driver)."""

    def __init__(
        self, count: int = 8, fail: dict[str, int] | None = None, missing: Sequence[str] = ()
    ) -> None:
        self.count = count
        self.fail = fail or {}
        self.missing = set(missing)
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Callable[..., int]:
        if name in self.missing or not name.startswith("nvml"):
            raise AttributeError(name)
        implementation = getattr(self, "_" + name)

        def call(*args: Any) -> int:
            self.calls.append(name)
            if name in self.fail:
                return self.fail[name]
            implementation(*args)
            return 0

        return call

    def _nvmlInit_v2(self) -> None:
        pass

    def _nvmlShutdown(self) -> None:
        pass

    def _nvmlSystemGetDriverVersion(self, buffer: Any, length: Any) -> None:
        assert isinstance(length, ctypes.c_uint) and length.value >= 80
        buffer.value = b"550.54.15"

    def _nvmlSystemGetCudaDriverVersion_v2(self, ref: Any) -> None:
        _set(ref, 12040)

    def _nvmlDeviceGetCount_v2(self, ref: Any) -> None:
        _set(ref, self.count)

    def _nvmlDeviceGetHandleByIndex_v2(self, index: Any, ref: Any) -> None:
        _set(ref, 0x1000 + index.value)

    def _nvmlDeviceGetName(self, handle: Any, buffer: Any, length: Any) -> None:
        buffer.value = H100.encode()

    def _nvmlDeviceGetUUID(self, handle: Any, buffer: Any, length: Any) -> None:
        buffer.value = f"GPU-{handle.value:08x}-0000-4000-8000-000000000000".encode()

    def _nvmlDeviceGetCudaComputeCapability(self, handle: Any, major: Any, minor: Any) -> None:
        _set(major, 9)
        _set(minor, 0)


def test_nvml_first(tmp_path: Path) -> None:
    nvml = FakeNvml()
    smi = FakeSmi(0, sample("nvidia-smi-h100x1.csv"))
    info = discover(tmp_path, smi, load=lambda: nvml)
    assert smi.calls == []  # NVML answered: nvidia-smi never ran
    assert (info["method"], info["source"]) == ("nvml", "libnvidia-ml.so.1")
    assert (info["driver_version"], info["cuda_driver_version"], info["count"]) == (
        "550.54.15",
        "12.4",
        8,
    )
    assert info["devices"][3] == {
        "index": 3,
        "name": H100,
        "uuid": "GPU-00001003-0000-4000-8000-000000000000",
        "compute_cap": "9.0",
    }
    assert info["tried"] == []
    assert nvml.calls[0] == "nvmlInit_v2" and nvml.calls[-1] == "nvmlShutdown"


def test_nvml_init_failure_falls_back_to_nvidia_smi(tmp_path: Path) -> None:
    nvml = FakeNvml(fail={"nvmlInit_v2": 9})  # NVML_ERROR_DRIVER_NOT_LOADED
    info = discover(tmp_path, FakeSmi(0, sample("nvidia-smi-h100x8.csv")), load=lambda: nvml)
    assert info["method"] == "nvidia-smi" and info["count"] == 8
    assert info["tried"] == ["nvml: nvmlInit_v2 returned 9"]
    assert nvml.calls == ["nvmlInit_v2"]  # no shutdown after a failed init


@pytest.mark.parametrize(
    "broken",
    [
        {"fail": {"nvmlSystemGetDriverVersion": 999}},
        {"fail": {"nvmlDeviceGetCount_v2": 3}},
        {"missing": ["nvmlDeviceGetCount_v2"]},
        {"missing": ["nvmlInit_v2"]},
    ],
)
def test_nvml_without_driver_or_count_falls_back(tmp_path: Path, broken: dict[str, Any]) -> None:
    nvml = FakeNvml(**broken)
    info = discover(tmp_path, FakeSmi(0, sample("nvidia-smi-h100x1.csv")), load=lambda: nvml)
    assert info["method"] == "nvidia-smi" and info["tried"][0].startswith("nvml: nvml")
    if "nvmlInit_v2" not in broken.get("missing", ()):
        assert nvml.calls[-1] == "nvmlShutdown"  # shut down whatever failed after init


def test_nvml_per_device_failures_leave_fields_empty(tmp_path: Path) -> None:
    nvml = FakeNvml(
        count=2,
        fail={"nvmlDeviceGetUUID": 3},
        missing=["nvmlSystemGetCudaDriverVersion_v2", "nvmlDeviceGetCudaComputeCapability"],
    )
    info = discover(tmp_path, None, load=lambda: nvml)
    assert info["method"] == "nvml" and info["cuda_driver_version"] is None
    assert info["devices"] == [
        {"index": i, "name": H100, "uuid": None, "compute_cap": None} for i in range(2)
    ]


def test_nvml_with_no_device_is_a_driver_without_gpus(tmp_path: Path) -> None:
    info = discover(tmp_path, None, load=lambda: FakeNvml(count=0))
    assert (info["method"], info["driver_version"], info["count"], info["devices"]) == (
        "nvml",
        "550.54.15",
        0,
        [],
    )


def test_a_library_that_raises_anything_falls_back(tmp_path: Path) -> None:
    class Exploding:
        def __getattr__(self, name: str) -> Any:
            def boom(*args: Any) -> int:
                raise RuntimeError("segfault averted")

            return boom

    info = discover(tmp_path, FakeSmi(0, sample("nvidia-smi-h100x1.csv")), load=Exploding)
    assert info["method"] == "nvidia-smi"
    assert info["tried"] == ["nvml: RuntimeError: segfault averted"]


@pytest.mark.parametrize(
    ("value", "text"), [(12040, "12.4"), (13000, "13.0"), (11080, "11.8"), (0, None)]
)
def test_cuda_driver_version_text(value: int, text: str | None) -> None:
    assert gpuinfo.cuda_version_text(value) == text


# --------------------------------------------------------------------- CUDA_VISIBLE_DEVICES

EIGHT = [{"index": i, "uuid": f"GPU-{i}a{i}b-rest"} for i in range(8)]


@pytest.mark.parametrize(
    ("value", "visible"),
    [
        (None, None),
        ("0,2", [0, 2]),
        ("3", [3]),
        ("", []),
        ("-1", []),
        ("1,9,0", [1]),  # CUDA stops at the first index that names no device
        ("0,0", [0]),
        ("GPU-5a5b", [5]),  # a unique UUID prefix
        ("GPU-2a2b-rest,1", [2, 1]),
        ("GPU-", None),  # not unique
        ("MIG-0b2c4e6f-8a1d-4c3e-9f5b-7d1e3a5c7b90", None),
    ],
)
def test_visible_indices(value: str | None, visible: list[int] | None) -> None:
    assert gpuinfo.visible_indices(value, EIGHT) == visible


def test_visible_devices_are_reported(tmp_path: Path) -> None:
    info = discover(
        tmp_path,
        FakeSmi(0, sample("nvidia-smi-h100x8.csv")),
        environ={**SMI_ONLY, "CUDA_VISIBLE_DEVICES": "4,5"},
    )
    assert info["cuda_visible_devices"] == "4,5" and info["visible"] == [4, 5]
    assert info["count"] == 8  # reported, not applied
