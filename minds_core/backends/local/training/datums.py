"""Submitted datums: their loss inputs turned into tensors of their own, and checked against a base model and a loss."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from tinker import types

from ..model.errors import LocalBadRequestError
from ..model.models import BaseModel
from ..model.tokens import check_length, check_tokens, model_input_tokens
from .losses import LOSS_INPUTS, PROVENANCE_SAMPLED

__all__ = ["DatumTensors", "as_tensor", "check_datum", "submitted_datum"]


@dataclass(frozen=True)
class DatumTensors:
    """One datum as tensors: input tokens ``[T]`` and its loss inputs (``target_tokens`` ``[T]`` or ``[T, K]``)."""

    tokens: torch.Tensor
    inputs: dict[str, torch.Tensor]

    def to(self, device: torch.device) -> DatumTensors:
        """This datum with every tensor on ``device``."""
        return DatumTensors(self.tokens.to(device), {key: value.to(device) for key, value in self.inputs.items()})


def as_tensor(value: Any, key: str) -> torch.Tensor:
    """A loss input (TensorData, torch tensor, numpy array or list) as a new tensor: int64 targets, float32 otherwise.

    The tensor never shares memory with ``value``.
    """
    if isinstance(value, types.TensorData):
        tensor = value.to_torch()
    elif isinstance(value, torch.Tensor):
        tensor = value.detach()
    elif isinstance(value, (np.ndarray, list, tuple)):
        tensor = torch.as_tensor(np.asarray(value))
    else:
        raise LocalBadRequestError(
            f"loss_fn_inputs[{key!r}] must be TensorData, a torch tensor, a numpy array or a list, "
            f"got {type(value).__name__}"
        )
    return tensor.to(torch.int64 if key == "target_tokens" else torch.float32, copy=True)


def submitted_datum(datum: types.Datum, index: int) -> DatumTensors:
    """Datum ``index`` of a request as tensors of its own, taken at submission as the SDK serializes it then.

    Keeps every loss input a built-in loss reads (others are ignored locally); provenance
    (``loss_fn_input_spans``) becomes the input ``provenance_sampled``, 1 on each target a
    ``SampledProvenanceSpan`` covers. Raises ``LocalBadRequestError`` for image chunks, an
    empty input, a loss input of an unsupported type or spans that do not tile the targets.
    """
    tokens = model_input_tokens(datum.model_input, f"datum {index} model_input")
    inputs = {
        key: as_tensor(value, key)
        for key, value in datum.loss_fn_inputs.items()
        if key in LOSS_INPUTS and key != PROVENANCE_SAMPLED
    }
    if datum.loss_fn_input_spans is not None:
        inputs[PROVENANCE_SAMPLED] = _sampled_mask(datum.loss_fn_input_spans, index)
    return DatumTensors(tokens=torch.tensor(tokens, dtype=torch.int64), inputs=inputs)


def _sampled_mask(spans: Sequence[Any], index: int) -> torch.Tensor:
    """1.0 on the positions of the sampled runs among ``spans`` (which tile the targets in order), 0.0 elsewhere."""
    marks = [float(isinstance(span, types.SampledProvenanceSpan)) for span in spans for _ in range(span.length)]
    if not marks:
        raise LocalBadRequestError(f"datum {index}: loss_fn_input_spans cover no position; they must tile target_tokens")
    return torch.tensor(marks, dtype=torch.float32)


def check_datum(item: DatumTensors, index: int, required: Sequence[str], base: BaseModel) -> DatumTensors:
    """Validate submitted datum ``index`` for ``base`` and a loss needing ``required``; keep the inputs it reads."""
    what = f"datum {index}"
    check_tokens(item.tokens, base, f"{what} model_input")
    check_length(len(item.tokens), base, f"{what} model_input")
    if PROVENANCE_SAMPLED in required and PROVENANCE_SAMPLED not in item.inputs:
        raise LocalBadRequestError(
            f"{what} has no provenance; this loss (stable_reinforce) needs every datum to name the sampled "
            "sequences behind its targets: Datum.with_provenance(...) with SampledProvenanceSpan runs carrying "
            "each SampledSequence.sequence_id"
        )
    if missing := [key for key in required if key not in item.inputs]:
        raise LocalBadRequestError(f"{what} lacks loss_fn_inputs {missing}; this loss needs {list(required)}")
    used = [*required, *(["weights"] if "weights" in item.inputs else [])]
    inputs = {key: item.inputs[key] for key in used}
    targets = inputs["target_tokens"]
    if targets.ndim not in (1, 2) or targets.shape[0] != len(item.tokens):
        raise LocalBadRequestError(
            f"{what}: target_tokens has shape {list(targets.shape)} but model_input has {len(item.tokens)} tokens; "
            "they must align (model_input = seq[:-1], target_tokens = seq[1:])"
        )
    check_tokens(targets, base, f"{what} target_tokens")
    for key in used:
        if inputs[key].shape != targets.shape:
            raise LocalBadRequestError(
                f"{what}: loss_fn_inputs[{key!r}] has shape {list(inputs[key].shape)}, "
                f"target_tokens has {list(targets.shape)}; they must match"
            )
    return DatumTensors(tokens=item.tokens, inputs=inputs)
