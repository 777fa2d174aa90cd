"""Where a run's time went, read from its ``trace.json``: the slowest episodes and reward calls, with their tasks."""

from __future__ import annotations

import bisect
import json
from pathlib import Path
from typing import Any

#: rows of each "slowest" table
SLOWEST = 10
#: the lines of a trace worth parsing here (the trace file writes one event per line): steps, episodes, rewards, judges
_WANTED = ('"name":"step"', '"name":"episode"', ' reward"', '"name":"judge"')


def slowest(path: Path, count: int = SLOWEST) -> dict[str, list[dict[str, Any]]]:
    """``{"episodes": [...], "rewards": [...]}``: the ``count`` longest episode spans and reward-function (or judge)
    spans of the trace at ``path``, longest first, each ``{name, seconds, environment, task, step, error}``.

    Only the lines that can be such spans are parsed (a long run's trace is large); a reward's episode is the one
    whose track it lies on, an episode's step the one it began in. Empty lists when there is no readable trace."""
    steps, episodes, rewards = [], {}, []
    try:
        with path.open(encoding="utf-8") as lines:
            for line in lines:
                if not any(wanted in line for wanted in _WANTED):
                    continue
                try:
                    event = json.loads(line.rstrip().rstrip(","))
                except ValueError:  # a line cut off by kill -9
                    continue
                if not isinstance(event, dict) or event.get("ph") != "X" or not isinstance(event.get("args"), dict):
                    continue
                if event["name"] == "step":
                    steps.append((event["ts"], event["ts"] + event["dur"], event["args"].get("step", "")))
                elif event["name"] == "episode":
                    episodes[event["tid"]] = event
                else:
                    rewards.append(event)
    except OSError:
        return {"episodes": [], "rewards": []}
    steps.sort()
    starts = [start for start, _, _ in steps]

    def step_of(ts: float) -> Any:
        index = bisect.bisect_right(starts, ts) - 1
        return steps[index][2] if index >= 0 and ts <= steps[index][1] else ""

    def row(event: dict[str, Any], episode: dict[str, Any] | None) -> dict[str, Any]:
        args = (episode or {}).get("args", {})
        return {
            "name": event["name"],
            "seconds": float(event.get("dur", 0)) / 1e6,
            "environment": args.get("environment", ""),
            "task": args.get("task", ""),
            "step": step_of(float((episode or event)["ts"])),
            "error": event["args"].get("error") or "",
        }

    longest = lambda events: sorted(events, key=lambda e: -float(e.get("dur", 0)))[:count]
    return {
        "episodes": [row(e, e) for e in longest(episodes.values())],
        "rewards": [row(e, episodes.get(e.get("tid"))) for e in longest(rewards)],
    }
