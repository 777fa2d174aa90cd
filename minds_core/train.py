"""``train``: the entry point of every training run, RL (``rl.loop``) or supervised (``sft.loop``) by ``trainer.mode``."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import attrs

from minds_core.base.masking import seal
from minds_core.config import RunConfig, to_dict
from minds_core.contract.plugins import Plugins


def train(
    config: RunConfig, resume_dir: Path | None = None, plugins: Plugins | None = None, start_over: bool = False
) -> dict[str, Any]:
    """Run (or resume) training; returns a summary of the run (``trained_steps``, and ``not_trained`` saying why
    when steps ran but none trained). ``plugins`` defaults to the installed ones; ``start_over`` trains a resumed
    run whose checkpoint list is gone again from step 0 (else such a resume is refused).

    The run's paths are made absolute first: a plugin's ``os.chdir`` never moves where the run writes;
    and its secrets are masked in all output, however the config was made.
    """
    seal(to_dict(config))
    if resume_dir is not None:
        resume_dir = resume_dir.absolute()
    else:
        config = attrs.evolve(config, runs_dir=str(Path(config.runs_dir).absolute()))
    if config.trainer.mode == "sft":
        from minds_core.sft.loop import train_sft

        return train_sft(config, plugins, resume_dir, start_over)
    from minds_core.rl.loop import train_rl

    return asyncio.run(train_rl(config, resume_dir, plugins, start_over))
