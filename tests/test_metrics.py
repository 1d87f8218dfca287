"""Full-catalogue retrieval metrics against brute-force loops."""

import math

import pytest
import torch

from candidate_sampling.metrics import (
    metrics_from_ranks,
    retrieval_metrics,
    target_ranks,
    top_k_items,
)


def _data(seed=0, users=7, items=30, d=4, n=40):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(users, d, generator=g, dtype=torch.float64),
        torch.randn(items, d, generator=g, dtype=torch.float64),
        torch.randint(0, users, (n,), generator=g),
        torch.randint(0, items, (n,), generator=g),
    )


def _seen(seed=1, users=7, items=30, n=60):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, users, (n,), generator=g), torch.randint(0, items, (n,), generator=g)


@pytest.mark.parametrize("exclude", [False, True])
@pytest.mark.parametrize("chunk", [1, 3, 1000])
def test_ranks_match_loop(exclude, chunk):
    ue, ie, users, targets = _data()
    seen_u, seen_i = _seen()
    got = target_ranks(ue, ie, users, targets, (seen_u, seen_i) if exclude else None, chunk)
    for n in range(users.shape[0]):
        u, t = int(users[n]), int(targets[n])
        skip = {int(i) for uu, i in zip(seen_u, seen_i) if int(uu) == u} if exclude else set()
        target_score = float(ue[u] @ ie[t])
        want = sum(
            1 for y in range(ie.shape[0]) if y not in skip and float(ue[u] @ ie[y]) > target_score
        )
        assert int(got[n]) == want


def test_metrics_match_loop():
    ranks = torch.tensor([0, 3, 12, 1, 50])
    users = torch.tensor([0, 0, 1, 2, 2])
    got = metrics_from_ranks(ranks, users, ks=(2, 10))
    assert got["hit_rate@2"] == pytest.approx(2 / 5)
    assert got["hit_rate@10"] == pytest.approx(3 / 5)
    # per-user recall@10: user0 2/2, user1 0/1, user2 1/2
    assert got["recall@10"] == pytest.approx((1 + 0 + 0.5) / 3)
    ndcg = (1 / math.log2(2) + 1 / math.log2(5) + 1 / math.log2(3)) / 5
    assert got["ndcg@10"] == pytest.approx(ndcg)


def test_retrieval_metrics_perfect_model():
    items = torch.eye(5, dtype=torch.float64)
    users = torch.eye(5, dtype=torch.float64)
    m = retrieval_metrics(users, items, torch.arange(5), torch.arange(5), ks=(1,))
    assert m["hit_rate@1"] == 1.0 and m["ndcg@1"] == 1.0 and m["recall@1"] == 1.0


@pytest.mark.parametrize("exclude", [False, True])
def test_top_k_matches_sort(exclude):
    ue, ie, _, _ = _data(2)
    seen_u, seen_i = _seen(3)
    got = top_k_items(ue, ie, 5, (seen_u, seen_i) if exclude else None, chunk_size=2)
    for u in range(ue.shape[0]):
        skip = {int(i) for uu, i in zip(seen_u, seen_i) if int(uu) == u} if exclude else set()
        scores = [(float(ue[u] @ ie[y]), y) for y in range(ie.shape[0]) if y not in skip]
        want = [y for _, y in sorted(scores, reverse=True)[:5]]
        assert got[u].tolist() == want


def test_target_is_never_excluded():
    ue = torch.tensor([[1.0, 0.0]])
    ie = torch.tensor([[1.0, 0.0], [2.0, 0.0], [0.5, 0.0]])
    ranks = target_ranks(
        ue, ie, torch.tensor([0]), torch.tensor([0]), (torch.tensor([0, 0]), torch.tensor([0, 1]))
    )
    assert int(ranks[0]) == 0  # item 1 (seen) no longer outranks the target


def test_bad_inputs():
    ue, ie, users, targets = _data()
    with pytest.raises(ValueError, match="embedding size d"):
        target_ranks(ue, ie[:, :2], users, targets)
    with pytest.raises(ValueError, match="targets must lie"):
        target_ranks(ue, ie, users, targets + 100)
    with pytest.raises(ValueError, match="number of interactions"):
        target_ranks(ue, ie, users, targets[:3])
    with pytest.raises(ValueError, match="chunk_size"):
        target_ranks(ue, ie, users, targets, chunk_size=0)
    with pytest.raises(ValueError, match="exclude items"):
        target_ranks(ue, ie, users, targets, (torch.tensor([0]), torch.tensor([99])))
    with pytest.raises(ValueError, match="k must be"):
        top_k_items(ue, ie, 0)
