"""Sampling clients: logprob agreement with training, seeds, stops, snapshots, bad input."""

from __future__ import annotations

import string
from collections.abc import Callable

import numpy as np
import pytest
import tinker
import torch
from tinker import types

from minds_core.backends.local import (
    TINY_MODEL,
    LocalBadRequestError,
    SamplingClient,
    ServiceClient,
    TrainingClient,
)

ADAM = types.AdamParams(learning_rate=2e-2)


def tokens_of(prompt: list[int]) -> types.ModelInput:
    return types.ModelInput.from_ints(prompt)


@pytest.fixture
def trained(trainer: TrainingClient, sft_datum: Callable[..., types.Datum]) -> TrainingClient:
    """A run with a few steps behind it, so its adapter is not the identity."""
    data = [sft_datum("The cat sat on the mat."), sft_datum("1+1=2")]
    for _ in range(3):
        trainer.forward_backward(data, "cross_entropy")
        trainer.optim_step(ADAM)
    return trainer


@pytest.fixture
def sampler(trained: TrainingClient) -> SamplingClient:
    return trained.save_weights_and_get_sampling_client().result()


def test_compute_logprobs_matches_training_forward(
    trained: TrainingClient, sampler: SamplingClient, encode: Callable[[str], list[int]]
) -> None:
    texts = ["The cat sat on the mat.", "Hello, world! 42", "xy"]
    data = [
        types.Datum(model_input=tokens_of(encode(t)[:-1]), loss_fn_inputs={"target_tokens": encode(t)[1:]})
        for t in texts
    ]
    forward = trained.forward(data, "cross_entropy").result()
    for text, out in zip(texts, forward.loss_fn_outputs, strict=True):
        logprobs = sampler.compute_logprobs(tokens_of(encode(text))).result()
        assert logprobs[0] is None and len(logprobs) == len(encode(text))
        diff = np.abs(np.array(logprobs[1:]) - out["logprobs"].to_numpy()).max(initial=0.0)
        assert diff < 1e-4


def test_sampled_logprobs_match_a_rescoring_of_the_sequence(sampler: SamplingClient, encode) -> None:
    prompt = encode("<|im_start|>user\n2+2=<|im_end|>\n<|im_start|>assistant\n")
    params = types.SamplingParams(max_tokens=24, seed=7, temperature=0.7, stop=[])
    response = sampler.sample(tokens_of(prompt), 4, params).result()
    assert len(response.sequences) == 4
    for seq in response.sequences:
        assert seq.stop_reason == "length" and len(seq.tokens) == len(seq.logprobs) == 24
        rescored = sampler.compute_logprobs(tokens_of(prompt + seq.tokens)).result()[len(prompt):]
        assert np.abs(np.array(rescored) - np.array(seq.logprobs)).max() < 1e-4  # temperature-1 log p


def test_same_seed_same_tokens_and_different_seeds_differ(sampler: SamplingClient, encode) -> None:
    prompt = tokens_of(encode("Once upon a time"))

    def draw(seed: int | None) -> list[list[int]]:
        params = types.SamplingParams(max_tokens=16, seed=seed, stop=[])
        return [s.tokens for s in sampler.sample(prompt, 3, params).result().sequences]

    first = draw(1)
    assert draw(1) == first
    assert draw(2) != first
    assert len({tuple(t) for t in first}) == 3  # the samples of one request differ from each other
    assert draw(None) != draw(None)


def test_greedy_and_truncation(sampler: SamplingClient, encode) -> None:
    prompt = tokens_of(encode("abc"))
    greedy = sampler.sample(prompt, 2, types.SamplingParams(max_tokens=12, temperature=0, stop=[])).result()
    top_k1 = sampler.sample(prompt, 1, types.SamplingParams(max_tokens=12, top_k=1, seed=3, stop=[])).result()
    top_p0 = sampler.sample(prompt, 1, types.SamplingParams(max_tokens=12, top_p=1e-6, seed=4, stop=[])).result()
    assert greedy.sequences[0].tokens == greedy.sequences[1].tokens == top_k1.sequences[0].tokens
    assert top_p0.sequences[0].tokens == greedy.sequences[0].tokens
    prefix, tokens = encode("abc"), greedy.sequences[0].tokens
    scored = sampler.sample(tokens_of(prefix + tokens), 1, types.SamplingParams(max_tokens=1), topk_prompt_logprobs=1)
    top1 = [row[0][0] for row in scored.result().topk_prompt_logprobs[len(prefix) :]]
    assert top1 == tokens  # each greedy token is the argmax given its prefix


def test_stop_token_ids_end_the_sample_and_are_included(sampler: SamplingClient, encode) -> None:
    prompt = tokens_of(encode("Once upon a time"))
    free = sampler.sample(prompt, 1, types.SamplingParams(max_tokens=30, seed=11, stop=[])).result().sequences[0]
    assert free.stop_reason == "length" and len(free.tokens) == 30
    stop_token = free.tokens[10]
    end = free.tokens.index(stop_token) + 1
    stopped = sampler.sample(prompt, 1, types.SamplingParams(max_tokens=30, seed=11, stop=[stop_token])).result()
    assert stopped.sequences[0].stop_reason == "stop"
    assert stopped.sequences[0].tokens == free.tokens[:end]
    assert stopped.sequences[0].logprobs == pytest.approx(free.logprobs[:end])


def test_stop_strings_end_the_sample_with_their_tokens(sampler: SamplingClient, encode) -> None:
    prompt = tokens_of(encode("Once upon a time"))
    free = sampler.sample(prompt, 1, types.SamplingParams(max_tokens=40, seed=5, stop=[])).result().sequences[0]
    printable = {ord(c) for c in string.ascii_letters + string.digits}
    index = next(i for i, t in enumerate(free.tokens) if i >= 3 and t in printable and free.tokens[i - 1] in printable)
    stop = bytes(free.tokens[index - 1 : index + 1]).decode()  # a two-character stop string
    stopped = sampler.sample(prompt, 1, types.SamplingParams(max_tokens=40, seed=5, stop=stop)).result().sequences[0]
    assert stopped.stop_reason == "stop"
    assert stop in sampler.get_tokenizer().decode(stopped.tokens)
    assert stopped.tokens == free.tokens[: len(stopped.tokens)] and len(stopped.tokens) <= index + 1


def test_eos_stops_by_default_and_empty_stop_list_disables_it(
    trainer: TrainingClient, sft_datum: Callable[..., types.Datum], encode
) -> None:
    text = "<|im_start|>assistant\nhi<|im_end|>"
    for _ in range(20):
        trainer.forward_backward([sft_datum(text)], "cross_entropy")
        trainer.optim_step(types.AdamParams(learning_rate=3e-3))
    sampler = trainer.save_weights_and_get_sampling_client().result()
    prompt = tokens_of(encode("<|im_start|>assistant\n"))
    default = sampler.sample(prompt, 1, types.SamplingParams(max_tokens=10, temperature=0)).result().sequences[0]
    assert default.stop_reason == "stop"
    assert sampler.get_tokenizer().decode(default.tokens) == "hi<|im_end|>"
    none = sampler.sample(prompt, 1, types.SamplingParams(max_tokens=10, temperature=0, stop=[])).result().sequences[0]
    assert none.stop_reason == "length" and len(none.tokens) == 10 and none.tokens[:3] == default.tokens


def test_a_sampling_client_is_a_snapshot(trained: TrainingClient, sampler: SamplingClient, sft_datum, encode) -> None:
    prompt = tokens_of(encode("The cat sat on the mat."))
    before = sampler.compute_logprobs(prompt).result()
    for _ in range(2):
        trained.forward_backward([sft_datum("The cat sat on the mat.")], "cross_entropy")
        trained.optim_step(ADAM)
    assert sampler.compute_logprobs(prompt).result() == before
    fresh = trained.save_weights_and_get_sampling_client().result()
    assert fresh.compute_logprobs(prompt).result() != before


def test_prompt_logprobs_and_top_k(sampler: SamplingClient, encode) -> None:
    prompt = encode("Hello, world!")
    response = sampler.sample(
        tokens_of(prompt), 1, types.SamplingParams(max_tokens=3, seed=0, stop=[]),
        include_prompt_logprobs=True, topk_prompt_logprobs=3, topk_sample_logprobs=2,
    ).result()
    expected = sampler.compute_logprobs(tokens_of(prompt)).result()
    assert response.prompt_logprobs[0] is None
    assert response.prompt_logprobs[1:] == pytest.approx(expected[1:], abs=1e-6)
    topk = response.topk_prompt_logprobs
    assert topk[0] is None and all(len(row) == 3 for row in topk[1:])
    for row, actual in zip(topk[1:], expected[1:], strict=True):
        values = [lp for _, lp in row]
        assert values == sorted(values, reverse=True) and values[0] >= actual - 1e-6
    sample_topk = response.sequences[0].topk_logprobs
    assert len(sample_topk) == 3 and all(len(row) == 2 for row in sample_topk)
    last = sampler.sample(tokens_of(prompt), 1, types.SamplingParams(max_tokens=1), include_prompt_logprobs=True,
                          prompt_logprobs_last_n=2).result().prompt_logprobs
    assert last[:-2] == [None] * (len(prompt) - 2) and last[-2:] == pytest.approx(expected[-2:], abs=1e-6)


@pytest.mark.asyncio
async def test_base_model_sampler_equals_a_fresh_adapter(
    service: ServiceClient, trainer: TrainingClient, encode: Callable[[str], list[int]]
) -> None:
    base = await service.create_sampling_client(base_model=TINY_MODEL)
    assert base.get_base_model() == TINY_MODEL
    fresh = await trainer.save_weights_and_get_sampling_client()  # lora_B starts at zero
    prompt = tokens_of(encode("abc def"))
    got, want = await base.compute_logprobs(prompt), await fresh.compute_logprobs(prompt)
    assert np.allclose(np.array(got[1:]), np.array(want[1:]), atol=1e-6)


@pytest.mark.parametrize(
    ("prompt", "num_samples", "params", "message"),
    [
        ([], 1, types.SamplingParams(max_tokens=4), "empty"),
        ([1, 2], 1, types.SamplingParams(max_tokens=0), "max_tokens must be at least 1"),
        ([1, 2], 1, types.SamplingParams(max_tokens=-3), "max_tokens must be at least 1"),
        ([1, 9999], 1, types.SamplingParams(max_tokens=4), "outside the vocabulary"),
        ([1, 2], 0, types.SamplingParams(max_tokens=4), "num_samples"),
        ([1, 2], 1, types.SamplingParams(max_tokens=10**6), "exceeds"),
        ([1, 2], 1, types.SamplingParams(max_tokens=4, top_p=0), "top_p"),
        ([1, 2**70], 1, types.SamplingParams(max_tokens=4), "The prompt has token 1180591620717411303424 outside the vocabulary"),
        ([1, 2], 1, types.SamplingParams(max_tokens=4, stop=[3, 2**70]), "sampling_params.stop has token 1180591620717411303424 outside"),
        ([1, 2], 1, types.SamplingParams(max_tokens=4, stop=[-1]), "sampling_params.stop has token -1 outside the vocabulary"),
        ([1, 2], 1, types.SamplingParams(max_tokens=4, top_k=0), r"top_k must be -1 \(no limit\) or at least 1, got 0"),
        ([1, 2], 1, types.SamplingParams(max_tokens=4, top_k=-2), "top_k must be -1"),
        ([1, 2], 1, types.SamplingParams(max_tokens=4, temperature=float("nan")), "temperature must be 0 .greedy. or a finite"),
        ([1, 2], 1, types.SamplingParams(max_tokens=4, temperature=float("inf")), "temperature must be"),
        ([1, 2], 1, types.SamplingParams(max_tokens=4, temperature=-1), "temperature must be"),
    ],
)
def test_bad_sampling_requests_fail_alone(sampler: SamplingClient, prompt, num_samples, params, message) -> None:
    failed = sampler.sample(tokens_of(prompt), num_samples, params)
    good = sampler.sample(tokens_of([1, 2]), 1, types.SamplingParams(max_tokens=2, stop=[]))  # no stop: always 2 tokens
    with pytest.raises(tinker.BadRequestError, match=message):
        failed.result(timeout=60)  # a request that never finished would hang here
    assert len(good.result().sequences[0].tokens) == 2
    with pytest.raises(LocalBadRequestError, match="empty"):
        sampler.compute_logprobs(tokens_of([])).result()


def test_prompts_longer_than_the_context_are_rejected(sampler: SamplingClient) -> None:
    limit = sampler.get_tokenizer().model_max_length  # the tiny model's context (max_position_embeddings)
    too_long = tokens_of([1] * (limit + 1))
    message = f"The prompt has {limit + 1} tokens, more than the {limit}-token context of '{TINY_MODEL}'"
    scored = sampler.compute_logprobs(too_long)
    sampled = sampler.sample(too_long, 1, types.SamplingParams(max_tokens=1))
    good = sampler.compute_logprobs(tokens_of([1, 2]))
    for failed in (scored, sampled):
        with pytest.raises(LocalBadRequestError, match=message):
            failed.result()
    assert len(good.result()) == 2


def test_sample_is_batched_through_one_prefill(sampler: SamplingClient, encode) -> None:
    prompt = tokens_of(encode("Once upon a time"))
    one = sampler.sample(prompt, 1, types.SamplingParams(max_tokens=8, temperature=0, stop=[])).result()
    many = sampler.sample(prompt, 16, types.SamplingParams(max_tokens=8, temperature=0, stop=[])).result()
    assert all(s.tokens == one.sequences[0].tokens for s in many.sequences)
    assert len({s.sequence_id for s in many.sequences}) == 16
    assert torch.tensor(many.sequences[0].logprobs).allclose(torch.tensor(one.sequences[0].logprobs), atol=1e-5)
