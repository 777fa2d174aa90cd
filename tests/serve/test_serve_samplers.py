"""The sampling clients ``minds serve`` keeps: within a memory budget and a count, the most recent always, and the
memory of a dropped one really freed (checked on the live objects, not on the engine's own count)."""

from __future__ import annotations

import gc
import time
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest
import tinker
from tinker import types

from minds_core.backends.local import TINY_MODEL, ServiceClient
from minds_core.backends.local.model.accelerator import CpuAccelerator
from minds_core.backends.local.model.adapted_models import KEPT_FREE
from minds_core.backends.local.sampling.decode_slots import DecodeSlots, SlotSettings
from minds_core.cli.command import main
from minds_core.http.errors import NotFound
from minds_core.http.limits import ServeLimits
from minds_core.serve.engine import Engine
from minds_core.serve.samplers import Kept, KeptSamplers, SamplerBudget

from .conftest import KEY, start_server

CLIENT = "client-a"
GIB = 1 << 30
PARAMS = types.SamplingParams(max_tokens=6, temperature=1.0, seed=0, stop=[])
ONE_ROW = SlotSettings(1, CpuAccelerator())  # settings of slots looked up, never made here


@pytest.fixture
def local(tmp_path: Path) -> Iterator[ServiceClient]:
    with ServiceClient(checkpoint_root=tmp_path, device="cpu") as service:
        yield service


class Loop:
    """An RL loop on ``engine`` as the SDK drives it: one training run, a new sampling session per step."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        session = engine.create_session(types.CreateSessionRequest(tags=[], user_metadata=None, sdk_version="0.38.0"), CLIENT)
        self.session = session.session_id
        create = types.CreateModelRequest(
            session_id=self.session, model_seq_id=0, base_model=TINY_MODEL, lora_config=types.LoraConfig(rank=4)
        )
        self.model_id = self._result(engine.create_model(create, CLIENT)).model_id
        self.seq = 0

    def _result(self, future: types.UntypedAPIFuture) -> object:
        return self.engine.retrieve(future.request_id, CLIENT)

    def new_sampler(self) -> str:
        """``save_weights_and_get_sampling_client``: the new sampling session's id."""
        self.seq += 1
        request = types.SaveWeightsForSamplerRequest(model_id=self.model_id, seq_id=self.seq, sampling_session_seq_id=self.seq)
        return self._result(self.engine.save_weights_for_sampler(request, CLIENT)).sampling_session_id

    def sample(self, sampler_id: str) -> types.SampleResponse:
        """Two samples of a short prompt on ``sampler_id`` (its decode buffers are allocated)."""
        request = types.SampleRequest(
            sampling_session_id=sampler_id, prompt=types.ModelInput.from_ints([5, 70, 71, 72]), num_samples=2,
            sampling_params=PARAMS,
        )  # fmt: skip
        return self._result(self.engine.sample(request, CLIENT))

    def kept(self) -> list[str]:
        """The session's sampling sessions the engine still keeps, least recently used first."""
        return self.engine.get_session(self.session, CLIENT).sampler_ids

    def local_sampler(self, sampler_id: str) -> object:
        """The local ``SamplingClient`` behind ``sampler_id`` (a peek that does not count as a use)."""
        return self.engine.samplers._kept[sampler_id].sampler


def _distinct(refs: list[weakref.ref[object]]) -> list[weakref.ref[object]]:
    """One of each: a weak reference to an object is made once and shared (while it has no callback)."""
    return list({id(ref): ref for ref in refs}.values())


def _collected_down_to(refs: list[weakref.ref[object]], alive: int, within: float = 10.0) -> None:
    """Collect until at most ``alive`` of ``refs`` live, failing after ``within`` seconds."""
    deadline = time.monotonic() + within
    while sum(ref() is not None for ref in refs) > alive and time.monotonic() < deadline:
        gc.collect()
        time.sleep(0.05)
    assert sum(ref() is not None for ref in refs) == alive


@pytest.mark.slow
def test_the_kept_samplers_stay_within_the_memory_budget_and_dropped_ones_free_their_memory(local: ServiceClient) -> None:
    probe = Loop(Engine(local, [TINY_MODEL], ServeLimits()))
    first = probe.new_sampler()
    probe.sample(first)
    one = probe.local_sampler(first).held_bytes  # a sampler that has sampled: weights, decode buffers, tables
    assert one > 0
    budget = 3.5 * one  # three of them, not four
    loop = Loop(Engine(local, [TINY_MODEL], ServeLimits(), SamplerBudget(sampler_memory_gib=budget / GIB)))
    made: list[str] = []
    samplers: list[weakref.ref[object]] = []
    trees: list[weakref.ref[object]] = []
    slots: list[weakref.ref[object]] = []
    for _ in range(10):
        made.append(loop.new_sampler())
        loop.sample(made[-1])
        sampler = loop.local_sampler(made[-1])
        samplers.append(weakref.ref(sampler))
        model = sampler._sampler.model
        trees.append(weakref.ref(model))
        slots.append(weakref.ref(DecodeSlots.for_model(model, ONE_ROW)))
        del sampler, model
        kept = loop.kept()
        assert kept == made[-3:]  # the most recent, as many as the budget holds
        assert loop.engine.samplers.held_bytes() <= budget
    gc.collect()
    assert [ref() is not None for ref in samplers] == [False] * 7 + [True] * 3  # dropped: nothing holds them
    # A dropped sampler's tree (its weights and decode slots) went back to the pool, and the next snapshot reused it:
    # 10 snapshots, 4 trees.
    assert len(_distinct(trees)) == 4
    with pytest.raises(NotFound, match=r"was dropped: minds serve keeps the most recently used sampling clients within "
                       r"[0-9.e-]+ GiB of memory together \(--sampler-memory-gib\).*make a new one"):  # fmt: skip
        loop.sample(made[0])
    assert loop.sample(made[-1]).sequences  # the kept ones answer
    loop.engine.finish_session(loop.session, CLIENT)  # all 4 unused now: the pool keeps KEPT_FREE, the rest are freed
    _collected_down_to(_distinct(trees), KEPT_FREE)  # (the last sample's worker may still be letting go of its tree)
    assert sum(ref() is not None for ref in _distinct(slots)) == KEPT_FREE  # the freed trees' decode slots went too


def test_the_most_recent_sampler_is_kept_even_past_the_budget_alone(local: ServiceClient) -> None:
    loop = Loop(Engine(local, [TINY_MODEL], ServeLimits(), SamplerBudget(sampler_memory_gib=1e-9)))
    for _ in range(3):
        newest = loop.new_sampler()
        assert loop.kept() == [newest]
        assert len(loop.sample(newest).sequences) == 2


def test_using_a_sampler_makes_it_the_last_to_be_dropped(local: ServiceClient) -> None:
    loop = Loop(Engine(local, [TINY_MODEL], ServeLimits(), SamplerBudget(max_samplers=2)))
    old, newer = loop.new_sampler(), loop.new_sampler()
    loop.sample(old)
    newest = loop.new_sampler()
    assert loop.kept() == [old, newest]
    with pytest.raises(NotFound, match=r"keeps the 2 most recently used sampling clients \(--max-samplers\)"):
        loop.sample(newer)


def test_a_sampler_dropped_while_it_decodes_answers_its_running_request(local: ServiceClient) -> None:
    loop = Loop(Engine(local, [TINY_MODEL], ServeLimits(), SamplerBudget(max_samplers=1)))
    old = loop.new_sampler()
    tree = loop.local_sampler(old)._sampler.model
    slots = DecodeSlots.for_model(tree, ONE_ROW)
    request = types.SampleRequest(
        sampling_session_id=old, prompt=types.ModelInput.from_ints([5, 70, 71, 72]), num_samples=2, sampling_params=PARAMS
    )
    with slots.lock:  # the request is running: its decode waits for the slots, which this test holds meanwhile
        running = loop.engine.sample(request, CLIENT)
        new = loop.new_sampler()  # counting the old one's bytes must not wait for its slots' lock
        assert loop.kept() == [new]
        assert loop.local_sampler(new)._sampler.model is not tree  # not handed on while a request still decodes on it
    response = loop._result(running)
    assert [len(sequence.tokens) for sequence in response.sequences] == [6, 6]  # answered in full, though dropped
    with pytest.raises(NotFound, match="was dropped"):
        loop.sample(old)


def test_sessions_of_one_saved_path_share_its_engine_and_its_memory_counts_once(local: ServiceClient) -> None:
    """A run's Ray workers each make a sampling session of the step's saved weights: one engine, counted once."""
    trainer = local.create_lora_training_client(base_model=TINY_MODEL, rank=4).result()
    path = trainer.save_weights_for_sampler("policy").result().path
    clients = [local.create_sampling_client(model_path=path).result() for _ in range(8)]
    for client in clients:
        client.sample(types.ModelInput.from_ints([5, 70, 71, 72]), 2, PARAMS).result()
    one = clients[0].held_bytes
    assert one > 0 and len({id(client.engine) for client in clients}) == 1
    kept = KeptSamplers(memory_bytes=int(1.5 * one), max_samplers=16)
    for number, client in enumerate(clients):
        kept.keep(f"s:sample:{number}", Kept(client, path, CLIENT))
    assert len(kept) == 8  # none dropped: together they hold one engine's bytes, within the budget
    assert kept.held_bytes() == one


def test_a_base_model_sampler_holds_nothing_of_its_own(local: ServiceClient) -> None:
    sampler = local.create_sampling_client(base_model=TINY_MODEL).result()
    sampler.sample(types.ModelInput.from_ints([5, 70, 71]), 2, PARAMS).result()
    assert sampler.held_bytes == 0  # it decodes with the base's own weights and slots, which stay


@pytest.mark.parametrize(
    ("flag", "value", "says"),
    [
        ("--sampler-memory-gib", "0", "--sampler-memory-gib 0.0: must be a finite number > 0"),
        ("--sampler-memory-gib", "inf", "--sampler-memory-gib inf: must be a finite number > 0"),
        ("--max-samplers", "0", "--max-samplers 0: must be an integer >= 1"),
        ("--max-samplers", "1.5", "--max-samplers: invalid int value: '1.5'"),
    ],
)
def test_a_bad_sampler_flag_exits_2_naming_it(flag: str, value: str, says: str, capsys: pytest.CaptureFixture[str]) -> None:
    try:
        code = main(["serve", "--port", "0", flag, value])
    except SystemExit as exc:  # argparse's own refusal
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err


@pytest.mark.slow
def test_an_sdk_client_of_a_dropped_sampler_is_told_why_and_what_to_do(tmp_path: Path) -> None:
    # the process boundary is the point: the reason crosses HTTP into the SDK's own error
    server = start_server(tmp_path, "--model", TINY_MODEL, "--sampler-memory-gib", "1e-9")
    try:
        service = tinker.ServiceClient(base_url=server.url, api_key=KEY)
        training = service.create_lora_training_client(base_model=TINY_MODEL, rank=2).result()
        old = training.save_weights_and_get_sampling_client().result()
        new = training.save_weights_and_get_sampling_client().result()  # past the budget: the old one is dropped
        prompt = types.ModelInput.from_ints([5, 70, 71])
        assert new.sample(prompt, 1, PARAMS).result().sequences
        with pytest.raises(tinker.NotFoundError, match=r"was dropped: .*--sampler-memory-gib.*make a new one"):
            old.sample(prompt, 1, PARAMS).result()
        service.close("success").result(timeout=30)
    finally:
        assert server.stop() == 0
