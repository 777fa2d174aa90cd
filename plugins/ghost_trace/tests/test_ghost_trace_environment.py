"""The ghost_trace task set: deterministic, word carried as the answer, disjoint splits."""

import pytest

from minds_core.base.errors import ConfigError
from minds_ghost_trace.environment import REWARD_NAME, load_environment
from minds_ghost_trace.words import WORDS


def test_word_bank_is_a_few_hundred_unique_lower_case_nouns() -> None:
    assert 300 <= len(WORDS) <= 500
    assert len(set(WORDS)) == len(WORDS)
    assert all(word.isalpha() and word.islower() for word in WORDS)


def test_every_task_carries_its_word_as_the_answer() -> None:
    tasks = load_environment(num_examples=50, seed=3).tasks("train")
    assert len(tasks) == 50
    for task in tasks:
        assert task.answer in WORDS
        assert f"Secret word: {task.answer}\n" in task.prompt


def test_tasks_are_deterministic_per_seed() -> None:
    first = [t.answer for t in load_environment(num_examples=20, seed=5).tasks("train")]
    again = [t.answer for t in load_environment(num_examples=20, seed=5).tasks("train")]
    other = [t.answer for t in load_environment(num_examples=20, seed=6).tasks("train")]
    assert first == again
    assert first != other


def test_train_and_test_words_are_disjoint_and_cycle_past_the_bank() -> None:
    env = load_environment(num_examples=600, seed=0)
    train = {t.answer for t in env.tasks("train")}
    test = {t.answer for t in env.tasks("test")}
    assert len(env.tasks("train")) == 600
    assert train.isdisjoint(test)
    assert train | test == set(WORDS)


def test_unknown_split_names_the_splits() -> None:
    with pytest.raises(KeyError, match="train, test"):
        load_environment(num_examples=1).tasks("validation")


@pytest.mark.parametrize(
    ("args", "where"),
    [({"num_examples": 0}, "num_examples"), ({"num_examples": 10**7}, "num_examples"), ({"seed": "x"}, "seed"),
     ({"num_examples": True}, "num_examples")],
)  # fmt: skip
def test_bad_args_name_the_key(args: dict, where: str) -> None:
    with pytest.raises(ConfigError, match=rf"env\.args\.{where} = .*: must be an integer"):
        load_environment(**args)


def test_rubric_uses_the_registered_reward() -> None:
    env = load_environment(num_examples=1)
    assert env.rubric.names == [REWARD_NAME]
    assert env.rubric.weights == [1.0]
