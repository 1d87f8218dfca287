"""Hard negatives, false negatives and the positive in the denominator (chapter 8).

Every function here is a step on a (B, C) logit matrix of the in-batch layout (row ``i``'s
positive in column ``positive_columns[i]``, ``arange(B)`` for
:func:`~candidate_sampling.losses.retrieval.in_batch_logits`), or a loss composed of such
steps and of :mod:`candidate_sampling.losses.core`. Masked columns hold the finite
:func:`~candidate_sampling.losses.core.mask_value`; a logit at or below half of it is
treated as masked.

**Selecting and weighting negatives**

* :func:`hard_negative_mining` — TF Recommenders' ``num_hard_negatives``: keep the
  positive and the ``k`` highest-logit other columns of each row.
* :func:`hardness_weighted_logits` — LLaVE's hardness weighting (Lan et al. 2025): add
  ``α · stopgrad(s_ij)`` to every negative logit, i.e. weight negative ``j`` by
  ``exp(α s_ij)`` inside the softmax.

**False negatives**

* :func:`guide_false_negative_mask` — GISTEmbed (Solatorio 2024): drop candidates that a
  guide model scores above the positive (absolute or relative margin).
* Masks by id: :func:`~candidate_sampling.losses.core.accidental_hits` (duplicates of the
  positive) and :class:`~candidate_sampling.eval.KnownPairs` (every known positive of the
  row, e.g. all movies a user rated, as the miner's ``exclusion_mask`` uses it).
* :func:`debiased_cross_entropy` — the debiased contrastive loss (Chuang et al. 2020,
  class prior ``τ⁺``) and its hard-sample reweighting (Robinson et al. 2021, ``β``), with
  the semantics of the authors' reference code.

**The positive in the denominator**

* :func:`decoupled_cross_entropy` — DCL (Yeh et al. 2022): the positive removed from the
  denominator, ``ℓ_i = −w_i o_ip + log Σ_{j≠p} exp(o_ij)``; :func:`dclw_positive_weights`
  gives DCLW's ``w_i``.
* :func:`corrected_logq_weights` — Khrylchenko et al. (RecSys 2025): with the positive
  removed, each row is weighted by ``stopgrad(1 − p̂_i)``, the estimated probability that
  the model does *not* pick its positive, with the positive's logit left uncorrected
  because it is in the denominator with probability 1, not sampled.

  *Derivation.* For the full softmax ``ℓ = −s_p + log Σ_y e^{s_y}``,
  ``∇ℓ = −(1 − P_p) ∇s_p + Σ_{y≠p} P_y ∇s_y = (1 − P_p) [−∇s_p + Σ_{y≠p} P(y | y≠p) ∇s_y]``,
  and the bracket is the gradient of the decoupled loss ``−s_p + log Σ_{y≠p} e^{s_y}``.
  Sampling estimates ``Σ_{y≠p} e^{s_y}`` by ``Σ_j e^{s_j − log Q_j}`` over the sampled
  negatives; the positive is never a sample, so its term is exact: ``p̂ = e^{s_p} /
  (e^{s_p} + Σ_j e^{s_j − log Q_j})``. The usual logQ-corrected loss has exactly the same
  gradient shape, ``(1 − P̃_p) ∇(decoupled)``, with ``P̃_p`` computed from the *corrected*
  positive logit ``s_p − log Q_p``: the two differ only in that weight. DCL drops the
  weight altogether.

**Several positives per query**

* :func:`multi_positive_cross_entropy` — multi-positive InfoNCE with the average over
  positives outside (``"out"``, the default) or inside (``"in"``) the log, or per pair
  (``"pairwise"``, pytorch-metric-learning's NT-Xent); with cosine logits over all other
  views it is SupCon's ``L_out`` / ``L_in`` (chapter 6).

:func:`hard_negative_softmax_loss` composes all of them on the in-batch candidate
contract of chapter 5 (``candidates = cat([positives, extras])``, ``candidate_ids``,
``log_q``), in this order: scores → ``s/τ − log Q`` → hardness weighting → masks
(accidental hits, false negatives) → hard-negative selection → per-row loss
(standard, debiased, decoupled or corrected) → reduction.
"""

from __future__ import annotations

import math

import torch

from candidate_sampling._validate import (
    check_optional_bool,
    check_bool_mask,
    check_choice,
    check_finite,
    check_int_range,
    check_nonnegative,
    check_positive,
    check_real,
    check_reduction,
    check_tensor,
)
from candidate_sampling.candidates import CandidateSet
from candidate_sampling.losses.core import (
    Temperature,
    _corrected_logits,
    _invalid_columns,
    _Loss,
    _union_masks,
    check_positive_columns,
    check_temperature,
    mask_logits,
    mask_value,
    _positive_column_cross_entropy,
    reduce_loss,
    score,
    score_positives,
    upcast,
)
from candidate_sampling.losses.retrieval import in_batch_columns, in_batch_logits

__all__ = [
    "MARGIN_STRATEGIES",
    "MULTI_POSITIVE_VARIANTS",
    "POSITIVE_IN_DENOMINATOR",
    "HardNegativeSoftmaxLoss",
    "corrected_logq_weights",
    "dclw_positive_weights",
    "debiased_cross_entropy",
    "decoupled_cross_entropy",
    "guide_false_negative_mask",
    "hard_negative_mining",
    "hard_negative_softmax_loss",
    "hardness_weighted_logits",
    "multi_positive_cross_entropy",
    "multi_positive_softmax_loss",
    "unmasked",
]

MARGIN_STRATEGIES = ("absolute", "relative")
MULTI_POSITIVE_VARIANTS = ("out", "in", "pairwise")
POSITIVE_IN_DENOMINATOR = ("keep", "remove", "corrected")


# --------------------------------------------------------------------------- helpers


def unmasked(logits: torch.Tensor) -> torch.Tensor:
    """(B, C) bool: the entries that are not masked (not at or below half the mask value).

    A NaN logit counts as *unmasked*, so a NaN input reaches the loss and gives a NaN
    loss instead of being dropped like a removed column.
    """
    if not isinstance(logits, torch.Tensor) or not logits.is_floating_point():
        got = logits.dtype if isinstance(logits, torch.Tensor) else type(logits).__name__
        raise ValueError(f"logits must be a floating-point tensor, got {got}")
    return _unmasked(logits)


def _unmasked(logits: torch.Tensor) -> torch.Tensor:
    """:func:`unmasked` of a floating tensor."""
    return ~(logits <= mask_value(logits.dtype) / 2)


def _check_logits(logits: torch.Tensor) -> torch.Tensor:
    """``logits`` (B, C) in at least float32, a masked entry holding the new dtype's mask value.

    The masked entries are found in the input dtype: float16's mask value (-32752) upcast
    to float32 is far above float32's, so :func:`unmasked` would read it as a logit.
    """
    check_tensor("logits", logits, ("B", "C"), floating=True)
    work = upcast(logits)
    if work.dtype == logits.dtype:
        return work
    return work.masked_fill(~_unmasked(logits), mask_value(work.dtype))


def _as_columns(positive_columns: int | torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """``positive_columns`` as a (B,) int64 tensor on the logits' device, range-checked."""
    batch, num_cols = logits.shape
    if isinstance(positive_columns, bool):
        raise ValueError("positive_columns must be an int or an integer tensor (B,)")
    if isinstance(positive_columns, int):
        if not 0 <= positive_columns < num_cols:
            raise ValueError(
                f"positive_columns must lie in [0, {num_cols}) (logits has {num_cols} "
                f"columns), got {positive_columns}"
            )
        return torch.full((batch,), positive_columns, dtype=torch.long, device=logits.device)
    check_positive_columns(positive_columns, batch, num_cols)  # the range obeys the switch
    return positive_columns.to(logits.device).long()


def _positive_mask(cols: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    mask = torch.zeros(logits.shape, dtype=torch.bool, device=logits.device)
    mask[torch.arange(logits.shape[0], device=logits.device), cols] = True
    return mask


# --------------------------------------------------------------------------- selection


def hard_negative_mining(
    logits: torch.Tensor,
    *,
    num_hard_negatives: int,
    positive_columns: int | torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Keep each row's positive and its ``num_hard_negatives`` highest-logit other columns.

    ``logits``: (B, C), already corrected and masked; ``positive_columns``: int or (B,).
    Returns ``(kept, columns)``, both (B, 1 + k) with ``k = min(num_hard_negatives, C − 1)``:
    column 0 is the positive, then the hardest negatives by decreasing logit; ``columns``
    are their indices in ``logits`` (no gradient flows through the choice, only through
    the kept logits). The loss continues with the positive in column 0.

    Semantics of TF Recommenders' ``HardNegativeMining`` (``tfrs.layers.loss``), which
    adds ``float32.max / 100`` to the positive's logit, takes ``top_k(k + 1)`` and gathers:
    the same set of columns, so the same softmax cross-entropy. Differences: TFRS returns
    the columns unsorted (``sorted=False``) with its labels, here the positive comes first;
    ties between equal logits may pick different (equal-valued) columns; TFRS's
    ``Retrieval`` task applies it after temperature, logQ correction and hit removal, as
    :func:`hard_negative_softmax_loss` does, so a masked column can still be kept when
    fewer than ``k`` unmasked ones exist (it contributes nothing). ``num_hard_negatives = 0``
    keeps only the positive (loss 0), as TFRS's code does, although its docstring says
    non-positive values keep every negative; negative values are rejected here.
    """
    work = _check_logits(logits)
    check_int_range("num_hard_negatives", num_hard_negatives, 0)
    return _hard_negative_mining(work, num_hard_negatives, _as_columns(positive_columns, work))


def _hard_negative_mining(
    work: torch.Tensor, num_hard_negatives: int, cols: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`hard_negative_mining` of checked arguments (``cols``: (B,) int64)."""
    batch, num_cols = work.shape
    k = min(num_hard_negatives, num_cols - 1)
    rows = torch.arange(batch, device=work.device)
    choose = work.detach().clone()
    choose[rows, cols] = float("-inf")  # the positive is taken separately
    negatives = torch.topk(choose, k, dim=1, sorted=True).indices
    columns = torch.cat([cols[:, None], negatives], dim=1)
    return work.gather(1, columns), columns


def hardness_weighted_logits(
    logits: torch.Tensor,
    scores: torch.Tensor,
    *,
    hardness_alpha: float,
    positive_columns: int | torch.Tensor,
) -> torch.Tensor:
    """``o_ij + α · stopgrad(s_ij)`` for every negative ``j``; the positive's logit unchanged.

    ``logits``: (B, C); ``scores``: (B, C) the raw similarities ``s_ij`` (cosine in LLaVE);
    ``hardness_alpha`` α ≥ 0. Inside the softmax this multiplies negative ``j``'s term by
    ``exp(α s_ij)``, a weight that grows with hardness and passes no gradient (Lan et al.
    2025, LLaVE, eq. 5, α of a few units; sentence-transformers' ``hardness_mode="all"``).
    It is Robinson et al.'s ``β`` reweighting with the weights held constant. Apply it
    before masking (a masked logit stays masked either way).
    """
    work = _check_logits(logits)
    check_tensor("scores", scores, tuple(work.shape), floating=True)
    check_nonnegative("hardness_alpha", hardness_alpha)
    cols = _as_columns(positive_columns, work)
    return _hardness_weighted_logits(work, scores, hardness_alpha, cols)


def _hardness_weighted_logits(
    work: torch.Tensor, scores: torch.Tensor, hardness_alpha: float, cols: torch.Tensor
) -> torch.Tensor:
    """:func:`hardness_weighted_logits` of checked arguments."""
    if hardness_alpha == 0:
        return work
    bonus = hardness_alpha * scores.detach().to(work.dtype)
    bonus = bonus.masked_fill(_positive_mask(cols, work), 0.0)
    return work + bonus


def guide_false_negative_mask(
    guide_scores: torch.Tensor,
    *,
    positive_columns: int | torch.Tensor,
    margin: float = 0.0,
    margin_strategy: str = "absolute",
) -> torch.Tensor:
    """GISTEmbed's filter: (B, C) bool, True for candidates the guide scores above the positive.

    ``guide_scores``: (B, C) similarities under a *guide* model (a trusted, usually larger,
    frozen model; computed without gradient). With ``g⁺_i`` the guide's score of row
    ``i``'s positive, candidate ``j`` is flagged as a likely false negative when

    * ``"absolute"``: ``g_ij > g⁺_i − margin``;
    * ``"relative"``: ``g_ij > g⁺_i · (1 − margin)``.

    The positive's own column is never flagged. ``margin`` ≥ 0 (0, the default, flags
    candidates the guide prefers to the positive). Semantics of sentence-transformers'
    ``GISTEmbedLoss`` (Solatorio 2024); note that the relative rule only makes sense for
    a positive guide score. Pass the result to :func:`mask_logits` or as
    ``false_negative_mask``.
    Defaults: ``margin_strategy="absolute"``.
    """
    check_tensor("guide_scores", guide_scores, ("B", "C"), floating=True)
    check_choice("margin_strategy", margin_strategy, MARGIN_STRATEGIES)
    check_nonnegative("margin", margin)
    g = guide_scores.detach()
    cols = _as_columns(positive_columns, g)
    g_pos = g.gather(1, cols[:, None])
    if margin_strategy == "absolute":
        flagged = g > g_pos - margin
    else:
        flagged = g > g_pos * (1.0 - margin)
    return flagged & ~_positive_mask(cols, g)


# --------------------------------------------------------------------------- per-row losses


def decoupled_cross_entropy(
    logits: torch.Tensor,
    positive_columns: int | torch.Tensor,
    *,
    positive_weight: torch.Tensor | None = None,
) -> torch.Tensor:
    """Per-row decoupled loss (DCL): the positive left out of the denominator. (B, C) → (B,).

    ``ℓ_i = −w_i · o_ip + log Σ_{j ≠ p, unmasked} exp(o_ij)`` (Yeh et al. 2022), with
    ``w_i = 1`` unless ``positive_weight`` (B,) is given (DCLW:
    :func:`dclw_positive_weights`). Unlike the cross-entropy it can be negative, and it is
    undefined for a row with no unmasked negative: such rows get 0 (use
    ``reduce_loss(..., valid=unmasked_negatives > 0)``; :func:`hard_negative_softmax_loss`
    does). Computed in at least float32.
    """
    work = _check_logits(logits)
    cols = _as_columns(positive_columns, work)
    if positive_weight is not None:
        check_tensor("positive_weight", positive_weight, (work.shape[0],), floating=True)
    return _decoupled_cross_entropy(work, cols, positive_weight)


def _decoupled_cross_entropy(
    work: torch.Tensor, cols: torch.Tensor, positive_weight: torch.Tensor | None
) -> torch.Tensor:
    """:func:`decoupled_cross_entropy` of checked arguments."""
    negatives = _unmasked(work) & ~_positive_mask(cols, work)
    floor = mask_value(work.dtype)
    lse = torch.logsumexp(torch.where(negatives, work, torch.full_like(work, floor)), dim=1)
    positive = work.gather(1, cols[:, None]).squeeze(1)
    if positive_weight is not None:
        positive = positive_weight.to(work.dtype) * positive
    per_row = lse - positive
    return torch.where(negatives.any(1), per_row, torch.zeros_like(per_row))


def dclw_positive_weights(positive_scores: torch.Tensor, *, sigma: float = 0.5) -> torch.Tensor:
    """DCLW's weight on the positive term: ``w_i = 2 − B · softmax_i(s_ii / σ)``. (B,) → (B,).

    ``positive_scores``: (B,) the positive pairs' similarities (cosine in Yeh et al. 2022,
    who use σ = 0.5). The weights average to 1 over the batch; pairs that are already
    close (large ``s_ii``) get less weight. Gradients flow through the weights, as in
    raminnakhli/Decoupled-Contrastive-Learning; lightly's ``DCLWLoss`` computes them from
    detached embeddings (same value; pass ``positive_scores.detach()`` for its gradient).
    Defaults: ``sigma=0.5``.
    """
    check_tensor("positive_scores", positive_scores, ("B",), floating=True)
    check_positive("sigma", sigma)
    s = upcast(positive_scores)
    return 2.0 - s.shape[0] * torch.softmax(s / sigma, dim=0)


def corrected_logq_weights(
    logits: torch.Tensor,
    positive_columns: int | torch.Tensor,
    *,
    positive_log_q: torch.Tensor | None,
) -> torch.Tensor:
    """Khrylchenko et al.'s row weight ``stopgrad(1 − p̂_i)``. (B, C) → (B,), no gradient.

    ``p̂_i = exp(o_ip + log Q_p) / (exp(o_ip + log Q_p) + Σ_{j≠p, unmasked} exp(o_ij))``: the
    softmax probability of the positive with its own correction undone (it is in the
    denominator with probability 1, not sampled), the negatives keeping theirs.
    ``positive_log_q``: (B,) the log Q that was subtracted from each row's positive
    (``None`` or zeros: no correction, and ``1 − p̂`` is the usual ``1 − softmax``). Multiply
    :func:`decoupled_cross_entropy` by it to get the corrected loss (module docstring).
    """
    work = _check_logits(logits).detach()
    cols = _as_columns(positive_columns, work)
    if positive_log_q is not None:
        check_tensor("positive_log_q", positive_log_q, (work.shape[0],), floating=True)
        check_finite("positive_log_q", positive_log_q)  # a value check
    return _corrected_logq_weights(work, cols, positive_log_q)


def _corrected_logq_weights(
    work: torch.Tensor, cols: torch.Tensor, positive_log_q: torch.Tensor | None
) -> torch.Tensor:
    """:func:`corrected_logq_weights` of checked arguments (``work`` detached)."""
    work = work.detach()
    batch = work.shape[0]
    if positive_log_q is not None:
        rows = torch.arange(batch, device=work.device)
        work = work.clone()
        work[rows, cols] = work[rows, cols] + positive_log_q.detach().to(work)
    log_p = work.gather(1, cols[:, None]).squeeze(1) - torch.logsumexp(work, dim=1)
    return -torch.expm1(log_p)  # 1 − p̂, accurate when p̂ is small


def _check_debiased(tau_plus: float, beta: float, min_logit: float | None) -> None:
    """The options of :func:`debiased_cross_entropy`, each error naming its argument."""
    if not (math.isfinite(check_real("tau_plus", tau_plus)) and 0 <= tau_plus < 1):
        raise ValueError(f"tau_plus must lie in [0, 1), got {tau_plus!r}")
    check_nonnegative("beta", beta)
    if min_logit is not None and not math.isfinite(check_real("min_logit", min_logit)):
        raise ValueError(f"min_logit must be finite, got {min_logit!r}")


def debiased_cross_entropy(
    logits: torch.Tensor,
    positive_columns: int | torch.Tensor,
    *,
    tau_plus: float,
    beta: float = 0.0,
    min_logit: float | None = None,
) -> torch.Tensor:
    """Debiased (Chuang et al. 2020) and hard (Robinson et al. 2021) contrastive loss. → (B,).

    With ``N`` unmasked negatives ``o_ij`` per row, importance weights
    ``w_ij = exp(β o_ij) / Σ_k exp(β o_ik)`` (uniform at ``β = 0``), the class prior
    ``τ⁺ = tau_plus`` (the probability that a "negative" shares the query's class):

        Ng_i = max( N · (Σ_j w_ij e^{o_ij} − τ⁺ e^{o_ip}) / (1 − τ⁺),  N · e^{min_logit} )
        ℓ_i  = −log( e^{o_ip} / (e^{o_ip} + Ng_i) )

    The first term removes, in expectation, the same-class samples hiding among the
    negatives (a uniform negative is a positive with probability τ⁺, and the positive's
    term estimates what those look like); ``β`` tilts the negatives towards the hard ones.
    The floor keeps ``Ng > 0``: the reference code uses ``N e^{−1/t}``, the smallest value a
    cosine similarity allows (pass ``min_logit = −1/τ``); the default ``None`` floors at
    ``N · min_j e^{o_ij}``. ``τ⁺ = β = 0`` is the ordinary cross-entropy. Matches the
    authors' code (chingyaoc/DCL ``debiased``, joshr17/HCL ``estimator='hard'``; gradients
    flow through the weights there and here), written in log space. Rows with no unmasked
    negative get 0; a NaN logit gives a NaN row (never the floor).
    Defaults: ``beta=0.0``.
    """
    work = _check_logits(logits)
    cols = _as_columns(positive_columns, work)
    _check_debiased(tau_plus, beta, min_logit)
    return _debiased_cross_entropy(work, cols, tau_plus, beta, min_logit)


def _debiased_cross_entropy(
    work: torch.Tensor, cols: torch.Tensor, tau_plus: float, beta: float, min_logit: float | None
) -> torch.Tensor:
    """:func:`debiased_cross_entropy` of checked arguments."""
    negatives = _unmasked(work) & ~_positive_mask(cols, work)
    floor = torch.full_like(work, mask_value(work.dtype))
    count = negatives.sum(1)
    log_n = torch.log(count.clamp(min=1).to(work.dtype))
    o_pos = work.gather(1, cols[:, None]).squeeze(1)
    tilted = torch.where(negatives, beta * work, floor)
    log_w = tilted - torch.logsumexp(tilted, dim=1, keepdim=True)
    log_mean = torch.logsumexp(torch.where(negatives, log_w + work, floor), dim=1)
    if min_logit is None:
        log_floor = log_n + torch.where(negatives, work, -floor).min(1).values
    else:
        log_floor = log_n + min_logit
    if tau_plus > 0:
        b = math.log(tau_plus) + o_pos
        m = torch.maximum(log_mean, b)
        diff = torch.exp(log_mean - m) - torch.exp(b - m)
        ok = ~(diff <= 0)  # NaN stays "ok", so a NaN logit reaches the loss, not the floor
        raw = log_n + m + torch.log(torch.where(ok, diff, torch.ones_like(diff)))
        raw = raw - math.log1p(-tau_plus)
        log_ng = torch.where(ok, torch.maximum(raw, log_floor), log_floor)
    else:
        log_ng = torch.maximum(log_n + log_mean, log_floor)
    per_row = torch.logaddexp(o_pos, log_ng) - o_pos
    return torch.where(count > 0, per_row, torch.zeros_like(per_row))


def multi_positive_cross_entropy(
    logits: torch.Tensor, positive_mask: torch.Tensor, *, variant: str = "out"
) -> torch.Tensor:
    """Multi-positive InfoNCE per row: (B, C) logits, (B, C) bool positives → (B,).

    With ``P(i)`` the row's positive columns, ``N(i)`` its other unmasked columns and
    ``log p_ij = o_ij − logsumexp_k o_ik`` over every unmasked column (positives included):

        "out":      ℓ_i = −(1/|P(i)|) Σ_{p∈P(i)} log p_ip          (SupCon's L_out)
        "in":       ℓ_i = −log( (1/|P(i)|) Σ_{p∈P(i)} p_ip )        (SupCon's L_in)
        "pairwise": ℓ_i = (1/|P(i)|) Σ_{p∈P(i)} −log( e^{o_ip} / (e^{o_ip} + Σ_{n∈N(i)} e^{o_in}) )

    ``"pairwise"`` is pytorch-metric-learning's NT-Xent with several positives: each
    positive competes with the anchor's negatives only, not with the other positives
    (PML then averages over all pairs of the batch; here over a row's pairs, then over
    rows — the same when every row has as many positives). ``L_in ≤ L_out`` (Jensen) and
    ``L_pairwise ≤ L_out``. ``variant`` defaults to ``"out"`` (SupCon's recommended
    form). Rows without a positive get 0 (pass ``valid=positive_mask.any(1)`` to
    :func:`reduce_loss`). Masked columns are never
    positives; a NaN logit gives a NaN row.
    """
    work = _check_logits(logits)
    check_bool_mask("positive_mask", positive_mask, tuple(work.shape))
    check_choice("variant", variant, MULTI_POSITIVE_VARIANTS)
    pos = positive_mask.to(work.device) & _unmasked(work)
    num_pos = pos.sum(1)
    zero = torch.zeros((), dtype=work.dtype, device=work.device)
    if variant == "pairwise":
        lse_neg = torch.logsumexp(mask_logits(work, pos), dim=1, keepdim=True)  # (B, 1)
        pair = torch.logaddexp(work, lse_neg) - work  # −log(e^o / (e^o + Σ_n e^{o_n}))
        per_row = torch.where(pos, pair, zero).sum(1) / num_pos.clamp(min=1)
    elif variant == "out":
        log_norm = torch.logsumexp(work, dim=1)
        per_row = log_norm - torch.where(pos, work, zero).sum(1) / num_pos.clamp(min=1)
    else:
        log_norm = torch.logsumexp(work, dim=1)
        lse_pos = torch.logsumexp(mask_logits(work, ~pos), dim=1)
        per_row = log_norm - lse_pos + torch.log(num_pos.clamp(min=1).to(work.dtype))
    return torch.where(num_pos > 0, per_row, torch.zeros_like(per_row))


# --------------------------------------------------------------------------- composed losses


def multi_positive_softmax_loss(
    query: torch.Tensor,
    candidates: CandidateSet,
    positive_mask: torch.Tensor,
    *,
    temperature: float | Temperature = 1.0,
    variant: str = "out",
    removed: torch.Tensor | None = None,
    sample_weight: torch.Tensor | None = None,
    reduction: str = "mean",
) -> torch.Tensor:
    """Multi-positive InfoNCE of ``query`` (B, d) against a CandidateSet of C columns.

    ``positive_mask``: (B, C) bool, row ``i``'s positives; ``removed``: (B, C) bool columns
    to remove (e.g. the query itself when queries are among the candidates), besides the
    set's invalid columns. Logits ``(u·v + b)/τ − log Q`` (steps 1–4); per-row loss
    :func:`multi_positive_cross_entropy` with ``variant`` "out" (the default), "in" (SupCon)
    or "pairwise" (pytorch-metric-learning's NT-Xent); rows without a positive are left out
    of ``"mean"``. Chapter 8 (SupCon of chapter 6 is the case ``candidates = query`` with
    cosine scores and the diagonal removed).
    Defaults: ``temperature=1.0``, ``reduction="mean"``.
    """
    check_temperature(temperature)
    check_choice("variant", variant, MULTI_POSITIVE_VARIANTS)
    logits = _corrected_logits(query, candidates, temperature)
    shape = tuple(logits.shape)
    check_tensor("positive_mask", positive_mask, shape)
    if removed is not None:
        check_bool_mask("removed", removed, shape)
    removed = _union_masks(_invalid_columns(candidates), removed)
    logits = mask_logits(logits, removed, inplace=True)
    per_row = multi_positive_cross_entropy(logits, positive_mask, variant=variant)
    valid = (positive_mask.to(logits.device) & _unmasked(logits)).any(1)
    return reduce_loss(per_row, reduction, valid=valid, sample_weight=sample_weight)


def _check_options(
    hardness_alpha: float,
    positive_in_denominator: str,
    dclw_sigma: float | None,
    tau_plus: float,
    beta: float,
    min_logit: float | None,
    num_hard_negatives: int | None,
) -> None:
    """The options of :func:`hard_negative_softmax_loss`, each error naming its argument."""
    check_choice("positive_in_denominator", positive_in_denominator, POSITIVE_IN_DENOMINATOR)
    check_nonnegative("hardness_alpha", hardness_alpha)
    if dclw_sigma is not None:
        check_positive("dclw_sigma", dclw_sigma)
        if positive_in_denominator != "remove":
            raise ValueError('dclw_sigma needs positive_in_denominator="remove" (DCLW)')
    _check_debiased(tau_plus, beta, min_logit)
    if min_logit is not None and not (tau_plus or beta):
        raise ValueError(
            "min_logit needs tau_plus > 0 or beta > 0: it floors the debiased / hard-sample "
            f"loss's negative term, and the plain cross-entropy has none (got min_logit="
            f"{min_logit!r} with tau_plus={tau_plus!r}, beta={beta!r})"
        )
    if (tau_plus or beta) and positive_in_denominator != "keep":
        raise ValueError(
            'tau_plus and beta (debiased / hard-sample loss) need positive_in_denominator="keep"'
        )
    if num_hard_negatives is not None:
        check_int_range("num_hard_negatives", num_hard_negatives, 0)


def hard_negative_softmax_loss(
    query: torch.Tensor,
    positives: CandidateSet,
    candidates: CandidateSet | None = None,
    *,
    temperature: float | Temperature = 1.0,
    remove_accidental_hits: bool | None = None,
    false_negative_mask: torch.Tensor | None = None,
    hardness_alpha: float = 0.0,
    num_hard_negatives: int | None = None,
    positive_in_denominator: str = "keep",
    dclw_sigma: float | None = None,
    tau_plus: float = 0.0,
    beta: float = 0.0,
    min_logit: float | None = None,
    sample_weight: torch.Tensor | None = None,
    reduction: str = "mean",
) -> torch.Tensor:
    """The in-batch softmax of chapter 5 with chapter 8's options for negatives.

    Inputs as :func:`~candidate_sampling.losses.retrieval.in_batch_softmax_loss`:
    ``query`` (B, d); ``positives`` the batch's B positives (row ``i``'s in column ``i``);
    ``candidates`` more columns (mixed, queued, mined negatives), each with its own log Q
    and mask. Then, in this order:

    1. ``o_ij = s_ij / τ − log Q_j``;
    2. ``hardness_alpha`` α: ``o_ij += α · stopgrad(s_ij)`` for ``j ≠ i``
       (:func:`hardness_weighted_logits`);
    3. masks: accidental hits (``remove_accidental_hits``: None, the default, by each
       column's source — the batch's copies kept, mined columns' hits removed — as
       :func:`~candidate_sampling.losses.retrieval.in_batch_logits`; True or False for
       every column), the sets' invalid columns, and ``false_negative_mask``
       (B, B + C) bool — known positives, a guide's verdict
       (:func:`guide_false_negative_mask`); the row's own positive column is never masked;
    4. ``num_hard_negatives`` k: keep the positive and the k hardest columns
       (:func:`hard_negative_mining`, TF Recommenders' option);
    5. the per-row loss, by ``positive_in_denominator``:

       * ``"keep"``: the softmax cross-entropy, or with ``tau_plus`` / ``beta`` > 0 the
         debiased / hard-sample loss (:func:`debiased_cross_entropy`, ``min_logit``);
       * ``"remove"``: DCL (:func:`decoupled_cross_entropy`), DCLW with ``dclw_sigma``;
       * ``"corrected"``: Khrylchenko et al., ``stopgrad(1 − p̂_i) ·`` DCL
         (:func:`corrected_logq_weights`, with the log Q subtracted from each row's own
         positive: ``positives.log_q[i]``, or ``positives.log_q[i, i]`` when per row);

    6. the reduction over rows, weighted by ``sample_weight`` (rows left without a
       negative are dropped from the mean in the decoupled modes). Every option is checked
       here, once, and an error names it. Chapter 8.

    Defaults: ``temperature=1.0``.
    """
    _check_options(
        hardness_alpha, positive_in_denominator, dclw_sigma, tau_plus, beta, min_logit,
        num_hard_negatives,
    )
    check_reduction(reduction)
    remove_accidental_hits = check_optional_bool("remove_accidental_hits", remove_accidental_hits)
    if false_negative_mask is not None and (
        not isinstance(false_negative_mask, torch.Tensor)
        or false_negative_mask.dtype != torch.bool
    ):
        got = getattr(false_negative_mask, "dtype", type(false_negative_mask).__name__)
        raise ValueError(f"false_negative_mask must be a bool tensor, got {got}")
    try:  # steps 1–4 (the masks: hits, invalid columns, false negatives) in one call
        logits = in_batch_logits(
            query,
            positives,
            candidates,
            temperature=temperature,
            remove_accidental_hits=remove_accidental_hits,
            removed=false_negative_mask,
        )
    except ValueError as err:  # name the argument the caller passed
        raise ValueError(str(err).replace("removed", "false_negative_mask")) from None
    batch = logits.shape[0]
    columns = torch.arange(batch, device=logits.device)  # our own: no range check below
    if hardness_alpha:  # a masked logit stays far below any real one after the bonus
        with torch.no_grad():
            all_columns = in_batch_columns(query, positives, candidates)
            scores = score(query, all_columns)
        logits = _hardness_weighted_logits(logits, scores, hardness_alpha, columns)
    if num_hard_negatives is not None:
        logits, _ = _hard_negative_mining(logits, num_hard_negatives, columns)
        columns = torch.zeros(batch, dtype=torch.long, device=logits.device)
    if positive_in_denominator == "keep":
        if tau_plus or beta:
            per_row = _debiased_cross_entropy(logits, columns, tau_plus, beta, min_logit)
            valid = _unmasked(logits).sum(1) > 1
            return reduce_loss(per_row, reduction, valid=valid, sample_weight=sample_weight)
        per_row = _positive_column_cross_entropy(logits, columns)
        return reduce_loss(per_row, reduction, sample_weight=sample_weight)
    valid = _unmasked(logits).sum(1) > 1
    weight = None
    if dclw_sigma is not None:
        weight = dclw_positive_weights(score_positives(query, positives)[:, 0], sigma=dclw_sigma)
    per_row = _decoupled_cross_entropy(logits, columns, weight)
    if positive_in_denominator == "corrected":
        positive_log_q = positives.log_q  # checked when the set was made
        if positive_log_q is not None and positive_log_q.dim() == 2:
            # per-row (B, B): row i's own positive column i was corrected by log_q[i, i]
            positive_log_q = positive_log_q.diagonal()
        per_row = per_row * _corrected_logq_weights(logits, columns, positive_log_q)
    return reduce_loss(per_row, reduction, valid=valid, sample_weight=sample_weight)


class HardNegativeSoftmaxLoss(_Loss):
    """Module form of :func:`hard_negative_softmax_loss`: options fixed at construction.
    Defaults: ``temperature=1.0``, ``hardness_alpha=0.0``,
    ``positive_in_denominator="keep"``, ``tau_plus=0.0``, ``beta=0.0``,
    ``reduction="mean"``.
    ``num_hard_negatives`` is TF Recommenders' option of that name
    (:func:`hard_negative_mining`)."""

    _options = (
        "temperature",
        "hardness_alpha",
        "num_hard_negatives",
        "positive_in_denominator",
        "dclw_sigma",
        "tau_plus",
        "beta",
        "min_logit",
        "remove_accidental_hits",
        "reduction",
    )
    _fn = staticmethod(hard_negative_softmax_loss)

    def __init__(
        self,
        *,
        temperature: float | Temperature = 1.0,
        hardness_alpha: float = 0.0,
        num_hard_negatives: int | None = None,
        positive_in_denominator: str = "keep",
        dclw_sigma: float | None = None,
        tau_plus: float = 0.0,
        beta: float = 0.0,
        min_logit: float | None = None,
        remove_accidental_hits: bool | None = None,
        reduction: str = "mean",
    ) -> None:
        super().__init__(temperature=temperature, reduction=reduction)
        _check_options(
            hardness_alpha, positive_in_denominator, dclw_sigma, tau_plus, beta, min_logit,
            num_hard_negatives,
        )
        self.hardness_alpha = hardness_alpha
        self.num_hard_negatives = num_hard_negatives
        self.positive_in_denominator = positive_in_denominator
        self.dclw_sigma = dclw_sigma
        self.tau_plus, self.beta, self.min_logit = tau_plus, beta, min_logit
        self.remove_accidental_hits = check_optional_bool(
            "remove_accidental_hits", remove_accidental_hits
        )

    def forward(
        self,
        query: torch.Tensor,
        positives: CandidateSet,
        candidates: CandidateSet | None = None,
        *,
        false_negative_mask: torch.Tensor | None = None,
        sample_weight: torch.Tensor | None = None,
    ) -> torch.Tensor:
        return self._call(
            query, positives, candidates,
            false_negative_mask=false_negative_mask, sample_weight=sample_weight,
        )
