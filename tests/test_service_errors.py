"""Service errors during training: transient ones retried with backoff, the rest one message and exit 1.

The local backend (real tiny model) serves every request. A rejected request is
the real local service refusing a bad ``loss_fn_config``; transient failures
are injected by ``ScriptedService`` (tests/conftest.py), a FAKE of a hosted
service whose scripted requests fail with the SDK's own ``tinker.InternalServerError`` (503) or
``tinker.BadRequestError`` (400), since the hosted service cannot be reached from here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import tinker

import minds_toy_plugin  # importable through tests/conftest.py
from minds_core.backends.retry import Backoff, ServiceCallError, call_service, is_transient
from minds_core.base import logs
from minds_core.config import load_config
from minds_core.contract.plugins import load_plugins
from minds_core.train import train
from minds_core.training.run_directory import run_config_path

FAST = ["sampling.max_tokens=12", "trainer.group_size=8", "trainer.groups_per_batch=4", "metrics.sinks=[]",
        "env.id=toy_char_share", "backend=scripted", "trainer.save_every=1", "name=run"]  # fmt: skip


def unavailable() -> tinker.InternalServerError:
    response = httpx.Response(503, json={"detail": "overloaded"}, request=httpx.Request("POST", "https://tinker.invalid/"))
    return tinker.InternalServerError("Error code: 503 - overloaded", response=response, body={"detail": "overloaded"})


def rejected() -> tinker.BadRequestError:
    response = httpx.Response(400, json={"detail": "no"}, request=httpx.Request("POST", "https://tinker.invalid/"))
    return tinker.BadRequestError("Error code: 400 - loss not supported", response=response, body=None)


def _run(tmp_path: Path, backend: Any, *overrides: str) -> None:
    logs.configure("json", "warning")
    plugins = load_plugins(extra=[("toy", minds_toy_plugin), ("scripted", backend)])
    train(load_config(None, [*FAST, f"runs_dir={tmp_path}", *overrides]), plugins=plugins)


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_transient_errors_are_recognised_as_the_sdk_reports_them():
    assert is_transient(unavailable())
    assert is_transient(tinker.APIConnectionError(request=httpx.Request("POST", "https://tinker.invalid/")))
    assert is_transient(tinker.RequestFailedError("boom", "req-1", tinker.types.RequestErrorCategory.Server))
    assert not is_transient(tinker.RequestFailedError("bad input", "req-1", tinker.types.RequestErrorCategory.User))
    rejected = httpx.Response(400, request=httpx.Request("POST", "https://tinker.invalid/"))
    assert not is_transient(tinker.BadRequestError("bad", response=rejected, body=None))
    assert [Backoff().delay(n) for n in (1, 2, 3)] == [1.0, 2.0, 4.0] and Backoff(max_delay=3).delay(5) == 3


async def test_a_request_is_retried_until_it_succeeds_and_gives_up_after_the_last_attempt():
    failures = [unavailable(), unavailable()]

    async def send() -> str:
        if failures:
            raise failures.pop()
        return "ok"

    assert await call_service("step 3", "optim_step", send, Backoff(first_delay=0.01)) == ("ok", 3)
    failures.extend(unavailable() for _ in range(5))
    with pytest.raises(ServiceCallError, match=r"^step 3: optim_step still failed after 4 attempts \(InternalServerError") as caught:
        await call_service("step 3", "optim_step", send, Backoff(first_delay=0.01))
    assert caught.value.exit_code == 1


@pytest.mark.slow
def test_a_transient_failure_during_a_step_is_retried_and_the_run_goes_on(tmp_path, capsys, scripted_backend):
    backend = scripted_backend({2: unavailable})  # the second forward_backward (step 1) fails once
    _run(tmp_path, backend, "trainer.steps=3")
    rows = _rows(tmp_path / "run" / "metrics.jsonl")
    assert [r["step"] for r in rows] == [0, 1, 2]
    assert all(r["train/datums"] > 0 and "train/skipped" not in r for r in rows)
    assert backend.trainings[0].calls == 4  # the failed try was sent again, once
    warned = [json.loads(x) for x in capsys.readouterr().err.splitlines() if "retrying" in x]
    assert [(w["where"], w["request"], w["attempt"], w["retry_in"]) for w in warned] == [("step 1", "forward_backward", 1, 1.0)]
    assert [c["step"] for c in _rows(tmp_path / "run" / "checkpoints.jsonl")] == [0, 1, 2]


@pytest.mark.slow
def test_a_step_still_failing_after_the_retries_ends_the_run_naming_step_request_and_checkpoint(tmp_path, scripted_backend):
    backend = scripted_backend(dict.fromkeys(range(3, 100), unavailable))  # from step 2 on, the service answers 503
    with pytest.raises(ServiceCallError) as caught:
        _run(tmp_path, backend, "trainer.steps=5")  # (1+2+4 s of backoff)
    message = str(caught.value)
    run_dir = tmp_path / "run"
    assert message.startswith("step 2: forward_backward still failed after 4 attempts (InternalServerError: Error code: 503")
    assert message.endswith(f"the last checkpoint is step 1: minds run --resume {run_dir} continues from step 2")
    assert caught.value.exit_code == 1
    assert [c["step"] for c in _rows(run_dir / "checkpoints.jsonl")] == [0, 1]  # recorded before the failure, kept
    assert [r["step"] for r in _rows(run_dir / "metrics.jsonl")] == [0, 1]


@pytest.mark.slow
def test_a_failed_step_saves_the_state_it_left_intact_and_the_run_resumes_there(tmp_path, scripted_backend):
    # no periodic checkpoints: the state after step 1 is saved when step 2 is rejected, and the run resumes at step 2
    logs.configure("json", "warning")
    backend = scripted_backend({3: rejected})
    plugins = load_plugins(extra=[("toy", minds_toy_plugin), ("scripted", backend)])
    config = load_config(None, [*FAST, f"runs_dir={tmp_path}", "trainer.steps=4", "trainer.save_every=0"])
    with pytest.raises(ServiceCallError) as caught:
        train(config, plugins=plugins)
    run_dir = tmp_path / "run"
    assert str(caught.value).startswith("step 2: the service rejected forward_backward (BadRequestError: Error code: 400")
    assert str(caught.value).endswith(f"the last checkpoint is step 1: minds run --resume {run_dir} continues from step 2")
    assert [c["step"] for c in _rows(run_dir / "checkpoints.jsonl")] == [1]  # saved after the failure
    assert backend.script == {}  # the rejected call was the script's last: the resumed run is not failed
    resumed = load_config(run_config_path(run_dir), [], drop_redacted=True)
    train(resumed, resume_dir=run_dir, plugins=plugins)
    assert [r["step"] for r in _rows(run_dir / "metrics.jsonl")] == [0, 1, 2, 3]


@pytest.mark.slow
def test_a_failed_sft_step_saves_the_state_it_left_intact_and_the_run_resumes_there(tmp_path, scripted_backend):
    # as in RL: no periodic checkpoints, step 2's forward_backward is rejected, the state after step 1 is saved
    logs.configure("json", "warning")
    chats = [[{"role": "user", "content": f"Say {w}."}, {"role": "assistant", "content": f"{w} {w}"}] for w in ("cat", "dog", "sun", "map")]
    data = tmp_path / "chats.jsonl"
    data.write_text("".join(json.dumps({"messages": m}) + "\n" for m in chats))
    backend = scripted_backend({3: rejected})
    plugins = load_plugins(extra=[("scripted", backend)])
    config = load_config(None, ["trainer.mode=sft", f"sft.data={data}", "sft.batch_size=2", "sft.eval_fraction=0", "backend=scripted",
                                "trainer.steps=4", "trainer.save_every=0", "metrics.sinks=[]", f"runs_dir={tmp_path}", "name=run"])  # fmt: skip
    with pytest.raises(ServiceCallError) as caught:
        train(config, plugins=plugins)
    run_dir = tmp_path / "run"
    assert str(caught.value).startswith("step 2: the service rejected forward_backward (BadRequestError: Error code: 400")
    assert str(caught.value).endswith(f"the last checkpoint is step 1: minds run --resume {run_dir} continues from step 2")
    (saved,) = _rows(run_dir / "checkpoints.jsonl")  # saved after the failure
    assert saved["step"] == 1 and saved["state_path"].startswith("tinker://") and saved["sampler_path"]
    assert [r["step"] for r in _rows(run_dir / "metrics.jsonl")] == [0, 1]
    assert backend.script == {}  # the rejected call was the script's last: the resumed run is not failed
    resumed = load_config(run_config_path(run_dir), [], drop_redacted=True)
    train(resumed, resume_dir=run_dir, plugins=plugins)
    assert backend.trainings[-1].calls == 2  # the resumed run trained steps 2 and 3 only
    assert [r["step"] for r in _rows(run_dir / "metrics.jsonl")] == [0, 1, 2, 3]
    assert [c["step"] for c in _rows(run_dir / "checkpoints.jsonl")] == [1, 3]


@pytest.mark.slow
def test_a_request_the_service_rejects_ends_the_run_with_one_message_and_exit_1(run_minds, tmp_path):
    # the real local service refuses a loss_fn_config key that ppo does not take
    result = run_minds(
        ["run", "--env", "toy_char_share", "--backend", "local", "--steps", "2", "--name", "rejected",
         "--set", "trainer.loss_fn=ppo", "--set", "trainer.loss_fn_config.clip_ratio=0.2",
         "--set", "sampling.max_tokens=12", "--set", "trainer.group_size=8", "--set", "trainer.groups_per_batch=4",
         "--set", "metrics.sinks=[]"],
        plugins=["toy_plugin"],
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    (line,) = [x for x in result.stderr.splitlines() if x.startswith("minds: error:")]
    # refused when it ran: the SDK's RequestFailedError, as over HTTP
    assert line.startswith("minds: error: step 0: the service rejected forward_backward (LocalRequestFailedError")
    assert "clip_ratio" in line and line.endswith("no checkpoint was saved before it, so a new run starts over")
    assert "Traceback" not in result.stderr
