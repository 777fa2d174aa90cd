"""tinker-cookbook's own loops, unmodified, through ``minds serve`` and in process (``cookbook_driver``).

Each loop runs in its own process, as a user runs a cookbook recipe (the cookbook configures the
root logger and keeps module-level registries). Run through ``minds serve``, the real SDK talks HTTP
to a real server; in process, the SDK's ``tinker.ServiceClient`` is minds' local backend.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import tinker

from minds_core.backends.local.rest import RestClient as LocalRestClient
from minds_core.backends.local.session import Session
from minds_core.backends.local.training.checkpoints import CheckpointStore

from .conftest import KEY, Served

pytestmark = pytest.mark.slow

DRIVER = Path(__file__).with_name("cookbook_driver.py")
MODES = ["served", "in-process"]


def _run(loop: str, log_path: Path, mode: str, root: Path, served: Served, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TINKER_BASE_URL": served.url, "TINKER_API_KEY": KEY, "HF_HUB_OFFLINE": "1"}
    where = ("--in-process", str(root)) if mode == "in-process" else ()
    return subprocess.run(
        [sys.executable, str(DRIVER), loop, str(log_path), *where, *extra],
        capture_output=True, text=True, env=env, timeout=600, check=False,
    )  # fmt: skip


def _rest(mode: str, root: Path, served: Served) -> Any:
    """The SDK's RestClient on the server, or the local one on the in-process checkpoint root."""
    if mode == "served":
        return tinker.RestClient(base_url=served.url, api_key=KEY)
    return LocalRestClient(CheckpointStore(root), Session(None, None))


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("mode", MODES)
def test_the_cookbooks_sft_loop_trains_dies_midway_and_resumes(served: Served, tmp_path: Path, mode: str) -> None:
    log_path, root = tmp_path / "sft", tmp_path / "root"
    crashed = _run("sft", log_path, mode, root, served, "--crash-at-batch", "5")
    assert crashed.returncode != 0 and "simulated crash at batch 5" in crashed.stderr, crashed.stderr[-3000:]
    saved = _jsonl(log_path / "checkpoints.jsonl")
    assert [(r["name"], r.get("rolling", False)) for r in saved] == [("000001", True), ("000002", False)]

    resumed = _run("sft", log_path, mode, root, served)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    logs = (log_path / "logs.log").read_text()
    assert f"Resumed training from {saved[-1]['state_path']}" in logs
    assert f"Renderer metadata matches for checkpoint {saved[-1]['state_path']}: role_colon" in logs  # user_metadata kept

    metrics = [row for row in _jsonl(log_path / "metrics.jsonl") if "train_mean_nll" in row]
    assert [row["step"] for row in metrics] == list(range(6))  # the rows past the checkpoint were dropped, then redone
    assert all(math.isfinite(row["train_mean_nll"]) and row["grad_norm:mean"] > 0 for row in metrics)
    assert metrics[-1]["train_mean_nll"] < metrics[0]["train_mean_nll"] / 2

    rest = _rest(mode, root, served)
    records = _jsonl(log_path / "checkpoints.jsonl")
    final = records[-1]
    assert final["name"] == "final"
    run = rest.get_training_run_by_tinker_path(final["state_path"]).result()
    assert run.user_metadata == {"renderer_name": "role_colon"}
    listed = {c.tinker_path: c for c in rest.list_checkpoints(run.training_run_id).result().checkpoints}
    assert listed[final["state_path"]].expires_at is None  # the final checkpoint is kept
    periodic = next(r for r in records if r["name"] == "000004" and r["state_path"] in listed)
    assert listed[periodic["state_path"]].expires_at is not None  # the periodic ones carry the cookbook's 7-day ttl
    rolling = [r["state_path"] for r in records if r.get("rolling") and r["state_path"].startswith(f"tinker://{run.training_run_id}/")]
    assert rolling and not set(rolling) & set(listed)  # the resumed run's rolling saves were deleted as it went


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("loop", ["rl", "rl-stable", "rl-async"])
def test_the_cookbooks_rl_loops_train_on_multi_turn_episodes(served: Served, tmp_path: Path, mode: str, loop: str) -> None:
    """Sync with ``importance_sampling``, sync with math_rl's ``stable_reinforce``, and async (its default loss)."""
    log_path, root = tmp_path / loop, tmp_path / "root"
    done = _run(loop, log_path, mode, root, served)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Training completed successfully" in (log_path / "logs.log").read_text()

    steps = [row for row in _jsonl(log_path / "metrics.jsonl") if "optim/kl_sample_train_v1" in row]
    assert [row["step"] for row in steps] == [0, 1, 2]
    for row in steps:
        assert row["env/all/turns_per_episode"] == 2 and row["env/all/total_turns"] == 16
        assert all(math.isfinite(value) for value in row.values() if isinstance(value, float)), row
    assert any(row["grad_norm:mean"] > 0 for row in steps)  # some group's rewards differed: the policy moved
    if loop != "rl-async":  # on policy: the trainer's log-probs of the sampled tokens are the sampler's
        assert all(abs(row["optim/kl_sample_train_v1"]) < 1e-3 for row in steps), [r["optim/kl_sample_train_v1"] for r in steps]
    else:
        assert max(row["sampling_client/step_max"] for row in steps) >= 1  # it sampled from updated weights

    final = _jsonl(log_path / "checkpoints.jsonl")[-1]
    assert final["name"] == "final"
    rest = _rest(mode, root, served)
    assert rest.get_weights_info_by_tinker_path(final["sampler_path"]).result().lora_rank == 4
