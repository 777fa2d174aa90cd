"""Token choice on the device: the right distribution, seeded draws that ignore their batch, stops and limits."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from minds_core.backends.local.device_sampling import (
    Draws,
    RowSettings,
    row_key,
    uniforms,
)

VOCAB = 12


def settings(temperature: float = 1.0, top_k: int = -1, top_p: float = 1.0, seed: int = 0, sample: int = 0,
             stop_ids: tuple[int, ...] = (), limit: int = 1999) -> RowSettings:  # fmt: skip
    return RowSettings(temperature, top_k, top_p, row_key(seed, sample), stop_ids, limit)


def draws_of(logits: torch.Tensor, rows: list[RowSettings], slots: int | None = None) -> Draws:
    draws = Draws(slots or len(rows), logits.shape[-1], capacity=2000, stops=4, device=torch.device("cpu"))
    for slot, row in enumerate(rows):
        draws.join(torch.tensor([slot]), logits[slot], [row])
    return draws


def kinds(rows: list[RowSettings]) -> tuple[bool, bool, bool, bool]:
    truncates = any(r.temperature and (0 < r.top_k < VOCAB or r.top_p < 1) for r in rows)
    temperatures = {r.temperature for r in rows}
    return 0 in temperatures, bool(temperatures - {0}), bool(temperatures - {0, 1}), truncates


def frequencies(logits: torch.Tensor, rows: list[RowSettings], copies: int = 32, steps: int = 60) -> torch.Tensor:
    """How often each token is drawn per setting of ``rows`` (each with logits of its own), from ``copies`` rows
    (samples 0, 1, ...) of each over ``steps`` draws of unchanging logits."""
    many = [replace(row, key=row_key(seed, sample)) for seed, row in enumerate(rows) for sample in range(copies)]
    draws = draws_of(logits.repeat_interleave(copies, dim=0), many)
    for _ in range(steps):
        draws.draw(len(many), *kinds(rows))
    tokens = draws.out_tokens[:, :steps].reshape(len(rows), -1)
    return torch.stack([torch.bincount(row, minlength=draws.vocab) for row in tokens]).double() / tokens.shape[1]


def test_uniforms_are_uniform_reproducible_and_differ_per_key_and_counter() -> None:
    keys = torch.tensor([row_key(s, i) for s in range(50) for i in range(4)])
    counters = torch.arange(200)
    u = uniforms(keys[:, None], counters[None])
    assert torch.equal(u, uniforms(keys[:, None], counters[None]))
    assert 0 < float(u.min()) and float(u.max()) < 1
    assert abs(float(u.mean()) - 0.5) < 0.005 and abs(float(u.var()) - 1 / 12) < 0.002
    assert len(set(u.flatten().tolist())) == u.numel()  # 40,000 draws, no repeats
    histogram = torch.histc(u.float(), bins=10, min=0, max=1) / u.numel()
    assert float((histogram - 0.1).abs().max()) < 0.005


def test_draws_follow_temperature_top_k_and_top_p() -> None:
    torch.manual_seed(0)
    logits = torch.randn(4, VOCAB) * 2
    rows = [settings(1.0, seed=1), settings(0.5, seed=2), settings(1.0, top_k=3, seed=3), settings(0.8, top_p=0.6, seed=4)]
    got = frequencies(logits, rows)
    want = torch.stack([logits[0].softmax(-1), (logits[1] / 0.5).softmax(-1)]).double()
    top3 = logits[2].topk(3).indices
    truncated = torch.full((VOCAB,), float("-inf"))
    truncated[top3] = logits[2, top3]
    scaled = logits[3] / 0.8
    ordered, order = scaled.sort(descending=True)
    probs = ordered.softmax(-1)
    keep = order[(probs.cumsum(-1) - probs) < 0.6]
    nucleus = torch.full((VOCAB,), float("-inf"))
    nucleus[keep] = scaled[keep]
    want = torch.cat([want, truncated.softmax(-1)[None].double(), nucleus.softmax(-1)[None].double()])
    assert float((got - want).abs().max()) < 0.05, (got - want).abs().max()
    assert float(got[2][want[2] == 0].sum()) == 0 and float(got[3][want[3] == 0].sum()) == 0  # never outside


def test_greedy_rows_take_the_argmax_beside_tempered_rows_and_log_probs_are_at_temperature_one() -> None:
    torch.manual_seed(1)
    logits = torch.randn(3, VOCAB) * 3
    rows = [settings(0.0), settings(0.3, seed=5), settings(0.0)]
    draws = draws_of(logits, rows)
    draws.draw(3, *kinds(rows))
    chosen = draws.out_tokens[:, 0]
    assert chosen[0] == logits[0].argmax() and chosen[2] == logits[2].argmax()
    expected = torch.log_softmax(logits, -1).gather(1, chosen[:, None])[:, 0]
    torch.testing.assert_close(draws.out_logprobs[:, 0], expected)
    draws.want_top(2)
    draws.record_top(3, 2)
    top = torch.log_softmax(logits, -1).topk(2)
    assert torch.equal(draws.top_ids[:, 0], top.indices)
    torch.testing.assert_close(draws.top_logprobs[:, 0], top.values)


def test_a_seeded_row_draws_the_same_tokens_in_any_slot_beside_any_rows() -> None:
    torch.manual_seed(2)
    logits = torch.randn(VOCAB).expand(4, VOCAB)
    alone = draws_of(logits[:1], [settings(seed=7, sample=1)])
    crowded = draws_of(logits, [settings(seed=3), settings(0.0), settings(seed=9, top_k=2), settings(seed=7, sample=1)])
    for _ in range(40):
        alone.draw(1, False, True, False, False)
        crowded.draw(4, True, True, False, True)
    assert torch.equal(alone.out_tokens[0, :40], crowded.out_tokens[3, :40])
    other = draws_of(logits[:1], [settings(seed=7, sample=2)])
    for _ in range(40):
        other.draw(1, False, True, False, False)
    assert not torch.equal(other.out_tokens[0, :40], alone.out_tokens[0, :40])  # another sample: another stream


def test_stop_tokens_and_limits_end_rows_which_then_count_nothing() -> None:
    logits = torch.zeros(3, VOCAB)
    logits[:, 5] = 10.0  # greedy: always token 5
    rows = [settings(0.0, stop_ids=(5,)), settings(0.0, limit=3), settings(0.0, stop_ids=(4, 7))]
    draws = draws_of(logits, rows, slots=4)
    for _ in range(5):
        draws.draw(4, True, False, False, False)
    assert draws.done.tolist() == [True, True, False, True]  # the free slot stays done
    assert draws.count.tolist() == [1, 3, 5, 0]
    assert draws.out_tokens[1, :3].tolist() == [5, 5, 5]


@pytest.mark.parametrize("sources", [[3], [2, 3]])
def test_rows_move_and_grow_with_their_state(sources: list[int]) -> None:
    torch.manual_seed(3)
    logits = torch.randn(4, VOCAB)
    rows = [settings(seed=i, stop_ids=(i,), limit=10 + i) for i in range(4)]
    draws = draws_of(logits, rows)
    draws.draw(4, False, True, False, False)
    before = [t.clone() for t in draws._tensors()]
    targets = list(range(len(sources)))
    draws.move(torch.tensor(sources), torch.tensor(targets))
    for tensor, old in zip(draws._tensors(), before, strict=True):
        assert torch.equal(tensor[targets], old[sources])
    grown = Draws(8, VOCAB, capacity=3000, stops=8, device=torch.device("cpu"))
    grown.copy_from(draws)
    assert torch.equal(grown.logits[:4], draws.logits) and torch.equal(grown.stop_ids[:4, :4], draws.stop_ids)
    assert grown.done[4:].all() and torch.equal(grown.out_tokens[:4, :2000], draws.out_tokens)
