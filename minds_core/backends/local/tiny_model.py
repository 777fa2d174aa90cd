"""``minds-tiny``: a tiny Qwen3-style model built deterministically on this machine.

It is randomly initialised from a fixed seed (no download), with a byte-level
tokenizer (token id = byte value, so any text round-trips losslessly) plus the
ChatML specials ``<|endoftext|>`` (pad), ``<|im_start|>`` and ``<|im_end|>``
(eos). It is built once and cached under ``$MINDS_CACHE_DIR/models`` (default
``$XDG_CACHE_HOME/minds/models``, else ``~/.cache/minds/models``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

__all__ = ["DEFAULT_BASE_MODEL", "tiny_model_path"]

DEFAULT_BASE_MODEL = "minds-tiny"
_VERSIONED_NAME = "minds-tiny-v1"
_SEED = 20240611
_SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
_MAX_LENGTH = 8192
_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def cache_dir() -> Path:
    """Root of minds' cache: ``$MINDS_CACHE_DIR``, else ``$XDG_CACHE_HOME/minds``, else ``~/.cache/minds``."""
    if override := os.environ.get("MINDS_CACHE_DIR"):
        return Path(override)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "minds"


def tiny_model_path() -> Path:
    """The cached model directory, built first if missing (safe against concurrent builders)."""
    final = cache_dir() / "models" / _VERSIONED_NAME
    if (final / "config.json").is_file():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{_VERSIONED_NAME}.", dir=final.parent))
    try:
        _build(staging)
        os.chmod(staging, 0o755)
        os.rename(staging, final)
    except OSError:
        if not (final / "config.json").is_file():  # not just another builder winning the race
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return final


def _build(directory: Path) -> None:
    tokenizer = _tokenizer()
    model = Qwen3ForCausalLM(_config(tokenizer))
    _initialise(model)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)


def _tokenizer() -> PreTrainedTokenizerFast:
    byte_chars = _bytes_to_unicode()
    backend = Tokenizer(models.BPE(vocab={byte_chars[b]: b for b in range(256)}, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens(list(_SPECIAL_TOKENS))
    pad, _, eos = _SPECIAL_TOKENS
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token=eos,
        pad_token=pad,
        chat_template=_CHAT_TEMPLATE,
        model_max_length=_MAX_LENGTH,
    )


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's printable stand-in character for every byte (what ByteLevel expects)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    mapping = {b: chr(b) for b in printable}
    others = [b for b in range(256) if b not in mapping]
    mapping.update({b: chr(256 + i) for i, b in enumerate(others)})
    return mapping


def _config(tokenizer: PreTrainedTokenizerFast) -> Qwen3Config:
    return Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=192,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=_MAX_LENGTH,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )


@torch.no_grad()
def _initialise(model: Qwen3ForCausalLM) -> None:
    """Seeded init independent of torch's global RNG; a wide unembedding gives peaked next-token distributions."""
    generator = torch.Generator().manual_seed(_SEED)
    for name, param in sorted(model.named_parameters()):
        if param.ndim == 1:
            param.fill_(1.0)  # RMSNorm scales
        else:
            param.normal_(0.0, 0.25 if name.startswith("lm_head") else 0.02, generator=generator)
