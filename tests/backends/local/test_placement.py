"""Device selection (``local.device``) and the CUDA code path's dtypes.

The bf16-weights / fp32-LoRA path runs on the CPU with a bf16 base everywhere, and on
the GPU where there is one, at a looser tolerance than float32's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest
import torch
from tinker import types

from minds_core.backends import create_local_service
from minds_core.backends.local import LocalBadRequestError
from minds_core.backends.local.model.lora import LoraSpec
from minds_core.backends.local.model.models import BaseModelRegistry
from minds_core.backends.local.model.placement import Placement, resolve_placement
from minds_core.backends.local.sampling.engine import SamplingEngine
from minds_core.backends.local.training.datums import submitted_datum
from minds_core.backends.local.training.engine import TrainingEngine
from minds_core.backends.local.training.passes import LossPasses
from minds_core.base.errors import ConfigError, UsageError
from minds_core.config import load_config

BF16_ON_CPU = Placement(torch.device("cpu"), torch.bfloat16)
BF16_LOGPROB_MAX_ERROR, BF16_LOGPROB_MEAN_ERROR = 0.2, 0.03
"""Log-probs of one model at bf16's resolution (as ``test_cuda.py`` holds the sampler to the trainer)."""
no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the behaviour without a GPU")


@no_gpu
def test_auto_and_cpu_mean_float32_on_the_cpu_without_a_gpu() -> None:
    for device in ("auto", "cpu"):
        assert resolve_placement(device) == Placement(torch.device("cpu"), torch.float32)


@no_gpu
def test_cuda_without_a_gpu_is_a_usage_error_naming_the_key(tmp_path) -> None:
    with pytest.raises(LocalBadRequestError, match="local.device is 'cuda' but torch sees no CUDA device"):
        resolve_placement("cuda")
    config = load_config(None, ["env.id=x", "local.device=cuda", f"runs_dir={tmp_path}"])
    with pytest.raises(UsageError, match="set local.device to 'auto' or 'cpu'"):
        create_local_service(config, tmp_path)


def test_the_config_key_takes_only_known_devices(tmp_path) -> None:
    assert load_config(None, ["env.id=x"]).local.device == "auto"
    with pytest.raises(ConfigError, match="local.device.*must be one of auto, cpu, cuda"):
        load_config(None, ["env.id=x", "local.device=gpu"])
    service = create_local_service(load_config(None, ["env.id=x", "local.device=cpu", f"runs_dir={tmp_path}"]), tmp_path)
    service.close("success")


CUDA = pytest.param(
    "cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU: the CPU runs the bf16 path")
)


@pytest.fixture(scope="module", params=["cpu", CUDA])
def bf16_base(request: pytest.FixtureRequest):
    """The tiny model with bf16 weights: on the CPU everywhere, and on the GPU where there is one. Its samplers
    keep the adapter unmerged (the float32 side path the small-update check below needs; ``test_merged`` holds
    the merged path to it)."""
    placement = BF16_ON_CPU if request.param == "cpu" else resolve_placement("cuda")
    return BaseModelRegistry(replace(placement, merge_adapters=False)).get("minds-tiny")


@pytest.mark.slow  # a third of a CPU-second or more of the local engine's numerics: the whole suite runs it
def test_bf16_base_trains_float32_lora_and_optimizer_state(bf16_base, encode: Callable[[str], list[int]]) -> None:
    trainer = TrainingEngine(bf16_base, LoraSpec(rank=4), seed=0)
    assert bf16_base.model.get_input_embeddings().weight.dtype in (torch.bfloat16, torch.float16)
    trainable = [p for p in trainer.model.parameters() if p.requires_grad]
    assert trainable and all(p.dtype == torch.float32 for p in trainable)
    seq = encode("The cat sat on the mat.")
    datum = submitted_datum(
        types.Datum(model_input=types.ModelInput.from_ints(seq[:-1]), loss_fn_inputs={"target_tokens": seq[1:]}), 0
    )
    losses = []
    for _ in range(6):
        losses.append(trainer.forward_backward([datum], "cross_entropy", None, backward=True).metrics["loss:sum"])
        trainer.optim_step(types.AdamParams(learning_rate=2e-2))
    assert losses[-1] < 0.8 * losses[0]
    state = trainer.optimizer_state()
    assert state and all(v.dtype == torch.float32 for k, v in state.items() if k.endswith(("exp_avg", "exp_avg_sq")))

    # A tiny step more: an update far below bf16's resolution of the weights must still reach the sampler
    # (the float32 master weights keep it, though the trainer's bf16 compute of the factors rounds it away).
    before = torch.tensor(SamplingEngine.for_adapter(bf16_base, trainer.spec, trainer.adapter_state()).prompt_logprobs(seq)[1:])
    trainer.forward_backward([datum], "cross_entropy", None, backward=True)
    trainer.optim_step(types.AdamParams(learning_rate=1e-5))
    sampler = SamplingEngine.for_adapter(bf16_base, trainer.spec, trainer.adapter_state())
    scored = trainer.forward_backward([datum], "cross_entropy", None, backward=False).loss_fn_outputs[0]
    sampled = torch.tensor(sampler.prompt_logprobs(seq)[1:])
    assert (sampled - before).abs().max() > 0
    error = (sampled - scored["logprobs"].to_torch()).abs()  # float32 factors vs the trainer's bf16 compute of them
    assert error.max() < BF16_LOGPROB_MAX_ERROR and error.mean() < BF16_LOGPROB_MEAN_ERROR, (error.max(), error.mean())
    future = sampler.submit(seq[:5], 3, types.SamplingParams(max_tokens=4, temperature=1.0, seed=1, stop=[]))
    sampler.drive()
    assert [len(s.tokens) for s in future.result().sequences] == [4, 4, 4]


def test_bf16_shared_prefix_matches_unshared_at_a_looser_tolerance(
    bf16_base, encode: Callable[[str], list[int]]
) -> None:
    trainer = TrainingEngine(bf16_base, LoraSpec(rank=4), seed=0)
    prompt = encode("<|im_start|>user\nWhat is 12+34? Answer with a number.<|im_end|>\n<|im_start|>assistant\n")
    items = []
    for i, completion in enumerate(("46", "It is 46.", "Forty-six")):
        seq = prompt + encode(completion)
        datum = types.Datum(model_input=types.ModelInput.from_ints(seq[:-1]), loss_fn_inputs={"target_tokens": seq[1:]})
        items.append(submitted_datum(datum, i).to(bf16_base.model.device))

    def grads(share: bool) -> dict[str, torch.Tensor]:
        trainer.model.zero_grad(set_to_none=True)
        passes = LossPasses(
            trainer.model,
            compute_dtype=bf16_base.placement.dtype,
            tokens_per_micro_batch=bf16_base.placement.train_tokens_per_micro_batch,
            share_prefixes=share,
        )
        passes.run(items, lambda lp, inputs: -lp.sum(), backward=True)
        return {n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.grad is not None}

    shared, whole = grads(True), grads(False)
    assert shared.keys() == whole.keys() and shared
    for name, grad in shared.items():
        scale = float(whole[name].abs().max())
        torch.testing.assert_close(grad, whole[name], rtol=0, atol=2e-2 * scale + 1e-6, msg=name)
