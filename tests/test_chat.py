"""``minds chat --seed``: each reply of a conversation samples with its own seed, and a replay is repeatable."""

from __future__ import annotations

import io

import pytest
import tinker

from minds_core.evaluation.chat import ChatModel, chat_loop
from minds_core.inference.sampling import TURN_SEED_STRIDE

pytest.importorskip("minds_core.backends.local", reason="the local backend (torch + peft) is not installed")

from minds_core.backends.local import TINY_MODEL, ServiceClient


class SeedRecorder:
    """The real sampler, noting each request's seed."""

    def __init__(self, sampler) -> None:
        self.sampler = sampler
        self.seeds: list[int | None] = []

    def sample(self, prompt, num_samples, sampling_params):
        self.seeds.append(sampling_params.seed)
        return self.sampler.sample(prompt, num_samples, sampling_params)

    def get_tokenizer(self):
        return self.sampler.get_tokenizer()


def test_each_reply_of_a_seeded_chat_samples_with_its_turns_seed(tmp_path):
    # one seed for every reply drew the same noise for every turn: replies to turns that end alike came out alike
    with ServiceClient(checkpoint_root=tmp_path) as service:
        recorder = SeedRecorder(service.create_sampling_client(base_model=TINY_MODEL).result())
        params = tinker.types.SamplingParams(max_tokens=6, temperature=1.0, seed=7)
        model = ChatModel.create(recorder, TINY_MODEL, {}, params)
        out = io.StringIO()
        assert chat_loop(model, None, io.StringIO("Again.\nAgain.\n/reset\nAgain.\nAgain.\n"), out) == 4
    # the rollout's rule (turn_seed): the first reply keeps the seed, each further one adds the stride
    assert recorder.seeds == [7, 7 + TURN_SEED_STRIDE] * 2
    replies = out.getvalue().splitlines()
    assert replies[:2] == replies[2:]  # after /reset the same conversation comes back word for word
    assert params.seed == 7  # the settings are not changed
