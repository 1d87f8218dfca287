"""Full softmax, importance sampling, sampled softmax, NCE, negative sampling, sampled logistic.

Chapters 1–4. Every loss here is a composition of the pipeline steps in
:mod:`candidate_sampling.losses.core` — score → correct (``s/τ − log Q``) → mask →
softmax or logistic → reduce — and comes in two layers:

* ``*_from_scores`` functions take the scores already computed: positives ``(B,)`` and
  negatives ``(B, k)``, their log expected counts and a removal mask;
* embedding-level functions (``sampled_softmax_loss``, ``nce_loss``, ...) mirror
  TensorFlow's ``_compute_sampled_logits``: one set of ``k`` sampled ids shared by the
  batch, only the needed rows of the class table gathered, then the ``*_from_scores`` step.

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
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from candidate_sampling._validate import (
    check_finite,
    check_ids,
    check_int_range,
    check_same,
    check_tensor,
)
from candidate_sampling.losses.core import (
    accidental_hits,
    correct_logits,
    mask_logits,
    reduce_loss,
    softmax_loss_positive_first,
)
from candidate_sampling.samplers import CandidateDraw, CandidateSampler

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

DrawLike = CandidateDraw | Sequence[torch.Tensor]


def _upcast(t: torch.Tensor) -> torch.Tensor:
    """float16 / bfloat16 → float32 (losses are computed in at least float32)."""
    return t.float() if t.dtype in (torch.float16, torch.bfloat16) else t


# --------------------------------------------------------------------------- full softmax


def softmax_cross_entropy(
    logits: torch.Tensor, targets: torch.Tensor, reduction: str = "mean"
) -> torch.Tensor:
    """The reference: full softmax cross-entropy over the whole catalogue (chapter 1).

    ``loss_i = logsumexp_y(logits[i, y]) − logits[i, targets[i]] = −log p(t_i | x_i)``.
    ``logits``: (B, |V|) floating; ``targets``: (B,) int ids in ``[0, |V|)``. Computed in at
    least float32. Reduction ``"mean"`` over rows (default), ``"sum"`` or ``"none"`` → (B,).
    """
    check_tensor("logits", logits, ("B", "|V|"), floating=True)
    check_tensor("targets", targets, ("B",), floating=False)
    check_same("batch size B", logits=logits.shape[0], targets=targets.shape[0])
    check_ids("targets", targets, logits.shape[1])
    work = _upcast(logits)
    per_row = torch.logsumexp(work, dim=-1) - work.gather(1, targets[:, None]).squeeze(1)
    return reduce_loss(per_row, reduction)


# --------------------------------------------------------------------------- importance sampling


def _check_is_inputs(
    scores: torch.Tensor, log_q: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    if not isinstance(scores, torch.Tensor) or not scores.is_floating_point():
        raise ValueError("scores must be a floating-point torch.Tensor of shape (..., m)")
    if scores.dim() == 0 or scores.shape[-1] == 0:
        raise ValueError(f"scores must have shape (..., m) with m >= 1, got {tuple(scores.shape)}")
    if not isinstance(log_q, torch.Tensor) or not log_q.is_floating_point():
        raise ValueError("log_q must be a floating-point torch.Tensor broadcastable to scores")
    try:
        torch.broadcast_shapes(scores.shape, log_q.shape)
    except RuntimeError as err:
        raise ValueError(
            f"log_q must be broadcastable to scores {tuple(scores.shape)}, got {tuple(log_q.shape)}"
        ) from err
    check_finite("log_q", log_q)
    return _upcast(scores), _upcast(log_q.detach())


def importance_sampled_log_partition(scores: torch.Tensor, log_q: torch.Tensor) -> torch.Tensor:
    """log Ẑ, the importance-sampling estimate of ``log Z(x) = log Σ_y e^{s(x, y)}`` (chapter 2).

    With ``m`` i.i.d. draws ``y_i ~ q``: ``Ẑ = (1/m) Σ_i e^{s_i} / q(y_i)``, so
    ``log Ẑ = logsumexp_i(s_i − log q_i) − log m``. ``Ẑ`` is unbiased for ``Z``; ``log Ẑ`` is
    biased low (Jensen) by about ``Var_q(e^s / q) / (2 Z² m) = χ²(p‖q) / (2m)`` and consistent as ``m → ∞``. With
    ``q = p`` (the model itself) every term equals ``Z`` and the estimate is exact.

    ``scores``: (..., m) the scores of the sampled classes; ``log_q``: broadcastable to
    ``scores``, the per-draw log probability (not the expected count: ``log(m q)`` would
    give ``logsumexp(s − log(m q))`` = log Ẑ directly). Returns (...); no reduction.
    """
    scores, log_q = _check_is_inputs(scores, log_q)
    return torch.logsumexp(scores - log_q, dim=-1) - math.log(scores.shape[-1])


def importance_weights(scores: torch.Tensor, log_q: torch.Tensor) -> torch.Tensor:
    """Self-normalised importance weights ``w_i = softmax_i(s_i − log q_i)`` (chapter 2).

    The negative term of the softmax gradient, ``E_{y~p}[∇s(x, y)]``, is estimated by
    ``Σ_i w_i ∇s(x, y_i)`` with ``y_i ~ q``. The weights sum to 1 without knowing ``Z``;
    the price is a ratio estimator: biased (bias O(1/m)) but consistent. A constant added
    to ``log_q`` cancels, so per-draw probabilities and expected counts give the same
    weights. ``scores``: (..., m); ``log_q`` broadcastable → (..., m), float32 or wider.
    """
    scores, log_q = _check_is_inputs(scores, log_q)
    return torch.softmax(scores - log_q, dim=-1)


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
    check_tensor("positive_scores", positive_scores, ("B",), floating=True)
    check_tensor("negative_scores", negative_scores, ("B", "k"), floating=True)
    check_same(
        "batch size B",
        positive_scores=positive_scores.shape[0],
        negative_scores=negative_scores.shape[0],
    )
    b, k = negative_scores.shape
    if positive_log_q is not None:
        check_tensor("positive_log_q", positive_log_q, (b,), floating=True)
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


# --------------------------------------------------------------------------- sampled softmax


def sampled_softmax_from_scores(
    positive_scores: torch.Tensor,
    negative_scores: torch.Tensor,
    positive_log_q: torch.Tensor | None = None,
    negative_log_q: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
    temperature: float = 1.0,
    reduction: str = "mean",
) -> torch.Tensor:
    """Sampled softmax from scores: softmax over ``{t} ∪ S`` with the logQ correction (chapter 4).

    ``o_t = s_t/τ − log Q_t``, ``o_j = s_j/τ − log Q_j`` and
    ``loss = logsumexp(o_t, o_1..o_k) − o_t``, where masked negatives (accidental hits)
    get the finite :func:`~candidate_sampling.losses.core.mask_value` (zero weight, zero
    gradient). ``log Q`` is the log expected count; ``None`` means no correction. A
    constant added to every ``log Q`` leaves the loss unchanged. A row whose negatives are
    all masked has loss exactly 0. TF table: positives {t}, negatives S − T, input F − log Q,
    softmax; F learns ``log P(y | x) + K(x)``.

    ``positive_scores``: (B,); ``negative_scores``: (B, k); ``positive_log_q``: (B,);
    ``negative_log_q``: (k,) shared by the batch or (B, k); ``mask``: (B, k) bool, True =
    remove. float16 / bfloat16 inputs are computed in float32. Reduction: mean over rows.
    """
    _check_scores_and_corrections(
        positive_scores, negative_scores, positive_log_q, negative_log_q, mask
    )
    pos = correct_logits(_upcast(positive_scores), positive_log_q, temperature)
    neg = correct_logits(_upcast(negative_scores), negative_log_q, temperature)
    neg = mask_logits(neg, mask)
    logits = torch.cat([pos[:, None], neg], dim=1)
    return reduce_loss(softmax_loss_positive_first(logits), reduction)


def _unpack_draw(
    draw: DrawLike, positive_ids: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    if isinstance(draw, CandidateDraw):
        return draw.ids, draw.log_expected_count, draw.log_expected_count_of(positive_ids)
    if isinstance(draw, (tuple, list)) and len(draw) == 3:
        sampled_ids, sampled_log_q, positive_log_q = draw
        check_tensor("sampled_ids", sampled_ids, ("k",), floating=False)
        check_tensor("sampled_log_q", sampled_log_q, (sampled_ids.shape[0],), floating=True)
        check_tensor("positive_log_q", positive_log_q, (positive_ids.shape[0],), floating=True)
        return sampled_ids, sampled_log_q, positive_log_q
    raise ValueError(
        "draw must be a CandidateDraw or a tuple (sampled_ids (k,), sampled_log_q (k,), "
        f"positive_log_q (B,)), got {type(draw).__name__}"
    )


def sampled_scores(
    query: torch.Tensor,
    class_weights: torch.Tensor,
    class_bias: torch.Tensor | None,
    positive_ids: torch.Tensor,
    sampled_ids: torch.Tensor,
    sparse: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Scores of the true and the shared sampled classes, gathering only their rows (chapter 4).

    ``s(x, y) = query · class_weights[y] + class_bias[y]``. The rows of ``positive_ids`` and
    ``sampled_ids`` are gathered in one ``F.embedding`` call (``sparse=True`` gives a sparse
    gradient for ``class_weights``, for ``torch.optim.SGD`` / ``SparseAdam``); nothing of
    size |V| × d is touched. ``query``: (B, d); ``class_weights``: (|V|, d); ``class_bias``:
    (|V|,) or None; ``positive_ids``: (B,); ``sampled_ids``: (k,).
    Returns ``positive_scores`` (B,) and ``negative_scores`` (B, k).
    """
    check_tensor("query", query, ("B", "d"), floating=True)
    check_tensor("class_weights", class_weights, ("|V|", "d"), floating=True)
    check_same("embedding dimension d", query=query.shape[1], class_weights=class_weights.shape[1])
    num_classes = class_weights.shape[0]
    check_tensor("positive_ids", positive_ids, ("B",), floating=False)
    check_same("batch size B", query=query.shape[0], positive_ids=positive_ids.shape[0])
    check_ids("positive_ids", positive_ids, num_classes)
    check_tensor("sampled_ids", sampled_ids, ("k",), floating=False)
    check_ids("sampled_ids", sampled_ids, num_classes)
    if class_bias is not None:
        check_tensor("class_bias", class_bias, (num_classes,), floating=True)
    b = query.shape[0]
    all_ids = torch.cat([positive_ids, sampled_ids.to(positive_ids.device)]).long()
    rows = F.embedding(all_ids, class_weights, sparse=sparse)
    pos = (query * rows[:b]).sum(-1)
    neg = query @ rows[b:].T
    if class_bias is not None:
        bias = class_bias[all_ids]
        pos = pos + bias[:b]
        neg = neg + bias[b:]
    return pos, neg


def _sampled_loss_inputs(
    query: torch.Tensor,
    class_weights: torch.Tensor,
    class_bias: torch.Tensor | None,
    positive_ids: torch.Tensor,
    draw: DrawLike,
    remove_accidental_hits: bool,
    subtract_log_q: bool,
    sparse: bool,
) -> tuple[torch.Tensor, ...]:
    """The shared front of the embedding-level losses (TF's ``_compute_sampled_logits``).

    Returns ``(positive_scores, negative_scores, positive_log_q, negative_log_q, mask)`` in
    the order the ``*_from_scores`` functions take them; corrections are ``None`` when
    ``subtract_log_q`` is off, the mask is ``None`` when hits are kept.
    """
    check_tensor("positive_ids", positive_ids, ("B",), floating=False)
    sampled_ids, sampled_log_q, positive_log_q = _unpack_draw(draw, positive_ids)
    pos, neg = sampled_scores(query, class_weights, class_bias, positive_ids, sampled_ids, sparse)
    mask = (
        accidental_hits(positive_ids, sampled_ids.to(positive_ids.device))
        if remove_accidental_hits
        else None
    )
    if not subtract_log_q:
        positive_log_q = sampled_log_q = None
    return pos, neg, positive_log_q, sampled_log_q, mask


def sampled_softmax_loss(
    query: torch.Tensor,
    class_weights: torch.Tensor,
    class_bias: torch.Tensor | None,
    positive_ids: torch.Tensor,
    draw: DrawLike,
    temperature: float = 1.0,
    remove_accidental_hits: bool = True,
    subtract_log_q: bool = True,
    reduction: str = "mean",
    sparse: bool = False,
) -> torch.Tensor:
    """Sampled softmax from embeddings: TF's ``sampled_softmax_loss``, chapter 4.

    Steps (TF's ``_compute_sampled_logits``): gather the rows of the true and sampled ids
    (:func:`sampled_scores`); subtract the log expected count from *both* the true logit
    (TF's ``true_expected_count``) and the sampled ones, after the temperature
    (``s/τ − log Q``); mask sampled ids equal to the row's true id (accidental hits, on by
    default as in TF); softmax cross-entropy with the true class first; mean over rows.

    ``query``: (B, d); ``class_weights``: (|V|, d); ``class_bias``: (|V|,) or None;
    ``positive_ids``: (B,); ``draw``: a :class:`~candidate_sampling.samplers.CandidateDraw`
    or a tuple ``(sampled_ids (k,), sampled_log_q (k,), positive_log_q (B,))`` of ids and
    log expected counts. The sampled ids and log Q get no gradient. A true id the proposal
    cannot draw (log Q = −inf, e.g. an excluded id) raises ``ValueError``.
    Only ``num_true = 1`` is supported (one positive per row).
    """
    inputs = _sampled_loss_inputs(
        query,
        class_weights,
        class_bias,
        positive_ids,
        draw,
        remove_accidental_hits,
        subtract_log_q,
        sparse,
    )
    return sampled_softmax_from_scores(*inputs, temperature, reduction)


# --------------------------------------------------------------------------- NCE family


def nce_from_scores(
    positive_scores: torch.Tensor,
    negative_scores: torch.Tensor,
    positive_log_q: torch.Tensor | None = None,
    negative_log_q: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
    temperature: float = 1.0,
    reduction: str = "mean",
) -> torch.Tensor:
    """The logistic (NCE-family) loss from scores, in the stable softplus form (chapter 3).

    With ``o = s/τ − log Q`` (``log Q`` = log *expected count* ``log(kq)``; None = no
    correction) each row is the sum of its ``1 + k`` binary cross-entropies:

    ``loss = softplus(−o_t) + Σ_j (1 − mask_j) · softplus(o_j)``,

    i.e. ``−log σ(o_t) − Σ_j log(1 − σ(o_j))``: the true class labelled 1, the sampled ones
    0. Masked negatives get zero weight; their logits are replaced by 0 *before* the
    softplus, so ±inf never enters (no NaN in values or gradients). Unlike the softmax, a
    constant added to every ``log Q`` changes this loss — which is why NCE needs
    ``log(kq)``, not ``log q``.

    Which TF method this is depends on the inputs: NCE (corrections given, no mask; F
    learns ``log P(y|x)``), sampled logistic (corrections and accidental hits masked; F
    learns log-odds), negative sampling (no corrections; F learns ``log(P/Q)``).
    Shapes as in :func:`sampled_softmax_from_scores`. Computed in at least float32.
    Reduction: mean over rows of the per-row sum.
    """
    _check_scores_and_corrections(
        positive_scores, negative_scores, positive_log_q, negative_log_q, mask
    )
    pos = correct_logits(_upcast(positive_scores), positive_log_q, temperature)
    neg = correct_logits(_upcast(negative_scores), negative_log_q, temperature)
    neg_terms = F.softplus(neg if mask is None else torch.where(mask, torch.zeros_like(neg), neg))
    if mask is not None:
        neg_terms = neg_terms.masked_fill(mask, 0.0)
    per_row = F.softplus(-pos) + neg_terms.sum(-1)
    return reduce_loss(per_row, reduction)


def nce_loss(
    query: torch.Tensor,
    class_weights: torch.Tensor,
    class_bias: torch.Tensor | None,
    positive_ids: torch.Tensor,
    draw: DrawLike,
    temperature: float = 1.0,
    remove_accidental_hits: bool = False,
    subtract_log_q: bool = True,
    reduction: str = "mean",
    sparse: bool = False,
) -> torch.Tensor:
    """Noise-contrastive estimation from embeddings, TF's ``nce_loss`` (chapter 3).

    Scores as in :func:`sampled_scores`; logits ``s/τ − log(expected count)`` for the true
    and the sampled ids; loss = :func:`nce_from_scores`. Defaults follow TF: accidental hits
    are *kept* (``remove_accidental_hits=False``); with ``True`` this is "sampled logistic"
    (:func:`sampled_logistic_loss`); with ``subtract_log_q=False`` it is negative sampling
    (:func:`negative_sampling_loss`). At the optimum F = s learns ``log P(y | x)`` (self-
    normalised). Arguments and shapes as in :func:`sampled_softmax_loss`; reduction: mean
    over rows of the per-row sum of the ``1 + k`` logistic terms.
    """
    inputs = _sampled_loss_inputs(
        query,
        class_weights,
        class_bias,
        positive_ids,
        draw,
        remove_accidental_hits,
        subtract_log_q,
        sparse,
    )
    return nce_from_scores(*inputs, temperature, reduction)


def negative_sampling_loss(
    query: torch.Tensor,
    class_weights: torch.Tensor,
    class_bias: torch.Tensor | None,
    positive_ids: torch.Tensor,
    draw: DrawLike,
    temperature: float = 1.0,
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
        class_weights,
        class_bias,
        positive_ids,
        draw,
        temperature,
        remove_accidental_hits,
        False,
        reduction,
        sparse,
    )


def sampled_logistic_loss(
    query: torch.Tensor,
    class_weights: torch.Tensor,
    class_bias: torch.Tensor | None,
    positive_ids: torch.Tensor,
    draw: DrawLike,
    temperature: float = 1.0,
    reduction: str = "mean",
    sparse: bool = False,
) -> torch.Tensor:
    """Sampled logistic: NCE with accidental hits removed (negatives S − T), chapter 3.

    TF table: input F − log Q, logistic loss; F learns the log-odds
    ``log(P(y|x) / (1 − P(y|x)))``. Shapes and reduction as in :func:`nce_loss`.
    """
    return nce_loss(
        query,
        class_weights,
        class_bias,
        positive_ids,
        draw,
        temperature,
        True,
        True,
        reduction,
        sparse,
    )


# --------------------------------------------------------------------------- modules


class _SampledLossModule(nn.Module):
    """Shared body of the sampled-loss modules: draw ``num_samples`` ids, apply ``_loss_fn``.

    Subclasses set ``_loss_fn`` (an embedding-level loss of this module) and
    ``_removes_hits_by_default`` (TensorFlow's default for that loss).
    """

    _loss_fn: staticmethod
    _removes_hits_by_default: bool

    def __init__(
        self,
        sampler: CandidateSampler,
        num_samples: int,
        unique: bool = True,
        temperature: float = 1.0,
        remove_accidental_hits: bool | None = None,
        subtract_log_q: bool = True,
        reduction: str = "mean",
        sparse: bool = False,
    ) -> None:
        super().__init__()
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
        self.temperature = temperature
        self.remove_accidental_hits = remove_accidental_hits
        self.subtract_log_q = subtract_log_q
        self.reduction = reduction
        self.sparse = sparse
        self.last_draw: CandidateDraw | None = None

    def forward(
        self,
        query: torch.Tensor,
        class_weights: torch.Tensor,
        class_bias: torch.Tensor | None,
        positive_ids: torch.Tensor,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        self.last_draw = self.sampler.sample(
            self.num_samples, unique=self.unique, generator=generator
        )
        return self._loss_fn(
            query,
            class_weights,
            class_bias,
            positive_ids,
            self.last_draw,
            self.temperature,
            self.remove_accidental_hits,
            self.subtract_log_q,
            self.reduction,
            self.sparse,
        )

    def extra_repr(self) -> str:
        return (
            f"sampler={self.sampler!r}, num_samples={self.num_samples}, unique={self.unique}, "
            f"temperature={self.temperature}, "
            f"remove_accidental_hits={self.remove_accidental_hits}, "
            f"subtract_log_q={self.subtract_log_q}, reduction={self.reduction!r}"
        )


class SampledSoftmaxLoss(_SampledLossModule):
    """Draws ``num_samples`` candidates per call and applies :func:`sampled_softmax_loss`.

    ``SampledSoftmaxLoss(sampler, num_samples, unique=True, temperature=1.0,
    remove_accidental_hits=True, subtract_log_q=True, reduction="mean", sparse=False)``;
    ``forward(query (B, d), class_weights (|V|, d), class_bias (|V|,) or None,
    positive_ids (B,), generator=None)`` → loss. The module owns no parameters (pass the
    class table, e.g. a tied embedding); the last draw is kept in ``last_draw``. Chapter 4.
    """

    _loss_fn = staticmethod(sampled_softmax_loss)
    _removes_hits_by_default = True


class NCELoss(_SampledLossModule):
    """Draws ``num_samples`` noise candidates per call and applies :func:`nce_loss`.

    Same arguments as :class:`SampledSoftmaxLoss`, with TF's ``nce_loss`` defaults: unique
    draws, accidental hits kept (``remove_accidental_hits=False``), log expected count
    subtracted. ``remove_accidental_hits=True`` gives sampled logistic;
    ``subtract_log_q=False`` gives negative sampling. Chapter 3.
    """

    _loss_fn = staticmethod(nce_loss)
    _removes_hits_by_default = False
