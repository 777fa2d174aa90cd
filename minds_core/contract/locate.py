"""Where a loose ``[env] id`` points: a module, a package folder, a distribution project, or an installed one.

Seed-harness checkouts keep each environment as a distribution project,
``environments/<name>/`` with a ``pyproject.toml`` and the package one level
down (``<name>/<name>/__init__.py``, ``<name>/src/<name>/``, or a single
``<name>/<name>.py`` module), and their code imports siblings through the
repository root (``from environments.other_env import ...``), which the seed's
``python run_experiment.py configs/x.toml`` made importable. ``importable``
makes the current directory and the config's folder importable the same way;
``import_environment`` imports what an id names.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import re
import sys
import tomllib
from pathlib import Path
from types import ModuleType

from minds_core.base.errors import ConfigError

#: Prefix that makes an id a module path even when it is also a registered name (``module:ghost_trace``).
MODULE_PREFIX = "module:"


def importable(*folders: str | Path) -> None:
    """Put each folder (and the current directory) on ``sys.path``, after what is there, once."""
    for folder in (Path.cwd(), *map(Path, folders)):
        entry = str(folder.expanduser().resolve())
        if entry not in sys.path and entry not in {str(Path(p).resolve()) for p in sys.path if p}:
            sys.path.append(entry)


def is_path(env_id: str) -> bool:
    return env_id.startswith((".", "/", "~")) or "/" in env_id or Path(env_id).suffix == ".py"


def normalized(name: str) -> str:
    """A distribution name as a module name: ``My-Task.x`` -> ``my_task_x``."""
    return re.sub(r"[-_.]+", "_", name).lower()


def import_environment(env_id: str) -> ModuleType:
    """The module an id names: a folder or ``.py`` path, ``module:NAME``, a module path, or a distribution name."""
    importable()
    if env_id.startswith(MODULE_PREFIX):
        return _import_module(env_id, env_id.removeprefix(MODULE_PREFIX))
    if is_path(env_id):
        return _import_path(env_id, Path(env_id).expanduser().resolve())
    return _import_module(env_id, env_id)


def findable(name: str) -> bool:
    """Whether ``name`` is an importable top-level module or an installed distribution (not a registered name)."""
    importable()
    try:
        if name.isidentifier() and importlib.util.find_spec(name) is not None:
            return True
    except (ImportError, ValueError):
        pass
    try:
        importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def _import_module(env_id: str, name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if not exc.name or not (name == exc.name or name.startswith(exc.name + ".")):
            raise  # the module exists but one of its own imports is missing
        module = _installed_distribution(name)
        if module is not None:
            return module
        raise ConfigError(
            f"environment {env_id!r}: no module named {exc.name!r} and no installed distribution {name!r}; give a "
            "folder path (./environments/my_task), a .py file, or an importable module path"
        ) from None


def _installed_distribution(name: str) -> ModuleType | None:
    """The top-level module of the installed distribution ``name`` (``my-task`` installs ``my_task``)."""
    try:
        dist = importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return None
    top = (dist.read_text("top_level.txt") or "").split()
    for candidate in [*top, normalized(dist.metadata["Name"] or name)]:
        if importlib.util.find_spec(candidate) is not None:
            return importlib.import_module(candidate)
    return None


def _identifier(name: str) -> str:
    """A name as written, with the characters a module name cannot hold read as ``_`` (``My-Task`` -> ``My_Task``)."""
    return re.sub(r"[-.]+", "_", name)


def package_candidates(folder: Path) -> list[Path]:
    """Where the package of a folder may live: itself, then ``<name>/``, ``src/<name>/``, ``<name>.py``.

    ``<name>`` is the pyproject's ``[project] name`` when there is one, then the folder's name, each
    lower-cased with ``-`` and ``.`` read as ``_`` (PEP 503), then as written with only those replaced.
    """
    names = []
    pyproject = folder / "pyproject.toml"
    if pyproject.is_file():
        try:
            project = tomllib.loads(pyproject.read_text()).get("project", {})
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"environment folder {folder}: {pyproject} is not valid TOML: {exc}") from None
        if isinstance(project.get("name"), str):
            names += [normalized(project["name"]), _identifier(project["name"])]
    names += [normalized(folder.name), _identifier(folder.name)]
    candidates = [folder / "__init__.py"]
    for name in dict.fromkeys(names):
        candidates += [folder / name / "__init__.py", folder / "src" / name / "__init__.py", folder / f"{name}.py"]
    return candidates


def _import_path(env_id: str, path: Path) -> ModuleType:
    """Import a folder's package or a .py file under its own name (so its self-imports work)."""
    if path.is_dir():
        candidates = package_candidates(path)
        found = next((c for c in candidates if c.is_file()), None)
        if found is None:
            shown = ", ".join(str(c.relative_to(path)) for c in candidates)
            raise ConfigError(
                f"environment {env_id!r}: the folder {path} holds no Python package (looked for {shown}); "
                "make it a package (add __init__.py) or put the package one level down as in a distribution project"
            )
        return _exec(env_id, found, path)
    if path.is_file() and path.suffix == ".py":
        return _exec(env_id, path, path)
    raise ConfigError(f"environment {env_id!r}: {path} does not exist (paths are relative to {Path.cwd()})")


def _exec(env_id: str, origin: Path, given: Path) -> ModuleType:
    package = origin.name == "__init__.py"
    name = _identifier(origin.parent.name if package else origin.stem)
    try:
        other = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        other = None
    if other is not None and other.origin and Path(other.origin).resolve() != origin:
        raise ConfigError(
            f"environment {env_id!r}: the name {name!r} of {origin} is taken by the module at {other.origin}; "
            f"rename {given.name}, or uninstall the other"
        )
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, origin, submodule_search_locations=[str(origin.parent)] if package else None)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def is_path_like(env_id: str) -> bool:
    """Folders (``./envs/x``), module paths (``pkg.mod``) and ``module:NAME`` go through the loose adapter.

    So does a plain name that is no registered environment but an importable module or installed distribution.
    """
    return env_id.startswith(MODULE_PREFIX) or is_path(env_id) or "." in env_id
