"""The decode step's elementwise math compiled by inductor (``Placement.decode_compile``): the same logits, tokens
and log-probs as eager steps, a bounded number of compiles across row buckets, an eager fallback when compiling
fails, and (on a CUDA GPU) compiled steps captured in CUDA graphs. Compiling takes seconds on the CPU: ``slow``."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from structlog.testing import capture_logs
from tinker import types

from minds_core.backends.local import TINY_MODEL
from minds_core.backends.local.model.errors import LocalBadRequestError
from minds_core.backends.local.model.models import BaseModelRegistry
from minds_core.backends.local.model.placement import COMPILE_MODES, Placement
from minds_core.backends.local.sampling import fast_decode
from minds_core.backends.local.sampling.engine import SamplingEngine
from minds_core.backends.local.sampling.fast_decode import FastDecoder

from .test_fast_decode import PROMPT_SETS, models, steps

CPU = torch.device("cpu")
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def compiled_decoder(model: torch.nn.Module) -> FastDecoder:
    fast = FastDecoder.for_model(model, "default")
    assert fast is not None and fast.math.compiled
    return fast


@pytest.mark.slow
@torch.inference_mode()
def test_compiled_cpu_steps_equal_eager_steps_and_later_buckets_do_not_recompile() -> None:
    """Rows at different positions (a mask), then rows at one position (none): 6 rows, then 4, 2, 4 and 8.
    Inductor compiles each function for its first row count and once more with the rows dynamic; after that no
    row count compiles (a compile would fail under the ``fail_on_recompile`` stance, and fall back)."""
    model = models()["qwen3"].eval()
    eager, fast = FastDecoder.for_model(model), compiled_decoder(model)
    assert eager is not None and not eager.math.compiled
    sets = [*PROMPT_SETS.values(), [[42]], [[3, 4], [5]], [[1, 2], [3, 4, 5], [6], list(range(7, 20))]]
    for index, prompts in enumerate(sets):
        if index == 2:  # two row counts seen (6, 4): the rows are dynamic from here on
            torch.compiler.set_stance("fail_on_recompile")
        try:
            ours = steps(model, prompts, fast.forward, 3)
        finally:
            torch.compiler.set_stance("default")
        theirs = steps(model, prompts, eager.forward, 3)
        for got, expected in zip(ours, theirs, strict=True):
            torch.testing.assert_close(got, expected, rtol=0, atol=2e-5)
        assert fast.math.compiled, fast.math.failure


def greedy_and_seeded(placement: Placement) -> tuple[list[tuple[list[int], types.SampledSequence]], SamplingEngine]:
    """Greedy samples of two prompts, then seeded samples at temperature 1, from ``minds-tiny`` on ``placement``:
    each with its prompt."""
    base = BaseModelRegistry(placement).get(TINY_MODEL)
    sampler = SamplingEngine.for_base(base)
    samples = []
    for temperature, seed in ((0.0, None), (1.0, 7)):
        params = types.SamplingParams(max_tokens=16, temperature=temperature, seed=seed, stop=[])
        prompts = [list(base.tokenizer.encode(text)) for text in ("Once upon a time", "2+2=")]
        futures = [sampler.submit(prompt, 3, params) for prompt in prompts]
        sampler.drive()
        samples += [(prompt, s) for prompt, future in zip(prompts, futures, strict=True) for s in future.result().sequences]
    return samples, sampler


@pytest.mark.slow
def test_a_compiled_cpu_sampler_draws_the_tokens_and_log_probs_of_an_eager_one() -> None:
    eager, _ = greedy_and_seeded(Placement(CPU, torch.float32))
    compiled, sampler = greedy_and_seeded(Placement(CPU, torch.float32, decode_compile="default"))
    math = sampler._batch.slots._fast.math
    assert math.compiled, math.failure
    for (_, ours), (_, theirs) in zip(compiled, eager, strict=True):
        assert ours.tokens == theirs.tokens
        np.testing.assert_allclose(ours.logprobs, theirs.logprobs, rtol=0, atol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=needs_cuda)])
def test_compiled_bf16_steps_score_their_tokens_as_a_full_pass_does(device: str) -> None:
    """In bf16 the compiled math rounds once where eager ops round each (a near-tie then draws another token), so
    each sample's log-probs are checked against the model's full pass over it, at bf16's tolerance. On a GPU the
    compiled steps run inside captured CUDA graphs."""
    samples, sampler = greedy_and_seeded(Placement(torch.device(device), torch.bfloat16, decode_compile="default"))
    slots = sampler._batch.slots
    assert slots._fast.math.compiled, slots._fast.math.failure
    if device == "cuda":
        assert slots.graphs.capturing and slots.graphs.captured > 0, slots.graphs.eager_reason
    for prompt, sequence in samples:
        rescored = sampler.prompt_logprobs(prompt + list(sequence.tokens))[len(prompt) :]
        error = np.abs(np.asarray(sequence.logprobs) - np.asarray(rescored))
        assert len(sequence.tokens) == 16 and error.max() < 0.2 and error.mean() < 0.05, error


class FakeCompileError(RuntimeError):
    """What the fake backend raises."""


def failing_backend(graph: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> None:
    """A fake inductor: a ``torch.compile`` backend that fails every compile, as a broken toolchain would."""
    failing_backend.calls += 1
    raise FakeCompileError("no compiler here")


@torch.inference_mode()
@pytest.mark.slow
def test_a_failing_compile_falls_back_to_eager_once_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fast_decode, "_compile", lambda function, mode: torch.compile(function, backend=failing_backend))
    monkeypatch.setattr(fast_decode, "_compiled_by_mode", {})
    failing_backend.calls = 0
    model = models()["qwen3"].eval()
    eager, fast = FastDecoder.for_model(model), FastDecoder.for_model(model, "default")
    assert eager is not None and fast is not None
    prompts = PROMPT_SETS["rows-at-different-positions"]
    with capture_logs() as logs:
        ours = steps(model, prompts, fast.forward, 3)
    assert failing_backend.calls == 1  # the first compile failed; no other was tried
    assert not fast.math.compiled and "FakeCompileError" in (fast.math.failure or "")
    warnings = [log for log in logs if log["event"].startswith("decode math runs eagerly")]
    assert len(warnings) == 1 and warnings[0]["log_level"] == "warning" and "no compiler here" in warnings[0]["reason"]
    for got, expected in zip(ours, steps(model, prompts, eager.forward, 3), strict=True):
        torch.testing.assert_close(got, expected, rtol=0, atol=0)  # the very same eager math


def test_a_placement_takes_only_modes_that_leave_graphs_to_the_sampler() -> None:
    with pytest.raises(LocalBadRequestError, match=r"decode_compile is 'reduce-overhead'.*default"):
        Placement(CPU, torch.float32, decode_compile="reduce-overhead")
    for mode in (None, *COMPILE_MODES):
        assert Placement(CPU, torch.float32, decode_compile=mode).decode_compile == mode
