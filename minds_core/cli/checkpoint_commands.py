"""The commands that use a checkpoint: ``eval``, ``sample``, ``chat`` and ``export``.

CHECKPOINT is a run folder (its last checkpoint, or ``--step N``) or a
``tinker://`` path. Heavy imports happen inside the commands, so ``minds --help``
stays fast.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from minds_core.cli.streams import plugin_prints_to_stderr

COMMANDS = ("eval", "sample", "chat", "export")

_CHECKPOINT_HELP = "a run folder (runs/<name>: its last checkpoint) or a tinker:// path"


def _add_checkpoint_arguments(parser: argparse.ArgumentParser, required: bool = True) -> None:
    if required:
        parser.add_argument("checkpoint", metavar="CHECKPOINT", help=_CHECKPOINT_HELP)
    else:
        parser.add_argument("checkpoint", metavar="CHECKPOINT", nargs="?", help=_CHECKPOINT_HELP + "; none: the base model")
    parser.add_argument("--step", type=int, metavar="N", help="the run's checkpoint of step N instead of its last")
    parser.add_argument("--config", metavar="FILE", help="config file for a tinker:// path (a run folder has its own)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help="override a config key (repeatable)")
    parser.add_argument("--backend", metavar="NAME", help="local | tinker (default: where the checkpoint lives)")
    add_accept_changed_argument(parser)


def add_accept_changed_argument(parser: argparse.ArgumentParser) -> None:
    """``--accept-changed-checkpoints``, for every command that loads a local checkpoint (its refusal names the flag)."""
    parser.add_argument(
        "--accept-changed-checkpoints", action="store_true",
        help="load a local checkpoint whose files changed after it was saved (an adapter copied in, a folder linked), knowingly",
    )  # fmt: skip


def _add_sampling_arguments(parser: argparse.ArgumentParser) -> None:
    system = parser.add_mutually_exclusive_group()
    system.add_argument("--system", metavar="TEXT", help="a system message before the conversation")
    system.add_argument("--env-system", action="store_true", help="the run's environment's system prompt, as in its rollouts")
    parser.add_argument("--max-tokens", type=int, metavar="N", help="tokens per reply (default: sampling.max_tokens)")
    parser.add_argument("--temperature", type=float, help="default: sampling.temperature")
    parser.add_argument("--seed", type=int, help="sampling seed, for repeatable replies")


def add_commands(commands: Any, shared: argparse.ArgumentParser) -> None:
    """Register the checkpoint commands on the ``minds`` subparsers."""
    evaluate = commands.add_parser("eval", parents=[shared], help="evaluate a checkpoint: mean reward with a 95%% interval, pass@k, components")
    _add_checkpoint_arguments(evaluate, required=False)
    evaluate.add_argument("--env", metavar="NAME", help="environment (sets env.id; a run folder has its own)")
    evaluate.add_argument("--model", metavar="NAME", help="base model to evaluate when no CHECKPOINT is given")
    evaluate.add_argument("--split", help="split to evaluate (default: trainer.eval_split, else test/eval/validation)")
    evaluate.add_argument("--tasks", type=int, metavar="N", help="first N tasks of the split (sets trainer.eval_tasks)")
    evaluate.add_argument("--samples", type=int, metavar="K", help="samples per task (sets trainer.eval_samples)")
    evaluate.add_argument("--name", help="one file name under the run's eval/ (default: step-NNNNNN-<split>)")
    evaluate.add_argument("--output", metavar="FILE", help="where to write every rollout (jsonl); default <run>/eval/<name>.jsonl")
    evaluate.add_argument("--json", action="store_true", help="print the summary as JSON instead of a table")

    sample = commands.add_parser("sample", parents=[shared], help="sample replies to one prompt from a checkpoint")
    _add_checkpoint_arguments(sample)
    sample.add_argument("--prompt", required=True, help="the user message")
    sample.add_argument("-n", "--num-samples", type=int, default=1, metavar="N", help="replies to sample (default 1)")
    _add_sampling_arguments(sample)
    sample.add_argument("--json", action="store_true", help="one JSON object per reply")

    chat = commands.add_parser("chat", parents=[shared], help="chat with a checkpoint (reads stdin; /reset, /exit)")
    _add_checkpoint_arguments(chat)
    _add_sampling_arguments(chat)

    export = commands.add_parser("export", parents=[shared], help="write a checkpoint as a PEFT adapter folder (--merge: also a merged model)")
    _add_checkpoint_arguments(export)
    export.add_argument("out_dir", metavar="OUT_DIR", help="a new (or empty) folder for the adapter")
    export.add_argument("--merge", action="store_true", help="also write the merged transformers model to OUT_DIR/merged")
    export.add_argument("--json", action="store_true", help="print what was written as JSON")


def run(args: argparse.Namespace) -> int:
    """Run one of COMMANDS."""
    return {"eval": _eval, "sample": _sample, "chat": _chat, "export": _export}[args.command](args)


def _resolve(args: argparse.Namespace, registry: Any = None, extra: list[str] | None = None) -> Any:
    """The checkpoint the arguments name; ``registry`` (default: the plugins, loaded here) picks ``backend = auto``."""
    from minds_core.checkpoints.reference import resolve_checkpoint
    from minds_core.contract.plugins import load_plugins

    overrides = [*args.overrides, *(extra or [])]
    if args.backend:
        overrides.append(f"backend={args.backend}")
    return resolve_checkpoint(args.checkpoint, args.config, overrides, args.step, registry or load_plugins().registry)


# ---------------------------------------------------------------- eval


def _eval(args: argparse.Namespace) -> int:
    from minds_core.base.errors import UsageError
    from minds_core.config import load_config
    from minds_core.evaluation.evaluation import EVAL_DIR, EvalPlan, evaluate, save_evaluation, summary_path

    if args.name is not None:
        _check_file_name(args.name)
    extra = [f"env.id={args.env}"] if args.env else []
    if args.model:
        extra.append(f"model.base_model={args.model}")
    # --tasks and --samples set their keys, so the config's bounds hold for them too (no million-sample evaluation)
    extra += [f"trainer.{key}={value}" for key, value in (("eval_tasks", args.tasks), ("eval_samples", args.samples)) if value is not None]
    if args.checkpoint:
        ref = _resolve(args, extra=extra)
        config, model_path, state_path, label = ref.config, ref.sampler_path, ref.state_path, ref.label
        run_dir = ref.run_dir
    else:
        if args.step is not None:
            raise UsageError("--step picks a checkpoint of a run folder: pass the run folder as CHECKPOINT")
        backend = [f"backend={args.backend}"] if args.backend else []
        config = load_config(args.config, [*args.overrides, *extra, *backend])
        model_path = config.trainer.resume_from or None
        state_path = model_path if model_path and "/weights/" in model_path else None
        label, run_dir = "base" if not model_path else model_path.rstrip("/").rsplit("/", 1)[-1], None
    t = config.trainer
    plan = EvalPlan(t.eval_split if args.split is None else args.split, t.eval_tasks, t.eval_samples)
    if args.output:  # checked before evaluating: an earlier evaluation is never overwritten, this one never lost
        _check_output(Path(args.output))
        taken = [str(f) for f in (Path(args.output), summary_path(Path(args.output))) if f.exists()]
        if taken:
            raise UsageError(
                f"--output {args.output}: {' and '.join(taken)} already exist(s), from an earlier evaluation; "
                "pass another --output or remove them"
            )
    # Writing into the run folder (its eval/), the evaluation holds the folder's lock as `minds run` does, from before
    # it evaluates until its files are written; while a run trains there (or another evaluation writes), exit 2.
    with _run_claim(run_dir, args.output):
        with plugin_prints_to_stderr():
            evaluation = evaluate(config, plan, model_path, state_path)
        name = args.name or f"{label}-{'+'.join(sorted(set(evaluation.splits.values())))}"
        if args.output:
            output: Path | None = Path(args.output)
        elif run_dir is not None:
            output = _free_name(run_dir / EVAL_DIR, name)
        else:
            output = None
        summary = {"checkpoint": model_path or config.model.base_model, "splits": evaluation.splits, **evaluation.summary()}
        if output is not None:
            save_evaluation(output, evaluation, {"checkpoint": summary["checkpoint"]})
            summary["output"] = str(output)
    if args.json:
        print(json.dumps(summary, indent=2, sort_keys=True))
    else:
        _print_summary(summary)
    if output is None:
        print("rollouts not saved: pass --output FILE.jsonl to keep them", file=sys.stderr)
    return 0


def _check_output(output: Path) -> None:
    """A UsageError unless ``output`` can be written as a file: not a folder, its folder there or makeable (the
    nearest that exists is a folder this process may write in). Nothing is made: the run may be held by another."""
    import os

    from minds_core.base.errors import UsageError

    if output.is_dir():
        raise UsageError(f"--output {output}: is a folder; pass a file path, e.g. {output / 'eval.jsonl'}")
    parent = output.parent.absolute()
    place = next(p for p in (parent, *parent.parents) if p.exists())
    if not place.is_dir():
        raise UsageError(f"--output {output}: cannot make its folder {output.parent}: {place} is a file; pass another --output")
    if not os.access(place, os.W_OK | os.X_OK):
        what = "write in its folder" if place == parent else f"make its folder {output.parent}"
        raise UsageError(f"--output {output}: cannot {what}: {place} is not writable; pass another --output")


@contextlib.contextmanager
def _run_claim(run_dir: Path | None, output: str | None) -> Iterator[None]:
    """The lock of ``run_dir`` while an evaluation writes into it (no ``--output``, or one inside it); a UsageError
    naming the process that holds it, and how to evaluate anyway."""
    from minds_core.base.errors import UsageError
    from minds_core.training.run_directory import RunLock

    if run_dir is None or (output and not Path(output).resolve().is_relative_to(run_dir.resolve())):
        yield
        return
    try:
        lock = RunLock(run_dir).acquire()
    except UsageError as exc:
        raise UsageError(f"{exc}; or write this evaluation outside the run folder: --output FILE.jsonl") from None
    try:
        yield
    finally:
        lock.release()


def _check_file_name(name: str) -> None:
    """A UsageError unless ``name`` is one file name: an evaluation's files stay in the run's eval/ folder."""
    from minds_core.base.errors import UsageError
    from minds_core.config.schema import MAX_NAME

    size = len(name.encode(errors="surrogateescape"))  # bytes: what it makes (.NAME-2.summary.json.tmp) within 255
    if not name or name in (".", "..") or any(c in name for c in "/\\\0") or size > MAX_NAME:
        raise UsageError(
            f"--name {name!r}: must be one file name (no / or \\, not . or .., at most {MAX_NAME} bytes as UTF-8), "
            "as evaluations are written to <run>/eval/<name>.jsonl; to write elsewhere pass --output FILE.jsonl"
        )


def _free_name(folder: Path, name: str) -> Path:
    """``folder/name.jsonl``, or ``name-2.jsonl``, ... when taken: an evaluation never overwrites another."""
    path, n = folder / f"{name}.jsonl", 2
    while path.exists():
        path, n = folder / f"{name}-{n}.jsonl", n + 1
    return path


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _print_summary(summary: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"minds eval: {summary['checkpoint']}")
    table.add_column("metric")
    table.add_column("value", justify="right")
    splits = ", ".join(f"{env}: {split}" for env, split in summary["splits"].items())
    low, high = summary.get("reward/ci95_low"), summary.get("reward/ci95_high")
    rows = [
        ("split", splits),
        ("tasks x samples", f"{summary['tasks']} x {summary['samples']}"),
        ("reward mean", _fmt(summary.get("reward/mean"))),
        ("95% interval (tasks as unit)", f"[{_fmt(low)}, {_fmt(high)}]"),
        ("reward std", _fmt(summary.get("reward/std"))),
    ]
    rows += [(key, _fmt(value)) for key, value in summary.items() if key.startswith("pass@")]
    rows += [(key, _fmt(value)) for key, value in summary.items() if key.startswith(("component/", "env/"))]
    rows += [
        ("failed (not in the mean)", _fmt(summary["rollouts/failed"])),
        ("timed out", _fmt(summary["rollouts/timed_out"])),
        ("last turn hit max_tokens", _fmt(summary["rollouts/hit_max_tokens"])),
        ("out of turn/token budget", _fmt(summary["rollouts/truncated"])),
        ("seconds", _fmt(summary["time/eval"])),
    ]
    if "output" in summary:
        rows.append(("rollouts", summary["output"]))
    for key, value in rows:
        table.add_row(key, value)
    Console(soft_wrap=False).print(table)


# ---------------------------------------------------------------- sample and chat


@contextlib.contextmanager
def _chat_model(args: argparse.Namespace) -> Iterator[tuple[Any, str | None]]:
    """A ChatModel on the checkpoint's weights and the system prompt to use, while its service is open."""
    import tinker

    from minds_core.backends.retry import REJECTIONS
    from minds_core.base.errors import UsageError
    from minds_core.config.schema import MAX_SAMPLE_TOKENS, MAX_SEED, MAX_TEMPERATURE
    from minds_core.contract.plugins import load_plugins
    from minds_core.evaluation.chat import ChatModel
    from minds_core.session.service import ServiceLifetime

    _check_text("--system", args.system)
    # held to the bounds of sampling.max_tokens and .temperature, and of seed (no infinite temperature)
    _check_bounds("--max-tokens", args.max_tokens, 1, MAX_SAMPLE_TOKENS)
    _check_bounds("--temperature", args.temperature, 0, MAX_TEMPERATURE)
    _check_bounds("--seed", args.seed, 0, MAX_SEED)
    plugins = load_plugins()
    ref = _resolve(args, plugins.registry)
    config = ref.config
    system = _env_system_prompt(config, plugins) if args.env_system else args.system
    s = config.sampling
    params = tinker.types.SamplingParams(
        max_tokens=args.max_tokens or s.max_tokens,
        temperature=s.temperature if args.temperature is None else args.temperature,
        top_p=s.top_p,
        top_k=s.top_k,
        seed=args.seed,
    )
    with ServiceLifetime.choose(config, plugins.registry) as door:
        where, request = f"minds {args.command}", f"sampling {ref.sampler_path}"
        try:
            sampler = door.result(door.service.create_sampling_client(model_path=ref.sampler_path), where, request)
        except REJECTIONS as exc:
            raise UsageError(f"cannot sample from {ref.sampler_path}: {exc}") from None
        wait = functools.partial(door.result, where=where, request=request)
        yield ChatModel.create(sampler, config.model.base_model, config.model.chat_template_args, params, wait), system


def _check_bounds(flag: str, value: float | None, low: float, high: float) -> None:
    """A UsageError naming ``flag`` when ``value`` is given and not a (finite) number in [low, high]."""
    from minds_core.base.errors import UsageError
    from minds_core.config.rules import problem, within

    if value is not None and (wrong := problem(within(low, high), value, type(value))):
        raise UsageError(f"{flag} {value}: {wrong}")


def _check_text(flag: str, text: str | None) -> None:
    """A UsageError naming ``flag`` when ``text`` is given and is not UTF-8 text."""
    from minds_core.base.errors import UsageError, utf8_problem

    if text is not None and (wrong := utf8_problem(text)):
        raise UsageError(f"{flag}: {wrong}; pass UTF-8 text")


def _env_system_prompt(config: Any, plugins: Any) -> str:
    """The system prompt of the config's (first) environment; a UsageError when it has none."""
    import asyncio

    from minds_core.base.errors import MindsError, UsageError
    from minds_core.envs.loading import build_environment
    from minds_core.episodes.rollout import close_quietly

    if not config.environments:
        raise UsageError("--env-system needs an environment: a run folder's, or --set env.id=NAME")
    cfg = config.environments[0]
    try:
        env = build_environment(cfg, plugins.registry)
    except MindsError:
        raise
    except Exception as exc:
        raise MindsError(f"environment {cfg.id!r} failed to load: {type(exc).__name__}: {exc}") from exc
    prompt = getattr(env, "system_prompt", None)
    asyncio.run(close_quietly(env, f"environment {cfg.id}", config.rollout.timeout))
    if not isinstance(prompt, str) or not prompt:
        raise UsageError(f"environment {cfg.id!r} has no system prompt (no system_prompt attribute): use --system TEXT")
    return prompt


def _sample(args: argparse.Namespace) -> int:
    from minds_core.base.errors import UsageError
    from minds_core.config.schema import MAX_GROUP
    from minds_core.evaluation.chat import REQUEST_ERRORS, opening
    from minds_core.report.page import printable

    _check_bounds("-n", args.num_samples, 1, MAX_GROUP)
    _check_text("--prompt", args.prompt)
    with plugin_prints_to_stderr(), _chat_model(args) as (model, system):
        try:
            replies = model.reply([*opening(system), {"role": "user", "content": args.prompt}], args.num_samples)
        except REQUEST_ERRORS as exc:
            raise UsageError(f"the service rejected the request: {exc}") from None
    for index, reply in enumerate(replies):
        if args.json:
            print(json.dumps({"sample": index, "text": reply.text, "tokens": reply.tokens, "stop_reason": reply.stop_reason, "logprob": reply.logprob}))
        else:
            if len(replies) > 1:
                print(f"--- sample {index} ({reply.tokens} tokens, {reply.stop_reason})")
            print(printable(reply.text))  # a sampled reply may hold any byte: escape codes are shown, not obeyed
    return 0


def _chat(args: argparse.Namespace) -> int:
    from minds_core.evaluation.chat import chat_loop

    with _chat_model(args) as (model, system):
        chat_loop(model, system, sys.stdin, sys.stdout, read=input if sys.stdin.isatty() else None)
    return 0


# ---------------------------------------------------------------- export


def _export(args: argparse.Namespace) -> int:
    from minds_core.checkpoints.export import export_checkpoint
    from minds_core.contract.plugins import load_plugins
    from minds_core.session.service import ServiceLifetime

    with plugin_prints_to_stderr():
        registry = load_plugins().registry
        ref = _resolve(args, registry)
        with ServiceLifetime.choose(ref.config, registry) as door:
            written = export_checkpoint(ref, Path(args.out_dir), door, merge=args.merge)
    if args.json:
        print(json.dumps(written, indent=2))
    else:
        print(f"adapter: {written['adapter']} (base model {written['base_model']})")
        if written["merged"]:
            print(f"merged model: {written['merged']}")
    return 0
