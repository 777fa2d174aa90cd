"""minds-small, the embedded default model: made from a file that ships with minds, from text the project makes up."""

from __future__ import annotations

import re

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from minds_core.backends.local.model.builtin_models import DEFAULT_BASE_MODEL, builtin_model_path
from minds_core.backends.local.model.small_model import SMALL_MODEL, SMALL_SIZE, WEIGHTS_FILE, small_model_path
from minds_core.backends.local.model.tiny_model import byte_tokenizer, qwen3_config
from minds_core.backends.local.training.primer_corpus import corpus, render_chat
from minds_core.backends.local.training.primer_training import train_small_model


def test_the_default_model_is_minds_small_and_its_weights_ship_with_minds() -> None:
    assert DEFAULT_BASE_MODEL == SMALL_MODEL == "minds-small"
    assert WEIGHTS_FILE.is_file() and WEIGHTS_FILE.stat().st_size < 4 << 20  # a few MB at most
    weights = load_file(WEIGHTS_FILE)
    expected = {name: tuple(p.shape) for name, p in _model().state_dict().items()}
    assert {name: tuple(t.shape) for name, t in weights.items()} == expected  # the shape SMALL_SIZE describes


def _model() -> torch.nn.Module:
    from transformers import Qwen3ForCausalLM

    return Qwen3ForCausalLM(qwen3_config(byte_tokenizer(), SMALL_SIZE))


def test_its_directory_is_written_to_the_cache_once_under_the_weights_digest(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("MINDS_CACHE_DIR", str(tmp_path))
    path = small_model_path()
    assert path.parent == tmp_path / "models" and re.fullmatch(r"minds-small-[0-9a-f]{12}", path.name)
    assert builtin_model_path("minds-small") == path and builtin_model_path("no-such") is None
    model = AutoModelForCausalLM.from_pretrained(path)
    shipped = load_file(WEIGHTS_FILE)
    assert all(torch.equal(model.state_dict()[name].to(tensor.dtype), tensor) for name, tensor in shipped.items())


def test_the_corpus_is_the_same_for_a_seed_and_rendered_as_the_models_chat_template_renders() -> None:
    assert corpus(3, 40) == corpus(3, 40) and corpus(3, 40) != corpus(4, 40)
    chats = [d for d in corpus(5, 200) if d.startswith("<|im_start|>")]
    plain = [d for d in corpus(5, 200) if not d.startswith("<|im_start|>")]
    assert chats and plain  # conversations and plain text both
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a fruit."},
                {"role": "assistant", "content": "lemon"}]  # fmt: skip
    assert render_chat(messages) == byte_tokenizer().apply_chat_template(messages, tokenize=False)


@pytest.mark.slow  # a third of a CPU-second or more of the local engine's numerics: the whole suite runs it
def test_training_is_deterministic_given_the_seed_and_lowers_the_loss() -> None:
    losses: list[float] = []
    first, _ = train_small_model(seed=1, steps=4, batch=2, length=32, progress=lambda step, loss: losses.append(loss))
    second, _ = train_small_model(seed=1, steps=4, batch=2, length=32)
    assert all(torch.equal(a, b) for a, b in zip(first.state_dict().values(), second.state_dict().values()))
    assert len(losses) == 4 and losses[-1] < losses[0]


@pytest.mark.slow
def test_it_writes_whole_numbers_words_and_the_format_a_prompt_asks_for() -> None:
    """What the first run needs: replies that differ, often in the shape a seed environment asks for, never byte noise."""
    path = small_model_path()
    tokenizer, model = AutoTokenizer.from_pretrained(path), AutoModelForCausalLM.from_pretrained(path)
    torch.manual_seed(0)

    def replies(messages: list[dict[str, str]]) -> list[str]:
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)["input_ids"]
        out = model.generate(ids, do_sample=True, max_new_tokens=48, num_return_sequences=16, pad_token_id=tokenizer.pad_token_id)
        return [tokenizer.decode(row[ids.shape[1]:], skip_special_tokens=True) for row in out]

    numbers = replies([{"role": "user", "content": "Write exactly 5 whole numbers between 0 and 999, separated by commas."}])
    assert sum(len(re.findall(r"\d+", r)) >= 5 for r in numbers) >= 8, numbers
    # the two-line format self_prediction asks for: a quarter of the replies at least (a random model: none)
    system = "Solve it, then write exactly two lines:\nFINAL ANSWER: <the number>\nCONFIDENCE: <a probability between 0 and 1>"
    formatted = replies([{"role": "system", "content": system},
                         {"role": "user", "content": "What is 12 + 30?"}])  # fmt: skip
    assert sum(bool(re.search(r"FINAL ANSWER: -?\d+\nCONFIDENCE: [\d.]+", r)) for r in formatted) >= 4, formatted
    assert len(set(numbers)) > 8 and all(r.isprintable() or "\n" in r for r in numbers + formatted)
