"""CI runs minds' hosted path for real: ``minds run --backend tinker`` through the SDK, against ``minds serve``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import tinker
import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM

from minds_core.backends.local.model.tiny_model import tiny_model_path

from .conftest import Served

pytestmark = pytest.mark.slow

KEY = "tml-hosted-path-key"
ARGS = [
    "--env", "toy_char_share", "--backend", "tinker", "--model", "minds-tiny",
    "--set", "trainer.save_every=1", "--set", "trainer.group_size=4", "--set", "trainer.groups_per_batch=2",
    "--set", "sampling.max_tokens=8", "--set", "metrics.sinks=[]", "--set", "seed=3",
]


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_minds_run_on_the_tinker_backend_trains_resumes_and_evaluates(served: Served, run_minds, tmp_path: Path) -> None:
    env = {"TINKER_API_KEY": KEY}
    first = run_minds(
        ["run", *ARGS, "--steps", "2", "--set", f"tinker.base_url={served.url}", "--name", "hosted"],
        plugins=["toy_plugin"], env=env,
    )
    assert first.returncode == 0, first.stderr[-4000:]
    run = tmp_path / "runs" / "hosted"
    assert [row["step"] for row in _rows(run / "metrics.jsonl")] == [0, 1]
    checkpoints = _rows(run / "checkpoints.jsonl")
    assert checkpoints and all("tinker://" in json.dumps(row) for row in checkpoints)
    assert [row["step"] for row in checkpoints] == [0, 1] and checkpoints[0]["sampler_path"] is None

    resumed = run_minds(["run", "--resume", str(run), "--set", "trainer.steps=5"], plugins=["toy_plugin"], env=env)
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    assert [row["step"] for row in _rows(run / "metrics.jsonl")] == [0, 1, 2, 3, 4]
    # the periodic save of step 0 (the first run's) is outdated by those of steps 2 and 3: deleted over HTTP
    assert [row["step"] for row in _rows(run / "checkpoints.jsonl")] == [1, 2, 3, 4]
    assert "could not delete" not in resumed.stderr and "FutureWarning" not in resumed.stderr
    rest = tinker.RestClient(base_url=served.url, api_key=KEY)
    with pytest.raises(tinker.NotFoundError):
        rest.get_weights_info_by_tinker_path(checkpoints[0]["state_path"]).result(timeout=30)
    evaluated = run_minds(
        ["eval", str(run), "--backend", "tinker", "--tasks", "2", "--samples", "2", "--json"], plugins=["toy_plugin"], env=env
    )
    assert evaluated.returncode == 0, evaluated.stderr[-4000:]
    summary = json.loads(evaluated.stdout)  # the last checkpoint's rollouts, sampled through the server
    assert summary, evaluated.stdout
    files = [p.read_text() for p in run.rglob("*") if p.is_file() and p.suffix in {".jsonl", ".yaml", ".log", ".json"}]
    for text in (first.stdout + first.stderr, resumed.stdout + resumed.stderr, evaluated.stdout + evaluated.stderr, *files):
        assert KEY not in text


def test_sample_chat_and_export_work_on_a_run_trained_through_the_server(served: Served, run_minds, tmp_path: Path) -> None:
    env = {"TINKER_API_KEY": KEY}
    trained = run_minds(
        ["run", *ARGS, "--steps", "2", "--set", f"tinker.base_url={served.url}", "--name", "served"], plugins=["toy_plugin"], env=env
    )
    assert trained.returncode == 0, trained.stderr[-4000:]
    run = tmp_path / "runs" / "served"

    sampled = run_minds(["sample", str(run), "--prompt", "hi", "-n", "2", "--max-tokens", "4", "--seed", "1", "--json"], env=env)
    assert sampled.returncode == 0, sampled.stderr[-4000:]
    replies = [json.loads(line) for line in sampled.stdout.splitlines()]
    assert [r["sample"] for r in replies] == [0, 1] and all(r["tokens"] >= 1 for r in replies)

    environ = {k: v for k, v in os.environ.items() if not k.startswith("MINDS_")} | env
    chatted = subprocess.run(
        [sys.executable, "-m", "minds_core.cli.command", "chat", str(run), "--max-tokens", "4", "--seed", "1"],
        input="hello\n/exit\n", capture_output=True, text=True, cwd=tmp_path, env=environ, timeout=300, check=False,
    )  # fmt: skip
    assert chatted.returncode == 0, chatted.stderr[-4000:]
    assert chatted.stdout.strip(), chatted.stderr[-2000:]

    out = tmp_path / "adapter"
    exported = run_minds(["export", str(run), str(out), "--json"], env=env)
    assert exported.returncode == 0, exported.stderr[-4000:]
    written = json.loads(exported.stdout)
    assert written["base_model"] == "minds-tiny" and written["source"].startswith("tinker://")
    base = AutoModelForCausalLM.from_pretrained(tiny_model_path(), dtype=torch.float32)
    model = PeftModel.from_pretrained(base, str(out))  # a plain peft adapter on the base model
    assert any(p.abs().sum() > 0 for name, p in model.named_parameters() if "lora_B" in name)
    for text in (trained.stderr, sampled.stdout + sampled.stderr, chatted.stdout + chatted.stderr, exported.stdout + exported.stderr):
        assert KEY not in text


AGENT = """
import json
from openai import OpenAI

reply = OpenAI(max_retries=0).chat.completions.create(model="any", messages=[{"role": "user", "content": "hi"}], max_tokens=6)
print(json.dumps({"reward": sum(reply.choices[0].token_ids) % 97 / 97}))
"""


def test_an_agent_program_trains_through_the_hosted_sampler(served: Served, run_minds, tmp_path: Path) -> None:
    """The harness environment's endpoint on the tinker backend: the program's calls are sampled by the server."""
    (tmp_path / "agent.py").write_text(AGENT)
    (tmp_path / "tasks.jsonl").write_text('{"prompt": "a"}\n{"prompt": "b"}\n')
    before = _sampled_tokens(served)
    ran = run_minds(
        ["run", "--env", "harness", "--backend", "tinker", "--model", "minds-tiny", "--steps", "2", "--name", "agent",
         "--set", f"tinker.base_url={served.url}", "--set", f'env.args={{"command": ["{sys.executable}", "agent.py"], "tasks": "tasks.jsonl"}}',
         "--set", "trainer.group_size=2", "--set", "trainer.groups_per_batch=2", "--set", "metrics.sinks=[]",
         "--set", "rollout.drop_constant_reward_groups=false"],
        env={"TINKER_API_KEY": KEY},
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-4000:]
    metrics = _rows(tmp_path / "runs" / "agent" / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [0, 1]
    assert all(m["rollouts/failed"] == 0 and m["env/harness/harness/calls"] == 1 and m["train/datums"] > 0 for m in metrics)
    assert _sampled_tokens(served) - before >= 2 * 4 * 1  # every episode's call was sampled by the server
    assert KEY not in ran.stdout + ran.stderr


def _sampled_tokens(served: Served) -> float:
    """The server's count of tokens sampled (its Prometheus metrics)."""
    text = urllib.request.urlopen(f"{served.url}/metrics", timeout=30).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith("minds_serve_tokens_sampled"))
