"""minds-plugin-openreward: train on any Open Reward Standard (OpenReward) environment.

Registers the ``openreward`` environment. Its loader takes the environment's
address (``name = "Org/Name"`` on the hosted service, or ``base_url`` for any ORS
server) and per-environment settings; see the README. Importing this module is
cheap: the OpenReward SDK loads when an environment is built.
"""

from __future__ import annotations

import os
from typing import Any

from minds_core import Register, hookimpl

#: The SDK asks PyPI for a newer version from a background thread; a training run makes no such calls.
UPDATE_CHECK_VARIABLE = "OPENREWARD_DISABLE_UPDATE_CHECK"


def load_openreward_environment(**args: Any) -> Any:
    """Build an ``openreward`` environment from its ``[env.args]``."""
    os.environ.setdefault(UPDATE_CHECK_VARIABLE, "1")
    from minds_openreward.environment import load_environment

    return load_environment(**args)


@hookimpl
def minds_register_environments(register: Register) -> None:
    register(
        "openreward",
        load_openreward_environment,
        "any OpenReward (ORS) environment, hosted (name = 'Org/Name') or at base_url: multi-turn tool use",
    )
