"""The one vocabulary that checks settings: the run config's fields and an environment's ``[env.args]``.

A field is declared with ``arg(default, rule, doc=...)``; a ``Rule`` says what a
value must be ("an integer in [1, 4096]") and whether a value is so. The
config's loader and ``env_args`` both report a broken rule with ``problem``:
``KEY = VALUE: must be ...``.
"""

from __future__ import annotations

import math
import types
import typing
from collections.abc import Callable, Collection
from typing import Any

import attrs

from minds_core.base.secrets import shown_value

#: How a value of each plain type is named in "must be ..." messages.
TYPE_NAMES: dict[Any, str] = {int: "an integer", float: "a finite number", str: "a string", bool: "true or false"}


@attrs.frozen
class Rule:
    """A condition on one value, also usable as an attrs validator.

    ``says`` completes "must be ..."; ``{type}`` in it stands for the name of the
    field's type ("an integer", "a finite number", ...). ``holds`` is asked only
    about values of the right type, never about None. ``detail``, when given, adds
    what is wrong with a particular failing value (e.g. which part of a path is a file).
    """

    says: str
    holds: Callable[[Any], bool]
    detail: Callable[[Any], str] | None = None

    def requirement(self, tp: Any) -> str:
        """What a value of type ``tp`` must be, e.g. "an integer >= 1"."""
        return self.says.format(type=type_name(tp))

    def __call__(self, instance: Any, attribute: attrs.Attribute, value: Any) -> None:
        tp = attrs.fields_dict(attrs.resolve_types(type(instance)))[attribute.name].type
        if (wrong := problem(self, value, tp)) is not None:
            raise ValueError(f"{attribute.name} = {shown_value(attribute.name, value)}: {wrong}")


def problem(rule: Rule | None, value: Any, tp: Any) -> str | None:
    """What is wrong with ``value`` (already of type ``tp``): ``must be ...``, or None. A float must be finite."""
    if value is None:
        return None
    requirement = rule.requirement(tp) if rule is not None else type_name(tp)
    if isinstance(value, float) and not math.isfinite(value) or rule is not None and not rule.holds(value):
        detail = rule.detail(value) if rule is not None and rule.detail is not None else ""
        return f"must be {requirement}" + (f": {detail}" if detail else "")
    return None


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def at_least(low: float) -> Rule:
    """A finite number >= ``low``."""
    return Rule(f"{{type}} >= {low}", lambda v: _finite(v) and v >= low)


def above(low: float) -> Rule:
    """A finite number > ``low``."""
    return Rule(f"{{type}} > {low}", lambda v: _finite(v) and v > low)


def within(low: float, high: float, *, low_open: bool = False, high_open: bool = False) -> Rule:
    """A finite number from ``low`` to ``high``, both included unless said open: "in [0, 1)"."""
    shown = f"{'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
    return Rule(
        f"{{type}} in {shown}",
        lambda v: _finite(v) and (low < v if low_open else low <= v) and (v < high if high_open else v <= high),
    )


def one_of(*options: Any) -> Rule:
    """One of ``options``."""
    return Rule(f"one of {', '.join(map(str, options))}", lambda v: v in options)


def non_empty_subset_of(options: Collection[Any]) -> Rule:
    """A non-empty list whose every item is one of ``options``."""
    return Rule(f"a non-empty list drawn from {list(options)}", lambda v: bool(v) and all(x in options for x in v))


def each_value(rule: Rule, item: type = float) -> Rule:
    """A table whose every value (of type ``item``) keeps ``rule``; the failing key is named."""

    def first_failing(table: dict[Any, Any]) -> str:
        key, value = next((k, v) for k, v in table.items() if problem(rule, v, item) is not None)
        return f"{key} = {shown_value(str(key), value)}"

    return Rule(
        f"a table whose every value is {rule.requirement(item)}",
        lambda table: all(problem(rule, v, item) is None for v in table.values()),
        first_failing,
    )


def arg(default: Any = attrs.NOTHING, rule: Rule | None = None, *, doc: str) -> Any:
    """A field of a settings class: its default (none: the value is required), its rule, what it means.

    A list or dict default is copied for every instance.
    """
    metadata = {"doc": doc, "rule": rule}
    if isinstance(default, (list, dict)):
        return attrs.field(factory=lambda: type(default)(default), validator=rule, metadata=metadata)
    return attrs.field(default=default, validator=rule, metadata=metadata)


def field_rule(field: attrs.Attribute) -> Rule | None:
    """The rule ``arg`` gave ``field`` (None for a field declared otherwise)."""
    rule = field.metadata.get("rule")
    return rule if isinstance(rule, Rule) else None


def type_name(tp: Any) -> str:
    """How values of ``tp`` are named in messages: "an integer", "a list", ..."""
    tp = optional_of(tp) or tp
    origin = typing.get_origin(tp)
    if origin is list or tp is list:
        return "a list"
    if origin is dict or tp is dict or attrs.has(tp):
        return "a table"
    return TYPE_NAMES.get(tp, f"a {getattr(tp, '__name__', tp)}")


def optional_of(tp: Any) -> Any:
    """``X`` for ``X | None``, else None."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        rest = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(rest) == 1 and len(typing.get_args(tp)) == 2:
            return rest[0]
    return None
