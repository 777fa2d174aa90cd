"""Continuous batching over decode slots: concurrent requests decode together, as if alone; rows join
freed slots, and the batch runs in power-of-two buckets of rows."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import numpy as np
import pytest
from tinker import types

from minds_core.backends.local import (
    LocalBadRequestError,
    SamplingClient,
    ServiceClient,
    TrainingClient,
)
from minds_core.backends.local.sampling import decoding

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

    Prefills run the model's forward; decode steps feed their bucket of rows (a power of two).
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
        slots = batch.slots
        step = slots.step

        def counted_step(rows: int, *args: object, feed: bool = True, **kwargs: object) -> None:
            if feed:
                counted(rows)
            step(rows, *args, feed=feed, **kwargs)

        slots.step = counted_step  # on this model's decode slots only
        undo.append(lambda: delattr(slots, "step"))
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
    # One prefill pass for all five prompts (right-padded), then every decode step runs all 10 rows at once,
    # in a bucket of 16 (6 tokens: 5 fed back).
    assert sizes == [len(TEXTS)] + [16] * 5
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
    assert sizes[3:] == [16] * 5  # 11 rows
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
    # Both prefills, then all 3 + 2 rows (a bucket of 8) in every decode step: the second request did not join late.
    assert sizes == [1, 1] + [8] * 5


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
    # The late request joins after the long one's second decode step: its prefill, then the 3 + 2 rows of both
    # decode together (a bucket of 8) for the late one's 6 tokens, then the long one goes on alone (3 rows: a
    # bucket of 4) for its last 32, the last one not fed back.
    assert sizes == [1, 4, 4, 1] + [8] * 6 + [4] * 31


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


def test_a_closed_service_refuses_new_samples(service: ServiceClient, sampler: SamplingClient, encode) -> None:
    service.close("success")
    with pytest.raises(RuntimeError, match="closed"):
        sampler.sample(types.ModelInput.from_ints(encode("Hi")), 1, GREEDY)




def test_rows_beyond_the_slots_wait_and_take_the_slots_of_rows_that_finish(
    sampler: SamplingClient, encode: Callable[[str], list[int]], count_forwards: Callable[..., list[int]]
) -> None:
    prompts = [types.ModelInput.from_ints(encode(t)) for t in TEXTS[:3]]
    params = [GREEDY.model_copy(update={"max_tokens": 4 + 6 * i}) for i in range(3)]
    alone = [sampler.sample(p, 3, q).result() for p, q in zip(prompts, params, strict=True)]
    sampler._sampler._batch.slots.max_rows = 4  # before the slots are first made: four at most
    sizes = count_forwards(sampler)
    release = held(sampler)
    futures = [sampler.sample(p, 3, q) for p, q in zip(prompts, params, strict=True)]
    release.set()
    together = [f.result(timeout=60) for f in futures]
    assert sampler._sampler._batch.slots.slots == 4 and max(sizes) == 4
    for single, batched in zip(alone, together, strict=True):
        assert [s.tokens for s in batched.sequences] == [s.tokens for s in single.sequences]
        for a, b in zip(single.sequences, batched.sequences, strict=True):
            np.testing.assert_allclose(b.logprobs, a.logprobs, atol=1e-5)


def _kv_check(batch: object) -> Callable[[int], None]:
    """Before each pass of ``batch``: its slots' keys/values hold at most 3x the most the rows in them ever needed,
    plus the rounding of every slot's length to a whole granule (64 positions on the CPU)."""
    peak_live = 0.0

    def check(rows: int) -> None:
        nonlocal peak_live
        kv = batch.slots.kv
        if kv is None:  # a prefill before any row took a slot
            return
        rooms = sum(len(row.request.prompt) + row.request.max_tokens for row in batch._rows if row is not None)
        peak_live = max(peak_live, rooms * kv.bytes_per_position)
        allocated = sum(t.numel() * t.element_size() for t in (*kv.keys, *kv.values))
        # Raised on the worker: it fails the requests at once, before the slots can take the machine.
        rounding = kv.slots * 64 * kv.bytes_per_position
        assert allocated <= 3 * peak_live + rounding, (allocated, peak_live, rounding)

    return check


@pytest.mark.slow  # a third of a CPU-second or more of the local engine's numerics: the whole suite runs it
def test_a_ragged_batch_with_staggered_departures_holds_a_small_multiple_of_its_live_kv(
    sampler: SamplingClient, encode: Callable[[str], list[int]], count_forwards: Callable[..., list[int]]
) -> None:
    """32 concurrent one-sample requests, every prompt of its own length, each leaving at its own step."""
    requests = [
        (types.ModelInput.from_ints(encode("x" * (3 + 2 * i))), GREEDY.model_copy(update={"max_tokens": 4 + 3 * i}))
        for i in range(32)
    ]
    sizes = count_forwards(sampler, _kv_check(sampler._sampler._batch))
    release = held(sampler)
    futures = [sampler.sample(prompt, 1, params) for prompt, params in requests]
    release.set()
    responses = [future.result(timeout=60) for future in futures]
    assert [len(r.sequences[0].tokens) for r in responses] == [4 + 3 * i for i in range(32)]
    assert 32 in sizes  # all 32 rows decoded together, then left one by one


@pytest.mark.slow  # a third of a CPU-second or more of the local engine's numerics: the whole suite runs it
def test_a_multi_turn_shape_joining_ever_longer_prompts_holds_a_small_multiple_of_its_live_kv(
    sampler: SamplingClient, encode: Callable[[str], list[int]], count_forwards: Callable[..., list[int]]
) -> None:
    """Conversations take turns in one running batch: each turn's prompt is the last one plus its completion
    and a tool's answer, so most joins need longer rows than the slots have."""
    count_forwards(sampler, _kv_check(sampler._sampler._batch))
    prompts = [encode("q" * n) for n in (6, 11, 17)]
    params = [GREEDY.model_copy(update={"max_tokens": 8 + 4 * c}) for c in range(3)]
    for _turn in range(12):
        release = held(sampler)
        futures = [sampler.sample(types.ModelInput.from_ints(p), 2, params[c]) for c, p in enumerate(prompts)]
        release.set()
        for c, future in enumerate(futures):
            reply = future.result(timeout=60).sequences[0].tokens
            prompts[c] = prompts[c] + reply + encode(" tool says: ok.")
    assert all(len(p) > 12 * 15 for p in prompts)


def test_rows_move_down_when_the_rest_fit_a_smaller_bucket(
    sampler: SamplingClient, encode: Callable[[str], list[int]], count_forwards: Callable[..., list[int]]
) -> None:
    short, long = (types.ModelInput.from_ints(encode(t)) for t in TEXTS[:2])
    long_params = GREEDY.model_copy(update={"max_tokens": 12})
    long_alone = sampler.sample(long, 2, long_params).result()
    sizes = count_forwards(sampler)
    release = held(sampler)
    first = sampler.sample(short, 3, GREEDY)  # slots 0-2: done after 6 tokens
    second = sampler.sample(long, 2, long_params)  # slots 3-4, then moved to 0-1
    release.set()
    first.result(timeout=60)
    assert [s.tokens for s in second.result(timeout=60).sequences] == [s.tokens for s in long_alone.sequences]
    # One prefill of both prompts, 5 rows in a bucket of 8 for 6 tokens, then the 2 long rows alone in a
    # bucket of 2 for their last 6 (the last one not fed back).
    assert sizes == [2] + [8] * 6 + [2] * 5
