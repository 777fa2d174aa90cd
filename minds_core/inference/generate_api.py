"""Token-level generation over a ``Surface``: ``POST /inference/v1/generate``, the shape vLLM and verifiers v1 use.

Request::

    {"model": "minds-tiny",            # optional: the first served model (a run: its policy)
     "request_id": "any string",       # optional: echoed back (default: a fresh id)
     "token_ids": [1, 2, 3],           # the prompt, as token ids (no chat template is applied)
     "sampling_params": {              # all optional
        "n": 1, "max_tokens": 16, "temperature": 1.0, "top_p": 1.0, "top_k": -1, "seed": null,
        "stop": ["..."], "stop_token_ids": [..],
        "logprobs": 0}}                # top log-probs per sampled position (0: only the sampled token's)

Answer::

    {"request_id": "...",
     "prompt_token_ids": [1, 2, 3],
     "choices": [{"index": 0,
                  "token_ids": [...],                  # every sampled token (a stop token included)
                  "logprobs": {"content": [{"token": "token_id:17", "logprob": -0.3,
                                            "top_logprobs": [{"token": "token_id:17", "logprob": -0.3}, ...]}]},
                  "finish_reason": "stop" | "length"}]}

Log-probs are always returned: they are the sampler's, the ones a run trains with.
"""

from __future__ import annotations

import uuid
from typing import Any

from .errors import bad_request
from .fields import Fields
from .openai_api import content_logprobs
from .sampling import Policy, SamplingRequest, read_request
from .surface import Surface

__all__ = ["generate"]


def _entry(token: int, logprob: float) -> dict[str, Any]:
    return {"token": f"token_id:{token}", "logprob": logprob}


def generate(surface: Surface, body: dict[str, Any], caller: str) -> dict[str, Any]:
    """``POST /inference/v1/generate``: token ids in; sampled ids, log-probs and finish reasons out."""
    fields = Fields(body)
    names = surface.models.names()
    model = fields.get("model") or (names[0] if names else None)
    tokens = fields.array("token_ids")
    params = Fields(fields.get("sampling_params", {}), "sampling_params")
    request_id = fields.string("request_id", None) or f"gen-{uuid.uuid4().hex}"

    def build(policy: Policy) -> SamplingRequest:
        vocab = len(policy.renderer.tokenizer)
        if not tokens or not all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < vocab for t in tokens):
            raise bad_request(f"token_ids must be a non-empty array of token ids between 0 and {vocab - 1}", "token_ids")
        return read_request(
            params,
            tokens,
            max_tokens=params.integer("max_tokens", 1, None, None),
            top_logprobs=params.integer("logprobs", 0, None, 0),
            hottest=100.0,
        )

    _, call = surface.sample(model, caller, build)
    choices = [
        {"index": i, "token_ids": list(c.tokens), "logprobs": content_logprobs(c, _entry), "finish_reason": c.finish}
        for i, c in enumerate(call.completions)
    ]
    return {"request_id": request_id, "prompt_token_ids": list(call.prompt), "choices": choices}
