"""The verifiers side of the v1 bridge: run in the interpreter that has verifiers 0.4 (never imports minds).

minds runs this file by path with that interpreter, so verifiers and its dependencies (mcp 2, renderers,
transformers) live in a virtual environment of their own, apart from the run's (where openreward pins an
older sse-starlette than verifiers' mcp needs). Two modes:

``serve SPEC SOCKET``
    The runner of a run's environment, for as long as the run holds it. Given the spec as one JSON argument
    (``taskset``, ``args``, ``harness``, ``env``, ``path``, ``local_runtime``: see ``minds_verifiers_v1.V1Args``),
    it loads the environment once, prepares each agent's harness program through ``uv`` (the first use fetches
    its dependencies from the package index; later ones find them cached), listens on the Unix socket
    ``SOCKET`` (in a folder of its own, which it removes when it exits) and prints one JSON line:
    ``{"verifiers": version, "tasks": [{"index", "id", "prompt", "answer", "data"}, ...]}``. Then it plays
    episodes, as many at once as are asked, inside one ``env.serving()``, until its stdin closes (the run
    closed the environment, or its process is gone). What cannot be loaded is one line on stderr and exit
    code 2.
``relay SOCKET``
    One episode, as minds' ``harness`` environment runs a program per episode (this mode imports nothing of
    verifiers: a tenth of a CPU-second). It reads the minds task (JSON, with its ``index``) on stdin and asks
    the runner at ``SOCKET`` to play that task once with verifiers' own runtime: the env's agents on the
    subprocess runtime, their model client an ``EvalClientConfig`` on ``OPENAI_BASE_URL`` with the key in
    ``OPENAI_API_KEY`` (the run's policy endpoint and the episode's key), so every model call is sampled and
    recorded token-exactly by minds. It prints ``{"reward": trace.reward, "metrics": {...}}``: each reward's
    unweighted score as ``reward/vf.<name>`` (minds' name for a component of the reward) and each metric as
    ``vf/<name>``. An episode verifiers marks failed, or any other failure, exits 1 with one line on stderr.
    A relay killed (``rollout.timeout``) closes its connection, and the runner cancels its episode.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import shutil
import socket
import sys
from pathlib import Path
from typing import Any


class Refused(Exception):
    """What the bridge cannot train, or a spec it cannot load (the message says which and how to fix)."""


def _env_config(spec: dict[str, Any]) -> Any:
    import verifiers.v1 as vf

    taskset = {"id": spec["taskset"], **spec.get("args", {})}
    data: dict[str, Any] = {"taskset": taskset}
    if spec.get("env"):
        data["id"] = spec["env"]
    cls = vf.env_config_type(spec["taskset"], spec.get("env") or "")
    # a taskset without a harness of its own gets verifiers' default, bash, which would run the model's commands on
    # this machine (the subprocess runtime): the bridge's default is the tool-less null chat harness instead
    harness = spec.get("harness") or ("null" if vf.default_harness_id(spec["taskset"]) == "bash" else "")
    generic = vf.AgentConfig().runtime  # verifiers' own default (a Prime sandbox), which no env author chose
    for name, field in cls.model_fields.items():
        if isinstance(field.default, vf.AgentConfig):  # every seat plays on this machine, reaching the loopback endpoint
            runtime = field.default.runtime
            if runtime != generic and runtime.type != "subprocess" and not spec.get("local_runtime"):
                raise Refused(
                    f"the env's {name!r} seat asks for the {runtime.type} runtime (a sandbox), and the bridge plays every "
                    "seat on this machine's subprocess runtime, so what its harness runs would run here: set "
                    "env.args.local_runtime = true to train it on this machine knowingly"
                )
            seat: dict[str, Any] = {"runtime": {"type": "subprocess"}}
            if harness and field.default.harness is None:
                seat["harness"] = {"id": harness}
            data[name] = seat
    return vf.resolve_env_config(data)


def load(spec: dict[str, Any]) -> Any:
    import verifiers.v1 as vf

    for folder in reversed(spec.get("path", [])):
        sys.path.insert(0, folder)
    env = vf.load_environment(_env_config(spec))
    if not env.taskset.bounded:
        raise Refused(f"taskset {spec['taskset']!r} is infinite: minds trains on a listed taskset")
    return env


def _plain(value: Any) -> Any:
    return value.model_dump(mode="json", exclude_none=True) if hasattr(value, "model_dump") else value


def _listing(env: Any) -> list[dict[str, Any]]:
    tasks = []
    for index, task in enumerate(env.taskset):
        data = task.data.model_dump(mode="json", exclude_defaults=True)
        prompt = data.get("prompt")
        if isinstance(prompt, list):
            prompt = [_plain(message) for message in prompt]
        tasks.append({"index": index, "id": task.data.id, "prompt": prompt or "", "answer": data.get("answer"), "data": data})
    return tasks


#: How an episode's key reaches verifiers' client config, which names an environment variable: one per episode.
KEY_VARIABLE = "MINDS_VERIFIERS_KEY_{}"
#: The runner's log (its stdout and stderr once it listens), beside its socket.
LOG = "runner.log"


async def _load(spec: dict[str, Any]) -> Any:
    """The environment, loaded and its harness programs prepared (Refused naming what is missing)."""
    import verifiers.v1 as vf
    from verifiers.v1.runtimes import provision_runtime

    env = load(spec)
    if shutil.which("uv") is None:
        raise Refused("verifiers runs harness programs through uv, and no `uv` is on PATH: pip install uv (next to verifiers)")
    async with provision_runtime(vf.SubprocessConfig(), "minds-check") as runtime:
        for harness_config in env.config.agent_harnesses().values():
            await vf.load_harness(harness_config).setup(runtime)
    return env


async def _play(env: Any, tasks: list[Any], request: dict[str, Any], key_variable: str) -> dict[str, Any]:
    """One episode of ``request``'s task index, its model calls to ``request``'s endpoint and key; its reward line."""
    import verifiers.v1 as vf

    index = request["index"]
    if not 0 <= index < len(tasks):
        raise Refused(f"the taskset has no task {index}")
    os.environ[key_variable] = request["api_key"]
    try:
        client = vf.EvalClientConfig(base_url=request["base_url"], api_key_var=key_variable)
        ctx = vf.ModelContext(client=client, model="policy", sampling=vf.SamplingConfig())
        episode = await env.run_episode(tasks[index], ctx)
    finally:
        os.environ.pop(key_variable, None)
    if len(episode.traces) > 1:
        raise Refused(
            f"the episode ran {len(episode.traces)} agents: minds trains one policy per episode on one reward; "
            "a multi-agent verifiers env is not trained"
        )
    if not episode.ok:  # (a trace's errors may be those of attempts verifiers retried: only the verdict counts)
        errors = [*episode.errors, *(error for trace in episode.traces for error in trace.errors)]
        first = errors[-1] if errors else None
        raise RuntimeError(
            f"verifiers failed the episode: {first.type}: {first.message}" if first else "verifiers failed the episode"
        )
    (trace,) = episode.traces
    metrics = {f"reward/vf.{name}": reward.score for name, reward in trace.rewards.items() if reward is not None}
    metrics.update({f"vf/{name}": value for name, value in trace.metrics.items() if value is not None})
    return {"reward": trace.reward, "metrics": metrics}


def _one_line(exc: BaseException) -> str:
    message = str(exc) if isinstance(exc, Refused) else f"{type(exc).__name__}: {exc}"
    return " ".join(message.split())[:1000]


async def _answer(env: Any, tasks: list[Any], numbers: Any, reader: Any, writer: Any) -> None:
    """Play the episode one relay asks for and answer it; cancel it when the relay goes first (killed at its timeout)."""
    try:
        request = json.loads(await reader.readline())
        playing = asyncio.ensure_future(_play(env, tasks, request, KEY_VARIABLE.format(next(numbers))))
        gone = asyncio.ensure_future(reader.read(1))  # b"" when the relay's end closes
        await asyncio.wait({playing, gone}, return_when=asyncio.FIRST_COMPLETED)
        if not playing.done():
            playing.cancel()
            with contextlib.suppress(BaseException):
                await playing
            return
        gone.cancel()
        try:
            answer = {"result": playing.result()}
        except Exception as exc:  # noqa: BLE001 - whatever verifiers raised, one line for minds to show
            answer = {"error": _one_line(exc)}
        writer.write(json.dumps(answer).encode() + b"\n")
        await writer.drain()
    except (OSError, ValueError, KeyError):
        pass  # a relay that vanished or sent garbage: nobody is left to answer
    finally:
        writer.close()


async def _serve(spec: dict[str, Any], path: str) -> None:
    import verifiers

    env = await _load(spec)
    tasks = list(env.taskset)
    numbers = itertools.count()
    server = await asyncio.start_unix_server(lambda r, w: _answer(env, tasks, numbers, r, w), path=path)
    async with env.serving(), server:
        print(json.dumps({"verifiers": verifiers.__version__, "tasks": _listing(env)}), flush=True)
        log = os.open(Path(path).with_name(LOG), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(log, 1)  # verifiers' own output from now on goes to the log: nobody reads the pipe any more
        os.close(log)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.buffer.read)  # until the run lets go
    shutil.rmtree(Path(path).parent, ignore_errors=True)  # its folder is its own, left by a run killed -9 too


def _relay(path: str) -> int:
    task = json.loads(sys.stdin.read())
    request = {"index": int(task["index"]), "base_url": os.environ["OPENAI_BASE_URL"], "api_key": os.environ["OPENAI_API_KEY"]}
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.connect(path)
            conn.sendall(json.dumps(request).encode() + b"\n")
            answer = conn.makefile("rb").readline()
    except OSError as exc:
        answer = b""
        why = f"{type(exc).__name__}: {exc}"
    else:
        why = "it closed the connection without an answer"
    if not answer:
        print(f"the verifiers runner at {path} did not answer ({why}): it has exited; its log: {Path(path).with_name(LOG)}", file=sys.stderr)
        return 1
    reply = json.loads(answer)
    if "error" in reply:
        print(reply["error"], file=sys.stderr)
        return 1
    print(json.dumps(reply["result"]))
    return 0


def main(argv: list[str]) -> int:
    mode = argv[1]
    if mode == "relay":
        return _relay(argv[2])
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"  # uv beside verifiers
    try:
        asyncio.run(_serve(json.loads(argv[2]), argv[3]))
    except Exception as exc:  # noqa: BLE001 - whatever verifiers raised, one line for minds to show
        print(_one_line(exc), file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
