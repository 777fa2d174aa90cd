"""The run configuration's schema: one attrs class per section, with defaults and value checks.

A field's ``check`` (in its metadata) returns what is wrong with a value, or
None; ``loading.build_config`` runs every check and reports all problems
together. The ``#:`` comment above a field says what it means.
"""

from __future__ import annotations

import math
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from minds_core.aggregation import AGGREGATIONS
from minds_core.lr_schedules import LR_SCHEDULES
from minds_core.presets import PRESETS

DEFAULT_BASE_MODEL = "minds-tiny"

# What a run can do: numbers past these never finish, overflow, or exhaust memory.
MAX_STEPS = 10_000_000  #: steps, and every "every N steps" setting
MAX_GROUP = 4096  #: rollouts per task, groups per step
MAX_ROLLOUTS_PER_STEP = 65_536  #: group_size x groups_per_batch
MAX_TOKENS = 1_048_576  #: tokens of a conversation
MAX_SAMPLE_TOKENS = 131_072  #: tokens per sampled turn
MAX_LORA_RANK = 1024
MAX_WEIGHT = 1e6  #: environment and reward weights, loss settings, penalties
MAX_NAME = 200  #: characters of a run name
MAX_SEED = 2**63 - 1  #: seeds are 64-bit signed integers on the wire
MAX_TEMPERATURE = 100.0
MAX_TOP_K = 1_000_000
MAX_SECONDS = 7 * 24 * 3600.0  #: a rollout's timeout

Check = Callable[[Any], str | None]


def _unit(value: Any) -> str | None:
    return None if 0 < value <= 1 else "must be in (0, 1]"


def _in_range(low: float, high: float) -> Check:
    """Between ``low`` and ``high``, both included: what a run can do (bigger counts never finish, or exhaust memory)."""
    return lambda value: None if low <= value <= high else f"must be in [{low}, {high}]"


def _in_open_range(low: float, high: float) -> Check:
    return lambda value: None if low < value <= high else f"must be in ({low}, {high}]"


def _dict_values(check: Check) -> Check:
    """``check`` of each value of a table, naming the first key whose value fails it."""

    def checked(table: dict[str, Any]) -> str | None:
        for key, value in table.items():
            if problem := check(value):
                return f"{key} = {value!r}: {problem}"
        return None

    return checked


def _run_name(value: str) -> str | None:
    if value in (".", "..") or any(c in value for c in "/\\\0") or len(value) > MAX_NAME:
        return f"must be one folder name (no / or \\, not . or .., at most {MAX_NAME} characters), as runs live in runs_dir/<name>"
    return None


def _folder(value: str) -> str | None:
    """What keeps ``value`` from being (or becoming) a folder: empty, a NUL, or a file on its path."""
    if not value or "\0" in value:
        return "must be a folder path"
    path = Path(value)
    for place in (path, *path.parents):
        if place.exists():
            return None if place.is_dir() else f"{place} is a file, not a folder: pick another runs_dir"
    return None


def _one_of(*allowed: str) -> Check:
    return lambda value: None if value in allowed else f"must be one of {', '.join(allowed)}"


def _finite(check: Check) -> Check:
    return lambda value: "must be a finite number" if math.isnan(value) or math.isinf(value) else check(value)


def _field(default: Any, check: Check | None = None) -> Any:
    """An attrs field with ``default`` (lists and dicts copied per instance) and an optional ``check`` of its value."""
    metadata = {"check": check} if check is not None else {}
    if isinstance(default, (list, dict)):
        return attrs.field(factory=lambda: type(default)(default), metadata=metadata)
    return attrs.field(default=default, metadata=metadata)


@attrs.define
class RewardRef:
    """A registered reward function and its weight in a rubric."""

    #: a registered reward function's name
    name: str
    #: its weight in the rubric's weighted sum
    weight: float = _field(1.0, _finite(_in_range(-MAX_WEIGHT, MAX_WEIGHT)))
    #: keyword arguments bound to the function (a reward class is built with them)
    args: dict[str, Any] = _field({})


@attrs.define
class EnvConfig:
    """One environment of the run."""

    #: registered environment name, module path, or folder
    id: str = _field("")
    #: the environment's name in metrics and logs (env/<name>/...); default: the id
    name: str = _field("")
    #: keyword arguments for the environment's loader
    args: dict[str, Any] = _field({})
    #: share of groups drawn from this environment; 0 = off
    weight: float = _field(1.0, _finite(_in_range(0, MAX_WEIGHT)))
    #: the split whose tasks are trained on
    split: str = _field("train")
    #: replace the environment's rubric with these
    rewards: list[RewardRef] = _field([])
    #: add these to the environment's rubric
    extra_rewards: list[RewardRef] = _field([])
    #: overrides trainer.group_size
    group_size: int | None = _field(None, _in_range(1, MAX_GROUP))
    #: overrides rollout.max_failing_rollouts
    max_failing_rollouts: int | None = _field(None, _in_range(0, MAX_GROUP))
    #: overrides sampling.temperature
    temperature: float | None = _field(None, _finite(_in_range(0, MAX_TEMPERATURE)))
    #: overrides sampling.top_p
    top_p: float | None = _field(None, _unit)

    @property
    def label(self) -> str:
        """What metrics and logs call this environment: ``name``, else ``id``."""
        return self.name or self.id


@attrs.define
class ModelConfig:
    """The policy: a base model and the LoRA adapter trained on it."""

    #: a model name the backend serves, or a local directory (local backend)
    base_model: str = _field(DEFAULT_BASE_MODEL)
    #: rank of the LoRA adapter
    lora_rank: int = _field(8, _in_range(1, MAX_LORA_RANK))
    #: whether the adapter also trains the output (unembedding) layer
    train_unembed: bool = _field(True)
    #: passed to the chat template, e.g. {enable_thinking = false}
    chat_template_args: dict[str, Any] = _field({})


@attrs.define
class TinkerConfig:
    """The hosted service (``backend = "tinker"``)."""

    #: the API key itself (never saved with a run); prefer api_key_env
    api_key: str = _field("")
    #: the environment variable holding the API key
    api_key_env: str = _field("TINKER_API_KEY")
    #: the service's URL; empty = the SDK's default
    base_url: str = _field("")


@attrs.define
class LocalConfig:
    """The local backend (``backend = "local"``)."""

    #: local backend: auto = cuda when available
    device: str = _field("auto", _one_of("auto", "cpu", "cuda"))


@attrs.define
class RayConfig:
    """Episodes on a Ray cluster (``rollout.executor = "ray"``, the minds-plugin-ray distribution)."""

    #: the cluster: auto (the one this machine belongs to), ray://host:port, or empty = start one here
    address: str = _field("")
    #: CPUs each episode reserves on its node
    num_cpus: float = _field(1.0, _finite(_in_range(0, 1024)))
    #: custom resources each episode reserves, e.g. {sandbox = 1}
    resources: dict[str, float] = _field({}, _dict_values(_finite(_in_range(0, MAX_WEIGHT))))
    #: episodes running on the cluster at once, at most (0 = rollout.concurrency)
    max_in_flight: int = _field(0, _in_range(0, MAX_ROLLOUTS_PER_STEP))
    #: local backend: the address the run serves its engine on for the workers (empty = this node's Ray address)
    serve_host: str = _field("")


@attrs.define
class SamplingConfig:
    """How the policy samples each turn."""

    #: tokens per sampled turn at most
    max_tokens: int = _field(48, _in_range(1, MAX_SAMPLE_TOKENS))
    temperature: float = _field(1.0, _finite(_in_range(0, MAX_TEMPERATURE)))
    top_p: float = _field(1.0, _unit)
    #: -1 = off
    top_k: int = _field(-1, lambda v: None if v == -1 or 1 <= v <= MAX_TOP_K else f"must be -1 (off) or in [1, {MAX_TOP_K}]")


@attrs.define
class RolloutConfig:
    """How episodes run: concurrency, timeouts, retries, budgets, and which groups are dropped."""

    #: rollouts in flight at once
    concurrency: int = _field(64, _in_range(1, MAX_ROLLOUTS_PER_STEP))
    #: seconds per rollout, 0 = none
    timeout: float = _field(300.0, _finite(_in_range(0, MAX_SECONDS)))
    #: extra attempts after a failed rollout
    retries: int = _field(1, _in_range(0, 100))
    #: a group with more failures is dropped
    max_failing_rollouts: int = _field(0, _in_range(0, MAX_GROUP))
    #: drop groups whose rewards are all equal (DAPO's dynamic sampling)
    drop_constant_reward_groups: bool = _field(False)
    #: None/NaN/non-numeric rewards
    invalid_reward: str = _field("zero", _one_of("zero", "fail"))
    #: sampled turns per episode, 0 = no limit (max_total_tokens still ends it)
    max_turns: int = _field(16, _in_range(0, MAX_TOKENS))
    #: tokens of a whole conversation at most (prompt, replies and observations)
    max_total_tokens: int = _field(4096, _in_range(2, MAX_TOKENS))
    #: where episodes run: local (this process) or a registered executor (ray: minds-plugin-ray)
    executor: str = _field("local")


@attrs.define
class TrainerConfig:
    """What training does each step, and how often it evaluates and saves."""

    #: rl: rollouts and rewards; sft: supervised fine-tuning on [sft] data
    mode: str = _field("rl", _one_of("rl", "sft"))
    #: a named recipe (grpo, dr_grpo, dapo, gspo); explicit keys override it
    preset: str = _field("", _one_of("", *PRESETS))
    #: optimizer steps of the run
    steps: int = _field(20, _in_range(1, MAX_STEPS))
    #: rollouts per task; advantages are computed within a group
    group_size: int = _field(8, _in_range(1, MAX_GROUP))
    #: groups (tasks) per step
    groups_per_batch: int = _field(4, _in_range(1, MAX_GROUP))
    #: AdamW's learning rate (before the schedule)
    learning_rate: float = _field(1e-3, _finite(_in_open_range(0, 10)))
    #: constant, linear or cosine decay after the warmup
    lr_schedule: str = _field("constant", _one_of(*LR_SCHEDULES))
    #: steps of linear warmup from learning_rate / lr_warmup_steps
    lr_warmup_steps: int = _field(0, _in_range(0, MAX_STEPS))
    #: where linear/cosine decay ends, as a share of learning_rate
    lr_min_ratio: float = _field(0.0, lambda v: None if 0 <= v <= 1 else "must be in [0, 1]")
    #: AdamW's beta1, beta2, eps and weight decay
    beta1: float = _field(0.9, lambda v: None if 0 <= v < 1 else "must be in [0, 1)")
    beta2: float = _field(0.95, lambda v: None if 0 <= v < 1 else "must be in [0, 1)")
    eps: float = _field(1e-12, _finite(_in_open_range(0, 1)))
    weight_decay: float = _field(0.0, _finite(_in_range(0, 10)))
    #: gradient norm clipping, 0 = off
    grad_clip_norm: float = _field(0.0, _finite(_in_range(0, MAX_WEIGHT)))
    #: a registered loss (minds plugins)
    loss_fn: str = _field("importance_sampling")
    #: the loss's settings (e.g. clip_low_threshold / clip_high_threshold for ppo)
    loss_fn_config: dict[str, float] = _field({}, _dict_values(_finite(_in_range(-MAX_WEIGHT, MAX_WEIGHT))))
    #: a registered advantage estimator
    advantage: str = _field("group_mean")
    #: how per-token terms combine: sum, token_mean, sequence_mean, fixed_length
    loss_aggregation: str = _field("sum", _one_of(*AGGREGATIONS))
    #: steps whose batches are sampled ahead, while earlier steps train (samplers at most this many updates old)
    max_steps_off_policy: int = _field(0, _in_range(0, 1000))
    #: truncated rollouts get no gradient (DAPO)
    overlong_filter: bool = _field(False)
    #: soft overlong penalty over this share of sampling.max_tokens (DAPO: 0.2), 0 = off
    overlong_penalty_window: float = _field(0.0, lambda v: None if 0 <= v <= 1 else "must be in [0, 1]")
    #: coefficient of a KL penalty to the base model (or kl_reference)
    kl_penalty: float = _field(0.0, _finite(_in_range(0, MAX_WEIGHT)))
    #: a base model name or tinker:// sampler weights to measure the KL against (a teacher: distillation)
    kl_reference: str = _field("")
    #: steps between rolling state-only checkpoints (the last two kept), 0 = none; the last step is always saved
    save_every: int = _field(5, _in_range(0, MAX_STEPS))
    #: steps between evaluations on the held-out split, 0 = never
    eval_every: int = _field(0, _in_range(0, MAX_STEPS))
    #: tinker:// path of saved weights to start from
    resume_from: str = _field("")
    #: split evaluated by eval_every and minds eval; empty = test (or eval, validation) when the environment has one
    eval_split: str = _field("")
    #: tasks per environment in an evaluation (the first ones of the split)
    eval_tasks: int = _field(32, _in_range(1, MAX_ROLLOUTS_PER_STEP))
    #: samples per task in an evaluation (pass@k up to this k)
    eval_samples: int = _field(4, _in_range(1, MAX_GROUP))


@attrs.define
class SftConfig:
    """Supervised fine-tuning (``trainer.mode = "sft"`` or ``minds sft``)."""

    #: jsonl of chat conversations, one {"messages": [...]} per line; empty: the env's tasks with answers
    data: str = _field("")
    #: held-out jsonl; empty: hold out eval_fraction of data
    eval_data: str = _field("")
    #: share of data held out when eval_data is empty
    eval_fraction: float = _field(0.1, lambda v: None if 0 <= v < 1 else "must be in [0, 1)")
    #: conversations per step
    batch_size: int = _field(8, _in_range(1, MAX_ROLLOUTS_PER_STEP))
    #: steps between held-out evaluations; 0 = before and after training only
    eval_every: int = _field(0, _in_range(0, MAX_STEPS))


@attrs.define
class MetricsConfig:
    """Where per-step metrics go, and what else a run writes as it goes."""

    #: registered metric sinks (jsonl is always on)
    sinks: list[str] = _field(["console", "report"])
    #: groups written to rollouts.jsonl per step
    rollouts_per_step: int = _field(2, _in_range(0, MAX_GROUP))
    #: steps between refreshes of report.html (0 = only at the end)
    report_every: int = _field(5, _in_range(0, MAX_STEPS))
    #: steps between tables of sampled replies on the console (0 = never)
    sample_table_every: int = _field(5, _in_range(0, MAX_STEPS))
    #: the wandb sink's project, and its run name (default: the run's)
    wandb_project: str = _field("")
    wandb_run_name: str = _field("")


@attrs.define
class RunConfig:
    """Everything a run needs; every field has a default except the environment."""

    #: run name; default <env>-<time>
    name: str = _field("", _run_name)
    #: seeds the data order, sampling and the adapter's initialisation
    seed: int = _field(0, _in_range(0, MAX_SEED))
    #: auto | local | tinker | a plugin's backend
    backend: str = _field("auto")
    #: where run directories (runs/<name>/) are made
    runs_dir: str = _field("runs", _folder)
    #: the environment (``[env]``); more with ``[[envs]]``
    env: EnvConfig | None = _field(None)
    envs: list[EnvConfig] = _field([])
    model: ModelConfig = attrs.field(factory=ModelConfig)
    tinker: TinkerConfig = attrs.field(factory=TinkerConfig)
    local: LocalConfig = attrs.field(factory=LocalConfig)
    sampling: SamplingConfig = attrs.field(factory=SamplingConfig)
    rollout: RolloutConfig = attrs.field(factory=RolloutConfig)
    ray: RayConfig = attrs.field(factory=RayConfig)
    trainer: TrainerConfig = attrs.field(factory=TrainerConfig)
    sft: SftConfig = attrs.field(factory=SftConfig)
    metrics: MetricsConfig = attrs.field(factory=MetricsConfig)

    @property
    def environments(self) -> list[EnvConfig]:
        """``env`` and ``envs`` together, in order, without those switched off (weight 0)."""
        return [e for e in ([self.env] if self.env is not None else []) + list(self.envs) if e.weight > 0]


# ---------------------------------------------------------------- walking the schema


def unwrap_optional(tp: Any) -> Any:
    """``X | None`` -> ``X``."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return tp


def schema_fields(cls: type) -> dict[str, attrs.Attribute]:
    return {f.name: f for f in attrs.fields(attrs.resolve_types(cls))}

