"""One rollout against an ORS session: prompt and tools in, tool calls out, rewards reduced at the end."""

from __future__ import annotations

import asyncio
import json
import time
from typing import TYPE_CHECKING, Any

from minds_core import (
    Context,
    EpisodeConversation,
    MalformedToolCall,
    Message,
    StepResult,
    Task,
    ToolCall,
    get_logger,
    parse_tool_calls,
    strip_think,
    take_turns,
    think_text,
)
from minds_openreward import prompting
from minds_openreward.capacity import backoff_seconds
from minds_openreward.failures import NoRewardError, is_capacity_error
from minds_openreward.rewards import rollout_reward
from minds_openreward.upload import Event

if TYPE_CHECKING:
    from minds_openreward.environment import OpenRewardEnvironment

log = get_logger("openreward")

#: Per-rollout counters reported as metrics (averaged per environment by the core), with
#: ``finished`` (1 when the environment ended the episode) and ``ors_seconds`` (time spent
#: waiting on the ORS server: opening the session, prompt, tools, tool calls).
COUNTERS = ("tool_calls", "malformed_calls", "rejected_calls", "no_tool_call", "capacity_waits")
_CLEANUP_SECONDS = 5.0


class OpenRewardEpisode:
    """An ORS session driven turn by turn (a self-driving episode).

    ``run(conversation)`` plays the whole episode with the core's turn loop over
    ``initial_observation()`` and ``step(text)``: ``step`` parses the tool calls in
    ``text``, runs them, and returns the outputs (or feedback on malformed calls)
    as the next turn's messages. It then reduces the rewards and uploads the
    transcript, which is why the episode drives itself.
    """

    def __init__(self, env: OpenRewardEnvironment, task: Task, ctx: Context) -> None:
        self.env = env
        self.task = task
        self.ctx = ctx
        self.in_template = env.settings.tool_format == "auto" and bool(getattr(ctx.renderer, "supports_tools", False))
        self.tools: list[dict[str, Any]] | None = None
        self.rewards: list[float] = []
        self.finished = False
        self.counts = dict.fromkeys(COUNTERS, 0)
        self.transcript: list[Event] = []
        self._session: Any = None
        self._tool_names: list[str] = []
        self._ors_seconds = 0.0

    async def run(self, conversation: EpisodeConversation) -> StepResult:
        """Play the episode to its end (finished, or out of tokens) and return the rollout's reward."""
        await take_turns(self, conversation)
        outcome = self.outcome()
        if self.env.uploader is not None:
            metadata = {"task": self.task.id, "step": self.ctx.step, "turns": conversation.turns}
            await self.env.uploader.upload(self.transcript, self.task.info.get("split", ""), outcome.reward, self.finished, metadata)
        return outcome

    async def initial_observation(self) -> list[Message]:
        """Open the session; the task's prompt, with tool instructions when the template cannot show tools."""
        began = time.perf_counter()
        session = await self._open()
        specs = await session.list_tools()
        ors_messages = await session.get_messages()
        self._ors_seconds += time.perf_counter() - began
        self._tool_names = [spec.name for spec in specs]
        tools = [prompting.chat_tool_spec(s.name, s.description, s.input_schema) for s in specs]
        messages = prompting.prompt_messages(ors_messages)
        final_answer = self.env.terminal is not None
        if self.in_template:
            self.tools = tools or None
            if final_answer:
                messages = prompting.with_system_text(messages, prompting.FINAL_ANSWER)
        elif tools or final_answer:
            messages = prompting.with_system_text(messages, prompting.tool_instructions(tools, final_answer))
        self.transcript.extend(Event(m["role"], m["content"]) for m in messages)
        return messages

    async def step(self, action: str) -> StepResult:
        """Run the tool calls in ``action``; ``reward`` is the sum of this turn's tool rewards (None if none)."""
        session = self._require_session()
        if thought := think_text(action):
            self.transcript.append(Event("reasoning", thought))
        visible = strip_think(action)
        self.transcript.append(Event("assistant", visible))
        before = len(self.rewards)
        replies: list[tuple[str, str]] = []
        items = parse_tool_calls(action)
        if not items and self.env.terminal is not None:
            replies.append(("tool", await self._finish(session, visible.strip())))
        elif not items:
            self.counts["no_tool_call"] += 1
            replies.append(("feedback", prompting.no_call_feedback(self._tool_names)))
        for item in items:
            if self.finished:
                break
            if isinstance(item, MalformedToolCall):
                self.counts["malformed_calls"] += 1
                replies.append(("feedback", prompting.malformed_feedback(item.problem)))
            else:
                replies.append(("tool", await self._call(session, item)))
        turn = self.rewards[before:]
        messages = [] if self.finished else prompting.reply_messages(replies, self.in_template)
        return StepResult(reward=sum(turn) if turn else None, done=self.finished, messages=messages)

    def outcome(self) -> StepResult:
        """The rollout's reward by the configured reduction; no reward at all fails the rollout."""
        reward = rollout_reward(self.rewards, self.finished, self.env.settings)
        if reward is None:
            raise NoRewardError(
                "the episode ended without a reward (no tool returned one and it did not finish); "
                "set nonterminal_reward to score unfinished episodes"
            )
        metrics = {key: float(value) for key, value in self.counts.items()}
        metrics["finished"] = float(self.finished)
        metrics["ors_seconds"] = self._ors_seconds
        return StepResult(reward=reward, done=True, metrics=metrics)

    async def close(self) -> None:
        """End the session and give its slot back."""
        session, self._session = self._session, None
        if session is not None:
            try:
                await session.__aexit__(None, None, None)
            finally:
                await self.env.limiter.release(was_open=True)

    # ------------------------------------------------------------ internals

    def _require_session(self) -> Any:
        if self._session is None:
            raise RuntimeError("the episode has no open session: call initial_observation() first")
        return self._session

    async def _open(self) -> Any:
        """Start the ORS session under the adaptive limiter; HTTP 429 backs off and lowers the limit."""
        if self._session is not None:
            return self._session
        env, settings = self.env, self.env.settings
        attempt = 0
        while True:
            attempt += 1
            await env.limiter.acquire()
            session = env.session(self.task)
            try:
                await session.__aenter__()
            except BaseException as exc:
                await _discard(session)
                await env.limiter.release(was_open=False)
                if not isinstance(exc, Exception) or not is_capacity_error(exc) or attempt > settings.capacity_retries:
                    raise
                env.limiter.refused()
                self.counts["capacity_waits"] += 1
                log.warning("environment at capacity, backing off", env=settings.name, session_limit=env.limiter.limit, attempt=attempt)
                await asyncio.sleep(backoff_seconds(attempt, settings.capacity_backoff))
                continue
            env.limiter.opened()
            self._session = session
            return session

    async def _call(self, session: Any, call: ToolCall) -> str:
        """One tool call from the model's text."""
        self.counts["tool_calls"] += 1
        return await self._invoke(session, call.name, call.arguments, f"call_{self.counts['tool_calls']}")

    async def _finish(self, session: Any, answer: str) -> str:
        """A reply without tool calls goes to the environment's terminal tool."""
        terminal = self.env.terminal
        return await self._invoke(session, terminal.name, {} if terminal.arg is None else {terminal.arg: answer}, "final")

    async def _invoke(self, session: Any, name: str, arguments: dict[str, Any], call_id: str) -> str:
        """Run a tool; a rejected call (unknown tool, bad input) becomes feedback, a failing tool raises."""
        from openreward.api.errors import ToolCallError

        self.transcript.append(Event("tool_call", json.dumps(arguments), name, call_id))
        began = time.perf_counter()
        try:
            output = await session.call_tool(name, arguments)
        except ToolCallError as exc:
            if exc.reason == "episode_finished":
                self.finished = True
            self.counts["rejected_calls"] += 1
            text = prompting.rejected_feedback(name, exc.reason, exc.detail)
            self.transcript.append(Event("tool_result", text, call_id=call_id))
            return text
        finally:
            self._ors_seconds += time.perf_counter() - began
        return self._record(output, call_id)

    def _record(self, output: Any, call_id: str) -> str:
        if output.reward is not None:
            self.rewards.append(float(output.reward))
        self.finished = self.finished or bool(output.finished)
        text = prompting.blocks_text(output.blocks) or "(no output)"
        self.transcript.append(Event("tool_result", text, call_id=call_id))
        return text


async def _discard(session: Any) -> None:
    """Best-effort removal of a session that failed to start (the server may already hold it)."""
    if session.sid is None:
        return
    try:
        await asyncio.wait_for(session.__aexit__(None, None, None), _CLEANUP_SECONDS)
    except Exception as exc:  # noqa: BLE001 - cleanup of an already failed start
        log.debug("could not remove a session that failed to start", error=f"{type(exc).__name__}: {exc}")
