"""The ``[env.args]`` of an ``openreward`` environment: schema, validation, secrets."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from typing import Any

import attrs

from minds_core import ConfigError, Rule, arg, at_least, env_args, one_of

REDUCTIONS = ("sum", "mean", "max", "min")
TOOL_FORMATS = ("auto", "prompt")
DEFAULT_KEY_ENV = "OPENREWARD_API_KEY"
ENV_REFERENCE = re.compile(r"^\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?$")
#: ``${VAR:-}``: the variable's value when it is set; otherwise the secret is not sent (the recipe's ``null``).
OPTIONAL_REFERENCE = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*):-\}$")


@attrs.frozen
class SplitSettings:
    """How the tasks of one split are drawn: shuffled (by ``seed``) and/or cut to ``num_samples``."""

    shuffle: bool = arg(False, doc="shuffle the split's tasks (by the environment's seed)")
    num_samples: int | None = arg(
        None, Rule("{type} >= 1, or null for all tasks", lambda v: v >= 1), doc="tasks kept (null: all)"
    )


@attrs.frozen
class BridgeSettings:
    """Everything one ``openreward`` environment entry configures (the README's table says more)."""

    name: str = arg(
        rule=Rule("a name, e.g. 'Org/Name' (hosted) or 'myenv' (with base_url)", lambda v: bool(v.strip())),
        doc="'Org/Name' on OpenReward, or the environment's name on your own ORS server",
    )
    base_url: str = arg(
        "",
        Rule("a URL starting with http:// or https:// (or empty)", lambda v: not v or v.startswith(("http://", "https://"))),
        doc="an ORS server; empty = the hosted service",
    )
    variant: str = arg("", doc="an ORS variant")
    api_key_env: str = arg("", doc="the variable holding the key sent to the server (hosted: OPENREWARD_API_KEY)")
    splits: dict[str, SplitSettings] = arg({}, doc="per split: { shuffle = false, num_samples = <all> }")
    seed: int = arg(0, doc="the shuffle seed")
    reward_reduction: str = arg("sum", one_of(*REDUCTIONS), doc="how the tool rewards of a rollout are reduced")
    nonterminal_reward: float | None = arg(None, doc="added to the rewards of an episode that did not finish")
    min_reward: float | None = arg(None, doc="lower clamp on the reduced reward")
    max_reward: float | None = arg(None, doc="upper clamp on the reduced reward")
    secrets: dict[str, str] = arg({}, doc="sent to the environment: variable names, or a table name = value / '$VAR'")
    tool_format: str = arg("auto", one_of(*TOOL_FORMATS), doc="auto: tools in the chat template; prompt: in the prompt")
    max_sessions: int = arg(0, at_least(0), doc="a cap on open sessions (0: rollout.concurrency is the cap)")
    capacity_retries: int = arg(30, at_least(0), doc="HTTP 429 refusals in a row before the rollout fails")
    capacity_backoff: float = arg(0.5, doc="seconds before the first retry after a 429 (doubles, up to 30 s)")
    upload_run_name: str = arg("", doc="upload each finished rollout under this run name (empty: off)")
    upload_api_key_env: str = arg("", doc="the variable holding the key for uploads; only with upload_run_name")

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

    def problems(self) -> Iterator[str]:
        """What is wrong across keys (env_args reports it with the rest)."""
        if self.hosted and self.name.strip() and "/" not in self.name:
            yield f"name = {self.name!r}: a hosted environment is named 'Org/Name' (your own ORS server: set base_url)"
        if self.min_reward is not None and self.max_reward is not None and self.min_reward > self.max_reward:
            yield f"min_reward = {self.min_reward} is above max_reward = {self.max_reward}"
        if self.upload_api_key_env and not self.upload_run_name:
            yield f"upload_api_key_env = {self.upload_api_key_env!r}: only used with upload_run_name, which is not set"


def _secrets_table(value: Any) -> Any:
    """A list of variable names as the table ``name -> "$name"``; anything else as given."""
    return {str(name): f"${name}" for name in value} if isinstance(value, list) else value


def parse_settings(args: Mapping[str, Any]) -> BridgeSettings:
    """Validate the loader's keyword arguments; every problem is reported in one ConfigError."""
    data = dict(args)
    if "secrets" in data:
        data["secrets"] = _secrets_table(data["secrets"])
    return env_args(BridgeSettings, data, env="openreward")


def resolve_secrets(secrets: Mapping[str, str]) -> dict[str, str]:
    """Secret values, with ``$VAR`` / ``${VAR}`` read from the environment (a missing variable is an error)
    and ``${VAR:-}`` read when set (left out otherwise)."""
    resolved = {}
    for name, value in secrets.items():
        optional = OPTIONAL_REFERENCE.match(value)
        if optional:
            if optional.group(1) in os.environ:
                resolved[name] = os.environ[optional.group(1)]
            continue
        match = ENV_REFERENCE.match(value)
        if match:
            variable = match.group(1)
            if variable not in os.environ:
                raise ConfigError(f"secrets.{name}: environment variable {variable} is not set")
            value = os.environ[variable]
        resolved[name] = value
    return resolved
