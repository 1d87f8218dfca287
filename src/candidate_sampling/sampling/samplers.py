"""Candidate samplers: uniform, log-uniform (Zipfian) and unigram, with expected counts.

Every sampler draws ids from a fixed proposal distribution ``p`` over the catalogue
``[0, num_items)`` and reports, for any id, the **log expected count** of that id in the
sampled set (TensorFlow's semantics, chapter 4):

* with replacement, ``k`` independent draws: ``E(y) = k · p(y)``;
* without replacement (``unique=True``): draws are made one at a time until ``k``
  *distinct* ids have been seen, which takes ``num_tries ≥ k`` draws, and
  ``E(y) = 1 − (1 − p(y))^num_tries``, computed as ``-expm1(num_tries · log1p(-p))``.

**TF's fallback, not replicated.** TensorFlow's ``range_sampler.cc`` returns ``k · p``
instead of the formula above when no draw was rejected (``num_tries == k``). That makes
the reported value jump, and above 1 for head ids with ``k · p > 1``, although an
inclusion probability never exceeds 1. This package always uses
``1 − (1 − p)^num_tries``: the probability that ``y`` shows up in ``num_tries`` independent
draws. (It is still an approximation: ``num_tries`` is a stopping time that depends on
the draws. It is excellent while ``k`` is small against the number of ids that carry the
mass; as ``k`` approaches the number of classes it *under*-states the inclusion of the
rarest ids — with ``k = |V|`` every id is included for sure. The tests measure both
regimes.)

**Excluded ids** (``exclude=``, e.g. a padding id) have probability 0, are never drawn,
and the remaining probabilities are renormalised; their log expected count is ``-inf``.

**Draws.** All draws are vectorised on the sampler's device and reproducible through a
``torch.Generator`` on that device:

* uniform: ``torch.randint`` over the allowed ids, O(1) per draw (excluded ids are skipped
  by a rank → id map, a binary search over the few excluded ids);
* log-uniform: inverse CDF, ``floor(exp(u · log(N + 1))) − 1`` in float64, O(1) per draw;
  excluded ids are removed by rejection (redrawn);
* unigram: Walker's alias table, O(1) per draw, built in O(|V| log |V|) vectorised work
  (no Python loop over items) by the prefix-sum formulation of the *sweep* construction
  (Hübschle-Schneider & Sanders, "Parallel weighted random sampling", 2022); see
  :func:`build_alias_table`.

Unique sampling runs in vectorised *rounds*: each round draws a chunk of ids, finds the
ones that are new (first occurrence in the chunk and not seen before), and stops at the
draw that brings the number of distinct ids to ``k``, exactly as drawing one at a time
would; the chunk doubles from round to round. The uniform sampler with ``k`` a sizeable
fraction of ``|V|`` instead takes a random permutation and draws ``num_tries`` from its
exact (coupon-collector) distribution.

Chapters 2–4 explain the samplers; chapter 4 checks the expected counts by Monte Carlo.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import torch

from candidate_sampling._validate import (
    _is_compiling,
    check_bool,
    check_device,
    check_finite,
    check_generator,
    check_ids,
    check_int_range,
    check_tensor,
    get_validate_args,
)
from candidate_sampling.candidates import _check_draw
from candidate_sampling.device import exact_float64, float64_or_float32, has_float64
from candidate_sampling.sampling.frequency import _log_expected_count

__all__ = [
    "CandidateDraw",
    "CandidateSampler",
    "UniformSampler",
    "LogUniformSampler",
    "UnigramSampler",
    "build_alias_table",
]

#: Unique sampling gives up (RuntimeError) after this many raw draws.
MAX_TRIES = 200_000_000
_MAX_CHUNK = 1 << 22


def _version_of(tensor: torch.Tensor | None) -> int | None:
    """The tensor's in-place write counter (None for None, and for inference-mode tensors,
    which keep none)."""
    if tensor is None:
        return None
    try:
        return tensor._version
    except RuntimeError:
        return None


@dataclass(frozen=True)
class CandidateDraw:
    """One draw of sampled candidates, shared by a batch (TF's sampler triple).

    ``ids``: (k,) int64 sampled ids on the sampler's device (in order of first appearance
    for unique draws); ``log_q``: (k,) float32 log expected count of each sampled id
    (TF's ``sampled_expected_count``, in logs); ``positive_log_q``: the log expected count
    of the batch's positive ids under the same draw (TF's ``true_expected_count``), of
    ``positive_ids``' shape, or ``None`` when the draw was made without ``positive_ids``;
    ``num_tries``: raw draws made (``== k`` with replacement); ``unique``: whether the ids
    are distinct; ``positive_ids``: the ids ``positive_log_q`` belongs to (None without).
    Losses read these fields and never call back into the sampler;
    :meth:`check_positive_ids` is the one check that a draw belongs to a batch.
    """

    ids: torch.Tensor
    log_q: torch.Tensor
    num_tries: int
    unique: bool
    positive_log_q: torch.Tensor | None = None
    positive_ids: torch.Tensor | None = None

    def __post_init__(self) -> None:
        # a truthy "no" would read as a unique draw in the losses (RetrievalLoss's log Q)
        object.__setattr__(self, "unique", check_bool("unique", self.unique))
        # a hand-built draw is checked as a sampler's is made: ids (k,) >= 0 with a finite
        # log Q each; num_tries >= k (== k with replacement); positive_log_q shaped like
        # positive_ids, never NaN or +inf (-inf: an id the proposal cannot draw)
        check_tensor("ids", self.ids, ("k",), floating=False, allow_empty=True)
        check_ids("ids", self.ids, None)
        check_tensor("log_q", self.log_q, (self.ids.shape[0],), floating=True, allow_empty=True)
        check_finite("log_q", self.log_q)
        check_int_range("num_tries", self.num_tries, self.ids.shape[0])
        if not self.unique and self.num_tries != self.ids.shape[0]:
            raise ValueError(
                f"num_tries must equal the number of ids ({self.ids.shape[0]}) when "
                f"unique=False, got {self.num_tries}"
            )
        if self.positive_ids is not None:  # positive_log_q may be missing (checked in use)
            if not isinstance(self.positive_ids, torch.Tensor):
                raise ValueError(
                    f"positive_ids must be a tensor of ids, got {type(self.positive_ids).__name__}"
                )
            shape = tuple(self.positive_ids.shape)
            check_tensor("positive_ids", self.positive_ids, shape, floating=False, allow_empty=True)
            check_ids("positive_ids", self.positive_ids, None)
        if self.positive_log_q is not None:
            if not isinstance(self.positive_log_q, torch.Tensor):
                raise ValueError(
                    "positive_log_q must be a tensor, got "
                    f"{type(self.positive_log_q).__name__}"
                )
            shape = tuple(
                self.positive_log_q.shape if self.positive_ids is None else self.positive_ids.shape
            )
            check_tensor(
                "positive_log_q", self.positive_log_q, shape, floating=True, allow_empty=True
            )
            if get_validate_args() and bool(
                (torch.isnan(self.positive_log_q) | torch.isposinf(self.positive_log_q)).any()
            ):
                raise ValueError("positive_log_q must not be NaN or +inf")
        self._set_version()

    def _set_version(self) -> None:
        # the ids' version now: an in-place write to them later (a reused id buffer,
        # ids.copy_(next_batch)) makes positive_log_q another batch's
        object.__setattr__(self, "_positive_ids_version", _version_of(self.positive_ids))

    @classmethod
    def _unchecked(cls, **fields) -> CandidateDraw:
        """A draw a sampler made (its fields are right by construction: no checks)."""
        out = object.__new__(cls)
        for name, value in fields.items():
            object.__setattr__(out, name, value)
        out._set_version()
        return out

    def check_positive_ids(self, positive_ids: torch.Tensor) -> None:
        """Raise unless this draw was made with ``sample(..., positive_ids=positive_ids)``.

        The shape is always checked; the ids themselves (a value check) while
        :func:`candidate_sampling.get_validate_args` is on: a draw made for another batch
        would give the positives another batch's ``true_expected_count``.
        """
        if self.positive_ids is None:
            raise ValueError(
                "draw was made without positive_ids (draw.positive_log_q is None): "
                "sample with positive_ids=... to correct the positives"
            )
        got = tuple(positive_ids.shape) if isinstance(positive_ids, torch.Tensor) else None
        if got != tuple(self.positive_ids.shape):
            raise ValueError(
                f"draw was made for positive_ids of shape {tuple(self.positive_ids.shape)}, "
                f"got positive_ids of shape {got}"
            )
        if (
            positive_ids is self.positive_ids
            and not _is_compiling()  # a tensor's version counter is not traceable
            and _version_of(positive_ids) != self._positive_ids_version
        ):
            raise ValueError(
                "draw was made for positive_ids that were overwritten in place since the "
                "draw: sample again with this batch's positive_ids=..."
            )
        # the unchanged tensor the draw was made with (the usual call) needs no comparison
        # and no device sync; another tensor is compared while validation is on
        if (
            positive_ids is not self.positive_ids
            and get_validate_args()
            and not torch.equal(self.positive_ids, positive_ids.to(self.positive_ids.device))
        ):
            raise ValueError(
                "draw was made for other positive_ids: sample with this batch's "
                "positive_ids=... (its positive_log_q belongs to those ids)"
            )

    @property
    def num_samples(self) -> int:
        """k, the number of sampled ids."""
        return int(self.ids.numel())


def _as_exclude(exclude: Iterable[int] | torch.Tensor | None, num_items: int) -> torch.Tensor:
    """Sorted unique excluded ids as a CPU int64 tensor (validated)."""
    if exclude is None:
        return torch.empty(0, dtype=torch.long)
    if isinstance(exclude, int):
        exclude = [exclude]
    ex = torch.as_tensor(list(exclude) if not isinstance(exclude, torch.Tensor) else exclude)
    ex = ex.reshape(-1)
    if ex.numel() == 0:
        return torch.empty(0, dtype=torch.long)
    check_ids("exclude", ex, num_items)
    ex = torch.unique(ex.to(device="cpu", dtype=torch.long))
    if ex.numel() >= num_items:
        raise ValueError(f"exclude must leave at least one id, got all {num_items} excluded")
    return ex


class CandidateSampler:
    """Base class: a fixed proposal over ``[0, num_items)`` that draws candidate sets.

    Subclasses implement :meth:`_draw` (``m`` i.i.d. ids from the renormalised proposal)
    and :meth:`_probs_of` (per-draw probability of given ids), and set up their own state
    in :meth:`_prepare` (called at the end of ``__init__``).
    """

    def __init__(
        self,
        num_items: int,
        device: torch.device | str | None = None,
        exclude: Iterable[int] | torch.Tensor | None = None,
    ) -> None:
        check_int_range("num_items", num_items, 1)
        self.num_items = num_items
        self.device = check_device("device", device) or torch.device("cpu")
        self.exclude = _as_exclude(exclude, num_items).to(self.device)
        self.num_allowed = num_items - int(self.exclude.numel())
        self._probs: torch.Tensor | None = None
        self._prepare()

    # -- to be provided by subclasses -------------------------------------------------
    def _prepare(self) -> None:
        """A subclass's own state, built once the base attributes exist."""
    def _draw(self, m: int, generator: torch.Generator | None) -> torch.Tensor:
        raise NotImplementedError

    def _probs_of(self, ids: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    # -- public API ----------------------------------------------------------------------
    @property
    def probs(self) -> torch.Tensor:
        """(|V|,) float32 per-draw probability (0 for excluded ids), sums to 1."""
        if self._probs is None:
            ids = torch.arange(self.num_items, device=self.device)
            self._probs = self._probs_of(ids).float()
        return self._probs

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(num_items={self.num_items}, device={self.device}, "
            f"excluded={int(self.exclude.numel())})"
        )

    def _check_generator(self, generator: torch.Generator | None) -> None:
        check_generator("generator", generator, self.device)

    def sample(
        self,
        num_samples: int,
        *,
        unique: bool = False,
        generator: torch.Generator | None = None,
        positive_ids: torch.Tensor | None = None,
    ) -> CandidateDraw:
        """Draw ``num_samples`` (k) candidate ids, with or without replacement.

        ``unique=False``: k i.i.d. draws (``num_tries == k``), expected count ``k · p``.
        ``unique=True``: draw until k distinct ids (TF's semantics), expected count
        ``1 − (1 − p)^num_tries``; requires ``k ≤ |V| − |excluded|``.
        ``positive_ids`` (any shape, e.g. (B,) or (B, num_true)): also return their log
        expected count under this draw, as TF's samplers return ``true_expected_count``.
        Returns a :class:`CandidateDraw` with ``ids: (k,)`` on the sampler's device.
        """
        check_int_range("num_samples", num_samples, 1)
        unique = check_bool("unique", unique)
        self._check_generator(generator)
        if unique:
            if num_samples > self.num_allowed:
                raise ValueError(
                    f"num_samples must be <= the number of drawable items "
                    f"({self.num_allowed}) when unique=True, got {num_samples}"
                )
            ids, tries = self._sample_unique(num_samples, generator)
        else:
            ids, tries = self._draw(num_samples, generator), num_samples
        log_q = _log_expected_count(self._probs_of(ids), num_samples, tries, unique)
        positive_log_q = None
        if positive_ids is not None:
            check_ids("positive_ids", positive_ids, self.num_items)
            p = self._probs_of(positive_ids.to(self.device).long())
            positive_log_q = _log_expected_count(p, num_samples, tries, unique)
            positive_log_q = positive_log_q.to(positive_ids.device)
        return CandidateDraw._unchecked(
            ids=ids,
            log_q=log_q,
            num_tries=tries,
            unique=unique,
            positive_log_q=positive_log_q,
            positive_ids=positive_ids,
        )

    def log_q(self, ids: torch.Tensor, draw: CandidateDraw) -> torch.Tensor:
        """Log expected count of ``ids`` (any shape, true or sampled) under ``draw``.

        With replacement ``log(k · p)``; unique ``log(1 − (1 − p)^num_tries)``.
        Returns float32 of ``ids``' shape on the sampler's device; ``-inf`` for excluded ids.
        """
        check_ids("ids", ids, self.num_items)
        _check_draw(draw)
        p = self._probs_of(ids.to(self.device).long())
        return _log_expected_count(p, draw.num_samples, draw.num_tries, draw.unique)

    # -- unique sampling in vectorised rounds -------------------------------------------
    def _sample_unique(self, k: int, generator: torch.Generator | None) -> tuple[torch.Tensor, int]:
        collected = torch.empty(0, dtype=torch.long, device=self.device)
        tries = 0
        remaining = k
        chunk = max(2 * k, 64)
        while True:
            draws = self._draw(chunk, generator)
            new = _new_ids_mask(draws, collected)
            counts = torch.cumsum(new, 0)
            total_new = int(counts[-1])
            if total_new >= remaining:
                pos = int(torch.searchsorted(counts, torch.tensor([remaining], device=self.device)))
                tries += pos + 1
                collected = torch.cat([collected, draws[: pos + 1][new[: pos + 1]]])
                return collected, tries
            collected = torch.cat([collected, draws[new]])
            tries += chunk
            remaining -= total_new
            if tries > MAX_TRIES:
                raise RuntimeError(
                    f"unique sampling of {k} ids needed more than {MAX_TRIES} draws; the "
                    "proposal puts too little mass on too many ids for this num_samples"
                )
            chunk = min(2 * chunk, _MAX_CHUNK)


def _new_ids_mask(draws: torch.Tensor, seen: torch.Tensor) -> torch.Tensor:
    """Boolean mask over ``draws``: first occurrence of a value that is not in ``seen``.

    One stable sort of ``cat([seen, draws])``: within a run of equal values, ``seen``
    entries come first, so a run's first element is a draw exactly when the value is new.
    """
    values = torch.cat([seen, draws])
    sorted_values, order = torch.sort(values, stable=True)
    starts = torch.ones_like(sorted_values, dtype=torch.bool)
    starts[1:] = sorted_values[1:] != sorted_values[:-1]
    first_index = order[starts]
    first_index = first_index[first_index >= seen.numel()] - seen.numel()
    mask = torch.zeros(draws.numel(), dtype=torch.bool, device=draws.device)
    mask[first_index] = True
    return mask


class UniformSampler(CandidateSampler):
    """Uniform proposal: ``p(y) = 1 / (|V| − |excluded|)`` for every allowed id (chapters 2–4)."""

    def _prepare(self) -> None:
        # rank r among allowed ids → id r + #{excluded e : e − (its index) ≤ r}
        self._shifted_exclude = self.exclude - torch.arange(
            self.exclude.numel(), device=self.device
        )

    def _rank_to_id(self, ranks: torch.Tensor) -> torch.Tensor:
        if self.exclude.numel() == 0:
            return ranks
        return ranks + torch.searchsorted(self._shifted_exclude, ranks, right=True)

    def _draw(self, m: int, generator: torch.Generator | None) -> torch.Tensor:
        ranks = torch.randint(0, self.num_allowed, (m,), generator=generator, device=self.device)
        return self._rank_to_id(ranks)

    def _probs_of(self, ids: torch.Tensor) -> torch.Tensor:
        p = torch.full(
            ids.shape, 1.0 / self.num_allowed, dtype=float64_or_float32(self.device), device=self.device
        )
        if self.exclude.numel():
            p = p.masked_fill(torch.isin(ids, self.exclude), 0.0)
        return p

    def _sample_unique(self, k: int, generator: torch.Generator | None) -> tuple[torch.Tensor, int]:
        n = self.num_allowed
        if 4 * k <= n:
            return super()._sample_unique(k, generator)
        # A uniform random k-subset in random order; num_tries is independent of it:
        # tries = k + sum_{i=1}^{k-1} Geometric failures with failure probability i / n.
        ranks = torch.randperm(n, generator=generator, device=self.device)[:k]
        dtype = float64_or_float32(self.device)
        i = torch.arange(1, k, dtype=dtype, device=self.device)
        u = 1.0 - torch.rand(k - 1, dtype=dtype, generator=generator, device=self.device)  # (0, 1]
        failures = torch.floor(torch.log(u) / torch.log(i / n))
        tries = k + int(failures.sum())
        return self._rank_to_id(ranks), tries


class LogUniformSampler(CandidateSampler):
    """Log-uniform (Zipfian) proposal over ``[0, N)``, TF's ``log_uniform_candidate_sampler``.

    ``p(c) = log((c + 2) / (c + 1)) / log(N + 1)``, which suits ids sorted by decreasing
    frequency. Drawn in O(1) by the inverse CDF ``floor(exp(u · log(N + 1))) − 1`` with
    ``u ~ U[0, 1)`` in float64 (float32 cannot reach every tail id when N ~ 10^7; on Apple
    MPS, which lacks float64, ``u`` is drawn on the CPU from a seed taken from the device
    generator). Excluded ids are redrawn (rejection), which samples the renormalised
    proposal exactly. Chapter 3 introduces it as NCE's noise distribution.
    """

    def _prepare(self) -> None:
        self._log_range = math.log(self.num_items + 1.0)
        if self.exclude.numel():
            excluded_mass = float(self._raw_probs(self.exclude.cpu().to(torch.float64)).sum())
        else:
            excluded_mass = 0.0
        self._kept_mass = 1.0 - excluded_mass

    def _raw_probs(self, ids: torch.Tensor) -> torch.Tensor:
        return torch.log1p(1.0 / (ids + 1.0)) / self._log_range

    def _probs_of(self, ids: torch.Tensor) -> torch.Tensor:
        p = self._raw_probs(ids.to(float64_or_float32(self.device))) / self._kept_mass
        if self.exclude.numel():
            p = p.masked_fill(torch.isin(ids, self.exclude), 0.0)
        return p

    def _raw_draw(self, m: int, generator: torch.Generator | None) -> torch.Tensor:
        if has_float64(self.device):
            u = torch.rand(m, dtype=torch.float64, generator=generator, device=self.device)
            ids = torch.floor(torch.exp(u * self._log_range)).long() - 1
        else:  # MPS: no float64 on the device
            seed = int(torch.randint(0, 2**62, (1,), generator=generator, device=self.device))
            cpu = torch.Generator().manual_seed(seed)
            u = torch.rand(m, dtype=torch.float64, generator=cpu)
            ids = (torch.floor(torch.exp(u * self._log_range)).long() - 1).to(self.device)
        return ids.clamp_(0, self.num_items - 1)

    def _draw(self, m: int, generator: torch.Generator | None) -> torch.Tensor:
        if self.exclude.numel() == 0:
            return self._raw_draw(m, generator)
        parts: list[torch.Tensor] = []
        have = 0
        while have < m:
            need = m - have
            extra = int(need / max(self._kept_mass, 1e-3) * 1.1) + 16
            ids = self._raw_draw(extra, generator)
            ids = ids[~torch.isin(ids, self.exclude)]
            parts.append(ids)
            have += int(ids.numel())
        return torch.cat(parts)[:m]


def build_alias_table(weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Walker's alias table for ``p ∝ weights``, built without a loop over items.

    ``weights``: (n,) non-negative, finite, not all zero (else ``ValueError``). Returns
    ``(threshold, alias)``, both (n,): draw a bucket ``i`` uniformly and ``u ~ U[0, 1)``; the id is ``i`` if
    ``u < threshold[i]`` else ``alias[i]``. Then ``P(id = j) = (threshold[j] +
    Σ_{i: alias[i] = j} (1 − threshold[i])) / n = p_j``.

    Construction (the sweep of Hübschle-Schneider & Sanders 2022, written with prefix
    sums): scale weights to mean 1; *light* items (w < 1) need ``1 − w`` extra mass,
    *heavy* items (w ≥ 1) have ``w − 1`` to give. The sequential sweep fills light items
    in order from the current heavy item and, when a heavy item's remainder drops to
    ≤ 1, lets it become a bucket filled by the next heavy item. With ``D`` the exclusive
    prefix sums of the light deficits and ``S`` the inclusive prefix sums of the heavy
    surpluses, light item ``i`` is filled by heavy item ``searchsorted(S, D_i, right)``
    and heavy item ``j`` keeps ``1 + S_j − D_{m_j}`` of its own bucket (``m_j`` = number
    of light items with ``D < S_j``) and takes the rest from heavy item ``j + 1``.
    O(n log n) work for the searches, all vectorised; float64 on the CPU or CUDA.
    """
    if not isinstance(weights, torch.Tensor) or weights.dim() != 1 or weights.numel() == 0:
        shape = tuple(weights.shape) if isinstance(weights, torch.Tensor) else None
        raise ValueError(f"weights must be a non-empty tensor of shape (n,), got {shape}")
    if weights.dtype == torch.bool or weights.is_complex():
        raise ValueError(f"weights must be a real tensor, got {weights.dtype}")
    device = weights.device
    work_device = device if has_float64(device) else torch.device("cpu")
    w = weights.to(device=work_device, dtype=torch.float64)
    if get_validate_args():  # value checks (the switch of candidate_sampling)
        if not bool(torch.isfinite(w).all()):
            raise ValueError("weights must be finite, got NaN or infinite entries")
        if bool((w < 0).any()):
            raise ValueError(f"weights must be >= 0, got minimum {float(w.min())}")
        if float(w.sum()) <= 0:
            raise ValueError("weights must not all be zero")
    n = w.numel()
    w = w * (n / w.sum())
    # The mean is 1, so the largest weight is >= 1 mathematically; after rounding it may
    # read 0.9999999, so it is made heavy explicitly (a sweep needs one heavy item).
    is_heavy = w >= 1.0
    is_heavy[torch.argmax(w)] = True
    light = torch.nonzero(~is_heavy).squeeze(1)
    heavy = torch.nonzero(is_heavy).squeeze(1)
    threshold = torch.ones(n, dtype=torch.float64, device=work_device)
    alias = torch.arange(n, device=work_device)
    if light.numel():
        deficit = 1.0 - w[light]
        d_excl = torch.cumsum(deficit, 0) - deficit
        s_incl = torch.cumsum(w[heavy] - 1.0, 0)
        filler = torch.searchsorted(s_incl, d_excl, right=True).clamp_(max=heavy.numel() - 1)
        threshold[light] = w[light]
        alias[light] = heavy[filler]
        # heavy items: remainder kept in own bucket, topped up by the next heavy item
        d_all = torch.cat([d_excl, (d_excl[-1:] + deficit[-1:])])  # exclusive sums, + total
        m = torch.searchsorted(d_excl, s_incl, right=False)
        keep = (1.0 + s_incl - d_all[m]).clamp_(0.0, 1.0)
        keep[-1] = 1.0  # the last heavy item keeps the rest (exactly 1 up to rounding)
        threshold[heavy] = keep
        alias[heavy[:-1]] = heavy[1:]
    return threshold.to(device=device, dtype=torch.float32), alias.to(device)


class UnigramSampler(CandidateSampler):
    """Unigram proposal from counts: ``p(y) ∝ counts[y] ** distortion`` (word2vec: 0.75).

    TF's ``fixed_unigram_candidate_sampler`` defaults to ``distortion=1.0``: pass it for
    TF's default. ``counts``: (|V|,) finite counts, > 0 at every id not in ``exclude``
    (add one to unseen ids, or exclude them: an excluded id's count may be 0).
    Drawn in O(1) per sample from a Walker alias table (:func:`build_alias_table`),
    built once in O(|V| log |V|) vectorised float64 work. Chapters 2–4.
    """

    def __init__(
        self,
        counts: torch.Tensor,
        distortion: float = 0.75,
        device: torch.device | str | None = None,
        exclude: Iterable[int] | torch.Tensor | None = None,
    ) -> None:
        counts = torch.as_tensor(counts)
        if counts.dim() != 1 or counts.numel() == 0:
            raise ValueError(
                f"counts must have shape (|V|,) and not be empty, got {tuple(counts.shape)}"
            )
        if counts.dtype == torch.bool or counts.is_complex():
            raise ValueError(f"counts must be a real tensor, got {counts.dtype}")
        c64 = exact_float64(counts.detach())  # on the CPU where the device has no float64
        if get_validate_args() and not bool(torch.isfinite(c64).all()):
            raise ValueError("counts must be finite, got NaN or infinite entries")
        if isinstance(distortion, bool) or not isinstance(distortion, (int, float)):
            raise ValueError(f"distortion must be a number, got {type(distortion).__name__}")
        if not math.isfinite(distortion) or distortion < 0:
            raise ValueError(f"distortion must be >= 0 and finite, got {distortion!r}")
        super().__init__(counts.numel(), device, exclude)
        if get_validate_args():  # an excluded id is never drawn: its count may be 0
            drawn = torch.ones(c64.shape[0], dtype=torch.bool, device=c64.device)
            drawn[self.exclude.to(c64.device)] = False
            if not bool((c64[drawn] > 0).all()):
                raise ValueError(
                    "counts must be > 0 (add a pseudo-count or exclude the id), "
                    f"got minimum {float(c64[drawn].min())} at an id not excluded"
                )
        self.distortion = float(distortion)
        weights = (
            c64.to(self.device if has_float64(self.device) else "cpu") ** self.distortion
        )
        if self.exclude.numel():
            weights[self.exclude.to(weights.device)] = 0.0
        total = weights.sum()
        if get_validate_args() and (not bool(torch.isfinite(total)) or float(total) <= 0):
            raise ValueError("counts ** distortion must have a finite positive sum")
        self._p = (weights / total).to(device=self.device, dtype=float64_or_float32(self.device))
        self._threshold, self._alias = build_alias_table(weights)
        self._threshold = self._threshold.to(self.device)
        self._alias = self._alias.to(self.device)

    def _probs_of(self, ids: torch.Tensor) -> torch.Tensor:
        return self._p[ids]

    def _draw(self, m: int, generator: torch.Generator | None) -> torch.Tensor:
        bucket = torch.randint(0, self.num_items, (m,), generator=generator, device=self.device)
        u = torch.rand(m, generator=generator, device=self.device)
        return torch.where(u < self._threshold[bucket], bucket, self._alias[bucket])
