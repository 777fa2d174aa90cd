"""The verifiers side of the v1 bridge: run in the interpreter that has verifiers 0.4 (never imports minds).

minds runs this file by path with that interpreter, so verifiers and its dependencies (mcp 2, renderers,
transformers) live in a virtual environment of their own, apart from the run's (where openreward pins an
older sse-starlette than verifiers' mcp needs). Two modes, each given the spec as one JSON argument
(``taskset``, ``args``, ``harness``, ``env``, ``path``, ``local_runtime``: see ``minds_verifiers_v1.V1Args``):

``check SPEC``
    Load the environment, prepare each agent's harness program through ``uv`` (the first use fetches
    its dependencies from the package index; later ones find them cached) and print one JSON line:
    ``{"verifiers": version, "tasks": [{"index", "id", "prompt", "answer", "data"}, ...]}``.
``episode SPEC``
    Read the minds task (JSON, with its ``index``) on stdin and play that task once with verifiers' own
    runtime: the env's agents on the subprocess runtime, their model client an ``EvalClientConfig`` on
    ``OPENAI_BASE_URL`` with the key in ``OPENAI_API_KEY`` (the run's policy endpoint and the episode's
    key), so every model call is sampled and recorded token-exactly by minds. Print
    ``{"reward": trace.reward, "metrics": {...}}``: each reward's unweighted score as ``reward/vf.<name>``
    (minds' name for a component of the reward) and each metric as ``vf/<name>``. An episode verifiers
    marks failed exits 1 with its last error on stderr.

Any other failure is one line on stderr and exit code 2 (``check``) or 1 (``episode``).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
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


async def _check(spec: dict[str, Any]) -> dict[str, Any]:
    import verifiers
    import verifiers.v1 as vf
    from verifiers.v1.runtimes import provision_runtime

    env = load(spec)
    if shutil.which("uv") is None:
        raise Refused("verifiers runs harness programs through uv, and no `uv` is on PATH: pip install uv (next to verifiers)")
    async with provision_runtime(vf.SubprocessConfig(), "minds-check") as runtime:
        for harness_config in env.config.agent_harnesses().values():
            await vf.load_harness(harness_config).setup(runtime)
    return {"verifiers": verifiers.__version__, "tasks": _listing(env)}


async def _episode(spec: dict[str, Any], index: int) -> dict[str, Any]:
    import verifiers.v1 as vf

    env = load(spec)
    task = next((task for i, task in enumerate(env.taskset) if i == index), None)
    if task is None:
        raise Refused(f"taskset {spec['taskset']!r} has no task {index}")
    client = vf.EvalClientConfig(base_url=os.environ["OPENAI_BASE_URL"], api_key_var="OPENAI_API_KEY")
    ctx = vf.ModelContext(client=client, model="policy", sampling=vf.SamplingConfig())
    async with env.serving():
        episode = await env.run_episode(task, ctx)
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


def main(argv: list[str]) -> int:
    mode, spec = argv[1], json.loads(argv[2])
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"  # uv beside verifiers
    try:
        if mode == "check":
            result = asyncio.run(_check(spec))
        else:
            result = asyncio.run(_episode(spec, int(json.loads(sys.stdin.read())["index"])))
    except Exception as exc:  # noqa: BLE001 - whatever verifiers raised, one line for minds to show
        message = str(exc) if isinstance(exc, Refused) else f"{type(exc).__name__}: {exc}"
        print(" ".join(message.split())[:1000], file=sys.stderr)
        return 2 if mode == "check" else 1
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
