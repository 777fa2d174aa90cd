"""entropy_intuition: the tasks' allowed numbers, and H_norm from the current policy on the local backend."""

import math
import re

import pytest

from minds_core.base.errors import ConfigError
from minds_gradient_prophet.entropy import GENERATORS, load_entropy_intuition
from minds_gradient_prophet.scoring import normalized_entropy
from minds_gradient_prophet.shadow import scoring_datum


def _range(prompt: str) -> range:
    lo, hi = map(int, re.search(r"from (\d+) to (\d+)", prompt).groups())
    return range(lo, hi + 1)


def test_each_kind_allows_what_its_prompt_describes():
    env = load_entropy_intuition(num_examples=300, seed=3)
    seen = set()
    for task in env.tasks("train"):
        kind, allowed = task.info["kind"], task.info["allowed"]
        seen.add(kind)
        assert allowed == task.answer and allowed
        if kind == "product":
            a, b = map(int, re.search(r"product of (\d+) and (\d+)", task.prompt).groups())
            assert allowed == [a * b]
        elif kind == "primes":
            span = _range(task.prompt)
            assert allowed == [n for n in span if n > 1 and all(n % d for d in range(2, n))]
        elif kind == "evens":
            assert allowed == [n for n in _range(task.prompt) if n % 2 == 0]
        else:
            assert allowed == list(_range(task.prompt))
        assert "NUMBER:" in task.prompt and "FEELING:" in task.prompt and "ENTROPY:" in task.prompt
    assert seen == set(GENERATORS)
    assert [t.prompt for t in load_entropy_intuition(num_examples=300, seed=3).tasks("train")] == [
        t.prompt for t in env.tasks("train")
    ]
    assert {t.info["kind"] for t in load_entropy_intuition(kinds=["evens"]).tasks("eval")} == {"evens"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"kinds": ["dice"]}, "env.args.kinds"),
        ({"kinds": "evens"}, "env.args.kinds"),
        ({"num_examples": 0}, "env.args.num_examples = 0: must be an integer >= 1"),
        ({"num_eval": -1}, "env.args.num_eval"),
    ],
)
def test_bad_arguments_are_named(args, message):
    with pytest.raises(ConfigError, match=message):
        load_entropy_intuition(**args)


@pytest.mark.slow
async def test_h_norm_is_the_current_policys_spread_over_the_allowed_numbers(policy):
    env = load_entropy_intuition(kinds=["evens"], num_examples=1)
    (task,) = env.tasks("train")
    allowed = task.info["allowed"]

    renderer = policy.ctx.renderer
    context = renderer.prompt_tokens(env.episode(task, policy.ctx).initial_observation()) + renderer.encode("NUMBER:")
    data = [scoring_datum(context, renderer.encode(f" {n}\n")) for n in allowed]

    async def by_hand() -> float:
        """The same H_norm through the training client's forward pass."""
        out = await policy.training.forward(data, "cross_entropy")
        weights = [d.loss_fn_inputs["weights"].to_numpy() for d in data]
        sums = [float((o["logprobs"].to_numpy() * w).sum()) for o, w in zip(out.loss_fn_outputs, weights)]
        return normalized_entropy([math.exp(s) for s in sums])

    async def reply(text: str):
        return await env.episode(task, policy.ctx).step(text)

    before = await by_hand()
    result = await reply(f"NUMBER: {allowed[0]}\nFEELING: calm\nENTROPY: 0.5")
    assert result.metrics["entropy_intuition/h_norm"] == pytest.approx(before, abs=1e-4)
    assert result.reward == pytest.approx(max(0.0, 1 - abs(0.5 - before)), abs=1e-4)
    assert result.metrics["entropy_intuition/number_allowed"] == 1.0
    missing = await reply("NUMBER: 3\nFEELING: unsure")
    assert missing.reward == 0.0 and missing.metrics["entropy_intuition/no_prediction"] == 1.0
    assert missing.metrics["entropy_intuition/number_allowed"] == 0.0

    # Teach the policy to answer with the allowed numbers evenly: its choice spreads, H_norm rises.
    await policy.train(data, 1e-2, steps=10)
    await policy.snapshot()
    after = await by_hand()
    assert after > before + 0.03
    trained = await reply("NUMBER: 4\nFEELING: torn\nENTROPY: 0.9")
    assert trained.metrics["entropy_intuition/h_norm"] == pytest.approx(after, abs=1e-4)
