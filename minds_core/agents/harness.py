"""The built-in ``harness`` environment: train an unmodified agent program through the run's policy endpoint.

::

    [env]
    id = "harness"
    [env.args]
    command = ["python", "agent.py"]     # or one string, split as a shell would
    tasks = "tasks.jsonl"                # one JSON object per line, each with at least "prompt"

Each episode runs the program in a working directory of its own, with the task object in
``MINDS_TASK`` and on stdin, and ``OPENAI_BASE_URL``/``OPENAI_API_KEY`` and
``ANTHROPIC_BASE_URL``/``ANTHROPIC_API_KEY`` pointing at the run's policy endpoint with a key made
for the episode (``serve.policy_endpoint``): whatever ``model`` it names, the run's current policy
answers, and every call is recorded token-exactly (``inference.capture``); the calls are the
rollout's trajectory. The program's process group is killed when ``rollout.timeout`` runs out.

The episode's reward is the sum of what is configured: the program's last stdout line as JSON
``{"reward": x}`` (required when nothing else scores), a ``scorer`` command run after it (same
directory and task; its last stdout line is ``{"reward": x}``), and the environment's reward
functions (``[env] rewards``) on the transcript. A reward line may carry ``"metrics": {name: y}``:
each is reported as the episode's metric ``name`` (how a plugin that drives its own framework's
scoring, such as the verifiers v1 bridge, reports the components of its reward). A program that exits non-zero, hangs, prints
garbage, floods stdout or the endpoint, or makes no call fails its rollout with that reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shlex
import shutil
import signal
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from minds_core.base.errors import ConfigError
from minds_core.config.rules import arg, at_least, within
from minds_core.contract.environment import Context, EpisodeConversation, StepResult, Task
from minds_core.contract.rubric import Rubric
from minds_core.envs.args import env_args
from minds_core.envs.single_turn import prompt_messages, score_completion

if TYPE_CHECKING:  # imported when an episode runs: `minds --help` does not load tinker (and torch) for this
    from minds_core.serve.policy_endpoint import PolicyEndpoint

__all__ = ["HarnessArgs", "HarnessEnvironment", "HarnessFailure", "load_harness", "reward_line"]

#: Bytes of a program's stderr kept to explain its failure.
STDERR_KEPT = 4096
#: How often a running program's stdout size is checked against ``max_output_bytes``.
OUTPUT_POLL_SECONDS = 0.05


@attrs.frozen
class HarnessArgs:
    """The ``[env.args]`` of ``harness``."""

    command: Any = arg(doc="the program: an argv list, or a string split as a shell would")
    tasks: str = arg(doc='a JSONL file, one JSON object per task with at least "prompt"')
    test_tasks: str = arg("", doc="the held-out tasks (JSONL) evaluation uses; default: tasks")
    scorer: Any = arg(None, doc='a command run after the program (argv list or string); its last stdout line is {"reward": x}')
    max_calls: int = arg(64, within(1, 100_000), doc="calls one episode may make to the endpoint; past them it fails as flooding")
    max_output_bytes: int = arg(1 << 20, at_least(1), doc="stdout one program may print; past it, it is killed and fails")


class HarnessFailure(Exception):
    """An episode's program failed (the message says how); its rollout fails with it, counted, and the run goes on."""


def _argv(value: Any, key: str) -> list[str]:
    if isinstance(value, str):
        try:
            argv = shlex.split(value)
        except ValueError as exc:
            raise ConfigError(f"env.args.{key} {value!r} cannot be split as a shell would: {exc}") from None
    elif isinstance(value, list) and all(isinstance(part, str) for part in value):
        argv = list(value)
    else:
        raise ConfigError(f"env.args.{key} must be an argv list of strings or one command string, got {type(value).__name__}")
    if not argv:
        raise ConfigError(f'env.args.{key} is empty: give the program to run, e.g. ["python", "agent.py"]')
    # the program runs in a fresh directory: a relative path naming a file here is passed as its absolute path
    return [str(Path(part).absolute()) if not Path(part).is_absolute() and Path(part).is_file() else part for part in argv]


def read_tasks(path: str, key: str) -> list[Task]:
    """The tasks of a JSONL file: each line a JSON object with at least ``prompt`` (a ConfigError names the line)."""
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as exc:
        raise ConfigError(f"env.args.{key} = {path!r}: cannot read it ({exc.strerror or exc})") from None
    tasks = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except ValueError as exc:
            raise ConfigError(f"{path}:{number}: not JSON ({exc}); each line must be one task object") from None
        if not isinstance(item, dict) or not isinstance(item.get("prompt"), (str, list)):
            raise ConfigError(f'{path}:{number}: a task must be a JSON object with a "prompt" (text or chat messages)')
        tasks.append(Task(item["prompt"], item.get("answer"), item, str(item.get("id", f"{Path(path).stem}-{number}"))))
    if not tasks:
        raise ConfigError(f"env.args.{key} = {path!r} holds no task: write one JSON object per line")
    return tasks


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def reward_line(output: str) -> tuple[float, dict[str, float]] | None:
    """The reward and metrics of a last stdout line ``{"reward": x, "metrics": {name: y}}`` ("metrics"
    optional); None when the line is not that."""
    lines = [line for line in output.splitlines() if line.strip()]
    try:
        value = json.loads(lines[-1]) if lines else None
    except ValueError:
        return None
    if not isinstance(value, dict) or not _number(value.get("reward")):
        return None
    metrics = value.get("metrics", {})
    if not isinstance(metrics, dict) or not all(isinstance(k, str) and _number(v) for k, v in metrics.items()):
        return None
    return float(value["reward"]), {name: float(metric) for name, metric in metrics.items()}


class HarnessEnvironment:
    """Tasks from JSONL; each episode one run of the program (see the module docstring)."""

    def __init__(self, args: HarnessArgs, tasks: dict[str, list[Task]] | None = None) -> None:
        """``tasks`` (split -> tasks, "train" at least), when a plugin lists its own, replace ``args.tasks``."""
        self.args = args
        self.command = _argv(args.command, "command")
        self.scorer = _argv(args.scorer, "scorer") if args.scorer is not None else None
        if tasks is None:
            tasks = {"train": read_tasks(args.tasks, "tasks")}
            tasks["test"] = read_tasks(args.test_tasks, "test_tasks") if args.test_tasks else tasks["train"]
        self._tasks = tasks
        from minds_core.inference.capture import Capture

        self.rubric = Rubric()  #: empty: ``[env] rewards`` adds reward functions on the transcript
        self.capture = Capture()
        self._endpoint: PolicyEndpoint | None = None

    def tasks(self, split: str) -> list[Task]:
        return self._tasks.get(split, self._tasks["train"])

    def endpoint(self) -> PolicyEndpoint:
        """The run's policy endpoint (started with the first episode, in the process that runs episodes)."""
        if self._endpoint is None:
            from minds_core.serve.policy_endpoint import PolicyEndpoint

            self._endpoint = PolicyEndpoint(self.capture)
            self._endpoint.start()
        return self._endpoint

    def episode(self, task: Task, ctx: Context) -> HarnessEpisode:
        return HarnessEpisode(self, task, ctx)

    def close(self) -> None:
        if self._endpoint is not None:
            self._endpoint.close()


class HarnessEpisode:
    """One run of the program on one task (a self-driving episode: the program drives the conversation)."""

    def __init__(self, env: HarnessEnvironment, task: Task, ctx: Context) -> None:
        self.env, self.task, self.ctx = env, task, ctx

    async def run(self, conversation: EpisodeConversation) -> StepResult:
        from minds_core.inference.capture import trajectory
        from minds_core.inference.sampling import Policy, turn_seed

        env = self.env
        endpoint = env.endpoint()
        policy = Policy(
            self.ctx.sampler,
            conversation.renderer,
            "policy",
            self.ctx.step,
            context_length=conversation.max_total_tokens,
            max_tokens=conversation.params.max_tokens,
        )  # type: ignore[attr-defined]
        seed = conversation.params.seed  # a seeded run: each call the program sends unseeded gets its turn's seed
        calls = env.capture.open(policy, env.args.max_calls, lambda n: turn_seed(seed, n))
        workdir = Path(tempfile.mkdtemp(prefix="minds-harness-"))
        task_json = json.dumps(self.task.info)
        variables = {
            **os.environ,
            "MINDS_TASK": task_json,
            "OPENAI_BASE_URL": endpoint.openai_url,
            "OPENAI_API_KEY": calls.key,
            "ANTHROPIC_BASE_URL": endpoint.anthropic_url,
            "ANTHROPIC_API_KEY": calls.key,
        }
        try:
            try:
                stdout = await _run(env.command, workdir, variables, task_json, env.args.max_output_bytes, "the program")
            except HarnessFailure:
                if not calls.flooded:
                    raise
                stdout = ""  # refused past max_calls, the program failed: the flood is the reason
            recorded = env.capture.close(calls)
            if calls.flooded:
                raise HarnessFailure(
                    f"the program flooded the endpoint: {calls.refused} calls past max_calls = {env.args.max_calls} were refused"
                )
            if not recorded:
                raise HarnessFailure(
                    "the program made no call to its endpoint (OPENAI_BASE_URL / ANTHROPIC_BASE_URL): nothing to train"
                )
            replies = [call.completions[0].text for call in recorded]
            conversation.prompt = prompt_messages(self.task.prompt)  # type: ignore[attr-defined]
            conversation.messages = [*conversation.prompt, *({"role": "assistant", "content": reply} for reply in replies)]  # type: ignore[misc]
            conversation.adopt(trajectory(recorded), [call.completions[0].finish for call in recorded], replies)  # type: ignore[attr-defined]
            reward, metrics = await self._score(stdout, replies, workdir, variables)
            metrics["harness/calls"] = float(len(recorded))
            metrics["harness/sequences"] = float(len(conversation.sequences()))  # type: ignore[attr-defined]
            return StepResult(reward=reward, done=True, metrics=metrics)
        finally:
            env.capture.close(calls)
            shutil.rmtree(workdir, ignore_errors=True)

    async def _score(
        self, stdout: str, replies: list[str], workdir: Path, variables: dict[str, str]
    ) -> tuple[float, dict[str, float]]:
        env = self.env
        parts: list[float] = []
        metrics: dict[str, float] = {}
        own = reward_line(stdout)
        if own is not None:
            parts.append(own[0])
            metrics["harness/program_reward"] = own[0]
            metrics.update(own[1])
        if env.scorer is not None:
            scored_input = json.dumps({"task": self.task.info, "stdout": stdout[-65536:], "replies": replies})
            scored = reward_line(
                await _run(env.scorer, workdir, variables, scored_input, env.args.max_output_bytes, "the scorer")
            )
            if scored is None:
                raise HarnessFailure('the scorer\'s last stdout line is not {"reward": <number>}')
            parts.append(scored[0])
            metrics["harness/scorer_reward"] = scored[0]
            metrics.update(scored[1])
        if env.rubric.funcs:
            state = {"stdout": stdout, "workdir": str(workdir), "replies": replies}
            result = await score_completion(
                env.rubric, self.task, replies[-1], state, self.ctx, prompt_messages(self.task.prompt)
            )
            parts.append(float(result.reward or 0.0))
            metrics.update(result.metrics)
        if not parts:
            last = stdout.strip().splitlines()[-1][:200] if stdout.strip() else "(nothing)"
            raise HarnessFailure(
                f'the program\'s last stdout line is not {{"reward": <number>}} (it printed {last!r}), and no scorer or reward '
                "functions are configured: print the reward as the last line, or set env.args.scorer or [env] rewards"
            )
        return sum(parts), metrics


async def _run(argv: list[str], workdir: Path, variables: dict[str, str], stdin: str, max_output: int, what: str) -> str:
    """Run ``argv`` in its own process group; its stdout. A HarnessFailure when it cannot start, exits non-zero or
    prints past ``max_output`` bytes; the group is killed however this ends (a timeout's cancellation included).

    Its stdin, stdout and stderr are files, not pipes: a process it leaves behind holding them does not keep
    the episode waiting, and stdout's size is watched while it runs."""
    with tempfile.TemporaryDirectory(prefix="minds-harness-io-") as io_dir:
        files = Path(io_dir)
        (files / "stdin").write_text(stdin)
        with open(files / "stdin", "rb") as given, open(files / "stdout", "wb+") as out, open(files / "stderr", "wb+") as err:
            try:
                process = await asyncio.create_subprocess_exec(
                    *argv, cwd=workdir, env=variables, stdin=given, stdout=out, stderr=err, start_new_session=True
                )
            except OSError as exc:
                raise HarnessFailure(f"{what} {argv[0]!r} cannot be started: {exc.strerror or exc}") from None
            try:
                exited = asyncio.ensure_future(process.wait())
                while not exited.done():
                    await asyncio.wait([exited], timeout=OUTPUT_POLL_SECONDS)
                    if os.fstat(out.fileno()).st_size > max_output:
                        _kill_group(process)
                        raise HarnessFailure(f"{what} printed more than max_output_bytes = {max_output} bytes to stdout: killed")
                code = exited.result()
            finally:
                _kill_group(process)
            if code != 0:
                err.seek(max(0, os.fstat(err.fileno()).st_size - STDERR_KEPT))
                shown = err.read().decode(errors="replace").strip()[-1500:] or "(no stderr)"
                raise HarnessFailure(f"{what} exited with code {code}; its stderr ends: {shown}")
            out.seek(0)
            return out.read(max_output).decode(errors="replace")


def _kill_group(process: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


def load_harness(**args: Any) -> HarnessEnvironment:
    """The ``harness`` environment's loader (``[env.args]``: ``HarnessArgs``)."""
    return HarnessEnvironment(env_args(HarnessArgs, args, env="harness"))
