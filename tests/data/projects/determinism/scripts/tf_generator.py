"""tf.random's global generator across processes: `save` draws, keeps the RNG state on /out and
prints the next draws; `load` (a fresh process) restores the state and prints its draws, which
must be the same. Under op determinism get_global_generator() refuses to make one: restore
must make it from the saved state."""

import pickle
import sys

import tensorflow as tf

from reprobuild_entrypoint import capture_rng_state, restore_rng_state

PATH = "/out/rng.pkl"
if sys.argv[1] == "save":
    tf.random.set_global_generator(tf.random.Generator.from_seed(5))
    tf.random.get_global_generator().normal([2])
    with open(PATH, "wb") as out:
        pickle.dump(capture_rng_state(), out)
else:
    with open(PATH, "rb") as state:
        restore_rng_state(pickle.load(state))
print(tf.random.get_global_generator().normal([3]).numpy().tolist())
