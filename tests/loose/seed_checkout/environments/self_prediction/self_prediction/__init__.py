"""self_prediction: answer an arithmetic question, then say how sure you are.

A ``dataset`` whose ``prompt`` rows are chat messages (a system prompt, one
worked example, the question), scored by a ``rubric`` of three weighted
functions: format (0.2), accuracy (0.5) and calibration (0.3).
"""

from self_prediction.env import SYSTEM_PROMPT, load_environment
from self_prediction.parsing import Parsed, is_correct, parse_reply

__all__ = ["SYSTEM_PROMPT", "Parsed", "is_correct", "load_environment", "parse_reply"]
