"""``SamplingClient``: the SDK's sampling API over a local ``SamplingEngine`` snapshot."""

from __future__ import annotations

from typing import Any

from tinker import types
from tinker.lib.public_interfaces.api_future import APIFuture, AwaitableConcurrentFuture
from transformers import PreTrainedTokenizerBase

from .deprecated import async_twin
from .futures import RequestQueue, failed_future
from .model.errors import LocalBadRequestError
from .model.tokens import model_input_tokens
from .sampling.engine import SamplingEngine
from .sampling.prompt_targets import check_target_tensor

__all__ = ["SamplingClient"]


class SamplingClient:
    """Samples from fixed weights: training after this client was made does not change it.

    Made by ``ServiceClient.create_sampling_client`` or
    ``TrainingClient.save_weights_and_get_sampling_client``. Requests run on this
    client's own worker thread; each method returns an ``APIFuture`` at once
    (``await`` it or call ``.result()``).
    """

    def __init__(self, sampler: SamplingEngine, queue: RequestQueue, model_path: str | None = None) -> None:
        self._sampler = sampler
        self._queue = queue
        #: the ``tinker://`` path of the weights sampled (None: a base model, or in-memory weights), as ``get_sampler`` reports it
        self.model_path = model_path

    def sample(
        self,
        prompt: types.ModelInput,
        num_samples: int,
        sampling_params: types.SamplingParams,
        include_prompt_logprobs: bool = False,
        topk_prompt_logprobs: int = 0,
        topk_sample_logprobs: int = 0,
        target_prompt_logprobs: types.TensorData | None = None,
        prompt_alt_tokens_k: int = 0,
        prompt_logprobs_last_n: int | None = None,
    ) -> APIFuture[types.SampleResponse]:
        """``num_samples`` completions of ``prompt``; tokens include the stop token.

        Requests pending on this client decode together, in one batch (continuous batching).
        ``target_prompt_logprobs`` scores given token ids at each prompt position (see
        ``prompt_targets``); a tensor that is not int64 and 2-D raises ``ValueError`` at once,
        as in the SDK. ``prompt_alt_tokens_k`` is not supported locally (the request fails
        with ``LocalBadRequestError``).
        """
        if target_prompt_logprobs is not None:
            check_target_tensor(target_prompt_logprobs)
        try:
            if prompt_alt_tokens_k:
                raise LocalBadRequestError("The local backend does not support prompt_alt_tokens_k")
            if prompt_logprobs_last_n is not None and not include_prompt_logprobs:
                raise LocalBadRequestError(
                    "prompt_logprobs_last_n applies to prompt logprobs; set include_prompt_logprobs"
                )
            tokens = model_input_tokens(prompt, "The prompt")
        except LocalBadRequestError as exc:
            return failed_future(exc)
        response = self._sampler.submit(
            tokens,
            num_samples,
            sampling_params,
            include_prompt_logprobs=include_prompt_logprobs,
            topk_prompt_logprobs=topk_prompt_logprobs,
            topk_sample_logprobs=topk_sample_logprobs,
            prompt_logprobs_last_n=prompt_logprobs_last_n,
            target_prompt_logprobs=target_prompt_logprobs,
        )
        if not response.done():
            self._queue.submit(self._sampler.drive)  # decodes this request with every other one pending
        return AwaitableConcurrentFuture(response)

    def compute_logprobs(
        self, prompt: types.ModelInput, prompt_logprobs_last_n: int | None = None
    ) -> APIFuture[list[float | None]]:
        """``[None, log p(t1 | t0), ...]``: the prompt's log-probs under this client's weights."""
        return self._queue.submit(
            lambda: self._sampler.prompt_logprobs(model_input_tokens(prompt, "The prompt"), prompt_logprobs_last_n)
        )

    @property
    def held_bytes(self) -> int:
        """Bytes of memory this client holds of its own, as allocated now: the adapted weights it samples
        with and its decode buffers (they grow with the batches it decodes). Dropping the client releases them
        (its weights go back to a small pool that the next snapshot reuses). A client of the bare base model
        holds 0: it shares the base's. minds' own; the SDK's ``SamplingClient`` has no such property."""
        return self._sampler.held_bytes

    def get_tokenizer(self) -> PreTrainedTokenizerBase:
        """The base model's tokenizer."""
        return self._sampler.base.tokenizer

    def get_base_model(self) -> str:
        """The base model's name, e.g. ``minds-tiny``."""
        return self._sampler.base.name

    sample_async = async_twin("sample", awaits=True)
    compute_logprobs_async = async_twin("compute_logprobs", awaits=True)
    get_base_model_async = async_twin("get_base_model", awaits=True)

    def get_sampler_handle(self) -> str:
        """Refused (``TypeError``), as pickling is: the SDK's handle lets another process sample through the service,
        and a local client lives in its process. There, sample the same weights with ``create_sampling_client(
        model_path=...)`` on the same ``checkpoint_root`` (or run ``minds serve``, whose handles work)."""
        raise TypeError(
            "get_sampler_handle: a local SamplingClient lives in its process and has no handle another can use; "
            "in that process, create_sampling_client(model_path=<the tinker:// path of its weights>) on the same "
            "checkpoint_root (or sample through minds serve, whose handles work)"
        )

    def __repr__(self) -> str:
        return f"<local SamplingClient of {self.get_base_model()!r}>"

    def __reduce__(self) -> Any:
        raise TypeError("A local SamplingClient lives in its process and cannot be pickled")
