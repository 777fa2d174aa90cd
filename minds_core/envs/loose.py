"""The seeds' loose interface: whatever a ``load_environment(**args)`` returns, as an Environment.

``[env] id`` names a package folder (``./environments/my_task``), a ``.py`` file
or a module path (``pkg.module``); ``[env.args]`` go to its
``load_environment``. The object it returns is read like this:

- Prompts. With ``initial_observation()`` the object is ONE stateful instance.
  Each split draws from its own deep copy of the object as loaded (the loaded
  object itself is never drawn from), so one split's draws never shift
  another's; the copies start alike, so a self-seeded object gives every split
  the same prompts (load the eval environment with other args, e.g. another
  seed, for held-out ones). A split has ``DRAWS`` task slots; a slot is filled
  on first use by calling ``initial_observation()`` on the split's copy and
  deep-copying that copy right after; its ``answer`` attribute then, when set,
  is the task's answer. A slot keeps its prompt for the whole run; a resumed
  run loads the object again and refills the slots, in the order they are
  used, from fresh copies, so its prompts restart from the start of the
  stream. Every rollout of a task gets its own deep copy of the task's
  snapshot, so a group shares one prompt and rollouts never share state
  (``step`` may return ``done = False`` with ``messages`` to continue on that
  copy; a result without messages ends the episode, as the seeds scored one
  reply per prompt). Otherwise a ``dataset`` (``<split>_dataset`` for other
  splits) gives one task per row, from ``prompt`` or ``question`` with
  optional ``answer`` and ``info``.
- Reward. A ``rubric`` with ``funcs`` and ``weights`` wins: each function gets
  what it names of prompt, completion (text), answer, info, state, task, ctx,
  messages and the rubric's ``class_objects`` (verifiers' ``parser``), sync or
  async. A function naming ``answer`` without a default fails the rollout when
  the task has no answer (rather than scoring it silently). Otherwise
  ``step(text)`` returns an object or mapping with a numeric ``reward``; on a
  dataset object the calls are serialized (one shared object) and every reply
  ends its episode.
- ``build(sampling_client)``, when present, is called with the rollout's
  CURRENT policy sampler (``ctx.sampler``) before scoring: on the rollout's copy
  for drawn prompts, else once per sampler on a copy of the loaded object. It returns the
  object to score with, or None when it updated itself.
"""

from __future__ import annotations

import asyncio
import collections
import copy
import functools
import importlib
import importlib.util
import inspect
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import attrs

from minds_core.envs.loading import call_loader
from minds_core.envs.rubric import INVALID_PARTS_METRIC, Rubric, maybe_await
from minds_core.envs.single_turn import prompt_messages, score_completion
from minds_core.envs.types import Context, StepResult, Task, as_step_result
from minds_core.errors import ConfigError
from minds_core.logs import get_logger

log = get_logger("loose")

#: Task slots per split for objects that draw their prompts with ``initial_observation()``.
DRAWS = 1024
#: Policies whose built shared object is kept (off-policy rollouts may still be scoring with an older one).
BUILT_POLICIES = 4

ACCEPTED = (
    "accepted: an object with initial_observation() + step(text) (sync or async); "
    "or a `dataset` of rows with `prompt` or `question` (and `answer`) scored by a `rubric` "
    "(funcs, weights) or by step(text); either may add build(sampling_client) for model-aware rewards"
)


def load_loose_environment(env_id: str, args: dict[str, Any]) -> LooseEnvironment:
    """Import ``env_id``, call its ``load_environment(**args)`` and adapt the result."""
    module = _import(env_id)
    loader = getattr(module, "load_environment", None)
    if not callable(loader):
        names = sorted(n for n in vars(module) if not n.startswith("_"))
        raise ConfigError(
            f"environment {env_id!r}: {module.__file__} defines no load_environment(**args) "
            f"(it defines: {', '.join(names) or 'nothing'}); {ACCEPTED}"
        )
    return LooseEnvironment(env_id, call_loader(repr(env_id), loader, args))


def _import(env_id: str) -> ModuleType:
    path = Path(env_id).expanduser()
    if env_id.startswith((".", "/", "~")) or "/" in env_id or path.suffix == ".py":
        return _import_path(env_id, path.resolve())
    try:
        return importlib.import_module(env_id)
    except ModuleNotFoundError as exc:
        if not exc.name or not (env_id == exc.name or env_id.startswith(exc.name + ".")):
            raise  # the module exists but one of its own imports is missing
        raise ConfigError(
            f"environment {env_id!r}: no module named {exc.name!r}; give a folder path "
            f"(./environments/my_task), a .py file, or an importable module path"
        ) from None


def _import_path(env_id: str, path: Path) -> ModuleType:
    """Import a package folder or a .py file under its own name (so its self-imports work)."""
    if path.is_dir():
        origin, search = path / "__init__.py", [str(path)]
        if not origin.is_file():
            raise ConfigError(f"environment {env_id!r}: the folder {path} has no __init__.py; make it a Python package")
    elif path.is_file() and path.suffix == ".py":
        origin, search = path, None
    else:
        raise ConfigError(f"environment {env_id!r}: {path} does not exist (paths are relative to {Path.cwd()})")
    name = (path.name if search else path.stem).replace("-", "_")
    try:
        other = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        other = None
    if other is not None and other.origin and Path(other.origin).resolve() != origin:
        raise ConfigError(
            f"environment {env_id!r}: the name {name!r} is taken by the module at {other.origin}; rename {path.name}"
        )
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, origin, submodule_search_locations=search)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def as_rubric(source: Any, where: str) -> Rubric:
    """A minds Rubric from any object with ``funcs`` and ``weights`` (verifiers' included)."""
    funcs = list(getattr(source, "funcs", None) or [])
    weights = list(getattr(source, "weights", None) or []) or [1.0] * len(funcs)
    if not funcs or not all(callable(f) for f in funcs):
        raise ConfigError(f"{where}: rubric.funcs must be a non-empty list of functions, got {funcs!r}")
    if len(weights) != len(funcs):
        raise ConfigError(f"{where}: rubric has {len(funcs)} funcs but {len(weights)} weights")
    objects = dict(getattr(source, "class_objects", None) or {})
    names = [getattr(f, "__name__", f"reward_{i}") for i, f in enumerate(funcs)]
    return Rubric([_bind(f, objects) for f in funcs], [float(w) for w in weights], names)


def _bind(fn: Any, objects: dict[str, Any]) -> Any:
    """``fn`` with the rubric's class objects it asks for (verifiers' ``parser``) already given."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):  # no signature: it gets what call_with_available can give
        return fn
    takes_all = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    wanted = {name: obj for name, obj in objects.items() if takes_all or name in params}
    return functools.partial(fn, **wanted) if wanted else fn


def _info(value: Any) -> dict[str, Any]:
    if isinstance(value, str):
        value = json.loads(value) if value else {}
    return dict(value or {})


class LooseEnvironment:
    """A seed-style object as an Environment (see the module docstring)."""

    def __init__(self, env_id: str, obj: Any) -> None:
        self.env_id, self.obj = env_id, obj
        self.draws = callable(getattr(obj, "initial_observation", None))
        self.builds = callable(getattr(obj, "build", None))
        found = [a for a in ("initial_observation", "step", "dataset", "rubric", "build") if getattr(obj, a, None) is not None]
        mismatch = f"environment {env_id!r}: load_environment() returned a {type(obj).__name__} with {', '.join(found) or 'none of them'}"
        if not self.draws and getattr(obj, "dataset", None) is None:
            raise ConfigError(f"{mismatch}: nothing gives prompts; {ACCEPTED}")
        if getattr(obj, "rubric", None) is None and not callable(getattr(obj, "step", None)) and not self.builds:
            raise ConfigError(f"{mismatch}: nothing gives rewards; {ACCEPTED}")
        if getattr(obj, "rubric", None) is not None:
            as_rubric(obj.rubric, f"environment {env_id!r}")
        if self.draws:
            try:
                copy.deepcopy(obj)
            except Exception as exc:  # noqa: BLE001 - any failure to copy means the same fix
                raise ConfigError(
                    f"{mismatch}: objects with initial_observation() are deep-copied per task and rollout, "
                    f"and copying failed ({type(exc).__name__}: {exc}); make it copyable or expose a dataset"
                ) from None
        self._sources: dict[str, Any] = {}  # split -> its copy of the loaded object, drawn from
        self._snapshots: dict[str, tuple[Task, Any]] = {}
        self._draw_lock = asyncio.Lock()
        self._step_lock = asyncio.Lock()
        self._build_lock = asyncio.Lock()
        self._built: collections.deque[tuple[Any, Any]] = collections.deque(maxlen=BUILT_POLICIES)  # (sampler, built)
        self._warned: set[str] = set()

    def tasks(self, split: str) -> Sequence[Task]:
        if self.draws:
            return [Task(prompt="", id=f"{split}-{i}", info={"split": split, "draw": i}) for i in range(DRAWS)]
        attribute = "dataset" if split == "train" else f"{split}_dataset"
        rows = getattr(self.obj, attribute, None)
        if rows is None:
            raise ConfigError(f"environment {self.env_id!r} has no {attribute} for split {split!r}")
        return [self._row_task(row, split, i) for i, row in enumerate(rows)]

    def _row_task(self, row: Any, split: str, index: int) -> Task:
        if not isinstance(row, Mapping):
            raise ConfigError(f"environment {self.env_id!r}: {split} row {index} is a {type(row).__name__}, not a mapping")
        prompt = row.get("prompt") if row.get("prompt") is not None else row.get("question")
        if not isinstance(prompt, (str, list)):
            raise ConfigError(
                f"environment {self.env_id!r}: {split} row {index} needs a `prompt` (text or messages) or a "
                f"`question` (text); its keys: {', '.join(row)}"
            )
        return Task(prompt=prompt, answer=row.get("answer"), info=_info(row.get("info")), id=f"{split}-{index}")

    def episode(self, task: Task, ctx: Context) -> LooseEpisode:
        return LooseEpisode(self, task, ctx)

    async def draw(self, task: Task) -> tuple[Task, Any]:
        """The task as drawn (prompt and answer) and a fresh copy of its split's instance right after the draw."""
        async with self._draw_lock:
            if task.id not in self._snapshots:
                split = task.info["split"]
                if split not in self._sources:
                    self._sources[split] = copy.deepcopy(self.obj)
                source = self._sources[split]
                observation = await maybe_await(source.initial_observation())
                drawn = attrs.evolve(task, prompt=observation, answer=getattr(source, "answer", None))
                self._snapshots[task.id] = (drawn, copy.deepcopy(source))
        drawn, snapshot = self._snapshots[task.id]
        return drawn, copy.deepcopy(snapshot)

    async def scorer(self, instance: Any | None, sampler: Any) -> Any:
        """The object that scores a rollout: its own copy or the shared object, built for ``sampler``."""
        if instance is not None:
            return await _build(instance, sampler) if self.builds else instance
        if not self.builds:
            return self.obj
        async with self._build_lock:
            for seen, built in self._built:
                if seen is sampler:
                    return built
            # a copy per policy: an in-place build for a newer policy never changes an older rollout's scorer
            built = await _build(copy.deepcopy(self.obj), sampler)
            self._built.append((sampler, built))
            return built

    async def step_shared(self, scorer: Any, action: str) -> Any:
        """``step`` on the one shared object, one call at a time."""
        async with self._step_lock:
            return await maybe_await(scorer.step(action))

    def warn_invalid(self, names: list[str]) -> None:
        """Warn once per reward function that returned something that is not a finite number."""
        new = [n for n in names if n not in self._warned]
        if new:
            self._warned.update(new)
            log.warning("non-numeric reward counted as 0", env=self.env_id, functions=new)


async def _build(instance: Any, sampler: Any) -> Any:
    built = await maybe_await(instance.build(sampler))
    if isinstance(built, (list, tuple)):
        raise TypeError(f"build(sampling_client) returned a {type(built).__name__}; return one environment object, or None")
    return instance if built is None else built


class LooseEpisode:
    """One rollout of a loose environment."""

    def __init__(self, env: LooseEnvironment, task: Task, ctx: Context) -> None:
        self.env, self.task, self.ctx = env, task, ctx
        self.instance: Any | None = None
        self.state: dict[str, Any] = {}

    async def initial_observation(self) -> Any:
        if self.env.draws:
            self.task, self.instance = await self.env.draw(self.task)
        return self.task.prompt

    async def step(self, action: str) -> StepResult:
        scorer = await self.env.scorer(self.instance, self.ctx.sampler)
        source = getattr(scorer, "rubric", None)
        if source is not None:
            return await self._score(as_rubric(source, f"environment {self.env.env_id!r}"), action)
        if not callable(getattr(scorer, "step", None)):
            raise TypeError(f"the object built by build(sampling_client), a {type(scorer).__name__}, has neither rubric nor step()")
        if self.instance is not None:
            result = as_step_result(await maybe_await(scorer.step(action)))
        else:
            result = as_step_result(await self.env.step_shared(scorer, action))
        # The seeds scored one reply per prompt: only an own copy that sends messages continues.
        result.done = result.done or not result.messages or self.instance is None
        return result

    async def _score(self, rubric: Rubric, action: str) -> StepResult:
        if self.task.answer is None and (needing := _answer_needers(rubric)):
            raise ValueError(
                f"environment {self.env.env_id!r}: reward function {', '.join(needing)} asks for `answer`, "
                f"but task {self.task.id!r} has none; give the rows an `answer`, or set the instance's "
                "`answer` attribute in initial_observation()"
            )
        prompt = prompt_messages(self.task.prompt)
        result = await score_completion(rubric, self.task, action, self.state, self.ctx, prompt)
        if INVALID_PARTS_METRIC in result.metrics:
            self.env.warn_invalid([n for n in rubric.names if f"reward/{n}" not in result.metrics])
        return result


def _answer_needers(rubric: Rubric) -> list[str]:
    """The rubric functions that name ``answer`` with no default: without one they would score silently wrong."""
    return [name for fn, name in zip(rubric.funcs, rubric.names, strict=True) if _needs_answer(fn)]


def _needs_answer(fn: Any) -> bool:
    try:
        param = inspect.signature(fn).parameters.get("answer")
    except (TypeError, ValueError):  # no signature: nothing to tell
        return False
    return param is not None and param.default is inspect.Parameter.empty
