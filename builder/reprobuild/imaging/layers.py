"""The venv as layers by package (issue 52): which locked wheels share a layer.

Each group is installed from its own requirements and its own wheels only, as one layer: the
big ones where they ship (:func:`in_place`: one on another on the venv's skeleton, in the stage
the image starts from), each other in a build stage of its own, copied into the image. A lock
change re-installs the groups it
touches, and every other group keeps its layer's diff ID. The big frameworks get a layer each
(torch with triton and the ``nvidia-*`` wheels, tensorflow, jax with jaxlib and its CUDA
plugins), then the big libraries (:data:`HEAVY`), each by its name's first word; every other
package goes to one of :data:`BUCKETS` buckets chosen by a hash of its name's first word, so a
bump or an added package moves its own bucket and no other (never alphabetical chunks, which
shift). One word, one group: a family that shares a namespace folder (``backports-*``,
``jaraco-*``, ``zope-*``) lands in one layer, so no two layers ship one file.

The order is the cost of a bump: every store keys a layer by the layers below it (buildah's
cache, the engine's layer store, what ``docker pull`` finds it holds), so a changed group's
layer and every layer above it are copied, loaded and pulled again, though each keeps its
diff ID. The big and rarely bumped go first, the small buckets last.
Pure: no engine, no disk but :func:`link_wheels`.
"""

from __future__ import annotations

import hashlib
import importlib.resources
import os
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from reprobuild.locks.records import Lock, Requirement

# How many buckets the packages outside the frameworks and the big libraries share: with the
# base's few layers, the frameworks', the big libraries' present, the built wheels', the
# runtime's and the code's, an image stays near 40.
BUCKETS = 20
BUCKET_NAMES = tuple(f"b{n:02d}" for n in range(BUCKETS))
GROUPS_DIR = "groups"
# Each stage's install, in the context (templates/install_group.sh): its sha256 is in the
# steps' text, as buildah's cache does not look into mounted files.
INSTALL_SCRIPT = f"{GROUPS_DIR}/install.sh"


def install_script() -> bytes:
    return (
        importlib.resources.files("reprobuild.imaging")
        .joinpath("templates/install_group.sh")
        .read_bytes()
    )


# The frameworks, in the order their layers come (the largest and rarest to change first).
FRAMEWORKS: tuple[tuple[str, frozenset[str]], ...] = (
    ("torch", frozenset({"torch", "triton", "pytorch-triton"})),
    ("tensorflow", frozenset({"tensorflow", "tensorflow-cpu", "tensorflow-intel"})),
    ("jax", frozenset({"jax", "jaxlib"})),
)
# Where the nvidia-* wheels go: with the first framework present (they are its CUDA), else a
# layer of their own. Never split: each ships the nvidia/ namespace's own __init__.py.
CUDA_GROUP = "cuda"
# The big libraries, by their names' first word (``scikit``: scikit-learn and scikit-image;
# ``opencv``: each opencv-python flavour, which ship one cv2/), each a layer of its own right
# above the frameworks', in this order: tens to hundreds of MB installed, released every few
# months at most first; the big ones bumped every week or two (transformers, polars) last.
HEAVY: tuple[str, ...] = (
    "xgboost",
    "pyarrow",
    "scipy",
    "llvmlite",
    "opencv",
    "pandas",
    "numpy",
    "sympy",
    "scikit",
    "numba",
    "matplotlib",
    "networkx",
    "grpcio",
    "onnxruntime",
    "transformers",
    "polars",
)


@dataclass(frozen=True)
class Group:
    """One layer's packages: a stage name (``torch``, ``b07``) and its requirements."""

    name: str
    requirements: tuple[Requirement, ...]

    @property
    def folder(self) -> str:
        return f"{GROUPS_DIR}/{self.name}"

    def text(self) -> str:
        """The group's requirements file: its pins and hashes and nothing else, so its bytes
        (and the stage's cache key, its sha256) follow from its own packages alone."""
        lines = sorted(r.line_text(direct=False) for r in self.requirements)
        return "\n".join(lines) + "\n"

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text().encode()).hexdigest()


def _framework(name: str) -> str | None:
    for group, names in FRAMEWORKS:
        if name in names or (group == "jax" and name.startswith(("jax-cuda", "jax-rocm"))):
            return group
    return None


def first_word(name: str) -> str:
    return canonicalize_name(name).split("-", 1)[0]


def bucket(name: str) -> str:
    """``bNN``: the bucket of a package outside the frameworks and the big libraries, by a
    hash of its canonical name's first word (stable across runs, machines and lock changes)."""
    word = first_word(name)
    return BUCKET_NAMES[int.from_bytes(hashlib.sha256(word.encode()).digest()[:8], "big") % BUCKETS]


def group_of(name: str, present: frozenset[str]) -> str:
    """The group a package goes to, given the frameworks the lock holds (``present``)."""
    found = _framework(name)
    if found is not None:
        return found
    if name.startswith("nvidia-"):
        return next((g for g, _ in FRAMEWORKS if g in present), CUDA_GROUP)
    if (word := first_word(name)) in HEAVY:
        return word
    return bucket(name)


def plan_groups(lock: Lock) -> tuple[Group, ...]:
    """The lock's wheels by layer: the frameworks present (in :data:`FRAMEWORKS`' order), the
    CUDA wheels where no framework takes them, the big libraries (in :data:`HEAVY`'s order),
    then the buckets by number. No empty group."""
    reqs = lock.wheel_requirements
    present = frozenset(g for r in reqs if (g := _framework(r.name)) is not None)
    by_group: dict[str, list[Requirement]] = {}
    for req in reqs:
        by_group.setdefault(group_of(req.name, present), []).append(req)
    order = [*(g for g, _ in FRAMEWORKS), CUDA_GROUP, *HEAVY, *BUCKET_NAMES]
    return tuple(
        Group(name, tuple(sorted(by_group[name], key=lambda r: r.name)))
        for name in order
        if name in by_group
    )


def in_place(groups: tuple[Group, ...]) -> int:
    """How many of ``groups`` (the first ones) are installed where they ship, one on another in
    the stage the image starts from: the frameworks', the CUDA wheels' and the big libraries'
    (at least the first group). Each such step is found in the cache by its text, where a
    ``COPY --from`` hashes every file it copies first (seconds for numpy and scipy, on every
    build); a bump re-installs the big groups above its own, the buckets stay stages."""
    named = next((n for n, g in enumerate(groups) if g.name in BUCKET_NAMES), len(groups))
    return max(named, min(1, len(groups)))


def group_files(groups: tuple[Group, ...]) -> dict[str, bytes]:
    """Each group's requirements and the folder its wheels are linked into (``.keep``), and
    the stages' install script (a layered image has it even with no group)."""
    files: dict[str, bytes] = {INSTALL_SCRIPT: install_script()}
    for group in groups:
        files[f"{group.folder}/requirements.txt"] = group.text().encode()
        files[f"{group.folder}/wheels/.keep"] = b""
    return files


def link_wheels(groups: tuple[Group, ...], wheels: Path, context: Path) -> None:
    """Hard-link each fetched wheel in ``wheels`` into its group's folder of ``context``
    (the wheels each stage bind-mounts: its cache sees its own wheels only). A file that
    names no package of a group stays where it is."""
    where = {r.name: group.folder for group in groups for r in group.requirements}
    for path in sorted(wheels.iterdir()):
        try:
            name = parse_wheel_filename(path.name)[0]
        except InvalidWheelFilename:
            continue
        folder = where.get(canonicalize_name(name))
        if folder is not None:
            os.link(path, context / folder / "wheels" / path.name)
