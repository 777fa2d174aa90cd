"""Where a run's time went, read from its ``trace.json``: the slowest episodes and reward calls, with their tasks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from minds_core.tracing import read_trace

#: rows of each "slowest" table
SLOWEST = 10


def slowest(path: Path, count: int = SLOWEST) -> dict[str, list[dict[str, Any]]]:
    """``{"episodes": [...], "rewards": [...]}``: the ``count`` longest episode spans and reward-function (or judge)
    spans of the trace at ``path``, longest first, each ``{name, seconds, environment, task, step, error}``.
    Empty lists when there is no readable trace (tracing off, or the file is not a trace)."""
    try:
        events = [e for e in read_trace(path) if isinstance(e, dict) and e.get("ph") == "X"]
    except (OSError, ValueError, json.JSONDecodeError):
        return {"episodes": [], "rewards": []}
    by_id = {e["args"].get("span_id"): e for e in events if isinstance(e.get("args"), dict)}

    def ancestor(event: dict[str, Any], name: str) -> dict[str, Any]:
        seen = 0
        while event is not None and event.get("name") != name and seen < 64:
            event, seen = by_id.get(event.get("args", {}).get("parent_id")), seen + 1
        return event.get("args", {}) if event is not None else {}

    def row(event: dict[str, Any]) -> dict[str, Any]:
        episode = ancestor(event, "episode")
        return {
            "name": event["name"],
            "seconds": float(event.get("dur", 0)) / 1e6,
            "environment": episode.get("environment", ""),
            "task": episode.get("task", ""),
            "step": ancestor(event, "step").get("step", ""),
            "error": event.get("args", {}).get("error") or "",
        }

    episodes = [e for e in by_id.values() if e.get("name") == "episode"]
    rewards = [e for e in by_id.values() if str(e.get("name", "")).endswith(" reward") or e.get("name") == "judge"]
    longest = lambda spans: [row(e) for e in sorted(spans, key=lambda e: -float(e.get("dur", 0)))[:count]]
    return {"episodes": longest(episodes), "rewards": longest(rewards)}
