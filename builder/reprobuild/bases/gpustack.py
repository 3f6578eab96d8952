"""The stack a GPU image carries: CUDA, cuDNN, NCCL and framework versions, each as the base
declares it (its ENV and labels, NGC's conventions), as the frameworks report it, and as the
CUDA wheels installed from the lock say (``nvidia-cudnn-cu12 9.10.2.21``: PyPI's torch, jax's
``cuda12`` extra and cupy bring CUDA that way, on a plain Python base).

Pure: facts in, a dict and labels out. Versions are read from what the image says about
itself, never parsed out of a tag string.
"""

from __future__ import annotations

from typing import Any

from packaging.utils import canonicalize_name

from reprobuild_entrypoint.contract import LABEL_PREFIX

# ENV names NGC images (and nvidia/cuda images, for the CUDA ones) set, and the stack key each
# fills. NVIDIA_*_VERSION are NGC release numbers (e.g. 25.01); *_VERSION are library versions.
DECLARED_ENV = {
    "CUDA_VERSION": "cuda",
    "CUDNN_VERSION": "cudnn",
    "NCCL_VERSION": "nccl",
    "CUBLAS_VERSION": "cublas",
    "CUDA_DRIVER_VERSION": "cuda_compat_driver",
    "PYTORCH_VERSION": "torch",
    "TENSORFLOW_VERSION": "tensorflow",
    "NVIDIA_PYTORCH_VERSION": "ngc_release",
    "NVIDIA_TENSORFLOW_VERSION": "ngc_release",
    "NVIDIA_BUILD_ID": "ngc_build_id",
    "NVIDIA_REQUIRE_CUDA": "require_cuda",
}
LABEL_KEYS = ("cuda", "cudnn", "nccl", "torch", "tensorflow")
# Labels that do not mean what their name says: NGC images carry com.nvidia.cuda.version=9.0,
# the literal floor of their NVIDIA_REQUIRE_CUDA, whatever CUDA they ship. CUDA comes from ENV.
IGNORED_LABELS = frozenset({"com.nvidia.cuda.version"})


def parse_env(env: list[str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in env or []:
        name, sep, value = item.partition("=")
        if sep:
            out[name] = value
    return out


def declared(env: dict[str, str], labels: dict[str, str]) -> dict[str, str]:
    """What the base image declares about its stack (ENV first, com.nvidia.* labels next)."""
    return {key: value for key, (value, _) in declared_with_origin(env, labels).items()}


def declared_with_origin(env: dict[str, str], labels: dict[str, str]) -> dict[str, tuple[str, str]]:
    """:func:`declared`, each value with where it was read (``ENV CUDA_VERSION``, ``label
    com.nvidia.nccl.version``)."""
    out: dict[str, tuple[str, str]] = {}
    for name, key in DECLARED_ENV.items():
        if env.get(name):
            out.setdefault(key, (env[name], f"ENV {name}"))
    for label, value in sorted(labels.items()):
        if label in IGNORED_LABELS:
            continue
        if label.startswith("com.nvidia.") and label.endswith(".version") and value:
            key = label.removeprefix("com.nvidia.").removesuffix(".version")
            out.setdefault(key, (value, f"label {label}"))
    return out


# The wheels NVIDIA publishes the CUDA libraries as (PyPI: ``nvidia-<lib>`` for CUDA 13,
# ``nvidia-<lib>-cu12``/``-cu11`` before), and the stack key each one's version fills. A
# toolkit component's wheel version is the toolkit's (nvidia-cuda-runtime-cu12 12.8.90 is
# CUDA 12.8); cuDNN, cuBLAS and NCCL carry their own release numbers.
WHEEL_KEYS = {
    "nvidia-cuda-runtime": "cuda",
    "nvidia-cudnn": "cudnn",
    "nvidia-cublas": "cublas",
    "nvidia-nccl": "nccl",
}
# Components whose version is the toolkit's too: CUDA's version where no runtime wheel is
# locked (a lock that takes only NVRTC or CUPTI still names the toolkit it was built for).
_TOOLKIT_COMPONENTS = ("nvidia-cuda-nvrtc", "nvidia-cuda-cupti", "nvidia-nvtx")


def _wheel_family(name: str) -> str:
    """``nvidia-cudnn-cu12`` -> ``nvidia-cudnn`` (the CUDA-major suffix dropped)."""
    head, sep, tail = name.rpartition("-")
    return head if sep and tail.startswith("cu") and tail[2:].isdigit() else name


def from_wheels(distributions: list[tuple[str, str]]) -> dict[str, dict[str, str]]:
    """The CUDA stack the installed ``nvidia-*`` wheels carry: key -> {value, source}.

    ``distributions`` are (canonical name, version) pairs as the image probe lists them. CUDA
    is the runtime wheel's major.minor, else a toolkit component's; cuDNN, cuBLAS and NCCL
    their wheel's version."""
    out: dict[str, dict[str, str]] = {}
    toolkit: tuple[str, str] | None = None
    for name, version in sorted((canonicalize_name(n), v) for n, v in distributions):
        family = _wheel_family(name)
        key = WHEEL_KEYS.get(family)
        if key is not None:
            value = cuda_major_minor(version) if key == "cuda" else version
            if value:
                out[key] = {"value": value, "source": f"wheel {name} {version}"}
        elif family in _TOOLKIT_COMPONENTS and toolkit is None:
            toolkit = (name, version)
    if "cuda" not in out and toolkit is not None:
        value = cuda_major_minor(toolkit[1])
        if value:
            out["cuda"] = {"value": value, "source": f"wheel {toolkit[0]} {toolkit[1]}"}
    return out


def reported(frameworks: dict[str, Any]) -> dict[str, str]:
    """What the frameworks report they were built with (``torch.cuda``, ``tensorflow.cudnn``...)."""
    out: dict[str, str] = {}
    for framework, facts in sorted(frameworks.items()):
        if not isinstance(facts, dict):
            continue
        for key, value in sorted(facts.items()):
            if value is not None and not str(value).startswith("unavailable"):
                out[f"{framework}.{key}"] = _cudnn(value) if key == "cudnn" else str(value)
    return out


def _cudnn(value: object) -> str:
    """torch reports cuDNN as an integer: 8902 is 8.9.2 (v8: M*1000+m*100+p), 90100 is 9.1.0
    (v9 on: M*10000+m*100+p)."""
    text = str(value)
    if not text.isdigit():
        return text
    n = int(text)
    major, rest = (n // 10000, n % 10000) if n >= 10000 else (n // 1000, n % 1000)
    return f"{major}.{rest // 100}.{rest % 100}"


def cuda_major_minor(version: str | None) -> str | None:
    parts = (version or "").split(".")
    if len(parts) >= 2 and parts[0].isdigit() and parts[1].isdigit():
        return f"{int(parts[0])}.{int(parts[1])}"
    return None


def stack_labels(stack: dict[str, Any]) -> dict[str, str]:
    """Headline labels: io.reprobuild.{cuda,cudnn,nccl,torch,tensorflow}, the frameworks' own
    report first (what the code was built against), the base's declaration next, the CUDA
    wheels' versions last."""
    rep, dec = stack.get("reported", {}), stack.get("declared", {})
    wheels = {k: v["value"] for k, v in stack.get("wheels", {}).items()}
    labels: dict[str, str] = {}
    for key in LABEL_KEYS:
        value = (
            (
                rep.get(f"{key}.version")
                if key in ("torch", "tensorflow")
                else rep.get(f"torch.{key}") or rep.get(f"tensorflow.{key}")
            )
            or dec.get(key)
            or wheels.get(key)
        )
        if value:
            labels[f"{LABEL_PREFIX}{key}"] = value
    return labels
