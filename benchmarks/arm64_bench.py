"""arm64 against amd64 (issue 53), in one run: the same project's cold build for each platform
(``reprobuild image --platform P --no-cache``; the arm64 one runs every step under qemu-user,
so its time is informational), and each image's size against its floor (the platform's base
plus the installed site-packages, counted as build_bench.py counts them). With ``--push``,
then both platforms under one index digest, twice: the second run must give the same digest
and send no layer.

    python benchmarks/arm64_bench.py --base REGISTRY/NAME@sha256:<index of both bases> \
        [--project DIR] [--push 127.0.0.1:5000/bench/arm64] [--out FILE.json]

The base must be an index with both platforms (``REPROBUILD_BASE_ARCH=multi scripts/make-base``
makes one); the project's lock must cover both (tests/data/arm64-torch does, by default).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import docker

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from build_bench import added_file_bytes, purelib_bytes  # noqa: E402

PLATFORMS = ("linux/amd64", "linux/arm64")


def reprobuild(*argv: str) -> tuple[dict[str, Any], float]:
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "reprobuild", *argv, "--json"],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    seconds = time.monotonic() - started
    if proc.returncode != 0:
        sys.exit(f"arm64_bench: reprobuild {' '.join(argv)} failed:\n{proc.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(proc.stdout)
    return result, seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="an index of both platforms, by digest")
    parser.add_argument("--project", type=Path, default=HERE.parent / "tests/data/arm64-torch")
    parser.add_argument("--push", help="REGISTRY/NAME: then the index of both, twice")
    parser.add_argument("--out", type=Path, help="write the results here (JSON)")
    args = parser.parse_args()
    client = docker.from_env()
    run = uuid.uuid4().hex[:8]
    rows: dict[str, dict[str, Any]] = {}
    tags: list[str] = []
    with tempfile.TemporaryDirectory(prefix="arm64-bench-") as tmp:
        project = Path(tmp) / args.project.name
        shutil.copytree(args.project, project)
        for platform in PLATFORMS:
            arch = platform.split("/")[1]
            tag = f"reprobuild-bench/arm64:{run}-{arch}"
            result, seconds = reprobuild(
                "image", str(project), "--base", args.base, "--platform", platform,
                "--builder", "buildah", "--no-cache", "--tag", tag,
            )  # fmt: skip
            tags.append(tag)
            base = result["manifest"]["base_ref"]
            base_size = int(client.images.get(base).attrs["Size"])
            added = added_file_bytes(client, tag, base)
            floor = base_size + purelib_bytes(client, tag, "/opt/venv/bin/python")
            rows[platform] = {
                "cold_s": round(seconds, 1),
                "image_bytes": base_size + added,
                "base_bytes": base_size,
                "floor_bytes": floor,
                "image_over_floor": round((base_size + added) / floor, 4),
                "image_id": result["id"],
            }
            print(f"{platform}: {rows[platform]}", flush=True)
        report: dict[str, Any] = {
            "project": str(args.project),
            "base": args.base,
            "platforms": rows,
            "arm64_cold_over_amd64": round(
                rows["linux/arm64"]["cold_s"] / rows["linux/amd64"]["cold_s"], 2
            ),
        }
        if args.push:
            ref = f"{args.push}:{run}"
            runs = []
            for _ in range(2):
                result, seconds = reprobuild(
                    "image", str(project), "--base", args.base, "--platform", ",".join(PLATFORMS),
                    "--push", ref, "--tag", f"reprobuild-bench/arm64:{run}",
                )  # fmt: skip
                sent = [p["push"]["sent_layers"] for p in result["platforms"]]
                digest = result["digest"]
                runs.append({"digest": digest, "seconds": round(seconds, 1), "sent": sent})
                tags += [f"reprobuild-bench/arm64:{run}", f"reprobuild-bench/arm64:{run}-arm64"]
                tags += [f"{ref}-amd64", f"{ref}-arm64"]
            report["index"] = runs
            report["index_same_digest"] = runs[0]["digest"] == runs[1]["digest"]
    for tag in dict.fromkeys(tags):
        with contextlib.suppress(docker.errors.ImageNotFound):
            client.images.remove(tag, force=True)
    print(json.dumps(report, indent=2))
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
