"""Named choices the run config offers whose behaviour lives on the training floor above config.

The config owns the names (it checks them and documents them); ``training.lr_schedules`` and
``training.loss_aggregation`` implement each of them under the same name.
"""

from __future__ import annotations

#: trainer.lr_schedule: name -> what it does
LR_SCHEDULES = {
    "constant": "the base rate after warmup",
    "linear": "linear decay from the base rate towards lr_min_ratio * base",
    "cosine": "cosine decay from the base rate towards lr_min_ratio * base",
}

#: trainer.loss_aggregation: name -> how per-token terms combine
AGGREGATIONS = {
    "sum": "sum over every trained token (the service's built-in behaviour)",
    "token_mean": "mean over every trained token of the batch (DAPO)",
    "sequence_mean": "mean over tokens per sequence, then over sequences (GRPO, GSPO)",
    "fixed_length": "sum over tokens / sampling.max_tokens, mean over sequences (Dr. GRPO)",
}
