"""Calling an environment loader with its ``[env.args]``: checked against the loader's signature, and given a way to
build another environment when it asks for one (``open_environment``)."""

from __future__ import annotations

import inspect
from typing import Any

from minds_core.base.errors import ConfigError
from minds_core.base.secrets import is_secret_key
from minds_core.contract.parts import OpenEnvironment

#: The loader parameter through which an environment receives a way to build another (``OpenEnvironment``).
OPEN_ENVIRONMENT = "open_environment"


def call_loader(label: str, loader: Any, args: dict[str, Any], open_environment: OpenEnvironment | None = None) -> Any:
    """Call an environment loader with [env.args]; a signature mismatch is a ConfigError listing the accepted arguments.

    A loader declaring an ``open_environment`` parameter receives ``open_environment`` through it.
    """
    return loader(**bound_args(label, loader, args, open_environment))


def bound_args(label: str, loader: Any, args: dict[str, Any], open_environment: OpenEnvironment | None) -> dict[str, Any]:
    """The keyword arguments to call ``loader`` with, checked against its signature (when it has one)."""
    if OPEN_ENVIRONMENT in args:
        raise ConfigError(f"environment {label}: env.args.{OPEN_ENVIRONMENT} is reserved (minds passes it to the loader)")
    try:
        signature = inspect.signature(loader)
    except (TypeError, ValueError):  # no signature (builtins): let the call decide
        return args
    given = args
    if open_environment is not None and OPEN_ENVIRONMENT in signature.parameters:
        args = {**args, OPEN_ENVIRONMENT: open_environment}
    try:
        signature.bind(**args)
    except TypeError as exc:
        raise ConfigError(f"environment {label}: bad [env.args] {sorted(given)}: {exc}; {_accepted(signature)}") from None
    return args


def _accepted(signature: inspect.Signature) -> str:
    """The keyword arguments a loader takes, with defaults, as a message fragment."""
    params = [
        p
        for p in signature.parameters.values()
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != OPEN_ENVIRONMENT
    ]
    shown = [p.name if p.default is p.empty or is_secret_key(p.name) else f"{p.name} (default {p.default!r})" for p in params]
    required = [p.name for p in params if p.default is p.empty]
    text = f"accepted arguments: {', '.join(shown) or 'none'}"
    if required:
        text += f"; required: {', '.join(required)}"
    if any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values()):
        text += "; any other keyword is passed on"
    return text
