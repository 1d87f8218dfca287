"""Tests that kill mutants: brute-force references where the other tests never looked.

``mutmut`` (configured in ``pyproject.toml``, issue 41) changes one operator, constant or
argument at a time in ``losses/core.py``, ``candidates.py``, ``sampling/frequency.py``,
``eval/metrics.py`` and ``losses/chunked.py`` and runs the tests; a mutant that changes a
result and survives is a test that would not notice that bug. Each test here pins a
result the survivors changed, against a reference written with loops or explicit sums in
float64, at the boundaries (a rank equal to K, a weight of 0, a single column) where an
off-by-one or a flipped comparison shows. The book's benchmarks appendix lists what
survives and why (the equivalent mutants).
"""

from __future__ import annotations

import math

import pytest
import torch

from candidate_sampling.eval import metrics_from_ranks, positive_ranks
from candidate_sampling.eval.metrics import count_above

D64 = torch.float64


def _metrics_by_hand(ranks: list[int], users: list[int], k: int) -> dict[str, float]:
    """hit rate, per-user recall and NDCG@k of 0-based ranks, with loops."""
    hits = [1.0 if r < k else 0.0 for r in ranks]
    gains = [1.0 / math.log2(r + 2.0) if r < k else 0.0 for r in ranks]
    per_user: dict[int, list[float]] = {}
    for u, h in zip(users, hits):
        per_user.setdefault(u, []).append(h)
    recall = sum(sum(h) / len(h) for h in per_user.values()) / len(per_user)
    return {
        f"hit_rate@{k}": sum(hits) / len(hits),
        f"recall@{k}": recall,
        f"ndcg@{k}": sum(gains) / len(gains),
    }


@pytest.mark.parametrize("k", [1, 2, 5, 10])
def test_metrics_at_the_rank_boundary_match_a_loop(k):
    """A positive ranked exactly K is not in the top K (ranks are 0-based): ``ranks < k``,
    never ``<=``; its neighbours K − 1 and K + 1 on either side."""
    ranks = [k - 1, k, k + 1, 0, k, k - 1, 3 * k]
    users = [0, 0, 1, 2, 2, 3, 3]
    got = metrics_from_ranks(torch.tensor(ranks), torch.tensor(users), ks=(k,))
    want = _metrics_by_hand(ranks, users, k)
    assert got.keys() == want.keys()
    for key, value in want.items():
        assert got[key] == pytest.approx(value, rel=1e-12, abs=1e-15), key


def test_count_above_counts_strictly_higher_scores_ties_for_the_positive_nan_against():
    scores = torch.tensor(
        [[1.0, 2.0, 2.0, 0.5], [float("nan"), 0.0, -1.0, 3.0], [-float("inf"), 1.0, 1.0, 1.0]],
        dtype=D64,
    )
    positive = torch.tensor([2.0, 0.0, 1.0], dtype=D64)
    want = [sum(1 for s in row if not s <= p) for row, p in zip(scores.tolist(), positive.tolist())]
    assert count_above(scores, positive).tolist() == want == [0, 2, 0]


def test_positive_ranks_match_a_loop_with_ties_and_known_items():
    from candidate_sampling.eval import KnownPairs

    g = torch.Generator().manual_seed(0)
    users = torch.randint(-2, 3, (5, 2), generator=g).to(D64)
    items = torch.randint(-2, 3, (9, 2), generator=g).to(D64)  # many exact ties
    user_index = torch.tensor([0, 1, 2, 2, 4, 3])
    positive_ids = torch.tensor([3, 0, 8, 1, 5, 5])
    known = KnownPairs(torch.tensor([2, 2, 4]), torch.tensor([0, 6, 1]), num_items=9)
    got = positive_ranks(users, items, user_index, positive_ids, known=known, chunk_size=2)
    scores = users @ items.T
    want = []
    for u, p in zip(user_index.tolist(), positive_ids.tolist()):
        removed = {y for uu, y in zip([2, 2, 4], [0, 6, 1]) if uu == u and y != p}
        want.append(sum(1 for y in range(9) if y not in removed and scores[u, y] > scores[u, p]))
    assert got.tolist() == want


# --------------------------------------------------------------------------- the hit rule


def _hits_by_hand(positive_ids, candidate_ids, sources, rule, positive_columns, tensorflow):
    """(B, C) bool with loops: which columns a loss removes (see ``hits_to_remove``)."""
    set_sources = {"unique", "mined", "fixed"}
    rows = []
    for i, pos in enumerate(positive_ids):
        pos = pos if isinstance(pos, list) else [pos]
        row = []
        for j, cand in enumerate(candidate_ids):
            hit = cand in pos
            if tensorflow and any(
                candidate_ids[k] == cand for k in range(j + 1, len(candidate_ids))
            ):
                hit = False  # TF removes only the last copy of a repeated id
            if positive_columns is not None and positive_columns[i] == j:
                hit = False  # the row's own positive column
            if rule is None:
                hit = hit and sources[j] in set_sources
            row.append(hit if rule is not False else False)
        rows.append(row)
    return rows


@pytest.mark.parametrize("rule", [None, True, False])
@pytest.mark.parametrize("tensorflow", [False, True])
@pytest.mark.parametrize("with_columns", [False, True])
@pytest.mark.parametrize("num_true", [1, 2])
def test_hits_to_remove_matches_a_loop(rule, tensorflow, with_columns, num_true):
    from candidate_sampling import CandidateSet
    from candidate_sampling.losses import hits_to_remove

    candidate_ids = [3, 1, 4, 1, 5, 3, 2]
    sources = ["batch", "batch", "unique", "unique", "unique", "fixed", "replacement"]
    runs = (("batch", 2), ("unique", 3), ("fixed", 1), ("replacement", 1))
    columns = CandidateSet(torch.zeros(7, 2), torch.tensor(candidate_ids), source=runs)
    positive_ids = [[3, 2], [1, 9], [4, 4]] if num_true == 2 else [3, 1, 5]
    positive_columns = [0, 1, 4] if with_columns else None
    got = hits_to_remove(
        torch.tensor(positive_ids),
        columns,
        rule,
        positive_columns=None if positive_columns is None else torch.tensor(positive_columns),
        repeated_hits="tensorflow" if tensorflow else "mask_all",
    )
    want = _hits_by_hand(positive_ids, candidate_ids, sources, rule, positive_columns, tensorflow)
    if not any(any(r) for r in want) and (rule is False or got is None):
        assert got is None or not bool(got.any())
        return
    assert got is not None and got.tolist() == want
    # the logistic family keeps every hit by default; True still removes them
    assert hits_to_remove(torch.tensor(positive_ids), columns, None, logistic=True) is None


# --------------------------------------------------------------------------- gathering rows


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16])
@pytest.mark.parametrize("sparse", [False, True])
def test_gather_rows_of_a_table_and_an_encoder_match_indexing(dtype, sparse):
    from candidate_sampling.candidates import gather_rows

    g = torch.Generator().manual_seed(1)
    table = torch.randn(6, 3, generator=g, dtype=torch.float64).to(dtype).requires_grad_()
    ids = torch.tensor([4, 0, 4, 2, 4])
    rows = gather_rows(table, ids, sparse=sparse)
    want = table.detach().double()[ids]
    assert rows.dtype == (torch.float32 if dtype == torch.float16 else dtype)
    torch.testing.assert_close(rows.double(), want)
    weights = torch.arange(1.0, 6.0, dtype=rows.dtype)[:, None]
    (rows * weights).sum().backward()
    grad = table.grad.to_dense() if table.grad.is_sparse else table.grad
    expected = torch.zeros(6, 3, dtype=torch.float64)
    for k, i in enumerate(ids.tolist()):  # every copy's gradient, summed per row
        expected[i] += k + 1.0
    torch.testing.assert_close(grad.double(), expected)
    reference = table.detach().double()
    encoded = gather_rows(lambda i: reference[i], torch.tensor([1, 3]))
    torch.testing.assert_close(encoded, reference[torch.tensor([1, 3])])
    with pytest.raises(ValueError, match="item encoder"):  # (d, n): rows and columns swapped
        gather_rows(lambda i: reference[i][:, :2].T, torch.tensor([1, 3, 5]))


# --------------------------------------------------------------------------- expected counts


@pytest.mark.parametrize("unique", [False, True])
def test_log_expected_count_matches_the_formula(unique):
    from candidate_sampling.sampling import log_expected_count

    probs = torch.tensor([0.0, 1e-9, 0.01, 0.3, 1.0], dtype=D64)
    k, tries = 4, 7 if unique else 4
    got = log_expected_count(probs, num_samples=k, num_tries=tries, unique=unique)
    want = []
    for p in probs.tolist():
        value = 1.0 - (1.0 - p) ** tries if unique else k * p
        if unique and 0 < p < 1e-6:
            value = tries * p  # 1 − (1 − p)^n to first order, as expm1/log1p keep it
        want.append(math.log(value) if value > 0 else -math.inf)
    assert got.dtype == torch.float32
    for g, w in zip(got.tolist(), want):
        assert g == pytest.approx(w, rel=1e-6) if math.isfinite(w) else g == w
    with pytest.raises(ValueError, match="num_tries"):
        log_expected_count(probs, num_samples=k, num_tries=k + 1, unique=False)
    with pytest.raises(ValueError, match="num_tries"):
        log_expected_count(probs, num_samples=k, num_tries=k - 1, unique=True)


def test_temperature_and_loss_modules_forward_their_options():
    from candidate_sampling.losses import InfoNCELoss, Temperature, info_nce_loss

    scores = torch.tensor([[1.0, -2.0], [0.5, 4.0]], dtype=D64)
    assert torch.equal(Temperature(0.5)(scores), scores / 0.5)
    assert torch.equal(Temperature(2.0, learnable=True)(scores).detach(), scores / 2.0)
    g = torch.Generator().manual_seed(2)
    q, k = torch.randn(3, 4, generator=g, dtype=D64), torch.randn(3, 4, generator=g, dtype=D64)
    w = torch.tensor([1.0, 0.0, 2.0], dtype=D64)
    module = InfoNCELoss(temperature=0.3, symmetric=True, reduction="sum")
    want = info_nce_loss(q, k, temperature=0.3, symmetric=True, reduction="sum", sample_weight=w)
    assert module(q, k, sample_weight=w) == want
