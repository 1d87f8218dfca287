"""Full softmax, importance sampling, sampled softmax, NCE, negative sampling, sampled logistic.

Chapters 1–4. Every loss here is a composition of the pipeline steps in
:mod:`candidate_sampling.losses.core` — score → correct (``s/τ − log Q``) → mask →
softmax or logistic → reduce — and comes in two layers:

* ``*_from_scores`` functions take the scores already computed: positives ``(B,)`` (or
  ``(B, T)`` for ``T`` positives per row, TF's ``num_true``) and negatives ``(B, k)``,
  their log expected counts and a removal mask;
* embedding-level functions (``sampled_softmax_loss``, ``nce_loss``, ...) mirror
  TensorFlow's ``_compute_sampled_logits``: one set of ``k`` sampled ids shared by the
  batch (a :class:`~candidate_sampling.sampling.samplers.CandidateDraw`, which carries the log
  expected counts of the sampled *and* the positive ids), only the needed rows of the
  class table gathered — or the ids passed through an item encoder — then the
  ``*_from_scores`` step.

Every option is keyword-only after the tensor inputs:
``sampled_softmax_loss(query, classes, positive_ids, draw, *, temperature=..., ...)``.

How they map onto TensorFlow's "Candidate Sampling Algorithms Reference" table (F = the
model's score s(x, y), Q = the expected count of y in the sampled set, T = the true class,
S = the sampled set):

=================  =========  =========  ==============  ========  ==================
method             positives  negatives  input to loss   loss      F learns
=================  =========  =========  ==============  ========  ==================
NCE                T          S          F − log Q       logistic  log P(y | x)
negative sampling  T          S          F               logistic  log(P / Q)
sampled logistic   T          S − T      F − log Q       logistic  log-odds
full softmax       {t}        V − {t}    F               softmax   log P + K(x)
sampled softmax    {t}        S − T      F − log Q       softmax   log P + K(x)
=================  =========  =========  ==============  ========  ==================

Sign conventions: scores are "higher = more likely"; losses are positive negative
log-likelihoods; the correction is *subtracted*, after the temperature: ``s/τ − log Q``.
``log Q`` is the log *expected count* (``log(kq)`` with replacement), which matters for
the logistic losses and cancels in the softmax ones. Reduction: ``"mean"`` over the rows
of the batch; a logistic row is the *sum* of its ``1 + k`` binary terms (as TF's
``nce_loss``), a softmax row is one cross-entropy.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

from candidate_sampling._validate import (
    check_finite,
    get_validate_args,
    check_ids,
    check_int_range,
    check_same,
    check_tensor,
    common_float_dtype,
)
from candidate_sampling.losses.core import (
    _Loss,
    accidental_hits,
    correct_logits,
    mask_logits,
    positive_column_cross_entropy,
    reduce_loss,
)
from candidate_sampling.sampling.samplers import CandidateDraw, CandidateSampler

__all__ = [
    "softmax_cross_entropy",
    "importance_sampled_log_partition",
    "importance_weights",
    "effective_sample_size",
    "sampled_scores",
    "sampled_softmax_from_scores",
    "sampled_softmax_loss",
    "nce_from_scores",
    "nce_loss",
    "negative_sampling_loss",
    "sampled_logistic_loss",
    "SampledSoftmaxLoss",
    "NCELoss",
]

#: A class table (|V|, d) or an item encoder: ids (n,) → embeddings (n, d).
Classes = torch.Tensor | Callable[[torch.Tensor], torch.Tensor]
DrawLike = CandidateDraw | Sequence[torch.Tensor]


# --------------------------------------------------------------------------- full softmax


def softmax_cross_entropy(
    logits: torch.Tensor, positive_ids: torch.Tensor, *, reduction: str = "mean"
) -> torch.Tensor:
    """The reference: full softmax cross-entropy over the whole catalogue (chapter 1).

    ``loss_i = logsumexp_y(logits[i, y]) − logits[i, positive_ids[i]] = −log p(y_i | x_i)``.
    ``logits``: (B, |V|) floating; ``positive_ids``: (B,) int ids in ``[0, |V|)``. Computed
    in at least float32. Reduction ``"mean"`` over rows (default), ``"sum"`` or ``"none"``.
    """
    check_tensor("logits", logits, ("B", "|V|"), floating=True)
    check_tensor("positive_ids", positive_ids, ("B",), floating=False)
    check_same("batch size B", logits=logits.shape[0], positive_ids=positive_ids.shape[0])
    check_ids("positive_ids", positive_ids, logits.shape[1])
    return reduce_loss(positive_column_cross_entropy(logits, positive_ids), reduction)


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
    try:
        torch.broadcast_shapes(scores.shape, log_proposal.shape)
    except RuntimeError as err:
        raise ValueError(
            f"log_proposal must be broadcastable to scores {tuple(scores.shape)}, "
            f"got {tuple(log_proposal.shape)}"
        ) from err
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
    broadcastable to ``scores``, the per-draw log probability ``log q(y_i)`` — *not* the
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
    same weights. ``scores``: (..., m); ``log_proposal`` broadcastable → (..., m).
    """
    scores, log_proposal = _check_is_inputs(scores, log_proposal)
    return torch.softmax(scores - log_proposal, dim=-1)


def effective_sample_size(weights: torch.Tensor) -> torch.Tensor:
    """Kish's effective sample size ``1 / Σ_i w_i²`` of normalised weights (chapter 2).

    ``weights``: (..., m), non-negative, summing to 1 over the last axis → (...). Equals
    ``m`` for equal weights and 1 when one weight carries all the mass.
    """
    if not isinstance(weights, torch.Tensor) or not weights.is_floating_point():
        raise ValueError("weights must be a floating-point torch.Tensor of shape (..., m)")
    if weights.dim() == 0 or weights.shape[-1] == 0:
        raise ValueError(
            f"weights must have shape (..., m) with m >= 1, got {tuple(weights.shape)}"
        )
    return 1.0 / (weights**2).sum(-1)


# --------------------------------------------------------------------------- shared checks


def _check_scores_and_corrections(
    positive_scores: torch.Tensor,
    negative_scores: torch.Tensor,
    positive_log_q: torch.Tensor | None,
    negative_log_q: torch.Tensor | None,
    mask: torch.Tensor | None,
) -> None:
    if not isinstance(positive_scores, torch.Tensor) or positive_scores.dim() not in (1, 2):
        shape = tuple(positive_scores.shape) if isinstance(positive_scores, torch.Tensor) else None
        raise ValueError(f"positive_scores must have shape (B,) or (B, T), got {shape}")
    if not positive_scores.is_floating_point():
        raise ValueError(
            f"positive_scores must be a floating-point tensor, got {positive_scores.dtype}"
        )
    check_tensor("negative_scores", negative_scores, ("B", "k"), floating=True)
    check_same(
        "batch size B",
        positive_scores=positive_scores.shape[0],
        negative_scores=negative_scores.shape[0],
    )
    b, k = negative_scores.shape
    if positive_log_q is not None:
        if tuple(positive_log_q.shape) != tuple(positive_scores.shape):
            raise ValueError(
                f"positive_log_q must have the shape of positive_scores "
                f"{tuple(positive_scores.shape)}, got {tuple(positive_log_q.shape)}"
            )
        if not positive_log_q.is_floating_point():
            raise ValueError(f"positive_log_q must be floating-point, got {positive_log_q.dtype}")
        check_finite("positive_log_q", positive_log_q)
    if negative_log_q is not None:
        if negative_log_q.dim() == 1:
            check_tensor("negative_log_q", negative_log_q, (k,), floating=True)
        else:
            check_tensor("negative_log_q", negative_log_q, (b, k), floating=True)
        check_finite("negative_log_q", negative_log_q)
    if mask is not None:
        check_tensor("mask", mask, (b, k))
        if mask.dtype != torch.bool:
            raise ValueError(f"mask must be a bool tensor, got {mask.dtype}")


def _positive_logits(
    positive_scores: torch.Tensor,
    positive_log_q: torch.Tensor | None,
    temperature: float | torch.Tensor,
) -> torch.Tensor:
    """(B,) or (B, T) corrected positive logits as (B, T)."""
    pos = correct_logits(positive_scores, positive_log_q, temperature=temperature)
    return pos if pos.dim() == 2 else pos[:, None]


# --------------------------------------------------------------------------- sampled softmax


def sampled_softmax_from_scores(
    positive_scores: torch.Tensor,
    negative_scores: torch.Tensor,
    *,
    positive_log_q: torch.Tensor | None = None,
    negative_log_q: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
    temperature: float | torch.Tensor = 1.0,
    reduction: str = "mean",
) -> torch.Tensor:
    """Sampled softmax from scores: softmax over ``T ∪ S`` with the logQ correction (chapter 4).

    ``o_t = s_t/τ − log Q_t``, ``o_j = s_j/τ − log Q_j`` and, with ``T`` positives per row
    each labelled ``1/T`` (TF's ``num_true``),
    ``loss = logsumexp(o_{t_1..t_T}, o_1..o_k) − (1/T) Σ_t o_t``; masked negatives
    (accidental hits) get the finite :func:`~candidate_sampling.losses.core.mask_value`
    (zero weight, zero gradient). ``log Q`` is the log expected count; ``None`` means no
    correction. A constant added to every ``log Q`` leaves the loss unchanged. TF table:
    positives T, negatives S − T, input F − log Q, softmax; F learns ``log P(y | x) + K(x)``.

    ``positive_scores``: (B,) or (B, T); ``negative_scores``: (B, k); ``positive_log_q``:
    shaped like ``positive_scores``; ``negative_log_q``: (k,) shared by the batch or
    (B, k); ``mask``: (B, k) bool, True = remove. Mixed dtypes are promoted, half inputs
    computed in float32. Reduction: mean over rows.
    """
    return _sampled_softmax(
        positive_scores,
        negative_scores,
        positive_log_q=positive_log_q,
        negative_log_q=negative_log_q,
        mask=mask,
        temperature=temperature,
        reduction=reduction,
        owns_scores=False,
    )


def _negative_logits(
    negative_scores: torch.Tensor,
    dtype: torch.dtype,
    negative_log_q: torch.Tensor | None,
    temperature: float | torch.Tensor,
    owns_scores: bool,
) -> tuple[torch.Tensor, bool]:
    """Corrected (B, k) negative logits, and whether they are a tensor of our own.

    ``owns_scores``: ``negative_scores`` is the loss's own fresh score matrix (the
    embedding-level losses), so the correction may be written into it; otherwise it is
    the caller's and is left untouched. A tensor this function creates (a dtype copy, the
    corrected logits) is ours either way, so the mask can be written into it in place:
    no (B, k) copy is made that the loss does not need.
    """
    scores = negative_scores.to(dtype)
    owned = owns_scores or scores is not negative_scores
    neg = correct_logits(scores, negative_log_q, temperature=temperature, inplace=owned)
    return neg, owned or neg is not scores


def _sampled_softmax(
    positive_scores: torch.Tensor,
    negative_scores: torch.Tensor,
    *,
    positive_log_q: torch.Tensor | None,
    negative_log_q: torch.Tensor | None,
    mask: torch.Tensor | None,
    temperature: float | torch.Tensor,
    reduction: str,
    owns_scores: bool,
) -> torch.Tensor:
    """The body of :func:`sampled_softmax_from_scores`; see :func:`_negative_logits`."""
    _check_scores_and_corrections(
        positive_scores, negative_scores, positive_log_q, negative_log_q, mask
    )
    dtype = common_float_dtype(positive_scores=positive_scores, negative_scores=negative_scores)
    pos = _positive_logits(positive_scores.to(dtype), positive_log_q, temperature)
    neg, owned = _negative_logits(negative_scores, dtype, negative_log_q, temperature, owns_scores)
    neg = mask_logits(neg, mask, inplace=owned)
    logits = torch.cat([pos, neg], dim=1)
    num_true = pos.shape[1]
    if num_true == 1:
        columns: int | torch.Tensor = 0
    else:
        columns = torch.arange(num_true, device=logits.device).expand(logits.shape[0], -1)
    return reduce_loss(positive_column_cross_entropy(logits, columns), reduction)


def _unpack_draw(
    draw: DrawLike, positive_ids: torch.Tensor, subtract_log_q: bool
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    if isinstance(draw, CandidateDraw):
        sampled_ids, sampled_log_q, positive_log_q = draw.ids, draw.log_q, draw.positive_log_q
    elif isinstance(draw, (tuple, list)) and len(draw) == 3:
        sampled_ids, sampled_log_q, positive_log_q = draw
        check_tensor("sampled_ids", sampled_ids, ("k",), floating=False)
        check_tensor("sampled_log_q", sampled_log_q, (sampled_ids.shape[0],), floating=True)
    else:
        raise ValueError(
            "draw must be a CandidateDraw or a tuple (sampled_ids (k,), sampled_log_q (k,), "
            f"positive_log_q shaped like positive_ids), got {type(draw).__name__}"
        )
    if not subtract_log_q:
        return sampled_ids, None, None
    if positive_log_q is None:
        raise ValueError(
            "draw.positive_log_q is None, but subtract_log_q=True needs the positives' log "
            "expected count: draw with sampler.sample(k, positive_ids=positive_ids)"
        )
    if tuple(positive_log_q.shape) != tuple(positive_ids.shape):
        raise ValueError(
            f"draw's positive_log_q must have the shape of positive_ids "
            f"{tuple(positive_ids.shape)}, got {tuple(positive_log_q.shape)}"
        )
    if get_validate_args() and bool(torch.isneginf(positive_log_q).any()):
        raise ValueError(
            "positive_log_q is -inf for some positive id: the proposal cannot draw it "
            "(an excluded id?), so the sampled loss is undefined for that row"
        )
    return sampled_ids, sampled_log_q, positive_log_q


def _embed(classes: Classes, ids: torch.Tensor, sparse: bool) -> torch.Tensor:
    """Rows of the class table (one gather, optionally with a sparse gradient) or encodings."""
    if isinstance(classes, torch.Tensor):
        return F.embedding(ids, classes, sparse=sparse)
    return classes(ids)


def sampled_scores(
    query: torch.Tensor,
    classes: Classes,
    positive_ids: torch.Tensor,
    sampled_ids: torch.Tensor,
    *,
    class_bias: torch.Tensor | None = None,
    sparse: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Scores of the positive and the shared sampled classes, touching only their rows (ch. 4).

    ``s(x, y) = query · w_y + b_y``, where ``w_y`` is row ``y`` of the class table or the
    output of the item encoder for id ``y``. ``classes``: a (|V|, d) class table, whose
    rows of ``positive_ids`` and ``sampled_ids`` are gathered in one ``F.embedding`` call
    (``sparse=True`` gives a sparse gradient for ``torch.optim.SGD`` / ``SparseAdam``), or
    an item encoder, a callable ``ids (n,) → (n, d)`` such as an item tower, called once on
    the concatenated ids; nothing of size |V| × d is touched either way.
    ``query``: (B, d); ``class_bias``: (|V|,) or None; ``positive_ids``: (B,) or
    (B, T); ``sampled_ids``: (k,). Returns ``positive_scores`` shaped like
    ``positive_ids`` and ``negative_scores`` (B, k), in at least float32.
    """
    check_tensor("query", query, ("B", "d"), floating=True)
    is_table = isinstance(classes, torch.Tensor)
    if is_table:
        check_tensor("classes", classes, ("|V|", "d"), floating=True)
        check_same("embedding dimension d", query=query.shape[1], classes=classes.shape[1])
        num_classes = classes.shape[0]
    elif callable(classes):
        num_classes = class_bias.shape[0] if class_bias is not None else None
    else:
        raise ValueError(
            "classes must be a class table (|V|, d) or an item encoder (ids -> embeddings), "
            f"got {type(classes).__name__}"
        )
    if positive_ids.dim() not in (1, 2) or positive_ids.is_floating_point():
        raise ValueError(
            f"positive_ids must be an integer tensor of shape (B,) or (B, T), got "
            f"{positive_ids.dtype} {tuple(positive_ids.shape)}"
        )
    check_same("batch size B", query=query.shape[0], positive_ids=positive_ids.shape[0])
    check_tensor("sampled_ids", sampled_ids, ("k",), floating=False)
    if class_bias is not None:
        check_tensor("class_bias", class_bias, ("|V|",), floating=True)
        if is_table:
            check_same(
                "number of classes |V|", classes=classes.shape[0], class_bias=class_bias.shape[0]
            )
    if num_classes is not None:
        check_ids("positive_ids", positive_ids, num_classes)
        check_ids("sampled_ids", sampled_ids, num_classes)
    flat_pos = positive_ids.reshape(-1)
    n_pos = flat_pos.shape[0]
    all_ids = torch.cat([flat_pos, sampled_ids.to(positive_ids.device)]).long()
    rows = _embed(classes, all_ids, sparse)
    if not isinstance(rows, torch.Tensor) or rows.shape != (all_ids.shape[0], query.shape[1]):
        raise ValueError(
            f"the item encoder must map ids (n,) to embeddings (n, d={query.shape[1]}), "
            f"got {tuple(rows.shape) if isinstance(rows, torch.Tensor) else type(rows)}"
        )
    dtype = common_float_dtype(query=query, classes=rows, class_bias=class_bias)
    q, rows = query.to(dtype), rows.to(dtype)
    # split, not two slices: its backward concatenates the two gradients into one buffer
    pos_rows, neg_rows = rows.split([n_pos, rows.shape[0] - n_pos])
    pos_rows = pos_rows.reshape(*positive_ids.shape, -1)
    pos = (q[:, None, :] * pos_rows).sum(-1) if positive_ids.dim() == 2 else (q * pos_rows).sum(-1)
    neg = q @ neg_rows.T
    if class_bias is not None:
        bias = class_bias[all_ids].to(dtype)
        pos = pos + bias[:n_pos].reshape(positive_ids.shape)
        neg = neg + bias[n_pos:]
    return pos, neg


def _sampled_loss_inputs(
    query: torch.Tensor,
    classes: Classes,
    positive_ids: torch.Tensor,
    draw: DrawLike,
    class_bias: torch.Tensor | None,
    remove_accidental_hits: bool,
    subtract_log_q: bool,
    sparse: bool,
) -> dict[str, torch.Tensor | None]:
    """The shared front of the embedding-level losses (TF's ``_compute_sampled_logits``).

    Returns the keyword arguments of the ``*_from_scores`` functions: scores, corrections
    (``None`` when ``subtract_log_q`` is off) and the accidental-hit mask (``None`` when
    hits are kept).
    """
    if not isinstance(positive_ids, torch.Tensor):
        raise ValueError(f"positive_ids must be a torch.Tensor, got {type(positive_ids).__name__}")
    sampled_ids, sampled_log_q, positive_log_q = _unpack_draw(draw, positive_ids, subtract_log_q)
    pos, neg = sampled_scores(
        query, classes, positive_ids, sampled_ids, class_bias=class_bias, sparse=sparse
    )
    mask = (
        accidental_hits(positive_ids, sampled_ids.to(positive_ids.device))
        if remove_accidental_hits
        else None
    )
    return {
        "positive_scores": pos,
        "negative_scores": neg,
        "positive_log_q": positive_log_q,
        "negative_log_q": sampled_log_q,
        "mask": mask,
    }


def sampled_softmax_loss(
    query: torch.Tensor,
    classes: Classes,
    positive_ids: torch.Tensor,
    draw: DrawLike,
    *,
    class_bias: torch.Tensor | None = None,
    temperature: float | torch.Tensor = 1.0,
    remove_accidental_hits: bool = True,
    subtract_log_q: bool = True,
    reduction: str = "mean",
    sparse: bool = False,
) -> torch.Tensor:
    """Sampled softmax from embeddings: TF's ``sampled_softmax_loss``, chapter 4.

    Steps (TF's ``_compute_sampled_logits``): gather the rows of the positive and sampled
    ids, or encode them (:func:`sampled_scores`); subtract the log expected count from
    *both* the positive logits (TF's ``true_expected_count``) and the sampled ones, after
    the temperature (``s/τ − log Q``); mask sampled ids equal to a row's positive id
    (accidental hits, on by default as in TF); softmax cross-entropy with the positives'
    columns first, each labelled ``1/T``; mean over rows.

    ``query``: (B, d); ``classes``: a class table (|V|, d) or an item encoder
    (ids → embeddings); ``positive_ids``: (B,) or (B, T) (TF's ``num_true = T``);
    ``draw``: a :class:`~candidate_sampling.sampling.samplers.CandidateDraw` made with
    ``positive_ids`` (so it carries ``positive_log_q``) or a tuple
    ``(sampled_ids (k,), sampled_log_q (k,), positive_log_q)``; ``class_bias``: (|V|,) or
    None. The sampled ids and log Q get no gradient. A positive id the proposal cannot
    draw (log Q = −inf, e.g. an excluded id) raises ``ValueError``.
    """
    inputs = _sampled_loss_inputs(
        query,
        classes,
        positive_ids,
        draw,
        class_bias,
        remove_accidental_hits,
        subtract_log_q,
        sparse,
    )
    # the (B, k) scores are this call's own: corrected and masked in place
    return _sampled_softmax(
        **inputs, temperature=temperature, reduction=reduction, owns_scores=True
    )


# --------------------------------------------------------------------------- NCE family


def nce_from_scores(
    positive_scores: torch.Tensor,
    negative_scores: torch.Tensor,
    *,
    positive_log_q: torch.Tensor | None = None,
    negative_log_q: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
    temperature: float | torch.Tensor = 1.0,
    reduction: str = "mean",
) -> torch.Tensor:
    """The logistic (NCE-family) loss from scores, in the stable softplus form (chapter 3).

    With ``o = s/τ − log Q`` (``log Q`` = log *expected count* ``log(kq)``; None = no
    correction) each row is the sum of its ``T + k`` binary cross-entropies, the ``T``
    positive columns labelled ``1/T`` and the sampled ones 0 (TF's ``nce_loss``, which
    uses ``sigmoid_cross_entropy_with_logits`` with those labels):

    ``loss = Σ_t [softplus(o_t) − o_t / T] + Σ_j (1 − mask_j) · softplus(o_j)``;

    for ``T = 1`` the first term is ``softplus(−o_t) = −log σ(o_t)``. Masked negatives get
    zero weight; their logits are replaced by 0 *before* the softplus, so ±inf never
    enters. Unlike the softmax, a constant added to every ``log Q`` changes this loss —
    which is why NCE needs ``log(kq)``, not ``log q``.

    Which TF method this is depends on the inputs: NCE (corrections given, no mask; F
    learns ``log P(y|x)``), sampled logistic (corrections and accidental hits masked; F
    learns log-odds), negative sampling (no corrections; F learns ``log(P/Q)``).
    Shapes as in :func:`sampled_softmax_from_scores`. Computed in at least float32.
    Reduction: mean over rows of the per-row sum.
    """
    return _nce(
        positive_scores,
        negative_scores,
        positive_log_q=positive_log_q,
        negative_log_q=negative_log_q,
        mask=mask,
        temperature=temperature,
        reduction=reduction,
        owns_scores=False,
    )


def _nce(
    positive_scores: torch.Tensor,
    negative_scores: torch.Tensor,
    *,
    positive_log_q: torch.Tensor | None,
    negative_log_q: torch.Tensor | None,
    mask: torch.Tensor | None,
    temperature: float | torch.Tensor,
    reduction: str,
    owns_scores: bool,
) -> torch.Tensor:
    """The body of :func:`nce_from_scores`; see :func:`_negative_logits`."""
    _check_scores_and_corrections(
        positive_scores, negative_scores, positive_log_q, negative_log_q, mask
    )
    dtype = common_float_dtype(positive_scores=positive_scores, negative_scores=negative_scores)
    pos = _positive_logits(positive_scores.to(dtype), positive_log_q, temperature)
    neg, owned = _negative_logits(negative_scores, dtype, negative_log_q, temperature, owns_scores)
    if mask is not None:  # a finite 0 first, so that no ±inf enters the softplus
        neg = neg.masked_fill_(mask, 0.0) if owned else neg.masked_fill(mask, 0.0)
    neg_terms = F.softplus(neg)
    if mask is not None:  # softplus keeps its input for backward, not its output
        neg_terms = neg_terms.masked_fill_(mask, 0.0)
    num_true = pos.shape[1]
    if num_true == 1:
        pos_terms = F.softplus(-pos[:, 0])
    else:
        pos_terms = (F.softplus(pos) - pos / num_true).sum(1)
    return reduce_loss(pos_terms + neg_terms.sum(-1), reduction)


def nce_loss(
    query: torch.Tensor,
    classes: Classes,
    positive_ids: torch.Tensor,
    draw: DrawLike,
    *,
    class_bias: torch.Tensor | None = None,
    temperature: float | torch.Tensor = 1.0,
    remove_accidental_hits: bool = False,
    subtract_log_q: bool = True,
    reduction: str = "mean",
    sparse: bool = False,
) -> torch.Tensor:
    """Noise-contrastive estimation from embeddings, TF's ``nce_loss`` (chapter 3).

    Scores as in :func:`sampled_scores`; logits ``s/τ − log(expected count)`` for the
    positive and the sampled ids; loss = :func:`nce_from_scores`. Defaults follow TF:
    accidental hits are *kept* (``remove_accidental_hits=False``); with ``True`` this is
    "sampled logistic" (:func:`sampled_logistic_loss`); with ``subtract_log_q=False`` it
    is negative sampling (:func:`negative_sampling_loss`). At the optimum F = s learns
    ``log P(y | x)`` (self-normalised). Arguments and shapes as in
    :func:`sampled_softmax_loss`; reduction: mean over rows of the per-row sum of the
    ``T + k`` logistic terms.
    """
    inputs = _sampled_loss_inputs(
        query,
        classes,
        positive_ids,
        draw,
        class_bias,
        remove_accidental_hits,
        subtract_log_q,
        sparse,
    )
    # the (B, k) scores are this call's own: corrected and masked in place
    return _nce(**inputs, temperature=temperature, reduction=reduction, owns_scores=True)


def negative_sampling_loss(
    query: torch.Tensor,
    classes: Classes,
    positive_ids: torch.Tensor,
    draw: DrawLike,
    *,
    class_bias: torch.Tensor | None = None,
    temperature: float | torch.Tensor = 1.0,
    remove_accidental_hits: bool = False,
    reduction: str = "mean",
    sparse: bool = False,
) -> torch.Tensor:
    """Negative sampling (word2vec): the NCE logistic loss with *no* correction (chapter 3).

    ``loss = softplus(−s_t/τ) + Σ_j softplus(s_j/τ)``; F learns ``log(P(y|x) / Q(y))``
    with Q the expected count ``k q(y)``: a PMI-like score, not a log probability.
    ``draw`` still supplies the sampled ids; its log Q is ignored. Shapes and reduction as
    in :func:`nce_loss`.
    """
    return nce_loss(
        query,
        classes,
        positive_ids,
        draw,
        class_bias=class_bias,
        temperature=temperature,
        remove_accidental_hits=remove_accidental_hits,
        subtract_log_q=False,
        reduction=reduction,
        sparse=sparse,
    )


def sampled_logistic_loss(
    query: torch.Tensor,
    classes: Classes,
    positive_ids: torch.Tensor,
    draw: DrawLike,
    *,
    class_bias: torch.Tensor | None = None,
    temperature: float | torch.Tensor = 1.0,
    reduction: str = "mean",
    sparse: bool = False,
) -> torch.Tensor:
    """Sampled logistic: NCE with accidental hits removed (negatives S − T), chapter 3.

    TF table: input F − log Q, logistic loss; F learns the log-odds
    ``log(P(y|x) / (1 − P(y|x)))``. Shapes and reduction as in :func:`nce_loss`.
    """
    return nce_loss(
        query,
        classes,
        positive_ids,
        draw,
        class_bias=class_bias,
        temperature=temperature,
        remove_accidental_hits=True,
        subtract_log_q=True,
        reduction=reduction,
        sparse=sparse,
    )


# --------------------------------------------------------------------------- modules


class _SampledLoss(_Loss):
    """Shared body of the sampled-loss modules: draw ``num_samples`` ids, apply ``_loss_fn``.

    Subclasses set ``_loss_fn`` (an embedding-level loss of this module) and
    ``_removes_hits_by_default`` (TensorFlow's default for that loss).
    """

    _loss_fn: staticmethod
    _removes_hits_by_default: bool
    _options = (
        "sampler",
        "num_samples",
        "unique",
        "temperature",
        "remove_accidental_hits",
        "subtract_log_q",
        "reduction",
        "sparse",
    )

    def __init__(
        self,
        sampler: CandidateSampler,
        num_samples: int,
        *,
        unique: bool = True,
        temperature: float = 1.0,
        remove_accidental_hits: bool | None = None,
        subtract_log_q: bool = True,
        reduction: str = "mean",
        sparse: bool = False,
    ) -> None:
        super().__init__(temperature=temperature, reduction=reduction)
        if not isinstance(sampler, CandidateSampler):
            raise ValueError(f"sampler must be a CandidateSampler, got {type(sampler).__name__}")
        check_int_range("num_samples", num_samples, 1)
        if unique and num_samples > sampler.num_allowed:
            raise ValueError(
                f"num_samples must be <= the number of drawable classes ({sampler.num_allowed}) "
                f"when unique=True, got {num_samples}"
            )
        if remove_accidental_hits is None:
            remove_accidental_hits = self._removes_hits_by_default
        self.sampler = sampler
        self.num_samples = num_samples
        self.unique = unique
        self.remove_accidental_hits = remove_accidental_hits
        self.subtract_log_q = subtract_log_q
        self.sparse = sparse
        self.last_draw: CandidateDraw | None = None

    def forward(
        self,
        query: torch.Tensor,
        classes: Classes,
        positive_ids: torch.Tensor,
        *,
        class_bias: torch.Tensor | None = None,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        self.last_draw = self.sampler.sample(
            self.num_samples, unique=self.unique, generator=generator, positive_ids=positive_ids
        )
        return self._loss_fn(
            query,
            classes,
            positive_ids,
            self.last_draw,
            class_bias=class_bias,
            temperature=self.temperature,
            remove_accidental_hits=self.remove_accidental_hits,
            subtract_log_q=self.subtract_log_q,
            reduction=self.reduction,
            sparse=self.sparse,
        )


class SampledSoftmaxLoss(_SampledLoss):
    """Draws ``num_samples`` candidates per call and applies :func:`sampled_softmax_loss`.

    ``SampledSoftmaxLoss(sampler, num_samples, *, unique=True, temperature=1.0,
    remove_accidental_hits=True, subtract_log_q=True, reduction="mean", sparse=False)``;
    ``forward(query (B, d), classes, positive_ids (B,) or (B, T), *, class_bias=None,
    generator=None)`` → loss, where ``classes`` is a class table (|V|, d) or an item
    encoder (e.g. the item tower of a two-tower model: sampled softmax over a tower in one
    call). The module owns no parameters; the last draw is kept in ``last_draw``. Ch. 4.
    """

    _loss_fn = staticmethod(sampled_softmax_loss)
    _removes_hits_by_default = True


class NCELoss(_SampledLoss):
    """Draws ``num_samples`` noise candidates per call and applies :func:`nce_loss`.

    Same arguments as :class:`SampledSoftmaxLoss`, with TF's ``nce_loss`` defaults: unique
    draws, accidental hits kept (``remove_accidental_hits=False``), log expected count
    subtracted. ``remove_accidental_hits=True`` gives sampled logistic;
    ``subtract_log_q=False`` gives negative sampling. Chapter 3.
    """

    _loss_fn = staticmethod(nce_loss)
    _removes_hits_by_default = False
