"""From an ``[env]`` config table to a ready Environment (registered name or a path)."""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import inspect
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from minds_core.base.errors import ConfigError
from minds_core.base.logs import get_logger
from minds_core.config import EnvConfig, RewardRef
from minds_core.contract.environment import environment_rubric
from minds_core.contract.locate import MODULE_PREFIX, findable, is_path_like, normalized
from minds_core.contract.plugins import Entry, Registry
from minds_core.envs.args import ArgsChecked, checking_args
from minds_core.envs.loader_calls import bound_args, call_loader

log = get_logger("envs")


def check_args(cfg: EnvConfig, registry: Registry) -> None:
    """``[env.args]`` checked as a run checks them, building nothing (``--dry-run``).

    The loader's signature must take them; a registered loader taking ``**args`` is called
    inside ``checking_args()``, so that its ``env_args`` checks them and stops it there.
    A seed-style module is imported and its ``load_environment`` signature checked, never called.
    """
    if cfg.id in registry.names("environments") or not (is_path_like(cfg.id) or findable(cfg.id)):
        loader = registry.lookup("environments", cfg.id, "env.id").obj
        args = bound_args(repr(cfg.id), loader, cfg.args, functools.partial(_open_environment, registry))
        takes_any = any(p.kind is p.VAR_KEYWORD for p in _parameters(loader))
        if takes_any:
            try:
                with checking_args():
                    loader(**args)
            except ArgsChecked:
                pass
        return
    from minds_core.envs.cookbook.models import left_to_the_run
    from minds_core.envs.loose import environment_loader

    loader = environment_loader(cfg.id)
    bound_args(repr(cfg.id), loader, {**dict.fromkeys(left_to_the_run(loader, cfg.args)), **cfg.args}, None)


def _parameters(loader: Any) -> list[inspect.Parameter]:
    try:
        return list(inspect.signature(loader).parameters.values())
    except (TypeError, ValueError):
        return []


def _reward_function(ref: RewardRef, registry: Registry, where: str) -> Any:
    """The registered function with the entry's args bound; a registered class is built with them (one instance per entry)."""
    obj = registry.lookup("reward_functions", ref.name, where).obj
    if not ref.args and not isinstance(obj, type):
        return obj
    try:
        signature = inspect.signature(obj)
        (signature.bind if isinstance(obj, type) else signature.bind_partial)(**ref.args)
    except TypeError as exc:
        raise ConfigError(f"{where}: reward {ref.name!r}: bad args {sorted(ref.args)}: {exc}") from None
    except ValueError:  # no signature: let the call decide
        pass
    if isinstance(obj, type):
        try:
            return obj(**ref.args)
        except ValueError as exc:
            raise ConfigError(f"{where}: reward {ref.name!r}: {exc}") from None
    return functools.partial(obj, **ref.args)


def _rubric(refs: list[RewardRef], registry: Registry, where: str) -> list[tuple[str, Any, float]]:
    return [(ref.name, _reward_function(ref, registry, where), ref.weight) for ref in refs]


def build_environment(cfg: EnvConfig, registry: Registry) -> Any:
    """Build the environment named by ``cfg.id`` and apply rubric overrides.

    A registered loader that declares ``open_environment`` can build other environments the same way.
    """
    if not cfg.id:
        raise ConfigError("no environment: pass --env NAME or set [env] id in the config (minds envs lists them)")
    if cfg.id in registry.names("environments") or not (is_path_like(cfg.id) or findable(cfg.id)):
        entry = registry.lookup("environments", cfg.id, "env.id")
        warn_if_shadowing(entry)
        from minds_core.envs.cookbook.models import register_tokenizer
        from minds_core.envs.loose import cookbook_environment

        register_tokenizer()
        env = call_loader(repr(cfg.id), entry.obj, cfg.args, functools.partial(_open_environment, registry))
        env = cookbook_environment(cfg.id, env) or env  # a plugin may register a tinker-cookbook dataset, builder or env
    else:
        from minds_core.envs.loose import load_loose_environment

        env = load_loose_environment(cfg.id, cfg.args, [e.obj for e in registry.entries("environment_adapters")])
    if cfg.rewards or cfg.extra_rewards:
        rubric = environment_rubric(env)
        if rubric is None:
            raise ConfigError(f"environment {cfg.id!r} has no minds Rubric, so env.rewards / env.extra_rewards cannot apply")
        if cfg.rewards:
            rubric.funcs, rubric.weights, rubric.names = [], [], []
        for name, fn, weight in _rubric([*cfg.rewards, *cfg.extra_rewards], registry, f"env {cfg.id!r} rewards"):
            rubric.add(fn, weight, name)
    return env


def _open_environment(registry: Registry, env_id: str, args: Mapping[str, Any]) -> Any:
    """``OpenEnvironment`` over ``registry``: what ``[env] id = env_id`` with ``args`` builds."""
    return build_environment(EnvConfig(id=env_id, args=dict(args)), registry)


def warn_if_shadowing(entry: Entry) -> None:
    """Warn when a registered name also names the user's own module, distribution or ./environments folder.

    Packages of the registering plugin's distribution and of what it requires
    (the verifiers bridge needs ``verifiers``) are the plugin's, not namesakes.
    """
    name = entry.name
    own = (getattr(inspect.getmodule(entry.obj), "__name__", "") or "").split(".")[0]
    found = []
    if name != own and name.isidentifier():
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            dist = None
        if spec is not None or dist is not None:
            owners = importlib.metadata.packages_distributions()
            plugin_side = _with_requirements(owners.get(own, []))
            if spec is not None and not plugin_side & {normalized(d) for d in owners.get(name, [])}:
                where = spec.origin or next(iter(spec.submodule_search_locations or []), "?")
                found.append(f"the module {name!r} at {where}")
            if dist is not None and normalized(dist.metadata["Name"] or "") not in plugin_side:
                found.append(f"the installed distribution {dist.metadata['Name']!r}")
    folder = Path("environments") / name
    if folder.is_dir():
        found.append(f"the folder ./{folder}")
    if found:
        log.warning(
            f"env.id {name!r} picks the environment registered by plugin {entry.plugin!r}, not your "
            f"{' / '.join(found)}; to train on yours, set [env] id = \"{MODULE_PREFIX}{name}\" or a path "
            f"such as \"./environments/{name}\"",
            env=name,
        )


def _with_requirements(distributions: list[str]) -> set[str]:
    """The normalized names of these distributions and of the distributions they require."""
    names = {normalized(d) for d in distributions}
    for dist in distributions:
        try:
            requires = importlib.metadata.requires(dist) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        names |= {normalized(re.split(r"[\s\[<>=!~;(]", r, maxsplit=1)[0]) for r in requires}
    return names
