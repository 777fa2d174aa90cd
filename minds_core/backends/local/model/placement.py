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

Two switches take the GPU path back to plain eager torch, each ``auto`` or ``off`` (``local.cuda_graphs``,
``local.compile``; ``minds serve --cuda-graphs/--compile``): ``cuda_graphs = "off"`` runs every decode step
eagerly (no CUDA graph captured), ``compile = "off"`` compiles nothing (packed training rows take the dense
mask instead of FlexAttention, and the decode math stays eager whatever ``decode_compile`` says).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .accelerator import Accelerator, accelerator_for
from .errors import LocalBadRequestError
from .packed_attention import packed_attention_mode

__all__ = ["COMPILE_MODES", "DEVICES", "SWITCHES", "Placement", "resolve_placement"]

DEVICES = ("auto", "cpu", "cuda")
"""The accepted values of ``local.device``."""

SWITCHES = ("auto", "off")
"""The accepted values of ``local.cuda_graphs`` and ``local.compile``."""

COMPILE_MODES = ("default", "max-autotune-no-cudagraphs")
"""The ``torch.compile`` modes the sampler's decode math (``sampling.fast_decode.StepMath``) takes: those that leave
CUDA graphs to ``sampling.cuda_graphs`` (the modes that capture graphs of their own would capture inside ours)."""


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
    """The ``torch.compile`` mode (``COMPILE_MODES``: ``default`` or ``max-autotune-no-cudagraphs``) in
    which samplers compile the elementwise math of their decode step (RMSNorms, rotary, residual adds, softmax,
    SiLU gate: fused into a few kernels, which CUDA graphs then capture), or None to run it eagerly. Compiling
    costs seconds (~20 s on a loaded 2-core CPU) at the first steps of the process's first such sampler, and a
    few times more at most as sizes change (a second row count, attended width or model shape makes that size
    dynamic; a single row compiles apart); a failed compile runs eagerly, logged once. Off until measured on a
    GPU (``benchmarks/gpu_sampling.py`` times both); on the CPU it is slower than eager (0.75x at minds-tiny)."""

    cuda_graphs: bool = True
    """Whether samplers capture their decode steps as CUDA graphs where the device can (``local.cuda_graphs``)."""
    compiles: bool = True
    """Whether anything may be compiled (``local.compile``): False leaves ``decode_compile`` unused."""
    accelerator: Accelerator | None = None
    """The device layer (``accelerator``) the engines plan memory and capture steps through; None: the device's own
    (``device_layer``). Tests give a fake here."""

    @property
    def device_layer(self) -> Accelerator:
        """``accelerator``, or the device's own."""
        return self.accelerator if self.accelerator is not None else accelerator_for(self.device)

    def __post_init__(self) -> None:
        if self.decode_compile is not None and self.decode_compile not in COMPILE_MODES:
            raise LocalBadRequestError(
                f"Placement.decode_compile is {self.decode_compile!r}: use None (eager) or one of "
                f"{', '.join(COMPILE_MODES)} (modes with CUDA graphs of their own would nest inside the sampler's)"
            )


def resolve_placement(device: str = "auto", cuda_graphs: str = "auto", compile: str = "auto") -> Placement:
    """The placement for ``device`` (``auto``, ``cpu`` or ``cuda``; ``cuda`` without a GPU is an error), with
    ``cuda_graphs`` and ``compile`` (``auto`` or ``off``, see the module doc)."""
    if device not in DEVICES:
        raise LocalBadRequestError(f"Unknown local device {device!r}: use one of {', '.join(DEVICES)}")
    for key, value in (("cuda_graphs", cuda_graphs), ("compile", compile)):
        if value not in SWITCHES:
            raise LocalBadRequestError(f"local.{key} is {value!r}: use one of {', '.join(SWITCHES)}")
    graphs = cuda_graphs == "auto"
    if device == "cpu" or (device == "auto" and not torch.cuda.is_available()):
        return Placement(torch.device("cpu"), torch.float32, cuda_graphs=graphs, compiles=compile == "auto")
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
        packed_attention=packed_attention_mode("cuda") if compile == "auto" else "dense",
        cuda_graphs=graphs,
        compiles=compile == "auto",
    )
