"""`minds run` trains each environment of the plugin for a few steps on the local backend."""

import json
from pathlib import Path

import pytest

from minds_core import Task, hookimpl
from minds_core.backends import create_local_service
from minds_core.config import load_config
from minds_core.contract.plugins import load_plugins
from minds_core.testing import run_minds, scripted_pick, scripted_replies_plugin
from minds_core.train import train

pytest.importorskip("minds_core.backends.local", reason="the local backend (torch + peft) is not installed")

CONFIGS = Path(__file__).resolve().parents[3] / "configs"
SMALL = ["trainer.group_size=4", "trainer.groups_per_batch=2", "sampling.max_tokens=16"]


def scripted_deltas(task: Task, reply: str) -> str:
    """TEST-ONLY scripted policy: Δ predictions for the four probes, picked by the tiny model's reply.

    The untrained tiny model never writes a number array, so every reply scores as predicting 0 everywhere.
    """
    return scripted_pick(reply, ["[0.5, 0.5, 0.5, 0.5]", "[-1, 0.2, 1.5, 0]", "PREDICTIONS: [3, -3, 3, -3]", reply])


def scripted_entropy(task: Task, reply: str) -> str:
    """TEST-ONLY scripted policy: a number and an entropy guess, picked by the tiny model's reply (it writes neither)."""
    allowed = task.info["allowed"]
    return scripted_pick(reply, [f"NUMBER: {allowed[0]}\nENTROPY: 0.9", f"NUMBER: {allowed[-1]}\nENTROPY: 0.1", "ENTROPY: 0.5", reply])


def _run(tmp_path: Path, name: str, *extra: str) -> list[dict]:
    run = run_minds(
        str(CONFIGS / f"{name}.toml"), "--steps", "2", runs_dir=tmp_path, name=name,
        overrides=[f"env.id=scripted_{name}", *SMALL, *extra],
    )  # fmt: skip
    run.assert_trained()
    assert run.steps == [0, 1]
    assert all(s["rollouts/failed"] == 0 for s in run.metrics)
    return run.metrics


@pytest.mark.slow
def test_gradient_prophet_trains_and_measures_every_probe(tmp_path, minds_plugin):
    minds_plugin(scripted_replies_plugin("scripted_gradient_prophet", "gradient_prophet", scripted_deltas))
    steps = _run(tmp_path, "gradient_prophet", 'env.args.kinds=["in_context"]')
    for step in steps:
        # four probes per set, each measured with the sampler of the step's policy
        assert step["env/scripted_gradient_prophet/gradient_prophet/probes_measured"] == 4.0
        assert step["env/scripted_gradient_prophet/gradient_prophet/probes_failed"] == 0.0
        assert 0 < step["env/scripted_gradient_prophet/reward/gradient_prophet.in_context"] <= 1


@pytest.mark.slow
def test_entropy_intuition_trains(tmp_path, minds_plugin):
    minds_plugin(scripted_replies_plugin("scripted_entropy_intuition", "entropy_intuition", scripted_entropy))
    steps = _run(tmp_path, "entropy_intuition")
    assert all("env/scripted_entropy_intuition/entropy_intuition/no_prediction" in s for s in steps)


REPLY = "PREDICTION: 0.05\nANSWER: 12, 7, 300, 45, 9"
#: gradient_intuition scoring a fixed well-formed reply in place of the model's (the untrained tiny model never
#: writes the format), so that a run measures real shadow steps.
SCRIPTED_INTUITION = scripted_replies_plugin("scripted_intuition", "gradient_intuition", lambda task, reply: REPLY)


@pytest.mark.slow
def test_gradient_intuition_measures_shadow_steps_from_the_trainers_checkpoints(tmp_path):
    config = load_config(
        CONFIGS / "gradient_intuition.toml",
        [
            "env.id=scripted_intuition", f"runs_dir={tmp_path}", "name=gi", "trainer.steps=2",
            "env.args.inner_args={num_examples: 8}", "trainer.group_size=2", "trainer.groups_per_batch=2",
            "sampling.max_tokens=8", "metrics.sinks=[]",
        ],
    )  # fmt: skip
    train(config, plugins=load_plugins(extra=[("scripted", SCRIPTED_INTUITION)]))
    run = tmp_path / "gi"
    steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert len(steps) == 2
    for step in steps:
        assert step["rollouts/failed"] == 0
        assert step["env/scripted_intuition/gradient_intuition/true_delta"] != 0.0
        # reward = R_inner + alpha * closeness, rollout by rollout, hence also on the step's means
        inner = step["env/scripted_intuition/gradient_intuition/inner_reward"]
        closeness = step["env/scripted_intuition/reward/gradient_intuition.prediction"]
        assert 0 < closeness <= 1
        assert step["env/scripted_intuition/reward_mean"] == pytest.approx(inner + 0.35 * closeness, abs=1e-6)
    # The same reply measured on the same policy checkpoint: every rollout of a group gets the same reward.
    for group in map(json.loads, (run / "rollouts.jsonl").read_text().splitlines()):
        first, *rest = [r["reward"] for r in group["rollouts"]]
        assert rest == [pytest.approx(first, abs=1e-6)] * len(rest)
    assert sorted(p.name for p in (tmp_path / "_checkpoints").rglob("policy-v*")) == [
        "policy-v000000", "policy-v000001", "policy-v000002"
    ]  # the states the trainer saved for the shadows, one per policy version


class CountingService:
    """The local service, counting the training clients created through it."""

    def __init__(self, service):
        self.service, self.lora, self.from_state = service, 0, 0

    def create_lora_training_client(self, *args, **kwargs):
        self.lora += 1
        return self.service.create_lora_training_client(*args, **kwargs)

    def create_training_client_from_state(self, *args, **kwargs):
        self.from_state += 1
        return self.service.create_training_client_from_state(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.service, name)


class CountingBackend:
    def __init__(self):
        self.services = []

    @hookimpl
    def minds_register_backends(self, register):
        def create(config, run_dir):
            self.services.append(CountingService(create_local_service(config, run_dir)))
            return self.services[-1]

        register("counting_local", create, "the local backend, counting created training clients (tests)")


@pytest.mark.slow
@pytest.mark.parametrize("max_shadows", [1, 2])
def test_a_run_creates_at_most_max_shadows_shadow_clients_in_all(tmp_path, max_shadows):
    counting = CountingBackend()
    config = load_config(
        CONFIGS / "gradient_intuition.toml",
        [
            "env.id=scripted_intuition", f"runs_dir={tmp_path}", "name=gi", "trainer.steps=3", "backend=counting_local",
            "env.args.inner_args={num_examples: 8}", f"env.args.max_shadows={max_shadows}", "trainer.group_size=2",
            "trainer.groups_per_batch=2", "sampling.max_tokens=8", "metrics.sinks=[]",
        ],
    )  # fmt: skip
    train(config, plugins=load_plugins(extra=[("scripted", SCRIPTED_INTUITION), ("counting", counting)]))
    steps = [json.loads(line) for line in (tmp_path / "gi" / "metrics.jsonl").read_text().splitlines()]
    assert len(steps) == 3 and all(s["rollouts/failed"] == 0 for s in steps)
    assert all(s["env/scripted_intuition/gradient_intuition/true_delta"] != 0.0 for s in steps)  # 12 measurements
    (service,) = counting.services
    assert service.lora == 1  # the policy
    assert 1 <= service.from_state <= max_shadows  # the shadows, reused across measurements and steps
