"""How long a large pylock.toml takes to parse, against the same lock as requirements text.

Generates PACKAGES packages with WHEELS wheels each (defaults 1000 x 10), writes the lock in
both formats, parses each REPEAT times (best time kept) and prints both times and their ratio,
all measured in this run. Parsing was quadratic once (38 s vs 0.6 s); the ratio should stay
constant as the lock grows (tomllib, pure Python, and one URL per wheel that the
requirements form does not carry make pylock several times slower, linearly).

    python benchmarks/pylock_parse.py [--packages N] [--wheels N] [--repeat N]
"""

from __future__ import annotations

import argparse
import hashlib
import tempfile
import time
from pathlib import Path

from reprobuild.locks.lockfile import load_lock


def _hex(*parts: object) -> str:
    return hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()


def write_locks(folder: Path, packages: int, wheels: int) -> tuple[Path, Path]:
    pylock = ['lock-version = "1.0"', 'created-by = "benchmarks/pylock_parse.py"', ""]
    requirements: list[str] = []
    for p in range(packages):
        name = f"pkg{p:05d}"
        pylock += ["[[packages]]", f'name = "{name}"', 'version = "1.0"', "wheels = ["]
        hashes: list[str] = []
        for w in range(wheels):
            file = f"{name}-1.0-cp311-cp311-manylinux_2_{17 + w}_x86_64.whl"
            digest = _hex(name, w)
            hashes.append(digest)
            pylock.append(
                f'  {{ url = "https://files.example.org/{name}/{file}", '
                f'hashes = {{ sha256 = "{digest}" }} }},'
            )
        pylock += ["]", ""]
        requirements.append(f"{name}==1.0 " + " ".join(f"--hash=sha256:{h}" for h in hashes))
    pylock_path = folder / "pylock.toml"
    pylock_path.write_text("\n".join(pylock) + "\n")
    req_path = folder / "requirements.lock"
    req_path.write_text("\n".join(requirements) + "\n")
    return pylock_path, req_path


def best_time(path: Path, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        load_lock(path)
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--packages", type=int, default=1000)
    parser.add_argument("--wheels", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="reprobuild-bench-") as tmp:
        pylock, requirements = write_locks(Path(tmp), args.packages, args.wheels)
        t_pylock = best_time(pylock, args.repeat)
        t_req = best_time(requirements, args.repeat)
        half = Path(tmp) / "half"
        half.mkdir()
        half_pylock, _ = write_locks(half, args.packages // 2, args.wheels)
        t_half = best_time(half_pylock, args.repeat)
    print(f"{args.packages} packages x {args.wheels} wheels (best of {args.repeat})")
    print(f"pylock.toml:  {t_pylock:.3f} s")
    print(f"requirements: {t_req:.3f} s")
    print(f"ratio pylock/requirements: {t_pylock / t_req:.2f}")
    # Linear parsing doubles when the lock doubles; quadratic parsing quadruples.
    print(
        f"pylock scaling, {args.packages} vs {args.packages // 2} packages: "
        f"{t_pylock / t_half:.2f}x (2 = linear, 4 = quadratic)"
    )


if __name__ == "__main__":
    main()
