"""One door: every command opens and closes its training service through ``ServiceLifetime``.

SFT runs on the real local backend (the tiny model) behind ``ScriptedService`` (tests/conftest.py), a FAKE
of a hosted service whose numbered ``forward_backward`` calls first do what the
script says: fail with the SDK's own 503 (a transient failure, as the hosted
service answers when overloaded) or 400, or send this process SIGINT, as Ctrl-C
would. The commands' subprocess tests use ``wrapped``, a fixture plugin backend
installed with pip and found through its entry point, as a third party's is.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import tinker

from minds_core.backends.retry import ServiceCallError
from minds_core.base import logs
from minds_core.base.errors import UsageError
from minds_core.base.interrupt import RunInterrupted
from minds_core.config import load_config
from minds_core.contract.plugins import load_plugins
from minds_core.session.service import ServiceLifetime, exit_status
from minds_core.train import train
from minds_core.training.run_directory import run_config_path

CHATS = [
    {"messages": [{"role": "user", "content": f"Say {word} twice."}, {"role": "assistant", "content": f"{word} {word}"}]}
    for word in ("cat", "dog", "sun", "map", "cup", "pen", "box", "hat")
]


def _status(code: int) -> tinker.APIStatusError:
    response = httpx.Response(code, json={"detail": "scripted"}, request=httpx.Request("POST", "https://tinker.invalid/"))
    kind = tinker.InternalServerError if code >= 500 else tinker.BadRequestError
    return kind(f"Error code: {code} - scripted", response=response, body={"detail": "scripted"})


def _interrupt() -> None:
    os.kill(os.getpid(), signal.SIGINT)


def _sft(tmp_path: Path, backend: Any, *overrides: str) -> dict[str, Any]:
    logs.configure("json", "warning")
    data = tmp_path / "chats.jsonl"
    data.write_text("".join(json.dumps(c) + "\n" for c in CHATS))
    config = load_config(None, ["trainer.mode=sft", f"sft.data={data}", "sft.batch_size=2", "sft.eval_fraction=0.25",
                                "backend=scripted", "metrics.sinks=[]", "name=sft", f"runs_dir={tmp_path}", *overrides])  # fmt: skip
    return train(config, plugins=load_plugins(extra=[("scripted", backend)]))


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


# ---------------------------------------------------------------- the door itself


class RecordingService:
    """A plugin backend's service as small as the contract allows: it records how it was closed."""

    def __init__(self) -> None:
        self.closed: list[str] = []

    def close(self, status: str) -> None:
        self.closed.append(status)


class NoExport:
    """A plugin backend's factory without ``export_adapter``."""

    def __init__(self) -> None:
        self.made: list[RecordingService] = []

    def __call__(self, config: Any, run_dir: Path) -> RecordingService:
        self.made.append(RecordingService())
        return self.made[-1]


@pytest.mark.parametrize(
    ("error", "status"),
    [(None, "success"), (ValueError("bug"), "errored"), (KeyboardInterrupt(), "interrupted"), (RunInterrupted("stop", 2), "interrupted")],
)
def test_the_service_is_closed_once_with_how_the_command_ended(error, status):
    factory = NoExport()
    door = ServiceLifetime(load_config(None, ["backend=mine"]), "mine", factory)
    raised = None
    try:
        with door:
            if error is not None:
                raise error
    except BaseException as exc:  # noqa: BLE001 - the command's own error comes out unchanged
        raised = exc
    assert raised is error  # neither swallowed nor replaced
    door.__exit__(None, None, None)  # closing again tells the service nothing more
    assert exit_status(error) == status and factory.made[0].closed == [status]


def test_a_backend_without_export_adapter_says_so_and_names_itself(tmp_path):
    refused = pytest.raises(UsageError, match=r"backend 'mine' cannot export checkpoints \(its factory has no export_adapter\)")
    with ServiceLifetime(load_config(None, ["backend=mine"]), "mine", NoExport()) as door, refused:
        door.export_adapter("tinker://run/weights/step-000000", tmp_path)


def test_auto_picks_from_the_registry_and_the_config_names_the_choice():
    door = ServiceLifetime.choose(load_config(None, ["backend=auto", "tinker.api_key_env=MINDS_TEST_NO_KEY"]), load_plugins().registry)
    assert door.backend == door.config.backend == "local" and door.service is None  # chosen, not opened


# ---------------------------------------------------------------- SFT through the door


@pytest.mark.slow
def test_sft_retries_a_transient_service_failure_and_goes_on(tmp_path, scripted_backend):
    backend = scripted_backend({2: lambda: _status(503)})  # step 1's forward_backward fails once
    _sft(tmp_path, backend, "trainer.steps=3")
    assert [r["step"] for r in _rows(tmp_path / "sft" / "metrics.jsonl")] == [0, 1, 2]
    assert backend.script == {} and backend.closed == ["success"]


@pytest.mark.slow
def test_sft_reports_a_rejected_request_with_its_last_checkpoint(tmp_path, scripted_backend):
    backend = scripted_backend({3: lambda: _status(400)})
    with pytest.raises(ServiceCallError, match=r"step 2: the service rejected forward_backward .*last checkpoint is step 1"):
        _sft(tmp_path, backend, "trainer.steps=4", "trainer.save_every=1")
    assert backend.closed == ["errored"]


@pytest.mark.slow
def test_sft_reports_a_rejected_tokenizer_request_as_a_usage_error(tmp_path, scripted_backend):
    class TokenizerRejected(scripted_backend.Training):
        """FAKE hosted training client whose ``get_tokenizer`` the service rejects (the SDK asks for the model's info)."""

        def get_tokenizer(self) -> Any:
            raise _status(400)

    backend = scripted_backend({}, TokenizerRejected)
    with pytest.raises(UsageError, match=r"cannot start SFT on 'minds-small': Error code: 400 - scripted"):
        _sft(tmp_path, backend)
    assert backend.closed == ["errored"] and not (tmp_path / "sft").exists()


@pytest.mark.slow
def test_ctrl_c_during_sft_saves_the_step_and_the_run_resumes_after_it(tmp_path, scripted_backend):
    steps = 6
    before = signal.getsignal(signal.SIGINT)  # the handler the process had (another test may have set its own)
    backend = scripted_backend({3: _interrupt})  # Ctrl-C while step 2 trains
    with pytest.raises(RunInterrupted, match=r"stopped by SIGINT after step 2 \(3 of 6 done\); checkpoint saved") as stopped:
        _sft(tmp_path, backend, f"trainer.steps={steps}", "trainer.save_every=0")
    assert stopped.value.exit_code == 130 and "minds sft --resume" in str(stopped.value)
    assert backend.closed == ["interrupted"]
    run = tmp_path / "sft"
    assert [c["step"] for c in _rows(run / "checkpoints.jsonl")] == [2]
    assert signal.getsignal(signal.SIGINT) is before  # the door gave Ctrl-C back

    config = load_config(run_config_path(run), [], drop_redacted=True)
    train(config, resume_dir=run, plugins=load_plugins(extra=[("scripted", backend)]))
    assert backend.started == ["new", _rows(run / "checkpoints.jsonl")[0]["state_path"]]  # weights and optimizer restored
    assert [r["step"] for r in _rows(run / "metrics.jsonl")] == list(range(steps))
    assert _rows(run / "checkpoints.jsonl")[-1]["step"] == steps - 1
    assert _rows(run / "resumes.jsonl")[0]["step"] == 3


# ---------------------------------------------------------------- every command, in its own process


def _closings(stderr: str) -> list[str]:
    events = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    return [e["status"] for e in events if e.get("event") == "wrapped service closed"]


@pytest.mark.slow
def test_every_command_opens_and_closes_a_plugin_backend_through_the_door_and_its_checkpoint_exports(run_minds, installed_plugin, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from minds_core.backends.local.model.tiny_model import tiny_model_path

    plugins = ["toy_plugin", "wrapped_backend"]
    log = ["--log-format", "json"]
    # The run must train (the export below is of a trained adapter): seed 4's draws give its one group of two
    # 4-token replies rewards that differ (the untrained model rarely writes an "a").
    trained = run_minds([*log, "run", "--env", "toy_char_share", "--backend", "wrapped", "--steps", "1", "--name", "w", "--model", "minds-tiny",
                         "--set", "trainer.group_size=2", "--set", "trainer.groups_per_batch=1", "--set", "sampling.max_tokens=4",
                         "--set", "metrics.sinks=[]", "--set", "seed=4"], plugins=plugins)  # fmt: skip
    assert trained.returncode == 0 and _closings(trained.stderr) == ["success"], trained.stderr[-3000:]
    short = ["--set", "sampling.max_tokens=4", "--set", "trainer.eval_tasks=1", "--set", "trainer.eval_samples=1"]
    for args in (["eval", "runs/w", "--split", "train", "--json", *short], ["sample", "runs/w", "--prompt", "hi", "--max-tokens", "3"]):
        done = run_minds([*log, *args], plugins=plugins)
        assert done.returncode == 0 and _closings(done.stderr) == ["success"], (args, done.stderr[-3000:])
    environ = {k: v for k, v in os.environ.items() if not k.startswith("MINDS_")}
    environ["PYTHONPATH"] = os.pathsep.join(str(installed_plugin(p)) for p in plugins)
    chatted = subprocess.run([sys.executable, "-m", "minds_core.cli.command", *log, "chat", "runs/w", "--max-tokens", "3"], input="hello\n/exit\n",
                             capture_output=True, text=True, cwd=tmp_path, env=environ, timeout=300, check=False)  # fmt: skip
    assert chatted.returncode == 0 and _closings(chatted.stderr) == ["success"], chatted.stderr[-3000:]

    exported = run_minds([*log, "export", "runs/w", "adapter", "--json"], plugins=plugins)
    assert exported.returncode == 0 and _closings(exported.stderr) == ["success"], exported.stderr[-3000:]
    written = json.loads(exported.stdout)
    checkpoint = _rows(tmp_path / "runs" / "w" / "checkpoints.jsonl")[-1]
    assert written["source"] == checkpoint["state_path"] and written["base_model"] == "minds-tiny"
    assert any(json.loads(line).get("event") == "wrapped export" for line in exported.stderr.splitlines() if line.startswith("{"))
    base = AutoModelForCausalLM.from_pretrained(tiny_model_path())
    model = PeftModel.from_pretrained(base, str(tmp_path / "adapter"))  # a plain peft adapter, written by the plugin's backend
    assert any(p.abs().sum() > 0 for name, p in model.named_parameters() if "lora_B" in name)


@pytest.mark.slow
def test_ctrl_c_to_minds_sft_saves_and_minds_sft_resume_continues(run_minds, tmp_path):
    (tmp_path / "chats.jsonl").write_text("".join(json.dumps(c) + "\n" for c in CHATS))
    environ = {k: v for k, v in os.environ.items() if not k.startswith("MINDS_")}
    err = tmp_path / "stderr.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "minds_core.cli.command", "--log-format", "json", "--log-level", "debug", "sft", "--data", "chats.jsonl",
         "--steps", "500", "--name", "s", "--set", "trainer.save_every=0", "--set", "sft.eval_fraction=0", "--set", "metrics.sinks=[]"],
        cwd=tmp_path, env=environ, stdout=subprocess.DEVNULL, stderr=err.open("w"),
    )  # fmt: skip
    metrics = tmp_path / "runs" / "s" / "metrics.jsonl"
    deadline = time.time() + 180
    while not ("now stops the run" in err.read_text() and len(_rows(metrics)) >= 2):
        assert proc.poll() is None and time.time() < deadline, err.read_text()[-3000:]
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=300) == 130, err.read_text()[-3000:]
    last = _rows(tmp_path / "runs" / "s" / "checkpoints.jsonl")[-1]["step"]
    assert last == _rows(metrics)[-1]["step"] < 499 and "Traceback" not in err.read_text()
    assert f"minds sft --resume {Path('runs') / 's'}" in err.read_text()

    resumed = run_minds(["sft", "--resume", "runs/s", "--steps", str(last + 3)])
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert [r["step"] for r in _rows(metrics)] == list(range(last + 3))
