"""Retrieval metrics with exact scores over the whole catalogue (chapter 5).

Every test interaction ``(user, positive item)`` is scored against **all** items, and the
positive's **rank** is the number of items scoring strictly higher (0 = first; ties count in
the positive's favour). From the ranks:

* ``hit_rate@K`` — the share of test interactions whose positive ranks in the top ``K``.
  This is TF Recommenders' "factorized top-K categorical accuracy".
* ``recall@K`` — per user, the share of that user's test items in the top ``K``, then
  averaged over users (each user counts once, whatever their number of test items).
* ``ndcg@K`` — with one relevant item per interaction, ``1 / log2(rank + 2)`` when
  ``rank < K`` else 0, averaged over interactions.

Optionally the items a user already interacted with in training are **excluded**: they
are removed from the ranking (their scores set to ``−inf`` before counting), except the
positive itself. The exclusion is applied per chunk by scattering the seen pairs into the
chunk's score matrix, so memory stays ``O(chunk_size · |V|)``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from candidate_sampling._validate import check_ids, check_int_range, check_same, check_tensor

__all__ = ["metrics_from_ranks", "positive_ranks", "retrieval_metrics", "top_k_items"]


def _seen_csr(exclude, num_users: int, num_items: int, device):
    if not isinstance(exclude, (tuple, list)) or len(exclude) != 2:
        raise ValueError("exclude must be a pair (user_index (n,), item_ids (n,))")
    users, items = exclude
    check_tensor("exclude user_index", users, ("n",), floating=False, allow_empty=True)
    check_tensor("exclude item_ids", items, ("n",), floating=False, allow_empty=True)
    check_same("exclude pair count", user_index=users.shape[0], item_ids=items.shape[0])
    check_ids("exclude user_index", users, num_users)
    check_ids("exclude item_ids", items, num_items)
    users, items = users.to(device), items.to(device)
    order = torch.argsort(users, stable=True)
    counts = torch.bincount(users, minlength=num_users)
    indptr = torch.zeros(num_users + 1, dtype=torch.int64, device=device)
    indptr[1:] = torch.cumsum(counts, 0)
    return indptr, items[order]


def _scatter_exclusions(scores: torch.Tensor, users: torch.Tensor, indptr, indices) -> None:
    """Set ``scores[r, item] = −inf`` for every training item of ``users[r]`` (in place)."""
    start, stop = indptr[users], indptr[users + 1]
    counts = stop - start
    total = int(counts.sum())
    if total == 0:
        return
    rows = torch.repeat_interleave(torch.arange(users.shape[0], device=scores.device), counts)
    first = torch.repeat_interleave(start - (torch.cumsum(counts, 0) - counts), counts)
    cols = indices[first + torch.arange(total, device=scores.device)]
    scores[rows, cols] = float("-inf")


def positive_ranks(
    user_embeddings: torch.Tensor,
    item_embeddings: torch.Tensor,
    user_index: torch.Tensor,
    positive_ids: torch.Tensor,
    *,
    exclude: tuple[torch.Tensor, torch.Tensor] | None = None,
    chunk_size: int = 2048,
) -> torch.Tensor:
    """Exact 0-based rank of each positive among all items: ``#{y : s(u, y) > s(u, pos)}``.

    ``user_embeddings``: (U, d); ``item_embeddings``: (|V|, d); ``user_index``: (n,) row of
    ``user_embeddings`` of each interaction's user; ``positive_ids``: (n,) the held-out
    item ids. ``exclude``: optional
    ``(user_index, item_ids)`` pairs (e.g. the training interactions) removed from the
    ranking of that user (the positive itself is never removed). Returns (n,) int64 on the
    embeddings' device. Works in chunks of ``chunk_size`` interactions.
    """
    users, targets = user_index, positive_ids
    check_tensor("user_embeddings", user_embeddings, ("U", "d"), floating=True)
    check_tensor("item_embeddings", item_embeddings, ("V", "d"), floating=True)
    check_same(
        "embedding size d",
        user_embeddings=user_embeddings.shape[1],
        item_embeddings=item_embeddings.shape[1],
    )
    check_tensor("user_index", users, ("n",), floating=False)
    check_tensor("positive_ids", targets, ("n",), floating=False)
    check_same("number of interactions n", user_index=users.shape[0], positive_ids=targets.shape[0])
    num_users, num_items = user_embeddings.shape[0], item_embeddings.shape[0]
    check_ids("user_index", users, num_users)
    check_ids("positive_ids", targets, num_items)
    check_int_range("chunk_size", chunk_size, 1)
    device = item_embeddings.device
    users, targets = users.to(device), targets.to(device)
    seen = _seen_csr(exclude, num_users, num_items, device) if exclude is not None else None
    ranks = []
    with torch.no_grad():
        for start in range(0, users.shape[0], chunk_size):
            u = users[start : start + chunk_size]
            t = targets[start : start + chunk_size]
            scores = user_embeddings[u] @ item_embeddings.T  # (c, |V|)
            target_score = scores.gather(1, t[:, None])
            if seen is not None:
                _scatter_exclusions(scores, u, *seen)
            ranks.append((scores > target_score).sum(dim=1))
    return torch.cat(ranks)


def top_k_items(
    user_embeddings: torch.Tensor,
    item_embeddings: torch.Tensor,
    k: int,
    *,
    exclude: tuple[torch.Tensor, torch.Tensor] | None = None,
    chunk_size: int = 2048,
) -> torch.Tensor:
    """``(U, k)`` ids of each user's ``k`` highest-scoring items, best first, exact.

    ``exclude``: optional ``(user_index, item_ids)`` pairs never recommended to that user.
    """
    check_tensor("user_embeddings", user_embeddings, ("U", "d"), floating=True)
    check_tensor("item_embeddings", item_embeddings, ("V", "d"), floating=True)
    check_int_range("k", k, 1, item_embeddings.shape[0])
    check_int_range("chunk_size", chunk_size, 1)
    num_users, num_items = user_embeddings.shape[0], item_embeddings.shape[0]
    device = item_embeddings.device
    seen = _seen_csr(exclude, num_users, num_items, device) if exclude is not None else None
    out = []
    with torch.no_grad():
        for start in range(0, num_users, chunk_size):
            u = torch.arange(start, min(start + chunk_size, num_users), device=device)
            scores = user_embeddings[u] @ item_embeddings.T
            if seen is not None:
                _scatter_exclusions(scores, u, *seen)
            out.append(torch.topk(scores, k, dim=1).indices)
    return torch.cat(out)


def metrics_from_ranks(
    ranks: torch.Tensor, user_index: torch.Tensor, *, ks: Sequence[int] = (10, 50, 100)
) -> dict[str, float]:
    """``hit_rate@K``, ``recall@K`` (per-user average) and ``ndcg@K`` from 0-based ranks."""
    users = user_index
    check_tensor("ranks", ranks, ("n",), floating=False)
    check_tensor("user_index", users, ("n",), floating=False)
    check_same("number of interactions n", ranks=ranks.shape[0], user_index=users.shape[0])
    ranks = ranks.to(torch.float64)
    users = users.to(ranks.device)
    _, user_index = torch.unique(users, return_inverse=True)
    num = int(user_index.max()) + 1
    per_user_n = torch.bincount(user_index, minlength=num).to(torch.float64)
    out: dict[str, float] = {}
    for k in ks:
        check_int_range("k", k, 1)
        hit = (ranks < k).to(torch.float64)
        out[f"hit_rate@{k}"] = float(hit.mean())
        per_user = torch.zeros(num, dtype=torch.float64, device=ranks.device)
        per_user.index_add_(0, user_index, hit)
        out[f"recall@{k}"] = float((per_user / per_user_n).mean())
        gain = torch.where(ranks < k, 1.0 / torch.log2(ranks + 2.0), torch.zeros_like(ranks))
        out[f"ndcg@{k}"] = float(gain.mean())
    return out


def retrieval_metrics(
    user_embeddings: torch.Tensor,
    item_embeddings: torch.Tensor,
    user_index: torch.Tensor,
    positive_ids: torch.Tensor,
    *,
    ks: Sequence[int] = (10, 50, 100),
    exclude: tuple[torch.Tensor, torch.Tensor] | None = None,
    chunk_size: int = 2048,
) -> dict[str, float]:
    """Exact full-catalogue ``hit_rate@K``, ``recall@K`` and ``ndcg@K`` for every ``K`` in ``ks``.

    Shapes as in :func:`positive_ranks`. Chapter 5.
    """
    ranks = positive_ranks(
        user_embeddings,
        item_embeddings,
        user_index,
        positive_ids,
        exclude=exclude,
        chunk_size=chunk_size,
    )
    return metrics_from_ranks(ranks, user_index, ks=ks)
