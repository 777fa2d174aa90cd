"""The environment contract: tasks, episodes, step results and the context episodes receive.

An environment (``Environment``) gives tasks and starts one episode per
rollout. An episode is either stepwise (``Episode``: the core samples each turn
and hands its text to ``step``) or self-driving (``SelfDrivingEpisode``: it
drives an ``EpisodeConversation`` itself, as bridges to other frameworks do).
Optional members are read only through this module's accessors.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import attrs

from minds_core.contract.rubric import Rubric

#: A chat message: {"role": "system" | "user" | "assistant" | "tool", "content": str, ...}.
Message = dict[str, Any]


@attrs.frozen
class Task:
    """One item of an environment's dataset; the answer travels with the task."""

    prompt: str | list[Message]  #: the user's text, or the chat messages that open the episode
    answer: Any = None  #: the reference answer reward functions compare with (None: none)
    info: dict[str, Any] = attrs.field(factory=dict)  #: anything else the episode or rewards need
    id: str = ""  #: a stable identifier, shown in logs and rollout records
    #: labels the step's metrics are also grouped by (``tag/<tag>/...``): tinker-cookbook's ``logging_tags()``
    tags: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    #: text only a self-distillation teacher reads before the episode (``distill.privileged_context``): a worked
    #: solution, a hint; None: ``DEFAULT_CONTEXT`` of the answer when there is one (``privileged_context``)
    privileged_context: str | None = None


#: The privileged context of a task that gives none but has an answer.
DEFAULT_CONTEXT = "The answer is: {answer}"


def privileged_context(task: Task) -> str | None:
    """What a self-distillation teacher reads first for ``task``: its own, else its answer's (None: neither)."""
    if task.privileged_context is not None:
        return task.privileged_context
    if task.answer is None or task.answer == "":
        return None
    return DEFAULT_CONTEXT.format(answer=task.answer)


@attrs.define
class StepResult:
    """What an episode returns for one action."""

    reward: float | None = None  #: added to the rollout's return; None: no reward this step
    done: bool = True  #: whether the episode ended
    messages: list[Message] = attrs.field(factory=list)  #: the environment's reply, shown next turn when not done
    metrics: dict[str, float] = attrs.field(factory=dict)  #: summed per rollout, averaged per environment


#: The keys a step's result may carry, each with the spellings accepted for it: minds' own first,
#: then tinker-cookbook's (``episode_done``, ``next_observation``) and the gym-like ``observation``.
STEP_KEYS: dict[str, tuple[str, ...]] = {
    "reward": ("reward",),
    "done": ("done", "episode_done"),
    "messages": ("messages", "next_observation", "observation"),
    "metrics": ("metrics",),
}
#: tinker-cookbook keys read and left to minds: turns stop at the chat template's end of turn
#: (``next_stop_condition``) and ``logs`` are display strings the cookbook prints.
IGNORED_STEP_KEYS = ("next_stop_condition", "logs")


def as_step_result(value: Any) -> StepResult:
    """A StepResult from what ``step()`` returned: a StepResult, a mapping, or an object with a ``reward``.

    Each key may be spelled as in ``STEP_KEYS`` (one spelling per result); a key that is
    neither there nor in ``IGNORED_STEP_KEYS`` is refused by name, never dropped.
    The next observation may be text (a user message), one message or a list of messages.
    """
    if isinstance(value, StepResult):
        return value
    fields = _result_fields(value)
    if fields is None:
        raise TypeError(f"step() must return a StepResult or an object/mapping with a numeric 'reward', got {type(value).__name__}")
    spellings = {spelling: key for key, names in STEP_KEYS.items() for spelling in names}
    unknown = [name for name in fields if name not in spellings and name not in IGNORED_STEP_KEYS]
    if unknown:
        raise TypeError(
            f"step() returned a {type(value).__name__} with the unknown key(s) {', '.join(map(repr, unknown))}; the keys "
            "it may carry: " + "; ".join(" or ".join(names) for names in STEP_KEYS.values())
            + f" (and, ignored, {', '.join(IGNORED_STEP_KEYS)})"
        )  # fmt: skip
    read: dict[str, Any] = {}
    for key, names in STEP_KEYS.items():
        given = [name for name in names if fields.get(name) is not None]
        if len(given) > 1:
            raise TypeError(f"step() returned both {' and '.join(map(repr, given))}, which mean the same; keep one")
        if given:
            read[key] = fields[given[0]]
    if "reward" not in fields:
        raise TypeError(f"step() returned a {type(value).__name__} without 'reward' (keys: {', '.join(fields) or 'none'})")
    done = bool(read.get("done", True))
    return StepResult(
        reward=read.get("reward"),
        done=done,
        messages=_observation(read.get("messages"), done),
        metrics=dict(read.get("metrics") or {}),
    )


def _result_fields(value: Any) -> dict[str, Any] | None:
    """The named fields of a step's result (mapping keys, dataclass/attrs/namedtuple fields or public attributes)."""
    if isinstance(value, Mapping):
        return {str(k): v for k, v in value.items()}
    if not hasattr(value, "reward"):
        return None
    if dataclasses.is_dataclass(value):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    if attrs.has(type(value)):
        return {f.name: getattr(value, f.name) for f in attrs.fields(type(value))}
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return dict(zip(value._fields, value, strict=True))
    own = {k: v for k, v in vars(value).items() if not k.startswith("_")} if hasattr(value, "__dict__") else {}
    return own | {name: getattr(value, name) for names in STEP_KEYS.values() for name in names if hasattr(value, name)}


def _observation(value: Any, done: bool) -> list[Message]:
    """The environment's reply as messages: text is the user's turn.

    A finished episode's observation is never shown: anything but text or messages (the cookbook's
    empty token input) is then not read.
    """
    if value is None:
        return []
    if isinstance(value, str):
        return [{"role": "user", "content": value}] if value else []
    if isinstance(value, Mapping) and "role" in value:
        return [dict(value)]
    if isinstance(value, (list, tuple)) and all(isinstance(m, Mapping) and "role" in m for m in value):
        return [dict(m) for m in value]
    if done:
        return []
    raise TypeError(
        f"step()'s next observation is a {type(value).__name__}; give text (the user's next turn), a message "
        "({'role': ..., 'content': ...}) or a list of messages (minds renders them with the chat template; tokens are not taken)"
    )


@attrs.define
class Context:
    """What the trainer hands to every episode: the CURRENT policy and the service."""

    sampler: Any  #: a tinker SamplingClient of the policy that produces this rollout (sample, compute_logprobs)
    tokenizer: Any  #: the policy's tokenizer (a transformers tokenizer)
    service: Any  #: the tinker ServiceClient, e.g. to create shadow training clients
    renderer: Any  #: the chat template: prompt_tokens(messages), encode(text), decode(tokens), supports_tools
    base_model: str  #: the model being trained
    lora_rank: int = 8  #: the LoRA rank of the policy
    step: int = 0  #: the training step this rollout belongs to
    policy_checkpoint: str | None = None  #: a tinker:// state of the policy, when the env needs_policy_checkpoint


#: Where a sampled turn ends: the run's sampling settings (None), or token ids or strings (tinker-cookbook's StopCondition).
StopCondition = Sequence[int] | Sequence[str] | None


@attrs.frozen
class SampledTurn:
    """One sampled turn: its tokens, their log-probabilities, why it ended and its decoded text."""

    tokens: list[int]  #: the sampled token ids (trained on)
    logprobs: list[float]  #: the sampler's log-probability of each
    stop_reason: str  #: ``"stop"`` (a stop token or string) or ``"length"`` (its max_tokens)
    text: str  #: the tokens decoded, for display and text-reading code


class TokenBudgetExhausted(Exception):
    """The conversation reached max_total_tokens or max_turns; the episode ends truncated."""


@runtime_checkable
class Episode(Protocol):
    """One rollout, step by step. Methods may be sync or async; raising fails the rollout (counted).

    Optional members: ``tools`` (a list of JSON-schema tool specs the chat
    template renders; read once, right after ``initial_observation()``) and ``close()`` (sync
    or async, called when the rollout ends, also after a failure).
    """

    def initial_observation(self) -> str | list[Message]:
        """The prompt: a user's text or chat messages."""
        ...

    def step(self, action: str) -> StepResult:
        """:param action: the decoded text of the model's turn. Returns what it earned and whether the episode ended.

        A mapping or object with ``reward`` (and ``done``, ``messages``, ``metrics``) is read as a StepResult.
        """
        ...


class EpisodeConversation(Protocol):
    """The rollout's conversation, as a self-driving episode drives it.

    It holds the exact token sequence the trainer trains on: observations
    (never trained on) and sampled turns (trained on). The conversation enforces
    the run's max_total_tokens and max_turns.
    """

    tools: list[dict[str, Any]] | None  #: tool specs for the chat template; set before ``start``
    messages: list[Message]  #: every message so far (prompt, replies, observations); read only
    tokens: list[int]  #: the token sequence so far; read only
    logprobs: list[float]  #: per token, the sampler's log-probability (0 for observation tokens); read only
    turns: int  #: how many turns were sampled; read only
    last_stopped: bool  #: whether the last sampled turn ended on a stop token (not on its length limit); read only
    params: Any  #: the run's tinker SamplingParams (max_tokens, temperature, top_p, ...); read only
    record: Any  #: what the episode keeps of itself for its group's scoring (picklable: it travels from cluster workers)

    def start(self, messages: Sequence[Message]) -> None:
        """:param messages: the opening prompt, rendered with ``tools``; TokenBudgetExhausted when it cannot fit."""

    def observe(self, messages: Sequence[Message]) -> None:
        """:param messages: the environment's reply to the last turn (not empty); opens the next turn.

        Raises TokenBudgetExhausted (the episode ends truncated) when the reply cannot fit the budget left.
        """

    async def sample_turn(self) -> str:
        """Sample one assistant turn and return its text; raises TokenBudgetExhausted when out of budget."""
        ...

    # Token-level episodes (tinker-cookbook Envs) render their observations themselves:

    def start_tokens(self, tokens: Sequence[int]) -> None:
        """:param tokens: the opening prompt, already rendered; TokenBudgetExhausted when it cannot fit."""

    def observe_tokens(self, tokens: Sequence[int]) -> None:
        """:param tokens: the whole context of the next turn. When it extends the sequence so far only the
        new tokens are appended, else it starts a new sequence (trained as a datum of its own)."""

    async def sample_tokens(self, stop: StopCondition) -> SampledTurn:
        """Sample one turn after the current sequence, ending at ``stop``; TokenBudgetExhausted when out of budget."""
        ...


@runtime_checkable
class SelfDrivingEpisode(Protocol):
    """One rollout that drives its conversation itself (bridges to other frameworks).

    ``run`` may take turns with ``minds_core.take_turns`` (the core's turn
    loop) or any other way; the optional ``close()`` is as for ``Episode``.
    """

    async def run(self, conversation: EpisodeConversation) -> StepResult:
        """:param conversation: the rollout's conversation, empty. Returns the rollout's final result."""
        ...


@runtime_checkable
class Environment(Protocol):
    """A source of tasks and the episodes that score them.

    Optional members: ``rubric`` (a ``Rubric`` that ``env.rewards`` in a config
    may re-weight or extend), ``needs_policy_checkpoint`` (True: each rollout's
    ``ctx.policy_checkpoint`` is set) and ``close()`` (sync or async, at the end
    of the run).
    """

    def tasks(self, split: str) -> Sequence[Task]:
        """:param split: ``"train"``, or the held-out split evaluation uses (``"test"``)."""
        ...

    def episode(self, task: Task, ctx: Context) -> Episode | SelfDrivingEpisode:
        """:param task: one of ``tasks(split)``. :param ctx: the current policy and service for this rollout."""
        ...


@runtime_checkable
class GroupRewards(Protocol):
    """An environment whose rewards also depend on the whole group (tinker-cookbook's ``compute_group_rewards``).

    An optional member of an ``Environment``: once every rollout of a task has finished, the core calls
    ``group_rewards`` in the run's process (also under a cluster executor) with the conversations of
    the group's successful rollouts. Raising, or answering with the wrong number of entries, fails
    every rollout of the group (counted), as a group reward function's failure does.
    """

    async def group_rewards(self, task: Task, conversations: Sequence[EpisodeConversation]) -> Sequence[tuple[float, Mapping[str, float]]]:
        """:param task: the group's task. :param conversations: its successful rollouts', in order.

        Returns per conversation the reward added to its rollout's and metrics merged into its own.
        """
        ...


def environment_group_rewards(env: Environment) -> GroupRewards | None:
    """The environment when it scores groups (``GroupRewards``), else None."""
    return env if callable(getattr(env, "group_rewards", None)) else None  # type: ignore[return-value]


def episode_tools(episode: Episode) -> list[dict[str, Any]] | None:
    """The tool specs of a stepwise episode, or None."""
    return getattr(episode, "tools", None)


def environment_rubric(env: Environment) -> Rubric | None:
    """The environment's Rubric, or None when it has none."""
    rubric = getattr(env, "rubric", None)
    return rubric if isinstance(rubric, Rubric) else None


def needs_policy_checkpoint(env: Environment) -> bool:
    """Whether the environment's episodes need ``ctx.policy_checkpoint``."""
    return bool(getattr(env, "needs_policy_checkpoint", False))
