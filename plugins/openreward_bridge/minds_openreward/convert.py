"""``minds-openreward-convert``: the seed's ``tinker-config.yaml`` as a minds config.

    minds-openreward-convert tinker-config.yaml -o minds.toml
    minds run minds.toml
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from minds_core import ConfigError, MindsError, RunConfig, did_you_mean
from minds_openreward.settings import ENV_REFERENCE, OPTIONAL_REFERENCE

#: Seed key -> dotted minds key, for values copied as they are.
TOP_LEVEL = {
    "model_name": "model.base_model",
    "lora_rank": "model.lora_rank",
    "resume_from": "trainer.resume_from",
    "max_response_tokens": "sampling.max_tokens",
    "max_total_tokens": "rollout.max_total_tokens",
    "max_rollout_retries": "rollout.retries",
    "loss_fn": "trainer.loss_fn",
    "loss_fn_config": "trainer.loss_fn_config",
    "batch_size": "trainer.groups_per_batch",
    "learning_rate": "trainer.learning_rate",
    "weight_decay": "trainer.weight_decay",
    "save_every": "trainer.save_every",
    "rollout_timeout": "rollout.timeout",
    "seed": "seed",
    "log_path": "runs_dir",
    "wandb_project_name": "metrics.wandb_project",
    "wandb_run_name": "metrics.wandb_run_name",
}
#: Seed keys handled by their own rule below.
SPECIAL = (
    "advantage_calculation", "num_epochs", "max_active_tasks", "max_rollout_concurrency",
    "openreward_run_name", "thinking", "environments", "secrets",
)  # fmt: skip
#: The variable the recipe reads its own ORS server's URL from (its ``openreward_environments_url`` setting).
ENVIRONMENTS_URL_VARIABLE = "OPENREWARD_ENVIRONMENTS_URL"
#: The recipe's concurrency when neither max_rollout_concurrency nor max_active_tasks is set.
RECIPE_MAX_ACTIVE_TASKS = 32
_VARIABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: Keys whose values are numbers even when YAML 1.1 reads them as strings ("1e-5").
NUMBERS = {"learning_rate", "weight_decay", "rollout_timeout", "temperature", "top_p", "nonterminal_reward", "min_reward", "max_reward"}
ADVANTAGES = {"direct": "direct", "centered": "group_mean", "centered_normalized": "group_norm"}
#: Per-environment seed keys that are minds [[envs]] settings (the rest go to the bridge's args).
ENV_SETTINGS = {"num_rollouts": "group_size", "max_failing_rollouts": "max_failing_rollouts", "temperature": "temperature", "top_p": "top_p"}


@attrs.define
class Conversion:
    """The minds config (plain data) and what the user should know about it."""

    config: dict[str, Any]
    notes: list[str] = attrs.field(factory=list)


def _number(key: str, value: Any) -> Any:
    """``value`` as a float when ``key`` holds a number written as a string; anything else unchanged."""
    if key in NUMBERS and isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            raise ConfigError(f"{key} = {value!r}: expected a number") from None
    return value


def _set(data: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    for part in parents:
        data = data.setdefault(part, {})
    data[leaf] = value


def _bridge_keys() -> list[str]:
    from minds_openreward.settings import BridgeSettings

    return [f.name for f in attrs.fields(BridgeSettings) if f.name != "name"]


def _secret_table(value: Any, where: str) -> dict[str, Any]:
    """A recipe ``secrets`` value (a mapping name -> value / null, or a list of names) as a mapping."""
    if value is None:
        return {}
    if isinstance(value, list):
        return {str(name): None for name in value}
    if isinstance(value, Mapping):
        return {str(k): v for k, v in value.items()}
    raise ConfigError(f"{where}: expected a mapping of name: value (null = from the environment), got {type(value).__name__}")


def _secrets(top: Any, own: Any, env: str, notes: list[str]) -> dict[str, str]:
    """The secrets one environment receives, as variable references: never a value.

    As the recipe merges them: the top-level ``secrets`` go to every environment,
    the environment's own override them, ``null`` means "from the variable of
    that name, when it is set" (the recipe reads it case-insensitively:
    ``openai_api_key`` is OPENAI_API_KEY, and sends nothing when it is unset):
    ``${VARIABLE:-}``; ``""`` removes a top-level secret for this environment.
    A value written in the file is not copied: the reference (``$VARIABLE``,
    required) names the variable to export it in.
    """
    merged = _secret_table(top, "secrets")
    for key, value in _secret_table(own, f"environments.{env}.secrets").items():
        merged[key] = value
    out = {}
    for key, value in merged.items():
        if value == "":
            continue
        if isinstance(value, str) and (ENV_REFERENCE.match(value) or OPTIONAL_REFERENCE.match(value)):
            out[key] = value
            continue
        variable = key.upper()
        if not _VARIABLE.match(variable):
            raise ConfigError(f"secrets.{key}: not a usable environment variable name; write {key}: \"$VARIABLE\"")
        if value is None:
            out[key] = f"${{{variable}:-}}"
            continue
        notes.append(
            f"{env}: secrets.{key} is written as a value in the source file; it is not copied into the "
            f"minds config: export {variable}=<the value> before `minds run`"
        )
        out[key] = f"${variable}"
    return out


def _environment(name: str, table: Mapping[str, Any], seed: Any, notes: list[str]) -> tuple[dict[str, Any], list[str]]:
    """One ``environments:`` entry as a minds [[envs]] table (secrets aside); returns it and its unknown keys."""
    entry: dict[str, Any] = {"id": "openreward"}
    args: dict[str, Any] = {"name": name}
    if seed is not None:
        args["seed"] = seed
    bridge = _bridge_keys()
    unknown = []
    for key, value in table.items():
        value = _number(key, value)
        if key in ENV_SETTINGS:
            entry[ENV_SETTINGS[key]] = value
        elif key == "splits":
            splits = {split: {k: v for k, v in (settings or {}).items() if v is not None} for split, settings in (value or {}).items()}
            args["splits"] = splits
            if splits:
                entry["split"] = "train" if "train" in splits else next(iter(splits))
                if len(splits) > 1:
                    others = ", ".join(s for s in splits if s != entry["split"])
                    notes.append(f"{name}: trains on split {entry['split']!r}; the other splits ({others}) stay in args.splits for `minds eval`")
        elif key in bridge and key != "secrets":
            args[key] = value
        elif key != "secrets":
            unknown.append(f"environments.{name}.{key}{did_you_mean(key, [*ENV_SETTINGS, 'splits', *bridge])}")
    entry["args"] = {k: v for k, v in args.items() if v is not None}
    return entry, unknown


def _concurrency(seed: Mapping[str, Any], envs: list[dict[str, Any]], notes: list[str]) -> int:
    """Rollouts in flight: the recipe's limit (max_rollout_concurrency, else max_active_tasks), at most one batch."""
    defaults = RunConfig().trainer
    batch = seed.get("batch_size") or defaults.groups_per_batch
    widest = max(e.get("group_size", defaults.group_size) for e in envs)
    need = batch * widest
    limit = seed.get("max_rollout_concurrency") or seed.get("max_active_tasks") or RECIPE_MAX_ACTIVE_TASKS
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise ConfigError(f"max_rollout_concurrency / max_active_tasks = {limit!r}: expected a positive integer")
    concurrency = min(limit, need)
    notes.append(f"rollout.concurrency = {concurrency}: the recipe's limit {limit}, at most one batch ({batch} groups x {widest} rollouts)")
    return concurrency


def _steps(seed: Mapping[str, Any], envs: list[dict[str, Any]], steps: int | None, notes: list[str]) -> int | None:
    """trainer.steps: --steps, else num_epochs over the known task counts, else None (minds' default)."""
    if steps is not None:
        return steps
    epochs = seed.get("num_epochs")
    if epochs is None:
        notes.append("no num_epochs and no --steps: trainer.steps keeps the minds default")
        return None
    counts = [e["args"].get("splits", {}).get(e.get("split", "train"), {}).get("num_samples") for e in envs]
    if any(c is None for c in counts):
        raise ConfigError(
            f"num_epochs = {epochs} needs the number of tasks per epoch, which is not in the file "
            "(some environment has no splits.<split>.num_samples): pass --steps N"
        )
    batch = seed.get("batch_size") or 1
    total = math.ceil(epochs * sum(counts) / batch)
    notes.append(f"num_epochs = {epochs}: {sum(counts)} tasks / batch_size {batch} -> trainer.steps = {total}")
    return total


def convert(
    seed: Mapping[str, Any], steps: int | None = None, ignore_unknown: bool = False, environments_url: str | None = None
) -> Conversion:
    """Map every key of a seed config; unknown keys are an error unless ``ignore_unknown``.

    ``environments_url`` is the recipe's ``OPENREWARD_ENVIRONMENTS_URL``: the ORS server
    every environment is served by (your own, e.g. ``http://127.0.0.1:8080``); it becomes
    each environment's ``base_url``. None or empty: the hosted OpenReward service.
    """
    config: dict[str, Any] = {"backend": "tinker"}
    notes: list[str] = []
    unknown = []
    for key, value in seed.items():
        if key in TOP_LEVEL:
            if value is not None:
                _set(config, TOP_LEVEL[key], _number(key, value))
        elif key not in SPECIAL:
            unknown.append(f"{key}{did_you_mean(key, [*TOP_LEVEL, *SPECIAL])}")
    if seed.get("wandb_project_name"):
        config.setdefault("metrics", {})["sinks"] = [*RunConfig().metrics.sinks, "wandb"]
    if seed.get("wandb_run_name"):
        config["name"] = seed["wandb_run_name"]
    if "advantage_calculation" in seed:
        mode = seed["advantage_calculation"]
        if mode not in ADVANTAGES:
            raise ConfigError(f"advantage_calculation = {mode!r}: expected one of {', '.join(ADVANTAGES)}")
        _set(config, "trainer.advantage", ADVANTAGES[mode])
    if seed.get("thinking") is not None:
        _set(config, "model.chat_template_args", {"enable_thinking": bool(seed["thinking"])})
        notes.append(
            f"thinking = {seed['thinking']}: model.chat_template_args.enable_thinking (for chat templates "
            "that read it, such as Qwen3's; <think> sections are never parsed for tool calls)"
        )
    environments = seed.get("environments") or {}
    if not isinstance(environments, Mapping) or not environments:
        raise ConfigError("environments: expected a table of 'Org/Name: {settings}' with at least one environment")
    envs = []
    variables: set[str] = set()
    for name, table in environments.items():
        table = table or {}
        entry, bad = _environment(str(name), table, seed.get("seed"), notes)
        secrets = _secrets(seed.get("secrets"), table.get("secrets"), str(name), notes)
        if secrets:
            entry["args"]["secrets"] = secrets
            variables.update((ENV_REFERENCE.match(ref) or OPTIONAL_REFERENCE.match(ref)).group(1) for ref in secrets.values())
        if seed.get("openreward_run_name"):
            entry["args"]["upload_run_name"] = seed["openreward_run_name"]
        if environments_url:
            entry["args"]["base_url"] = environments_url
        envs.append(entry)
        unknown.extend(bad)
    config["envs"] = envs
    if environments_url:
        notes.append(f"every environment is served by {environments_url} (OPENREWARD_ENVIRONMENTS_URL): args.base_url")
    if variables:
        notes.append(
            f"secrets are read from the environment when the run starts ({', '.join(sorted(variables))}); "
            "one the recipe leaves as null is sent only when its variable is set"
        )
    _set(config, "rollout.max_turns", 0)
    notes.append("the recipe has no turn limit: rollout.max_turns = 0 (an episode ends at its terminal state or max_total_tokens)")
    _set(config, "rollout.concurrency", _concurrency(seed, envs, notes))
    if seed.get("openreward_run_name"):
        notes.append(f"openreward_run_name: trajectories upload to OpenReward as run {seed['openreward_run_name']!r}")
    total = _steps(seed, envs, steps, notes)
    if total is not None:
        _set(config, "trainer.steps", total)
    if unknown and not ignore_unknown:
        raise ConfigError("unknown keys in the seed config (--ignore-unknown to drop them):\n" + "\n".join(f"  - {u}" for u in unknown))
    notes.extend(f"ignored unknown key {u}" for u in unknown)
    _check(config)
    return Conversion(config, notes)


def _check(config: dict[str, Any]) -> None:
    """The result must be a config minds accepts, with valid bridge args."""
    from minds_core import build_config
    from minds_openreward.settings import parse_settings

    build_config(config, source="converted config")
    for entry in config["envs"]:
        parse_settings(entry["args"])


def render(config: Mapping[str, Any], fmt: str) -> str:
    """The config as TOML or YAML text."""
    if fmt == "toml":
        import tomli_w

        return tomli_w.dumps(dict(config))
    import yaml

    return yaml.safe_dump(dict(config), sort_keys=False)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``minds-openreward-convert``; returns the exit code."""
    parser = argparse.ArgumentParser(
        prog="minds-openreward-convert",
        description="Convert the OpenReward/Tinker seed's tinker-config.yaml into a minds config for `minds run`.",
    )
    parser.add_argument("source", help="the seed's YAML config (tinker-config.yaml)")
    parser.add_argument("-o", "--output", help="write here (.toml, .yaml or .yml); default: TOML on stdout")
    parser.add_argument("--steps", type=int, help="training steps (needed when num_epochs cannot be turned into steps)")
    parser.add_argument("--ignore-unknown", action="store_true", help="drop unknown keys instead of failing")
    parser.add_argument(
        "--environments-url",
        default=os.environ.get(ENVIRONMENTS_URL_VARIABLE) or None,
        help=f"your own ORS server serving the environments (as the recipe's ${ENVIRONMENTS_URL_VARIABLE}, "
        "the default); unset: the hosted OpenReward service",
    )
    args = parser.parse_args(argv)
    from minds_core import read_config_file

    try:
        conversion = convert(read_config_file(args.source), args.steps, args.ignore_unknown, args.environments_url)
        fmt = "toml" if not args.output or Path(args.output).suffix == ".toml" else "yaml"
        if args.output and Path(args.output).suffix not in (".toml", ".yaml", ".yml"):
            raise ConfigError(f"--output {args.output}: use a .toml, .yaml or .yml file name")
        text = render(conversion.config, fmt)
    except MindsError as exc:
        print(f"minds-openreward-convert: error: {exc}", file=sys.stderr)
        return exc.exit_code
    header = f"# Converted from {args.source} by minds-openreward-convert.\n"
    if args.output:
        Path(args.output).write_text(header + text, encoding="utf-8")
    else:
        sys.stdout.write(header + text)
    for note in conversion.notes:
        print(f"note: {note}", file=sys.stderr)
    if args.output:
        print(f"wrote {args.output}; run it with: minds run {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
