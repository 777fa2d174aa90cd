"""Losses declare the datum inputs they read beyond the base ones; every datum of the run carries them."""

from __future__ import annotations

import pytest

from minds_core import CustomLoss
from minds_core.base.errors import ConfigError
from minds_core.config import load_config
from minds_core.contract.environment import Task
from minds_core.episodes.conversation import Conversation
from minds_core.episodes.groups import Group, Rollout
from minds_core.rl.data_processing import ProcessingSettings, process_batch
from minds_core.rl.losses import loss_inputs, sequence_mean_reinforce
from minds_core.training.datums import BASE_INPUTS


def _groups() -> list[Group]:
    rollouts = []
    for reward in (1.0, 0.0):
        conv = Conversation(renderer=None, sampler=None, params=None, max_total_tokens=64)
        conv.tokens, conv.sampled, conv.logprobs = [5, 6, 7, 8, 9], [False, False, True, True, True], [0.0, 0.0, -1.0, -2.0, -0.5]
        rollouts.append(Rollout(conv, reward=reward))
    return [Group("env", Task(prompt="p"), rollouts)]


def _inputs(loss: str | CustomLoss) -> list[set[str]]:
    config = load_config(None, ["env.id=x"])
    settings = ProcessingSettings.from_config(config, lambda rewards: [r - 0.5 for r in rewards], loss)
    return [set(datum.loss_fn_inputs) for datum in process_batch(_groups(), settings).datums]


def test_gspo_gets_its_sequence_ratio_mask_and_the_others_only_the_base_inputs():
    assert _inputs("gspo") == [{*BASE_INPUTS, "sequence_ratio_mask"}] * 2
    assert _inputs("importance_sampling") == [set(BASE_INPUTS)] * 2
    assert _inputs("a_plugin_service_loss") == [set(BASE_INPUTS)] * 2  # a name minds does not know reads none


def test_a_custom_loss_declares_the_inputs_it_reads():
    declared = CustomLoss(sequence_mean_reinforce, inputs=["sequence_ratio_mask"])
    assert declared.inputs == ("sequence_ratio_mask",)
    assert _inputs(declared) == [{*BASE_INPUTS, "sequence_ratio_mask"}] * 2
    assert _inputs(CustomLoss(sequence_mean_reinforce)) == [set(BASE_INPUTS)] * 2


def test_the_mask_marks_the_sampled_targets():
    config = load_config(None, ["env.id=x"])
    settings = ProcessingSettings.from_config(config, lambda rewards: [r - 0.5 for r in rewards], "gspo")
    datum = process_batch(_groups(), settings).datums[0]
    assert datum.loss_fn_inputs["sequence_ratio_mask"].data == [0.0, 1.0, 1.0, 1.0]


def test_an_input_minds_cannot_make_is_a_config_error_naming_the_key():
    with pytest.raises(ConfigError, match=r"trainer.loss_fn: the loss reads datum inputs minds cannot make: values; a loss may ask for: sequence_ratio_mask"):
        loss_inputs(CustomLoss(sequence_mean_reinforce, inputs=("values",)))
