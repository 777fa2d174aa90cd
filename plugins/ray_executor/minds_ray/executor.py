"""The ``ray`` rollout executor: each rollout is played by a warm Ray worker, on any node of the cluster.

The workers (``Player`` actors, as many as the cluster's CPUs hold at ``ray.num_cpus`` each, at most
``ray.max_in_flight``) start when the executor opens, before step 0, and serve the whole run; their
start-up is logged apart from the steps. The episodes in flight (``ray.max_in_flight``, else
``rollout.concurrency``) are shared out between them: each worker plays up to ``slots`` at once on its
event loop, so that their sampling requests reach the engine together and decode in one batch, as in
process. The driver (the run's process) keeps the loop: it hands each episode to a free slot of a worker
and gets back finished token-level rollouts. The worker retries the episode's own failures as in process;
a worker or node that dies costs the attempts it was playing (each sent again while ``rollout.retries``
allow, else the rollout fails with the reason) and the worker is replaced; a worker with an episode that
overruns ``rollout.timeout`` where asyncio cannot stop it is killed (its other episodes are lost with it)
and replaced. Each step starts workers on the CPUs of nodes that joined the cluster, which take their share of
the slots once ready. Group rubrics, dropping and everything after run here, as in process.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import secrets
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

import attrs

from minds_core import (
    Group,
    GroupOrder,
    Rollout,
    UsageError,
    finish_group,
    get_logger,
    secret_values,
    serve_in_background,
)
from minds_ray.order import Endpoint, EpisodeOrder, WorkerRefused, WorkerSetup, installed_versions

log = get_logger("ray")

#: The variable the workers read the run's own server key from (local backend), set in the tasks' runtime_env.
SERVED_KEY_ENV = "MINDS_RAY_SERVED_KEY"
#: Seconds a remote attempt may run past ``rollout.timeout`` (transfer, a busy node) before its worker is killed.
DEADLINE_GRACE = 30.0
#: Seconds the workers may take to start (import, load the plugins) before the run stops, naming what is missing.
START_TIMEOUT = 600.0


def _cluster_errors() -> tuple[type[BaseException], ...]:
    """Ray's errors for an attempt lost with its worker or node (not the episode's own failure)."""
    from ray import exceptions as rx

    names = (
        "WorkerCrashedError", "NodeDiedError", "ObjectLostError", "OwnerDiedError", "RaySystemError", "TaskCancelledError",
        "LocalRayletDiedError", "ActorDiedError", "ActorUnavailableError",
    )  # fmt: skip
    return tuple(getattr(rx, name) for name in names if hasattr(rx, name))


@attrs.frozen
class _NoWorkers:
    """In the idle queue in place of a worker: every worker was lost and none could be started again."""

    error: str  #: why the last one could not start


class RayExecutor:
    """Episodes on warm Ray workers; made (connected, workers started) by ``start``."""

    needs_sampler_path = True

    def __init__(self, session: Any, endpoint: Endpoint, server: Any, key: str, owns_ray: bool, workers: int, slots: int) -> None:
        self.session = session
        self.endpoint = endpoint
        self.server = server  # the run's engine served for the workers (local backend), else None
        self.key = key  # that server's key ('' = none), handed to the workers in their runtime_env
        self.owns_ray = owns_ray  # whether this executor connected this process to Ray (and so disconnects it)
        self.workers = workers  #: the workers kept for the run
        self.slots = slots  #: the episodes a worker plays at once, at most
        self.in_flight = session.config.ray.max_in_flight or session.config.rollout.concurrency  #: episodes at once, all workers
        self.versions = installed_versions(["minds-core"] + sorted({p.distribution for p in session.plugins.plugins if p.distribution and p.ok}))
        self.episodes_per_node: Counter[str] = Counter()  #: finished attempts per Ray node id
        self.lost_attempts = 0  #: attempts lost with their worker or node
        self.startup_seconds = 0.0  #: seconds the workers took to start (before step 0)
        self._idle: asyncio.Queue[Any] = asyncio.Queue()  # a started worker once per free slot
        self._actors: set[Any] = set()  # every worker started and not yet killed
        self._ready = 0  # workers that were ready (counted for the start-up's error)
        self._slots_of: dict[Any, int] = {}  # each ready worker's share of the episodes in flight
        self._retiring: Counter[Any] = Counter()  # slots of a worker given to one that joined, dropped as they free
        self._growing: set[asyncio.Task[None]] = set()  # workers starting on CPUs that joined the cluster
        self._starting: set[asyncio.Task[None]] = set()  # replacements under way

    @classmethod
    async def start(cls, session: Any) -> RayExecutor:
        """Connect to (or start) the cluster, serve the run's engine to it when the backend is local, and start the workers."""
        import ray

        cfg = session.config
        _check_no_secrets(session)
        owns_ray = not ray.is_initialized()  # a process already on Ray (a notebook, a benchmark) keeps its connection
        if owns_ray:
            token = _follow_token_auth()
            try:
                ray.init(address=cfg.ray.address or None, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
            except Exception as exc:  # noqa: BLE001 - any failure to reach the cluster is the config's to fix
                where = cfg.ray.address or "a new local cluster"
                hint = (
                    "; the token this machine has may not be the cluster's (`ray get-auth-token` on the head prints it)"
                    if token
                    else "; a cluster with token authentication (Ray's default where its head has a token) needs the head's "
                    "token here: ~/.ray/auth_token, or $RAY_AUTH_TOKEN or $RAY_AUTH_TOKEN_PATH (`ray get-auth-token` on the head)"
                )
                detail = " ".join(str(exc).split())[:300]
                raise UsageError(f"ray.address = {cfg.ray.address!r}: cannot connect to {where}: {type(exc).__name__}: {detail}{hint}") from None
        executor = None
        try:
            nodes = [n for n in ray.nodes() if n.get("Alive")]
            cpus = ray.cluster_resources().get("CPU", 0)
            workers, slots = _pool(cfg, cpus)
            endpoint, server, key = _endpoint(session, workers)
            log.info("ray cluster", address=cfg.ray.address or "local", nodes=len(nodes), cpus=cpus, sampler=endpoint.url or "hosted")
            executor = cls(session, endpoint, server, key, owns_ray, workers, slots)
            await executor._start_workers()
        except BaseException:
            if executor is not None:
                await executor.close()
            elif owns_ray:
                ray.shutdown()
            raise
        return executor

    async def _start_workers(self) -> None:
        """Start every worker and wait until each is ready; log the seconds taken (apart from the steps)."""
        began = time.perf_counter()
        try:
            actors = await asyncio.wait_for(asyncio.gather(*(self._add_worker() for _ in range(self.workers))), START_TIMEOUT)
        except TimeoutError:
            cfg = self.session.config.ray
            raise UsageError(
                f"ray: {self.workers - self._ready} of {self.workers} workers did not start in {START_TIMEOUT:g} s; "
                f"the cluster may lack the resources each asks for (ray.num_cpus = {cfg.num_cpus:g}, ray.resources = "
                f"{dict(cfg.resources)}): lower ray.max_in_flight or ray.num_cpus, or add nodes"
            ) from None
        self.startup_seconds = time.perf_counter() - began
        for index in range(self.in_flight):  # round by round: the first episodes go one to each worker
            self._free(actors[index % self.workers])
        log.info("ray workers started", workers=self.workers, in_flight=self.in_flight, seconds=round(self.startup_seconds, 2))

    async def _add_worker(self) -> Any:
        """Start one worker and wait until it is ready (a worker refused for its versions stops the run)."""
        import ray

        from minds_ray.worker import Player

        cfg = self.session.config.ray
        runtime_env = {"env_vars": {SERVED_KEY_ENV: self.key}} if self.key else None
        actor = (
            ray.remote(Player)
            .options(
                num_cpus=cfg.num_cpus,
                resources=dict(cfg.resources) or None,
                max_restarts=0,
                max_concurrency=self.slots,
                runtime_env=runtime_env,
            )
            .remote()
        )
        self._actors.add(actor)
        try:
            await asyncio.wrap_future(actor.ready.remote(self._setup()).future())
        except ray.exceptions.RayTaskError as exc:
            self._kill(actor)
            if isinstance(exc.cause, WorkerRefused):
                raise UsageError(str(exc.cause)) from None
            raise
        except BaseException:
            self._kill(actor)
            raise
        self._ready += 1
        return actor

    def _free(self, actor: Any) -> None:
        """Give the pool one more free slot of ``actor``'s (and count it as the worker's)."""
        self._slots_of[actor] = self._slots_of.get(actor, 0) + 1
        self._idle.put_nowait(actor)

    async def _join(self, slots: int) -> None:
        """Start a worker in place of one lost, and free as many slots as that one had once it is ready."""
        actor = await self._add_worker()
        for _ in range(slots):
            self._free(actor)

    def _setup(self) -> WorkerSetup:
        cfg = self.session.config
        envs = [handle.cfg for handle in self.session.envs]
        return WorkerSetup(self.versions, self.endpoint, cfg.model.base_model, dict(cfg.model.chat_template_args), envs)

    def _replace(self, actor: Any) -> None:
        """Kill a worker that was lost or overran, and start another in the background (joins when ready); once
        per worker, however many of its episodes saw it go."""
        if actor not in self._actors:
            return
        self._kill(actor)
        task = asyncio.ensure_future(self._join(self._slots_of.pop(actor, 1)))
        self._starting.add(task)
        task.add_done_callback(self._replaced)

    def _replaced(self, task: asyncio.Task[None]) -> None:
        self._starting.discard(task)
        if not task.cancelled() and task.exception() is not None:  # the pool is one worker short; its episodes wait on the others
            error = " ".join(str(task.exception()).split())[:300]
            log.warning("a Ray worker could not be replaced", error=error)
            if not self._actors and not self._starting:  # none left to wait on: every waiting attempt fails, never hangs
                self._idle.put_nowait(_NoWorkers(error))

    def _grow(self) -> None:
        """Start workers on the CPUs of nodes that joined since the run began, as many as they hold at ``ray.num_cpus``
        each while the workers are fewer than the episodes in flight; each takes its share of the slots once ready."""
        import ray

        from minds_ray.worker import SAMPLERS_KEPT

        target, _ = _pool(self.session.config, ray.cluster_resources().get("CPU", 0))
        if target <= self.workers:
            return
        for _ in range(target - self.workers):
            task = asyncio.ensure_future(asyncio.wait_for(self._take_share(), START_TIMEOUT))
            self._growing.add(task)
            task.add_done_callback(self._grown)
        self.workers = target
        if self.server is not None:  # the served engine keeps the new workers' sampling sessions too
            self.server.keep_samplers(self.workers * SAMPLERS_KEPT)

    async def _take_share(self) -> None:
        """Start a worker and move to it its share of the slots, from the workers that hold the most; its slots go
        first in the queue, between the others' (the free slots of the workers that gave theirs are dropped now, the
        busy ones as they free)."""
        actor = await self._add_worker()
        moved = 0
        for _ in range(self.in_flight // (len(self._slots_of) + 1)):
            richest = max(self._slots_of, key=lambda held: self._slots_of[held])
            if self._slots_of[richest] <= 1:
                break
            self._slots_of[richest] -= 1
            self._retiring[richest] += 1
            moved += 1
        kept = []
        while not self._idle.empty():
            entry = self._idle.get_nowait()
            if entry in self._actors and self._retiring[entry] > 0:
                self._retiring[entry] -= 1
            else:
                kept.append(entry)
        self._slots_of[actor] = moved
        for entry in itertools.chain.from_iterable(itertools.zip_longest([actor] * moved, kept)):
            if entry is not None:
                self._idle.put_nowait(entry)
        log.info("a Ray worker joined", workers=len(self._slots_of), in_flight=moved)

    def _grown(self, task: asyncio.Task[None]) -> None:
        self._growing.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self.workers -= 1
            log.warning("a Ray worker could not start on the cluster's new CPUs", error=" ".join(str(task.exception()).split())[:300])

    def _kill(self, actor: Any) -> None:
        import ray

        self._actors.discard(actor)
        self._retiring.pop(actor, None)
        try:
            ray.kill(actor, no_restart=True)
        except Exception:  # noqa: BLE001 - a worker already gone (its node died) has nothing left to kill
            pass

    async def run_groups(self, orders: Sequence[GroupOrder], policy: Any) -> list[Group]:
        self._grow()
        return list(await asyncio.gather(*(self._group(order, policy) for order in orders)))

    async def _group(self, order: GroupOrder, policy: Any) -> Group:
        session = self.session
        rollouts = list(await asyncio.gather(*(self._rollout(order, index, policy) for index in range(order.group_size))))
        ctx = session.context(policy, order.step)
        env = session.envs[order.env_index].env
        return await finish_group(order.env_name, env, order.task, rollouts, ctx, session.config.rollout, order.max_failing)

    async def _rollout(self, order: GroupOrder, index: int, policy: Any) -> Rollout:
        """One rollout on a worker, which retries the episode's own failures as in process (``rollout.retries``);
        an attempt lost with its worker or node is sent again, to any node, while attempts are left."""
        session = self.session
        cfg = session.config
        settings = session.settings[order.env_index]
        episode = EpisodeOrder(
            env=order.env,
            task=order.task,
            seed=None if order.seed is None else order.seed + index,
            attempt=1,
            step=order.step,
            params=settings.params,
            rollout=cfg.rollout,
            base_model=cfg.model.base_model,
            chat_template_args=dict(cfg.model.chat_template_args),
            lora_rank=cfg.model.lora_rank,
            sampler_path=policy.sampler_path,
            policy_checkpoint=policy.checkpoint,
            endpoint=self.endpoint,
            versions=self.versions,
        )
        while True:
            rollout, lost = await self._attempt(episode)
            if not lost or rollout.attempts > cfg.rollout.retries:
                break
            episode = attrs.evolve(episode, attempt=rollout.attempts + 1)
        if rollout.conversation is not None:  # the clients of this process, where the worker's were
            rollout.conversation = attrs.evolve(rollout.conversation, renderer=session.renderer, sampler=policy.sampler)
        return rollout

    async def _attempt(self, episode: EpisodeOrder) -> tuple[Rollout, bool]:
        """The rollout an idle worker played from ``episode.attempt`` on, and whether it was lost with its worker or node."""
        import ray

        timeout, attempts = episode.rollout.timeout, episode.rollout.retries + 1
        # a worker stuck where asyncio cannot interrupt it (a blocking call) overruns every attempt's timeout
        deadline = timeout * (attempts - episode.attempt + 1) + DEADLINE_GRACE if timeout > 0 else None
        actor = await self._idle.get()
        while not isinstance(actor, _NoWorkers) and (actor not in self._actors or self._retiring[actor] > 0):
            if actor in self._actors:  # a slot given to a worker that joined
                self._retiring[actor] -= 1
            actor = await self._idle.get()  # else a free slot of a worker since killed
        if isinstance(actor, _NoWorkers):
            self._idle.put_nowait(actor)  # for the next attempt that waits
            error = f"no Ray worker left: every worker was lost and none could be started again (last: {actor.error})"
            return Rollout(None, error=error, attempts=episode.attempt), False
        ref = actor.play.remote(episode)
        try:
            rollout, node = await asyncio.wait_for(asyncio.wrap_future(ref.future()), deadline)
        except TimeoutError:
            self._replace(actor)
            error = f"timed out after {timeout:g} s per attempt (the Ray worker did not return; it was replaced)"
            return Rollout(None, error=error, timed_out=True, attempts=attempts), False
        except asyncio.CancelledError:
            self._replace(actor)
            raise
        except ray.exceptions.RayTaskError as exc:
            self._idle.put_nowait(actor)  # the worker lives on: minds' own code failed in it
            if isinstance(exc.cause, WorkerRefused):
                raise UsageError(str(exc.cause)) from None
            return self._lost(episode, exc), True  # the attempt is lost, reported
        except _cluster_errors() as exc:
            self._replace(actor)
            return self._lost(episode, exc), True
        self._idle.put_nowait(actor)
        self.episodes_per_node[node] += 1
        return rollout, False

    def _lost(self, episode: EpisodeOrder, exc: BaseException) -> Rollout:
        self.lost_attempts += 1
        reason = " ".join(str(exc).split())[:300]
        log.warning("a Ray worker was lost with its episode", attempt=episode.attempt, error=f"{type(exc).__name__}: {reason}")
        return Rollout(None, error=f"the Ray worker was lost: {type(exc).__name__}: {reason}", attempts=episode.attempt)

    async def close(self) -> None:
        import ray

        if self.episodes_per_node:
            log.info("episodes per Ray node", nodes=dict(self.episodes_per_node), lost=self.lost_attempts)
        for task in [*self._starting, *self._growing]:
            task.cancel()
        for actor in list(self._actors):  # a connection kept open (not this executor's) must not keep the workers' CPUs
            self._kill(actor)
        if self.server is not None:
            self.server.close()
        if self.owns_ray and ray.is_initialized():
            ray.shutdown()


def _pool(cfg: Any, cpus: float) -> tuple[int, int]:
    """The workers kept for the run, and the episodes each plays at once: as many workers as the cluster's CPUs hold at
    ``ray.num_cpus`` each, at most the episodes in flight (``ray.max_in_flight``, else ``rollout.concurrency``), one at
    least; those episodes shared out between them."""
    in_flight = cfg.ray.max_in_flight or cfg.rollout.concurrency
    held = math.floor(cpus / cfg.ray.num_cpus + 1e-9) if cfg.ray.num_cpus > 0 else in_flight
    workers = max(1, min(in_flight, held))
    return workers, math.ceil(in_flight / workers)


def _follow_token_auth() -> bool:
    """Connect as the cluster expects: Ray itself turns a driver's token authentication on where a token is at hand
    only for the cluster it finds (``ray.address`` auto or empty), never for a named address (it then fails after
    seconds of retries, "Missing authorization header"). Here, with ``RAY_AUTH_MODE`` unset, a token at hand
    (``RAY_AUTH_TOKEN``, the file ``RAY_AUTH_TOKEN_PATH`` names, or ``~/.ray/auth_token``) turns it on for any address,
    by the call Ray makes for ``auto`` (private to Ray: the pinned version's). Whether the driver connects with a token."""
    from ray._private.authentication.authentication_token_setup import maybe_enable_token_auth_if_token_available

    return maybe_enable_token_auth_if_token_available(warn_if_disabled=False)


def _check_no_secrets(session: Any) -> None:
    """A UsageError when an environment's args hold a secret value: it would travel to the workers in every task."""
    for handle in session.envs:
        if secret_values(handle.cfg.args, environ={}):
            raise UsageError(
                f"rollout.executor = 'ray': the args of environment {handle.name!r} hold a secret, which every Ray task "
                "would carry to its worker; give the environment the NAME of a variable set on every node instead "
                "(an *_env arg, or '$NAME')"
            )


def _endpoint(session: Any, workers: int) -> tuple[Endpoint, Any, str]:
    """Where the workers sample, the server this run starts for them (or None), and that server's key ('' = none).

    The server keeps as many sampling sessions as the workers do (``SAMPLERS_KEPT`` each, the base model's and the
    latest policies'), so that none is dropped under a worker (``minds serve`` keeps 16, ``--max-samplers``); they share
    one engine per saved policy, whose memory is counted once."""
    from minds_ray.worker import SAMPLERS_KEPT

    cfg = session.config
    if session.backend == "tinker":
        return Endpoint(cfg.tinker.base_url, cfg.tinker.api_key_env), None, ""
    if session.backend != "local":
        raise UsageError(
            f"rollout.executor = 'ray' samples over the Tinker protocol: use backend 'local' or 'tinker' (not {session.backend!r})"
        )
    host = cfg.ray.serve_host or _node_address()
    key = "tml-" + secrets.token_urlsafe(24)
    server = serve_in_background(session.service, [cfg.model.base_model], host, key, max_samplers=workers * SAMPLERS_KEPT)
    return Endpoint(server.url, SERVED_KEY_ENV), server, key


def _node_address() -> str:
    import ray.util

    return ray.util.get_node_ip_address()
