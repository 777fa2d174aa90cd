"""The run configuration: its schema, and reading it from a file and ``--set`` overrides.

The modules: ``schema`` (the attrs classes), ``files`` (TOML/YAML in, YAML
out), ``overrides`` (``--set``), ``harness`` (the seed harness's key names),
``secrets`` (which keys hold secrets, redaction), ``masking`` (known secret
values masked in all output), ``converter`` (strict types)
``presets`` (named recipes), ``names`` (the names a config refers to, checked against the
registry) and ``loading`` (all of it together, every problem reported at once). This
package re-exports what the rest of minds reads a configuration with.
"""

from minds_core.config.converter import to_dict
from minds_core.config.files import dump_yaml, read_config_file
from minds_core.config.loading import build_config, load_config
from minds_core.config.schema import (
    BUILTIN_MODELS,
    DEFAULT_BASE_MODEL,
    DistillConfig,
    EnvConfig,
    LocalConfig,
    MetricsConfig,
    ModelConfig,
    RayConfig,
    RewardRef,
    RolloutConfig,
    RunConfig,
    SamplingConfig,
    SftConfig,
    TinkerConfig,
    TrainerConfig,
)

__all__ = [
    "BUILTIN_MODELS",
    "DEFAULT_BASE_MODEL",
    "EnvConfig",
    "LocalConfig",
    "MetricsConfig",
    "ModelConfig",
    "RayConfig",
    "RewardRef",
    "RolloutConfig",
    "RunConfig",
    "SamplingConfig",
    "SftConfig",
    "DistillConfig",
    "TinkerConfig",
    "TrainerConfig",
    "build_config",
    "dump_yaml",
    "load_config",
    "read_config_file",
    "to_dict",
]
