"""Dotted paths (``trainer.group_size``) into raw config data: nested dicts."""

from __future__ import annotations

from typing import Any


def get_path(data: Any, parts: list[str]) -> Any:
    """The value at ``parts`` below ``data``; None when any level is missing or not a dict."""
    for part in parts:
        data = data.get(part) if isinstance(data, dict) else None
    return data


def set_path(data: dict[str, Any], parts: list[str], value: Any) -> None:
    """Set the value at ``parts`` below ``data`` in place, making (or replacing non-dict) levels on the way."""
    node = data
    for part in parts[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = {}
            node[part] = child
        node = child
    node[parts[-1]] = value
