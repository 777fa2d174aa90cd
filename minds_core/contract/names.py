"""The names a config refers to, checked against the registry before anything runs (``--dry-run`` too).

Environments, the backend, the loss, the advantage estimator, the rollout executor, the
metric sinks and reward functions are looked up by name; every unknown one is reported at once, each
with the key that names it. Environments given as a folder or ``.py`` file are checked
to exist, and a module path to be importable, without running the environment's code
(a dotted module path imports its parent packages).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from minds_core.base.errors import ConfigError, MindsError
from minds_core.base.tracing import OTEL_MISSING, otel_installed
from minds_core.config import EnvConfig, RunConfig
from minds_core.contract.locate import MODULE_PREFIX, findable, is_path_like
from minds_core.contract.plugins import Entry, Registry

AUTO_BACKEND = "auto"


def check_names(config: RunConfig, registry: Registry) -> None:
    """A ConfigError listing every name in ``config`` that nothing provides, and what a metric sink or the span export
    it names lacks to start (their ``check``), before anything opens."""
    problems = list(_problems(config, registry))
    if len(problems) == 1:
        raise ConfigError(problems[0])
    if problems:
        raise ConfigError("the configuration cannot run:\n" + "\n".join(f"  - {p}" for p in problems))


def _problems(config: RunConfig, registry: Registry) -> Iterator[str]:
    if not config.environments and config.trainer.mode != "sft":  # SFT says itself that it needs data or an environment
        yield "no environment: pass --env NAME or set [env] id in the config (minds envs lists them)"
    for key, cfg in _env_keys(config):
        yield from _env_problems(key, cfg, registry)
    lookups = [
        ("advantage_estimators", config.trainer.advantage, "trainer.advantage"),
        ("rollout_executors", config.rollout.executor, "rollout.executor"),
        *(("metric_sinks", sink, "metrics.sinks") for sink in config.metrics.sinks),
    ]
    if config.trainer.mode != "sft":  # SFT trains with the service's cross_entropy, whatever trainer.loss_fn says
        lookups.insert(0, ("losses", config.trainer.loss_fn, "trainer.loss_fn"))
    if config.backend != AUTO_BACKEND:
        lookups.append(("backends", config.backend, "backend"))
    for kind, name, key in lookups:
        yield from _lookup(registry, kind, name, key)
    for sink in config.metrics.sinks:
        if sink in registry.names("metric_sinks"):
            yield from _sink_problems(registry.lookup("metric_sinks", sink, "metrics.sinks"), config)
    if config.metrics.otlp_endpoint and not otel_installed():
        yield OTEL_MISSING


def _sink_problems(entry: Entry, config: RunConfig) -> Iterator[str]:
    """What the sink's optional ``check(config)`` says it lacks (a missing package or setting)."""
    check = getattr(entry.obj, "check", None)
    if check is None:
        return
    try:
        check(config)
    except MindsError as exc:
        yield str(exc)
    except Exception as exc:  # noqa: BLE001 - a plugin's check that fails is reported by name, as its sink would be
        yield f'metric sink "{entry.name}" (plugin {entry.plugin}): its check(config) raised {type(exc).__name__}: {exc}'


def _env_keys(config: RunConfig) -> Iterator[tuple[str, EnvConfig]]:
    """Each environment that is on (weight > 0) with the config key that holds it (``env`` or ``envs[i]``)."""
    if config.env is not None and config.env.weight > 0:
        yield "env", config.env
    for index, cfg in enumerate(config.envs):
        if cfg.weight > 0:
            yield f"envs[{index}]", cfg


def _env_problems(key: str, cfg: EnvConfig, registry: Registry) -> Iterator[str]:
    if not cfg.id:
        yield f"{key}.id: no environment given (minds envs lists them)"
    elif cfg.id in registry.names("environments") or not (is_path_like(cfg.id) or findable(cfg.id)):
        yield from _lookup(registry, "environments", cfg.id, f"{key}.id")
    else:
        yield from _path_problems(key, cfg.id)
    for field in ("rewards", "extra_rewards"):
        for index, ref in enumerate(getattr(cfg, field)):
            yield from _lookup(registry, "reward_functions", ref.name, f"{key}.{field}[{index}].name")


def _path_problems(key: str, env_id: str) -> Iterator[str]:
    """An environment given as a folder, a .py file or a module path must exist (it is not imported here)."""
    path = Path(env_id).expanduser()
    if env_id.startswith((".", "/", "~")) or "/" in env_id or path.suffix == ".py":
        if not path.exists():
            yield f"{key}.id = {env_id!r}: {path.resolve()} does not exist (paths are relative to {Path.cwd()})"
        return
    if not findable(env_id.removeprefix(MODULE_PREFIX).split(".")[0]):
        yield f"{key}.id = {env_id!r}: no registered environment and no importable module of that name (minds envs lists the registered ones)"


def _lookup(registry: Registry, kind: str, name: str, key: str) -> Iterator[str]:
    try:
        registry.lookup(kind, name, key)
    except MindsError as exc:
        yield str(exc)
