"""Negatives from other devices: all-gather with gradients, global ids and log Q (chapter 7).

Data-parallel training splits a global batch of ``N = Σ_r B_r`` rows over ``W`` processes
(*ranks*). Each rank's in-batch softmax (chapter 5) sees only its own ``B_r`` positives;
gathering every rank's positives gives each row ``N`` candidates for the memory of ``B_r``
rows of activations. Three things must be right, and each is a known bug elsewhere:

1. **Gradients flow back to the rank that computed a candidate.** ``dist.all_gather``
   returns tensors without a graph, so the other ranks' losses would never train this
   rank's positives. :func:`all_gather_with_grad`'s backward sums, over all ranks, the
   gradient each rank's loss sends to this rank's rows (an all-reduce, then this rank's
   slice). With each rank's loss a mean over its rows and DDP averaging parameter
   gradients over ranks, one step equals the single-process step on the concatenated
   batch (``tests/test_distributed.py`` checks loss and every gradient to 1e-10 in float64).
2. **Row i's positive is still column i.** :func:`gather_candidates` returns the global
   candidates with **this rank's rows first** (a rotation of the rank order: ``r, r+1, …,
   W−1, 0, …, r−1``), so the package's in-batch contract holds unchanged and
   :func:`~candidate_sampling.losses.in_batch_softmax_loss` needs no offset. The rank
   order is available too: this rank's block starts at ``offset`` (the global positive
   index of local row ``i`` is ``offset + i``). A gather that *interleaves* the ranks'
   rows instead of concatenating them makes the labels point at other rows' positives;
   sentence-transformers shipped exactly that bug, and the tests include an interleaved
   gather to show that they catch it.
3. **Duplicates are global.** The same item can be a positive on two ranks; the gathered
   ``candidate_ids`` let the loss mask it as an accidental hit across ranks. And the
   log Q of a gathered candidate is its expected count in the *global* batch, ``N·p(y)``
   (chapter 5's ``B·p`` with ``B → N``).

:func:`ring_sigmoid_loss` is SigLIP's chunked cross-device sigmoid loss: no gather, each
rank passes its candidate chunk to the next rank ``W − 1`` times. :func:`launch` starts
``W`` local processes (gloo on CPU, nccl on CUDA) and returns what each rank's function
returned; the chapter and the tests use it. Every function also works without an
initialised process group (one process: world size 1).
"""

from __future__ import annotations

import datetime
import pickle
import queue as queue_module
import socket
import time
import traceback
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from candidate_sampling._validate import (
    check_int_range,
    check_positive,
    check_probabilities,
    check_same,
    check_tensor,
)
from candidate_sampling.sampling.frequency import mixed_log_q
from candidate_sampling.losses.core import reduce_loss
from candidate_sampling.losses.retrieval import in_batch_softmax_loss
from candidate_sampling.losses.sigmoid import (
    _pair_terms,
    _resolve_hits,
    sigmoid_pairwise_logits,
    sigmoid_pairwise_loss,
)

__all__ = [
    "GatheredCandidates",
    "all_gather_with_grad",
    "demo_gathered_step",
    "gather_candidates",
    "gathered_softmax_loss",
    "launch",
    "rank_and_world_size",
    "ring_sigmoid_loss",
]


# --------------------------------------------------------------------------- collectives


def rank_and_world_size(group: dist.ProcessGroup | None = None) -> tuple[int, int]:
    """``(rank, world_size)`` in ``group``; ``(0, 1)`` without an initialised process group."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(group), dist.get_world_size(group)
    return 0, 1


def _global_rank(group: dist.ProcessGroup | None, group_rank: int) -> int:
    return group_rank if group is None else dist.get_global_rank(group, group_rank)


def _gather_sizes(rows: int, device: torch.device, group) -> list[int]:
    """Every rank's number of rows (one small all-gather)."""
    _, world = rank_and_world_size(group)
    mine = torch.tensor([rows], dtype=torch.int64, device=device)
    sizes = [torch.zeros_like(mine) for _ in range(world)]
    dist.all_gather(sizes, mine, group=group)
    return [int(s) for s in sizes]


def _all_gather_rank_order(tensor: torch.Tensor, sizes: list[int], group) -> torch.Tensor:
    """Concatenate every rank's ``tensor`` in rank order; ranks may hold different row counts."""
    longest = max(sizes)
    padded = tensor.contiguous()
    if tensor.shape[0] < longest:
        pad = tensor.new_zeros((longest - tensor.shape[0], *tensor.shape[1:]))
        padded = torch.cat([padded, pad])
    buffers = [torch.empty_like(padded) for _ in sizes]
    dist.all_gather(buffers, padded, group=group)
    return torch.cat([buf[:n] for buf, n in zip(buffers, sizes)])


class _AllGatherWithGrad(torch.autograd.Function):
    """Forward: rank-ordered all-gather. Backward: all-reduce (sum), keep this rank's rows."""

    @staticmethod
    def forward(ctx, tensor: torch.Tensor, sizes: list[int], group) -> torch.Tensor:
        ctx.sizes, ctx.group = sizes, group
        ctx.rank = dist.get_rank(group)
        return _all_gather_rank_order(tensor, sizes, group)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        total = grad.contiguous().clone()
        dist.all_reduce(total, op=dist.ReduceOp.SUM, group=ctx.group)
        start = sum(ctx.sizes[: ctx.rank])
        return total[start : start + ctx.sizes[ctx.rank]], None, None


def all_gather_with_grad(
    tensor: torch.Tensor,
    *,
    group: dist.ProcessGroup | None = None,
    sizes: list[int] | None = None,
) -> torch.Tensor:
    """All ranks' ``tensor`` rows concatenated in rank order, with gradients: (B_r, …) → (N, …).

    The backward pass returns, to each rank, the sum over ranks of the gradient of their
    losses with respect to this rank's rows (an all-reduce of the (N, …) gradient, then
    this rank's slice), so every rank must call ``backward`` (as with DDP). Ranks may hold
    different numbers of rows (one extra small all-gather of the sizes unless ``sizes``,
    the list of every rank's row count, is given); trailing shape and dtype must agree.
    Without an initialised process group it returns ``tensor`` itself. Chapter 7.
    """
    if not isinstance(tensor, torch.Tensor) or tensor.dim() < 1:
        raise ValueError("tensor must be a torch.Tensor with at least one dimension")
    _, world = rank_and_world_size(group)
    if world == 1:
        return tensor
    if sizes is None:
        sizes = _gather_sizes(tensor.shape[0], tensor.device, group)
    if tensor.requires_grad:
        return _AllGatherWithGrad.apply(tensor, sizes, group)
    return _all_gather_rank_order(tensor, sizes, group)


def _local_first(gathered: torch.Tensor, offset: int) -> torch.Tensor:
    """Rotate rank-ordered rows so that this rank's block (starting at ``offset``) comes first."""
    return torch.roll(gathered, shifts=-offset, dims=0) if offset else gathered


# --------------------------------------------------------------------------- gathered softmax


class GatheredCandidates(NamedTuple):
    """What :func:`gather_candidates` returns.

    ``candidates``: (N, d), this rank's rows first, then ranks ``r+1, …, r−1``;
    ``candidate_ids``: (N,) or None; ``log_q``: (N,) float32 log expected count in the
    global batch, or None; ``offset``: the global (rank-order) index of this rank's first
    row; ``sizes``: every rank's row count (rank order).
    """

    candidates: torch.Tensor
    candidate_ids: torch.Tensor | None
    log_q: torch.Tensor | None
    offset: int
    sizes: list[int]


def gather_candidates(
    positives: torch.Tensor,
    *,
    positive_ids: torch.Tensor | None = None,
    positive_probs: torch.Tensor | None = None,
    group: dist.ProcessGroup | None = None,
) -> GatheredCandidates:
    """Every rank's positives as one candidate set, **local rows first**, with ids and log Q.

    ``positives``: (B, d) this rank's positives (row ``i`` is local row ``i``'s positive);
    ``positive_ids``: (B,) their ids, gathered for global accidental-hit masking;
    ``positive_probs``: (B,) ``p(y_i)``, the probability that a training positive is
    ``y_i`` (:func:`~candidate_sampling.sampling.frequency.item_probabilities`). The gathered
    ``log_q`` is ``log(N·p(y))``: the expected count of ``y`` among the ``N = Σ_r B_r``
    positives of the global batch, each a draw from ``p``
    (:func:`~candidate_sampling.sampling.frequency.mixed_log_q` with ``B = N`` and no extras). Under a
    softmax the factor ``N`` cancels; it matters when the gathered columns are mixed with
    other candidates (a queue, sampled extras), where every column must use one
    expression for ``Q`` (chapter 5).

    Row ``i`` of this rank keeps its positive in column ``i``, so
    ``in_batch_softmax_loss(query, g.candidates, candidate_ids=g.candidate_ids,
    log_q=g.log_q)`` is the global in-batch softmax for this rank's rows. Chapter 7.
    """
    check_tensor("positives", positives, ("B", "d"), floating=True)
    batch = positives.shape[0]
    if positive_ids is not None:
        check_tensor("positive_ids", positive_ids, (batch,), floating=False)
    if positive_probs is not None:
        check_tensor("positive_probs", positive_probs, (batch,), floating=True)
        check_probabilities("positive_probs", positive_probs)
    rank, world = rank_and_world_size(group)
    sizes = [batch] if world == 1 else _gather_sizes(batch, positives.device, group)
    offset = sum(sizes[:rank])
    candidates = _local_first(all_gather_with_grad(positives, group=group, sizes=sizes), offset)
    candidate_ids = log_q = None
    if positive_ids is not None:
        ids = all_gather_with_grad(positive_ids.to(positives.device), group=group, sizes=sizes)
        candidate_ids = _local_first(ids, offset)
    if positive_probs is not None:
        probs = all_gather_with_grad(
            positive_probs.detach().to(positives.device), group=group, sizes=sizes
        )
        probs = _local_first(probs, offset)
        log_q = mixed_log_q(probs, probs, batch_size=sum(sizes), num_samples=0)
    return GatheredCandidates(candidates, candidate_ids, log_q, offset, sizes)


def gathered_softmax_loss(
    query: torch.Tensor,
    positives: torch.Tensor,
    *,
    positive_ids: torch.Tensor | None = None,
    positive_probs: torch.Tensor | None = None,
    temperature: float | torch.Tensor = 1.0,
    remove_accidental_hits: bool | None = None,
    reduction: str = "mean",
    group: dist.ProcessGroup | None = None,
) -> torch.Tensor:
    """The in-batch softmax of this rank's rows against every rank's positives.

    ``ℓ_i = −o_ii + log Σ_{j=1}^{N} exp(o_ij)``, ``o_ij = u_i·v_j / τ − log(N·p(y_j))``
    over the ``N`` gathered candidates (:func:`gather_candidates`), accidental hits masked
    by id across ranks (``remove_accidental_hits=None``: when ``positive_ids`` are given).
    ``query``, ``positives``: (B, d); ``positive_ids``, ``positive_probs``: (B,).
    Reduction over this rank's rows; with ``"mean"``, equal ``B`` on every rank and DDP's
    gradient averaging, a step equals the single-process step on the concatenated batch.
    With unequal ``B_r`` the average of per-rank means is not the global mean: use
    ``reduction="sum"`` divided by ``N``, and sum (not average) over ranks. Chapter 7.
    """
    gathered = gather_candidates(
        positives, positive_ids=positive_ids, positive_probs=positive_probs, group=group
    )
    return in_batch_softmax_loss(
        query,
        gathered.candidates,
        positive_ids=positive_ids,
        candidate_ids=gathered.candidate_ids,
        log_q=gathered.log_q,
        temperature=temperature,
        remove_accidental_hits=remove_accidental_hits,
        reduction=reduction,
    )


# --------------------------------------------------------------------------- ring sigmoid


def _exchange(tensor: torch.Tensor, send_to: int, receive_from: int, group) -> torch.Tensor:
    """Send ``tensor`` to one rank while receiving a tensor of the same shape from another."""
    received = torch.empty_like(tensor)
    ops = [
        dist.P2POp(dist.isend, tensor.contiguous(), _global_rank(group, send_to), group),
        dist.P2POp(dist.irecv, received, _global_rank(group, receive_from), group),
    ]
    for request in dist.batch_isend_irecv(ops):
        request.wait()
    return received


class _RingShift(torch.autograd.Function):
    """Forward: send to rank r+1, receive from r−1. Backward: the gradient goes back, r → r−1."""

    @staticmethod
    def forward(ctx, tensor: torch.Tensor, group) -> torch.Tensor:
        rank, world = rank_and_world_size(group)
        ctx.group, ctx.rank, ctx.world = group, rank, world
        return _exchange(tensor, (rank + 1) % world, (rank - 1) % world, group)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        rank, world = ctx.rank, ctx.world
        return _exchange(grad, (rank - 1) % world, (rank + 1) % world, ctx.group), None


def _ring_shift(tensor: torch.Tensor | None, group) -> torch.Tensor | None:
    if tensor is None:
        return None
    if tensor.requires_grad:
        return _RingShift.apply(tensor, group)
    rank, world = rank_and_world_size(group)
    return _exchange(tensor, (rank + 1) % world, (rank - 1) % world, group)


def ring_sigmoid_loss(
    query: torch.Tensor,
    positives: torch.Tensor,
    *,
    temperature: float | torch.Tensor = 1.0,
    bias: float | torch.Tensor = 0.0,
    positive_ids: torch.Tensor | None = None,
    positive_probs: torch.Tensor | None = None,
    remove_accidental_hits: bool | None = None,
    reduction: str = "mean",
    group: dist.ProcessGroup | None = None,
) -> torch.Tensor:
    """SigLIP's chunked cross-device sigmoid loss: candidate chunks travel around the ring.

    Rank ``r`` first scores its ``B`` queries against its own ``B`` positives (label 1 on
    the diagonal, :func:`~candidate_sampling.losses.sigmoid.sigmoid_pairwise_loss`), then
    ``W − 1`` times passes the chunk it holds to rank ``r + 1`` and receives one from rank
    ``r − 1``, adding the negative-only terms ``Σ_j softplus(z_ij)`` of each received chunk.
    Every row thus sums its terms over all ``N = W·B`` candidates, and no rank ever holds
    more than two chunks or a (B, N) matrix. The gradient of a received chunk travels back
    along the ring to the rank that computed it.

    Same arguments as :func:`sigmoid_pairwise_loss` for the local rows; ``positive_probs``:
    (B,) ``p(y_i)``, giving every candidate ``log Q = log(N·p)`` (the global batch's expected
    count; under the sigmoid loss the constant does *not* cancel: it shifts the bias).
    Every rank must hold the same ``B``. With ``"mean"`` and DDP's gradient averaging, a
    step equals :func:`sigmoid_pairwise_loss` on the concatenated batch. Chapter 7.
    """
    check_tensor("query", query, ("B", "d"), floating=True)
    check_tensor("positives", positives, ("B", "d"), floating=True)
    check_same("batch size B", query=query.shape[0], positives=positives.shape[0])
    batch = query.shape[0]
    if positive_probs is not None:
        check_tensor("positive_probs", positive_probs, (batch,), floating=True)
        check_probabilities("positive_probs", positive_probs)
    _, world = rank_and_world_size(group)
    sizes = [batch] if world == 1 else _gather_sizes(batch, query.device, group)
    if len(set(sizes)) != 1:
        raise ValueError(
            f"every rank must hold the same number of rows B for the ring, got sizes {sizes}"
        )
    log_q = None
    if positive_probs is not None:
        probs = positive_probs.detach().to(query.device)
        log_q = mixed_log_q(probs, probs, batch_size=sum(sizes), num_samples=0)
    if world == 1:
        return sigmoid_pairwise_loss(
            query,
            positives,
            temperature=temperature,
            bias=bias,
            positive_ids=positive_ids,
            candidate_ids=positive_ids,
            log_q=log_q,
            remove_accidental_hits=remove_accidental_hits,
            reduction=reduction,
        )
    positive_ids, remove = _resolve_hits(
        batch, positive_ids, positive_ids, batch, remove_accidental_hits
    )
    chunk, chunk_ids, chunk_log_q = positives, positive_ids, log_q
    per_row = None
    for step in range(world):
        if step:
            chunk = _ring_shift(chunk, group)
            chunk_ids = _ring_shift(chunk_ids, group) if remove else None
            chunk_log_q = _ring_shift(chunk_log_q, group)
        logits = sigmoid_pairwise_logits(
            query, chunk, temperature=temperature, bias=bias, log_q=chunk_log_q
        )
        terms = _pair_terms(
            logits,
            positive_ids=positive_ids,
            candidate_ids=chunk_ids,
            has_positives=step == 0,
            remove_accidental_hits=remove,
        )
        per_row = terms if per_row is None else per_row + terms
    return reduce_loss(per_row, reduction)


# --------------------------------------------------------------------------- launching


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _run_rank(
    rank: int,
    world_size: int,
    backend: str,
    port: int,
    threads: int,
    timeout_s: float,
    fn: Callable[..., Any],
    args: tuple,
    kwargs: dict,
    results,
) -> None:
    """Body of one launched process: join the group, call ``fn``, report the result."""
    try:
        torch.set_num_threads(threads)
        if backend == "nccl":
            torch.cuda.set_device(rank % torch.cuda.device_count())
        dist.init_process_group(
            backend,
            init_method=f"tcp://127.0.0.1:{port}",
            rank=rank,
            world_size=world_size,
            timeout=datetime.timedelta(seconds=timeout_s),
        )
        try:
            value = fn(*args, **kwargs)
        finally:
            dist.destroy_process_group()
        results.put((rank, True, pickle.dumps(value)))
    except BaseException:  # noqa: BLE001 - report any failure to the parent
        results.put((rank, False, traceback.format_exc()))


def launch(
    fn: Callable[..., Any],
    *args: Any,
    world_size: int = 2,
    backend: str | None = None,
    threads_per_rank: int = 1,
    timeout_s: float = 300.0,
    **kwargs: Any,
) -> list[Any]:
    """Run ``fn(*args, **kwargs)`` in ``world_size`` new processes joined in a process group.

    Processes are started with ``torch.multiprocessing``'s *spawn* method on this machine
    (rendezvous on a free port of 127.0.0.1), so ``fn`` must be importable (a module-level
    function, not one defined in a notebook). ``backend``: ``"gloo"`` (CPU; the default
    without CUDA) or ``"nccl"`` (CUDA; needs ``world_size`` GPUs, rank ``r`` uses
    ``cuda:r``). Each process uses ``threads_per_rank`` intra-op threads. Returns the list
    of the ranks' return values (rank order; they must pickle). If a rank raises, the
    others are stopped and a ``RuntimeError`` carries the failing rank's traceback.
    """
    check_int_range("world_size", world_size, 1)
    check_int_range("threads_per_rank", threads_per_rank, 1)
    check_positive("timeout_s", timeout_s)
    if not callable(fn):
        raise ValueError(f"fn must be callable, got {type(fn).__name__}")
    if backend is None:
        backend = "nccl" if torch.cuda.is_available() and dist.is_nccl_available() else "gloo"
    if backend not in ("gloo", "nccl"):
        raise ValueError(f"backend must be 'gloo' or 'nccl', got {backend!r}")
    if backend == "nccl" and torch.cuda.device_count() < world_size:
        raise ValueError(
            f"backend 'nccl' needs world_size = {world_size} GPUs, "
            f"found {torch.cuda.device_count()}"
        )
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = _free_port()
    processes = [
        ctx.Process(
            target=_run_rank,
            args=(
                rank,
                world_size,
                backend,
                port,
                threads_per_rank,
                timeout_s,
                fn,
                args,
                kwargs,
                results,
            ),
            daemon=True,
        )
        for rank in range(world_size)
    ]
    for process in processes:
        process.start()
    values: dict[int, Any] = {}
    deadline = time.monotonic() + timeout_s + 60
    try:
        while len(values) < world_size:
            try:
                rank, ok, payload = results.get(timeout=0.5)
            except queue_module.Empty:
                dead = [
                    r for r, p in enumerate(processes) if r not in values and p.exitcode is not None
                ]
                if dead and results.empty():
                    time.sleep(0.5)  # a result may still be in flight
                    if results.empty():
                        raise RuntimeError(
                            f"rank(s) {dead} exited (codes "
                            f"{[processes[r].exitcode for r in dead]}) without a result"
                        ) from None
                if time.monotonic() > deadline:
                    raise RuntimeError(f"launch timed out after {timeout_s:.0f} s") from None
                continue
            if not ok:
                raise RuntimeError(f"rank {rank} of {world_size} failed:\n{payload}")
            values[rank] = pickle.loads(payload)
    finally:
        for process in processes:
            process.join(timeout=10)
        for process in processes:
            if process.is_alive():
                process.terminate()
                process.join(timeout=5)
    return [values[r] for r in range(world_size)]


# --------------------------------------------------------------------------- the chapter's demo


def demo_gathered_step(
    *,
    seed: int = 0,
    rows_per_rank: int = 16,
    dim: int = 8,
    num_items: int = 40,
    temperature: float = 0.5,
) -> dict[str, float]:
    """Run inside :func:`launch`: one gathered step on each rank against the one-process step.

    Every rank draws the same global batch (``W · rows_per_rank`` rows of float64 features,
    item ids from ``num_items`` with repeats, so duplicates fall on different ranks), the
    same two linear towers, and keeps its own rows. It computes
    :func:`gathered_softmax_loss` and :func:`ring_sigmoid_loss` (with ids and log Q),
    back-propagates, and averages the parameter gradients over ranks (what DDP does). It
    also computes the single-process losses on the concatenated batch. Returns, for both
    losses, the global loss (mean of the ranks' losses), the reference, and the largest
    absolute difference over the loss and every parameter gradient. Chapter 7.
    """
    rank, world = rank_and_world_size()
    gen = torch.Generator().manual_seed(seed)
    n = world * rows_per_rank
    x = torch.randn(n, dim, generator=gen, dtype=torch.float64)
    y = torch.randn(n, dim, generator=gen, dtype=torch.float64)
    ids = torch.randint(0, num_items, (n,), generator=gen)
    probs = torch.rand(num_items, generator=gen, dtype=torch.float64) + 0.5
    probs = probs / probs.sum()
    w_query = torch.randn(dim, dim, generator=gen, dtype=torch.float64) / dim
    w_item = torch.randn(dim, dim, generator=gen, dtype=torch.float64) / dim
    own = slice(rank * rows_per_rank, (rank + 1) * rows_per_rank)
    out: dict[str, float] = {"rank": rank, "world_size": world}

    def step(loss_fn, rows):
        params = [w_query.clone().requires_grad_(), w_item.clone().requires_grad_()]
        bias = torch.tensor(-1.0, dtype=torch.float64, requires_grad=True)
        loss = loss_fn(x[rows] @ params[0], y[rows] @ params[1], ids[rows], probs[ids[rows]], bias)
        loss.backward()
        return loss.detach(), [p.grad for p in params] + [bias.grad]

    def softmax_local(u, v, i, p, bias):
        return (
            gathered_softmax_loss(u, v, positive_ids=i, positive_probs=p, temperature=temperature)
            + 0 * bias
        )

    def softmax_single(u, v, i, p, bias):
        log_q = torch.log(n * p).float()
        return (
            in_batch_softmax_loss(u, v, candidate_ids=i, log_q=log_q, temperature=temperature)
            + 0 * bias
        )

    def sigmoid_local(u, v, i, p, bias):
        return ring_sigmoid_loss(
            u, v, positive_ids=i, positive_probs=p, temperature=temperature, bias=bias
        )

    def sigmoid_single(u, v, i, p, bias):
        log_q = torch.log(n * p).float()
        return sigmoid_pairwise_loss(
            u, v, candidate_ids=i, log_q=log_q, temperature=temperature, bias=bias
        )

    for name, local, single in (
        ("softmax", softmax_local, softmax_single),
        ("sigmoid", sigmoid_local, sigmoid_single),
    ):
        loss, grads = step(local, own)
        if world > 1:
            for t in [loss, *grads]:
                dist.all_reduce(t, op=dist.ReduceOp.SUM)
                t /= world  # DDP averages gradients; the global loss is the mean of the ranks'
        ref_loss, ref_grads = step(single, slice(0, n))
        diffs = [(loss - ref_loss).abs()] + [(a - b).abs().max() for a, b in zip(grads, ref_grads)]
        out[f"{name}_loss"] = float(loss)
        out[f"{name}_reference"] = float(ref_loss)
        out[f"{name}_max_abs_diff"] = float(torch.stack(diffs).max())
    return out
