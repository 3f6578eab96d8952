"""What torch sees on this host, as one JSON line: its version, what it was built against and,
when CUDA works, the devices and the cuDNN and NCCL it loaded. Run bare (no runtime)."""

from __future__ import annotations

import json
import sys
from typing import Any


def _guard(call: Any) -> Any:
    try:
        return call()
    except Exception as exc:  # a fact torch cannot give is recorded as such
        return f"unavailable: {type(exc).__name__}: {exc}"


def main() -> None:
    out: dict[str, Any] = {"python": sys.version.split()[0], "executable": sys.executable}
    try:
        import torch
    except Exception as exc:
        out["torch"] = None
        out["error"] = f"{type(exc).__name__}: {exc}"
        print(json.dumps(out))
        return
    out["torch"] = str(torch.__version__)
    out["cuda_built"] = torch.version.cuda
    out["cuda_available"] = bool(_guard(torch.cuda.is_available) is True)
    out["device_count"] = _guard(torch.cuda.device_count) if out["cuda_available"] else 0
    if out["cuda_available"]:
        torch.zeros(1, device="cuda")  # initialise CUDA: the libraries below are then loaded
        devices = []
        for i in range(int(out["device_count"])):
            props = torch.cuda.get_device_properties(i)
            devices.append(
                {
                    "index": i,
                    "name": props.name,
                    "compute_cap": f"{props.major}.{props.minor}",
                    "uuid": _guard(lambda p=props: str(p.uuid)),
                    "multi_processor_count": props.multi_processor_count,
                }
            )
        out["devices"] = devices
        out["cudnn"] = _guard(torch.backends.cudnn.version)
        out["nccl"] = _guard(lambda: ".".join(map(str, torch.cuda.nccl.version())))
    print(json.dumps(out, default=str))


if __name__ == "__main__":
    main()
