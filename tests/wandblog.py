"""Read a W&B run's ``run-<id>.wandb`` file back, for tests (``from wandblog import ...``).

wandb ships the protobuf classes of its records (``wandb.proto.wandb_internal_pb2``) but no
Python reader of the file (wandb 0.31), so the framing is decoded here: LevelDB's log format,
a 7-byte header (``:W&B``, magic 0xBEE1, version 0), then 32 KiB blocks of records, each with a
7-byte header (CRC-32 of type byte and payload, length, type: full, first, middle, last); a
block's tail shorter than a header is zero padding. The payloads are wandb's ``Record``s.
"""

from __future__ import annotations

import json
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BLOCK = 32 * 1024
HEADER = struct.Struct("<IHB")
FILE_HEADER = struct.Struct("<4sHB")
MAGIC = (b":W&B", 0xBEE1, 0)
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def payloads(data: bytes) -> list[bytes]:
    """The records' payloads, reassembled; a bad header or checksum raises ValueError."""
    if FILE_HEADER.unpack_from(data) != MAGIC:
        raise ValueError(f"not a W&B run file: header {data[:7]!r}")
    pos, out, pending = FILE_HEADER.size, [], b""
    while pos < len(data):
        left = BLOCK - pos % BLOCK
        if left < HEADER.size:  # the block's zero padding
            pos += left
            continue
        crc, length, kind = HEADER.unpack_from(data, pos)
        if (crc, length, kind) == (0, 0, 0):  # the rest of a block left unwritten
            pos += left
            continue
        chunk = data[pos + HEADER.size : pos + HEADER.size + length]
        if len(chunk) != length or zlib.crc32(bytes([kind]) + chunk) != crc:
            raise ValueError(f"bad record at byte {pos}: length {length}, type {kind}")
        pos += HEADER.size + length
        if kind == FULL:
            out.append(chunk)
        elif kind == FIRST:
            pending = chunk
        elif kind == MIDDLE:
            pending += chunk
        elif kind == LAST:
            out.append(pending + chunk)
            pending = b""
        else:
            raise ValueError(f"bad record type {kind} at byte {pos}")
    return out


@dataclass
class WandbRun:
    """What a test looks at in a run file: the config as the run ended with it (the run
    record's, then every config update), tags, group, job type, Docker image and files."""

    run_id: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    tags: list[str] = field(default_factory=list)
    group: str = ""
    job_type: str = ""
    docker: str = ""
    files: list[str] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)


def _apply(config: dict[str, Any], record: Any) -> None:
    for item in record.update:
        keys = list(item.nested_key) or [item.key]
        where = config
        for key in keys[:-1]:
            where = where.setdefault(key, {})
        where[keys[-1]] = json.loads(item.value_json)
    for item in record.remove:
        keys = list(item.nested_key) or [item.key]
        where = config
        for key in keys[:-1]:
            where = where.get(key, {})
        where.pop(keys[-1], None)


def read_run(path: Path) -> WandbRun:
    from wandb.proto import wandb_internal_pb2 as pb

    run = WandbRun()
    for payload in payloads(path.read_bytes()):
        record = pb.Record()  # type: ignore[attr-defined]  # protobuf-generated
        record.ParseFromString(payload)
        kind = record.WhichOneof("record_type") or ""
        run.kinds.append(kind)
        if kind == "run":
            run.run_id = record.run.run_id
            run.tags = list(record.run.tags)
            run.group, run.job_type = record.run.run_group, record.run.job_type
            _apply(run.config, record.run.config)
        elif kind == "config":
            _apply(run.config, record.config)
        elif kind == "environment" and record.environment.docker:
            run.docker = record.environment.docker
        elif kind == "files":
            run.files.extend(item.path for item in record.files.files)
    return run


def run_file(run_dir: Path) -> Path:
    """The one ``run-*.wandb`` of an offline run directory."""
    found = sorted(run_dir.glob("run-*.wandb"))
    assert len(found) == 1, f"{run_dir}: {[p.name for p in run_dir.iterdir()]}"
    return found[0]


def offline_runs(wandb_dir: Path) -> list[Path]:
    """The ``offline-run-*`` directories under a ``wandb`` directory, oldest first."""
    return sorted(wandb_dir.glob("offline-run-*"))
