"""Model-aware rewards: build(sampling_client) returns a scorer that asks the CURRENT policy."""

import tinker
import verifiers as vf

#: Every sampling client build() received, in order (the tests read it).
BUILT_WITH: list = []


class PolicyScorer:
    """Rewards a reply by the policy's mean log-probability of the expected answer after it."""

    def __init__(self, sampling_client) -> None:
        self.sampling_client = sampling_client
        self.rubric = vf.Rubric(funcs=[self.answer_logprob, self.keeps_talking], weights=[1.0, 0.0])

    async def answer_logprob(self, completion: str, answer: str) -> float:
        tokenizer = self.sampling_client.get_tokenizer()
        context = tokenizer.encode(f"{completion}\nAnswer:", add_special_tokens=False)
        target = tokenizer.encode(f" {answer}", add_special_tokens=False)
        logprobs = await self.sampling_client.compute_logprobs_async(tinker.types.ModelInput.from_ints(context + target))
        return sum(logprobs[len(context):]) / len(target)

    async def keeps_talking(self, completion: str) -> float:
        """A zero-weight metric: does the policy go on after the reply, rather than stop at once?"""
        tokenizer = self.sampling_client.get_tokenizer()
        prompt = tinker.types.ModelInput.from_ints(tokenizer.encode(completion or " ", add_special_tokens=False))
        response = await self.sampling_client.sample_async(prompt, 1, tinker.types.SamplingParams(max_tokens=2, seed=0))
        return float(response.sequences[0].stop_reason == "length")


class SelfKnowledge:
    def __init__(self) -> None:
        self.dataset = [{"question": f"Count to {n}.", "answer": " ".join(str(i) for i in range(1, n + 1))} for n in (2, 3, 4)]

    def build(self, sampling_client) -> PolicyScorer:
        BUILT_WITH.append(sampling_client)
        return PolicyScorer(sampling_client)


def load_environment() -> SelfKnowledge:
    return SelfKnowledge()
