"""From raw data to a validated ``RunConfig``: a config file, ``--set`` overrides, presets, every problem at once."""

from __future__ import annotations

import typing
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs

from minds_core.base.errors import ConfigError, did_you_mean, utf8_problem
from minds_core.base.masking import seal
from minds_core.base.secrets import partly_redacted, shown_value, without_redacted
from minds_core.config.converter import CONVERTER, structure_errors
from minds_core.config.files import read_config_file
from minds_core.config.harness import apply_harness_keys
from minds_core.config.overrides import apply_override
from minds_core.config.paths import get_path, split_key
from minds_core.config.presets import apply_preset
from minds_core.config.rules import field_rule, problem
from minds_core.config.schema import MAX_ROLLOUTS_PER_STEP, RunConfig, schema_fields, unwrap_optional


def build_config(data: Mapping[str, Any], source: str = "config") -> RunConfig:
    """Validate a raw mapping into a RunConfig; all problems are reported together. Its secret values are masked from now on."""
    seal(data)  # before validation: no message shows a secret either
    data = apply_preset(apply_harness_keys(dict(data), source))
    problems = list(_not_utf8(data, ""))  # no file a run writes could hold such text
    problems += _unknown_keys(data, RunConfig, "")
    if not problems:
        try:
            with attrs.validators.disabled():  # the rules are checked below, every problem reported at once
                config = CONVERTER.structure(data, RunConfig)
        except Exception as exc:  # noqa: BLE001 - cattrs raises exception groups
            problems = structure_errors(exc)
        else:
            problems = list(_checks(config, ""))
            if config.env is not None and config.envs:
                problems.append(
                    "env and envs are both set: [env] (also what --env NAME sets) is the one environment of a run, "
                    "[[envs]] the list of several; put every environment in [[envs]] (the [env] table as one more "
                    "entry, with its weight) or drop [[envs]]"
                )
            elif (config.env is not None or config.envs) and not config.environments:
                problems.append("every environment has weight 0 (switched off): give at least one a weight > 0")
            problems.extend(_across_keys(config))
    if problems:
        raise ConfigError(f"invalid configuration ({source}):\n" + "\n".join(f"  - {p}" for p in problems))
    return config


def _not_utf8(value: Any, key: str) -> Iterator[str]:
    """Every key or string below ``value`` that is not UTF-8 text, named by its dotted key (never its value)."""
    if isinstance(value, str):
        if wrong := utf8_problem(value):
            yield f"{key}: {wrong}"
    elif isinstance(value, Mapping):
        for name, item in value.items():
            if isinstance(name, str) and (wrong := utf8_problem(name)):
                yield f"{key or 'the top level'}: a key is {wrong}"
            else:
                yield from _not_utf8(item, f"{key}.{name}" if key else str(name))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _not_utf8(item, f"{key}[{index}]")


def load_config(path: str | Path | None = None, overrides: Iterable[str] = (), drop_redacted: bool = False) -> RunConfig:
    """Read an optional config file, apply ``--set`` overrides, and validate.

    ``drop_redacted`` forgets values written as *** (a saved run's config), so
    secrets come from the environment again (or ``--set``); a URL whose password
    was saved as *** must be given again whole: a ConfigError names it.
    """
    data = read_config_file(path) if path else {}
    assignments = list(overrides)
    if drop_redacted:
        dropped: list[str] = []
        saved, data = data, without_redacted(data, "", dropped)
        given = tuple(assignment.partition("=")[0].strip() for assignment in assignments)
        missing = [key for key in dropped if not any(key == g or key.startswith((f"{g}.", f"{g}[")) for g in given)]
        if lost := [key for key in missing if partly_redacted(get_path(saved, split_key(key)))]:
            raise ConfigError(
                f"{path}: {', '.join(lost)}: the password (or secret parameter) of this URL is not saved with a run; "
                "pass the whole value again: --set KEY=VALUE"
            )
        if missing:
            from minds_core.base.logs import get_logger

            get_logger("config").warning(
                "secrets are not saved with a run; pass them again (--set KEY=...) or through the environment",
                keys=missing,
            )
    data = apply_harness_keys(data, str(path) if path else "config")
    for assignment in assignments:
        apply_override(data, assignment)
    # where the values came from: a problem of an override is not the file's
    return build_config(data, source=" and ".join([str(path) if path else "defaults", *(["--set"] if assignments else [])]))


def _across_keys(config: RunConfig) -> Iterable[str]:
    """Limits on settings taken together: the rollouts of one step, and of one evaluation."""
    trainer = config.trainer
    group = max([e.group_size or trainer.group_size for e in config.environments] or [trainer.group_size])
    if group * trainer.groups_per_batch > MAX_ROLLOUTS_PER_STEP:
        yield (
            f"trainer.groups_per_batch x group size = {trainer.groups_per_batch} x {group}: "
            f"at most {MAX_ROLLOUTS_PER_STEP} rollouts per step; lower trainer.groups_per_batch or trainer.group_size"
        )
    if trainer.eval_tasks * trainer.eval_samples > MAX_ROLLOUTS_PER_STEP:
        yield (
            f"trainer.eval_tasks x trainer.eval_samples = {trainer.eval_tasks} x {trainer.eval_samples}: "
            f"at most {MAX_ROLLOUTS_PER_STEP} rollouts per evaluation; lower one of them"
        )


def _unknown_keys(data: Mapping[str, Any], cls: type, path: str) -> Iterable[str]:
    fields = schema_fields(cls)
    for key, value in data.items():
        where = f"{path}{key}"
        if key not in fields:
            yield f"{where}: unknown key{did_you_mean(str(key), fields)}; valid keys here: {', '.join(fields)}"
            continue
        tp = unwrap_optional(fields[key].type)
        if attrs.has(tp) and isinstance(value, Mapping):
            yield from _unknown_keys(value, tp, f"{where}.")
        elif typing.get_origin(tp) is list and isinstance(value, list):
            (item,) = typing.get_args(tp)
            if attrs.has(item):
                for i, element in enumerate(value):
                    if isinstance(element, Mapping):
                        yield from _unknown_keys(element, item, f"{where}[{i}].")


def _checks(obj: Any, path: str) -> Iterable[str]:
    for field in attrs.fields(attrs.resolve_types(type(obj))):
        value = getattr(obj, field.name)
        where = f"{path}{field.name}"
        if (wrong := problem(field_rule(field), value, field.type)) is not None:
            yield f"{where} = {shown_value(field.name, value)}: {wrong}"
        if attrs.has(type(value)):
            yield from _checks(value, f"{where}.")
        elif isinstance(value, list):
            for i, element in enumerate(value):
                if attrs.has(type(element)):
                    yield from _checks(element, f"{where}[{i}].")
