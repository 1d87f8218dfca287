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
from torch import nn

from candidate_sampling._validate import (
    check_bool,
    check_optional_bool,
    check_finite,
    check_ids,
    check_reduction,
    check_same,
    check_tensor,
)
from candidate_sampling.candidates import CandidateSet
from candidate_sampling.losses.core import (
    Temperature,
    _accidental_hits,
    _check_hit_ids,
    _check_removed,
    _corrected_logits,
    _union_masks,
    check_positive_columns,
    check_temperature,
    logistic_terms,
    reduce_loss,
)
from candidate_sampling.losses.retrieval import in_batch_columns, removed_columns

__all__ = [
    "SIGLIP_BIAS_INIT",
    "SIGLIP_SCALE_INIT",
    "SigmoidPairwiseLoss",
    "sigmoid_pair_terms",
    "sigmoid_pairwise_logits",
    "sigmoid_pairwise_loss",
]

SIGLIP_SCALE_INIT = 10.0
"""SigLIP's initial scale ``t = e^{t'} = 10`` (τ = 0.1)."""
SIGLIP_BIAS_INIT = -10.0
"""SigLIP's initial bias ``b = −10``."""


def _check_bias(bias: float | torch.Tensor) -> None:
    if isinstance(bias, torch.Tensor):
        if bias.numel() != 1:
            raise ValueError(f"bias must be a scalar, got a tensor of shape {tuple(bias.shape)}")
        check_finite("bias", bias.detach())
    elif isinstance(bias, bool) or not isinstance(bias, (int, float)):
        raise ValueError(f"bias must be a number or a 0-dim tensor, got {type(bias).__name__}")
    elif not math.isfinite(float(bias)):
        raise ValueError(f"bias must be finite, got {bias!r}")


def sigmoid_pairwise_logits(
    query: torch.Tensor,
    candidates: CandidateSet,
    *,
    temperature: float | Temperature = 1.0,
    bias: float | torch.Tensor = 0.0,
) -> torch.Tensor:
    """Pairwise logits ``z_ij = (u_i·v_j + b_j)/τ − log Q_j + b``: (B, d) × C columns → (B, C).

    Steps 1–3 of the pipeline plus SigLIP's bias ``b`` (a float or a 0-dim tensor with a
    gradient); ``temperature``: a float or a :class:`~candidate_sampling.losses.core.Temperature`
    (SigLIP's learnable scale ``t = 1/τ``: ``Temperature.from_scale(10, learnable=True)``).
    """
    check_temperature(temperature)
    _check_bias(bias)
    logits = _corrected_logits(query, candidates, temperature)
    if isinstance(bias, torch.Tensor):
        return logits + bias.to(logits.dtype)
    return logits.add_(bias) if bias != 0.0 else logits


def sigmoid_pair_terms(
    logits: torch.Tensor,
    positive_ids: torch.Tensor,
    candidate_ids: torch.Tensor,
    *,
    positive_columns: torch.Tensor | None,
    remove_accidental_hits: bool | None = None,
    removed: torch.Tensor | None = None,
) -> torch.Tensor:
    """Per-row sums of SigLIP's logistic terms over a block of columns, (B, C) → (B,).

    ``Σ_j w_ij softplus(z_ij) − z_{i,c_i}``: label 1 on row ``i``'s positive column
    ``positive_columns[i]`` (None: the block holds no positive of these rows, e.g. another
    device's block in the ring), 0 elsewhere; ``w_ij = 0`` on ``removed`` (B, C) bool
    columns (or a shape that broadcasts to (B, C)) and, with
    ``remove_accidental_hits=True``, on accidental hits (other columns with the row's
    positive id). The default (None) keeps hits, the logistic family's rule
    (:func:`~candidate_sampling.losses.core.hits_to_remove`): each pair's term is right as
    it is. ``positive_ids``: (B,) or (B, T); ``candidate_ids``: (C,); ``positive_columns``:
    (B,) in ``[0, C)`` (a value check).
    """
    check_tensor("logits", logits, ("B", "C"), floating=True, allow_empty=True)
    remove_accidental_hits = check_optional_bool("remove_accidental_hits", remove_accidental_hits)
    _check_hit_ids(positive_ids, candidate_ids)
    check_ids("positive_ids", positive_ids, None)
    check_ids("candidate_ids", candidate_ids, None)
    batch, num_cols = logits.shape
    check_same("batch size B", logits=batch, positive_ids=positive_ids.shape[0])
    check_same("number of columns C", logits=num_cols, candidate_ids=candidate_ids.shape[0])
    if positive_columns is not None:
        check_positive_columns(positive_columns, batch, num_cols)
    if removed is not None:
        _check_removed(removed, logits)
    return _sigmoid_pair_terms(
        logits, positive_ids, candidate_ids, positive_columns, remove_accidental_hits, removed
    )


def _sigmoid_pair_terms(
    logits: torch.Tensor,
    positive_ids: torch.Tensor,
    candidate_ids: torch.Tensor,
    positive_columns: torch.Tensor | None,
    remove_accidental_hits: bool | None,
    removed: torch.Tensor | None,
) -> torch.Tensor:
    """:func:`sigmoid_pair_terms` on checked arguments (a loss's own ``arange(B)`` columns)."""
    hits = None
    if remove_accidental_hits:  # None and False keep the hits (the logistic rule)
        hits = _accidental_hits(positive_ids, candidate_ids, positive_columns, "mask_all")
    per_row = logistic_terms(logits, 0.0, removed=_union_masks(hits, removed)).sum(1)
    if positive_columns is not None:
        rows = torch.arange(logits.shape[0], device=logits.device)
        per_row = per_row - logits[rows, positive_columns.to(logits.device)]
    return per_row


def sigmoid_pairwise_loss(
    query: torch.Tensor,
    positives: CandidateSet,
    candidates: CandidateSet | None = None,
    *,
    temperature: float | Temperature = 1.0,
    bias: float | torch.Tensor = 0.0,
    remove_accidental_hits: bool | None = None,
    sample_weight: torch.Tensor | None = None,
    reduction: str = "mean",
) -> torch.Tensor:
    """SigLIP's pairwise sigmoid loss (Zhai et al. 2023) in the in-batch layout.

    ``ℓ_i = Σ_j softplus(z_ij) − z_ii`` with ``z_ij = (u_i·v_j + b_j)/τ − log Q_j + b``
    over the columns ``[positives | candidates]``: a logistic loss with label 1 on column
    ``i`` (row ``i``'s positive) and 0 on every other column. ``query``: (B, d);
    ``positives``: a CandidateSet of the B positives; ``candidates``: more columns (other
    devices' positives, a queue) or None; ``remove_accidental_hits``: None (default) keeps
    every term, a copy of row ``i``'s positive included — the logistic family's rule
    (:func:`~candidate_sampling.losses.core.hits_to_remove`): each negative pair is a draw
    from the product of the marginals, copies included, so the true model is a stationary
    point only with them kept; open_clip's ``SigLipLoss`` has no ids and keeps them too —
    True drops every term ``j ≠ i`` whose id is row ``i``'s positive id; invalid columns
    of a set are dropped either way. Reduction over rows of the per-row sums, weighted by ``sample_weight``:
    ``"mean"`` (default; SigLIP's sum over pairs divided by the batch size), ``"sum"`` or
    ``"none"``. Chapter 7.
    Defaults: ``temperature=1.0``, ``bias=0.0``, ``reduction="mean"``.
    """
    check_reduction(reduction)
    remove_accidental_hits = check_optional_bool("remove_accidental_hits", remove_accidental_hits)
    columns = in_batch_columns(query, positives, candidates)
    batch = query.shape[0]
    logits = sigmoid_pairwise_logits(query, columns, temperature=temperature, bias=bias)
    removed = removed_columns(columns, batch)
    per_row = _sigmoid_pair_terms(
        logits,
        positives.ids,
        columns.ids,
        torch.arange(batch, device=logits.device),
        remove_accidental_hits,
        removed,
    )
    return reduce_loss(per_row, reduction, sample_weight=sample_weight)


class SigmoidPairwiseLoss(nn.Module):
    """SigLIP's loss with a learnable scale and bias: ``z = t · s − log Q + b``.

    ``scale`` t (initial 10, τ = 0.1) is a :class:`~candidate_sampling.losses.core.Temperature`
    made with ``Temperature.from_scale`` (learned in log space, so it stays positive; its
    errors name ``scale``); ``bias`` b (initial −10) an ``nn.Parameter`` when
    ``learnable=True`` (the default), a buffer otherwise. ``forward(query, positives,
    candidates=None, *, sample_weight=None)`` is :func:`sigmoid_pairwise_loss`
    (``remove_accidental_hits`` as there: None keeps hits). Chapter 7.
    Defaults: ``reduction="mean"``.
    """

    def __init__(
        self,
        *,
        scale: float = SIGLIP_SCALE_INIT,
        bias: float = SIGLIP_BIAS_INIT,
        learnable: bool = True,
        remove_accidental_hits: bool | None = None,
        reduction: str = "mean",
    ) -> None:
        super().__init__()
        if isinstance(scale, bool) or not isinstance(scale, (int, float)):
            raise ValueError(f"scale must be a number, got {type(scale).__name__}")
        learnable = check_bool("learnable", learnable)
        remove_accidental_hits = check_optional_bool(
            "remove_accidental_hits", remove_accidental_hits
        )
        self.temperature = Temperature.from_scale(scale, learnable=learnable)
        _check_bias(bias)
        tensor = torch.tensor(float(bias))
        if learnable:
            self.bias = nn.Parameter(tensor)
        else:
            self.register_buffer("bias", tensor)
        self.remove_accidental_hits = remove_accidental_hits
        self.reduction = check_reduction(reduction)

    @property
    def scale(self) -> torch.Tensor:
        """``t = 1/τ``, a 0-dim tensor."""
        return self.temperature.scale

    def extra_repr(self) -> str:
        return (
            f"bias={float(self.bias.detach()):.4g}, "
            f"remove_accidental_hits={self.remove_accidental_hits!r}, "
            f"reduction={self.reduction!r}"
        )

    def forward(
        self,
        query: torch.Tensor,
        positives: CandidateSet,
        candidates: CandidateSet | None = None,
        *,
        sample_weight: torch.Tensor | None = None,
    ) -> torch.Tensor:
        return sigmoid_pairwise_loss(
            query,
            positives,
            candidates,
            temperature=self.temperature,
            bias=self.bias,
            remove_accidental_hits=self.remove_accidental_hits,
            sample_weight=sample_weight,
            reduction=self.reduction,
        )
