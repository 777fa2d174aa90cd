"""The ``[env.args]`` of an ``openreward`` environment: schema, validation, secrets."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from typing import Any

import attrs
import cattrs

from minds_core import ConfigError, did_you_mean

REDUCTIONS = ("sum", "mean", "max", "min")
TOOL_FORMATS = ("auto", "prompt")
DEFAULT_KEY_ENV = "OPENREWARD_API_KEY"
ENV_REFERENCE = re.compile(r"^\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?$")


@attrs.frozen
class SplitSettings:
    """How the tasks of one split are drawn: shuffled (by ``seed``) and/or cut to ``num_samples``."""

    shuffle: bool = False
    num_samples: int | None = None


@attrs.frozen
class BridgeSettings:
    """Everything one ``openreward`` environment entry configures (see the README for each key)."""

    name: str
    base_url: str = ""
    variant: str = ""
    api_key_env: str = ""
    splits: dict[str, SplitSettings] = attrs.field(factory=dict)
    seed: int = 0
    reward_reduction: str = "sum"
    nonterminal_reward: float | None = None
    min_reward: float | None = None
    max_reward: float | None = None
    secrets: dict[str, str] = attrs.field(factory=dict)
    tool_format: str = "auto"
    max_sessions: int = 0
    capacity_retries: int = 30
    capacity_backoff: float = 0.5
    upload_run_name: str = ""
    upload_api_key_env: str = ""

    @property
    def hosted(self) -> bool:
        """True when the environment lives on the hosted OpenReward service (no base_url)."""
        return not self.base_url

    @property
    def key_env(self) -> str:
        """The variable holding the API key sent to the server ('' = send none)."""
        return self.api_key_env or (DEFAULT_KEY_ENV if self.hosted else "")

    @property
    def upload_key_env(self) -> str:
        """The variable holding the key sent with trajectory uploads (to the hosted service).

        ``upload_api_key_env`` when set; else the hosted environment's own key variable
        (the same service); never a ``base_url`` server's key: OPENREWARD_API_KEY then.
        """
        return self.upload_api_key_env or (self.key_env if self.hosted else DEFAULT_KEY_ENV)

    def split(self, name: str) -> SplitSettings:
        return self.splits.get(name, SplitSettings())


def _problems(settings: BridgeSettings) -> list[str]:
    problems = []
    if not settings.name.strip():
        problems.append("name: must name the environment, e.g. 'Org/Name' (hosted) or 'myenv' (with base_url)")
    if settings.hosted and "/" not in settings.name:
        problems.append(f"name = {settings.name!r}: a hosted environment is named 'Org/Name'; for your own ORS server set base_url")
    if settings.base_url and not settings.base_url.startswith(("http://", "https://")):
        problems.append(f"base_url = {settings.base_url!r}: must start with http:// or https://")
    if settings.reward_reduction not in REDUCTIONS:
        problems.append(f"reward_reduction = {settings.reward_reduction!r}: must be one of {', '.join(REDUCTIONS)}")
    if settings.tool_format not in TOOL_FORMATS:
        problems.append(f"tool_format = {settings.tool_format!r}: must be one of {', '.join(TOOL_FORMATS)}")
    for key in ("nonterminal_reward", "min_reward", "max_reward", "capacity_backoff"):
        value = getattr(settings, key)
        if value is not None and not math.isfinite(value):
            problems.append(f"{key} = {value!r}: must be a finite number")
    if settings.min_reward is not None and settings.max_reward is not None and settings.min_reward > settings.max_reward:
        problems.append(f"min_reward = {settings.min_reward} is above max_reward = {settings.max_reward}")
    for key in ("max_sessions", "capacity_retries"):
        if getattr(settings, key) < 0:
            problems.append(f"{key} = {getattr(settings, key)}: must be >= 0")
    if settings.upload_api_key_env and not settings.upload_run_name:
        problems.append(f"upload_api_key_env = {settings.upload_api_key_env!r}: only used with upload_run_name, which is not set")
    for split, chosen in settings.splits.items():
        if chosen.num_samples is not None and chosen.num_samples < 1:
            problems.append(f"splits.{split}.num_samples = {chosen.num_samples}: must be >= 1 (or null for all tasks)")
    return problems


def _converter() -> cattrs.Converter:
    converter = cattrs.Converter(forbid_extra_keys=True)

    def strict(kind: type, label: str) -> None:
        def structure(value: Any, _type: Any) -> Any:
            if isinstance(value, bool) and kind is not bool or not isinstance(value, kind):
                if kind is float and isinstance(value, int) and not isinstance(value, bool):
                    return float(value)
                raise ValueError(f"expected {label}, got {value!r}")
            return value

        converter.register_structure_hook(kind, structure)

    strict(str, "a string")
    strict(int, "an integer")
    strict(float, "a number")
    strict(bool, "true or false")
    return converter


_CONVERTER = _converter()


def _secrets_table(value: Any) -> dict[str, str]:
    """A list of variable names, or a mapping name -> value / "$VAR" (read from the environment)."""
    if isinstance(value, list):
        return {str(name): f"${name}" for name in value}
    if isinstance(value, Mapping):
        return {str(k): v for k, v in value.items()}
    raise ConfigError(f"secrets: expected a list of variable names or a table name = value, got {type(value).__name__}")


def parse_settings(args: Mapping[str, Any]) -> BridgeSettings:
    """Validate the loader's keyword arguments; every problem is reported in one ConfigError."""
    data = dict(args)
    if "secrets" in data:
        data["secrets"] = _secrets_table(data["secrets"])
    if isinstance(data.get("splits"), Mapping):
        data["splits"] = {name: ({} if value is None else value) for name, value in data["splits"].items()}
    known = [f.name for f in attrs.fields(BridgeSettings)]
    unknown = [f"{key}: unknown key{did_you_mean(key, known)}" for key in data if key not in known]
    if "name" not in data:
        unknown.append("name: required (the environment, e.g. 'Org/Name')")
    if unknown:
        raise _error(unknown, known)
    try:
        settings = _CONVERTER.structure(data, BridgeSettings)
    except Exception as exc:  # noqa: BLE001 - cattrs raises exception groups
        raise _error(_structure_problems(exc), known) from None
    problems = _problems(settings)
    if problems:
        raise _error(problems, known)
    return settings


def _structure_problems(exc: BaseException) -> list[str]:
    def describe(error: BaseException, type_: Any) -> str:
        if isinstance(error, cattrs.ForbiddenExtraKeysError):
            return f"unknown keys {sorted(error.extra_fields)}"
        return str(error) if isinstance(error, ValueError) else cattrs.v.format_exception(error, type_)

    problems = []
    for message in cattrs.transform_error(exc, path="args", format_exception=describe):
        text, _, where = message.rpartition(" @ ")
        problems.append(f"{where.removeprefix('args.')}: {text}")
    return problems


def _error(problems: list[str], known: list[str]) -> ConfigError:
    lines = "\n".join(f"  - {p}" for p in problems)
    return ConfigError(f"invalid openreward environment args:\n{lines}\n  (valid keys: {', '.join(known)})")


def resolve_secrets(secrets: Mapping[str, str]) -> dict[str, str]:
    """Secret values, with ``$VAR`` / ``${VAR}`` read from the environment; a missing variable is an error."""
    resolved = {}
    for name, value in secrets.items():
        match = ENV_REFERENCE.match(value)
        if match:
            variable = match.group(1)
            if variable not in os.environ:
                raise ConfigError(f"secrets.{name}: environment variable {variable} is not set")
            value = os.environ[variable]
        resolved[name] = value
    return resolved
