"""The logit pipeline: score → temperature → log Q correction → mask → criterion → reduction.

Every loss in :mod:`candidate_sampling.losses` is a short composition of these public
functions, each callable alone, in this order (also on the book's notation page):

1. :func:`score` — ``s_ij = u_i·v_j + b_j`` of a query against a
   :class:`~candidate_sampling.CandidateSet` ((B, C), in at least float32), and
   :func:`score_positives` for each row's own positive column(s) ((B, T)).
2. :func:`apply_temperature` — ``s / τ`` with one :class:`Temperature` (fixed or
   learnable) everywhere; a float is a fixed τ.
3. :func:`correct_logits` — ``o = s/τ − log Q``: the correction is subtracted *after* the
   temperature and is not divided by it (TF Recommenders' order; the two orders agree
   only at τ = 1). ``log Q`` is the log *expected count* of a candidate in the candidate
   set and gets no gradient. Under a softmax a constant added to every log Q cancels;
   under a logistic loss it does not.
4. :func:`accidental_hits` (candidate id = the row's positive id; ``repeated_hits`` says
   whether every copy of a repeated id is a hit, the default, or only the last one, as
   TensorFlow's ``compute_accidental_hits``) — which hits a loss removes follows each
   column's source by default (:func:`hits_to_remove`: a softmax removes the hits of
   unique draws, mined and fixed sets and keeps those of draws with replacement, the
   batch, other ranks and a queue; the logistic family keeps them all; chapters 4–5) —,
   a set's own validity mask and any other
   removal (duplicates, known positives), applied by :func:`mask_logits`: the logit
   becomes :func:`mask_value`, the finite ``finfo(dtype).min / 2`` — never ±inf, so a
   row keeps a finite loss even when every negative is removed, and a removed entry gets
   an exactly zero gradient.
5. The criterion: :func:`positive_column_cross_entropy` (softmax; the positive(s) in
   known columns, each of ``T`` positives labelled ``1/T`` as TF's ``num_true``) or
   :func:`logistic_terms` (the one binary logistic term, used by NCE, negative sampling,
   sampled logistic and the pairwise sigmoid loss).
6. :func:`reduce_loss` — ``"mean"`` over rows (default), ``"sum"`` or ``"none"``, with
   per-row ``sample_weight`` (B,) as Keras weights a loss: ``"sum"`` is ``Σ w_i ℓ_i``
   (TF Recommenders' ``Retrieval``, which sums), ``"mean"`` is ``Σ w_i ℓ_i / B``
   (Keras' ``SUM_OVER_BATCH_SIZE``: divided by the number of rows, not by ``Σ w_i``),
   ``"none"`` is ``w_i ℓ_i``. Rows without a defined loss (``valid=False``) count 0 and
   are left out of the mean's denominator.

Precision: scores and logits are computed in at least float32
(:func:`~candidate_sampling._validate.common_float_dtype`): half inputs are upcast
*before* the score matmul and the division by τ, so neither can overflow, and the loss
is float32 for half inputs. Copies: a step called alone never modifies its input; inside
a loss the (B, C) score matrix is the loss's own fresh tensor, so temperature, correction
and mask are written into it (``inplace=True``) and the matrix exists once
(``benchmarks/floor.py``).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from candidate_sampling._validate import (
    check_bool,
    check_bool_mask,
    check_optional_bool,
    check_broadcasts_to,
    check_choice,
    check_finite,
    check_float_dtype,
    check_ids,
    check_positive,
    check_reduction,
    check_tensor,
    common_float_dtype,
    get_validate_args,
)
from candidate_sampling.candidates import CandidateSet, _check_candidate_set

__all__ = [
    "REPEATED_HITS",
    "Temperature",
    "mask_value",
    "upcast",
    "score",
    "score_positives",
    "apply_temperature",
    "correct_logits",
    "accidental_hits",
    "hits_to_remove",
    "mask_logits",
    "positive_column_cross_entropy",
    "logistic_terms",
    "reduce_loss",
]

_HALF = (torch.float16, torch.bfloat16)

#: How :func:`accidental_hits` treats a positive id that occurs in several candidate
#: columns: ``"mask_all"`` removes every copy (the package's default); ``"tensorflow"``
#: removes only the *last* copy, as TF's ``compute_accidental_hits`` does (it maps each
#: sampled id to one position — the last — because it presupposes unique candidates).
#: In a sampler's draw, repeats arise only with replacement, and there removing hits is
#: biased whichever rule does it: each copy is an ordinary draw with its own
#: ``log(k q)``, which is why the default (:func:`hits_to_remove`) keeps the hits of
#: draws with replacement. Removing hits is right for unique draws, where a hit is one
#: column and the two rules agree (chapter 4).
REPEATED_HITS = ("mask_all", "tensorflow")


def mask_value(dtype: torch.dtype) -> float:
    """The finite logit that stands for "removed": ``torch.finfo(dtype).min / 2``.

    Half of the most negative finite value leaves head-room so that adding or subtracting
    an ordinary logit never overflows to ``-inf``, and ``exp(mask - max)`` underflows to
    exactly 0, so a masked candidate contributes nothing to a log-sum-exp.
    """
    return torch.finfo(check_float_dtype("dtype", dtype)).min / 2


def _check_step_logits(logits: torch.Tensor, name: str = "logits") -> None:
    """A pipeline step's ``logits``: a floating-point tensor of any shape."""
    if not isinstance(logits, torch.Tensor) or not logits.is_floating_point():
        got = logits.dtype if isinstance(logits, torch.Tensor) else type(logits).__name__
        raise ValueError(f"{name} must be a floating-point tensor, got {got}")


def _check_removed(removed: torch.Tensor, logits: torch.Tensor) -> None:
    """``removed``: a bool tensor that broadcasts to ``logits`` (True = remove)."""
    if not isinstance(removed, torch.Tensor) or removed.dtype != torch.bool:
        got = removed.dtype if isinstance(removed, torch.Tensor) else type(removed).__name__
        raise ValueError(f"removed must be a bool tensor, got {got}")
    check_broadcasts_to("removed", removed, logits.shape)


def upcast(tensor: torch.Tensor) -> torch.Tensor:
    """float16 / bfloat16 → float32; any other tensor is returned unchanged."""
    if not isinstance(tensor, torch.Tensor):
        raise ValueError(f"tensor must be a torch.Tensor, got {type(tensor).__name__}")
    return _upcast(tensor)


def _upcast(tensor: torch.Tensor) -> torch.Tensor:
    """:func:`upcast` of a tensor."""
    return tensor.float() if tensor.dtype in _HALF else tensor


# --------------------------------------------------------------------------- 1. score


def _check_query(query: torch.Tensor, candidates: CandidateSet, name: str) -> None:
    check_tensor("query", query, ("B", "d"), floating=True)
    _check_candidate_set(name, candidates)
    if candidates.dim != query.shape[1]:
        raise ValueError(
            f"embedding size d must agree, got query={query.shape[1]}, {name}={candidates.dim}"
        )
    if candidates.device != query.device:
        raise ValueError(
            f"{name} must be on the query's device {query.device}, got {candidates.device}"
        )
    _check_rows(name, candidates, query.shape[0])


def _check_rows(name: str, candidates: CandidateSet, batch: int) -> None:
    """A per-row (B, C) log Q or mask of the set ``name`` must have the query's B rows."""
    rows = candidates.batch_size
    if rows is not None and rows != batch:
        raise ValueError(
            f"{name}' per-row log_q / mask must have B = {batch} rows (query), got {rows}"
        )


def score(query: torch.Tensor, candidates: CandidateSet) -> torch.Tensor:
    """Step 1: ``s_ij = u_i · v_j + b_j``, (B, d) × CandidateSet (C columns) → (B, C).

    Computed in :func:`~candidate_sampling._validate.common_float_dtype` of the query and
    the embeddings (at least float32: half inputs are upcast before the matmul). The
    result is a fresh tensor the caller owns. Chapters 4–8.
    """
    _check_query(query, candidates, "candidates")
    dtype = common_float_dtype(
        query=query, candidates=candidates.embeddings, bias=candidates.bias
    )
    work = query.to(dtype)
    # the same tensor as query and as the columns (self-similarity) is cast once, so its
    # two gradients meet in float32, not as two float16 halves (+inf − inf)
    rows = work if candidates.embeddings is query else candidates.embeddings.to(dtype)
    scores = work @ rows.T
    if candidates.bias is not None:
        scores = scores.add_(candidates.bias.to(dtype))
    return scores


def score_positives(query: torch.Tensor, positives: CandidateSet) -> torch.Tensor:
    """Step 1 for each row's own positive(s): ``s_it = u_i · v_{iT+t} + b``, → (B, T).

    ``positives`` holds ``B·T`` columns, row ``i``'s ``T`` positives at ``iT … iT+T−1``
    (row-major, as :meth:`~candidate_sampling.CandidateSet.positives_of` flattens
    ``positive_ids`` (B, T));
    ``T = 1`` is the usual one positive per row. Any other count is an error.
    """
    _check_query(query, positives, "positives")
    batch, num = query.shape[0], positives.num_candidates
    if num == 0 or num % batch:
        raise ValueError(
            f"positives must hold B·T columns (T positives for each of the B = {batch} "
            f"rows of query), got {num}"
        )
    if positives.batch_size is not None:
        raise ValueError("positives must have shared (C,) log_q and mask, not per-row ones")
    num_true = num // batch
    dtype = common_float_dtype(query=query, positives=positives.embeddings, bias=positives.bias)
    rows = positives.embeddings.to(dtype).reshape(batch, num_true, -1)
    scores = (query.to(dtype)[:, None, :] * rows).sum(-1)
    if positives.bias is not None:
        scores = scores + positives.bias.to(dtype).reshape(batch, num_true)
    return scores


# --------------------------------------------------------------------------- 2. temperature


class Temperature(nn.Module):
    """The one temperature of the package: ``τ``, fixed or learnable.

    ``Temperature(0.07)`` is a fixed τ (a buffer; the same as passing the float 0.07).
    ``Temperature(0.07, learnable=True)`` learns ``log(1/τ)`` (CLIP's ``logit_scale``,
    SigLIP's ``t'``) as a parameter, so τ stays positive; ``max_scale`` clamps ``1/τ``
    from above (CLIP uses 100). ``Temperature.from_scale(10.0, learnable=True)``
    starts from the scale ``1/τ`` instead (SigLIP's parameterisation): its errors name
    ``scale``. :func:`apply_temperature` divides scores by it. Chapters 6–7.
    Defaults: ``learnable=False``.
    """

    def __init__(
        self,
        temperature: float = 1.0,
        *,
        learnable: bool = False,
        max_scale: float | None = None,
    ) -> None:
        super().__init__()
        if isinstance(temperature, torch.Tensor):
            temperature = float(check_positive("temperature", temperature).detach())
        value = float(_check_scale_range("temperature", temperature))
        if max_scale is not None:
            check_positive("max_scale", max_scale)
        learnable = check_bool("learnable", learnable)
        log_scale = torch.tensor(-math.log(value))
        if learnable:
            self.log_scale = nn.Parameter(log_scale)
        else:
            self.register_buffer("log_scale", log_scale)
        self.learnable = learnable
        self.max_scale = None if max_scale is None else float(max_scale)

    @classmethod
    def from_scale(
        cls, scale: float, *, learnable: bool = False, max_scale: float | None = None
    ) -> Temperature:
        """A temperature given by its scale ``1/τ`` (SigLIP's ``exp(t')``).
        Defaults: ``learnable=False``.
        ``max_scale`` clamps ``1/τ`` as CLIP's ``logit_scale`` (100 there)."""
        scale = float(check_positive("scale", scale))
        # τ = 1/scale is checked here, in the caller's terms: the constructor's own check
        # of the same τ cannot fail after this one
        _check_scale_range("scale", 1.0 / scale if scale else math.inf, shown=scale)
        return cls(1.0 / scale, learnable=learnable, max_scale=max_scale)

    @property
    def scale(self) -> torch.Tensor:
        """``1/τ`` as a 0-dim tensor (clamped at ``max_scale``), with its gradient."""
        log_scale = self.log_scale
        if self.max_scale is not None:
            log_scale = log_scale.clamp(max=math.log(self.max_scale))
        return log_scale.exp()

    @property
    def value(self) -> torch.Tensor:
        """τ as a 0-dim tensor."""
        return 1.0 / self.scale

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        return apply_temperature(scores, self)

    def extra_repr(self) -> str:
        return f"temperature={float(self.value.detach()):.4g}, learnable={self.learnable}" + (
            "" if self.max_scale is None else f", max_scale={self.max_scale}"
        )


_F32 = torch.finfo(torch.float32)


def _check_scale_range(name: str, temperature: float, *, shown: float | None = None) -> float:
    """A temperature τ > 0 whose scale ``1/τ`` is a normal float32 number: τ below
    ``1/finfo(float32).max`` would make ``1/τ`` (and every logit) inf, τ above
    ``1/finfo(float32).tiny`` would make it 0. ``shown``: the value the caller passed (the
    scale, for :meth:`Temperature.from_scale`)."""
    value = float(check_positive(name, temperature))
    if not 1.0 / _F32.max <= value <= 1.0 / _F32.tiny:
        if shown is None:
            raise ValueError(
                f"{name} must lie in [{1.0 / _F32.max:.3g}, {1.0 / _F32.tiny:.3g}] (1/{name} "
                f"must be a finite, non-zero float32), got {temperature!r}"
            )
        raise ValueError(
            f"{name} must lie in [{_F32.tiny:.3g}, {_F32.max:.3g}] (a finite, non-zero "
            f"float32), got {shown!r}"
        )
    return temperature


def check_temperature(temperature: float | Temperature) -> float | Temperature:
    """A positive finite float or a :class:`Temperature`; anything else is an error. A
    float τ must have a finite, non-zero ``1/τ`` in float32 (the logits ``s/τ`` would be
    inf or 0 otherwise)."""
    if isinstance(temperature, Temperature):
        return temperature
    if isinstance(temperature, torch.Tensor) or isinstance(temperature, bool):
        raise ValueError(
            "temperature must be a float or a Temperature (Temperature(τ, learnable=True) "
            f"for a learned one), got {type(temperature).__name__}"
        )
    return _check_scale_range("temperature", temperature)


def apply_temperature(
    scores: torch.Tensor, temperature: float | Temperature = 1.0, *, inplace: bool = False
) -> torch.Tensor:
    """Step 2: ``scores / τ`` (half precision upcast to float32 first).

    ``temperature``: a float (fixed τ > 0) or a :class:`Temperature` (fixed or learnable;
    a learnable one multiplies by its scale ``1/τ`` so its gradient flows).
    ``inplace=True`` divides ``scores`` itself when it is a tensor the caller owns and
    nothing saved for backward (the fresh output of :func:`score`).
    """
    temperature = check_temperature(temperature)
    inplace = check_bool("inplace", inplace)
    _check_step_logits(scores, "scores")
    return _apply_temperature(scores, temperature, inplace)


def _apply_temperature(
    scores: torch.Tensor, temperature: float | Temperature, inplace: bool
) -> torch.Tensor:
    """:func:`apply_temperature` of checked arguments."""
    work = _upcast(scores)
    owned = inplace or work is not scores
    if isinstance(temperature, Temperature):
        return work * temperature.scale.to(work.dtype)
    if temperature == 1.0:
        return work
    return work.div_(temperature) if owned else work / temperature


# --------------------------------------------------------------------------- 3. log Q


def correct_logits(
    logits: torch.Tensor, log_q: torch.Tensor | None, *, inplace: bool = False
) -> torch.Tensor:
    """Step 3: ``logits − log_q``, the logQ correction (``log_q`` broadcast, detached).

    ``logits``: (..., C), already divided by τ (:func:`apply_temperature`); ``log_q``:
    broadcastable *to* ``logits`` (never enlarging it), e.g. (C,) shared by the batch or
    (B, C) per row — the log expected count; None is no correction. ``inplace=True``
    writes into ``logits`` (a tensor the caller owns, as :func:`apply_temperature`'s).
    """
    inplace = check_bool("inplace", inplace)
    if log_q is None:
        return logits
    _check_step_logits(logits)
    check_broadcasts_to("log_q", log_q, logits.shape)
    if not log_q.is_floating_point():
        raise ValueError(f"log_q must be a floating-point tensor, got {log_q.dtype}")
    check_finite("log_q", log_q)  # NaN or ±inf log Q: a NaN or ±inf logit (a value check)
    return _correct_logits(logits, log_q, inplace)


def _correct_logits(
    logits: torch.Tensor, log_q: torch.Tensor | None, inplace: bool
) -> torch.Tensor:
    """:func:`correct_logits` of checked arguments (a CandidateSet's log Q was checked
    when the set was made)."""
    if log_q is None:
        return logits
    log_q = log_q.detach().to(logits.dtype)
    if inplace:
        return logits.sub_(log_q)
    return logits - log_q


def _corrected_logits(
    query: torch.Tensor, candidates: CandidateSet, temperature: float | Temperature
) -> torch.Tensor:
    """Steps 1–3 against every column of ``candidates``: ``(u·v + b)/τ − log Q``, (B, C).

    One fresh tensor (the output of :func:`score`), divided and corrected in place.
    """
    logits = _apply_temperature(score(query, candidates), temperature, True)
    return _correct_logits(logits, candidates.log_q, True)


# --------------------------------------------------------------------------- 4. mask


def _last_copy(candidate_ids: torch.Tensor) -> torch.Tensor:
    """(C,) bool: column ``j`` is the last column holding its id (TF's hit position)."""
    num = candidate_ids.shape[-1]
    cols = torch.arange(num, device=candidate_ids.device)
    _, inverse = torch.unique(candidate_ids, return_inverse=True)
    last = torch.full((num,), -1, dtype=torch.long, device=candidate_ids.device)
    last = last.scatter_reduce(0, inverse, cols, reduce="amax")
    return last[inverse] == cols


def accidental_hits(
    positive_ids: torch.Tensor,
    candidate_ids: torch.Tensor,
    *,
    positive_columns: torch.Tensor | None = None,
    repeated_hits: str = "mask_all",
) -> torch.Tensor:
    """Step 4: boolean (B, C), True where candidate ``j`` holds (one of) row ``i``'s positive ids.

    ``positive_ids``: (B,) or (B, T) (TF's ``num_true``); ``candidate_ids``: (C,) shared by
    the batch. With ``positive_columns`` (B,) — the column that *is* row ``i``'s positive,
    ``arange(B)`` in the in-batch layout — that column is left unmasked, so the mask marks
    exactly the other copies (TF Recommenders' ``remove_accidental_hits``).
    ``repeated_hits`` (:data:`REPEATED_HITS`): ``"mask_all"`` marks every copy of a
    repeated id; ``"tensorflow"`` only the last copy, as TF's ``compute_accidental_hits``
    (the other copies stay in the softmax as negatives equal to the positive). For a
    sampler's draw: mask the hits of unique draws (the two rules agree there); keep those
    of draws with replacement, where repeats occur: each copy is an ordinary draw, and
    masking any biases the sampled softmax's optimum (chapter 4).
    """
    check_choice("repeated_hits", repeated_hits, REPEATED_HITS)
    _check_hit_ids(positive_ids, candidate_ids)
    check_ids("positive_ids", positive_ids, None)
    check_ids("candidate_ids", candidate_ids, None)
    if positive_columns is not None:
        check_positive_columns(
            positive_columns, positive_ids.shape[0], candidate_ids.shape[0], "candidate_ids"
        )
    return _accidental_hits(positive_ids, candidate_ids, positive_columns, repeated_hits)


def _check_hit_ids(positive_ids: torch.Tensor, candidate_ids: torch.Tensor) -> None:
    """``positive_ids`` (B,) or (B, T) and ``candidate_ids`` (C,), integer ids."""
    if not isinstance(positive_ids, torch.Tensor) or positive_ids.dim() not in (1, 2):
        shape = tuple(positive_ids.shape) if isinstance(positive_ids, torch.Tensor) else None
        raise ValueError(f"positive_ids must have shape (B,) or (B, T), got {shape}")
    if positive_ids.is_floating_point() or positive_ids.dtype == torch.bool:
        raise ValueError(f"positive_ids must be an integer tensor of ids, got {positive_ids.dtype}")
    check_tensor("candidate_ids", candidate_ids, ("C",), floating=False, allow_empty=True)
    if candidate_ids.dtype == torch.bool:
        raise ValueError("candidate_ids must be an integer tensor of ids, got torch.bool")


def check_positive_columns(
    positive_columns: torch.Tensor, batch: int, num_cols: int, of: str = "logits"
) -> None:
    """``positive_columns``: (B,) integer, each in ``[0, C)`` (the range is a value check).

    Column ``positive_columns[i]`` is row ``i``'s positive among the ``C = num_cols``
    columns of ``of``; a negative column is never wrapped around.
    """
    check_tensor("positive_columns", positive_columns, (batch,), floating=False)
    if positive_columns.dtype == torch.bool:
        raise ValueError("positive_columns must be an integer tensor, got torch.bool")
    if get_validate_args() and positive_columns.numel():
        lo, hi = int(positive_columns.min()), int(positive_columns.max())
        if lo < 0 or hi >= num_cols:
            raise ValueError(
                f"positive_columns must lie in [0, {num_cols}) ({of} has {num_cols} "
                f"columns), got values in [{lo}, {hi}]"
            )


def _accidental_hits(
    positive_ids: torch.Tensor,
    candidate_ids: torch.Tensor,
    positive_columns: torch.Tensor | None,
    repeated_hits: str,
) -> torch.Tensor:
    """:func:`accidental_hits` on checked arguments (a loss's own ``arange(B)`` columns)."""
    batch = positive_ids.shape[0]
    cand = candidate_ids.to(positive_ids.device)[None, :]
    pos = positive_ids if positive_ids.dim() == 2 else positive_ids[:, None]
    hits = (pos[:, :, None] == cand[:, None, :]).any(1) if pos.shape[1] > 1 else (pos == cand)
    if repeated_hits == "tensorflow":
        hits = hits & _last_copy(cand[0])[None, :]
    if positive_columns is not None:
        rows = torch.arange(batch, device=hits.device)
        hits[rows, positive_columns.to(hits.device)] = False
    return hits


def hits_to_remove(
    positive_ids: torch.Tensor,
    columns: CandidateSet,
    remove_accidental_hits: bool | None = None,
    *,
    positive_columns: torch.Tensor | None = None,
    repeated_hits: str = "mask_all",
    logistic: bool = False,
) -> torch.Tensor | None:
    """Step 4, which accidental hits a loss removes: (B, C) bool (True = remove) or None.

    ``remove_accidental_hits`` True removes every hit, False none; None (every loss's
    default) follows each column's ``source`` (``CandidateSet.source``):

    * a softmax (``logistic=False``) removes the hits in columns of a *set* — a unique
      draw, mined ids, a fixed set — and keeps those in columns of *draws* — with
      replacement, the batch's own positives, other ranks', a queue's. With draws, a copy
      of the positive is one more independent draw and the true model is a stationary
      point only when it is kept (ranking NCE; chapter 4 for samplers, chapter 5 for the
      batch); with a set, the positive is already its own column and a second copy
      would count it twice (chapter 4);
    * the logistic family (``logistic=True``: NCE, negative sampling, the pairwise sigmoid
      loss) sums one term per column, each right when its log Q is the column's expected
      count, so it keeps every hit.

    ``positive_ids``: (B,) or (B, T); ``columns``: the CandidateSet whose ids are compared;
    ``positive_columns``, ``repeated_hits``: as :func:`accidental_hits`. Chapters 4–5.
    Defaults: ``repeated_hits="mask_all"``.
    ``repeated_hits="tensorflow"`` removes only the last copy of a repeated id, as
    TensorFlow's ``compute_accidental_hits``.
    """
    remove_accidental_hits = check_optional_bool("remove_accidental_hits", remove_accidental_hits)
    logistic = check_bool("logistic", logistic)
    check_choice("repeated_hits", repeated_hits, REPEATED_HITS)
    _check_candidate_set("columns", columns)
    _check_hit_ids(positive_ids, columns.ids)
    check_ids("positive_ids", positive_ids, None)  # the set's ids were checked when made
    if positive_columns is not None:
        check_positive_columns(
            positive_columns, positive_ids.shape[0], columns.num_candidates, "columns"
        )
    return _hits_to_remove(
        positive_ids, columns, remove_accidental_hits, positive_columns, repeated_hits, logistic
    )


def _hits_to_remove(
    positive_ids: torch.Tensor,
    columns: CandidateSet,
    remove_accidental_hits: bool | None,
    positive_columns: torch.Tensor | None,
    repeated_hits: str,
    logistic: bool,
) -> torch.Tensor | None:
    """:func:`hits_to_remove` on checked arguments."""
    if remove_accidental_hits is False:
        return None
    by_source = None
    if remove_accidental_hits is None:
        if logistic:
            return None
        by_source = columns.hit_columns()
        if by_source is None:
            return None
    hits = _accidental_hits(positive_ids, columns.ids, positive_columns, repeated_hits)
    return hits if by_source is None else hits & by_source.to(hits.device)[None, :]


def _invalid_columns(candidates: CandidateSet) -> torch.Tensor | None:
    """The columns a set marks invalid, True = remove (``~candidates.mask``), or None."""
    return None if candidates.mask is None else ~candidates.mask


def _union_masks(*masks: torch.Tensor | None) -> torch.Tensor | None:
    """True where any of the bool ``masks`` is (broadcast; None removes nothing), or None."""
    union = None
    for mask in masks:
        if mask is not None:
            union = mask if union is None else union | mask.to(union.device)
    return union


def mask_logits(
    logits: torch.Tensor, removed: torch.Tensor | None, *, inplace: bool = False
) -> torch.Tensor:
    """Step 4: ``logits`` with :func:`mask_value` where ``removed`` is True (finite, zero gradient).

    ``removed``: bool broadcastable *to* ``logits`` (never enlarging it; True = remove; a
    :class:`~candidate_sampling.CandidateSet`'s ``mask`` is the opposite, True = valid,
    so pass ``~set.mask``), or None. ``inplace=True`` overwrites ``logits``.
    """
    inplace = check_bool("inplace", inplace)
    if removed is None:
        return logits
    _check_step_logits(logits)
    _check_removed(removed, logits)
    removed = removed.to(logits.device)
    if inplace:
        return logits.masked_fill_(removed, mask_value(logits.dtype))
    return logits.masked_fill(removed, mask_value(logits.dtype))


# --------------------------------------------------------------------------- 5. criteria


def positive_column_cross_entropy(
    logits: torch.Tensor, positive_columns: int | torch.Tensor
) -> torch.Tensor:
    """Step 5, softmax: per-row cross-entropy with the positive(s) in known column(s), → (B,).

    ``ℓ_i = logsumexp_j(o_ij) − (1/T) Σ_t o_{i, c_it}``: the cross-entropy against a label
    that puts ``1/T`` on each of the row's ``T`` positive columns (TF's ``num_true``;
    ``T = 1`` is ``−log softmax(o_i)[c_i]``). ``positive_columns``: an int (the same
    column for every row: 0 in sampled softmax), (B,) (``arange(B)`` in the in-batch
    layout) or (B, T). Computed in at least float32.
    """
    check_tensor("logits", logits, ("B", "C"), floating=True)
    batch, num_cols = logits.shape
    work = upcast(logits)
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
    return _positive_column_cross_entropy(work, positive_columns)


def _positive_column_cross_entropy(
    logits: torch.Tensor, positive_columns: torch.Tensor
) -> torch.Tensor:
    """:func:`positive_column_cross_entropy` of checked arguments (a loss's own columns,
    ``arange(B)``), in at least float32."""
    work = _upcast(logits)
    cols = positive_columns.to(work.device).long()
    if cols.dim() == 1:
        return F.cross_entropy(work, cols, reduction="none")
    return torch.logsumexp(work, dim=1) - work.gather(1, cols).mean(1)


def logistic_terms(
    logits: torch.Tensor,
    labels: float | torch.Tensor,
    *,
    removed: torch.Tensor | None = None,
    inplace: bool = False,
) -> torch.Tensor:
    """Step 5, logistic: the binary cross-entropy ``softplus(o) − y·o`` of each logit.

    ``labels`` y: a float or a tensor broadcastable *to* ``logits`` (never enlarging it;
    1 for a positive, 0 for a negative, ``1/T`` for each of ``T`` positives as TF's
    ``nce_loss``). For ``y = 1`` this is ``−log σ(o)``, for ``y = 0`` ``−log(1 − σ(o))``.
    ``removed`` (bool, broadcastable to ``logits``): those terms are 0 with zero gradient;
    their logits are replaced by a finite 0 *before* the softplus, so ±inf never enters.
    Returns the elementwise terms (the caller sums a row). The one logistic term of NCE,
    negative sampling, sampled logistic and the pairwise sigmoid loss. Chapters 3 and 7.
    """
    _check_step_logits(logits)
    inplace = check_bool("inplace", inplace)
    if isinstance(labels, torch.Tensor):
        check_broadcasts_to("labels", labels, logits.shape)
    elif isinstance(labels, bool) or not isinstance(labels, (int, float)):
        raise ValueError(f"labels must be a number or a tensor, got {type(labels).__name__}")
    if removed is not None:
        _check_removed(removed, logits)
    work = upcast(logits)
    owned = inplace or work is not logits
    if removed is not None:
        removed = removed.to(work.device)
        work = work.masked_fill_(removed, 0.0) if owned else work.masked_fill(removed, 0.0)
    # softplus(o) = −log σ(−o), exact everywhere: F.softplus returns o itself above its
    # threshold (o > 20), off by e^−o with gradient 1 instead of σ(o) (open_clip's SigLIP
    # loss and every float64 reference use log σ)
    if isinstance(labels, (int, float)) and not isinstance(labels, bool):
        if labels == 1:
            terms = -F.logsigmoid(work)
        elif labels == 0:
            terms = -F.logsigmoid(-work)
        else:
            terms = -F.logsigmoid(-work) - labels * work
    else:
        terms = -F.logsigmoid(-work) - labels.to(work.dtype) * work
    if removed is not None:  # log σ keeps its input for backward, not its output
        terms = terms.masked_fill(removed, 0.0)
    return terms


# --------------------------------------------------------------------------- 6. reduction


def check_sample_weight(sample_weight: torch.Tensor | None, batch: int) -> torch.Tensor | None:
    """``sample_weight`` must be a (B,) floating tensor with finite entries ≥ 0 (value check)."""
    if sample_weight is None:
        return None
    check_tensor("sample_weight", sample_weight, (batch,), floating=True)
    if get_validate_args() and not bool(
        (torch.isfinite(sample_weight) & (sample_weight >= 0)).all()
    ):
        raise ValueError("sample_weight must be finite and >= 0")
    return sample_weight


def reduce_loss(
    per_row: torch.Tensor,
    reduction: str = "mean",
    *,
    valid: torch.Tensor | None = None,
    sample_weight: torch.Tensor | None = None,
) -> torch.Tensor:
    """Step 6: ``reduction`` of a (B,) per-row loss, weighted by ``sample_weight`` (B,).

    ``"sum"``: ``Σ w_i ℓ_i`` (TF Recommenders); ``"mean"`` (default): ``Σ w_i ℓ_i / B``,
    Keras' ``SUM_OVER_BATCH_SIZE`` (the count of rows, not ``Σ w_i``: a weight of 2 counts
    a row twice, and all-ones weights give the plain mean); ``"none"``: ``w_i ℓ_i``.
    ``valid``: optional (B,) bool, rows with a defined loss; invalid rows are 0 (also in
    ``"none"``) and ``"mean"`` divides by the number of valid rows (a graph-connected 0
    when there are none). A NaN in ``per_row`` of a valid row propagates.
    """
    check_reduction(reduction)
    check_tensor("per_row", per_row, ("B",), floating=True, allow_empty=True)
    if valid is not None:
        check_bool_mask("valid", valid, (per_row.shape[0],))
    sample_weight = check_sample_weight(sample_weight, per_row.shape[0])
    if sample_weight is not None:
        per_row = per_row * sample_weight.to(per_row.device, per_row.dtype)
    count = None
    if valid is not None:
        per_row = torch.where(valid, per_row, torch.zeros_like(per_row))
        count = valid.sum().clamp(min=1)
    if reduction == "mean":
        return per_row.mean() if count is None else per_row.sum() / count
    if reduction == "sum":
        return per_row.sum()
    return per_row


class _Loss(nn.Module):
    """Thin base of the package's loss modules: checked options, a readable ``repr``.

    Subclasses store their options as attributes listed in ``_options``; ``forward`` is a
    one-line keyword call of the matching function. A :class:`Temperature` passed as
    ``temperature`` becomes a submodule (its parameter is trained with the model).
    """

    _options: tuple[str, ...] = ("temperature", "reduction")
    #: the loss function ``forward`` calls, when the module is a plain wrapper of one
    _fn = None

    def __init__(self, *, temperature: float | Temperature, reduction: str) -> None:
        # no defaults here: each loss module states its own in its signature
        super().__init__()
        self.temperature = check_temperature(temperature)
        self.reduction = check_reduction(reduction)

    def forward(self, *inputs: torch.Tensor, sample_weight: torch.Tensor | None = None):
        """``_fn(*inputs, **options, sample_weight=sample_weight)``: the module's options
        (``_options``) passed as keywords to its loss function."""
        return self._call(*inputs, sample_weight=sample_weight)

    def _call(self, *inputs, **per_call):
        """``_fn(*inputs, **per_call, **options)``: one call of the loss function with the
        options fixed at construction; a subclass whose ``forward`` takes more per-call
        inputs (a mask, a bias) passes them as ``per_call``. Every option ``_fn`` receives
        is listed in ``_options``, so the ``repr`` shows all of them."""
        options = {name: getattr(self, name) for name in self._options}
        return type(self)._fn(*inputs, **per_call, **options)

    def extra_repr(self) -> str:
        return ", ".join(
            f"{name}={getattr(self, name)!r}"
            for name in self._options
            if not isinstance(getattr(self, name), nn.Module)
        )
