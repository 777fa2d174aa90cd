"""The config's cattrs converter: strict types (no bool as int, no number as string), errors with their paths.

``CONVERTER`` structures raw data into the schema's attrs classes and back
(``to_dict``); ``structure_errors`` turns what it raises into one line per
problem, ``<dotted.path>: <what was expected>``, never showing a secret's value.
"""

from __future__ import annotations

import re
import typing
from collections.abc import Callable, Mapping
from typing import Any

import cattrs
from cattrs.errors import IterableValidationError, IterableValidationNote

from minds_core.base.secrets import HIDDEN, is_secret_key
from minds_core.config.schema import RunConfig


def _strict(accept: Callable[[Any], Any], label: str) -> Callable[[Any, Any], Any]:
    def structure(value: Any, _type: Any) -> Any:
        try:
            result = accept(value)
        except (TypeError, ValueError, OverflowError):  # OverflowError: an integer too big for a float
            result = None
        if result is None:
            raise ConfigValueError(f"expected {label}, got {value!r}")
        return result

    return structure


class ConfigValueError(ValueError):
    """A value of the wrong type; the message already says what was expected."""


def _as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def _as_float(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):  # YAML 1.1 reads 1e-4 as a string
        return float(value)
    return None


def _make_converter() -> cattrs.Converter:
    converter = cattrs.Converter(forbid_extra_keys=True)
    converter.register_structure_hook(int, _strict(_as_int, "an integer"))
    converter.register_structure_hook(float, _strict(_as_float, "a number"))
    converter.register_structure_hook(bool, _strict(lambda v: v if isinstance(v, bool) else None, "true or false"))
    converter.register_structure_hook(str, _strict(lambda v: v if isinstance(v, str) else None, "a string"))

    def structure_list(value: Any, tp: Any) -> list[Any]:
        if not isinstance(value, list):
            raise ConfigValueError(f"expected a list, got {value!r}")
        (item,) = typing.get_args(tp) or (Any,)
        out, errors = [], []
        for index, element in enumerate(value):
            try:
                out.append(converter.structure(element, item))
            except Exception as exc:  # noqa: BLE001 - collected with their index
                exc.__notes__ = [*getattr(exc, "__notes__", []), IterableValidationNote(f"@ index {index}", index, item)]
                errors.append(exc)
        if errors:
            raise IterableValidationError(f"While structuring {tp}", errors, tp)
        return out

    def structure_dict(value: Any, tp: Any) -> dict[str, Any]:
        if not isinstance(value, Mapping):
            raise ConfigValueError(f"expected a table/mapping, got {value!r}")
        _, item = typing.get_args(tp) or (str, Any)
        return {str(k): converter.structure(v, item) for k, v in value.items()}

    converter.register_structure_hook_func(lambda tp: typing.get_origin(tp) is list, structure_list)
    converter.register_structure_hook_func(lambda tp: typing.get_origin(tp) is dict, structure_dict)
    return converter


CONVERTER = _make_converter()


def structure_errors(exc: BaseException) -> list[str]:
    def describe(error: BaseException, _type: Any) -> str:
        if isinstance(error, ConfigValueError):
            return str(error)
        if isinstance(error, cattrs.ForbiddenExtraKeysError):
            return f"unknown keys {sorted(error.extra_fields)}"
        if isinstance(error, KeyError):
            return "required key is missing"
        return f"invalid value ({error})"

    messages = cattrs.transform_error(exc, path="$", format_exception=describe)
    out = []
    for message in messages:
        text, _, where = message.rpartition(" @ ")
        where = where.removeprefix("$.").removeprefix("$")
        if is_secret_key(re.sub(r"\[\d+\]$", "", where).rpartition(".")[2]):
            expected = text.partition(", got ")[0] if text.startswith("expected ") else "invalid value"
            text = f"{expected} ({HIDDEN})"
        out.append(f"{where}: {text}")
    return out


def to_dict(config: RunConfig) -> dict[str, Any]:
    """The config as plain data (secrets included: redact before showing or writing)."""
    return CONVERTER.unstructure(config)
