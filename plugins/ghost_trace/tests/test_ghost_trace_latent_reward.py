"""The latent reward on the local backend's real tiny model: it is the CURRENT policy's log-probability."""

from pathlib import Path

import attrs
import pytest
import tinker

from minds_core import Context
from minds_ghost_trace.environment import REWARD_NAME, load_environment
from minds_ghost_trace.reward import INVALID_PENALTY, OFFSET, VALID_FLOOR, latent_logprob, probe_tokens

local = pytest.importorskip("minds_core.backends.local", reason="the local backend (torch + peft) is not installed")

CODE = (12, 7, 300, 45, 9)
COMPLETION = "12, 7, 300, 45, 9"
WORD = "teapot"


def _target_datum(tokens: list[int], n_target: int) -> tinker.Datum:
    """Cross-entropy on the word's tokens only (input = seq[:-1], targets = seq[1:])."""
    weights = [0.0] * (len(tokens) - 1 - n_target) + [1.0] * n_target
    return tinker.Datum(
        model_input=tinker.types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={"target_tokens": tokens[1:], "weights": weights},
    )


async def test_reward_follows_the_policy_being_trained(tmp_path: Path) -> None:
    service = local.ServiceClient(checkpoint_root=tmp_path)
    training = await service.create_lora_training_client(base_model=local.TINY_MODEL, rank=8, seed=0)
    tokenizer = training.get_tokenizer()
    ctx = Context(
        sampler=await training.save_weights_and_get_sampling_client(),
        tokenizer=tokenizer,
        service=service,
        renderer=None,
        base_model=local.TINY_MODEL,
    )
    before = await latent_logprob(COMPLETION, WORD, ctx)

    # The same number computed another way: the training client's own log-probs of the target.
    tokens, n_target = probe_tokens(tokenizer, CODE, WORD)
    datum = _target_datum(tokens, n_target)
    forward = await training.forward([datum], "cross_entropy")
    target_logprobs = forward.loss_fn_outputs[0]["logprobs"].to_numpy()[-n_target:]
    assert before == pytest.approx(float(target_logprobs.mean()) + OFFSET, abs=1e-3)

    # One optimizer step towards the word: the old sampler is a snapshot and keeps its score,
    # a sampler of the updated policy scores higher.
    await training.forward_backward([datum], "cross_entropy")
    await training.optim_step(tinker.types.AdamParams(learning_rate=5e-2))
    assert await latent_logprob(COMPLETION, WORD, ctx) == pytest.approx(before, abs=1e-5)
    updated = attrs.evolve(ctx, sampler=await training.save_weights_and_get_sampling_client())
    after = await latent_logprob(COMPLETION, WORD, updated)
    assert after > before + 0.5

    # Through the environment: the task's own word is scored, invalid output is penalised.
    env = load_environment(num_examples=1)
    task = attrs.evolve(env.tasks("train")[0], answer=WORD)
    valid = await env.episode(task, updated).step(COMPLETION)
    assert valid.reward == pytest.approx(after, abs=1e-5)
    assert valid.metrics[f"reward/{REWARD_NAME}"] == pytest.approx(after, abs=1e-5)
    invalid = await env.episode(task, updated).step("12, 7, 300")
    assert invalid.reward == INVALID_PENALTY


async def test_a_task_without_its_word_is_an_error_not_a_zero() -> None:
    ctx = Context(sampler=None, tokenizer=None, service=None, renderer=None, base_model="none")
    for missing in (None, "", "  "):
        with pytest.raises(ValueError, match="target word as the task's answer"):
            await latent_logprob(COMPLETION, missing, ctx)


@attrs.define
class CharTokenizer:
    """One token per character, no BOS."""

    bos_token_id: None = None

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [ord(c) for c in text]


@attrs.define
class FlatSampler:
    """Every token gets the same log-probability."""

    logprob: float

    async def compute_logprobs(self, model_input: tinker.types.ModelInput) -> list[float | None]:
        return [None] + [self.logprob] * (model_input.length - 1)


async def test_a_valid_code_never_scores_below_an_invalid_one() -> None:
    def ctx(logprob: float) -> Context:
        return Context(sampler=FlatSampler(logprob), tokenizer=CharTokenizer(), service=None, renderer=None, base_model="none")

    assert VALID_FLOOR == -9.5 and VALID_FLOOR > INVALID_PENALTY
    assert await latent_logprob(COMPLETION, WORD, ctx(-19.0)) == -9.0  # -19 + 10: above the floor, unchanged
    assert await latent_logprob(COMPLETION, WORD, ctx(-23.0)) == -9.5  # -23 + 10 = -13: floored
    assert await latent_logprob(COMPLETION, WORD, ctx(-1e4)) == -9.5
    assert await latent_logprob("12, 7, 300", WORD, ctx(-23.0)) == INVALID_PENALTY
