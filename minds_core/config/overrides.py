"""``--set KEY=VALUE`` overrides: the value parsed to the type of the schema's field at KEY."""

from __future__ import annotations

import typing
from typing import Any

import attrs
import yaml

from minds_core.base.errors import ConfigError, did_you_mean
from minds_core.base.secrets import shown_value
from minds_core.config.files import check_size, parse_yaml
from minds_core.config.harness import NO_EFFECT, RENAMED, warn_no_effect
from minds_core.config.paths import set_path, shown_key, split_key
from minds_core.config.schema import RunConfig, schema_fields, unwrap_optional


def _parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "1", "yes", "on"):
        return True
    if lowered in ("false", "0", "no", "off"):
        return False
    raise ValueError(text)


def _parse_for_type(tp: Any, text: str) -> Any:
    tp = unwrap_optional(tp)
    if tp is bool:
        return _parse_bool(text)
    if tp is int:
        return int(text)
    if tp is float:
        return float(text)
    if tp is str:
        return text
    return parse_yaml(text)  # lists, dicts and free-form values


def _type_at(key: str, parts: list[str | int]) -> Any:
    """The schema type at a dotted path (``envs[0]``: an entry of a list field); free-form (Any) inside dict fields."""
    cls: Any = RunConfig
    for depth, part in enumerate(parts):
        cls = unwrap_optional(cls)
        if isinstance(part, int) and typing.get_origin(cls) is list:
            (cls,) = typing.get_args(cls)
            continue
        if isinstance(part, int) and attrs.has(cls):
            raise ConfigError(f"--set {key}: {shown_key(parts[:depth])} is a table, not a list: it has no entry [{part}]")
        if not attrs.has(cls):
            return Any  # inside a free-form table such as env.args
        fields = schema_fields(cls)
        if part not in fields:
            where = shown_key(parts[: depth + 1])
            raise ConfigError(f"--set {where}: unknown key{did_you_mean(str(part), fields)}; valid keys here: {', '.join(fields)}")
        cls = fields[str(part)].type
    return cls


def apply_override(data: dict[str, Any], assignment: str) -> None:
    """Apply one ``a.b=value`` override, parsing the value to the field's type."""
    key, sep, text = assignment.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"--set {assignment!r}: expected KEY=VALUE, e.g. --set trainer.group_size=8")
    if key in NO_EFFECT:
        warn_no_effect([(key, text, NO_EFFECT[key])], "--set")
        return
    key = RENAMED.get(key, key)
    parts = split_key(key)
    tp = _type_at(key, parts)
    try:
        value = _parse_for_type(tp, text)
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or exc
        raise ConfigError(f"--set {key}={shown_value(str(parts[-1]), text)}: invalid YAML: {problem}") from None
    except (ValueError, RecursionError):
        name = getattr(unwrap_optional(tp), "__name__", str(tp))
        raise ConfigError(f"--set {key}={shown_value(str(parts[-1]), text)}: expected a value of type {name}") from None
    check_size(value, f"--set {key}")
    if parts[0] == "env" and not isinstance(data.get("env"), dict):
        data["env"] = {}
    try:
        set_path(data, parts, value)
    except IndexError as exc:
        raise ConfigError(f"--set {key}: {exc}; the config's lists are counted from [0]") from None
