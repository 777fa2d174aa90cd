"""Token choice on the device: the right distribution, seeded draws that ignore their batch, stops and limits."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from minds_core.backends.local.model.accelerator import accelerator_for
from minds_core.backends.local.sampling import device_sampling
from minds_core.backends.local.sampling.cuda_graphs import StepGraphs
from minds_core.backends.local.sampling.device_sampling import (
    Draws,
    RowSettings,
    row_key,
    uniforms,
)

VOCAB = 12


def settings(temperature: float = 1.0, top_k: int = -1, top_p: float = 1.0, seed: int = 0, sample: int = 0,
             stop_ids: tuple[int, ...] = (), limit: int = 1999) -> RowSettings:  # fmt: skip
    return RowSettings(temperature, top_k, top_p, row_key(seed, sample), stop_ids, limit)


CUDA = pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"))


def draws_of(logits: torch.Tensor, rows: list[RowSettings], slots: int | None = None) -> Draws:
    draws = Draws(slots or len(rows), logits.shape[-1], capacity=2000, stops=4, device=logits.device)
    for slot, row in enumerate(rows):
        draws.join(torch.tensor([slot]), logits[slot], [row])
    return draws


def kinds(rows: list[RowSettings], vocab: int = VOCAB) -> tuple[bool, bool, bool, bool]:
    truncates = any(r.temperature and (0 < r.top_k < vocab or r.top_p < 1) for r in rows)
    temperatures = {r.temperature for r in rows}
    return 0 in temperatures, bool(temperatures - {0}), bool(temperatures - {0, 1}), truncates


def drawn(logits: torch.Tensor, rows: list[RowSettings], steps: int, graphs: StepGraphs) -> Draws:
    """``steps`` draws for ``rows`` from unchanging ``logits``, each a step of ``graphs`` (captured once on a GPU,
    unless told not to, then replayed; eager on the CPU)."""
    draws = draws_of(logits, rows)
    switches = kinds(rows, draws.vocab)
    for _ in range(steps):
        graphs.run(switches, lambda: draws.draw(len(rows), *switches))
    return draws


def counts(logits: torch.Tensor, rows: list[RowSettings], copies: int, steps: int) -> torch.Tensor:
    """How often each token is drawn per setting of ``rows`` (each with logits of its own), from ``copies`` rows
    (samples 0, 1, ...) of each over ``steps`` draws of unchanging logits (on the CPU, beside the float64
    probabilities they are tested against)."""
    many = [replace(row, key=row_key(seed, sample)) for seed, row in enumerate(rows) for sample in range(copies)]
    graphs = StepGraphs(accelerator_for(logits.device))
    draws = drawn(logits.repeat_interleave(copies, dim=0), many, steps, graphs)
    assert graphs.captured == logits.is_cuda, graphs.eager_reason
    tokens = draws.out_tokens[:, :steps].reshape(len(rows), -1)
    assert 0 <= int(tokens.min()) and int(tokens.max()) < draws.vocab  # never a block's padding
    return torch.stack([torch.bincount(row, minlength=draws.vocab) for row in tokens]).double().cpu()


def wanted(logits: torch.Tensor, row: RowSettings) -> torch.Tensor:
    """softmax(logits / T) over the top-k tokens, then over the smallest most likely set holding top-p of that
    (float64, from a sort: the distribution a draw must follow)."""
    scaled = logits.double() / row.temperature
    ordered, order = scaled.sort(descending=True)
    if 0 < row.top_k < len(logits):
        ordered[row.top_k :] = float("-inf")
    probs = ordered.softmax(-1)
    ordered[(probs.cumsum(-1) - probs) >= row.top_p] = float("-inf")
    return torch.empty_like(scaled).scatter_(0, order, ordered.softmax(-1))


def chi_square(observed: torch.Tensor, probs: torch.Tensor) -> float:
    """Pearson's statistic of ``observed`` counts against ``probs`` (tokens of probability 0 must not occur)."""
    assert float(observed[probs == 0].sum()) == 0, "drawn outside the support"
    expected = probs[probs > 0] * observed.sum()
    return float(((observed[probs > 0] - expected) ** 2 / expected).sum())


def chi_square_bound(cells: int) -> float:
    """The 1 - 1e-4 quantile of chi-square with ``cells - 1`` degrees of freedom (Wilson-Hilferty)."""
    df = cells - 1
    return df * (1 - 2 / (9 * df) + 3.719 * math.sqrt(2 / (9 * df))) ** 3


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


SETTINGS = {
    "temperature 1": settings(1.0),
    "temperature 0.6": settings(0.6),
    "temperature 1.7": settings(1.7),
    "top-k 7 at 0.9": settings(0.9, top_k=7),
    "top-p 0.7 at 1.3": settings(1.3, top_p=0.7),
    "top-k 20, top-p 0.9": settings(1.0, top_k=20, top_p=0.9),
}


@pytest.mark.parametrize("device", ["cpu", CUDA])
@pytest.mark.parametrize("vocab", [50, 64])
@pytest.mark.slow  # a CPU-second or more of float64 numerics or bombs: the whole suite runs it
def test_draws_follow_softmax_at_their_temperature_within_top_k_and_top_p(vocab: int, device: str) -> None:
    """20,000 seeded draws per setting (64 rows x 320 steps) pass a chi-square test at p = 1e-4 against
    softmax(logits / T) after truncation, and fail it against a temperature 12% off: the test can fail. A
    vocabulary of 50 is raced in 7 blocks of 8 (the last padded), one of 64 in 8 of 8. On a GPU the draws
    are a captured CUDA graph, replayed."""
    torch.manual_seed(4)
    rows = list(SETTINGS.values())
    logits = (torch.randn(len(rows), vocab) * 1.5).to(device)
    observed = counts(logits, rows, copies=64, steps=320)
    for name, row, got, these in zip(SETTINGS, rows, observed, logits, strict=True):
        probs = wanted(these.cpu(), row)
        cells = int((probs > 0).sum())
        assert chi_square(got, probs) < chi_square_bound(cells), name
        if row.top_k < 0 and row.top_p == 1:
            off = wanted(these.cpu(), replace(row, temperature=row.temperature * 1.12))
            assert chi_square(got, off) > chi_square_bound(cells), name
    support = observed[3] > 0
    assert set(support.nonzero()[:, 0].tolist()) == set(logits[3].topk(7).indices.tolist())  # top-k: all k, no more


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_captured_draws_at_the_real_vocabulary_replay_eager_draws_and_the_host_s() -> None:
    """Every setting beside a greedy row, 151,936 tokens: a captured CUDA graph's draws are the eager GPU draws,
    bit for bit, and the CPU's but for rare near-ties (log-softmax rounds differently there)."""
    torch.manual_seed(6)
    rows = [replace(row, key=row_key(9, i)) for i, row in enumerate(SETTINGS.values())] + [settings(0.0)]
    logits = torch.randn(len(rows), 151936) * 4
    captured, eager = StepGraphs(accelerator_for(torch.device("cuda"))), StepGraphs(
        accelerator_for(torch.device("cuda")), eager_reason="compared against"
    )
    runs = [drawn(logits.cuda(), rows, 24, graphs) for graphs in (captured, eager)]
    assert captured.captured == 1, captured.eager_reason
    runs.append(drawn(logits, rows, 24, StepGraphs(accelerator_for(torch.device("cpu")))))
    (tokens, logprobs), (eager_tokens, eager_logprobs), (cpu_tokens, _) = (
        (run.out_tokens[:, :24].cpu(), run.out_logprobs[:, :24].cpu()) for run in runs
    )
    assert torch.equal(tokens, eager_tokens) and torch.equal(logprobs, eager_logprobs)
    assert float((tokens == cpu_tokens).double().mean()) > 0.95


def test_rows_draw_independent_streams() -> None:
    """64 samples of one seed, 200 draws each from 50 equally likely tokens: two rows agree at a step, and a
    row with its own next draw, as often as independent draws would (1 in 50), and no two rows are alike."""
    rows = [settings(1.0, seed=3, sample=i) for i in range(64)]
    draws = draws_of(torch.zeros(64, 50), rows)
    for _ in range(200):
        draws.draw(64, False, True, False, False)
    tokens = draws.out_tokens[:, :200]
    across = (tokens[:, None] == tokens[None]).double().sum(dim=-1)  # [64, 64] steps on which two rows agree
    pairs = across[~torch.eye(64, dtype=torch.bool)]
    assert abs(float(pairs.mean()) / 200 - 1 / 50) < 0.002 and float(pairs.max()) < 20
    lagged = (tokens[:, 1:] == tokens[:, :-1]).double().mean()
    assert abs(float(lagged) - 1 / 50) < 0.005
    assert len({tuple(row) for row in tokens.tolist()}) == 64


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


@pytest.mark.parametrize("top_k", [-1, 5])
@pytest.mark.parametrize("temperature", [1e-10, 1e-30, 1e-45])
def test_a_tiny_temperature_draws_the_argmax_as_greedy_does(temperature: float, top_k: int) -> None:
    torch.manual_seed(3)
    logits = torch.randn(8, VOCAB) * 3 + 30  # a real model's logits: far from 0, so logits / T is huge
    rows = [settings(temperature, top_k=top_k, seed=seed) for seed in range(8)]  # the limit of T -> 0 is greedy
    draws = draws_of(logits, rows)
    for _ in range(3):
        draws.draw(8, *kinds(rows))
    assert torch.equal(draws.out_tokens[:, :3], logits.argmax(dim=-1)[:, None].expand(-1, 3)), draws.out_tokens[:, :3]


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


def test_tabled_and_hashed_uniforms_draw_the_same_tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch whose log-uniforms fit ``TABLE_BYTES`` tables them when rows join (up to their token limits), move
    and grow; a batch past it hashes them at each draw: the same draws either way, a finished row's too."""
    torch.manual_seed(7)
    rows = [settings(1.0, seed=1), settings(0.7, seed=2, sample=1, limit=12), settings(1.2, top_k=5, seed=3, limit=40)]
    logits = torch.randn(3, 50)

    def run() -> tuple[bool, torch.Tensor]:
        draws = draws_of(logits, rows)
        for _ in range(10):
            draws.draw(3, False, True, True, True)
        draws.move(torch.tensor([2]), torch.tensor([0]))  # the third row goes on in the first slot too
        for _ in range(5):
            draws.draw(3, False, True, True, True)
        grown = Draws(6, 50, capacity=2500, stops=4, device=torch.device("cpu"))
        grown.copy_from(draws)
        for _ in range(5):
            grown.draw(3, False, True, True, True)
        return grown.tabled, grown.out_tokens[:3, :20]

    tabled, tokens = run()
    monkeypatch.setattr(device_sampling, "TABLE_BYTES", 0)
    hashed, again = run()
    assert tabled and not hashed
    assert torch.equal(tokens, again)
    assert tokens[1, 12] < 50  # the second row, done at its limit, draws on (unread) at index 12, in range
    assert torch.equal(tokens[0, 10:], tokens[2, 10:])  # the moved row drew on as it would have in its own slot
