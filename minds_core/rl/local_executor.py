"""The ``local`` rollout executor: every episode in this process, on the run's event loop.

Up to ``rollout.concurrency`` rollouts run at once (``Session.limiter``); turns of one group
with identical prompts are sampled in one request (``coalesce.GroupSampler``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from minds_core.contract.parts import GroupOrder
    from minds_core.episodes.groups import Group
    from minds_core.session.session import Policy, Session


class LocalExecutor:
    """Runs the groups of a session as asyncio tasks of this process."""

    needs_sampler_path = False

    def __init__(self, session: Session) -> None:
        self.session = session

    async def run_groups(self, orders: Sequence[GroupOrder], policy: Policy) -> list[Group]:
        from minds_core.episodes.rollout import run_group  # at first use: registering the executor imports no torch

        session = self.session
        jobs = [
            run_group(
                order.env_name,
                session.envs[order.env_index].env,
                order.task,
                order.group_size,
                lambda step=order.step: session.context(policy, step),
                session.settings[order.env_index],
                session.limiter,
                order.max_failing,
                order.seed,
            )
            for order in orders
        ]
        return list(await asyncio.gather(*jobs))

    async def close(self) -> None:
        """Nothing to release: the episodes ran on the session's own loop."""
