"""How ``minds-small``'s shipped weights are made: full-weight training from scratch on the primer corpus.

``python -m minds_core.backends.local.training.primer_training [--steps N] [--out FILE]`` rewrites
``minds-small.safetensors`` (bfloat16) and prints the loss as it goes and the held-out loss at the end.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from safetensors.torch import save_file
from transformers import PreTrainedTokenizerFast, Qwen3ForCausalLM

from ..model.small_model import SMALL_SIZE, WEIGHTS_FILE
from ..model.tiny_model import byte_tokenizer, qwen3_config
from .primer_corpus import corpus

__all__ = ["held_out_loss", "train_small_model"]

#: The build's defaults: corpus seed, optimizer steps, sequences per step, tokens per sequence, peak learning rate.
SEED, STEPS, BATCH, LENGTH, LEARNING_RATE = 0, 1000, 6, 1024, 3e-3


def train_small_model(
    *,
    seed: int = SEED,
    steps: int = STEPS,
    batch: int = BATCH,
    length: int = LENGTH,
    learning_rate: float = LEARNING_RATE,
    progress: Callable[[int, float], None] | None = None,
) -> tuple[Qwen3ForCausalLM, PreTrainedTokenizerFast]:
    """Train ``minds-small`` from scratch on the primer corpus; ``progress(step, loss)`` after each step."""
    torch.manual_seed(seed)
    tokenizer = byte_tokenizer()
    model = Qwen3ForCausalLM(qwen3_config(tokenizer, SMALL_SIZE))
    stream = _token_stream(tokenizer, seed, tokens=steps * batch * length + length)
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, betas=(0.9, 0.95), weight_decay=0.01)
    warmup = max(1, steps // 20)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps))
    )
    model.train()
    for step in range(steps):
        start = step * batch * length
        rows = stream[start : start + batch * (length + 1)].view(batch, length + 1)
        logits = model(input_ids=rows[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), rows[:, 1:].reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        if progress is not None:
            progress(step, loss.item())
    model.eval()
    return model, tokenizer


def _token_stream(tokenizer: PreTrainedTokenizerFast, seed: int, tokens: int) -> torch.Tensor:
    """Documents of the corpus, each followed by ``<|endoftext|>``, back to back: at least ``tokens`` ids."""
    ids: list[int] = []
    separator = tokenizer.pad_token_id  # <|endoftext|>
    chunk = 0
    while len(ids) < tokens:
        for text in corpus(seed * 1_000_003 + chunk, 256):
            ids.extend(tokenizer.encode(text, add_special_tokens=False))
            ids.append(separator)
        chunk += 1
    return torch.tensor(ids[: tokens + BATCH], dtype=torch.long)


def held_out_loss(model: Qwen3ForCausalLM, tokenizer: PreTrainedTokenizerFast, documents: int = 200) -> float:
    """Mean next-token loss on corpus documents the build never drew (seed -1)."""
    total, count = 0.0, 0
    with torch.no_grad():
        for text in corpus(-1, documents):
            ids = torch.tensor([tokenizer.encode(text, add_special_tokens=False)])
            logits = model(input_ids=ids[:, :-1]).logits[0]
            total += float(torch.nn.functional.cross_entropy(logits, ids[0, 1:], reduction="sum"))
            count += ids.shape[1] - 1
    return total / count


def rebuild(argv: list[str] | None = None) -> int:
    """Rebuild the shipped weights of ``minds-small``."""
    parser = argparse.ArgumentParser(prog="python -m minds_core.backends.local.training.primer_training", description=rebuild.__doc__)
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--out", type=Path, default=WEIGHTS_FILE, help="where to write the weights (safetensors)")
    args = parser.parse_args(argv)
    began = time.monotonic()

    def report(step: int, loss: float) -> None:
        if step % 50 == 0 or step == args.steps - 1:
            print(f"step {step + 1}/{args.steps}  loss {loss:.3f}  {time.monotonic() - began:.0f} s", file=sys.stderr)

    model, tokenizer = train_small_model(seed=args.seed, steps=args.steps, progress=report)
    weights = {name: tensor.detach().to(torch.bfloat16).contiguous() for name, tensor in model.state_dict().items()}
    save_file(weights, str(args.out))
    print(f"held-out loss {held_out_loss(model, tokenizer):.3f}; wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(rebuild())
