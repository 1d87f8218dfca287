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
   order is available too: this rank's block starts at ``offset = sum(sizes[:rank])``
   (:func:`rank_sizes`; the global index of local row ``i`` is ``offset + i``). A gather
   that *interleaves* the ranks' rows instead of concatenating them makes the labels point
   at other rows' positives; sentence-transformers shipped exactly that bug, and the tests
   include an interleaved gather to show that they catch it.
3. **Duplicates are global.** The same item can be a positive on two ranks; the gathered
   ids (the :class:`~candidate_sampling.CandidateSet`'s ``ids``) let the loss mask it as
   an accidental hit across ranks. And the log Q of a gathered candidate is its expected
   count in the *global* batch, ``N·p(y)`` (chapter 5's ``B·p`` with ``B → N``).

:func:`ring_sigmoid_loss` is SigLIP's chunked cross-device sigmoid loss: no gather, each
rank passes its candidate chunk to the next rank ``W − 1`` times; it saves only its inputs
for backward and runs the ring again there, so its memory does not grow with ``W``.
:func:`launch` starts ``W`` local processes (gloo on CPU, nccl on CUDA) and returns what
each rank's function returned; the chapter and the tests use it. Every function also
works without an initialised process group (one process: world size 1).
"""

from __future__ import annotations

import datetime
import pickle
import queue as queue_module
import socket
import time
import traceback
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from candidate_sampling._validate import (
    check_optional_bool,
    check_int_range,
    check_positive,
    check_reduction,
    check_same,
    check_tensor,
    validate_args,
)
from candidate_sampling.candidates import CandidateSet, _check_candidate_set
from candidate_sampling.losses.core import Temperature, check_temperature, reduce_loss
from candidate_sampling.losses.retrieval import in_batch_softmax_loss
from candidate_sampling.losses.sigmoid import (
    _check_bias,
    _sigmoid_pair_terms,
    sigmoid_pairwise_logits,
)
from candidate_sampling.sampling.frequency import batch_log_q

__all__ = [
    "all_gather_with_grad",
    "gather_candidates",
    "gathered_softmax_loss",
    "launch",
    "rank_and_world_size",
    "rank_sizes",
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
    if sizes is not None and (
        not isinstance(sizes, (list, tuple))
        or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in sizes)
    ):
        raise ValueError(
            f"sizes must be a list of every rank's row count (ints >= 0), got {sizes!r}"
        )
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


def rank_sizes(rows: int, *, device: torch.device | str | None = None, group=None) -> list[int]:
    """Every rank's number of rows, in rank order (one small all-gather); ``[rows]`` alone.

    This rank's block of a rank-ordered gather starts at ``sum(sizes[:rank])`` (its
    *offset*: the global index of local row ``i`` is ``offset + i``). Chapter 7.
    """
    check_int_range("rows", rows, 0)
    _, world = rank_and_world_size(group)
    if world == 1:
        return [rows]
    return _gather_sizes(rows, torch.device(device or "cpu"), group)


def _check_shared(positives: CandidateSet) -> None:
    _check_candidate_set("positives", positives)
    for name in ("log_q", "mask"):
        value = getattr(positives, name)
        if value is not None and value.dim() != 1:
            raise ValueError(
                f"positives.{name} must be shared by the batch, shape (B,), to travel to "
                f"other ranks, got {tuple(value.shape)}"
            )


def _with_log_q(
    positives: CandidateSet, item_probabilities: torch.Tensor | None, num_draws: int
) -> CandidateSet:
    """``positives`` with ``log Q = log(n·p(y))`` (:func:`batch_log_q`) when probabilities
    are given; the set's own log Q otherwise."""
    if item_probabilities is None:
        return positives
    if positives.log_q is not None:
        raise ValueError("give item_probabilities or positives.log_q, not both")
    log_q = batch_log_q(
        positives.ids, item_probabilities, num_draws=num_draws, name="positives.ids"
    )
    return CandidateSet(
        positives.embeddings, positives.ids, log_q, positives.mask, positives.bias,
        positives.source,
    )


def gather_candidates(
    positives: CandidateSet,
    *,
    item_probabilities: torch.Tensor | None = None,
    group: dist.ProcessGroup | None = None,
) -> CandidateSet:
    """Every rank's positives as one :class:`~candidate_sampling.CandidateSet`, **local first**.

    ``positives``: this rank's B columns (``CandidateSet.from_batch``: embeddings (B, d)
    with their graph, ids (B,), optionally a shared (B,) log Q, mask or bias), row ``i``'s
    positive in column ``i``. Returns the ``N = Σ_r B_r`` gathered columns, this rank's
    first, then ranks ``r+1, …, r−1``: embeddings and bias through
    :func:`all_gather_with_grad` (the gradient goes back to the rank that computed them),
    ids, log Q and mask as they are. ``item_probabilities``: (|V|,) ``p(y)``, the
    probability that a training positive is ``y``
    (:func:`~candidate_sampling.sampling.frequency.item_probabilities`); every column then
    gets ``log Q = log(N·p(y))``, its expected count among the ``N`` positives of the
    global batch (:func:`~candidate_sampling.sampling.frequency.batch_log_q`; chapter 5's
    ``B·p`` with ``B → N``). Under a softmax the factor ``N`` cancels; it matters when the
    gathered columns are mixed with other candidates (a queue, sampled extras).

    ``g.select(slice(0, B))`` is this rank's own positives (source ``"batch"``) and
    ``g.select(slice(B, None))`` the other ranks' (source ``"ranks"``: a copy of a row's
    positive there is an ordinary draw and is kept by the default hit rule), so
    ``in_batch_softmax_loss(query, own, others)`` is the global in-batch softmax for this
    rank's rows (:func:`gathered_softmax_loss`). Chapter 7.
    """
    _check_shared(positives)
    batch = positives.num_candidates
    rank, world = rank_and_world_size(group)
    sizes = rank_sizes(batch, device=positives.device, group=group)
    offset = sum(sizes[:rank])

    def gather(t: torch.Tensor | None) -> torch.Tensor | None:
        if t is None:
            return None
        if world == 1:
            return t
        carried = t.to(torch.uint8) if t.dtype == torch.bool else t
        out = _local_first(all_gather_with_grad(carried, group=group, sizes=sizes), offset)
        return out.bool() if t.dtype == torch.bool else out

    with validate_args(False):  # every rank's set was checked when it was made
        embeddings = gather(positives.embeddings)
        others = embeddings.shape[0] - batch
        gathered = CandidateSet(
            embeddings,
            gather(positives.ids),
            gather(positives.log_q),
            gather(positives.mask),
            gather(positives.bias),
            # this rank's positives, then the other ranks': draws from the same marginal
            (("batch", batch),) + ((("ranks", others),) if others else ()),
        )
    return _with_log_q(gathered, item_probabilities, sum(sizes))


def gathered_softmax_loss(
    query: torch.Tensor,
    positives: CandidateSet,
    candidates: CandidateSet | None = None,
    *,
    item_probabilities: torch.Tensor | None = None,
    temperature: float | Temperature = 1.0,
    remove_accidental_hits: bool | None = None,
    repeated_hits: str = "mask_all",
    sample_weight: torch.Tensor | None = None,
    reduction: str = "mean",
    group: dist.ProcessGroup | None = None,
) -> torch.Tensor:
    """The in-batch softmax of this rank's rows against every rank's positives.

    ``ℓ_i = −o_ii + log Σ_{j=1}^{N} exp(o_ij)``, ``o_ij = u_i·v_j / τ − log(N·p(y_j))``
    over the ``N`` gathered columns (:func:`gather_candidates`) and any local
    ``candidates`` (a queue, sampled extras) after them; accidental hits by id across
    ranks as ``remove_accidental_hits`` says (None, the default: by source, so copies of
    a row's positive on any rank are kept; True removes them). ``query``: (B, d); ``positives``: this rank's B positives as a
    CandidateSet; the other options as in
    :func:`~candidate_sampling.losses.in_batch_softmax_loss`. Reduction over this rank's
    rows; with ``"mean"``, equal ``B`` on every rank and DDP's gradient averaging, a step
    equals the single-process step on the concatenated batch. With unequal ``B_r`` the
    average of per-rank means is not the global mean: use ``reduction="sum"`` divided by
    ``N``, and sum (not average) over ranks. Chapter 7.
    Defaults: ``temperature=1.0``, ``repeated_hits="mask_all"``, ``reduction="mean"``.
    ``repeated_hits="tensorflow"`` removes only the last copy of a repeated id, as
    TensorFlow's ``compute_accidental_hits``.
    """
    # checked before the collective: a bad option fails fast, on every rank
    remove_accidental_hits = check_optional_bool("remove_accidental_hits", remove_accidental_hits)
    _check_candidate_set("candidates", candidates, optional=True)
    gathered = gather_candidates(positives, item_probabilities=item_probabilities, group=group)
    batch = positives.num_candidates
    own = gathered.select(slice(0, batch))
    extra = [gathered.select(slice(batch, None))] if len(gathered) > batch else []
    if candidates is not None:
        extra.append(candidates)
    return in_batch_softmax_loss(
        query,
        own,
        CandidateSet.concat(*extra) if extra else None,
        temperature=temperature,
        remove_accidental_hits=remove_accidental_hits,
        repeated_hits=repeated_hits,
        sample_weight=sample_weight,
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


def _ring_shift(tensor: torch.Tensor | None, group) -> torch.Tensor | None:
    """The tensor of rank r − 1 (this rank's goes to r + 1); None stays None."""
    if tensor is None:
        return None
    rank, world = rank_and_world_size(group)
    if tensor.dtype == torch.bool:  # gloo does not carry bool
        shifted = _exchange(tensor.to(torch.uint8), (rank + 1) % world, (rank - 1) % world, group)
        return shifted.bool()
    return _exchange(tensor, (rank + 1) % world, (rank - 1) % world, group)


_CHUNK_FIELDS = ("embeddings", "ids", "log_q", "mask", "bias")
_FLOAT_FIELDS = ("embeddings", "log_q", "bias")  # the fields that can carry a gradient


def _ring_shift_set(chunk: CandidateSet, group) -> CandidateSet:
    """The CandidateSet held by rank r − 1, every field passed one step along the ring."""
    with validate_args(False):  # values were checked on the rank that made the chunk
        return CandidateSet(
            *(_ring_shift(getattr(chunk, name), group) for name in _CHUNK_FIELDS), source="ranks"
        )


class _RingSigmoid(torch.autograd.Function):
    """Per-row sigmoid terms over every rank's chunk; the backward runs the ring again.

    Forward (no graph): for ``step = 0 … W−1`` score the chunk held (this rank's own at
    step 0, then rank ``r − step``'s) and add its terms; pass it on to rank ``r + 1``. Only
    the inputs are saved. Backward: the same ring, each block recomputed *with* a graph,
    differentiated at once and freed; the gradient of a received chunk is sent straight
    back to its owner (rank ``r − step``), which adds it to its own.
    """

    @staticmethod
    def forward(ctx, spec: dict, query, embeddings, log_q, col_bias, bias, *temperature_params):
        chunk = spec["make_chunk"](embeddings, log_q, col_bias)
        per_row = None
        for step in range(spec["world"]):
            if step:
                chunk = _ring_shift_set(chunk, spec["group"])
            terms = _ring_block_terms(spec, query, chunk, bias, step)
            per_row = terms if per_row is None else per_row + terms
        ctx.spec = spec  # the temperature's parameters are the module's own: not saved
        ctx.save_for_backward(query, embeddings, log_q, col_bias, bias)
        return per_row

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_rows: torch.Tensor):
        spec = ctx.spec
        query, embeddings, log_q, col_bias, bias = ctx.saved_tensors
        rank, world, group = spec["rank"], spec["world"], spec["group"]
        # gradients that stay on this rank: queries, the scalar bias, the temperature
        local = [
            query.detach().requires_grad_(query.requires_grad),
            None if bias is None else bias.detach().requires_grad_(bias.requires_grad),
            *spec["temperature_params"],
        ]
        local_grads: list[torch.Tensor | None] = [None] * len(local)
        # gradients of this rank's chunk, summed over every rank's block against it
        fields = [
            name for name, t in zip(_FLOAT_FIELDS, (embeddings, log_q, col_bias)) if t is not None
        ]
        chunk_grads: list[torch.Tensor | None] = [None] * len(fields)
        chunk = spec["make_chunk"](embeddings.detach(), log_q, col_bias)
        for step in range(world):
            if step:
                chunk = _ring_shift_set(chunk, group)
            with torch.enable_grad():
                leaves = {name: getattr(chunk, name).detach().requires_grad_() for name in fields}
                with validate_args(False):
                    block = CandidateSet(
                        leaves["embeddings"],
                        chunk.ids,
                        leaves.get("log_q"),
                        chunk.mask,
                        leaves.get("bias"),
                    )
                terms = _ring_block_terms(spec, local[0], block, local[1], step)
                inputs = [*local, *leaves.values()]
                wanted = [t for t in inputs if t is not None and t.requires_grad]
                found = iter(torch.autograd.grad(terms, wanted, grad_rows, allow_unused=True))
                grads = [next(found) if t is not None and t.requires_grad else None for t in inputs]
            local_grads = [_add(total, g) for total, g in zip(local_grads, grads)]
            for i, (leaf, g) in enumerate(zip(leaves.values(), grads[len(local) :])):
                g = torch.zeros_like(leaf) if g is None else g
                if step:  # back to the rank that computed this chunk: r − step
                    g = _exchange(g, (rank - step) % world, (rank + step) % world, group)
                chunk_grads[i] = _add(chunk_grads[i], g)
        by_field = dict(zip(fields, chunk_grads))
        grad_query, grad_bias, *grad_params = local_grads
        return (
            None,
            grad_query,
            by_field["embeddings"] if ctx.needs_input_grad[2] else None,
            by_field.get("log_q") if ctx.needs_input_grad[3] else None,
            by_field.get("bias") if ctx.needs_input_grad[4] else None,
            grad_bias,
            *grad_params,
        )


def _add(total: torch.Tensor | None, grad: torch.Tensor | None) -> torch.Tensor | None:
    if grad is None:
        return total
    return grad if total is None else total + grad


def _ring_block_terms(spec: dict, query, chunk: CandidateSet, bias, step: int) -> torch.Tensor:
    """Per-row terms of one block: this rank's queries against the chunk held at ``step``."""
    batch = query.shape[0]
    logits = sigmoid_pairwise_logits(
        query, chunk, temperature=spec["temperature"], bias=spec["bias"] if bias is None else bias
    )
    own = torch.arange(batch, device=query.device)
    removed = None
    if chunk.mask is not None:
        removed = (~chunk.mask.to(logits.device)).expand(batch, -1).clone()
        if step == 0:
            removed[own, own] = False  # the row's own positive stays
    return _sigmoid_pair_terms(  # checked arguments: no range check per step
        logits,
        spec["positive_ids"],
        chunk.ids,
        own if step == 0 else None,
        spec["remove_accidental_hits"],
        removed,
    )


def ring_sigmoid_loss(
    query: torch.Tensor,
    positives: CandidateSet,
    *,
    item_probabilities: torch.Tensor | None = None,
    temperature: float | Temperature = 1.0,
    bias: float | torch.Tensor = 0.0,
    remove_accidental_hits: bool | None = None,
    sample_weight: torch.Tensor | None = None,
    reduction: str = "mean",
    group: dist.ProcessGroup | None = None,
) -> torch.Tensor:
    """SigLIP's chunked cross-device sigmoid loss: candidate chunks travel around the ring.

    Rank ``r`` first scores its ``B`` queries against its own ``B`` positives (label 1 on
    the diagonal, :func:`~candidate_sampling.losses.sigmoid_pairwise_loss`), then
    ``W − 1`` times passes the chunk it holds (a CandidateSet: embeddings, ids, log Q,
    mask, bias) to rank ``r + 1`` and receives one from rank ``r − 1``, adding the
    negative-only terms ``Σ_j softplus(z_ij)`` of each received chunk
    (:func:`~candidate_sampling.losses.sigmoid_pair_terms`). Every row thus sums its terms
    over all ``N = W·B`` candidates.

    Memory: the forward pass keeps no graph; autograd saves only the inputs (the ``B``
    queries and this rank's chunk), whatever ``W``. The backward pass runs the ring again,
    recomputes each (B, B) block with a graph, differentiates it and frees it, and sends
    the gradient of a received chunk straight back to the rank that computed it. At any
    moment a rank holds at most two chunks (the one it scores and the one arriving), in
    the backward pass their gradients, and one block: never the (B, N) logits that an
    all-gather (:func:`gather_candidates`) keeps for its backward. The price is a second
    pass of the ring (scores and communication) in the backward.

    Same options as :func:`~candidate_sampling.losses.sigmoid_pairwise_loss` for the local
    rows; ``positives``: this rank's B positives; ``item_probabilities``: (|V|,) ``p(y)``,
    giving every column ``log Q = log(N·p)`` (the global batch's expected count; under the
    sigmoid loss the constant does *not* cancel: it shifts the bias). Every rank must hold
    the same ``B``. With ``"mean"`` and DDP's gradient averaging, a step equals
    :func:`~candidate_sampling.losses.sigmoid_pairwise_loss` on the concatenated batch.
    Gradients reach ``query``, the positives' embeddings (and their log Q and bias when
    those require grad), ``bias`` and a learnable ``temperature``; no double backward.
    Chapter 7.
    Defaults: ``temperature=1.0``, ``bias=0.0``, ``reduction="mean"``.
    """
    check_reduction(reduction)
    remove_accidental_hits = check_optional_bool("remove_accidental_hits", remove_accidental_hits)
    check_tensor("query", query, ("B", "d"), floating=True)
    _check_shared(positives)
    check_temperature(temperature)
    _check_bias(bias)
    batch = query.shape[0]
    check_same("batch size B", query=batch, positives=positives.num_candidates)
    rank, world = rank_and_world_size(group)
    sizes = rank_sizes(batch, device=query.device, group=group)
    if len(set(sizes)) != 1:
        raise ValueError(
            f"every rank must hold the same number of rows B for the ring, got sizes {sizes}"
        )
    chunk = _with_log_q(positives, item_probabilities, sum(sizes))
    ids, mask = chunk.ids, chunk.mask

    def make_chunk(embeddings, log_q, col_bias):
        with validate_args(False):
            return CandidateSet(embeddings, ids, log_q, mask, col_bias, "batch")

    temperature_params = (
        [p for p in temperature.parameters() if p.requires_grad]
        if isinstance(temperature, Temperature)
        else []
    )
    spec = {
        "rank": rank,
        "world": world,
        "group": group,
        "temperature": temperature,
        "bias": bias,
        "positive_ids": positives.ids,
        "remove_accidental_hits": remove_accidental_hits,
        "make_chunk": make_chunk,
        "temperature_params": temperature_params,
    }
    per_row = _RingSigmoid.apply(
        spec,
        query,
        chunk.embeddings,
        chunk.log_q,
        chunk.bias,
        bias if isinstance(bias, torch.Tensor) else None,
        *temperature_params,
    )
    return reduce_loss(per_row, reduction, sample_weight=sample_weight)


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
