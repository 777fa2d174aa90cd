"""Sibling LoRA layers trained as one group: peft's outputs and gradients, in fewer products, on the same parameters."""

from __future__ import annotations

import copy
from collections import Counter

import pytest
import torch
from peft import LoraConfig, get_peft_model, get_peft_model_state_dict
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from minds_core.backends.local import TrainingClient
from minds_core.backends.local.model.lora import LoraSpec, attach_lora
from minds_core.backends.local.model.sibling_weights import lay_out, sibling_groups
from minds_core.backends.local.training import joined_lora
from minds_core.backends.local.training.joined_lora import join_lora, use_joined

from .conftest import SEQUENCES
from .test_fast_decode import models

TOKENS = torch.tensor([[3, 17, 250, 9, 41, 7, 7, 120], [5, 1, 299, 64, 2, 88, 13, 0]])


def loaded(name: str, dtype: torch.dtype = torch.float64) -> nn.Module:
    """One of ``test_fast_decode``'s models in ``dtype``, frozen, its siblings laid out as ``models._load`` does."""
    model = models()[name].to(dtype).eval().requires_grad_(False)
    for group in sibling_groups(model):
        if len(group) > 1:
            lay_out(group)
    return model


def adapted(base: nn.Module, seed: int = 3) -> nn.Module:
    """A rank-4 adapter on every linear layer, both factors random (``lora_B`` starts at zero otherwise)."""
    model = attach_lora(base, LoraSpec(rank=4), seed=0)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            if param.requires_grad:
                param.copy_(torch.randn(param.shape, generator=generator, dtype=param.dtype) * 0.2)
    return model


def loss_and_grads(model: nn.Module, autocast: torch.dtype | None = None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    with torch.autocast("cpu", dtype=autocast or torch.bfloat16, enabled=autocast is not None):
        logits = model(input_ids=TOKENS).logits.double()
    loss = logits.log_softmax(-1)[..., 5].sum() + logits.pow(2).mean()
    loss.backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.requires_grad}
    model.zero_grad(set_to_none=True)
    return logits.detach(), grads


class Products(TorchDispatchMode):
    """Counts aten ops, and the matrix products that read a ``lora_A`` factor's memory."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.storages = {m.weight.untyped_storage().data_ptr() for n, m in model.named_modules() if n.endswith(".lora_A.default")}
        self.ops: Counter[str] = Counter()
        self.a_products = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[func.__name__] += 1
        if func.__name__.split(".")[0] in ("mm", "addmm", "addmm_", "bmm") and any(
            isinstance(arg, torch.Tensor) and arg.untyped_storage().data_ptr() in self.storages for arg in args
        ):
            self.a_products += 1
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("name", list(models()))
@pytest.mark.slow  # a CPU-second or more of float64 numerics or bombs: the whole suite runs it
def test_joined_groups_give_peft_outputs_and_gradients_in_float64(name: str) -> None:
    base = loaded(name)
    theirs, ours = adapted(base), adapted(base)
    groups = join_lora(ours, base)
    attention, mlp = base.model.layers[0].self_attn, base.model.layers[0].mlp
    sizes = [len(group.layers) for group in groups]
    # Per layer: q/k/v read one input, o another (o's input width is q's in these models: its sibling group
    # holds all four), gate/up one, down alone; then the output layer.
    assert sizes == [3, 1, 2, 1] * 2 + [1]
    assert [layer.base_layer.weight for layer in groups[0].layers] == [attention.q_proj.weight, attention.k_proj.weight, attention.v_proj.weight]
    assert groups[2].layers[0].base_layer.weight is mlp.gate_proj.weight
    logits, grads = loss_and_grads(theirs)
    got, got_grads = loss_and_grads(ours)
    torch.testing.assert_close(got, logits, rtol=1e-12, atol=1e-12)
    assert got_grads.keys() == grads.keys()
    for key, grad in grads.items():
        torch.testing.assert_close(got_grads[key], grad, rtol=1e-10, atol=1e-12, msg=key)
    # The same parameters as peft's, under the same keys: the adapter state saved and loaded is unchanged.
    assert get_peft_model_state_dict(ours).keys() == get_peft_model_state_dict(theirs).keys()
    for key, value in get_peft_model_state_dict(theirs).items():
        assert torch.equal(get_peft_model_state_dict(ours)[key], value)


def test_a_group_takes_one_product_for_its_a_factors_and_fewer_ops_in_all() -> None:
    base = loaded("qwen3", torch.float32)
    model = adapted(base)
    groups = join_lora(model, base)
    counts = []
    for install in (False, True):
        use_joined(groups, install)
        with Products(model) as products, torch.no_grad():
            model(input_ids=TOKENS)
        counts.append(products)
    peft, joined = counts
    assert peft.a_products == sum(len(group.layers) for group in groups) == 15
    assert joined.a_products == len(groups) == 9
    assert sum(joined.ops.values()) < sum(peft.ops.values())
    assert joined.ops["mul.Tensor"] == peft.ops["mul.Tensor"] - 15  # the scale rides in the products


def test_layers_called_in_any_order_or_again_get_their_own_outputs() -> None:
    base = loaded("qwen3")
    theirs, ours = adapted(base), adapted(base)
    join_lora(ours, base)
    x = torch.randn(2, 5, 64, dtype=torch.float64)
    names = ["k_proj", "q_proj", "k_proj", "v_proj", "q_proj", "v_proj"]
    for name in names:
        got = getattr(ours.base_model.model.model.layers[1].self_attn, name)(x)
        expected = getattr(theirs.base_model.model.model.layers[1].self_attn, name)(x)
        torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)
    x.add_(1)  # the same tensor, changed in place: computed anew
    got = ours.base_model.model.model.layers[1].self_attn.v_proj(x)
    torch.testing.assert_close(got, theirs.base_model.model.model.layers[1].self_attn.v_proj(x), rtol=1e-12, atol=1e-12)
    with ours.disable_adapter(), theirs.disable_adapter():  # peft's own forward for the call: the base alone
        torch.testing.assert_close(ours(input_ids=TOKENS).logits, base(input_ids=TOKENS).logits)


@pytest.mark.parametrize(
    ("config", "sizes"),
    [
        ({"lora_dropout": 0.1}, []),  # dropout: peft's forward everywhere
        ({"use_dora": True}, []),  # DoRA likewise
        ({"rank_pattern": {"k_proj": 8}}, [1, 1, 1, 1, 2, 1] * 2),  # q/k/v of different ranks: each alone
    ],
    ids=["dropout", "dora", "different-ranks"],
)
def test_layers_that_cannot_join_keep_peft_or_run_alone(config: dict, sizes: list[int]) -> None:
    base = loaded("qwen3")
    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    shared = {id(param): param for param in base.parameters()}  # as ``attach_lora`` copies the tree

    def make() -> nn.Module:
        torch.manual_seed(0)
        return get_peft_model(copy.deepcopy(base, shared), LoraConfig(r=4, target_modules=targets, **config)).eval()

    theirs, ours = make(), make()
    groups = join_lora(ours, base)
    assert [len(group.layers) for group in groups] == sizes
    joined_layers = {id(layer) for group in groups for layer in group.layers}
    for module in ours.modules():
        assert ("forward" in vars(module)) == (id(module) in joined_layers)
    with torch.no_grad():
        torch.testing.assert_close(ours(input_ids=TOKENS).logits, theirs(input_ids=TOKENS).logits, rtol=1e-12, atol=1e-12)


def test_a_group_whose_factors_no_longer_lie_back_to_back_keeps_pefts_forward_when_installed_again() -> None:
    base = loaded("qwen3")
    theirs, ours = adapted(base), adapted(base)
    groups = join_lora(ours, base)
    qkv = groups[0]
    k_proj = qkv.layers[1]
    factor = k_proj.lora_A[qkv.adapter]
    factor.weight = nn.Parameter(factor.weight.detach().clone())  # a Parameter of its own: the group cannot join
    use_joined(groups)
    assert [("forward" in vars(layer)) for layer in qkv.layers] == [False] * 3
    assert all("forward" in vars(layer) for group in groups[1:] for layer in group.layers)
    with torch.no_grad():
        torch.testing.assert_close(ours(input_ids=TOKENS).logits, theirs(input_ids=TOKENS).logits, rtol=1e-12, atol=1e-12)


def test_base_weights_not_back_to_back_run_each_layer_alone() -> None:
    base = models()["qwen3"].double().eval().requires_grad_(False)  # no layout: every weight a tensor of its own
    groups = join_lora(adapted(base), base)
    assert [len(group.layers) for group in groups] == [1] * 15


def test_under_bf16_autocast_a_bf16_base_and_float32_factors_train_as_close_to_float32_as_pefts_do() -> None:
    """As on a GPU: the factors compute in bf16 (cast once per group), their gradients reach them in float32; both
    paths round (differently), and the groups' outputs and gradients lie as close to float32's as peft's."""
    base = loaded("qwen3", torch.bfloat16)
    theirs, ours = adapted(base), adapted(base)
    for module in [*theirs.modules(), *ours.modules()]:  # as ``TrainingEngine`` sets them for a bf16 base
        if hasattr(module, "cast_input_dtype_enabled"):
            module.cast_input_dtype_enabled = False
    join_lora(ours, base)
    exact, exact_grads = loss_and_grads(adapted(loaded("qwen3", torch.bfloat16).float()))  # the same values
    logits, grads = loss_and_grads(theirs, torch.bfloat16)
    got, got_grads = loss_and_grads(ours, torch.bfloat16)
    error = lambda a, b: float((a - b).norm() / b.norm())
    assert error(got, exact) <= error(logits, exact)  # 2.1% against 2.8%: rounded once where peft rounds thrice
    ours_errors, their_errors = [], []
    for key, grad in exact_grads.items():
        assert got_grads[key].dtype == torch.float32
        ours_errors.append(error(got_grads[key], grad))
        their_errors.append(error(grads[key], grad))
        assert ours_errors[-1] <= 2 * their_errors[-1], key  # each within bf16's noise (1-5% here, both paths)
    assert sum(ours_errors) <= sum(their_errors)


@pytest.mark.parametrize("loss", ["cross_entropy", "importance_sampling"])
def test_a_training_clients_passes_run_the_groups_and_get_pefts_gradients(
    trainer: TrainingClient, sft_datum, off_policy, grads_of, monkeypatch: pytest.MonkeyPatch, loss: str
) -> None:
    engine = trainer._trainer
    assert [len(group.layers) for group in engine.joined] == [3, 1, 2, 1] * 2 + [1]  # minds-tiny: 2 layers, lm_head
    engine.load_state(engine.adapter_state())  # copied into the same parameters: the groups still run (below)
    with torch.no_grad():  # lora_B starts at zero: random, so that every factor has a gradient
        generator = torch.Generator().manual_seed(0)
        for name, param in engine.model.named_parameters():
            if ".lora_B." in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.1)
    data = [sft_datum(text) for text in SEQUENCES]
    data = data if loss == "cross_entropy" else off_policy(trainer, data)
    calls = []
    apply = joined_lora._Products.apply
    monkeypatch.setattr(joined_lora._Products, "apply", lambda *args: calls.append(1) or apply(*args))
    results, grads = [], []
    for install in (True, False):
        use_joined(engine.joined, install)
        calls.clear()
        results.append(trainer.forward_backward(data, loss).result())
        grads.append(grads_of(trainer))
        assert bool(calls) == install
        engine._optimizer.zero_grad(set_to_none=True)
    joined, peft = grads
    assert joined.keys() == peft.keys() and len(peft) == 2 * 15
    for key, grad in peft.items():
        scale = float(grad.abs().max())  # float32 sums in other orders
        torch.testing.assert_close(joined[key], grad, rtol=1e-4, atol=1e-5 * scale, msg=lambda m, key=key: f"{key}: {m}")
    assert results[0].metrics["loss:sum"] == pytest.approx(results[1].metrics["loss:sum"], rel=1e-5)
