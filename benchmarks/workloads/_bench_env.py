"""What a benchmark run outside the runtime's control (bare host, mode ``off``) sets itself.

- ``BENCH_THREADS=N``: the variables the runtime would set, before any framework loads (this
  module is imported first), so that ``off`` and bare runs use the same count as a ``strict``
  run with ``REPRO_THREADS=N``. It cannot be done from outside in mode ``off``: the runtime
  removes an ``OMP_NUM_THREADS`` equal to the value the image bakes. Unset: each framework
  picks its own count (the "auto" rows).
- ``BENCH_SEED=S``: the scripts seed themselves with S right after their imports, as the
  runtime does in strict mode, so that every configuration trains the same trajectory and a
  time ratio compares settings, not two random initialisations (a trajectory with more
  denormal numbers, say, runs slower).
- ``BENCH_MKL_FIXED=1``: ``MKL_DYNAMIC=FALSE`` and ``OMP_DYNAMIC=FALSE``, as the runtime sets
  them (an attribution run: ``off`` with oneMKL held to the thread count it was given).
- ``BENCH_TORCH_NOFILL=1``: strict without ``torch.utils.deterministic.fill_uninitialized_memory``
  (an attribution run: what that setting of the runtime costs).
- ``BENCH_MKL_LOCAL=N``: after torch is configured, oneMKL alone held to N threads
  (``mkl_set_num_threads_local``, which libtorch_cpu exports) while torch's own kernels keep
  the count they were given (an attribution run: which library's threads cost the time).
"""

import ctypes
import os
from collections.abc import Callable

THREAD_VARIABLES = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "TF_NUM_INTRAOP_THREADS",
    "TF_NUM_INTEROP_THREADS",
)

_threads = os.environ.get("BENCH_THREADS", "")
if _threads:
    os.environ.update(dict.fromkeys(THREAD_VARIABLES, _threads))
if os.environ.get("BENCH_MKL_FIXED") == "1":
    os.environ.update(MKL_DYNAMIC="FALSE", OMP_DYNAMIC="FALSE")


def seed(set_seed: Callable[[int], object]) -> None:
    """Call ``set_seed(S)`` when ``BENCH_SEED=S`` is set."""
    text = os.environ.get("BENCH_SEED", "")
    if text:
        set_seed(int(text))


def torch_options(torch: object) -> None:
    """After ``import torch`` (and so after the runtime configured it): BENCH_TORCH_NOFILL,
    BENCH_MKL_LOCAL."""
    if os.environ.get("BENCH_TORCH_NOFILL") == "1":
        torch.utils.deterministic.fill_uninitialized_memory = False  # type: ignore[attr-defined]
    mkl = os.environ.get("BENCH_MKL_LOCAL", "")
    if mkl:
        folder = os.path.dirname(torch.__file__)  # type: ignore[attr-defined]
        library = ctypes.CDLL(os.path.join(folder, "lib", "libtorch_cpu.so"))
        library.MKL_Set_Num_Threads_Local(ctypes.c_int(int(mkl)))
