"""An environment's ``[env.args]`` declared as an attrs class and checked the way the run config is.

An environment describes its arguments once::

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
import math
import re
import types
import typing
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from typing import Any, TypeVar

import attrs

from minds_core.config.converter import CONVERTER
from minds_core.config.secrets import is_secret_key, shown_value
from minds_core.errors import ConfigError, did_you_mean

ArgsT = TypeVar("ArgsT")

#: What ``_build`` and ``_value`` return for data that makes no value (the problem is already recorded).
INVALID: Any = object()
#: What a problem says about a required argument that is not given.
REQUIRED = "required, not given"
#: The argument a problem is about: the first part of ``env.args.KEY...``.
_KEY = re.compile(r"env\.args\.([^.\s:=\[]+)")

#: How a value of each plain type is named in "must be ..." messages.
TYPE_NAMES: dict[Any, str] = {int: "an integer", float: "a finite number", str: "a string", bool: "true or false"}


@attrs.frozen
class Rule:
    """A condition on one argument's value, also usable as an attrs validator.

    ``says`` completes "must be ..."; ``{type}`` in it stands for the name of the
    field's type ("an integer", "a finite number", ...). ``holds`` is asked only
    about values of the right type, never about None.
    """

    says: str
    holds: Callable[[Any], bool]

    def requirement(self, tp: Any) -> str:
        """What a value of type ``tp`` must be, e.g. "an integer >= 1"."""
        return self.says.format(type=type_name(tp))

    def __call__(self, instance: Any, attribute: attrs.Attribute, value: Any) -> None:
        if value is not None and not self.holds(value):
            tp = attrs.fields_dict(attrs.resolve_types(type(instance)))[attribute.name].type
            raise ValueError(f"{attribute.name} = {shown_value(attribute.name, value)}: must be {self.requirement(tp)}")


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def at_least(low: float) -> Rule:
    """A finite number >= ``low``."""
    return Rule(f"{{type}} >= {low}", lambda v: _finite(v) and v >= low)


def above(low: float) -> Rule:
    """A finite number > ``low``."""
    return Rule(f"{{type}} > {low}", lambda v: _finite(v) and v > low)


def within(low: float, high: float) -> Rule:
    """A finite number in ``low..high`` (both included)."""
    return Rule(f"{{type}} in {low}..{high}", lambda v: _finite(v) and low <= v <= high)


def one_of(*options: Any) -> Rule:
    """One of ``options``."""
    return Rule(f"one of {', '.join(map(str, options))}", lambda v: v in options)


def non_empty_subset_of(options: Collection[Any]) -> Rule:
    """A non-empty list whose every item is one of ``options``."""
    return Rule(f"a non-empty list drawn from {list(options)}", lambda v: bool(v) and all(x in options for x in v))


def arg(default: Any = attrs.NOTHING, rule: Rule | None = None, *, doc: str) -> Any:
    """A field of an arguments class: its default (none: the argument is required), its rule, what it means.

    A list or dict default is copied for every instance.
    """
    metadata = {"doc": doc}
    if isinstance(default, (list, dict)):
        return attrs.field(factory=lambda: type(default)(default), validator=rule, metadata=metadata)
    return attrs.field(default=default, validator=rule, metadata=metadata)


def type_name(tp: Any) -> str:
    """How values of ``tp`` are named in messages: "an integer", "a list", ..."""
    tp = _optional_of(tp) or tp
    origin = typing.get_origin(tp)
    if origin is list or tp is list:
        return "a list"
    if origin is dict or tp is dict or attrs.has(tp):
        return "a table"
    return TYPE_NAMES.get(tp, f"a {getattr(tp, '__name__', tp)}")


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
            values[name] = _value(field.type, data[name], f"{path}{name}", field.validator, problems)
            complete = complete and values[name] is not INVALID
        elif field.default is attrs.NOTHING:
            problems.append(f"env.args.{path}{name}: {REQUIRED}")
            complete = False
    if not complete:
        return INVALID
    with attrs.validators.disabled():  # rules were checked above, each problem reported once
        return cls(**values)


def _value(tp: Any, raw: Any, where: str, rule: Any, problems: list[str]) -> Any:
    """``raw`` structured as ``tp`` and checked against ``rule`` (else a problem is appended)."""
    inner = _optional_of(tp)
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
    requirement = rule.requirement(tp) if isinstance(rule, Rule) else type_name(tp)
    try:
        value = CONVERTER.structure(raw, tp)
    except Exception:  # noqa: BLE001 - the converter raises its own errors and exception groups
        problems.append(f"env.args.{where} = {shown}: must be {requirement}{_got(tp, raw, where, requirement)}")
        return INVALID
    if isinstance(value, float) and not math.isfinite(value) or isinstance(rule, Rule) and not rule.holds(value):
        problems.append(f"env.args.{where} = {shown}: must be {requirement}")
    return value


def _got(tp: Any, raw: Any, where: str, requirement: str) -> str:
    """`` (expected an integer, got str)`` when the requirement says more than the type (never for a secret)."""
    if is_secret_key(where.rpartition(".")[2]) or requirement == type_name(tp):
        return ""
    return f" (expected {type_name(tp)}, got {type(raw).__name__})"


def _optional_of(tp: Any) -> Any:
    """``X`` for ``X | None``, else None."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        rest = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(rest) == 1 and len(typing.get_args(tp)) == 2:
            return rest[0]
    return None


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
