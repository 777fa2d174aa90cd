"""The one JSON shape of rollouts on disk: a run's ``rollouts.jsonl`` and its evaluations' ``eval/*.jsonl``.

Each line is one group (the rollouts of one task), made by ``group_record``:

- what the writer adds first: ``step`` (``rollouts.jsonl``: the step trained) or ``split`` (evaluations);
- ``env``, ``task`` (its id), ``answer`` (the task's reference answer, its repr when not JSON),
  ``dropped`` (why training left the group out: ``"failures"``, ``"constant"``, or null),
  ``prompt`` (the opening messages);
- ``rollouts``: one record per rollout, in order (an evaluation's samples), with
  ``completion`` (each sampled turn's text), ``messages`` (every message after the prompt:
  assistant turns with their ``stop_reason`` and sampled ``tokens``, tool results with role
  ``tool``), ``reward`` (null when the rollout failed), ``components`` (the rubric's parts),
  ``metrics`` (the other rollout metrics), ``advantage`` (null when not trained on),
  ``sampled_tokens``, ``truncated`` (a budget ended the episode), ``hit_max_tokens`` (its last
  turn was cut at max_tokens), ``error`` and ``timed_out``.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from minds_core.episodes.conversation import Conversation
from minds_core.episodes.groups import Group, Rollout

#: Rollout metrics under this prefix are the parts of a rubric's reward (see score_completion).
COMPONENT_PREFIX = "reward/"


def components(metrics: dict[str, float]) -> dict[str, float]:
    """The rubric's parts among a rollout's metrics, by name (without ``reward/``)."""
    return {k[len(COMPONENT_PREFIX) :]: v for k, v in metrics.items() if k.startswith(COMPONENT_PREFIX)}


def group_record(group: Group, **context: Any) -> dict[str, Any]:
    """One group as a JSON-ready line: ``context`` (e.g. ``step``, ``split``), the task, and every rollout."""
    first = next((r.conversation for r in group.rollouts if r.conversation.prompt), None)
    return {
        **context,
        "env": group.env_name,
        "task": group.task.id,
        "answer": _jsonable(group.task.answer),
        "dropped": group.dropped,
        "prompt": [_message(m) for m in first.prompt] if first else None,
        "rollouts": [rollout_record(r) for r in group.rollouts],
    }


def rollout_record(rollout: Rollout) -> dict[str, Any]:
    """One rollout as JSON-ready data (the fields are listed in the module's docstring)."""
    conv = rollout.conversation
    return {
        "completion": list(conv.replies),
        "messages": _turns(conv),
        "reward": rollout.reward if rollout.ok else None,
        "components": components(rollout.metrics),
        "metrics": {k: v for k, v in rollout.metrics.items() if not k.startswith(COMPONENT_PREFIX)},
        "advantage": rollout.advantage,
        "sampled_tokens": conv.sampled_tokens,
        "truncated": conv.truncated,
        "hit_max_tokens": conv.turns > 0 and not conv.last_stopped,
        "error": rollout.error,
        "timed_out": rollout.timed_out,
    }


def _turns(conv: Conversation) -> list[dict[str, Any]]:
    turn_tokens = Counter(t for t in conv.turn_ids if t >= 0)
    turn = 0
    turns = []
    for message in conv.messages[len(conv.prompt) :]:
        entry = _message(message)
        if message.get("role") == "assistant" and turn < len(conv.stop_reasons):
            entry["stop_reason"] = conv.stop_reasons[turn]
            entry["tokens"] = turn_tokens[turn]
            turn += 1
        turns.append(entry)
    return turns


def _message(message: Any) -> dict[str, Any]:
    """A chat message reduced to JSON: role, text content, and tool fields when present."""
    if not isinstance(message, dict):
        return {"role": "?", "content": str(message)}
    entry = {"role": str(message.get("role", "?")), "content": _text(message.get("content"))}
    for key in ("name", "tool_call_id", "tool_calls"):
        if message.get(key):
            entry[key] = json.loads(json.dumps(message[key], default=str))
    return entry


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: [{"type": "text", "text": ...}, ...]
        return "\n".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return "" if content is None else str(content)


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)
    return value
