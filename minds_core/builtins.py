"""The core's own parts, registered through the same hooks as any plugin."""

from __future__ import annotations

from minds_core import hookimpl
from minds_core.agents.harness import load_harness
from minds_core.backends import LocalBackend
from minds_core.backends.tinker import TinkerBackend
from minds_core.contract.parts import (
    AdvantageEstimator,
    BackendFactory,
    CustomLoss,
    EnvironmentLoader,
    ExecutorFactory,
    Register,
    RewardFunction,
    SinkFactory,
)
from minds_core.envs.rewards import REWARD_FUNCTIONS
from minds_core.rl.advantages import ESTIMATORS
from minds_core.rl.local_executor import LocalExecutor
from minds_core.rl.losses import BUILTIN_LOSSES, CUSTOM_LOSSES
from minds_core.rl.topk_distill import TOPK_DISTILL
from minds_core.sinks.console import ConsoleSink
from minds_core.sinks.report import ReportSink
from minds_core.sinks.wandb import WandbSink


@hookimpl
def minds_register_advantage_estimators(register: Register[AdvantageEstimator]) -> None:
    for name, (fn, description) in ESTIMATORS.items():
        register(name, fn, description)


@hookimpl
def minds_register_reward_functions(register: Register[RewardFunction]) -> None:
    for name, (fn, description) in REWARD_FUNCTIONS.items():
        register(name, fn, description)


@hookimpl
def minds_register_losses(register: Register[str | CustomLoss]) -> None:
    for name, loss in BUILTIN_LOSSES.items():
        register(name, name, f"Tinker built-in: {loss.description}")
    for name, (loss, description) in CUSTOM_LOSSES.items():
        register(name, loss, description)
    register("topk_distill", TOPK_DISTILL, "top-k KL to a teacher ([distill]; custom, via forward_backward_custom)")


@hookimpl
def minds_register_metric_sinks(register: Register[SinkFactory]) -> None:
    register("console", ConsoleSink, "progress with reward and health (a bar on a terminal, JSON events otherwise), tables of samples, <run>/train.log")
    register(
        "report",
        lambda config, run_dir: ReportSink(run_dir, config.metrics.report_every),
        "<run>/report.html, refreshed every metrics.report_every steps",
    )
    register("wandb", WandbSink, "Weights & Biases (needs the wandb extra and metrics.wandb_project)")


@hookimpl
def minds_register_backends(register: Register[BackendFactory]) -> None:
    register("local", LocalBackend(), "in-process Tinker-compatible service on torch + peft")
    register("tinker", TinkerBackend(), "the hosted Tinker service (needs an API key)")


@hookimpl
def minds_register_rollout_executors(register: Register[ExecutorFactory]) -> None:
    register("local", LocalExecutor, "every episode in the run's own process (asyncio, rollout.concurrency at once)")


@hookimpl
def minds_register_environments(register: Register[EnvironmentLoader]) -> None:
    register("harness", load_harness, "an unmodified agent program per episode, trained through the run's OpenAI/Anthropic endpoint")
