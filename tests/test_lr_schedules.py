"""Learning-rate schedules in float64 against their definitions, and their use in a run."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from minds_core.base import logs
from minds_core.base.errors import ConfigError
from minds_core.config import load_config
from minds_core.train import train
from minds_core.training.lr_schedules import learning_rate


def test_warmup_rises_linearly_to_the_base_rate():
    assert [learning_rate(k, 10, 1e-3, "constant", warmup_steps=4) for k in range(6)] == pytest.approx(
        [0.25e-3, 0.5e-3, 0.75e-3, 1e-3, 1e-3, 1e-3]
    )


def test_linear_and_cosine_decay_follow_their_formulas():
    base, steps, warmup, floor = 2e-4, 12, 2, 0.1
    for k in range(warmup, steps):
        x = (k - warmup) / (steps - warmup)
        assert learning_rate(k, steps, base, "linear", warmup, floor) == pytest.approx(base * (1 - 0.9 * x), rel=1e-12)
        cosine = base * (0.1 + 0.9 * (1 + math.cos(math.pi * x)) / 2)
        assert learning_rate(k, steps, base, "cosine", warmup, floor) == pytest.approx(cosine, rel=1e-12)
    assert learning_rate(warmup, steps, base, "cosine", warmup, floor) == pytest.approx(base)
    # the last step is one step short of the floor
    assert learning_rate(steps - 1, steps, base, "linear", warmup, floor) == pytest.approx(base * (1 - 0.9 * 0.9))


def test_an_unknown_schedule_is_a_config_error():
    with pytest.raises(ConfigError, match="trainer.lr_schedule = 'exp': must be one of constant, linear, cosine"):
        load_config(None, ["trainer.lr_schedule=exp"])
    with pytest.raises(ConfigError, match=r"trainer.lr_min_ratio = 1.5: must be a finite number in \[0, 1\]"):
        load_config(None, ["trainer.lr_min_ratio=1.5"])


@pytest.mark.slow
def test_a_run_uses_the_scheduled_rate_each_step(plugins, tmp_path):
    logs.configure("json", "warning")
    config = load_config(None, ["env.id=toy_char_share", "sampling.max_tokens=8", "trainer.group_size=4",
                                "trainer.groups_per_batch=2", "trainer.steps=4", "trainer.learning_rate=1e-2",
                                "trainer.lr_schedule=cosine", "trainer.lr_warmup_steps=1", "metrics.sinks=[]",
                                f"runs_dir={tmp_path}", "name=run"])
    summary = train(config, plugins=plugins)
    rows = [json.loads(line) for line in Path(summary["run_dir"], "metrics.jsonl").read_text().splitlines()]
    trained = [r for r in rows if "train/learning_rate" in r]
    assert trained, rows
    for row in trained:
        assert row["train/learning_rate"] == pytest.approx(learning_rate(row["step"], 4, 1e-2, "cosine", 1))
