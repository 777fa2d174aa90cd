"""Agent programs trained as environments: the built-in ``harness`` environment (harness) runs an unmodified
program per episode against the run's policy endpoint (serve.policy_endpoint) and trains on the calls it captured."""
