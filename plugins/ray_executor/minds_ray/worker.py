"""The Ray side: a ``Player`` actor, started with the run and kept for it, plays one rollout at a time (from its
``attempt``, retrying as in process) and sends back the finished, token-level rollout.

Per worker process, made in ``Player.ready`` (before step 0) and kept between episodes: the modules an episode
runs (imported with this one), the event loop of the episodes, the plugins, the Tinker client, the base model's
sampler, tokenizer and renderer, each environment (built from its entry point and args, never unpickled) and the
version check passed; then one sampler per policy path (each step's, made by the step's first episode on this
worker). One event loop on a thread of its own runs every episode of the process, up to the executor's ``slots``
at once (the actor's ``max_concurrency``: a thread each waits for its episode), so that their sampling requests
reach the engine together.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import threading
from typing import Any

import attrs

from minds_core import (
    Context,
    EpisodeSettings,
    Renderer,
    background_loop,
    build_environment,
    load_plugins,
    run_rollout,
    sampler_tokenizer,
    use_run_model,
)
from minds_ray.order import Endpoint, EpisodeOrder, WorkerRefused, WorkerSetup, check_versions

#: Samplers kept per worker process, the most recently used: one policy version per step, older ones unused.
SAMPLERS_KEPT = 4
#: The event loop (a thread of its own) that plays every episode of the worker process.
EPISODE_LOOP = "minds-ray-episodes"

_lock = threading.Lock()
_cache: dict[Any, Any] = {}
_samplers: collections.OrderedDict[Any, Any] = collections.OrderedDict()


class Player:
    """One warm worker of the run (a Ray actor): ``ready`` loads what every episode needs, before step 0."""

    def ready(self, setup: WorkerSetup) -> str:
        """The id of this worker's node, once the versions are checked and everything its episodes share is loaded
        (WorkerRefused if the versions differ, the key is missing or an environment cannot be built here)."""
        import ray

        node = ray.get_runtime_context().get_node_id()
        _check_versions_once(setup.versions, node)
        background_loop(EPISODE_LOOP)  # started now, not by the first episode
        plugins = _cached("plugins", load_plugins)
        service = _cached(("service", setup.endpoint), lambda: _service(setup.endpoint))
        sampler = _sampler(service, setup.endpoint, None, setup.base_model)  # the tokenizer's source
        _run_model(sampler, setup.base_model, setup.chat_template_args)
        for env in setup.envs:
            try:
                _environment(env, plugins)
            except Exception as exc:  # noqa: BLE001 - whatever stops the build here stops this worker, named
                detail = " ".join(str(exc).split())[:300]
                raise WorkerRefused(
                    f"the Ray worker on node {node} cannot build environment {env.id!r}: {type(exc).__name__}: {detail}; "
                    "install what it needs on every node of the cluster"
                ) from None
        return node

    def play(self, order: EpisodeOrder) -> tuple[Any, str]:
        return play(order)


def play(order: EpisodeOrder) -> tuple[Any, str]:
    """The rollout of ``order`` (its conversation without sampler or renderer) and the id of the node that played it."""
    import ray

    node = ray.get_runtime_context().get_node_id()
    _check_versions_once(order.versions, node)
    return asyncio.run_coroutine_threadsafe(_play(order), background_loop(EPISODE_LOOP)).result(), node


def _cached(key: Any, make: Any) -> Any:
    with _lock:
        if key not in _cache:
            _cache[key] = make()
        return _cache[key]


def _check_versions_once(driver: dict[str, str], node: str) -> None:
    """``check_versions``, once per worker process for each set of driver versions (reading the installed
    distributions' metadata costs milliseconds, which every episode would otherwise pay); refused every time."""
    _cached(("versions", tuple(sorted(driver.items()))), lambda: check_versions(driver, node))


async def _play(order: EpisodeOrder) -> Any:
    plugins = _cached("plugins", load_plugins)
    service = _cached(("service", order.endpoint), lambda: _service(order.endpoint))
    sampler = _sampler(service, order.endpoint, order.sampler_path, order.base_model)
    renderer = _run_model(sampler, order.base_model, order.chat_template_args)
    env = _environment(order.env, plugins)
    ctx = Context(
        sampler=sampler,
        tokenizer=renderer.tokenizer,
        service=service,
        renderer=renderer,
        base_model=order.base_model,
        lora_rank=order.lora_rank,
        step=order.step,
        policy_checkpoint=order.policy_checkpoint,
    )
    settings = EpisodeSettings(renderer, order.params, order.rollout)
    rollout = await run_rollout(env, order.task, ctx, settings, order.seed, first_attempt=order.attempt)
    if rollout.conversation is not None:  # the tokens travel back, not the clients
        rollout.conversation = attrs.evolve(rollout.conversation, renderer=None, sampler=None)
    return rollout


def _service(endpoint: Endpoint) -> Any:
    import tinker

    key = os.environ.get(endpoint.key_env)
    if not key:
        raise WorkerRefused(
            f"${endpoint.key_env} is not set on the Ray worker: the workers sample with the key from their own "
            "environment; set it on every node (or in the cluster's runtime_env)"
        )
    return tinker.ServiceClient(api_key=key, base_url=endpoint.url or None)


def _sampler(service: Any, endpoint: Endpoint, sampler_path: str | None, base_model: str) -> Any:
    """The sampling client of a policy (its path, else the base model), made once per worker process."""
    key = (endpoint, sampler_path, base_model)
    with _lock:
        if key in _samplers:
            _samplers.move_to_end(key)
            return _samplers[key]
    if sampler_path:
        sampler = service.create_sampling_client(model_path=sampler_path)
    else:
        sampler = service.create_sampling_client(base_model=base_model)
    with _lock:
        _samplers[key] = sampler
        while len(_samplers) > SAMPLERS_KEPT:
            _samplers.popitem(last=False)
    return sampler


def _run_model(sampler: Any, base_model: str, chat_template_args: dict[str, Any]) -> Any:
    """The renderer of the run's model (its tokenizer the sampler's, loaded once), named as the run's model for
    tinker-cookbook environments, which render for it."""
    key = ("renderer", base_model, json.dumps(chat_template_args, sort_keys=True))
    renderer = _cached(key, lambda: Renderer(sampler_tokenizer(sampler, base_model), chat_template_args))
    use_run_model(base_model, lambda: renderer.tokenizer)
    return renderer


def _environment(env: Any, plugins: Any) -> Any:
    """The environment of an ``EnvConfig``, built once per worker process from its entry point and args."""
    key = ("env", env.id, json.dumps(env.args, sort_keys=True, default=str))
    return _cached(key, lambda: build_environment(env, plugins.registry))
