"""The policy's sampler as environment code written for the seed harness reads it."""

from __future__ import annotations

from typing import Any


class PolicySampler:
    """The rollout's SamplingClient: the real API, plus ``.tokenizer``.

    Every attribute is the sampler's own (``sample``, ``compute_logprobs``,
    their ``_async`` forms, ``get_tokenizer``); prompts are
    ``tinker.types.ModelInput``. ``tokenizer`` is ``get_tokenizer()``, which
    seed-style reward code reads as an attribute. Deep copies of an object
    holding it share it (a sampler is a handle to a service, not state).
    """

    def __init__(self, sampler: Any) -> None:
        self.sampler = sampler

    @property
    def tokenizer(self) -> Any:
        return self.sampler.get_tokenizer()

    def __getattr__(self, name: str) -> Any:
        if name == "sampler":  # not set yet (copying, unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.sampler, name)

    def __deepcopy__(self, memo: dict[int, Any]) -> PolicySampler:
        return self

    def __repr__(self) -> str:
        return f"PolicySampler({self.sampler!r})"
