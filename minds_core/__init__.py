"""minds: reinforcement learning of language models on the Tinker API.

This module is the public face of minds: plugin authors import from here
only (tests also from ``minds_core.testing``). Every other module is internal
and may change. docs/plugins.md describes the contract these names make up.

Names are imported on first use (``from minds_core import Task`` loads only
what ``Task`` needs), so importing minds_core, as ``minds --help`` does, costs
no more than pluggy.
"""

from importlib import import_module
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

import pluggy

hookimpl = pluggy.HookimplMarker("minds")

try:
    __version__ = version("minds-core")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0"

#: Every public name -> the internal module that defines it. RunConfig, build_config and
#: read_config_file are for tools that write or check configs; arg and the rules (at_least,
#: within, ...) declare settings the way the run config's schema does, and env_args checks [env.args].
_PUBLIC: dict[str, str] = {
    "RunConfig": "minds_core.config",
    "build_config": "minds_core.config",
    "read_config_file": "minds_core.config",
    "secret_values": "minds_core.config.secrets",
    "NAME_RULE": "minds_core.contracts",
    "REWARD_NAME_RULE": "minds_core.contracts",
    "AdvantageEstimator": "minds_core.contracts",
    "BackendExport": "minds_core.contracts",
    "BackendFactory": "minds_core.contracts",
    "BackendFit": "minds_core.contracts",
    "EnvironmentAdapter": "minds_core.contracts",
    "EnvironmentLoader": "minds_core.contracts",
    "ExecutorFactory": "minds_core.contracts",
    "GroupOrder": "minds_core.contracts",
    "LossFunction": "minds_core.contracts",
    "MetricSink": "minds_core.contracts",
    "OpenEnvironment": "minds_core.contracts",
    "Register": "minds_core.contracts",
    "RewardFunction": "minds_core.contracts",
    "RolloutExecutor": "minds_core.contracts",
    "SinkFactory": "minds_core.contracts",
    "Rule": "minds_core.config.rules",
    "above": "minds_core.config.rules",
    "arg": "minds_core.config.rules",
    "at_least": "minds_core.config.rules",
    "env_args": "minds_core.envs.args",
    "non_empty_subset_of": "minds_core.config.rules",
    "one_of": "minds_core.config.rules",
    "within": "minds_core.config.rules",
    "lenient": "minds_core.envs.calling",
    "background_loop": "minds_core.envs.loops",
    "GROUP_REWARD_INPUTS": "minds_core.envs.rubric",
    "REWARD_INPUTS": "minds_core.envs.rubric",
    "Rubric": "minds_core.envs.rubric",
    "RubricScore": "minds_core.envs.rubric",
    "as_reward": "minds_core.envs.rubric",
    "call_with_available": "minds_core.envs.rubric",
    "maybe_await": "minds_core.envs.rubric",
    "PolicySampler": "minds_core.envs.sampler",
    "HarnessArgs": "minds_core.envs.harness",
    "HarnessEnvironment": "minds_core.envs.harness",
    "SingleTurnEnvironment": "minds_core.envs.single_turn",
    "prompt_messages": "minds_core.envs.single_turn",
    "report_metric": "minds_core.envs.single_turn",
    "score_completion": "minds_core.envs.single_turn",
    "take_turns": "minds_core.envs.turns",
    "Context": "minds_core.envs.types",
    "Environment": "minds_core.envs.types",
    "Episode": "minds_core.envs.types",
    "EpisodeConversation": "minds_core.envs.types",
    "GroupRewards": "minds_core.envs.types",
    "SampledTurn": "minds_core.envs.types",
    "StopCondition": "minds_core.envs.types",
    "use_run_model": "minds_core.envs.cookbook.models",
    "Message": "minds_core.envs.types",
    "SelfDrivingEpisode": "minds_core.envs.types",
    "StepResult": "minds_core.envs.types",
    "Task": "minds_core.envs.types",
    "TokenBudgetExhausted": "minds_core.envs.types",
    "sampler_tokenizer": "minds_core.backends",
    "build_environment": "minds_core.envs.loading",
    "ConfigError": "minds_core.errors",
    "MindsError": "minds_core.errors",
    "UsageError": "minds_core.errors",
    "did_you_mean": "minds_core.errors",
    "get_logger": "minds_core.logs",
    "CustomLoss": "minds_core.rl.losses",
    "load_plugins": "minds_core.plugins",
    "Renderer": "minds_core.render",
    "EpisodeSettings": "minds_core.rl.rollout",
    "Group": "minds_core.rl.rollout",
    "Rollout": "minds_core.rl.rollout",
    "finish_group": "minds_core.rl.rollout",
    "run_rollout": "minds_core.rl.rollout",
    "serve_in_background": "minds_core.serve.background",
    "TOOL_CALL_CLOSE": "minds_core.envs.text",
    "TOOL_CALL_OPEN": "minds_core.envs.text",
    "MalformedToolCall": "minds_core.envs.text",
    "ToolCall": "minds_core.envs.text",
    "normalize_minus": "minds_core.envs.text",
    "parse_tool_calls": "minds_core.envs.text",
    "strip_code_fences": "minds_core.envs.text",
    "strip_think": "minds_core.envs.text",
    "strip_tool_calls": "minds_core.envs.text",
    "think_text": "minds_core.envs.text",
    "span": "minds_core.tracing",
}

if TYPE_CHECKING:  # what type checkers see of the names imported on first use (a test holds it to _PUBLIC)
    from minds_core.backends import sampler_tokenizer  # noqa: F401
    from minds_core.config import RunConfig, build_config, read_config_file  # noqa: F401
    from minds_core.config.rules import (  # noqa: F401
        Rule,
        above,
        arg,
        at_least,
        non_empty_subset_of,
        one_of,
        within,
    )
    from minds_core.config.secrets import secret_values  # noqa: F401
    from minds_core.contracts import (  # noqa: F401
        NAME_RULE,
        REWARD_NAME_RULE,
        AdvantageEstimator,
        BackendExport,
        BackendFactory,
        BackendFit,
        EnvironmentAdapter,
        EnvironmentLoader,
        ExecutorFactory,
        GroupOrder,
        LossFunction,
        MetricSink,
        OpenEnvironment,
        Register,
        RewardFunction,
        RolloutExecutor,
        SinkFactory,
    )
    from minds_core.envs.args import env_args  # noqa: F401
    from minds_core.envs.calling import lenient  # noqa: F401
    from minds_core.envs.cookbook.models import use_run_model  # noqa: F401
    from minds_core.envs.harness import HarnessArgs, HarnessEnvironment  # noqa: F401
    from minds_core.envs.loading import build_environment  # noqa: F401
    from minds_core.envs.loops import background_loop  # noqa: F401
    from minds_core.envs.rubric import (  # noqa: F401
        GROUP_REWARD_INPUTS,
        REWARD_INPUTS,
        Rubric,
        RubricScore,
        as_reward,
        call_with_available,
        maybe_await,
    )
    from minds_core.envs.sampler import PolicySampler  # noqa: F401
    from minds_core.envs.single_turn import (  # noqa: F401
        SingleTurnEnvironment,
        prompt_messages,
        report_metric,
        score_completion,
    )
    from minds_core.envs.text import (  # noqa: F401
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
    from minds_core.envs.turns import take_turns  # noqa: F401
    from minds_core.envs.types import (  # noqa: F401
        Context,
        Environment,
        Episode,
        EpisodeConversation,
        GroupRewards,
        Message,
        SampledTurn,
        SelfDrivingEpisode,
        StepResult,
        StopCondition,
        Task,
        TokenBudgetExhausted,
    )
    from minds_core.errors import ConfigError, MindsError, UsageError, did_you_mean  # noqa: F401
    from minds_core.logs import get_logger  # noqa: F401
    from minds_core.plugins import load_plugins  # noqa: F401
    from minds_core.render import Renderer  # noqa: F401
    from minds_core.rl.losses import CustomLoss  # noqa: F401
    from minds_core.rl.rollout import EpisodeSettings, Group, Rollout, finish_group, run_rollout  # noqa: F401
    from minds_core.serve.background import serve_in_background  # noqa: F401
    from minds_core.tracing import span  # noqa: F401

__all__ = ["__version__", "hookimpl"]
__all__ += list(_PUBLIC)


def __getattr__(name: str) -> Any:
    """Import a public name's module the first time the name is used, and keep the name here."""
    if name not in _PUBLIC:
        raise AttributeError(f"module 'minds_core' has no attribute {name!r}")
    value = getattr(import_module(_PUBLIC[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
