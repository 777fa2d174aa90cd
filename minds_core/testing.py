"""Helpers for testing environments and plugins, and a pytest plugin (entry point ``pytest11``) with fixtures.

Fixtures, available in any pytest session where minds-core is installed:

- ``minds_plugin``: register a plugin (a module or an object with ``@hookimpl``
  methods) for one test; every plugin discovery in that test sees it as installed.
- ``minds_env_run``: train an environment for a few steps on the local backend
  (the tiny model) and get back what the run wrote (a RunResult).
- ``served_and_trained``: keep what the runs of one test served through their policy endpoints
  and what they trained (a ServedAndTrained), to hold the one to the other token for token.

Also ``run_minds`` (a short ``minds run`` in this process), ``with_sampled_provenance`` (an RL
datum as the tinker-cookbook's loops annotate it), ``skip_unless_installed`` (a plugin's tests skip, naming what to
install, where the plugin is not installed) and pages in headless Chromium.
"""

from __future__ import annotations

import contextlib
import html
import importlib.metadata
import io
import json
import re
import shutil
import subprocess
import sys
import types
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    import tinker

import attrs
import pytest


def with_sampled_provenance(datum: tinker.types.Datum, prompt_length: int, sequence_id: str) -> tinker.types.Datum:
    """``datum`` (a prompt of ``prompt_length`` tokens, then one sampled sequence) with its provenance, as the
    tinker-cookbook's RL loop attaches it for ``stable_reinforce``: prompt runs, then the sampled run."""
    from tinker.types import PromptProvenanceSpan as prompt
    from tinker.types import SampledProvenanceSpan as sampled

    n = datum.model_input.length
    return datum.with_provenance(
        model_input=[prompt(sequence_id=sequence_id, length=prompt_length), sampled(sequence_id=sequence_id, length=n - prompt_length)],
        loss_fn_inputs=[
            prompt(sequence_id=sequence_id, offset=1, length=prompt_length - 1),
            sampled(sequence_id=sequence_id, length=n - prompt_length + 1),
        ],
    )


@attrs.frozen
class RunResult:
    """The exit code of a run, the error it printed, and the rows of its metrics, rollouts and checkpoints files."""

    exit_code: int
    run_dir: Path
    metrics: list[dict[str, Any]]
    rollouts: list[dict[str, Any]]
    checkpoints: list[dict[str, Any]]
    #: What the run said after ``minds: error:`` on stderr (e.g. ``no step trained: <why>``); None when nothing.
    error: str | None = None

    @property
    def steps(self) -> list[int]:
        return [row["step"] for row in self.metrics]

    @property
    def trained(self) -> bool:
        """Whether any step trained on at least one datum (a run where none did exits with code 1)."""
        return any(row.get("train/datums", 0) > 0 for row in self.metrics)

    def assert_trained(self) -> None:
        """Assert that the run trained: some step trained on a datum, it exited 0, its checkpoints end at its last step.

        For run tests whose configuration makes rewards differ within a group (see assert_trained_unless_said_why
        for the runs that may say why they could not learn instead).
        """
        assert self.trained, f"no step trained (exit {self.exit_code}, error {self.error!r}): {self.datums_per_step}"
        self.assert_trained_unless_said_why()

    @property
    def datums_per_step(self) -> dict[int, int]:
        """The datums each step trained on."""
        return {row["step"]: row.get("train/datums", 0) for row in self.metrics}

    def assert_trained_unless_said_why(self) -> None:
        """Assert that the run trained wherever its rewards allowed, and said why where they did not.

        A step with a logged group whose rewards differ trained on datums; a run that trained exited 0 with a
        checkpoint of its last step; a run in which no step trained (the untrained tiny model's replies often
        score alike within every group) exited 1 with ``no step trained: <why>``.
        """
        datums = self.datums_per_step
        for group in self.rollouts:
            rewards = {r["reward"] for r in group["rollouts"] if r["reward"] is not None}
            if len(rewards) > 1 and group["dropped"] is None:
                assert datums[group["step"]] > 0, f"step {group['step']} trained on nothing though rewards differ: {group}"
        if self.trained:
            assert self.exit_code == 0, f"the run trained but exited {self.exit_code}: {self.error}"
            assert self.checkpoints and self.checkpoints[-1]["step"] == self.steps[-1], (
                f"the run trained but its checkpoints do not end at step {self.steps[-1]}: {self.checkpoints}"
            )
        else:
            assert self.exit_code == 1 and self.error and self.error.startswith("no step trained: "), (
                f"no step trained, and the run did not say why (exit {self.exit_code}, error {self.error!r})"
            )


def run_minds(
    *args: str, runs_dir: Path, name: str = "test", overrides: Sequence[str] = (), quiet: bool = True
) -> RunResult:
    """Run ``minds run ARGS --name NAME --set runs_dir=... --set OVERRIDE ...`` in this process.

    ``quiet`` selects no metric sink (metrics.jsonl only, no progress bar) unless an override says otherwise.
    """
    from minds_core.cli.command import main
    from minds_core.training.run_directory import (
        CHECKPOINTS_FILE,
        METRICS_FILE,
        ROLLOUTS_FILE,
        read_jsonl,
    )

    sets = ["metrics.sinks=[]"] if quiet else []
    argv = ["run", *args, "--name", name, "--set", f"runs_dir={runs_dir}"]
    for assignment in [*sets, *overrides]:
        argv += ["--set", assignment]
    stderr = _Tee(sys.stderr)
    with contextlib.redirect_stderr(stderr):
        code = main(argv)
    errors = re.findall(r"^minds: error: (.*)$", stderr.seen.getvalue(), flags=re.MULTILINE)
    run_dir = Path(runs_dir) / name
    return RunResult(
        code,
        run_dir,
        read_jsonl(run_dir / METRICS_FILE),
        read_jsonl(run_dir / ROLLOUTS_FILE),
        read_jsonl(run_dir / CHECKPOINTS_FILE),
        errors[-1] if errors else None,
    )


class _Tee(io.TextIOBase):
    """A text stream writing through to ``stream`` and keeping a copy of what it wrote (``seen``)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream, self.seen = stream, io.StringIO()

    def write(self, text: str) -> int:
        self.seen.write(text)
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()

    def isatty(self) -> bool:
        return self.stream.isatty()


def scripted_pick(reply: str, options: Sequence[str]) -> str:
    """One of ``options``, chosen by a stable hash of ``reply``: replies that differ mostly pick differently."""
    return options[zlib.crc32(reply.encode("utf-8", "surrogatepass")) % len(options)]


class _ScriptedEpisode:
    """An episode whose ``step`` is given ``script(task, reply)`` in place of the sampled reply; the rest is its own."""

    def __init__(self, episode: Any, task: Any, script: Callable[[Any, str], str]) -> None:
        self.episode, self.task, self.script = episode, task, script

    async def step(self, action: str) -> Any:
        return await self.episode.step(self.script(self.task, action))

    def __getattr__(self, name: str) -> Any:
        if name == "episode":  # not set yet: no recursion
            raise AttributeError(name)
        return getattr(self.episode, name)


class ScriptedReplies:
    """TEST-ONLY scripted policy over an environment: each sampled reply is scored as ``script(task, reply)``.

    For run tests of environments whose rewards cannot differ for the untrained tiny model: its random bytes never
    write their answer format, so every reply of a group scores alike and nothing trains. ``script`` maps each
    sampled reply to a reply in the format a trained model writes (``scripted_pick(reply, [...])``), so replies
    that differ are scored as answers that differ; the run trains on the tokens the model sampled, and
    rollouts.jsonl keeps those. Tasks, rubric and every other member are the wrapped environment's.
    """

    def __init__(self, env: Any, script: Callable[[Any, str], str]) -> None:
        self.env, self.script = env, script

    def episode(self, task: Any, ctx: Any) -> _ScriptedEpisode:
        return _ScriptedEpisode(self.env.episode(task, ctx), task, self.script)

    def __getattr__(self, name: str) -> Any:
        if name == "env":  # not set yet: no recursion
            raise AttributeError(name)
        return getattr(self.env, name)


def scripted_replies_plugin(name: str, env_id: str, script: Callable[[Any, str], str]) -> object:
    """A plugin registering environment ``name``: ``env_id`` (with the same [env.args]) under ScriptedReplies.

    ``minds_plugin(scripted_replies_plugin("scripted_x", "x", script))``, then run with ``env.id=scripted_x``.
    """
    from minds_core import hookimpl

    def load(open_environment: Any, **args: Any) -> ScriptedReplies:
        return ScriptedReplies(open_environment(env_id, args), script)

    class Plugin:
        @hookimpl
        def minds_register_environments(self, register: Any) -> None:
            register(name, load, f"{env_id} scored on scripted replies (TEST-ONLY)")

    return Plugin()


#: Settings that keep a test run short: small groups, short replies.
QUICK_RUN = ("trainer.group_size=2", "trainer.groups_per_batch=2", "sampling.max_tokens=16")


@pytest.fixture
def minds_env_run(tmp_path: Path) -> Callable[..., RunResult]:
    """Train an environment for a few steps on the local backend (the tiny model); returns what the run wrote.

    ``minds_env_run("my_env", args={"num_tasks": 4}, steps=2, overrides=["sampling.max_tokens=8"])``:
    ``args`` become ``[env.args]``; ``overrides`` are ``--set`` assignments applied after QUICK_RUN.
    Each call is a new run under the test's ``tmp_path``.
    """
    runs: list[str] = []

    def run(
        env: str, *, args: Mapping[str, Any] | None = None, steps: int = 2, overrides: Sequence[str] = ()
    ) -> RunResult:
        runs.append(f"run{len(runs)}")
        sets = [*QUICK_RUN, *(f"env.args.{key}={json.dumps(value)}" for key, value in (args or {}).items()), *overrides]
        return run_minds(
            "--env", env, "--steps", str(steps), "--backend", "local",
            runs_dir=tmp_path / "runs", name=runs[-1], overrides=sets,
        )  # fmt: skip

    return run


@attrs.define
class ServedAndTrained:
    """What the runs of one test served and trained: ``recorded``, each episode's calls to its run's policy
    endpoint (as ``Capture.close`` returned them: prompt ids, sampled ids, log-probs); ``trained``, the datums of
    every batch the runs trained on."""

    recorded: list[list[Any]] = attrs.field(factory=list)
    trained: list[Any] = attrs.field(factory=list)

    def assert_trained_as_served(self) -> list[Any]:
        """Assert the datums trained are the recorded calls' sequences (``capture.trajectory``), token for token,
        with the sampler's log-prob on each sampled token; those sequences."""
        from minds_core.inference.capture import trajectory

        expected = [sequence for calls in self.recorded for sequence in trajectory(calls)]
        got = sorted(
            (d.model_input.to_ints() + [d.loss_fn_inputs["target_tokens"].data[-1]], d.loss_fn_inputs["logprobs"].data)
            for d in self.trained
        )
        want = sorted((list(s.tokens), [lp if m else 0.0 for lp, m in zip(s.logprobs[1:], s.sampled[1:])]) for s in expected)
        assert [tokens for tokens, _ in got] == [tokens for tokens, _ in want]
        for (_, got_logprobs), (_, want_logprobs) in zip(got, want):
            assert got_logprobs == pytest.approx(want_logprobs, abs=1e-6)
        return expected


@pytest.fixture
def served_and_trained(monkeypatch: pytest.MonkeyPatch) -> ServedAndTrained:
    """Record, for this test's in-process runs, every episode's endpoint calls and every datum trained."""
    import minds_core.rl.loop as loop
    from minds_core.inference.capture import Capture

    kept = ServedAndTrained()
    close, process = Capture.close, loop.process_batch

    def keep_calls(self: Any, episode: Any) -> Any:
        calls = close(self, episode)
        if calls and not any(calls == seen for seen in kept.recorded):  # an episode's key is closed twice
            kept.recorded.append(calls)
        return calls

    def keep_datums(groups: Any, settings: Any) -> Any:
        processed = process(groups, settings)
        kept.trained.extend(processed.datums)
        return processed

    monkeypatch.setattr(Capture, "close", keep_calls)
    monkeypatch.setattr(loop, "process_batch", keep_datums)
    return kept


@pytest.fixture
def minds_plugin(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., None]]:
    """Register a plugin for this test only: ``minds_plugin(obj, name="my_plugin")``.

    ``obj`` is a module or an object whose methods carry ``@hookimpl``. It is offered
    as one more entry point of the ``minds`` group, so every discovery during the test
    (``load_plugins()``, ``minds run``, ``minds envs``) finds it as if a distribution
    installed it; nothing is installed and nothing remains after the test.
    """
    from minds_core.contract.plugins import ENTRY_POINT_GROUP

    added: list[importlib.metadata.EntryPoint] = []
    discover = importlib.metadata.entry_points

    def entry_points(**params: Any) -> Any:
        found = discover(**params)
        return importlib.metadata.EntryPoints([*found, *added]) if params.get("group") == ENTRY_POINT_GROUP else found

    def register(obj: object, name: str = "test_plugin") -> None:
        holder = types.ModuleType(f"_minds_test_plugin_{name}")
        holder.plugin = obj  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, holder.__name__, holder)
        added.append(importlib.metadata.EntryPoint(name, f"{holder.__name__}:plugin", ENTRY_POINT_GROUP))

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)
    yield register


class _NotInstalled(pytest.Module):
    """A test module of a distribution that is not installed: collected as one skip saying what to install."""

    def __init__(self, *args: Any, reason: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.reason = reason

    def collect(self) -> list[pytest.Item]:
        pytest.skip(self.reason)


def skip_unless_installed(module: str, install: str) -> Callable[..., pytest.Module | None]:
    """A ``pytest_pycollect_makemodule`` hook for a plugin's tests/conftest.py: where ``module`` cannot be imported,
    each test file of that folder is skipped with the reason ``<module> is not installed: <install>`` instead of failing
    to import (a conftest itself cannot skip: pytest loads a test path's conftest before it collects).

    ``pytest_pycollect_makemodule = skip_unless_installed("minds_my_env", "pip install -e plugins/my_env")``
    """
    import importlib.util

    def pytest_pycollect_makemodule(module_path: Path, parent: pytest.Collector) -> pytest.Module | None:
        if importlib.util.find_spec(module) is not None:
            return None
        return _NotInstalled.from_parent(parent, path=module_path, reason=f"{module} is not installed: {install}")

    return pytest_pycollect_makemodule


#: Headless Chromium without a sandbox, a GPU, network services or a profile of its own.
CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
    "--disable-sync", "--no-first-run", "--hide-scrollbars", "--force-device-scale-factor=1",
)  # fmt: skip

_MEASURE = """<script>
const box = (selector) => { const e = document.querySelector(selector); if (!e) return null;
  const b = e.getBoundingClientRect(); return [b.left, b.top, b.width, b.height]; };
document.body.setAttribute("data-boxes", JSON.stringify({chart: box("svg.chart"), table: box("table.rollouts"), stacked: box("svg.chart.stacked")}));
</script>"""


def chromium() -> str | None:
    """The Chromium executable (Debian's ``chromium`` package), or None when it is not installed."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _chromium(page: Path, profile: Path, *args: str) -> subprocess.CompletedProcess:
    command = [chromium() or "chromium", *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args, page.resolve().as_uri()]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)


@attrs.frozen
class BrowserView:
    """A page as headless Chromium drew it: the screenshot, the DOM after load, and where things lie.

    ``chart``, ``table`` and ``stacked`` are ``[left, top, width, height]`` (CSS pixels = screenshot pixels) of
    the first ``svg.chart``, the first ``table.rollouts`` and the first stacked chart; None when the page has none.
    """

    screenshot: Path
    dom: str
    chart: list[float] | None
    table: list[float] | None
    stacked: list[float] | None = None

    def pixels_near(self, box: list[float], color: str, tolerance: int = 12) -> int:
        """How many screenshot pixels inside ``box`` are within ``tolerance`` of ``color`` (``#rrggbb``)."""
        from PIL import Image

        target = tuple(int(color[i : i + 2], 16) for i in (1, 3, 5))
        left, top, width, height = (int(v) for v in box)
        with Image.open(self.screenshot) as image:
            data = image.convert("RGB").crop((left, top, left + width, top + height)).tobytes()
        pixels = zip(data[0::3], data[1::3], data[2::3])
        return sum(all(abs(c - t) <= tolerance for c, t in zip(pixel, target)) for pixel in pixels)


def view_in_chromium(page: Path, workdir: Path, width: int = 1400, height: int = 2000) -> BrowserView:
    """Screenshot ``page`` in headless Chromium and measure where its first chart and rollout table lie.

    The measuring runs on a copy of the page with a script added; the screenshot is of the page itself.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    measured = workdir / "measure.html"
    measured.write_text(page.read_text(encoding="utf-8").replace("</body>", _MEASURE + "</body>"), encoding="utf-8")
    size = f"--window-size={width},{height}"
    shot = workdir / "screenshot.png"
    _chromium(page, workdir / "profile", size, f"--screenshot={shot}")
    dom = _chromium(measured, workdir / "profile", size, "--dump-dom").stdout
    boxes = json.loads(html.unescape(re.search(r'data-boxes="([^"]*)"', dom).group(1)))
    return BrowserView(shot, dom, boxes["chart"], boxes["table"], boxes["stacked"])
