"""Secrets are never shown, whatever their type or spelling: not by --dry-run, not in config.yaml, not in errors,
and no value minds knows is printed or written (the masking of everything a run writes: test_secret_leaks.py)."""

from __future__ import annotations

import io

import attrs
import pytest

from minds_core import Task, arg, at_least, env_args
from minds_core.base.errors import ConfigError
from minds_core.base.masking import MaskedStream, mask, mask_data, remember
from minds_core.base.secrets import REDACTED, is_secret_key, redact, secret_values
from minds_core.cli.command import main
from minds_core.config import load_config
from minds_core.contract.plugin_errors import error_text
from minds_core.episodes.conversation import Conversation
from minds_core.episodes.groups import Group, Rollout
from minds_core.rl.outcome import no_datum_reason
from minds_core.sinks.wandb import redact_arguments
from minds_core.training.run_directory import RunDirectory

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


#: Common names of settings that hold secrets, in the spellings configs and headers use.
SECRET_NAMES = [
    "api_key", "apiKey", "x-api-key", "X-Api-Key", "openai_api_key", "secret", "client_secret", "clientSecret",
    "secret_key", "aws_secret_access_key", "access_key", "private_key", "signing_key", "encryption_key",
    "password", "DB_PASSWORD", "passwd", "pwd", "pass", "passphrase", "token", "access_token", "refresh_token",
    "id_token", "auth_token", "hf_token", "GITHUB_TOKEN", "bearer", "auth", "authorization", "Authorization",
    "cookie", "Set-Cookie", "session", "session_id", "credentials", "credential", "sentry_dsn",
    "api_keys", "passwords", "access_tokens", "apiKeys", "private_keys", "cookies",
]  # fmt: skip
#: Key names that real programs and services use for secrets (cloud SDKs, CI variables, OAuth, webhooks).
REAL_WORLD_SECRET_NAMES = [
    "credentials_json", "GOOGLE_CREDENTIALS_JSON", "service_account", "serviceAccount", "service_account_json",
    "service_account_info", "gcp_service_account_key", "jwt", "JWT", "jwt_secret", "jwtToken", "id_token_jwt",
    "private_key_pem", "privateKeyPem", "ssh_private_key", "api_key_b64", "keyfile_json", "client_assertion",
    "AZURE_STORAGE_CONNECTION_STRING", "connectionString", "AZURE_CLIENT_SECRET", "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN", "TWILIO_AUTH_TOKEN", "SLACK_SIGNING_SECRET", "SLACK_BOT_TOKEN", "STRIPE_SECRET_KEY",
    "NPM_TOKEN", "PYPI_PASSWORD", "DOCKER_PASSWORD", "WANDB_API_KEY", "HUGGING_FACE_HUB_TOKEN", "oauth_token",
    "refreshToken", "otp", "totp_secret", "webhook_secret", "credentials_base64", "firebase_credentials",
    "AZURE_OPENAI_KEY", "wandb_key", "openai_key", "ANTHROPIC_KEY", "stripe_key", "storageKey", "SLACK_WEBHOOK_URL",
    "discord_webhook", "NGROK_AUTHTOKEN", "github_pat", "GH_PAT", "creds", "gcp_creds_json",
]  # fmt: skip
#: Names that read like them and hold no secret: where a secret is, what kind it is, public halves.
REAL_WORLD_ORDINARY_NAMES = [
    "credentials_file", "GOOGLE_APPLICATION_CREDENTIALS_PATH", "service_account_file", "service_account_email",
    "jwt_algorithm", "jwt_audience", "public_key_pem", "cert_pem", "connection_timeout", "key_json",
    "token_count", "max_tokens_value", "eos_token_text", "session_dir", "auth_method", "json", "value",
    "answer_key", "prompt_key", "dataset_key", "webhook_path", "pattern", "seed", "access_key_id",
]  # fmt: skip
ORDINARY_NAMES = [
    "max_tokens", "stop_token", "eos_token", "pad_token", "num_tokens", "max_total_tokens", "tokenizer", "api_key_env",
    "TINKER_API_KEY_ENV", "key", "sort_key", "cache_key", "author", "auth_method", "password_file", "session_dir",
    "secrets_file", "base_url", "name", "value", "passes", "pass_at_k", "max_new_tokens", "prompt_tokens",
    "stop_tokens", "keys", "sort_keys", "sessions", "max_sessions",
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "secret"),
    [(name, True) for name in SECRET_NAMES + REAL_WORLD_SECRET_NAMES]
    + [(name, False) for name in ORDINARY_NAMES + REAL_WORLD_ORDINARY_NAMES],
)
def test_secret_names_are_secret_in_any_spelling_and_ordinary_ones_stay_visible(name, secret):
    assert is_secret_key(name) == secret


URL = "https://bob:hunter2-pw@db.example.com/v1?api_key=AKIA-QUERY-77&page=2"
HEADERS = '[{name: Authorization, value: "Bearer sk-header-5150"}, {name: Accept, value: application/json}]'


def test_url_passwords_query_secrets_and_header_pairs_are_redacted_in_dry_run_and_config_yaml(capsys, tmp_path, any_args_env):
    args = ["--env", any_args_env, "--set", f"env.args.endpoint={URL}", "--set", f"env.args.headers={HEADERS}"]
    assert main(["run", *args, "--dry-run"]) == 0
    shown = capsys.readouterr().out
    config = load_config(None, ["env.id=x", f"runs_dir={tmp_path}", "name=r", f"env.args.endpoint={URL}", f"env.args.headers={HEADERS}"])
    written = (RunDirectory.create(config).path / "config.yaml").read_text()
    for text in (shown, written):
        assert "hunter2-pw" not in text and "AKIA-QUERY-77" not in text and "sk-header-5150" not in text
        assert "https://bob:***@db.example.com/v1?api_key=***&page=2" in text
        assert "application/json" in text  # a pair whose name is not secret stays


def test_an_error_message_never_shows_a_url_password():
    with pytest.raises(ConfigError) as raised:
        load_config(None, [f"trainer.steps={URL}"])
    assert "trainer.steps='https://bob:***@db.example.com/v1?api_key=***&page=2': expected" in str(raised.value)
    assert "hunter2-pw" not in str(raised.value) and "AKIA-QUERY-77" not in str(raised.value)


def test_secret_values_are_those_redacted_and_those_of_the_variables_named():
    config = {"tinker": {"api_key": "", "api_key_env": "MY_SERVICE_KEY"}, "env": {"args": {
        "endpoint": URL, "headers": [{"name": "X-Api-Key", "value": "xk-12345678"}], "password": 31415926,
        "secrets": ["JUDGE_VARIABLE"], "judge": {"secrets": {"OPENAI_API_KEY": "${OPENAI_VARIABLE}"}}, "prompt": "hello"}}}  # fmt: skip
    environ = {"MY_SERVICE_KEY": "from-the-env-42", "JUDGE_VARIABLE": "judge-value-7", "HF_TOKEN": "hf_abcdef",
               "OPENAI_VARIABLE": "sk-openai-3", "PWD": "/work", "HOME": "/root"}  # fmt: skip
    assert secret_values(config, environ) == {
        "hunter2-pw", "AKIA-QUERY-77", "xk-12345678", "31415926", "from-the-env-42", "judge-value-7", "hf_abcdef",
        "sk-openai-3",
    }  # fmt: skip


def test_mask_hides_known_values_in_text_records_and_streams():
    remember(["sk-masked-0001", "short"])
    line = 'failed: {"key": "sk-masked-0001"} at https://u:pw-in-url@h/ and short'
    assert mask(line) == 'failed: {"key": "***"} at https://u:***@h/ and short'  # values under MIN_CHARS are not searched
    assert mask_data({"error": "sk-masked-0001", "sk-masked-0001": [1, "x sk-masked-0001"], "n": 3}) == {
        "error": "***", "***": [1, "x ***"], "n": 3
    }
    out = io.StringIO()
    MaskedStream(out).write("echo sk-masked-0001\n")
    assert out.getvalue() == "echo ***\n"


def test_the_command_line_w_and_b_stores_has_no_secret():
    remember(["sk-argv-known-99"])
    argv = ["minds", "run", "--set", "tinker.api_key=abc", "--set=env.args.hf_token=t", "--set", "trainer.steps=3",
            "--set", "env.args.prompt=use sk-argv-known-99"]  # fmt: skip
    assert redact_arguments(argv) == ["minds", "run", "--set", "tinker.api_key=***", "--set=env.args.hf_token=***",
                                      "--set", "trainer.steps=3", "--set", "env.args.prompt=use ***"]  # fmt: skip


def test_a_list_of_secrets_under_a_plural_name_is_redacted_whole():
    shown = redact({"args": {"api_keys": ["sk-plural-1", "sk-plural-2"], "max_new_tokens": 64}})
    assert shown == {"args": {"api_keys": [REDACTED, REDACTED], "max_new_tokens": 64}}


def test_a_plugin_error_quoting_a_secret_is_masked_before_any_cut_of_it():
    # a run's "no step trained" reason quotes the first error cut to 160 characters: a secret across the cut was
    # left half shown ("az az-SECRET"), the rest of it no longer matching what masking searches for
    secret = "az-SECRET-4242-cut"
    remember([secret])
    failed = Rollout(Conversation(None, None, None, 64, 1), error=error_text(RuntimeError("x" * 130 + f" key {secret}")))
    reason = no_datum_reason([Group("env", Task(prompt="", id="t"), [failed])])
    assert "az-SEC" not in reason and "***" in reason, reason
