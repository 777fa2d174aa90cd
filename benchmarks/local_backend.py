"""Throughput of the local backend on the tiny model: sampling vs transformers' generate, and training.

Run: ``python benchmarks/local_backend.py``. Prints plain figures. The target
(>= 3x) is against the naive baseline: ``model.generate`` called once per
sample, as a client looping over ``num_samples`` would; a batched ``generate``
(one call, the prompt repeated ``num_samples`` times) is printed for reference.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable

import torch
from tinker import types
from transformers import AutoModelForCausalLM, GenerationConfig

from minds_core.backends.local import DEFAULT_BASE_MODEL, ServiceClient
from minds_core.backends.local.tiny_model import tiny_model_path

SMOKE = "--smoke" in sys.argv[1:]  # seconds: checks the script runs, figures mean nothing
NUM_SAMPLES = 2 if SMOKE else 16
MAX_TOKENS = 4 if SMOKE else 64
REPEATS = 1 if SMOKE else 5
PROMPT = "<|im_start|>user\nWhat is 12+34? Answer with a number.<|im_end|>\n<|im_start|>assistant\n"


def best_seconds(run: Callable[[], object], repeats: int = REPEATS) -> float:
    """Median wall time of ``run`` after one warm-up call."""
    run()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    with ServiceClient() as service:
        sampler = service.create_sampling_client(base_model=DEFAULT_BASE_MODEL).result()
        tokenizer = sampler.get_tokenizer()
        prompt = list(tokenizer.encode(PROMPT))
        params = types.SamplingParams(max_tokens=MAX_TOKENS, temperature=1.0, seed=0, stop=[])
        tokens = NUM_SAMPLES * MAX_TOKENS

        model_input = types.ModelInput.from_ints(prompt)
        ours = best_seconds(lambda: sampler.sample(model_input, NUM_SAMPLES, params).result())

        model = AutoModelForCausalLM.from_pretrained(tiny_model_path(), dtype=torch.float32).eval()
        config = GenerationConfig(
            do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=MAX_TOKENS,
            min_new_tokens=MAX_TOKENS, pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
        )
        prompt_ids = torch.tensor([prompt])

        def generate_per_sample() -> None:
            with torch.inference_mode():
                for _ in range(NUM_SAMPLES):
                    model.generate(prompt_ids, generation_config=config)

        def generate_batched() -> None:
            with torch.inference_mode():
                model.generate(prompt_ids.repeat(NUM_SAMPLES, 1), generation_config=config)

        per_sample = best_seconds(generate_per_sample, repeats=2)
        batched = best_seconds(generate_batched)

        trainer = service.create_lora_training_client(DEFAULT_BASE_MODEL, rank=8, seed=0).result()
        seq = list(tokenizer.encode((PROMPT + "46<|im_end|>\n") * 3))
        data = [
            types.Datum(model_input=types.ModelInput.from_ints(seq[:-1]), loss_fn_inputs={"target_tokens": seq[1:]})
            for _ in range(16)
        ]
        train_tokens = sum(len(seq) - 1 for _ in data)
        fwd_bwd = best_seconds(lambda: trainer.forward_backward(data, "cross_entropy").result())

        def train_step() -> None:
            trainer.forward_backward(data, "cross_entropy")
            trainer.optim_step(types.AdamParams(learning_rate=1e-4)).result()

        step = best_seconds(train_step)
        adapted = trainer.save_weights_and_get_sampling_client().result()
        with_lora = best_seconds(lambda: adapted.sample(model_input, NUM_SAMPLES, params).result())

    print(f"model: {DEFAULT_BASE_MODEL}, torch threads: {torch.get_num_threads()}, prompt: {len(prompt)} tokens")
    print(f"sampling, num_samples={NUM_SAMPLES}, max_tokens={MAX_TOKENS} ({tokens} tokens per request):")
    print(f"  local sampler (one batch, KV cache):  {tokens / ours:10.0f} tokens/s")
    print(f"  local sampler, rank-8 LoRA adapter:   {tokens / with_lora:10.0f} tokens/s")
    print(f"  generate, one call per sample:        {tokens / per_sample:10.0f} tokens/s")
    print(f"  generate, batched:                    {tokens / batched:10.0f} tokens/s")
    print(f"  speed-up vs per-sample generate (target >= 3x): {per_sample / ours:.1f}x")
    print(f"  speed-up vs batched generate:                   {batched / ours:.1f}x")
    print(f"forward_backward, 16 datums x {len(seq) - 1} tokens, cross_entropy, rank 8:")
    print(f"  {train_tokens / fwd_bwd:10.0f} tokens/s ({fwd_bwd * 1000:.1f} ms per call)")
    print(f"  training step (forward_backward + optim_step): {step * 1000:.1f} ms")


if __name__ == "__main__":
    main()
