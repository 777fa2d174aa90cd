"""A verifiers SingleTurnEnv whose rubric is a RubricGroup (the shape newer verifiers releases build).

The group's own ``funcs`` is empty; its member rubrics hold the functions. The
style rubric's zero-weight functions are monitors: metrics, not reward. They
read ``info["tokenizer"]`` and ``info["tinker_client"]`` as the seed's trainer
supplied them. ``brevity`` has positional-only parameters and an unused ``_``.
"""

import verifiers as vf
from datasets import Dataset
from environments.letter_bank import LETTERS


def names_word(parser: vf.Parser, completion: vf.Messages, answer: str) -> float:
    """The parsed reply (the last assistant message) contains the word."""
    return float(answer in (parser.parse_answer(completion) or "").lower())


def brevity(prompt, completion, _, /, **__) -> float:
    """1 for an empty reply, falling by 0.1 per word, never below 0."""
    return max(0.0, 1.0 - 0.1 * len(str(completion[-1]["content"] or "").split()))


def reply_tokens(completion: vf.Messages, info: dict) -> float:
    return float(len(info["tokenizer"].encode(str(completion[-1]["content"] or ""), add_special_tokens=False)))


async def policy_logprob(completion: vf.Messages, info: dict) -> float:
    """The mean log-probability of the reply under the rollout's own policy (a monitor)."""
    import tinker

    client = info["tinker_client"]
    tokens = client.tokenizer.encode("Reply: " + str(completion[-1]["content"] or ""), add_special_tokens=False)
    logprobs = await client.compute_logprobs_async(tinker.types.ModelInput.from_ints(tokens))
    return sum(logprobs[1:]) / max(1, len(tokens) - 1)


def load_environment(count: int = 4) -> vf.SingleTurnEnv:
    rows = [{"question": f"Name a thing that starts with '{letter}'.", "answer": word} for letter, word in LETTERS[:count]]
    parser = vf.Parser()
    rubric = vf.RubricGroup(
        rubrics=[
            vf.Rubric(funcs=[names_word], weights=[1.0], parser=parser),
            vf.Rubric(funcs=[brevity, reply_tokens, policy_logprob], weights=[0.5, 0.0, 0.0]),
        ]
    )
    return vf.SingleTurnEnv(dataset=Dataset.from_list(rows), system_prompt="Answer with one word.", parser=parser, rubric=rubric)
