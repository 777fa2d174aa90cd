"""The training loop on the local backend with the tiny model: learning, failures, multi-turn, envs, KL."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from minds_core.base import logs
from minds_core.base.errors import UsageError
from minds_core.config import load_config
from minds_core.evaluation.evaluation import evaluate
from minds_core.train import train

FAST = ["model.base_model=minds-tiny", "sampling.max_tokens=12", "trainer.group_size=8", "trainer.groups_per_batch=4", "metrics.sinks=[]"]



def _train(plugins, tmp_path: Path, *overrides: str) -> list[dict]:
    config = load_config(None, [*FAST, f"runs_dir={tmp_path}", "name=run", *overrides])
    summary = train(config, plugins=plugins)
    return [json.loads(line) for line in Path(summary["run_dir"], "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
@pytest.mark.parametrize(
    "recipe",
    [*([f"trainer.loss_fn={loss}"] for loss in ("importance_sampling", "ppo", "sequence_mean_reinforce")),
     *([f"trainer.preset={preset}"] for preset in ("grpo", "dr_grpo", "gspo")),
     # the tiny model's replies all run to max_tokens, so DAPO's overlong filter would (rightly) train on none
     ["trainer.preset=dapo", "trainer.overlong_filter=false"]],
)
def test_reward_rises_far_above_its_start(plugins, tmp_path, recipe):
    rows = _train(plugins, tmp_path, "env.id=toy_char_share", *recipe, "trainer.learning_rate=1e-2", "trainer.steps=10")
    rewards = [r["reward/mean"] for r in rows]
    assert rewards[0] < 0.05, rewards  # a random byte is the letter a about 1/256 of the time
    assert min(rewards[-3:]) > 0.5, rewards
    # A step whose every group drew no "a" (each group about 2 in 3 of the time, at first) trains on nothing;
    # which early step does depends on the seed's draws.
    assert any(r["train/datums"] > 0 for r in rows[:3]), rows


def test_overlong_filtering_gives_truncated_replies_no_gradient(plugins, tmp_path):
    (row,) = _train(plugins, tmp_path, "env.id=toy_char_share", "trainer.preset=dapo", "trainer.steps=1",
                    "rollout.drop_constant_reward_groups=false", "trainer.groups_per_batch=2")
    assert row["length/overlong_filtered"] == 16
    assert row["train/datums"] == 0 and row["train/skipped"] == 1
    assert row["length/overlong_penalty"] == -1.0  # every reply used the whole budget


@pytest.mark.slow
def test_failures_are_counted_and_do_not_stop_the_run(plugins, tmp_path):
    rows = _train(
        plugins, tmp_path, "env.id=toy_flaky", "env.args.modes=[raise, hang, nan, text, ok]",
        "trainer.group_size=2", "trainer.groups_per_batch=5", "trainer.steps=1",
        "rollout.timeout=3", "rollout.retries=1", "rollout.max_failing_rollouts=0",
    )
    (row,) = rows
    assert row["rollouts/total"] == 10
    assert row["rollouts/failed"] == 4  # raise x2, hang x2
    assert row["rollouts/timed_out"] == 2
    assert row["rollouts/retried"] == 4
    assert row["rollouts/invalid_reward"] == 4  # nan x2, "excellent" x2 -> 0
    assert row["groups/dropped_failures"] == 2


@pytest.mark.slow
def test_a_blocking_sync_reward_is_named_and_its_time_charged_to_its_own_rollouts_only(plugins, tmp_path):
    # one task's reward function sleeps 2 s on the event loop's thread, four times (once per rollout of its group):
    # the loop is held 8 s, far past rollout.timeout; only the rollouts that waited on it time out
    (row,) = _train(
        plugins, tmp_path, "env.id=toy_blocking", "trainer.group_size=4", "trainer.groups_per_batch=3", "trainer.steps=1",
        "rollout.timeout=1.5", "rollout.retries=0", "metrics.rollouts_per_step=3",
    )
    groups = [json.loads(line) for line in (tmp_path / "run" / "rollouts.jsonl").read_text().splitlines()]
    timed_out = {group["task"]: sum(r["timed_out"] for r in group["rollouts"]) for group in groups}
    assert timed_out == {"t0": 0, "blocks": 4, "t2": 0}, timed_out
    assert row["rollouts/timed_out"] == 4
    (blocked,) = [group for group in groups if group["task"] == "blocks"]
    for rollout in blocked["rollouts"]:
        assert rollout["error"].startswith("timed out after 1.5 s: reward function 'toy.blocking_share' ran 2.0 s synchronously")


def test_invalid_reward_can_fail_the_rollout(plugins, tmp_path):
    (row,) = _train(plugins, tmp_path, "env.id=toy_flaky", "env.args.modes=[nan]", "trainer.group_size=2",
                    "trainer.groups_per_batch=1", "trainer.steps=1", "rollout.invalid_reward=fail", "rollout.retries=0")
    assert row["rollouts/failed"] == 2 and row["groups/dropped_failures"] == 1 and row["train/skipped"] == 1


def test_constant_groups_can_be_dropped(plugins, tmp_path):
    (row,) = _train(plugins, tmp_path, "env.id=toy_flaky", "env.args.modes=[text]", "trainer.steps=1",
                    "rollout.drop_constant_reward_groups=true", "trainer.groups_per_batch=2")
    assert row["groups/dropped_constant"] == 2 and row["train/skipped"] == 1


@pytest.mark.slow
def test_several_environments_with_weights_and_rubric_overrides(plugins, tmp_path):
    config = tmp_path / "mix.yaml"
    config.write_text(
        "envs:\n"
        "  - id: toy_char_share\n    weight: 3\n"
        "    rewards: [{name: toy.share, weight: 2.0}]\n    extra_rewards: [{name: toy.length, weight: 0.0}]\n"
        "  - id: toy_two_turn\n    weight: 1\n    group_size: 2\n"
        f"runs_dir: {tmp_path}\nname: mix\n"
        "trainer: {steps: 3, groups_per_batch: 4, group_size: 4}\nsampling: {max_tokens: 8}\nmetrics: {sinks: []}\n"
    )
    summary = train(load_config(config), plugins=plugins)
    rows = [json.loads(line) for line in Path(summary["run_dir"], "metrics.jsonl").read_text().splitlines()]
    groups = {env: sum(r.get(f"env/{env}/groups", 0) for r in rows) for env in ("toy_char_share", "toy_two_turn")}
    assert groups["toy_char_share"] + groups["toy_two_turn"] == 12 and groups["toy_char_share"] > groups["toy_two_turn"]
    assert any("env/toy_char_share/reward/toy.length" in r for r in rows)
    two_turn = [r for r in rows if "env/toy_two_turn/turns" in r]
    assert two_turn and all(r["env/toy_two_turn/turns"] == 2.0 for r in two_turn)


@pytest.mark.slow
def test_off_policy_staleness_is_bounded(plugins, tmp_path):
    rows = _train(plugins, tmp_path, "env.id=toy_char_share", "trainer.steps=4", "trainer.max_steps_off_policy=1")
    assert [r["step"] for r in rows] == [0, 1, 2, 3]
    assert max(r["sampler/staleness"] for r in rows) == 1
    strict = _train(plugins, tmp_path / "strict", "env.id=toy_char_share", "trainer.steps=2")
    assert all(r["sampler/staleness"] == 0 for r in strict)


@pytest.mark.slow
def test_kl_penalty_against_the_base_model(plugins, tmp_path):
    rows = _train(plugins, tmp_path, "env.id=toy_char_share", "trainer.steps=3", "trainer.kl_penalty=0.1",
                  "trainer.learning_rate=1e-2")
    assert abs(rows[0]["kl/sampler_base"]) < 1e-4  # the first sampler is the base model
    assert rows[-1]["kl/sampler_base"] > rows[0]["kl/sampler_base"]


@pytest.mark.slow
def test_kl_penalty_against_a_reference_checkpoint(plugins, tmp_path):
    _train(plugins, tmp_path, "env.id=toy_char_share", "trainer.steps=4", "trainer.learning_rate=1e-2")
    saved = json.loads((tmp_path / "run" / "checkpoints.jsonl").read_text().splitlines()[-1])
    common = ["env.id=toy_char_share", "trainer.steps=1", "trainer.kl_penalty=0.1", f"trainer.resume_from={saved['state_path']}"]
    (to_reference,) = _train(plugins, tmp_path, *common, "name=ref", f"trainer.kl_reference={saved['sampler_path']}")
    (to_base,) = _train(plugins, tmp_path, *common, "name=base")
    # the policy starts at the reference checkpoint: no KL to it, a clear KL to the base model it moved away from
    assert abs(to_reference["kl/sampler_reference"]) < 1e-4 and "kl/sampler_base" not in to_reference
    assert to_base["kl/sampler_base"] > 0.01


def test_a_missing_kl_reference_is_a_usage_error(plugins, tmp_path):
    with pytest.raises(UsageError, match=r"the KL reference 'tinker://nope/sampler_weights/x' \(trainer.kl_reference\) cannot be sampled from"):
        _train(plugins, tmp_path, "env.id=toy_char_share", "trainer.steps=1", "trainer.kl_penalty=0.1",
               "trainer.kl_reference=tinker://nope/sampler_weights/x")


@pytest.mark.slow
def test_resume_from_saved_weights_starts_where_they_left(plugins, tmp_path):
    first = _train(plugins, tmp_path, "env.id=toy_char_share", "trainer.steps=8", "trainer.learning_rate=1e-2")
    saved = json.loads((tmp_path / "run" / "checkpoints.jsonl").read_text().splitlines()[-1])["state_path"]
    assert first[-1]["reward/mean"] > 0.5
    again = _train(plugins, tmp_path, "env.id=toy_char_share", "trainer.steps=1", "name=again",
                   f"trainer.resume_from={saved}")
    assert again[0]["reward/mean"] > 0.5


@pytest.mark.slow
def test_secrets_stay_out_of_the_run_directory(plugins, tmp_path, capsys):
    logs.configure("json", "debug")  # every event, not only warnings
    try:
        _train(plugins, tmp_path, "env.id=toy_char_share", "trainer.steps=1", "backend=local",
               "tinker.api_key=tml-do-not-leak")
    finally:
        logs.configure("json", "warning")
    written = "".join(p.read_text() for p in (tmp_path / "run").iterdir() if p.is_file())
    captured = capsys.readouterr()
    assert '"event": "training"' in captured.err  # info events were captured
    assert "tml-do-not-leak" not in written + captured.out + captured.err
    assert "api_key: '***'" in (tmp_path / "run" / "config.yaml").read_text()


def test_eval_reports_rewards_without_training(plugins, tmp_path):
    from minds_core.evaluation.evaluation import EvalPlan

    config = load_config(None, [*FAST, "env.id=toy_char_share", f"runs_dir={tmp_path}"])
    summary = evaluate(config, EvalPlan(tasks=2, samples=8), plugins=plugins).summary()
    assert summary["tasks"] == 2 and summary["rollouts/total"] == 16
    assert 0 <= summary["reward/mean"] < 0.05
    assert not list(tmp_path.rglob("metrics.jsonl"))


@pytest.mark.slow
def test_a_failing_sink_is_disabled_and_training_goes_on(plugins, tmp_path, capsys):
    rows = _train(plugins, tmp_path, "env.id=toy_char_share", "trainer.steps=3", "metrics.sinks=[toy_exploding]")
    assert [r["step"] for r in rows] == [0, 1, 2]
    assert "disk on fire" in capsys.readouterr().err


def test_wandb_sink_without_project_is_a_usage_error(plugins, tmp_path):
    config = load_config(None, [*FAST, "env.id=toy_char_share", f"runs_dir={tmp_path}", "metrics.sinks=[wandb]"])
    with pytest.raises(UsageError, match="wandb_project"):
        train(config, plugins=plugins)


@pytest.mark.slow
def test_a_seeded_run_repeats_exactly(plugins, tmp_path):
    runs = [
        _train(plugins, tmp_path / str(i), "env.id=toy_two_turn", "trainer.steps=2", "trainer.group_size=4",
               "rollout.concurrency=3")
        for i in range(2)
    ]
    keys = ("reward/mean", "tokens/sampled", "tokens/total", "train/loss:sum")
    assert [[r.get(k) for k in keys] for r in runs[0]] == [[r.get(k) for k in keys] for r in runs[1]]


@pytest.mark.slow
def test_eval_command_prints_statistics_as_json(run_minds):
    result = run_minds(["eval", "--env", "toy_char_share", "--tasks", "2", "--samples", "3", "--json",
                        "--set", "sampling.max_tokens=6"], plugins=["toy_plugin"])
    assert result.returncode == 0, result.stderr[-1000:]
    record = json.loads(result.stdout)
    assert record["rollouts/total"] == 6 and "reward/mean" in record
    assert record["splits"] == {"toy_char_share": "train"}  # no held-out split: the training one, with a warning
    assert "no held-out split" in result.stderr
    bad = run_minds(["eval", "--env", "toy_char_share", "--tasks", "0"], plugins=["toy_plugin"])
    assert bad.returncode == 2 and "trainer.eval_tasks = 0: must be an integer in [1, 65536]" in bad.stderr


def test_an_episode_without_any_reward_is_a_failed_rollout(plugins, tmp_path):
    (row,) = _train(plugins, tmp_path, "env.id=toy_two_turn", "trainer.steps=1", "trainer.group_size=2",
                    "trainer.groups_per_batch=1", "rollout.max_turns=1", "rollout.retries=0", "rollout.max_failing_rollouts=2")
    assert row["rollouts/failed"] == 2 and row["groups/dropped_failures"] == 1 and row["train/skipped"] == 1


@pytest.mark.slow
def test_checkpoints_can_be_sampled_from(plugins, tmp_path):
    """A saved sampler checkpoint loads the weights trained up to its step and samples from them."""
    import tinker

    from minds_core.backends.local import ServiceClient

    metrics = _train(plugins, tmp_path, "env.id=toy_char_share", "trainer.steps=2", "trainer.save_every=1",
                     "trainer.learning_rate=1e-2")  # fmt: skip
    assert all(row["train/datums"] > 0 for row in metrics)  # both steps changed the weights
    rows = [json.loads(line) for line in (tmp_path / "run" / "checkpoints.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1]
    service = ServiceClient(checkpoint_root=tmp_path / "_checkpoints")
    prompt = tinker.types.ModelInput.from_ints([257, 117, 104, 101])
    greedy = tinker.types.SamplingParams(max_tokens=3, temperature=0.0)
    sampler = service.create_sampling_client(model_path=rows[-1]["sampler_path"]).result()
    base = service.create_sampling_client(base_model="minds-tiny").result()
    first, again = (sampler.sample(prompt, 1, greedy).result().sequences[0] for _ in range(2))
    assert 1 <= len(first.tokens) <= 3 and first.tokens == again.tokens  # greedy: the same reply twice
    assert all(lp is not None and lp <= 0 for lp in first.logprobs)
    trained, untrained = (s.compute_logprobs(prompt).result()[1:] for s in (sampler, base))
    assert trained != untrained  # the checkpoint holds the trained weights, not the base model's
