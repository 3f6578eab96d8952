"""capture_rng_state / restore_rng_state (issue 12) against real torch and NumPy, in a child
interpreter started with the runtime's hook (as in an image). TensorFlow and Keras are not on
the host: tests/engine/test_resume.py covers them in containers.

One child program does every check and prints the results as JSON (it pays for ``import
torch`` once); each test asserts one of them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from unit.test_runtime_frameworks import RUNTIME_ROOT, container_env, output, run

pytestmark = pytest.mark.heavy

PROGRAM = r"""
import io, json, os, pickle, random
import numpy as np
import torch
from torch.utils.data import DataLoader
import reprobuild_entrypoint
from reprobuild_entrypoint import RngStateError, capture_rng_state, restore_rng_state
from reprobuild_entrypoint import frameworks

results = {}
module_rng = np.random.default_rng()  # made by the runtime's unseeded default_rng


def draws():
    return [random.random(), float(np.random.rand()), float(torch.rand(1)),
            float(module_rng.random()), float(np.random.default_rng().random())]


def fingerprint():
    return [random.getstate()[1][:3], np.random.get_state()[2], torch.get_rng_state()[:8].tolist(),
            frameworks.DEFAULT_RNG["calls"], module_rng.bit_generator.state["state"]["state"]]


draws()
state = capture_rng_state(epochs_done=3)
buffer = io.BytesIO()
torch.save({"rng": state}, buffer)
expected = draws()
buffer.seek(0)
position = restore_rng_state(torch.load(buffer, weights_only=False)["rng"])
results["roundtrip"] = [expected, draws()]
results["position"] = position
results["plain_types"] = sorted({type(v).__name__ for v in state.values()})


def refused(bad, **kw):
    before = fingerprint()
    try:
        restore_rng_state(bad, **kw)
    except RngStateError as exc:
        return {"message": str(exc), "unchanged": fingerprint() == before}
    return {"message": None, "unchanged": fingerprint() == before}


def repacked(change):
    payload = pickle.loads(state["payload"])
    change(payload)
    blob = pickle.dumps(payload, protocol=4)
    import hashlib
    return {**state, "payload": blob, "sha256": hashlib.sha256(blob).hexdigest()}


results["foreign"] = refused({"model": {}, "optimizer": {}})
results["not_a_dict"] = refused(b"\x80\x04garbage")
results["truncated"] = refused({**state, "payload": state["payload"][:-40]})
results["other_runtime"] = refused({**state, "runtime_version": "0.0.9"})
results["other_format"] = refused({**state, "format": 2})
results["other_torch"] = refused(repacked(lambda p: p["versions"].update(torch="2.12.0")))
results["other_world"] = refused(repacked(lambda p: p["world"].update(world_size=4, rank=1)))
results["bad_numpy_key"] = refused(repacked(lambda p: p["numpy"].update(
    legacy=(p["numpy"]["legacy"][0], p["numpy"]["legacy"][1][:100], *p["numpy"]["legacy"][2:]))))
results["bad_numpy_pos"] = refused(repacked(lambda p: p["numpy"].update(
    legacy=(*p["numpy"]["legacy"][:2], 10**6, *p["numpy"]["legacy"][3:]))))
# a crafted payload that would run code when unpickled, with a matching sha256
class Boom:
    def __reduce__(self):
        return (os.system, ("touch " + os.environ["BOOM_MARKER"],))
evil = pickle.dumps({"versions": {}, "world": {}, "position": {}, "x": Boom()}, protocol=4)
import hashlib as _h
evil_state = {**state, "payload": evil, "sha256": _h.sha256(evil).hexdigest()}
results["code_in_payload"] = refused(evil_state)
results["code_ran"] = os.path.exists(os.environ["BOOM_MARKER"])
odd = pickle.dumps([1, 2], protocol=4)
results["odd_payload"] = refused({**state, "payload": odd, "sha256": _h.sha256(odd).hexdigest()})
try:
    capture_rng_state(epochs_done=1, batches_done=5)
    results["mid_epoch"] = None
except RngStateError as exc:
    results["mid_epoch"] = str(exc)

# a failure while applying puts back what was already applied (NumPy goes before torch)
real = torch.set_rng_state
def broken(_state):
    raise RuntimeError("simulated")
torch.set_rng_state = broken
results["rollback"] = refused(state)
torch.set_rng_state = real
# ... and so does a failure in the last step that has a backup: everything before it (NumPy's
# Generators, torch) is put back, and NumPy's legacy state, applied after it, never changes
real_setstate = random.setstate
random.setstate = broken
results["rollback_late"] = refused(state)
random.setstate = real_setstate

# a DataLoader with its own generator
gen = torch.Generator().manual_seed(5)
loader = DataLoader(list(range(20)), batch_size=5, shuffle=True, generator=gen)
list(loader)
saved = capture_rng_state(loaders=[loader])
order = [b.tolist() for b in loader]
restore_rng_state(saved, loaders=[loader])
results["loader"] = [order, [b.tolist() for b in loader]]
results["loader_missing"] = refused(saved)
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def site_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("site")
    (folder / "reprobuild.pth").write_text(
        f"{RUNTIME_ROOT}\nimport reprobuild_entrypoint._startup\n"
    )
    return folder


@pytest.fixture(scope="module")
def results(site_dir: Path) -> dict[str, Any]:
    marker = site_dir / "boom-marker"
    env = {**container_env(), "BOOM_MARKER": str(marker)}
    data: dict[str, Any] = output(run(site_dir, PROGRAM, env))
    return data


def test_a_payload_that_names_code_is_refused_before_it_runs(results: dict[str, Any]) -> None:
    bad = results["code_in_payload"]
    assert bad["message"].startswith("RNG state payload names posix.system")
    assert bad["unchanged"] and results["code_ran"] is False
    odd = results["odd_payload"]
    assert odd["message"] == "RNG state payload is not one that capture_rng_state() writes"
    assert odd["unchanged"]


def test_restore_gives_the_same_draws_after_a_torch_save_roundtrip(results: dict[str, Any]) -> None:
    expected, again = results["roundtrip"]
    assert again == expected  # random, NumPy legacy, torch, a default_rng() Generator, counter
    assert results["position"] == {"epochs_done": 3, "batches_done": 0}
    assert results["plain_types"] == ["bytes", "int", "str"]


@pytest.mark.parametrize(
    ("case", "words"),
    [
        ("foreign", "not a reprobuild RNG state (got dict with keys ['model', 'optimizer'])"),
        ("not_a_dict", "not a reprobuild RNG state (got bytes)"),
        ("truncated", "damaged"),
        ("other_runtime", "reprobuild runtime 0.0.9 (format 1), this is runtime 0.1.0"),
        ("other_format", "(format 2), this is runtime 0.1.0 (format 1)"),
        ("other_torch", "saved with torch 2.12.0, this process has torch 2."),
        ("other_world", "rank 1 of world size 4, restored in rank 0 of world size 1"),
        ("bad_numpy_key", "NumPy's MT19937 key is not 624 words"),
        ("bad_numpy_pos", "NumPy's legacy MT19937 state does not fit"),
        ("rollback", "the state before the call was put back"),
        ("rollback_late", "the state before the call was put back"),
        ("loader_missing", "generator of DataLoader 0 in loaders="),
    ],
)
def test_bad_state_is_refused_in_one_line_and_changes_nothing(
    results: dict[str, Any], case: str, words: str
) -> None:
    refused = results[case]
    assert refused["message"] is not None and words in refused["message"], refused
    assert "\n" not in refused["message"]
    assert refused["unchanged"], f"{case}: the RNG state changed although restore refused"


def test_mid_epoch_capture_is_refused(results: dict[str, Any]) -> None:
    assert "mid-epoch checkpoints are not supported" in results["mid_epoch"]


def test_dataloader_generator_is_restored(results: dict[str, Any]) -> None:
    order, again = results["loader"]
    assert again == order
