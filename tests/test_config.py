"""Config loading: the malformed-config corpus, overrides, defaults, redaction."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from minds_core.base.errors import ConfigError
from minds_core.base.secrets import REDACTED
from minds_core.cli.command import main
from minds_core.config import DEFAULT_BASE_MODEL, dump_yaml, load_config

BAD = Path(__file__).parent / "configs" / "bad"

#: file -> text the error must contain (the key, or file and line)
CORPUS = {
    "unknown_key_trainer.toml": "trainer.groupsize: unknown key (did you mean group_size?)",
    "unknown_key_env.toml": "env.wieght: unknown key (did you mean weight?)",
    "unknown_section.toml": "trainr: unknown key (did you mean trainer?)",
    "wrong_type_int.toml": "trainer.group_size: expected an integer, got 'eight'",
    "wrong_type_float.toml": "trainer.learning_rate: expected a number, got 'fast'",
    "wrong_type_bool.toml": "rollout.drop_constant_reward_groups: expected true or false, got 'yes'",
    "wrong_type_list.toml": "metrics.sinks: expected a list, got 'console'",
    "bad_enum.toml": "rollout.invalid_reward = 'ignore': must be one of zero, fail",
    "negative_rate.toml": "trainer.learning_rate = -0.001: must be a finite number in (0, 10]",
    "zero_steps.toml": "trainer.steps = 0: must be an integer in [1, 10000000]",
    "top_p_range.toml": "sampling.top_p = 1.5: must be a finite number in (0, 1]",
    "nan_temperature.toml": "sampling.temperature = nan: must be a finite number in [0, 100.0]",
    "broken_syntax.toml": "broken_syntax.toml: invalid TOML",
    "broken_indent.yaml": "broken_indent.yaml:3:2: invalid YAML",
    "broken_flow.yaml": "broken_flow.yaml:3:1: invalid YAML",
    "top_level_list.yaml": "the top level must be a table/mapping",
    "negative_off_policy.yaml": "trainer.max_steps_off_policy = -1: must be an integer in [0, 1000]",
    "zero_env_weight.yaml": "every environment has weight 0 (switched off)",
    "env_and_envs.toml": "env and envs are both set: [env] (also what --env NAME sets) is the one environment",
    "reward_without_name.toml": "env.rewards[0].name: required key is missing",
    "config.json": "unknown config format '.json'",
    "not_utf8.toml": "not_utf8.toml:1: not UTF-8 text (byte 0xe9 at offset 11)",
    "missing.toml": "config file not found",
}


def test_corpus_covers_every_file():
    assert {p.name for p in BAD.iterdir()} == set(CORPUS) - {"missing.toml"}
    assert not (BAD / "missing.toml").exists()
    assert len(set(CORPUS.values())) == len(CORPUS), "two files of the corpus expect the same error"


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_malformed_config_gives_one_screen_message_and_exit_2(name, capsys):
    code = main(["run", str(BAD / name), "--dry-run"])
    err = capsys.readouterr().err
    assert code == 2
    assert CORPUS[name] in err
    assert "Traceback" not in err
    assert len(err.splitlines()) <= 20


def test_env_given_to_a_config_of_several_envs_is_refused_not_added(tmp_path, capsys):
    """``--env`` sets env.id: on a config of [[envs]] it would train on one more environment, not instead."""
    several = tmp_path / "several.toml"
    several.write_text('[[envs]]\nid = "ghost_trace"\n\n[[envs]]\nid = "self_prediction"\nweight = 2.0\n')
    code = main(["run", str(several), "--env", "ghost_trace", "--dry-run"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert "env and envs are both set" in err and "put every environment in [[envs]]" in err
    assert main(["run", str(several), "--dry-run"]) == 0


def test_defaults_need_no_file():
    config = load_config(None, ["env.id=echo_example"])
    assert config.env is not None and config.env.id == "echo_example"
    assert config.model.base_model == DEFAULT_BASE_MODEL
    assert config.backend == "auto"


def test_overrides_are_parsed_to_the_field_type():
    config = load_config(None, [
        "trainer.group_size=3", "trainer.learning_rate=2e-4", "rollout.drop_constant_reward_groups=true",
        "metrics.sinks=[console]", "env.id=x", "env.args.words=[a, b]", "env.args.n=5", "name=007",
    ])
    assert config.trainer.group_size == 3
    assert config.trainer.learning_rate == pytest.approx(2e-4)
    assert config.rollout.drop_constant_reward_groups is True
    assert config.metrics.sinks == ["console"]
    assert config.env.args == {"words": ["a", "b"], "n": 5}
    assert config.name == "007"


@pytest.mark.parametrize(
    ("assignment", "message"),
    [
        ("trainer.group_size=many", "expected a value of type int"),
        ("trainer.groupsize=3", "did you mean group_size?"),
        ("rollout.drop_constant_reward_groups=perhaps", "expected a value of type bool"),
        ("no_equals_sign", "expected KEY=VALUE"),
    ],
)
def test_bad_overrides(assignment, message):
    with pytest.raises(ConfigError, match=message.replace("?", r"\?")):
        load_config(None, [assignment])


def test_seed_000_layout_maps_to_canonical_keys(tmp_path):
    path = tmp_path / "seed.toml"
    path.write_text(
        '[env]\nid = "./environments/my_task"\n[env.args]\ndifficulty = "hard"\n'
        '[trainer]\nrollouts_per_example = 6\nloss_fn = "ppo"\n[trainer.args]\nmax_new_tokens = 32\n'
        '[model]\nbase_model = "minds-tiny"\n[tinker]\napi_key_env = "MY_KEY"\n'
    )
    config = load_config(path)
    assert (config.trainer.group_size, config.trainer.loss_fn, config.sampling.max_tokens) == (6, "ppo", 32)
    assert config.env.args == {"difficulty": "hard"} and config.tinker.api_key_env == "MY_KEY"


def test_secrets_are_redacted_in_dry_run(capsys, any_args_env):
    # an environment that takes any [env.args]: --dry-run checks them as the run does
    code = main(["run", "--env", any_args_env, "--set", "tinker.api_key=tml-supersecret",
                 "--set", "env.args.secrets={openai_api_key: sk-abc}", "--set", "env.args.token=t0k", "--dry-run"])
    out = capsys.readouterr().out
    assert code == 0
    assert "tml-supersecret" not in out and "sk-abc" not in out and "t0k" not in out
    assert out.count(REDACTED) == 3
    assert "api_key_env: TINKER_API_KEY" in out


def test_redacted_values_are_dropped_when_a_saved_config_is_reloaded(tmp_path):
    config = load_config(None, ["env.id=x", "tinker.api_key=tml-1"])
    saved = tmp_path / "config.yaml"
    saved.write_text(dump_yaml(config))
    assert load_config(saved, drop_redacted=True).tinker.api_key == ""


def test_redaction_hides_secrets_and_keeps_ordinary_settings():
    from minds_core.base.secrets import redact

    shown = redact({"env": {"args": {
        "stop_token": "</answer>", "use_token": True, "max_tokens": 5, "api_key_env": "MY_KEY",
        "aws_secret_access_key": "AKIA123", "headers": {"Authorization": "Bearer sk-live"},
        "hf_token": "hf_abc", "secrets": ["OPENAI_API_KEY"], "credentials": {"user": "u", "pass": "p"},
    }}})["env"]["args"]
    assert shown["stop_token"] == "</answer>" and shown["use_token"] is True and shown["max_tokens"] == 5
    assert shown["api_key_env"] == "MY_KEY" and shown["secrets"] == ["OPENAI_API_KEY"]
    assert shown["aws_secret_access_key"] == shown["hf_token"] == shown["headers"]["Authorization"] == REDACTED
    assert shown["credentials"] == {"user": REDACTED, "pass": REDACTED}


def test_a_bad_value_from_an_override_is_not_blamed_on_the_file(tmp_path):
    config = tmp_path / "run.toml"
    config.write_text('[env]\nid = "x"\n')
    with pytest.raises(ConfigError, match=rf"invalid configuration \({re.escape(str(config))} and --set\):\n  - trainer.steps = -1"):
        load_config(config, ["trainer.steps=-1"])  # the file is fine: the value came from the command line
    config.write_text('[env]\nid = "x"\n[trainer]\nsteps = -1\n')
    with pytest.raises(ConfigError, match=rf"invalid configuration \({re.escape(str(config))}\):"):
        load_config(config)
    with pytest.raises(ConfigError, match=r"invalid configuration \(defaults and --set\):"):
        load_config(None, ["env.id=x", "trainer.steps=-1"])
