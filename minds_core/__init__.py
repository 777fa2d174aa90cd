"""minds: reinforcement learning of language models on the Tinker API.

This module is the public face of minds: plugin authors import from here
only (tests also from ``minds_core.testing``). Every other module is internal
and may change. docs/plugins.md describes the contract these names make up.
"""

from importlib.metadata import PackageNotFoundError, version

import pluggy

hookimpl = pluggy.HookimplMarker("minds")

try:
    __version__ = version("minds-core")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0"

# Every name below is public; __all__ lists them. The imports stay light (no torch, transformers
# or tinker at import time). RunConfig, build_config and read_config_file are for tools that write
# or check configs; env_args, arg and the rules (at_least, within, ...) declare and check [env.args].
from minds_core.config import RunConfig, build_config, read_config_file
from minds_core.contracts import (
    NAME_RULE,
    REWARD_NAME_RULE,
    AdvantageEstimator,
    BackendFactory,
    BackendFit,
    EnvironmentAdapter,
    EnvironmentLoader,
    LossFunction,
    MetricSink,
    OpenEnvironment,
    Register,
    RewardFunction,
    SinkFactory,
)
from minds_core.envs.args import (
    Rule,
    above,
    arg,
    at_least,
    env_args,
    non_empty_subset_of,
    one_of,
    within,
)
from minds_core.envs.calling import lenient
from minds_core.envs.rubric import (
    GROUP_REWARD_INPUTS,
    REWARD_INPUTS,
    Rubric,
    RubricScore,
    as_reward,
    call_with_available,
    maybe_await,
)
from minds_core.envs.sampler import PolicySampler
from minds_core.envs.single_turn import (
    SingleTurnEnvironment,
    prompt_messages,
    report_metric,
    score_completion,
)
from minds_core.envs.turns import take_turns
from minds_core.envs.types import (
    Context,
    Environment,
    Episode,
    EpisodeConversation,
    Message,
    SelfDrivingEpisode,
    StepResult,
    Task,
    TokenBudgetExhausted,
)
from minds_core.errors import ConfigError, MindsError, UsageError, did_you_mean
from minds_core.logs import get_logger
from minds_core.losses import CustomLoss
from minds_core.text import (
    TOOL_CALL_CLOSE,
    TOOL_CALL_OPEN,
    MalformedToolCall,
    ToolCall,
    normalize_minus,
    parse_tool_calls,
    strip_code_fences,
    strip_think,
    strip_tool_calls,
    think_text,
)

__all__ = [
    "GROUP_REWARD_INPUTS",
    "NAME_RULE",
    "REWARD_INPUTS",
    "REWARD_NAME_RULE",
    "TOOL_CALL_CLOSE",
    "TOOL_CALL_OPEN",
    "AdvantageEstimator",
    "BackendFactory",
    "BackendFit",
    "ConfigError",
    "Context",
    "CustomLoss",
    "Environment",
    "EnvironmentAdapter",
    "EnvironmentLoader",
    "Episode",
    "EpisodeConversation",
    "LossFunction",
    "MalformedToolCall",
    "Message",
    "MetricSink",
    "MindsError",
    "OpenEnvironment",
    "PolicySampler",
    "Register",
    "RewardFunction",
    "Rubric",
    "RubricScore",
    "Rule",
    "RunConfig",
    "SelfDrivingEpisode",
    "SingleTurnEnvironment",
    "SinkFactory",
    "StepResult",
    "Task",
    "TokenBudgetExhausted",
    "ToolCall",
    "UsageError",
    "__version__",
    "above",
    "arg",
    "as_reward",
    "at_least",
    "build_config",
    "call_with_available",
    "did_you_mean",
    "env_args",
    "get_logger",
    "hookimpl",
    "lenient",
    "maybe_await",
    "non_empty_subset_of",
    "normalize_minus",
    "one_of",
    "parse_tool_calls",
    "prompt_messages",
    "read_config_file",
    "report_metric",
    "score_completion",
    "strip_code_fences",
    "strip_think",
    "strip_tool_calls",
    "take_turns",
    "think_text",
    "within",
]
