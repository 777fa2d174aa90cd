"""Evaluation of a policy on an environment's tasks (evaluation, with pass@k and intervals from estimators) and
chat with a checkpoint (chat); ``minds eval`` and the RL loop's ``trainer.eval_every`` both use it."""
