"""The logistic (NCE-family) losses: NCE, negative sampling, sampled logistic (chapter 3).

Same inputs as the sampled softmax (:mod:`candidate_sampling.losses.sampled`): each row's
positive column(s) and shared candidate columns, as two
:class:`~candidate_sampling.CandidateSet`\\ s; same steps 1–4 (score, temperature, log Q,
masks); the criterion is the binary logistic term
(:func:`~candidate_sampling.losses.core.logistic_terms`) instead of the softmax, summed
over a row's ``T + C`` terms, as TF's ``nce_loss``.

How they map onto TensorFlow's "Candidate Sampling Algorithms Reference" table (F = the
model's score, Q = the expected count of y in the sampled set, T = the true class,
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

``log Q`` is the log *expected count* (``log(kq)`` with replacement), which matters here:
unlike the softmax, a constant added to every log Q changes a logistic loss.
"""

from __future__ import annotations

import torch

from candidate_sampling.candidates import CandidateSet
from candidate_sampling.losses.core import (
    Temperature,
    logistic_terms,
    reduce_loss,
)
from candidate_sampling._validate import check_optional_bool
from candidate_sampling.losses.sampled import _candidate_logits, _SampledLoss, scores_to_logits

__all__ = [
    "nce_from_scores",
    "nce_loss",
    "negative_sampling_loss",
    "sampled_logistic_loss",
    "NCELoss",
]


def _logistic_rows(pos: torch.Tensor, neg: torch.Tensor) -> torch.Tensor:
    """Step 5: per row, ``Σ_t [softplus(o_t) − o_t/T] + Σ_j softplus(o_j)``.

    A removed negative holds the finite mask value ``finfo.min / 2`` (step 4), where
    ``softplus`` is exactly 0 and its gradient ``σ`` too: it drops out with no extra pass.
    """
    neg_terms = logistic_terms(neg, 0.0)
    num_true = pos.shape[1]
    pos_terms = logistic_terms(pos, 1.0 if num_true == 1 else 1.0 / num_true).sum(1)
    return pos_terms + neg_terms.sum(1)


def nce_from_scores(
    positive_scores: torch.Tensor,
    negative_scores: torch.Tensor,
    *,
    positive_log_q: torch.Tensor | None = None,
    negative_log_q: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
    temperature: float | Temperature = 1.0,
    sample_weight: torch.Tensor | None = None,
    reduction: str = "mean",
) -> torch.Tensor:
    """The logistic loss from scores, in the stable softplus form (chapter 3).

    With ``o = s/τ − log Q`` each row is the sum of its ``T + k`` binary cross-entropies,
    the ``T`` positive columns labelled ``1/T`` and the sampled ones 0 (TF's ``nce_loss``):
    ``loss = Σ_t [softplus(o_t) − o_t / T] + Σ_j (1 − mask_j) · softplus(o_j)``. Masked
    negatives (``mask`` True = remove) get zero weight. Which TF method this is depends on
    the inputs: NCE (corrections, no mask), sampled logistic (corrections, hits masked),
    negative sampling (no corrections). Shapes as in
    :func:`~candidate_sampling.losses.sampled.sampled_softmax_from_scores`. Reduction:
    mean over rows of the per-row sum, weighted by ``sample_weight`` (B,).
    Defaults: ``temperature=1.0``, ``reduction="mean"``.
    """
    pos, neg = scores_to_logits(
        positive_scores,
        negative_scores,
        positive_log_q=positive_log_q,
        negative_log_q=negative_log_q,
        mask=mask,
        temperature=temperature,
    )
    return reduce_loss(_logistic_rows(pos, neg), reduction, sample_weight=sample_weight)


def nce_loss(
    query: torch.Tensor,
    positives: CandidateSet,
    candidates: CandidateSet,
    *,
    temperature: float | Temperature = 1.0,
    remove_accidental_hits: bool | None = None,
    repeated_hits: str = "mask_all",
    sample_weight: torch.Tensor | None = None,
    reduction: str = "mean",
) -> torch.Tensor:
    """Noise-contrastive estimation, TF's ``nce_loss`` over CandidateSets (chapter 3).

    Logits ``(u·v + b)/τ − log Q`` of the positive(s) and the candidates (steps 1–4 of
    :func:`~candidate_sampling.losses.sampled.candidate_logits`), then the per-row sum of
    logistic terms. Accidental hits are *kept* by default (``None``, the logistic family's
    rule of :func:`~candidate_sampling.losses.core.hits_to_remove`: the loss sums one term
    per column, each right when its log Q is the column's expected count; TF's
    ``nce_loss`` default too); with ``remove_accidental_hits=True`` it is
    :func:`sampled_logistic_loss`. With sets built without log Q (``correct=False``) it
    is :func:`negative_sampling_loss`. At the optimum F learns ``log P(y | x)``. Shapes
    as in :func:`~candidate_sampling.losses.sampled.sampled_softmax_loss`.
    ``repeated_hits`` (default ``"mask_all"``: every copy of a removed positive id) matters
    only when hits are removed; ``"tensorflow"`` removes only the last copy, as TF's
    ``compute_accidental_hits`` (:func:`~candidate_sampling.losses.core.accidental_hits`).
    Defaults: ``temperature=1.0``, ``reduction="mean"``.
    """
    remove_accidental_hits = check_optional_bool("remove_accidental_hits", remove_accidental_hits)
    pos, neg = _candidate_logits(
        query,
        positives,
        candidates,
        temperature,
        remove_accidental_hits,
        repeated_hits,
        logistic=True,
    )
    return reduce_loss(_logistic_rows(pos, neg), reduction, sample_weight=sample_weight)


def _without_log_q(s: CandidateSet) -> CandidateSet:
    if not isinstance(s, CandidateSet):
        return s  # the loss reports it
    return CandidateSet._unchecked(s.embeddings, s.ids, None, s.mask, s.bias, s.source)


def negative_sampling_loss(
    query: torch.Tensor,
    positives: CandidateSet,
    candidates: CandidateSet,
    *,
    temperature: float | Temperature = 1.0,
    remove_accidental_hits: bool | None = None,
    repeated_hits: str = "mask_all",
    sample_weight: torch.Tensor | None = None,
    reduction: str = "mean",
) -> torch.Tensor:
    """Negative sampling (word2vec): the NCE loss with the sets' log Q *ignored* (chapter 3);
    accidental hits kept by default, as :func:`nce_loss`.

    ``loss = softplus(−s_t/τ) + Σ_j softplus(s_j/τ)``; F learns ``log(P(y|x) / Q(y))``.
    Defaults: ``temperature=1.0``, ``repeated_hits="mask_all"``, ``reduction="mean"``.
    ``repeated_hits="tensorflow"`` removes only the last copy of a repeated id, as
    TensorFlow's ``compute_accidental_hits``.
    """
    return nce_loss(
        query,
        _without_log_q(positives),
        _without_log_q(candidates),
        temperature=temperature,
        remove_accidental_hits=remove_accidental_hits,
        repeated_hits=repeated_hits,
        sample_weight=sample_weight,
        reduction=reduction,
    )


def sampled_logistic_loss(
    query: torch.Tensor,
    positives: CandidateSet,
    candidates: CandidateSet,
    *,
    temperature: float | Temperature = 1.0,
    repeated_hits: str = "mask_all",
    sample_weight: torch.Tensor | None = None,
    reduction: str = "mean",
) -> torch.Tensor:
    """Sampled logistic: NCE with accidental hits removed (negatives S − T), chapter 3.

    F learns the log-odds ``log(P(y|x) / (1 − P(y|x)))``.
    Defaults: ``temperature=1.0``, ``repeated_hits="mask_all"``, ``reduction="mean"``.
    ``repeated_hits="tensorflow"`` removes only the last copy of a repeated id, as
    TensorFlow's ``compute_accidental_hits``.
    """
    return nce_loss(
        query,
        positives,
        candidates,
        temperature=temperature,
        remove_accidental_hits=True,
        repeated_hits=repeated_hits,
        sample_weight=sample_weight,
        reduction=reduction,
    )


class NCELoss(_SampledLoss):
    """Draws ``num_samples`` noise candidates per call and applies :func:`nce_loss`.

    Same arguments as :class:`~candidate_sampling.losses.sampled.SampledSoftmaxLoss`, with
    TF's ``nce_loss`` defaults: unique draws, accidental hits kept (the logistic family's
    rule for every source), log expected count subtracted (``subtract_log_q=False`` gives
    negative sampling). Chapter 3.
    Defaults: ``unique=True``, ``temperature=1.0``, ``repeated_hits="mask_all"``,
    ``subtract_log_q=True``, ``reduction="mean"``.
    """

    _loss_fn = staticmethod(nce_loss)
