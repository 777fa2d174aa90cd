"""The ``minds serve`` subcommand: its arguments and what it runs (imports stay light until it runs)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from minds_core.http.limits import add_limit_arguments, limits_from_arguments

from .samplers import add_sampler_arguments, budget_from_arguments

__all__ = ["add_serve_arguments", "serve_command"]


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1; any other needs --api-key)")
    parser.add_argument("--port", type=int, default=8000, metavar="N", help="port to listen on; 0 picks a free one (default 8000)")
    parser.add_argument("--model", dest="models", action="append", metavar="NAME", help="base model to load and advertise (repeatable; default minds-small)")
    parser.add_argument(
        "--device", choices=("auto", "cpu", "cuda"), default="auto",
        help="where the local backend computes: auto (cuda when torch sees a GPU), cpu, cuda",
    )  # fmt: skip
    parser.add_argument(
        "--cuda-graphs", choices=("auto", "off"), default="auto",
        help="auto: on a GPU samplers capture their decode steps as CUDA graphs; off: every step runs eagerly",
    )  # fmt: skip
    parser.add_argument(
        "--compile", choices=("auto", "off"), default="auto",
        help="auto: on a GPU packed training rows attend through compiled FlexAttention; off: nothing is compiled",
    )  # fmt: skip
    parser.add_argument("--checkpoint-root", metavar="DIR", help="where tinker:// checkpoints are kept (default: a temporary folder, removed on exit)")
    parser.add_argument(
        "--api-key",
        dest="api_keys",
        action="append",
        metavar="KEY",
        help="require this X-API-Key on every request; repeat it to give each client its own key (default: "
        "$MINDS_SERVE_API_KEY; unset: any key, loopback only). Each key sees only the runs it created",
    )
    add_limit_arguments(parser)
    add_sampler_arguments(parser)


def serve_command(args: argparse.Namespace) -> int:
    from minds_core.base.errors import UsageError

    from . import check_exposure, serve
    from .listener import listen

    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port {args.port}: give a port between 0 and 65535 (0 picks a free one)")
    keys = tuple(key for key in args.api_keys or [os.environ.get("MINDS_SERVE_API_KEY", "")] if key)
    check_exposure(args.host, keys)
    try:
        limits = limits_from_arguments(args)
        budget = budget_from_arguments(args)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if args.checkpoint_root:  # before the model loads; and an error there is not the port's
        try:
            Path(args.checkpoint_root).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"--checkpoint-root {args.checkpoint_root}: not a folder that can be made ({exc.strerror or exc})") from None
    try:  # before the models load (seconds): a taken port fails at once
        listener = listen(args.host, args.port, limits.backlog)
    except OSError as exc:  # create_server's message names the address again: the system's reason alone
        if exc.errno is not None and exc.errno < 0:  # getaddrinfo's codes: the name did not resolve
            raise UsageError(f"--host {args.host}: not a name this machine resolves; give one of its addresses (default 127.0.0.1)") from None
        reason = os.strerror(exc.errno) if exc.errno else exc
        raise UsageError(f"cannot listen on {args.host}:{args.port}: {reason}; pick another --port (0 picks a free one)") from None
    from minds_core.backends.model_source import check_model_source

    for model in args.models or []:
        check_model_source(model, "--model")  # before torch is imported and the hub is asked
    from minds_core.backends.local import (
        DEFAULT_BASE_MODEL,
        LocalBadRequestError,
        LocalNotFoundError,
    )

    try:
        serve(
            listener,
            args.models or [DEFAULT_BASE_MODEL],
            api_keys=keys,
            checkpoint_root=Path(args.checkpoint_root) if args.checkpoint_root else None,
            device=args.device,
            limits=limits,
            budget=budget,
            cuda_graphs=args.cuda_graphs,
            compile=args.compile,
        )
    except (LocalNotFoundError, LocalBadRequestError) as exc:
        raise UsageError(f"--model/--device: {exc.message}") from None
    return 0
