"""load_config: every validation branch of reprobuild.yaml, each checked by its message."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import yaml

from reprobuild.errors import ConfigError
from reprobuild.project.config import KEYS, SEED_MAX, LockSelection, ProjectConfig, load_config

MINIMAL = "name: demo\nlock: requirements.lock\nbase:\n  cpu: python-3.11-slim-bookworm\n"
PINNED = "registry.example.com:5000/team/base:1@sha256:" + "ab" * 32


def project(tmp_path: Path, text: str | bytes, *files: str) -> Path:
    """A project dir with reprobuild.yaml, a requirements.lock and the given extra files."""
    root = tmp_path / "proj"
    root.mkdir()
    (root / "requirements.lock").write_text("six==1.17.0 --hash=sha256:" + "0" * 64 + "\n")
    for rel in files:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x\n")
    data = text.encode() if isinstance(text, str) else text
    (root / "reprobuild.yaml").write_bytes(data)
    return root


def config_with(tmp_path: Path, *files: str, **values: object) -> ProjectConfig:
    """load_config on MINIMAL with top-level keys replaced/added (None removes a key)."""
    data = yaml.safe_load(MINIMAL)
    for key, value in values.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    return load_config(project(tmp_path, yaml.safe_dump(data), *files))


def refused(tmp_path: Path, *files: str, **values: object) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        config_with(tmp_path, *files, **values)
    assert info.value.message.startswith(str(tmp_path.resolve() / "proj" / "reprobuild.yaml"))
    return info.value


# --------------------------------------------------------------------------- valid configs


def test_minimal_config_defaults(tmp_path: Path) -> None:
    root = project(tmp_path, MINIMAL)
    config = load_config(root)
    assert config == ProjectConfig(
        root=root.resolve(),
        name="demo",
        lock=root.resolve() / "requirements.lock",
        base_cpu="python-3.11-slim-bookworm",
    )
    assert config.gpu_lock is None
    assert config.base_gpu is None
    assert config.seed == 0
    assert config.determinism == "strict"
    assert config.include == ()
    assert config.command == ()
    assert config.apt == ()
    assert config.config_path == root.resolve() / "reprobuild.yaml"


def test_full_config(tmp_path: Path) -> None:
    text = f"""
name: team/my-model_v2.1
lock: requirements.lock
gpu_lock: locks/gpu.lock
base:
  cpu: python-3.11-slim-bookworm
  gpu: "{PINNED}"
seed: {SEED_MAX}
determinism: "off"
include:
  - train.py
  - pkg
  - other.txt
command: python train.py --epochs 3
apt:
  - curl=7.88.1-10+deb12u12
  - git=1:2.39.5-0+deb12u2
"""
    root = project(tmp_path, text, "locks/gpu.lock", "train.py", "pkg/mod.py", "other.txt")
    config = load_config(root)
    assert config.name == "team/my-model_v2.1"
    assert config.gpu_lock == root.resolve() / "locks" / "gpu.lock"
    assert config.base_cpu == "python-3.11-slim-bookworm"
    assert config.base_gpu == PINNED
    assert config.seed == SEED_MAX
    assert config.determinism == "off"
    assert config.include == ("train.py", "pkg", "other.txt")
    assert config.command == ("python", "train.py", "--epochs", "3")
    assert config.apt == ("curl=7.88.1-10+deb12u12", "git=1:2.39.5-0+deb12u2")


def test_relative_directory_is_resolved(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = project(tmp_path, MINIMAL)
    monkeypatch.chdir(root)
    config = load_config(Path("."))
    assert config.root == root.resolve()
    assert config.root.is_absolute()
    assert config.lock.is_absolute()


# --------------------------------------------------------------------------- file-level errors


def test_no_such_directory(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such project directory"):
        load_config(tmp_path / "absent")


def test_missing_config_file_has_hint(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"reprobuild\.yaml: not found") as info:
        load_config(tmp_path)
    assert info.value.hint is not None


def test_non_utf8_names_the_line(tmp_path: Path) -> None:
    root = project(tmp_path, b"name: demo\nlock: requirements.lock\n# caf\xe9\n")
    with pytest.raises(ConfigError) as info:
        load_config(root)
    assert info.value.message == f"{root.resolve() / 'reprobuild.yaml'}:3:6: is not UTF-8"


def test_yaml_error_names_the_line(tmp_path: Path) -> None:
    root = project(tmp_path, "name: demo\nlock: requirements.lock\nbase: [unclosed\nseed: 1\n")
    with pytest.raises(ConfigError, match="invalid YAML") as info:
        load_config(root)
    where = info.value.message.split(": ", 1)[0]
    path, line, column = where.rsplit(":", 2)
    assert path == str(root.resolve() / "reprobuild.yaml")
    assert line.isdigit() and int(line) >= 3
    assert column.isdigit()


def test_tab_indent_yaml_error_names_line(tmp_path: Path) -> None:
    root = project(tmp_path, "name: demo\nbase:\n\tcpu: x\n")
    with pytest.raises(ConfigError, match=r"reprobuild\.yaml:3:1: invalid YAML"):
        load_config(root)


@pytest.mark.parametrize("text", ["", "   \n", "# only a comment\n"])
def test_empty_file_refused(tmp_path: Path, text: str) -> None:
    with pytest.raises(ConfigError, match="must be a mapping of keys"):
        load_config(project(tmp_path, text))


@pytest.mark.parametrize("text", ["- name: demo\n", "just a string\n", "42\n"])
def test_top_level_not_a_mapping(tmp_path: Path, text: str) -> None:
    with pytest.raises(ConfigError, match="must be a mapping of keys"):
        load_config(project(tmp_path, text))


def test_unknown_key_names_it_and_lists_allowed(tmp_path: Path) -> None:
    err = refused(tmp_path, comand="python")
    assert "unknown key 'comand'" in err.message
    assert f"allowed keys: {', '.join(KEYS)}" in err.message
    for key in KEYS:
        assert key in err.message


# --------------------------------------------------------------------------- name


@pytest.mark.parametrize(
    "name",
    ["a", "demo", "team/demo", "a.b_c-d", "a__b", "a---b", "x/y/z", "0abc", "a" * 128],
)
def test_valid_names(tmp_path: Path, name: str) -> None:
    assert config_with(tmp_path, name=name).name == name


@pytest.mark.parametrize(
    "name",
    [
        "Demo",
        "-demo",
        "demo-",
        "demo/",
        "/demo",
        "a//b",
        "a..b",
        "a___b",
        "de mo",
        "demo:tag",
        "a" * 129,
        "",
        12,
        ["demo"],
        "demo\n",
    ],
)
def test_invalid_names(tmp_path: Path, name: object) -> None:
    err = refused(tmp_path, name=name)
    assert "is not a valid image name" in err.message


def test_name_required(tmp_path: Path) -> None:
    err = refused(tmp_path, name=None)
    assert "name None is not a valid image name" in err.message


# --------------------------------------------------------------------------- lock paths


def test_lock_required(tmp_path: Path) -> None:
    err = refused(tmp_path, lock=None)
    assert "lock is required" in err.message


def test_lock_missing_file(tmp_path: Path) -> None:
    err = refused(tmp_path, lock="nope.lock")
    assert "lock 'nope.lock' does not exist" in err.message


def test_lock_is_a_directory(tmp_path: Path) -> None:
    err = refused(tmp_path, "locks/x", lock="locks")
    assert "lock 'locks' is not a regular file" in err.message


@pytest.mark.parametrize("value", ["", 3, ["requirements.lock"]])
def test_lock_wrong_type(tmp_path: Path, value: object) -> None:
    err = refused(tmp_path, lock=value)
    assert "lock must be a path to a lockfile" in err.message


@pytest.mark.parametrize(
    "value", ["../requirements.lock", "sub/../../x.lock", "/etc/passwd", "a;b.lock", "~/x.lock"]
)
def test_lock_outside_or_unsafe(tmp_path: Path, value: str) -> None:
    (tmp_path / "requirements.lock").write_text("x\n")
    err = refused(tmp_path, lock=value)
    assert f"lock {value!r} must be a relative path inside the project" in err.message


def test_lock_symlink_escaping_root_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside.lock"
    outside.write_text("six==1.17.0 --hash=sha256:" + "0" * 64 + "\n")
    root = project(tmp_path, MINIMAL.replace("requirements.lock", "link.lock"))
    os.symlink(outside, root / "link.lock")
    with pytest.raises(ConfigError, match=r"lock 'link\.lock' leaves the project directory"):
        load_config(root)


def test_lock_symlink_inside_root_accepted(tmp_path: Path) -> None:
    root = project(tmp_path, MINIMAL.replace("requirements.lock", "link.lock"))
    os.symlink("requirements.lock", root / "link.lock")
    assert load_config(root).lock == root.resolve() / "requirements.lock"


def test_gpu_lock_optional_but_validated(tmp_path: Path) -> None:
    err = refused(tmp_path, gpu_lock="../gpu.lock")
    assert "gpu_lock '../gpu.lock' must be a relative path" in err.message


def test_gpu_lock_missing(tmp_path: Path) -> None:
    err = refused(tmp_path, gpu_lock="gpu.lock")
    assert "gpu_lock 'gpu.lock' does not exist" in err.message


# --------------------------------------------------------------------------- base


@pytest.mark.parametrize("base", [None, {}, "python-3.11-slim-bookworm", ["cpu"]])
def test_base_must_be_nonempty_mapping(tmp_path: Path, base: object) -> None:
    err = refused(tmp_path, base=base)
    assert "base must be a mapping" in err.message


def test_base_unknown_key(tmp_path: Path) -> None:
    err = refused(tmp_path, base={"cpu": "x", "tpu": "y"})
    assert "unknown key base.tpu; allowed: base.cpu, base.gpu" in err.message


@pytest.mark.parametrize("value", ["", "   ", 5, ["x"], True])
def test_base_value_must_be_nonblank_string(tmp_path: Path, value: object) -> None:
    err = refused(tmp_path, base={"gpu": value})
    assert "base.gpu must be a catalog name or NAME@sha256:<64 hex>" in err.message


def test_base_gpu_only(tmp_path: Path) -> None:
    config = config_with(tmp_path, base={"gpu": PINNED})
    assert config.base_cpu is None
    assert config.base_gpu == PINNED


# --------------------------------------------------------------------------- seed, determinism


@pytest.mark.parametrize("seed", [0, 1, 1234, SEED_MAX])
def test_valid_seeds(tmp_path: Path, seed: int) -> None:
    assert config_with(tmp_path, seed=seed).seed == seed


@pytest.mark.parametrize("seed", [True, False, -1, SEED_MAX + 1, "7", 1.5, [1]])
def test_invalid_seeds(tmp_path: Path, seed: object) -> None:
    err = refused(tmp_path, seed=seed)
    assert f"seed {seed!r} must be an integer from 0 to {SEED_MAX}" in err.message


@pytest.mark.parametrize("seconds", [1, 3600, 7 * 24 * 3600])
def test_valid_build_timeouts(tmp_path: Path, seconds: int) -> None:
    assert config_with(tmp_path, build_timeout=seconds).build_timeout == seconds


def test_build_timeout_defaults_to_an_hour(tmp_path: Path) -> None:
    assert config_with(tmp_path).build_timeout == 3600


@pytest.mark.parametrize("seconds", [True, 0, -5, 7 * 24 * 3600 + 1, "60", 1.5, "60; rm -rf /"])
def test_invalid_build_timeouts(tmp_path: Path, seconds: object) -> None:
    err = refused(tmp_path, build_timeout=seconds)
    assert "must be a whole number of seconds from 1 to 604800 (7 days)" in err.message
    assert f": build_timeout {seconds!r} must" in err.message, err.message


@pytest.mark.parametrize("mode", ["strict", "warn", "off"])
def test_valid_determinism(tmp_path: Path, mode: str) -> None:
    assert config_with(tmp_path, determinism=mode).determinism == mode


@pytest.mark.parametrize("mode", ["Strict", "none", False, 1, ["strict"]])
def test_invalid_determinism(tmp_path: Path, mode: object) -> None:
    err = refused(tmp_path, determinism=mode)
    assert "must be one of: strict, warn, off" in err.message


def test_unquoted_off_is_the_mode_off(tmp_path: Path) -> None:
    # YAML 1.1 reads `off` as false; the README documents `determinism: off` as the mode.
    root = project(tmp_path, MINIMAL + "determinism: off\n")
    assert load_config(root).determinism == "off"


def test_yes_is_a_string_not_a_boolean(tmp_path: Path) -> None:
    err = refused(tmp_path, determinism="yes")
    assert "determinism 'yes' must be one of" in err.message


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ("seed: 010\n", "number '010' is not a plain decimal integer"),
        ("seed: 1:30\n", "number '1:30' is not a plain decimal integer"),
        ("seed: 0x10\n", "number '0x10' is not a plain decimal integer"),
        ("name: again\n", "key 'name' is given twice"),
        ("apt: &a []\n", "anchor &a is not allowed"),
    ],
)
def test_yaml_surprises_are_refused_with_the_line(
    tmp_path: Path, extra: str, expected: str
) -> None:
    root = project(tmp_path, MINIMAL + extra)
    with pytest.raises(ConfigError) as info:
        load_config(root)
    assert expected in info.value.message
    line = len(MINIMAL.splitlines()) + 1
    assert f"reprobuild.yaml:{line}: " in info.value.message


# --------------------------------------------------------------------------- include


def test_include_file_and_dir(tmp_path: Path) -> None:
    config = config_with(tmp_path, "a.py", "pkg/b.py", include=["a.py", "pkg", "./pkg/b.py"])
    assert config.include == ("a.py", "pkg", "pkg/b.py")


def test_include_missing(tmp_path: Path) -> None:
    err = refused(tmp_path, include=["nope.py"])
    assert "include 'nope.py' does not exist" in err.message


@pytest.mark.parametrize("item", ["/etc", "../x", "a/../../x"])
def test_include_absolute_or_parent(tmp_path: Path, item: str) -> None:
    err = refused(tmp_path, include=[item])
    assert f"include {item!r} must be a relative path inside the project" in err.message


@pytest.mark.parametrize("item", [".", "./"])
def test_include_dot_refused(tmp_path: Path, item: str) -> None:
    err = refused(tmp_path, include=[item])
    assert "include '.' would copy the whole project" in err.message


@pytest.mark.parametrize("second", ["a.py", "./a.py", "a.py/"])
def test_include_duplicate(tmp_path: Path, second: str) -> None:
    err = refused(tmp_path, "a.py", include=["a.py", second])
    assert f"include {second!r} is listed twice" in err.message


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("a.py", "include must be a list of relative paths, got a string"),
        ({"a.py": 1}, "include must be a list of relative paths, got a mapping"),
        ([1], "include entry 1 must be a relative path, got an integer"),
        ([None], "include entry None must be a relative path, got nothing"),
    ],
)
def test_include_must_be_list_of_strings(tmp_path: Path, value: object, expected: str) -> None:
    err = refused(tmp_path, "a.py", include=value)
    assert expected in err.message


@pytest.mark.parametrize("item", ["a;b", "a$b", "a`b", "a\tb", " lead", "a\\b"])
def test_include_unsafe_characters(tmp_path: Path, item: str) -> None:
    err = refused(tmp_path, include=[item])
    assert "must be a relative path inside the project" in err.message


def test_include_symlink_escaping_root(tmp_path: Path) -> None:
    (tmp_path / "secret").mkdir()
    root = project(tmp_path, MINIMAL + "include: [data]\n")
    os.symlink(tmp_path / "secret", root / "data")
    with pytest.raises(ConfigError, match="include 'data' leaves the project directory"):
        load_config(root)


def test_include_name_with_trailing_newline_refused(tmp_path: Path) -> None:
    # The file exists, so only the character rule can refuse it: a newline is a control
    # character and must never reach a COPY line.
    err = refused(tmp_path, "a.py\n", include=["a.py\n"])
    assert "must be a relative path inside the project" in err.message


# --------------------------------------------------------------------------- command


def test_command_string_is_shlex_split(tmp_path: Path) -> None:
    config = config_with(tmp_path, command="python -c 'print(1 + 2)' --flag=\"a b\"")
    assert config.command == ("python", "-c", "print(1 + 2)", "--flag=a b")


def test_command_list_kept_verbatim(tmp_path: Path) -> None:
    words = ["python", "train.py", "--name", "a b", "$HOME"]
    assert config_with(tmp_path, command=words).command == tuple(words)


def test_command_unbalanced_quote(tmp_path: Path) -> None:
    err = refused(tmp_path, command="python 'oops")
    assert "cannot be split into words" in err.message


@pytest.mark.parametrize("value", ["", "   ", []])
def test_command_empty(tmp_path: Path, value: object) -> None:
    err = refused(tmp_path, command=value)
    assert "command is empty" in err.message


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (3, "command must be a string or a list of strings, got an integer"),
        ({"run": "x"}, "command must be a string or a list of strings, got a mapping"),
        (["python", 3], "command word 3 must be a string, got an integer"),
        (True, "command must be a string or a list of strings, got a boolean"),
    ],
)
def test_command_wrong_type(tmp_path: Path, value: object, expected: str) -> None:
    err = refused(tmp_path, command=value)
    assert expected in err.message


@pytest.mark.parametrize("word", ["a\nb", "a\x00b", "tab\there", "del\x7f", "esc\x1b[0m"])
def test_command_control_characters(tmp_path: Path, word: str) -> None:
    err = refused(tmp_path, command=["python", word])
    assert f"command word {word!r} contains a control character" in err.message


def test_command_string_with_control_character(tmp_path: Path) -> None:
    err = refused(tmp_path, command='python "a\x07b"')
    assert "contains a control character" in err.message


# --------------------------------------------------------------------------- apt


@pytest.mark.parametrize(
    "entry",
    [
        "curl=7.88.1-10+deb12u12",
        "git=1:2.39.5-0+deb12u2",
        "libstdc++6=12.2.0-14",
        "ca-certificates=20230311",
        "g++=4:12.2.0-3",
        "libc6=2.36-9+deb12u10~bpo",
    ],
)
def test_apt_valid(tmp_path: Path, entry: str) -> None:
    assert config_with(tmp_path, apt=[entry]).apt == (entry,)


@pytest.mark.parametrize(
    "entry",
    [
        "curl",
        "curl=",
        "=7.88",
        "curl = 7.88",
        "curl=7.88 git=1",
        "curl=7.88;rm -rf /",
        "curl=7.88&&x",
        "curl=$(id)",
        "Curl=7.88",
        "c=1",
        "curl=7.88\n",
        "curl=7.88\nRUN id",
        "-curl=1",
    ],
)
def test_apt_invalid(tmp_path: Path, entry: str) -> None:
    err = refused(tmp_path, apt=[entry])
    assert f"apt entry {entry!r} must be 'package=version'" in err.message


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("curl=7.88", "apt must be a list of 'package=version' strings, got a string"),
        ([1], "apt entry 1 must be a 'package=version' string, got an integer"),
        ({"curl": "7.88"}, "apt must be a list of 'package=version' strings, got a mapping"),
    ],
)
def test_apt_must_be_list_of_strings(tmp_path: Path, value: object, expected: str) -> None:
    err = refused(tmp_path, apt=value)
    assert expected in err.message


def test_first_bad_value_wins_in_key_order(tmp_path: Path) -> None:
    err = refused(tmp_path, name="Bad", seed=-1)
    assert "name 'Bad'" in err.message
    assert "seed" not in err.message


# ------------------------------------------------------------------------------ select


def test_select_defaults_and_values(tmp_path: Path) -> None:
    assert config_with(tmp_path).select == LockSelection()
    (tmp_path / "b").mkdir()
    chosen = config_with(
        tmp_path / "b",
        select={"python": "3.12", "extras": ["cpu"], "groups": ["train"], "default_groups": True},
    ).select
    assert chosen == LockSelection("3.12", ("cpu",), ("train",), True)
    assert chosen.chooses and not LockSelection(python="3.12").chooses


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (["cpu"], r":6: select must be a mapping \(python, extras, groups, default_groups\), "
         r"got a list$"),
        ({"extra": ["cpu"]}, r":6: unknown key select\.extra; allowed: select\.python, "),
        ({"python": 3.12}, r":6: select\.python 3\.12 must be a CPython version like "
         r"\"3\.11\" \(quoted\), got a number$"),
        ({"python": "3"}, r"select\.python '3' must be a CPython version"),
        ({"extras": "cpu"}, r":6: select\.extras must be a list of names, got a string$"),
        ({"groups": ["$(id)"]}, r":7: select\.groups entry '\$\(id\)' must be a name: "),
        ({"groups": ["a", "a"]}, r"select\.groups lists a name twice$"),
        ({"default_groups": "yes"}, r":6: select\.default_groups 'yes' must be true or false, "
         r"got a string$"),
    ],
)  # fmt: skip
def test_select_refusals_are_one_line(tmp_path: Path, value: object, expected: str) -> None:
    error = refused(tmp_path, select=value)
    assert "\n" not in error.message
    assert re.search(expected, error.message), error.message
