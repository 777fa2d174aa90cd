"""RL training as a pipeline: rollout -> group rewards -> data processing -> advantages/KL -> datums -> train (``loop``)."""
