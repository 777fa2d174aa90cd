"""Where the local backend computes: the device, and the dtype of the frozen base weights.

``auto`` is CUDA when torch sees a GPU, else the CPU. On CUDA the base weights
are bfloat16 (float16 where the GPU lacks bf16), while LoRA weights, their
gradients and the AdamW state stay float32 (samplers merge a snapshot's adapter
into bf16 copies of the adapted weights, computed in float32 and rounded once);
on the CPU everything is float32.

A GPU also takes bigger micro-batches (``tokens_per_micro_batch``, ``train_tokens_per_micro_batch``), and
choosing CUDA switches off cuDNN's fused attention for the process: it builds a
plan for every new shape (~25 ms on an H100), and a decode batch changes shape
at every token, so it made sampling ten times slower than the other kernels.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .errors import LocalBadRequestError
from .fast_decode import COMPILE_MODES
from .packed_attention import packed_attention_mode

__all__ = ["DEVICES", "Placement", "resolve_placement"]

DEVICES = ("auto", "cpu", "cuda")
"""The accepted values of ``local.device``."""


@dataclass(frozen=True)
class Placement:
    """The device every tensor of a service lives on, and the dtype of its base models' weights."""

    device: torch.device
    dtype: torch.dtype
    tokens_per_micro_batch: int = 2048
    """Padded input tokens per forward pass (rows x longest row) of the prompts a sampler prefills together."""
    decode_rows: int = 256
    """Rows a sampler decodes at once at most (fewer where their keys/values would not fit); more wait for slots."""
    train_tokens_per_micro_batch: int = 1024
    """Input tokens per training micro-batch (packed rows x row width, a prompt pass and the passes continuing it
    together): its activations bound a step's memory."""
    merge_adapters: bool = True
    """Whether samplers decode with their adapter merged into their own copy of the adapted weights (computed in
    float32, rounded once to ``dtype``), or with it unmerged as a float32 side path in every decode step, which
    keeps updates below ``dtype``'s resolution; see ``merged``."""
    packed_attention: str = "dense"
    """How training passes mask packed rows (``packed_attention.MODES``): FlexAttention on CUDA where it compiles,
    else a dense mask."""
    decode_compile: str | None = None
    """The ``torch.compile`` mode (``fast_decode.COMPILE_MODES``: ``default`` or ``max-autotune-no-cudagraphs``) in
    which samplers compile the elementwise math of their decode step (RMSNorms, rotary, residual adds, softmax,
    SiLU gate: fused into a few kernels, which CUDA graphs then capture), or None to run it eagerly. Compiling
    costs seconds (~20 s on a loaded 2-core CPU) at the first steps of the process's first such sampler, and a
    few times more at most as sizes change (a second row count, attended width or model shape makes that size
    dynamic; a single row compiles apart); a failed compile runs eagerly, logged once. Off until measured on a
    GPU (``benchmarks/gpu_sampling.py`` times both); on the CPU it is slower than eager (0.75x at minds-tiny)."""

    def __post_init__(self) -> None:
        if self.decode_compile is not None and self.decode_compile not in COMPILE_MODES:
            raise LocalBadRequestError(
                f"Placement.decode_compile is {self.decode_compile!r}: use None (eager) or one of "
                f"{', '.join(COMPILE_MODES)} (modes with CUDA graphs of their own would nest inside the sampler's)"
            )


def resolve_placement(device: str = "auto") -> Placement:
    """The placement for ``device`` (``auto``, ``cpu`` or ``cuda``); ``cuda`` without a GPU is an error."""
    if device not in DEVICES:
        raise LocalBadRequestError(f"Unknown local device {device!r}: use one of {', '.join(DEVICES)}")
    if device == "cpu" or (device == "auto" and not torch.cuda.is_available()):
        return Placement(torch.device("cpu"), torch.float32)
    if not torch.cuda.is_available():
        raise LocalBadRequestError(
            "local.device is 'cuda' but torch sees no CUDA device (torch.cuda.is_available() is False); "
            "install a CUDA build of torch on a GPU machine, or set local.device to 'auto' or 'cpu'"
        )
    dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    torch.backends.cuda.enable_cudnn_sdp(False)
    return Placement(
        torch.device("cuda"),
        dtype,
        tokens_per_micro_batch=32768,
        train_tokens_per_micro_batch=8192,
        packed_attention=packed_attention_mode("cuda"),
    )
