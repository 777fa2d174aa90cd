"""minds plugin: environments where the policy predicts its own learning.

- ``gradient_prophet``: how a lesson in the context moves the policy's log-probabilities;
- ``gradient_intuition``: what one training step on its own answer does to a trivia probe;
- ``entropy_intuition``: how spread out its own choice of a number is.
"""

from __future__ import annotations

from minds_core import Register, hookimpl
from minds_gradient_prophet.entropy import ENTROPY_REWARD, entropy_reward, load_entropy_intuition
from minds_gradient_prophet.intuition import PREDICTION_REWARD, load_gradient_intuition, prediction_reward
from minds_gradient_prophet.prophet import in_context_reward, load_gradient_prophet, surprise_reward


@hookimpl
def minds_register_environments(register: Register) -> None:
    register(
        "gradient_prophet",
        load_gradient_prophet,
        "predict how a lesson in the context shifts your own log-probs (in_context Δ, surprise ranking)",
    )
    register(
        "gradient_intuition",
        load_gradient_intuition,
        "solve an inner task and predict how one training step on your answer moves a trivia probe",
    )
    register("entropy_intuition", load_entropy_intuition, "pick a number and state the entropy of your own choice")


@hookimpl
def minds_register_reward_functions(register: Register) -> None:
    register("gradient_prophet.in_context", in_context_reward, "closeness of predicted to measured log-prob shifts")
    register("gradient_prophet.surprise", surprise_reward, "Spearman of the predicted vs measured KL ranking")
    register(PREDICTION_REWARD, prediction_reward, "closeness of the predicted to the measured one-step Δ")
    register(ENTROPY_REWARD, entropy_reward, "closeness of the stated to the measured normalized entropy")
