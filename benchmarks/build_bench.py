"""Build benchmark: figures as ratios against baselines measured in the same run.

    python benchmarks/build_bench.py --base REF@sha256:... [--project images/digits-torch]

Measures, on the example project:
- cold build: `reprobuild image --no-cache` (engine cache unused; host wheel cache warm, as on a
  developer machine after the first build) and, separately, with an empty wheel cache too;
- rebuild after a code-only change (goal: under 10% of cold);
- final image size against the floor, base image + installed site-packages (goal: within 5%);
- a plain hand-written Dockerfile for the same lock (FROM the same base, pip install -r),
  built from the same host-fetched wheels: its build time and size.
Prints a table and writes benchmarks/results/build.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import docker

HERE = Path(__file__).resolve().parent
HAND_WRITTEN = """\
FROM {base}
COPY requirements.lock /tmp/requirements.lock
COPY wheels/ /tmp/wheels/
RUN python3 -m venv /venv \\
 && /venv/bin/pip install --no-index --find-links /tmp/wheels -r /tmp/requirements.lock
ENV PATH=/venv/bin:$PATH
WORKDIR /app
COPY train.py /app/
CMD ["python", "train.py"]
"""


def timed(argv: list[str], env: dict[str, str] | None = None) -> float:
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"benchmark step failed: {' '.join(argv)}\n{proc.stderr[-3000:]}")
    return elapsed


def image(
    project: Path, base: str, tag: str, *extra: str, env: dict[str, str] | None = None
) -> float:
    cli = [
        sys.executable,
        "-m",
        "reprobuild",
        "image",
        str(project),
        "--base",
        base,
        "--tag",
        tag,
        "-q",
    ]
    return timed([*cli, *extra], env)


def site_packages_bytes(client: docker.DockerClient, tag: str, path: str) -> int:
    out = client.containers.run(tag, ["du", "-sb", path], entrypoint=[], remove=True)
    return int(out.split()[0])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="digest-pinned base (REF@sha256:...)")
    parser.add_argument("--project", type=Path, default=HERE.parent / "images" / "digits-torch")
    parser.add_argument(
        "--skip-empty-cache",
        action="store_true",
        help="skip the run with an empty wheel cache (it downloads from the indexes)",
    )
    args = parser.parse_args()
    client = docker.from_env()
    run_id = uuid.uuid4().hex[:8]
    tags: list[str] = []
    results: dict[str, object] = {"project": str(args.project), "base": args.base}
    with tempfile.TemporaryDirectory(prefix="reprobuild-bench-") as tmp:
        work = Path(tmp) / "project"
        shutil.copytree(args.project, work)
        env = {**os.environ, "SOURCE_DATE_EPOCH": "0"}

        warm = f"reprobuild-bench/ours:{run_id}-warm"
        image(work, args.base, warm, env=env)  # fills the wheel cache and pulls the base
        tags.append(warm)

        cold_tag = f"reprobuild-bench/ours:{run_id}-cold"
        tags.append(cold_tag)
        cold = image(work, args.base, cold_tag, "--no-cache", env=env)
        results["cold_build_s"] = round(cold, 2)

        if not args.skip_empty_cache:
            empty = {**env, "REPROBUILD_CACHE_DIR": str(Path(tmp) / "empty-cache")}
            tag = f"reprobuild-bench/ours:{run_id}-empty"
            tags.append(tag)
            results["cold_build_empty_wheel_cache_s"] = round(
                image(work, args.base, tag, "--no-cache", env=empty), 2
            )

        (work / "train.py").write_text((work / "train.py").read_text() + "\n# a code-only change\n")
        re_tag = f"reprobuild-bench/ours:{run_id}-rebuild"
        tags.append(re_tag)
        rebuild = image(work, args.base, re_tag, env=env)
        results["rebuild_code_change_s"] = round(rebuild, 2)
        results["rebuild_over_cold"] = round(rebuild / cold, 4)

        ours = client.images.get(cold_tag)
        base_size = client.images.get(args.base).attrs["Size"]
        purelib = (
            client.containers.run(
                cold_tag,
                ["-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                entrypoint=["/opt/venv/bin/python"],
                remove=True,
            )
            .decode()
            .strip()
        )
        floor = base_size + site_packages_bytes(client, cold_tag, purelib)
        results["image_bytes"] = ours.attrs["Size"]
        results["floor_bytes"] = floor
        results["image_over_floor"] = round(ours.attrs["Size"] / floor, 4)

        # The hand-written baseline, built from the same wheels with the same engine.
        hand = Path(tmp) / "hand"
        (hand / "wheels").mkdir(parents=True)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "reprobuild",
                "render",
                str(work),
                "--base",
                args.base,
                "-o",
                str(Path(tmp) / "ctx"),
            ],
            check=True,
            capture_output=True,
            env=env,
        )
        shutil.copy(Path(tmp) / "ctx" / "requirements.lock", hand / "requirements.lock")
        cache = Path(os.environ.get("REPROBUILD_CACHE_DIR", Path.home() / ".cache" / "reprobuild"))
        for folder in (cache / "wheels").iterdir():
            for wheel in folder.glob("*.whl"):
                shutil.copy(wheel, hand / "wheels" / wheel.name)
        shutil.copy(work / "train.py", hand / "train.py")
        (hand / "Dockerfile").write_text(HAND_WRITTEN.format(base=args.base))
        hand_tag = f"reprobuild-bench/hand:{run_id}"
        tags.append(hand_tag)
        hand_s = timed(
            ["docker", "build", "--no-cache", "-q", "-t", hand_tag, str(hand)],
            {**env, "DOCKER_BUILDKIT": "0"},
        )
        hand_size = client.images.get(hand_tag).attrs["Size"]
        results["hand_written_build_s"] = round(hand_s, 2)
        results["hand_written_bytes"] = hand_size
        results["cold_over_hand_written"] = round(cold / hand_s, 4)
        results["image_over_hand_written"] = round(ours.attrs["Size"] / hand_size, 4)
    for tag in tags:
        client.images.remove(tag, force=True)

    out = HERE / "results" / "build.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    mb = 1e6
    print(f"cold build (engine cache off, wheels cached)  {results['cold_build_s']:8.2f} s")
    if "cold_build_empty_wheel_cache_s" in results:
        empty_s = results["cold_build_empty_wheel_cache_s"]
        print(f"cold build (wheel cache empty too)            {empty_s:8.2f} s")
    print(
        f"rebuild after a code-only change              {results['rebuild_code_change_s']:8.2f} s"
        f"   {results['rebuild_over_cold']:.1%} of cold (goal < 10%)"
    )
    print(
        f"image size                                    {ours.attrs['Size'] / mb:8.1f} MB"
        f"   {results['image_over_floor']:.4f} x floor {floor / mb:.1f} MB (goal <= 1.05)"
    )
    print(
        f"hand-written Dockerfile, same lock            {hand_s:8.2f} s  {hand_size / mb:8.1f} MB"
        f"   ours: {results['cold_over_hand_written']:.2f} x time, "
        f"{results['image_over_hand_written']:.2f} x size"
    )
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
