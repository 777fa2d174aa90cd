"""The ``minds`` command: run | eval | sft | report | sample | chat | export | serve | plugins | envs.

Imports are lazy so that ``minds --help`` and ``minds plugins`` stay fast and never import torch.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from minds_core.cli import checkpoint_commands
from minds_core.cli.streams import plugin_prints_to_stderr

EXAMPLES = """\
examples:
  minds run --env ghost_trace                 train on the local backend with defaults
  minds run configs/ghost_trace.toml --set trainer.steps=5
  minds run --resume runs/ghost_trace-20260101-120000
  minds sft --data chats.jsonl --steps 20
  minds report runs/ghost_trace-20260101-120000
  minds eval runs/ghost_trace-20260101-120000 --tasks 16 --samples 4
  minds chat runs/ghost_trace-20260101-120000
  minds export runs/ghost_trace-20260101-120000 adapter/ --merge
  minds plugins --json
  minds serve --port 8000                     the local backend as a Tinker API server for any SDK program
"""


def _version() -> str:
    from minds_core import __version__

    return __version__


def _add_run_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", nargs="?", help="TOML or YAML config file (optional)")
    parser.add_argument("--env", metavar="NAME", help="environment to use (sets env.id)")
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
        help="override a config key, e.g. trainer.group_size=8 (repeatable)",
    )  # fmt: skip
    parser.add_argument("--steps", type=int, metavar="N", help="training steps (sets trainer.steps)")
    parser.add_argument("--backend", metavar="NAME", help="auto | local | tinker | a plugin's backend")
    parser.add_argument("--model", metavar="NAME", help="base model (sets model.base_model)")
    parser.add_argument("--name", help="run name (sets name)")
    parser.add_argument("--dry-run", action="store_true", help="print the resolved config (secrets redacted) and exit")


def _add_log_arguments(parser: argparse.ArgumentParser, log_format: str, level: str) -> None:
    """Logging options, accepted before or after the command."""
    parser.add_argument(
        "--log-format", choices=("auto", "console", "json"), default=log_format,
        help="logs on stderr: console on a terminal, JSON lines otherwise (auto)",
    )  # fmt: skip
    parser.add_argument("--log-level", choices=("debug", "info", "warning", "error"), default=level)


def _add_resume_checks(parser: argparse.ArgumentParser) -> None:
    """What a resume of a run changed by hand may be told to accept."""
    parser.add_argument(
        "--start-over", action="store_true",
        help="with --resume: train the run again from step 0 when its checkpoints.jsonl is missing or empty",
    )  # fmt: skip
    checkpoint_commands.add_accept_changed_argument(parser)


@functools.cache
def build_parser() -> argparse.ArgumentParser:
    """The `minds` command's parser (built once: parsing leaves it as it is)."""
    parser = argparse.ArgumentParser(
        prog="minds",
        description="Reinforcement learning of language models on the Tinker API, with plugins for environments and rewards.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    _add_log_arguments(parser, "auto", "info")
    shared = argparse.ArgumentParser(add_help=False)
    _add_log_arguments(shared, argparse.SUPPRESS, argparse.SUPPRESS)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    run = commands.add_parser("run", parents=[shared], help="train a LoRA adapter on one or more environments")
    _add_run_arguments(run)
    run.add_argument("--resume", metavar="DIR", help="continue the run in DIR (runs/<name>) at its next step")
    _add_resume_checks(run)

    checkpoint_commands.add_commands(commands, shared)

    sft = commands.add_parser("sft", parents=[shared], help="supervised fine-tuning on chat conversations (trainer.mode = sft)")
    _add_run_arguments(sft)
    sft.add_argument("--data", metavar="PATH", help='jsonl with one {"messages": [...]} per line (sets sft.data)')
    sft.add_argument("--resume", metavar="DIR", help="continue the SFT run in DIR (runs/<name>) at its next step")
    _add_resume_checks(sft)
    report = commands.add_parser("report", parents=[shared], help="write a run's HTML report (curves, health, sampled rollouts)")
    report.add_argument("run_dir", metavar="RUN_DIR", help="the run folder, runs/<name>")
    report.add_argument("-o", "--output", metavar="FILE", help="where to write it (default RUN_DIR/report.html)")

    plugins = commands.add_parser("plugins", parents=[shared], help="list installed plugins and what each registers")
    plugins.add_argument("--json", action="store_true", help="machine-readable output on stdout")
    envs = commands.add_parser("envs", parents=[shared], help="list the environments that can be trained on")
    envs.add_argument("--json", action="store_true", help="machine-readable output on stdout")
    new_plugin = commands.add_parser("new-plugin", parents=[shared], help="write a plugin distribution to start from")
    new_plugin.add_argument("plugin_name", metavar="NAME", help="lower case: the environment NAME, package minds_NAME")
    new_plugin.add_argument("--dir", metavar="PATH", default=".", help="where to create the folder NAME (default: .)")
    from minds_core.serve.command import add_serve_arguments

    serve_help = "serve the local backend as a Tinker API over HTTP (point any Tinker SDK program at it)"
    serve = commands.add_parser("serve", parents=[shared], help=serve_help)
    add_serve_arguments(serve)
    checkpoint_commands.add_accept_changed_argument(serve)
    return parser


def _overrides(args: argparse.Namespace) -> list[str]:
    extra = []
    if args.env:
        extra.append(f"env.id={args.env}")
    if args.steps is not None:
        extra.append(f"trainer.steps={args.steps}")
    if args.backend:
        extra.append(f"backend={args.backend}")
    if args.model:
        extra.append(f"model.base_model={args.model}")
    if args.name:
        extra.append(f"name={args.name}")
    if args.command == "sft":
        extra.append("trainer.mode=sft")
        if args.data:
            extra.append(f"sft.data={args.data}")
    return [*args.overrides, *extra]


def _plugins_command(args: argparse.Namespace) -> int:
    from minds_core.contract.plugins import load_plugins

    with plugin_prints_to_stderr():
        loaded = load_plugins()
    rows = [
        {
            "name": p.name,
            "distribution": p.distribution,
            "version": p.version,
            "builtin": p.builtin,
            "status": "ok" if p.ok else "broken",
            "registers": p.registered,
            "errors": p.errors,
        }
        for p in loaded.plugins
    ]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title="minds plugins")
    for column in ("plugin", "distribution", "status", "registers"):
        table.add_column(column)
    for row in rows:
        registers = "\n".join(f"{kind}: {', '.join(names)}" for kind, names in row["registers"].items())
        status = "ok" if not row["errors"] else "BROKEN: " + "; ".join(row["errors"])
        dist = f"{row['distribution'] or '-'} {row['version'] or ''}".strip()
        table.add_row(row["name"], dist, status, registers or "-")
    Console(soft_wrap=False).print(table)
    return 0


def _envs_command(args: argparse.Namespace) -> int:
    from minds_core.contract.plugins import load_plugins

    with plugin_prints_to_stderr():
        loaded = load_plugins()
    dists = {p.name: p.distribution for p in loaded.plugins}
    rows = [
        {"name": e.name, "plugin": e.plugin, "distribution": dists.get(e.plugin), "description": e.description}
        for e in loaded.registry.entries("environments")
    ]
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        from rich.console import Console
        from rich.table import Table

        table = Table(title="minds environments")
        for column in ("environment", "plugin", "description"):
            table.add_column(column)
        for row in rows:
            table.add_row(row["name"], f"{row['plugin']} ({row['distribution'] or '-'})", row["description"])
        Console().print(table)
        if not rows:
            print("no environments installed: pip install a plugin, e.g. plugins/ghost_trace", file=sys.stderr)
    for plugin in loaded.broken:
        print(f"warning: plugin {plugin.name!r} is broken: {'; '.join(plugin.errors)}", file=sys.stderr)
    return 0


def _report_command(args: argparse.Namespace) -> int:
    from minds_core.report import write_report

    print(write_report(Path(args.run_dir), Path(args.output) if args.output else None))
    return 0


def _resolve_config(args: argparse.Namespace, resume: str | None = None) -> Any:
    from minds_core.config import load_config

    if resume:
        from minds_core.training.run_directory import run_config_path

        if args.config or args.name:
            from minds_core.base.errors import UsageError

            raise UsageError("--resume DIR continues that run with its own config and name: drop the config file and --name")
        return load_config(run_config_path(Path(resume)), _overrides(args), drop_redacted=True)
    if args.config:
        from minds_core.contract.locate import importable

        importable(Path(args.config).parent)  # environment code imports through it, as the seeds' runner allowed
    return load_config(args.config, _overrides(args))


def _run_command(args: argparse.Namespace) -> int:
    from minds_core.config import dump_yaml
    from minds_core.contract.names import check_names
    from minds_core.contract.plugins import load_plugins

    resume = args.resume
    if args.start_over and not resume:
        from minds_core.base.errors import UsageError

        raise UsageError("--start-over goes with --resume DIR: it trains that run again from step 0")
    config = _resolve_config(args, resume)
    # Before torch is imported, in the order the run checks, the same with --dry-run: what a resumed run is,
    # then the names the config uses (plugin collisions surface in load_plugins).
    if resume:
        from minds_core.training.run_directory import check_resume_changes

        check_resume_changes(Path(resume), config, args.start_over)
    with plugin_prints_to_stderr():
        plugins = load_plugins()
    check_names(config, plugins.registry)
    if args.dry_run:
        from minds_core.config.presets import describe_preset
        from minds_core.envs.loading import check_args

        with plugin_prints_to_stderr():
            for cfg in config.environments:
                check_args(cfg, plugins.registry)  # [env.args] as the run checks them, building nothing
        print("".join(f"# {line}\n" for line in describe_preset(config)) + dump_yaml(config), end="")
        return 0
    from minds_core.backends import choose_backend
    from minds_core.backends.model_source import check_model_source

    if choose_backend(config, plugins.registry).name == "local":
        check_model_source(config.model.base_model)
    from minds_core.train import train

    summary = train(config, resume_dir=Path(resume) if resume else None, plugins=plugins, start_over=args.start_over)
    if summary.get("not_trained"):
        print(f"minds: error: no step trained: {summary['not_trained']}", file=sys.stderr)
        return 1
    return 0


def _new_plugin_command(args: argparse.Namespace) -> int:
    from minds_core.cli.new_plugin import next_commands, write_plugin

    folder = write_plugin(args.plugin_name, Path(args.dir))
    steps = "".join(f"\n  {command}" for command in next_commands(args.plugin_name, folder))
    print(f"wrote {folder}; install it, list it, train on it and run its tests (its README.md says the same):{steps}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """The ``minds`` command; returns the exit code. Its stdout and stderr are masked (no secret value minds knows shows)."""
    from minds_core.base.masking import masked_streams

    with masked_streams():
        return _main(argv)


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.version:
        print(f"minds {_version()}")
        return 0
    if not args.command:
        parser.print_help()
        return 2
    if getattr(args, "accept_changed_checkpoints", False):
        from minds_core.config.schema import ACCEPT_CHANGED_CHECKPOINTS

        os.environ[ACCEPT_CHANGED_CHECKPOINTS] = "1"  # read where the local store loads a checkpoint
    from minds_core.base import logs
    from minds_core.base.errors import MindsError
    from minds_core.base.interrupt import RunInterrupted

    logs.configure(args.log_format, args.log_level)
    try:
        if args.command == "plugins":
            return _plugins_command(args)
        if args.command == "envs":
            return _envs_command(args)
        if args.command == "report":
            return _report_command(args)
        if args.command == "new-plugin":
            return _new_plugin_command(args)
        if args.command == "serve":
            from minds_core.serve.command import serve_command

            return serve_command(args)
        if args.command in checkpoint_commands.COMMANDS:
            return checkpoint_commands.run(args)
        return _run_command(args)
    except RunInterrupted as exc:
        print(f"minds: {exc}", file=sys.stderr)
        return exc.exit_code
    except MindsError as exc:
        print(f"minds: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except OSError as exc:  # a file minds reads or writes outside a run (a run's own say how to continue it)
        from minds_core.training.run_directory import file_error

        print(f"minds: error: {file_error(exc, 'read or write')}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("minds: interrupted", file=sys.stderr)
        return 130


#: How long the ``minds`` command waits, once done, for threads still running before it exits without them.
EXIT_GRACE_SECONDS = 10.0


def entry() -> None:
    """The ``minds`` console script: ``main``, tracebacks masked, and an exit that no plugin thread holds up."""
    from minds_core.base.masking import excepthook

    sys.excepthook = excepthook
    try:
        code = main()
    except SystemExit:
        raise
    except BaseException:  # noqa: BLE001 - a bug's traceback, printed masked like everything else
        excepthook(*sys.exc_info())  # type: ignore[arg-type]
        code = 1
    exit_within(EXIT_GRACE_SECONDS, code)


def exit_within(seconds: float, code: int) -> None:
    """Exit with ``code``; if threads left running (a plugin's) hold the exit up for ``seconds``, exit without them.

    Everything of the run is closed by then; a normal exit still runs every exit handler.
    """
    import threading

    def give_up() -> None:
        left = [t.name for t in threading.enumerate() if t.is_alive() and not t.daemon and t is not threading.main_thread()]
        print(f"minds: exiting without waiting for thread(s) still running after {seconds:g} s: {', '.join(left)}", file=sys.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)

    watchdog = threading.Timer(seconds, give_up)
    watchdog.daemon = True
    watchdog.start()
    sys.exit(code)


if __name__ == "__main__":
    entry()
