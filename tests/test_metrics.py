"""Full-catalogue retrieval metrics against brute-force loops."""

import math

import pytest
import torch

from candidate_sampling.metrics import (
    metrics_from_ranks,
    positive_ranks,
    retrieval_metrics,
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
    ue, ie, user_index, positive_ids = _data()
    seen_u, seen_i = _seen()
    got = positive_ranks(
        ue,
        ie,
        user_index,
        positive_ids,
        exclude=(seen_u, seen_i) if exclude else None,
        chunk_size=chunk,
    )
    for n in range(user_index.shape[0]):
        u, t = int(user_index[n]), int(positive_ids[n])
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
    got = top_k_items(ue, ie, 5, exclude=(seen_u, seen_i) if exclude else None, chunk_size=2)
    for u in range(ue.shape[0]):
        skip = {int(i) for uu, i in zip(seen_u, seen_i) if int(uu) == u} if exclude else set()
        scores = [(float(ue[u] @ ie[y]), y) for y in range(ie.shape[0]) if y not in skip]
        want = [y for _, y in sorted(scores, reverse=True)[:5]]
        assert got[u].tolist() == want


def test_positive_is_never_excluded():
    ue = torch.tensor([[1.0, 0.0]])
    ie = torch.tensor([[1.0, 0.0], [2.0, 0.0], [0.5, 0.0]])
    exclude = (torch.tensor([0, 0]), torch.tensor([0, 1]))
    ranks = positive_ranks(ue, ie, torch.tensor([0]), torch.tensor([0]), exclude=exclude)
    assert int(ranks[0]) == 0  # item 1 (seen) no longer outranks the positive


@pytest.mark.parametrize("exclude", [False, True])
def test_retrieval_metrics_are_metrics_of_the_positive_ranks(exclude):
    ue, ie, user_index, positive_ids = _data(4)
    seen = _seen(5) if exclude else None
    got = retrieval_metrics(
        ue, ie, user_index, positive_ids, ks=(1, 5, 10), exclude=seen, chunk_size=7
    )
    ranks = positive_ranks(ue, ie, user_index, positive_ids, exclude=seen)
    assert got == metrics_from_ranks(ranks, user_index, ks=(1, 5, 10))
    assert set(got) == {f"{m}@{k}" for m in ("hit_rate", "recall", "ndcg") for k in (1, 5, 10)}
    assert set(retrieval_metrics(ue, ie, user_index, positive_ids)) == {
        f"{m}@{k}" for m in ("hit_rate", "recall", "ndcg") for k in (10, 50, 100)
    }


def test_options_are_keyword_only():
    ue, ie, user_index, positive_ids = _data()
    with pytest.raises(TypeError):
        retrieval_metrics(ue, ie, user_index, positive_ids, (1,))
    with pytest.raises(TypeError):
        positive_ranks(ue, ie, user_index, positive_ids, None, 10)
    with pytest.raises(TypeError):
        top_k_items(ue, ie, 3, None)
    with pytest.raises(TypeError):
        metrics_from_ranks(torch.tensor([0]), torch.tensor([0]), (1,))


def test_bad_inputs():
    ue, ie, user_index, positive_ids = _data()
    with pytest.raises(ValueError, match="embedding size d"):
        positive_ranks(ue, ie[:, :2], user_index, positive_ids)
    with pytest.raises(ValueError, match="positive_ids must lie"):
        positive_ranks(ue, ie, user_index, positive_ids + 100)
    with pytest.raises(ValueError, match="user_index must lie"):
        positive_ranks(ue, ie, user_index + 100, positive_ids)
    with pytest.raises(ValueError, match="positive_ids must be an integer"):
        positive_ranks(ue, ie, user_index, positive_ids.double())
    with pytest.raises(ValueError, match="number of interactions"):
        positive_ranks(ue, ie, user_index, positive_ids[:3])
    with pytest.raises(ValueError, match="chunk_size"):
        positive_ranks(ue, ie, user_index, positive_ids, chunk_size=0)
    with pytest.raises(ValueError, match="exclude item_ids must lie"):
        positive_ranks(
            ue, ie, user_index, positive_ids, exclude=(torch.tensor([0]), torch.tensor([99]))
        )
    with pytest.raises(ValueError, match="exclude must be a pair"):
        positive_ranks(ue, ie, user_index, positive_ids, exclude=torch.tensor([0]))
    with pytest.raises(ValueError, match="exclude pair count"):
        retrieval_metrics(
            ue, ie, user_index, positive_ids, exclude=(torch.tensor([0, 1]), torch.tensor([2]))
        )
    with pytest.raises(ValueError, match="k must be"):
        retrieval_metrics(ue, ie, user_index, positive_ids, ks=(0,))
    with pytest.raises(ValueError, match="k must be"):
        top_k_items(ue, ie, 0)
