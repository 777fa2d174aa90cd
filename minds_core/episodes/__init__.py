"""Episodes played in groups: one rollout (rollout), its token-level conversation (conversation), the group's
rewards (group_rewards), what is recorded of it (rollout_records). RL, evaluation and chat all play episodes here."""
