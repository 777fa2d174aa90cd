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
    "secret_values": "minds_core.base.secrets",
    "NAME_RULE": "minds_core.contract.parts",
    "REWARD_NAME_RULE": "minds_core.contract.parts",
    "AdvantageEstimator": "minds_core.contract.parts",
    "BackendExport": "minds_core.contract.parts",
    "BackendFactory": "minds_core.contract.parts",
    "BackendFit": "minds_core.contract.parts",
    "EnvironmentAdapter": "minds_core.contract.parts",
    "EnvironmentLoader": "minds_core.contract.parts",
    "ExecutorFactory": "minds_core.contract.parts",
    "GroupOrder": "minds_core.contract.parts",
    "LossFunction": "minds_core.contract.parts",
    "MetricSink": "minds_core.contract.parts",
    "OpenEnvironment": "minds_core.contract.parts",
    "Register": "minds_core.contract.parts",
    "RewardFunction": "minds_core.contract.parts",
    "RolloutExecutor": "minds_core.contract.parts",
    "SinkFactory": "minds_core.contract.parts",
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
    "GROUP_REWARD_INPUTS": "minds_core.contract.rubric",
    "REWARD_INPUTS": "minds_core.contract.rubric",
    "Rubric": "minds_core.contract.rubric",
    "RubricScore": "minds_core.contract.rubric",
    "as_reward": "minds_core.contract.rubric",
    "call_with_available": "minds_core.contract.rubric",
    "maybe_await": "minds_core.contract.rubric",
    "PolicySampler": "minds_core.envs.sampler",
    "HarnessArgs": "minds_core.agents.harness",
    "HarnessEnvironment": "minds_core.agents.harness",
    "SingleTurnEnvironment": "minds_core.envs.single_turn",
    "prompt_messages": "minds_core.envs.single_turn",
    "report_metric": "minds_core.envs.single_turn",
    "score_completion": "minds_core.envs.single_turn",
    "take_turns": "minds_core.envs.turns",
    "Context": "minds_core.contract.environment",
    "Environment": "minds_core.contract.environment",
    "Episode": "minds_core.contract.environment",
    "EpisodeConversation": "minds_core.contract.environment",
    "GroupRewards": "minds_core.contract.environment",
    "SampledTurn": "minds_core.contract.environment",
    "StopCondition": "minds_core.contract.environment",
    "use_run_model": "minds_core.envs.cookbook.models",
    "Message": "minds_core.contract.environment",
    "SelfDrivingEpisode": "minds_core.contract.environment",
    "StepResult": "minds_core.contract.environment",
    "Task": "minds_core.contract.environment",
    "TokenBudgetExhausted": "minds_core.contract.environment",
    "sampler_tokenizer": "minds_core.backends",
    "build_environment": "minds_core.envs.loading",
    "ConfigError": "minds_core.base.errors",
    "MindsError": "minds_core.base.errors",
    "UsageError": "minds_core.base.errors",
    "did_you_mean": "minds_core.base.errors",
    "get_logger": "minds_core.base.logs",
    "CustomLoss": "minds_core.contract.parts",
    "load_plugins": "minds_core.contract.plugins",
    "Renderer": "minds_core.envs.render",
    "EpisodeSettings": "minds_core.episodes.groups",
    "Group": "minds_core.episodes.groups",
    "Rollout": "minds_core.episodes.groups",
    "finish_group": "minds_core.episodes.rollout",
    "run_rollout": "minds_core.episodes.rollout",
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
    "span": "minds_core.base.tracing",
}

if TYPE_CHECKING:  # what type checkers see of the names imported on first use (a test holds it to _PUBLIC)
    from minds_core.agents.harness import HarnessArgs, HarnessEnvironment  # noqa: F401
    from minds_core.backends import sampler_tokenizer  # noqa: F401
    from minds_core.base.errors import ConfigError, MindsError, UsageError, did_you_mean  # noqa: F401
    from minds_core.base.logs import get_logger  # noqa: F401
    from minds_core.base.secrets import secret_values  # noqa: F401
    from minds_core.base.tracing import span  # noqa: F401
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
    from minds_core.contract.environment import (  # noqa: F401
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
    from minds_core.contract.parts import (  # noqa: F401
        NAME_RULE,
        REWARD_NAME_RULE,
        AdvantageEstimator,
        BackendExport,
        BackendFactory,
        BackendFit,
        CustomLoss,
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
    from minds_core.contract.plugins import load_plugins  # noqa: F401
    from minds_core.contract.rubric import (  # noqa: F401
        GROUP_REWARD_INPUTS,
        REWARD_INPUTS,
        Rubric,
        RubricScore,
        as_reward,
        call_with_available,
        maybe_await,
    )
    from minds_core.envs.args import env_args  # noqa: F401
    from minds_core.envs.calling import lenient  # noqa: F401
    from minds_core.envs.cookbook.models import use_run_model  # noqa: F401
    from minds_core.envs.loading import build_environment  # noqa: F401
    from minds_core.envs.loops import background_loop  # noqa: F401
    from minds_core.envs.render import Renderer  # noqa: F401
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
    from minds_core.episodes.groups import EpisodeSettings, Group, Rollout  # noqa: F401
    from minds_core.episodes.rollout import finish_group, run_rollout  # noqa: F401
    from minds_core.serve.background import serve_in_background  # noqa: F401

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
