"""The in-batch softmax: each row against every row's positive and more columns (chapter 5).

One contract, TF Recommenders' ``Retrieval.call``: ``B`` queries are scored against one
candidate matrix whose first ``B`` columns are the batch's positives — **row i's
positive is column i** — followed by any extra columns. With
CandidateSets (:class:`~candidate_sampling.CandidateSet`):

``in_batch_softmax_loss(query, positives, candidates=None)``

* ``positives``: the batch's ``B`` positives (:meth:`~candidate_sampling.CandidateSet.from_batch`,
  log Q from item probabilities or a streaming estimate) — row ``i``'s positive *and* a
  negative for every other row;
* ``candidates``: more columns, each with its own log Q and mask — sampled extras (mixed
  negatives), a queue, other ranks' positives, mined negatives — concatenated with
  :meth:`~candidate_sampling.CandidateSet.concat` in any order.

The loss composes the pipeline steps of :mod:`candidate_sampling.losses.core`: score,
temperature, ``− log Q`` on **every** column (the row's own positive included: it is one
of the draws, Yi et al. 2019), masks (accidental hits — other columns holding the row's
positive id — by each column's source, and each set's invalid columns), the softmax
cross-entropy with row ``i``'s positive in column ``i``, the reduction (mean over rows;
TF Recommenders sums).

**Accidental hits.** The ``positives`` are the batch's own positives whatever source the
set records: the other rows' positives are independent draws from the item marginal, so
a copy of row ``i``'s positive among them is an ordinary draw, and keeping it is what
makes the true model a stationary point (chapter 5 enumerates it exactly; with or without
the log Q correction). The default (``remove_accidental_hits=None``) therefore keeps those
copies — TF Recommenders' default — and removes hits only in the ``candidates`` columns of
a set (a unique draw, mined ids, a fixed set), keeping those of draws with replacement, a
queue or other ranks (:func:`~candidate_sampling.losses.core.hits_to_remove`).
``remove_accidental_hits=True`` removes every copy (TF Recommenders'
``remove_accidental_hits=True``), ``False`` none.

:class:`RetrievalLoss` is the module a training loop uses (TFRS's ``Retrieval`` task):
it holds the temperature, the source of log Q, an optional extra-negative sampler and the
hit removal.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from candidate_sampling._validate import (
    check_bool,
    check_bool_mask,
    check_callable,
    check_optional_bool,
    check_choice,
    check_ids,
    check_int_range,
    check_probabilities,
    check_same,
    check_tensor,
    get_validate_args,
)
from candidate_sampling.candidates import CandidateSet, _check_candidate_set, _gather_rows
from candidate_sampling.device import exact_float64
from candidate_sampling.sampling.frequency import StreamingFrequencyEstimator, inclusion_probability
from candidate_sampling.losses.core import (
    REPEATED_HITS,
    Temperature,
    _check_rows,
    _hits_to_remove,
    _corrected_logits,
    _invalid_columns,
    _Loss,
    _positive_column_cross_entropy,
    _union_masks,
    check_temperature,
    mask_logits,
    reduce_loss,
)
from candidate_sampling.sampling.samplers import CandidateSampler

__all__ = ["RetrievalLoss", "in_batch_logits", "in_batch_softmax_loss"]


def _check_in_batch(
    query: torch.Tensor, positives: CandidateSet, candidates: CandidateSet | None
) -> None:
    """The in-batch contract: ``B`` positives for the ``B`` rows of ``query`` (B, d), row
    ``i``'s in column ``i``, and optional more ``candidates``."""
    _check_candidate_set("positives", positives)
    _check_candidate_set("candidates", candidates, optional=True)
    check_tensor("query", query, ("B", "d"), floating=True)
    batch = query.shape[0]
    if positives.num_candidates != batch:
        raise ValueError(
            f"positives must have B = {batch} columns (one per row of query), "
            f"got {positives.num_candidates}"
        )
    _check_rows("positives", positives, batch)
    if candidates is not None:
        _check_rows("candidates", candidates, batch)


def in_batch_columns(
    query: torch.Tensor, positives: CandidateSet, candidates: CandidateSet | None
) -> CandidateSet:
    """The in-batch layout's columns ``[positives | candidates]``, checked once: ``B``
    positives for the ``B`` rows of ``query`` (B, d), row ``i``'s in column ``i``; the
    positives' source is ``"batch"`` by this contract (the hit rule keeps their copies)."""
    _check_in_batch(query, positives, candidates)
    positives = positives.with_source("batch")
    return positives if candidates is None else CandidateSet.concat(positives, candidates)


def removed_columns(
    columns: CandidateSet, batch: int, removed: torch.Tensor | None = None
) -> torch.Tensor | None:
    """(B, C) bool, True = remove: the set's invalid columns and ``removed`` (B, C), never a
    row's own positive column ``i``; None when nothing is removed."""
    if removed is not None:
        check_bool_mask("removed", removed, (batch, columns.num_candidates))
        removed = removed.to(columns.device)
    invalid = _union_masks(_invalid_columns(columns), removed)
    if invalid is None:
        return None
    invalid = invalid.expand(batch, -1).clone()
    own = torch.arange(batch, device=invalid.device)
    invalid[own, own] = False  # the row's own positive stays
    return invalid


def in_batch_logits(
    query: torch.Tensor,
    positives: CandidateSet,
    candidates: CandidateSet | None = None,
    *,
    temperature: float | Temperature = 1.0,
    remove_accidental_hits: bool | None = None,
    repeated_hits: str = "mask_all",
    removed: torch.Tensor | None = None,
) -> torch.Tensor:
    """Steps 1–4 of the in-batch layout: (B, B + C) logits, row ``i``'s positive in column ``i``.

    Columns: ``positives`` (B) then ``candidates`` (C, optional). Logit
    ``(u_i·v_j + b_j)/τ − log Q_ij``; removed columns (accidental hits — another column
    with the row's positive id — as ``remove_accidental_hits`` says: None, the default,
    by each column's source, keeping the batch's copies; invalid columns of a set;
    ``removed`` (B, B + C) bool, True = remove, e.g. known positives) hold the finite
    :func:`~candidate_sampling.losses.core.mask_value`. A row's own positive column is
    never removed. Chapters 5–8.
    Defaults: ``temperature=1.0``, ``repeated_hits="mask_all"``.
    ``repeated_hits="tensorflow"`` removes only the last copy of a repeated id, as
    TensorFlow's ``compute_accidental_hits``.
    """
    check_temperature(temperature)
    remove_accidental_hits = check_optional_bool("remove_accidental_hits", remove_accidental_hits)
    check_choice("repeated_hits", repeated_hits, REPEATED_HITS)
    columns = in_batch_columns(query, positives, candidates)
    batch = query.shape[0]
    logits = _corrected_logits(query, columns, temperature)  # (B, B + C), our own
    own = torch.arange(batch, device=logits.device)
    hits = _hits_to_remove(
        positives.ids, columns, remove_accidental_hits, own, repeated_hits, False
    )
    mask = _union_masks(hits, removed_columns(columns, batch, removed))
    return mask_logits(logits, mask, inplace=True)


def in_batch_softmax_loss(
    query: torch.Tensor,
    positives: CandidateSet,
    candidates: CandidateSet | None = None,
    *,
    temperature: float | Temperature = 1.0,
    remove_accidental_hits: bool | None = None,
    repeated_hits: str = "mask_all",
    sample_weight: torch.Tensor | None = None,
    reduction: str = "mean",
) -> torch.Tensor:
    """In-batch softmax over ``positives`` and extra ``candidates`` (Yi et al. 2019; TFRS).

    ``ℓ_i = −o_ii + log Σ_{j unmasked} exp(o_ij)``, ``o_ij = (u_i·v_j + b_j)/τ − log Q_ij``
    over the columns ``[positives | candidates]``. ``query``: (B, d); ``positives``: a
    CandidateSet of the ``B`` positives (row ``i``'s in column ``i``); ``candidates``:
    more columns (mixed negatives, a queue, other ranks, mined), or None.
    ``remove_accidental_hits``: None (default) follows each column's source — copies of
    row ``i``'s positive among the batch's columns, a queue's, other ranks' or draws with
    replacement are kept (TF Recommenders' default, ``False``, gives the same for the
    batch), those in a unique draw, mined or fixed set removed; True removes every other
    column whose id is row ``i``'s positive id (TFRS's ``remove_accidental_hits=True``),
    False none (``repeated_hits`` as in
    :func:`~candidate_sampling.losses.core.accidental_hits`). ``sample_weight``: (B,).
    Reduction over rows: ``"mean"`` (default), ``"sum"`` (TFRS) or ``"none"``. Chapter 5.
    Defaults: ``temperature=1.0``, ``reduction="mean"``.
    """
    logits = in_batch_logits(
        query,
        positives,
        candidates,
        temperature=temperature,
        remove_accidental_hits=remove_accidental_hits,
        repeated_hits=repeated_hits,
    )
    columns = torch.arange(query.shape[0], device=logits.device)
    per_row = _positive_column_cross_entropy(logits, columns)  # our own columns: no check
    return reduce_loss(per_row, reduction, sample_weight=sample_weight)


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
      expected count is ``1 − (1 − r)^num_tries`` instead of ``B'·r``). The sampler's
      catalogue must be ``item_probabilities``' (the same |V|).
    * ``remove_accidental_hits`` (default None: by each column's source — the batch's
      copies and extras drawn with replacement are kept, a unique draw's hits removed;
      True or False for every column), ``temperature``, ``reduction``.

    ``forward(query (B, d), positive_embeddings (B, d), positive_ids (B,), *,
    item_encoder=None, sample_weight=None, generator=None)`` → the loss of
    :func:`in_batch_softmax_loss` with the CandidateSets it builds; ``positive_ids`` are
    ``>= 0``, and ``< |V|`` with ``item_probabilities`` (value checks).
    Defaults: ``temperature=1.0``, ``num_samples=0``, ``reduction="mean"``.
    """

    _options = (
        "temperature",
        "sampler",
        "num_samples",
        "unique",
        "remove_accidental_hits",
        "reduction",
        "log_q_source",
    )

    def __init__(
        self,
        *,
        temperature: float | Temperature = 1.0,
        item_probabilities: torch.Tensor | None = None,
        frequency_estimator: StreamingFrequencyEstimator | None = None,
        sampler: CandidateSampler | None = None,
        num_samples: int = 0,
        unique: bool = False,
        remove_accidental_hits: bool | None = None,
        reduction: str = "mean",
    ) -> None:
        super().__init__(temperature=temperature, reduction=reduction)
        unique = check_bool("unique", unique)
        remove_accidental_hits = check_optional_bool(
            "remove_accidental_hits", remove_accidental_hits
        )
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
        if unique and not num_samples:
            raise ValueError(
                "unique=True needs num_samples > 0 (it says how the extra negatives are "
                "drawn; there are none)"
            )
        if sampler is not None and not isinstance(sampler, CandidateSampler):
            raise ValueError(f"sampler must be a CandidateSampler, got {type(sampler).__name__}")
        if sampler is not None and item_probabilities is not None:  # one catalogue
            check_same(
                "number of items |V|",
                item_probabilities=item_probabilities.shape[0],
                **{"sampler.num_items": sampler.num_items},
            )
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
        """Expected count of ``ids`` among the ``B`` in-batch columns (float64, on the CPU
        where the device has no float64), or None."""
        if self.item_probabilities is not None:
            probs = self.item_probabilities[ids.to(self.item_probabilities.device)]
            return batch * exact_float64(probs)
        if self.frequency_estimator is not None:
            return exact_float64(self.frequency_estimator.estimate(ids))
        return None

    def forward(
        self,
        query: torch.Tensor,
        positive_embeddings: torch.Tensor,
        positive_ids: torch.Tensor,
        *,
        item_encoder: Callable[[torch.Tensor], torch.Tensor] | None = None,
        sample_weight: torch.Tensor | None = None,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        check_tensor("query", query, ("B", "d"), floating=True)
        check_tensor("positive_embeddings", positive_embeddings, ("B", "d"), floating=True)
        check_tensor("positive_ids", positive_ids, ("B",), floating=False)
        batch = query.shape[0]
        check_same(
            "batch size B",
            query=batch,
            positive_embeddings=positive_embeddings.shape[0],
            positive_ids=positive_ids.shape[0],
        )
        num_items = None if self.item_probabilities is None else self.item_probabilities.shape[0]
        check_ids("positive_ids", positive_ids, num_items)
        if self.frequency_estimator is not None:
            self.frequency_estimator.update(positive_ids)
        if positive_ids.device != positive_embeddings.device:
            raise ValueError(
                f"positive_ids must be on positive_embeddings' device "
                f"{positive_embeddings.device}, got {positive_ids.device}"
            )
        # the checks above are the sets' own: they are made without checking again
        positives = CandidateSet._unchecked(
            positive_embeddings, positive_ids.long(), None, None, None, "batch"
        )
        extras = draw = None
        if self.num_samples:
            if item_encoder is None:
                raise ValueError("item_encoder is needed to embed the sampled extra negatives")
            check_callable("item_encoder", item_encoder, "a function or module: ids → (n, d)")
            draw = self.sampler.sample(self.num_samples, unique=self.unique, generator=generator)
            extra_ids = draw.ids.to(positive_ids.device)
            rows = _gather_rows(item_encoder, extra_ids, False, "item_encoder")
            if rows.shape[1] != query.shape[1] or rows.device != query.device:
                raise ValueError(
                    f"item_encoder must return embeddings of size d = {query.shape[1]} on "
                    f"{query.device} (query's), got {tuple(rows.shape)} on {rows.device}"
                )
            extras = CandidateSet._unchecked(
                rows, extra_ids, None, None, None, "unique" if draw.unique else "replacement"
            )
        if self.log_q_source != "none":
            # one expression for every column: Q* = B·q(y) + (expected count among extras)
            ids = positive_ids if extras is None else torch.cat([positive_ids, extras.ids])
            counts = self._batch_counts(ids, batch)
            if extras is not None:
                r = exact_float64(self.sampler.probs[ids.to(self.sampler.device)])
                extra_counts = (
                    inclusion_probability(r, draw.num_tries)
                    if draw.unique
                    else self.num_samples * r
                )
                counts = counts + extra_counts.to(counts.device)
            if get_validate_args() and bool((counts[:batch] == 0).any()):
                bad = int(positive_ids[(counts[:batch] == 0).to(positive_ids.device)][0])
                raise ValueError(
                    f"item_probabilities must be > 0 for every id of positive_ids, got 0 "
                    f"for id {bad} (log Q would be -inf: an item the training positives "
                    "never hold)"
                )
            log_q = torch.log(counts).float().to(query.device)
            positives = CandidateSet._unchecked(
                positives.embeddings, positives.ids, log_q[:batch], None, None, positives.source
            )
            if extras is not None:
                extras = CandidateSet._unchecked(
                    extras.embeddings, extras.ids, log_q[batch:], None, None, extras.source
                )
        return in_batch_softmax_loss(
            query,
            positives,
            extras,
            temperature=self.temperature,
            remove_accidental_hits=self.remove_accidental_hits,
            sample_weight=sample_weight,
            reduction=self.reduction,
        )
