"""The local backend's training wing: the ``TrainingEngine`` and its losses, datums, packing and passes,
joined LoRA, the checkpoint store (adapter and optimizer state, age encryption), and the primer training
that makes ``minds-small``'s weights.

It imports the shared floor (``..model``) only, never ``..sampling``; the clients above tie the two wings.
"""
