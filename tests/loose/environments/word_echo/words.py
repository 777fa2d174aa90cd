"""The words the echo environment asks for."""

WORDS = ("lantern", "pebble", "violin", "harbor", "meadow", "copper", "thistle", "glacier")
