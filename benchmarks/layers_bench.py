"""A one-package bump in a torch-shaped lock (issue 52): what the rebuild costs and what it
moves, against the cold build in the same run, with the venv as layers by package.

    python benchmarks/layers_bench.py --base REF@sha256:... [--baseline-src DIR] [--rounds 3]
                                      [--cuda] [--out FILE] [--write-project DIR]

The lock: torch 2.13 CPU (the machine's own wheel, /opt/wheels) with its seven dependencies,
numpy, six, idna, packaging and threadpoolctl, every file from the machine's PyPI mirror
(/opt/pypi), and with ``--cuda`` triton and five ``nvidia-*`` wheels of the mirror, built as
``reprobuild init`` sets such a lock up (a GPU image on the plain base); the
bump: fsspec 2026.6.0 to 2026.7.0 (one of torch's dependencies, 0.2 MB).
Steps, each ``reprobuild image --builder buildah`` ending with the image in the engine:

- ``cold``: the lock, ``--no-cache``;
- ``bump``: fsspec bumped, the cache on (the cold build's layers held);
- ``cold-bumped``: the bumped lock again, ``--no-cache`` (the first round's control);
- ``code``: then a line added to the project's script, the cache on.

For the bump: its time against each cold build's, which of the image's layers keep their diff
IDs, the bytes of the new layers (their tars, uncompressed), and, pushed with ``docker push``
to the loopback registry after the cold build's image, the compressed bytes of the blobs the
registry lacked, and what this engine, holding the old image, downloads for a ``docker pull``
of the new one (the classic store pulls every layer above the lowest new one again).
``--baseline-src DIR`` runs
``cold`` and ``bump`` again with the reprobuild source tree in DIR (e.g. a worktree of the
commit before the layers by package) and reports the same figures for it. Each of ``--rounds``
rounds runs every arm once, the arms alternating which goes first; after one untimed warm-up
build (the base pulled, the wheels cached), a figure is the median over the rounds; the first
round also builds the bumped lock ``--no-cache`` as a control (its layers must be the bump's).
Each round's builds use a buildah store of their own, emptied at its end, so each round's
bump finds only its own cold build's layers. Prints the medians and writes
benchmarks/results/layers-<date>.json (or --out).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import docker

HERE = Path(__file__).resolve().parent
SOURCE = HERE.parent
REGISTRY = "127.0.0.1:5000"
EXTRA: dict[str, str] = {}  # CUDA_PINS with --cuda
TORCH = Path("/opt/wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl")
FILES = Path("/opt/pypi/files")
PINS = {
    "filelock": "4.0.8",
    "typing-extensions": "4.16.0",
    "setuptools": "84.0.0",
    "sympy": "1.14.0",
    "mpmath": "1.3.0",
    "networkx": "3.6.1",
    "jinja2": "3.1.6",
    "markupsafe": "3.0.3",
    "fsspec": "2026.6.0",
    "numpy": "2.0.2",
    "six": "1.17.0",
    "idna": "3.20",
    "packaging": "26.3",
    "threadpoolctl": "3.7.0",
}
BUMP = ("fsspec", "2026.7.0")
# --cuda: the CUDA wheels of the mirror (public wheels, 0.35 GB), in torch's layer as in a
# torch + CUDA-wheel lock: the shape the issue measures, if not the whole weight.
CUDA_PINS = {
    "triton": "3.8.0",
    "nvidia-cuda-nvcc": "13.0.88",
    "nvidia-nvvm": "13.0.88",
    "nvidia-cuda-cccl": "13.0.85",
    "nvidia-cuda-runtime": "13.0.96",
    "nvidia-cuda-crt": "13.0.88",
}


def wheel_file(name: str, version: str) -> Path:
    stem = f"{name.replace('-', '_')}-{version}-"
    found = sorted(p for p in FILES.iterdir() if p.name.lower().startswith(stem))
    if not found:
        sys.exit(f"error: no wheel of {name} {version} in {FILES}")
    return found[0]


def lock_text(bumped: bool) -> str:
    lines = [f"torch==2.13.0+cpu --hash=sha256:{sha256(TORCH)}"]
    for name, version in {**PINS, **EXTRA}.items():
        if bumped and name == BUMP[0]:
            version = BUMP[1]
        lines.append(f"{name}=={version} --hash=sha256:{sha256(wheel_file(name, version))}")
    return "\n".join(lines) + "\n"


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def make_project(root: Path, base: str) -> None:
    """The bench's project; with --cuda, as ``reprobuild init`` writes one for a lock that
    carries CUDA as wheels: a GPU image on the plain base, built with no flag."""
    root.mkdir(parents=True)
    image = "gpu_lock: requirements.lock\nbase:\n  gpu" if EXTRA else "base:\n  cpu"
    (root / "reprobuild.yaml").write_text(
        f"name: bench/layers\nlock: requirements.lock\n{image}: {base}\n"
        "include:\n  - train.py\ncommand: [python, train.py]\n"
    )
    (root / "train.py").write_text("import torch, fsspec\nprint(torch.ones(2).sum().item())\n")
    (root / "requirements.lock").write_text(lock_text(bumped=False))


def build(root: Path, tag: str, src: Path, *, no_cache: bool, store: Path | None = None) -> float:
    env = {
        **os.environ,
        **({"CONTAINERS_STORAGE_CONF": str(store)} if store is not None else {}),
        "PYTHONPATH": f"{src}/builder:{src}/entrypoint",
        "SOURCE_DATE_EPOCH": "1700000000",
        "REPROBUILD_FIND_LINKS": str(TORCH.parent),
        "REPROBUILD_LOCAL_INDEXES": "/opt/pypi/simple",
    }
    argv = [sys.executable, "-m", "reprobuild", "image", str(root), "--builder", "buildah"]
    argv += ["--tag", tag, "--quiet", *(["--no-cache"] if no_cache else [])]
    subprocess.run(["sync"], check=True)
    start = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    took = time.monotonic() - start
    if proc.returncode != 0:
        sys.exit(f"error: {' '.join(argv)} failed:\n{proc.stderr[-3000:]}")
    return took


def layers(client: docker.DockerClient, tag: str) -> list[tuple[str, int]]:
    """Each layer's diff ID and its tar's size, from a ``docker save``."""
    image = client.images.get(tag)
    with tempfile.TemporaryFile() as fh:
        for chunk in image.save(named=False):
            fh.write(chunk)
        fh.seek(0)
        with tarfile.open(fileobj=fh) as outer:
            index = outer.extractfile("manifest.json")
            assert index is not None
            paths = json.load(index)[0]["Layers"]
            sizes = [outer.getmember(p).size for p in paths]
    return list(zip(image.attrs["RootFS"]["Layers"], sizes, strict=True))


def pushed(client: docker.DockerClient, tag: str, ref: str) -> dict[str, int]:
    """Push ``tag`` as ``ref`` to the loopback registry; its manifest's blobs and sizes."""
    client.images.get(tag).tag(ref)
    for line in client.images.push(ref, stream=True, decode=True):
        if "error" in line:
            sys.exit(f"error: push {ref}: {line['error']}")
    name, reference = ref.removeprefix(f"{REGISTRY}/").rsplit(":", 1)
    request = urllib.request.Request(
        f"http://{REGISTRY}/v2/{name}/manifests/{reference}",
        headers={"Accept": "application/vnd.docker.distribution.manifest.v2+json"},
    )
    with urllib.request.urlopen(request, timeout=60) as answer:
        manifest = json.load(answer)
    client.images.remove(ref)
    return {str(b["digest"]): int(b["size"]) for b in manifest["layers"]}


def pulled_by_holder(
    client: docker.DockerClient, ref: str, blobs: dict[str, int]
) -> dict[str, int]:
    """``docker pull ref`` on this engine, which holds the old image (the cold build's) and not
    the new one: the blobs it downloaded (by the short IDs its progress names them by; a held
    layer is "Already exists" on the classic store, not named at all on the containerd store)
    and their compressed sizes. The engine's classic store keys a layer by the layers below
    it, so this is every layer above the lowest new one, where a registry push sends only the
    new blobs."""
    got: set[str] = set()
    for line in client.api.pull(ref, stream=True, decode=True):
        if "error" in line:
            sys.exit(f"error: pull {ref}: {line['error']}")
        if line.get("status") in ("Downloading", "Download complete"):
            got.add(str(line.get("id")))
    client.images.remove(ref)
    return {d: n for d, n in blobs.items() if d.removeprefix("sha256:")[:12] in got}


def scenario(
    client: docker.DockerClient, base: str, src: Path, label: str, *, control: bool
) -> dict[str, Any]:
    """One round of one arm: ``cold``, then ``bump``, then (``control``) the bumped lock
    ``--no-cache``, whose layers must be the bump's. Every tag the round made is removed at
    its end, so the next round's cold build loads its whole image again."""
    run = uuid.uuid4().hex[:8]
    with tempfile.TemporaryDirectory(prefix="layers-bench-", ignore_cleanup_errors=True) as tmp:
        root = Path(tmp) / "project"
        make_project(root, base)
        store = own_store(Path(tmp))
        tags = {
            step: f"bench/layers:{label}-{step}-{run}" for step in ("cold", "bump", "coldb", "code")
        }
        times = {"cold": build(root, tags["cold"], src, no_cache=True, store=store)}
        (root / "requirements.lock").write_text(lock_text(bumped=True))
        times["bump"] = build(root, tags["bump"], src, no_cache=False, store=store)
        old, new = layers(client, tags["cold"]), layers(client, tags["bump"])
        same_as_cold: bool | None = None
        if control:
            times["cold-bumped"] = build(root, tags["coldb"], src, no_cache=True, store=store)
            same_as_cold = [d for d, _ in layers(client, tags["coldb"])] == [d for d, _ in new]
        # a code-only change on top of the bump
        (root / "train.py").write_text((root / "train.py").read_text() + "print('changed')\n")
        times["code"] = build(root, tags["code"], src, no_cache=False, store=store)
        code = layers(client, tags["code"])
        repo = f"{REGISTRY}/bench/layers-{run}"
        blobs_old = pushed(client, tags["cold"], f"{repo}:{label}-old")
        blobs_new = pushed(client, tags["bump"], f"{repo}:{label}-new")
        blobs_code = pushed(client, tags["code"], f"{repo}:{label}-code")
        for tag in (tags["bump"], tags["coldb"], tags["code"]):
            if client.images.list(name=tag):
                client.images.remove(tag, force=True)
        pulled = pulled_by_holder(client, f"{repo}:{label}-new", blobs_new)
        for tag in tags.values():
            if client.images.list(name=tag):
                client.images.remove(tag, force=True)
        subprocess.run(
            ["buildah", "rmi", "--all", "--force"],
            env={**os.environ, "CONTAINERS_STORAGE_CONF": str(store)},
            capture_output=True,
            check=False,
        )
    held, bumped = {d for d, _ in old}, {d for d, _ in new}
    fresh = [(d, s) for d, s in new if d not in held]
    return {
        "seconds": {k: round(v, 1) for k, v in times.items()},
        "bump_over_cold": round(times["bump"] / times["cold"], 3),
        "layers": len(new),
        "layers_kept": len(new) - len(fresh),
        "new_layers_bytes": [s for _, s in fresh],
        "image_bytes": sum(s for _, s in new),
        "pushed_new_compressed_bytes": sum(s for d, s in blobs_new.items() if d not in blobs_old),
        "pushed_image_compressed_bytes": sum(blobs_new.values()),
        "pulled_by_old_image_holder_bytes": sum(pulled.values()),
        "pulled_by_old_image_holder_layers": len(pulled),
        "bumped_cold_same_layers": same_as_cold,
        "code_over_cold": round(times["code"] / times["cold"], 3),
        "code_new_layers_bytes": [s for d, s in code if d not in bumped],
        "code_pushed_new_compressed_bytes": sum(
            s for d, s in blobs_code.items() if d not in blobs_new
        ),
        "pushed_ref": f"{repo}:{label}-new",
    }


def own_store(tmp: Path) -> Path:
    """A buildah store of this round's own, empty (a storage.conf under ``tmp``): its bump
    finds in the cache only what its own cold build left, never an earlier round's bumped
    layers (with one store, every round after the first rebuilt nothing for the bump)."""
    conf = tmp / "storage.conf"
    conf.write_text(
        f'[storage]\ndriver = "overlay"\ngraphroot = "{tmp / "graph"}"\nrunroot = "{tmp / "run"}"\n'
    )
    return conf


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """An arm's rounds and their medians (seconds, the bump over the cold build)."""
    steps = runs[0]["seconds"].keys()
    medians = {
        step: round(statistics.median(r["seconds"][step] for r in runs if step in r["seconds"]), 1)
        for step in steps
    }
    return {
        "rounds": runs,
        "median_seconds": medians,
        "median_bump_over_cold": round(statistics.median(r["bump_over_cold"] for r in runs), 3),
        "median_code_over_cold": round(statistics.median(r["code_over_cold"] for r in runs), 3),
    }


def warm(base: str) -> None:
    """What every arm's first build would otherwise pay alone: the base in buildah's store and
    the wheels in the cache and the page cache (one layered build, which pulls the base as
    reprobuild pulls it; not timed, its tag removed)."""
    with tempfile.TemporaryDirectory(prefix="layers-bench-warm-") as tmp:
        root = Path(tmp) / "project"
        make_project(root, base)
        tag = f"bench/layers:warm-{uuid.uuid4().hex[:8]}"
        build(root, tag, SOURCE, no_cache=False)
        docker.from_env().images.remove(tag, force=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True, help="the base, REF@sha256:...")
    parser.add_argument("--baseline-src", type=Path, help="a reprobuild source tree to compare")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each arm (default 3)")
    parser.add_argument("--cuda", action="store_true", help="add the mirror's CUDA wheels")
    parser.add_argument("--out", type=Path)
    parser.add_argument(
        "--write-project",
        type=Path,
        metavar="DIR",
        help="only write the bench's project (its unbumped lock) into DIR, which must not exist, "
        "e.g. for build_bench.py --project DIR",
    )
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error(f"--rounds must be 1 or more, not {args.rounds}")
    if args.cuda:
        EXTRA.update(CUDA_PINS)
    if args.write_project:
        if args.write_project.exists():
            parser.error(f"--write-project: {args.write_project} exists; name a new folder")
        make_project(args.write_project, args.base)
        print(f"wrote {args.write_project}")
        return
    client = docker.from_env(timeout=900)
    arms = {"layered": SOURCE}
    if args.baseline_src:
        arms["baseline"] = args.baseline_src.resolve()
    warm(args.base)
    runs: dict[str, list[dict[str, Any]]] = {label: [] for label in arms}
    for n in range(args.rounds):
        # the arms alternate which goes first, round by round
        order = list(arms) if n % 2 == 0 else list(reversed(arms))
        for label in order:
            one = scenario(
                client, args.base, arms[label], label, control=n == 0 and label == "layered"
            )
            runs[label].append(one)
            print(f"round {n + 1} {label}: {one['seconds']}", flush=True)
    results = {label: summary(r) for label, r in runs.items()}
    for label, r in results.items():
        last = r["rounds"][-1]
        mb = sum(last["new_layers_bytes"]) / 1e6
        sec = r["median_seconds"]
        print(
            f"{label}, medians of {args.rounds}: cold {sec['cold']} s, bump {sec['bump']} s "
            f"({r['median_bump_over_cold']:.1%} of cold); {last['layers_kept']}/{last['layers']} "
            f"layers kept; new layers {mb:.1f} MB of {last['image_bytes'] / 1e6:.1f} MB; pushed "
            f"after the old image {last['pushed_new_compressed_bytes'] / 1e6:.2f} MB of "
            f"{last['pushed_image_compressed_bytes'] / 1e6:.1f} MB compressed; pulled by an "
            f"engine holding the old image {last['pulled_by_old_image_holder_bytes'] / 1e6:.2f} "
            f"MB ({last['pulled_by_old_image_holder_layers']} layers); a code-only change "
            f"{sec['code']} s ({r['median_code_over_cold']:.1%} of cold), pushed "
            f"{last['code_pushed_new_compressed_bytes'] / 1e6:.2f} MB"
        )
    if "baseline" in results:
        ratio = (
            results["layered"]["median_seconds"]["cold"]
            / results["baseline"]["median_seconds"]["cold"]
        )
        print(f"cold, layered over the one-layer baseline (medians): {ratio:.3f}")
        results["cold_layered_over_baseline"] = round(ratio, 3)
    out = args.out or HERE / "results" / f"layers-{time.strftime('%Y-%m-%d')}.json"
    data = {"command": " ".join(sys.argv), "rounds": args.rounds, "results": results}
    out.write_text(json.dumps(data, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
