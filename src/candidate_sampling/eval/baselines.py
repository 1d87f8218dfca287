"""Non-neural recommenders to measure a two-tower model against (chapter 10).

A retrieval model is only as good as the simplest thing it beats. Three baselines, each a
few lines of tensor algebra on the binary user × item matrix ``X`` (``X[u, y] = 1`` when
user ``u`` interacted with item ``y`` in training):

* :func:`most_popular_scores` — every user gets the same list, the items with the most
  training interactions first (equal counts in a random order drawn from a
  ``generator``, or by item id without one).
* :func:`item_knn_scores` — item-based collaborative filtering (Sarwar et al. 2001):
  cosine similarity between the item columns of ``X``, optionally kept for each item's
  ``k`` nearest neighbours, and a user's score for ``y`` is the summed similarity of ``y``
  to the user's items.
* :func:`ease_weights` / :func:`ease_scores` — EASE (Steck 2019), a linear item-item
  model ``X ≈ X B`` fitted by ridge regression with the constraint ``B_yy = 0`` (an item
  may not predict itself). Its closed form is one matrix inverse:
  ``P = (XᵀX + λI)⁻¹``, ``B = I − P · diag(1 / diag P)``.

The baselines produce a ``(U, |V|)`` score matrix rather than user and item embeddings,
so :func:`ranks_from_scores` ranks held-out positives against such a matrix with the
same rule as :func:`candidate_sampling.eval.metrics.positive_ranks`: the rank is the number
of items scoring strictly higher, after the user's training items are removed (never the
positive itself). Pass the ranks to :func:`~candidate_sampling.eval.metrics.metrics_from_ranks`.
"""

from __future__ import annotations

import torch

from candidate_sampling._validate import (
    check_counts,
    check_finite,
    check_float_dtype,
    check_generator,
    check_ids,
    check_int_range,
    check_positive,
    check_real_tensor,
    check_tensor,
)
from candidate_sampling.device import exact_float64, float64_or_float32
from candidate_sampling.eval.known_pairs import KnownPairs, check_known
from candidate_sampling.eval.metrics import (
    _check_top_k,
    _ranks_of_pairs,
    check_pairs,
    count_above,
)

__all__ = [
    "ease_scores",
    "ease_weights",
    "interaction_matrix",
    "item_knn_scores",
    "most_popular_scores",
    "ranks_from_scores",
    "top_k_from_scores",
]


def interaction_matrix(
    known: KnownPairs,
    *,
    num_users: int | None = None,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """``(U, |V|)`` binary matrix ``X`` with ``X[u, y] = 1`` for every known pair.

    ``known``: a :class:`~candidate_sampling.eval.known_pairs.KnownPairs` of the training
    pairs (repeated pairs count once); ``num_users``: U, at least ``known.num_users``
    (default: exactly that); ``dtype``: a floating dtype. On the table's device.
    Defaults: ``dtype=torch.float32``.
    """
    check_known(known)
    if num_users is None:
        num_users = known.num_users
    check_int_range("num_users", num_users, max(known.num_users, 1))
    check_float_dtype("dtype", dtype)
    x = torch.zeros(num_users, known.num_items, dtype=dtype, device=known.device)
    x[known.user_index, known.item_ids] = 1
    return x


def most_popular_scores(
    counts: torch.Tensor, *, generator: torch.Generator | None = None
) -> torch.Tensor:
    """``(|V|,)`` float64 scores that order items by ``counts``, most popular first.

    ``counts``: (|V|,) training interactions per item. The score of the item in
    popularity position ``r`` (0 = most popular) is ``−r``, so no two items tie and a rank
    never depends on how ties are counted. Equal counts are ordered:

    * with ``generator`` (a ``torch.Generator``), **at random**: a permutation of the items
      is drawn with ``torch.randperm(|V|, generator=generator)`` on the generator's device
      and the items are stably sorted by count in that order, so every order of the items
      of one count is equally likely, and one seed gives one list. This is the honest
      baseline: the order of equal counts carries no information from the training data;
    * without it, by the smaller item id (deterministic). When ids carry information (a
      catalogue whose ids are sorted by popularity, as
      :func:`~candidate_sampling.data.synthetic.make_planted_retrieval`'s are), this order
      is a hidden advantage: on such a catalogue the never-seen test items are ranked in
      the true popularity order (chapter 10).

    The same list for every user: as embeddings, a ``(U, 1)`` column of ones and
    ``most_popular_scores(counts)[:, None]`` as the ``(|V|, 1)`` items.
    """
    check_real_tensor("counts", counts, ("|V|",))
    check_counts("counts", counts, ("|V|",))  # NaN would sort first: the "most popular" item
    check_generator("generator", generator)
    # float64, or float32 on MPS (no float64 there): −r is exact in float32 below 2^24 items
    dtype = float64_or_float32(counts.device)
    num_items = counts.shape[0]
    key = -exact_float64(counts)
    if generator is None:
        order = torch.argsort(key, stable=True)
    else:  # a random order first; the stable sort keeps it within each count
        shuffle = torch.randperm(num_items, generator=generator, device=generator.device)
        shuffle = shuffle.to(key.device)
        order = shuffle[torch.argsort(key[shuffle], stable=True)]
    order = order.to(counts.device)
    scores = torch.empty(num_items, dtype=dtype, device=counts.device)
    scores[order] = -torch.arange(num_items, dtype=dtype, device=counts.device)
    return scores


def _check_matrix(x: torch.Tensor) -> None:
    check_tensor("x", x, ("U", "|V|"), floating=True)
    check_finite("x", x)


def ease_weights(x: torch.Tensor, l2: float) -> torch.Tensor:
    """EASE's item-item weights ``B`` (|V|, |V|), the closed form of Steck (2019).

    ``B = argmin ‖X − X B‖²_F + λ ‖B‖²_F`` subject to ``diag(B) = 0``. With
    ``P = (XᵀX + λI)⁻¹`` the solution is ``B_ij = −P_ij / P_jj`` for ``i ≠ j`` and
    ``B_jj = 0``: column ``j`` is the ridge regression of item ``j`` on all the other
    items. ``x``: (U, |V|) interaction matrix (binary, or any weights); ``l2``: λ > 0, finite.
    The Gram matrix and the inverse are computed in float64; ``B`` is returned in
    ``x``'s dtype. Cost: one |V| × |V| inverse.
    """
    _check_matrix(x)
    check_positive("l2", l2)
    xd = exact_float64(x)  # on the CPU where the device has no float64 (MPS)
    gram = xd.T @ xd
    gram.diagonal().add_(float(l2))
    p = torch.linalg.inv(gram)
    b = -p / p.diagonal()[None, :]
    b.diagonal().zero_()
    return b.to(device=x.device, dtype=x.dtype)


def ease_scores(x: torch.Tensor, l2: float) -> torch.Tensor:
    """``(U, |V|)`` EASE scores ``X B`` with ``B = ease_weights(x, l2)``."""
    return x @ ease_weights(x, l2)


def item_knn_scores(x: torch.Tensor, *, k: int | None = None) -> torch.Tensor:
    """``(U, |V|)`` item-based collaborative filtering scores (Sarwar et al. 2001).

    Similarity of items ``i`` and ``j``: the cosine of their columns of ``x``,
    ``S_ij = x_iᵀx_j / (‖x_i‖ ‖x_j‖)`` (0 for an item nobody interacted with), with
    ``S_jj = 0``. With ``k``, column ``j`` keeps only its ``k`` largest entries (the
    ``k`` items most similar to ``j``). Score of item ``j`` for user ``u``:
    ``Σ_i x_ui S_ij``.
    """
    _check_matrix(x)
    num_items = x.shape[1]
    gram = x.T @ x
    norms = gram.diagonal().clamp_min(0).sqrt()
    safe = torch.where(norms > 0, norms, torch.ones_like(norms))
    sim = gram / safe[:, None] / safe[None, :]
    sim.diagonal().zero_()
    if k is not None:
        check_int_range("k", k, 1, num_items)
        keep = torch.topk(sim, k, dim=0).indices
        sim = torch.zeros_like(sim).scatter_(0, keep, sim.gather(0, keep))
    return x @ sim


def _check_scores(scores: torch.Tensor) -> None:
    check_tensor("scores", scores, ("U", "|V|"), floating=True)
    # NaN scores compare False and would rank a positive first; topk would put NaN first
    check_finite("scores", scores)


def ranks_from_scores(
    scores: torch.Tensor,
    user_index: torch.Tensor,
    positive_ids: torch.Tensor,
    *,
    known: KnownPairs | None = None,
    candidate_ids: torch.Tensor | None = None,
    chunk_size: int = 4096,
) -> torch.Tensor:
    """``(n,)`` 0-based rank of each positive under a ``(U, |V|)`` score matrix.

    The rule of :func:`candidate_sampling.eval.metrics.positive_ranks`
    (:func:`~candidate_sampling.eval.metrics.count_above`): the number of items scoring
    higher than the positive for that user (ties in its favour, NaN against it), with the
    items of ``known`` (a :class:`~candidate_sampling.eval.known_pairs.KnownPairs`, e.g.
    the training interactions) removed from the ranking; the positive itself is never
    removed. ``user_index``: (n,) rows of ``scores``; ``positive_ids``: (n,) held-out
    items. Works in chunks of ``chunk_size`` positives (on the CPU, of at most
    :data:`~candidate_sampling.eval.metrics.CPU_SCORES_PER_CHUNK` scores; for a large
    catalogue and two positives a user or more on average, in chunks of users, each user's
    row copied once for all of that user's positives). The matrix itself is never copied
    or changed.

    ``candidate_ids``: optional ``(n, m)`` item ids; the positive is then ranked among its
    row's ``m`` candidates only (the sampled protocol of
    :func:`candidate_sampling.eval.metrics.sampled_ranks`, with negatives drawn once and
    shared by every model compared); ``known`` does not apply to them. Chapter 10.
    """
    _check_scores(scores)
    num_users, num_items = scores.shape
    check_pairs(user_index, positive_ids, num_users=num_users, num_items=num_items)
    check_known(known, num_users, num_items)
    check_int_range("chunk_size", chunk_size, 1)
    device = scores.device
    users, targets = user_index.to(device), positive_ids.to(device)
    with torch.no_grad():
        if candidate_ids is not None:
            check_tensor("candidate_ids", candidate_ids, (users.shape[0], "m"), floating=False)
            check_ids("candidate_ids", candidate_ids, num_items)
            target_score = scores[users, targets]
            return count_above(scores[users[:, None], candidate_ids.to(device)], target_score)
        # scores[u] is a copy: the known items are filled in it, not in scores
        return _ranks_of_pairs(lambda u: scores[u], users, targets, known, chunk_size, num_items)


def top_k_from_scores(
    scores: torch.Tensor,
    k: int,
    *,
    known: KnownPairs | None = None,
) -> torch.Tensor:
    """``(U, k)`` ids of each user's ``k`` best-scoring items, best first.

    :func:`candidate_sampling.eval.metrics.top_k_items` for a ``(U, |V|)`` score matrix:
    the items of ``known`` (a :class:`~candidate_sampling.eval.known_pairs.KnownPairs`) are
    never recommended to that user, so ``k`` must be at most ``|V|`` minus the most known
    items of any user (a ``ValueError`` naming ``k``; a value check). NaN scores raise.
    Chapter 10.
    """
    _check_scores(scores)
    _check_top_k(k, known, *scores.shape)
    ranked = scores
    with torch.no_grad():
        if known is not None:
            users = torch.arange(scores.shape[0], device=scores.device)
            ranked = known._fill(scores.clone(), users)
        return torch.topk(ranked, k, dim=1).indices
