"""In-batch and mixed-negative softmax losses for two-tower retrieval (chapter 5).

A batch holds ``B`` (query, positive item) pairs. The **in-batch softmax** scores every
query against all ``B`` positives of the batch: row ``i``'s positive is column ``i`` and
the other rows' positives are its negatives. **Mixed negatives** (Yang et al. 2020) add
``B'`` extra items drawn by a sampler (uniform or unigram) and shared by the whole
batch, so the candidate columns are ``[B in-batch items | B' extra items]``.

Every loss composes the pipeline steps of :mod:`candidate_sampling.losses.core`:

1. scores ``s(x_i, y_j) = u_i · v_j``;
2. correction ``o_ij = s_ij / τ − log Q(y_j)`` (:func:`correct_logits`; the order is the
   book's convention: the temperature scales the score, the correction is *not*
   divided by τ — the two orders differ whenever τ ≠ 1);
3. masks (:func:`mask_logits`): a column whose item equals row ``i``'s positive, other
   than column ``i`` itself, is a *duplicate positive* — with it the row would push its
   own positive down as a negative — and an extra item equal to row ``i``'s positive is an
   *accidental hit*; both are removed;
4. the softmax cross-entropy with row ``i``'s positive in column ``i``
   (:func:`positive_on_diagonal_loss`, the in-batch layout of
   :func:`softmax_loss_positive_first`);
5. the reduction (:func:`reduce_loss`, mean over rows by default).

``log Q`` is corrected on **every** column, the row's own positive included (Yi et al.
2019): the correction estimates how often an item is a candidate at all, and the
positive's column is one of the draws. (The source post zeroes the positive's correction.)

The choice of ``Q*`` for mixed negatives is :func:`mixed_log_q`'s ``form``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from candidate_sampling._validate import (
    check_finite,
    check_int_range,
    check_same,
    check_tensor,
)
from candidate_sampling.losses.core import (
    correct_logits,
    mask_logits,
    reduce_loss,
)

__all__ = [
    "MIXED_Q_FORMS",
    "InBatchSoftmaxLoss",
    "MixedNegativesLoss",
    "duplicate_positive_mask",
    "in_batch_softmax_loss",
    "mixed_log_q",
    "mixed_negatives_logits",
    "mixed_negatives_loss",
    "positive_on_diagonal_loss",
]

MIXED_Q_FORMS = ("mixture", "expected_count", "inclusion")


def mixed_log_q(
    batch_probs: torch.Tensor,
    extra_probs: torch.Tensor,
    batch_size: int,
    num_extra: int,
    form: str = "expected_count",
) -> torch.Tensor:
    """``log Q*(y)`` of a candidate under mixed negatives, for three readings of Yang et al.

    ``batch_probs`` ``q(y)``: the probability that one batch positive is ``y`` (the unigram
    frequency of ``y`` as a training positive); ``extra_probs`` ``r(y)``: the extra
    sampler's per-draw probability (``1/|V|`` for uniform). Same shape, any shape.

    * ``"expected_count"``: ``Q* = B·q + B'·r`` — the expected number of columns holding
      ``y`` (TF's semantics for log Q).
    * ``"mixture"``: ``Q* = (B·q + B'·r) / (B + B')`` — the per-column probability of the
      mixture. It is the expected count divided by the constant ``B + B'``, so under a
      softmax it gives *exactly* the same loss, provided every column (in-batch and extra
      alike) uses it.
    * ``"inclusion"``: ``Q* = 1 − (1 − q)^B (1 − r)^{B'}`` — the probability that ``y`` is
      among the candidates at least once (computed as ``−expm1(B log1p(−q) + B' log1p(−r))``).
      It equals the expected count for rare items and saturates at 1 for popular ones, so
      it corrects popular items less.

    Returns float32 ``log Q*`` of the inputs' shape. Chapter 5.
    """
    if form not in MIXED_Q_FORMS:
        raise ValueError(f"form must be one of {MIXED_Q_FORMS}, got {form!r}")
    check_int_range("batch_size", batch_size, 1)
    check_int_range("num_extra", num_extra, 0)
    for name, probs in (("batch_probs", batch_probs), ("extra_probs", extra_probs)):
        if not isinstance(probs, torch.Tensor) or not probs.is_floating_point():
            raise ValueError(f"{name} must be a floating-point tensor of probabilities")
        if probs.numel() and (bool((probs < 0).any()) or bool((probs > 1).any())):
            raise ValueError(f"{name} must lie in [0, 1]")
    if batch_probs.shape != extra_probs.shape:
        raise ValueError(
            f"batch_probs and extra_probs must have the same shape, got "
            f"{tuple(batch_probs.shape)} and {tuple(extra_probs.shape)}"
        )
    q = batch_probs.to(torch.float64)
    r = extra_probs.to(torch.float64)
    if form == "inclusion":
        value = -torch.expm1(batch_size * torch.log1p(-q) + num_extra * torch.log1p(-r))
    else:
        value = batch_size * q + num_extra * r
        if form == "mixture":
            value = value / (batch_size + num_extra)
    if value.numel() and bool((value <= 0).any()):
        raise ValueError(
            "Q* must be > 0 for every candidate: an item with q = r = 0 cannot be drawn"
        )
    return torch.log(value).to(torch.float32)


def duplicate_positive_mask(
    positive_ids: torch.Tensor, candidate_ids: torch.Tensor
) -> torch.Tensor:
    """(B, C) bool: column ``j`` holds row ``i``'s positive item but is not row ``i``'s own column.

    ``positive_ids``: (B,); ``candidate_ids``: (C,) with ``C >= B`` whose first ``B``
    entries are the batch's positives (column ``i`` is row ``i``'s positive). This masks
    duplicate positives in the in-batch part and accidental hits among the extras alike.
    """
    check_tensor("positive_ids", positive_ids, ("B",), floating=False)
    check_tensor("candidate_ids", candidate_ids, ("C",), floating=False)
    batch = positive_ids.shape[0]
    same = positive_ids[:, None] == candidate_ids[None, :]
    same[:, :batch].fill_diagonal_(False)
    return same


def _check_inputs(query, items, ids, log_q, extra, extra_ids, extra_log_q):
    check_tensor("query", query, ("B", "d"), floating=True)
    check_tensor("item_embeddings", items, ("B", "d"), floating=True)
    check_same("batch size B", query=query.shape[0], item_embeddings=items.shape[0])
    check_same("embedding size d", query=query.shape[1], item_embeddings=items.shape[1])
    batch = query.shape[0]
    if ids is not None:
        check_tensor("item_ids", ids, ("B",), floating=False)
        check_same("batch size B", query=batch, item_ids=ids.shape[0])
    if log_q is not None:
        check_tensor("log_q", log_q, ("B",), floating=True)
        check_same("batch size B", query=batch, log_q=log_q.shape[0])
        check_finite("log_q", log_q)
    if extra is not None:
        check_tensor("extra_embeddings", extra, ("B'", "d"), floating=True, allow_empty=True)
        check_same("embedding size d", query=query.shape[1], extra_embeddings=extra.shape[1])
        if extra_ids is not None:
            check_tensor("extra_ids", extra_ids, ("B'",), floating=False, allow_empty=True)
            check_same(
                "number of extra negatives B'",
                extra_embeddings=extra.shape[0],
                extra_ids=extra_ids.shape[0],
            )
        if extra_log_q is not None:
            check_tensor("extra_log_q", extra_log_q, ("B'",), floating=True, allow_empty=True)
            check_same(
                "number of extra negatives B'",
                extra_embeddings=extra.shape[0],
                extra_log_q=extra_log_q.shape[0],
            )
            check_finite("extra_log_q", extra_log_q)
        if (log_q is None) != (extra_log_q is None):
            raise ValueError("log_q and extra_log_q must be given together (or both None)")
        if (ids is None) != (extra_ids is None):
            raise ValueError("item_ids and extra_ids must be given together (or both None)")


def mixed_negatives_logits(
    query: torch.Tensor,
    item_embeddings: torch.Tensor,
    item_ids: torch.Tensor | None = None,
    log_q: torch.Tensor | None = None,
    extra_embeddings: torch.Tensor | None = None,
    extra_ids: torch.Tensor | None = None,
    extra_log_q: torch.Tensor | None = None,
    temperature: float = 1.0,
    remove_duplicates: bool | None = None,
) -> torch.Tensor:
    """Corrected, masked logits ``(B, B + B')``; row ``i``'s positive is column ``i``.

    ``query``: (B, d) user-tower outputs; ``item_embeddings``: (B, d) the positives' item-
    tower outputs (row ``i``'s positive is row ``i``); ``item_ids``: (B,) their ids;
    ``log_q``: (B,) their ``log Q``; ``extra_*``: the ``B'`` shared extra negatives, (B', d),
    (B',), (B',). Logit of candidate ``j`` for row ``i``: ``u_i·v_j / τ − log Q_j``; columns
    are ``[B in-batch | B' extra]``. With ``remove_duplicates`` (needs ids; ``None``, the
    default, means "when ids are given"), every column other than ``i`` that holds row
    ``i``'s positive item is masked (duplicate positives and accidental hits).
    """
    _check_inputs(query, item_embeddings, item_ids, log_q, extra_embeddings, extra_ids, extra_log_q)
    candidates, ids, lq = item_embeddings, item_ids, log_q
    if extra_embeddings is not None and extra_embeddings.shape[0] > 0:
        candidates = torch.cat([item_embeddings, extra_embeddings.to(item_embeddings.dtype)], 0)
        if item_ids is not None:
            ids = torch.cat([item_ids, extra_ids.to(item_ids.dtype)])
        if log_q is not None:
            lq = torch.cat([log_q, extra_log_q.to(log_q.dtype)])
    scores = query @ candidates.T  # (B, C)
    if lq is None and not isinstance(temperature, torch.Tensor) and temperature == 1.0:
        logits = scores  # nothing to correct: skip a pass over the (B, C) matrix
    else:
        logits = correct_logits(scores, None if lq is None else lq[None, :], temperature)
    if remove_duplicates is None:
        remove_duplicates = ids is not None
    if remove_duplicates:
        if ids is None:
            raise ValueError("item_ids are needed to remove duplicates (remove_duplicates=True)")
        logits = mask_logits(logits, duplicate_positive_mask(item_ids, ids))
    return logits


def positive_on_diagonal_loss(logits: torch.Tensor) -> torch.Tensor:
    """Per-row softmax cross-entropy when row ``i``'s positive is column ``i``: (B, C) → (B,).

    ``ℓ_i = logsumexp_j(o_ij) − o_ii`` — the in-batch layout's counterpart of
    :func:`softmax_loss_positive_first` (same value, no copy of the (B, C) matrix).
    Computed in at least float32.
    """
    work = logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits
    targets = torch.arange(work.shape[0], device=work.device)
    return F.cross_entropy(work, targets, reduction="none")


def mixed_negatives_loss(
    query: torch.Tensor,
    item_embeddings: torch.Tensor,
    item_ids: torch.Tensor | None = None,
    log_q: torch.Tensor | None = None,
    extra_embeddings: torch.Tensor | None = None,
    extra_ids: torch.Tensor | None = None,
    extra_log_q: torch.Tensor | None = None,
    temperature: float = 1.0,
    remove_duplicates: bool | None = None,
    reduction: str = "mean",
) -> torch.Tensor:
    """Mixed-negative softmax (Yang et al. 2020): in-batch candidates plus ``B'`` shared extras.

    Per row: ``ℓ_i = −o_ii + log Σ_{j ∈ batch ∪ extra, unmasked} exp(o_ij)`` with
    ``o_ij = u_i·v_j / τ − log Q*_j`` (see :func:`mixed_negatives_logits` for shapes and
    masks, :func:`mixed_log_q` for ``Q*``). With no extras it is the in-batch softmax.
    Reduction over rows: ``"mean"`` (default), ``"sum"`` or ``"none"``. Chapter 5.
    """
    logits = mixed_negatives_logits(
        query,
        item_embeddings,
        item_ids,
        log_q,
        extra_embeddings,
        extra_ids,
        extra_log_q,
        temperature,
        remove_duplicates,
    )
    return reduce_loss(positive_on_diagonal_loss(logits), reduction)


def in_batch_softmax_loss(
    query: torch.Tensor,
    item_embeddings: torch.Tensor,
    item_ids: torch.Tensor | None = None,
    log_q: torch.Tensor | None = None,
    temperature: float = 1.0,
    remove_duplicates: bool | None = None,
    reduction: str = "mean",
) -> torch.Tensor:
    """In-batch softmax: row ``i`` against the ``B`` positives of the batch (Yi et al. 2019).

    ``ℓ_i = −o_ii + log Σ_j exp(o_ij)``, ``o_ij = u_i·v_j / τ − log Q(y_j)``.
    ``query``, ``item_embeddings``: (B, d); ``item_ids``: (B,) (needed for
    ``remove_duplicates``); ``log_q``: (B,) log of each positive's in-batch probability (the
    logQ correction; ``None`` for the plain in-batch softmax of TF Recommenders' tutorial).
    Equals :func:`mixed_negatives_loss` with no extra negatives. Chapter 5.
    """
    return mixed_negatives_loss(
        query,
        item_embeddings,
        item_ids,
        log_q,
        None,
        None,
        None,
        temperature,
        remove_duplicates,
        reduction,
    )


class InBatchSoftmaxLoss(nn.Module):
    """Module form of :func:`in_batch_softmax_loss` with a fixed temperature and options."""

    def __init__(
        self,
        temperature: float = 1.0,
        remove_duplicates: bool | None = None,
        reduction: str = "mean",
    ) -> None:
        super().__init__()
        self.temperature = temperature
        self.remove_duplicates = remove_duplicates
        self.reduction = reduction

    def forward(self, query, item_embeddings, item_ids=None, log_q=None):
        return in_batch_softmax_loss(
            query,
            item_embeddings,
            item_ids,
            log_q,
            self.temperature,
            self.remove_duplicates,
            self.reduction,
        )


class MixedNegativesLoss(nn.Module):
    """Module form of :func:`mixed_negatives_loss` with a fixed temperature and options."""

    def __init__(
        self,
        temperature: float = 1.0,
        remove_duplicates: bool | None = None,
        reduction: str = "mean",
    ) -> None:
        super().__init__()
        self.temperature = temperature
        self.remove_duplicates = remove_duplicates
        self.reduction = reduction

    def forward(
        self,
        query,
        item_embeddings,
        item_ids=None,
        log_q=None,
        extra_embeddings=None,
        extra_ids=None,
        extra_log_q=None,
    ):
        return mixed_negatives_loss(
            query,
            item_embeddings,
            item_ids,
            log_q,
            extra_embeddings,
            extra_ids,
            extra_log_q,
            self.temperature,
            self.remove_duplicates,
            self.reduction,
        )
