"""Build benchmark (issues 3 and 11): each builder against two hand-written baselines that use
the same wheels, as ratios measured in the same run.

    python benchmarks/build_bench.py --base REF@sha256:... [--project images/digits-torch]
                                     [--builders classic,buildah] [--rounds 2] [--out FILE]

``--builders buildah-j1,buildah-j2`` times buildah building one stage at a time against two at
once (``REPROBUILD_BUILDAH_JOBS``), in the same run.

Every configuration builds the example project cold (its builder's cache off; the base already
pulled and the wheels already on the host, as on a developer machine after the first build),
once per round, the configurations alternating within a round; a figure is the median over
rounds. The image ends in the Docker engine in every configuration, as a user needs it:

- ``ours-<builder>``: ``reprobuild image --builder B --no-cache`` (buildah: loaded into the
  engine, as reprobuild does);
- ``naive``: a plain hand-written Dockerfile (``COPY`` the wheels, ``pip install -r`` into a
  venv), the engine's classic builder;
- ``best-buildah`` / ``best-buildkit``: the best-practice hand-written Dockerfile: one stage,
  the wheels and the lock bind-mounted (``RUN --mount``), no pip cache; built by ``buildah bud``
  (then ``buildah push docker-archive:`` into a pipe read by ``docker load``, as ours) and by
  the engine's BuildKit (``DOCKER_BUILDKIT=1 docker build`` with a client older than 23, else
  ``docker buildx build --builder default --load``);
- ``best-uv-buildah``: the same best-practice Dockerfile with ``uv pip install --require-hashes
  --compile-bytecode`` (reprobuild's pinned uv, bind-mounted) in pip's place, built by buildah
  as ``best-buildah``: the installer reprobuild's own buildah images use, so the ratio against
  it is what the layers and the stamp cost, not what uv saves over pip. The best-practice
  baseline of a buildah build of ours is the faster of the two (medians);
- ``best-buildkit-epoch``, where the engine's BuildKit builds reproducibly
  (``Engine.buildkit_reproducible``: Engine 26 with the containerd image store): the same
  Dockerfile from SOURCE_DATE_EPOCH, written by the docker exporter with
  ``rewrite-timestamp=true`` and loaded, as ``--builder buildkit`` does there.

The engine, its image store and the builders' versions are named in the output and the JSON.
``--baselines`` names the hand-written configurations to run (default: all this host can).

Then, per builder of ours: a rebuild after a code-only change (cache on) and the image's size
against the floor (the base plus the installed site-packages; the image counted as the base
plus the file bytes in the layers it adds, read from ``docker save``, so that both stores count
alike). Goals (issue 11): cold build at
most 1.05 x the best-practice build on the same builder; image at most 1.00 x the floor; a
code-only rebuild under 5% of a cold build; the fastest reproducible build of ours (buildah,
or buildkit where the engine allows) at most 1.10 x the fastest non-reproducible one. Prints a
table and writes benchmarks/results/build.json (or --out).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import docker

from reprobuild.backends import buildah
from reprobuild.backends.engine import Engine, legacy_buildkit_client
from reprobuild.backends.layerload import Chunks
from reprobuild.imaging.image import pinned_uv
from reprobuild.project.config import load_config

HERE = Path(__file__).resolve().parent
NAIVE = """\
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
BEST = """\
FROM {base}
RUN --mount=type=bind,source=wheels,target=/tmp/wheels \\
    --mount=type=bind,source=requirements.lock,target=/tmp/requirements.lock \\
    python3 -m venv /venv \\
 && /venv/bin/pip install --no-cache-dir --no-index --find-links /tmp/wheels \\
      -r /tmp/requirements.lock
ENV PATH=/venv/bin:$PATH
WORKDIR /app
COPY train.py /app/
CMD ["python", "train.py"]
"""
BEST_UV = """\
FROM {base}
RUN --mount=type=bind,source=wheels,target=/tmp/wheels \\
    --mount=type=bind,source=requirements.lock,target=/tmp/requirements.lock \\
    --mount=type=bind,source=bin,target=/tmp/bin \\
    python3 -m venv --without-pip /venv \\
 && /tmp/bin/uv pip install --python /venv/bin/python --no-index --find-links /tmp/wheels \\
      --require-hashes --compile-bytecode --link-mode copy --no-cache -r /tmp/requirements.lock
ENV PATH=/venv/bin:$PATH
WORKDIR /app
COPY train.py /app/
CMD ["python", "train.py"]
"""
BASELINES = ("naive", "best-buildah", "best-uv-buildah", "best-buildkit", "best-buildkit-epoch")
# the baselines each build of ours is also held to, by name, beside its best-practice one
COMPARED = ("naive", "best-buildah", "best-uv-buildah")
# the baselines built from the BEST Dockerfile's context
FROM_BEST = frozenset({"best-buildah", "best-buildkit", "best-buildkit-epoch"})


def over(baseline: str) -> str:
    """The JSON key of a build of ours against ``baseline``: ``cold_over_best_uv_buildah``."""
    return f"cold_over_{baseline.replace('-', '_')}"


def describe_engine(engine: Engine) -> dict[str, object]:
    """What the figures were measured on: the engine, its image store, the builders."""
    driver, containerd = engine.image_store()
    buildx = subprocess.run(["docker", "buildx", "version"], capture_output=True, text=True)
    possible, why = engine.buildkit_reproducible()
    debian = Path("/etc/debian_version")
    return {
        "engine": engine.server_version(),
        "image_store": f"containerd ({driver})" if containerd else driver,
        "buildx": buildx.stdout.split()[1] if buildx.returncode == 0 else None,
        "buildah": buildah.version() if shutil.which("buildah") else None,
        "debian": debian.read_text().strip() if debian.exists() else None,
        "buildkit_reproducible": possible,
        "buildkit_reproducible_why": why,
    }


def timed(argv: list[str], env: dict[str, str] | None = None) -> float:
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"benchmark step failed: {' '.join(argv)}\n{proc.stderr[-3000:]}")
    return elapsed


def builder_of(name: str) -> tuple[str, dict[str, str]]:
    """A ``--builders`` entry: the builder, and the environment it builds with. ``buildah-jN``
    is buildah building N stages at once (``REPROBUILD_BUILDAH_JOBS=N``); plain ``buildah``
    takes the default."""
    kind, _, jobs = name.partition("-j")
    if kind == "buildah" and jobs:
        return kind, {buildah.JOBS_VAR: jobs}
    return name, {}


def ours(
    project: Path, base: str, tag: str, builder: str, env: dict[str, str], *extra: str
) -> float:
    kind, own = builder_of(builder)
    cli = [sys.executable, "-m", "reprobuild", "image", str(project), "--base", base]
    return timed([*cli, "--tag", tag, "--builder", kind, "-q", *extra], {**env, **own})


def buildah_into_engine(context: Path, tag: str, scratch: Path) -> float:
    """``buildah bud --no-cache``, then into the engine the way reprobuild loads its images."""
    start = time.perf_counter()
    name = f"localhost/bench-best:{uuid.uuid4().hex[:8]}"
    iid = scratch / "best.iid"
    try:
        # within this machine's hard limits, as reprobuild's own buildah builds (buildah 1.39
        # raises RLIMIT_NOFILE past them otherwise: "error setting rlimit type 7")
        timed(["buildah", "bud", "--layers", "--no-cache", "--pull=never", "-q", "-t", name,
               *buildah.ulimits(), "--iidfile", str(iid), str(context)])  # fmt: skip
        # by ID: pushed by name, the archive would carry buildah's name into the engine too;
        # through a pipe that `docker load` reads while buildah writes, as ours goes
        image_id = iid.read_text().strip().removeprefix("sha256:")
        timed(["bash", "-c", 'set -o pipefail; buildah push --quiet "$0" '
               '"docker-archive:/dev/fd/3:$1" 3>&1 >/dev/null | docker load -q',
               image_id, tag])  # fmt: skip
        return time.perf_counter() - start
    finally:
        iid.unlink(missing_ok=True)
        subprocess.run(["buildah", "rmi", name], capture_output=True, check=False)


def buildkit_epoch_into_engine(
    argv: list[str], context: Path, tag: str, scratch: Path, epoch: int
) -> float:
    """The engine's BuildKit from SOURCE_DATE_EPOCH with file times clamped, written by the
    docker exporter to an archive and loaded (the engine's own exporter refuses
    rewrite-timestamp), the route ``--builder buildkit`` takes where it is reproducible; with
    the exporter's default gzip, as a hand-written build has it (ours writes its new layers
    uncompressed)."""
    archive = scratch / "best-epoch.tar"
    start = time.perf_counter()
    try:
        timed([*argv, "--build-arg", f"SOURCE_DATE_EPOCH={epoch}", "--no-cache", "-q",
               "--output", f"type=docker,dest={archive},rewrite-timestamp=true", "-t", tag,
               str(context)])  # fmt: skip
        timed(["docker", "load", "-q", "-i", str(archive)])
        return time.perf_counter() - start
    finally:
        archive.unlink(missing_ok=True)


def purelib_bytes(client: docker.DockerClient, tag: str, python: str) -> int:
    script = (
        "import os, sysconfig; p = sysconfig.get_paths()['purelib']; print(sum("
        "os.lstat(os.path.join(d, f)).st_size for d, _, fs in os.walk(p) for f in fs))"
    )
    out = client.containers.run(tag, [python, "-c", script], entrypoint=[], remove=True)
    return int(out.split()[0])


def added_file_bytes(client: docker.DockerClient, tag: str, base: str) -> int:
    """The bytes of the regular files in the layers ``tag`` has above ``base``'s, counted in
    the layers as ``docker save`` writes them: what the image adds, in the floor's units
    (file sizes) whatever the engine's store counts (the graph driver store counts unpacked
    bytes, the containerd store its blobs, tar headers and the base's layers as the image's
    manifest names them)."""
    skip = len(client.images.get(base).attrs["RootFS"]["Layers"])
    sizes: dict[str, int] = {}
    order: list[str] = []
    stream = io.BufferedReader(Chunks(client.images.get(tag).save(named=False)), 1 << 20)
    with tarfile.open(fileobj=stream, mode="r|") as outer:
        for member in outer:
            if not member.isfile():
                continue
            data = outer.extractfile(member)
            assert data is not None
            if member.name == "manifest.json":
                order = json.loads(data.read())[0]["Layers"]
                continue
            try:
                with tarfile.open(fileobj=data, mode="r|*") as layer:
                    sizes[member.name] = sum(f.size for f in layer if f.isfile())
            except tarfile.ReadError:  # a config or a manifest, not a layer
                continue
    return sum(sizes[name] for name in order[skip:])


def best_practice(builder: str, cold: dict[str, float]) -> str:
    """The best-practice baseline a build of ours on ``builder`` is held to: on buildah the
    faster (median) of the pip and the uv one, on BuildKit its reproducible build where the
    engine has one."""
    kind = builder_of(builder)[0]
    if kind == "buildah":
        ran = [n for n in ("best-buildah", "best-uv-buildah") if n in cold]
        return min(ran, key=cold.__getitem__, default="best-buildah")
    if kind == "buildkit" and "best-buildkit-epoch" in cold:
        return "best-buildkit-epoch"
    return "best-buildkit"


def hand_written(
    want: set[str],
    stack: dict[str, object],
    tmp: Path,
    env: dict[str, str],
    context: Callable[[str, str], Path],
) -> dict[str, Callable[[str, int], float]]:
    """The hand-written configurations asked for (``want``) that this host can build, each a
    function of the round's tag and number that builds it and gives its seconds. A context
    (``context(folder name, Dockerfile template)``, the lock's wheels copied in: 548 MB for a
    torch + CUDA-wheel lock) is made only for a configuration that uses it."""
    configs: dict[str, Callable[[str, int], float]] = {}
    if "naive" in want:
        naive = context("naive", NAIVE)
        configs["naive"] = lambda tag, n: timed(
            ["docker", "build", "--no-cache", "-q", "-t", tag, str(naive)],
            {**env, "DOCKER_BUILDKIT": "0"},
        )
    best = context("best", BEST) if want & FROM_BEST else tmp / "best"
    if shutil.which("buildah"):
        if "best-buildah" in want:
            configs["best-buildah"] = lambda tag, n: buildah_into_engine(best, tag, tmp)
        if "best-uv-buildah" in want and (uv := pinned_uv()):
            best_uv = context("best-uv", BEST_UV)
            (best_uv / "bin").mkdir()
            shutil.copy(uv, best_uv / "bin" / "uv")
            configs["best-uv-buildah"] = lambda tag, n: buildah_into_engine(best_uv, tag, tmp)
    legacy = legacy_buildkit_client()  # the client --builder buildkit uses
    buildkit_argv = (
        [legacy, "build"] if legacy
        else ["docker", "buildx", "build", "--builder", "default", "--provenance=false"]
    )  # fmt: skip
    if "best-buildkit" in want and (legacy or stack["buildx"]):
        configs["best-buildkit"] = lambda tag, n: timed(
            [*buildkit_argv, *([] if legacy else ["--load"]), "--no-cache", "-q", "-t", tag,
             str(best)], {**env, "DOCKER_BUILDKIT": "1"},
        )  # fmt: skip
    if "best-buildkit-epoch" in want and stack["buildkit_reproducible"]:
        # the archive is part of the build, as in ours
        configs["best-buildkit-epoch"] = lambda tag, n: buildkit_epoch_into_engine(
            buildkit_argv, best, tag, tmp, n + 1
        )
    return configs


def hand_context(
    folder: Path, template: str, base: str, lock: Path, cache: Path, app: Path
) -> Path:
    (folder / "wheels").mkdir(parents=True)
    shutil.copy(lock, folder / "requirements.lock")
    for wheel in (cache / "wheels").rglob("*.whl"):
        shutil.copy(wheel, folder / "wheels" / wheel.name)
    shutil.copy(app, folder / "train.py")
    (folder / "Dockerfile").write_text(template.format(base=base))
    return folder


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="digest-pinned base (REF@sha256:...)")
    parser.add_argument("--project", type=Path, default=HERE.parent / "images" / "digits-torch")
    parser.add_argument(
        "--builders",
        default="classic,buildah",
        help="ours: comma-separated; buildah-jN: buildah with REPROBUILD_BUILDAH_JOBS=N",
    )
    parser.add_argument(
        "--app", default="train.py", help="the project's code file a code-only change edits"
    )
    parser.add_argument(
        "--baselines",
        default=",".join(BASELINES),
        help=f"the hand-written configurations to run, of {', '.join(BASELINES)} (default: all)",
    )
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "build.json")
    args = parser.parse_args()
    builders = [b for b in args.builders.split(",") if b]
    args.baselines = {b for b in args.baselines.split(",") if b}
    if unknown := sorted(args.baselines - set(BASELINES)):
        parser.error(
            f"--baselines: {', '.join(unknown)} unknown; choose from {', '.join(BASELINES)}"
        )
    client = docker.from_env()
    run_id = uuid.uuid4().hex[:8]
    tags: list[str] = []
    times: dict[str, list[float]] = {}
    stack = describe_engine(Engine(client))
    print(
        f"engine {stack['engine']} ({stack['image_store']} store; Debian {stack['debian']}), "
        f"buildx {stack['buildx']}, buildah {stack['buildah']}; the engine's BuildKit "
        f"reproducible: {stack['buildkit_reproducible']}",
        flush=True,
    )
    results: dict[str, object] = {
        "project": str(args.project),
        "base": args.base,
        "rounds": args.rounds,
        "cpus": os.cpu_count(),
        "stack": stack,
    }
    try:
        return _measure(args, builders, client, run_id, tags, times, results)
    finally:  # a failed step leaves no tag behind either (an image of 1.3 GB each)
        for tag in tags:
            with contextlib.suppress(docker.errors.ImageNotFound):
                client.images.remove(tag, force=True)


def _measure(
    args: argparse.Namespace,
    builders: list[str],
    client: docker.DockerClient,
    run_id: str,
    tags: list[str],
    times: dict[str, list[float]],
    results: dict[str, object],
) -> int:
    with tempfile.TemporaryDirectory(prefix="reprobuild-bench-") as tmp_name:
        tmp = Path(tmp_name)
        work = tmp / "project"
        shutil.copytree(args.project, work)
        project_name = load_config(work).name
        cache = tmp / "cache"  # this lock's wheels only: the baselines copy all of them
        env = {**os.environ, "SOURCE_DATE_EPOCH": "0", "REPROBUILD_CACHE_DIR": str(cache)}
        for builder in builders:  # fills the wheel cache, pulls the base into each builder
            tag = f"reprobuild-bench/ours:{run_id}-warm-{builder}"
            tags.append(tag)
            ours(work, args.base, tag, builder, env)
        subprocess.run(
            [sys.executable, "-m", "reprobuild", "render", str(work), "--base", args.base,
             "-o", str(tmp / "ctx")],
            check=True, capture_output=True, env=env,
        )  # fmt: skip
        lock, app = tmp / "ctx" / "requirements.lock", work / args.app

        def ours_cold(builder: str) -> Callable[[str, int], float]:
            def run(tag: str, n: int) -> float:
                # a commit time of its own per round (the warm-up's is 0): the same inputs
                # give the same image ID, and an image the engine already holds is only
                # tagged, so a round at the warm-up's epoch would time no build at all
                at = {**env, "SOURCE_DATE_EPOCH": str(n + 1)}
                if builder_of(builder)[0] == "buildah":
                    # cold as on a new machine: buildah's storage holds no build of this
                    # project (best-buildah's image is removed after each of its rounds,
                    # untimed, and so is ours here; with the previous round's image still
                    # there, --no-cache would time its removal, about 5 s); of either
                    # variant: a project whose lock carries CUDA wheels builds a GPU image
                    for variant in ("cpu", "gpu"):
                        buildah.forget(project_name, variant)
                return ours(work, args.base, tag, builder, at, "--no-cache")

            return run

        configs: dict[str, Callable[[str, int], float]] = {
            f"ours-{b}": ours_cold(b) for b in builders
        }
        configs.update(
            hand_written(
                args.baselines,
                results["stack"],  # type: ignore[arg-type]
                tmp,
                env,
                lambda name, template: hand_context(
                    tmp / name, template, args.base, lock, cache, app
                ),
            )
        )
        for n in range(args.rounds):
            for name, run in configs.items():
                tag = f"reprobuild-bench/{name}:{run_id}-{n}"
                tags.append(tag)
                seconds = run(tag, n)
                if not (name.startswith("ours-") and n == args.rounds - 1):
                    # untimed: only the last round's image of ours is needed after (the code
                    # change's rebuild and the size); the rest would fill the disk (2.4 GB
                    # each for a torch + CUDA-wheel lock)
                    client.images.remove(tag, force=True)
                times.setdefault(name, []).append(round(seconds, 2))
                print(f"round {n + 1}: {name:16s} {seconds:7.1f} s", flush=True)
        cold = {name: statistics.median(values) for name, values in times.items()}
        results["cold_s"] = {name: {"runs": times[name], "median": cold[name]} for name in times}
        base_size = client.images.get(args.base).attrs["Size"]
        per_builder: dict[str, dict[str, object]] = {}
        app.write_text(app.read_text() + "\n# a code-only change\n")
        for builder in builders:
            last = f"reprobuild-bench/ours-{builder}:{run_id}-{args.rounds - 1}"
            tag = f"reprobuild-bench/ours:{run_id}-rebuild-{builder}"
            tags.append(tag)
            # the last round's epoch: its cached steps (and its image in the engine) are the
            # ones a developer's next build after a code change finds
            last_epoch = {**env, "SOURCE_DATE_EPOCH": str(args.rounds)}
            rebuild = ours(work, args.base, tag, builder, last_epoch)
            size = client.images.get(last).attrs["Size"]  # the store's own count
            added = added_file_bytes(client, last, args.base)
            floor = base_size + purelib_bytes(client, last, "/opt/venv/bin/python")
            best_name = best_practice(builder, cold)
            row: dict[str, object] = {
                "cold_s": cold[f"ours-{builder}"],
                "rebuild_code_change_s": round(rebuild, 2),
                "rebuild_over_cold": round(rebuild / cold[f"ours-{builder}"], 4),
                "image_bytes": base_size + added,
                "store_image_bytes": size,
                "floor_bytes": floor,
                "image_over_floor": round((base_size + added) / floor, 4),
            }
            for other in COMPARED:
                if other in cold:
                    row[over(other)] = round(cold[f"ours-{builder}"] / cold[other], 4)
            if best_name in cold:
                row["best_practice"] = best_name
                row["cold_over_best_practice"] = round(cold[f"ours-{builder}"] / cold[best_name], 4)
            per_builder[builder] = row
        results["builders"] = per_builder
        reproducible = {"buildah"} | (
            {"buildkit"} if results["stack"]["buildkit_reproducible"] else set()  # type: ignore[index]
        )
        # the fastest reproducible build of ours, against every build that is not reproducible
        repro = sorted(
            (b for b in builders if builder_of(b)[0] in reproducible),
            key=lambda b: cold[f"ours-{b}"],
        )
        not_repro = {"best-buildkit-epoch"} | {
            f"ours-{b}" for b in builders if builder_of(b)[0] in reproducible
        }
        others = {n: s for n, s in cold.items() if n not in not_repro}
        if repro and others:
            fastest = min(others, key=others.__getitem__)
            ours_fastest = min(
                (n for n in others if n.startswith("ours-")), key=others.__getitem__, default=None
            )
            results["reproducible"] = {
                "builder": repro[0],
                "fastest_non_reproducible": fastest,
                "over_fastest_non_reproducible": round(cold[f"ours-{repro[0]}"] / cold[fastest], 4),
                **(
                    {
                        "fastest_of_ours": ours_fastest,
                        "over_fastest_of_ours": round(
                            cold[f"ours-{repro[0]}"] / cold[ours_fastest], 4
                        ),
                    }
                    if ours_fastest
                    else {}
                ),
            }
    report(args, cold, per_builder, results)
    return 0


def report(
    args: argparse.Namespace,
    cold: dict[str, float],
    per_builder: dict[str, dict[str, object]],
    results: dict[str, object],
) -> None:
    """Write the JSON and print the table."""
    out = args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    mb = 1e6
    print(f"\ncold builds, median of {args.rounds} rounds:")
    for name, seconds in sorted(cold.items(), key=lambda kv: kv[1]):
        print(f"  {name:16s} {seconds:7.1f} s")
    for builder, row in per_builder.items():
        print(f"ours, {builder}:")
        if "cold_over_best_practice" in row:
            print(
                f"  cold / {row['best_practice']}: "
                f"{row['cold_over_best_practice']:.3f} (goal <= 1.05)"
            )
        for other in COMPARED:
            if (key := over(other)) in row and other != row.get("best_practice"):
                print(f"  cold / {other + ':':17s}{row[key]:.3f}")
        print(
            f"  code-only rebuild:       {row['rebuild_code_change_s']:.1f} s = "
            f"{row['rebuild_over_cold']:.1%} of cold (goal < 5%)"
        )
        print(
            f"  image:                   {int(row['image_bytes']) / mb:.1f} MB = "  # type: ignore[call-overload]
            f"{row['image_over_floor']:.4f} x floor (goal <= 1.00)"
        )
    if "reproducible" in results:
        r = results["reproducible"]
        assert isinstance(r, dict)
        print(
            f"reproducible ({r['builder']}) / fastest non-reproducible "
            f"({r['fastest_non_reproducible']}): "
            f"{r['over_fastest_non_reproducible']:.3f} (goal <= 1.10)"
        )
        if "fastest_of_ours" in r:
            print(f"  / fastest of ours ({r['fastest_of_ours']}): {r['over_fastest_of_ours']:.3f}")
    print(f"results: {out}")


if __name__ == "__main__":
    sys.exit(main())
