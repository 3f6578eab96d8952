"""The commands, one module each, and the registry that finds them without importing them.

Each module has ``add_arguments(parser)``, which gives the command's parser its description,
usage and arguments, and ``run(args) -> int``, which calls the library and returns the exit code.
A module imports the library (the engine, docker, requests) only inside ``run``, and the
registry imports a module only when its command is chosen or a whole parser is built, so
``reprobuild --help`` and ``--version`` load none of them.
"""

from __future__ import annotations

import argparse
import importlib
from typing import NamedTuple, Protocol, cast


class Command(Protocol):
    def add_arguments(self, parser: argparse.ArgumentParser) -> None: ...

    def run(self, args: argparse.Namespace) -> int: ...


class CommandInfo(NamedTuple):  # not a dataclass: that would import inspect at start-up
    module: str
    summary: str  # its line in `reprobuild --help`

    def load(self) -> Command:
        return cast(Command, importlib.import_module(self.module))


def _info(name: str, summary: str) -> CommandInfo:
    return CommandInfo(f"{__name__}.{name}", summary)


# In the order `reprobuild --help` lists them.
COMMANDS: dict[str, CommandInfo] = {
    "init": _info("init", "write reprobuild.yaml from the project's lock (never overwrites)"),
    "render": _info("render", "write the build context (Dockerfile, lock, runtime)"),
    "build-lock": _info(
        "build_lock", "pin the build requirements of the sdists the lock builds (hashed)"
    ),
    "image": _info("image", "render, build, stamp and tag the image"),
    "matrix": _info("matrix", "print the project's variants as a CI build matrix (JSON)"),
    "rebuild": _info(
        "rebuild", "build an image again from the inputs its manifest records; same image?"
    ),
    "push": _info(
        "push", "push an image built earlier to a registry: only the layers it lacks move"
    ),
    "inspect": _info("inspect", "print an image's manifest"),
    "sbom": _info("sbom", "print (or write) the CycloneDX SBOM an image carries"),
    "resolve": _info(
        "resolve",
        "pin a tag: print NAME:TAG@sha256:... from its registry, or refresh a catalog entry",
    ),
    "bases": _info(
        "bases",
        "show the project's locked bases (reprobuild.bases.lock); --update re-pins them",
    ),
    "verify": _info("verify", "run a command N times side by side and prove the runs identical"),
    "report": _info(
        "report", "write the HTML page of a verify report: its verdict, plots and stack diff"
    ),
    "diff": _info("diff", "compare two images' stacks, two run records, or one of each"),
    "compose": _info(
        "compose",
        "write a compose file that trains (and verifies) with the project's built image",
    ),
    "k8s": _info(
        "k8s",
        "write Kubernetes manifests for a multi-node torchrun job with the project's image",
    ),
    "slurm": _info(
        "slurm",
        "write an sbatch script for a multi-node torchrun job with the project's image",
    ),
}
