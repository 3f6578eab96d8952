"""The stack a GPU image carries: CUDA, cuDNN, NCCL and framework versions, each as the base
declares it (its ENV and labels, NGC's conventions) and as the frameworks report it.

Pure: facts in, a dict and labels out. Versions are read from what the image says about
itself, never parsed out of a tag string.
"""

from __future__ import annotations

from typing import Any

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


def stack_labels(stack: dict[str, dict[str, str]]) -> dict[str, str]:
    """Headline labels: io.reprobuild.{cuda,cudnn,nccl,torch,tensorflow}, the frameworks' own
    report first (what the code was built against), the base's declaration otherwise."""
    rep, dec = stack.get("reported", {}), stack.get("declared", {})
    labels: dict[str, str] = {}
    for key in LABEL_KEYS:
        value = (
            rep.get(f"{key}.version")
            if key in ("torch", "tensorflow")
            else rep.get(f"torch.{key}") or rep.get(f"tensorflow.{key}")
        ) or dec.get(key)
        if value:
            labels[f"{LABEL_PREFIX}{key}"] = value
    return labels
