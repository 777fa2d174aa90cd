"""The training floor RL (``rl/``) and supervised training (``sft/``) both stand on: datums, how per-token terms
combine (loss_aggregation), learning-rate schedules, the order data is drawn in, the step pipeline's pacing,
the requests that update and save the weights (requests), and a run's folder with its checkpoints (run_directory)."""
