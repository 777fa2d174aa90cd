"""What playing episodes yields: a ``Rollout`` (one episode), a ``Group`` (the rollouts of one task) and why a
group is left out of training (``Dropped``), and the settings episodes play under (``EpisodeSettings``)."""

from __future__ import annotations

import enum
from typing import Any

import attrs
import tinker

from minds_core.config import RolloutConfig
from minds_core.contract.environment import Task
from minds_core.envs.render import Renderer
from minds_core.episodes.conversation import Conversation


@attrs.define
class Rollout:
    """One finished (or failed) episode."""

    conversation: Conversation
    reward: float = 0.0
    metrics: dict[str, float] = attrs.field(factory=dict)
    error: str | None = None
    timed_out: bool = False
    invalid_reward: bool = False
    attempts: int = 1
    #: Per token, the KL reference model's log-probability (None where it has none); set when
    #: ``trainer.kl_penalty > 0`` by the step's scoring (``kl_reference.ReferenceScorer``).
    reference_logprobs: list[float | None] | None = None
    #: Per token, the distillation teacher's top-k ``(token ids, log-probs)`` (None where it has none); set when
    #: the loss reads the teacher's top-k by the step's scoring (``distill_teacher.TeacherScorer``).
    teacher_topk: list[Any] | None = None
    #: The advantage the rollout was trained with, set by ``data_processing.assign_advantages``;
    #: None when it was not part of training (it failed, or its group was dropped) and in evaluations.
    advantage: float | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


class Dropped(enum.StrEnum):
    """Why a group was left out of training; str-valued, so JSON holds the plain word."""

    #: more failed rollouts than ``max_failing_rollouts``, or none succeeded
    FAILURES = "failures"
    #: all rewards equal (``rollout.drop_constant_reward_groups``)
    CONSTANT = "constant"


@attrs.define
class Group:
    """The rollouts of one task; the unit advantages are computed over."""

    env_name: str
    task: Task
    rollouts: list[Rollout]
    #: why the group is not trained on; None: it is (a plain "failures"/"constant" is taken as its Dropped)
    dropped: Dropped | None = attrs.field(default=None, converter=attrs.converters.optional(Dropped))

    @property
    def ok_rollouts(self) -> list[Rollout]:
        return [r for r in self.rollouts if r.ok]

    @property
    def failures(self) -> int:
        return sum(not r.ok for r in self.rollouts)


@attrs.frozen
class EpisodeSettings:
    """What the rollout runner needs beyond the environment."""

    renderer: Renderer
    params: tinker.types.SamplingParams
    rollout: RolloutConfig
