"""A Tinker user's script, written against the ``tinker`` SDK's public API only.

It knows nothing of minds: it finds the service through ``TINKER_BASE_URL`` and
``TINKER_API_KEY``, as any Tinker program does. It runs a few SFT steps with
``cross_entropy``, then one RL step with ``importance_sampling`` on samples drawn
from a snapshot of the trained weights, and prints a JSON summary on stdout.
"""

from __future__ import annotations

import json

import numpy as np
import tinker
from tinker import types

BASE_MODEL = "minds-tiny"
TEXT = "abc abc abc abc"


def sft_datum(tokens: list[int]) -> types.Datum:
    return types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={"target_tokens": np.array(tokens[1:]), "weights": np.ones(len(tokens) - 1)},
    )


def main() -> None:
    service = tinker.ServiceClient()
    training = service.create_lora_training_client(base_model=BASE_MODEL, rank=8, seed=0).result()
    tokenizer = training.get_tokenizer()
    text = list(tokenizer.encode(TEXT))

    sft_losses = []
    for _ in range(6):
        fwd_bwd = training.forward_backward([sft_datum(text)], "cross_entropy")
        optim = training.optim_step(types.AdamParams(learning_rate=2e-3))
        sft_losses.append(fwd_bwd.result().metrics["loss:sum"])
        optim.result()

    sampler = training.save_weights_and_get_sampling_client().result()
    prompt = text[:4]
    response = sampler.sample(
        prompt=types.ModelInput.from_ints(prompt),
        num_samples=4,
        sampling_params=types.SamplingParams(max_tokens=6, temperature=2.0, seed=1),
    ).result()
    rewards = np.array([np.mean(seq.tokens) / 259.0 for seq in response.sequences])  # prefer high token ids
    advantages = rewards - rewards.mean()
    data = []
    for sequence, advantage in zip(response.sequences, advantages):
        tokens = prompt + list(sequence.tokens)
        n_prompt = len(prompt) - 1
        data.append(
            types.Datum(
                model_input=types.ModelInput.from_ints(tokens[:-1]),
                loss_fn_inputs={
                    "target_tokens": np.array(tokens[1:]),
                    "logprobs": np.array([0.0] * n_prompt + list(sequence.logprobs), dtype=np.float32),
                    "advantages": np.array([0.0] * n_prompt + [advantage] * len(sequence.tokens), dtype=np.float32),
                },
            )
        )
    rl = training.forward_backward(data, "importance_sampling")
    step = training.optim_step(types.AdamParams(learning_rate=1e-2))
    rl_metrics, step_metrics = rl.result().metrics, step.result().metrics
    checkpoint = training.save_state("final").result().path
    service.close("success").result()
    print(json.dumps({
        "sft_losses": sft_losses,
        "samples": [list(seq.tokens) for seq in response.sequences],
        "decoded": [tokenizer.decode(seq.tokens) for seq in response.sequences],
        "rl_metrics": rl_metrics,
        "optim_metrics": step_metrics,
        "checkpoint": checkpoint,
    }))


if __name__ == "__main__":
    main()
