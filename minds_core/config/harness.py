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

from minds_core.base.errors import ConfigError
from minds_core.config.paths import get_path, set_path

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
        node = get_path(data, parents)
        if isinstance(node, dict) and leaf in node:
            found.append((dotted, node.pop(leaf), why))
    return found


def warn_no_effect(found: Iterable[tuple[str, Any, str]], source: str) -> None:
    """One warning per harness key that minds accepts without using."""
    from minds_core.base.logs import get_logger

    log = get_logger("config")
    for key, value, why in found:
        log.warning("seed-harness key has no effect in minds and is ignored", key=key, value=value, why=why, source=source)


def apply_harness_keys(data: dict[str, Any], source: str = "config") -> dict[str, Any]:
    """The seed harness's keys in ``data`` as minds keys, in place; those without effect are dropped with a warning."""
    for old, new in RENAMED.items():
        *parents, leaf = old.split(".")
        node = get_path(data, parents)
        if isinstance(node, dict) and leaf in node:
            *new_parents, new_leaf = new.split(".")
            target = get_path(data, new_parents)
            if isinstance(target, dict) and new_leaf in target and target[new_leaf] != node[leaf]:
                raise ConfigError(f"{source}: {old} and {new} mean the same setting and disagree ({node[leaf]!r} vs {target[new_leaf]!r}): keep one")
            set_path(data, new.split("."), node.pop(leaf))
    warn_no_effect(pop_no_effect(data), source)
    trainer = data.get("trainer")
    if isinstance(trainer, dict) and trainer.get("args") == {}:
        del trainer["args"]
    return data

