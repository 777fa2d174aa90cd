"""minds-openreward-convert: the seed's tinker-config.yaml becomes a minds config that `minds run` accepts."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from minds_core.base.errors import ConfigError
from minds_core.config import load_config, read_config_file
from minds_core.testing import run_minds
from minds_openreward.convert import convert, main, render

SEED_CONFIG = """\
wandb_project_name: "tinker-test"
wandb_run_name: "tinker-rl-test-openreward"
openreward_run_name: "tinker-rl-test-openreward"
log_path: "{runs}"
model_name: "Qwen/Qwen3-30B-A3B"
lora_rank: 8
resume_from: "tinker://run-id/weights/checkpoint_000050"
loss_fn: "ppo"
loss_fn_config: {{clip_low_threshold: 0.7, clip_high_threshold: 1.3}}
advantage_calculation: "centered_normalized"
batch_size: 4
learning_rate: 1e-5
weight_decay: 0.01
num_epochs: 3
save_every: 10
max_active_tasks: 2
max_rollout_concurrency: 64
rollout_timeout: 600
max_response_tokens: 512
max_total_tokens: 8192
max_rollout_retries: 2
thinking: false
seed: 11
environments:
  GeneralReasoning/WhoDunIt:
    splits:
      train:
        shuffle: true
        num_samples: 10
      validation:
        num_samples: null
    num_rollouts: 16
    max_failing_rollouts: 2
    temperature: 1.0
    top_p: 0.95
    reward_reduction: "sum"
    nonterminal_reward: 0.0
    min_reward: -1.0
    max_reward: 1.0
    secrets: ["OPENAI_API_KEY"]
  MATH/GSM8K:
    splits:
      train:
        shuffle: true
        num_samples: 6
    num_rollouts: 8
    temperature: 0.7
    reward_reduction: "mean"
"""


def write(tmp_path: Path, text: str, name: str = "tinker-config.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_every_seed_key_lands_in_the_minds_config(tmp_path: Path, capsys) -> None:
    source = write(tmp_path, SEED_CONFIG.format(runs=tmp_path / "runs"))
    out = tmp_path / "minds.toml"
    assert main([str(source), "-o", str(out)]) == 0
    notes = capsys.readouterr().err
    data = tomllib.loads(out.read_text())
    assert data["model"] == {"base_model": "Qwen/Qwen3-30B-A3B", "lora_rank": 8, "chat_template_args": {"enable_thinking": False}}
    assert data["trainer"] == {
        "resume_from": "tinker://run-id/weights/checkpoint_000050",
        "loss_fn": "ppo",
        "loss_fn_config": {"clip_low_threshold": 0.7, "clip_high_threshold": 1.3},
        "groups_per_batch": 4,
        "learning_rate": 1e-5,
        "weight_decay": 0.01,
        "save_every": 10,
        "advantage": "group_norm",
        "steps": 12,  # 3 epochs x 16 tasks / 4 groups per step
    }
    assert data["sampling"] == {"max_tokens": 512}
    # max_rollout_concurrency (64) wins over max_active_tasks as in the recipe; one batch needs 4 x 16 = 64
    assert data["rollout"] == {"max_total_tokens": 8192, "retries": 2, "timeout": 600, "max_turns": 0, "concurrency": 64}
    assert (data["seed"], data["runs_dir"], data["name"], data["backend"]) == (11, str(tmp_path / "runs"), "tinker-rl-test-openreward", "tinker")
    assert data["metrics"] == {"wandb_project": "tinker-test", "wandb_run_name": "tinker-rl-test-openreward", "sinks": ["console", "report", "wandb"]}
    who, gsm = data["envs"]
    assert who == {
        "id": "openreward",
        "split": "train",
        "group_size": 16,
        "max_failing_rollouts": 2,
        "temperature": 1.0,
        "top_p": 0.95,
        "args": {
            "name": "GeneralReasoning/WhoDunIt",
            "seed": 11,
            "splits": {"train": {"shuffle": True, "num_samples": 10}, "validation": {}},
            "reward_reduction": "sum",
            "nonterminal_reward": 0.0,
            "min_reward": -1.0,
            "max_reward": 1.0,
            "upload_run_name": "tinker-rl-test-openreward",
            "secrets": {"OPENAI_API_KEY": "${OPENAI_API_KEY:-}"},  # named in a list: sent when set, as null
        },
    }
    assert (gsm["group_size"], gsm["args"]["reward_reduction"], gsm["args"]["name"]) == (8, "mean", "MATH/GSM8K")
    for note in (
        "thinking = False: model.chat_template_args.enable_thinking", "rollout.concurrency = 64", "trainer.steps = 12",
        "upload to OpenReward", "no turn limit",
    ):  # fmt: skip
        assert note in notes
    config = load_config(out)
    assert config.trainer.learning_rate == 1e-5 and len(config.environments) == 2
    assert config.model.chat_template_args == {"enable_thinking": False}


def test_unknown_keys_are_named_and_can_be_dropped(tmp_path: Path, capsys) -> None:
    text = SEED_CONFIG.format(runs="runs").replace("lora_rank: 8", "lora_rnak: 8").replace("    num_rollouts: 8", "    num_rolouts: 8")
    source = write(tmp_path, text)
    assert main([str(source)]) == 2
    err = capsys.readouterr().err
    assert "lora_rnak (did you mean lora_rank?)" in err
    assert "environments.MATH/GSM8K.num_rolouts (did you mean num_rollouts?)" in err
    assert main([str(source), "--ignore-unknown"]) == 0
    captured = capsys.readouterr()
    assert "ignored unknown key lora_rnak" in captured.err
    assert "lora_rank" not in captured.out


def test_num_epochs_needs_task_counts_or_steps(tmp_path: Path, capsys) -> None:
    source = write(tmp_path, SEED_CONFIG.format(runs="runs").replace("        num_samples: 6\n", ""))
    assert main([str(source)]) == 2
    assert "pass --steps N" in capsys.readouterr().err
    out = tmp_path / "minds.yaml"
    assert main([str(source), "--steps", "7", "-o", str(out)]) == 0
    assert yaml.safe_load(out.read_text())["trainer"]["steps"] == 7
    assert main([str(source), "-o", str(tmp_path / "minds.json")]) == 2


def test_bad_values_are_reported_before_writing(tmp_path: Path, capsys) -> None:
    source = write(tmp_path, SEED_CONFIG.format(runs="runs").replace('"centered_normalized"', '"whitened"'))
    assert main([str(source), "-o", str(tmp_path / "x.toml")]) == 2
    assert "advantage_calculation = 'whitened'" in capsys.readouterr().err
    source = write(tmp_path, SEED_CONFIG.format(runs="runs").replace('reward_reduction: "mean"', 'reward_reduction: "median"'))
    assert main([str(source), "-o", str(tmp_path / "x.toml")]) == 2
    assert "reward_reduction = 'median'" in capsys.readouterr().err
    assert not (tmp_path / "x.toml").exists()


@pytest.mark.slow
def test_the_console_script_is_installed(tmp_path: Path) -> None:
    source = write(tmp_path, SEED_CONFIG.format(runs="runs"))
    script = Path(sys.executable).with_name("minds-openreward-convert")
    result = subprocess.run([str(script), str(source)], capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr
    assert tomllib.loads(result.stdout)["envs"][0]["args"]["name"] == "GeneralReasoning/WhoDunIt"


@pytest.mark.slow
def test_a_converted_seed_config_runs(hosted_env, tmp_path: Path, capfd) -> None:
    pytest.importorskip("minds_core.backends.local", reason="the local backend (torch + peft) is not installed")
    seed = {
        "model_name": "minds-tiny",
        "log_path": str(tmp_path / "runs"),
        "wandb_run_name": "converted",
        "batch_size": 2,
        "max_response_tokens": 8,
        "max_total_tokens": 900,
        "environments": {"Org/ToolLab": {"splits": {"train": {"shuffle": True, "num_samples": 2}}, "num_rollouts": 8, "temperature": 1.5, "max_reward": 1.0}},
        "num_epochs": 1,
    }
    source = write(tmp_path, yaml.safe_dump(seed))
    out = tmp_path / "minds.toml"
    assert main([str(source), "-o", str(out)]) == 0
    run = run_minds(str(out), "--backend", "local", runs_dir=tmp_path / "runs", name="converted")
    run.assert_trained()  # eight replies a task: their lengths, hence their rewards, differ
    (step,) = run.metrics
    assert step["rollouts/total"] == 16 and step["rollouts/failed"] == 0
    assert step["reward/max"] <= 1.0
    output = capfd.readouterr()
    written = [p.read_bytes() for p in run.run_dir.rglob("*") if p.is_file()]
    assert written and all(hosted_env.hosted_key.encode() not in data for data in written)
    assert hosted_env.hosted_key not in output.out + output.err  # the key was used, never shown
    assert hosted_env.hosted_key in hosted_env.log.keys


#: The recipe's tinker-config.yaml as it is written: top-level secrets for every environment, null = from the variable.
RECIPE_CONFIG = """\
# WandB Settings
wandb_project_name: "tinker-test"
wandb_run_name: "tinker-rl-test-openreward"
openreward_run_name: "tinker-rl-test-openreward"
log_path: "{runs}"

# Model Configuration
model_name: "{model}"
lora_rank: 8
# resume_from: "tinker://run-id/weights/checkpoint_000050"  # Optional

# Training Parameters
loss_fn: "ppo"  # Options: importance_sampling, ppo, cispo, dro
batch_size: {batch}
learning_rate: 1e-5
save_every: 10  # Save checkpoint every N steps

secrets:
  openai_api_key: null  # null = read from OPENAI_API_KEY
  anthropic_api_key: null

environments:
  {first}:
    splits:
      train:
        shuffle: true
        num_samples: null  # null = use all tasks
    num_rollouts: {rollouts}
    max_failing_rollouts: 0
    temperature: 1.0
    reward_reduction: "sum"
    nonterminal_reward: 0.0
    secrets:
      anthropic_api_key: ""  # this environment gets no Anthropic key
      judge_token: null
  MATH/GSM8K:
    splits:
      train:
        shuffle: true
    num_rollouts: 8
    temperature: 0.7
    reward_reduction: "mean"
    secrets:
      openai_api_key: "sk-written-in-the-file-0123"
"""

SECRET_VALUES = {"OPENAI_API_KEY": "sk-openai-live-7c1e", "ANTHROPIC_API_KEY": "sk-ant-live-93fd", "JUDGE_TOKEN": "judge-tok-51aa"}


def recipe(tmp_path: Path, **fields: object) -> Path:
    values = {"runs": tmp_path / "runs", "model": "Qwen/Qwen3-30B-A3B", "batch": 32, "first": "GeneralReasoning/WhoDunIt", "rollouts": 16}
    values.update(fields)
    return write(tmp_path, RECIPE_CONFIG.format(**values))


@pytest.mark.slow
def test_recipe_secrets_become_references_and_never_values(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in SECRET_VALUES.items():
        monkeypatch.setenv(name, value)
    source = recipe(tmp_path)
    out = tmp_path / "minds.toml"
    script = Path(sys.executable).with_name("minds-openreward-convert")
    converted = subprocess.run([str(script), str(source), "-o", str(out)], capture_output=True, text=True, timeout=300, check=False)
    assert converted.returncode == 0, converted.stderr
    data = tomllib.loads(out.read_text())
    who, gsm = data["envs"]
    # top-level secrets merged into every environment; its own override them; "" removes one; null reads the
    # variable when it is set (${VAR:-}); a value written in the file must be exported ($VAR)
    assert who["args"]["secrets"] == {"openai_api_key": "${OPENAI_API_KEY:-}", "judge_token": "${JUDGE_TOKEN:-}"}
    assert gsm["args"]["secrets"] == {"openai_api_key": "$OPENAI_API_KEY", "anthropic_api_key": "${ANTHROPIC_API_KEY:-}"}
    # no turn limit, as in the recipe; concurrency: the recipe's default 32 tasks, below one batch (32 x 16)
    assert data["rollout"]["max_turns"] == 0 and data["rollout"]["concurrency"] == 32
    assert "read from the environment when the run starts (ANTHROPIC_API_KEY, JUDGE_TOKEN, OPENAI_API_KEY)" in converted.stderr
    assert "MATH/GSM8K: secrets.openai_api_key is written as a value in the source file; it is not copied" in converted.stderr
    dry = subprocess.run(
        [str(Path(sys.executable).with_name("minds")), "run", str(out), "--dry-run"], capture_output=True, text=True, timeout=300, check=False
    )
    assert dry.returncode == 0, dry.stderr
    assert yaml.safe_load(dry.stdout)["rollout"]["max_turns"] == 0
    shown = out.read_text() + converted.stdout + converted.stderr + dry.stdout + dry.stderr
    for value in [*SECRET_VALUES.values(), "sk-written-in-the-file-0123"]:
        assert value not in shown


@pytest.mark.parametrize(
    ("batch", "rollouts", "extra", "expected"),
    [
        (2, 4, "", 16),  # one batch needs 2 x 8 (GSM8K's 8 rollouts are the widest)
        (4, 16, "max_active_tasks: 1000000\n", 64),  # never millions: one batch is 4 x 16
        (4, 16, "max_active_tasks: 10\n", 10),
        (4, 16, "max_active_tasks: 10\nmax_rollout_concurrency: 20\n", 20),  # the recipe prefers max_rollout_concurrency
    ],
)
def test_concurrency_is_capped_at_one_batch(tmp_path: Path, batch: int, rollouts: int, extra: str, expected: int) -> None:
    source = recipe(tmp_path, batch=batch, rollouts=rollouts)
    source.write_text(source.read_text() + extra)
    assert convert(read_config_file(source)).config["rollout"]["concurrency"] == expected


def test_null_secrets_whose_variables_are_unset_are_left_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The recipe sends a null secret only when its variable is set; a written value must be exported.
    from minds_openreward.settings import resolve_secrets

    seed = read_config_file(recipe(tmp_path))
    envs = convert(seed).config["envs"]
    for name in SECRET_VALUES:
        monkeypatch.delenv(name, raising=False)
    assert resolve_secrets(envs[0]["args"]["secrets"]) == {}
    monkeypatch.setenv("JUDGE_TOKEN", SECRET_VALUES["JUDGE_TOKEN"])
    assert resolve_secrets(envs[0]["args"]["secrets"]) == {"judge_token": SECRET_VALUES["JUDGE_TOKEN"]}
    with pytest.raises(ConfigError, match="secrets.openai_api_key: environment variable OPENAI_API_KEY is not set"):
        resolve_secrets(envs[1]["args"]["secrets"])  # written in the file: its variable is required


def test_a_local_ors_server_comes_from_the_recipes_environments_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    source = recipe(tmp_path)
    monkeypatch.setenv("OPENREWARD_ENVIRONMENTS_URL", "http://127.0.0.1:8080")
    out = tmp_path / "minds.toml"
    assert main([str(source), "-o", str(out)]) == 0
    assert "served by http://127.0.0.1:8080" in capsys.readouterr().err
    envs = tomllib.loads(out.read_text())["envs"]
    assert [e["args"]["base_url"] for e in envs] == ["http://127.0.0.1:8080"] * 2
    assert main([str(source), "-o", str(tmp_path / "other.toml"), "--environments-url", "http://127.0.0.1:9"]) == 0
    assert {e["args"]["base_url"] for e in tomllib.loads((tmp_path / "other.toml").read_text())["envs"]} == {"http://127.0.0.1:9"}
    monkeypatch.delenv("OPENREWARD_ENVIRONMENTS_URL")
    assert all("base_url" not in e["args"] for e in convert(read_config_file(source)).config["envs"])


def test_bad_secret_tables_are_named(tmp_path: Path) -> None:
    seed = read_config_file(recipe(tmp_path))
    with pytest.raises(ConfigError, match="^secrets: expected a mapping"):
        convert({**seed, "secrets": 42})
    seed["environments"]["MATH/GSM8K"]["secrets"] = {"my-key": None}
    with pytest.raises(ConfigError, match="secrets.my-key: not a usable environment variable name"):
        convert(seed)


@pytest.mark.slow
def test_a_converted_recipe_runs_with_its_secrets(hosted_env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd) -> None:
    pytest.importorskip("minds_core.backends.local", reason="the local backend (torch + peft) is not installed")
    for name, value in SECRET_VALUES.items():
        monkeypatch.setenv(name, value)
    source = recipe(tmp_path, model="minds-tiny", batch=2, first="Org/ToolLab", rollouts=8)
    config = convert(read_config_file(source), steps=1).config
    config["envs"][1]["weight"] = 0.0  # train on the served ToolLab only; GSM8K stays listed, switched off
    config["sampling"] = {"max_tokens": 8, "temperature": 1.5}
    config["rollout"]["max_total_tokens"] = 900
    out = tmp_path / "minds.toml"
    out.write_text(render(config, "toml"))
    run = run_minds(str(out), "--backend", "local", runs_dir=tmp_path / "runs", name="recipe")
    run.assert_trained()  # eight replies a task: their lengths, hence their rewards, differ
    (step,) = run.metrics
    assert step["rollouts/total"] == 16 and step["rollouts/failed"] == 0
    received = hosted_env.lab.census.secrets
    assert received and all(
        s["openai_api_key"] == SECRET_VALUES["OPENAI_API_KEY"] and s["judge_token"] == SECRET_VALUES["JUDGE_TOKEN"] and "anthropic_api_key" not in s
        for s in received
    )
    output = capfd.readouterr()
    written = b"".join(p.read_bytes() for p in run.run_dir.rglob("*") if p.is_file())
    for value in SECRET_VALUES.values():
        assert value.encode() not in written and value not in output.out + output.err
