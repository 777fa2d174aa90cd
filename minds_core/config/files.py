"""Config files: TOML or YAML in (errors name the file, line and column), YAML out with secrets redacted.

YAML is read strictly: a key given twice in one mapping is an error (not last-wins),
and so is a file with more than ``MAX_YAML_ALIASES`` aliases; whatever the format,
a config that expands to more than ``MAX_VALUES`` values or nests deeper than
``MAX_DEPTH`` levels (an alias bomb, a recursive alias) is refused before anything walks it.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import yaml

from minds_core.base.errors import ConfigError
from minds_core.base.masking import mask_data
from minds_core.base.secrets import redact
from minds_core.config.converter import to_dict
from minds_core.config.schema import RunConfig

#: Aliases (``*name``) one YAML text may use.
MAX_YAML_ALIASES = 64
#: Values (scalars, lists, mappings) a config may hold, counted with aliases expanded.
MAX_VALUES = 100_000
#: Levels of nesting a config may have.
MAX_DEPTH = 64


class _ConfigLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing duplicate keys and more than ``MAX_YAML_ALIASES`` aliases."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.aliases = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            self.aliases += 1
            if self.aliases > MAX_YAML_ALIASES:
                mark = self.peek_event().start_mark
                raise yaml.composer.ComposerError(
                    None, None, f"more than {MAX_YAML_ALIASES} aliases (*name): refused as a possible alias bomb; write the values out", mark
                )
        return super().compose_node(parent, index)

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> Any:
        first_line: dict[Any, int] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node)
            if key in first_line:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (first on line {first_line[key]}): keep one", key_node.start_mark
                )
            first_line[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep)


def parse_yaml(text: str) -> Any:
    """YAML text as data, read strictly (see the module's docstring); a ``yaml.YAMLError`` when it is not acceptable."""
    return yaml.load(text, Loader=_ConfigLoader)  # a SafeLoader subclass: safe


def check_size(data: Any, where: str) -> None:
    """A ConfigError when ``data`` holds more than ``MAX_VALUES`` values or nests deeper than ``MAX_DEPTH`` levels."""
    pending, count = [(data, 0)], 0
    while pending:
        value, depth = pending.pop()
        count += 1
        if count > MAX_VALUES:
            raise ConfigError(f"{where}: the config expands to more than {MAX_VALUES} values (YAML aliases?): refused")
        if depth > MAX_DEPTH:
            raise ConfigError(f"{where}: the config nests deeper than {MAX_DEPTH} levels (a recursive YAML alias?): refused")
        if isinstance(value, dict):
            pending.extend((item, depth + 1) for item in value.values())
        elif isinstance(value, list):
            pending.extend((item, depth + 1) for item in value)


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
        except RecursionError:
            raise ConfigError(f"{path}: invalid TOML: nested too deeply") from None
    elif path.suffix in (".yaml", ".yml"):
        try:
            data = parse_yaml(text)
        except RecursionError:
            raise ConfigError(f"{path}: invalid YAML: nested too deeply") from None
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
    check_size(data, str(path))
    return data


def dump_yaml(config: RunConfig) -> str:
    """The resolved config as YAML with secrets redacted (and every known secret value masked)."""
    return yaml.safe_dump(mask_data(redact(to_dict(config))), sort_keys=False)
