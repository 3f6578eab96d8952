"""Runtime benchmark (issue 3): what the determinism runtime costs, as ratios against the same
image without it, measured in one run inside one container.

    python benchmarks/runtime_bench.py --base REF@sha256:...   # builds the proof image
    python benchmarks/runtime_bench.py --image TAG             # or measures a built one

- interpreter start-up (`python -c pass`) with the hook vs without: goal under 20 ms extra;
- `import torch` and `import tensorflow` with vs without: goal under 5% extra;
- training wall time of the digits scripts, REPRO_DETERMINISM=strict vs off, on CPU;
- with ``--rng-state``: capture_rng_state/restore_rng_state against ``torch.save`` of a
  model's state_dict and against Keras's ``save_weights`` of a model of the same size, as a
  share of that save time, in the same process (issue 12; goal under 5%), written to
  benchmarks/results/rngstate.json (``rngstate_inside.py``).
Writes benchmarks/results/runtime.json.

    python benchmarks/runtime_bench.py --image TAG --threads-table [--rounds 3]

measures instead what determinism costs on CPU by thread count, against a bare run on the host
and with TensorFlow's oneDNN on and off (issue 14; see threads_table.py). Writes
benchmarks/results/runtime-threads.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import docker

HERE = Path(__file__).resolve().parent
PROJECT = HERE.parent / "tests" / "data" / "projects" / "determinism"
SCRIPTS = ["/app/scripts/torch_mlp.py", "/app/scripts/keras_conv.py"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--base", help="digest-pinned base to build the proof image on")
    group.add_argument("--image", help="an image built by reprobuild with torch and tensorflow")
    parser.add_argument(
        "--rng-state", action="store_true", help="measure the RNG state API only (issue 12)"
    )
    parser.add_argument(
        "--threads-table",
        action="store_true",
        help="cost of determinism by thread count, bare host vs off vs strict (issue 14)",
    )
    parser.add_argument("--rounds", type=int, default=3, help="--threads-table: rounds (>= 3)")
    parser.add_argument(
        "--counts",
        default="auto,default,nproc,1",
        help="--threads-table: which thread counts, of auto,default,nproc,1 (default: all)",
    )
    parser.add_argument(
        "--scripts",
        default="torch_cnn,keras_lstm",
        help="--threads-table: which workloads, of torch_cnn,keras_lstm (default: both)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=HERE / "results" / "runtime-threads.json",
        help="--threads-table: where to write the table (a subset belongs in its own file)",
    )
    parser.add_argument(
        "--host-venv",
        type=Path,
        default=HERE / "results" / "host-venv",
        help="--threads-table: the bare host's venv, made from the locked wheels if missing",
    )
    args = parser.parse_args()
    if args.rounds < 3:
        parser.error("--rounds: at least 3 (a median of fewer says little)")
    counts = tuple(c.strip() for c in args.counts.split(",") if c.strip())
    from threads_table import COUNTS as allowed  # the thread counts the table knows
    from threads_table import SCRIPTS as workloads

    if not counts or any(c not in allowed for c in counts):
        parser.error(f"--counts {args.counts!r}: use a comma-separated list of {','.join(allowed)}")
    scripts = tuple(c.strip() for c in args.scripts.split(",") if c.strip())
    if not scripts or any(c not in workloads for c in scripts):
        parser.error(
            f"--scripts {args.scripts!r}: use a comma-separated list of {','.join(workloads)}"
        )
    image = args.image
    if image is None:
        image = "reprobuild-bench/runtime:latest"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "reprobuild",
                "image",
                str(PROJECT),
                "--base",
                args.base,
                "--tag",
                image,
                "-q",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
    if args.threads_table:
        import threads_table

        return threads_table.main(image, args.host_venv, args.rounds, args.out, counts, scripts)
    client = docker.from_env()
    if args.rng_state:
        return rng_state(client, image)
    raw = client.containers.run(
        image,
        ["/opt/venv/bin/python", "/bench/runtime_inside.py", *SCRIPTS],
        entrypoint=[],
        user="root",
        remove=True,
        network_disabled=True,
        working_dir="/app",
        volumes={str(HERE): {"bind": "/bench", "mode": "ro"}},
    )
    data = json.loads(raw.decode().strip().splitlines()[-1])
    data["image"] = image
    out = HERE / "results" / "runtime.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")

    def row(label: str, key: str, goal: str) -> None:
        w, wo = data[key]["with"], data[key]["without"]
        print(
            f"{label:34s} {wo:8.1f} ms -> {w:8.1f} ms  +{w - wo:6.1f} ms "
            f"({w / wo - 1:+.1%})  goal {goal}"
        )

    print(f"image {image}, {data['nproc']} CPUs")
    row("python -c pass", "startup_ms", "< +20 ms")
    row("import torch", "import_torch_ms", "< +5%")
    row("import tensorflow", "import_tensorflow_ms", "< +5%")
    for key, value in data.items():
        if key.startswith("train_"):
            strict, off = value["strict"], value["off"]
            print(
                f"{key[6:-2]:34s} off {off:6.2f} s, strict {strict:6.2f} s  "
                f"strict/off = {strict / off:.3f}"
            )
    print(f"results: {out}")
    return 0


def rng_state(client: docker.DockerClient, image: str) -> int:
    """capture/restore of the RNG state vs torch.save and Keras's save_weights, through the
    image's entrypoint."""
    raw = client.containers.run(
        image,
        ["python", "/bench/rngstate_inside.py", "--keras"],
        environment={"REPRO_QUIET": "1", "TF_CPP_MIN_LOG_LEVEL": "3"},
        remove=True,
        network_disabled=True,
        volumes={str(HERE): {"bind": "/bench", "mode": "ro"}},
    )
    data = json.loads(raw.decode().strip().splitlines()[-1])
    data["image"] = image
    out = HERE / "results" / "rngstate.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    print(
        f"RNG state ({', '.join(data['frameworks'])}, {data['state_bytes']} bytes): "
        f"capture {data['capture_ms']:.3f} ms, restore {data['restore_ms']:.3f} ms"
    )
    rows = [
        (name, "torch.save", "torch_save_ms") for name in ("digits_mlp_5k", "mlp_1m", "mlp_25m")
    ]
    rows += [
        (name, "Keras save_weights", "keras_save_weights_ms")
        for name in ("keras_mlp_5k", "keras_mlp_1m", "keras_mlp_25m")
    ]
    for name, what, key in rows:
        row = data[name]
        print(
            f"  vs {what} of {name} ({row['parameters']} parameters, "
            f"{row[key]:.2f} ms): capture {row['capture_share']:.1%}, "
            f"capture + restore {row['capture_and_restore_share']:.1%}  goal < 5%"
        )
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
