"""Cross-batch memory: a FIFO of past embeddings as extra negatives (XBM, MoCo; chapter 7).

A queue keeps the embeddings (and ids) of the last ``K`` positives and adds them to every
row's candidates, so a batch of ``B`` rows is scored against ``B + K`` candidates for the
cost of a (B, B + K) matrix and no extra encoder pass (Wang et al. 2020, XBM; He et al.
2020, MoCo, whose queue is filled by a *momentum encoder*). Three things the queue needs:

* **log Q.** The queued items are past positives, so they are a popularity sample too: an
  item ``y`` is expected ``K·p(y)`` times among ``K`` queued entries, and
  ``B·p(y) + K·p(y)`` times among the ``B + K`` candidates
  (:func:`~candidate_sampling.sampling.frequency.batch_log_q` with ``n = B + K``).
  Without the correction popular items are pushed down once per copy.
* **Accidental hits.** A popular positive has ``K·p(y)`` copies in the queue (about 20 for
  the most-watched movie of MovieLens in a queue of 4,096): left in, each is a false
  negative. The ids go with the embeddings so that the loss can mask them.
* **Staleness.** An entry was computed by the encoder of ``age`` steps ago.
  :meth:`CrossBatchMemory.ages` and :func:`embedding_drift` measure how far it is from what
  the current encoder would give; a momentum encoder (:func:`momentum_update`) makes the
  queued embeddings drift slowly enough to stay comparable.

Usage, with the package's in-batch contract (row ``i``'s positive is column ``i``)::

    positives, queued = memory.candidates_for(v, ids, item_probabilities=p)
    loss = in_batch_softmax_loss(u, positives, queued)   # two CandidateSets
    ...
    memory.enqueue(v, ids)   # after the step; stored detached
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from candidate_sampling._validate import (
    check_device,
    check_finite,
    check_module,
    check_float_dtype,
    check_ids,
    check_int_range,
    check_same,
    check_tensor,
    common_float_dtype,
    get_validate_args,
)
from candidate_sampling.candidates import CandidateSet
from candidate_sampling.sampling.frequency import batch_log_q

__all__ = [
    "CrossBatchMemory",
    "embedding_drift",
    "make_momentum_encoder",
    "momentum_update",
]

#: What the errors of :meth:`CrossBatchMemory.candidates_for` call the queued ids.
_QUEUED = "memory.ids (the queued ids)"


class CrossBatchMemory:
    """A first-in first-out queue of ``size`` embeddings with their ids and enqueue steps.

    ``size``: K, the capacity; ``dim``: d. Storage is a ring buffer of (K, d) embeddings,
    (K,) ids and (K,) steps on ``device`` in ``dtype``; :meth:`enqueue` overwrites the oldest
    entries, vectorised. Entries are stored detached: the queue carries no gradient (the
    current batch's positives, placed first by :meth:`candidates_for`, do). A half-precision
    queue (``float16`` halves the memory) refuses embeddings it cannot hold: an entry
    beyond ``finfo(dtype).max`` would be stored as ±inf, so :meth:`enqueue` raises instead
    (a value check). Chapter 7.

    pytorch-metric-learning's ``CrossBatchMemory(loss, M)`` holds the last M rows, the
    current batch's among them, and scores each row against all of them but its own slot.
    For a fixed batch size ``B < M`` that is this queue with ``size = M − B`` (the batch
    first, then the queue), exactly. It is not in general: when batch sizes vary, PML's
    past rows number ``M − B_t`` (a queue of ``size = M − B`` holds ``M − B`` past rows
    whatever ``B_t`` is); ``B = M`` is PML's memory of the batch alone (no queue at all
    here); ``B > M`` fails PML's assertion. One more difference: PML's memory, the batch's copy
    included, passes no gradient to the batch columns; here they carry one (detach the
    positives passed to :meth:`candidates_for` for PML's gradient).
    Defaults: ``dtype=torch.float32``.
    """

    def __init__(
        self,
        size: int,
        dim: int,
        *,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> None:
        check_int_range("size", size, 1)
        check_int_range("dim", dim, 1)
        check_float_dtype("dtype", dtype)
        self.size, self.dim = size, dim
        device = check_device("device", device) or torch.device("cpu")
        self._embeddings = torch.zeros(size, dim, dtype=dtype, device=device)
        self._ids = torch.zeros(size, dtype=torch.int64, device=device)
        self._steps = torch.zeros(size, dtype=torch.int64, device=device)
        self._next = 0  # slot the next entry goes to
        self._count = 0  # filled slots
        self.step = 0  # number of enqueue calls so far

    def __len__(self) -> int:
        return self._count

    @property
    def device(self) -> torch.device:
        return self._embeddings.device

    @torch.no_grad()
    def enqueue(self, embeddings: torch.Tensor, ids: torch.Tensor) -> None:
        """Append ``embeddings`` (n, d) and ``ids`` (n,), dropping the oldest when full.

        One call is one step (the entries' age counts calls). If ``n > size`` only the last
        ``size`` rows are kept.
        """
        check_tensor("embeddings", embeddings, ("n", self.dim), floating=True)
        check_tensor("ids", ids, ("n",), floating=False)
        check_same("number of rows n", embeddings=embeddings.shape[0], ids=ids.shape[0])
        check_finite("embeddings", embeddings)
        if get_validate_args():
            if ids.numel() and int(ids.min()) < 0:
                raise ValueError(f"ids must be >= 0, got {int(ids.min())}")
            largest = torch.finfo(self._embeddings.dtype).max
            if embeddings.numel() and float(embeddings.detach().abs().max()) > largest:
                raise ValueError(
                    f"embeddings must fit the queue's dtype {self._embeddings.dtype} "
                    f"(|x| <= {largest:g}), got {float(embeddings.detach().abs().max()):g}: "
                    "they would be stored as inf; use dtype=torch.float32"
                )
        self.step += 1
        embeddings, ids = embeddings[-self.size :], ids[-self.size :]
        n = embeddings.shape[0]
        slots = (self._next + torch.arange(n, device=self.device)) % self.size
        self._embeddings[slots] = embeddings.detach().to(self._embeddings)
        self._ids[slots] = ids.to(self.device, torch.int64)
        self._steps[slots] = self.step
        self._next = (self._next + n) % self.size
        self._count = min(self._count + n, self.size)

    def _order(self) -> torch.Tensor:
        """Slots of the filled entries, newest first."""
        newest = (self._next - 1 - torch.arange(self._count, device=self.device)) % self.size
        return newest

    @property
    def embeddings(self) -> torch.Tensor:
        """(K', d) queued embeddings, newest first (K' = ``len(self)`` ≤ K)."""
        return self._embeddings[self._order()]

    @property
    def ids(self) -> torch.Tensor:
        """(K',) ids of the queued embeddings, newest first."""
        return self._ids[self._order()]

    def ages(self) -> torch.Tensor:
        """(K',) steps since each entry was enqueued (1 = the last step's), newest first."""
        return self.step + 1 - self._steps[self._order()]

    def candidates_for(
        self,
        positives: torch.Tensor,
        positive_ids: torch.Tensor,
        *,
        item_probabilities: torch.Tensor | None = None,
    ) -> tuple[CandidateSet, CandidateSet]:
        """This step's candidates: the batch's positives and the queue, as two CandidateSets.

        ``positives``: (B, d), row ``i``'s positive in row ``i`` (gradients kept);
        ``positive_ids``: (B,); ``item_probabilities``: (|V|,) ``p(y)``, the probability that
        a training positive is ``y``. Returns ``(batch, queued)``: ``batch`` the B positive
        columns, ``queued`` the K' queued columns (newest first, detached, on
        ``positives``' device, in the wider of the queue's and the positives' dtypes).
        Both carry ``log Q = log((B + K')·p(y))`` — the expected count of ``y`` among
        ``B + K'`` popularity draws
        (:func:`~candidate_sampling.sampling.frequency.batch_log_q`; this assumes the queue
        holds past positives, the batch's own distribution) — or none without
        probabilities. Sources ``"batch"`` and ``"queue"``: past positives are draws from
        the same marginal, so the default hit rule keeps a queued copy of a row's positive.
        ``in_batch_softmax_loss(query, batch, queued)`` is the loss of a step with the
        queue.
        """
        check_tensor("positives", positives, ("B", self.dim), floating=True)
        check_tensor("positive_ids", positive_ids, ("B",), floating=False)
        check_same("batch size B", positives=positives.shape[0], positive_ids=positive_ids.shape[0])
        queued_ids = self.ids.to(positives.device)
        positive_ids = positive_ids.to(positives.device)
        batch_log = queue_log = None
        if item_probabilities is None:  # batch_log_q checks the ids otherwise
            check_ids("positive_ids", positive_ids, None)
        else:  # one call: the checks run once
            batch, num_draws = positives.shape[0], positives.shape[0] + len(self)
            try:
                log_q = batch_log_q(
                    torch.cat([positive_ids, queued_ids]),
                    item_probabilities,
                    num_draws=num_draws,
                    name="positive_ids",
                )
            except ValueError:  # (errors only) check each part alone, to name the culprit
                for name, ids in (("positive_ids", positive_ids), (_QUEUED, queued_ids)):
                    batch_log_q(ids, item_probabilities, num_draws=num_draws, name=name)
                raise
            batch_log, queue_log = log_q[:batch], log_q[batch:]
        # never rounded down: a float32 queue stays float32 beside float16 positives
        dtype = torch.promote_types(self._embeddings.dtype, positives.dtype)
        queued = self.embeddings.to(positives.device, dtype)
        return (
            CandidateSet(positives, positive_ids, batch_log, source="batch"),
            CandidateSet(queued, queued_ids, queue_log, source="queue"),
        )


def embedding_drift(stored: torch.Tensor, current: torch.Tensor) -> torch.Tensor:
    """Relative change of each embedding: ``‖e_stored − e_now‖ / ‖e_now‖``, (n, d) → (n,).

    ``stored``: queued embeddings; ``current``: the current encoder's embeddings of the same
    inputs. 0 means fresh; for unit vectors ``‖a − b‖ = √(2 − 2 cos)``, so 1 is a 60°
    turn. The staleness measure of chapter 7.
    """
    check_tensor("stored", stored, ("n", "d"), floating=True)
    check_tensor("current", current, ("n", "d"), floating=True)
    if stored.shape != current.shape:
        raise ValueError(
            f"stored and current must have the same shape, got {tuple(stored.shape)} and "
            f"{tuple(current.shape)}"
        )
    # in at least float32: a float16 norm overflows (|x|² beyond 65504) where the ratio is 1
    dtype = common_float_dtype(stored=stored, current=current)
    stored, current = stored.to(dtype), current.to(dtype)
    diff = (stored - current).norm(dim=1)
    return diff / current.norm(dim=1).clamp_min(torch.finfo(dtype).tiny)


def make_momentum_encoder(encoder: nn.Module) -> nn.Module:
    """A frozen deep copy of ``encoder`` to be updated by :func:`momentum_update` (MoCo's key
    encoder): same architecture and initial weights, ``requires_grad=False``."""
    if not isinstance(encoder, nn.Module):
        raise ValueError(f"encoder must be an nn.Module, got {type(encoder).__name__}")
    target = copy.deepcopy(encoder)
    for param in target.parameters():
        param.requires_grad_(False)
    return target


@torch.no_grad()
def momentum_update(target: nn.Module, source: nn.Module, *, momentum: float) -> None:
    """MoCo's update ``θ_k ← m·θ_k + (1 − m)·θ_q`` of every parameter; buffers are copied.

    ``target``: the momentum (key) encoder; ``source``: the trained (query) encoder with the
    same parameter shapes; ``momentum`` m in [0, 1] (MoCo: 0.999; 0 copies the source, 1
    freezes the target). Chapter 7.
    """
    check_module("target", target)
    check_module("source", source)
    if isinstance(momentum, bool) or not isinstance(momentum, (int, float)):
        raise ValueError(f"momentum must be a number in [0, 1], got {momentum!r}")
    if not 0.0 <= momentum <= 1.0:
        raise ValueError(f"momentum must be in [0, 1], got {momentum!r}")
    target_params = list(target.parameters())
    source_params = list(source.parameters())
    if len(target_params) != len(source_params) or any(
        t.shape != s.shape for t, s in zip(target_params, source_params)
    ):
        raise ValueError("target and source must have the same parameters (shapes and order)")
    for t, s in zip(target_params, source_params):
        t.mul_(momentum).add_(s.detach().to(t.dtype), alpha=1.0 - momentum)
    for t, s in zip(target.buffers(), source.buffers()):
        t.copy_(s)
