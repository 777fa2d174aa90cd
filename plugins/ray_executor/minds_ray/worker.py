"""The Ray side: a ``Player`` actor, started with the run and kept for it, plays one rollout at a time (from its
``attempt``, retrying as in process) and sends back the finished, token-level rollout.

Per worker process, kept between episodes: the plugins, each environment (built from its entry point
and args, never unpickled), the Tinker clients, the renderer and the version check passed; one event loop on a thread of its
own runs every episode of the process.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import threading
from typing import Any

import attrs

from minds_core import background_loop
from minds_ray.order import EpisodeOrder, WorkerRefused, check_versions

#: Samplers kept per worker process, the most recently used: one policy version per step, older ones unused.
SAMPLERS_KEPT = 4

_lock = threading.Lock()
_cache: dict[Any, Any] = {}
_samplers: collections.OrderedDict[Any, Any] = collections.OrderedDict()


class Player:
    """One warm worker of the run (a Ray actor): ``ready`` loads what every episode needs, before step 0."""

    def ready(self, versions: dict[str, str]) -> str:
        """The id of this worker's node, once the plugins are loaded and the versions checked (WorkerRefused if not)."""
        import ray

        from minds_core import load_plugins

        node = ray.get_runtime_context().get_node_id()
        _check_versions_once(versions, node)
        _cached("plugins", load_plugins)
        return node

    def play(self, order: EpisodeOrder) -> tuple[Any, str]:
        return play(order)


def play(order: EpisodeOrder) -> tuple[Any, str]:
    """The rollout of ``order`` (its conversation without sampler or renderer) and the id of the node that played it."""
    import ray

    node = ray.get_runtime_context().get_node_id()
    _check_versions_once(order.versions, node)
    return asyncio.run_coroutine_threadsafe(_play(order), background_loop("minds-ray-episodes")).result(), node


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
    from minds_core import (
        Context,
        EpisodeSettings,
        build_environment,
        load_plugins,
        run_rollout,
        sampler_tokenizer,
        use_run_model,
    )

    plugins = _cached("plugins", load_plugins)
    service = _cached(("service", order.endpoint), lambda: _service(order))
    sampler = _sampler(service, order)
    # what tinker-cookbook environments render for: the run's model, its tokenizer the sampler's
    use_run_model(order.base_model, lambda: sampler_tokenizer(sampler, order.base_model))
    env = _cached(("env", order.env.id, json.dumps(order.env.args, sort_keys=True, default=str)), lambda: build_environment(order.env, plugins.registry))
    renderer = _cached(("renderer", order.base_model, json.dumps(order.chat_template_args, sort_keys=True)), lambda: _renderer(sampler, order))
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


def _service(order: EpisodeOrder) -> Any:
    import tinker

    key = os.environ.get(order.endpoint.key_env)
    if not key:
        raise WorkerRefused(
            f"${order.endpoint.key_env} is not set on the Ray worker: the workers sample with the key from their own "
            "environment; set it on every node (or in the cluster's runtime_env)"
        )
    return tinker.ServiceClient(api_key=key, base_url=order.endpoint.url or None)


def _sampler(service: Any, order: EpisodeOrder) -> Any:
    """The sampling client of the order's policy (its path, else the base model), made once per worker process."""
    key = (order.endpoint, order.sampler_path, order.base_model)
    with _lock:
        if key in _samplers:
            _samplers.move_to_end(key)
            return _samplers[key]
    if order.sampler_path:
        sampler = service.create_sampling_client(model_path=order.sampler_path)
    else:
        sampler = service.create_sampling_client(base_model=order.base_model)
    with _lock:
        _samplers[key] = sampler
        while len(_samplers) > SAMPLERS_KEPT:
            _samplers.popitem(last=False)
    return sampler


def _renderer(sampler: Any, order: EpisodeOrder) -> Any:
    from minds_core import Renderer, sampler_tokenizer

    return Renderer(sampler_tokenizer(sampler, order.base_model), order.chat_template_args)
