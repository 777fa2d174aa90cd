"""The run configuration's schema: one attrs class per section, with defaults and value checks.

Fields are declared as an environment's arguments are (``config.rules``):
``arg(default, rule, doc=...)``; ``loading.build_config`` checks every rule and
reports all problems together.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs

from minds_core.config.choices import AGGREGATIONS, LR_SCHEDULES
from minds_core.config.presets import PRESETS
from minds_core.config.rules import Rule, arg, each_value, one_of, optional_of, within

#: An environment variable: set (to 1) to load a local checkpoint whose files changed after it was saved, knowingly (a warning says so);
#: ``--accept-changed-checkpoints`` (``minds run``, ``sft``, ``eval``, ``sample``, ``chat``, ``export``, ``serve``) sets it.
ACCEPT_CHANGED_CHECKPOINTS = "MINDS_ACCEPT_CHANGED_CHECKPOINTS"

#: The embedded default: a small model that has learned a little (words, numbers, formats), built from a file minds ships.
DEFAULT_BASE_MODEL = "minds-small"
#: The models the local backend makes itself, no download: ``minds-small``, and ``minds-tiny`` (random, for tests).
BUILTIN_MODELS = ("minds-small", "minds-tiny")

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


#: The folder under runs_dir where the local backend keeps every run's checkpoints.
LOCAL_CHECKPOINTS = "_checkpoints"
#: Names of folders under runs_dir that are not runs, and what each holds: no run may take one.
RESERVED_RUN_NAMES = {LOCAL_CHECKPOINTS: "the local backend's checkpoint store (runs_dir/_checkpoints)"}


def _run_name(value: str) -> bool:
    return (
        value not in (".", "..")
        and value not in RESERVED_RUN_NAMES
        and not any(c in value for c in "/\\\0")
        and len(value) <= MAX_NAME
    )


def _run_name_problem(value: str) -> str:
    """Why ``value`` cannot name a run, when the folder it names is reserved ("" otherwise)."""
    held = RESERVED_RUN_NAMES.get(value)
    return f"{value!r} is reserved: that folder is {held}; pick another --name" if held else ""


def _folder_blocker(value: str) -> str:
    """What keeps ``value`` from being (or becoming) a folder: empty, a NUL, or a file on its path ("" when nothing)."""
    if not value or "\0" in value:
        return "it is empty or holds a NUL"
    path = Path(value)
    for place in (path, *path.parents):
        if place.exists():
            return "" if place.is_dir() else f"{place} is a file, not a folder: pick another runs_dir"
    return ""


#: A run's name: one folder under runs_dir.
RUN_NAME = Rule(
    f"one folder name (no / or \\, not . or .. or {', '.join(RESERVED_RUN_NAMES)}, at most {MAX_NAME} characters), "
    "as runs live in runs_dir/<name>",
    _run_name,
    _run_name_problem,
)
#: A folder that exists, or can be made (no file on its path).
FOLDER = Rule("a folder path", lambda value: not _folder_blocker(value), _folder_blocker)
#: A probability mass: in (0, 1].
UNIT = within(0, 1, low_open=True)
#: A share: in [0, 1).
SHARE_BELOW_ONE = within(0, 1, high_open=True)


@attrs.define
class RewardRef:
    """A registered reward function and its weight in a rubric."""

    name: str = arg(doc="a registered reward function's name")
    weight: float = arg(1.0, within(-MAX_WEIGHT, MAX_WEIGHT), doc="its weight in the rubric's weighted sum")
    args: dict[str, Any] = arg({}, doc="keyword arguments bound to the function (a reward class is built with them)")


@attrs.define
class EnvConfig:
    """One environment of the run."""

    id: str = arg("", doc="registered environment name, module path, or folder")
    name: str = arg("", doc="the environment's name in metrics and logs (env/<name>/...); default: the id")
    args: dict[str, Any] = arg({}, doc="keyword arguments for the environment's loader")
    weight: float = arg(1.0, within(0, MAX_WEIGHT), doc="share of groups drawn from this environment; 0 = off")
    split: str = arg("train", doc="the split whose tasks are trained on")
    rewards: list[RewardRef] = arg([], doc="replace the environment's rubric with these")
    extra_rewards: list[RewardRef] = arg([], doc="add these to the environment's rubric")
    group_size: int | None = arg(None, within(1, MAX_GROUP), doc="overrides trainer.group_size")
    max_failing_rollouts: int | None = arg(None, within(0, MAX_GROUP), doc="overrides rollout.max_failing_rollouts")
    temperature: float | None = arg(None, within(0, MAX_TEMPERATURE), doc="overrides sampling.temperature")
    top_p: float | None = arg(None, UNIT, doc="overrides sampling.top_p")

    @property
    def label(self) -> str:
        """What metrics and logs call this environment: ``name``, else ``id``."""
        return self.name or self.id


@attrs.define
class ModelConfig:
    """The policy: a base model and the LoRA adapter trained on it."""

    base_model: str = arg(DEFAULT_BASE_MODEL, doc="a model name the backend serves, or a local directory (local backend)")
    lora_rank: int = arg(8, within(1, MAX_LORA_RANK), doc="rank of the LoRA adapter")
    train_unembed: bool = arg(True, doc="whether the adapter also trains the output (unembedding) layer")
    chat_template_args: dict[str, Any] = arg({}, doc="passed to the chat template, e.g. {enable_thinking = false}")


@attrs.define
class TinkerConfig:
    """The hosted service (``backend = "tinker"``)."""

    api_key: str = arg("", doc="the API key itself (never saved with a run); prefer api_key_env")
    api_key_env: str = arg("TINKER_API_KEY", doc="the environment variable holding the API key")
    base_url: str = arg("", doc="the service's URL; empty = the SDK's default")
    unreachable_timeout: float = arg(30.0, within(0, MAX_SECONDS), doc="seconds the service may not answer at all (killed, unreachable) before the run stops with exit code 1, naming the step, the request and the checkpoint to resume from; 0 = wait as the SDK does (many minutes)")


@attrs.define
class LocalConfig:
    """The local backend (``backend = "local"``)."""

    device: str = arg("auto", one_of("auto", "cpu", "cuda"), doc="local backend: auto = cuda when available")
    cuda_graphs: str = arg("auto", one_of("auto", "off"), doc="auto: on a GPU the sampler captures its decode steps as CUDA graphs in a warm-up at start; off: every step runs eagerly")
    compile: str = arg("auto", one_of("auto", "off"), doc="auto: on a GPU packed training rows attend through compiled FlexAttention; off: nothing is compiled (the dense mask)")


@attrs.define
class RayConfig:
    """Episodes on a Ray cluster (``rollout.executor = "ray"``, the minds-plugin-ray distribution)."""

    address: str = arg("", doc="the cluster: auto (the one this machine belongs to), ray://host:port, or empty = start one here")
    num_cpus: float = arg(1.0, within(0, 1024), doc="CPUs each Ray worker reserves on its node (the cluster's CPUs / this = the workers kept)")
    resources: dict[str, float] = arg({}, each_value(within(0, MAX_WEIGHT)), doc="custom resources each Ray worker reserves, e.g. {sandbox = 1}")
    max_in_flight: int = arg(0, within(0, MAX_ROLLOUTS_PER_STEP), doc="episodes running on the cluster at once, at most, shared out between the workers (0 = rollout.concurrency)")
    serve_host: str = arg("", doc="local backend: the address the run serves its engine on for the workers (empty = this node's Ray address)")


@attrs.define
class SamplingConfig:
    """How the policy samples each turn."""

    max_tokens: int = arg(48, within(1, MAX_SAMPLE_TOKENS), doc="tokens per sampled turn at most")
    temperature: float = arg(1.0, within(0, MAX_TEMPERATURE), doc="softmax temperature of sampling, 0 = greedy")
    top_p: float = arg(1.0, UNIT, doc="nucleus sampling: the smallest set of tokens holding this much probability")
    top_k: int = arg(-1, Rule(f"-1 (off) or {{type}} in [1, {MAX_TOP_K}]", lambda v: v == -1 or 1 <= v <= MAX_TOP_K), doc="sample among the k likeliest tokens, -1 = off")


@attrs.define
class RolloutConfig:
    """How episodes run: concurrency, timeouts, retries, budgets, and which groups are dropped."""

    concurrency: int = arg(64, within(1, MAX_ROLLOUTS_PER_STEP), doc="rollouts in flight at once")
    timeout: float = arg(300.0, within(0, MAX_SECONDS), doc="seconds per rollout, 0 = none")
    retries: int = arg(1, within(0, 100), doc="extra attempts after a failed rollout")
    max_failing_rollouts: int = arg(0, within(0, MAX_GROUP), doc="a group with more failures is dropped")
    drop_constant_reward_groups: bool = arg(False, doc="drop groups whose rewards are all equal (DAPO's dynamic sampling)")
    invalid_reward: str = arg("zero", one_of("zero", "fail"), doc="None/NaN/non-numeric rewards")
    max_turns: int = arg(16, within(0, MAX_TOKENS), doc="sampled turns per episode, 0 = no limit (max_total_tokens still ends it)")
    max_total_tokens: int = arg(4096, within(2, MAX_TOKENS), doc="tokens of a whole conversation at most (prompt, replies and observations)")
    executor: str = arg("local", doc="where episodes run: local (this process) or a registered executor (ray: minds-plugin-ray)")


@attrs.define
class TrainerConfig:
    """What training does each step, and how often it evaluates and saves."""

    mode: str = arg("rl", one_of("rl", "sft"), doc="rl: rollouts and rewards; sft: supervised fine-tuning on [sft] data")
    preset: str = arg("", one_of("", *PRESETS), doc="a named recipe (grpo, dr_grpo, dapo, gspo, self_distill); explicit keys override it")
    steps: int = arg(20, within(1, MAX_STEPS), doc="optimizer steps of the run")
    group_size: int = arg(8, within(1, MAX_GROUP), doc="rollouts per task; advantages are computed within a group")
    groups_per_batch: int = arg(4, within(1, MAX_GROUP), doc="groups (tasks) per step")
    learning_rate: float = arg(2e-4, within(0, 10, low_open=True), doc="AdamW's learning rate (before the schedule)")
    lr_schedule: str = arg("constant", one_of(*LR_SCHEDULES), doc="constant, linear or cosine decay after the warmup")
    lr_warmup_steps: int = arg(0, within(0, MAX_STEPS), doc="steps of linear warmup from learning_rate / lr_warmup_steps")
    lr_min_ratio: float = arg(0.0, within(0, 1), doc="where linear/cosine decay ends, as a share of learning_rate")
    beta1: float = arg(0.9, SHARE_BELOW_ONE, doc="AdamW's beta1")
    beta2: float = arg(0.95, SHARE_BELOW_ONE, doc="AdamW's beta2")
    eps: float = arg(1e-12, within(0, 1, low_open=True), doc="AdamW's eps")
    weight_decay: float = arg(0.0, within(0, 10), doc="AdamW's weight decay")
    grad_clip_norm: float = arg(0.0, within(0, MAX_WEIGHT), doc="gradient norm clipping, 0 = off")
    loss_fn: str = arg("importance_sampling", doc="a registered loss (minds plugins)")
    loss_fn_config: dict[str, float] = arg({}, each_value(within(-MAX_WEIGHT, MAX_WEIGHT)), doc="the loss's settings (e.g. clip_low_threshold / clip_high_threshold for ppo)")
    advantage: str = arg("group_mean", doc="a registered advantage estimator")
    loss_aggregation: str = arg("sum", one_of(*AGGREGATIONS), doc="how per-token terms combine: sum, token_mean, sequence_mean, fixed_length")
    max_steps_off_policy: int = arg(0, within(0, 1000), doc="steps whose batches are sampled ahead, while earlier steps train (samplers at most this many updates old)")
    overlong_filter: bool = arg(False, doc="truncated rollouts get no gradient (DAPO)")
    overlong_penalty_window: float = arg(0.0, within(0, 1), doc="soft overlong penalty over this share of sampling.max_tokens (DAPO: 0.2), 0 = off")
    kl_penalty: float = arg(0.0, within(0, MAX_WEIGHT), doc="coefficient of a KL penalty to the base model (or kl_reference)")
    kl_reference: str = arg("", doc="a base model name or tinker:// sampler weights to measure the KL against (a teacher: distillation)")
    save_every: int = arg(5, within(0, MAX_STEPS), doc="steps between rolling state-only checkpoints (the last two kept), 0 = none; the last step is always saved")
    eval_every: int = arg(0, within(0, MAX_STEPS), doc="steps between evaluations on the held-out split, 0 = never")
    resume_from: str = arg("", doc="tinker:// path of saved weights to start from")
    eval_split: str = arg("", doc="split evaluated by eval_every and minds eval; empty = test (or eval, validation) when the environment has one")
    eval_tasks: int = arg(32, within(1, MAX_ROLLOUTS_PER_STEP), doc="tasks per environment in an evaluation (the first ones of the split)")
    eval_samples: int = arg(4, within(1, MAX_GROUP), doc="samples per task in an evaluation (pass@k up to this k)")


@attrs.define
class DistillConfig:
    """Top-k distillation (``trainer.loss_fn = "topk_distill"``; ``trainer.preset = "self_distill"``)."""

    teacher: str = arg("", doc="a base model name or tinker:// sampler weights; empty: the run's base model; policy: the training policy itself")
    topk: int = arg(20, within(1, MAX_TOP_K), doc="k: the teacher's top-k tokens at every completion position (the rest is one tail bin)")
    divergence: str = arg("reverse", one_of("forward", "reverse", "mixed"), doc="forward KL(teacher || student), reverse KL(student || teacher), or mixed")
    mix: float = arg(0.5, within(0, 1), doc="mixed: the forward KL's weight (the reverse KL's is 1 - mix)")
    privileged_context: bool = arg(False, doc="the teacher reads each task's privileged context first (Task.privileged_context, else its answer)")
    reward_weight: float = arg(0.0, within(0, MAX_WEIGHT), doc="weight of the environment's reward term (importance sampling on trainer.advantage's advantages); 0 = distillation only")


@attrs.define
class SftConfig:
    """Supervised fine-tuning (``trainer.mode = "sft"`` or ``minds sft``)."""

    data: str = arg("", doc='jsonl of chat conversations, one {"messages": [...]} per line; empty: the env\'s tasks with answers')
    eval_data: str = arg("", doc="held-out jsonl; empty: hold out eval_fraction of data")
    eval_fraction: float = arg(0.1, SHARE_BELOW_ONE, doc="share of data held out when eval_data is empty")
    batch_size: int = arg(8, within(1, MAX_ROLLOUTS_PER_STEP), doc="conversations per step")
    eval_every: int = arg(0, within(0, MAX_STEPS), doc="steps between held-out evaluations; 0 = before and after training only")


@attrs.define
class MetricsConfig:
    """Where per-step metrics go, and what else a run writes as it goes."""

    sinks: list[str] = arg(["console", "report"], doc="registered metric sinks (jsonl is always on)")
    rollouts_per_step: int = arg(2, within(0, MAX_GROUP), doc="groups written to rollouts.jsonl per step")
    report_every: int = arg(5, within(0, MAX_STEPS), doc="steps between refreshes of report.html (0 = only at the end)")
    sample_table_every: int = arg(5, within(0, MAX_STEPS), doc="steps between tables of sampled replies on the console (0 = never)")
    wandb_project: str = arg("", doc="the wandb sink's project")
    wandb_run_name: str = arg("", doc="the wandb sink's run name (default: the run's)")
    trace: bool = arg(True, doc="write the run's spans to runs/<name>/trace.json (Perfetto / chrome://tracing)")
    trace_max_mb: int = arg(64, within(1, 1_000_000), doc="MiB trace.json grows to before it moves to trace.1.json (one older part kept)")
    otlp_endpoint: str = arg("", doc="an OpenTelemetry collector's OTLP/HTTP traces URL (http://host:4318/v1/traces); needs the otel extra")


@attrs.define
class RunConfig:
    """Everything a run needs; every field has a default except the environment."""

    name: str = arg("", RUN_NAME, doc="run name; default <env>-<time>")
    seed: int = arg(0, within(0, MAX_SEED), doc="seeds the data order, sampling and the adapter's initialisation")
    backend: str = arg("auto", doc="auto | local | tinker | a plugin's backend")
    runs_dir: str = arg("runs", FOLDER, doc="where run directories (runs/<name>/) are made")
    env: EnvConfig | None = arg(None, doc="the environment (``[env]``); for several, ``[[envs]]`` instead")
    envs: list[EnvConfig] = arg([], doc="several environments (``[[envs]]``), each like ``[env]``; not with ``env``")
    model: ModelConfig = attrs.field(factory=ModelConfig)
    tinker: TinkerConfig = attrs.field(factory=TinkerConfig)
    local: LocalConfig = attrs.field(factory=LocalConfig)
    sampling: SamplingConfig = attrs.field(factory=SamplingConfig)
    rollout: RolloutConfig = attrs.field(factory=RolloutConfig)
    ray: RayConfig = attrs.field(factory=RayConfig)
    trainer: TrainerConfig = attrs.field(factory=TrainerConfig)
    sft: SftConfig = attrs.field(factory=SftConfig)
    distill: DistillConfig = attrs.field(factory=DistillConfig)
    metrics: MetricsConfig = attrs.field(factory=MetricsConfig)

    @property
    def environments(self) -> list[EnvConfig]:
        """``env`` or ``envs`` (never both: ``build_config`` refuses that), without those switched off (weight 0)."""
        return [e for e in ([self.env] if self.env is not None else []) + list(self.envs) if e.weight > 0]


# ---------------------------------------------------------------- walking the schema


def unwrap_optional(tp: Any) -> Any:
    """``X | None`` -> ``X``."""
    return optional_of(tp) or tp


def schema_fields(cls: type) -> dict[str, attrs.Attribute]:
    return {f.name: f for f in attrs.fields(attrs.resolve_types(cls))}

