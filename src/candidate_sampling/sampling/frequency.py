"""Item frequencies for the logQ correction of in-batch and mixed negatives (chapter 5).

An in-batch softmax uses the other rows' positives as negatives, so an item is a
candidate with a probability that grows with its popularity. The correction subtracts
``log Q(y)`` from every candidate's logit (see the notation page:
``logit = s / τ − log Q``). This module gives three estimates of ``Q``:

* :func:`item_counts` / :func:`item_probabilities` — exact counts over a training set,
  ``p(y) = count(y) / N``: the per-draw probability of ``y`` as a batch positive.
* :func:`inclusion_probability` — ``1 − (1 − p)^n``: the probability that ``y`` is among
  ``n`` draws with replacement (``n = B`` for the positives of a batch); the formula
  lives here only, the samplers call it.
* :func:`log_expected_count` — ``log(k·p)`` or ``log(1 − (1 − p)^tries)``: the log Q of a
  sampler's draw (chapter 4), and :func:`batch_log_q` — ``log(n·p(y))`` of columns that
  are past or present training positives (a batch, a queue, every rank's batch).
* :func:`mixed_log_q` — ``log Q*`` for mixed negatives (batch positives plus ``B'``
  sampled extras), three readings of it.
* :class:`StreamingFrequencyEstimator` — Yi et al. (2019), Algorithm 2: estimate each
  item's probability of appearing in a batch from the stream of batches alone, with
  hashed arrays of fixed size, adapting when popularity drifts
  (:meth:`~StreamingFrequencyEstimator.log_inclusion`).

This module is the one place where log Q is computed: the samplers, ``CandidateSet``'s
constructors and every source in :mod:`candidate_sampling.scale` call these functions.

Vocabulary: ``log_q`` is always the log *expected count* of a candidate in the candidate
set; ``log_inclusion`` is the log probability that it is in the set at all. The two agree
for rare items (``n·p ≪ 1``) and part for popular ones.
"""

from __future__ import annotations

import torch

from candidate_sampling._validate import (
    check_bool,
    check_choice,
    check_device,
    check_finite,
    check_ids,
    check_int_range,
    check_positive,
    check_probabilities,
    check_real_tensor,
    check_tensor,
    get_validate_args,
)
from candidate_sampling.device import exact_float64, float64_or_float32
from candidate_sampling.sampling.hashing import (
    MERSENNE_PRIME,
    _hash_unchecked,
    draw_hash_parameters,
)

__all__ = [
    "MIXED_Q_FORMS",
    "StreamingFrequencyEstimator",
    "batch_log_q",
    "log_expected_count",
    "inclusion_probability",
    "item_counts",
    "item_probabilities",
    "mixed_log_q",
]


def item_counts(ids: torch.Tensor, num_items: int) -> torch.Tensor:
    """Exact occurrence counts: ``(num_items,)`` int64, ``counts[y] = #{i : ids[i] = y}``.

    ``ids``: any shape of integer ids in ``[0, num_items)``. Chapter 5.
    """
    check_int_range("num_items", num_items, 1)
    check_ids("ids", ids, num_items)
    return torch.bincount(ids.reshape(-1), minlength=num_items)


def item_probabilities(counts: torch.Tensor) -> torch.Tensor:
    """Unigram probabilities ``p(y) = counts[y] / Σ counts`` as float32, shape ``(|V|,)``.

    ``counts``: (|V|,) non-negative counts (int or float) with a positive sum. Chapter 5.
    """
    check_real_tensor("counts", counts, ("V",))
    device = counts.device
    counts = exact_float64(counts)  # on the CPU where the device has no float64 (MPS)
    check_finite("counts", counts)
    total = counts.sum()
    if get_validate_args():
        if bool((counts < 0).any()):
            raise ValueError("counts must be non-negative")
        if float(total) <= 0:
            raise ValueError("counts must have a positive sum")
    return (counts / total).to(device=device, dtype=torch.float32)


def inclusion_probability(probs: torch.Tensor, num_draws: int) -> torch.Tensor:
    """Probability that an item is among ``n`` independent draws: ``1 − (1 − p)^n``.

    Computed as ``−expm1(n · log1p(−p))`` so that it stays accurate for tiny ``p``
    (where it is ≈ ``n·p``, the expected count) and saturates at 1 for popular items.
    This is the one place the formula lives: the unique samplers' expected counts, the
    in-batch inclusion probability (``n = B``) and :func:`mixed_log_q`'s ``"inclusion"``
    form all call it. ``probs``: any shape, values in [0, 1]; returns the same shape and
    dtype (float64 inputs stay float64). Chapters 4 and 5.
    """
    check_int_range("num_draws", num_draws, 0)
    check_probabilities("probs", probs)
    return _inclusion(probs, num_draws)


def _inclusion(probs: torch.Tensor, num_draws: int) -> torch.Tensor:
    """``1 − (1 − p)^n`` of :func:`inclusion_probability`, arguments already checked."""
    if num_draws == 0:  # no draws, nothing included (0 · log1p(−1) would be NaN at p = 1)
        return torch.zeros_like(probs)
    return -torch.expm1(num_draws * torch.log1p(-probs))


def log_expected_count(
    probs: torch.Tensor, *, num_samples: int, num_tries: int, unique: bool
) -> torch.Tensor:
    """Log expected count of ids with per-draw probability ``probs`` in a draw (chapter 4).

    ``unique=False``: ``log(k · p)`` with ``k = num_samples`` (``num_tries`` must equal it);
    ``unique=True``: ``log(1 − (1 − p)^num_tries)``
    (:func:`~candidate_sampling.sampling.frequency.inclusion_probability`), ``num_tries ≥ k``.
    ``probs``: any shape, in [0, 1] → float32 of the same shape (``-inf`` where ``p = 0``).
    The samplers' :class:`~candidate_sampling.sampling.samplers.CandidateDraw` log Q and
    :func:`batch_log_q` both come from here.
    """
    check_int_range("num_samples", num_samples, 1)
    check_int_range("num_tries", num_tries, num_samples)
    unique = check_bool("unique", unique)
    if not unique and num_tries != num_samples:
        raise ValueError(
            f"num_tries must equal num_samples ({num_samples}) when unique=False, got {num_tries}"
        )
    check_probabilities("probs", probs)
    return _log_expected_count(probs, num_samples, num_tries, unique)


def _log_expected_count(probs: torch.Tensor, k: int, tries: int, unique: bool) -> torch.Tensor:
    """The formula of :func:`log_expected_count`, arguments already checked."""
    # float64 where the device has it (not MPS): log(k·p) of tiny p stays exact
    work = probs.to(float64_or_float32(probs.device))
    if unique:
        return torch.log(_inclusion(work, tries)).float()
    return torch.log(k * work).float()


def batch_log_q(
    ids: torch.Tensor, item_probabilities: torch.Tensor, *, num_draws: int, name: str = "ids"
) -> torch.Tensor:
    """log Q of columns that are training positives: ``log(n · p(y))`` for each id.

    The in-batch columns of a batch, the entries of a queue of past positives and the
    positives gathered from every rank are all draws from ``p``, the probability that a
    training positive is ``y`` (:func:`item_probabilities`); among ``n = num_draws`` such
    draws (B for a batch, ``B + K'`` for a batch with a queue of ``K'``, ``N = Σ_r B_r``
    across ranks) the expected count of ``y`` is ``n·p(y)`` (:func:`log_expected_count`
    with replacement). ``ids``: any shape of ids in ``[0, |V|)`` (checked: a negative id
    would wrap around to the last item's probability); ``item_probabilities``: (|V|,) in
    [0, 1]; ``name``: what the errors call ``ids``. Returns float32 of ``ids``' shape on
    ``ids``' device. Chapters 5 and 7.
    """
    check_tensor("item_probabilities", item_probabilities, ("|V|",), floating=True)
    check_probabilities("item_probabilities", item_probabilities)
    check_ids(name, ids, item_probabilities.shape[0])
    check_int_range("num_draws", num_draws, 1)
    p = item_probabilities[ids.to(item_probabilities.device).long()]
    if get_validate_args() and bool((p == 0).any()):
        bad = int(ids.reshape(-1)[(p == 0).reshape(-1).to(ids.device)][0])
        raise ValueError(
            f"item_probabilities must be > 0 for every id of {name}, got 0 for id {bad} "
            "(log Q would be -inf: an item the training positives never hold)"
        )
    return _log_expected_count(p, num_draws, num_draws, False).to(ids.device)


MIXED_Q_FORMS = ("expected_count", "mixture", "inclusion")


def mixed_log_q(
    batch_probs: torch.Tensor,
    extra_probs: torch.Tensor,
    *,
    batch_size: int,
    num_samples: int,
    form: str = "expected_count",
) -> torch.Tensor:
    """``log Q*(y)`` of a candidate under mixed negatives, for three readings of Yang et al.

    ``batch_probs`` ``q(y)``: the probability that one batch positive is ``y`` (the unigram
    frequency of ``y`` as a training positive); ``extra_probs`` ``r(y)``: the extra
    sampler's per-draw probability (``1/|V|`` for uniform). Same shape, any shape.
    ``batch_size`` = B, ``num_samples`` = B' extra negatives.

    * ``"expected_count"``: ``Q* = B·q + B'·r`` — the expected number of columns holding
      ``y``: log Q in the package's (and TF's) sense, the default.
    * ``"mixture"``: ``Q* = (B·q + B'·r) / (B + B')`` — the per-column probability of the
      mixture: the expected count over the constant ``B + B'``, so under a softmax it
      gives *exactly* the same loss, provided every column uses it.
    * ``"inclusion"``: ``Q* = 1 − (1 − q)^B (1 − r)^{B'}`` — the probability that ``y`` is
      among the candidates at least once. It equals the expected count for rare items and
      saturates at 1 for popular ones, so it corrects popular items less.

    Returns float32 ``log Q*`` of the inputs' shape; raises if some ``Q* = 0`` (an item
    neither source can draw). Chapter 5.
    """
    check_choice("form", form, MIXED_Q_FORMS)
    check_int_range("batch_size", batch_size, 1)
    check_int_range("num_samples", num_samples, 0)
    check_probabilities("batch_probs", batch_probs)
    check_probabilities("extra_probs", extra_probs)
    if batch_probs.shape != extra_probs.shape:
        raise ValueError(
            f"batch_probs and extra_probs must have the same shape, got "
            f"{tuple(batch_probs.shape)} and {tuple(extra_probs.shape)}"
        )
    device = batch_probs.device
    q = exact_float64(batch_probs)  # on the CPU where the device has no float64 (MPS)
    r = exact_float64(extra_probs).to(q.device)
    if form == "inclusion":
        log_missed = batch_size * torch.log1p(-q)
        if num_samples:  # B' = 0 draws miss surely (0 · log1p(−1) would be NaN at r = 1)
            log_missed = log_missed + num_samples * torch.log1p(-r)
        value = -torch.expm1(log_missed)
    else:
        value = batch_size * q + num_samples * r
        if form == "mixture":
            value = value / (batch_size + num_samples)
    if get_validate_args() and value.numel() and bool((value <= 0).any()):
        raise ValueError(
            "Q* must be > 0 for every candidate: an item with q = r = 0 cannot be drawn"
        )
    return torch.log(value).to(device=device, dtype=torch.float32)


class StreamingFrequencyEstimator:
    """Yi et al. (2019), Algorithm 2: streaming estimate of how often each item is in a batch.

    State: for each of ``num_hashes`` hash functions ``h_m``, two arrays of size
    ``num_buckets`` (``H``): ``A[m, b]`` the last step at which bucket ``b`` was seen and
    ``B[m, b]`` the estimated number of steps between two sightings. At step ``t``
    (``update`` increments ``t`` first, starting from 1), for every bucket ``b = h_m(y)``
    of an item ``y`` of the batch::

        B[m, b] ← (1 − η) · B[m, b] + η · (t − A[m, b])
        A[m, b] ← t

    and the estimate is ``p̂(y) = 1 / max_m B[m, h_m(y)]`` — the probability that ``y``
    appears in a batch. Hash collisions only ever shorten a bucket's gaps, so the maximum
    over hash functions is the least-collided (least over-estimated) reading.

    Semantics we chose (the paper leaves them open):

    * **Duplicates within a batch count once.** A bucket is updated at most once per
      step, however many rows of the batch hash to it. The estimate therefore targets
      the *batch inclusion probability* ``1 − (1 − p)^B``, not the expected count
      ``B·p``; updating once per occurrence would add gaps of length 0 and drive ``B``
      towards 0 for popular items.
    * **Initialisation.** ``warm_start=True`` (default) sets ``B`` to the first gap
      ``t − 0`` the first time a bucket is seen: the time to an item's first sighting is
      geometric with mean ``1/p``, so this is an unbiased first reading. The paper's
      zero initialisation (``warm_start=False``) starts ``B`` at ``η·t`` and needs about
      ``1/η`` sightings to forget it, over-estimating ``p̂`` meanwhile.
    * A bucket never seen in ``t`` steps reports ``p̂ = 1/(t + 1)`` (no sighting yet, so
      the gap is longer than ``t``); ``B`` is clamped to at least one step, so ``p̂ <= 1``.

    ``learning_rate``: η in (0, 1] (the paper's α); ``num_buckets``: H per hash function (the
    memory is ``2 · num_hashes · H`` numbers); ``seed``: draws the hash functions.
    With ``num_hashes=1`` and ``num_buckets >= num_items`` use ``hash_ids=False`` to index
    by id directly (no collisions). Chapter 5.
    Defaults: ``learning_rate=0.01``, ``hash_ids=True``, ``seed=0``.
    """

    def __init__(
        self,
        num_buckets: int,
        *,
        learning_rate: float = 0.01,
        num_hashes: int = 1,
        hash_ids: bool = True,
        warm_start: bool = True,
        seed: int = 0,
        device: torch.device | str | None = None,
    ) -> None:
        check_int_range("num_buckets", num_buckets, 1)
        check_int_range("num_hashes", num_hashes, 1)
        check_positive("learning_rate", learning_rate)
        if learning_rate > 1:
            raise ValueError(f"learning_rate must be in (0, 1], got {learning_rate!r}")
        hash_ids = check_bool("hash_ids", hash_ids)
        warm_start = check_bool("warm_start", warm_start)
        if not hash_ids and num_hashes != 1:
            raise ValueError(f"num_hashes must be 1 when hash_ids=False, got {num_hashes}")
        self.num_buckets = num_buckets
        self.num_hashes = num_hashes
        self.learning_rate = float(learning_rate)
        self.hash_ids = hash_ids
        self.warm_start = warm_start
        self.device = check_device("device", device) or torch.device("cpu")
        self.hash_params = draw_hash_parameters(num_hashes, seed).to(self.device)
        # float64 where the device has it; on MPS float32, exact for steps below 2^24
        dtype = float64_or_float32(self.device)
        self.last_seen = torch.zeros(num_hashes, num_buckets, dtype=dtype, device=self.device)
        self.gap = torch.zeros(num_hashes, num_buckets, dtype=dtype, device=self.device)
        self.step = 0

    def buckets(self, ids: torch.Tensor) -> torch.Tensor:
        """``(*ids.shape, num_hashes)`` bucket indices of ``ids``: ids in ``[0, num_buckets)``
        with ``hash_ids=False``, else in the hash's range ``[0, 2^31 − 1)``."""
        ids = check_ids("ids", ids, MERSENNE_PRIME if self.hash_ids else self.num_buckets)
        ids = ids.to(self.device)
        if not self.hash_ids:
            return ids.to(torch.int64).unsqueeze(-1)
        return _hash_unchecked(ids, self.hash_params, self.num_buckets)

    @torch.no_grad()
    def update(self, ids: torch.Tensor) -> None:
        """Advance one step with the batch's item ``ids`` (any shape): Algorithm 2's update."""
        buckets = self.buckets(ids).reshape(-1, self.num_hashes)  # (n, M); checks ids
        self.step += 1
        t = float(self.step)
        # flat index m * H + b, each bucket once per step
        flat = buckets + torch.arange(self.num_hashes, device=self.device) * self.num_buckets
        flat = torch.unique(flat.reshape(-1))
        gap = self.gap.view(-1)
        last = self.last_seen.view(-1)
        observed = t - last[flat]
        new_gap = (1 - self.learning_rate) * gap[flat] + self.learning_rate * observed
        if self.warm_start:
            new_gap = torch.where(last[flat] == 0, observed, new_gap)
        gap[flat] = new_gap
        last[flat] = t

    @torch.no_grad()
    def estimate(self, ids: torch.Tensor) -> torch.Tensor:
        """``p̂(y) = 1 / max_m B[m, h_m(y)]``: estimated probability that ``y`` is in a batch.

        ``ids``: any shape → float32 of the same shape, in (0, 1].
        """
        buckets = self.buckets(ids)
        rows = torch.arange(self.num_hashes, device=self.device)
        gaps = self.gap[rows, buckets]
        unseen = self.last_seen[rows, buckets] == 0
        gaps = torch.where(unseen, torch.full_like(gaps, self.step + 1.0), gaps)
        return (1.0 / gaps.max(dim=-1).values.clamp_min(1.0)).to(torch.float32)

    def log_inclusion(self, ids: torch.Tensor) -> torch.Tensor:
        """``log p̂(y)``: the log probability that ``y`` is in a batch (not an expected count).

        For items with ``B·p ≪ 1`` it equals the log expected count ``log(B·p)`` and can
        be passed as ``log_q``; for popular items it saturates at 0 and corrects them too
        little (chapter 5 measures how much).
        """
        return torch.log(self.estimate(ids))
