"""How a transformers model is handed a key/value cache and gives it back, across transformers releases.

transformers 5.x renamed the forward argument and output field ``past_key_values``
to ``cache`` (the old spelling still works but warns on every process's first
call, and is due to be removed). The local backend passes and reads the cache
only through these two helpers, so one place knows which spelling this
installation uses.
"""

from __future__ import annotations

from typing import Any

from transformers import DynamicCache
from transformers.modeling_outputs import CausalLMOutputWithPast

__all__ = ["cache_argument", "returned_cache"]

#: The forward argument (and output field) that carries the cache in this transformers release.
CACHE_FIELD = "cache" if "cache" in CausalLMOutputWithPast.__dataclass_fields__ else "past_key_values"


def cache_argument(cache: DynamicCache) -> dict[str, Any]:
    """Keyword arguments that hand ``cache`` to a model's forward (``use_cache`` included)."""
    return {CACHE_FIELD: cache, "use_cache": True}


def returned_cache(output: Any) -> DynamicCache:
    """The cache a forward pass returned."""
    return getattr(output, CACHE_FIELD)
