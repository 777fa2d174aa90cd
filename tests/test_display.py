"""What minds prints of a model's reply: control bytes are shown (␛, ␇), never sent to the terminal as they are."""

from __future__ import annotations

import concurrent.futures
import contextlib
import io
from types import SimpleNamespace

import pytest
import tinker
from transformers import AutoTokenizer

from minds_core.cli import checkpoint_commands
from minds_core.cli.command import main
from minds_core.envs.render import Renderer
from minds_core.evaluation.chat import ChatModel, chat_loop

pytest.importorskip("minds_core.backends.local", reason="the local backend (torch + peft) is not installed")

from minds_core.backends.local.model.tiny_model import tiny_model_path

#: A reply that clears the screen, rings the bell and moves the cursor home when printed raw.
HOSTILE = "ok\x1b[2J\x07\x1b[H!"


class FakeScriptedSampler:
    """A fake sampling client answering every request with one fixed reply: a real model's output cannot be chosen."""

    def __init__(self, tokens: list[int]) -> None:
        self.tokens = tokens

    def sample(self, prompt: tinker.types.ModelInput, num_samples: int, params: tinker.types.SamplingParams) -> concurrent.futures.Future:
        sequence = SimpleNamespace(tokens=self.tokens, stop_reason="stop", logprobs=[0.0] * len(self.tokens))
        future: concurrent.futures.Future = concurrent.futures.Future()
        future.set_result(SimpleNamespace(sequences=[sequence] * num_samples))
        return future


@pytest.fixture
def hostile_model() -> ChatModel:
    """minds-tiny's real tokenizer and chat template, with a sampler that replies HOSTILE."""
    renderer = Renderer(AutoTokenizer.from_pretrained(tiny_model_path()))
    return ChatModel(FakeScriptedSampler(renderer.encode(HOSTILE)), renderer, tinker.types.SamplingParams(max_tokens=8))


def test_chat_shows_control_bytes(hostile_model: ChatModel) -> None:
    out = io.StringIO()
    assert chat_loop(hostile_model, None, io.StringIO("hi\n"), out) == 1
    assert out.getvalue() == "assistant> ok␛[2J␇␛[H!\n"


def test_sample_shows_control_bytes_and_json_keeps_the_text(hostile_model: ChatModel, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.setattr(checkpoint_commands, "_chat_model", lambda args: contextlib.nullcontext((hostile_model, None)))
    assert main(["sample", "runs/any", "--prompt", "hi"]) == 0
    assert capsys.readouterr().out == "ok␛[2J␇␛[H!\n"
    assert main(["sample", "runs/any", "--prompt", "hi", "--json"]) == 0
    assert '"text": "ok\\u001b[2J\\u0007\\u001b[H!"' in capsys.readouterr().out  # JSON escapes them itself, exactly


def test_a_chat_line_that_is_not_utf8_is_reported_and_the_chat_goes_on(hostile_model: ChatModel, capsys) -> None:
    out = io.StringIO()
    lines = "\udcff\udcfe bad bytes\nhi\n"  # a pipe's undecodable bytes, as Python reads them (surrogateescape)
    assert chat_loop(hostile_model, None, io.StringIO(lines), out) == 1
    assert out.getvalue() == "assistant> ok␛[2J␇␛[H!\n"  # only "hi" was answered
    err = capsys.readouterr().err
    assert "chat: this line is not UTF-8 text (byte 0xff at character 0); nothing was sent" in err and "Traceback" not in err


def test_a_prompt_or_system_that_is_not_utf8_exits_2_naming_the_flag(hostile_model: ChatModel, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    checkpoint = "tinker://nowhere/sampler_weights/step-000000"  # refused before anything looks for it
    assert main(["sample", checkpoint, "--backend", "local", "--system", "sys\udcff", "--prompt", "hi"]) == 2
    assert "--system: not UTF-8 text (byte 0xff at character 3)" in capsys.readouterr().err
    monkeypatch.setattr(checkpoint_commands, "_chat_model", lambda args: contextlib.nullcontext((hostile_model, None)))
    assert main(["sample", "runs/any", "--prompt", "\udcfebad"]) == 2
    err = capsys.readouterr().err
    assert "--prompt: not UTF-8 text (byte 0xfe at character 0)" in err and "Traceback" not in err
