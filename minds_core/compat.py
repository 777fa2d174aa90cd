"""The seed harness's config keys: the ones minds renames, and the ones it accepts but has no use for.

A config written for the seed harness (``python run_experiment.py
configs/x.toml``) runs unchanged: its keys either name a minds key under
another name (``[trainer] total_batches`` is ``trainer.steps``) or configure
something minds does differently (``[model] renderer_name``), which is
accepted with one warning. Any other unknown key is still an error.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

#: Harness key (dotted) -> the minds key that means the same.
RENAMED: dict[str, str] = {
    "trainer.rollouts_per_example": "trainer.group_size",
    "trainer.batch_size": "trainer.groups_per_batch",
    "trainer.total_batches": "trainer.steps",
    "trainer.num_batches": "trainer.steps",
    "trainer.training_rank": "model.lora_rank",
    "trainer.async_off_policy_steps": "trainer.max_steps_off_policy",
    "trainer.seed": "seed",
    "trainer.args.max_new_tokens": "sampling.max_tokens",
    "trainer.args.temperature": "sampling.temperature",
    "trainer.args.top_p": "sampling.top_p",
}

#: Harness key (dotted) -> why it has no effect in minds (the key is accepted and dropped, with one warning).
NO_EFFECT: dict[str, str] = {
    "model.renderer_name": "minds renders prompts with the model's own chat template (options: model.chat_template_args)",
    "model.renderer": "minds renders prompts with the model's own chat template (options: model.chat_template_args)",
    "trainer.stream_minibatches": (
        "minds trains each step's batch in one forward_backward; to overlap sampling with training "
        "set trainer.max_steps_off_policy"
    ),
}


def pop_no_effect(data: dict[str, Any]) -> list[tuple[str, Any, str]]:
    """Remove the no-effect harness keys from ``data`` in place; returns (key, value, why) for each one found."""
    found = []
    for dotted, why in NO_EFFECT.items():
        *parents, leaf = dotted.split(".")
        node: Any = data
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict) and leaf in node:
            found.append((dotted, node.pop(leaf), why))
    return found


def warn_no_effect(found: Iterable[tuple[str, Any, str]], source: str) -> None:
    """One warning per harness key that minds accepts without using."""
    from minds_core.logs import get_logger

    log = get_logger("config")
    for key, value, why in found:
        log.warning("seed-harness key has no effect in minds and is ignored", key=key, value=value, why=why, source=source)
