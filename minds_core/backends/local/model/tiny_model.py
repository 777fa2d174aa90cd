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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

from minds_core.backends.builtin_folders import builtin_folder

__all__ = ["TINY_MODEL", "tiny_model_path"]

TINY_MODEL = "minds-tiny"
_SEED = 20240611
_SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
_MAX_LENGTH = 8192
_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def tiny_model_path() -> Path:
    """The cached model directory, built first if missing (safe against concurrent builders)."""
    return cached_model(builtin_folder(TINY_MODEL), _build)


def cached_model(final: Path, build: Callable[[Path], None]) -> Path:
    """The model folder ``final`` (``builtin_folder``'s), made by ``build(staging)`` first if missing (safe against races)."""
    if (final / "config.json").is_file():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    try:
        build(staging)
        os.chmod(staging, 0o755)
        os.rename(staging, final)
    except OSError:
        if not (final / "config.json").is_file():  # not just another builder winning the race
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return final


def _build(directory: Path) -> None:
    tokenizer = byte_tokenizer()
    model = Qwen3ForCausalLM(qwen3_config(tokenizer, TINY_SIZE))
    _initialise(model)
    save_model(model, tokenizer, directory)


def save_model(model: Qwen3ForCausalLM, tokenizer: PreTrainedTokenizerFast, directory: Path) -> None:
    """Write ``model`` and ``tokenizer`` as a transformers model directory, ending samples at ``<|im_end|>``."""
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)


def byte_tokenizer() -> PreTrainedTokenizerFast:
    """Token id = byte value, then the three ChatML specials; the ChatML chat template."""
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


@dataclass(frozen=True)
class ModelSize:
    """The shape of a built-in Qwen3-style model."""

    hidden: int  #: width of the residual stream
    intermediate: int  #: width of each MLP
    layers: int  #: decoder layers
    heads: int  #: attention heads (query)
    kv_heads: int  #: key/value heads (grouped-query attention)
    head_dim: int  #: width of one head


#: ``minds-tiny``: about 0.1M parameters, random.
TINY_SIZE = ModelSize(hidden=64, intermediate=192, layers=2, heads=4, kv_heads=2, head_dim=16)


def qwen3_config(tokenizer: PreTrainedTokenizerFast, size: ModelSize) -> Qwen3Config:
    """A Qwen3 config of ``size`` over the byte tokenizer (untied embeddings, 8192 positions)."""
    return Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=size.hidden,
        intermediate_size=size.intermediate,
        num_hidden_layers=size.layers,
        num_attention_heads=size.heads,
        num_key_value_heads=size.kv_heads,
        head_dim=size.head_dim,
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
