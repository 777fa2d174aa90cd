"""Optional upload of finished rollouts to OpenReward under a run name (off unless configured)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from typing import Any

import attrs

from minds_core import get_logger

log = get_logger("openreward.upload")


@attrs.frozen
class Event:
    """One item of a rollout's transcript, in the order it happened."""

    kind: str  # system | user | assistant | reasoning | tool_call | tool_result
    content: str
    name: str = ""
    call_id: str = ""


def _message(event: Event) -> Any:
    from openreward.api.rollouts.serializers.base import (
        AssistantMessage,
        ReasoningItem,
        SystemMessage,
        ToolCall,
        ToolResult,
        UserMessage,
    )

    if event.kind == "tool_call":
        return ToolCall(name=event.name, content=event.content, call_id=event.call_id)
    if event.kind == "tool_result":
        return ToolResult(content=event.content, call_id=event.call_id)
    if event.kind == "reasoning":
        return ReasoningItem(content=event.content)
    kinds = {"system": SystemMessage, "user": UserMessage, "assistant": AssistantMessage}
    return kinds[event.kind](content=event.content)


class TrajectoryUploader:
    """Logs each finished rollout to OpenReward; the first failure turns uploading off for the run.

    The SDK's calls block, so they run in a worker thread. The first upload goes
    alone: when it fails (service unreachable, key refused) the rest are skipped
    instead of each waiting on the same failure.
    """

    def __init__(self, run_name: str, environment: str, api_key: str) -> None:
        self.run_name = run_name
        self.environment = environment
        self.enabled = True
        self.uploaded = 0
        self._api_key = api_key
        self._api: Any = None
        self._verified = False
        self._first: asyncio.Lock | None = None

    async def upload(self, events: Sequence[Event], split: str, reward: float, finished: bool, metadata: dict[str, Any]) -> None:
        """Send one rollout; never raises."""
        if not self.enabled:
            return
        if self._verified:
            await self._send(events, split, reward, finished, metadata)
            return
        self._first = self._first or asyncio.Lock()
        async with self._first:
            if self.enabled:
                self._verified = await self._send(events, split, reward, finished, metadata)

    async def _send(self, events: Sequence[Event], split: str, reward: float, finished: bool, metadata: dict[str, Any]) -> bool:
        try:
            sent = await asyncio.to_thread(self._send_blocking, events, split, reward, finished, metadata)
            error = "" if sent else "the service did not accept the rollout"
        except Exception as exc:  # noqa: BLE001 - an upload never fails training
            sent, error = False, f"{type(exc).__name__}: {exc}"
        if sent:
            self.uploaded += 1
        elif self.enabled:
            self.enabled = False
            log.warning("trajectory upload to OpenReward failed; uploads are off for the rest of the run", run_name=self.run_name, error=error[:300])
        return sent

    def _send_blocking(self, events: Sequence[Event], split: str, reward: float, finished: bool, metadata: dict[str, Any]) -> bool:
        if self._api is None:
            from openreward import AsyncOpenReward

            self._api = AsyncOpenReward(api_key=self._api_key).rollout
        rollout = self._api.create(
            run_name=self.run_name,
            rollout_name=f"{metadata.get('task', 'task')}-{uuid.uuid4().hex[:8]}",
            environment=self.environment,
            split=split,
            metadata=metadata,
        )
        if getattr(rollout, "_rollouts_disabled", False):  # the SDK's own "could not start" flag
            return False
        for index, event in enumerate(events):
            last = index == len(events) - 1
            rollout.log(_message(event), reward=reward if last else None, is_finished=finished and last)
        return True

    async def close(self) -> None:
        """Flush what was queued (the SDK sends in the background)."""
        if self._api is not None:
            await asyncio.to_thread(self._api.close)
