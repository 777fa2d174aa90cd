"""The local backend's shared floor: what both the sampling and the training wing stand on.

Base models (the built-in ``minds-tiny`` and ``minds-small``, loading, the registry), where they compute
(``placement``, ``accelerator``, ``memory_plan``), LoRA adapters, the output head's log-probs, packed
attention masks, token checks and the backend's errors. Nothing here imports ``sampling`` or ``training``.
"""
