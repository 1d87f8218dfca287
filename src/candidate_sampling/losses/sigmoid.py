"""The pairwise sigmoid loss of SigLIP (Zhai et al. 2023) over the in-batch layout (chapter 7).

Each (query i, candidate j) pair is its own binary problem: is ``j`` row ``i``'s positive?
With ``z_ij = s_ij / τ − log Q_j + b`` and the label ``y_ij = +1`` for ``j = i`` (row
``i``'s positive is candidate ``i``, the package's in-batch contract) and ``−1`` otherwise,

    ℓ_i = Σ_j log(1 + exp(−y_ij z_ij)) = Σ_j softplus(z_ij) − z_ii ,

since ``softplus(−z) = softplus(z) − z``. The loss averages ``ℓ_i`` over rows, which is
SigLIP's ``−(1/|B|) Σ_i Σ_j log σ(y_ij z_ij)``. There is no normalisation across the row:
every term involves one pair only, which is why the loss can be computed chunk by chunk
(:func:`candidate_sampling.scale.distributed.ring_sigmoid_loss` passes candidate chunks around
the devices) without a global log-sum-exp.

Two readings of the bias ``b``:

* **NCE** (chapter 3): the logistic loss is NCE with logit ``s − log(k·q)``; here every
  candidate gets the same ``−log Q = b``, so ``b`` is a *learned* ``−log(k·q)``. With a
  row of one positive and ``k = C − 1`` negatives and uninformative scores the optimal bias
  is exactly the prior log-odds ``−log k``; SigLIP's initial ``b = −10`` is close to
  ``−log 32,767 ≈ −10.4``, the prior of the 32k batches it was designed for. A per-candidate
  ``log_q`` (an item's popularity) is subtracted as in every other loss of the package and,
  unlike under a softmax, a constant added to it changes the loss (it moves ``b``).
* **Calibration** (chapter 6): NT-BXent has no bias, so with cosine scores in ``[−1, 1]``
  it cannot give a negative pair a probability below ``σ(−1/τ)``; it averages negative
  terms separately to hide the imbalance. With a learned bias the stationarity condition
  ``∂L/∂b = Σ_ij (σ(z_ij) − [j = i]) = 0`` says the predicted probabilities of a batch sum
  to its number of positives: the sigmoid outputs are calibrated to the base rate.

Accidental hits (a column ``j ≠ i`` whose id is row ``i``'s positive id) are dropped with
zero weight, never a mask value: logistic losses never see masks.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from candidate_sampling._validate import (
    check_finite,
    check_reduction,
    check_same,
    check_tensor,
    common_float_dtype,
)
from candidate_sampling.losses.core import accidental_hits, correct_logits, reduce_loss

__all__ = [
    "SIGLIP_BIAS_INIT",
    "SIGLIP_LOG_SCALE_INIT",
    "SigmoidPairwiseLoss",
    "sigmoid_pairwise_logits",
    "sigmoid_pairwise_loss",
]

SIGLIP_LOG_SCALE_INIT = math.log(10.0)
"""SigLIP's initial log-scale ``t' = log 10`` (scale ``t = e^{t'} = 10``, i.e. τ = 0.1)."""
SIGLIP_BIAS_INIT = -10.0
"""SigLIP's initial bias ``b = −10``."""


def _check_bias(bias: float | torch.Tensor) -> None:
    if isinstance(bias, torch.Tensor):
        if bias.numel() != 1:
            raise ValueError(f"bias must be a scalar, got a tensor of shape {tuple(bias.shape)}")
        check_finite("bias", bias.detach())
    elif not math.isfinite(float(bias)):
        raise ValueError(f"bias must be finite, got {bias!r}")


def sigmoid_pairwise_logits(
    query: torch.Tensor,
    candidates: torch.Tensor,
    *,
    temperature: float | torch.Tensor = 1.0,
    bias: float | torch.Tensor = 0.0,
    log_q: torch.Tensor | None = None,
) -> torch.Tensor:
    """Pairwise logits ``z_ij = u_i·v_j / τ − log Q_j + b``: (B, d) × (C, d) → (B, C).

    ``temperature`` τ (SigLIP's scale is ``t = 1/τ``) and ``bias`` b may be 0-dim tensors
    with gradients (learned); ``log_q``: (C,) log expected count of each candidate, or None.
    Computed in at least float32 (mixed float dtypes are promoted).
    """
    check_tensor("query", query, ("B", "d"), floating=True)
    check_tensor("candidates", candidates, ("C", "d"), floating=True)
    check_same("embedding size d", query=query.shape[1], candidates=candidates.shape[1])
    if log_q is not None:
        check_tensor("log_q", log_q, (candidates.shape[0],), floating=True)
        check_finite("log_q", log_q)
    _check_bias(bias)
    dtype = common_float_dtype(query=query, candidates=candidates)
    scores = query.to(dtype) @ candidates.to(dtype).T  # fresh: corrected in place
    logits = correct_logits(
        scores, None if log_q is None else log_q[None, :], temperature=temperature, inplace=True
    )
    if isinstance(bias, torch.Tensor):
        return logits + bias.to(logits.dtype)
    return logits + bias if bias != 0.0 else logits


def _pair_terms(
    logits: torch.Tensor,
    *,
    positive_ids: torch.Tensor | None,
    candidate_ids: torch.Tensor | None,
    has_positives: bool,
    remove_accidental_hits: bool,
) -> torch.Tensor:
    """Per-row ``Σ_j w_ij softplus(z_ij) − [has_positives] z_ii`` (B,), ``w`` = 0 on hits.

    ``has_positives``: column ``i`` is row ``i``'s positive (the local block of the ring);
    False for a block of candidates that holds no positive of these rows.
    """
    terms = F.softplus(logits)
    if remove_accidental_hits:
        columns = None
        if has_positives:
            columns = torch.arange(logits.shape[0], device=positive_ids.device)
        hits = accidental_hits(positive_ids, candidate_ids, positive_columns=columns)
        terms = terms.masked_fill(hits.to(terms.device), 0.0)
    per_row = terms.sum(1)
    if has_positives:
        per_row = per_row - logits.diagonal()
    return per_row


def _resolve_hits(
    batch: int,
    positive_ids: torch.Tensor | None,
    candidate_ids: torch.Tensor | None,
    num_candidates: int,
    remove_accidental_hits: bool | None,
    *,
    positives_in_candidates: bool = True,
) -> tuple[torch.Tensor | None, bool]:
    """Check the ids and settle ``remove_accidental_hits`` (None = "when ids are given")."""
    if candidate_ids is not None:
        check_tensor("candidate_ids", candidate_ids, (num_candidates,), floating=False)
    if positive_ids is not None:
        check_tensor("positive_ids", positive_ids, (batch,), floating=False)
    if remove_accidental_hits is None:
        remove_accidental_hits = candidate_ids is not None
    if remove_accidental_hits:
        if candidate_ids is None:
            raise ValueError(
                "candidate_ids are needed to remove accidental hits (remove_accidental_hits=True)"
            )
        if positive_ids is None:
            if not positives_in_candidates:
                raise ValueError("positive_ids are needed to remove accidental hits")
            positive_ids = candidate_ids[:batch]
    return positive_ids, remove_accidental_hits


def sigmoid_pairwise_loss(
    query: torch.Tensor,
    candidates: torch.Tensor,
    *,
    temperature: float | torch.Tensor = 1.0,
    bias: float | torch.Tensor = 0.0,
    positive_ids: torch.Tensor | None = None,
    candidate_ids: torch.Tensor | None = None,
    log_q: torch.Tensor | None = None,
    remove_accidental_hits: bool | None = None,
    reduction: str = "mean",
) -> torch.Tensor:
    """SigLIP's pairwise sigmoid loss (Zhai et al. 2023) in the in-batch layout.

    ``ℓ_i = Σ_j softplus(z_ij) − z_ii`` with ``z_ij = u_i·v_j / τ − log Q_j + b``: a
    logistic loss with label 1 on column ``i`` (row ``i``'s positive) and 0 on every other
    column. ``query``: (B, d); ``candidates``: (C, d), ``C ≥ B``, row ``i``'s positive in
    row ``i`` (more rows are more negatives: other devices' positives, a queue);
    ``temperature`` τ = 1/t and ``bias`` b: floats or 0-dim tensors (learnable, see
    :class:`SigmoidPairwiseLoss`); ``log_q``: (C,) log expected counts or None;
    ``candidate_ids`` (C,) / ``positive_ids`` (B,, default ``candidate_ids[:B]``) with
    ``remove_accidental_hits`` (None = "when ``candidate_ids`` are given") drop every
    term ``j ≠ i`` whose id is row ``i``'s positive id (zero weight).

    Reduction over rows of the per-row sums: ``"mean"`` (default; SigLIP's sum over pairs
    divided by the batch size), ``"sum"`` or ``"none"``. Computed in at least float32.
    Chapter 7.
    """
    check_reduction(reduction)
    logits = sigmoid_pairwise_logits(
        query, candidates, temperature=temperature, bias=bias, log_q=log_q
    )
    batch, num_cand = logits.shape
    if num_cand < batch:
        raise ValueError(
            f"candidates must have at least B = {batch} rows (row i's positive is candidate "
            f"i), got {num_cand}"
        )
    positive_ids, remove = _resolve_hits(
        batch, positive_ids, candidate_ids, num_cand, remove_accidental_hits
    )
    per_row = _pair_terms(
        logits,
        positive_ids=positive_ids,
        candidate_ids=candidate_ids,
        has_positives=True,
        remove_accidental_hits=remove,
    )
    return reduce_loss(per_row, reduction)


class SigmoidPairwiseLoss(nn.Module):
    """SigLIP's loss with a learnable scale and bias: ``z = e^{t'} · s − log Q + b``.

    ``log_scale`` t' (initial ``log 10``, so the scale ``t = 10`` and τ = 0.1) and ``bias``
    b (initial −10) are ``nn.Parameter`` s when ``learnable=True`` (the default; give them
    to the optimizer with the model's parameters), buffers otherwise. The scale is stored
    in log space so that it stays positive. ``forward(query, candidates, *,
    positive_ids=None, candidate_ids=None, log_q=None)`` is
    :func:`sigmoid_pairwise_loss` with ``temperature = e^{−t'}``. Chapter 7.
    """

    def __init__(
        self,
        *,
        log_scale: float = SIGLIP_LOG_SCALE_INIT,
        bias: float = SIGLIP_BIAS_INIT,
        learnable: bool = True,
        remove_accidental_hits: bool | None = None,
        reduction: str = "mean",
    ) -> None:
        super().__init__()
        for name, value in (("log_scale", log_scale), ("bias", bias)):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"{name} must be a number, got {type(value).__name__}")
            if not math.isfinite(value):
                raise ValueError(f"{name} must be finite, got {value!r}")
            tensor = torch.tensor(float(value))
            if learnable:
                setattr(self, name, nn.Parameter(tensor))
            else:
                self.register_buffer(name, tensor)
        self.remove_accidental_hits = remove_accidental_hits
        self.reduction = check_reduction(reduction)

    @property
    def scale(self) -> torch.Tensor:
        """``t = exp(log_scale)``, a 0-dim tensor."""
        return self.log_scale.exp()

    @property
    def temperature(self) -> torch.Tensor:
        """``τ = 1/t = exp(−log_scale)``, a 0-dim tensor."""
        return (-self.log_scale).exp()

    def extra_repr(self) -> str:
        return (
            f"scale={float(self.scale.detach()):.4g}, bias={float(self.bias.detach()):.4g}, "
            f"learnable={isinstance(self.bias, nn.Parameter)}, "
            f"remove_accidental_hits={self.remove_accidental_hits!r}, "
            f"reduction={self.reduction!r}"
        )

    def forward(
        self,
        query: torch.Tensor,
        candidates: torch.Tensor,
        *,
        positive_ids: torch.Tensor | None = None,
        candidate_ids: torch.Tensor | None = None,
        log_q: torch.Tensor | None = None,
    ) -> torch.Tensor:
        return sigmoid_pairwise_loss(
            query,
            candidates,
            temperature=self.temperature,
            bias=self.bias,
            positive_ids=positive_ids,
            candidate_ids=candidate_ids,
            log_q=log_q,
            remove_accidental_hits=self.remove_accidental_hits,
            reduction=self.reduction,
        )
