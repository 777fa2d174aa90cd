"""Continuous batching over a preallocated KV buffer: concurrent requests decode together, as if alone."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from tinker import types

from minds_core.backends.local import (
    LocalBadRequestError,
    SamplingClient,
    ServiceClient,
    TrainingClient,
    decoding,
)
from minds_core.backends.local.decoding import _choose, _noise, _truncated
from minds_core.backends.local.kv_buffer import KVBuffer

GREEDY = types.SamplingParams(max_tokens=6, temperature=0, stop=[])
TEXTS = ("Once upon a time", "The cat", "1+1=", "Hello, world! How are you today?", "xy")


@pytest.fixture
def sampler(trainer: TrainingClient, sft_datum: Callable[..., types.Datum]) -> SamplingClient:
    trainer.forward_backward([sft_datum("The cat sat on the mat.")], "cross_entropy")
    trainer.optim_step(types.AdamParams(learning_rate=2e-2)).result()
    return trainer.save_weights_and_get_sampling_client().result()


def held(client: SamplingClient) -> threading.Event:
    """Block ``client``'s worker until the returned event is set, so that requests pile up behind it.

    Returns once the worker is blocked: until then a decode of earlier requests may still be
    looping on it, and it would admit the new requests one by one as they come.
    """
    release, blocked = threading.Event(), threading.Event()

    def block() -> None:
        blocked.set()
        release.wait(timeout=30)

    client._queue.submit(block)
    assert blocked.wait(timeout=30)
    return release


@pytest.fixture
def count_forwards() -> Iterator[Callable[..., list[int]]]:
    """``count(client, on_pass=None)``: the rows of every forward pass of ``client``'s model from then on.

    Prefills run the model's forward; decode steps run it too, or the sampler's fast decoder.
    Only this sampler's passes count (other samplers may still decode in threads of their own), and
    the counting ends with the test: merged models go back to a pool that later samplers draw from.
    ``on_pass(rows)`` runs on the worker before each pass.
    """
    undo: list[Callable[[], None]] = []

    def count(client: SamplingClient, on_pass: Callable[[int], None] = lambda rows: None) -> list[int]:
        sizes: list[int] = []
        batch = client._sampler._batch

        def counted(rows: int) -> None:
            sizes.append(rows)
            on_pass(rows)

        handle = batch.model.register_forward_pre_hook(
            lambda module, args, kwargs: counted(kwargs["input_ids"].shape[0]), with_kwargs=True
        )
        undo.append(handle.remove)
        fast = batch._fast
        if fast is not None:
            step = fast.step

            def counted_step(cache: KVBuffer, token_ids: torch.Tensor) -> torch.Tensor:
                counted(len(token_ids))
                return step(cache, token_ids)

            fast.step = counted_step  # on this sampler's decoder only
            undo.append(lambda: delattr(fast, "step"))
        return sizes

    yield count
    for action in reversed(undo):
        action()


def test_concurrent_requests_decode_in_one_batch_with_the_tokens_they_get_alone(
    sampler: SamplingClient, encode: Callable[[str], list[int]], count_forwards: Callable[..., list[int]]
) -> None:
    prompts = [types.ModelInput.from_ints(encode(t)) for t in TEXTS]
    alone = [sampler.sample(p, 2, GREEDY).result() for p in prompts]
    sizes = count_forwards(sampler)
    release = held(sampler)
    futures = [sampler.sample(p, 2, GREEDY) for p in prompts]
    release.set()
    together = [f.result(timeout=60) for f in futures]
    # One prefill pass for all five prompts (right-padded), then every decode step runs all 10 rows at once
    # (6 tokens: 5 decode passes).
    assert sizes == [len(TEXTS)] + [2 * len(TEXTS)] * 5
    for prompt, single, batched in zip(prompts, alone, together, strict=True):
        for a, b in zip(single.sequences, batched.sequences, strict=True):
            assert a.tokens == b.tokens
            np.testing.assert_allclose(b.logprobs, a.logprobs, atol=1e-5)
            rescored = sampler.compute_logprobs(types.ModelInput.from_ints(prompt.to_ints() + b.tokens)).result()
            np.testing.assert_allclose(b.logprobs, rescored[-len(b.tokens) :], atol=1e-4)


def test_prompts_prefill_together_within_the_token_budget_and_scored_ones_alone(
    sampler: SamplingClient, encode: Callable[[str], list[int]], count_forwards: Callable[..., list[int]]
) -> None:
    """Padded prompt tokens per prefill pass stay within ``tokens_per_pass``; a prompt whose log-probs
    are asked for gets a pass of its own (all its logits); every request gets what it gets alone."""
    prompts = [types.ModelInput.from_ints(encode(t)) for t in TEXTS]
    scored = types.ModelInput.from_ints(encode("Score this prompt, please"))
    alone = [sampler.sample(p, 2, GREEDY).result() for p in prompts]
    scored_alone = sampler.sample(scored, 1, GREEDY, include_prompt_logprobs=True).result()
    lengths = sorted((p.length for p in prompts), reverse=True)
    assert 3 * lengths[2] <= 2 * lengths[0] < 3 * lengths[0]  # the budget fits two long prompts, or three short
    sampler._sampler._batch.tokens_per_pass = 2 * lengths[0]
    sizes = count_forwards(sampler)
    release = held(sampler)
    futures = [sampler.sample(p, 2, GREEDY) for p in prompts]
    scored_future = sampler.sample(scored, 1, GREEDY, include_prompt_logprobs=True)
    release.set()
    together = [f.result(timeout=60) for f in futures]
    # The scored prompt alone; then, longest first, the two that fill the budget, and the three short ones.
    assert sizes[:3] == [1, 2, 3]
    assert sizes[3:] == [2 * len(TEXTS) + 1] * 5
    for single, batched in zip(alone, together, strict=True):
        for a, b in zip(single.sequences, batched.sequences, strict=True):
            assert a.tokens == b.tokens
            np.testing.assert_allclose(b.logprobs, a.logprobs, atol=1e-5)
    scored_together = scored_future.result(timeout=60)
    assert scored_together.sequences[0].tokens == scored_alone.sequences[0].tokens
    np.testing.assert_allclose(
        np.array(scored_together.prompt_logprobs[1:]), np.array(scored_alone.prompt_logprobs[1:]), atol=1e-5
    )


def test_an_idle_batch_gathers_requests_that_come_moments_apart(
    sampler: SamplingClient, encode: Callable[[str], list[int]], count_forwards: Callable[..., list[int]]
) -> None:
    """Requests sent together (over HTTP they come a few milliseconds apart) start decoding together."""
    first, second = (types.ModelInput.from_ints(encode(t)) for t in TEXTS[:2])
    arrived = threading.Event()

    def second_arrives(rows: int) -> None:
        """During the first request's prefill, the second one comes (well within the quiet period)."""
        if not arrived.is_set():
            arrived.set()
            futures.append(sampler.sample(second, 2, GREEDY))

    futures: list = []
    sizes = count_forwards(sampler, second_arrives)
    futures.insert(0, sampler.sample(first, 3, GREEDY))
    for future in futures:
        future.result(timeout=60)
    # Both prefills, then all 3 + 2 rows in every decode step: the second request did not join late.
    assert sizes == [1, 1] + [5] * 5


def test_the_quiet_period_counts_from_the_newest_arrival_not_from_the_prefill(
    sampler: SamplingClient,
    encode: Callable[[str], list[int]],
    count_forwards: Callable[..., list[int]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A lone request whose prefill outlasts the quiet period decodes at once: nothing is waited for."""
    monkeypatch.setattr(decoding, "GATHER_QUIET_SECONDS", 1.0)
    monkeypatch.setattr(decoding, "GATHER_LIMIT_SECONDS", 10.0)
    prompt = types.ModelInput.from_ints(encode(TEXTS[0]))

    def slow_prefill(rows: int) -> None:
        if len(sizes) == 1:
            time.sleep(1.2)  # the quiet period is over when the prefill ends

    sizes = count_forwards(sampler, slow_prefill)
    start = time.monotonic()
    sampler.sample(prompt, 2, GREEDY).result(timeout=60)
    elapsed = time.monotonic() - start
    assert sizes == [1] + [2] * 5
    assert elapsed < 1.2 + 0.8, elapsed  # waiting a quiet period after the prefill would take 2.2 s and more


def test_requests_join_and_leave_a_running_batch(
    sampler: SamplingClient, encode: Callable[[str], list[int]], count_forwards: Callable[..., list[int]]
) -> None:
    prompt = types.ModelInput.from_ints(encode("Once upon a time"))
    long_alone = sampler.sample(prompt, 3, GREEDY.model_copy(update={"max_tokens": 40})).result()
    late_prompt = types.ModelInput.from_ints(encode("A late request with a longer prompt than the first one"))
    late_alone = sampler.sample(late_prompt, 2, GREEDY).result()
    running, queued = threading.Event(), threading.Event()

    def hold_third_pass(rows: int) -> None:
        """Hold the long request's second decode step until the late request is queued: it joins after it."""
        if len(sizes) == 3:
            running.set()
            assert queued.wait(timeout=30)

    sizes = count_forwards(sampler, hold_third_pass)
    long_future = sampler.sample(prompt, 3, GREEDY.model_copy(update={"max_tokens": 40}))
    assert running.wait(timeout=30)
    late_future = sampler.sample(late_prompt, 2, GREEDY)
    queued.set()
    long, late = long_future.result(timeout=60), late_future.result(timeout=60)
    assert [s.tokens for s in long.sequences] == [s.tokens for s in long_alone.sequences]
    assert [s.tokens for s in late.sequences] == [s.tokens for s in late_alone.sequences]
    # The late request joins after the long one's second decode step: its prefill, then the 3 + 2 rows
    # of both decode together for the late one's 5 decode steps, then the long one goes on alone.
    assert sizes == [1, 3, 3, 1] + [5] * 5 + [3] * (39 - 2 - 5)


def test_a_bad_request_fails_alone_while_others_decode(
    sampler: SamplingClient, encode: Callable[[str], list[int]]
) -> None:
    release = held(sampler)
    good = sampler.sample(types.ModelInput.from_ints(encode("Hi")), 2, GREEDY)
    bad = sampler.sample(types.ModelInput.from_ints([10**6]), 1, GREEDY)
    release.set()
    with pytest.raises(LocalBadRequestError, match="outside the vocabulary"):
        bad.result(timeout=30)
    assert len(good.result(timeout=30).sequences) == 2


def test_kv_buffer_places_rows_at_positions_of_their_own() -> None:
    cache = KVBuffer()

    def prompt_kv(length: int, fill: float) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return [(torch.full((1, 2, length, 4), fill), torch.full((1, 2, length, 4), -fill))]

    cache.add(prompt_kv(3, 1.0), copies=2, room=6)
    cache.add(prompt_kv(5, 2.0), copies=1, room=7)
    assert cache.lengths.tolist() == [3, 3, 5]
    keys_before = cache.keys[0]
    positions, mask = cache.step_inputs(torch.float32)
    assert positions[:, 0].tolist() == [3, 3, 5] and mask.shape == (3, 1, 1, 6)
    assert (mask[:, 0, 0] == 0).tolist() == [[True] * 4 + [False] * 2, [True] * 4 + [False] * 2, [True] * 6]
    new = torch.arange(3.0)[:, None, None, None].expand(3, 2, 1, 4) + 10
    keys, _ = cache.update(new, -new, 0)  # after step_inputs, as a model forward calls it
    assert keys.shape == (3, 2, 6, 4)
    assert keys[:, 0, :, 0].tolist() == [[1, 1, 1, 10, 0, 0], [1, 1, 1, 11, 0, 0], [2, 2, 2, 2, 2, 12]]
    cache.advance()
    cache.keep(torch.tensor([2, 0]))
    assert cache.lengths.tolist() == [6, 4]
    assert cache.keys[0] is keys_before  # preallocated: written in place, not re-concatenated
    assert cache.keys[0][:2, 0, 0, :6].tolist() == [[2, 2, 2, 2, 2, 12], [1, 1, 1, 10, 0, 0]]  # keys transposed
    assert cache.values[0][0, 1, 5, 0].item() == -12


def test_a_closed_service_refuses_new_samples(service: ServiceClient, sampler: SamplingClient, encode) -> None:
    service.close("success")
    with pytest.raises(RuntimeError, match="closed"):
        sampler.sample(types.ModelInput.from_ints(encode("Hi")), 1, GREEDY)


def test_one_batched_draw_equals_torch_multinomial_per_request() -> None:
    """Rows of several requests are drawn at once with the same numbers multinomial would use."""

    def requests() -> list[SimpleNamespace]:
        settings = [(1.0, 1.0, -1), (0.7, 1.0, -1), (0.0, 1.0, -1), (1.3, 0.9, -1), (1.0, 1.0, 5)]
        return [
            SimpleNamespace(
                params=types.SamplingParams(temperature=t, top_p=p, top_k=k),
                generator=torch.Generator().manual_seed(seed),
            )
            for seed, (t, p, k) in enumerate(settings)
        ]

    logits = torch.randn(7, 259, generator=torch.Generator().manual_seed(0)) * 3
    bounds = [(0, 2), (2, 3), (3, 4), (4, 6), (6, 7)]
    got = _choose(logits, [(s, e, r) for (s, e), r in zip(bounds, requests(), strict=True)])
    expected = []
    for (start, end), request in zip(bounds, requests(), strict=True):
        params = request.params
        if params.temperature == 0:
            expected += logits[start:end].argmax(dim=-1).tolist()
            continue
        scaled = _truncated(logits[start:end] / params.temperature, params)
        expected += torch.multinomial(scaled.softmax(dim=-1), 1, generator=request.generator)[:, 0].tolist()
    assert got.tolist() == expected


def test_truncating_at_temperature_one_leaves_the_callers_logits_alone() -> None:
    logits = torch.randn(3, 50, generator=torch.Generator().manual_seed(1))
    before = logits.clone()
    params = types.SamplingParams(temperature=1.0, top_k=2)
    request = SimpleNamespace(params=params, generator=torch.Generator().manual_seed(0))
    got = _choose(logits, [(0, 3, request)])
    assert torch.equal(logits, before)
    expected = torch.multinomial(
        _truncated(before.clone(), params).softmax(dim=-1), 1, generator=torch.Generator().manual_seed(0)
    )[:, 0]
    assert got.tolist() == expected.tolist()
    assert set(got.tolist()) <= set(before.topk(2, dim=-1).indices.flatten().tolist())


@pytest.mark.parametrize("vocab", [1, 7, 259, 151_936])
def test_bulk_noise_is_exponentials_own_numbers_and_one_in_greedy_rows(vocab: int) -> None:
    """Each tempered request's rows get what ``exponential_`` draws from its generator (which ends in the
    same state); greedy rows get 1."""
    for seed in (0, 7, 2**62 + 3):
        temperatures = [1.0, 0.0, 0.7]
        ours = [torch.Generator().manual_seed(seed + i) for i in range(3)]
        theirs = [torch.Generator().manual_seed(seed + i) for i in range(3)]
        runs = [(0, 2, 0), (2, 3, 1), (3, 6, 2)]
        requests = [
            SimpleNamespace(params=types.SamplingParams(temperature=temperatures[i]), generator=ours[i]) for i in range(3)
        ]
        got = _noise(torch.zeros(6, vocab), [(start, end, requests[i]) for start, end, i in runs])
        assert torch.equal(got[2:3], torch.ones(1, vocab))
        for start, end, i in runs:
            if temperatures[i]:
                expected = torch.empty(end - start, vocab).exponential_(generator=theirs[i])
                assert torch.equal(got[start:end], expected)
                assert torch.equal(ours[i].get_state(), theirs[i].get_state())


def _bytes_per_position(cache: KVBuffer) -> float:
    """Bytes of keys and values that one position of one row takes in ``cache``, all layers together."""
    tensors = (*cache.keys, *cache.values)
    return sum(t.numel() * t.element_size() for t in tensors) / (cache.keys[0].shape[0] * cache.values[0].shape[2])


def test_a_ragged_batch_with_staggered_departures_holds_a_small_multiple_of_its_live_kv(
    sampler: SamplingClient, encode: Callable[[str], list[int]], count_forwards: Callable[..., list[int]]
) -> None:
    """32 concurrent one-sample requests, every prompt of its own length, each leaving at its own step."""
    batch = sampler._sampler._batch
    peak_live = 0.0

    def check(rows: int) -> None:
        nonlocal peak_live
        cache = batch._cache
        if not cache.rows:  # a prefill before any row joined
            return
        rooms = sum(len(request.prompt) + request.max_tokens - 1 for request, _ in batch._rows)
        peak_live = max(peak_live, rooms * _bytes_per_position(cache))
        # Raised on the worker: it fails the requests at once, before the buffer can take the machine.
        assert cache.allocated_bytes <= 3 * peak_live, (cache.allocated_bytes, peak_live)

    requests = [
        (types.ModelInput.from_ints(encode("x" * (3 + 2 * i))), GREEDY.model_copy(update={"max_tokens": 4 + 3 * i}))
        for i in range(32)
    ]
    sizes = count_forwards(sampler, check)
    release = held(sampler)
    futures = [sampler.sample(prompt, 1, params) for prompt, params in requests]
    release.set()
    responses = [future.result(timeout=60) for future in futures]
    assert [len(r.sequences[0].tokens) for r in responses] == [4 + 3 * i for i in range(32)]
    decode_sizes = sizes[sizes.index(32) :]
    assert decode_sizes[0] == 32 and set(range(1, 33)) <= set(decode_sizes)  # a departure at every step of 3


def test_a_multi_turn_shape_joining_ever_longer_prompts_holds_a_small_multiple_of_its_live_kv() -> None:
    """Conversations take turns in one running batch: each turn's prompt is the last one plus its completion
    and a tool's answer, so most joins need longer rows than the buffer has."""
    cache, heads, dim, layers, samples = KVBuffer(), 2, 4, 2, 2
    completion, tool, turns = 8, 5, 16
    prompts = [6, 11, 17]  # each conversation's current prompt length
    turns_left = [turns] * len(prompts)
    rows: list[tuple[int, int, int]] = []  # (conversation, room, decode steps left) of each row
    peak_live = 0.0

    def check() -> None:
        nonlocal peak_live
        peak_live = max(peak_live, sum(room for _, room, _ in rows) * _bytes_per_position(cache))
        assert cache.allocated_bytes <= 3 * peak_live, (cache.allocated_bytes, peak_live)

    tick = 0
    while any(turns_left):
        waiting = {conversation for conversation, _, _ in rows}
        for conversation, length in enumerate(prompts):
            if conversation in waiting or not turns_left[conversation] or tick < 3 * conversation:  # staggered
                continue
            room = length + completion - 1
            kv = [(torch.randn(1, heads, length, dim), torch.randn(1, heads, length, dim)) for _ in range(layers)]
            cache.add(kv, samples, room)
            rows += [(conversation, room, completion - 1)] * samples  # the first token comes from the prefill
            check()
        cache.step_inputs(torch.float32)
        for layer in range(layers):
            cache.update(torch.randn(len(rows), heads, 1, dim), torch.randn(len(rows), heads, 1, dim), layer)
        cache.advance()
        rows = [(conversation, room, left - 1) for conversation, room, left in rows]
        for conversation in {c for c, _, left in rows if not left}:
            prompts[conversation] += completion + tool
            turns_left[conversation] -= 1
        kept = [row for row, (_, _, left) in enumerate(rows) if left]
        cache.keep(torch.tensor(kept, dtype=torch.int64))
        rows = [rows[row] for row in kept]
        assert cache.rows == len(rows) and (rows or not any(turns_left))  # the batch never ran empty
        tick += 1
    assert prompts == [length + turns * (completion + tool) for length in (6, 11, 17)]
