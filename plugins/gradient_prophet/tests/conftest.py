"""A real policy on the local backend (tiny torch model + LoRA), and helpers to train and snapshot it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest

from minds_core import Context
from minds_core.testing import skip_unless_installed

pytest_pycollect_makemodule = skip_unless_installed("minds_gradient_prophet", "pip install -c constraints.txt -e plugins/gradient_prophet")


@attrs.define
class Policy:
    """A policy being trained: its service, its training client, and a context of its current snapshot."""

    service: Any
    training: Any
    ctx: Context
    versions: int = 0

    async def snapshot(self) -> Context:
        """A context with a new sampler and a saved state of the policy's current weights."""
        self.versions += 1
        saved = await self.training.save_state(f"policy-{self.versions}")
        sampler = await self.training.save_weights_and_get_sampling_client()
        self.ctx = attrs.evolve(self.ctx, sampler=sampler, policy_checkpoint=saved.path)
        return self.ctx

    async def train_on(self, texts: Sequence[tuple[str, str]], learning_rate: float, steps: int = 1) -> None:
        """Supervised steps of the policy on (prompt, completion) texts, completion tokens only."""
        from minds_gradient_prophet.shadow import scoring_datum

        tok = self.ctx.tokenizer
        data = [scoring_datum(tok.encode(p), tok.encode(c, add_special_tokens=False)) for p, c in texts]
        await self.train(data, learning_rate, steps)

    async def train(self, data: Sequence[Any], learning_rate: float, steps: int = 1) -> None:
        """Cross-entropy steps of the policy on ``data``."""
        for _ in range(steps):
            await self.training.forward_backward(list(data), "cross_entropy")
            await self.training.optim_step(_adam(learning_rate))

    async def manual_one_step_delta(self, checkpoint: str, example: Any, probe: Any, learning_rate: float) -> float:
        """Δ computed step by step on a fresh client from ``checkpoint``, independently of ShadowTrainer."""
        client = await self.service.create_training_client_from_state(checkpoint)

        async def score() -> float:
            out = await client.forward([probe], "cross_entropy")
            logprobs = out.loss_fn_outputs[0]["logprobs"].to_numpy()
            return float((logprobs * probe.loss_fn_inputs["weights"].to_numpy()).sum())

        before = await score()
        await client.forward_backward([example], "cross_entropy")
        await client.optim_step(_adam(learning_rate))
        return await score() - before


def _adam(learning_rate: float) -> Any:
    from tinker import types

    return types.AdamParams(learning_rate=learning_rate)


@pytest.fixture
async def policy(tmp_path: Path) -> AsyncIterator[Policy]:
    """A fresh LoRA policy on the tiny local model, snapshotted once."""
    local = pytest.importorskip("minds_core.backends.local", reason="the local backend (torch + peft) is not installed")
    from minds_core.envs.render import Renderer

    service = local.ServiceClient(checkpoint_root=tmp_path / "checkpoints")
    training = await service.create_lora_training_client(local.TINY_MODEL, rank=8, seed=0)
    tokenizer = training.get_tokenizer()
    ctx = Context(
        sampler=None,
        tokenizer=tokenizer,
        service=service,
        renderer=Renderer(tokenizer),
        base_model=local.TINY_MODEL,
    )
    policy = Policy(service, training, ctx)
    await policy.snapshot()
    yield policy
    service.close("success")
