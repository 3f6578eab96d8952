"""``reprobuild diff`` on files: manifests and run records written by the real builder and
runtime (tests/data/diff), and variants of them. In-process through ``main(argv)``; no engine.

Fixtures: ``manifest-tiny.json`` is the manifest copied out of an image of
tests/data/projects/tiny; ``inspect-tiny.json`` is ``reprobuild inspect --json`` of that image;
``run-image.json`` a run record written in a container of it; ``run-host.json`` one written by
``python -m reprobuild_entrypoint true`` on a host; ``host-numpy/`` a host run record and the
framework record of the program it ran (``import numpy``).
"""

from __future__ import annotations

import copy
import gc
import hashlib
import json
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from helpers import DATA
from reprobuild.checks.diff import (
    _cudnn,
    compare,
    from_document,
    from_run_record,
    load,
    load_image,
)
from reprobuild.cli import main
from reprobuild.errors import DiffInputError

DIFF = DATA / "diff"
MANIFEST = DIFF / "manifest-tiny.json"
INSPECT = DIFF / "inspect-tiny.json"
RUN_IMAGE = DIFF / "run-image.json"
RUN_HOST = DIFF / "run-host.json"
NUMPY_DIR = DIFF / "host-numpy"
NUMPY_RUN = NUMPY_DIR / "run-20261122T081412Z-3deab97b.json"
NUMPY_FRAMEWORKS = NUMPY_DIR / "run-20261122T081412Z-3deab97b-frameworks-vm-31465.json"
SHA = hashlib.sha256(MANIFEST.read_bytes()).hexdigest()
OTHER_DIGEST = "sha256:" + "ab" * 32
OTHER_LOCK = "cd" * 32

Run = Callable[..., tuple[int, str, str]]


def read(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


@pytest.fixture
def write(tmp_path: Path) -> Callable[[str, Any], str]:
    def put(name: str, data: Any) -> str:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
        return str(path)

    return put


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str]) -> Run:
    def call(*argv: str) -> tuple[int, str, str]:
        code = main(["diff", *argv])
        out, err = capsys.readouterr()
        return code, out, err

    return call


def items(out: str) -> list[str]:
    """The difference lines of the human report, without their indent."""
    return [line.strip() for line in out.splitlines() if line.startswith("  ")]


def manifest(**changes: Any) -> dict[str, Any]:
    data = read(MANIFEST)
    data.update(changes)
    return data


# ---------------------------------------------------------------------------------- identical


def test_the_fixtures_are_what_the_builder_and_runtime_write() -> None:
    inspected = read(INSPECT)
    assert inspected["labels"]["io.reprobuild.manifest.sha256"] == SHA
    assert read(RUN_IMAGE)["image"]["sha256"] == SHA
    assert read(RUN_IMAGE)["kind"] == "reprobuild.run"
    assert read(RUN_HOST)["image"]["sha256"] is None
    assert read(NUMPY_FRAMEWORKS)["framework_settings"]["numpy"]["version"]


def test_a_manifest_with_itself_is_identical(run: Run) -> None:
    code, out, err = run(str(MANIFEST), str(MANIFEST))
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0].startswith(f"a  manifest {MANIFEST}: reprobuild-test/tiny (cpu)")
    assert lines[1].startswith("b  manifest ")
    assert SHA[:12] in lines[0]
    assert lines[-1] == "identical"
    assert items(out) == []


def test_inspect_json_output_reads_as_the_manifest_it_holds(run: Run) -> None:
    code, out, _ = run(str(MANIFEST), str(INSPECT), "--json")
    report = json.loads(out)
    assert code == 0
    assert report["identical"] is True
    assert report["same_image"] is True
    assert report["b"]["manifest_sha256"] == SHA


def test_name_created_and_lock_file_are_build_metadata_not_stack(
    run: Run, write: Callable[[str, Any], str]
) -> None:
    b = write(
        "b.json", manifest(name="team/other", created="2030-01-01T00:00:00Z", lock_file="x.lock")
    )
    code, out, _ = run(str(MANIFEST), b)
    assert code == 0, out
    assert out.splitlines()[-1] == "identical"


def test_the_same_run_record_twice_is_identical(run: Run) -> None:
    code, out, _ = run(str(RUN_IMAGE), str(RUN_IMAGE))
    assert code == 0
    assert out.splitlines()[-1] == "identical"


def test_a_run_record_and_the_manifest_of_its_image_are_identical(run: Run) -> None:
    """Mixed: only what both carry is compared (no host, no run settings of the record)."""
    code, out, _ = run(str(MANIFEST), str(RUN_IMAGE))
    assert code == 0, out
    assert out.splitlines()[-1] == "identical"
    assert "b  run record " in out
    assert f"in image manifest {SHA[:12]}" in out


# -------------------------------------------------------------------------- one change each


def test_one_changed_package(run: Run, write: Callable[[str, Any], str]) -> None:
    data = manifest()
    data["distributions"] = [
        {"name": "idna", "version": "3.10"},
        {"name": "six", "version": "1.16.0"},
    ]
    code, out, err = run(str(MANIFEST), write("b.json", data))
    assert code == 1
    assert err == ""
    assert items(out) == ["~ six 1.17.0 -> 1.16.0"]
    assert "packages" in out.splitlines()
    assert out.splitlines()[-1] == "1 difference"


def test_packages_added_and_removed(run: Run, write: Callable[[str, Any], str]) -> None:
    data = manifest()
    data["distributions"] = [
        {"name": "Foo_Bar", "version": "1.0"},
        {"name": "six", "version": "1.17.0"},
    ]
    code, out, _ = run(str(MANIFEST), write("b.json", data))
    assert code == 1
    assert items(out) == ["+ Foo_Bar==1.0", "- idna==3.10"]
    assert out.splitlines()[-1] == "2 differences"


def test_package_names_are_compared_normalized(run: Run, write: Callable[[str, Any], str]) -> None:
    data = manifest()
    data["distributions"] = [
        {"name": "IDNA", "version": "3.10"},
        {"name": "six", "version": "1.17.0"},
    ]
    code, out, _ = run(str(MANIFEST), write("b.json", data))
    assert code == 0, out


def test_base_digest(run: Run, write: Callable[[str, Any], str]) -> None:
    a = read(MANIFEST)
    name = a["base_ref"].split("@")[0]
    b = write("b.json", manifest(base_digest=OTHER_DIGEST, base_ref=f"{name}@{OTHER_DIGEST}"))
    code, out, _ = run(str(MANIFEST), b)
    assert code == 1
    old = a["base_digest"]
    assert out.splitlines()[2:] == [
        "stack",
        f"  base.digest  {old[:19]}... -> sha256:{'ab' * 6}...",
        "1 difference",
    ]


def test_lock_hash(run: Run, write: Callable[[str, Any], str]) -> None:
    code, out, _ = run(str(MANIFEST), write("b.json", manifest(lock_sha256=OTHER_LOCK)))
    old = read(MANIFEST)["lock_sha256"]
    assert code == 1
    assert items(out) == [f"lock.sha256  {old[:12]}... -> {OTHER_LOCK[:12]}..."]
    assert out.splitlines()[-1] == "1 difference"


def test_a_changed_lock_selection(run: Run, write: Callable[[str, Any], str]) -> None:
    """Two images from the same uv.lock with different extras: diff names the selection."""
    cpu = {"extras": ["cpu"], "groups": [], "default_groups": False}
    cuda = {"extras": ["cu126"], "groups": ["train"], "default_groups": True}
    a = write("a.json", manifest(lock_format="uv.lock", lock_selection=cpu))
    same = write("same.json", manifest(lock_format="uv.lock", lock_selection=cpu))
    b = write("b.json", manifest(lock_format="uv.lock", lock_selection=cuda))
    assert run(a, same)[0] == 0
    code, out, _ = run(a, b)
    assert code == 1
    assert items(out) == [
        "lock.format  uv.lock (extras cpu) -> uv.lock (extras cu126; groups train; default groups)"
    ]


def test_several_changes_are_aligned_under_their_groups(
    run: Run, write: Callable[[str, Any], str]
) -> None:
    data = manifest(lock_sha256=OTHER_LOCK, python_version="3.12.1", seed=8)
    data["distributions"] = [{"name": "six", "version": "1.16.0"}]
    code, out, _ = run(str(MANIFEST), write("b.json", data))
    assert code == 1
    lines = out.splitlines()
    assert lines[2:] == [
        "stack",
        f"  lock.sha256   {read(MANIFEST)['lock_sha256'][:12]}... -> {OTHER_LOCK[:12]}...",
        "  python        3.11.2 -> 3.12.1",
        "packages",
        "  - idna==3.10",
        "  ~ six 1.17.0 -> 1.16.0",
        "run",
        "  default_seed  7 -> 8",
        "5 differences",
    ]


# ------------------------------------------------------------------------------------ json


def test_json_document(run: Run, write: Callable[[str, Any], str]) -> None:
    data = manifest(lock_sha256=OTHER_LOCK)
    data["distributions"] = [
        {"name": "numpy", "version": "2.4.6"},
        {"name": "six", "version": "1.16.0"},
    ]
    b = write("b.json", data)
    code, out, _ = run(str(MANIFEST), b, "--json")
    assert code == 1
    report = json.loads(out)
    assert report["schema_version"] == 1
    assert report["kind"] == "reprobuild.diff"
    assert report["identical"] is False
    assert report["count"] == 4
    assert report["same_image"] is False
    assert report["a"] == {
        "source": str(MANIFEST),
        "kind": "manifest",
        "description": report["a"]["description"],
        "manifest_sha256": SHA,
    }
    assert report["b"]["kind"] == "manifest"
    assert report["differences"] == [
        {
            "group": "stack",
            "key": "lock.sha256",
            "a": read(MANIFEST)["lock_sha256"],  # whole values in JSON
            "b": OTHER_LOCK,
        }
    ]
    assert report["packages"] == {
        "scope": "all",
        "added": [{"name": "numpy", "version": "2.4.6"}],
        "removed": [{"name": "idna", "version": "3.10"}],
        "changed": [{"name": "six", "a": "1.17.0", "b": "1.16.0"}],
    }


def test_json_identical(run: Run) -> None:
    code, out, _ = run("--json", str(MANIFEST), str(MANIFEST))
    report = json.loads(out)
    assert code == 0
    assert report["identical"] is True
    assert report["count"] == 0
    assert report["differences"] == []
    assert report["packages"] == {"scope": "all", "added": [], "removed": [], "changed": []}


def test_json_marks_a_key_one_side_lacks(run: Run, write: Callable[[str, Any], str]) -> None:
    b = write("b.json", manifest(stack={"cuda": "12.8"}))
    code, out, _ = run(str(MANIFEST), b, "--json")
    assert code == 1
    assert json.loads(out)["differences"] == [
        {"group": "stack", "key": "cuda", "a": None, "b": "12.8", "missing": "a"}
    ]


# ------------------------------------------------------------------------- the GPU stack


def test_gpu_stack_keys_are_compared_generically(
    run: Run, write: Callable[[str, Any], str]
) -> None:
    stack = {"cuda": "12.8", "cudnn": "9.7.0", "nccl": "2.25.1", "driver_min": "570.86"}
    a = write("a.json", manifest(stack=stack))
    b = write(
        "b.json",
        manifest(stack={**stack, "cuda": "12.9", "nccl": None}, extra={"flag": True, "n": 2}),
    )
    code, out, _ = run(a, b)
    assert code == 1
    assert items(out) == [
        "cuda        12.8 -> 12.9",
        "nccl        2.25.1 -> (absent)",
        "extra.flag  (absent) -> true",
        "extra.n     (absent) -> 2",
    ]


def test_a_gpu_section_is_read_like_a_stack_section(
    run: Run, write: Callable[[str, Any], str]
) -> None:
    a = write("a.json", manifest(gpu={"cuda": "12.8", "driver_min": "570"}))
    b = write("b.json", manifest(stack={"cuda": "12.8", "driver_min": "575"}))
    code, out, _ = run(a, b)
    assert code == 1
    assert items(out) == ["driver_min  570 -> 575"]


def test_a_null_section_is_no_section(run: Run, write: Callable[[str, Any], str]) -> None:
    code, out, _ = run(str(MANIFEST), write("b.json", manifest(gpu=None, stack={"cuda": None})))
    assert code == 0, out


def test_cuda_of_a_manifest_against_a_runs_base_image(
    run: Run, write: Callable[[str, Any], str]
) -> None:
    record = read(RUN_IMAGE)
    record["stack_env"] = {
        "CUDA_VERSION": "12.9",
        "NCCL_VERSION": "2.25.1",
        "CUDA_VISIBLE_DEVICES": "0",
    }
    a = write("a.json", manifest(stack={"cuda": "12.8", "nccl": "2.25.1", "driver_min": "570"}))
    sha = hashlib.sha256(Path(a).read_bytes()).hexdigest()
    code, out, _ = run(a, write("run.json", record))
    assert code == 1
    # driver_min and CUDA_VISIBLE_DEVICES: only one side has them, so they are not compared
    assert items(out) == [
        f"manifest.sha256  {sha[:12]}... -> {SHA[:12]}...",
        "cuda             12.8 -> 12.9",
    ]


def test_the_gpu_stack_a_run_record_copies_from_its_manifest(
    run: Run, write: Callable[[str, Any], str]
) -> None:
    """A record's image section carries the manifest's gpu mapping: compared key by key, and
    before the base image's CUDA_VERSION."""
    gpu = {"cuda": "12.8", "cudnn": "9.7.0", "driver_min": "570"}
    a = write("a.json", manifest(gpu=gpu))
    record = read(RUN_IMAGE)
    record["image"]["sha256"] = hashlib.sha256(Path(a).read_bytes()).hexdigest()
    record["image"]["gpu"] = {**gpu, "driver_min": "575"}
    record["stack_env"] = {"CUDA_VERSION": "12.8.0.038"}
    code, out, _ = run(a, write("run.json", record))
    assert code == 1
    assert items(out) == ["driver_min  570 -> 575"]


def test_cudnn_versions_from_torch_read_as_dotted() -> None:
    assert _cudnn(90100) == "9.1.0"
    assert _cudnn(8902) == "8.9.2"
    assert _cudnn(91002) == "9.10.2"
    assert _cudnn(None) is None
    assert _cudnn("9.1.0") == "9.1.0"


# --------------------------------------------------------------------------- run records


def test_run_records_host_and_run_groups(run: Run, write: Callable[[str, Any], str]) -> None:
    record = read(RUN_IMAGE)
    other = copy.deepcopy(record)
    other["run_id"] = "20261122T090000Z-ffffffff"
    other["started"] = "2026-11-22T09:00:00.000Z"
    other["host"]["hostname"] = "elsewhere"
    other["host"]["cpu"]["model"] = "Intel(R) Xeon(R) Platinum 8480+"
    other["host"]["gpu"] = {
        "source": "nvidia-smi",
        "driver_version": "570.86.15",
        "devices": [
            {"name": "NVIDIA H100 80GB HBM3", "driver_version": "570.86.15", "compute_cap": "9.0"},
            {"name": "NVIDIA H100 80GB HBM3", "driver_version": "570.86.15", "compute_cap": "9.0"},
        ],
    }
    other["determinism"]["seed"] = 3
    other["determinism"]["seed_source"] = "REPRO_SEED"
    other["environment"]["set"]["PYTHONHASHSEED"] = "3"
    code, out, _ = run(write("a.json", record), write("b.json", other))
    assert code == 1
    lines = out.splitlines()
    host = lines.index("host")
    assert lines[host : host + 4] == [
        "host",
        "  cpu.model           AMD EPYC -> Intel(R) Xeon(R) Platinum 8480+",
        "  gpu.devices         none -> 2 x NVIDIA H100 80GB HBM3 (sm 9.0)",
        "  gpu.driver          (none) -> 570.86.15",
    ]
    assert lines[host + 4 :] == [
        "run",
        "  seed                7 -> 3",
        "  env.PYTHONHASHSEED  7 -> 3",
        # Another CPU (issue 31): the cause is named, not only the field.
        "cause: native mode on AMD EPYC vs Intel(R) Xeon(R) Platinum 8480+: expected to differ "
        "(each library dispatches by CPU); use portable (REPRO_CPU=portable) for the same bits "
        "on every x86-64 CPU",
        "5 differences",
    ]


def test_runs_in_two_images(run: Run, write: Callable[[str, Any], str]) -> None:
    other = read(RUN_IMAGE)
    other["image"]["sha256"] = "ee" * 32
    other["image"]["lock_sha256"] = OTHER_LOCK
    code, out, _ = run(str(RUN_IMAGE), write("b.json", other))
    assert code == 1
    lock = read(MANIFEST)["lock_sha256"]
    assert items(out) == [
        f"manifest.sha256  {SHA[:12]}... -> {'ee' * 6}...",
        f"lock.sha256      {lock[:12]}... -> {OTHER_LOCK[:12]}...",
    ]


def test_a_manifest_against_a_run_in_another_image(
    run: Run, write: Callable[[str, Any], str]
) -> None:
    other = read(RUN_IMAGE)
    other["image"]["sha256"] = "ee" * 32
    code, out, _ = run(str(MANIFEST), write("b.json", other), "--json")
    report = json.loads(out)
    assert code == 1
    assert report["same_image"] is False
    assert report["differences"] == [
        {"group": "stack", "key": "manifest.sha256", "a": SHA, "b": "ee" * 32}
    ]


def test_a_manifest_against_a_run_outside_any_image(run: Run) -> None:
    """A host run has no image: its stack is compared on Python, machine, variant and the
    default settings; the host and the run's own settings are not in a manifest."""
    code, out, _ = run(str(MANIFEST), str(RUN_HOST))
    assert code == 1
    host_python = read(RUN_HOST)["python"]["version"]
    assert items(out) == [
        f"manifest.sha256  {SHA[:12]}... -> (none)",
        f"python           3.11.2 -> {host_python}",
        "default_seed     7 -> 0",
        "default_mode     warn -> strict",
    ]
    assert out.splitlines()[-2].startswith("note: packages compared only where both list them")


def test_a_run_in_an_image_against_one_outside(run: Run) -> None:
    code, out, _ = run(str(RUN_IMAGE), str(RUN_HOST), "--json")
    assert code == 1
    by_key = {(d["group"], d["key"]): d for d in json.loads(out)["differences"]}
    assert by_key[("stack", "base.digest")]["missing"] == "b"
    assert by_key[("stack", "manifest.sha256")]["b"] is None
    assert by_key[("run", "command")] == {
        "group": "run",
        "key": "command",
        "a": ["python", "hello.py"],
        "b": ["true"],
    }
    assert ("host", "cpu.model") not in by_key  # the same machine wrote both


def test_framework_records_beside_a_run_record_are_read(
    run: Run, write: Callable[[str, Any], str]
) -> None:
    """numpy's version comes from the framework record the program's process wrote."""
    record, frameworks = read(NUMPY_RUN), read(NUMPY_FRAMEWORKS)
    frameworks["framework_settings"]["numpy"]["version"] = "2.4.5"
    frameworks["framework_settings"]["torch"] = {
        "version": "2.13.0+cpu",
        "cuda": None,
        "cudnn_version": None,
    }
    b = write(f"b/{NUMPY_RUN.name}", record)
    write(f"b/{NUMPY_FRAMEWORKS.name}", frameworks)
    code, out, _ = run(str(NUMPY_RUN), b)
    assert code == 1
    assert items(out) == ["~ numpy 2.4.6 -> 2.4.5"]
    assert "1 framework record" in out.splitlines()[0]

    # a run that imported no framework says nothing about numpy: not a difference
    code, out, _ = run(str(NUMPY_RUN), write(f"c/{NUMPY_RUN.name}", record))
    assert code == 0, out
    assert "0 framework records" in out.splitlines()[1]


def test_frameworks_a_run_saw_against_a_manifest() -> None:
    numpy_run = load(str(NUMPY_RUN))
    assert {k: (d.name, d.version) for k, d in numpy_run.packages.items()} == {
        "numpy": ("numpy", read(NUMPY_FRAMEWORKS)["framework_settings"]["numpy"]["version"])
    }
    data = manifest()
    data["distributions"].append({"name": "numpy", "version": "1.26.4"})
    result = compare(from_document(data, source="m"), numpy_run)
    assert [(c.name, c.a, c.b) for c in result.changed] == [("numpy", "1.26.4", "2.4.6")]
    assert result.added == result.removed == ()  # idna and six: the run did not import them
    assert result.package_scope == "common"


def test_what_torch_was_built_with() -> None:
    record = read(RUN_IMAGE)
    frameworks = [
        {
            "framework_settings": {
                "torch": {
                    "version": "2.13.0",
                    "cuda": "12.8",
                    "cudnn_version": 90701,
                    "nccl_version": "2.26.2",
                },
                "tensorflow": {
                    "version": "2.21.0",
                    "build_info": {"cuda_version": "12.5.1", "cudnn_version": "9"},
                },
            }
        }
    ]
    stack = from_run_record(record, source="r", frameworks=frameworks)
    assert {k: v for (g, k), v in stack.values.items() if "." in k and k[0] == "t"} == {
        "torch.cuda": "12.8",
        "torch.cudnn": "9.7.1",
        "torch.nccl": "2.26.2",
        "tensorflow.cuda": "12.5.1",
        "tensorflow.cudnn": "9",
    }
    # a run that imported torch against one that did not: nothing to compare, no difference
    assert compare(stack, from_run_record(record, source="r2")).identical


# --------------------------------------------------------------------------------- errors


def error_line(err: str) -> str:
    lines = err.splitlines()
    assert lines[0].startswith("error: "), err
    assert all(line.startswith("hint: ") for line in lines[1:]), err
    return lines[0]


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"{not json", "is not valid JSON: Expecting property name"),
        (b"\xff\xfe", "is not valid JSON"),
        (b"[1, 2]", "is not a JSON object, so neither an image manifest nor a run record"),
        (b'{"a": 1}', "is neither an image manifest (schema_version, lock_sha256, distributions)"),
        (b'{"kind": "mystery"}', "unknown document kind 'mystery'"),
        (b'{"kind": "reprobuild.frameworks"}', "is a framework record: give the run record"),
        (b'{"kind": "reprobuild.verify"}', "is a verify report: give two run records"),
        (
            b'{"kind": "reprobuild.run", "schema_version": 2}',
            "run record schema_version 2 is not supported",
        ),
        (
            b'{"schema_version": 1, "lock_sha256": "x", "distributions": []}',
            "manifest is missing field",
        ),
        (
            b'{"schema_version": 9, "lock_sha256": "x", "distributions": []}',
            "manifest schema_version 9 is not supported",
        ),
    ],
)
def test_unreadable_inputs_exit_2_with_one_error_line(
    run: Run, tmp_path: Path, content: bytes, expected: str
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_bytes(content)
    code, out, err = run(str(MANIFEST), str(bad))
    assert (code, out) == (2, "")
    line = error_line(err)
    assert line.startswith(f"error: {bad}")
    assert expected in line


def test_a_missing_file(run: Run, tmp_path: Path) -> None:
    missing = tmp_path / "nope.json"
    code, out, err = run(str(missing), str(MANIFEST))
    assert (code, out) == (2, "")
    assert error_line(err) == f"error: {missing}: no such file"


def test_a_directory(run: Run) -> None:
    code, _, err = run(str(MANIFEST), str(NUMPY_DIR))
    assert code == 2
    assert error_line(err) == (
        f"error: {NUMPY_DIR} is a directory: give the manifest.json or run-<id>.json in it"
    )


def test_a_broken_framework_record_is_named(
    run: Run, write: Callable[[str, Any], str], tmp_path: Path
) -> None:
    record = read(NUMPY_RUN)
    b = write(f"b/{NUMPY_RUN.name}", record)
    broken = tmp_path / "b" / NUMPY_FRAMEWORKS.name
    broken.write_text("{")
    code, _, err = run(str(NUMPY_RUN), b)
    assert code == 2
    assert error_line(err).startswith(f"error: {broken} is not valid JSON")


def test_an_image_not_on_the_engine() -> None:
    class NoImages:
        def image_id(self, ref: str) -> None:
            return None

    with pytest.raises(DiffInputError) as info:
        load_image(NoImages(), "team/nothing:here")  # type: ignore[arg-type]
    assert info.value.message == "'team/nothing:here' is neither a file nor an image on this engine"
    assert info.value.exit_code == 2


def test_an_image_name_without_an_engine(run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    for var in ("DOCKER_CONTEXT", "DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH"):
        monkeypatch.delenv(var, raising=False)
    # docker-py leaks the socket of its failed connect; collect it here (as test_cli does)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        try:
            code, out, err = run(str(MANIFEST), "team/nothing:here")
        finally:
            gc.collect()
    assert (code, out) == (2, "")
    assert error_line(err).startswith(
        "error: 'team/nothing:here' is not a file, and it cannot be looked up as an image: "
        "no Docker engine answers at unix:///nonexistent/docker.sock"
    )


def test_a_path_is_never_looked_up_as_an_image(run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    for value in ("./manifest", "/no/such/record", "run-x.json"):
        code, _, err = run(str(MANIFEST), value)
        assert code == 2
        assert error_line(err) == f"error: {value}: no such file"


def test_bad_usage_exits_2(run: Run) -> None:
    code, _, err = run(str(MANIFEST))
    assert code == 2
    assert "the following arguments are required: B" in err
