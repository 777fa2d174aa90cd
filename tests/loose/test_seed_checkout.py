"""The seed harness's original configs, in a checkout of its original layout (tests/loose/seed_checkout), train
on the embedded model when run unchanged but for the model and the number of steps.

The slow test is what issue 45 asks of the default model: a random model (minds-tiny) gives every rollout of a
group the same reward on these environments, so their runs train nothing; minds-small must make rewards differ
from the first step on. Each run's figures (trained steps, reward first -> last, seconds) are printed.
"""

from __future__ import annotations

import inspect
import io
import sys
import time
from collections.abc import Callable
from contextlib import redirect_stdout
from pathlib import Path

import pytest
import yaml

from minds_core.cli.command import main
from minds_core.contract.locate import import_environment
from minds_core.testing import run_minds

CHECKOUT = Path(__file__).resolve().parent / "seed_checkout"
ENVIRONMENTS = ("ghost_trace", "self_prediction", "entropy_intuition")
PACKAGES = {"environments", *ENVIRONMENTS}
MODEL = "minds-small"
STEPS = 5

#: config -> (env folder, group size, groups per step, max new tokens, steps of the original run), as the TOML says.
CONFIGS = {
    "train_ghost": ("./environments/ghost_trace", 8, 4, 32, 200),
    "train_self_pred": ("./environments/self_prediction", 8, 4, 48, 300),
    "ci_test": ("./environments/self_prediction", 4, 2, 32, 3),
    "train_entropy_intuition": ("./environments/entropy_intuition", 8, 4, 40, 150),
}


@pytest.fixture
def checkout(work_from: Callable[[Path, set[str]], Path]) -> Path:
    """Work from the checkout's root, as the seed's runner did; forget its modules afterwards."""
    return work_from(CHECKOUT, set(PACKAGES))


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_the_original_config_loads_and_maps_to_minds_keys(checkout: Path, config: str) -> None:
    env_id, group_size, groups, max_tokens, steps = CONFIGS[config]
    out = io.StringIO()
    with redirect_stdout(out):
        code = main(["run", f"configs/{config}.toml", "--dry-run"])
    assert code == 0
    resolved = yaml.safe_load(out.getvalue())
    assert resolved["env"]["id"] == env_id
    assert resolved["trainer"]["group_size"] == group_size  # [trainer] rollouts_per_example
    assert resolved["trainer"]["groups_per_batch"] == groups  # [trainer] batch_size
    assert resolved["trainer"]["steps"] == steps  # [trainer] total_batches
    assert resolved["sampling"]["max_tokens"] == max_tokens  # [trainer.args] max_new_tokens
    assert resolved["trainer"]["loss_fn"] == "importance_sampling"
    assert resolved["tinker"]["api_key_env"] == "TINKER_API_KEY"


def test_the_environments_score_fixed_replies_as_documented(checkout: Path) -> None:
    ghost, self_prediction, entropy = (import_environment(f"./environments/{name}") for name in ENVIRONMENTS)
    parse_numbers, probe_text = ghost.parse_numbers, ghost.probe_text
    parse_reply, is_correct = self_prediction.parse_reply, self_prediction.is_correct
    parse_entropy, normalized_entropy = entropy.parse_reply, entropy.normalized_entropy

    assert parse_numbers("7 then 1, 2, 3, 4, 5") == [1, 2, 3, 4, 5] and parse_numbers("1, 2, 3, 4") is None
    assert probe_text([1, 2, 3, 4, 5]) == "Sequence: 1, 2, 3, 4, 5. Guess the object:"

    parsed = parse_reply("```\n<think>9 * 9</think>\nFINAL ANSWER: -123\nCONFIDENCE: 0.8\n```")
    assert (parsed.answer, parsed.confidence, parsed.format_ok) == ("-123", 0.8, True)
    assert not is_correct("123", "-123") and is_correct("-123", "-123") and is_correct("1,234,000", "1234000")
    no_confidence = parse_reply("FINAL ANSWER: 5")
    assert (no_confidence.confidence, no_confidence.format_ok) == (0.5, False)
    assert _rubric_reward(self_prediction, "FINAL ANSWER: 42\nCONFIDENCE: 0.9", "42") == pytest.approx(0.2 + 0.5 + 0.3 * 0.99)
    assert _rubric_reward(self_prediction, "FINAL ANSWER: 41\nCONFIDENCE: 0.9", "42") == pytest.approx(0.2 + 0.3 * 0.19)
    assert _rubric_reward(self_prediction, "forty-two", "42") == pytest.approx(0.3 * 0.75)

    assert parse_entropy("NUMBER: 17\nFEELING: torn\nENTROPY: 0.4") == {"number": 17, "feeling": "torn", "entropy": 0.4}
    assert normalized_entropy([1.0]) == 0.0
    assert normalized_entropy([1 / 3, 1 / 3, 1 / 3]) == pytest.approx(0.7924812503605781)  # log 3 / log 4


def _rubric_reward(module: object, completion: str, answer: str, info: dict | None = None) -> float:
    """The weighted sum of a dataset environment's rubric for one reply (functions without a sampler only)."""
    rubric = module.load_environment(num_examples=1).rubric
    given = {"completion": completion, "answer": answer, "info": info if info is not None else {"aliases": []}}
    total = 0.0
    for function, weight in zip(rubric.funcs, rubric.weights, strict=True):
        total += weight * function(**{name: given[name] for name in inspect.signature(function).parameters})
    return total


def _check_rewards(config: str, rollouts: list[dict]) -> None:
    """Each rollout's reward as its environment scores the reply it got (ghost_trace's and entropy_intuition's
    model-aware parts: only where the reply's format decides them)."""
    for group in rollouts:
        for rollout in group["rollouts"]:
            (reply,) = rollout["completion"]
            if config == "train_ghost":
                valid = sys.modules["ghost_trace"].parse_numbers(reply) is not None
                assert (rollout["reward"] == -100.0) != valid, (reply, rollout["reward"])
            elif config == "train_entropy_intuition":
                stated = sys.modules["entropy_intuition"].parse_reply(reply)["entropy"]
                assert 0.0 <= rollout["reward"] <= 1.0 and (stated is not None or rollout["reward"] == 0.0), (
                    reply,
                    rollout["reward"],
                )
            else:
                info = {"aliases": [f"{int(group['answer']):,}"]}
                expected = _rubric_reward(sys.modules["self_prediction"], reply, group["answer"], info)
                assert rollout["reward"] == pytest.approx(expected), reply


@pytest.mark.slow
@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_the_original_config_trains_on_the_embedded_model(checkout: Path, tmp_path: Path, config: str) -> None:
    start = time.monotonic()
    result = run_minds(
        f"configs/{config}.toml", "--model", MODEL, "--steps", str(STEPS), "--backend", "local", runs_dir=tmp_path, name=config
    )
    seconds = time.monotonic() - start
    trained = [m["step"] for m in result.metrics if m.get("train/datums", 0) > 0]
    rewards = [m["reward/mean"] for m in result.metrics]
    if rewards:
        print(
            f"\n{config} on {MODEL}: trained {len(trained)}/{STEPS} steps, reward {rewards[0]:.3f} -> {rewards[-1]:.3f}, {seconds:.0f} s"
        )
    alike = [g for g in result.rollouts if len({r["reward"] for r in g["rollouts"]}) == 1]
    why = f"trained steps {trained} of {STEPS}; {len(alike)} of {len(result.rollouts)} logged groups scored alike" + "".join(
        f"\n  step {g['step']} reward {g['rollouts'][0]['reward']}: {[r['completion'][0][:80] for r in g['rollouts'][:3]]}"
        for g in alike[:4]
    )
    assert result.exit_code == 0, f"{result.error}; {why}"
    assert result.steps == list(range(STEPS))
    assert sum(m["rollouts/failed"] for m in result.metrics) == 0
    assert len(trained) >= STEPS - 1, why
    result.assert_trained()
    _check_rewards(config, result.rollouts)
