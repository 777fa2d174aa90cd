"""Secret-named values are never shown, whatever their type: not by --dry-run, not in config.yaml, not in errors."""

from __future__ import annotations

import attrs
import pytest

from minds_core import arg, at_least, env_args
from minds_core.cli import main
from minds_core.config import load_config
from minds_core.config.secrets import REDACTED, redact
from minds_core.errors import ConfigError
from minds_core.run_directory import RunDirectory

SECRET_NUMBER = "12345678"


def test_numbers_under_secret_named_keys_are_redacted_by_dry_run(capsys, tmp_path, any_args_env):
    path = tmp_path / "run.toml"  # an environment that takes these [env.args]: --dry-run checks them as the run does
    path.write_text(
        f'[env]\nid = "{any_args_env}"\n'
        f"[env.args]\naccess_token = {SECRET_NUMBER}\nclient_secret = 4.5\n"
        f"[env.args.credentials]\npin = {SECRET_NUMBER}\nkeys = [{SECRET_NUMBER}, 99]\n"
    )
    assert main(["run", str(path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert SECRET_NUMBER not in out and "4.5" not in out and "99" not in out
    assert out.count(REDACTED) == 5


def test_config_yaml_holds_no_numeric_secret(tmp_path):
    config = load_config(None, ["env.id=x", f"runs_dir={tmp_path}", "name=r", f"env.args.api_token={SECRET_NUMBER}"])
    assert config.env.args["api_token"] == int(SECRET_NUMBER)
    run = RunDirectory.create(config)
    assert SECRET_NUMBER not in (run.path / "config.yaml").read_text()


def test_switches_unset_values_and_secret_name_lists_stay_visible():
    shown = redact({"use_token": True, "hf_token": None, "api_key": "", "secrets": ["OPENAI_API_KEY"],
                    "password": [{"value": "hunter2"}], "max_tokens": 5})
    assert shown == {"use_token": True, "hf_token": None, "api_key": "", "secrets": ["OPENAI_API_KEY"],
                     "password": [{"value": REDACTED}], "max_tokens": 5}


def test_a_type_error_under_a_secret_key_does_not_echo_the_value(tmp_path, capsys):
    path = tmp_path / "run.toml"
    path.write_text(f'[env]\nid = "ghost_trace"\n[tinker]\napi_key = {SECRET_NUMBER}\n')
    assert main(["run", str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "tinker.api_key: expected a string" in err
    assert SECRET_NUMBER not in err


def test_a_type_error_elsewhere_still_shows_the_value(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text("[trainer]\nsteps = 'many'\n")
    with pytest.raises(ConfigError, match="trainer.steps: expected an integer, got 'many'"):
        load_config(path)


@attrs.frozen
class _TokenArgs:
    auth_token: int = arg(0, at_least(0), doc="a secret number")
    num_examples: int = arg(1, at_least(1), doc="how many")


def test_environment_argument_checks_do_not_echo_secret_values():
    with pytest.raises(ConfigError) as raised:
        env_args(_TokenArgs, {"auth_token": -int(SECRET_NUMBER)}, env="demo")
    assert "env.args.auth_token" in str(raised.value) and SECRET_NUMBER not in str(raised.value)
    with pytest.raises(ConfigError) as raised:
        env_args(_TokenArgs, {"auth_token": f"x{SECRET_NUMBER}"}, env="demo")
    assert "env.args.auth_token" in str(raised.value) and SECRET_NUMBER not in str(raised.value)
    with pytest.raises(ConfigError, match="env.args.num_examples = -3: must be an integer >= 1"):
        env_args(_TokenArgs, {"num_examples": -3}, env="demo")
