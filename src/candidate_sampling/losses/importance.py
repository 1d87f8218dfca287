"""The full softmax (the reference) and importance sampling of its normaliser (chapters 1–2).

:func:`softmax_cross_entropy` is the loss every sampled loss approximates;
:func:`importance_sampled_log_partition`, :func:`importance_weights` and
:func:`effective_sample_size` are chapter 2's estimators. ``log_proposal`` is the
per-draw log probability of a draw, not the log expected count ``log_q`` of the sampled
losses.
"""

from __future__ import annotations

import math

import torch

from candidate_sampling._validate import (
    check_broadcasts_to,
    check_finite,
    check_ids,
    check_same,
    check_tensor,
    common_float_dtype,
    get_validate_args,
)
from candidate_sampling.losses.core import _positive_column_cross_entropy, reduce_loss

__all__ = [
    "softmax_cross_entropy",
    "importance_sampled_log_partition",
    "importance_weights",
    "effective_sample_size",
]


# --------------------------------------------------------------------------- full softmax


def softmax_cross_entropy(
    logits: torch.Tensor,
    positive_ids: torch.Tensor,
    *,
    sample_weight: torch.Tensor | None = None,
    reduction: str = "mean",
) -> torch.Tensor:
    """The reference: full softmax cross-entropy over the whole catalogue (chapter 1).

    ``loss_i = logsumexp_y(logits[i, y]) − logits[i, positive_ids[i]] = −log p(y_i | x_i)``.
    ``logits``: (B, |V|) floating; ``positive_ids``: (B,) int ids in ``[0, |V|)``. Computed
    in at least float32. ``sample_weight``: (B,) per-row weights
    (:func:`~candidate_sampling.losses.core.reduce_loss`). Reduction ``"mean"`` over rows
    (default), ``"sum"`` or ``"none"``.
    Defaults: ``reduction="mean"``.
    """
    check_tensor("logits", logits, ("B", "|V|"), floating=True)
    check_tensor("positive_ids", positive_ids, ("B",), floating=False)
    check_same("batch size B", logits=logits.shape[0], positive_ids=positive_ids.shape[0])
    check_ids("positive_ids", positive_ids, logits.shape[1])
    per_row = _positive_column_cross_entropy(logits, positive_ids)
    return reduce_loss(per_row, reduction, sample_weight=sample_weight)


# --------------------------------------------------------------------------- importance sampling


def _check_is_inputs(
    scores: torch.Tensor, log_proposal: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    if not isinstance(scores, torch.Tensor) or not scores.is_floating_point():
        raise ValueError("scores must be a floating-point torch.Tensor of shape (..., m)")
    if scores.dim() == 0 or scores.shape[-1] == 0:
        raise ValueError(f"scores must have shape (..., m) with m >= 1, got {tuple(scores.shape)}")
    if not isinstance(log_proposal, torch.Tensor) or not log_proposal.is_floating_point():
        raise ValueError(
            "log_proposal must be a floating-point torch.Tensor broadcastable to scores"
        )
    # never enlarging scores: a (2, 3) log_proposal must not turn (3,) scores into 2 rows
    check_broadcasts_to("log_proposal", log_proposal, scores.shape, target="scores")
    check_finite("log_proposal", log_proposal)
    dtype = common_float_dtype(scores=scores, log_proposal=log_proposal)
    return scores.to(dtype), log_proposal.detach().to(dtype)


def importance_sampled_log_partition(
    scores: torch.Tensor, log_proposal: torch.Tensor
) -> torch.Tensor:
    """log Ẑ, the importance-sampling estimate of ``log Z(x) = log Σ_y e^{s(x, y)}`` (chapter 2).

    With ``m`` i.i.d. draws ``y_i ~ q``: ``Ẑ = (1/m) Σ_i e^{s_i} / q(y_i)``, so
    ``log Ẑ = logsumexp_i(s_i − log q_i) − log m``. ``Ẑ`` is unbiased for ``Z``; ``log Ẑ`` is
    biased low (Jensen) by about ``χ²(p‖q) / (2m)`` and consistent as ``m → ∞``. With
    ``q = p`` (the model itself) every term equals ``Z`` and the estimate is exact.

    ``scores``: (..., m) the scores of the sampled classes; ``log_proposal``:
    broadcastable to ``scores`` (never enlarging it), the per-draw log probability ``log q(y_i)`` — *not* the
    log expected count ``log(m q)`` that the sampled losses call ``log_q`` (with it the
    ``− log m`` would be counted twice). Returns (...); no reduction.
    """
    scores, log_proposal = _check_is_inputs(scores, log_proposal)
    return torch.logsumexp(scores - log_proposal, dim=-1) - math.log(scores.shape[-1])


def importance_weights(scores: torch.Tensor, log_proposal: torch.Tensor) -> torch.Tensor:
    """Self-normalised importance weights ``w_i = softmax_i(s_i − log q_i)`` (chapter 2).

    The negative term of the softmax gradient, ``E_{y~p}[∇s(x, y)]``, is estimated by
    ``Σ_i w_i ∇s(x, y_i)`` with ``y_i ~ q``. The weights sum to 1 without knowing ``Z``;
    the price is a ratio estimator: biased (bias O(1/m)) but consistent. A constant added
    to ``log_proposal`` cancels, so per-draw probabilities and expected counts give the
    same weights. ``scores``: (..., m); ``log_proposal`` broadcastable to it (never
    enlarging it).
    """
    scores, log_proposal = _check_is_inputs(scores, log_proposal)
    return torch.softmax(scores - log_proposal, dim=-1)


def effective_sample_size(weights: torch.Tensor) -> torch.Tensor:
    """Kish's effective sample size ``(Σ_i w_i)² / Σ_i w_i²`` (chapter 2).

    ``weights``: (..., m), non-negative (a value check; NaN is refused too), not all zero
    along the last axis → (...). Scale-free: raw importance ratios give the same value as
    the normalised weights, for which it is ``1 / Σ_i w_i²``. Equals ``m`` for equal
    weights and 1 when one weight carries all the mass.
    """
    if not isinstance(weights, torch.Tensor) or not weights.is_floating_point():
        raise ValueError("weights must be a floating-point torch.Tensor of shape (..., m)")
    if weights.dim() == 0 or weights.shape[-1] == 0:
        raise ValueError(
            f"weights must have shape (..., m) with m >= 1, got {tuple(weights.shape)}"
        )
    if get_validate_args():
        if not bool((weights >= 0).all()):  # NaN too
            raise ValueError(f"weights must be >= 0, got minimum {weights.min().item()!r}")
        if bool(torch.isinf(weights).any()):
            raise ValueError("weights must be finite, got inf")
        if not bool((weights.sum(-1) > 0).all()):
            raise ValueError("weights must not all be zero along the last axis")
    # divided by the row's largest weight first: raw ratios of 1e-30 or 1e30 would
    # underflow or overflow when squared (0/0 or inf/inf) although the ESS is finite
    scaled = weights / weights.amax(-1, keepdim=True)
    return scaled.sum(-1) ** 2 / (scaled**2).sum(-1)
