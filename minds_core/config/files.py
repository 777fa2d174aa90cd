"""Config files: TOML or YAML in (errors name the file, line and column), YAML out with secrets redacted."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import yaml

from minds_core.config.converter import to_dict
from minds_core.config.masking import mask_data
from minds_core.config.schema import RunConfig
from minds_core.config.secrets import redact
from minds_core.errors import ConfigError


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


def dump_yaml(config: RunConfig) -> str:
    """The resolved config as YAML with secrets redacted (and every known secret value masked)."""
    return yaml.safe_dump(mask_data(redact(to_dict(config))), sort_keys=False)
