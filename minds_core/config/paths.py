"""Dotted paths (``trainer.group_size``, ``envs[0].args.api_key``) into raw config data: nested dicts and lists."""

from __future__ import annotations

import re
from typing import Any

#: ``name[0][1]``: a key followed by list indexes.
_INDEXED = re.compile(r"(?P<name>[^\[\]]+)(?P<indexes>(?:\[\d+\])+)")


def split_key(key: str) -> list[str | int]:
    """The parts of a dotted key, list indexes as numbers: ``envs[0].args.api_key`` -> envs, 0, args, api_key."""
    parts: list[str | int] = []
    for word in key.split("."):
        indexed = _INDEXED.fullmatch(word)
        if indexed is None:
            parts.append(word)
        else:
            parts.append(indexed["name"])
            parts.extend(int(index) for index in re.findall(r"\d+", indexed["indexes"]))
    return parts


def get_path(data: Any, parts: list[str | int]) -> Any:
    """The value at ``parts`` below ``data``; None when any level is missing or not a dict (a list, for an index)."""
    for part in parts:
        if isinstance(part, int):
            data = data[part] if isinstance(data, list) and part < len(data) else None
        else:
            data = data.get(part) if isinstance(data, dict) else None
    return data


def set_path(data: dict[str, Any], parts: list[str | int], value: Any) -> None:
    """Set the value at ``parts`` below ``data`` in place, making (or replacing non-dict) levels on the way.

    An index names an entry of a list that exists: an IndexError says which is missing.
    """
    node: Any = data
    for depth, part in enumerate(parts):
        last = depth == len(parts) - 1
        if isinstance(part, int):
            if not isinstance(node, list) or part >= len(node):
                held = f"holds {len(node)} entries" if isinstance(node, list) else "is not a list"
                raise IndexError(f"no entry [{part}]: {shown_key(parts[:depth])} {held}")
            if last:
                node[part] = value
            elif not isinstance(node[part], dict):
                node[part] = {}
            node = node[part]
        elif last:
            node[part] = value
        else:
            child = node.get(part)
            if not isinstance(child, (dict, list)) or (isinstance(child, list) and not isinstance(parts[depth + 1], int)):
                child = {}
                node[part] = child
            node = child


def shown_key(parts: list[str | int]) -> str:
    """Parts as a dotted key again: envs, 0, args -> ``envs[0].args``."""
    return "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in parts).lstrip(".")
