"""The run configuration: attrs schema, TOML/YAML loading, ``--set`` overrides, readable errors."""

from __future__ import annotations

import math
import re
import tomllib
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs
import cattrs
import yaml
from cattrs.errors import IterableValidationError, IterableValidationNote

from minds_core.aggregation import AGGREGATIONS
from minds_core.compat import NO_EFFECT, RENAMED, pop_no_effect, warn_no_effect
from minds_core.errors import ConfigError, did_you_mean
from minds_core.lr_schedules import LR_SCHEDULES
from minds_core.presets import PRESETS, apply_preset

DEFAULT_BASE_MODEL = "minds-tiny"

Check = Callable[[Any], str | None]


def _positive(value: Any) -> str | None:
    return None if value > 0 else "must be > 0"


def _non_negative(value: Any) -> str | None:
    return None if value >= 0 else "must be >= 0"


def _at_least(low: int) -> Check:
    return lambda value: None if value >= low else f"must be >= {low}"


def _unit(value: Any) -> str | None:
    return None if 0 < value <= 1 else "must be in (0, 1]"


def _one_of(*allowed: str) -> Check:
    return lambda value: None if value in allowed else f"must be one of {', '.join(allowed)}"


def _finite(check: Check) -> Check:
    return lambda value: "must be a finite number" if math.isnan(value) or math.isinf(value) else check(value)


def _field(default: Any, check: Check | None = None, *, secret: bool = False, help: str = "") -> Any:
    metadata = {"check": check, "secret": secret, "help": help}
    if isinstance(default, (list, dict)):
        return attrs.field(factory=lambda: type(default)(default), metadata=metadata)
    return attrs.field(default=default, metadata=metadata)


@attrs.define
class RewardRef:
    """A registered reward function and its weight in a rubric."""

    name: str
    weight: float = _field(1.0, _finite(lambda v: None))
    args: dict[str, Any] = _field({}, help="keyword arguments bound to the function (a reward class is built with them)")


@attrs.define
class EnvConfig:
    """One environment of the run."""

    id: str = _field("", help="registered environment name, module path, or folder")
    name: str = _field("", help="the environment's name in metrics and logs (env/<name>/...); default: the id")
    args: dict[str, Any] = _field({}, help="keyword arguments for the environment's loader")
    weight: float = _field(1.0, _finite(_non_negative), help="share of groups drawn from this environment; 0 = off")
    split: str = _field("train")
    rewards: list[RewardRef] = _field([], help="replace the environment's rubric with these")
    extra_rewards: list[RewardRef] = _field([], help="add these to the environment's rubric")
    group_size: int | None = _field(None, _at_least(1), help="overrides trainer.group_size")
    max_failing_rollouts: int | None = _field(None, _non_negative)
    temperature: float | None = _field(None, _finite(_non_negative))
    top_p: float | None = _field(None, _unit)

    @property
    def label(self) -> str:
        """What metrics and logs call this environment: ``name``, else ``id``."""
        return self.name or self.id


@attrs.define
class ModelConfig:
    base_model: str = _field(DEFAULT_BASE_MODEL)
    lora_rank: int = _field(8, _at_least(1))
    train_unembed: bool = _field(True)
    chat_template_args: dict[str, Any] = _field({}, help="passed to the chat template, e.g. {enable_thinking = false}")


@attrs.define
class TinkerConfig:
    api_key: str = _field("", secret=True, help="prefer api_key_env")
    api_key_env: str = _field("TINKER_API_KEY")
    base_url: str = _field("")


@attrs.define
class LocalConfig:
    device: str = _field("auto", _one_of("auto", "cpu", "cuda"), help="local backend: auto = cuda when available")


@attrs.define
class SamplingConfig:
    max_tokens: int = _field(48, _at_least(1))
    temperature: float = _field(1.0, _finite(_non_negative))
    top_p: float = _field(1.0, _unit)
    top_k: int = _field(-1, lambda v: None if v == -1 or v >= 1 else "must be -1 (off) or >= 1")


@attrs.define
class RolloutConfig:
    concurrency: int = _field(64, _at_least(1), help="rollouts in flight at once")
    timeout: float = _field(300.0, _finite(_non_negative), help="seconds per rollout, 0 = none")
    retries: int = _field(1, _non_negative, help="extra attempts after a failed rollout")
    max_failing_rollouts: int = _field(0, _non_negative, help="a group with more failures is dropped")
    drop_constant_reward_groups: bool = _field(False)
    invalid_reward: str = _field("zero", _one_of("zero", "fail"), help="None/NaN/non-numeric rewards")
    max_turns: int = _field(16, _non_negative, help="sampled turns per episode, 0 = no limit (max_total_tokens still ends it)")
    max_total_tokens: int = _field(4096, _at_least(2))


@attrs.define
class TrainerConfig:
    mode: str = _field("rl", _one_of("rl", "sft"), help="rl: rollouts and rewards; sft: supervised fine-tuning on [sft] data")
    preset: str = _field("", _one_of("", *PRESETS), help="a named recipe (grpo, dr_grpo, dapo, gspo); explicit keys override it")
    steps: int = _field(20, _at_least(1))
    group_size: int = _field(8, _at_least(1))
    groups_per_batch: int = _field(4, _at_least(1))
    learning_rate: float = _field(1e-3, _finite(_positive))
    lr_schedule: str = _field("constant", _one_of(*LR_SCHEDULES), help="constant, linear or cosine decay after the warmup")
    lr_warmup_steps: int = _field(0, _non_negative, help="steps of linear warmup from learning_rate / lr_warmup_steps")
    lr_min_ratio: float = _field(0.0, lambda v: None if 0 <= v <= 1 else "must be in [0, 1]", help="where linear/cosine decay ends, as a share of learning_rate")
    beta1: float = _field(0.9, lambda v: None if 0 <= v < 1 else "must be in [0, 1)")
    beta2: float = _field(0.95, lambda v: None if 0 <= v < 1 else "must be in [0, 1)")
    eps: float = _field(1e-12, _finite(_positive))
    weight_decay: float = _field(0.0, _finite(_non_negative))
    grad_clip_norm: float = _field(0.0, _finite(_non_negative), help="0 = off")
    loss_fn: str = _field("importance_sampling", help="a registered loss (minds plugins)")
    loss_fn_config: dict[str, float] = _field({})
    advantage: str = _field("group_mean", help="a registered advantage estimator")
    loss_aggregation: str = _field("sum", _one_of(*AGGREGATIONS), help="how per-token terms combine: sum, token_mean, sequence_mean, fixed_length")
    max_steps_off_policy: int = _field(0, _non_negative)
    overlong_filter: bool = _field(False, help="truncated rollouts get no gradient (DAPO)")
    overlong_penalty_window: float = _field(0.0, lambda v: None if 0 <= v <= 1 else "must be in [0, 1]", help="soft overlong penalty over this share of sampling.max_tokens (DAPO: 0.2), 0 = off")
    kl_penalty: float = _field(0.0, _finite(_non_negative), help="coefficient of a KL penalty to the base model (or kl_reference)")
    kl_reference: str = _field("", help="a base model name or tinker:// sampler weights to measure the KL against (a teacher: distillation)")
    save_every: int = _field(5, _non_negative, help="steps between rolling state-only checkpoints (the last two kept), 0 = none; the last step is always saved")
    eval_every: int = _field(0, _non_negative, help="steps between evaluations on the held-out split, 0 = never")
    resume_from: str = _field("", help="tinker:// path of saved weights to start from")
    eval_split: str = _field("", help="split evaluated by eval_every and minds eval; empty = test (or eval, validation) when the environment has one")
    eval_tasks: int = _field(32, _at_least(1), help="tasks per environment in an evaluation (the first ones of the split)")
    eval_samples: int = _field(4, _at_least(1), help="samples per task in an evaluation (pass@k up to this k)")


@attrs.define
class SftConfig:
    """Supervised fine-tuning (``trainer.mode = "sft"`` or ``minds sft``)."""

    data: str = _field("", help='jsonl of chat conversations, one {"messages": [...]} per line; empty: the env\'s tasks with answers')
    eval_data: str = _field("", help="held-out jsonl; empty: hold out eval_fraction of data")
    eval_fraction: float = _field(0.1, lambda v: None if 0 <= v < 1 else "must be in [0, 1)")
    batch_size: int = _field(8, _at_least(1), help="conversations per step")
    eval_every: int = _field(0, _non_negative, help="steps between held-out evaluations; 0 = before and after training only")


@attrs.define
class MetricsConfig:
    sinks: list[str] = _field(["console", "report"])
    rollouts_per_step: int = _field(2, _non_negative, help="groups written to rollouts.jsonl per step")
    report_every: int = _field(5, _non_negative, help="steps between refreshes of report.html (0 = only at the end)")
    sample_table_every: int = _field(5, _non_negative, help="steps between tables of sampled replies on the console (0 = never)")
    wandb_project: str = _field("")
    wandb_run_name: str = _field("")


@attrs.define
class RunConfig:
    """Everything a run needs; every field has a default except the environment."""

    name: str = _field("", help="run name; default <env>-<time>")
    seed: int = _field(0)
    backend: str = _field("auto", help="auto | local | tinker | a plugin's backend")
    runs_dir: str = _field("runs")
    env: EnvConfig | None = _field(None)
    envs: list[EnvConfig] = _field([])
    model: ModelConfig = attrs.field(factory=ModelConfig)
    tinker: TinkerConfig = attrs.field(factory=TinkerConfig)
    local: LocalConfig = attrs.field(factory=LocalConfig)
    sampling: SamplingConfig = attrs.field(factory=SamplingConfig)
    rollout: RolloutConfig = attrs.field(factory=RolloutConfig)
    trainer: TrainerConfig = attrs.field(factory=TrainerConfig)
    sft: SftConfig = attrs.field(factory=SftConfig)
    metrics: MetricsConfig = attrs.field(factory=MetricsConfig)

    @property
    def environments(self) -> list[EnvConfig]:
        """``env`` and ``envs`` together, in order, without those switched off (weight 0)."""
        return [e for e in ([self.env] if self.env is not None else []) + list(self.envs) if e.weight > 0]


#: Key names whose string values are secrets (``*_env`` keys name variables and are not).
_SECRET_KEY = re.compile(
    r"(api_?key|secret|passw(or)?d|credentials?|authorization|private_key|access_key|(^|_)(auth_|access_|api_)?token)$"
    r"|secrets?$",
    re.IGNORECASE,
)
#: Token-named settings that are not secrets (special tokens, counts).
_NOT_SECRET = re.compile(r"(^|_)(stop|eos|bos|pad|unk|sep|cls|mask|special|max|num)_tokens?$", re.IGNORECASE)
REDACTED = "***"
#: What an error message shows instead of a secret-named key's value.
HIDDEN = "value not shown: the key holds a secret"
#: Secret-named keys whose lists hold names of variables (``secrets = ["OPENAI_API_KEY"]``), not values.
_NAMES_LIST = re.compile(r"(^|_)secrets?$", re.IGNORECASE)


# ---------------------------------------------------------------- converter


def _strict(accept: Callable[[Any], Any], label: str) -> Callable[[Any, Any], Any]:
    def structure(value: Any, _type: Any) -> Any:
        try:
            result = accept(value)
        except (TypeError, ValueError):
            result = None
        if result is None:
            raise ConfigValueError(f"expected {label}, got {value!r}")
        return result

    return structure


class ConfigValueError(ValueError):
    """A value of the wrong type; the message already says what was expected."""


def _as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def _as_float(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):  # YAML 1.1 reads 1e-4 as a string
        return float(value)
    return None


def _make_converter() -> cattrs.Converter:
    converter = cattrs.Converter(forbid_extra_keys=True)
    converter.register_structure_hook(int, _strict(_as_int, "an integer"))
    converter.register_structure_hook(float, _strict(_as_float, "a number"))
    converter.register_structure_hook(bool, _strict(lambda v: v if isinstance(v, bool) else None, "true or false"))
    converter.register_structure_hook(str, _strict(lambda v: v if isinstance(v, str) else None, "a string"))

    def structure_list(value: Any, tp: Any) -> list[Any]:
        if not isinstance(value, list):
            raise ConfigValueError(f"expected a list, got {value!r}")
        (item,) = typing.get_args(tp) or (Any,)
        out, errors = [], []
        for index, element in enumerate(value):
            try:
                out.append(converter.structure(element, item))
            except Exception as exc:  # noqa: BLE001 - collected with their index
                exc.__notes__ = [*getattr(exc, "__notes__", []), IterableValidationNote(f"@ index {index}", index, item)]
                errors.append(exc)
        if errors:
            raise IterableValidationError(f"While structuring {tp}", errors, tp)
        return out

    def structure_dict(value: Any, tp: Any) -> dict[str, Any]:
        if not isinstance(value, Mapping):
            raise ConfigValueError(f"expected a table/mapping, got {value!r}")
        _, item = typing.get_args(tp) or (str, Any)
        return {str(k): converter.structure(v, item) for k, v in value.items()}

    converter.register_structure_hook_func(lambda tp: typing.get_origin(tp) is list, structure_list)
    converter.register_structure_hook_func(lambda tp: typing.get_origin(tp) is dict, structure_dict)
    return converter


_CONVERTER = _make_converter()


# ---------------------------------------------------------------- reading files


def read_config_file(path: str | Path) -> dict[str, Any]:
    """Parse a TOML or YAML file into a dict; errors name the file and line."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"config file not found: {path}")
    if path.is_dir():
        raise ConfigError(f"config path is a directory, not a file: {path}")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        line = exc.object[: exc.start].count(b"\n") + 1
        bad = exc.object[exc.start : exc.start + 1].hex()
        raise ConfigError(f"{path}:{line}: not UTF-8 text (byte 0x{bad} at offset {exc.start}); save the file as UTF-8") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the config file: {exc.strerror or exc}") from None
    if path.suffix == ".toml":
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    elif path.suffix in (".yaml", ".yml"):
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
            problem = getattr(exc, "problem", None) or str(exc)
            raise ConfigError(f"{where}: invalid YAML: {problem}") from None
        data = {} if data is None else data
    else:
        raise ConfigError(f"{path}: unknown config format {path.suffix!r}; use .toml, .yaml or .yml")
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a table/mapping, got {type(data).__name__}")
    return data


# ---------------------------------------------------------------- schema walking


def _unwrap(tp: Any) -> Any:
    """``X | None`` -> ``X``."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return tp


def _fields(cls: type) -> dict[str, attrs.Attribute]:
    return {f.name: f for f in attrs.fields(attrs.resolve_types(cls))}


def _unknown_keys(data: Mapping[str, Any], cls: type, path: str) -> Iterable[str]:
    fields = _fields(cls)
    for key, value in data.items():
        where = f"{path}{key}"
        if key not in fields:
            yield f"{where}: unknown key{did_you_mean(str(key), fields)}; valid keys here: {', '.join(fields)}"
            continue
        tp = _unwrap(fields[key].type)
        if attrs.has(tp) and isinstance(value, Mapping):
            yield from _unknown_keys(value, tp, f"{where}.")
        elif typing.get_origin(tp) is list and isinstance(value, list):
            (item,) = typing.get_args(tp)
            if attrs.has(item):
                for i, element in enumerate(value):
                    if isinstance(element, Mapping):
                        yield from _unknown_keys(element, item, f"{where}[{i}].")


def _checks(obj: Any, path: str) -> Iterable[str]:
    for field in attrs.fields(type(obj)):
        value = getattr(obj, field.name)
        where = f"{path}{field.name}"
        check = field.metadata.get("check")
        if check is not None and value is not None:
            problem = check(value)
            if problem:
                yield f"{where} = {shown_value(field.name, value)}: {problem}"
        if attrs.has(type(value)):
            yield from _checks(value, f"{where}.")
        elif isinstance(value, list):
            for i, element in enumerate(value):
                if attrs.has(type(element)):
                    yield from _checks(element, f"{where}[{i}].")


def _structure_errors(exc: BaseException) -> list[str]:
    def describe(error: BaseException, _type: Any) -> str:
        if isinstance(error, ConfigValueError):
            return str(error)
        if isinstance(error, cattrs.ForbiddenExtraKeysError):
            return f"unknown keys {sorted(error.extra_fields)}"
        if isinstance(error, KeyError):
            return "required key is missing"
        return f"invalid value ({error})"

    messages = cattrs.transform_error(exc, path="$", format_exception=describe)
    out = []
    for message in messages:
        text, _, where = message.rpartition(" @ ")
        where = where.removeprefix("$.").removeprefix("$")
        if is_secret_key(re.sub(r"\[\d+\]$", "", where).rpartition(".")[2]):
            expected = text.partition(", got ")[0] if text.startswith("expected ") else "invalid value"
            text = f"{expected} ({HIDDEN})"
        out.append(f"{where}: {text}")
    return out


def shown_value(key: str, value: Any) -> str:
    """``repr(value)`` for messages, or a placeholder when ``key`` holds a secret."""
    return HIDDEN if is_secret_key(key) else repr(value)


# ---------------------------------------------------------------- overrides


def _get_path(data: Any, parts: list[str]) -> Any:
    for part in parts:
        data = data.get(part) if isinstance(data, dict) else None
    return data


def _apply_legacy_keys(data: dict[str, Any], source: str = "config") -> dict[str, Any]:
    """The seed harness's keys (minds_core.compat) as minds keys; those without effect are dropped with a warning."""
    for old, new in RENAMED.items():
        *parents, leaf = old.split(".")
        node = _get_path(data, parents)
        if isinstance(node, dict) and leaf in node:
            *new_parents, new_leaf = new.split(".")
            target = _get_path(data, new_parents)
            if isinstance(target, dict) and new_leaf in target and target[new_leaf] != node[leaf]:
                raise ConfigError(f"{source}: {old} and {new} mean the same setting and disagree ({node[leaf]!r} vs {target[new_leaf]!r}): keep one")
            _set_path(data, new.split("."), node.pop(leaf))
    warn_no_effect(pop_no_effect(data), source)
    trainer = data.get("trainer")
    if isinstance(trainer, dict) and trainer.get("args") == {}:
        del trainer["args"]
    return data


def _set_path(data: dict[str, Any], parts: list[str], value: Any) -> None:
    node = data
    for part in parts[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = {}
            node[part] = child
        node = child
    node[parts[-1]] = value


def _parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "1", "yes", "on"):
        return True
    if lowered in ("false", "0", "no", "off"):
        return False
    raise ValueError(text)


def _parse_for_type(tp: Any, text: str) -> Any:
    tp = _unwrap(tp)
    if tp is bool:
        return _parse_bool(text)
    if tp is int:
        return int(text)
    if tp is float:
        return float(text)
    if tp is str:
        return text
    return yaml.safe_load(text)  # lists, dicts and free-form values


def _type_at(parts: list[str]) -> Any:
    """The schema type at a dotted path; free-form (Any) inside dict fields."""
    cls: Any = RunConfig
    for i, part in enumerate(parts):
        cls = _unwrap(cls)
        if not attrs.has(cls):
            return Any  # inside a free-form table such as env.args
        fields = _fields(cls)
        if part not in fields:
            where = ".".join(parts[: i + 1])
            raise ConfigError(f"--set {where}: unknown key{did_you_mean(part, fields)}; valid keys here: {', '.join(fields)}")
        cls = fields[part].type
    return cls


def apply_override(data: dict[str, Any], assignment: str) -> None:
    """Apply one ``a.b=value`` override, parsing the value to the field's type."""
    key, sep, text = assignment.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"--set {assignment!r}: expected KEY=VALUE, e.g. --set trainer.group_size=8")
    if key in NO_EFFECT:
        warn_no_effect([(key, text, NO_EFFECT[key])], "--set")
        return
    key = RENAMED.get(key, key)
    parts = key.split(".")
    tp = _type_at(parts)
    try:
        value = _parse_for_type(tp, text)
    except (ValueError, yaml.YAMLError):
        name = getattr(_unwrap(tp), "__name__", str(tp))
        raise ConfigError(f"--set {key}={shown_value(parts[-1], text)}: expected a value of type {name}") from None
    if parts[0] == "env" and not isinstance(data.get("env"), dict):
        data["env"] = {}
    _set_path(data, parts, value)


# ---------------------------------------------------------------- public API


def build_config(data: Mapping[str, Any], source: str = "config") -> RunConfig:
    """Validate a raw mapping into a RunConfig; all problems are reported together."""
    data = apply_preset(_apply_legacy_keys(dict(data), source))
    problems = list(_unknown_keys(data, RunConfig, ""))
    if not problems:
        try:
            config = _CONVERTER.structure(data, RunConfig)
        except Exception as exc:  # noqa: BLE001 - cattrs raises exception groups
            problems = _structure_errors(exc)
        else:
            problems = list(_checks(config, ""))
            if (config.env is not None or config.envs) and not config.environments:
                problems.append("every environment has weight 0 (switched off): give at least one a weight > 0")
    if problems:
        raise ConfigError(f"invalid configuration ({source}):\n" + "\n".join(f"  - {p}" for p in problems))
    return config


def load_config(path: str | Path | None = None, overrides: Iterable[str] = (), drop_redacted: bool = False) -> RunConfig:
    """Read an optional config file, apply ``--set`` overrides, and validate.

    ``drop_redacted`` forgets values written as *** (a saved run's config), so
    secrets come from the environment again.
    """
    data = read_config_file(path) if path else {}
    if drop_redacted:
        dropped: list[str] = []
        data = _drop_redacted(data, "", dropped)
        given = {assignment.partition("=")[0].strip() for assignment in overrides}
        missing = [key for key in dropped if key not in given]
        if missing:
            from minds_core.logs import get_logger

            get_logger("config").warning(
                "secrets are not saved with a run; pass them again (--set KEY=...) or through the environment",
                keys=missing,
            )
    data = _apply_legacy_keys(data, str(path) if path else "config")
    for assignment in overrides:
        apply_override(data, assignment)
    return build_config(data, source=str(path) if path else "defaults and --set")


def to_dict(config: RunConfig) -> dict[str, Any]:
    """The config as plain data (secrets included: redact before showing or writing)."""
    return _CONVERTER.unstructure(config)


def redact(value: Any) -> Any:
    """A copy with secret values (api keys, tokens, secrets; strings, numbers, anything) replaced by ***."""
    if isinstance(value, Mapping):
        return {k: (_redact_all(v, str(k)) if is_secret_key(str(k)) else redact(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v) for v in value]
    return value


def is_secret_key(key: str) -> bool:
    """Whether a config key holds a secret (its values are never shown or written, whatever their type)."""
    return bool(_SECRET_KEY.search(key)) and not _NOT_SECRET.search(key) and not key.lower().endswith("_env")


def _drop_redacted(value: Any, path: str, dropped: list[str]) -> Any:
    """``value`` without entries written as ***; their dotted paths go to ``dropped``."""
    if not isinstance(value, Mapping):
        return value
    kept = {}
    for key, item in value.items():
        if item == REDACTED:
            dropped.append(f"{path}{key}")
        else:
            kept[key] = _drop_redacted(item, f"{path}{key}.", dropped)
    return kept


def _redact_all(value: Any, key: str) -> Any:
    """Values under the secret-named ``key``, all replaced by ***.

    Kept: unset values (None, ""), switches (booleans), and a ``secrets`` list, which
    names variables and holds no values.
    """
    if isinstance(value, Mapping):
        return {k: _redact_all(v, key) for k, v in value.items()}
    if isinstance(value, list):
        names = _NAMES_LIST.search(key) and all(isinstance(v, str) for v in value)
        return value if names else [_redact_all(v, key) for v in value]
    if value is None or value == "" or isinstance(value, bool):
        return value
    return REDACTED


def dump_yaml(config: RunConfig) -> str:
    """The resolved config as YAML with secrets redacted."""
    return yaml.safe_dump(redact(to_dict(config)), sort_keys=False)
