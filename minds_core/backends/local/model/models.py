"""Base models: loading them once, sharing them frozen, and reading log-probs off their logits.

At load, sibling linear layers get their weights back to back in one buffer (``sibling_weights``), so that
samplers of the base model, and samplers keeping adapters unmerged, decode each group as one matrix product,
and training runs the base products of the layers that read one input as one (``joined_lora``).
The layers keep their values and stay frozen; everything else reads them as before: peft's wrappers in training,
the module-tree copies that share base tensors by id (``lora.attach_lora``, ``adapted_models``), and
``save_pretrained``. Checkpoints hold adapters only, and export loads a base model of its own.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, replace
from functools import cached_property

import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from minds_core.backends.model_source import check_model_source
from minds_core.base.errors import ConfigError

from .adapted_models import AdaptedModels
from .builtin_models import BUILTIN_MODELS, builtin_model_path
from .errors import LocalNotFoundError
from .memory_plan import MemoryPlan, ModelSizes, RunShape, log_plan, plan_memory
from .packed_attention import ATTENTION
from .placement import Placement
from .sibling_weights import lay_out, sibling_groups

__all__ = ["BaseModel", "BaseModelRegistry"]


@dataclass(frozen=True)
class BaseModel:
    """A frozen causal LM and its tokenizer, shared read-only by every client of a service."""

    name: str
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    placement: Placement
    plan: MemoryPlan | None = None
    """The memory plan of the run this service was made for (``memory_plan``), None without a declared run."""

    @cached_property
    def sizes(self) -> ModelSizes:
        """The sizes its memory needs follow from."""
        return ModelSizes.of(self.model)

    @cached_property
    def vocab_size(self) -> int:
        """Number of rows of the embedding: valid token ids are ``0 .. vocab_size - 1``."""
        return int(self.model.get_input_embeddings().num_embeddings)

    @cached_property
    def max_length(self) -> int:
        """Longest sequence (prompt plus completion) the model accepts."""
        return int(getattr(self.model.config, "max_position_embeddings", None) or 1 << 20)

    @cached_property
    def eos_token_ids(self) -> frozenset[int]:
        """The tokens that end a sample when ``SamplingParams.stop`` is None."""
        ids = {self.tokenizer.eos_token_id}
        configured = self.model.generation_config.eos_token_id
        ids.update(configured if isinstance(configured, list) else [configured])
        return frozenset(i for i in ids if i is not None)

    @cached_property
    def adapted(self) -> AdaptedModels:
        """The pool of module trees that samplers of adapters on this model decode with."""
        return AdaptedModels(self.model, self.placement.merge_adapters)

    @property
    def arch(self) -> str:
        """The model type from its config (e.g. ``qwen3``)."""
        return str(self.model.config.model_type)


class BaseModelRegistry:
    """Loads each base model once (thread-safe) onto ``placement`` and hands out the shared copy; with a
    ``run_shape``, each with the memory plan of that run (``memory_plan``: refused, unloaded, where it cannot fit)."""

    def __init__(self, placement: Placement, run_shape: RunShape | None = None) -> None:
        self.placement = placement
        self.run_shape = run_shape
        self._models: dict[str, BaseModel] = {}
        self._lock = threading.Lock()

    def get(self, name: str) -> BaseModel:
        """The loaded model named ``name`` (a built-in model, a model directory or a hub id)."""
        with self._lock:
            if name not in self._models:
                base = _load(name, self.placement)
                if self.run_shape is not None:
                    placement = self.placement
                    plan = plan_memory(
                        base.sizes, self.run_shape, placement.device_layer, placement.train_tokens_per_micro_batch,
                        placement.decode_rows,
                    )  # fmt: skip
                    log_plan(name, plan)
                    base = replace(base, plan=plan)
                self._models[name] = base
            return self._models[name]

    def context_lengths(self) -> dict[str, int]:
        """Each model loaded so far (in the order first asked for) and its longest sequence."""
        with self._lock:
            return {name: model.max_length for name, model in self._models.items()}


def _load(name: str, placement: Placement) -> BaseModel:
    source = _locate(name)
    try:
        try:
            tokenizer, model = _from_pretrained(source, placement, local_files_only=True)
        except OSError:
            if os.path.isdir(source):
                raise
            try:
                check_model_source(name, "base model")  # not cached: fail at once when the hub is off or unreachable
            except ConfigError as exc:
                raise LocalNotFoundError(str(exc)) from None
            tokenizer, model = _from_pretrained(source, placement, local_files_only=False)  # not cached: ask the hub
    except (OSError, ValueError) as exc:
        raise LocalNotFoundError(
            f"Cannot load base model {name!r}: it is not a built-in model ({', '.join(BUILTIN_MODELS)}), not a model directory, "
            f"and not loadable from the Hugging Face hub or its cache ({exc})"
        ) from exc
    model.requires_grad_(False)
    model.eval()
    # Laid out on their way to the device, not once there: there the per-layer weights they replace would stay in
    # torch's cache, which mem_get_info counts as used (and emptying it is unsafe while a thread captures a graph).
    for group in sibling_groups(model):  # one matrix product per group in a decode step (``fast_decode``)
        if len(group) > 1:
            lay_out(group, placement.device)
    model.to(placement.device)  # the rest (tensors there already stay as they are: views of their buffer)
    return BaseModel(name=name, model=model, tokenizer=tokenizer, placement=placement)


def _from_pretrained(
    source: str, placement: Placement, *, local_files_only: bool
) -> tuple[PreTrainedTokenizerBase, PreTrainedModel]:
    transformers.utils.logging.disable_progress_bar()  # never draw over the trainer's own progress bar
    tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=local_files_only)
    model = AutoModelForCausalLM.from_pretrained(
        source, dtype=placement.dtype, attn_implementation=ATTENTION, local_files_only=local_files_only
    )
    return tokenizer, model  # on the CPU: ``_load`` moves it


def locate(name: str) -> str:
    """Where the base model ``name`` is read from: an embedded default's folder (built first if missing), a model
    directory, or a Hugging Face hub id."""
    return _locate(name)


def _locate(name: str) -> str:
    builtin = builtin_model_path(name)
    if builtin is not None:
        return str(builtin)
    if os.path.isdir(name):
        return name
    if name.startswith(("/", "./", "../", "~")) or not name:
        raise LocalNotFoundError(
            f"Unknown base model {name!r}: no such model directory. Use a built-in model ({', '.join(BUILTIN_MODELS)}), "
            "a directory holding a transformers model, or a Hugging Face hub id"
        )
    return name
