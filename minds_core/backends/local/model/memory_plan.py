"""Memory by budget: the trainer's and the sampler's shares of a device, sized together before a run starts.

A run on the local backend declares its shape (``RunShape``: the rows it samples
at once, the tokens of a sequence at most, the LoRA rank; from its config). Once
its base model is loaded, ``plan_memory`` sizes from the model and that shape
what the run will hold beside the base weights: the adapter's training state
(float32 weights, gradients and AdamW's two moments), the samplers' merged
copies of the adapted weights (the current snapshot and the one before it, which
the pool reuses), a training micro-batch's activations, and the decode slots'
keys/values with the sampling state and the captured steps' intermediates
(``graph`` bytes), plus a reserve for the allocator's fragmentation and the
kernels' workspaces. Where the device's free memory holds it all, the plan
is logged at start and the engines keep to it: the sampler's keys/values get
the plan's budget (never more than it, however much is free later), and the
trainer's micro-batches the plan's token count. Where it does not, the plan
first halves the larger of the sampler's rows and the micro-batch's tokens
(down to ``MIN_ROWS`` rows and ``MIN_TRAIN_TOKENS`` tokens, or one sequence),
then refuses in one line naming the largest part and the setting that lowers
it, before anything runs.

Without a declared shape (``minds serve``, a program using the client directly)
each sampler's keys/values get what is free beyond what training keeps
(``sampler_kv_budget``), and a sampler that cannot hold one sequence refuses the
request in one line.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from minds_core.base.logs import get_logger

from .accelerator import Accelerator
from .errors import LocalBadRequestError
from .head_logprobs import chunk_tokens

__all__ = [
    "LOWER_ROWS",
    "MIN_ROWS",
    "MIN_TRAIN_TOKENS",
    "POSITION_GRANULE",
    "MemoryPlan",
    "ModelSizes",
    "RunShape",
    "plan_memory",
    "sampler_kv_budget",
    "size_text",
]

log = get_logger("backend")

GIB = 1 << 30
POSITION_GRANULE = 256
"""Decode slots whose steps are captured hold positions in multiples of this (fewer column sizes to capture)."""
MIN_ROWS = 8
"""The fewest decode rows a plan shrinks the sampler to before it refuses (fewer rows sample more slowly, not worse)."""
MIN_TRAIN_TOKENS = 1024
"""The fewest tokens per training micro-batch a plan shrinks to before it refuses (or one whole sequence)."""
RESERVE_SHARE = 0.05
"""The share of the device's memory kept free on a GPU (at least ``RESERVE_MIN_BYTES``): fragmentation, cuBLAS and
attention workspaces, the CUDA context's growth."""
RESERVE_MIN_BYTES = 1 << 30
SAMPLER_TREES = 2
"""Merged copies of the adapted weights a run holds: its current snapshot's, and the previous one's (see
``adapted_models.KEPT_FREE``)."""
_ADAM_BYTES_PER_PARAMETER = 16  # float32 weight, gradient, two moments


@dataclass(frozen=True)
class RunShape:
    """What a run declares it will do (from its config: ``RunConfig`` fields in brackets)."""

    rows: int
    """Sequences sampled at once at most (``trainer.group_size x trainer.groups_per_batch``, within
    ``rollout.concurrency`` x the samples per request)."""
    context: int
    """Tokens of one sequence at most, prompt and completion (``rollout.max_total_tokens``)."""
    rank: int
    """The LoRA rank (``model.lora_rank``)."""
    temperature: float = 1.0
    """Its sampling temperature (``sampling.temperature``; 0: greedy): which draw steps its warm-up captures."""
    truncated: bool = False
    """Whether it samples with top-k or top-p (``sampling.top_k``, ``sampling.top_p``)."""


@dataclass(frozen=True)
class ModelSizes:
    """The sizes of a loaded model that its memory needs follow from (``of``)."""

    layers: int
    hidden: int
    intermediate: int
    vocab: int
    kv_bytes_per_position: int
    """Keys and values of one position of one sequence, all layers, in the model's dtype."""
    element: int
    """Bytes per element of the model's weights."""
    linear_weights: int
    """Elements of every linear layer's weight (what a merged sampler copies, at most)."""
    linear_sides: int
    """Sum of ``in + out`` features over the linear layers: LoRA parameters per unit of rank."""

    @classmethod
    def of(cls, model: nn.Module) -> ModelSizes:
        config = model.config
        heads = int(config.num_attention_heads)
        head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // heads)
        kv_heads = int(getattr(config, "num_key_value_heads", None) or heads)
        element = next(model.parameters()).element_size()
        linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
        return cls(
            layers=int(config.num_hidden_layers),
            hidden=int(config.hidden_size),
            intermediate=int(getattr(config, "intermediate_size", None) or 4 * config.hidden_size),
            vocab=int(model.get_input_embeddings().num_embeddings),
            kv_bytes_per_position=2 * int(config.num_hidden_layers) * kv_heads * head_dim * element,
            element=element,
            linear_weights=sum(m.in_features * m.out_features for m in linears),
            linear_sides=sum(m.in_features + m.out_features for m in linears),
        )

    def activations(self, tokens: int) -> int:
        """Bytes a training micro-batch of ``tokens`` holds for its backward pass (what a LoRA layer saves: each
        layer's inputs of its products, norms and attention; the output layer a chunk of float32 logits and its
        gradient at a time)."""
        per_token = self.layers * (14 * self.hidden + 4 * self.intermediate) * self.element
        return tokens * per_token + 2 * 4 * min(tokens, chunk_tokens(self.vocab)) * self.vocab

    def decode_rows(self, rows: int, context: int) -> int:
        """Bytes of ``rows`` decode slots of ``context`` positions: keys/values, the sampling state (float32 logits
        and weights, sampled tokens and log-probs) and a captured step's intermediates (the logits it computes and
        the MLP's activations, per row)."""
        kv = rows * context * self.kv_bytes_per_position
        state = rows * (3 * 4 * self.vocab + 12 * context)
        graphs = rows * (4 * self.vocab + (2 * self.intermediate + 4 * self.hidden) * self.element)
        return kv + state + graphs


@dataclass(frozen=True)
class MemoryPlan:
    """What a run will hold beside its base weights, in bytes (``plan_memory``), and the sizes chosen."""

    free: int
    """The device's free memory when the plan was made (base weights loaded)."""
    adapter: int
    """The adapter's training state: float32 weights, gradients, AdamW moments."""
    sampler_weights: int
    """The samplers' merged copies of the adapted weights."""
    activations: int
    """One training micro-batch's activations at ``train_tokens``."""
    decode: int
    """The decode slots: keys/values, sampling state and captured steps at ``rows`` x ``context``."""
    reserve: int
    """Kept free (fragmentation, workspaces)."""
    rows: int
    """Decode rows the sampler reserves."""
    context: int
    """Positions per decode row."""
    train_tokens: int
    """Tokens per training micro-batch."""
    shape: RunShape
    """The run it was made for."""

    @property
    def total(self) -> int:
        return self.adapter + self.sampler_weights + self.activations + self.decode + self.reserve

    def fields(self) -> dict[str, float | int]:
        """The plan as a log line's fields (GiB to two decimals; rows and tokens as counts)."""
        gib = {
            name: round(getattr(self, name) / GIB, 2)
            for name in ("free", "adapter", "sampler_weights", "activations", "decode", "reserve", "total")
        }
        return {**{f"{k}_gib": v for k, v in gib.items()}, "decode_rows": self.rows, "context": self.context,
                "train_tokens": self.train_tokens}  # fmt: skip


LOWER_ROWS = "lower trainer.group_size x trainer.groups_per_batch (rows sampled at once) or rollout.max_total_tokens"
"""What a run lowers when its sampler's or its trainer's batches do not fit."""

_LOWER = {
    "decode": LOWER_ROWS,
    "activations": "lower rollout.max_total_tokens (the longest sequence a micro-batch must hold)",
    "adapter": "lower model.lora_rank, or pick a smaller model.base_model",
    "sampler_weights": "pick a smaller model.base_model (or set model.train_unembed = false)",
}


def plan_memory(sizes: ModelSizes, shape: RunShape, accelerator: Accelerator, train_tokens: int, max_rows: int) -> MemoryPlan:
    """The plan of a run of ``shape`` on a model of ``sizes`` (see the module doc): ``train_tokens`` and
    ``max_rows`` are the most the placement allows; ``LocalBadRequestError`` in one line where it cannot fit."""
    free, total = accelerator.free_bytes(), accelerator.total_bytes()
    reserve = max(RESERVE_MIN_BYTES, int(RESERVE_SHARE * total)) if accelerator.measures_memory else 0
    adapter = shape.rank * sizes.linear_sides * _ADAM_BYTES_PER_PARAMETER
    sampler_weights = SAMPLER_TREES * sizes.linear_weights * sizes.element
    if not accelerator.measures_memory:  # the CPU: the machine's memory, unmeasured; only the decode slots are bounded
        free += adapter + sampler_weights + sizes.activations(train_tokens)
    rows = min(_power_of_two(shape.rows), max_rows)
    context = -(-shape.context // POSITION_GRANULE) * POSITION_GRANULE  # as captured slots round it
    fewest_tokens = min(train_tokens, max(MIN_TRAIN_TOKENS, shape.context))
    fewest_rows = min(rows, MIN_ROWS)

    def plan() -> MemoryPlan:
        return MemoryPlan(
            free, adapter, sampler_weights, sizes.activations(train_tokens), sizes.decode_rows(rows, context),
            reserve, rows, context, train_tokens, shape,
        )  # fmt: skip

    current = plan()
    while current.total > free:
        shrink_rows = rows > fewest_rows and (current.decode >= current.activations or train_tokens <= fewest_tokens)
        if shrink_rows:
            rows //= 2
        elif train_tokens > fewest_tokens:
            train_tokens = max(train_tokens // 2, fewest_tokens)
        else:
            parts = {name: getattr(current, name) for name in _LOWER}
            largest = max(parts, key=parts.__getitem__)
            raise LocalBadRequestError(
                f"this run needs {size_text(current.total)} beside the base weights and the device has "
                f"{size_text(free)} free; its largest part is {largest.replace('_', ' ')} "
                f"({size_text(parts[largest])}): {_LOWER[largest]}"
            )
        current = plan()
    return current


def sampler_kv_budget(sizes: ModelSizes, accelerator: Accelerator, held: int, train_tokens: int) -> int:
    """Bytes a sampler's decode slots may hold without a plan (see the module doc): those it holds already
    (``held``) and what is free beyond a training micro-batch's activations at ``train_tokens`` and the reserve."""
    if not accelerator.measures_memory:
        return accelerator.free_bytes()
    reserve = max(RESERVE_MIN_BYTES, int(RESERVE_SHARE * accelerator.total_bytes()))
    return held + max(accelerator.free_bytes() - sizes.activations(train_tokens) - reserve, 0)


def log_plan(model: str, plan: MemoryPlan) -> None:
    """Say at start what the run will use."""
    log.info("memory plan", model=model, **plan.fields())


def size_text(size: int) -> str:
    """``size`` bytes as people read them: GiB to two decimals, or MiB to one below 1 GiB."""
    return f"{size / GIB:.2f} GiB" if size >= GIB else f"{size / (1 << 20):.1f} MiB"


def _power_of_two(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()
