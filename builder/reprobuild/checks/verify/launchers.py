"""Where ``reprobuild verify`` runs its runs: fresh containers on the engine
(:class:`_DockerLauncher`), or plain processes on this host under the in-image runtime
(:class:`_LocalLauncher`, ``--local``: standard library only, no Docker SDK imported)."""

from __future__ import annotations

import contextlib
import importlib.resources
import os
import platform
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

from reprobuild._util import leftovers
from reprobuild._util.threads import start as start_thread
from reprobuild.checks.verify.emulation import (
    EMULATOR_IN_CONTAINER,
    NATIVE,
    emulator_argv,
    emulator_env,
)
from reprobuild.checks.verify.spec import VerifySpec
from reprobuild.errors import VerifyError, signal_exit_code
from reprobuild.imaging.platforms import MACHINES
from reprobuild_entrypoint.contract import (
    EMULATOR_VAR,
    IMAGE_VAR,
    LABEL_PREFIX,
    MODE_VAR,
    OUT_DIR,
    OUTPUT_DIR_VAR,
    RECORD_DIR,
    RUN_DIR_VAR,
    SEED_VAR,
    TRIAL_VAR,
)
from reprobuild_entrypoint.envplan import image_env

VERIFY_LABEL = f"{LABEL_PREFIX}verify"
"""On every verify container: the run's number."""
# On every verify container, as on every container reprobuild starts: the owner token
# (``<pid>-<start time>``) of the verify that started it, so what a SIGKILLed verify left
# behind is found and removed by the next command (leftovers.reap), and a live one's is not.
OWNER_LABEL = leftovers.OWNER_LABEL


class _Run(Protocol):
    """One started run."""

    def stdout(self) -> Iterator[bytes]: ...

    def stderr(self) -> Iterator[bytes]: ...

    def wait(self) -> int: ...

    def kill(self) -> None: ...

    def terminate(self) -> None:
        """SIGTERM, as ``docker stop`` sends first (``verify --resume-at``)."""
        ...

    def oom_killed(self) -> bool | None:
        """Whether the run was killed for lack of memory; None when that cannot be known."""
        ...

    def close(self) -> None: ...


class _Launcher(Protocol):
    where: str
    out_label: str
    """How a message names a run's output directory (``/out``, ``$REPRO_OUTPUT_DIR``)."""

    def prepare(self, work: Path) -> None: ...

    def start(self, index: int, out_dir: Path, record_dir: Path) -> _Run: ...

    def finish(self) -> None: ...


def _run_env(spec: VerifySpec) -> dict[str, str]:
    """What every run gets on top of its image's (or host's) environment."""
    env = dict(spec.env)
    if spec.seed is not None:
        env[SEED_VAR] = str(spec.seed)
    if spec.trial is not None:
        env[TRIAL_VAR] = str(spec.trial)
    if spec.mode is not None:
        env[MODE_VAR] = spec.mode
    return env


def platform_note(arch: object) -> str:
    """``, linux/ARCH`` for the summary: the image's architecture (its config's), and
    ``(emulated)`` where this host's machine is another (qemu-user through binfmt_misc runs
    it); "" where the config names none."""
    if not isinstance(arch, str) or not arch.isalnum():
        return ""
    emulated = MACHINES.get(arch, arch) != MACHINES.get(platform.machine(), platform.machine())
    return f", linux/{arch}{' (emulated)' if emulated else ''}"


class _DockerLauncher:
    """Runs in fresh containers, through their own connection to the engine (each run holds
    two log streams and a wait open at once)."""

    out_label = OUT_DIR

    def __init__(self, spec: VerifySpec, image_id: str) -> None:
        self._spec = spec
        self._image_id = image_id
        from reprobuild.backends.engine import Engine

        self.where = f"from {spec.image} ({image_id[:19]})"
        if spec.cpus:
            self.where += f" on CPUs {', '.join(spec.cpus)} (qemu-user)"
        self._engine = Engine(connections=3 * spec.runs * (spec.nodes or 1) + 4)
        self._owner = leftovers.owner()
        self._entrypoint: list[str] = []

    def prepare(self, work: Path) -> None:
        _ = self._engine.client  # connect now: a missing engine fails before any run starts
        leftovers.reap(self._engine, lambda line: print(line, file=sys.stderr, flush=True))
        self.where += platform_note(self._engine.inspect(self._image_id).get("Architecture"))
        if self._spec.qemu is not None:
            config = self._engine.inspect(self._image_id).get("Config") or {}
            self._entrypoint = list(config.get("Entrypoint") or ())
            if not self._entrypoint or not self._entrypoint[0].startswith("/"):
                raise VerifyError(
                    f"--cpu: {self._spec.image} has no entrypoint started by its path "
                    f"({self._entrypoint or 'none'}): an emulated CPU needs the image's "
                    "reprobuild runtime, which starts the command under the emulator",
                    hint="build the image with `reprobuild image`",
                )

    def start(self, index: int, out_dir: Path, record_dir: Path) -> _Run:
        from reprobuild.backends.engine import Bind, Gpus

        spec = self._spec
        for folder in (out_dir, record_dir):
            folder.chmod(0o777)  # the image's user (uid 10001) writes there
        binds = [
            Bind(out_dir, OUT_DIR),
            Bind(record_dir, RECORD_DIR),
            *(Bind(m.host, m.container, read_only=True) for m in spec.data),
        ]
        gpus = None if spec.gpus is None else Gpus(spec.gpus.count, spec.gpus.device_ids)
        environment = {
            RUN_DIR_VAR: RECORD_DIR,
            OUTPUT_DIR_VAR: OUT_DIR,
            IMAGE_VAR: self._image_id,  # the MLflow tags name it: a container cannot see it
            **_run_env(spec),
        }
        entrypoint = None
        leg = spec.cpus[index] if spec.cpus else NATIVE
        if leg != NATIVE and spec.qemu is not None:
            # the runtime itself runs emulated (it reads the emulated CPU), and starts the
            # command under the same emulator: an exec leaves qemu-user's emulation
            binds.append(Bind(Path(spec.qemu), EMULATOR_IN_CONTAINER, read_only=True))
            entrypoint = [*emulator_argv(leg), *self._entrypoint]
            environment[EMULATOR_VAR] = emulator_env(leg)
        return self._engine.start_streaming(
            self._image_id,
            list(spec.command),
            what=f"run {index + 1}'s container" + (f" (CPU {leg})" if spec.cpus else ""),
            environment=environment,
            binds=binds,
            network=spec.network,
            gpus=gpus,
            labels={VERIFY_LABEL: str(index + 1), OWNER_LABEL: self._owner},
            entrypoint=entrypoint,
        )

    def finish(self) -> None:
        """Remove every container this verify started, the ones an interruption left between
        create and start included (found by their owner label)."""
        try:
            self._engine.remove_containers({OWNER_LABEL: self._owner})
        finally:
            self._engine.close()


def sitecustomize_source() -> bytes:
    """The ``sitecustomize.py`` that ``--local`` puts on PYTHONPATH (package data)."""
    return (
        importlib.resources.files("reprobuild.checks.verify") / "shim" / "sitecustomize.py"
    ).read_bytes()


class _ProcessRun:
    """A local run in its own process group. When the program exits, what it left running in
    its group is killed, as a container's end kills every process in it. The exit is read
    without reaping the program (``WNOWAIT``), so the group id stays this run's until
    :meth:`close`: a kill can never reach a group that reused the number."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        try:
            self._proc = subprocess.Popen(
                argv,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,  # its own process group: kill() reaches its children
            )
        except OSError as exc:
            raise VerifyError(f"cannot start {argv[0]}: {exc.strerror or exc}") from None
        self._status: int | None = None
        self._exited = threading.Event()
        start_thread(threading.Thread(target=self._watch_exit, daemon=True))

    def _watch_exit(self) -> None:
        try:
            info = os.waitid(os.P_PID, self._proc.pid, os.WEXITED | os.WNOWAIT)
            if info is not None:
                exited = info.si_code == os.CLD_EXITED
                # killed by signal N: 128 + N, as a shell says
                self._status = info.si_status if exited else signal_exit_code(info.si_status)
        except ChildProcessError:
            pass
        finally:
            self.kill()  # the rest of its group, as at a container's end
            self._exited.set()

    @staticmethod
    def _read(stream: Any) -> Iterator[bytes]:
        fd = stream.fileno()
        while chunk := os.read(fd, 65536):
            yield chunk

    def stdout(self) -> Iterator[bytes]:
        return self._read(self._proc.stdout)

    def stderr(self) -> Iterator[bytes]:
        return self._read(self._proc.stderr)

    def wait(self) -> int:
        self._exited.wait()
        return -1 if self._status is None else self._status

    def kill(self) -> None:
        self._signal_group(signal.SIGKILL)

    def terminate(self) -> None:
        """SIGTERM to the run's group, as the entrypoint as init forwards ``docker stop``."""
        self._signal_group(signal.SIGTERM)

    def _signal_group(self, signum: int) -> None:
        if self._proc.returncode is None:  # not reaped: the group is still this run's
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._proc.pid, signum)

    def oom_killed(self) -> bool | None:
        return None  # a host process: the kernel's OOM killer leaves no mark to read here

    def close(self) -> None:
        self.kill()
        self._exited.wait(timeout=10)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(timeout=10)
        for stream in (self._proc.stdout, self._proc.stderr):
            if stream is not None:
                stream.close()


class _LocalLauncher:
    """Runs on this host: ``python -m reprobuild_entrypoint CMD`` with a copy of the runtime on
    PYTHONPATH and a ``sitecustomize`` that starts its hook in every Python the command starts,
    in the environment a CPU (or, with --gpus, GPU) image with seed 0 and mode strict bakes."""

    where = "on this host (--local)"
    out_label = "$REPRO_OUTPUT_DIR"

    def __init__(self, spec: VerifySpec) -> None:
        self._spec = spec
        self._path: list[str] = []

    def prepare(self, work: Path) -> None:
        from reprobuild.imaging.runtimefiles import runtime_package

        runtime = work / "runtime"
        for rel, (data, _mode) in runtime_package().items():
            target = runtime / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        shim = work / "shim"
        shim.mkdir()
        (shim / "sitecustomize.py").write_bytes(sitecustomize_source())
        self._path = [str(shim), str(runtime)]

    def environment(self, out_dir: Path, record_dir: Path) -> dict[str, str]:
        spec = self._spec
        env = dict(os.environ)
        for name in (
            "REPRO_RUN_ID",
            "REPROBUILD_BASE_ENTRYPOINT",
            "REPROBUILD_FORCE_INIT",
            "REPROBUILD_MANIFEST_PATH",
        ):
            env.pop(name, None)
        variant = "gpu" if spec.gpus is not None else "cpu"
        env.update(
            REPROBUILD_IMAGE_SEED="0",
            REPROBUILD_IMAGE_DETERMINISM="strict",
            REPROBUILD_VARIANT=variant,
        )
        for name, value in image_env(0, "strict", variant).items():
            env.setdefault(name, value)  # a host value is the user's, like `docker run -e`
        env.setdefault("PYTHONUNBUFFERED", "1")
        env["PYTHONPATH"] = os.pathsep.join(
            [*self._path, *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])]
        )
        env[RUN_DIR_VAR] = str(record_dir)
        env[OUTPUT_DIR_VAR] = str(out_dir)
        visible = None if spec.gpus is None else spec.gpus.cuda_visible_devices()
        if visible is not None:
            env["CUDA_VISIBLE_DEVICES"] = visible
        env.update(_run_env(spec))
        return env

    def start(self, index: int, out_dir: Path, record_dir: Path) -> _Run:
        argv = [sys.executable, "-m", "reprobuild_entrypoint", "--", *self._spec.command]
        return _ProcessRun(argv, self.environment(out_dir, record_dir))

    def finish(self) -> None:
        return None


def _wait_bounded(handle: Any, seconds: float) -> int | None:
    """``handle.wait()``, or None when it has not returned within ``seconds``."""
    done: list[int] = []
    waiter = threading.Thread(target=lambda: done.append(int(handle.wait())), daemon=True)
    start_thread(waiter)
    waiter.join(seconds)
    return done[0] if done else None


class _JobRun:
    """One multi-node run: node 0's container is the run (rank 0's stdout, its exit status);
    the other nodes' are waited for, their failures reported as the run's, and all of them
    stopped together."""

    NODE_WAIT_S = 120.0
    """How long the other nodes may take to exit once node 0 has (a finished job's do at
    once; a job whose node 0 failed has its peers fail on the lost connection)."""

    def __init__(self, head: Any, others: list[tuple[str, Any]]) -> None:
        self._head = head
        self._others = others

    def stdout(self) -> Iterator[bytes]:
        stream: Iterator[bytes] = self._head.stdout()
        return stream

    def stderr(self) -> Iterator[bytes]:
        stream: Iterator[bytes] = self._head.stderr()
        return stream

    def wait(self) -> int:
        code = int(self._head.wait())
        for _, other in self._others:
            status = _wait_bounded(other, self.NODE_WAIT_S)
            if status is None:
                other.kill()
                return code or 124
            if status != 0 and code == 0:
                code = status
        return code

    def kill(self) -> None:
        for handle in (self._head, *(o for _, o in self._others)):
            handle.kill()

    def terminate(self) -> None:
        for handle in (self._head, *(o for _, o in self._others)):
            handle.terminate()

    def oom_killed(self) -> bool | None:
        oom: bool | None = self._head.oom_killed()
        return oom

    def close(self) -> None:
        for handle in (self._head, *(o for _, o in self._others)):
            handle.close()


class _NodesLauncher(_DockerLauncher):
    """``verify --nodes N``: every run is a torchrun job of N containers (``node-0`` ...) on
    an internal network of its own, so two runs side by side never meet; node 0 hosts the
    c10d rendezvous. Run records go to ``records/node-<i>``; node 0's ``/out`` is the run's
    output directory (global rank 0 runs there), the other nodes' outputs are kept apart."""

    def __init__(self, spec: VerifySpec, image_id: str) -> None:
        super().__init__(spec, image_id)
        from reprobuild.cluster.nodes import JobShape

        assert spec.nodes is not None
        self._shape = JobShape(spec.nodes, spec.nproc_per_node, gpu=spec.gpus is not None)
        self.where = (
            f"{self.where}, each a torchrun job of {spec.nodes} node(s) x "
            f"{spec.nproc_per_node} process(es) on its own network"
        )

    def start(self, index: int, out_dir: Path, record_dir: Path) -> _Run:
        from reprobuild.backends.engine import Bind, Gpus
        from reprobuild.cluster.nodes import BACKEND_VAR, NODES_VAR, program_args, torchrun_command

        spec, shape = self._spec, self._shape
        program_args(spec.command)
        network = f"rbverify-{self._owner}-{index + 1}"
        self._engine.create_network(network, {OWNER_LABEL: self._owner})
        names = shape.node_names()
        handles: list[tuple[str, Any]] = []
        try:
            for name in reversed(names):  # node 0 last: its peers are there when it starts
                records = record_dir / name
                out = out_dir if name == names[0] else out_dir.parent / f"out-{name}"
                for folder in (records, out):
                    folder.mkdir(parents=True, exist_ok=True)
                    folder.chmod(0o777)
                gpus = None if spec.gpus is None else Gpus(spec.gpus.count, spec.gpus.device_ids)
                handle = self._engine.start_streaming(
                    self._image_id,
                    list(
                        torchrun_command(
                            shape, spec.command, node=name, endpoint=names[0], job_id=network
                        )
                    ),
                    what=f"run {index + 1}'s {name} container",
                    environment={
                        RUN_DIR_VAR: RECORD_DIR,
                        OUTPUT_DIR_VAR: OUT_DIR,
                        IMAGE_VAR: self._image_id,
                        BACKEND_VAR: shape.backend,
                        NODES_VAR: ",".join(names),
                        **_run_env(spec),
                    },
                    binds=[
                        Bind(out, OUT_DIR),
                        Bind(records, RECORD_DIR),
                        *(Bind(m.host, m.container, read_only=True) for m in spec.data),
                    ],
                    network=network,
                    hostname=name,
                    gpus=gpus,
                    labels={VERIFY_LABEL: str(index + 1), OWNER_LABEL: self._owner},
                )
                handles.append((name, handle))
        except BaseException:
            for _, handle in handles:
                handle.close()
            raise
        head = handles.pop()
        return _JobRun(head[1], handles)

    def finish(self) -> None:
        try:
            self._engine.remove_containers({OWNER_LABEL: self._owner})
            self._engine.remove_networks({OWNER_LABEL: self._owner})
        finally:
            self._engine.close()
