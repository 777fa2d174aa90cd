"""Supervised fine-tuning: chat conversations -> ``cross_entropy`` on the assistant's tokens only.

``minds sft --data chats.jsonl`` (or ``trainer.mode = "sft"``). Each line of
the data is ``{"messages": [{"role": ..., "content": ...}, ...]}`` with at least
one assistant message after the first message, in OpenAI's chat fine-tuning
format: an assistant message may carry ``tool_calls`` (its ``content`` then null
or absent) and ``weight`` (0: not trained on, 1: trained on), and the line may
give the ``tools`` the chat template shows (a template without tools refuses
them). Without ``sft.data`` the
environment's tasks that have an ``answer`` become (prompt, answer)
conversations. A share of the data (``sft.eval_fraction``, or ``sft.eval_data``)
is held out: ``eval/loss``, its mean negative log-likelihood per assistant
token, is reported before training, every ``sft.eval_every`` steps and after
the last step; ``train/loss`` is the same measure on each step's batch.

Tokens: the chat template renders the conversation; the text it writes for
each assistant message (content and end-of-turn marker) is weighted 1, the rest
0. Each piece is tokenized on its own, as multi-turn rollouts are.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import math
import random
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import tinker

from minds_core.backends.retry import REJECTIONS, ServiceCallError
from minds_core.base.errors import ConfigError, UsageError
from minds_core.base.logs import get_logger
from minds_core.base.tracing import run_tracer, span
from minds_core.config import RunConfig
from minds_core.contract.environment import Message
from minds_core.contract.plugins import Plugins, load_plugins
from minds_core.envs.chat_format import call_problem, template_message
from minds_core.envs.render import Renderer, TemplateError
from minds_core.envs.single_turn import prompt_messages
from minds_core.session.service import ServiceLifetime
from minds_core.session.session import load_environments
from minds_core.sinks import SinkSet
from minds_core.training.data_order import DataOrder
from minds_core.training.requests import (
    adam_params,
    apply_update,
    check_losses,
    save_after_failure,
    save_checkpoint,
    step_checkpoint_name,
)
from minds_core.training.run_directory import RunDirectory, RunLock, file_error, start_point

log = get_logger("sft")

_ROLES = ("system", "user", "assistant", "tool")


# ---------------------------------------------------------------- data


@attrs.frozen
class Chat:
    """One conversation to train on: its messages and the tools its chat template shows (None: none)."""

    messages: list[Message]
    tools: list[dict[str, Any]] | None = None


def read_conversations(path: str | Path) -> list[Chat]:
    """The conversations of a jsonl file; a bad line is a ConfigError naming the file and line."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"sft data file not found: {path} (sft.data / sft.eval_data)")
    conversations = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path}:{number}: not JSON ({exc.msg})") from None
        messages = record.get("messages") if isinstance(record, dict) else None
        tools = record.get("tools") if isinstance(record, dict) else None
        problem = _check_messages(messages) or _check_tools(tools)
        if problem:
            raise ConfigError(f'{path}:{number}: {problem}; expected {{"messages": [{{"role": "user", "content": "..."}}, {{"role": "assistant", ...}}]}}')
        conversations.append(Chat([template_message(m) for m in messages], tools or None))
    if not conversations:
        raise ConfigError(f"{path}: no conversations")
    return conversations


def _check_messages(messages: Any) -> str | None:
    if not isinstance(messages, list) or not messages:
        return 'no "messages" list'
    for i, message in enumerate(messages):
        needs = f"message {i} needs a role ({', '.join(_ROLES)}) and a string content (null only beside tool_calls)"
        if not isinstance(message, dict) or message.get("role") not in _ROLES:
            return needs
        calls = message.get("tool_calls")
        if calls is not None and (message["role"] != "assistant" or not isinstance(calls, list) or not calls):
            return f"message {i}: tool_calls must be a non-empty list, on an assistant message"
        if not isinstance(message.get("content"), str) and not (calls and message.get("content") is None):
            return needs
        for j, call in enumerate(calls or []):
            if problem := call_problem(call):
                return f"message {i}: tool_calls[{j}] {problem}"
        if "weight" in message and (message["role"] != "assistant" or message["weight"] not in (0, 1) or isinstance(message["weight"], bool)):
            return f"message {i}: weight must be 0 (not trained on) or 1, on an assistant message; got {message['weight']!r}"
    if messages[0]["role"] == "assistant":
        return "the first message is the assistant's: nothing to condition it on"
    replies = [m for m in messages if m["role"] == "assistant"]
    if not any(m.get("weight", 1) for m in replies):
        return "no assistant message to train on" + (" (weight 0 on every one)" if replies else "")
    return None


def _check_tools(tools: Any) -> str | None:
    if tools is None or (isinstance(tools, list) and all(isinstance(t, dict) for t in tools)):
        return None
    return '"tools" must be a list of tool specs (JSON objects)'


def task_conversations(tasks: Sequence[Any]) -> list[Chat]:
    """(prompt, answer) conversations from tasks that have a reference answer."""
    return [
        Chat([*prompt_messages(task.prompt), {"role": "assistant", "content": str(task.answer)}])
        for task in tasks
        if task.answer is not None
    ]


def tokenize(
    renderer: Renderer, messages: Sequence[Message], tools: list[dict[str, Any]] | None = None
) -> tuple[list[int], list[float]]:
    """Tokens of a conversation and a weight per token: 1 on what the template writes for assistant messages.

    An assistant message with ``weight`` 0 is weighted 0. ``tools`` are shown by the template, which must support them.
    """
    if tools and not renderer.supports_tools:
        raise TemplateError("the data gives tools, but the model's chat template does not render tools")
    tokens: list[int] = []
    weights: list[float] = []
    rendered = ""
    for k, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        prompt = renderer.text(messages[:k], generation_prompt=True, tools=tools)
        full = renderer.text(messages[: k + 1], tools=tools)
        if not (prompt.startswith(rendered) and full.startswith(prompt)):
            raise TemplateError(
                "the chat template renders an earlier turn differently once later turns follow "
                "(e.g. it drops past reasoning), so assistant tokens cannot be cut out exactly; "
                "split such conversations into one example per assistant turn"
            )
        for text, weight in ((prompt[len(rendered) :], 0.0), (full[len(prompt) :], float(message.get("weight", 1)))):
            piece = renderer.encode(text)
            tokens.extend(piece)
            weights.extend([weight] * len(piece))
        rendered = full
    return tokens, weights


def sft_datum(tokens: Sequence[int], weights: Sequence[float]) -> tinker.Datum:
    """A cross_entropy datum: input ``tokens[:-1]``, targets ``tokens[1:]`` weighted by ``weights[1:]``."""
    n = len(tokens)
    return tinker.Datum(
        model_input=tinker.types.ModelInput.from_ints(list(tokens[:-1])),
        loss_fn_inputs={
            "target_tokens": tinker.TensorData(data=list(tokens[1:]), dtype="int64", shape=[n - 1]),
            "weights": tinker.TensorData(data=[float(w) for w in weights[1:]], dtype="float32", shape=[n - 1]),
        },
    )


def mean_nll(data: Sequence[tinker.Datum], output: Any) -> tuple[float, float]:
    """(mean negative log-likelihood per weighted token, weighted tokens) from a forward's target log-probs."""
    total = weight_sum = 0.0
    for datum, out in zip(data, output.loss_fn_outputs, strict=True):
        logprobs = out["logprobs"].data
        weights = datum.loss_fn_inputs["weights"].data
        total -= math.fsum(w * lp for w, lp in zip(weights, logprobs, strict=True))
        weight_sum += math.fsum(weights)
    return (total / weight_sum if weight_sum else math.nan), weight_sum


@attrs.define
class SftData:
    train: list[tinker.Datum]
    held_out: list[tinker.Datum]


def _split(conversations: list[Chat], config: RunConfig) -> tuple[list[Chat], list[Chat]]:
    if config.sft.eval_data:
        return conversations, read_conversations(config.sft.eval_data)
    order = list(range(len(conversations)))
    random.Random(f"{config.seed}:sft-split").shuffle(order)
    held = round(config.sft.eval_fraction * len(conversations)) if len(conversations) > 1 else 0
    if config.sft.eval_fraction > 0 and len(conversations) > 1:
        held = max(1, held)
    return [conversations[i] for i in order[held:]], [conversations[i] for i in order[:held]]


def _conversations(config: RunConfig, plugins: Plugins) -> list[Chat]:
    if config.sft.data:
        return read_conversations(config.sft.data)
    if not config.environments:
        raise ConfigError(
            "SFT needs data: set sft.data = PATH.jsonl (minds sft --data PATH), or an environment whose tasks have answers"
        )
    conversations = [c for handle in load_environments(config, plugins) for c in task_conversations(handle.tasks)]
    if not conversations:
        raise ConfigError(
            f"SFT on environment tasks needs reference answers; {', '.join(e.id for e in config.environments)} has none"
        )
    return conversations


# ---------------------------------------------------------------- the loop


async def _train_sft(
    config: RunConfig, plugins: Plugins, resume_dir: Path | None, claims: contextlib.ExitStack, start_over: bool = False
) -> dict[str, Any]:
    door = ServiceLifetime.for_run(config, plugins.registry, resume_dir)
    # the run's config.yaml and report say what ran: the backend chosen, and SFT's one loss
    config = door.config = attrs.evolve(door.config, trainer=attrs.evolve(config.trainer, loss_fn="cross_entropy"))
    train_conversations, held_conversations = _split(_conversations(config, plugins), config)
    if not train_conversations:
        raise ConfigError(f"nothing left to train on after holding out sft.eval_fraction = {config.sft.eval_fraction}")
    start = start_point(config, resume_dir, start_over)
    async with door:
        client = await door.start_training(start.state_path, with_optimizer=start.resumed)
        try:
            renderer = Renderer(client.get_tokenizer(), config.model.chat_template_args)
            data = SftData(
                [sft_datum(*tokenize(renderer, c.messages, c.tools)) for c in train_conversations],
                [sft_datum(*tokenize(renderer, c.messages, c.tools)) for c in held_conversations],
            )
        except (TemplateError, *REJECTIONS) as exc:  # the hosted SDK asks the service for the tokenizer
            raise UsageError(f"cannot start SFT on {config.model.base_model!r}: {exc}") from None
        run = (
            claims.enter_context(RunDirectory.create(config))
            if resume_dir is None
            else RunDirectory.resume(resume_dir, config, start.step)
        )
        sinks = SinkSet(config, plugins.registry, run)
        summary: dict[str, Any] = {"run_dir": str(run.path), "stopped": "early"}
        try:
            if start.resumed:
                log.info("resuming", run=str(run.path), step=start.step, checkpoint=start.state_path)
            sizes = {"train": len(data.train), "held_out": len(data.held_out)}
            log.info("sft", run=str(run.path), backend=door.backend, **sizes, steps=config.trainer.steps)
            with run_tracer(config.metrics, run.path, f"minds sft {run.path.name}"):
                summary = await _loop(door, client, data, run, sinks, start.step)
        except ServiceCallError as exc:  # keep what the run trained, say how to continue it
            raise exc.resumable(run.shown, await save_after_failure(client, run, exc.intact_after, door.backoff)) from exc.error
        except OSError as exc:  # the checkpoint store, train.log or a sink's file: disk full, read-only
            raise file_error(exc, "write", run.shown) from None
        finally:
            sinks.close(summary)
    return summary


async def _held_out_loss(door: ServiceLifetime, client: Any, data: list[tinker.Datum], step: int) -> float:
    with span("evaluation", step=step):
        output = await door.call(f"step {step}", "forward", lambda: client.forward(data, "cross_entropy"))
    return mean_nll(data, output)[0]


async def _loop(
    door: ServiceLifetime, client: Any, data: SftData, run: RunDirectory, sinks: SinkSet, start: int
) -> dict[str, Any]:
    """Steps ``start`` .. ``trainer.steps - 1``; a first SIGINT/SIGTERM stops after a saved step."""
    config = door.config
    cfg = config.trainer
    schedule = DataOrder(config.seed, [1.0], [len(data.train)], config.sft.batch_size)
    began = time.perf_counter()
    first_eval = await _held_out_loss(door, client, data.held_out, start) if data.held_out and start == 0 else None
    last_eval = first_eval
    with door.stop_on_signal(f"minds sft --resume {run.shown}") as stop:
        for step in range(start, cfg.steps):
            with span("step", step=step):
                step_began = time.perf_counter()
                batch = [data.train[index] for _, index in schedule.batch(step)]
                adam = adam_params(cfg, step)
                forward_backward = functools.partial(client.forward_backward, batch, "cross_entropy")
                with span("train", step=step):
                    output = await apply_update(forward_backward, functools.partial(client.optim_step, adam), step, door.backoff)
                loss, tokens = mean_nll(batch, output)
                if tokens:
                    check_losses({"train/loss": loss}, step, run)
                record: dict[str, Any] = {
                    "step": step,
                    "train/loss": loss,
                    "train/tokens": tokens,
                    "train/learning_rate": adam.learning_rate,
                    "train/datums": len(batch),
                }
                if step == 0 and first_eval is not None:
                    record["eval/loss_before"] = first_eval
                last_step = step == cfg.steps - 1
                if data.held_out and (last_step or (config.sft.eval_every and (step + 1) % config.sft.eval_every == 0)):
                    last_eval = record["eval/loss"] = await _held_out_loss(door, client, data.held_out, step)
                stopping = stop.requested
                checkpoint = None
                if last_step or stopping or (cfg.save_every and (step + 1) % cfg.save_every == 0):
                    with span("save", step=step):
                        checkpoint = await save_checkpoint(client, step, step_checkpoint_name(step), door.backoff, with_sampler=True)
                record["time/step"] = time.perf_counter() - step_began
                with span("write_metrics"):
                    sinks.write(record)
            if checkpoint is not None:  # after the metrics line: a resume never skips a step's metrics
                run.record_checkpoint(checkpoint)
            if stopping and not last_step:
                raise stop.interrupted(step, cfg.steps)
    return {
        "steps": cfg.steps - start,
        "eval/loss_before": first_eval,
        "eval/loss_after": last_eval,
        "seconds": time.perf_counter() - began,
        "run_dir": str(run.path),
    }


def train_sft(
    config: RunConfig, plugins: Plugins | None = None, resume_dir: Path | None = None, start_over: bool = False
) -> dict[str, Any]:
    """Supervised fine-tuning as the config says (or resumed from ``resume_dir``'s last checkpoint; ``start_over``: from
    step 0, its checkpoint list being gone); returns a summary with the held-out loss before and after. A resumed run's
    folder is locked from its first read."""
    plugins = plugins or load_plugins()
    with contextlib.ExitStack() as claims:
        if resume_dir is not None:
            claims.enter_context(RunLock(resume_dir))
        return asyncio.run(_train_sft(config, plugins, resume_dir, claims, start_over))
