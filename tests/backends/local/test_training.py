"""Training clients: ordering, futures, gradient accumulation, AdamW, isolation, input forms."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import tinker
import torch
from tinker import types

from minds_core.backends.local import TINY_MODEL, LocalBadRequestError, ServiceClient, TrainingClient

ADAM = types.AdamParams(learning_rate=1e-2)


def test_create_returns_a_future_of_the_client(service: ServiceClient) -> None:
    future = service.create_lora_training_client(TINY_MODEL, rank=4, seed=0)
    assert isinstance(future, tinker.APIFuture)
    client = future.result()
    assert isinstance(client, TrainingClient)
    info = client.get_info()
    assert (info.model_id, info.lora_rank, info.is_lora) == (client.model_id, 4, True)
    assert info.model_data.model_name == TINY_MODEL and info.model_data.arch == "qwen3"
    assert client.get_tokenizer().decode(client.get_tokenizer().encode("ok")) == "ok"


@pytest.mark.asyncio
async def test_async_training_loop_lowers_the_loss(
    service: ServiceClient, sft_datum: Callable[..., types.Datum]
) -> None:
    client = await service.create_lora_training_client(TINY_MODEL, rank=4, seed=0)
    data = [sft_datum("The cat sat on the mat.")]
    losses = []
    for _ in range(8):
        fwd_bwd = client.forward_backward(data, "cross_entropy")  # submitted back to back
        step = client.optim_step(ADAM)
        losses.append((await fwd_bwd).metrics["loss:sum"])
        await step
    assert losses[-1] < 0.8 * losses[0]


@pytest.mark.asyncio
async def test_requests_run_in_order_off_the_event_loop(
    trainer: TrainingClient, sft_datum: Callable[..., types.Datum]
) -> None:
    data = [sft_datum("Hello, world!")]
    release = threading.Event()
    loop_thread = threading.get_ident()
    worker_threads = []

    def slow_loss(batch: list[types.Datum], logprobs: list[torch.Tensor]) -> tuple[torch.Tensor, dict]:
        worker_threads.append(threading.get_ident())
        assert release.wait(timeout=30)
        return -sum(lp.sum() for lp in logprobs), {"custom:sum": 1.0}

    before = trainer.forward(data, "cross_entropy")
    blocked = trainer.forward_backward_custom(data, slow_loss)
    step = trainer.optim_step(ADAM)
    after = trainer.forward(data, "cross_entropy")
    await asyncio.sleep(0.05)  # the loop keeps running while the worker is busy
    assert not blocked.future().done() and not after.future().done()
    release.set()
    custom, _, first, second = await asyncio.gather(blocked, step, before, after)
    assert worker_threads and worker_threads[0] != loop_thread
    assert custom.metrics["custom:sum"] == 1.0 and "loss:sum" in custom.metrics
    assert second.metrics["loss:sum"] < first.metrics["loss:sum"]  # `after` saw the optimizer step


def test_gradients_accumulate_until_optim_step(
    new_trainer: Callable[..., TrainingClient],
    sft_datum: Callable[..., types.Datum],
    grads_of: Callable[[TrainingClient], dict[str, torch.Tensor]],
    adapter_of: Callable[[TrainingClient], dict[str, torch.Tensor]],
) -> None:
    one_by_one, together = new_trainer(seed=1), new_trainer(seed=1)
    first, second = sft_datum("The cat sat on the mat."), sft_datum("1+1=2")
    a = one_by_one.forward_backward([first], "cross_entropy").result()
    b = one_by_one.forward_backward([second], "cross_entropy").result()
    both = together.forward_backward([first, second], "cross_entropy").result()
    assert a.metrics["loss:sum"] + b.metrics["loss:sum"] == pytest.approx(both.metrics["loss:sum"], rel=1e-6)
    got, want = grads_of(one_by_one), grads_of(together)
    assert got.keys() == want.keys()
    for key in want:  # one padded batch vs two passes: equal up to float32 rounding
        torch.testing.assert_close(got[key], want[key], rtol=1e-4, atol=1e-5 * float(want[key].abs().max()))
    one_by_one.optim_step(ADAM).result()
    together.optim_step(ADAM).result()
    assert grads_of(together) == {}  # cleared by the step
    for key, value in adapter_of(together).items():
        torch.testing.assert_close(adapter_of(one_by_one)[key], value, rtol=1e-5, atol=1e-6)


def test_optim_step_is_adamw_with_clipping_and_decoupled_weight_decay(
    trainer: TrainingClient,
    sft_datum: Callable[..., types.Datum],
    grads_of: Callable[[TrainingClient], dict[str, torch.Tensor]],
) -> None:
    lr, beta1, beta2, eps, wd, clip = 0.05, 0.6, 0.9, 1e-4, 0.1, 0.5
    params = types.AdamParams(learning_rate=lr, beta1=beta1, beta2=beta2, eps=eps, weight_decay=wd, grad_clip_norm=clip)
    named = {n: p for n, p in trainer._trainer.model.named_parameters() if p.requires_grad}
    expected = {name: param.detach().double() for name, param in named.items()}  # float64 reference, by hand
    m = {name: torch.zeros_like(p) for name, p in expected.items()}
    v = {name: torch.zeros_like(p) for name, p in expected.items()}
    for step, text in enumerate(["Hello, world!", "1+1=2, 2+2=4", "The cat sat on the mat."], start=1):
        trainer.forward_backward([sft_datum(text)], "cross_entropy").result()  # a new gradient each step
        grads = {n: g.double() for n, g in grads_of(trainer).items()}
        norm = float(torch.sqrt(sum((g**2).sum() for g in grads.values())))
        scale = min(1.0, clip / norm)
        for name, p in expected.items():
            g = grads.get(name, torch.zeros_like(p)) * scale
            m[name] = beta1 * m[name] + (1 - beta1) * g
            v[name] = beta2 * v[name] + (1 - beta2) * g**2
            update = (m[name] / (1 - beta1**step)) / (torch.sqrt(v[name] / (1 - beta2**step)) + eps)
            expected[name] = p * (1 - lr * wd) - lr * update
        response = trainer.optim_step(params).result()
        assert response.metrics["grad_norm:mean"] == pytest.approx(norm, rel=1e-5)
        for name, param in named.items():
            torch.testing.assert_close(param.detach().double(), expected[name], rtol=1e-5, atol=1e-6)


def test_training_one_client_leaves_another_bit_identical(
    new_trainer: Callable[..., TrainingClient],
    sft_datum: Callable[..., types.Datum],
    adapter_of: Callable[[TrainingClient], dict[str, torch.Tensor]],
) -> None:
    policy, shadow = new_trainer(seed=0), new_trainer(seed=0)
    data = [sft_datum("The cat sat on the mat.")]
    shadow.forward_backward(data, "cross_entropy").result()
    shadow.optim_step(ADAM).result()
    weights = adapter_of(shadow)
    logprobs = shadow.forward(data, "cross_entropy").result().loss_fn_outputs[0]["logprobs"].to_numpy()
    for _ in range(3):
        policy.forward_backward(data, "cross_entropy")
        policy.optim_step(ADAM).result()
    assert all(torch.equal(weights[k], v) for k, v in adapter_of(shadow).items())
    again = shadow.forward(data, "cross_entropy").result().loss_fn_outputs[0]["logprobs"].to_numpy()
    assert np.array_equal(logprobs, again)
    trained = policy.forward(data, "cross_entropy").result().loss_fn_outputs[0]["logprobs"].to_numpy()
    assert not np.array_equal(trained, again)


def test_loss_inputs_in_every_form_give_the_same_loss(
    trainer: TrainingClient, encode: Callable[[str], list[int]]
) -> None:
    seq = encode("1+1=2, 2+2=4")
    targets, weights = seq[1:], [0.0] * 4 + [1.0] * (len(seq) - 5)
    forms = [
        (types.TensorData.from_numpy(np.array(targets)), types.TensorData.from_numpy(np.array(weights, np.float32))),
        (torch.tensor(targets), torch.tensor(weights)),
        (np.array(targets), np.array(weights)),
        (targets, weights),
    ]
    losses = []
    for target_form, weight_form in forms:
        datum = types.Datum(model_input=types.ModelInput.from_ints(seq[:-1]), loss_fn_inputs={})
        datum.loss_fn_inputs.update(target_tokens=target_form, weights=weight_form)  # raw, not coerced by Datum
        losses.append(trainer.forward([datum], "cross_entropy").result().metrics["loss:sum"])
    assert losses == pytest.approx([losses[0]] * 4)
    doubled = types.Datum(
        model_input=types.ModelInput.from_ints(seq[:-1]),
        loss_fn_inputs={"target_tokens": targets, "weights": [2 * w for w in weights]},
    )
    assert trainer.forward([doubled], "cross_entropy").result().metrics["loss:sum"] == pytest.approx(2 * losses[0])


def test_forward_returns_logprobs_per_target_and_no_gradients(
    trainer: TrainingClient,
    sft_datum: Callable[..., types.Datum],
    grads_of: Callable[[TrainingClient], dict[str, torch.Tensor]],
) -> None:
    data = [sft_datum("Hello, world!"), sft_datum("The cat sat on the mat.")]  # different lengths: padded batch
    out = trainer.forward(data, "cross_entropy").result()
    assert out.loss_fn_output_type == "ArrayRecord"
    lengths = [len(d.loss_fn_inputs["target_tokens"].tolist()) for d in data]
    assert [o["logprobs"].shape for o in out.loss_fn_outputs] == [[n] for n in lengths]
    total = -sum(float(o["logprobs"].to_torch().sum()) for o in out.loss_fn_outputs)
    assert out.metrics["loss:sum"] == pytest.approx(total, rel=1e-6)
    assert grads_of(trainer) == {}
    alone = trainer.forward(data[:1], "cross_entropy").result().loss_fn_outputs[0]["logprobs"].to_torch()
    torch.testing.assert_close(alone, out.loss_fn_outputs[0]["logprobs"].to_torch(), rtol=0, atol=1e-5)


def test_custom_loss_gradients_match_the_equivalent_builtin(
    new_trainer: Callable[..., TrainingClient],
    sft_datum: Callable[..., types.Datum],
    grads_of: Callable[[TrainingClient], dict[str, torch.Tensor]],
) -> None:
    builtin, custom = new_trainer(seed=2), new_trainer(seed=2)
    data = [sft_datum("The cat sat on the mat."), sft_datum("1+1=2")]

    def nll(batch: list[types.Datum], logprobs: list[torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        loss = -sum((lp * d.loss_fn_inputs["weights"].to_torch()).sum() for d, lp in zip(batch, logprobs, strict=True))
        return loss, {"custom/nll:sum": float(loss.detach())}

    out = custom.forward_backward_custom(data, nll).result()
    ref = builtin.forward_backward(data, "cross_entropy").result()
    assert out.metrics["loss:sum"] == pytest.approx(ref.metrics["loss:sum"], rel=1e-6)
    assert out.metrics["custom/nll:sum"] == pytest.approx(ref.metrics["loss:sum"], rel=1e-6)
    for key, want in grads_of(builtin).items():
        torch.testing.assert_close(grads_of(custom)[key], want, rtol=1e-5, atol=1e-7)


def test_lora_targets_follow_the_flags(new_trainer: Callable[..., TrainingClient], adapter_of) -> None:
    everything = adapter_of(new_trainer())
    assert any("lm_head" in k for k in everything) and any("q_proj" in k for k in everything)
    assert any("gate_proj" in k for k in everything)
    mlp_only = adapter_of(new_trainer(train_attn=False, train_unembed=False))
    assert mlp_only and all("mlp" in k for k in mlp_only)
    with pytest.raises(LocalBadRequestError, match="No LoRA target modules"):
        new_trainer(train_attn=False, train_mlp=False, train_unembed=False)


@pytest.mark.parametrize(
    ("loss_fn", "inputs", "config", "message"),
    [
        ("cross_entropy", {"target_tokens": [1, 2]}, None, "must align"),
        ("cross_entropy", {"target_tokens": [1, 2, 999]}, None, "outside the vocabulary"),
        ("cross_entropy", {"target_tokens": [1, 2, 3], "weights": [1.0]}, None, "must match"),
        ("ppo", {"target_tokens": [1, 2, 3], "advantages": [1.0] * 3}, None, "lacks loss_fn_inputs"),
        ("ppo", {"target_tokens": [1, 2, 3]}, {"clip": 1.0}, "unknown"),
        ("reinforce", {"target_tokens": [1, 2, 3]}, None, "Unknown loss_fn"),
    ],
)
def test_bad_datums_fail_their_request_only(
    trainer: TrainingClient, sft_datum: Callable[..., types.Datum], loss_fn, inputs, config, message
) -> None:
    bad = types.Datum(model_input=types.ModelInput.from_ints([72, 105, 33]), loss_fn_inputs=inputs)
    failed = trainer.forward_backward([bad], loss_fn, config)
    good = trainer.forward_backward([sft_datum("Hello, world!")], "cross_entropy")
    with pytest.raises(tinker.BadRequestError, match=message):
        failed.result()
    assert good.result().metrics["loss:sum"] > 0


def test_datums_that_cannot_be_converted_fail_their_request_only(trainer: TrainingClient) -> None:
    empty = types.Datum(model_input=types.ModelInput.from_ints([]), loss_fn_inputs={"target_tokens": []})
    odd = types.Datum(model_input=types.ModelInput.from_ints([1, 2]), loss_fn_inputs={"target_tokens": [2, 3]})
    odd.loss_fn_inputs["weights"] = "heavy"
    failed = [trainer.forward([empty], "cross_entropy"), trainer.forward_backward([odd], "cross_entropy")]
    with pytest.raises(LocalBadRequestError, match="datum 0 model_input is empty"):
        failed[0].result()
    with pytest.raises(LocalBadRequestError, match=r"loss_fn_inputs\['weights'\] must be TensorData.*got str"):
        failed[1].result()


def test_bad_tokens_and_optimizer_params_are_rejected(trainer: TrainingClient, sft_datum) -> None:
    out_of_vocab = types.Datum(
        model_input=types.ModelInput.from_ints([1, 5000]), loss_fn_inputs={"target_tokens": [1, 2]}
    )
    with pytest.raises(LocalBadRequestError, match="model_input has token 5000"):
        trainer.forward([out_of_vocab], "cross_entropy").result()
    with pytest.raises(LocalBadRequestError, match="beta2"):
        trainer.optim_step(types.AdamParams(beta2=1.5)).result()
    with pytest.raises(ValueError, match="No data"):
        trainer.forward_backward([], "cross_entropy")
    assert trainer.optim_step(ADAM).result().metrics is not None


@pytest.mark.parametrize("coerced", [False, True], ids=["raw", "coerced"])
@pytest.mark.parametrize(
    "ones", [torch.ones, lambda n: np.ones(n, np.float32), lambda n: [1.0] * n], ids=["torch", "numpy", "list"]
)
def test_datums_are_taken_at_submission_not_when_the_request_runs(
    trainer: TrainingClient, encode: Callable[[str], list[int]], ones: Callable[[int], Any], coerced: bool
) -> None:
    seq = encode("1+1=2, 2+2=4")
    weights = ones(len(seq) - 1)
    if coerced:  # Datum makes TensorData that shares torch/numpy memory
        inputs = {"target_tokens": seq[1:], "weights": weights}
        datum = types.Datum(model_input=types.ModelInput.from_ints(seq[:-1]), loss_fn_inputs=inputs)
    else:
        datum = types.Datum(model_input=types.ModelInput.from_ints(seq[:-1]), loss_fn_inputs={"target_tokens": seq[1:]})
        datum.loss_fn_inputs["weights"] = weights  # raw: the caller's own buffer
    expected = trainer.forward([datum], "cross_entropy").result().metrics["loss:sum"]
    release = threading.Event()
    trainer._queue.submit(lambda: release.wait(timeout=30))  # hold the worker (a test-only peek at its queue)
    future = trainer.forward([datum], "cross_entropy")
    for i in range(len(weights)):
        weights[i] = 0.0
    datum.model_input.chunks[0].tokens[:] = [0] * (len(seq) - 1)
    release.set()
    assert expected > 0 and future.result().metrics["loss:sum"] == pytest.approx(expected, rel=1e-6)
