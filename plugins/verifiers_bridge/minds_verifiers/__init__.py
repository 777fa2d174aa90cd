"""verifiers bridge: train on classic verifiers environments.

Registers the ``verifiers`` environment; ``[env.args] id`` names the verifiers
environment and ``[env.args] args`` its arguments. Also adapts a
``verifiers.Environment`` that a folder or module environment's
``load_environment()`` returns. verifiers itself is imported only when an
environment is loaded, so ``minds plugins`` stays light.
"""

from __future__ import annotations

import importlib.metadata
import sys
from typing import Any

import attrs

from minds_core import ConfigError, Register, arg, env_args, hookimpl

#: The verifiers releases this bridge trains: the classic API (vf.Environment.rollout, rubric.score_rollout).
CLASSIC = ">=0.3,<0.4"


def verifiers_generation(version: str | None) -> str | None:
    """Why the classic bridge cannot run with verifiers ``version`` installed (None: it can).

    Read from the installed distribution's version, without importing verifiers.
    """
    from packaging.version import InvalidVersion, Version

    if version is None:
        return f"verifiers is not installed; the classic bridge needs verifiers{CLASSIC}: pip install 'verifiers{CLASSIC}'"
    try:
        parsed = Version(version)
    except InvalidVersion:
        return f"verifiers {version!r} is installed, a version the bridge cannot read; it needs verifiers{CLASSIC}"
    if parsed.release[:2] == (0, 3):
        return None
    generation = "an older, pre-0.3 API" if parsed < Version("0.3") else "the 0.4+ API, whose environments are not classic ones"
    return (
        f"verifiers {version} is installed ({generation}); the classic bridge (minds-plugin-verifiers) needs "
        f"verifiers{CLASSIC}: pip install 'verifiers{CLASSIC}' in this environment, or keep the newer verifiers in "
        "another environment, where the verifiers_v1 bridge (plugins/verifiers_v1) trains its environments"
    )


def installed_verifiers() -> str | None:
    """The installed verifiers version, or None."""
    try:
        return importlib.metadata.version("verifiers")
    except importlib.metadata.PackageNotFoundError:
        return None


def _require_classic_verifiers(env_id: str) -> None:
    problem = verifiers_generation(installed_verifiers())
    if problem is not None:
        raise ConfigError(f"verifiers environment {env_id!r}: {problem}")


@attrs.frozen
class VerifiersArgs:
    """The ``[env.args]`` of the verifiers environment."""

    id: str = arg(doc="the verifiers environment id (an installed verifiers environment package)")
    args: dict[str, Any] = arg({}, doc="keyword arguments of that environment's load_environment()")


def load_environment(**args: Any) -> Any:
    """``vf.load_environment(id, **args)``, adapted to the minds Environment protocol (arguments: VerifiersArgs)."""
    from minds_verifiers.environment import load_verifiers_environment

    chosen = env_args(VerifiersArgs, args, env="verifiers")
    _require_classic_verifiers(chosen.id)
    return load_verifiers_environment(chosen.id, chosen.args)


def adapt(obj: Any, env_id: str) -> Any:
    """A ``verifiers.Environment`` returned by a loose ``load_environment()`` trains through the bridge."""
    if "verifiers" not in sys.modules:  # whatever made obj a verifiers environment imported verifiers
        return None
    if not any(c.__module__.split(".")[0] == "verifiers" for c in type(obj).__mro__):
        return None
    _require_classic_verifiers(env_id)
    from minds_verifiers.environment import adapt

    return adapt(obj, env_id)


@hookimpl
def minds_register_environments(register: Register) -> None:
    register("verifiers", load_environment, "a classic verifiers environment: args id = <vf env id>, args = {...}")


@hookimpl
def minds_register_environment_adapters(register: Register) -> None:
    register("verifiers", adapt, "verifiers.Environment objects returned by a folder or module environment")
