"""``minds-small``: the embedded default model, a small byte-level Qwen3 that has read a little made-up text.

``minds-tiny`` is random: it writes byte noise, so every rollout of a group earns the same reward and a first
run trains nothing. ``minds-small`` has the same tokenizer and chat template, a little more width and depth
(about 0.8M parameters), and full weights trained on ``primer_corpus`` (words, integers, sums, chat turns that
follow a stated format). It writes whole words and numbers and usually, not always, the shape a prompt asks
for: rewards differ between rollouts from the first step, and RL has something to sharpen.

The weights ship with minds (``minds-small.safetensors`` in the local backend's folder, under 2 MB) and are made by
``python -m minds_core.backends.local.training.primer_training`` (deterministic given ``--seed`` on one machine). At
first use the model directory (config, tokenizer, weights) is written to the cache beside ``minds-tiny``'s,
under a name that carries the weights' digest, so new weights never meet an old cache.
"""

from __future__ import annotations

from pathlib import Path

from safetensors.torch import load_file
from transformers import Qwen3ForCausalLM

from minds_core.backends.builtin_folders import SMALL_WEIGHTS_FILE as WEIGHTS_FILE
from minds_core.backends.builtin_folders import builtin_folder

from .tiny_model import ModelSize, byte_tokenizer, cached_model, qwen3_config, save_model

__all__ = ["SMALL_MODEL", "SMALL_SIZE", "WEIGHTS_FILE", "small_model_path"]

SMALL_MODEL = "minds-small"
#: About 0.8M parameters: wide enough to learn words and formats in minutes on a CPU, fast to sample.
SMALL_SIZE = ModelSize(hidden=128, intermediate=384, layers=4, heads=4, kv_heads=2, head_dim=32)


def small_model_path() -> Path:
    """The cached model directory, written from the shipped weights first if missing."""
    if not WEIGHTS_FILE.is_file():
        raise FileNotFoundError(
            f"{WEIGHTS_FILE} is missing (it ships with minds-core); rebuild it with "
            "`python -m minds_core.backends.local.training.primer_training`, or reinstall minds-core"
        )
    return cached_model(builtin_folder(SMALL_MODEL), _write_from_weights)


def _write_from_weights(directory: Path) -> None:
    tokenizer = byte_tokenizer()
    model = Qwen3ForCausalLM(qwen3_config(tokenizer, SMALL_SIZE))
    model.load_state_dict(load_file(WEIGHTS_FILE), strict=True)
    save_model(model, tokenizer, directory)
