"""The CUDA stack read from the lock's nvidia-* wheels (a plain Python base carries none)."""

from __future__ import annotations

from reprobuild.bases import gpustack

# What PyPI's torch 2.9.1 pulls on linux x86_64 (nanochat's lock, tests/data/lockfiles/wild)
TORCH_291_CU12 = [
    ("nvidia-cublas-cu12", "12.8.4.1"),
    ("nvidia-cuda-cupti-cu12", "12.8.90"),
    ("nvidia-cuda-nvrtc-cu12", "12.8.93"),
    ("nvidia-cuda-runtime-cu12", "12.8.90"),
    ("nvidia-cudnn-cu12", "9.10.2.21"),
    ("nvidia-nccl-cu12", "2.27.5"),
    ("nvidia-nvtx-cu12", "12.8.90"),
    ("numpy", "2.4.6"),
    ("torch", "2.9.1"),
]


def test_the_cuda_stack_of_pypis_torch_from_its_wheels() -> None:
    stack = gpustack.from_wheels(TORCH_291_CU12)
    assert {k: v["value"] for k, v in stack.items()} == {
        "cuda": "12.8",
        "cudnn": "9.10.2.21",
        "cublas": "12.8.4.1",
        "nccl": "2.27.5",
    }
    assert stack["cuda"]["source"] == "wheel nvidia-cuda-runtime-cu12 12.8.90"


def test_cuda_13_wheels_have_no_suffix_and_a_component_names_the_toolkit() -> None:
    """CUDA 13's wheels drop the -cuNN suffix (nvidia-cublas, nvidia-nvtx); with no runtime
    wheel locked, a toolkit component's version gives CUDA's major.minor. Names as written in
    a wheel file (underscores) are canonicalized."""
    stack = gpustack.from_wheels(
        [("nvidia_nvtx", "13.0.85"), ("nvidia-cublas", "13.1.1.3"), ("nvidia-nccl-cu13", "2.30.7")]
    )
    assert stack["cuda"] == {"value": "13.0", "source": "wheel nvidia-nvtx 13.0.85"}
    assert stack["cublas"]["value"] == "13.1.1.3" and stack["nccl"]["value"] == "2.30.7"


def test_no_cuda_wheel_no_stack() -> None:
    assert gpustack.from_wheels([("numpy", "2.4.6"), ("nvidia-ml-py", "13.580.82")]) == {}


def test_labels_fall_back_to_the_wheels() -> None:
    stack = {"declared": {}, "reported": {"torch.version": "2.9.1"}}
    stack["wheels"] = gpustack.from_wheels(TORCH_291_CU12)  # type: ignore[assignment]
    labels = gpustack.stack_labels(stack)
    assert labels["io.reprobuild.cudnn"] == "9.10.2.21"
    assert labels["io.reprobuild.cuda"] == "12.8" and labels["io.reprobuild.torch"] == "2.9.1"
