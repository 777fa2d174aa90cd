"""Malformed configs generated from the schema: every key, many bad values each, always exit 2 naming the key.

The values come from each field's type (wrong types, out-of-range and non-finite
numbers, values no run can use); YAML's own hazards (duplicate keys, alias bombs,
recursive aliases, deep nesting) are refused before anything walks the data.
"""

from __future__ import annotations

import math
import typing
from collections.abc import Iterator
from typing import Any

import attrs
import pytest
import yaml

from minds_core.base.errors import ConfigError
from minds_core.cli.command import main
from minds_core.config import RunConfig, build_config, load_config
from minds_core.config.files import MAX_YAML_ALIASES, read_config_file
from minds_core.config.schema import schema_fields, unwrap_optional

#: Values no field of each type accepts: other types, and numbers past any bound a run can use.
BAD_BY_TYPE: dict[Any, list[Any]] = {
    int: ["eight", 1.5, True, [1], {"a": 1}, 10**30, -(10**30), 2**64, math.nan, math.inf, 1e300],
    float: ["fast", False, [0.1], {"a": 1}, 10**30, -(10**30), 10**400, 1e300, -1e300, math.nan, math.inf, -math.inf],
    bool: ["yes", 1, 0.0, [True], {"a": True}],
    str: [1, 2.5, True, ["x"], {"a": "x"}],
    list: ["console", 1, {"a": 1}, True],
    dict: ["x", 1, ["a"], True],
}

#: String fields whose values are checked, with values they refuse.
BAD_STRINGS: dict[str, list[str]] = {
    "name": ["../x", "a/b", "..", ".", "x" * 300, "a\\b", "nul\0byte"],
    "local.device": ["gpu", ""],
    "trainer.mode": ["ppo"],
    "trainer.lr_schedule": ["exponential"],
    "rollout.invalid_reward": ["ignore"],
}


def _leaves(cls: type, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """``(dotted key, type)`` of every leaf field below ``cls``; list-of-class fields as their first element."""
    for name, field in schema_fields(cls).items():
        tp = unwrap_optional(field.type)
        key = f"{prefix}{name}"
        if attrs.has(tp):
            yield from _leaves(tp, f"{key}.")
        elif typing.get_origin(tp) is list and attrs.has(typing.get_args(tp)[0]):
            yield from _leaves(typing.get_args(tp)[0], f"{key}[0].")
        else:
            yield key, typing.get_origin(tp) or tp


def _data(key: str, value: Any) -> dict[str, Any]:
    """A config that is valid but for ``value`` at ``key`` (list elements get their required name)."""
    data: dict[str, Any] = {"env": {"id": "toy_char_share"}}
    node = data
    *parents, leaf = key.split(".")
    for part in parents:
        name, _, index = part.partition("[")
        if index:
            node = node.setdefault(name, [{"name": "toy.reward"}])[0]
        else:
            node = node.setdefault(name, {})
    node[leaf] = value
    return data


LEAVES = dict(_leaves(RunConfig))
BAD = {key: BAD_BY_TYPE.get(tp, []) + BAD_STRINGS.get(key, []) for key, tp in LEAVES.items()}


def test_the_generator_covers_every_leaf_of_the_schema():
    assert {tp for tp in LEAVES.values()} <= set(BAD_BY_TYPE), "a field type without generated bad values"
    assert sum(map(len, BAD.values())) > 400
    numeric = [key for key, tp in LEAVES.items() if tp in (int, float)]
    assert len(numeric) > 40  # each of them must refuse 10**30 and -10**30 below: every number is bounded


@pytest.mark.parametrize("key", sorted(BAD))
def test_every_bad_value_is_a_config_error_naming_its_key(key):
    for value in BAD[key]:
        with pytest.raises(ConfigError) as refused:
            build_config(_data(key, value))
        assert key in str(refused.value), (value, str(refused.value))


@pytest.mark.parametrize("key", sorted(k for k, tp in LEAVES.items() if tp in (int, float)))
def test_every_bad_number_in_a_yaml_file_exits_2_without_a_traceback(key, tmp_path, capsys):
    for value in BAD_BY_TYPE[LEAVES[key]]:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            path = tmp_path / "bad.yaml"
            path.write_text(yaml.safe_dump(_data(key, value)))
            code = main(["run", str(path), "--dry-run"])
            err = capsys.readouterr().err
            assert code == 2 and key in err and "Traceback" not in err, (value, err)


@pytest.mark.parametrize(
    ("assignment", "message"),
    [
        ("seed=18446744073709551616", "seed = 18446744073709551616: must be an integer in [0, 9223372036854775807]"),
        ("name=../x", "name = '../x': must be one folder name"),
        ("trainer.learning_rate=1e999", "trainer.learning_rate = inf: must be a finite number"),
        ("trainer.group_size=100000", "trainer.group_size = 100000: must be an integer in [1, 4096]"),
        ("rollout.timeout=1e300", "rollout.timeout = 1e+300: must be a finite number in [0, 604800.0]"),
        ("trainer.loss_fn_config={clip: .nan}", "trainer.loss_fn_config = {'clip': nan}: must be a table whose every value is a finite number in [-1000000.0, 1000000.0]: clip = nan"),
    ],
)
def test_absurd_overrides_exit_2_naming_key_value_and_range(assignment, message, capsys):
    code = main(["run", "--env", "toy_char_share", "--set", assignment, "--dry-run"])
    err = capsys.readouterr().err
    assert code == 2 and message in err and "Traceback" not in err, err


def test_rollouts_per_step_and_per_evaluation_are_bounded_together():
    with pytest.raises(ConfigError, match=r"trainer.groups_per_batch x group size = 4096 x 64: at most 65536 rollouts"):
        load_config(None, ["env.id=x", "trainer.groups_per_batch=4096", "trainer.group_size=64"])
    with pytest.raises(ConfigError, match=r"trainer.groups_per_batch x group size = 17 x 4096: at most 65536 rollouts"):
        load_config(None, ["env.id=x", "env.group_size=4096", "trainer.groups_per_batch=17"])  # an environment's own size
    with pytest.raises(ConfigError, match=r"trainer.eval_tasks x trainer.eval_samples = 65536 x 2: at most 65536 rollouts"):
        load_config(None, ["env.id=x", "trainer.eval_tasks=65536", "trainer.eval_samples=2"])
    load_config(None, ["env.id=x", "trainer.groups_per_batch=4096", "trainer.group_size=16"])  # at the bound: accepted


def test_runs_dir_that_is_a_file_is_a_config_error(tmp_path):
    (tmp_path / "file").write_text("")
    for runs_dir in (tmp_path / "file", tmp_path / "file" / "below"):
        with pytest.raises(ConfigError, match=r"runs_dir = .*: .*file is a file, not a folder"):
            load_config(None, ["env.id=x", f"runs_dir={runs_dir}"])


# ---------------------------------------------------------------- YAML hazards


@pytest.mark.parametrize("key", sorted(LEAVES))
def test_a_key_given_twice_in_yaml_is_refused_naming_it(key, tmp_path):
    leaf = key.rpartition(".")[2].partition("[")[0]
    text = yaml.safe_dump(_data(key, "x"), sort_keys=False)
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.strip().lstrip("- ").startswith(f"{leaf}:"))
    lines.insert(at + 1, lines[at].replace("- ", "  ", 1))  # the same key again in the same mapping
    path = tmp_path / "twice.yaml"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ConfigError, match=rf"twice.yaml:{at + 2}:\d+: invalid YAML: duplicate key '{leaf}' \(first on line {at + 1}\)"):
        read_config_file(path)


def _bomb(levels: int, width: int) -> str:
    lines = [f"l0: &l0 [{', '.join(['lol'] * width)}]"]
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * width)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (_bomb(9, 9), f"more than {MAX_YAML_ALIASES} aliases"),  # billion laughs: refused by the alias budget
        (_bomb(6, 9), "expands to more than 100000 values"),  # 45 aliases, 9**6 values
        ("env: &e {id: x, args: *e}\n", "nests deeper than 64 levels"),
        ("env:\n  id: x\n  args:\n    a: &x [*x]\n", "nests deeper than 64 levels"),
        ("a: " + "[" * 5000 + "]" * 5000 + "\n", "a"),  # too deep for the parser itself
    ],
    ids=["billion-laughs", "wide-bomb", "recursive-mapping", "recursive-list", "deep-nesting"],
)
@pytest.mark.slow  # a CPU-second or more of float64 numerics or bombs: the whole suite runs it
def test_yaml_bombs_are_refused_quickly(text, message, tmp_path, capsys):
    path = tmp_path / "bomb.yaml"
    path.write_text(text)
    code = main(["run", str(path), "--dry-run"])
    err = capsys.readouterr().err
    assert code == 2 and message in err and "Traceback" not in err, err


def test_a_few_aliases_still_work(tmp_path):
    path = tmp_path / "anchors.yaml"
    path.write_text("envs: [&e {id: toy_char_share}, *e, *e]\n")  # (env and envs together are refused)
    assert [e.id for e in load_config(path).envs] == ["toy_char_share"] * 3


def test_duplicate_keys_in_a_set_value_are_refused():
    with pytest.raises(ConfigError, match=r"--set env.args=.*: invalid YAML: duplicate key 'a'"):
        load_config(None, ["env.id=x", "env.args={a: 1, a: 2}"])


def test_a_deep_toml_file_is_a_config_error(tmp_path):
    path = tmp_path / "deep.toml"
    path.write_text("a = " + "[" * 100 + "]" * 100 + "\n")
    with pytest.raises(ConfigError, match="deeper than 64 levels"):
        read_config_file(path)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--name", "bad\udcff"], "name: not UTF-8 text (byte 0xff at character 3)"),
        (["--set", "env.name=x\udcfe"], "env.name: not UTF-8 text (byte 0xfe at character 1)"),
        (["--set", "env.args.k\udcff=1"], "env.args: a key is not UTF-8 text (byte 0xff at character 1)"),
        (["--set", "tinker.api_key=tml-\udcff"], "tinker.api_key: not UTF-8 text (byte 0xff at character 4)"),
    ],
)
def test_text_that_is_not_utf8_is_refused_naming_its_key(args, message, tmp_path, capsys):
    """Bytes that did not decode (an argument in another encoding) reach Python as lone surrogates: no file of the
    run could hold them, so they are refused before the run, not met as a traceback when config.yaml is written."""
    code = main(["run", "--env", "ghost_trace", "--set", f"runs_dir={tmp_path}", "--steps", "1", *args, "--dry-run"])
    err = capsys.readouterr().err
    assert code == 2 and message in err and "Traceback" not in err, err
    assert "tml-" not in err  # a secret's value is not shown, only where it is not UTF-8
