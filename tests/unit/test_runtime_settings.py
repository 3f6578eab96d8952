"""The runtime's pure parts: settings resolution and the environment plan."""

from __future__ import annotations

import pytest

from reprobuild_entrypoint import envplan
from reprobuild_entrypoint.envplan import EnvPlan, apply, image_env, plan
from reprobuild_entrypoint.settings import (
    DEFAULT_THREADS,
    SEED_MAX,
    Settings,
    SettingsError,
    from_environ,
    rank_seed,
)

IMAGE = {
    "REPROBUILD_IMAGE_SEED": "11",
    "REPROBUILD_IMAGE_DETERMINISM": "strict",
    "REPROBUILD_VARIANT": "gpu",
}


def baked(**extra: str) -> dict[str, str]:
    """An image's environment: its REPROBUILD_* variables and the ENV baked from image_env."""
    return {**IMAGE, **image_env(11, "strict", "gpu"), **extra}


# ------------------------------------------------------------------------------- settings


def test_defaults_outside_an_image() -> None:
    s = from_environ({})
    assert (s.seed, s.seed_source, s.mode, s.mode_source) == (0, "default", "strict", "default")
    assert (s.threads, s.variant, s.rank, s.rank_seed) == (DEFAULT_THREADS, "cpu", None, 0)


def test_image_values_then_run_overrides() -> None:
    s = from_environ(IMAGE)
    assert (s.seed, s.seed_source, s.mode, s.variant) == (
        11,
        "REPROBUILD_IMAGE_SEED",
        "strict",
        "gpu",
    )
    s = from_environ(
        {**IMAGE, "REPRO_SEED": "42", "REPRO_DETERMINISM": "warn", "REPRO_THREADS": "8"}
    )
    assert (s.seed, s.seed_source, s.mode, s.mode_source) == (
        42,
        "REPRO_SEED",
        "warn",
        "REPRO_DETERMINISM",
    )
    assert (s.image_seed, s.image_mode, s.threads, s.threads_source) == (
        11,
        "strict",
        8,
        "REPRO_THREADS",
    )


def test_empty_values_count_as_unset() -> None:
    s = from_environ({**IMAGE, "REPRO_SEED": "", "REPRO_DETERMINISM": "  ", "REPRO_THREADS": ""})
    assert (s.seed, s.mode, s.threads) == (11, "strict", DEFAULT_THREADS)


@pytest.mark.parametrize("text", ["0", "7", str(SEED_MAX), " 12 "])
def test_valid_seeds(text: str) -> None:
    assert from_environ({"REPRO_SEED": text}).seed == int(text)


@pytest.mark.parametrize(
    "text", ["-1", str(SEED_MAX + 1), "abc", "1.5", "+3", "1_000", "٣", "0x10"]
)
def test_bad_seed_is_one_clear_line(text: str) -> None:
    with pytest.raises(SettingsError) as info:
        from_environ({"REPRO_SEED": text})
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"REPRO_SEED={text.strip()!r} is not a valid seed")
    assert f"0 to {SEED_MAX}" in message


@pytest.mark.parametrize("text", ["lenient", "on", "1"])
def test_bad_mode_lists_the_allowed_ones(text: str) -> None:
    with pytest.raises(SettingsError, match=r"REPRO_DETERMINISM=.* use one of strict, warn, off"):
        from_environ({"REPRO_DETERMINISM": text})


def test_mode_is_case_insensitive() -> None:
    assert from_environ({"REPRO_DETERMINISM": "WARN"}).mode == "warn"


@pytest.mark.parametrize("text", ["0", "-2", "1025", "four"])
def test_bad_thread_count(text: str) -> None:
    with pytest.raises(SettingsError, match="REPRO_THREADS"):
        from_environ({"REPRO_THREADS": text})


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("REPROBUILD_IMAGE_SEED", "x"),
        ("REPROBUILD_IMAGE_DETERMINISM", "x"),
        ("REPROBUILD_VARIANT", "tpu"),
    ],
)
def test_bad_baked_values_are_refused_too(name: str, text: str) -> None:
    with pytest.raises(SettingsError, match=name):
        from_environ({name: text})


def test_rank_seeds() -> None:
    env = {"REPRO_SEED": "100", "RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "8"}
    s = from_environ(env)
    assert (s.rank, s.local_rank, s.world_size, s.rank_seed) == (3, 1, 8, 103)
    assert from_environ({**env, "RANK": "0"}).rank_seed == 100  # rank 0 uses the seed itself
    assert rank_seed(SEED_MAX, 2) == 1  # wraps into the 32-bit range
    seeds = {from_environ({**env, "RANK": str(r)}).rank_seed for r in range(8)}
    assert len(seeds) == 8


def test_launcher_variables_that_are_not_numbers_are_ignored() -> None:
    s = from_environ({"REPRO_SEED": "5", "RANK": "admin", "WORLD_SIZE": "-1"})
    assert (s.rank, s.world_size, s.rank_seed) == (None, None, 5)


def test_settings_value_semantics() -> None:
    assert from_environ(IMAGE) == from_environ(dict(IMAGE))
    assert from_environ(IMAGE) != from_environ({})
    assert "seed=11" in repr(from_environ(IMAGE))
    assert from_environ(IMAGE).as_dict()["rank_seed"] == 11


# ------------------------------------------------------------------------------ image_env


def test_image_env_strict_gpu() -> None:
    env = image_env(11, "strict", "gpu")
    assert env == {
        "CUBLAS_WORKSPACE_CONFIG": ":4096:8",
        "MKL_CBWR": "AUTO,STRICT",
        "MKL_DYNAMIC": "FALSE",
        "MKL_NUM_THREADS": "4",
        "NCCL_ALGO": "Ring",
        "NCCL_NVLS_ENABLE": "0",
        "NVIDIA_TF32_OVERRIDE": "0",
        "OMP_DYNAMIC": "FALSE",
        "OMP_NUM_THREADS": "4",
        "OPENBLAS_NUM_THREADS": "4",
        "PYTHONHASHSEED": "11",
        "TF_CUDNN_DETERMINISTIC": "1",
        "TF_DETERMINISTIC_OPS": "1",
        "TF_ENABLE_ONEDNN_OPTS": "1",
        "TF_NUM_INTEROP_THREADS": "4",
        "TF_NUM_INTRAOP_THREADS": "4",
        "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": "0",
        "TORCHINDUCTOR_DETERMINISTIC": "1",
    }
    assert list(env) == sorted(env)  # stable order for rendering ENV lines


def test_image_env_by_mode_and_variant() -> None:
    assert image_env(3, "off", "gpu") == {}
    warn = image_env(3, "warn", "gpu")
    # TF_DETERMINISTIC_OPS=1 is enable_op_determinism() (raising); TF32 override is strict only.
    assert "TF_DETERMINISTIC_OPS" not in warn and "NVIDIA_TF32_OVERRIDE" not in warn
    assert warn["TF_CUDNN_DETERMINISTIC"] == "1" and warn["PYTHONHASHSEED"] == "3"
    # oneDNN was measured deterministic under op determinism (strict) only: warn keeps Eigen.
    assert warn["TF_ENABLE_ONEDNN_OPTS"] == "0"
    assert image_env(3, "strict", "gpu")["TF_ENABLE_ONEDNN_OPTS"] == "1"
    cpu = image_env(3, "strict", "cpu")
    assert not {"CUBLAS_WORKSPACE_CONFIG", "NCCL_ALGO", "NVIDIA_TF32_OVERRIDE"} & cpu.keys()
    assert image_env(3, "strict", "cpu", threads=16)["OMP_NUM_THREADS"] == "16"


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((-1, "strict", "cpu"), "seed"),
        ((2**32, "strict", "cpu"), "seed"),
        ((0, "x", "cpu"), "mode"),
        ((0, "strict", "tpu"), "variant"),
    ],
)
def test_image_env_refuses_bad_values(args: tuple[int, str, str], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        image_env(*args)


def test_image_env_values_are_plain_strings() -> None:
    # They are rendered into Dockerfile ENV lines: no quotes, spaces or newlines to escape.
    for mode in ("strict", "warn"):
        for value in image_env(SEED_MAX, mode, "gpu").values():
            assert value and all(ch.isalnum() or ch in ":,_." for ch in value), value


# ----------------------------------------------------------------------------------- plan


def test_plan_on_a_fresh_image_sets_everything() -> None:
    env = baked()
    p = plan(env, from_environ(env))
    assert p == EnvPlan({**image_env(11, "strict", "gpu"), **envplan.WAIT_POLICY}, {}, ())


def test_user_set_value_wins_and_is_recorded() -> None:
    env = baked(OMP_NUM_THREADS="2", NCCL_ALGO="Tree")
    p = plan(env, from_environ(env))
    assert p.user_set == {"NCCL_ALGO": "Tree", "OMP_NUM_THREADS": "2"}
    assert "OMP_NUM_THREADS" not in p.set and p.set["MKL_NUM_THREADS"] == "4"
    apply(p, env)
    assert env["OMP_NUM_THREADS"] == "2" and env["NCCL_ALGO"] == "Tree"


def test_value_equal_to_the_baked_default_is_ours() -> None:
    env = baked(OMP_NUM_THREADS="4")  # the user typed the baked value: indistinguishable
    assert "OMP_NUM_THREADS" not in plan(env, from_environ(env)).user_set


def test_pythonhashseed_follows_repro_seed() -> None:
    env = baked(REPRO_SEED="99")
    p = plan(env, from_environ(env))
    assert p.set["PYTHONHASHSEED"] == "99" and not p.user_set
    apply(p, env)
    assert env["PYTHONHASHSEED"] == "99"


def test_pythonhashseed_set_by_the_user_is_kept() -> None:
    env = baked(REPRO_SEED="99", PYTHONHASHSEED="5")
    p = plan(env, from_environ(env))
    assert p.user_set == {"PYTHONHASHSEED": "5"} and "PYTHONHASHSEED" not in p.set


def test_pythonhashseed_is_the_run_seed_on_every_rank() -> None:
    env = baked(REPRO_SEED="99", RANK="3")
    assert plan(env, from_environ(env)).set["PYTHONHASHSEED"] == "99"


def test_repro_threads_overrides_the_baked_count() -> None:
    env = baked(REPRO_THREADS="12")
    p = plan(env, from_environ(env))
    for name in envplan.THREAD_VARIABLES:
        assert p.set[name] == "12"


def test_off_removes_the_baked_defaults_but_keeps_the_users() -> None:
    env = baked(REPRO_DETERMINISM="off", OMP_NUM_THREADS="2")
    p = plan(env, from_environ(env))
    assert p.set == {} and p.user_set == {"OMP_NUM_THREADS": "2"}
    assert "PYTHONHASHSEED" in p.remove and "OMP_NUM_THREADS" not in p.remove
    apply(p, env)
    assert "PYTHONHASHSEED" not in env and "CUBLAS_WORKSPACE_CONFIG" not in env
    assert env["OMP_NUM_THREADS"] == "2"
    assert env["REPROBUILD_IMAGE_SEED"] == "11"  # only determinism variables are touched


def test_warn_on_a_strict_image_drops_the_strict_only_switches() -> None:
    env = baked(REPRO_DETERMINISM="warn")
    p = plan(env, from_environ(env))
    assert set(p.remove) == {"NVIDIA_TF32_OVERRIDE", "TF_DETERMINISTIC_OPS"}
    apply(p, env)
    assert "TF_DETERMINISTIC_OPS" not in env and env["TF_CUDNN_DETERMINISTIC"] == "1"


def test_strict_on_an_off_image_sets_everything() -> None:
    env = {**IMAGE, "REPROBUILD_IMAGE_DETERMINISM": "off", "REPRO_DETERMINISM": "strict"}
    p = plan(env, from_environ(env))
    assert p.set == {**image_env(11, "strict", "gpu"), **envplan.WAIT_POLICY} and p.remove == ()


@pytest.mark.parametrize(
    "extra",
    [
        {},
        {"REPRO_SEED": "3"},
        {"REPRO_DETERMINISM": "off"},
        {"REPRO_DETERMINISM": "warn"},
        {"REPRO_THREADS": "2", "OMP_NUM_THREADS": "7"},
    ],
)
def test_plan_is_idempotent(extra: dict[str, str]) -> None:
    env = baked(**extra)
    first = plan(env, from_environ(env))
    apply(first, env)
    again = plan(env, from_environ(env))
    assert again == first
    before = dict(env)
    apply(again, env)
    assert env == before


def test_plan_outside_an_image() -> None:
    p = plan({}, from_environ({}))
    assert p.set == {**image_env(0, "strict", "cpu"), "OMP_WAIT_POLICY": "PASSIVE"}
    assert p.remove == () and p.user_set == {}


def test_threads_wait_passively_unless_the_user_says_otherwise() -> None:
    """Set at run time, not baked (images render as before); off leaves it alone, a value of
    the user's (ACTIVE, or empty: the library's default) is kept."""
    assert "OMP_WAIT_POLICY" not in image_env(0, "strict", "cpu")
    assert plan({}, from_environ({})).set["OMP_WAIT_POLICY"] == "PASSIVE"
    warn = {"REPRO_DETERMINISM": "warn"}
    assert plan(warn, from_environ(warn)).set["OMP_WAIT_POLICY"] == "PASSIVE"
    off = {"REPRO_DETERMINISM": "off"}
    assert "OMP_WAIT_POLICY" not in plan(off, from_environ(off)).set
    for mine in ("ACTIVE", ""):
        env = {"OMP_WAIT_POLICY": mine}
        p = plan(env, from_environ(env))
        assert p.user_set == {"OMP_WAIT_POLICY": mine} and "OMP_WAIT_POLICY" not in p.set


def test_envplan_value_semantics() -> None:
    assert EnvPlan({"A": "1"}, {}, ()) == EnvPlan({"A": "1"}, {}, ())
    assert "A" in repr(EnvPlan({"A": "1"}, {}, ()))
    assert Settings() == from_environ({})
