"""Sampled softmax: each row's positive(s) against shared sampled candidates (chapter 4).

``sampled_softmax_loss(query, positives, candidates)`` is TensorFlow's
``sampled_softmax_loss`` as a composition of the pipeline steps of
:mod:`candidate_sampling.losses.core`:

* ``positives``: a :class:`~candidate_sampling.CandidateSet` of each row's own positive
  column(s) — ``B`` columns, or ``B·T`` for ``T`` positives per row (TF's ``num_true``,
  :meth:`~candidate_sampling.CandidateSet.positives_of`) — with their log Q (TF's
  ``true_expected_count``);
* ``candidates``: the negative columns, shared by the batch (a draw:
  :meth:`~candidate_sampling.CandidateSet.from_draw`) or with per-row log Q / mask, any
  concatenation of sources (``draw_set + mined_set``).

A row's logits are ``[o_i,pos | o_i1 … o_iC]`` with ``o = (u·v + b)/τ − log Q``; candidate
columns holding the row's positive id (accidental hits) are removed as the columns' source
says (``remove_accidental_hits=None``, the default: removed for a unique draw, kept for
draws with replacement, where each copy of the positive is an ordinary draw and removing
copies — every one, or TF's one — biases the optimum; chapter 4), as are columns the set
marks invalid; the softmax cross-entropy puts ``1/T`` on each positive column.
TensorFlow's ``sampled_softmax_loss`` always removes hits: pass
``remove_accidental_hits=True`` (and ``repeated_hits="tensorflow"``) to reproduce it. TF's
``sampled_softmax_loss`` returns the per-row losses; the package's default reduction is
their mean (``reduction="none"`` gives TF's vector). The positives of *other* rows are
not negatives here — that is the in-batch layout,
:func:`~candidate_sampling.losses.retrieval.in_batch_softmax_loss`.

:func:`sampled_softmax_from_scores` is the same loss from precomputed scores (chapter 4
builds logits by hand and compares).
"""

from __future__ import annotations

import torch

from candidate_sampling._validate import (
    check_bool,
    check_bool_mask,
    check_optional_bool,
    check_choice,
    check_finite,
    check_int_range,
    check_same,
    check_tensor,
    common_float_dtype,
    get_validate_args,
    _is_compiling,
)
from candidate_sampling.candidates import CandidateSet, Classes, _check_candidate_set
from candidate_sampling.losses.core import (
    REPEATED_HITS,
    Temperature,
    _check_hit_ids,
    _hits_to_remove,
    _last_copy,
    _invalid_columns,
    _Loss,
    _union_masks,
    _accidental_hits,
    _apply_temperature,
    _correct_logits,
    check_temperature,
    mask_logits,
    mask_value,
    _positive_column_cross_entropy,
    positive_column_cross_entropy,
    reduce_loss,
    score,
    score_positives,
)
from candidate_sampling.sampling.samplers import CandidateSampler

__all__ = [
    "candidate_logits",
    "sampled_softmax_from_scores",
    "sampled_softmax_loss",
    "SampledSoftmaxLoss",
]


def _logits(
    positive_scores: torch.Tensor,
    negative_scores: torch.Tensor,
    positive_log_q: torch.Tensor | None,
    negative_log_q: torch.Tensor | None,
    removed: torch.Tensor | None,
    temperature: float | Temperature,
    owns_scores: bool,
    *,
    defer_mask: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Steps 2–4 on (B, T) positive and (B, C) negative scores (negatives in place if owned).

    ``defer_mask``: step 4 left to the caller (:func:`_fused_first_column_softmax` folds
    it into its softmax pass)."""
    pos = _apply_temperature(positive_scores, temperature, False)
    pos = _correct_logits(pos, positive_log_q, False)
    neg = _apply_temperature(negative_scores, temperature, owns_scores)
    owned = owns_scores or neg is not negative_scores
    neg = _correct_logits(neg, negative_log_q, owned)
    owned = owned or neg is not negative_scores
    if defer_mask:
        return pos, neg
    return pos, mask_logits(neg, removed, inplace=owned)


def candidate_logits(
    query: torch.Tensor,
    positives: CandidateSet,
    candidates: CandidateSet,
    *,
    temperature: float | Temperature = 1.0,
    remove_accidental_hits: bool | None = None,
    repeated_hits: str = "mask_all",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Steps 1–4 of the sampled layout: ``(positive logits (B, T), candidate logits (B, C))``.

    ``o = (u·v + b)/τ − log Q`` for each row's positive column(s) and for every candidate
    column; candidate columns that are invalid in ``candidates.mask`` or are accidental
    hits (hold one of the row's positive ids) to remove get the finite
    :func:`~candidate_sampling.losses.core.mask_value`. Which hits are removed:
    ``remove_accidental_hits`` None (default) follows the softmax rule of
    :func:`~candidate_sampling.losses.core.hits_to_remove` (a unique draw's, mined or
    fixed columns' hits removed; draws with replacement, batch, ranks or queue kept);
    True every hit, False none. ``repeated_hits``: see
    :func:`~candidate_sampling.losses.core.accidental_hits`. A row's positive cannot be
    removed: a ``positives.mask`` with a False entry is an error (a value check; drop the
    row or give it ``sample_weight`` 0 instead). Chapters 3–4.
    Defaults: ``temperature=1.0``, ``repeated_hits="mask_all"``.
    ``repeated_hits="tensorflow"`` removes only the last copy of a repeated id, as
    TensorFlow's ``compute_accidental_hits``.
    """
    remove_accidental_hits = check_optional_bool("remove_accidental_hits", remove_accidental_hits)
    return _candidate_logits(
        query, positives, candidates, temperature, remove_accidental_hits, repeated_hits,
        logistic=False,
    )


def _candidate_logits(
    query: torch.Tensor,
    positives: CandidateSet,
    candidates: CandidateSet,
    temperature: float | Temperature,
    remove_accidental_hits: bool | None,
    repeated_hits: str,
    *,
    logistic: bool,
    defer_mask: bool = False,
):
    """:func:`candidate_logits` with the hit rule of the softmax (``logistic=False``) or of
    the logistic family (``logistic=True``: every hit kept unless told otherwise).
    ``defer_mask``: ``(pos, neg, removed)``, the candidate logits not yet masked."""
    check_temperature(temperature)
    check_choice("repeated_hits", repeated_hits, REPEATED_HITS)
    check_tensor("query", query, ("B", "d"), floating=True)
    _check_candidate_set("positives", positives)
    _check_candidate_set("candidates", candidates)
    if positives.mask is not None and get_validate_args() and not bool(positives.mask.all()):
        column = int((~positives.mask).nonzero()[0, -1])
        raise ValueError(
            "positives must not mask a column (a row's positive cannot be removed): "
            f"positives.mask is False at column {column}; drop the row, or give it "
            "sample_weight 0"
        )
    # one cast of the query for both scores: a half query's two partial gradients then
    # meet in float32, not as float16 +inf and −inf
    query = query.to(
        common_float_dtype(
            query=query, positives=positives.embeddings, candidates=candidates.embeddings
        )
    )
    pos_scores = score_positives(query, positives)
    neg_scores = score(query, candidates)
    batch, num_true = pos_scores.shape
    positive_ids = positives.ids.reshape(batch, num_true)
    positive_ids = positive_ids if num_true > 1 else positive_ids[:, 0]
    _check_hit_ids(positive_ids, candidates.ids)
    if defer_mask and num_true == 1 and candidates.mask is None and _fused(query):
        removed = _hit_pairs(positive_ids, candidates, remove_accidental_hits, repeated_hits)
        pos, neg = _logits(
            pos_scores, neg_scores, None if positives.log_q is None else positives.log_q[:, None],
            candidates.log_q, None, temperature, True, defer_mask=True,
        )
        return pos, neg, removed
    hits = _hits_to_remove(
        positive_ids, candidates, remove_accidental_hits, None, repeated_hits, logistic
    )
    removed = _union_masks(hits, _invalid_columns(candidates))
    pos_log_q = None if positives.log_q is None else positives.log_q.reshape(batch, num_true)
    if defer_mask:
        pos, neg = _logits(
            pos_scores, neg_scores, pos_log_q, candidates.log_q, None, temperature, True,
            defer_mask=True,
        )
        return pos, neg, removed
    return _logits(
        pos_scores, neg_scores, pos_log_q, candidates.log_q, removed, temperature, True
    )


def _hit_pairs(
    positive_ids: torch.Tensor,
    candidates: CandidateSet,
    remove_accidental_hits: bool | None,
    repeated_hits: str,
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The accidental hits to remove as (row, column) index pairs, or None: the True
    entries of :func:`~candidate_sampling.losses.core.hits_to_remove` (softmax rule, one
    positive per row), found by sorting the C candidate ids and searching the B positive
    ids among them (B log C), not by comparing all B × C pairs."""
    if remove_accidental_hits is False:
        return None
    eligible = None
    if remove_accidental_hits is None:
        eligible = candidates.hit_columns()
        if eligible is None:
            return None
    ids = candidates.ids.to(positive_ids.device)
    sorted_ids, order = ids.sort()
    wanted = positive_ids.to(ids.dtype)  # searchsorted needs one dtype; == does not
    first = torch.searchsorted(sorted_ids, wanted)
    counts = torch.searchsorted(sorted_ids, wanted, right=True) - first
    rows = torch.repeat_interleave(torch.arange(len(positive_ids), device=ids.device), counts)
    starts = torch.repeat_interleave(first - (counts.cumsum(0) - counts), counts)
    cols = order[starts + torch.arange(len(rows), device=ids.device)]
    keep = None if eligible is None else eligible.to(ids.device)[cols]
    if repeated_hits == "tensorflow":
        last = _last_copy(ids)[cols]
        keep = last if keep is None else keep & last
    if keep is not None:
        rows, cols = rows[keep], cols[keep]
    return rows, cols


class _FirstColumnSoftmax(torch.autograd.Function):
    """ℓ_i = −log softmax([o_i,pos | o_i1 … o_iC])_0 with removed columns masked, (B,).

    One buffer (B, 1 + C): the positive and the masked candidate logits are written into
    it (the step-4 mask and the concatenation in one pass), then one fused softmax turns
    it into probabilities p in place. The loss is ``−log p_i0``; the gradient, formed in
    the backward from the saved p, is ``g_i (p_ij − [j = 0])``, with 0 at a removed
    column (its finite mask value's probability is exactly 0); the candidates' part is
    written into ``neg``'s memory, which only this function uses after the forward (the
    loss's own scores).
    """

    @staticmethod
    def forward(ctx, pos, neg, removed):
        # ``neg`` is the caller's own buffer (the scores it made): the backward writes
        # the candidates' gradient into it, memory already in use, where a fresh (B, C)
        # buffer costs a page fault per 4 KiB on the CPU (about 3 ms of a 30 ms step at
        # B = 512, k = 4,096). Kept until then; a second backward (retain_graph) allocates.
        ctx.spare = neg.detach() if neg.is_contiguous() else None
        batch, num_neg = neg.shape
        work = torch.empty(batch, 1 + num_neg, dtype=neg.dtype, device=neg.device)
        work[:, :1] = pos
        fill = mask_value(neg.dtype)
        if isinstance(removed, tuple):  # (row, column) pairs of the few hits
            work[:, 1:] = neg
            work[removed[0], removed[1] + 1] = fill
        elif removed is None:
            work[:, 1:] = neg
        else:
            fill = torch.tensor(fill, dtype=neg.dtype, device=neg.device)
            torch.where(removed, fill, neg, out=work[:, 1:])
        torch._softmax(work, 1, False, out=work)
        p_pos = work[:, 0]
        losses = -torch.log(p_pos)
        low = p_pos < torch.finfo(work.dtype).tiny * 2**24
        if bool(low.any()):  # ℓ = lse − o_pos exactly, for the few rows that underflowed
            which = low.nonzero().squeeze(1)
            rows = torch.cat([pos.index_select(0, which), neg.index_select(0, which)], 1)
            if isinstance(removed, tuple):
                local = torch.full((batch,), -1, dtype=torch.long, device=neg.device)
                local[which] = torch.arange(len(which), device=neg.device)
                at = local[removed[0]]
                rows[at[at >= 0], removed[1][at >= 0] + 1] = mask_value(neg.dtype)
            elif removed is not None:
                gone = removed.expand(batch, num_neg).index_select(0, which)
                rows[:, 1:].masked_fill_(gone, mask_value(neg.dtype))
            lse = torch.logsumexp(rows, 1)
            losses.index_copy_(0, which, lse - rows[:, 0])
        ctx.save_for_backward(work)
        return losses

    @staticmethod
    def backward(ctx, grad_losses):
        (work,) = ctx.saved_tensors
        g = grad_losses.unsqueeze(1)
        # ``work`` is left as it is, so that a second backward (retain_graph) still works
        spare, ctx.spare = ctx.spare, None
        if spare is None or torch.is_grad_enabled():  # create_graph: no out= with autograd
            return work[:, :1] * g - g, work[:, 1:] * g, None
        grad_neg = torch.mul(work[:, 1:], g, out=spare)
        return work[:, :1] * g - g, grad_neg, None


def _fused(tensor: torch.Tensor) -> bool:
    """Whether the fused step applies: on the CPU, outside ``torch.compile``. It reads
    values on the host (hit counts, an underflow test), each a synchronisation on an
    accelerator, where the separate passes are cheap and add no read."""
    return tensor.device.type == "cpu" and not _is_compiling()


def _fused_first_column_softmax(pos, neg, removed) -> torch.Tensor:
    """Steps 4–5 of one positive per row: :class:`_FirstColumnSoftmax` where it applies
    (float32 / float64, :func:`_fused`), else the mask and :func:`_softmax_rows`."""
    if pos.shape[1] != 1 or neg.dtype not in (torch.float32, torch.float64) or (
        pos.dtype != neg.dtype or not _fused(neg)
    ):
        if isinstance(removed, tuple):
            dense = torch.zeros(neg.shape, dtype=torch.bool, device=neg.device)
            removed = dense.index_put_(removed, torch.tensor(True, device=neg.device))
        neg = mask_logits(neg, removed, inplace=False)
        return _softmax_rows(pos, neg)
    if removed is not None and not isinstance(removed, tuple):
        removed = removed.to(neg.device)
    return _FirstColumnSoftmax.apply(pos, neg, removed)


def _softmax_rows(pos: torch.Tensor, neg: torch.Tensor) -> torch.Tensor:
    """Steps 5: softmax cross-entropy over ``[pos | neg]``, positives first, ``1/T`` each."""
    logits = torch.cat([pos, neg], dim=1)
    num_true = pos.shape[1]
    if num_true == 1:
        return positive_column_cross_entropy(logits, 0)
    columns = torch.arange(num_true, device=logits.device).expand(logits.shape[0], -1)
    return _positive_column_cross_entropy(logits, columns)


def sampled_softmax_loss(
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
    """Sampled softmax, TF's ``sampled_softmax_loss`` over CandidateSets (chapter 4).

    ``ℓ_i = logsumexp(o_i,pos, o_i1 … o_iC) − (1/T) Σ_t o_i,t`` with
    ``o = (u·v + b)/τ − log Q``, removed candidates (accidental hits, invalid columns) at
    the finite mask value. ``query``: (B, d); ``positives``: B·T columns, row ``i``'s
    ``T`` positives at ``iT … iT+T−1`` (:meth:`~candidate_sampling.CandidateSet.positives_of`);
    ``candidates``: the negatives (:meth:`~candidate_sampling.CandidateSet.from_draw`,
    or any concatenation).
    A draw's log Q enters through the sets; build them with ``correct=False`` for no
    correction. Accidental hits: ``remove_accidental_hits=None`` (default) removes them in
    a unique draw and keeps them in a draw with replacement (each column's source;
    chapter 4); TF always removes them: ``remove_accidental_hits=True`` with
    ``repeated_hits="tensorflow"`` (only the last copy of a repeated positive id) is TF's
    ``sampled_softmax_loss(remove_accidental_hits=True)``. ``sample_weight``: (B,); reduction:
    mean over rows (Keras semantics, :func:`~candidate_sampling.losses.core.reduce_loss`;
    TF returns the per-row vector, ``reduction="none"``). TF table: positives
    T, negatives S − T, input F − log Q, softmax; F learns ``log P(y | x) + K(x)``.
    Defaults: ``temperature=1.0``, ``repeated_hits="mask_all"``.
    """
    remove_accidental_hits = check_optional_bool("remove_accidental_hits", remove_accidental_hits)
    pos, neg, removed = _candidate_logits(
        query, positives, candidates, temperature, remove_accidental_hits, repeated_hits,
        logistic=False, defer_mask=True,
    )
    losses = _fused_first_column_softmax(pos, neg, removed)
    return reduce_loss(losses, reduction, sample_weight=sample_weight)


def _check_scores(
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
        shape = (k,) if negative_log_q.dim() == 1 else (b, k)
        check_tensor("negative_log_q", negative_log_q, shape, floating=True)
        check_finite("negative_log_q", negative_log_q)
    if mask is not None:
        check_bool_mask("mask", mask, (b, k))


def scores_to_logits(
    positive_scores: torch.Tensor,
    negative_scores: torch.Tensor,
    *,
    positive_log_q: torch.Tensor | None = None,
    negative_log_q: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
    temperature: float | Temperature = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Steps 2–4 from precomputed scores: ``(positive logits (B, T), negative logits (B, k))``.

    Shapes as in :func:`sampled_softmax_from_scores`; the inputs are never modified.
    """
    check_temperature(temperature)
    _check_scores(positive_scores, negative_scores, positive_log_q, negative_log_q, mask)
    dtype = common_float_dtype(positive_scores=positive_scores, negative_scores=negative_scores)
    pos_scores = positive_scores.to(dtype)
    pos_log_q = positive_log_q
    if pos_scores.dim() == 1:
        pos_scores = pos_scores[:, None]
        pos_log_q = None if positive_log_q is None else positive_log_q[:, None]
    neg = negative_scores.to(dtype)
    return _logits(
        pos_scores, neg, pos_log_q, negative_log_q, mask, temperature, neg is not negative_scores
    )


def sampled_softmax_from_scores(
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
    """Sampled softmax from scores (chapter 4): the loss of :func:`sampled_softmax_loss`
    when the scores are already computed.

    ``positive_scores``: (B,) or (B, T); ``negative_scores``: (B, k); ``positive_log_q``:
    shaped like ``positive_scores``; ``negative_log_q``: (k,) or (B, k); ``mask``: (B, k)
    bool, **True = remove** (accidental hits); ``sample_weight``: (B,). None = no
    correction / no mask. A constant added to every log Q leaves the loss unchanged.
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
    return reduce_loss(_softmax_rows(pos, neg), reduction, sample_weight=sample_weight)


# --------------------------------------------------------------------------- module


class _SampledLoss(_Loss):
    """Shared body of the sampled-loss modules: draw ``num_samples`` ids, build the two
    CandidateSets, apply ``_loss_fn``."""

    _loss_fn: staticmethod
    _options = (
        "sampler",
        "num_samples",
        "unique",
        "temperature",
        "remove_accidental_hits",
        "repeated_hits",
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
        temperature: float | Temperature = 1.0,
        remove_accidental_hits: bool | None = None,
        repeated_hits: str = "mask_all",
        subtract_log_q: bool = True,
        reduction: str = "mean",
        sparse: bool = False,
    ) -> None:
        super().__init__(temperature=temperature, reduction=reduction)
        if not isinstance(sampler, CandidateSampler):
            raise ValueError(f"sampler must be a CandidateSampler, got {type(sampler).__name__}")
        check_int_range("num_samples", num_samples, 1)
        check_choice("repeated_hits", repeated_hits, REPEATED_HITS)
        unique = check_bool("unique", unique)
        remove_accidental_hits = check_optional_bool(
            "remove_accidental_hits", remove_accidental_hits
        )  # None: the loss's rule for the draw's source
        subtract_log_q = check_bool("subtract_log_q", subtract_log_q)
        sparse = check_bool("sparse", sparse)
        if unique and num_samples > sampler.num_allowed:
            raise ValueError(
                f"num_samples must be <= the number of drawable classes ({sampler.num_allowed}) "
                f"when unique=True, got {num_samples}"
            )
        self.sampler = sampler
        self.num_samples = num_samples
        self.unique = unique
        self.remove_accidental_hits = remove_accidental_hits
        self.repeated_hits = repeated_hits
        self.subtract_log_q = subtract_log_q
        self.sparse = sparse
        self.last_draw = None

    def forward(
        self,
        query: torch.Tensor,
        classes: Classes,
        positive_ids: torch.Tensor,
        *,
        class_bias: torch.Tensor | None = None,
        sample_weight: torch.Tensor | None = None,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        check_tensor("query", query, ("B", "d"), floating=True)
        if isinstance(positive_ids, torch.Tensor) and positive_ids.dim() in (1, 2):
            check_same(
                "batch size B", query=query.shape[0], positive_ids=positive_ids.shape[0]
            )
        self.last_draw = draw = self.sampler.sample(
            self.num_samples, unique=self.unique, generator=generator, positive_ids=positive_ids
        )
        correct = self.subtract_log_q
        positives = CandidateSet.positives_of(
            positive_ids, classes, draw=draw, class_bias=class_bias, correct=correct,
            sparse=self.sparse,
        )
        candidates = CandidateSet.from_draw(
            draw, classes, class_bias=class_bias, correct=correct, sparse=self.sparse
        )
        return self._loss_fn(
            query,
            positives,
            candidates,
            temperature=self.temperature,
            remove_accidental_hits=self.remove_accidental_hits,
            repeated_hits=self.repeated_hits,
            sample_weight=sample_weight,
            reduction=self.reduction,
        )


class SampledSoftmaxLoss(_SampledLoss):
    """Draws ``num_samples`` candidates per call and applies :func:`sampled_softmax_loss`.

    ``SampledSoftmaxLoss(sampler, num_samples, *, unique=True, temperature=1.0,
    remove_accidental_hits=None, repeated_hits="mask_all", subtract_log_q=True,
    reduction="mean", sparse=False)``;
    ``forward(query (B, d), classes, positive_ids (B,) or (B, T), *, class_bias=None,
    sample_weight=None, generator=None)`` → loss, where ``classes`` is a class table
    (|V|, d) or an item encoder. The last draw is kept in ``last_draw``. Accidental hits
    (``remove_accidental_hits=None``): removed with ``unique=True`` (TF's default
    sampler), kept with ``unique=False`` (hits drawn with replacement are ordinary draws,
    chapter 4); True or False for either. TF's ``sampled_softmax_loss`` is
    ``unique=True, remove_accidental_hits=True, repeated_hits="tensorflow"``. Chapter 4.
    """

    _loss_fn = staticmethod(sampled_softmax_loss)
