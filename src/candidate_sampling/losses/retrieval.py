"""The in-batch softmax over one candidate matrix, for two-tower retrieval (chapter 5).

One contract, TF Recommenders' ``Retrieval.call``: a batch of ``B`` queries is scored
against ``C ≥ B`` candidate rows, and **row i's positive is candidate i**. Everything else
is more candidate rows:

* the plain in-batch softmax: ``candidates`` = the batch's ``B`` positives;
* mixed negatives (Yang et al. 2020): ``candidates = cat([positives, extras])`` with ``B'``
  extra items drawn by a sampler and shared by the batch;
* a cross-batch memory or queue, or the positives gathered from other devices: more rows
  after the first ``B``.

The loss composes the pipeline steps of :mod:`candidate_sampling.losses.core`:

1. scores ``s(x_i, y_j) = u_i · v_j`` (computed in at least float32);
2. correction ``o_ij = s_ij / τ − log Q(y_j)`` (:func:`correct_logits`; the correction is
   *not* divided by τ);
3. masks (:func:`accidental_hits` with ``positive_columns = arange(B)``): a column ``j ≠ i``
   whose id equals row ``i``'s positive id is an accidental hit (a duplicate positive in
   the batch, or an extra that happens to be the positive); it is removed;
4. :func:`positive_column_cross_entropy` with row ``i``'s positive in column ``i``;
5. :func:`reduce_loss`, mean over rows by default (TF Recommenders sums).

``log_q`` is the log *expected count* of each candidate column among the candidates and is
corrected on **every** column, the row's own positive included (Yi et al. 2019): the
positive's column is one of the draws. For mixed negatives use one expression for all
columns, e.g. :func:`~candidate_sampling.sampling.frequency.mixed_log_q`'s expected count
``B·q(y) + B'·r(y)``.

:class:`RetrievalLoss` is the module a training loop uses (TFRS's ``Retrieval`` task):
it holds the temperature, the source of log Q, an optional extra-negative sampler and the
hit removal, so one call per batch does the rest.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from candidate_sampling._validate import (
    check_finite,
    check_int_range,
    check_probabilities,
    check_same,
    check_tensor,
    common_float_dtype,
)
from candidate_sampling.sampling.frequency import StreamingFrequencyEstimator, inclusion_probability
from candidate_sampling.losses.core import (
    _Loss,
    accidental_hits,
    correct_logits,
    mask_logits,
    positive_column_cross_entropy,
    reduce_loss,
)
from candidate_sampling.sampling.samplers import CandidateSampler

__all__ = ["RetrievalLoss", "in_batch_logits", "in_batch_softmax_loss"]


def in_batch_logits(
    query: torch.Tensor,
    candidates: torch.Tensor,
    *,
    positive_ids: torch.Tensor | None = None,
    candidate_ids: torch.Tensor | None = None,
    log_q: torch.Tensor | None = None,
    temperature: float | torch.Tensor = 1.0,
    remove_accidental_hits: bool | None = None,
) -> torch.Tensor:
    """Corrected, masked logits ``(B, C)`` of the in-batch layout; row i's positive is column i.

    Arguments as in :func:`in_batch_softmax_loss`. Logit of candidate ``j`` for row ``i``:
    ``u_i·v_j / τ − log Q_j``; masked columns hold the finite
    :func:`~candidate_sampling.losses.core.mask_value`.
    """
    check_tensor("query", query, ("B", "d"), floating=True)
    check_tensor("candidates", candidates, ("C", "d"), floating=True)
    check_same("embedding size d", query=query.shape[1], candidates=candidates.shape[1])
    batch, num_cand = query.shape[0], candidates.shape[0]
    if num_cand < batch:
        raise ValueError(
            f"candidates must have at least B = {batch} rows (row i's positive is candidate "
            f"i), got {num_cand}"
        )
    if candidate_ids is not None:
        check_tensor("candidate_ids", candidate_ids, (num_cand,), floating=False)
    if positive_ids is not None:
        check_tensor("positive_ids", positive_ids, (batch,), floating=False)
    if log_q is not None:
        check_tensor("log_q", log_q, (num_cand,), floating=True)
        check_finite("log_q", log_q)
    if remove_accidental_hits is None:
        remove_accidental_hits = candidate_ids is not None
    dtype = common_float_dtype(query=query, candidates=candidates)
    scores = query.to(dtype) @ candidates.to(dtype).T  # (B, C), a fresh tensor of our own
    # corrected and masked in place: the (B, C) matrix exists once, not once per step
    logits = correct_logits(
        scores, None if log_q is None else log_q[None, :], temperature=temperature, inplace=True
    )
    if remove_accidental_hits:
        if candidate_ids is None:
            raise ValueError(
                "candidate_ids are needed to remove accidental hits (remove_accidental_hits=True)"
            )
        if positive_ids is None:
            positive_ids = candidate_ids[:batch]
        columns = torch.arange(batch, device=positive_ids.device)
        hits = accidental_hits(positive_ids, candidate_ids, positive_columns=columns)
        logits = mask_logits(logits, hits.to(logits.device), inplace=True)
    return logits


def in_batch_softmax_loss(
    query: torch.Tensor,
    candidates: torch.Tensor,
    *,
    positive_ids: torch.Tensor | None = None,
    candidate_ids: torch.Tensor | None = None,
    log_q: torch.Tensor | None = None,
    temperature: float | torch.Tensor = 1.0,
    remove_accidental_hits: bool | None = None,
    reduction: str = "mean",
) -> torch.Tensor:
    """In-batch softmax over one candidate matrix (Yi et al. 2019; TFRS ``Retrieval.call``).

    ``ℓ_i = −o_ii + log Σ_{j unmasked} exp(o_ij)``, ``o_ij = u_i·v_j / τ − log Q(y_j)``.

    ``query``: (B, d); ``candidates``: (C, d) with ``C ≥ B``, row ``i``'s positive in row
    ``i`` — the batch's positives, then any extra candidates (mixed negatives, a queue,
    other devices' positives); ``candidate_ids``: (C,) their ids; ``positive_ids``: (B,),
    defaults to ``candidate_ids[:B]``; ``log_q``: (C,) log expected count of each column
    (``None``: no correction, TFRS's tutorial); ``remove_accidental_hits``: mask every
    column ``j ≠ i`` whose id is row ``i``'s positive id — ``None`` (default) means "when
    ``candidate_ids`` are given" (TFRS's default is False). Half inputs are computed in
    float32; mixed float dtypes are promoted. Reduction over rows: ``"mean"`` (default),
    ``"sum"`` (TFRS) or ``"none"``. Chapter 5.
    """
    logits = in_batch_logits(
        query,
        candidates,
        positive_ids=positive_ids,
        candidate_ids=candidate_ids,
        log_q=log_q,
        temperature=temperature,
        remove_accidental_hits=remove_accidental_hits,
    )
    columns = torch.arange(query.shape[0], device=logits.device)
    return reduce_loss(positive_column_cross_entropy(logits, columns), reduction)


class RetrievalLoss(_Loss):
    """The retrieval task as one module: log Q, extra negatives, hit removal, reduction.

    TF Recommenders' ``Retrieval`` task in PyTorch, with the logQ correction built in.

    * ``item_probabilities``: (|V|,) ``q(y)``, the probability that one batch positive is
      ``y`` (:func:`~candidate_sampling.sampling.frequency.item_probabilities` of the training
      positives). The in-batch columns then carry the expected count ``B·q(y)``.
    * ``frequency_estimator``: a :class:`~candidate_sampling.sampling.frequency.StreamingFrequencyEstimator`
      updated with each batch's positive ids; its inclusion probability stands in for the
      expected count (the two agree for rare items). Give at most one of the two sources;
      with neither there is no correction.
    * ``sampler`` and ``num_samples``: ``B'`` extra negatives per batch, shared by the
      rows, encoded with the ``item_encoder`` passed to :meth:`forward`. With a log-Q
      source every column gets the mixed expected count ``Q* = B·q(y) + B'·r(y)``
      (``r`` = the sampler's per-draw probability; with ``unique=True`` the extras'
      expected count is ``1 − (1 − r)^num_tries`` instead of ``B'·r``).
    * ``remove_accidental_hits`` (default True), ``temperature``, ``reduction``.

    ``forward(query (B, d), positive_embeddings (B, d), positive_ids (B,) or None, *,
    item_encoder=None, generator=None)`` → the loss of :func:`in_batch_softmax_loss`.
    """

    _options = (
        "temperature",
        "num_samples",
        "unique",
        "remove_accidental_hits",
        "reduction",
        "log_q_source",
    )

    def __init__(
        self,
        *,
        temperature: float = 1.0,
        item_probabilities: torch.Tensor | None = None,
        frequency_estimator: StreamingFrequencyEstimator | None = None,
        sampler: CandidateSampler | None = None,
        num_samples: int = 0,
        unique: bool = False,
        remove_accidental_hits: bool = True,
        reduction: str = "mean",
    ) -> None:
        super().__init__(temperature=temperature, reduction=reduction)
        if item_probabilities is not None and frequency_estimator is not None:
            raise ValueError("give item_probabilities or frequency_estimator, not both")
        if item_probabilities is not None:
            check_tensor("item_probabilities", item_probabilities, ("|V|",), floating=True)
            check_probabilities("item_probabilities", item_probabilities)
            self.register_buffer("item_probabilities", item_probabilities.detach().clone())
        else:
            self.item_probabilities = None
        if frequency_estimator is not None and not isinstance(
            frequency_estimator, StreamingFrequencyEstimator
        ):
            raise ValueError(
                "frequency_estimator must be a StreamingFrequencyEstimator, got "
                f"{type(frequency_estimator).__name__}"
            )
        self.frequency_estimator = frequency_estimator
        check_int_range("num_samples", num_samples, 0)
        if num_samples and sampler is None:
            raise ValueError("num_samples > 0 needs a sampler for the extra negatives")
        if sampler is not None and not isinstance(sampler, CandidateSampler):
            raise ValueError(f"sampler must be a CandidateSampler, got {type(sampler).__name__}")
        self.sampler = sampler
        self.num_samples = num_samples
        self.unique = unique
        self.remove_accidental_hits = remove_accidental_hits

    @property
    def log_q_source(self) -> str:
        if self.item_probabilities is not None:
            return "item_probabilities"
        if self.frequency_estimator is not None:
            return "frequency_estimator"
        return "none"

    def _batch_counts(self, ids: torch.Tensor, batch: int) -> torch.Tensor | None:
        """Expected count of ``ids`` among the ``B`` in-batch columns (float64), or None."""
        if self.item_probabilities is not None:
            return batch * self.item_probabilities[ids.to(self.item_probabilities.device)].double()
        if self.frequency_estimator is not None:
            return self.frequency_estimator.estimate(ids).double()
        return None

    def forward(
        self,
        query: torch.Tensor,
        positive_embeddings: torch.Tensor,
        positive_ids: torch.Tensor | None = None,
        *,
        item_encoder: Callable[[torch.Tensor], torch.Tensor] | None = None,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        batch = query.shape[0]
        needs_ids = (
            self.remove_accidental_hits or self.log_q_source != "none" or self.num_samples > 0
        )
        if positive_ids is None and needs_ids:
            raise ValueError("positive_ids are needed for log Q, extra negatives or hit removal")
        if self.frequency_estimator is not None:
            self.frequency_estimator.update(positive_ids)
        candidates, candidate_ids = positive_embeddings, positive_ids
        if self.num_samples:
            if item_encoder is None:
                raise ValueError("item_encoder is needed to embed the sampled extra negatives")
            draw = self.sampler.sample(self.num_samples, unique=self.unique, generator=generator)
            extra_ids = draw.ids.to(positive_ids.device)
            extra = item_encoder(extra_ids)
            dtype = torch.promote_types(positive_embeddings.dtype, extra.dtype)  # never round down
            candidates = torch.cat([positive_embeddings.to(dtype), extra.to(dtype)])
            candidate_ids = torch.cat([positive_ids, extra_ids])
        log_q = None
        counts = None if candidate_ids is None else self._batch_counts(candidate_ids, batch)
        if counts is not None:
            if self.num_samples:
                r = self.sampler.probs[candidate_ids.to(self.sampler.device)].double()
                # expected count among the extras: B'·r, or 1 − (1 − r)^tries if unique
                extra_counts = (
                    inclusion_probability(r, draw.num_tries)
                    if draw.unique
                    else self.num_samples * r
                )
                counts = counts + extra_counts.to(counts.device)
            log_q = torch.log(counts).float().to(query.device)
        return in_batch_softmax_loss(
            query,
            candidates,
            positive_ids=positive_ids,
            candidate_ids=candidate_ids,
            log_q=log_q,
            temperature=self.temperature,
            remove_accidental_hits=self.remove_accidental_hits,
            reduction=self.reduction,
        )
