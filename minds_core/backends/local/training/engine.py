"""The training engine: one LoRA adapter on a shared base, its gradients and its AdamW state.

Not thread-safe: a ``TrainingClient`` drives it from its single worker thread.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import torch
from tinker import types

from ..model.accelerator import EVENTS, is_out_of_memory, out_of_memory_error
from ..model.errors import LocalBadRequestError
from ..model.lora import AdapterState, LoraSpec, adapter_state, attach_lora, load_adapter_state
from ..model.memory_plan import LOWER_ROWS
from ..model.models import BaseModel
from .datums import DatumTensors, check_datum
from .joined_lora import join_lora
from .losses import get_loss, resolve_config
from .passes import CallerError, LossPasses

__all__ = ["CustomLossFn", "TrainingEngine", "OptimizerState"]

CustomLossFn = Callable[[list[types.Datum], list[torch.Tensor]], tuple[torch.Tensor, Mapping[str, Any]]]
"""``fn(data, logprobs_list) -> (loss, metrics)``, as ``TrainingClient.forward_backward_custom`` takes it."""

OptimizerState = dict[str, torch.Tensor]
"""AdamW state keyed ``"<parameter name>::<state key>"`` (a flat dict, for safetensors)."""

_STATE_SEPARATOR = "::"
_T = TypeVar("_T")


class TrainingEngine:
    """Forward/backward passes with gradient accumulation, and AdamW steps, for one adapter."""

    def __init__(self, base: BaseModel, spec: LoraSpec, seed: int) -> None:
        self.base = base
        self.spec = spec
        placement = base.placement
        self.model = attach_lora(base.model, spec, seed)
        if placement.dtype != torch.float32:  # autocast runs the float32 LoRA factors in the base's dtype:
            for module in self.model.modules():  # peft's cast of each input up to float32 would only be undone
                if hasattr(module, "cast_input_dtype_enabled"):
                    module.cast_input_dtype_enabled = False
        self.joined = join_lora(self.model, base.model)  # sibling layers' LoRA in few products, same parameters
        self._params = {name: p for name, p in self.model.named_parameters() if p.requires_grad}
        self._fused = placement.device.type == "cuda"
        self._optimizer = torch.optim.AdamW(list(self._params.values()), fused=self._fused or None)
        self._passes = LossPasses(
            self.model,
            compute_dtype=placement.dtype,
            tokens_per_micro_batch=base.plan.train_tokens if base.plan else placement.train_tokens_per_micro_batch,
            attention=placement.packed_attention,
        )

    def forward_backward(
        self,
        submitted: Sequence[DatumTensors],
        loss_fn: str,
        loss_fn_config: Mapping[str, float | str] | None,
        *,
        backward: bool,
    ) -> types.ForwardBackwardOutput:
        """Loss and target log-probs of a built-in loss; with ``backward``, add its gradients."""
        spec = get_loss(loss_fn)
        config = resolve_config(loss_fn, loss_fn_config)
        items = self._checked(submitted, spec.required_inputs)
        logprobs, total, plan = self._lowering(
            lambda: self._passes.run(items, lambda lp, inputs: spec.fn(lp, inputs, config).sum(), backward=backward),
            items,
        )
        return _output(logprobs, {"loss:sum": total, **plan})

    def forward_backward_custom(
        self, data: Sequence[types.Datum], submitted: Sequence[DatumTensors], fn: CustomLossFn
    ) -> types.ForwardBackwardOutput:
        """Run ``fn(data, logprobs)`` on the differentiable target log-probs of ``submitted`` and add its gradients.

        ``data`` are the caller's datums, which ``fn`` reads as the SDK's client-side loss function does.
        """
        items = self._checked(submitted, ("target_tokens",))

        def attempt() -> tuple[list[torch.Tensor], torch.Tensor, Mapping[str, Any]]:
            with torch.enable_grad():
                logprobs = [lp.cpu() for lp in self._passes.logprobs_with_grad(items)]  # on the CPU, as in the SDK
                try:
                    loss, metrics = fn(list(data), logprobs)
                except Exception as exc:
                    raise CallerError(exc) from exc
                loss.backward()
            return logprobs, loss, metrics

        logprobs, loss, metrics = self._lowering(lambda: self._passes.falling_back(attempt), items)
        values = {key: float(value) for key, value in metrics.items()}
        return _output([lp.detach() for lp in logprobs], {**values, "loss:sum": float(loss.detach().sum())})

    def optim_step(self, params: types.AdamParams) -> types.OptimStepResponse:
        """One AdamW step on the accumulated gradients (clipped first if asked), then clear them."""
        _check_adam(params)
        grads = [p.grad for p in self._params.values() if p.grad is not None]
        norm = torch.nn.utils.get_total_norm(grads) if grads else torch.zeros(())
        if params.grad_clip_norm > 0 and grads:
            torch.nn.utils.clip_grads_with_norm_(self._params.values(), params.grad_clip_norm, norm)
        for group in self._optimizer.param_groups:
            group.update(
                lr=params.learning_rate,
                betas=(params.beta1, params.beta2),
                eps=params.eps,
                weight_decay=params.weight_decay,
            )
        self._optimizer.step()
        self._optimizer.zero_grad(set_to_none=True)
        return types.OptimStepResponse(metrics={"grad_norm:mean": float(norm)})

    def adapter_state(self) -> AdapterState:
        """A snapshot of the adapter weights."""
        return adapter_state(self.model)

    def optimizer_state(self) -> OptimizerState:
        """A snapshot of the AdamW moments and step counts."""
        return {
            f"{name}{_STATE_SEPARATOR}{key}": value.detach().to("cpu", copy=True)
            for name, param in self._params.items()
            for key, value in self._optimizer.state.get(param, {}).items()
        }

    def load_state(self, adapter: AdapterState, optimizer: OptimizerState | None = None) -> None:
        """Replace the adapter weights and the optimizer state (fresh when None); drop accumulated gradients."""
        per_param: dict[str, dict[str, torch.Tensor]] = {}
        for flat_key, value in (optimizer or {}).items():
            name, _, key = flat_key.rpartition(_STATE_SEPARATOR)
            per_param.setdefault(name, {})[key] = value.clone()
        if unknown := sorted(set(per_param) - set(self._params)):
            raise LocalBadRequestError(f"Optimizer state does not fit this adapter: unknown {unknown[:3]}")
        load_adapter_state(self.model, adapter)
        self._optimizer.zero_grad(set_to_none=True)
        self._optimizer.state.clear()
        for name, state in per_param.items():
            param = self._params[name]  # moments go to the parameter's device, and step counts too for fused AdamW
            self._optimizer.state[param] = {
                k: v.to(param.device) if v.ndim or self._fused else v for k, v in state.items()
            }

    def _lowering(self, attempt: Callable[[], _T], items: Sequence[DatumTensors]) -> _T:
        """``attempt()`` (whose failure leaves the gradients as they were); an out-of-memory error in it frees what it
        can and says what to lower (``accelerator.out_of_memory_error``)."""
        try:
            return attempt()
        except Exception as exc:
            if not is_out_of_memory(exc):
                raise
        tokens = sum(len(item.tokens) for item in items)
        raise out_of_memory_error(
            self.base.placement.device_layer,
            f"a forward_backward of {len(items)} sequences ({tokens} tokens, micro-batches of "
            f"{self._passes.tokens_per_micro_batch})",
            LOWER_ROWS,
        )

    def _checked(self, submitted: Sequence[DatumTensors], required: Sequence[str]) -> list[DatumTensors]:
        """The datums checked (still on the CPU: the passes move them to the device together)."""
        return [check_datum(item, i, required, self.base) for i, item in enumerate(submitted)]

def _output(logprobs: Sequence[torch.Tensor], metrics: dict[str, float]) -> types.ForwardBackwardOutput:
    """The request's output; its metrics with what fell back in the process since the last output (captures,
    compiles, out-of-memory errors: ``accelerator.EVENTS``), where anything did."""
    events = {f"{name}:sum": float(count) for name, count in EVENTS.take().items() if count}
    return types.ForwardBackwardOutput(
        loss_fn_output_type="ArrayRecord",
        loss_fn_outputs=[{"logprobs": types.TensorData.from_torch(lp.cpu())} for lp in logprobs],
        metrics={**metrics, **events},
    )


def _check_adam(params: types.AdamParams) -> None:
    if not isinstance(params, types.AdamParams):
        raise LocalBadRequestError(
            f"The local backend's optimizer is AdamW: pass AdamParams, not {type(params).__name__}"
        )
    problems = [
        f"{field}={value}"
        for field, value, ok in (
            ("learning_rate", params.learning_rate, 0 <= params.learning_rate < math.inf),  # inf: every weight NaN
            ("beta1", params.beta1, 0 <= params.beta1 < 1),
            ("beta2", params.beta2, 0 <= params.beta2 < 1),
            ("eps", params.eps, 0 <= params.eps < math.inf),
            ("weight_decay", params.weight_decay, 0 <= params.weight_decay < math.inf),
            ("grad_clip_norm", params.grad_clip_norm, params.grad_clip_norm >= 0),
        )
        if not ok
    ]
    if problems:
        raise LocalBadRequestError(
            f"Invalid AdamParams: {', '.join(problems)} (learning_rate, eps and weight_decay: finite, 0 or more; "
            "betas in [0, 1); grad_clip_norm 0 or more)"
        )
