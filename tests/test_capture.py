"""Capture: calls attributed by key, refused after their episode or past max_calls, and turned into trajectories."""

from __future__ import annotations

from typing import Any

import pytest

from minds_core.inference.capture import Capture, TokenSequence, trajectory
from minds_core.inference.errors import ApiError
from minds_core.inference.sampling import Completion, Policy, SampledCall


def call(prompt: list[int], *completions: list[int]) -> SampledCall:
    done = tuple(Completion(tuple(c), tuple(-0.1 * (i + 1) for i in range(len(c))), None, "", "stop") for c in completions)
    return SampledCall(tuple(prompt), done, 3, "policy")


def test_calls_that_extend_each_other_are_one_masked_sequence() -> None:
    first = call([1, 2, 3], [10, 11])
    second = call([1, 2, 3, 10, 11, 4, 5], [12])  # the previous prompt and completion, then a tool's reply
    [sequence] = trajectory([first, second])
    assert sequence.tokens == (1, 2, 3, 10, 11, 4, 5, 12)
    assert sequence.sampled == (False, False, False, True, True, False, False, True)
    assert sequence.logprobs == (0.0, 0.0, 0.0, -0.1, -0.2, 0.0, 0.0, -0.1)


def test_a_call_that_rewrites_earlier_turns_starts_its_own_sequence() -> None:
    first = call([1, 2, 3], [10, 11])
    rewritten = call([1, 2, 3, 99, 4], [12])  # the template dropped the reply's thinking: not an extension
    third = call([1, 2, 3, 99, 4, 12, 6], [13])
    sequences = trajectory([first, rewritten, third])
    assert [s.tokens for s in sequences] == [(1, 2, 3, 10, 11), (1, 2, 3, 99, 4, 12, 6, 13)]
    assert sequences[1].sampled == (False,) * 5 + (True, False, True)


def test_a_call_of_several_completions_gives_one_sequence_each() -> None:
    sequences = trajectory([call([1, 2], [7], [8, 9])])
    assert [s.tokens for s in sequences] == [(1, 2, 7), (1, 2, 8, 9)]
    assert sequences[1].sampled == (False, False, True, True)


def policy() -> Policy:
    return Policy(sampler=None, renderer=None, name="policy", version=5)  # type: ignore[arg-type]


def test_each_key_answers_with_its_episode_and_is_refused_once_it_ended() -> None:
    capture = Capture()
    one, two = capture.open(policy(), 10), capture.open(policy(), 10)
    assert one.key != two.key and len(one.key) > 20
    answered = capture.policy("gpt-4o", one.key)
    assert answered.name == "gpt-4o" and answered.version == 5  # whatever model the client names
    capture.record(one.key, call([1], [2]))
    capture.record(two.key, call([3], [4]))
    assert capture.close(one) == [call([1], [2])] and two.calls == [call([3], [4])]
    assert not capture.knows(one.key) and capture.late_calls == 1
    with pytest.raises(ApiError) as late:
        capture.policy("any", one.key)
    assert late.value.status == 401
    capture.record(one.key, call([5], [6]))  # a call that finished after its episode ended is not kept
    assert capture.late_calls == 2 and one.calls == [call([1], [2])]
    with pytest.raises(ApiError):
        capture.policy("any", "a-guessed-key")


def test_calls_past_max_calls_are_refused_and_flag_the_episode() -> None:
    capture = Capture()
    episode = capture.open(policy(), 2)
    for _ in range(2):
        capture.policy("m", episode.key)
        capture.record(episode.key, call([1], [2]))
    with pytest.raises(ApiError) as refused:
        capture.policy("m", episode.key)
    assert refused.value.status == 429 and episode.flooded


def test_a_captured_rollout_trains_every_sequence_with_its_advantage() -> None:
    from minds_core.contract.environment import Task
    from minds_core.episodes.conversation import Conversation
    from minds_core.episodes.groups import Group, Rollout
    from minds_core.rl.data_processing import ProcessingSettings, process_batch

    def rollout(sequences: list[TokenSequence], reward: float) -> Rollout:
        conversation = Conversation(renderer=None, sampler=None, params=None, max_total_tokens=100)  # type: ignore[arg-type]
        conversation.adopt(sequences, ["stop"] * len(sequences), ["r"] * len(sequences))
        return Rollout(conversation, reward)

    split = trajectory([call([1, 2], [3, 4]), call([1, 9], [5])])
    linear = trajectory([call([1, 2], [3, 4])])
    group = Group("harness", Task("p"), [rollout(split, 1.0), rollout(linear, 0.0)])
    settings = ProcessingSettings(estimator=lambda rewards: [r - sum(rewards) / len(rewards) for r in rewards])
    datums = process_batch([group], settings).datums
    assert len(datums) == 3  # the split rollout's two sequences, the linear one's one
    inputs: list[dict[str, Any]] = [{k: v.data for k, v in d.loss_fn_inputs.items()} for d in datums]
    assert [d.model_input.to_ints() + [i["target_tokens"][-1]] for d, i in zip(datums, inputs)] == [
        [1, 2, 3, 4],
        [1, 9, 5],
        [1, 2, 3, 4],
    ]
    assert inputs[0]["advantages"] == [0.0, 0.5, 0.5] and inputs[1]["advantages"] == [0.0, 0.5]
    assert inputs[2]["advantages"] == [0.0, -0.5, -0.5]
    assert inputs[0]["logprobs"] == pytest.approx([0.0, -0.1, -0.2])


def test_an_unseeded_call_takes_its_turns_seed() -> None:
    capture = Capture()
    episode = capture.open(policy(), 10, seeds=lambda n: 1000 + n)
    assert capture.policy("m", episode.key).seed == 1000
    capture.record(episode.key, call([1], [2]))
    assert capture.policy("m", episode.key).seed == 1001
    assert capture.policy("m", capture.open(policy(), 10).key).seed is None  # an unseeded run's episode
