"""verifiers bridge: train on classic verifiers environments.

Registers the ``verifiers`` environment; ``[env.args] id`` names the verifiers
environment and ``[env.args] args`` its arguments. verifiers itself is imported
only when an environment is loaded, so ``minds plugins`` stays light.
"""

from __future__ import annotations

from typing import Any

from minds_core import hookimpl
from minds_core.hookspecs import Register


def load_environment(id: str, args: dict[str, Any] | None = None) -> Any:
    """``vf.load_environment(id, **args)``, adapted to the minds Environment protocol."""
    from minds_verifiers.environment import load_verifiers_environment

    return load_verifiers_environment(id, args or {})


@hookimpl
def minds_register_environments(register: Register) -> None:
    register("verifiers", load_environment, "a classic verifiers environment: args id = <vf env id>, args = {...}")
