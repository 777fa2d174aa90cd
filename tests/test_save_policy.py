"""Checkpoints by default: rolling state-only saves every save_every steps in two slots, the last step in full."""

from __future__ import annotations

from minds_core import logs
from minds_core.config import RunConfig, load_config
from minds_core.run_directory import RunDirectory
from minds_core.training import train


def test_runs_save_periodically_by_default():
    assert RunConfig().trainer.save_every == 5


def test_rolling_saves_keep_the_last_two_states_and_the_final_checkpoint(plugins, tmp_path):
    logs.configure("json", "warning")
    config = load_config(None, ["env.id=toy_char_share", "trainer.steps=7", "trainer.save_every=2",
                                "trainer.group_size=2", "trainer.groups_per_batch=1", "sampling.max_tokens=4",
                                "metrics.sinks=[]", f"runs_dir={tmp_path}", "name=r"])
    train(config, plugins=plugins)
    saved = RunDirectory(tmp_path / "r").checkpoints()
    # rolling saves after steps 1, 3, 5: the one of step 1 was overwritten by step 5 and its line dropped
    assert [c.step for c in saved] == [3, 5, 6]
    assert [c.sampler_path is None for c in saved] == [True, True, False]
    assert saved[0].state_path != saved[1].state_path
    (model_dir,) = [p for p in (tmp_path / "_checkpoints").iterdir() if not p.name.startswith(".")]
    weights = sorted(p.name for p in (model_dir / "weights").iterdir() if not p.name.startswith("."))
    assert weights == ["rolling-0", "rolling-1", "step-000006"]
    assert sorted(p.name for p in (model_dir / "sampler_weights").iterdir()) == ["step-000006"]
