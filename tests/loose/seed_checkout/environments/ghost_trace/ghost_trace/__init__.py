"""ghost_trace: write five integers that make another copy of the model say a word.

A ``dataset`` of ``question`` rows (the target word is each row's ``answer``,
so the task's answer travels with the task) scored by a ``rubric`` whose
reward asks the CURRENT policy, through ``info["tinker_client"]`` and
``info["tokenizer"]``, how likely the word is after the numbers.
"""

from ghost_trace.env import INVALID_PENALTY, LOGPROB_OFFSET, load_environment, parse_numbers, probe_text

__all__ = ["INVALID_PENALTY", "LOGPROB_OFFSET", "load_environment", "parse_numbers", "probe_text"]
