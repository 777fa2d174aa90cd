"""The ``ray`` rollout executor: each rollout is a Ray task, on any node of the cluster.

The driver (the run's process) keeps the loop: it hands out episodes, at most ``ray.max_in_flight``
at once, and gets back finished token-level rollouts. The worker retries the episode's own failures
as in process; a worker or node that dies costs the attempt it was playing (sent again while
``rollout.retries`` allow, else the rollout fails with the reason); a worker that overruns
``rollout.timeout`` where asyncio cannot stop it is cancelled. Group rubrics, dropping and everything after run here,
as in process.
"""

from __future__ import annotations

import asyncio
import secrets
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
from minds_ray.order import Endpoint, EpisodeOrder, WorkerRefused, installed_versions

log = get_logger("ray")

#: The variable the workers read the run's own server key from (local backend), set in the tasks' runtime_env.
SERVED_KEY_ENV = "MINDS_RAY_SERVED_KEY"
#: Seconds a remote attempt may run past ``rollout.timeout`` (worker start, transfer) before it is cancelled.
DEADLINE_GRACE = 30.0


def _cluster_errors() -> tuple[type[BaseException], ...]:
    """Ray's errors for an attempt lost with its worker or node (not the episode's own failure)."""
    from ray import exceptions as rx

    names = ("WorkerCrashedError", "NodeDiedError", "ObjectLostError", "OwnerDiedError", "RaySystemError", "TaskCancelledError", "LocalRayletDiedError")
    return tuple(getattr(rx, name) for name in names if hasattr(rx, name))


class RayExecutor:
    """Episodes as Ray tasks; made (connected) by ``start``."""

    needs_sampler_path = True

    def __init__(self, session: Any, endpoint: Endpoint, server: Any, key: str, owns_ray: bool) -> None:
        cfg = session.config
        self.session = session
        self.endpoint = endpoint
        self.server = server  # the run's engine served for the workers (local backend), else None
        self.key = key  # that server's key ('' = none), handed to the workers in their runtime_env
        self.owns_ray = owns_ray  # whether this executor connected this process to Ray (and so disconnects it)
        self.slots = asyncio.Semaphore(cfg.ray.max_in_flight or cfg.rollout.concurrency)
        self.versions = installed_versions(["minds-core"] + sorted({p.distribution for p in session.plugins.plugins if p.distribution and p.ok}))
        self.episodes_per_node: Counter[str] = Counter()  #: finished attempts per Ray node id
        self.lost_attempts = 0  #: attempts lost with their worker or node
        self._remote = None

    @classmethod
    async def start(cls, session: Any) -> RayExecutor:
        """Connect to (or start) the cluster, and serve the run's engine to it when the backend is local."""
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
        try:
            endpoint, server, key = _endpoint(session)
        except BaseException:
            if owns_ray:
                ray.shutdown()
            raise
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        cpus = ray.cluster_resources().get("CPU", 0)
        log.info("ray cluster", address=cfg.ray.address or "local", nodes=len(nodes), cpus=cpus, sampler=endpoint.url or "hosted")
        return cls(session, endpoint, server, key, owns_ray)

    def _task(self) -> Any:
        if self._remote is None:
            import ray

            from minds_ray.worker import play

            cfg = self.session.config.ray
            runtime_env = {"env_vars": {SERVED_KEY_ENV: self.key}} if self.key else None
            self._remote = ray.remote(play).options(
                num_cpus=cfg.num_cpus, resources=dict(cfg.resources) or None, max_retries=0, runtime_env=runtime_env
            )
        return self._remote

    async def run_groups(self, orders: Sequence[GroupOrder], policy: Any) -> list[Group]:
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
            async with self.slots:
                rollout, lost = await self._attempt(episode)
            if not lost or rollout.attempts > cfg.rollout.retries:
                break
            episode = attrs.evolve(episode, attempt=rollout.attempts + 1)
        if rollout.conversation is not None:  # the clients of this process, where the worker's were
            rollout.conversation = attrs.evolve(rollout.conversation, renderer=session.renderer, sampler=policy.sampler)
        return rollout

    async def _attempt(self, episode: EpisodeOrder) -> tuple[Rollout, bool]:
        """The rollout a worker played from ``episode.attempt`` on, and whether it was lost with its worker or node."""
        import ray

        timeout, attempts = episode.rollout.timeout, episode.rollout.retries + 1
        # a worker stuck where asyncio cannot interrupt it (a blocking call) overruns every attempt's timeout
        deadline = timeout * (attempts - episode.attempt + 1) + DEADLINE_GRACE if timeout > 0 else None
        ref = self._task().remote(episode)
        try:
            rollout, node = await asyncio.wait_for(asyncio.wrap_future(ref.future()), deadline)
        except TimeoutError:
            ray.cancel(ref, force=True)
            error = f"timed out after {timeout:g} s per attempt (the Ray worker did not return; it was cancelled)"
            return Rollout(None, error=error, timed_out=True, attempts=attempts), False
        except asyncio.CancelledError:
            ray.cancel(ref, force=True)
            raise
        except ray.exceptions.RayTaskError as exc:
            if isinstance(exc.cause, WorkerRefused):
                raise UsageError(str(exc.cause)) from None
            return self._lost(episode, exc), True  # minds' own code failed on the worker: the attempt is lost, reported
        except _cluster_errors() as exc:
            return self._lost(episode, exc), True
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
        if self.server is not None:
            self.server.close()
        if self.owns_ray and ray.is_initialized():
            ray.shutdown()


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


def _endpoint(session: Any) -> tuple[Endpoint, Any, str]:
    """Where the workers sample, the server this run starts for them (or None), and that server's key ('' = none)."""
    cfg = session.config
    if session.backend == "tinker":
        return Endpoint(cfg.tinker.base_url, cfg.tinker.api_key_env), None, ""
    if session.backend != "local":
        raise UsageError(
            f"rollout.executor = 'ray' samples over the Tinker protocol: use backend 'local' or 'tinker' (not {session.backend!r})"
        )
    host = cfg.ray.serve_host or _node_address()
    key = "tml-" + secrets.token_urlsafe(24)
    server = serve_in_background(session.service, [cfg.model.base_model], host, key)
    return Endpoint(server.url, SERVED_KEY_ENV), server, key


def _node_address() -> str:
    import ray.util

    return ray.util.get_node_ip_address()
