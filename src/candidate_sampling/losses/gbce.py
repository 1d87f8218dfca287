"""gBCE: binary cross-entropy with sampled negatives and a calibration exponent (chapter 10).

Petrov & Macdonald (2023, gSASRec) train a sequential recommender with ``k`` negatives
sampled uniformly from the ``|I| − 1`` items that are not the positive. Plain binary
cross-entropy (BCE) on such a sample is **over-confident**: the sample holds a fraction
``α = k / (|I| − 1)`` of the negatives, so the model meets each negative ``1/α`` times less
often than under the full loss, and its sigmoid learns to say "positive" too readily.
gBCE raises the positive's predicted probability to a power ``β``:

    ℓ = −log σ(s⁺)^β − Σ_{j=1..k} log(1 − σ(s⁻_j))
      = β · softplus(−s⁺) + Σ_j softplus(s⁻_j),

    β = α · (t · (1 − 1/α) + 1/α),   α = k / (|I| − 1),   t ∈ [0, 1].

``t = 0`` gives ``β = 1``, plain BCE (the original SASRec has ``k = 1``); ``t = 1`` gives
``β = α``, which the paper shows makes the sigmoid calibrated for the full item set. The
paper's code writes the same loss as BCE on a transformed positive logit
``log(1 / (σ(s⁺)^{−β} − 1))``; the softplus form above is equal and stable.

This is a logistic loss of the package's pipeline (score → mask → logistic → reduce):
its binary terms are :func:`~candidate_sampling.losses.core.logistic_terms`, and masked
negatives (accidental hits) get zero weight, never a mask value, as in the NCE family
(:mod:`candidate_sampling.losses.logistic`); there is no log Q (the paper
samples uniformly; β is its correction).
"""

from __future__ import annotations

import math

import torch

from candidate_sampling._validate import (
    check_int_range,
    check_same,
    check_tensor,
    common_float_dtype,
)
from candidate_sampling.losses.core import logistic_terms, reduce_loss

__all__ = ["gbce_beta", "gbce_from_scores"]


def gbce_beta(num_samples: int, num_items: int, t: float) -> float:
    """gSASRec's exponent ``β = α (t (1 − 1/α) + 1/α)`` with ``α = k / (|I| − 1)``.

    ``num_samples``: k negatives per positive, ``1 ≤ k ≤ |I| − 1``; ``num_items``: |I|,
    the catalogue size (≥ 2); ``t``: the calibration parameter in [0, 1]. ``t = 0`` →
    ``β = 1`` (BCE), ``t = 1`` → ``β = α``. Chapter 10.
    """
    check_int_range("num_items", num_items, 2)
    check_int_range("num_samples", num_samples, 1, num_items - 1)
    _check_t(t)
    return _beta(num_samples, num_items, t)


def _check_t(t: float) -> None:
    if isinstance(t, bool) or not isinstance(t, (int, float)):
        raise ValueError(f"t must be a number in [0, 1], got {type(t).__name__}")
    if not (math.isfinite(t) and 0.0 <= t <= 1.0):
        raise ValueError(f"t must lie in [0, 1], got {t!r}")


def _beta(num_samples: int, num_items: int, t: float) -> float:
    """:func:`gbce_beta` of checked arguments."""
    alpha = num_samples / (num_items - 1)
    return alpha * (t * (1.0 - 1.0 / alpha) + 1.0 / alpha)


def gbce_from_scores(
    positive_scores: torch.Tensor,
    negative_scores: torch.Tensor,
    *,
    num_items: int,
    t: float,
    num_samples: int | None = None,
    mask: torch.Tensor | None = None,
    sample_weight: torch.Tensor | None = None,
    reduction: str = "mean",
) -> torch.Tensor:
    """gBCE from scores: ``β · softplus(−s⁺) + Σ_j (1 − mask_j) · softplus(s⁻_j)`` per row.

    ``positive_scores``: (B,) the positive's score s⁺; ``negative_scores``: (B, k) the
    sampled negatives' scores; ``num_items``: |I|; ``t``: calibration in [0, 1] (``t = 0``
    is BCE exactly); ``num_samples``: the k that enters ``α`` (default: the number of
    columns of ``negative_scores``); ``mask``: (B, k) bool, True = drop that negative
    (an accidental hit; zero weight). β comes from :func:`gbce_beta`. The binary terms
    are the pipeline's logistic step,
    :func:`~candidate_sampling.losses.core.logistic_terms` (label 1 for the positive, 0
    for the negatives). Computed in at least float32. ``sample_weight``: (B,) per-row
    weights; reduction over rows as :func:`~candidate_sampling.losses.core.reduce_loss`:
    ``"mean"`` (default), ``"sum"`` or ``"none"``. Chapter 10.
    """
    check_tensor("positive_scores", positive_scores, ("B",), floating=True)
    check_tensor("negative_scores", negative_scores, ("B", "k"), floating=True)
    check_same(
        "batch size B",
        positive_scores=positive_scores.shape[0],
        negative_scores=negative_scores.shape[0],
    )
    check_int_range("num_items", num_items, 2)
    if num_samples is None:  # k = the columns of negative_scores: name them in the error
        num_samples = negative_scores.shape[1]
        if num_samples > num_items - 1:
            raise ValueError(
                f"negative_scores must have at most num_items - 1 = {num_items - 1} "
                f"columns (k negatives among the other items), got k = {num_samples}; "
                "pass num_samples for another k in α"
            )
    else:
        check_int_range("num_samples", num_samples, 1, num_items - 1)
    _check_t(t)
    beta = _beta(num_samples, num_items, t)
    dtype = common_float_dtype(
        positive_scores=positive_scores, negative_scores=negative_scores
    )
    pos, neg = positive_scores.to(dtype), negative_scores.to(dtype)
    if mask is not None:
        check_tensor("mask", mask, tuple(negative_scores.shape))
        if mask.dtype != torch.bool:
            raise ValueError(f"mask must be a bool tensor, got {mask.dtype}")
    neg_terms = logistic_terms(neg, 0.0, removed=mask)
    per_row = beta * logistic_terms(pos, 1.0) + neg_terms.sum(1)
    return reduce_loss(per_row, reduction, sample_weight=sample_weight)
