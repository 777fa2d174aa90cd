"""One validation vocabulary: the run config's fields and [env.args] are declared and checked with the same rules."""

from __future__ import annotations

import attrs
import pytest

from minds_core import arg, env_args, within
from minds_core.base.errors import ConfigError
from minds_core.config import RunConfig, TrainerConfig, load_config
from minds_core.config.rules import each_value, field_rule, problem
from minds_core.config.schema import MAX_LORA_RANK


@attrs.frozen
class RankArgs:
    rank: int = arg(8, within(1, MAX_LORA_RANK), doc="a LoRA rank")
    share: float = arg(0.5, within(0, 1, low_open=True), doc="a share of the data")


def _config_error(*assignments: str) -> str:
    with pytest.raises(ConfigError) as raised:
        load_config(None, ["env.id=x", *assignments])
    return str(raised.value)


def _args_error(args: dict) -> str:
    with pytest.raises(ConfigError) as raised:
        env_args(RankArgs, args, env="demo")
    return str(raised.value)


@pytest.mark.parametrize(("value", "says"), [("0", "an integer in [1, 1024]"), ("2000", "an integer in [1, 1024]")])
def test_a_config_key_and_an_env_arg_with_the_same_rule_say_the_same(value, says):
    assert f"model.lora_rank = {value}: must be {says}" in _config_error(f"model.lora_rank={value}")
    assert f"env.args.rank = {value}: must be {says}" in _args_error({"rank": int(value)})


def test_open_ends_of_a_range_are_left_out():
    assert "env.args.share = 0: must be a finite number in (0, 1]" in _args_error({"share": 0})
    assert env_args(RankArgs, {"share": 1}, env="demo").share == 1.0
    assert "sampling.top_p = 0.0: must be a finite number in (0, 1]" in _config_error("sampling.top_p=0")
    assert "trainer.beta1 = 1.0: must be a finite number in [0, 1)" in _config_error("trainer.beta1=1")
    assert "env.args.share = nan: must be a finite number in (0, 1]" in _args_error({"share": float("nan")})


def test_a_table_rule_names_its_failing_key():
    rule = each_value(within(-1, 1))
    assert problem(rule, {"a": 0.5, "b": 3.0}, dict[str, float]) == (
        "must be a table whose every value is a finite number in [-1, 1]: b = 3.0"
    )
    assert problem(rule, {"a": 0.5}, dict[str, float]) is None


def test_every_config_key_is_declared_with_arg_and_documented():
    sections = [RunConfig, *(attrs.resolve_types(f.type) for f in attrs.fields(RunConfig) if attrs.has(f.type))]
    for section in sections:
        for field in attrs.fields(attrs.resolve_types(section)):
            if attrs.has(field.type):
                continue  # a section, documented by its class
            assert "rule" in field.metadata, f"{section.__name__}.{field.name} is not declared with arg"
            assert field.metadata.get("doc"), f"{section.__name__}.{field.name} has no doc"
    assert field_rule(attrs.fields_dict(TrainerConfig)["steps"]) is not None


def test_a_config_section_built_in_code_keeps_its_rules():
    with pytest.raises(ValueError, match=r"steps = 0: must be an integer in \[1, 10000000\]"):
        TrainerConfig(steps=0)
    with pytest.raises(ValueError, match=r"rank = 0: must be an integer in \[1, 1024\]"):
        RankArgs(rank=0)


def test_a_runs_dir_under_a_file_says_which_part_is_a_file(tmp_path):
    (tmp_path / "f").write_text("")
    assert f"must be a folder path: {tmp_path / 'f'} is a file, not a folder" in _config_error(f"runs_dir={tmp_path / 'f' / 'runs'}")
