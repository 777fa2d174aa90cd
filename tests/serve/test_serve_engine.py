"""The server's state without HTTP: how many sampling sessions it keeps (memory stays bounded)."""

from __future__ import annotations

import gc
import threading
import weakref
from pathlib import Path

import pytest
from tinker import types

from minds_core.backends.local import TINY_MODEL, ServiceClient
from minds_core.http.errors import NotFound, TooManyRequests
from minds_core.http.limits import ServeLimits
from minds_core.serve.engine import Engine
from minds_core.serve.samplers import SamplerBudget

CLIENT = "client-a"


def test_the_least_recently_used_sampling_sessions_are_dropped_and_named_when_asked_for(tmp_path: Path) -> None:
    with ServiceClient(checkpoint_root=tmp_path, device="cpu") as local:
        engine = Engine(local, [TINY_MODEL], ServeLimits(), SamplerBudget(max_samplers=3))
        session = engine.create_session(types.CreateSessionRequest(tags=[], user_metadata=None, sdk_version="0.38.0"), CLIENT)
        ids = []
        for seq in range(3):
            request = types.CreateSamplingSessionRequest(
                session_id=session.session_id, sampling_session_seq_id=seq, base_model=TINY_MODEL
            )
            ids.append(engine.create_sampling_session(request, CLIENT).sampling_session_id)
        engine.get_sampler(ids[0], CLIENT)  # used now: the second is the least recently used
        watched = weakref.ref(engine.samplers._kept[ids[1]].sampler)  # a peek that does not count as a use
        request = types.CreateSamplingSessionRequest(
            session_id=session.session_id, sampling_session_seq_id=3, base_model=TINY_MODEL
        )
        ids.append(engine.create_sampling_session(request, CLIENT).sampling_session_id)
        with pytest.raises(NotFound, match=r"was dropped: minds serve keeps the 3 most recently used sampling clients \(--max-samplers\)"):
            engine.get_sampler(ids[1], CLIENT)
        for kept in (ids[0], ids[2], ids[3]):
            assert engine.get_sampler(kept, CLIENT).sampler_id == kept
        gc.collect()
        assert watched() is None  # nothing else holds the dropped sampler: its memory is free
        with pytest.raises(NotFound, match="Unknown sampling session"):
            engine.get_sampler("never-made", CLIENT)


def test_a_pool_that_grows_keeps_more_sampling_sessions_from_then_on(tmp_path: Path) -> None:
    """``keep_samplers`` (a Ray executor whose pool grew): the sessions past the old count are kept, none dropped."""
    with ServiceClient(checkpoint_root=tmp_path, device="cpu") as local:
        engine = Engine(local, [TINY_MODEL], ServeLimits(), SamplerBudget(max_samplers=2))
        session = engine.create_session(types.CreateSessionRequest(tags=[], user_metadata=None, sdk_version="0.38.0"), CLIENT)
        engine.keep_samplers(4)
        ids = [
            engine.create_sampling_session(
                types.CreateSamplingSessionRequest(session_id=session.session_id, sampling_session_seq_id=seq, base_model=TINY_MODEL),
                CLIENT,
            ).sampling_session_id
            for seq in range(4)
        ]
        assert [engine.get_sampler(kept, CLIENT).sampler_id for kept in ids] == ids


def _new_run(engine: Engine, client: str) -> tuple[str, str]:
    """A new session of ``client`` and a training run in it: (session id, model id)."""
    session = engine.create_session(types.CreateSessionRequest(tags=[], user_metadata=None, sdk_version="0.38.0"), client)
    create = types.CreateModelRequest(
        session_id=session.session_id, model_seq_id=0, base_model=TINY_MODEL, lora_config=types.LoraConfig(rank=2)
    )
    return session.session_id, engine.retrieve(engine.create_model(create, client).request_id, client).model_id


def test_a_client_with_max_pending_requests_unfinished_is_told_to_wait_and_others_are_not(tmp_path: Path) -> None:
    with ServiceClient(checkpoint_root=tmp_path, device="cpu") as local:
        engine = Engine(local, [TINY_MODEL], ServeLimits(max_pending_requests=2))
        model_id = _new_run(engine, CLIENT)[1]

        def step(seq_id: int) -> types.OptimStepRequest:
            return types.OptimStepRequest(optim_params=types.AdamParams(learning_rate=0.01), model_id=model_id, seq_id=seq_id)

        engine.optim_step(step(11), CLIENT)  # steps 11 and 12 wait for steps 1..10, which never come:
        engine.optim_step(step(12), CLIENT)  # two requests that stay unfinished
        with pytest.raises(TooManyRequests, match="2 of your requests are still running or queued"):
            engine.optim_step(step(1), CLIENT)
        assert _new_run(engine, "client-b")[1]  # another client's requests are its own


def test_past_max_training_runs_a_new_run_waits_for_a_finished_session(tmp_path: Path) -> None:
    with ServiceClient(checkpoint_root=tmp_path, device="cpu") as local:
        engine = Engine(local, [TINY_MODEL], ServeLimits(max_training_runs=1))
        session, _ = _new_run(engine, CLIENT)
        with pytest.raises(TooManyRequests, match="holds 1 training runs, its max_training_runs"):
            _new_run(engine, CLIENT)
        engine.finish_session(session, CLIENT)
        assert _new_run(engine, CLIENT)[1]


def test_a_run_whose_session_finishes_while_it_is_built_is_refused_not_kept(tmp_path: Path, monkeypatch) -> None:
    """finish_session drops a session's runs once: a run built past that point would hold its memory for good."""
    with ServiceClient(checkpoint_root=tmp_path, device="cpu") as local:
        engine = Engine(local, [TINY_MODEL], ServeLimits(max_training_runs=1))
        session = engine.create_session(types.CreateSessionRequest(tags=[], user_metadata=None, sdk_version="0.38.0"), CLIENT)
        models, building, finished = local._runtime.models, threading.Event(), threading.Event()
        load = models.get

        def held_load(name: str):
            building.set()
            assert finished.wait(30)
            return load(name)

        monkeypatch.setattr(models, "get", held_load)  # the run's build waits until its session has finished
        create = types.CreateModelRequest(
            session_id=session.session_id, model_seq_id=0, base_model=TINY_MODEL, lora_config=types.LoraConfig(rank=2)
        )
        pending = engine.create_model(create, CLIENT)
        assert building.wait(30)
        engine.finish_session(session.session_id, CLIENT)
        finished.set()
        failure = engine.retrieve(pending.request_id, CLIENT)
        assert failure == {"error": f"Session {session.session_id} has finished", "category": "user"}
        monkeypatch.undo()
        assert _new_run(engine, CLIENT)[1]  # the refused run holds no place under max_training_runs=1
