"""A datum's loss inputs read as torch tensors, for losses computed on the client (torch is imported on first use)."""

from __future__ import annotations

from typing import Any


def datum_column(datum: Any, key: str) -> Any:
    """The datum's loss input ``key`` as a torch tensor of its shape."""
    return tensor_of(datum.loss_fn_inputs[key])


def tensor_of(value: Any) -> Any:
    """A TensorData (or a list, array or tensor) as a torch tensor of its shape."""
    import torch

    return value.to_torch() if hasattr(value, "to_torch") else torch.as_tensor(value)
