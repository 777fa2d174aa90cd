"""verifiers bridge: train on classic verifiers environments.

Registers the ``verifiers`` environment; ``[env.args] id`` names the verifiers
environment and ``[env.args] args`` its arguments. Also adapts a
``verifiers.Environment`` that a folder or module environment's
``load_environment()`` returns. verifiers itself is imported only when an
environment is loaded, so ``minds plugins`` stays light.
"""

from __future__ import annotations

import sys
from typing import Any

import attrs

from minds_core import Register, arg, env_args, hookimpl


@attrs.frozen
class VerifiersArgs:
    """The ``[env.args]`` of the verifiers environment."""

    id: str = arg(doc="the verifiers environment id (an installed verifiers environment package)")
    args: dict[str, Any] = arg({}, doc="keyword arguments of that environment's load_environment()")


def load_environment(**args: Any) -> Any:
    """``vf.load_environment(id, **args)``, adapted to the minds Environment protocol (arguments: VerifiersArgs)."""
    from minds_verifiers.environment import load_verifiers_environment

    chosen = env_args(VerifiersArgs, args, env="verifiers")
    return load_verifiers_environment(chosen.id, chosen.args)


def adapt(obj: Any, env_id: str) -> Any:
    """A ``verifiers.Environment`` returned by a loose ``load_environment()`` trains through the bridge."""
    if "verifiers" not in sys.modules:  # whatever made obj a verifiers environment imported verifiers
        return None
    from minds_verifiers.environment import adapt

    return adapt(obj, env_id)


@hookimpl
def minds_register_environments(register: Register) -> None:
    register("verifiers", load_environment, "a classic verifiers environment: args id = <vf env id>, args = {...}")


@hookimpl
def minds_register_environment_adapters(register: Register) -> None:
    register("verifiers", adapt, "verifiers.Environment objects returned by a folder or module environment")
