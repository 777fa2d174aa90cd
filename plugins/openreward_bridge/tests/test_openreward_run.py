"""`minds run` on the local backend against the real ORS server: three [[envs]] entries of id openreward."""

from __future__ import annotations

from pathlib import Path

import pytest

from minds_core import strip_think
from minds_core.testing import run_minds
from minds_core.training.data_order import DataOrder

pytest.importorskip("minds_core.backends.local", reason="the local backend (torch + peft) is not installed")

SEED = 56  # a seed whose schedule puts one group of each environment in each of the two steps
CONFIG = """\
seed = {seed}
backend = "local"

[trainer]
steps = 2
group_size = 2
groups_per_batch = 3

[sampling]
max_tokens = 12

[rollout]
concurrency = 4
retries = 0
max_failing_rollouts = 1
max_total_tokens = 900

[metrics]
rollouts_per_step = 3

[[envs]]
id = "openreward"
group_size = 3
args = {{ name = "toollab", base_url = "{url}", reward_reduction = "sum", max_reward = 2.0 }}

[[envs]]
id = "openreward"
split = "fragile"
args = {{ name = "toollab", base_url = "{url}" }}

[[envs]]
id = "openreward"
temperature = 0.7
args = {{ name = "maze", base_url = "{url}", nonterminal_reward = -0.5, reward_reduction = "min" }}
"""


@pytest.mark.slow
def test_minds_run_trains_on_several_openreward_environments(ors_server, tmp_path: Path) -> None:
    config = tmp_path / "openreward.toml"
    config.write_text(CONFIG.format(seed=SEED, url=ors_server.url))
    schedule = DataOrder(SEED, [1.0, 1.0, 1.0], [4, 2, 2], 3)
    assert [sorted(env for env, _ in schedule.batch(step)) for step in range(2)] == [[0, 1, 2], [0, 1, 2]]

    run = run_minds(str(config), runs_dir=tmp_path)
    assert run.exit_code == 0 and run.steps == [0, 1]
    steps = run.metrics
    assert sum(s["train/datums"] for s in steps) > 0  # the lab's answers score differently: something to learn
    for step in steps:
        assert step["rollouts/total"] == 3 + 2 + 2
        assert step["rollouts/failed"] == 2 and step["env/openreward#1/failed"] == 2
        assert step["groups/dropped_failures"] == 1
        assert step["env/openreward/finished"] == 1.0
        assert step["env/openreward#2/finished"] == 0.0 and step["env/openreward#2/no_tool_call"] >= 2

    rollouts = {}
    for group in run.rollouts:
        rollouts.setdefault(group["env"], []).extend(group["rollouts"])
    lab = ors_server.lab
    assert len(rollouts["openreward"]) == 6
    for rollout in rollouts["openreward"]:
        (reply,) = rollout["completion"]  # a plain reply is the answer: one turn
        assert rollout["reward"] == pytest.approx(min(lab.answer_reward(strip_think(reply).strip()), 2.0))
    assert len(rollouts["openreward#1"]) == 4
    assert all(r["reward"] is None and "caught fire" in r["error"] for r in rollouts["openreward#1"])
    assert len(rollouts["openreward#2"]) == 4
    for rollout in rollouts["openreward#2"]:
        assert rollout["reward"] == -0.5  # out of tokens before the exit: the nonterminal reward
        assert len(rollout["completion"]) >= 2  # feedback turns came back and the model answered them

    assert (lab.census.created, lab.census.live) == (6 + 4, 0)  # every rollout had exactly one session
    assert (ors_server.maze.census.created, ors_server.maze.census.live) == (4, 0)
