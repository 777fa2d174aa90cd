"""Configs written for the seed harness (run_experiment.py configs/x.toml) run unchanged.

The fixture is a harness TOML with every key the harness reads: minds maps the
ones it has under another name, accepts the ones it has no use for with one
warning each, and switches off an environment listed with weight 0.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from minds_core.base import logs
from minds_core.base.errors import ConfigError
from minds_core.cli.command import main
from minds_core.config import load_config
from minds_core.config.harness import NO_EFFECT, RENAMED
from minds_core.testing import run_minds

#: A harness config as the seed's configs/ folder holds them: [model], [trainer] + [trainer.args], [[envs]], [tinker].
HARNESS_TOML = """\
[model]
base_model = "minds-tiny"
renderer_name = "role_colon"

[trainer]
rollouts_per_example = 3
groups_per_batch = 2
total_batches = 2
learning_rate = 1e-4
loss_fn = "importance_sampling"
training_rank = 4
save_every = 20
eval_every = 0
async_off_policy_steps = 0
stream_minibatches = 4
seed = 3

[trainer.args]
max_new_tokens = 6

[[envs]]
name = "letters"
id = "./environments/letter_task"
weight = 1.0

[envs.args]
letter = "e"

[[envs]]
name = "prophet"
id = "./environments/not_installed_here"
weight = 0.0

[tinker]
api_key_env = "MINDS_HARNESS_TEST_UNSET_KEY"
"""

#: A seed-style environment: a point per asked letter in the reply, a tenth per distinct character (so rewards vary).
LETTER_TASK = """\
class LetterTask:
    def __init__(self, letter):
        self.letter = letter

    def initial_observation(self):
        return f"Write the letter {self.letter} many times."

    def step(self, action_text):
        return {"reward": action_text.count(self.letter) + len(set(action_text)) / 10}


def load_environment(letter="a"):
    return LetterTask(letter)
"""


@pytest.fixture
def harness(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A harness checkout: configs/train.toml and environments/letter_task/, run from its root."""
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "train.toml").write_text(HARNESS_TOML)
    env = tmp_path / "environments" / "letter_task"
    env.mkdir(parents=True)
    (env / "__init__.py").write_text(LETTER_TASK)
    monkeypatch.chdir(tmp_path)
    return tmp_path / "configs" / "train.toml"


def test_every_harness_key_maps_or_is_accepted(harness: Path, capfd) -> None:
    logs.configure("json")
    config = load_config(harness)
    err = capfd.readouterr().err
    assert (config.trainer.group_size, config.trainer.groups_per_batch, config.trainer.steps) == (3, 2, 2)
    assert (config.model.lora_rank, config.trainer.max_steps_off_policy, config.seed) == (4, 0, 3)
    assert (config.trainer.save_every, config.trainer.eval_every, config.sampling.max_tokens) == (20, 0, 6)
    assert [e.label for e in config.environments] == ["letters"]  # the weight-0 environment is off
    assert [e.weight for e in config.envs] == [1.0, 0.0]
    for key in ("model.renderer_name", "trainer.stream_minibatches"):
        assert err.count(key) == 1, err  # one warning each
    assert "has no effect in minds" in err


@pytest.mark.slow
def test_the_harness_config_trains_two_steps(harness: Path, tmp_path: Path, capfd) -> None:
    pytest.importorskip("minds_core.backends.local", reason="the local backend (torch + peft) is not installed")
    run = run_minds(str(harness), "--backend", "local", runs_dir=tmp_path / "runs", name="harness")
    err = capfd.readouterr().err
    assert run.exit_code == 0, err
    assert run.steps == [0, 1]
    for step in run.metrics:
        assert step["rollouts/total"] == 6 and step["rollouts/failed"] == 0
        assert step["env/letters/groups"] == 2  # [[envs]] name is the metric name
        assert not any(key.startswith("env/prophet") for key in step)
    for group in run.rollouts:
        assert group["env"] == "letters" and group["prompt"][0]["content"] == "Write the letter e many times."
        for rollout in group["rollouts"]:
            (reply,) = rollout["completion"]
            assert rollout["reward"] == pytest.approx(reply.count("e") + len(set(reply)) / 10)
    resolved = yaml.safe_load((run.run_dir / "config.yaml").read_text())
    assert resolved["trainer"]["steps"] == 2 and resolved["model"]["lora_rank"] == 4
    assert "renderer_name" not in resolved["model"] and "stream_minibatches" not in resolved["trainer"]
    assert err.count("model.renderer_name") == 1


def test_all_environments_off_is_a_config_error(harness: Path, capsys) -> None:
    harness.write_text(HARNESS_TOML.replace("weight = 1.0", "weight = 0.0"))
    assert main(["run", str(harness), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "every environment has weight 0" in err and "Traceback" not in err


def test_unknown_keys_that_are_not_harness_keys_are_still_errors(harness: Path, capsys) -> None:
    harness.write_text(HARNESS_TOML.replace("stream_minibatches = 4", "stream_minibatchs = 4").replace("renderer_name", "rendrer_name"))
    assert main(["run", str(harness), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "trainer.stream_minibatchs: unknown key" in err
    assert "model.rendrer_name: unknown key" in err


def test_a_harness_key_and_its_minds_key_must_agree(harness: Path) -> None:
    harness.write_text(HARNESS_TOML.replace("total_batches = 2", "total_batches = 2\nsteps = 5"))
    with pytest.raises(ConfigError, match="trainer.total_batches and trainer.steps mean the same setting"):
        load_config(harness)
    harness.write_text(HARNESS_TOML.replace("total_batches = 2", "total_batches = 2\nsteps = 2"))
    assert load_config(harness).trainer.steps == 2


def test_harness_keys_work_as_overrides(capfd) -> None:
    logs.configure("json")
    config = load_config(None, ["env.id=x", "trainer.total_batches=7", "model.renderer_name=llama3", "env.name=shown"])
    assert config.trainer.steps == 7 and config.env is not None and config.env.label == "shown"
    assert "model.renderer_name" in capfd.readouterr().err


def test_the_tables_do_not_overlap() -> None:
    assert not set(RENAMED) & set(NO_EFFECT)
    assert all(target not in RENAMED for target in RENAMED.values())


def test_a_harness_reward_line_may_carry_metrics() -> None:
    """The harness environment's reward line: `{"reward": x}`, optionally with `"metrics"`; anything else is no line."""
    from minds_core.agents.harness import reward_line

    assert reward_line('log\n{"reward": 1.5}\n') == (1.5, {})
    assert reward_line('{"reward": 1, "metrics": {"reward/vf.correct": 1, "vf/turns": 3.0}}') == (
        1.0,
        {"reward/vf.correct": 1.0, "vf/turns": 3.0},
    )
    for line in ('{"reward": true}', '{"reward": 1, "metrics": {"a": "x"}}', '{"reward": 1, "metrics": [1]}', "1.0", ""):
        assert reward_line(line) is None, line
