"""self_prediction: answer arithmetic questions and state a calibrated confidence.

Registers the ``self_prediction`` environment and its reward parts
``self_prediction.format``, ``self_prediction.accuracy`` and ``self_prediction.calibration``.
"""

from __future__ import annotations

from minds_core import Register, hookimpl
from minds_self_prediction.environment import REWARDS, load_environment


@hookimpl
def minds_register_environments(register: Register) -> None:
    register("self_prediction", load_environment, "arithmetic with FINAL ANSWER and a calibrated CONFIDENCE")


@hookimpl
def minds_register_reward_functions(register: Register) -> None:
    for name, fn, _weight in REWARDS:
        register(name, fn, (fn.__doc__ or "").strip().splitlines()[0])
