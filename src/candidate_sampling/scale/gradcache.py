"""GradCache: a big batch of negatives for the memory of a small one (Gao et al. 2021; chapter 7).

An in-batch loss couples every row with every other, so it cannot be split into
independent mini-batches; gradient accumulation over chunks computes a *different* loss,
each chunk's rows seeing only that chunk's candidates. GradCache gets the exact big-batch
gradient in three steps, because the loss depends on the encoder's parameters only
through the embeddings:

1. embed the ``N`` rows in chunks of ``c`` **without** a graph (no activations kept),
   recording the random-number state before each chunk;
2. compute the loss on the ``N`` embeddings and back-propagate it **to the embeddings
   only**: ``g = ∂L/∂e``, an (N, d) tensor (the "cached gradient"), plus the gradient of
   any parameter of the loss itself (a learned temperature or bias);
3. for each chunk, restore its random-number state (so dropout draws the same masks),
   embed it again **with** a graph and call ``e_chunk.backward(g_chunk)``: by the chain rule
   ``∂L/∂θ = Σ_chunks (∂e_chunk/∂θ)^T g_chunk``, accumulated in ``.grad``.

Memory: the activations of one chunk plus the (N, d) embeddings and the loss's own
working memory. For an in-batch softmax the latter is an (N, N) logit matrix;
:func:`checkpointed_in_batch_softmax_loss` computes the same loss in row blocks that are
recomputed in the backward pass, so the step's peak memory stops growing with N². Cost:
one extra forward pass of the encoder.

Caveats: layers whose forward has side effects (BatchNorm's running statistics) see every
chunk twice; with DDP the replay of step 3 should run under ``no_sync()`` except for the
last chunk (not handled here).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from candidate_sampling._validate import (
    check_int_range,
    check_optional_bool,
    check_reduction,
)
from candidate_sampling.candidates import CandidateSet
from candidate_sampling.losses.core import Temperature, reduce_loss
from candidate_sampling.losses.retrieval import _check_in_batch, in_batch_softmax_loss

__all__ = ["GradCacheOutput", "checkpointed_in_batch_softmax_loss", "gradcache_backward"]

Batch = torch.Tensor | Sequence[torch.Tensor] | Mapping[str, torch.Tensor]


class GradCacheOutput(NamedTuple):
    """``loss``: the big-batch loss (detached); ``embeddings``: one detached (N, d) tensor per
    input, e.g. to enqueue in a :class:`~candidate_sampling.scale.memory.CrossBatchMemory`."""

    loss: torch.Tensor
    embeddings: tuple[torch.Tensor, ...]


def _tensors(batch: Batch) -> list[torch.Tensor]:
    if isinstance(batch, torch.Tensor):
        return [batch]
    if isinstance(batch, Mapping):
        return list(batch.values())
    return list(batch)


def _split(batch: Batch, chunk_size: int, name: str) -> list[Batch]:
    """Chunks of ``chunk_size`` rows of a tensor, a tuple of tensors or a dict of tensors."""
    tensors = _tensors(batch)
    if not tensors or not all(isinstance(t, torch.Tensor) and t.dim() >= 1 for t in tensors):
        raise ValueError(
            f"{name} must be a tensor, a sequence of tensors or a dict of tensors, "
            "each with a first (batch) dimension"
        )
    rows = {t.shape[0] for t in tensors}
    if len(rows) != 1:
        raise ValueError(f"{name}'s tensors must share their first dimension, got {sorted(rows)}")
    if isinstance(batch, torch.Tensor):
        return list(batch.split(chunk_size))
    if isinstance(batch, Mapping):
        parts = {k: v.split(chunk_size) for k, v in batch.items()}
        return [{k: v[i] for k, v in parts.items()} for i in range(len(next(iter(parts.values()))))]
    parts = [t.split(chunk_size) for t in batch]
    return [tuple(p[i] for p in parts) for i in range(len(parts[0]))]


def _call(encoder: Callable[..., torch.Tensor], chunk: Batch) -> torch.Tensor:
    if isinstance(chunk, torch.Tensor):
        out = encoder(chunk)
    elif isinstance(chunk, Mapping):
        out = encoder(**chunk)
    else:
        out = encoder(*chunk)
    if not isinstance(out, torch.Tensor):
        raise ValueError(f"an encoder must return a tensor, got {type(out).__name__}")
    return out


class _RngState:
    """The CPU and accelerator random-number states at one moment, to replay a forward pass."""

    def __init__(self, cuda_devices: list[torch.device], mps: bool) -> None:
        self.cpu = torch.get_rng_state()
        self.cuda_devices = cuda_devices
        self.cuda = [torch.cuda.get_rng_state(d) for d in cuda_devices]
        self.mps = torch.mps.get_rng_state() if mps else None

    @contextlib.contextmanager
    def replay(self) -> Iterator[None]:
        """Run the block from the recorded state; the global state is restored afterwards."""
        mps_now = torch.mps.get_rng_state() if self.mps is not None else None
        with torch.random.fork_rng(devices=self.cuda_devices):
            torch.set_rng_state(self.cpu)
            for device, state in zip(self.cuda_devices, self.cuda):
                torch.cuda.set_rng_state(state, device)
            if self.mps is not None:
                torch.mps.set_rng_state(self.mps)
            try:
                yield
            finally:
                if mps_now is not None:
                    torch.mps.set_rng_state(mps_now)


def _devices(encoders: Sequence[Any], inputs: Sequence[Batch]) -> tuple[list[torch.device], bool]:
    devices = {t.device for batch in inputs for t in _tensors(batch)}
    for encoder in encoders:
        if isinstance(encoder, nn.Module):
            devices |= {p.device for p in encoder.parameters()}
    cuda = sorted({d for d in devices if d.type == "cuda"}, key=str)
    cuda = [
        torch.device("cuda", d.index if d.index is not None else torch.cuda.current_device())
        for d in cuda
    ]
    return list(dict.fromkeys(cuda)), any(d.type == "mps" for d in devices)


def gradcache_backward(
    encoders: Callable[..., torch.Tensor] | Sequence[Callable[..., torch.Tensor]],
    inputs: Sequence[Batch],
    loss_fn: Callable[..., torch.Tensor],
    *,
    chunk_size: int,
    loss_kwargs: Mapping[str, Any] | None = None,
) -> GradCacheOutput:
    """Accumulate in ``.grad`` the exact gradient of ``loss_fn`` on the whole batch, in chunks.

    ``inputs``: one batch per embedding the loss takes, each a tensor (N, …), a tuple of
    tensors (passed as positional arguments) or a dict (keyword arguments), all with the same
    first dimension N; ``encoders``: one module per input (the same module may appear twice,
    e.g. for two views), or a single module used for every input; ``loss_fn(*embeddings,
    **loss_kwargs)``: any scalar loss of the (N, d) embeddings — ids, log Q or other
    batch-level tensors go in ``loss_kwargs`` or a closure; a loss module's own parameters
    (SigLIP's scale and bias) receive their gradient too.

    Steps (see the module docstring): chunked no-grad forward recording the RNG state;
    loss and ``∂L/∂e``; chunk-wise replay with the recorded RNG state and
    ``e_chunk.backward(∂L/∂e_chunk)``. The parameters' ``.grad`` then holds ``∂L/∂θ`` of the
    full batch for the dropout masks drawn in the first pass (float64: equal to a one-pass
    step to rounding). Peak memory: one chunk's activations. Returns the loss (detached)
    and the embeddings; call ``optimizer.step()`` afterwards. Chapter 7.
    """
    check_int_range("chunk_size", chunk_size, 1)
    if isinstance(inputs, (torch.Tensor, Mapping)) or not isinstance(inputs, Sequence):
        raise ValueError("inputs must be a sequence with one batch per encoder, e.g. (x,)")
    if not inputs:
        raise ValueError("inputs must hold at least one batch")
    if callable(encoders) and not isinstance(encoders, Sequence):
        encoders = [encoders] * len(inputs)
    encoders = list(encoders)
    if len(encoders) != len(inputs):
        raise ValueError(
            f"encoders and inputs must have the same length, got {len(encoders)} encoders "
            f"and {len(inputs)} inputs"
        )
    if not all(callable(e) for e in encoders):
        raise ValueError("every encoder must be callable (an nn.Module or a function)")
    chunked = [_split(batch, chunk_size, f"inputs[{k}]") for k, batch in enumerate(inputs)]
    cuda_devices, mps = _devices(encoders, inputs)
    states: list[list[_RngState]] = []
    cached: list[torch.Tensor] = []
    with torch.no_grad():
        for encoder, chunks in zip(encoders, chunked):
            outs, recorded = [], []
            for chunk in chunks:
                recorded.append(_RngState(cuda_devices, mps))
                outs.append(_call(encoder, chunk))
            states.append(recorded)
            cached.append(torch.cat(outs).detach().requires_grad_())
    loss = loss_fn(*cached, **(loss_kwargs or {}))
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        raise ValueError("loss_fn must return a scalar tensor")
    loss.backward()
    for encoder, chunks, recorded, embeddings in zip(encoders, chunked, states, cached):
        if embeddings.grad is None:
            continue  # the loss does not depend on this input
        for chunk, state, grad in zip(chunks, recorded, embeddings.grad.split(chunk_size)):
            with state.replay():
                out = _call(encoder, chunk)
            out.backward(grad)
    return GradCacheOutput(loss.detach(), tuple(e.detach() for e in cached))


def _rows(columns: CandidateSet, rows: slice) -> CandidateSet:
    """``columns`` seen by the rows ``rows`` only: per-row (B, C) log Q and mask sliced."""

    def part(t: torch.Tensor | None) -> torch.Tensor | None:
        return t[rows] if t is not None and t.dim() == 2 else t

    return CandidateSet(
        columns.embeddings, columns.ids, part(columns.log_q), part(columns.mask), columns.bias,
        columns.source,
    )


def _upcast_set(columns: CandidateSet | None) -> CandidateSet | None:
    """``columns`` with float16 / bfloat16 embeddings and bias in float32 (None: None)."""
    if columns is None or columns.embeddings.dtype not in (torch.float16, torch.bfloat16):
        return columns
    bias = None if columns.bias is None else columns.bias.float()
    return CandidateSet._unchecked(  # the source too: it sets the accidental-hit rule
        columns.embeddings.float(), columns.ids, columns.log_q, columns.mask, bias,
        columns.source,
    )


def checkpointed_in_batch_softmax_loss(
    query: torch.Tensor,
    positives: CandidateSet,
    candidates: CandidateSet | None = None,
    *,
    block_size: int,
    temperature: float | Temperature = 1.0,
    remove_accidental_hits: bool | None = None,
    sample_weight: torch.Tensor | None = None,
    reduction: str = "mean",
) -> torch.Tensor:
    """:func:`~candidate_sampling.losses.in_batch_softmax_loss`, in row blocks, recomputed.

    Same loss, arguments and contract (row ``i``'s positive is column ``i`` of
    ``positives``, which must hold exactly one column per row of ``query``); the
    (B, B + C) logits are computed for ``block_size`` rows at a time inside
    ``torch.utils.checkpoint``, so the forward keeps only each block's (b,) row losses and
    the backward recomputes one block at a time: peak memory O(block_size · (B + C))
    instead of O(B · (B + C)), for a second pass over the scores. A block's rows see the
    columns ``[their positives | the other positives | candidates]`` — the same columns,
    each with its own log Q, mask and source, in another order, which a softmax does not
    see. Accidental hits as the one-pass loss (``remove_accidental_hits=None``: by each
    column's source, the batch's copies kept); removed ids are masked in every copy
    (``repeated_hits="mask_all"``; TensorFlow's last-copy rule depends on the column order). Gradients equal the one-pass loss's to
    rounding. Chapter 7.
    Defaults: ``temperature=1.0``, ``reduction="mean"``.
    """
    check_int_range("block_size", block_size, 1)
    check_reduction(reduction)
    remove_accidental_hits = check_optional_bool("remove_accidental_hits", remove_accidental_hits)
    _check_in_batch(query, positives, candidates)  # no wrap-around: one positive per row
    positives = positives.with_source("batch")  # the in-batch contract (hit rule)
    batch = query.shape[0]
    # half-precision columns are cast once, here: every block then sends its gradient to
    # one float32 tensor, and the sum is cast back once (per block, float16 partial
    # gradients of a column could overflow separately and meet as +inf − inf)
    positives, candidates = _upcast_set(positives), _upcast_set(candidates)

    def block(start: int, q: torch.Tensor, *_tensors: torch.Tensor) -> torch.Tensor:
        rows = slice(start, start + q.shape[0])
        before, after = positives.select(slice(0, start)), positives.select(slice(rows.stop, None))
        others = [before, after] + ([candidates] if candidates is not None else [])
        return in_batch_softmax_loss(
            q,
            _rows(positives.select(rows), rows),
            _rows(CandidateSet.concat(*others), rows),
            temperature=temperature,
            remove_accidental_hits=remove_accidental_hits,
            reduction="none",
        )

    if batch <= block_size:
        per_row = block(0, query)
    else:
        # the embeddings go in as arguments so that checkpoint sees every input with a graph
        tensors = [positives.embeddings]
        if candidates is not None:
            tensors.append(candidates.embeddings)
        per_row = torch.cat(
            [
                checkpoint(block, start, q, *tensors, use_reentrant=False)
                for start, q in zip(range(0, batch, block_size), query.split(block_size))
            ]
        )
    return reduce_loss(per_row, reduction, sample_weight=sample_weight)
