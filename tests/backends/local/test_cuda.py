"""The local backend on a CUDA GPU: bf16 base weights, float32 LoRA weights and AdamW state.

The numerics checks of the CPU tests (sampler vs trainer log-probs, built-in losses vs a
float64 custom loss, snapshots, saved state) run here on ``device="cuda"`` at bf16's
tolerance. Skipped where torch sees no GPU; ``test_placement.py`` runs the bf16 code path
on the CPU everywhere, and ``test_losses.py`` the loss formulas on every device there is.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from tinker import types

from minds_core.backends.local import TINY_MODEL, ServiceClient, TrainingClient
from minds_core.backends.local.model.placement import resolve_placement
from minds_core.testing import QUICK_RUN, run_minds

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

LOGPROB_MAX_ERROR, LOGPROB_MEAN_ERROR = 0.2, 0.03
"""Sampler vs trainer log-probs, the same bf16 weights: a decode step and a full pass sum in other orders,
and bf16 rounds logits to 2^-8 of their size (0.03 at 8), so single tokens differ by up to ~0.13."""

ADAM = types.AdamParams(learning_rate=2e-2)
TEXTS = ("The cat sat on the mat.", "1+1=2, 2+2=4", "Hello, world!")


@pytest.fixture
def gpu_service(tmp_path: Path) -> Iterator[ServiceClient]:
    with ServiceClient(checkpoint_root=tmp_path / "checkpoints", device="cuda") as client:
        yield client


@pytest.fixture
def gpu_trainer(gpu_service: ServiceClient) -> TrainingClient:
    return gpu_service.create_lora_training_client(TINY_MODEL, rank=4, seed=0).result()


def assert_close_logprobs(got: list[float], want: list[float]) -> None:
    error = np.abs(np.asarray(got) - np.asarray(want))
    assert error.max() < LOGPROB_MAX_ERROR and error.mean() < LOGPROB_MEAN_ERROR, (error.max(), error.mean())


def sft(trainer: TrainingClient, text: str) -> types.Datum:
    seq = list(trainer.get_tokenizer().encode(text))
    return types.Datum(model_input=types.ModelInput.from_ints(seq[:-1]), loss_fn_inputs={"target_tokens": seq[1:]})


def trained(trainer: TrainingClient, steps: int = 3) -> TrainingClient:
    """``trainer`` after ``steps`` SFT steps, done (a test that then reaches into its model must not race them)."""
    data = [sft(trainer, text) for text in TEXTS]
    for _ in range(steps):
        trainer.forward_backward(data, "cross_entropy")
        trainer.optim_step(ADAM).result()
    return trainer


def test_auto_means_the_gpu_with_bf16_base_weights_and_float32_lora(gpu_trainer: TrainingClient) -> None:
    placement = resolve_placement("auto")
    assert placement.device.type == "cuda" and placement.dtype in (torch.bfloat16, torch.float16)
    model = gpu_trainer._trainer.model
    frozen = [p for p in model.parameters() if not p.requires_grad]
    trainable = [p for p in model.parameters() if p.requires_grad]
    assert trainable and all(p.is_cuda and p.dtype == torch.float32 for p in trainable)
    assert frozen and all(p.is_cuda and p.dtype == placement.dtype for p in frozen)


def test_training_lowers_the_loss_and_keeps_float32_optimizer_state(gpu_trainer: TrainingClient) -> None:
    data = [sft(gpu_trainer, text) for text in TEXTS]
    losses = []
    for _ in range(8):
        losses.append(gpu_trainer.forward_backward(data, "cross_entropy").result().metrics["loss:sum"])
        gpu_trainer.optim_step(ADAM).result()
    assert losses[-1] < 0.8 * losses[0]
    state = gpu_trainer._trainer.optimizer_state()
    moments = [v for k, v in state.items() if k.endswith(("exp_avg", "exp_avg_sq"))]
    assert moments and all(v.dtype == torch.float32 for v in moments)


def test_sampler_log_probs_match_the_trainer(gpu_trainer: TrainingClient) -> None:
    trainer = trained(gpu_trainer)
    sampler = trainer.save_weights_and_get_sampling_client().result()
    data = [sft(trainer, text) for text in TEXTS]
    forward = trainer.forward(data, "cross_entropy").result()
    for datum, out in zip(data, forward.loss_fn_outputs, strict=True):
        tokens = datum.model_input.to_ints() + [datum.loss_fn_inputs["target_tokens"].tolist()[-1]]
        scored = sampler.compute_logprobs(types.ModelInput.from_ints(tokens)).result()
        assert_close_logprobs(scored[1:], out["logprobs"].to_numpy())
    prompt = list(trainer.get_tokenizer().encode("<|im_start|>user\n2+2=<|im_end|>\n<|im_start|>assistant\n"))
    params = types.SamplingParams(max_tokens=24, seed=7, temperature=0.7, stop=[])
    response = sampler.sample(types.ModelInput.from_ints(prompt), 4, params).result()
    for seq in response.sequences:
        assert len(seq.tokens) == len(seq.logprobs) == 24
        rescored = sampler.compute_logprobs(types.ModelInput.from_ints(prompt + seq.tokens)).result()[len(prompt) :]
        assert_close_logprobs(rescored, seq.logprobs)
    again = sampler.sample(types.ModelInput.from_ints(prompt), 4, params).result()
    assert [s.tokens for s in again.sequences] == [s.tokens for s in response.sequences]  # seeded on the GPU too


def test_builtin_loss_gradients_match_a_float64_custom_loss(gpu_service: ServiceClient, off_policy) -> None:
    def make() -> TrainingClient:
        return gpu_service.create_lora_training_client(TINY_MODEL, rank=4, seed=3).result()

    builtin, custom = make(), make()
    data = off_policy(builtin, [sft(builtin, text) for text in TEXTS])

    def float64_importance_sampling(batch: list[types.Datum], logprobs: list[torch.Tensor]):
        total = torch.zeros((), dtype=torch.float64, device=logprobs[0].device)
        for datum, lp in zip(batch, logprobs, strict=True):
            q = datum.loss_fn_inputs["logprobs"].to_torch().double().to(lp.device)
            adv = datum.loss_fn_inputs["advantages"].to_torch().double().to(lp.device)
            total = total - (torch.exp(lp.double() - q) * adv).sum()
        return total, {}

    out = builtin.forward_backward(data, "importance_sampling").result()
    ref = custom.forward_backward_custom(data, float64_importance_sampling).result()
    assert out.metrics["loss:sum"] == pytest.approx(ref.metrics["loss:sum"], rel=1e-4)
    grads = {}
    for client in (builtin, custom):
        named = client._trainer.model.named_parameters()
        grads[id(client)] = {n: p.grad.clone() for n, p in named if p.requires_grad and p.grad is not None}
    got, want = grads[id(builtin)], grads[id(custom)]
    assert got.keys() == want.keys() and got
    for key in want:
        scale = float(want[key].abs().max())
        torch.testing.assert_close(got[key], want[key], rtol=0, atol=1e-3 * scale + 1e-7, msg=key)


def test_samplers_are_snapshots_and_saved_state_round_trips(gpu_service: ServiceClient, gpu_trainer) -> None:
    trainer = trained(gpu_trainer, steps=2)
    probe = types.ModelInput.from_ints(list(trainer.get_tokenizer().encode(TEXTS[0])))
    before = trainer.save_weights_and_get_sampling_client().result()
    scored = before.compute_logprobs(probe).result()
    saved = trainer.save_state("two").result().path
    trained(trainer, steps=2)
    assert before.compute_logprobs(probe).result() == scored  # an older sampler never sees new weights
    after = trainer.save_weights_and_get_sampling_client().result().compute_logprobs(probe).result()
    assert np.abs(np.array(after[1:]) - np.array(scored[1:])).max() > 1e-3
    resumed = gpu_service.create_training_client_from_state_with_optimizer(saved).result()
    again = resumed.save_weights_and_get_sampling_client().result().compute_logprobs(probe).result()
    np.testing.assert_allclose(again[1:], scored[1:], rtol=0, atol=1e-6)


@pytest.mark.slow
def test_minds_run_trains_on_the_gpu(tmp_path: Path) -> None:
    result = run_minds(
        "--env", "ghost_trace", "--steps", "2", "--backend", "local",
        runs_dir=tmp_path / "runs", overrides=[*QUICK_RUN, "local.device=cuda"],
    )  # fmt: skip
    result.assert_trained_unless_said_why()
    assert result.steps == [0, 1] and result.rollouts


@pytest.mark.xfail(
    strict=True,
    reason="H100, 2026-11-26: the packed step's logprobs match each datum alone, but layer 0's q_proj lora_A "
    "gradient differs by more than 2% of its largest element (masked memory-efficient attention packed, flash "
    "attention alone); the float64 CPU test holds packing exact. Open: tolerance or a real bf16 difference",
)
def test_packed_gradients_match_each_datum_alone_within_bf16_tolerance(gpu_service: ServiceClient) -> None:
    packed, alone = (gpu_service.create_lora_training_client(TINY_MODEL, rank=4, seed=5).result() for _ in "ab")
    for client in (packed, alone):  # one step first, so that lora_B is not zero and every factor gets gradients
        trained(client, steps=1)
    gen = torch.Generator().manual_seed(0)
    data = []
    for n in (300, 20, 150, 7, 90, 300, 41):  # mixed lengths: several datums share rows
        tokens = torch.randint(0, 250, (n + 1,), generator=gen).tolist()
        inputs = {"target_tokens": tokens[1:], "logprobs": [-2.0] * n, "advantages": torch.randn(n, generator=gen)}
        data.append(types.Datum(model_input=types.ModelInput.from_ints(tokens[:-1]), loss_fn_inputs=inputs))
    out = packed.forward_backward(data, "importance_sampling").result()
    singles = [alone.forward_backward([datum], "importance_sampling").result() for datum in data]
    for got, single in zip(out.loss_fn_outputs, singles, strict=True):
        assert_close_logprobs(got["logprobs"].to_numpy(), single.loss_fn_outputs[0]["logprobs"].to_numpy())
    grads = []
    for client in (packed, alone):
        named = client._trainer.model.named_parameters()
        grads.append({n: p.grad.clone() for n, p in named if p.requires_grad and p.grad is not None})
    assert grads[0].keys() == grads[1].keys() and grads[0]
    for key, want in grads[1].items():
        scale = float(want.abs().max())
        torch.testing.assert_close(grads[0][key], want, rtol=0, atol=2e-2 * scale + 1e-6, msg=key)


def test_chunked_logprobs_equal_full_logprobs_and_hold_one_chunk_of_a_large_vocabulary() -> None:
    from minds_core.backends.local.model.head_logprobs import OutputHead, target_logprobs

    vocab, width = 151936, 256
    layer = torch.nn.Linear(width, vocab, bias=False, device="cuda", dtype=torch.bfloat16).requires_grad_(False)
    head = OutputHead(layer, vocab)
    gen = torch.Generator(device="cuda").manual_seed(0)
    hidden = torch.randn(512, width, device="cuda", dtype=torch.bfloat16, generator=gen)
    targets = torch.randint(0, vocab, (512, 1), device="cuda", generator=gen)
    torch.testing.assert_close(head.logprobs(hidden, targets), target_logprobs(layer(hidden), targets), rtol=0, atol=2e-2)
    many = torch.randn(8192, width, device="cuda", dtype=torch.bfloat16, generator=gen).requires_grad_(True)
    targets = torch.randint(0, vocab, (8192, 1), device="cuda", generator=gen)
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    head.logprobs(many, targets).sum().backward()
    peak = torch.cuda.max_memory_allocated() - before
    assert many.grad is not None and torch.isfinite(many.grad).all()
    assert peak < 2 * 2**30, peak  # a few copies of a 441-token chunk; these tokens' float32 logits alone take 4.6 GiB


def test_adamw_is_fused_on_the_gpu_and_resumed_state_steps(gpu_service: ServiceClient, gpu_trainer) -> None:
    trainer = trained(gpu_trainer, steps=2)
    assert trainer._trainer._optimizer.defaults["fused"] is True
    saved = trainer.save_state("fused").result().path
    resumed = gpu_service.create_training_client_from_state_with_optimizer(saved).result()
    resumed.forward_backward([sft(resumed, TEXTS[0])], "cross_entropy")
    resumed.optim_step(ADAM).result()  # fused AdamW takes the resumed step counts on the GPU
    state = resumed._trainer._optimizer.state
    assert state and all(s["step"].is_cuda and float(s["step"]) == 3 for s in state.values())


def shared_prompts(trainer: TrainingClient, groups: int = 2, samples: int = 4) -> list[types.Datum]:
    """``groups`` prompts of 120 tokens x ``samples`` completions of 20-80 tokens each (a group's rollouts)."""
    gen = torch.Generator().manual_seed(11)
    data = []
    for _ in range(groups):
        prompt = torch.randint(0, 250, (120,), generator=gen).tolist()
        for _ in range(samples):
            tokens = prompt + torch.randint(0, 250, (int(torch.randint(20, 80, ())),), generator=gen).tolist()
            inputs = {"target_tokens": tokens[1:], "logprobs": [-2.0] * (len(tokens) - 1),
                      "advantages": torch.randn(len(tokens) - 1, generator=gen)}  # fmt: skip
            data.append(types.Datum(model_input=types.ModelInput.from_ints(tokens[:-1]), loss_fn_inputs=inputs))
    return data


def test_flex_attention_block_masks_match_the_dense_mask_within_bf16_tolerance(gpu_trainer: TrainingClient) -> None:
    from minds_core.backends.local.model import packed_attention
    from minds_core.backends.local.training.datums import submitted_datum
    from minds_core.backends.local.training.passes import LossPasses

    placement = resolve_placement("cuda")
    assert placement.packed_attention == "flex"  # triton comes with CUDA builds of torch
    model = trained(gpu_trainer, steps=1)._trainer.model
    data = shared_prompts(gpu_trainer) + [sft(gpu_trainer, text) for text in TEXTS]
    items = [submitted_datum(datum, i) for i, datum in enumerate(data)]
    results = []
    for attention in ("flex", "dense"):
        model.zero_grad(set_to_none=True)
        passes = LossPasses(
            model, compute_dtype=placement.dtype, tokens_per_micro_batch=512, share_prefixes=True, attention=attention
        )
        logprobs, _, _ = passes.run(items, lambda lp, inputs: -(lp * inputs["advantages"]).sum(), backward=True)
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        results.append((logprobs, grads))
        assert packed_attention.flex_failure() is None  # FlexAttention ran: no dense rerun stands in for it
    (flex_lp, flex_grads), (dense_lp, dense_grads) = results
    for got, want in zip(flex_lp, dense_lp, strict=True):
        assert_close_logprobs(got.numpy(), want.numpy())
    assert flex_grads.keys() == dense_grads.keys() and flex_grads
    for key, want in dense_grads.items():
        torch.testing.assert_close(flex_grads[key], want, rtol=0, atol=2e-2 * float(want.abs().max()) + 1e-6, msg=key)


def test_prompt_sharing_follows_the_times_measured_on_the_gpu(gpu_trainer: TrainingClient) -> None:
    from minds_core.backends.local.training.pass_cost import TRIALS

    data = shared_prompts(gpu_trainer)
    outputs = [gpu_trainer.forward_backward(data, "importance_sampling").result().metrics for _ in range(2 * TRIALS + 1)]
    assert [m["prompt_sharing:mean"] for m in outputs[:-1]] == [1.0, 0.0] * TRIALS
    measured = outputs[-2]  # timed by CUDA events
    assert measured["ms_per_ktoken_sharing:mean"] > 0 and measured["ms_per_ktoken_whole:mean"] > 0
    faster = measured["ms_per_ktoken_sharing:mean"] <= measured["ms_per_ktoken_whole:mean"]
    assert outputs[-1]["prompt_sharing:mean"] == float(faster)


def test_laying_out_a_base_at_load_leaves_no_second_copy_of_its_weights_cached(tmp_path: Path) -> None:
    """Sibling weights are laid out at load in new buffers (``sibling_weights``); the per-layer ones they replace,
    freed, must not stay in torch's cache: ``torch.cuda.mem_get_info``, which sizes the decode buffers and
    ``minds serve``'s sampler budget, does not count cached memory as free."""
    from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

    from minds_core.backends.local.model.models import BaseModelRegistry
    from minds_core.backends.local.model.tiny_model import tiny_model_path

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path())
    config = Qwen3Config(
        vocab_size=len(tokenizer), hidden_size=2048, intermediate_size=8192, num_hidden_layers=2,
        num_attention_heads=16, num_key_value_heads=4, head_dim=128, tie_word_embeddings=True,
    )  # fmt: skip
    Qwen3ForCausalLM(config).to(torch.bfloat16).save_pretrained(tmp_path)  # gate/up 32 MiB each: blocks of their own
    tokenizer.save_pretrained(tmp_path)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    reserved = torch.cuda.memory_reserved()
    base = BaseModelRegistry(resolve_placement("cuda")).get(str(tmp_path))
    weights = sum(p.numel() * p.element_size() for p in base.model.parameters())
    grown = torch.cuda.memory_reserved() - reserved
    assert grown < 1.1 * weights + (32 << 20), (grown, weights)  # the replaced gate/up kept cached: ~1.5 x weights
