"""The seeds' loose interface: whatever a ``load_environment(**args)`` returns, as an Environment.

``[env] id`` names a package folder (``./environments/my_task``, also a
distribution project with the package one level down), a ``.py`` file, a
module path (``pkg.module``), ``module:NAME`` or an installed distribution
(see ``minds_core.contract.locate``); ``[env.args]`` go to its
``load_environment``. The result is first offered to the registered
environment adapters (the verifiers bridge takes ``verifiers.Environment``
objects). A minds ``Environment`` (``tasks`` + ``episode``, as a registered
loader returns it) trains as it is. Otherwise it is read like this:

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
  copy, in any spelling ``as_step_result`` reads: tinker-cookbook's
  ``episode_done``/``next_observation`` or ``observation``; a result without
  messages ends the episode, as the seeds scored one reply per prompt). Otherwise a ``dataset`` (``<split>_dataset`` for other
  splits) gives one task per row, from ``prompt`` or ``question`` with
  optional ``answer`` (missing: ``""``, with one warning) and ``info``.
- Dataset builders. An object with only ``build(sampling_client)`` is a
  builder: it is built once at load, with a sampler that refuses to be used,
  to enumerate the tasks. When that returns a list of environment instances
  (each with ``initial_observation()`` + ``step()``), task ``i`` is instance
  ``i``: every policy's rollouts use the list built with that policy's sampler,
  and draw task ``i``'s prompt from a copy of its instance ``i`` (once per
  policy, shared by the group). When it returns one object with a
  ``dataset``, that object's rows are the tasks and each policy's build scores.
- Reward. A ``rubric`` with ``funcs`` and ``weights`` wins (a group of rubrics,
  ``rubrics``, counts as their functions together; zero-weight functions are
  metrics): each function gets what it names of prompt, completion (text),
  answer, info, state, task, ctx, messages and the rubric's ``class_objects``
  (verifiers' ``parser``), sync or async, called leniently
  (``minds_core.envs.calling``). ``info`` also carries ``tinker_client`` (the
  rollout's sampler) and ``tokenizer``, as the seed's trainer gave them.
  Otherwise ``step(text)`` returns an object or mapping with a numeric
  ``reward`` (non-numeric step metrics are dropped); on a dataset object the
  calls are serialized (one shared object) and every reply ends its episode.
- ``build(sampling_client)``, when present on a prompt-giving object, is called
  with the rollout's CURRENT policy sampler before scoring: on the rollout's
  copy for drawn prompts, else once per sampler on a copy of the loaded object.
  It returns the object to score with, or None when it updated itself.
- Samplers. Every sampler environment code receives (``build``'s argument,
  ``info["tinker_client"]``) is a ``PolicySampler``: the real SamplingClient
  API, plus ``.tokenizer``.
"""

from __future__ import annotations

import asyncio
import collections
import copy
import json
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from minds_core.base.blocking import plugin_call
from minds_core.base.errors import ConfigError
from minds_core.base.logs import get_logger
from minds_core.contract.environment import Context, Environment, StepResult, Task, as_step_result
from minds_core.contract.locate import MODULE_PREFIX, import_environment
from minds_core.contract.rubric import INVALID_PARTS_METRIC, Rubric, as_reward
from minds_core.envs.calling import lenient
from minds_core.envs.cookbook.environment import CookbookEnvironment
from minds_core.envs.cookbook.models import filled_args, register_tokenizer
from minds_core.envs.cookbook.sources import cookbook_kind, is_cookbook, loaded_splits, seed_build_sources
from minds_core.envs.loader_calls import call_loader
from minds_core.envs.loops import run_to_completion
from minds_core.envs.sampler import PolicySampler
from minds_core.envs.single_turn import prompt_messages, score_completion

log = get_logger("loose")

#: Task slots per split for objects that draw their prompts with ``initial_observation()``.
DRAWS = 1024
#: Policies whose built shared object is kept (off-policy rollouts may still be scoring with an older one).
BUILT_POLICIES = 4

ACCEPTED = (
    "accepted: a minds Environment (tasks(split) + episode(task, ctx)); "
    "an object with initial_observation() + step(text) (sync or async); "
    "or a `dataset` of rows with `prompt` or `question` (and `answer`) scored by a `rubric` "
    "(funcs, weights) or by step(text); either may add build(sampling_client) for model-aware rewards; "
    "or only build(sampling_client) returning a list of such instances, or an object with a dataset; "
    "or a tinker-cookbook Env, EnvGroupBuilder (or a list of them), RLDataset or RLDatasetBuilder, "
    "also as a class named by `pkg.module:Name`"
)


def environment_loader(env_id: str) -> Any:
    """Import ``env_id`` and return its ``load_environment``; a ConfigError saying what the module defines instead.

    ``pkg.module:NAME`` (also after a path) names another object of the module to call with [env.args]:
    a loader, or a class such as a tinker-cookbook ``RLDatasetBuilder``.
    """
    source, _, attribute = env_id.rpartition(":")
    named = bool(source) and source != MODULE_PREFIX.rstrip(":") and attribute.isidentifier()
    module = import_environment(source if named else env_id)
    attribute = attribute if named else "load_environment"
    loader = getattr(module, attribute, None)
    if not callable(loader):
        names = sorted(n for n in vars(module) if not n.startswith("_"))
        what = f"no {attribute}" if named else "no load_environment(**args)"
        raise ConfigError(
            f"environment {env_id!r}: {module.__file__} defines {what} (it defines: {', '.join(names) or 'nothing'}); {ACCEPTED}"
        )
    return loader


def load_loose_environment(env_id: str, args: dict[str, Any], adapters: Sequence[Any] = ()) -> Any:
    """Import ``env_id``, call its ``load_environment(**args)`` and adapt the result.

    tinker-cookbook objects (``cookbook``) go to ``CookbookEnvironment``, then the adapters are asked.
    """
    loader = environment_loader(env_id)
    register_tokenizer()
    if isinstance(loader, type) and cookbook_kind(loader) is not None:
        args = filled_args(repr(env_id), loader, args)
    return adapted(env_id, call_loader(repr(env_id), loader, args), adapters)


def adapted(env_id: str, obj: Any, adapters: Sequence[Any] = ()) -> Any:
    """What ``load_environment()`` returned as an Environment: a ``CookbookEnvironment`` for tinker-cookbook
    objects (and the seed's builders listing cookbook Envs), else the first adapter's, else a ``LooseEnvironment``."""
    if is_cookbook(obj):
        return cookbook_environment(env_id, obj)
    enumerated = None
    if callable(getattr(obj, "build", None)) and not callable(getattr(obj, "initial_observation", None)) and getattr(obj, "dataset", None) is None:
        enumerated = _enumerate(obj, _mismatch(env_id, obj))  # once: the seed's builder lists its tasks at load
        if isinstance(enumerated, list) and all(cookbook_kind(e) == "Env" for e in enumerated):
            return CookbookEnvironment(env_id, seed_build_sources(obj, len(enumerated)))
    for adapter in adapters:
        env = adapter(obj, env_id)
        if env is not None:
            return env
    if isinstance(obj, Environment):  # minds' own contract (tasks + episode), as a registered loader returns it
        return obj
    return LooseEnvironment(env_id, obj, enumerated)


def cookbook_environment(env_id: str, obj: Any) -> CookbookEnvironment | None:
    """A ``CookbookEnvironment`` when ``obj`` is a tinker-cookbook object (``sources.is_cookbook``); None otherwise."""
    return CookbookEnvironment(env_id, loaded_splits(env_id, obj)) if is_cookbook(obj) else None


def as_rubric(source: Any, where: str) -> Rubric:
    """A minds Rubric from any object with ``funcs`` and ``weights`` (verifiers' included).

    A group of rubrics (``rubrics``, as verifiers' RubricGroup, whose own ``funcs`` is empty)
    counts as its members' functions, each with its member's class objects.
    """
    funcs, weights, names = _flatten(source, where)
    if not funcs:
        raise ConfigError(f"{where}: rubric.funcs must be a non-empty list of functions, got {getattr(source, 'funcs', None)!r}")
    return Rubric(funcs, weights, names)


def _flatten(source: Any, where: str) -> tuple[list[Any], list[float], list[str]]:
    funcs = list(getattr(source, "funcs", None) or [])
    weights = list(getattr(source, "weights", None) or []) or [1.0] * len(funcs)
    if not all(callable(f) for f in funcs):
        raise ConfigError(f"{where}: rubric.funcs must be a non-empty list of functions, got {funcs!r}")
    if len(weights) != len(funcs):
        raise ConfigError(f"{where}: rubric has {len(funcs)} funcs but {len(weights)} weights")
    objects = dict(getattr(source, "class_objects", None) or {})
    out = (
        [lenient(f, objects) for f in funcs],
        [float(w) for w in weights],
        [getattr(f, "__name__", f"reward_{i}") for i, f in enumerate(funcs)],
    )
    for member in getattr(source, "rubrics", None) or []:
        for mine, theirs in zip(out, _flatten(member, where), strict=True):
            mine.extend(theirs)
    return out


def _info(value: Any) -> dict[str, Any]:
    if isinstance(value, str):
        value = json.loads(value) if value else {}
    return dict(value or {})


class _NoPolicyYet:
    """What ``build(sampling_client)`` receives when minds enumerates a builder's tasks at load."""

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(
            f"build(sampling_client) used the sampler ({name}) while minds enumerated the tasks at load, before "
            "any policy exists; keep the sampler and use it when scoring (step or reward functions)"
        )

    def __deepcopy__(self, memo: dict[int, Any]) -> _NoPolicyYet:
        return self


@attrs.define
class _Built:
    """What one policy's build gave: the object (or list of instances) and the prompts drawn from it."""

    built: Any
    snapshots: dict[int, tuple[Task, Any]] = attrs.field(factory=dict)


class LooseEnvironment:
    """A seed-style object as an Environment (see the module docstring)."""

    def __init__(self, env_id: str, obj: Any, enumerated: Any = None) -> None:
        """``enumerated``: what the builder's ``build()`` at load already listed (None: enumerated here when needed)."""
        self.env_id, self.obj = env_id, obj
        self.draws = callable(getattr(obj, "initial_observation", None))
        self.builds = callable(getattr(obj, "build", None))
        mismatch = _mismatch(env_id, obj)
        if any(c.__name__ == "Environment" and c.__module__.startswith("verifiers.") for c in type(obj).__mro__):
            raise ConfigError(
                f"{mismatch}: it is a verifiers environment, which trains through the verifiers bridge; install it "
                "(pip install -c constraints.txt -e plugins/verifiers_bridge, distribution minds-plugin-verifiers)"
            )
        #: a dataset builder's enumeration: the list of instances, or the built object with a dataset
        self.enumerated: Any = enumerated
        if not self.draws and getattr(obj, "dataset", None) is None and enumerated is None:
            if not self.builds:
                raise ConfigError(f"{mismatch}: nothing gives prompts; {ACCEPTED}")
            self.enumerated = _enumerate(obj, mismatch)
        rows_source = self.enumerated if self.enumerated is not None else obj
        if isinstance(rows_source, list):
            pass  # each instance gives its prompt and its reward
        elif getattr(rows_source, "rubric", None) is None and not callable(getattr(rows_source, "step", None)) and not self.builds:
            raise ConfigError(f"{mismatch}: nothing gives rewards; {ACCEPTED}")
        if getattr(rows_source, "rubric", None) is not None:
            as_rubric(rows_source.rubric, f"environment {env_id!r}")
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
        self._built: collections.deque[tuple[Any, _Built]] = collections.deque(maxlen=BUILT_POLICIES)  # (sampler, built)
        self._warned: set[str] = set()

    @property
    def lists(self) -> bool:
        """True for a builder whose build() returns a list of instances (task i is instance i)."""
        return isinstance(self.enumerated, list)

    def tasks(self, split: str) -> Sequence[Task]:
        if self.lists:
            return [Task(prompt="", id=f"{split}-{i}", info={"split": split, "instance": i}) for i in range(len(self.enumerated))]
        if self.draws:
            return [Task(prompt="", id=f"{split}-{i}", info={"split": split, "draw": i}) for i in range(DRAWS)]
        attribute = "dataset" if split == "train" else f"{split}_dataset"
        rows = getattr(self.enumerated if self.enumerated is not None else self.obj, attribute, None)
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
                self._snapshots[task.id] = await _drawn(task, self._sources[split])
        drawn, snapshot = self._snapshots[task.id]
        return drawn, copy.deepcopy(snapshot)

    async def instance(self, task: Task, sampler: PolicySampler) -> tuple[Task, Any]:
        """For a list builder: the task as drawn from instance i of this policy's list, and a fresh copy of it."""
        built = await self._for_policy(sampler)
        index = task.info["instance"]
        async with self._draw_lock:
            if index not in built.snapshots:
                instances = built.built
                if not isinstance(instances, (list, tuple)) or len(instances) != len(self.enumerated):
                    raise TypeError(
                        f"build(sampling_client) returned {type(instances).__name__} of "
                        f"{len(instances) if isinstance(instances, (list, tuple)) else '-'} instances for this policy, "
                        f"but {len(self.enumerated)} at load; it must list the same tasks every time"
                    )
                built.snapshots[index] = await _drawn(task, instances[index])
        drawn, snapshot = built.snapshots[index]
        return drawn, copy.deepcopy(snapshot)

    async def scorer(self, instance: Any | None, sampler: PolicySampler) -> Any:
        """The object that scores a rollout: its own copy or the shared object, built for ``sampler``."""
        if instance is not None:
            return await _build(instance, sampler) if self.builds and not self.lists else instance
        if not self.builds:
            return self.obj
        return (await self._for_policy(sampler)).built

    async def _for_policy(self, sampler: PolicySampler) -> _Built:
        async with self._build_lock:
            for seen, built in self._built:
                if seen is sampler.sampler:
                    return built
            # a copy per policy: an in-place build for a newer policy never changes an older rollout's scorer
            source = copy.deepcopy(self.obj)
            made = await plugin_call(f"{type(source).__qualname__}.build", source.build, sampler)
            built = _Built(made if self.lists else (source if made is None else made))
            if not self.lists:
                _check_one(built.built)
            self._built.append((sampler.sampler, built))
            return built

    async def step_shared(self, scorer: Any, action: str) -> Any:
        """``step`` on the one shared object, one call at a time."""
        async with self._step_lock:
            return await plugin_call(f"{type(scorer).__qualname__}.step", scorer.step, action)

    def warn_once(self, key: str, message: str, **fields: Any) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning(message, env=self.env_id, **fields)

    def warn_invalid(self, names: list[str]) -> None:
        """Warn once per reward function that returned something that is not a finite number."""
        new = [n for n in names if n not in self._warned]
        if new:
            self._warned.update(new)
            log.warning("non-numeric reward counted as 0", env=self.env_id, functions=new)


def _mismatch(env_id: str, obj: Any) -> str:
    """What load_environment() returned, as the start of an error message."""
    found = [a for a in ("initial_observation", "step", "dataset", "rubric", "build") if getattr(obj, a, None) is not None]
    return f"environment {env_id!r}: load_environment() returned a {type(obj).__name__} with {', '.join(found) or 'none of them'}"


def _enumerate(obj: Any, mismatch: str) -> Any:
    """A builder's ``build()`` at load, with no policy, to learn its tasks: a list of instances or an object with a dataset."""
    try:
        made = run_to_completion(copy.deepcopy(obj).build(_NoPolicyYet()))
    except Exception as exc:  # noqa: BLE001 - reported with what minds was doing
        raise ConfigError(f"{mismatch}: build(sampling_client), called at load to list its tasks, failed: {type(exc).__name__}: {exc}") from None
    if isinstance(made, tuple):
        made = list(made)
    if isinstance(made, list):
        bad = [i for i, m in enumerate(made) if not callable(getattr(m, "initial_observation", None)) or not callable(getattr(m, "step", None))]
        if not made or bad:
            raise ConfigError(
                f"{mismatch}: build(sampling_client) returned a list of {len(made)} objects"
                + (f"; items {bad[:5]} lack initial_observation() or step()" if bad else "")
                + "; it must list environment instances with initial_observation() and step()"
            )
        return made
    if made is not None and getattr(made, "dataset", None) is not None:
        return made
    raise ConfigError(f"{mismatch}: nothing gives prompts (build() returned a {type(made).__name__}); {ACCEPTED}")


async def _drawn(task: Task, source: Any) -> tuple[Task, Any]:
    """``initial_observation()`` on ``source``: the task with its prompt and answer, and a copy of ``source`` after it."""
    observation = await plugin_call(f"{type(source).__qualname__}.initial_observation", source.initial_observation)
    if isinstance(observation, tuple):  # a duck-typed tinker-cookbook Env: (ModelInput, StopCondition)
        raise ConfigError(
            f"{task.id}: initial_observation() returned a tuple, as a tinker-cookbook Env does, but {type(source).__name__} "
            "does not subclass tinker_cookbook.rl.types.Env; subclass it to have minds play it token by token"
        )
    return attrs.evolve(task, prompt=observation, answer=getattr(source, "answer", None)), copy.deepcopy(source)


async def _build(instance: Any, sampler: PolicySampler) -> Any:
    built = await plugin_call(f"{type(instance).__qualname__}.build", instance.build, sampler)
    built = instance if built is None else built
    _check_one(built)
    return built


def _check_one(built: Any) -> None:
    if isinstance(built, (list, tuple)):
        raise TypeError(
            f"build(sampling_client) returned a {type(built).__name__} here, but the object gives its own prompts; "
            "return one environment object or None (a list only from an object with build() alone)"
        )


def _numeric(metrics: dict[str, Any]) -> dict[str, float]:
    """The step metrics that are numbers (seed environments also put labels there)."""
    return {k: float(v) for k, v in metrics.items() if as_reward(v) is not None}


class LooseEpisode:
    """One rollout of a loose environment."""

    def __init__(self, env: LooseEnvironment, task: Task, ctx: Context) -> None:
        self.env, self.task, self.ctx = env, task, ctx
        self.sampler = PolicySampler(ctx.sampler)
        self.instance: Any | None = None
        self.state: dict[str, Any] = {}

    async def initial_observation(self) -> Any:
        if self.env.lists:
            self.task, self.instance = await self.env.instance(self.task, self.sampler)
        elif self.env.draws:
            self.task, self.instance = await self.env.draw(self.task)
        return self.task.prompt

    async def step(self, action: str) -> StepResult:
        scorer = await self.env.scorer(self.instance, self.sampler)
        source = getattr(scorer, "rubric", None)
        if source is not None:
            return await self._score(as_rubric(source, f"environment {self.env.env_id!r}"), action)
        if not callable(getattr(scorer, "step", None)):
            raise TypeError(f"the object built by build(sampling_client), a {type(scorer).__name__}, has neither rubric nor step()")
        if self.instance is not None:
            result = as_step_result(await plugin_call(f"{type(scorer).__qualname__}.step", scorer.step, action))
        else:
            result = as_step_result(await self.env.step_shared(scorer, action))
        result.metrics = _numeric(result.metrics)
        if not result.done and self.instance is None:
            self.env.warn_once(
                "shared", "step() asked to continue, but every reply ends its episode on the one shared object of a "
                "dataset; give initial_observation() (one copy per rollout) for multi-turn episodes",
            )  # fmt: skip
        # The seeds scored one reply per prompt: only an own copy that sends messages continues.
        result.done = result.done or not result.messages or self.instance is None
        return result

    async def _score(self, rubric: Rubric, action: str) -> StepResult:
        task = self.task
        if task.answer is None:
            task = attrs.evolve(task, answer="")
        if self.task.answer is None and any("answer" in getattr(fn, "names", ()) for fn in rubric.funcs):
            self.env.warn_once(
                "answer", 'tasks without an `answer`: reward functions get answer=""; give the rows an `answer` '
                "(or set the instance's `answer` in initial_observation()) if they need one", task=self.task.id,
            )  # fmt: skip
        task = attrs.evolve(task, info={**task.info, "tinker_client": self.sampler, "tokenizer": self.ctx.tokenizer})
        prompt = prompt_messages(self.task.prompt)
        result = await score_completion(rubric, task, action, self.state, self.ctx, prompt)
        if INVALID_PARTS_METRIC in result.metrics:
            self.env.warn_invalid([n for n in rubric.names if f"reward/{n}" not in result.metrics])
        return result
