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

Optionally the items a user already interacted with in training are **excluded**: pass
them as ``known=`` a :class:`~candidate_sampling.eval.known_pairs.KnownPairs` table, and
they are removed from the ranking (their scores set to ``−inf`` before counting), except
the positive itself. The exclusion is applied per chunk by scattering the user's known
items into the chunk's score matrix (:meth:`KnownPairs.fill_`), so memory stays
``O(chunk_size · |V|)``.

**A diverged model is an error, not a score.** With NaN embeddings every comparison
``s > s⁺`` is False, which would rank every positive first. The metrics check that the
embeddings are finite (a value check: :func:`candidate_sampling.get_validate_args`), and
with the checks off they still count a NaN score *against* the positive
(``rank = #{y : not s(u, y) ≤ s(u, pos)}``), so a NaN model scores no hits.

Two views for chapter 9 ("evaluation that does not lie"):

* :func:`sampled_ranks` / :func:`sampled_metrics` — the *sampled* protocol that
  Krichene & Rendle (2020) warn about: each positive is ranked among ``num_negatives``
  (100) items drawn uniformly from the items its user has not interacted with, not among
  the whole catalogue.
* :func:`popularity_strata`, :func:`stratified_metrics` and :func:`top_k_stratum_shares` —
  every metric split by the popularity stratum (e.g. decile) of the positive item, and
  the share of the recommended top-K lists that falls in each stratum.

And the book's one interval for a comparison: :func:`user_bootstrap_interval`, the mean of
a per-pair quantity (a hit, or the difference of two models' hits on the same pairs) with
a percentile interval from resampling *users*, since a user's test pairs are not
independent of each other.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import torch

from candidate_sampling._validate import (
    check_choice,
    check_finite,
    check_generator,
    check_ids,
    check_int_range,
    check_parallel,
    check_probabilities,
    check_real_tensor,
    check_same,
    check_tensor,
    common_float_dtype,
    get_validate_args,
)
from candidate_sampling.device import exact_float64
from candidate_sampling.eval.known_pairs import KnownPairs, check_known

if TYPE_CHECKING:  # pandas is imported where a DataFrame is built
    import pandas as pd

__all__ = [
    "CPU_SCORES_PER_CHUNK",
    "check_pairs",
    "count_above",
    "expected_calibration_error",
    "metrics_from_ranks",
    "popularity_strata",
    "positive_ranks",
    "retrieval_metrics",
    "sampled_metrics",
    "sample_unseen_negatives",
    "sampled_ranks",
    "stratified_metrics",
    "top_k_items",
    "top_k_stratum_shares",
    "user_bootstrap",
    "user_bootstrap_interval",
]


def _scoring_pair(
    user_embeddings: torch.Tensor, item_embeddings: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Both tables in at least float32 (half-precision scores would tie, in the positive's
    favour, and overflow), the users on the items' device."""
    dtype = common_float_dtype(user_embeddings=user_embeddings, item_embeddings=item_embeddings)
    return (
        user_embeddings.to(item_embeddings.device, dtype),
        item_embeddings.to(dtype),
    )


def _check_embeddings(user_embeddings: torch.Tensor, item_embeddings: torch.Tensor) -> None:
    """(U, d) and (|V|, d) floating embeddings of one size d, finite (a value check)."""
    check_tensor("user_embeddings", user_embeddings, ("U", "d"), floating=True)
    check_tensor("item_embeddings", item_embeddings, ("V", "d"), floating=True)
    check_same(
        "embedding size d",
        user_embeddings=user_embeddings.shape[1],
        item_embeddings=item_embeddings.shape[1],
    )
    # a diverged model: NaN scores would compare False and rank every positive first
    check_finite("user_embeddings", user_embeddings)
    check_finite("item_embeddings", item_embeddings)


def _check_embeddings_and_pairs(
    user_embeddings: torch.Tensor,
    item_embeddings: torch.Tensor,
    user_index: torch.Tensor,
    positive_ids: torch.Tensor,
    known: KnownPairs | None,
) -> tuple[int, int]:
    """The checks :func:`positive_ranks` and :func:`sampled_ranks` share; ``(U, |V|)``."""
    _check_embeddings(user_embeddings, item_embeddings)
    num_users, num_items = user_embeddings.shape[0], item_embeddings.shape[0]
    check_pairs(user_index, positive_ids, num_users=num_users, num_items=num_items)
    check_known(known, num_users, num_items)
    return num_users, num_items


def check_pairs(
    user_index: torch.Tensor,
    positive_ids: torch.Tensor,
    *,
    num_users: int | None,
    num_items: int,
    **more: torch.Tensor,
) -> None:
    """Test pairs: ``user_index`` and ``positive_ids`` (n,) ids in ``[0, U)`` and ``[0, |V|)``.

    ``num_users=None`` skips the user range; ``more``: other (n,) columns of the same pairs
    (e.g. their ``ranks``).
    """
    check_parallel(
        "number of interactions n", user_index=user_index, positive_ids=positive_ids, **more
    )
    check_int_range("num_items", num_items, 1)
    if num_users is not None:
        check_int_range("num_users", num_users, 1)
        check_ids("user_index", user_index, num_users)
    check_ids("positive_ids", positive_ids, num_items)


def count_above(scores: torch.Tensor, positive_scores: torch.Tensor) -> torch.Tensor:
    """The rank rule: ``#{j : not scores[i, j] ≤ positive_scores[i]}`` per row, (n, m) → (n,).

    Ties count in the positive's favour; a NaN score (of an item or of the positive) counts
    *against* it, so a diverged model never ranks a positive first. ``−inf`` (an excluded
    item) never counts. ``scores``: (n, m); ``positive_scores``: (n,), one per row (never
    broadcast). Chapters 5 and 9.
    """
    check_real_tensor("scores", scores, ("n", "m"))
    check_real_tensor("positive_scores", positive_scores, ("n",))
    check_same("number of rows n", scores=scores.shape[0], positive_scores=positive_scores.shape[0])
    return _count_above(scores, positive_scores)


def _count_above(scores: torch.Tensor, positive_scores: torch.Tensor) -> torch.Tensor:
    """:func:`count_above` of checked inputs."""
    at_most = (scores <= positive_scores[:, None]).sum(dim=1, dtype=torch.int32)
    return scores.shape[1] - at_most.long()  # an int32 sum: twice as fast as int64


#: On the CPU, the most scores in one chunk of the rank functions (2^21, 8 MB of float32):
#: counting over a (2048, 10^5) float32 matrix (800 MB) is memory-bound and several times
#: slower than over 20-row slices of it. A GPU prefers few large launches, so there
#: ``chunk_size`` alone decides.
CPU_SCORES_PER_CHUNK = 1 << 21


def _rows_per_chunk(chunk_size: int, num_items: int, device: torch.device) -> int:
    """Rows of a ``(rows, num_items)`` score chunk: ``chunk_size``, and on the CPU at most
    :data:`CPU_SCORES_PER_CHUNK` scores (at least one row)."""
    if device.type != "cpu":
        return chunk_size
    return max(1, min(chunk_size, CPU_SCORES_PER_CHUNK // max(num_items, 1)))


#: The rank functions' by-user schedule (:func:`_ranks_of_pairs`) is the default on the CPU
#: for score rows of at least this many items when users have two test pairs or more on
#: average; shorter rows are cheap to make again, and there one launch per user costs more
#: than it saves (``benchmarks/evaluation.py``: 1.5x faster at |V| = 10^5 with ten pairs a
#: user, 0.8-0.9x on MovieLens-100K's 1,682 items and with one pair a user).
_BY_USER_MIN_ITEMS = 1 << 15


def _by_user_by_default(users: torch.Tensor, num_items: int) -> bool:
    """The default schedule of :func:`_ranks_of_pairs` for these pairs' users."""
    return (
        users.device.type == "cpu"
        and num_items >= _BY_USER_MIN_ITEMS
        and users.shape[0] >= 2 * torch.unique(users).shape[0]
    )


def _ranks_of_pairs(
    score_rows: Callable[[torch.Tensor], torch.Tensor],
    users: torch.Tensor,
    targets: torch.Tensor,
    known: KnownPairs | None,
    chunk_size: int,
    num_items: int,
    *,
    by_user: bool | None = None,
) -> torch.Tensor:
    """``(n,)`` ranks of the pairs ``(users[n], targets[n])`` (checked, on one device).

    ``score_rows(u)``: fresh ``(len(u), |V|)`` score rows of the users ``u``, which this
    function may overwrite (the items of ``known`` are filled in them after the positives'
    scores are read). Two schedules, the same ranks up to the rounding of the rows (a
    matrix product may round a row differently in a batch of another size; rows copied from
    one matrix are the same bits). By chunk: each chunk of ``chunk_size`` pairs gets its own
    rows, a few large launches. By user: the pairs are grouped by user, a user's row is made
    once for all of that user's pairs, and the pairs are counted against it through a
    broadcast view, at most a chunk's worth at a time (memory stays that of a chunk; the
    row stays in cache), one small launch per user. ``by_user=None`` picks by user on the
    CPU for rows of at least :data:`_BY_USER_MIN_ITEMS` items and two pairs a user or more
    on average, by chunk otherwise (a GPU always: it prefers few large launches).
    """
    device = users.device
    users, targets = users.long(), targets.long()  # gather takes int64 ids on every torch
    step = _rows_per_chunk(chunk_size, num_items, device)
    ranks = torch.empty(users.shape[0], dtype=torch.int64, device=device)
    if by_user is None:
        by_user = _by_user_by_default(users, num_items)
    if not by_user:
        for start in range(0, users.shape[0], step):
            u, t = users[start : start + step], targets[start : start + step]
            rows = score_rows(u)
            target_score = rows.gather(1, t[:, None])[:, 0]
            if known is not None:
                known._fill(rows, u)
            ranks[start : start + step] = _count_above(rows, target_score)
        return ranks
    order = torch.argsort(users, stable=True)
    users, targets = users[order], targets[order]
    unique, counts = torch.unique_consecutive(users, return_counts=True)
    bounds = [0, *torch.cumsum(counts, 0).tolist()]  # user j's pairs: bounds[j]:bounds[j+1]
    grouped = torch.empty_like(ranks)
    for first in range(0, unique.shape[0], step):
        u = unique[first : first + step]
        rows = score_rows(u)
        lo, hi = bounds[first], bounds[first + u.shape[0]]
        row_of_pair = torch.repeat_interleave(
            torch.arange(u.shape[0], device=device), counts[first : first + step]
        )
        target_score = rows[row_of_pair, targets[lo:hi]]
        if known is not None:
            known._fill(rows, u)
        for j in range(u.shape[0]):  # a user's pairs, at most `step` at a time (memory)
            for a in range(bounds[first + j], bounds[first + j + 1], step):
                b = min(a + step, bounds[first + j + 1])
                view = rows[j].expand(b - a, -1)
                grouped[a:b] = _count_above(view, target_score[a - lo : b - lo])
    ranks[order] = grouped
    return ranks


def positive_ranks(
    user_embeddings: torch.Tensor,
    item_embeddings: torch.Tensor,
    user_index: torch.Tensor,
    positive_ids: torch.Tensor,
    *,
    known: KnownPairs | None = None,
    chunk_size: int = 2048,
) -> torch.Tensor:
    """Exact 0-based rank of each positive among all items: ``#{y : s(u, y) > s(u, pos)}``.

    ``user_embeddings``: (U, d); ``item_embeddings``: (|V|, d); ``user_index``: (n,) row of
    ``user_embeddings`` of each interaction's user; ``positive_ids``: (n,) the held-out
    item ids. ``known``: optional :class:`KnownPairs` (e.g. the training interactions)
    whose items are removed from that user's ranking (the positive itself is never
    removed). Returns (n,) int64 on the embeddings' device. Works in chunks of
    ``chunk_size`` interactions (on the CPU, of at most :data:`CPU_SCORES_PER_CHUNK`
    scores; for a large catalogue and two interactions a user or more on average, in chunks
    of users, each user's scores computed once for all of that user's interactions). NaN
    embeddings raise (module docstring). Chapter 5.
    """
    _check_embeddings_and_pairs(user_embeddings, item_embeddings, user_index, positive_ids, known)
    check_int_range("chunk_size", chunk_size, 1)
    user_embeddings, item_embeddings = _scoring_pair(user_embeddings, item_embeddings)
    device = item_embeddings.device
    users, targets = user_index.to(device), positive_ids.to(device)
    with torch.no_grad():
        return _ranks_of_pairs(
            lambda u: user_embeddings[u] @ item_embeddings.T,
            users,
            targets,
            known,
            chunk_size,
            item_embeddings.shape[0],
        )


def _check_top_k(k: int, known: KnownPairs | None, num_users: int, num_items: int) -> None:
    """``k`` in [1, |V|] and ``known`` of this catalogue; with ``known``, ``k`` at most the
    number of items every user has not seen (the known counts are a value check)."""
    check_int_range("k", k, 1, num_items)
    check_known(known, num_users, num_items)
    if known is None or not get_validate_args() or len(known) == 0:
        return
    counts = known._counts_of(torch.arange(num_users, device=known.device))
    most, user = (int(v) for v in counts.max(0))
    if k > num_items - most:
        raise ValueError(
            f"k must be <= {num_items - most} (user {user} has {most} known items of "
            f"{num_items}), got {k}: known items are never recommended"
        )


def top_k_items(
    user_embeddings: torch.Tensor,
    item_embeddings: torch.Tensor,
    k: int,
    *,
    known: KnownPairs | None = None,
    chunk_size: int = 2048,
) -> torch.Tensor:
    """``(U, k)`` ids of each user's ``k`` highest-scoring items, best first, exact.

    ``known``: optional :class:`KnownPairs` whose items are never recommended to that user;
    ``k`` must then leave enough: ``k <= |V| − (most known items of any user)``, else a
    ``ValueError`` naming ``k`` (a value check: with validation off such a row ends in
    known items). NaN embeddings raise (``torch.topk`` would rank NaN first). Chapters 5
    and 9.
    """
    _check_embeddings(user_embeddings, item_embeddings)
    num_users, num_items = user_embeddings.shape[0], item_embeddings.shape[0]
    _check_top_k(k, known, num_users, num_items)
    check_int_range("chunk_size", chunk_size, 1)
    user_embeddings, item_embeddings = _scoring_pair(user_embeddings, item_embeddings)
    device = item_embeddings.device
    step = _rows_per_chunk(chunk_size, num_items, device)
    out = []
    with torch.no_grad():
        for start in range(0, num_users, step):
            u = torch.arange(start, min(start + step, num_users), device=device)
            scores = user_embeddings[u] @ item_embeddings.T
            if known is not None:
                known._fill(scores, u)
            out.append(torch.topk(scores, k, dim=1).indices)
    return torch.cat(out)


def metrics_from_ranks(
    ranks: torch.Tensor, user_index: torch.Tensor, *, ks: Sequence[int] = (10, 50, 100)
) -> dict[str, float]:
    """``hit_rate@K``, ``recall@K`` (per-user average) and ``ndcg@K`` from 0-based ranks.
    Defaults: ``ks=(10, 50, 100)``."""
    check_parallel("number of interactions n", ranks=ranks, user_index=user_index)
    _check_ranks(ranks, ks)
    return _metrics_from_ranks(ranks, user_index, ks)


def _check_ks(ks: Sequence[int]) -> None:
    """``ks``: a sequence of ints ``k >= 1`` (a bare int is not one)."""
    if isinstance(ks, (str, bytes)) or not isinstance(ks, Sequence):
        raise ValueError(
            f"ks must be a sequence of ints, e.g. (10,), got {type(ks).__name__} {ks!r}"
        )
    for i, k in enumerate(ks):
        check_int_range(f"ks[{i}]", k, 1)


def _check_ranks(ranks: torch.Tensor, ks: Sequence[int]) -> None:
    _check_ks(ks)
    if get_validate_args() and bool((ranks < 0).any()):
        raise ValueError(f"ranks must be >= 0, got {int(ranks.min())}")


def _metrics_from_ranks(
    ranks: torch.Tensor, users: torch.Tensor, ks: Sequence[int]
) -> dict[str, float]:
    """:func:`metrics_from_ranks` of checked inputs (the package's own ranks)."""
    ranks = exact_float64(ranks)
    users = users.to(ranks.device)
    _, user_index = torch.unique(users, return_inverse=True)
    num = int(user_index.max()) + 1
    per_user_n = torch.bincount(user_index)  # every index in [0, num) occurs
    out: dict[str, float] = {}
    for k in ks:
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
    known: KnownPairs | None = None,
    chunk_size: int = 2048,
) -> dict[str, float]:
    """Exact full-catalogue ``hit_rate@K``, ``recall@K`` and ``ndcg@K`` for every ``K`` in ``ks``.

    Shapes as in :func:`positive_ranks`. Chapter 5.
    Defaults: ``ks=(10, 50, 100)``.
    """
    _check_ks(ks)
    ranks = positive_ranks(
        user_embeddings,
        item_embeddings,
        user_index,
        positive_ids,
        known=known,
        chunk_size=chunk_size,
    )
    return _metrics_from_ranks(ranks, user_index, ks)


# --------------------------------------------------------------- chapter 9: sampled metrics


def sample_unseen_negatives(
    user_index: torch.Tensor,
    positive_ids: torch.Tensor,
    *,
    num_users: int,
    num_items: int,
    num_negatives: int = 100,
    known: KnownPairs | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """The negatives of the sampled protocol: (n, m) item ids, m = ``num_negatives``.

    Row i holds m distinct items drawn uniformly from the items that are neither
    ``positive_ids[i]`` nor known for ``user_index[i]`` in ``known`` (a
    :class:`KnownPairs` of the user's training items). :func:`sampled_ranks` ranks against
    exactly these draws; call this directly to score models that are not embeddings (a
    score matrix, chapter 9) on the same negatives. ``generator`` lives on
    ``user_index``'s device. Raises ``ValueError`` when a row has fewer than m allowed
    items (always checked: the rounds of redraws would never end).
    Defaults: ``num_negatives=100``.
    """
    check_int_range("num_users", num_users, 1)
    check_int_range("num_items", num_items, 1)
    check_pairs(user_index, positive_ids, num_users=num_users, num_items=num_items)
    check_known(known, num_users, num_items)
    check_generator("generator", generator, user_index.device)
    return _sample_unseen(user_index, positive_ids, num_items, num_negatives, known, generator)


def _sample_unseen(
    user_index: torch.Tensor,
    positive_ids: torch.Tensor,
    num_items: int,
    num_negatives: int,
    known: KnownPairs | None,
    generator: torch.Generator | None,
) -> torch.Tensor:
    """:func:`sample_unseen_negatives` of checked pairs."""
    check_int_range("num_negatives", num_negatives, 1)
    users, targets = user_index, positive_ids.to(user_index.device)
    device = users.device
    allowed = torch.full_like(users, num_items - 1)  # every item but the positive
    if known is not None:
        positive_known = known._mask(users, targets[:, None])[:, 0].to(device)
        allowed = allowed - known._counts_of(users).to(device) + positive_known.long()
    if bool((allowed < num_negatives).any()):
        worst = int(allowed.min())
        raise ValueError(
            f"num_negatives must be <= the items a user has not seen ({worst} for some test "
            f"pair), got {num_negatives}"
        )
    n = users.shape[0]
    negatives = torch.randint(num_items, (n, num_negatives), device=device, generator=generator)
    while True:
        negatives, _ = torch.sort(negatives, dim=1)
        bad = negatives == targets[:, None]
        bad[:, 1:] |= negatives[:, 1:] == negatives[:, :-1]  # a repeat within the row
        if known is not None:
            bad |= known._mask(users, negatives).to(device)
        num_bad = int(bad.sum())
        if num_bad == 0:
            break
        negatives[bad] = torch.randint(num_items, (num_bad,), device=device, generator=generator)
    return negatives


def sampled_ranks(
    user_embeddings: torch.Tensor,
    item_embeddings: torch.Tensor,
    user_index: torch.Tensor,
    positive_ids: torch.Tensor,
    *,
    num_negatives: int = 100,
    known: KnownPairs | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Rank of each positive among ``num_negatives`` sampled items: the *sampled* protocol.

    For every test pair ``(u, pos)``, ``m = num_negatives`` distinct items are drawn
    uniformly from the items ``y ≠ pos`` that are not known for ``u`` in ``known`` (the
    user's training items), and ``rank = #{sampled y : s(u, y) > s(u, pos)}`` ∈ [0, m]
    (ties in the positive's favour, NaN against it, as in :func:`positive_ranks`). This is
    the protocol Krichene & Rendle (2020) show to be inconsistent with full-catalogue
    metrics (chapter 9). Shapes as in :func:`positive_ranks`; ``generator`` lives on the
    item embeddings' device. Drawing is vectorised (:func:`sample_unseen_negatives`).
    Returns (n,) int64.
    Defaults: ``num_negatives=100``.
    """
    num_users, num_items = _check_embeddings_and_pairs(
        user_embeddings, item_embeddings, user_index, positive_ids, known
    )
    check_generator("generator", generator, item_embeddings.device)
    device = item_embeddings.device
    users, targets = user_index.to(device), positive_ids.to(device)
    negatives = _sample_unseen(users, targets, num_items, num_negatives, known, generator)
    user_embeddings, item_embeddings = _scoring_pair(user_embeddings, item_embeddings)
    with torch.no_grad():
        query = user_embeddings[users]
        positive_scores = (query * item_embeddings[targets]).sum(-1)
        negative_scores = torch.einsum("nd,nmd->nm", query, item_embeddings[negatives])
        return count_above(negative_scores, positive_scores)


def sampled_metrics(
    user_embeddings: torch.Tensor,
    item_embeddings: torch.Tensor,
    user_index: torch.Tensor,
    positive_ids: torch.Tensor,
    *,
    num_negatives: int = 100,
    ks: Sequence[int] = (10,),
    known: KnownPairs | None = None,
    generator: torch.Generator | None = None,
) -> dict[str, float]:
    """``hit_rate@K``, ``recall@K`` and ``ndcg@K`` under the sampled protocol.

    :func:`metrics_from_ranks` of :func:`sampled_ranks`: the positive ranked among
    ``num_negatives`` uniformly sampled unseen items instead of the whole catalogue
    (Krichene & Rendle 2020; chapter 9). With 100 negatives, ``hit_rate@10`` asks whether
    the positive beats all but at most 9 of 100 random items.
    Defaults: ``ks=(10,)``.
    """
    _check_ks(ks)
    ranks = sampled_ranks(
        user_embeddings,
        item_embeddings,
        user_index,
        positive_ids,
        num_negatives=num_negatives,
        known=known,
        generator=generator,
    )
    return _metrics_from_ranks(ranks, user_index, ks)


# ------------------------------------------------------- chapter 9: popularity strata


def popularity_strata(popularity: torch.Tensor, num_strata: int = 10) -> torch.Tensor:
    """Stratum of every item by popularity: ``(|V|,)`` int64 in ``[0, num_strata)``.

    Items are ordered by decreasing ``popularity`` (counts or probabilities, ``(|V|,)``;
    ties by id) and cut into ``num_strata`` groups of (nearly) equal *numbers of items*:
    stratum 0 holds the most popular ``|V| / num_strata`` items (deciles for 10). Item at
    position ``r`` of the order gets stratum ``⌊r · num_strata / |V|⌋``. Chapter 9.
    """
    check_real_tensor("popularity", popularity, ("V",))
    if not popularity.numel():
        raise ValueError("popularity must not be empty, got shape (0,)")
    check_int_range("num_strata", num_strata, 1, popularity.shape[0])
    check_finite("popularity", popularity)  # NaN would sort as the most popular item
    num_items = popularity.shape[0]
    order = torch.sort(-exact_float64(popularity), stable=True).indices.to(popularity.device)
    positions = torch.arange(num_items, device=popularity.device)
    strata = torch.empty(num_items, dtype=torch.int64, device=popularity.device)
    strata[order] = torch.div(positions * num_strata, num_items, rounding_mode="floor")
    return strata


def _check_strata(item_strata: torch.Tensor) -> int:
    check_tensor("item_strata", item_strata, ("V",), floating=False)
    if get_validate_args() and int(item_strata.min()) < 0:
        raise ValueError(f"item_strata must be >= 0, got {int(item_strata.min())}")
    return int(item_strata.max()) + 1


def stratified_metrics(
    ranks: torch.Tensor,
    user_index: torch.Tensor,
    positive_ids: torch.Tensor,
    item_strata: torch.Tensor,
    *,
    ks: Sequence[int] = (10, 100),
) -> pd.DataFrame:
    """Metrics of the test pairs split by the stratum of their positive item (chapter 9).

    ``ranks``: (n,) 0-based ranks (:func:`positive_ranks` or :func:`sampled_ranks`);
    ``user_index``, ``positive_ids``: (n,); ``item_strata``: (|V|,) stratum id of every
    item (:func:`popularity_strata`). One row per stratum ``g`` (index ``stratum``):
    ``pairs`` (number of test pairs whose positive is in ``g``), ``share`` (their
    fraction), and :func:`metrics_from_ranks` of those pairs (NaN for an empty stratum).
    The strata partition the test set, so ``Σ_g share_g · hit_rate_g`` is the overall
    ``hit_rate`` (likewise ``ndcg``; ``recall`` is a per-user average and does not add up).
    Defaults: ``ks=(10, 100)``.
    """
    num_strata = _check_strata(item_strata)
    check_pairs(
        user_index, positive_ids, num_users=None, num_items=item_strata.shape[0], ranks=ranks
    )
    _check_ranks(ranks, ks)
    group = item_strata[positive_ids.to(item_strata.device)].to(ranks.device)
    user_index = user_index.to(ranks.device)
    rows = []
    for g in range(num_strata):  # a loop over the few strata, not over pairs
        members = group == g
        count = int(members.sum())
        row: dict[str, float] = {"stratum": g, "pairs": count, "share": count / len(group)}
        if count:
            row.update(_metrics_from_ranks(ranks[members], user_index[members], ks))
        rows.append(row)
    import pandas as pd  # optional: the [data] extra; the rest of eval needs torch only

    return pd.DataFrame(rows).set_index("stratum")


def top_k_stratum_shares(top_ids: torch.Tensor, item_strata: torch.Tensor) -> torch.Tensor:
    """Share of all recommended slots that falls in each stratum: ``(num_strata,)`` float64.

    ``top_ids``: (U, K) each user's recommended item ids (:func:`top_k_items`);
    ``item_strata``: (|V|,) as in :func:`stratified_metrics`. The shares sum to 1; the
    *tail rate* of a recommender is the sum of the shares of its tail strata. Chapter 9.
    """
    check_tensor("top_ids", top_ids, ("U", "K"), floating=False)
    num_strata = _check_strata(item_strata)
    check_ids("top_ids", top_ids, item_strata.shape[0])
    groups = item_strata[top_ids.to(item_strata.device).reshape(-1)]
    counts = exact_float64(torch.bincount(groups, minlength=num_strata))
    return counts / counts.sum()


def user_bootstrap(
    values: torch.Tensor,
    users: torch.Tensor | None = None,
    *,
    num_users: int | None = None,
    num_resamples: int = 2000,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """The pair-weighted mean of ``values`` in each of ``num_resamples`` resamples of users.

    ``values``: (n,) one number per test pair (a hit, a reciprocal rank, the paired
    difference of two models), or (m, n) for ``m`` quantities on the same pairs (several
    models, so that a statistic of them — a ratio, a difference, a minimum — is computed
    draw by draw, on the same users); ``users``: (n,) each pair's user in
    ``[0, num_users)`` (default ``num_users = users.max() + 1``), or None to treat every
    pair as its own unit (then one value per user is the plain bootstrap of a mean over
    users). Each draw takes ``num_users`` users with replacement (a cluster bootstrap: a
    user's pairs move together) and computes ``Σ_drawn per-user sum / Σ_drawn per-user
    count``. The draws are ``torch.randint(num_users, (num_resamples, num_users),
    generator=generator)`` on the CPU, so one ``generator`` seed gives every call the same
    resampled users. Returns float64 (num_resamples,) or (num_resamples, m) on the CPU. A
    NaN in ``values`` gives NaN (never dropped); a resample that holds no pair (``num_users``
    far above the users that have pairs) raises instead of giving 0 / 0. Chapters 5, 9
    and 10.
    Defaults: ``num_resamples=2000``.
    """
    if not isinstance(values, torch.Tensor) or values.dim() not in (1, 2):
        got = tuple(values.shape) if isinstance(values, torch.Tensor) else type(values).__name__
        raise ValueError(f"values must be a tensor of shape (n,) or (m, n), got {got}")
    check_tensor("values", values, ("n",) if values.dim() == 1 else ("m", "n"), floating=True)
    check_int_range("num_resamples", num_resamples, 1)
    check_generator("generator", generator)
    rows = values.detach().cpu().double()
    rows = rows[None, :] if rows.dim() == 1 else rows  # (m, n)
    if users is None:
        users = torch.arange(rows.shape[1])
    check_tensor("users", users, (rows.shape[1],), floating=False)
    users = users.cpu().long()
    if num_users is None:
        check_ids("users", users, None)
        num_users = int(users.max()) + 1  # values, so users, are never empty
    check_int_range("num_users", num_users, 1)
    check_ids("users", users, num_users)
    per_user = torch.zeros(rows.shape[0], num_users, dtype=torch.float64)
    per_user.index_add_(1, users, rows)  # (m, U) each user's sum
    pairs = torch.bincount(users, minlength=num_users).double()
    draws = torch.randint(num_users, (num_resamples, num_users), generator=generator)
    weights = torch.zeros(num_resamples, num_users, dtype=torch.float64).scatter_add_(
        1, draws, torch.ones(num_resamples, num_users, dtype=torch.float64)
    )  # how often each user is drawn
    drawn_pairs = weights @ pairs
    if bool((drawn_pairs == 0).any()):
        raise ValueError(
            f"a resample drew only users without pairs ({int((pairs > 0).sum())} of "
            f"num_users = {num_users} have any): num_users must count the users of the "
            "test pairs, not more"
        )
    estimates = (weights @ per_user.T) / drawn_pairs[:, None]  # (R, m)
    return estimates[:, 0] if values.dim() == 1 else estimates


def user_bootstrap_interval(
    values: torch.Tensor,
    users: torch.Tensor | None = None,
    *,
    num_users: int | None = None,
    num_resamples: int = 2000,
    confidence: float = 0.95,
    generator: torch.Generator | None = None,
) -> tuple[float, float, float]:
    """Mean of ``values`` over test pairs and its percentile interval over resampled users.

    ``values``: (n,) one number per test pair (a hit, a reciprocal rank, or the difference
    of two models' values on the same pairs: a *paired* interval); ``users``,
    ``num_users``, ``num_resamples`` and ``generator`` as in :func:`user_bootstrap`, whose
    draws this summarises. Returns ``(mean, low, high)`` with ``low`` / ``high`` the
    ``(1 ∓ confidence) / 2`` quantiles of the draws. A NaN in ``values`` gives NaN (never
    dropped). Chapters 5, 9 and 10.
    Defaults: ``num_resamples=2000``, ``confidence=0.95``.
    """
    check_tensor("values", values, ("n",), floating=True)
    if isinstance(confidence, bool) or not isinstance(confidence, (int, float)) or not (
        0 < confidence < 1
    ):
        raise ValueError(f"confidence must lie in (0, 1), got {confidence!r}")
    estimates = user_bootstrap(
        values, users, num_users=num_users, num_resamples=num_resamples, generator=generator
    )
    tail = (1 - confidence) / 2
    low, high = torch.quantile(estimates, torch.tensor([tail, 1 - tail], dtype=torch.float64))
    return float(values.detach().double().mean()), float(low), float(high)


CALIBRATION_BINNINGS = ("quantile", "uniform")


def expected_calibration_error(
    probabilities: torch.Tensor,
    labels: torch.Tensor,
    *,
    num_bins: int = 10,
    binning: str = "quantile",
) -> tuple[float, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Expected calibration error and the reliability diagram's bins (chapter 11).

    ``probabilities``: (n,) predicted probabilities in [0, 1], one per prediction (e.g.
    each test user's top-10 items); ``labels``: (n,) whether each prediction came true
    (bool, or 0 / 1 numbers). The predictions are split into ``num_bins`` bins of
    their probability: ``binning="quantile"`` (default) gives bins of equal count (the
    sorted predictions cut into ``num_bins`` nearly equal runs; the *adaptive*
    calibration error of Nixon et al. 2019), ``"uniform"`` bins of equal width on
    [0, 1] (Guo et al. 2017; a value of 1 falls in the last bin). With ``n_b``
    predictions in bin ``b``, mean predicted probability ``p̄_b`` and observed frequency
    ``ȳ_b``::

        ECE = Σ_b (n_b / n) · |p̄_b − ȳ_b|

    Returns ``(ece, predicted, observed, counts)``: the ECE as a float and, per bin,
    ``p̄_b``, ``ȳ_b`` (float64, NaN for an empty bin, which adds nothing to the ECE)
    and ``n_b`` (int64), all (num_bins,) on the CPU. A calibrated model has ECE near 0,
    but not at 0: a finite sample of a calibrated model's labels scatters around
    ``p̄_b`` (chapter 11 measures that floor by simulation).
    """
    check_probabilities("probabilities", probabilities)
    check_tensor("probabilities", probabilities, ("n",))
    check_tensor("labels", labels, (probabilities.shape[0],))
    if probabilities.shape[0] == 0:
        raise ValueError("probabilities must hold at least one prediction, got none")
    if labels.is_complex() or (
        labels.dtype != torch.bool and get_validate_args() and not bool(
            ((labels == 0) | (labels == 1)).all()
        )
    ):
        raise ValueError("labels must be bool or 0 / 1 numbers")
    check_int_range("num_bins", num_bins, 1)
    check_choice("binning", binning, CALIBRATION_BINNINGS)
    p = probabilities.detach().cpu().double()
    y = labels.detach().cpu().double()
    if binning == "quantile":
        order = torch.argsort(p, stable=True)
        bins = torch.empty(p.shape[0], dtype=torch.int64)
        for b, run in enumerate(torch.tensor_split(order, num_bins)):
            bins[run] = b
    else:
        bins = (p * num_bins).long().clamp(max=num_bins - 1)
    counts = torch.bincount(bins, minlength=num_bins)
    sum_p = torch.zeros(num_bins, dtype=torch.float64).index_add_(0, bins, p)
    sum_y = torch.zeros(num_bins, dtype=torch.float64).index_add_(0, bins, y)
    filled = counts > 0
    nan = torch.full((num_bins,), float("nan"), dtype=torch.float64)
    predicted = torch.where(filled, sum_p / counts.clamp(min=1), nan)
    observed = torch.where(filled, sum_y / counts.clamp(min=1), nan)
    ece = float((sum_p - sum_y).abs().sum() / p.shape[0])
    return ece, predicted, observed, counts
