"""Named recipes: ``trainer.preset = "grpo" | "dr_grpo" | "dapo" | "gspo" | "self_distill"``.

A preset is a set of config values, applied under the config file and
``--set``: a key given explicitly always wins. Each preset follows its paper:

- grpo: Shao et al. 2024 (DeepSeekMath). Advantage ``(r - mean) / std`` of the
  group, PPO's clipped ratio with epsilon 0.2, tokens averaged per sequence,
  then over sequences. (The paper's in-loss KL term, beta 0.04, is not part of
  the preset; ``trainer.kl_penalty`` adds a KL penalty to the reference.)
- dr_grpo: Liu et al. 2025 ("Understanding R1-Zero-like training"). Advantage
  ``r - mean`` (no std), PPO with epsilon 0.2, per-sequence token SUMS divided by
  a constant (the generation budget ``sampling.max_tokens``), no length bias.
- dapo: Yu et al. 2025. Advantage ``(r - mean) / std``, PPO with clip-higher
  (epsilon_low 0.2, epsilon_high 0.28), token-level mean over the whole batch,
  dynamic-sampling filtering (groups whose rewards are all equal are dropped),
  overlong filtering and the soft overlong penalty over the last 20% of the
  generation budget (4096 of 20480 tokens in the paper).
- gspo: Zheng et al. 2025. Advantage ``(r - mean) / std``, the sequence-level
  ratio ``s_i = exp(mean_t log(p/q))`` clipped to ``[1 - 3e-4, 1 + 4e-4]``
  (the ``gspo`` loss), one term per sequence averaged over sequences.
- self_distill: on-policy self-distillation (as in OPSD, verl #6827, miles #2410). The teacher is the
  training policy itself reading each task's privileged context (``Task.privileged_context``, else
  its answer) before the episode; the loss is the top-k forward KL to it at every sampled token
  (``topk_distill``): on minds-tiny's toy_secret the reverse KL, mode-seeking towards a teacher that
  moves with the student, collapsed to one repeated character where the forward KL learned the answer.
  ``distill.teacher = ""`` makes the teacher the base model instead, and ``distill.reward_weight``
  mixes in the environment's reward.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from minds_core.base.errors import ConfigError, did_you_mean

PRESETS: dict[str, dict[str, Any]] = {
    "grpo": {
        "trainer.advantage": "group_norm",
        "trainer.loss_fn": "ppo",
        "trainer.loss_fn_config": {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2},
        "trainer.loss_aggregation": "sequence_mean",
    },
    "dr_grpo": {
        "trainer.advantage": "group_mean",
        "trainer.loss_fn": "ppo",
        "trainer.loss_fn_config": {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2},
        "trainer.loss_aggregation": "fixed_length",
    },
    "dapo": {
        "trainer.advantage": "group_norm",
        "trainer.loss_fn": "ppo",
        "trainer.loss_fn_config": {"clip_low_threshold": 0.8, "clip_high_threshold": 1.28},
        "trainer.loss_aggregation": "token_mean",
        "rollout.drop_constant_reward_groups": True,
        "trainer.overlong_filter": True,
        "trainer.overlong_penalty_window": 0.2,
    },
    "gspo": {
        "trainer.advantage": "group_norm",
        "trainer.loss_fn": "gspo",
        "trainer.loss_fn_config": {"clip_low_threshold": 1 - 3e-4, "clip_high_threshold": 1 + 4e-4},
        "trainer.loss_aggregation": "sequence_mean",
    },
    "self_distill": {
        "trainer.loss_fn": "topk_distill",
        "distill.teacher": "policy",
        "distill.privileged_context": True,
        "distill.divergence": "forward",
    },
}
"""Preset name -> the dotted config keys it sets and their values."""


def _lookup(data: Mapping[str, Any], dotted: str) -> tuple[bool, Any]:
    node: Any = data
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return False, None
        node = node[part]
    return True, node


def preset_name(data: Mapping[str, Any]) -> str:
    """The ``trainer.preset`` of raw config data ("" when none); a bad name is a ConfigError."""
    _, name = _lookup(data, "trainer.preset")
    if name in (None, ""):
        return ""
    if not isinstance(name, str) or name not in PRESETS:
        raise ConfigError(
            f"trainer.preset = {name!r}: unknown preset{did_you_mean(str(name), PRESETS)}; "
            f"choose one of {', '.join(PRESETS)} (or leave it out)"
        )
    return name


def apply_preset(data: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of raw config data with the preset's values filled in where no key was given."""
    out = _copy(data)
    name = preset_name(out)
    preset = PRESETS.get(name, {})
    given_loss, loss = _lookup(out, "trainer.loss_fn")
    for dotted, value in preset.items():
        if dotted == "trainer.loss_fn_config" and given_loss and loss != preset["trainer.loss_fn"]:
            continue  # the preset's loss settings belong to its loss, not to one the config chose
        if _lookup(out, dotted)[0]:
            continue
        *parents, leaf = dotted.split(".")
        node = out
        for part in parents:
            node = node.setdefault(part, {})
        if isinstance(node, dict):  # a malformed section is reported by the schema check
            node[leaf] = _copy(value)
    return out


def describe_preset(config: Any) -> list[str]:
    """One line per key the config's preset sets: the value it set, or that an explicit key overrode it."""
    name = config.trainer.preset
    lines = []
    for dotted, value in PRESETS.get(name, {}).items():
        node = config
        for part in dotted.split("."):
            node = getattr(node, part)
        if node == value:
            lines.append(f"preset {name} set {dotted} = {value!r}")
        else:
            lines.append(f"preset {name} would set {dotted} = {value!r}; overridden by the config: {node!r}")
    return lines


def _copy(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value
