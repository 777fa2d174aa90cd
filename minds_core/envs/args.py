"""An environment's ``[env.args]`` declared as an attrs class and checked the way the run config is.

An environment describes its arguments once, with the run config's vocabulary
(``minds_core.config.rules``: ``arg``, ``Rule``, ``at_least``, ``within``, ...)::

    @attrs.frozen
    class GhostTraceArgs:
        num_examples: int = arg(256, within(1, 1_000_000), doc="tasks per split")
        seed: int = arg(0, at_least(0), doc="seed of the word order")

and its loader takes ``**args`` and calls ``env_args(GhostTraceArgs, args, env="ghost_trace")``.
Values go through the run config's converter (the same types are accepted);
every problem is reported in one ConfigError naming ``env.args.KEY`` and what
it must be, with a did-you-mean for unknown keys and the accepted arguments.
Values of secret-named keys are never shown. ``--dry-run`` calls the loader
inside ``checking_args()``: ``env_args`` then stops it once the arguments pass.
"""

from __future__ import annotations

import contextlib
import contextvars
import re
import typing
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, TypeVar

import attrs

from minds_core.base.errors import ConfigError, did_you_mean
from minds_core.base.secrets import is_secret_key, shown_value
from minds_core.config.converter import CONVERTER
from minds_core.config.rules import Rule, field_rule, optional_of, problem, type_name

ArgsT = TypeVar("ArgsT")

#: What ``_build`` and ``_value`` return for data that makes no value (the problem is already recorded).
INVALID: Any = object()
#: What a problem says about a required argument that is not given.
REQUIRED = "required, not given"
#: The argument a problem is about: the first part of ``env.args.KEY...``.
_KEY = re.compile(r"env\.args\.([^.\s:=\[]+)")

class ArgsChecked(Exception):
    """Raised by ``env_args`` inside ``checking_args()`` once the arguments are valid: the loader stops there."""


_CHECKING: contextvars.ContextVar[bool] = contextvars.ContextVar("minds_checking_env_args", default=False)


@contextlib.contextmanager
def checking_args() -> Iterator[None]:
    """While open, ``env_args`` checks the arguments and then raises ArgsChecked (``--dry-run``: nothing is built)."""
    token = _CHECKING.set(True)
    try:
        yield
    finally:
        _CHECKING.reset(token)


def env_args(cls: type[ArgsT], args: Mapping[str, Any], env: str) -> ArgsT:
    """``args`` (an environment's [env.args]) as an instance of the attrs class ``cls``.

    Raises one ConfigError listing every problem: unknown keys (with a did-you-mean),
    missing required keys, values of the wrong type or breaking a field's rule, and
    whatever ``cls.problems(self)`` yields for checks across fields (each phrased
    "KEY = VALUE: ..."). The message ends with the accepted arguments.
    """
    problems: list[str] = []
    built = _build(cls, args, "", problems)
    if built is not INVALID and hasattr(built, "problems"):
        problems.extend(f"env.args.{p}" for p in built.problems())
    if problems:
        raise ConfigError(_message(cls, env, problems))
    if _CHECKING.get():
        raise ArgsChecked
    return built


def _build(cls: type, data: Mapping[str, Any], path: str, problems: list[str]) -> Any:
    """An instance of ``cls`` from ``data`` (problems appended), or INVALID when keys or types are wrong.

    A value that breaks only its field's rule still makes an instance, so checks across
    fields can run and every problem is reported at once.
    """
    fields = attrs.fields_dict(attrs.resolve_types(cls))
    complete = True
    for key in data:
        if key not in fields:
            valid = f"; valid keys here: {', '.join(fields)}" if path else ""
            problems.append(f"env.args.{path}{key}: unknown key{did_you_mean(str(key), fields)}{valid}")
            complete = False
    values = {}
    for name, field in fields.items():
        if name in data:
            values[name] = _value(field.type, data[name], f"{path}{name}", field_rule(field), problems)
            complete = complete and values[name] is not INVALID
        elif field.default is attrs.NOTHING:
            problems.append(f"env.args.{path}{name}: {REQUIRED}")
            complete = False
    if not complete:
        return INVALID
    with attrs.validators.disabled():  # rules were checked above, each problem reported once
        return cls(**values)


def _value(tp: Any, raw: Any, where: str, rule: Rule | None, problems: list[str]) -> Any:
    """``raw`` structured as ``tp`` and checked against ``rule`` (else a problem is appended)."""
    inner = optional_of(tp)
    if inner is not None:
        if raw is None:
            return None
        tp = inner
    shown = shown_value(where.rpartition(".")[2], raw)
    item = typing.get_args(tp)[1] if typing.get_origin(tp) is dict else None
    if attrs.has(tp) or (item is not None and attrs.has(item)):
        if not isinstance(raw, Mapping):
            problems.append(f"env.args.{where} = {shown}: must be a table")
            return INVALID
        if attrs.has(tp):
            return _build(tp, raw, f"{where}.", problems)
        table = {str(k): _build(item, {} if v is None else v, f"{where}.{k}.", problems) for k, v in raw.items()}
        return INVALID if INVALID in table.values() else table
    try:
        value = CONVERTER.structure(raw, tp)
    except Exception:  # noqa: BLE001 - the converter raises its own errors and exception groups
        requirement = rule.requirement(tp) if rule is not None else type_name(tp)
        problems.append(f"env.args.{where} = {shown}: must be {requirement}{_got(tp, raw, where, requirement)}")
        return INVALID
    if (wrong := problem(rule, value, tp)) is not None:
        problems.append(f"env.args.{where} = {shown}: {wrong}")
    return value


def _got(tp: Any, raw: Any, where: str, requirement: str) -> str:
    """`` (expected an integer, got str)`` when the requirement says more than the type (never for a secret)."""
    if is_secret_key(where.rpartition(".")[2]) or requirement == type_name(tp):
        return ""
    return f" (expected {type_name(tp)}, got {type(raw).__name__})"


def accepted_arguments(cls: type) -> str:
    """``accepted arguments: a (default 1), b; required: b``: the keys of ``cls`` (secret defaults not shown)."""
    fields = attrs.fields(attrs.resolve_types(cls))
    shown = [f.name if _required(f) or is_secret_key(f.name) else f"{f.name} (default {_default(f)!r})" for f in fields]
    text = f"accepted arguments: {', '.join(shown) or 'none'}"
    required = [f.name for f in fields if _required(f)]
    return text + (f"; required: {', '.join(required)}" if required else "")


def argument_docs(cls: type) -> Iterable[str]:
    """One ``NAME: what it means`` line per field of ``cls``."""
    for field in attrs.fields(cls):
        yield f"{field.name}: {field.metadata.get('doc', '')}".rstrip(": ")


def _required(field: attrs.Attribute) -> bool:
    return field.default is attrs.NOTHING


def _default(field: attrs.Attribute) -> Any:
    default = field.default
    return default.factory() if isinstance(default, attrs.Factory) else default


def _message(cls: type, env: str, problems: list[str]) -> str:
    """The problems under a header naming the keys at fault, then the accepted arguments.

    The meaning of every argument is added when a key is unknown or missing.
    """
    keys = sorted({_KEY.match(p).group(1) for p in problems})
    lines = [f"environment {env!r}: bad [env.args] {keys}:", *(f"  - {p}" for p in problems)]
    lines.append(f"  {accepted_arguments(cls)}")
    if any(": unknown key" in p or p.endswith(REQUIRED) for p in problems):
        lines.extend(f"    {line}" for line in argument_docs(cls))
    return "\n".join(lines)
