"""tinker-cookbook environments (``Env``, ``EnvGroupBuilder``, ``RLDataset``, ``RLDatasetBuilder``) on minds' loop."""
