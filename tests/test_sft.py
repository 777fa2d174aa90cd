"""Supervised fine-tuning: assistant-only weights, the held-out loss, data errors, and that it learns."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import tinker
import yaml
from transformers import AutoTokenizer

from minds_core import Rubric, SingleTurnEnvironment, Task, hookimpl
from minds_core.backends.local.model.tiny_model import tiny_model_path
from minds_core.base import logs
from minds_core.base.errors import ConfigError
from minds_core.cli import command as cli
from minds_core.config import load_config
from minds_core.contract.plugins import load_plugins
from minds_core.envs.render import Renderer
from minds_core.sft.loop import mean_nll, read_conversations, sft_datum, tokenize
from minds_core.train import train

WORDS = ["cat", "dog", "sun", "map", "cup", "pen", "box", "hat", "bus", "egg", "fig", "jar"]


def _chats() -> list[dict]:
    """A tiny chat dataset: the assistant answers every request the same, learnable way."""
    chats = []
    for i, word in enumerate(WORDS * 3):
        messages = [{"role": "user", "content": f"Say {word} twice. ({i})"}, {"role": "assistant", "content": f"{word} {word}"}]
        if i % 3 == 0:
            messages = [{"role": "system", "content": "Be brief."}, *messages,
                        {"role": "user", "content": "Again."}, {"role": "assistant", "content": f"{word} {word}"}]
        chats.append({"messages": messages})
    return chats


def _write(path: Path, records: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


@pytest.fixture(scope="module")
def renderer():
    return Renderer(AutoTokenizer.from_pretrained(tiny_model_path()))


def test_only_the_assistants_tokens_are_weighted(renderer):
    messages = _chats()[0]["messages"]  # system, user, assistant, user, assistant
    tokens, weights = tokenize(renderer, messages)
    assert len(tokens) == len(weights) and set(weights) == {0.0, 1.0}
    full = renderer.text(messages)
    assert renderer.tokenizer.decode(tokens) == full  # the pieces add up to the whole conversation
    runs, previous = [], None
    for token, weight in zip(tokens, weights):
        if weight != previous:
            runs.append((weight, []))
            previous = weight
        runs[-1][1].append(token)
    decoded = [(weight, renderer.tokenizer.decode(run)) for weight, run in runs]
    # each assistant message's content and end-of-turn marker, nothing of the system or user turns
    assert [text for weight, text in decoded if weight] == ["cat cat<|im_end|>\n"] * 2
    assert all("assistant\n" in text for weight, text in decoded if not weight)


def test_mean_nll_is_the_weighted_negative_log_likelihood_in_float64():
    datum = sft_datum([5, 6, 7, 8], [0.0, 0.0, 1.0, 1.0])  # targets 6, 7, 8 with weights 0, 1, 1
    output = tinker.types.ForwardBackwardOutput(
        loss_fn_output_type="ArrayRecord",
        loss_fn_outputs=[{"logprobs": tinker.TensorData(data=[-9.0, -0.5, -1.5], dtype="float32", shape=[3])}],
        metrics={},
    )
    loss, tokens = mean_nll([datum], output)
    assert tokens == 2.0 and loss == pytest.approx((0.5 + 1.5) / 2, abs=1e-12)


@pytest.mark.slow
def test_sft_lowers_the_held_out_loss_by_a_clear_margin(tmp_path):
    logs.configure("json", "warning")
    data = _write(tmp_path / "chats.jsonl", _chats())
    config = load_config(None, ["trainer.mode=sft", f"sft.data={data}", "sft.batch_size=8", "sft.eval_fraction=0.25",
                                "trainer.steps=8", "trainer.learning_rate=1e-2", "metrics.sinks=[]", "model.base_model=minds-tiny",
                                f"runs_dir={tmp_path}", "name=sft"])
    summary = train(config, plugins=load_plugins())
    before, after = summary["eval/loss_before"], summary["eval/loss_after"]
    assert math.isfinite(before) and after < 0.5 * before, (before, after)
    rows = [json.loads(line) for line in (tmp_path / "sft" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(8)) and rows[-1]["eval/loss"] == after
    assert rows[-1]["train/loss"] < rows[0]["train/loss"]
    assert (tmp_path / "sft" / "checkpoints.jsonl").read_text().strip()


@pytest.mark.parametrize(
    ("line", "message"),
    [("not json", "chats.jsonl:2: not JSON"),
     ('{"text": "hi"}', 'chats.jsonl:2: no "messages" list'),
     ('{"messages": [{"role": "user", "content": "hi"}]}', "chats.jsonl:2: no assistant message to train on"),
     ('{"messages": [{"role": "bot", "content": "hi"}]}', "chats.jsonl:2: message 0 needs a role")],
)
def test_bad_data_names_the_file_and_line(tmp_path, line, message):
    path = tmp_path / "chats.jsonl"
    path.write_text(json.dumps(_chats()[1]) + "\n" + line + "\n")
    with pytest.raises(ConfigError, match=message):
        read_conversations(path)


QWEN_STYLE_TOOLS_TEMPLATE = (  # the shape of Qwen3's chat template (tools in the system turn, <tool_call> blocks), trimmed
    "{%- if tools %}{{ '<|im_start|>system\\n' }}{% if messages[0].role == 'system' %}{{ messages[0].content + '\\n\\n' }}{% endif %}"
    "{{ '# Tools\\n<tools>' }}{% for tool in tools %}{{ '\\n' + (tool | tojson) }}{% endfor %}{{ '\\n</tools><|im_end|>\\n' }}"
    "{%- elif messages[0].role == 'system' %}{{ '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}{%- endif %}"
    "{%- for m in messages %}{%- if m.role == 'assistant' %}{{ '<|im_start|>assistant\\n' + m.content }}"
    "{%- for call in m.tool_calls or [] %}{{ '<tool_call>\\n{\"name\": \"' + call.function.name + '\", \"arguments\": ' }}"
    "{{ call.function.arguments | tojson }}{{ '}\\n</tool_call>' }}{%- endfor %}{{ '<|im_end|>\\n' }}"
    "{%- elif m.role == 'tool' %}{{ '<|im_start|>user\\n<tool_response>\\n' + m.content + '\\n</tool_response><|im_end|>\\n' }}"
    "{%- elif m.role != 'system' %}{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{%- endif %}"
)

ADD = {"type": "function", "function": {"name": "add", "description": "Add two integers.",
                                        "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}}}


def _tool_chat(i: int) -> dict:
    """One line of OpenAI's chat fine-tuning format with function calling, as exported datasets hold it."""
    call = {"id": f"call_{i}", "type": "function", "function": {"name": "add", "arguments": json.dumps({"a": i, "b": i})}}
    return {"messages": [{"role": "system", "content": "Use the tools."},
                         {"role": "user", "content": f"What is {i} plus {i}?"},
                         {"role": "assistant", "content": "Let me guess.", "weight": 0},
                         {"role": "user", "content": "Use the tool."},
                         {"role": "assistant", "content": None, "tool_calls": [call]},
                         {"role": "tool", "tool_call_id": f"call_{i}", "content": str(2 * i)},
                         {"role": "assistant", "content": f"It is {2 * i}."}],
            "tools": [ADD]}  # fmt: skip


def _weighted(renderer, tokens, weights) -> list[str]:
    """The text of each run of weighted tokens."""
    runs: list[list[int]] = []
    for previous, (token, weight) in zip([0.0, *weights], zip(tokens, weights)):
        if weight:
            (runs[-1].append(token) if previous else runs.append([token]))
    return [renderer.tokenizer.decode(run) for run in runs]


def test_openai_format_tool_calls_train_with_their_tools_shown_and_weight_0_replies_unweighted(tmp_path):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path())
    tokenizer.chat_template = QWEN_STYLE_TOOLS_TEMPLATE
    renderer = Renderer(tokenizer)
    (chat,) = read_conversations(_write(tmp_path / "tools.jsonl", [_tool_chat(3)]))
    tokens, weights = tokenize(renderer, chat.messages, chat.tools)
    assert tokenizer.decode(tokens) == renderer.text(chat.messages, tools=chat.tools)
    assert '# Tools\n<tools>\n{"type": "function", "function": {"name": "add"' in tokenizer.decode(tokens)
    assert _weighted(renderer, tokens, weights) == [  # not "Let me guess." (weight 0)
        '<tool_call>\n{"name": "add", "arguments": {"a": 3, "b": 3}}\n</tool_call><|im_end|>\n',
        "It is 6.<|im_end|>\n",
    ]


@pytest.mark.parametrize(
    ("change", "message"),
    [(lambda m: m[4]["tool_calls"][0]["function"].update(arguments="{a: 1"), r'message 4: tool_calls\[0\] "arguments" is a string that is not a JSON object'),
     (lambda m: m[4]["tool_calls"][0].pop("function"), r'message 4: tool_calls\[0\] needs a "function" with a "name"'),
     (lambda m: m[1].update(tool_calls=[]), "message 1: tool_calls must be a non-empty list, on an assistant message"),
     (lambda m: m[2].update(content=None), "message 2 needs a role .* string content \\(null only beside tool_calls\\)"),
     (lambda m: m[2].update(weight=0.5), "message 2: weight must be 0 \\(not trained on\\) or 1, on an assistant message; got 0.5"),
     (lambda m: [r.update(weight=0) for r in m if r["role"] == "assistant"], r"no assistant message to train on \(weight 0 on every one\)")],
)
def test_bad_tool_calls_and_weights_name_the_line_and_message(tmp_path, change, message):
    record = _tool_chat(1)
    change(record["messages"])
    with pytest.raises(ConfigError, match="tools.jsonl:1: " + message):
        read_conversations(_write(tmp_path / "tools.jsonl", [record]))


@pytest.mark.slow
def test_minds_sft_trains_on_tool_calling_chats_with_a_model_whose_template_shows_tools(tmp_path):
    model = Path(shutil.copytree(tiny_model_path(), tmp_path / "tool-model"))  # a local model directory, as a user's
    (model / "chat_template.jinja").write_text(QWEN_STYLE_TOOLS_TEMPLATE)
    path = _write(tmp_path / "tools.jsonl", [_tool_chat(i) for i in range(8)])
    args = ["sft", "--data", str(path), "--model", str(model), "--steps", "3", "--name", "tools"]
    sets = [f"runs_dir={tmp_path}", "sft.batch_size=4", "trainer.learning_rate=1e-2", "metrics.sinks=[]"]
    assert cli.main([*args, *(a for s in sets for a in ("--set", s))]) == 0
    rows = [json.loads(line) for line in (tmp_path / "tools" / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["eval/loss"] < rows[0]["eval/loss_before"]


def test_tools_given_to_a_template_without_tools_stop_sft_with_exit_code_2(tmp_path, capsys):
    path = _write(tmp_path / "tools.jsonl", [_tool_chat(i) for i in range(4)])
    assert cli.main(["sft", "--data", str(path), "--set", f"runs_dir={tmp_path}"]) == 2
    assert "the data gives tools, but the model's chat template does not render tools" in capsys.readouterr().err


def test_the_sft_command_reports_bad_input_with_exit_code_2(tmp_path, capsys):
    path = _write(tmp_path / "chats.jsonl", [{"messages": []}])
    assert cli.main(["sft", "--data", str(path), "--set", f"runs_dir={tmp_path}"]) == 2
    assert "chats.jsonl:1: no \"messages\" list" in capsys.readouterr().err
    assert cli.main(["sft", "--data", str(tmp_path / "missing.jsonl")]) == 2
    assert cli.main(["sft", "--set", f"runs_dir={tmp_path}"]) == 2
    assert "SFT needs data" in capsys.readouterr().err
    assert not list(tmp_path.glob("*/config.yaml"))


def test_environment_tasks_without_answers_cannot_be_sft_data(plugins, tmp_path):
    config = load_config(None, ["trainer.mode=sft", "env.id=toy_char_share", f"runs_dir={tmp_path}"])
    with pytest.raises(ConfigError, match="toy_char_share has none"):
        train(config, plugins=plugins)


class CapitalsPlugin:
    """An environment whose tasks carry reference answers."""

    @hookimpl
    def minds_register_environments(self, register):
        pairs = [(w, w.upper()) for w in WORDS * 2]
        tasks = [Task(prompt=f"Shout {w}. ({i})", answer=a, id=str(i)) for i, (w, a) in enumerate(pairs)]
        register("shout", lambda: SingleTurnEnvironment({"train": tasks}, Rubric([lambda completion, answer: float(completion == answer)])))


@pytest.mark.slow
def test_sft_on_an_environments_tasks_with_answers(tmp_path):
    plugins = load_plugins(extra=[("shout", CapitalsPlugin())])
    config = load_config(None, ["trainer.mode=sft", "env.id=shout", "sft.eval_fraction=0.25", "trainer.steps=6",
                                "trainer.learning_rate=1e-2", "metrics.sinks=[]", f"runs_dir={tmp_path}", "name=shout"])
    summary = train(config, plugins=plugins)
    assert summary["eval/loss_after"] < 0.7 * summary["eval/loss_before"], summary


@pytest.mark.slow
def test_sft_shows_its_loss_and_its_config_and_report_name_what_ran(tmp_path, capsys):
    from minds_core.report import write_report

    data = _write(tmp_path / "chats.jsonl", _chats())
    code = cli.main(["sft", "--data", str(data), "--steps", "2", "--name", "s", "--set", f"runs_dir={tmp_path}",
                     "--set", "sft.batch_size=4", "--set", "metrics.sinks=[console]"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 0, err
    events = [json.loads(line) for line in err.splitlines() if line.startswith('{"event": "progress"')]
    assert [e["step"] for e in events] == [0, 1] and all(e["loss"] > 0 for e in events)  # off a terminal: one JSON event a step
    config = yaml.safe_load((tmp_path / "s" / "config.yaml").read_text())
    assert config["trainer"]["loss_fn"] == "cross_entropy" and config["backend"] == "local"  # not importance_sampling, not auto
    page = write_report(tmp_path / "s").read_text()
    header = page.split("</header>")[0]
    assert "backend: local" in header and "loss: cross_entropy" in header
    # SFT samples nothing: no reward tiles or rollout boxes that could only be empty, its losses instead
    assert "reward (last step)" not in page and "Sampled rollouts" not in page and "failed rollouts" not in page
    assert "train loss (last step)" in page and "held-out loss before training" in page
