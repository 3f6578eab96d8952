"""Trial seeds: trial ``k`` of an experiment seeded ``s`` (``REPRO_SEED=s REPRO_TRIAL=k``).

The run seed is derived by a fixed formula, :data:`TRIAL_SEED_FORMULA`::

    int.from_bytes(sha256(f"reprobuild-trial:{s}:{k}".encode()).digest()[:4], "big")

Why a hash and not ``s + k``: ranks already use ``seed + rank`` (settings), so with ``s + k``
trial 1's rank 0 would repeat trial 0's rank 1, and experiment 11's trial 1 would be experiment
12's trial 0. A hash of both numbers gives every (s, k) its own 32-bit seed with no such
overlap (two trials share a seed only by chance, about one pair in 2**32). sha256 because its
output is the same in every Python on every platform, unlike ``hash()``; the prefix names
the scheme, so a future one cannot silently give the same seeds. Anyone can recompute the seed
from the record: the run record keeps ``experiment_seed``, ``trial`` and the derived ``seed``.

Imported only when ``REPRO_TRIAL`` is set (``hashlib`` is not free at interpreter start).
"""

from __future__ import annotations

import hashlib

TRIAL_SEED_FORMULA = (
    'int.from_bytes(sha256(f"reprobuild-trial:{seed}:{trial}".encode()).digest()[:4], "big")'
)


def trial_seed(seed: int, trial: int) -> int:
    """The run seed of trial ``trial`` of the experiment seeded ``seed``."""
    digest = hashlib.sha256(f"reprobuild-trial:{seed}:{trial}".encode()).digest()
    return int.from_bytes(digest[:4], "big")
