"""Through the real SDK over HTTP, ``minds serve`` computes what the in-process local backend computes.

Each check runs the same request on a served run and on an in-process run made with the
same seed, so any difference is the wire's: protobuf datums in, results out, ordering.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import pytest
import tinker
from tinker import types

from minds_core.backends.local import ServiceClient
from minds_core.backends.local.training.losses import LOSSES
from minds_core.testing import with_sampled_provenance

from .conftest import KEY

pytestmark = pytest.mark.slow

ADAM = types.AdamParams(learning_rate=0.02)


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceClient]:
    with ServiceClient(checkpoint_root=tmp_path_factory.mktemp("local")) as client:
        yield client


def rl_batch(tokens: Callable[..., list[int]]) -> list[types.Datum]:
    """Two RL datums in the SDK's shape: prompt then completion, loss on the completion only."""
    data = []
    rng = np.random.default_rng(3)
    for seed, (prompt_len, completion_len) in enumerate([(5, 7), (3, 9)]):
        seq = tokens(prompt_len + completion_len, seed)
        n = len(seq) - 1
        mask = np.array([0.0] * (prompt_len - 1) + [1.0] * (n - prompt_len + 1), dtype=np.float32)
        datum = types.Datum(
            model_input=types.ModelInput.from_ints(seq[:-1]),
            loss_fn_inputs={
                "target_tokens": np.array(seq[1:], dtype=np.int64),
                "weights": mask,
                "logprobs": (-rng.uniform(1.0, 6.0, n) * mask).astype(np.float32),
                "advantages": (rng.normal(size=n) * mask).astype(np.float32),
                "sequence_ratio_mask": mask,
            },
        )
        data.append(with_sampled_provenance(datum, prompt_len, f"seq-{seed}"))  # stable_reinforce reads it; it crosses the wire
    return data


def logprob_arrays(output: types.ForwardBackwardOutput) -> list[np.ndarray]:
    return [np.asarray(item["logprobs"].to_numpy(), dtype=np.float64) for item in output.loss_fn_outputs]


@pytest.mark.parametrize("loss", sorted(LOSSES))
def test_every_builtin_loss_matches_the_in_process_backend(service, local, tokens, loss: str) -> None:
    data = rl_batch(tokens)
    served = service.create_lora_training_client("minds-tiny", rank=4, seed=11).result()
    inproc = local.create_lora_training_client("minds-tiny", rank=4, seed=11).result()
    results = []
    for trainer in (served, inproc):
        fb = trainer.forward_backward(data, loss)
        step = trainer.optim_step(ADAM)
        after = trainer.forward(data, loss)
        results.append((fb.result(), step.result(), after.result()))
    (s_fb, s_step, s_after), (l_fb, l_step, l_after) = results
    assert s_fb.metrics.keys() == l_fb.metrics.keys()
    for key in l_fb.metrics:
        assert s_fb.metrics[key] == pytest.approx(l_fb.metrics[key], rel=1e-5, abs=1e-6), key
    for served, local in zip(logprob_arrays(s_fb), logprob_arrays(l_fb), strict=True):
        np.testing.assert_allclose(served, local, rtol=0, atol=1e-5)
    assert s_step.metrics == pytest.approx(l_step.metrics, rel=1e-5)
    # the step moved the served weights exactly as it moved the in-process ones
    for served, local in zip(logprob_arrays(s_after), logprob_arrays(l_after), strict=True):
        np.testing.assert_allclose(served, local, rtol=0, atol=1e-5)
    assert not np.allclose(logprob_arrays(s_after)[0], logprob_arrays(s_fb)[0], atol=1e-4)


def test_loss_fn_config_reaches_the_loss(service, local, tokens) -> None:
    data = rl_batch(tokens)
    config = {"clip_low_threshold": 0.99, "clip_high_threshold": 1.01}
    outputs = {}
    for name, client in (("served", service), ("local", local)):
        trainer = client.create_lora_training_client("minds-tiny", rank=4, seed=5).result()
        outputs[name] = [trainer.forward(data, "ppo", config).result(), trainer.forward(data, "ppo").result()]
    clipped, default = outputs["served"]
    assert clipped.metrics["loss:sum"] != pytest.approx(default.metrics["loss:sum"], rel=1e-4)
    assert clipped.metrics["loss:sum"] == pytest.approx(outputs["local"][0].metrics["loss:sum"], rel=1e-5)


def test_sampled_logprobs_match_the_trainer_within_1e_4(service, tokens) -> None:
    trainer = service.create_lora_training_client("minds-tiny", rank=4, seed=2).result()
    sft = rl_batch(tokens)
    trainer.forward_backward(sft, "cross_entropy")
    trainer.optim_step(ADAM).result()
    sampler = trainer.save_weights_and_get_sampling_client().result()
    prompt = tokens(6, 9)
    response = sampler.sample(
        types.ModelInput.from_ints(prompt), 3, types.SamplingParams(max_tokens=8, temperature=1.0, seed=4)
    ).result()
    assert len(response.sequences) == 3
    for sequence in response.sequences:
        full = prompt + sequence.tokens
        datum = types.Datum(
            model_input=types.ModelInput.from_ints(full[:-1]),
            loss_fn_inputs={"target_tokens": np.array(full[1:], dtype=np.int64)},
        )
        scored = trainer.forward([datum], "cross_entropy").result()
        trainer_logprobs = logprob_arrays(scored)[0][len(prompt) - 1 :]
        np.testing.assert_allclose(np.asarray(sequence.logprobs), trainer_logprobs, rtol=0, atol=1e-4)
        prompt_logprobs = sampler.compute_logprobs(types.ModelInput.from_ints(full)).result()
        assert prompt_logprobs[0] is None
        np.testing.assert_allclose(np.asarray(prompt_logprobs[1:], dtype=np.float64), logprob_arrays(scored)[0], atol=1e-4)


def test_an_older_sampler_does_not_see_new_weights(service, tokens) -> None:
    trainer = service.create_lora_training_client("minds-tiny", rank=4, seed=3).result()
    probe = types.ModelInput.from_ints(tokens(12, 21))
    before = trainer.save_weights_and_get_sampling_client().result()
    first = before.compute_logprobs(probe).result()
    for _ in range(2):
        trainer.forward_backward(rl_batch(tokens), "cross_entropy")
        trainer.optim_step(ADAM)
    after = trainer.save_weights_and_get_sampling_client().result()
    assert before.compute_logprobs(probe).result() == first  # the snapshot is unchanged, exactly
    changed = after.compute_logprobs(probe).result()
    assert not np.allclose(np.asarray(changed[1:]), np.asarray(first[1:]), atol=1e-4)


def test_save_and_load_state_with_and_without_optimizer(service, tokens) -> None:
    data = rl_batch(tokens)
    trainer = service.create_lora_training_client("minds-tiny", rank=4, seed=4).result()
    trainer.forward_backward(data, "cross_entropy")
    trainer.optim_step(ADAM)
    path = trainer.save_state("after-one").result().path
    assert path.startswith("tinker://") and path.endswith("/weights/after-one")
    trainer.forward_backward(data, "cross_entropy")
    trainer.optim_step(ADAM)
    continued = trainer.forward(data, "cross_entropy").result().metrics["loss:sum"]

    resumed = service.create_training_client_from_state_with_optimizer(path).result()
    resumed.forward_backward(data, "cross_entropy")
    resumed.optim_step(ADAM)
    assert resumed.forward(data, "cross_entropy").result().metrics["loss:sum"] == pytest.approx(continued, rel=1e-5)

    fresh = service.create_training_client_from_state(path).result()  # same weights, new AdamW moments
    fresh.forward_backward(data, "cross_entropy")
    fresh.optim_step(ADAM)
    assert fresh.forward(data, "cross_entropy").result().metrics["loss:sum"] != pytest.approx(continued, rel=1e-4)

    sampler_path = trainer.save_weights_for_sampler("for-sampling").result().path
    sampler = service.create_sampling_client(model_path=sampler_path).result()
    assert len(sampler.compute_logprobs(types.ModelInput.from_ints(tokens(5))).result()) == 5


def test_unsupported_requests_get_a_400_naming_what_is_supported(service, tokens) -> None:
    trainer = service.create_lora_training_client("minds-tiny", rank=4, seed=0).result()
    with pytest.raises(tinker.BadRequestError, match="supports: cross_entropy, importance_sampling"):
        trainer.forward_backward(rl_batch(tokens), "no_such_loss").result()  # type: ignore[arg-type]
    with pytest.raises(tinker.BadRequestError, match="AdamW only"):
        service.create_lora_training_client("minds-tiny", rank=4, optimizer=types.DimuonOptimizerConfig()).result()
    with pytest.raises(tinker.BadRequestError, match="AdamW only"):
        trainer.optim_step(types.DimuonParams(learning_rate=0.01)).result()


def test_the_rest_client_lists_checkpoints_and_training_runs(served, service, tokens) -> None:
    trainer = service.create_lora_training_client("minds-tiny", rank=4, seed=6).result()
    trainer.forward_backward(rl_batch(tokens), "cross_entropy")
    trainer.optim_step(ADAM)
    state = trainer.save_state("rest-a", user_metadata={"note": "first"}).result().path
    sampler_path = trainer.save_weights_for_sampler("rest-b").result().path
    rest = tinker.RestClient(base_url=served.url, api_key=KEY)
    run_id = trainer.model_id
    listed = rest.list_checkpoints(run_id).result().checkpoints
    assert {(c.checkpoint_type, c.tinker_path) for c in listed} == {("training", state), ("sampler", sampler_path)}
    assert next(c for c in listed if c.tinker_path == state).user_metadata == {"note": "first"}
    run = rest.get_training_run(run_id).result()
    assert (run.base_model, run.lora_rank, run.is_lora) == ("minds-tiny", 4, True)
    assert run.last_checkpoint is not None and run.last_checkpoint.tinker_path == state
    runs = rest.list_training_runs(limit=100).result()
    assert run_id in {r.training_run_id for r in runs.training_runs}
    assert any(c.tinker_path == state for c in rest.list_user_checkpoints(limit=100).result().checkpoints)
    # SDK code that resumes from the newest training checkpoint works as against the hosted service
    resumed = service.create_training_client_from_state_with_optimizer(run.last_checkpoint.tinker_path).result()
    assert resumed.forward(rl_batch(tokens), "cross_entropy").result().metrics["loss:sum"] > 0
    with pytest.raises(tinker.NotFoundError):
        rest.get_training_run("no-such-run").result()


def test_a_custom_loss_trains_as_it_does_in_process(service, local, tokens) -> None:
    import torch

    data = rl_batch(tokens)

    def loss_fn(batch: list[types.Datum], logprobs: list[torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        total = sum(-(lp * torch.linspace(0.5, 1.5, len(lp))).sum() for lp in logprobs)
        return total, {"custom:sum": float(total.detach())}

    after = {}
    for name, client in (("served", service), ("local", local)):
        trainer = client.create_lora_training_client("minds-tiny", rank=4, seed=8).result()
        result = trainer.forward_backward_custom(data, loss_fn).result()
        assert result.metrics["custom:sum"] > 0
        trainer.optim_step(ADAM).result()
        after[name] = logprob_arrays(trainer.forward(data, "cross_entropy").result())
    for served, local in zip(after["served"], after["local"], strict=True):
        np.testing.assert_allclose(served, local, rtol=0, atol=1e-5)
