"""Seed-style environments loaded by module path (``seedlike_envs.<module>``) in the loose tests."""
