"""The GPU engine's plan, warm-up and fallbacks, run on the CPU through a fake device layer.

``FakeAccelerator`` (a fake: this machine has no GPU) says what a GPU says, so the
real capture, warm-up, memory-plan and fallback code of the local backend runs
here as it does on a GPU: steps captured per shape in a warm-up and replayed, a
forced capture failure falling back for its shape only, forced out-of-memory
errors in a decode step and in a training step, buffers growing mid-run, and a
run that does not fit refused in one line.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from structlog.testing import capture_logs
from tinker import types

from minds_core.backends import backend_settings, run_shape
from minds_core.backends.local import TINY_MODEL, LocalBadRequestError
from minds_core.backends.local.model.accelerator import EVENTS
from minds_core.backends.local.model.lora import LoraSpec
from minds_core.backends.local.model.memory_plan import MIN_ROWS, MIN_TRAIN_TOKENS, ModelSizes, RunShape, plan_memory
from minds_core.backends.local.model.models import BaseModel, BaseModelRegistry
from minds_core.backends.local.model.placement import Placement, resolve_placement
from minds_core.backends.local.sampling.engine import SamplingEngine
from minds_core.backends.local.training.datums import submitted_datum
from minds_core.backends.local.training.engine import TrainingEngine
from minds_core.base import logs as minds_logs
from minds_core.base.errors import ConfigError
from minds_core.config import load_config

from .fake_accelerator import GIB, FakeAccelerator

SHAPE = RunShape(rows=4, context=300, rank=4)
PROMPT = [5, 70, 71, 72, 73]
PARAMS = types.SamplingParams(max_tokens=12, temperature=1.0, seed=3, stop=[])


@pytest.fixture(autouse=True)
def _info_logs() -> None:
    """Let info events through to ``capture_logs``: a test run before in this process may have raised the level."""
    minds_logs.configure("json", "info")


def base_on(accelerator: FakeAccelerator, shape: RunShape | None = SHAPE, cuda_graphs: bool = True) -> BaseModel:
    """The tiny model loaded on the CPU through ``accelerator``, planned for ``shape``."""
    placement = Placement(torch.device("cpu"), torch.float32, cuda_graphs=cuda_graphs, accelerator=accelerator)
    return BaseModelRegistry(placement, shape).get(TINY_MODEL)


def sample(base: BaseModel, prompt: list[int] = PROMPT, params: types.SamplingParams = PARAMS, n: int = 3):
    """A sampler of ``base`` and its answer to ``n`` samples of ``prompt``."""
    sampler = SamplingEngine.for_base(base)
    future = sampler.submit(prompt, n, params)
    sampler.drive()
    return sampler, future.result()


def tokens_and_logprobs(response: types.SampleResponse) -> tuple[list[list[int]], np.ndarray]:
    return [s.tokens for s in response.sequences], np.array([s.logprobs for s in response.sequences])


@pytest.fixture(scope="module")
def eager() -> tuple[list[list[int]], np.ndarray]:
    """What the sampler draws with every step eager (``cuda_graphs`` off)."""
    return tokens_and_logprobs(sample(base_on(FakeAccelerator(), cuda_graphs=False))[1])


def test_the_warm_up_captures_the_planned_shapes_and_sampling_only_replays_them(eager) -> None:
    fake = FakeAccelerator()
    base = base_on(fake)
    assert base.plan is not None and base.plan.rows == 4 and base.plan.context == 512  # 300 rounded to 256s
    with capture_logs() as logs:
        sampler = SamplingEngine.for_base(base)
    slots = sampler._batch.slots
    (line,) = [log for log in logs if log["event"] == "decode steps captured"]
    buckets, columns = [1, 2, 4], {slots.columns(c) for c in range(1, 513)}
    assert line["graphs"] == slots.graphs.captured == len(buckets) * (1 + len(columns)) == fake.captures
    assert line["seconds"] >= 0 and slots.warmed == (4, 512)
    future = sampler.submit(PROMPT, 3, PARAMS)
    sampler.drive()
    assert fake.captures == slots.graphs.captured and fake.replays > 0  # nothing captured mid-run: replays only
    tokens, logprobs = tokens_and_logprobs(future.result())
    assert tokens == eager[0]
    np.testing.assert_allclose(logprobs, eager[1], atol=1e-4)


def test_cuda_graphs_off_captures_nothing() -> None:
    fake = FakeAccelerator()
    sampler, _ = sample(base_on(fake, cuda_graphs=False))
    assert fake.captures == fake.warms == 0 and not sampler._batch.slots.graphs.capturing
    assert "local.cuda_graphs" in sampler._batch.slots.graphs.eager_reason


def test_compile_off_leaves_the_decode_math_eager_whatever_the_placement_asks() -> None:
    placement = Placement(torch.device("cpu"), torch.float32, decode_compile="default", compiles=False)
    sampler = SamplingEngine.for_base(BaseModelRegistry(placement).get(TINY_MODEL))
    math = sampler._batch.slots._fast.math
    assert math.mode is None and not math.compiled


def test_a_failed_capture_falls_back_for_its_shape_only_loudly_and_counted(eager) -> None:
    # the warm-up captures buckets 1 and 2 (a draw, four forwards each: captures 0-9), then bucket 4's draw (10)
    # and its forward over 128 columns (11): the shape these requests' steps take
    fake = FakeAccelerator(fail_captures=frozenset({11}))
    with capture_logs() as logs:
        sampler, response = sample(base_on(fake))
    graphs = sampler._batch.slots.graphs
    (failed,) = graphs.failed
    assert failed == ("forward", 4, 128, False)
    assert graphs.capturing and graphs.captured == fake.captures - 1  # every other shape captured
    (warning,) = [log for log in logs if "capture failed" in log["event"]]
    assert warning["shape"] == repr(failed) and "forced capture failure 11" in warning["reason"]
    assert 'local.cuda_graphs = "off"' in warning["off"]
    tokens, logprobs = tokens_and_logprobs(response)
    assert tokens == eager[0]  # the failed shape ran eagerly, the same draws
    np.testing.assert_allclose(logprobs, eager[1], atol=1e-4)
    assert EVENTS.take()["capture_fallbacks"] == 1


@pytest.mark.slow  # 250 decode steps on the CPU
def test_buffers_growing_mid_run_drop_the_graphs_and_capture_what_comes(eager) -> None:
    fake = FakeAccelerator()
    base = base_on(fake, RunShape(rows=2, context=16, rank=4))
    sampler = SamplingEngine.for_base(base)
    slots = sampler._batch.slots
    assert slots.warmed == (2, 256)
    long = types.SamplingParams(max_tokens=252, temperature=1.0, seed=3, stop=[])
    with capture_logs() as logs:
        future = sampler.submit(PROMPT, 3, long)  # 3 rows of 257 positions: past the warm-up's 2 x 256
        sampler.drive()
    assert slots.slots == 2 and slots.capacity == 512  # the plan's rows (the third row waits), more positions
    assert any(log["event"].startswith("decode buffers grew") for log in logs)
    tokens, logprobs = tokens_and_logprobs(future.result())
    assert [t[:12] for t in tokens] == eager[0]  # the same seeds: the same first tokens
    np.testing.assert_allclose(logprobs[:, :12], eager[1], atol=1e-4)
    assert all(len(t) == 252 for t in tokens) and fake.replays > 0


def test_an_out_of_memory_error_in_a_decode_step_frees_memory_and_says_what_to_lower() -> None:
    fake = FakeAccelerator()
    sampler = SamplingEngine.for_base(base_on(fake))
    fake.oom_at_replay = fake.replays + 3  # the warm-up replays too: the fourth replay of the request's steps
    future = sampler.submit(PROMPT, 2, PARAMS)
    with pytest.raises(LocalBadRequestError, match="out of device memory in a decode batch.*lower trainer.group_size"):
        sampler.drive()
    with pytest.raises(LocalBadRequestError, match="local.cuda_graphs"):
        future.result()
    assert fake.releases == 1 and EVENTS.take()["out_of_memory"] == 1
    again = sampler.submit(PROMPT, 2, PARAMS)  # the sampler goes on
    sampler.drive()
    assert len(again.result().sequences) == 2


def test_an_out_of_memory_error_in_training_keeps_the_gradients_and_says_what_to_lower() -> None:
    fake = FakeAccelerator()
    engine = TrainingEngine(base_on(fake), LoraSpec(rank=4), seed=0)
    seq = list(range(5, 40))
    datum = submitted_datum(
        types.Datum(model_input=types.ModelInput.from_ints(seq[:-1]), loss_fn_inputs={"target_tokens": seq[1:]}), 0
    )
    engine.forward_backward([datum], "cross_entropy", None, backward=True)
    grads = [p.grad.clone() for p in engine._params.values()]

    def out_of_memory(*_: object) -> None:
        raise torch.OutOfMemoryError("forced out-of-memory in a layer (fake)")

    hook = engine.model.get_base_model().model.layers[0].register_forward_hook(out_of_memory)
    with pytest.raises(LocalBadRequestError, match=r"forward_backward of 1 sequences \(34 tokens.*lower "):
        engine.forward_backward([datum], "cross_entropy", None, backward=True)
    hook.remove()
    for before, param in zip(grads, engine._params.values(), strict=True):
        assert torch.equal(before, param.grad)
    assert fake.releases == 1
    out = engine.forward_backward([datum], "cross_entropy", None, backward=True)
    assert out.metrics["out_of_memory:sum"] == 1  # counted in the next output's metrics, then reset
    assert "out_of_memory:sum" not in engine.forward_backward([datum], "cross_entropy", None, backward=False).metrics


def test_the_plan_shrinks_rows_and_micro_batches_before_it_refuses() -> None:
    base = base_on(FakeAccelerator(), shape=None)
    sizes = ModelSizes.of(base.model)
    shape = RunShape(rows=256, context=4096, rank=8)
    roomy = plan_memory(sizes, shape, FakeAccelerator(free=64 * GIB), 8192, 256)
    assert (roomy.rows, roomy.train_tokens) == (256, 8192) and roomy.total <= roomy.free
    need = roomy.total - roomy.reserve
    tight = plan_memory(sizes, shape, FakeAccelerator(free=GIB + need // 3), 8192, 256)
    assert tight.rows < 256 and tight.total <= tight.free
    assert tight.rows >= MIN_ROWS and tight.train_tokens >= MIN_TRAIN_TOKENS
    with pytest.raises(LocalBadRequestError) as refused:
        plan_memory(sizes, shape, FakeAccelerator(free=GIB // 2), 8192, 256)
    (line,) = str(refused.value).splitlines()
    assert "MiB free; its largest part is" in line and "lower" in line


def test_a_run_that_cannot_fit_is_refused_at_load_naming_what_to_lower() -> None:
    placement = Placement(torch.device("cpu"), torch.float32, accelerator=FakeAccelerator(free=GIB // 2))
    registry = BaseModelRegistry(placement, SHAPE)
    with pytest.raises(LocalBadRequestError, match="the device has 512.0 MiB free; its largest part is"):
        registry.get(TINY_MODEL)
    assert registry.context_lengths() == {}  # not kept


def test_without_a_plan_a_sampler_that_cannot_hold_one_sequence_refuses_in_one_line() -> None:
    base = base_on(FakeAccelerator(free=GIB + 4096), shape=None)  # all but 4 KiB is the reserve's
    sampler = SamplingEngine.for_base(base)
    future = sampler.submit(PROMPT, 1, PARAMS)
    with pytest.raises(LocalBadRequestError, match="cannot hold one sequence of 256 positions.*lower the prompt"):
        sampler.drive()
    with pytest.raises(LocalBadRequestError):
        future.result()


def test_the_switches_are_checked_in_config_and_shown_with_the_backend(tmp_path) -> None:
    config = load_config(None, ["env.id=x", "local.cuda_graphs=off", "local.compile=off", f"runs_dir={tmp_path}"])
    assert backend_settings(config, "local") == {"device": "auto", "cuda_graphs": "off", "compile": "off"}
    assert backend_settings(config, "tinker") == {}
    for key in ("cuda_graphs", "compile"):
        with pytest.raises(ConfigError, match=f"local.{key}"):
            load_config(None, ["env.id=x", f"local.{key}=on"])
    shape = run_shape(load_config(None, ["env.id=x", "trainer.group_size=8", "trainer.groups_per_batch=4"]))
    assert (shape.rows, shape.context) == (32, 4096)
    assert not resolve_placement("cpu", compile="off").compiles and resolve_placement("cpu").compiles
    with pytest.raises(LocalBadRequestError, match="local.compile is 'sometimes': use one of auto, off"):
        resolve_placement("cpu", compile="sometimes")
