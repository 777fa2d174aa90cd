"""What one request, connection or client may ask of ``minds serve``: the limits and the checks against them.

Every limit lives in ``ServeLimits``, one typed record with a documented default and a
``minds serve`` flag of the same name (``max_lora_rank`` is ``--max-lora-rank``). Work is
admitted before anything is allocated for it: a request past a limit is answered 400 (413 for
a body) naming the field, the limit and the flag that raises it, and the server keeps serving.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .errors import BadRequest

if TYPE_CHECKING:
    from tinker import types

__all__ = ["ServeLimits", "add_limit_arguments", "limits_from_arguments"]


#: Longest time a limit may name (a socket timeout must fit the platform's time_t).
_MAX_SECONDS = 2**31 - 1


def _limit(default: float, help: str) -> Any:
    return field(default=default, metadata={"help": help})


@dataclass(frozen=True)
class ServeLimits:
    """The bounds ``minds serve`` holds every client to (defaults fit a single-GPU server)."""

    max_body_bytes: int = _limit(16 << 20, "largest request body, as sent (the SDK sends forward_backward in ~5 MB chunks)")
    max_decompressed_bytes: int = _limit(128 << 20, "largest compressed body (gzip, deflate, zstd) once decompressed")
    max_num_samples: int = _limit(256, "most samples one sample request may ask for (num_samples)")
    max_new_tokens: int = _limit(32768, "most tokens one sample may generate (SamplingParams.max_tokens; unset counts as this)")
    max_batch_tokens: int = _limit(
        1 << 20,
        "most tokens one request may hold: num_samples x (prompt + max_tokens) for sampling, "
        "the sum of the datums' lengths for forward/forward_backward",
    )
    max_logprobs_k: int = _limit(1024, "most top-k log-probs one request may ask for per position")
    max_tensor_elements: int = _limit(
        1 << 24, "most tensor elements one request may carry (a sparse tensor counts its whole shape)"
    )
    max_lora_rank: int = _limit(256, "highest LoRA rank create_model accepts")
    max_training_runs: int = _limit(64, "most training runs alive at once, all clients together (a finished session frees its runs)")
    max_session_metadata_bytes: int = _limit(
        1 << 16, "most bytes of user_metadata and display_name (as JSON) a session may carry; each is kept while the server runs"
    )
    max_pending_requests: int = _limit(1024, "most unfinished requests (queued or running) one API key may have; more are answered 429")
    max_header_bytes: int = _limit(
        65536, "most bytes of a request's headers, all lines together (each is held, and parsed, before the key is checked)"
    )
    backlog: int = _limit(128, "listen backlog: connections the system holds while the server accepts others")
    max_connections: int = _limit(
        512,
        "most connections held at once (fewer where the open-file limit leaves less room); past it, the connection "
        "that has waited longest for its request is closed to make room, or with none waiting the new one (clients retry)",
    )
    max_connections_per_address: int = _limit(
        256, "most connections one client address holds at once; past it, that address's longest-waiting connection makes room"
    )
    max_requests_per_connection: int = _limit(1000, "requests answered on one kept-alive connection before the server closes it")
    header_timeout_seconds: float = _limit(
        10.0,
        "a connection must send a request's line and headers within this of opening, or of its previous answer "
        "(an idle kept-alive connection is closed after it); at most the read timeout",
    )
    read_timeout_seconds: float = _limit(120.0, "a connection silent this long, or whose request (headers and body) takes longer to arrive, is closed")

    def __post_init__(self) -> None:
        for item in dataclasses.fields(self):
            value = getattr(self, item.name)
            if not value > 0:
                raise ValueError(f"--{_flag(item.name)} must be positive, got {value}")
            if isinstance(value, float) and not value <= _MAX_SECONDS:  # a socket timeout past time_t: every read fails
                raise ValueError(f"--{_flag(item.name)} must be at most {_MAX_SECONDS} seconds, got {value}")

    # -- admission ------------------------------------------------------------------------
    def check_lora(self, rank: int) -> None:
        """A new LoRA run of ``rank``."""
        if not 1 <= rank <= self.max_lora_rank:
            raise self._refusal("lora_config.rank", rank, "max_lora_rank", low=1)

    def check_session(self, request: types.CreateSessionRequest) -> None:
        """A new session's ``user_metadata`` and ``display_name``, which the server keeps for ``get_session``."""
        size = len(json.dumps([request.user_metadata, request.display_name]).encode())
        if size > self.max_session_metadata_bytes:
            raise self._refusal("the session's user_metadata and display_name, in bytes", size, "max_session_metadata_bytes")

    def check_sample(self, request: types.SampleRequest) -> None:
        """A sample request: sample count, tokens to generate, the whole batch, top-k and target tensors."""
        if not 1 <= request.num_samples <= self.max_num_samples:
            raise self._refusal("num_samples", request.num_samples, "max_num_samples", low=1)
        max_tokens = request.sampling_params.max_tokens
        if max_tokens is not None and max_tokens > self.max_new_tokens:
            raise self._refusal("sampling_params.max_tokens", max_tokens, "max_new_tokens")
        for name in ("topk_prompt_logprobs", "topk_sample_logprobs", "prompt_alt_tokens_k"):
            k = getattr(request, name, None) or 0
            if k > self.max_logprobs_k:
                raise self._refusal(name, k, "max_logprobs_k")
        try:
            prompt = request.prompt.length
        except ValueError as exc:  # an image chunk without expected_tokens
            raise BadRequest(f"prompt: {exc}; minds serve samples from token chunks (encoded_text) only") from None
        total = request.num_samples * (prompt + (max_tokens if max_tokens is not None else self.max_new_tokens))
        if total > self.max_batch_tokens:
            raise BadRequest(
                f"num_samples x (prompt + max_tokens) = {request.num_samples} x ({prompt} + "
                f"{max_tokens if max_tokens is not None else f'unset, counted as {self.max_new_tokens}'}) = {total} "
                f"tokens is past this server's max_batch_tokens of {self.max_batch_tokens}: ask for fewer samples "
                f"or tokens, split the request, or start minds serve with a larger --{_flag('max_batch_tokens')}"
            )
        if request.target_prompt_logprobs is not None:
            self.check_shape("target_prompt_logprobs", request.target_prompt_logprobs.shape)

    def check_batch(self, datums: int, tokens: int, elements: int) -> None:
        """A forward/forward_backward batch, counted before it is built: its tokens and tensor elements in all."""
        if tokens > self.max_batch_tokens:
            raise BadRequest(
                f"forward_backward data of {datums} datums hold {tokens} tokens, past this server's "
                f"max_batch_tokens of {self.max_batch_tokens}: send fewer or shorter datums per request, or start "
                f"minds serve with a larger --{_flag('max_batch_tokens')}"
            )
        if elements > self.max_tensor_elements:
            raise self._refusal("the loss_fn_inputs' elements, all datums together", elements, "max_tensor_elements")

    def check_shape(self, name: str, shape: list[int] | None) -> None:
        """A tensor's declared shape: non-negative dimensions, at most ``max_tensor_elements`` in all."""
        elements = 1
        for size in shape or []:
            if size < 0:
                raise BadRequest(f"{name}: shape {shape} has a negative dimension")
            elements *= size
        if elements > self.max_tensor_elements:
            raise self._refusal(f"{name} (shape {shape})", elements, "max_tensor_elements")

    def _refusal(self, what: str, value: int, limit: str, low: int | None = None) -> BadRequest:
        bound = getattr(self, limit)
        span = f"between {low} and {bound}" if low is not None else f"at most {bound}"
        return BadRequest(
            f"{what} = {value}: this server accepts {span} ({limit}); ask for less, "
            f"or start minds serve with a larger --{_flag(limit)}"
        )


def _flag(name: str) -> str:
    return name.replace("_", "-")


def add_limit_arguments(parser: argparse.ArgumentParser) -> None:
    """One ``--flag`` per ``ServeLimits`` field, its default and help taken from the field."""
    group = parser.add_argument_group("limits (each request past one is refused with a 4xx naming it)")
    for item in dataclasses.fields(ServeLimits):
        kind = float if item.type in (float, "float") else int
        group.add_argument(
            f"--{_flag(item.name)}",
            dest=f"limit_{item.name}",
            type=kind,
            default=item.default,
            metavar="N",
            help=f"{item.metadata['help']} (default {item.default})",
        )


def limits_from_arguments(args: argparse.Namespace) -> ServeLimits:
    """The ``ServeLimits`` of parsed ``add_limit_arguments`` flags (ValueError names a bad one)."""
    return ServeLimits(**{item.name: getattr(args, f"limit_{item.name}") for item in dataclasses.fields(ServeLimits)})
