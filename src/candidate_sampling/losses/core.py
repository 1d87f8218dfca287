"""The loss pipeline's named steps: score → correct → mask → (softmax | logistic) → reduce.

Every loss in :mod:`candidate_sampling.losses` is a composition of these functions, and a
reader can call each step alone. Conventions (also on the book's notation page):

* **Logits.** ``logit = score / temperature - log_q``: the temperature scales the model's
  score, the sampling correction is subtracted afterwards and is *not* divided by the
  temperature (TF Recommenders' order). The two orders only agree at τ = 1.
* **log Q** is the log *expected count* of a candidate in the candidate set (TF's
  semantics) and nothing else. Under a softmax a constant added to every log Q cancels;
  under a logistic loss it does not.
* **The positive's column.** Every softmax loss ends in
  :func:`positive_column_cross_entropy`: a (B, C) logit matrix and, per row, the column(s)
  holding its positive(s) — column 0 for sampled softmax, column ``i`` for the in-batch
  layout, several columns for TF's ``num_true > 1``.
* **Masking** removes a candidate by replacing its logit with :func:`mask_value` of the
  logit's dtype, a finite number: ``torch.finfo(dtype).min / 2``. It is never ±inf, so a
  row keeps a finite loss even when every negative is masked, and the masked entry gets an
  exactly zero gradient. Logistic losses never see masks: they drop masked terms by zero
  weights. :func:`accidental_hits` is the one mask for "candidate id equals the row's
  positive id".
* **Precision.** Scores and logits are computed in at least float32
  (:func:`~candidate_sampling._validate.common_float_dtype`): float16 and bfloat16
  inputs are upcast *before* the score matmul and the division by τ, so neither can
  overflow; the loss is returned in float32 for half inputs (as ``info_nce_loss`` always
  did). Mixed float dtypes are promoted (``torch.promote_types``).
* **Copies.** A step called alone never modifies its input. Inside a loss, the (B, C)
  score matrix is the loss's own fresh tensor, so the correction and the mask are written
  into it (``inplace=True``): the matrix exists once, not once per step, and a loss costs
  what the plain-torch expression of it costs (``benchmarks/floor.py``).
* **Reduction** is ``"mean"`` over rows (examples) by default; ``"sum"`` and ``"none"``
  are available. Rows without a positive (SupCon, soft nearest neighbour) are passed as
  ``valid=False`` to :func:`reduce_loss`: 0 in ``"none"``, left out of ``"mean"``.
  (TF Recommenders sums over the batch, so its loss is B times ours.)
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from candidate_sampling._validate import (
    check_positive,
    check_reduction,
    check_tensor,
    get_validate_args,
)

__all__ = [
    "mask_value",
    "upcast",
    "correct_logits",
    "accidental_hits",
    "mask_logits",
    "positive_column_cross_entropy",
    "reduce_loss",
]

_HALF = (torch.float16, torch.bfloat16)


def mask_value(dtype: torch.dtype) -> float:
    """The finite logit that stands for "removed": ``torch.finfo(dtype).min / 2``.

    Half of the most negative finite value leaves head-room so that adding or subtracting
    an ordinary logit never overflows to ``-inf``, and ``exp(mask - max)`` underflows to
    exactly 0, so a masked candidate contributes nothing to a log-sum-exp.
    """
    if not dtype.is_floating_point:
        raise ValueError(f"dtype must be a floating-point dtype, got {dtype}")
    return torch.finfo(dtype).min / 2


def upcast(tensor: torch.Tensor) -> torch.Tensor:
    """float16 / bfloat16 → float32; any other tensor is returned unchanged."""
    return tensor.float() if tensor.dtype in _HALF else tensor


def correct_logits(
    scores: torch.Tensor,
    log_q: torch.Tensor | None = None,
    *,
    temperature: float | torch.Tensor = 1.0,
    inplace: bool = False,
) -> torch.Tensor:
    """``scores / temperature - log_q`` (the logQ correction; ``log_q`` broadcast to scores).

    ``scores``: (..., C) raw scores s(x, y), half precision is upcast to float32;
    ``log_q``: broadcastable to ``scores``, e.g. (C,) for candidates shared by the batch
    or (B, C) per row, the log expected count; it gets no gradient (detached).
    ``inplace=True`` writes the logits into ``scores`` (as ``torch.nn.functional``'s
    ``inplace`` options do) and saves a (B, C) copy; only for a ``scores`` tensor the
    caller owns and nothing saved for backward, e.g. the fresh output of the score
    matmul, which is how the package's losses use it.
    """
    check_positive("temperature", temperature)
    work = upcast(scores)
    owned = inplace or work is not scores  # an upcast is a fresh tensor of our own
    if isinstance(temperature, torch.Tensor):
        logits, owned = work / upcast(temperature), True  # its gradient needs the scores
    elif temperature != 1.0:
        logits, owned = (work.div_(temperature) if owned else work / temperature), True
    else:
        logits = work
    if log_q is not None:
        log_q = log_q.detach().to(logits.dtype)
        if owned and torch.broadcast_shapes(logits.shape, log_q.shape) == logits.shape:
            logits = logits.sub_(log_q)
        else:
            logits = logits - log_q
    return logits


def accidental_hits(
    positive_ids: torch.Tensor,
    candidate_ids: torch.Tensor,
    *,
    positive_columns: torch.Tensor | None = None,
) -> torch.Tensor:
    """Boolean (B, C) mask: candidate ``j`` holds (one of) row ``i``'s positive id(s).

    ``positive_ids``: (B,) or (B, T) for ``T`` positives per row (TF's ``num_true``);
    ``candidate_ids``: (C,) shared by the batch or (B, C) per row. With
    ``positive_columns`` (B,) — the column that *is* row ``i``'s positive, e.g.
    ``arange(B)`` in the in-batch layout — that column is left unmasked, so the mask marks
    exactly the duplicates of the positive (TF Recommenders' ``remove_accidental_hits``;
    TF's ``compute_accidental_hits`` for sampled candidates, where no column is the
    positive).
    """
    if not isinstance(positive_ids, torch.Tensor) or positive_ids.dim() not in (1, 2):
        shape = tuple(positive_ids.shape) if isinstance(positive_ids, torch.Tensor) else None
        raise ValueError(f"positive_ids must have shape (B,) or (B, T), got {shape}")
    if positive_ids.is_floating_point() or positive_ids.dtype == torch.bool:
        raise ValueError(f"positive_ids must be an integer tensor of ids, got {positive_ids.dtype}")
    batch = positive_ids.shape[0]
    if not isinstance(candidate_ids, torch.Tensor) or candidate_ids.dim() not in (1, 2):
        raise ValueError("candidate_ids must be a tensor of shape (C,) or (B, C)")
    if candidate_ids.is_floating_point() or candidate_ids.dtype == torch.bool:
        raise ValueError(
            f"candidate_ids must be an integer tensor of ids, got {candidate_ids.dtype}"
        )
    cand = candidate_ids.to(positive_ids.device)
    if cand.dim() == 1:
        cand = cand[None, :]
    elif cand.shape[0] != batch:
        raise ValueError(
            f"candidate_ids of shape (B, C) must have B = {batch} rows (positive_ids), "
            f"got {tuple(candidate_ids.shape)}"
        )
    pos = positive_ids if positive_ids.dim() == 2 else positive_ids[:, None]
    hits = (pos[:, :, None] == cand[:, None, :]).any(1) if pos.shape[1] > 1 else (pos == cand)
    if hits.shape[0] != batch:  # (1, C) broadcast against (B, 1) already gives (B, C)
        hits = hits.expand(batch, -1)
    if positive_columns is not None:
        check_tensor("positive_columns", positive_columns, (batch,), floating=False)
        if hits.stride(0) == 0:  # the expanded view above: give it rows of its own
            hits = hits.contiguous()
        rows = torch.arange(batch, device=hits.device)
        hits[rows, positive_columns.to(hits.device)] = False
    return hits


def mask_logits(
    logits: torch.Tensor, mask: torch.Tensor | None, *, inplace: bool = False
) -> torch.Tensor:
    """Replace ``logits`` where ``mask`` is True by :func:`mask_value` (finite, zero gradient).

    ``inplace=True`` overwrites ``logits`` (a tensor the caller owns, as in
    :func:`correct_logits`) instead of returning a masked copy.
    """
    if mask is None:
        return logits
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        got = mask.dtype if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise ValueError(f"mask must be a bool tensor, got {got}")
    if inplace:
        return logits.masked_fill_(mask, mask_value(logits.dtype))
    return logits.masked_fill(mask, mask_value(logits.dtype))


def positive_column_cross_entropy(
    logits: torch.Tensor, positive_columns: int | torch.Tensor
) -> torch.Tensor:
    """Per-row softmax cross-entropy with the positive(s) in known column(s): (B, C) → (B,).

    ``ℓ_i = logsumexp_j(o_ij) − (1/T) Σ_t o_{i, c_it}``: the cross-entropy against a label
    that puts ``1/T`` on each of the row's ``T`` positive columns (TF's ``num_true``
    semantics; ``T = 1`` is the usual ``−log softmax(o_i)[c_i]``). ``positive_columns``:
    an int (the same column for every row: 0 in sampled softmax), (B,) (the in-batch
    layout: ``arange(B)``) or (B, T). Computed in at least float32.
    """
    check_tensor("logits", logits, ("B", "C"), floating=True)
    batch, num_cols = logits.shape
    work = upcast(logits)
    # one column per row: F.cross_entropy (log-softmax + pick), fewer (B, C) passes than
    # logsumexp minus a gather, forward and backward
    if isinstance(positive_columns, int) and not isinstance(positive_columns, bool):
        if not 0 <= positive_columns < num_cols:
            raise ValueError(
                f"positive_columns must lie in [0, {num_cols}) (logits has {num_cols} "
                f"columns), got {positive_columns}"
            )
        target = torch.full((batch,), positive_columns, dtype=torch.long, device=work.device)
        return F.cross_entropy(work, target, reduction="none")
    if not isinstance(positive_columns, torch.Tensor) or positive_columns.dim() not in (1, 2):
        raise ValueError("positive_columns must be an int or an integer tensor (B,) or (B, T)")
    if positive_columns.is_floating_point() or positive_columns.dtype == torch.bool:
        raise ValueError(
            f"positive_columns must be an integer tensor, got {positive_columns.dtype}"
        )
    if positive_columns.shape[0] != batch:
        raise ValueError(
            f"positive_columns must have B = {batch} rows (logits), "
            f"got {tuple(positive_columns.shape)}"
        )
    if get_validate_args() and positive_columns.numel():
        lo, hi = int(positive_columns.min()), int(positive_columns.max())
        if lo < 0 or hi >= num_cols:
            raise ValueError(
                f"positive_columns must lie in [0, {num_cols}) (logits has {num_cols} "
                f"columns), got values in [{lo}, {hi}]"
            )
    cols = positive_columns.to(work.device).long()
    if cols.dim() == 1:
        return F.cross_entropy(work, cols, reduction="none")
    return torch.logsumexp(work, dim=1) - work.gather(1, cols).mean(1)


def reduce_loss(
    per_row: torch.Tensor, reduction: str = "mean", *, valid: torch.Tensor | None = None
) -> torch.Tensor:
    """Apply ``reduction`` ("mean" over rows, "sum", or "none") to a (B,) per-row loss.

    ``valid``: optional (B,) bool, rows that have a defined loss. Invalid rows become 0
    (also in ``"none"``), and ``"mean"`` averages over the valid rows only; if there are
    none it returns a 0 that is still connected to the graph (zero gradient).
    """
    check_reduction(reduction)
    if valid is not None:
        per_row = torch.where(valid, per_row, torch.zeros_like(per_row))
        if reduction == "mean":
            return per_row.sum() / valid.sum().clamp(min=1)
    if reduction == "mean":
        return per_row.mean()
    if reduction == "sum":
        return per_row.sum()
    return per_row


class _Loss(nn.Module):
    """Thin base of the package's loss modules: checked options, a readable ``repr``.

    Subclasses store their options as attributes listed in ``_options``; ``forward`` is a
    one-line keyword call of the matching function.
    """

    _options: tuple[str, ...] = ("temperature", "reduction")

    def __init__(self, *, temperature: float = 1.0, reduction: str = "mean") -> None:
        super().__init__()
        self.temperature = check_positive("temperature", temperature)
        self.reduction = check_reduction(reduction)

    def extra_repr(self) -> str:
        return ", ".join(f"{name}={getattr(self, name)!r}" for name in self._options)
