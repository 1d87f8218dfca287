"""The exact full-softmax cross-entropy in chunks: never the (N, |V|) logits (chapter 10).

``chunked_softmax_cross_entropy(query, classes, positive_ids, *, ...)`` is the full
softmax of chapter 1 over a class-embedding table, computed the way large-vocabulary
language models compute it (Cut Cross-Entropy, Liger's fused linear cross-entropy,
torch's ``F.linear_cross_entropy``): the logits

    o_ij = q_i · c_j / τ + b_j

exist one block at a time, so the loss needs memory for one block, not for N × |V|.
Two ways to cut the logit matrix into blocks:

* ``method="vocab"`` — blocks of ``chunk_size`` classes (columns). The forward
  accumulates each row's log-sum-exp over the blocks with an online max and sum (float32
  or better, as flash attention does) and keeps only (N,) numbers; the backward
  recomputes each block's logits and turns them into gradients block by block (a custom
  :class:`torch.autograd.Function`). Memory: one (N, chunk_size) block, whatever |V| is.
  Cost: the score matmul twice (forward and backward) plus the two gradient matmuls.
* ``method="rows"`` — blocks of ``chunk_size`` rows against the whole vocabulary
  (torch's approach). Each block's softmax is finished at once, so its gradients are
  computed *inside the forward* and only scaled in the backward: three matmuls, not four,
  but a (chunk_size, |V|) block and the (|V|, d) class gradient are held from the forward
  to the backward, and only the ``"mean"`` / ``"sum"`` reductions are possible.
* ``method="auto"`` picks between them (see :func:`chunked_softmax_cross_entropy`).

Chunking saves memory, not arithmetic: every matmul of either method does the full
softmax's ``N |V| d`` multiply-adds, three of them ("rows") or four ("vocab").
"""

from __future__ import annotations

import torch

from candidate_sampling._validate import (
    check_bool,
    check_choice,
    check_int_range,
    check_positive,
    check_reduction,
    check_same,
    check_tensor,
    common_float_dtype,
    _is_compiling,
    get_validate_args,
)
from candidate_sampling.losses.core import (
    Temperature,
    _check_scale_range,
    _Loss,
    check_sample_weight,
)

__all__ = [
    "chunked_softmax_cross_entropy",
    "ChunkedSoftmaxCrossEntropy",
    "default_chunk_size",
    "resolve_method",
]

METHODS = ("auto", "vocab", "rows")

# The block of logits a chunk holds is what ``memory_budget`` bounds (bytes; default
# 2**28 = 256 MiB). Within it the block is chosen by speed, measured on a 2-core CPU
# (benchmarks/chunked.py, N = 1,024 and 8,192, |V| = 1e4 and 1e5, d = 64): the row form
# is fastest at about 256 rows per block (fewer rows stream the class table more often,
# many more leave the block far outside the caches), so it takes 256 rows when the budget
# holds them (at |V| = 1e5 a 98 MiB block); vocabulary blocks of 256 to 8,192 classes at
# N = 1,024 are within noise of each other, so they stay near 2**21 logits (8 MiB).
DEFAULT_MEMORY_BUDGET = 2**28
_ROWS_TARGET = 256
_MIN_ROWS = 64
_VOCAB_BLOCK_ELEMENTS = 2**21


def default_chunk_size(
    num_rows: int,
    num_classes: int,
    method: str = "vocab",
    *,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
    element_size: int = 4,
) -> int:
    """The chunk length ``chunk_size=None`` stands for, within ``memory_budget`` bytes.

    ``"rows"``: rows per block, ``min(num_rows, 256, memory_budget // (num_classes ·
    element_size))`` (256 rows is the measured fastest block; fewer where the budget
    says so); ``"vocab"``: classes per block, ``2**21 // num_rows`` clamped to [128,
    num_classes] (a block of about 2**21 logits, 8 MiB in float32), then cut to
    ``memory_budget // (num_rows · element_size)``. Either way the block's bytes,
    ``chunk · (num_classes or num_rows) · element_size``, never exceed ``memory_budget``.
    ``num_rows``, ``num_classes``: ints >= 0 and >= 1 (0 rows: a block of one);
    ``element_size``: bytes per logit (4 for float32, 8 for float64).
    Raises ValueError when the budget cannot hold one row (``"rows"``) or one class
    (``"vocab"``).
    Defaults: ``method="vocab"``, ``memory_budget=268435456`` (2**28 bytes, 256 MiB),
    ``element_size=4``.
    """
    check_int_range("num_rows", num_rows, 0)
    check_int_range("num_classes", num_classes, 1)
    check_choice("method", method, ("vocab", "rows"))
    check_int_range("memory_budget", memory_budget, 1)
    check_int_range("element_size", element_size, 1)
    _check_budget(num_rows, num_classes, method, memory_budget, element_size)
    return _default_chunk_size(num_rows, num_classes, method, memory_budget // element_size)


def _check_budget(num_rows, num_classes, method, memory_budget, element_size) -> None:
    """ValueError naming ``memory_budget`` when it cannot hold the smallest block."""
    smallest = (num_classes if method == "rows" else max(num_rows, 1)) * element_size
    if memory_budget < smallest:
        raise ValueError(
            "memory_budget must hold one "
            + ("row of |V|" if method == "rows" else "class column of N")
            + f" logits ({smallest} bytes), got {memory_budget}"
        )


def _default_chunk_size(
    num_rows: int, num_classes: int, method: str, logits: int = DEFAULT_MEMORY_BUDGET // 4
) -> int:
    """:func:`default_chunk_size` of checked arguments; ``logits``: how many the memory
    budget holds (``memory_budget // element_size``)."""
    if method == "rows":
        return max(1, min(num_rows, _ROWS_TARGET, logits // num_classes))
    rows = max(num_rows, 1)
    return max(1, min(num_classes, max(128, _VOCAB_BLOCK_ELEMENTS // rows), logits // rows))


def resolve_method(
    num_rows: int,
    num_classes: int,
    *,
    reduction: str = "mean",
    half: bool = False,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
    element_size: int = 4,
) -> str:
    """What ``method="auto"`` runs: ``"rows"`` or ``"vocab"``.

    ``"rows"`` (three matmuls and one fused softmax per block; faster than ``"vocab"``,
    which recomputes the scores) when the reduction is ``"mean"`` or ``"sum"``, the class
    table is not half precision (the row form would hold a float32 copy of it) and
    ``memory_budget`` holds a block of ``min(num_rows, 64)`` rows × |V| logits of
    ``element_size`` bytes; ``"vocab"`` (memory flat in |V|) otherwise.
    Defaults: ``half=False``, ``memory_budget=268435456`` (2**28 bytes, 256 MiB),
    ``element_size=4``.
    """
    half = check_bool("half", half)
    check_int_range("num_rows", num_rows, 0)
    check_int_range("num_classes", num_classes, 1)
    check_reduction(reduction)
    check_int_range("memory_budget", memory_budget, 1)
    check_int_range("element_size", element_size, 1)
    return _resolve_method(num_rows, num_classes, reduction, half, memory_budget // element_size)


def _resolve_method(num_rows, num_classes, reduction, half, logits=DEFAULT_MEMORY_BUDGET // 4):
    """:func:`resolve_method` of checked arguments (``logits`` as in
    :func:`_default_chunk_size`): the row form while the budget holds 64 rows (or all)."""
    rows_held = logits // num_classes
    if reduction == "none" or half or rows_held < max(1, min(num_rows, _MIN_ROWS)):
        return "vocab"
    return "rows"


def _block(buffer: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """A contiguous (rows, cols) view of the first rows*cols elements of ``buffer``."""
    return buffer[: rows * cols].view(rows, cols)


def _positive_in_block(ids: torch.Tensor, start: int, width: int):
    """(local column clamped into the block (N, 1), whether the positive is in it (N,))."""
    local = ids - start
    inside = (local >= 0) & (local < width)
    return local.clamp(0, width - 1).unsqueeze(1), inside


class _VocabChunked(torch.autograd.Function):
    """Per-row loss (n,) with the log-sum-exp accumulated over class blocks.

    Inputs: query (n, d), classes (V, d), bias (V,) or None, temperature (0-dim tensor)
    or None, tau (float, used when temperature is None), ids (n,) in [0, V), chunk, dtype.
    """

    @staticmethod
    def forward(ctx, query, classes, bias, temperature, tau, ids, chunk, dtype):
        n, _ = query.shape
        num_classes = classes.shape[0]
        scale = temperature.detach().to(dtype) if temperature is not None else tau
        q = query.detach().to(dtype) / scale  # (n, d): q_i / τ, the matmul's left factor
        buffer = torch.empty(n * min(chunk, num_classes), dtype=dtype, device=q.device)
        run_max = torch.full((n,), float("-inf"), dtype=dtype, device=q.device)
        run_sum = torch.zeros(n, dtype=dtype, device=q.device)
        positive = torch.zeros(n, dtype=dtype, device=q.device)
        for start in range(0, num_classes, chunk):
            width = min(chunk, num_classes - start)
            block = _block(buffer, n, width)
            weights = classes[start : start + width].detach().to(dtype)
            if bias is None:
                torch.mm(q, weights.T, out=block)
            else:
                b = bias[start : start + width].detach().to(dtype)
                torch.addmm(b, q, weights.T, out=block)
            local, inside = _positive_in_block(ids, start, width)
            positive = torch.where(inside, block.gather(1, local).squeeze(1), positive)
            new_max = torch.maximum(run_max, block.amax(1))
            # shift by the new max, or by 0 while a row's logits so far are all -inf (a
            # -inf class_bias): exp(-inf - (-inf)) would be NaN, exp(-inf - 0) is 0
            shift = new_max.masked_fill(new_max == float("-inf"), 0.0)
            # rescale the old sum to the new shift, then add this block's exp-sum
            run_sum.mul_(torch.exp(run_max - shift))
            run_sum.add_(block.sub_(shift.unsqueeze(1)).exp_().sum(1))
            run_max = new_max
        lse = run_max + torch.log(run_sum)
        ctx.save_for_backward(query, classes, bias, temperature, ids, lse)
        ctx.tau, ctx.chunk, ctx.dtype = tau, chunk, dtype
        return lse - positive

    @staticmethod
    def backward(ctx, grad_loss):
        query, classes, bias, temperature, ids, lse = ctx.saved_tensors
        dtype, chunk = ctx.dtype, ctx.chunk
        need_q, need_c, need_b, need_t = ctx.needs_input_grad[:4]
        n, d = query.shape
        num_classes = classes.shape[0]
        scale = temperature.detach().to(dtype) if temperature is not None else ctx.tau
        q = query.detach().to(dtype) / scale
        g = grad_loss.to(dtype)
        q_g = q * g.unsqueeze(1) if need_c else None  # (n, d): g_i q_i / τ
        acc_q = torch.zeros(n, d, dtype=dtype, device=q.device) if need_q or need_t else None
        grad_c = torch.empty_like(classes) if need_c else None
        grad_b = torch.empty(num_classes, dtype=dtype, device=q.device) if need_b else None
        buffer = torch.empty(n * min(chunk, num_classes), dtype=dtype, device=q.device)
        neg_lse = (-lse).unsqueeze(1)
        for start in range(0, num_classes, chunk):
            width = min(chunk, num_classes - start)
            block = _block(buffer, n, width)
            weights = classes[start : start + width].to(dtype)
            if bias is None:
                torch.mm(q, weights.T, out=block)
            else:
                torch.addmm(bias[start : start + width].to(dtype), q, weights.T, out=block)
            # p_ij − y_ij: softmax from the saved log-sum-exp, minus one at the positive
            block.add_(neg_lse).exp_()
            local, inside = _positive_in_block(ids, start, width)
            block.scatter_add_(1, local, -inside.to(dtype).unsqueeze(1))
            if acc_q is not None:  # Σ_j (p_ij − y_ij) c_j
                acc_q.addmm_(block, weights)
            if grad_c is not None:  # Σ_i g_i (p_ij − y_ij) q_i / τ
                if grad_c.dtype == dtype:
                    torch.mm(block.T, q_g, out=grad_c[start : start + width])
                else:
                    grad_c[start : start + width] = block.T @ q_g
            if grad_b is not None:
                torch.mv(block.T, g, out=grad_b[start : start + width])
        grad_q = grad_t = None
        if acc_q is not None:
            acc_q.mul_(g.unsqueeze(1))  # G_i = g_i Σ_j (p_ij − y_ij) c_j
            if need_t:  # ∂L/∂τ = −Σ_i (q_i / τ) · G_i / τ
                grad_t = (-(q * acc_q).sum() / scale).to(temperature.dtype)
                grad_t = grad_t.reshape(temperature.shape)
            if need_q:
                grad_q = (acc_q / scale).to(query.dtype)
        if grad_b is not None:
            grad_b = grad_b.to(bias.dtype)
        return grad_q, grad_c, grad_b, grad_t, None, None, None, None


# Below this probability of the positive, ``−log p`` loses precision (p is subnormal or
# 0): those rows' losses are recomputed from their logits as ``lse − o_t``.
_P_FLOOR = {
    torch.float32: 2.0**-100,
    torch.float64: 2.0**-900,
}


def _underflowed_losses(q_rows, weights, bias, ids_rows, low, out) -> None:
    """``out[low] = logsumexp(o) − o_t`` for the few rows whose softmax underflowed."""
    which = low.nonzero().squeeze(1)
    logits = q_rows.index_select(0, which) @ weights.T
    if bias is not None:
        logits = logits + bias
    positive = logits.gather(1, ids_rows.index_select(0, which)).squeeze(1)
    out.index_copy_(0, which, torch.logsumexp(logits, 1) - positive)


class _RowsChunked(torch.autograd.Function):
    """Σ_i r_i ℓ_i over row blocks, every gradient computed in the forward (torch's way).

    Inputs as :class:`_VocabChunked`, plus ``row_scale`` (n,): the weight of each row's
    loss in the returned scalar (1/n for a plain mean). Its own gradient is ℓ_i.
    """

    @staticmethod
    def forward(ctx, query, classes, bias, temperature, row_scale, tau, ids, chunk, dtype, grads):
        n, d = query.shape
        num_classes = classes.shape[0]
        # ``grads``: whether a backward can follow (grad mode was on at the call); inside
        # forward grad mode is always off, and needs_input_grad ignores torch.no_grad()
        need_q, need_c, need_b, need_t = (grads and x for x in ctx.needs_input_grad[:4])
        scale = temperature.detach().to(dtype) if temperature is not None else tau
        q = query.detach().to(dtype) / scale
        r = row_scale.detach().to(dtype)
        weights = classes.detach().to(dtype)  # a float32 copy only for half classes
        b = bias.detach().to(dtype) if bias is not None else None
        acc_q = torch.empty(n, d, dtype=dtype, device=q.device) if need_q or need_t else None
        grad_c = torch.zeros(num_classes, d, dtype=dtype, device=q.device) if need_c else None
        grad_b = torch.zeros(num_classes, dtype=dtype, device=q.device) if need_b else None
        losses = torch.empty(n, dtype=dtype, device=q.device)
        buffer = torch.empty(min(chunk, n) * num_classes, dtype=dtype, device=q.device)
        for start in range(0, n, chunk):
            rows = min(chunk, n - start)
            block = _block(buffer, rows, num_classes)
            q_rows = q[start : start + rows]
            if b is None:
                torch.mm(q_rows, weights.T, out=block)
            else:
                torch.addmm(b, q_rows, weights.T, out=block)
            ids_rows = ids[start : start + rows].unsqueeze(1)
            row_losses = losses[start : start + rows]
            # separate passes under torch.compile (the compiler fuses them itself) and on
            # an accelerator (no host read per block to test for an underflow)
            if _is_compiling() or q.device.type != "cpu":
                positive = block.gather(1, ids_rows).squeeze(1)
                row_max = block.amax(1, keepdim=True)
                total = block.sub_(row_max).exp_().sum(1, keepdim=True)
                row_losses.copy_((row_max + total.log()).squeeze(1) - positive)
                block.div_(total)  # p_ij
            else:
                # one fused pass: p_ij = softmax_j(o_ij) written over the logits; the
                # loss is ℓ_i = −log p_{i,t_i} (exact unless p underflows: recomputed)
                torch._softmax(block, 1, False, out=block)
                p_pos = block.gather(1, ids_rows).squeeze(1)
                torch.neg(torch.log(p_pos), out=row_losses)
                low = p_pos < _P_FLOOR[dtype]
                if bool(low.any()):
                    _underflowed_losses(q_rows, weights, b, ids_rows, low, row_losses)
            block.scatter_add_(
                1, ids_rows, torch.full_like(ids_rows, -1, dtype=dtype)
            )  # p_ij − y_ij
            r_rows = r[start : start + rows]
            if acc_q is not None:
                torch.mm(block, weights, out=acc_q[start : start + rows])
                acc_q[start : start + rows].mul_(r_rows.unsqueeze(1))
            if grad_c is not None:
                grad_c.addmm_(block.T, q_rows * r_rows.unsqueeze(1))
            if grad_b is not None:
                grad_b.addmv_(block.T, r_rows)
        del buffer
        grad_q = grad_t = None
        if acc_q is not None:
            if need_t:
                grad_t = -(q * acc_q).sum() / scale
            grad_q = acc_q.div_(scale) if need_q else None
        ctx.save_for_backward(grad_q, grad_c, grad_b, grad_t, losses)
        ctx.dtypes = (
            query.dtype,
            classes.dtype,
            None if bias is None else bias.dtype,
            None if temperature is None else temperature.dtype,
            row_scale.dtype,
        )
        ctx.t_shape = None if temperature is None else temperature.shape
        return (r * losses).sum()

    @staticmethod
    def backward(ctx, grad_out):
        grad_q, grad_c, grad_b, grad_t, losses = ctx.saved_tensors
        dq, dc, db, dt, dr = ctx.dtypes
        go = grad_out.to(losses.dtype)
        # loss.backward() sends exactly 1: hand the forward's buffers over as they are, so
        # that autograd can adopt them as .grad without a copy (a second (|V|, d) tensor)
        unit = bool(go == 1)

        def scaled(grad, dtype):
            if grad is None:
                return None
            return (grad if unit else grad * go).to(dtype)

        grad_t = scaled(grad_t, dt)
        if grad_t is not None:
            grad_t = grad_t.reshape(ctx.t_shape)
        grad_r = (losses * go).to(dr) if ctx.needs_input_grad[4] else None
        return (
            scaled(grad_q, dq),
            scaled(grad_c, dc),
            scaled(grad_b, db),
            grad_t,
            grad_r,
            None,
            None,
            None,
            None,
            None,
        )


def _check_inputs(query, classes, positive_ids, class_bias, sample_weight, ignore_index):
    """Every argument check but the options'; returns the dtype the loss computes in."""
    check_tensor("query", query, ("N", "d"))
    check_tensor("classes", classes, ("|V|", "d"))
    check_same("embedding dimension d", query=query.shape[1], classes=classes.shape[1])
    check_tensor("positive_ids", positive_ids, ("N",), floating=False)
    check_same("number of rows N", query=query.shape[0], positive_ids=positive_ids.shape[0])
    if class_bias is not None:
        check_tensor("class_bias", class_bias, ("|V|",))
        check_same(
            "number of classes |V|", classes=classes.shape[0], class_bias=class_bias.shape[0]
        )
    # floating point, each named: the promotion the loss computes in (>= float32)
    dtype = common_float_dtype(query=query, classes=classes, class_bias=class_bias)
    if sample_weight is not None:
        check_tensor("sample_weight", sample_weight, ("N",))
        check_same(
            "number of rows N", query=query.shape[0], sample_weight=sample_weight.shape[0]
        )
    check_sample_weight(sample_weight, query.shape[0])  # floating, finite and >= 0
    if isinstance(ignore_index, bool) or not isinstance(ignore_index, int):
        raise ValueError(f"ignore_index must be an int, got {type(ignore_index).__name__}")
    for name, t in (
        ("classes", classes),
        ("positive_ids", positive_ids),
        ("class_bias", class_bias),
        ("sample_weight", sample_weight),
    ):
        if t is not None and t.device != query.device:
            raise ValueError(f"{name} must be on query's device {query.device}, got {t.device}")
    if get_validate_args():
        num_classes = classes.shape[0]
        kept = positive_ids[positive_ids != ignore_index]
        if kept.numel() and (int(kept.min()) < 0 or int(kept.max()) >= num_classes):
            raise ValueError(
                f"positive_ids must lie in [0, {num_classes}) or equal ignore_index "
                f"({ignore_index}), got values in [{int(kept.min())}, {int(kept.max())}]"
            )
    return dtype


def _weight_total(weight: torch.Tensor) -> torch.Tensor:
    """``Σ w``, or 1 where it is 0: rows that all weigh 0 give a mean of 0 (``Σ w ℓ = 0``),
    as every other loss of the package, not 0 / 0."""
    total = weight.sum()
    return torch.where(total > 0, total, torch.ones_like(total))


def _nan_if_none_kept(total: torch.Tensor, keep: torch.Tensor, reduction: str) -> torch.Tensor:
    """``"mean"`` over no kept row (every id is ``ignore_index``) is NaN, as in
    ``F.cross_entropy``; any other result is returned as it is."""
    if reduction != "mean":
        return total
    return torch.where(keep.any(), total, torch.full_like(total, float("nan")))


def chunked_softmax_cross_entropy(
    query: torch.Tensor,
    classes: torch.Tensor,
    positive_ids: torch.Tensor,
    *,
    class_bias: torch.Tensor | None = None,
    temperature: float | torch.Tensor | Temperature = 1.0,
    ignore_index: int = -100,
    sample_weight: torch.Tensor | None = None,
    reduction: str = "mean",
    chunk_size: int | None = None,
    method: str = "auto",
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
) -> torch.Tensor:
    """The exact full-softmax cross-entropy over ``classes``, without the (N, |V|) logits.

    With logits ``o_ij = q_i · c_j / τ + b_j`` over every class ``j`` of the table,

        ℓ_i = log Σ_j exp(o_ij) − o_{i, t_i}

    — the same number as ``F.cross_entropy(query @ classes.T / τ + class_bias,
    positive_ids)``, with every gradient (query, classes, class_bias, a tensor
    temperature), but holding one block of logits at a time (chapter 10).

    Shapes: ``query`` (N, d), ``classes`` (|V|, d), ``positive_ids`` (N,) integer ids in
    ``[0, |V|)`` or equal to ``ignore_index``; ``class_bias`` (|V|,) or None;
    ``sample_weight`` (N,), finite and ≥ 0 (a value check, as in every loss), or None.
    ``temperature``: a float > 0, a
    :class:`~candidate_sampling.losses.core.Temperature` (fixed or learnable: a learnable
    one's ``log_scale`` gets its gradient) or a 0-dim / one-element tensor (gets its
    gradient if it requires one).

    Rows whose id equals ``ignore_index`` (default -100, as ``F.cross_entropy``) are
    dropped before any matmul: they cost nothing, get a zero gradient and a 0 loss.
    Reduction, as ``F.cross_entropy`` with per-*row* weights ``w = sample_weight``
    (``w = 1`` when None), over the kept rows K:

    * ``"none"``: (N,) with ``w_i ℓ_i`` for kept rows and 0 for ignored ones;
    * ``"sum"``: ``Σ_{i∈K} w_i ℓ_i``;
    * ``"mean"``: ``Σ_{i∈K} w_i ℓ_i / Σ_{i∈K} w_i`` (the plain mean over kept rows
      without ``sample_weight``), 0 when every kept row weighs 0 (as every other loss of
      the package). If every row is ignored this is 0/0 = NaN, as in
      ``F.cross_entropy``. ``sample_weight`` may require grad (it gets one).

    Precision: computed in ``common_float_dtype`` of the inputs (float32 for float16 /
    bfloat16 inputs, float64 for float64): every block's logits, the running max and sum
    of the log-sum-exp, and the gradient accumulators. The loss is returned in that
    dtype; gradients in each input's own dtype. Non-finite inputs act through the logits
    ``o_ij`` exactly as in ``F.cross_entropy`` on them (never hidden): a NaN or ``+inf``
    logit (a NaN anywhere, ``+inf`` in ``class_bias``) gives NaN in its row's loss; a
    ``−inf`` logit (a ``−inf`` ``class_bias`` entry) is a class of probability 0 — the
    row's loss stays finite when it is a negative and is ``+inf`` when it is the row's
    positive, as in the package's other softmax losses (a column with a ``−inf``
    :class:`~candidate_sampling.CandidateSet` bias). An infinite ``query`` or ``classes``
    entry makes logits ``±inf`` (or NaN where multiplied by 0), with those effects.

    ``method``: ``"vocab"`` (blocks of ``chunk_size`` classes; logits recomputed in the
    backward; memory of one (N, chunk_size) block), ``"rows"`` (blocks of ``chunk_size``
    rows against all classes, gradients computed in the forward; only for ``"mean"`` and
    ``"sum"``; holds a (chunk_size, |V|) block and the (|V|, d) class gradient from the
    forward on), or ``"auto"`` (:func:`resolve_method`: ``"rows"`` for ``"mean"`` /
    ``"sum"`` while ``memory_budget`` holds a block of 64 rows × |V| logits, else
    ``"vocab"``). ``chunk_size``: classes per block (``"vocab"``) or rows per block
    (``"rows"``), for whichever method ``"auto"`` resolves to; None for
    :func:`default_chunk_size`, the fastest block within ``memory_budget``.

    ``memory_budget``: bytes the block of logits may take (an int >= 1; default 2**28,
    256 MiB), the loss's working memory besides the gradients it returns; a given
    ``chunk_size`` overrides it. The trade: the row form is fastest with blocks of about
    256 rows (each block streams the whole class table through three matmuls, so fewer
    rows mean more passes over it), which is 256 · |V| · 4 bytes in float32 — 98 MiB at
    |V| = 1e5; a smaller budget gives smaller blocks (slower: at 64 rows about 1.2x the
    time at 1e5) and, below 64 rows, the vocabulary form (memory flat in |V|, one matmul
    more). A budget too small for one row or one class column is a ValueError.

    Differences from ``F.linear_cross_entropy``: the temperature, per-row
    ``sample_weight`` (not per-class ``weight``), ignored rows removed before the
    matmuls, and the vocabulary-chunked form (memory independent of |V|). Double
    backward is not supported.
    Defaults: ``reduction="mean"``, ``memory_budget=268435456`` (2**28 bytes).
    """
    dtype = _check_inputs(query, classes, positive_ids, class_bias, sample_weight, ignore_index)
    check_reduction(reduction)
    if isinstance(temperature, Temperature):
        temperature = temperature.value if temperature.learnable else float(temperature.value)
    if isinstance(temperature, bool):
        raise ValueError("temperature must be a float, a Temperature or a tensor, got bool")
    if isinstance(temperature, torch.Tensor):
        check_positive("temperature", temperature)
    else:  # 1/τ a finite, non-zero float32, as every loss's temperature
        _check_scale_range("temperature", temperature)
    check_choice("method", method, METHODS)
    if chunk_size is not None:
        check_int_range("chunk_size", chunk_size, 1)
    check_int_range("memory_budget", memory_budget, 1)
    if method == "rows" and reduction == "none":
        raise ValueError(
            'method="rows" computes the gradients in the forward and needs reduction '
            '"mean" or "sum", got reduction="none"; use method="vocab"'
        )
    num_rows, num_classes = query.shape[0], classes.shape[0]

    temp_tensor, tau = None, 1.0
    if isinstance(temperature, torch.Tensor):
        if temperature.requires_grad:
            temp_tensor = temperature.reshape(())
        else:
            tau = float(temperature)
    else:
        tau = float(temperature)

    keep = positive_ids != ignore_index
    if _is_compiling():
        # a graph has no data-dependent shapes: under torch.compile an ignored row is not
        # dropped but kept with weight 0 (its query zeroed, its id 0), the same loss
        q = torch.where(keep[:, None], query, torch.zeros((), dtype=query.dtype))
        ids, index = positive_ids.masked_fill(~keep, 0), None
        row_weight = keep.to(dtype) if sample_weight is None else sample_weight.to(dtype)
        weight = torch.where(keep, row_weight, torch.zeros((), dtype=dtype))
        kept = num_rows
    else:
        if bool(keep.all()):
            q, ids, index = query, positive_ids, None
        else:
            index = keep.nonzero().squeeze(1)
            q, ids = query.index_select(0, index), positive_ids.index_select(0, index)
        weight = None
        if sample_weight is not None:
            weight = sample_weight.to(dtype) if sample_weight.dtype != dtype else sample_weight
            weight = weight if index is None else weight.index_select(0, index)
        kept = q.shape[0]
    ids = ids.long()
    grads = torch.is_grad_enabled() and any(
        t is not None and t.requires_grad for t in (query, classes, class_bias, temp_tensor)
    )
    size = dtype.itemsize
    if method == "auto":
        half = classes.dtype in (torch.float16, torch.bfloat16)
        method = _resolve_method(kept, num_classes, reduction, half, memory_budget // size)
        if not grads:  # a forward alone: the vocabulary blocks do one matmul, no more
            method = "vocab"
    if chunk_size is None:
        _check_budget(kept, num_classes, method, memory_budget, size)

    if method == "rows":
        chunk = chunk_size or _default_chunk_size(kept, num_classes, "rows", memory_budget // size)
        if weight is None:
            denominator = kept if reduction == "mean" else 1
            row_scale = torch.full((kept,), 1.0 / denominator if kept else 0.0, dtype=dtype)
            row_scale = row_scale.to(query.device)
        else:
            row_scale = weight / _weight_total(weight) if reduction == "mean" else weight
        total = _RowsChunked.apply(
            q, classes, class_bias, temp_tensor, row_scale, tau, ids, chunk, dtype, grads
        )
        return _nan_if_none_kept(total, keep, reduction)

    chunk = chunk_size or _default_chunk_size(
        kept, num_classes, "vocab", memory_budget // size
    )
    losses = _VocabChunked.apply(q, classes, class_bias, temp_tensor, tau, ids, chunk, dtype)
    if weight is not None:
        losses = losses * weight
    if reduction == "sum":
        return losses.sum()
    if reduction == "mean":
        if weight is None:
            return losses.sum() / kept  # 0 / 0 = NaN when every row is ignored
        return _nan_if_none_kept(losses.sum() / _weight_total(weight), keep, reduction)
    if index is None:
        return losses
    return torch.zeros(num_rows, dtype=losses.dtype, device=losses.device).index_copy(
        0, index, losses
    )


class ChunkedSoftmaxCrossEntropy(_Loss):
    """Module form of :func:`chunked_softmax_cross_entropy` (chapter 10).

    ``ChunkedSoftmaxCrossEntropy(*, temperature=1.0, reduction="mean", ignore_index=-100,
    chunk_size=None, method="auto", memory_budget=268435456)``; ``forward(query (N, d), classes (|V|, d),
    positive_ids (N,), *, class_bias=None, sample_weight=None)`` → loss. ``temperature``:
    a float or a :class:`~candidate_sampling.losses.core.Temperature`; a learnable one
    becomes a submodule, so its parameter trains with the model.
    """

    _options = (
        "temperature",
        "reduction",
        "ignore_index",
        "chunk_size",
        "method",
        "memory_budget",
    )
    _fn = staticmethod(chunked_softmax_cross_entropy)

    def __init__(
        self,
        *,
        temperature: float | Temperature = 1.0,
        reduction: str = "mean",
        ignore_index: int = -100,
        chunk_size: int | None = None,
        method: str = "auto",
        memory_budget: int = DEFAULT_MEMORY_BUDGET,
    ) -> None:
        super().__init__(temperature=temperature, reduction=reduction)
        if isinstance(ignore_index, bool) or not isinstance(ignore_index, int):
            raise ValueError(f"ignore_index must be an int, got {type(ignore_index).__name__}")
        if chunk_size is not None:
            check_int_range("chunk_size", chunk_size, 1)
        check_choice("method", method, METHODS)
        check_int_range("memory_budget", memory_budget, 1)
        self.ignore_index = ignore_index
        self.chunk_size = chunk_size
        self.method = method
        self.memory_budget = memory_budget

    def forward(
        self,
        query: torch.Tensor,
        classes: torch.Tensor,
        positive_ids: torch.Tensor,
        *,
        class_bias: torch.Tensor | None = None,
        sample_weight: torch.Tensor | None = None,
    ) -> torch.Tensor:
        return self._call(
            query, classes, positive_ids, class_bias=class_bias, sample_weight=sample_weight
        )
