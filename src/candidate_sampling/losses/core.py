"""The loss pipeline's named steps: score → correct → mask → (softmax | logistic) → reduce.

Every loss in :mod:`candidate_sampling.losses` is a composition of these functions, and a
reader can call each step alone. Conventions (also on the book's notation page):

* **Logits.** ``logit = score / temperature - log_q``: the temperature scales the model's
  score, the sampling correction is subtracted afterwards and is *not* divided by the
  temperature (TF Recommenders' order). The correction estimates a proposal's log
  probability (or log expected count) of drawing the candidate; dividing it by τ would
  turn a sampling correction into a change of the model, and the two orders only agree at
  τ = 1.
* **log Q** is the log *expected count* of a candidate in the sampled set (TF's
  semantics). Under a softmax a constant added to every log Q cancels; under a logistic
  loss it does not.
* **Masking** removes a candidate by replacing its logit with :func:`mask_value` of the
  logit's dtype, a finite number: ``torch.finfo(dtype).min / 2``. It is never ±inf, so a
  row keeps a finite loss in float16 and bfloat16 even when every negative is masked,
  and the masked entry gets an exactly zero gradient. Logistic losses never see masks:
  they drop masked terms by zero weights.
* **Reduction** is ``"mean"`` over rows (examples) by default; ``"sum"`` and ``"none"``
  are available. (TF Recommenders sums over the batch, so its loss is B times ours.)
"""

from __future__ import annotations

import torch

from candidate_sampling._validate import check_positive, check_reduction, check_tensor

__all__ = [
    "mask_value",
    "correct_logits",
    "accidental_hits",
    "mask_logits",
    "softmax_loss_positive_first",
    "reduce_loss",
]


def mask_value(dtype: torch.dtype) -> float:
    """The finite logit that stands for "removed": ``torch.finfo(dtype).min / 2``.

    Half of the most negative finite value leaves head-room so that adding or subtracting
    an ordinary logit never overflows to ``-inf``, and ``exp(mask - max)`` underflows to
    exactly 0, so a masked candidate contributes nothing to a log-sum-exp.
    """
    if not dtype.is_floating_point:
        raise ValueError(f"dtype must be a floating-point dtype, got {dtype}")
    return torch.finfo(dtype).min / 2


def correct_logits(
    scores: torch.Tensor,
    log_q: torch.Tensor | None = None,
    temperature: float | torch.Tensor = 1.0,
) -> torch.Tensor:
    """``scores / temperature - log_q`` (the logQ correction; ``log_q`` broadcast to scores).

    ``scores``: (..., C) raw scores s(x, y); ``log_q``: broadcastable to ``scores``, e.g. (C,)
    for candidates shared by the batch or (B, C) per row; it gets no gradient (detached).
    """
    check_positive("temperature", temperature)
    logits = scores / temperature
    if log_q is not None:
        logits = logits - log_q.detach().to(logits.dtype)
    return logits


def accidental_hits(positive_ids: torch.Tensor, candidate_ids: torch.Tensor) -> torch.Tensor:
    """Boolean (B, C) mask: ``candidate_ids`` equal to the row's positive id.

    ``positive_ids``: (B,); ``candidate_ids``: (C,) shared by the batch or (B, C) per row.
    """
    check_tensor("positive_ids", positive_ids, ("B",), floating=False)
    if candidate_ids.dim() == 1:
        return positive_ids[:, None] == candidate_ids[None, :]
    check_tensor("candidate_ids", candidate_ids, ("B", "C"), floating=False)
    return positive_ids[:, None] == candidate_ids


def mask_logits(logits: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Replace ``logits`` where ``mask`` is True by :func:`mask_value` (finite, zero gradient)."""
    if mask is None:
        return logits
    if mask.dtype != torch.bool:
        raise ValueError(f"mask must be a bool tensor, got {mask.dtype}")
    return logits.masked_fill(mask, mask_value(logits.dtype))


def softmax_loss_positive_first(logits: torch.Tensor) -> torch.Tensor:
    """Per-row cross-entropy when column 0 holds the positive: ``logsumexp(row) - row[0]``.

    ``logits``: (B, 1 + C) → (B,). Computed in at least float32, returned in that dtype.
    """
    work = logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits
    return torch.logsumexp(work, dim=-1) - work[:, 0]


def reduce_loss(per_example: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    """Apply ``reduction`` ("mean" over rows, "sum", or "none") to a (B,) per-example loss."""
    check_reduction(reduction)
    if reduction == "mean":
        return per_example.mean()
    if reduction == "sum":
        return per_example.sum()
    return per_example
