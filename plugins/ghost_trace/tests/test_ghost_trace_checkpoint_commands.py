"""A ghost_trace run's checkpoint, used end to end: minds eval, export (loaded by plain peft), sample and chat."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("minds_core.backends.local", reason="the local backend (torch + peft) is not installed")

import tinker
import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer

from minds_core.backends.local import ServiceClient
from minds_core.backends.local.model.tiny_model import tiny_model_path
from minds_core.cli.command import main
from minds_core.report.page import printable
from minds_core.testing import run_minds
from minds_ghost_trace.environment import REWARD_NAME, split_words

CONFIG = Path(__file__).resolve().parents[3] / "configs" / "ghost_trace.toml"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    runs = tmp_path_factory.mktemp("runs")
    run = run_minds(
        str(CONFIG), "--steps", "2", "--model", "minds-tiny", runs_dir=runs, name="gt",
        overrides=["env.args.num_examples=8", "trainer.group_size=4", "trainer.groups_per_batch=2",
                   "sampling.max_tokens=16", "trainer.learning_rate=1e-2",
                   "trainer.advantage=direct"],  # untrained, every reward is -10: centred advantages would all be 0
    )  # fmt: skip
    assert run.exit_code == 0 and run.checkpoints
    return run


def _logprobs(model: torch.nn.Module, tokens: list[int]) -> list[float]:
    with torch.no_grad():
        logits = model(torch.tensor([tokens])).logits[0].float()
    picked = torch.log_softmax(logits[:-1], dim=-1).gather(-1, torch.tensor(tokens[1:])[:, None])[:, 0]
    return picked.tolist()


def _probe_tokens() -> list[int]:
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path())
    messages = [{"role": "user", "content": "Secret word: lantern"}, {"role": "assistant", "content": "12, 7, 300, 45, 9"}]
    return tokenizer.encode(tokenizer.apply_chat_template(messages, tokenize=False), add_special_tokens=False)


@pytest.mark.slow
def test_minds_eval_on_the_run_reports_and_keeps_every_rollout(trained, capsys):
    assert main(["eval", str(trained.run_dir), "--tasks", "3", "--samples", "2", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    path = trained.run_dir / "eval" / "step-000001-test.jsonl"
    assert summary["output"] == str(path) and summary["splits"] == {"ghost_trace": "test"}
    groups = [json.loads(line) for line in path.read_text().splitlines()]  # one line per task, as in rollouts.jsonl
    rows = [rollout for group in groups for rollout in group["rollouts"]]
    assert len(groups) == 3 and len(rows) == 6 and all(r["error"] is None for r in rows)
    assert {g["answer"] for g in groups} <= set(split_words(0)["test"])  # held-out words only
    by_task = {group["task"]: [row["reward"] for row in group["rollouts"]] for group in groups}
    for group in groups:
        assert group["prompt"][-1]["role"] == "user"
        for row in group["rollouts"]:
            assert row["components"] == {REWARD_NAME: row["reward"]}
            assert row["messages"][0]["content"] == row["completion"][0] and row["messages"][0]["stop_reason"] in ("stop", "length")
    assert summary["reward/mean"] == pytest.approx(statistics.fmean(statistics.fmean(v) for v in by_task.values()))
    assert summary[f"component/{REWARD_NAME}"] == pytest.approx(statistics.fmean(r["reward"] for r in rows))
    assert summary["reward/ci95_low"] <= summary["reward/mean"] <= summary["reward/ci95_high"]
    assert "pass@1" not in summary  # latent log-prob rewards are not binary
    assert main(["eval", str(trained.run_dir), "--tasks", "1", "--samples", "1", "--json"]) == 0
    assert (trained.run_dir / "eval" / "step-000001-test-2.jsonl").exists() and path.exists()  # never overwritten


@pytest.mark.slow
def test_minds_eval_on_a_tinker_path_writes_to_output(trained, tmp_path, capsys):
    sampler = trained.checkpoints[-1]["sampler_path"]
    out = tmp_path / "x.jsonl"
    code = main(["eval", sampler, "--config", str(CONFIG), "--set", f"runs_dir={trained.run_dir.parent}",
                 "--set", "sampling.max_tokens=8", "--tasks", "2", "--samples", "1", "--output", str(out)])  # fmt: skip
    assert code == 0
    assert "reward mean" in capsys.readouterr().out
    assert len(out.read_text().splitlines()) == 2 and out.with_name("x.summary.json").exists()
    kept = out.read_text(), out.with_name("x.summary.json").read_text()
    again = main(["eval", sampler, "--config", str(CONFIG), "--set", f"runs_dir={trained.run_dir.parent}", "--output", str(out)])
    assert again == 2 and "already exist" in capsys.readouterr().err  # checked before evaluating: nothing is lost
    assert (out.read_text(), out.with_name("x.summary.json").read_text()) == kept


@pytest.mark.slow
def test_export_loads_in_plain_peft_with_the_local_samplers_logprobs(trained, tmp_path):
    out = tmp_path / "adapter"
    assert main(["export", str(trained.run_dir), str(out), "--merge"]) == 0
    tokens = _probe_tokens()
    service = ServiceClient(checkpoint_root=trained.run_dir.parent / "_checkpoints")
    sampler = service.create_sampling_client(model_path=trained.checkpoints[-1]["sampler_path"]).result()
    local = sampler.compute_logprobs(tinker.types.ModelInput.from_ints(tokens)).result()[1:]
    service.close("success")

    config = json.loads((out / "adapter_config.json").read_text())
    assert Path(config["base_model_name_or_path"]) == tiny_model_path()
    card = (out / "README.md").read_text()
    assert f"A LoRA adapter (rank {config['r']}) for the base model `{tiny_model_path()}`" in card
    assert "reinforcement learning (`importance_sampling`) on the environment(s) `ghost_trace`" in card
    assert "saved after step 1" in card and "PeftModel.from_pretrained" in card and "More Information Needed" not in card
    base = AutoModelForCausalLM.from_pretrained(tiny_model_path(), dtype=torch.float32)
    base_lps = _logprobs(base, tokens)
    peft_lps = _logprobs(PeftModel.from_pretrained(base, str(out)).eval(), tokens)
    assert max(abs(a - b) for a, b in zip(peft_lps, local)) < 1e-4
    assert max(abs(a - b) for a, b in zip(base_lps, local)) > 1e-2  # the adapter really changed the model

    merged = AutoModelForCausalLM.from_pretrained(out / "merged", dtype=torch.float32)
    assert max(abs(a - b) for a, b in zip(_logprobs(merged, tokens), local)) < 1e-4
    assert AutoTokenizer.from_pretrained(out / "merged").chat_template


def test_export_refuses_a_folder_in_use_and_keeps_it(trained, tmp_path, capsys):
    out = tmp_path / "busy"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert main(["export", str(trained.run_dir), str(out)]) == 2
    assert "not empty" in capsys.readouterr().err and (out / "notes.txt").read_text() == "mine"
    assert [p.name for p in tmp_path.iterdir()] == ["busy"]  # no staging folder left behind


@pytest.mark.slow
def test_bad_checkpoints_are_usage_errors(trained, tmp_path, capsys):
    assert main(["eval", str(tmp_path / "nope")]) == 2
    assert "not a run folder (no such folder)" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "config.yaml").write_text((trained.run_dir / "config.yaml").read_text())
    assert main(["sample", str(empty), "--prompt", "hi"]) == 2
    assert "has no checkpoint yet" in capsys.readouterr().err
    missing = "tinker://local-0000/sampler_weights/step-000009"
    assert main(["sample", missing, "--prompt", "hi", "--backend", "local", "--set", f"runs_dir={tmp_path}"]) == 2
    assert f"cannot sample from {missing}" in capsys.readouterr().err
    assert main(["eval", str(trained.run_dir), "--step", "7"]) == 2
    assert "no checkpoint of step 7; saved steps: 1" in capsys.readouterr().err
    assert main(["sample", str(trained.run_dir), "--prompt", "x" * 9000]) == 2  # beyond minds-tiny's 8192 tokens
    assert "the service rejected the request" in capsys.readouterr().err
    assert main(["chat", str(trained.run_dir), "--max-tokens", "0"]) == 2
    assert "--max-tokens 0: must be an integer in [1, 131072]" in capsys.readouterr().err


def _cli(args: list[str], stdin: str = "") -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}
    return subprocess.run([sys.executable, "-m", "minds_core.cli.command", *args], input=stdin, capture_output=True,
                          text=True, encoding="utf-8", timeout=300, env=env)  # fmt: skip


@pytest.mark.slow
def test_chat_reads_stdin_and_matches_minds_sample(trained):
    settings = ["--seed", "5", "--max-tokens", "8", "--system", "Answer briefly."]
    chat = _cli(["chat", str(trained.run_dir), *settings], "hello\n/reset\nhello\n/exit\nnever read\n")
    assert chat.returncode == 0, chat.stderr[-2000:]
    replies = chat.stdout.split("assistant> ")[1:]
    assert len(replies) == 2 and replies[0] == replies[1]  # /reset: the same conversation, the same seed
    assert "conversation cleared" in chat.stderr
    sample = _cli(["sample", str(trained.run_dir), "--prompt", "hello", "--json", *settings])
    assert sample.returncode == 0, sample.stderr[-2000:]
    (reply,) = [json.loads(line) for line in sample.stdout.splitlines()]
    assert replies[0] == printable(reply["text"]) + "\n" and 1 <= reply["tokens"] <= 8  # chat shows control bytes


@pytest.mark.slow
def test_sample_can_use_the_environments_system_prompt(trained, capsys):
    from minds_ghost_trace.prompts import SYSTEM_PROMPT, task_prompt

    settings = ["--prompt", task_prompt("lantern"), "--seed", "2", "--max-tokens", "8", "--json"]
    assert main(["sample", str(trained.run_dir), "--env-system", *settings]) == 0
    with_env = json.loads(capsys.readouterr().out)
    assert main(["sample", str(trained.run_dir), "--system", SYSTEM_PROMPT, *settings]) == 0
    assert json.loads(capsys.readouterr().out) == with_env
    assert main(["sample", str(trained.run_dir), *settings]) == 0
    assert json.loads(capsys.readouterr().out)["logprob"] != with_env["logprob"]  # the system prompt made a difference
