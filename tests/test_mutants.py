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
