"""Plugin discovery (entry-point group ``minds``), isolation of broken plugins, the registry."""

from __future__ import annotations

import importlib.metadata
import os
import re
from collections.abc import Callable, Iterable
from types import ModuleType
from typing import Any

import attrs
import pluggy

from minds_core.base.errors import ConfigError, PluginError, UnknownNameError, did_you_mean
from minds_core.contract import hookspecs
from minds_core.contract.parts import registration_problems

ENTRY_POINT_GROUP = "minds"
CORE_PLUGIN = "minds_core"

#: hook name -> registry kind, in the order plugins are asked.
HOOK_KINDS: dict[str, str] = {
    "minds_register_environments": "environments",
    "minds_register_reward_functions": "reward_functions",
    "minds_register_advantage_estimators": "advantage_estimators",
    "minds_register_losses": "losses",
    "minds_register_metric_sinks": "metric_sinks",
    "minds_register_backends": "backends",
    "minds_register_environment_adapters": "environment_adapters",
    "minds_register_rollout_executors": "rollout_executors",
}

#: Entry-point group in which a plugin distribution names the environments it registers
#: (``NAME = "its_module"``), so that an environment whose plugin did not load names its distribution.
ENVIRONMENTS_GROUP = "minds.environments"


def singular(kind: str) -> str:
    """A registry kind as one thing, for messages: ``losses`` -> ``loss``, ``metric_sinks`` -> ``metric sink``."""
    one = kind[:-2] if kind.endswith("sses") else kind[:-1]
    return one.replace("_", " ")


@attrs.frozen
class Entry:
    """One registered part and the plugin that registered it."""

    kind: str
    name: str
    obj: Any
    description: str
    plugin: str


@attrs.define
class PluginInfo:
    """What `minds plugins` shows about one plugin."""

    name: str
    distribution: str | None = None
    version: str | None = None
    builtin: bool = False
    registered: dict[str, list[str]] = attrs.field(factory=dict)
    errors: list[str] = attrs.field(factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors


class Registry:
    """Named parts of every kind, each remembering its plugin; what breaks its kind's contract or is a duplicate is an error."""

    def __init__(self) -> None:
        self._entries: dict[str, dict[str, Entry]] = {kind: {} for kind in HOOK_KINDS.values()}
        self._conflicts: dict[tuple[str, str], list[str]] = {}
        self._rejected: dict[tuple[str, str], str] = {}

    def add(self, kind: str, name: str, obj: Any, description: str, plugin: str) -> None:
        """Register ``name``; raises PluginError naming the plugin when the name or object breaks the kind's
        contract (``minds_core.contract.parts.CONTRACTS``), and naming both plugins on a duplicate."""
        problems = registration_problems(kind, name, obj, description, plugin)
        if problems:
            message = f"{singular(kind)} {name!r} of plugin {plugin!r} is not registered: {'; '.join(problems)}"
            if isinstance(name, str):
                self._rejected[(kind, name)] = message
            raise PluginError(message)
        existing = self._entries[kind].get(name)
        if existing is not None:
            owners = self._conflicts.setdefault((kind, name), [existing.plugin])
            owners.append(plugin)
            raise PluginError(
                f"{singular(kind)} {name!r} is registered by both "
                f"{existing.plugin!r} and {plugin!r}; uninstall or disable one "
                f"(MINDS_DISABLE_PLUGINS={plugin})"
            )
        self._entries[kind][name] = Entry(kind, name, obj, description, plugin)

    def get(self, kind: str, name: str) -> Entry:
        """The entry for ``name``, or a UnknownNameError listing what exists."""
        owners = self._conflicts.get((kind, name))
        if owners:
            raise PluginError(
                f"{singular(kind)} {name!r} is registered by several plugins "
                f"({', '.join(owners)}); disable all but one with MINDS_DISABLE_PLUGINS"
            )
        try:
            return self._entries[kind][name]
        except KeyError:
            if (kind, name) in self._rejected:
                raise PluginError(f"{self._rejected[kind, name]} (fix the plugin, or disable it with MINDS_DISABLE_PLUGINS)") from None
            raise UnknownNameError(self._unknown_message(kind, name)) from None

    def lookup(self, kind: str, name: str, key: str) -> Entry:
        """``get`` for a name taken from the config: an unknown name is a ConfigError naming ``key``."""
        try:
            return self.get(kind, name)
        except UnknownNameError as exc:
            raise ConfigError(f"{key}: {exc}") from None

    def names(self, kind: str) -> list[str]:
        return sorted(self._entries[kind])

    def entries(self, kind: str) -> list[Entry]:
        return [self._entries[kind][n] for n in self.names(kind)]

    def _unknown_message(self, kind: str, name: str) -> str:
        label = singular(kind)
        known = self.names(kind)
        message = f"unknown {label} {name!r}{did_you_mean(name, known)}."
        message += f" Available: {', '.join(known) if known else '(none)'}."
        providers = declared_providers(name) if kind == "environments" else []
        if providers:
            message += (
                f" {name!r} is provided by {', '.join(providers)}, installed but not loaded "
                "(`minds plugins` says why; MINDS_DISABLE_PLUGINS may skip it)"
            )
        return message


def declared_providers(env_name: str) -> list[str]:
    """The installed distributions that declare the environment ``env_name`` (entry-point group ENVIRONMENTS_GROUP)."""
    found = importlib.metadata.entry_points(group=ENVIRONMENTS_GROUP, name=env_name)
    return sorted({ep.dist.name for ep in found if ep.dist is not None})


@attrs.define
class Plugins:
    """The loaded plugins and the registry they filled."""

    registry: Registry
    plugins: list[PluginInfo]

    @property
    def broken(self) -> list[PluginInfo]:
        return [p for p in self.plugins if not p.ok]


def _env_list(name: str) -> set[str]:
    return {item.strip() for item in os.environ.get(name, "").split(",") if item.strip()}


def _strict() -> bool:
    return os.environ.get("MINDS_STRICT_PLUGINS", "").strip().lower() in {"1", "true", "yes", "on"}


def _entry_points() -> Iterable[importlib.metadata.EntryPoint]:
    """Entry points of the group, once each (a distribution may sit on sys.path twice)."""
    seen: set[tuple[str, str | None]] = set()
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        key = (ep.name, ep.dist.name if ep.dist else None)
        if key not in seen:
            seen.add(key)
            yield ep


def _is_core(distribution: str | None) -> bool:
    return distribution is not None and re.sub(r"[-_.]+", "-", distribution).lower() == "minds-core"


def _core_parts(entry_points: list[importlib.metadata.EntryPoint]) -> object:
    """The core's own parts (minds_core.builtins), found as every plugin is: by minds-core's entry point."""
    for ep in entry_points:
        if ep.name == CORE_PLUGIN and _is_core(ep.dist.name if ep.dist else None):
            return ep.load()
    raise PluginError(
        f"minds-core's own parts are missing: its entry point {CORE_PLUGIN!r} in group {ENTRY_POINT_GROUP!r} is not installed "
        "(minds is imported from a source tree that was never installed); install it: pip install -e ."
    )


def _check_hook_names(module: ModuleType) -> list[str]:
    """Errors for ``minds_*`` functions marked as hooks that no spec defines (typos)."""
    known = set(HOOK_KINDS)
    errors = []
    for attr in dir(module):
        fn = getattr(module, attr, None)
        if attr.startswith("minds_") and attr not in known and hasattr(fn, f"{hookspecs.PROJECT}_impl"):
            errors.append(f"unknown hook {attr}{did_you_mean(attr, known)}")
    return errors


def load_plugins(extra: Iterable[tuple[str, object]] = ()) -> Plugins:
    """Discover, register and call every plugin; broken ones are recorded, not fatal.

    ``extra`` adds (name, module-or-object) pairs, e.g. for tests. Set
    ``MINDS_STRICT_PLUGINS=1`` to make any plugin error fatal and
    ``MINDS_DISABLE_PLUGINS=a,b`` to skip plugins by entry-point or distribution name.
    """
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    disabled = _env_list("MINDS_DISABLE_PLUGINS")
    infos: dict[str, PluginInfo] = {}

    def fail(info: PluginInfo, message: str) -> None:
        info.errors.append(message)
        if _strict():
            raise PluginError(f"plugin {info.name!r}: {message} (MINDS_STRICT_PLUGINS is set)")

    def add(info: PluginInfo, module: object) -> None:
        infos[info.name] = info
        if isinstance(module, ModuleType):
            for message in _check_hook_names(module):
                fail(info, message)
        try:
            pm.register(module, name=info.name)
        except Exception as exc:  # noqa: BLE001 - a plugin's own error, reported by name
            fail(info, f"cannot register: {exc}")

    entry_points = list(_entry_points())
    add(PluginInfo(CORE_PLUGIN, "minds-core", _version("minds-core"), builtin=True), _core_parts(entry_points))
    for ep in entry_points:
        dist = ep.dist.name if ep.dist else None
        if ep.name == CORE_PLUGIN and _is_core(dist):
            continue
        if ep.name in disabled or (dist and dist in disabled):
            continue
        info = PluginInfo(ep.name, dist, ep.dist.version if ep.dist else None)
        if ep.name in infos:
            other = infos[ep.name]
            infos[f"{ep.name} ({dist})"] = info
            fail(info, f"plugin name {ep.name!r} is also used by {other.distribution}; uninstall one of them")
            continue
        unmet = unmet_requirements(ep.dist.requires or [] if ep.dist else [], _version)
        try:
            module = ep.load()
        except Exception as exc:  # noqa: BLE001 - isolation is the point
            infos[info.name] = info
            for message in unmet:
                fail(info, message)
            fail(info, f"failed to import {ep.value}: {type(exc).__name__}: {exc}")
            continue
        add(info, module)
        for message in unmet:
            fail(info, message)
    for name, module in extra:
        add(PluginInfo(name), module)

    registry = Registry()
    for hook_name, kind in HOOK_KINDS.items():
        for impl in getattr(pm.hook, hook_name).get_hookimpls():
            info = infos[impl.plugin_name]

            def register(name: str, obj: Any, description: str = "", *, _info: PluginInfo = info, _kind: str = kind) -> None:
                try:
                    registry.add(_kind, name, obj, description, _info.name)
                except PluginError as exc:
                    fail(_info, str(exc))
                    return
                _info.registered.setdefault(_kind, []).append(name)

            try:
                impl.function(**{arg: register for arg in impl.argnames})
            except Exception as exc:
                if isinstance(exc, PluginError) and _strict():
                    raise
                fail(info, f"{hook_name} raised {type(exc).__name__}: {exc}")
    return Plugins(registry, list(infos.values()))


def unmet_requirements(requires: Iterable[str], installed: Callable[[str], str | None]) -> list[str]:
    """What a plugin distribution requires (``verifiers>=0.3,<0.4``) that is installed in another version.

    ``installed(name)`` gives a distribution's installed version (None: not installed, which the
    plugin's import then reports). Requirements of extras and of other platforms are left out.
    """
    from packaging.requirements import InvalidRequirement, Requirement

    unmet = []
    for text in requires:
        try:
            requirement = Requirement(text)
        except InvalidRequirement:
            continue
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        version = installed(requirement.name)
        if version is not None and requirement.specifier and not requirement.specifier.contains(version, prereleases=True):
            unmet.append(
                f"needs {requirement.name}{requirement.specifier}, and {requirement.name} {version} is installed: "
                f"pip install '{requirement.name}{requirement.specifier}' (or a version of the plugin made for {version})"
            )
    return unmet


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None
