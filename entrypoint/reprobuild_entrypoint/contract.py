"""What the host side (``reprobuild``) and the image side (this runtime) agree on, written once.

Each name here is read on one side and written on the other: the label prefix of every image
label reprobuild sets, the variables a container is started with, the mount points of the
directories reprobuild gives a run, and the kinds of the records the runtime writes. The host
imports these; it never restates them. Standard library only, like the rest of the runtime.
"""

from __future__ import annotations

# Every image label reprobuild sets starts with this (OCI's reverse-DNS convention).
LABEL_PREFIX = "io.reprobuild."

# The variables that steer a run (read by settings.from_environ and the start-up hook).
SEED_VAR = "REPRO_SEED"
MODE_VAR = "REPRO_DETERMINISM"
TRIAL_VAR = "REPRO_TRIAL"
RUN_DIR_VAR = "REPRO_RUN_DIR"
OUTPUT_DIR_VAR = "REPRO_OUTPUT_DIR"
# The run record's path when the runtime wrote it to its default place (no RUN_DIR_VAR): what
# the trackers' hooks attach to their runs (set by the entrypoint, read by stackfacts)
RUN_RECORD_VAR = "REPRO_RUN_RECORD"
# The image reference, set by the launchers reprobuild writes (compose, k8s): a container cannot
# see its own image, and the MLflow tags name it
IMAGE_VAR = "REPRO_IMAGE"

# Where a run's directories are mounted in its container (compose, k8s and verify alike).
OUT_DIR = "/out"
RECORD_DIR = "/reprobuild-run"
DATA_DIR = "/data"

# The ``kind`` of each JSON record the runtime writes into RUN_DIR_VAR.
RUN_KIND = "reprobuild.run"
RUN_EXIT_KIND = "reprobuild.run_exit"
FRAMEWORKS_KIND = "reprobuild.frameworks"

# ``reprobuild verify --cpu``: a leg on an emulated CPU has the static qemu-user binary mounted
# here, and the runtime (itself started under it) starts the command under the same emulator,
# given as a JSON list (``["/reprobuild-emulator/qemu-x86_64-static", "-cpu", "Haswell"]``):
# under qemu-user an ``exec`` leaves emulation.
EMULATOR_DIR = "/reprobuild-emulator"
EMULATOR_VAR = "REPROBUILD_EMULATOR"
