"""A small training loop for any of the package's losses (chapter 5 and later chapters).

The loop knows nothing about the loss: it shuffles a tuple of equal-length tensors into
mini-batches on the model's device, calls ``loss_fn(model, batch)`` for a scalar loss,
steps the optimizer, and after every epoch calls ``evaluate(model)`` for a dict of
metrics. It returns one row per epoch as a :class:`pandas.DataFrame`.

:func:`make_optimizer` picks an optimizer that accepts the model's gradients: Adagrad and
SGD take sparse gradients directly; for Adam, embeddings built with ``sparse=True`` go to
``torch.optim.SparseAdam`` and the dense parameters to ``torch.optim.Adam`` — its fused
kernel (one pass over each parameter instead of several elementwise passes) where the
device supports it, the multi-kernel update elsewhere; both compute the same update.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

import torch
from torch import nn

from candidate_sampling._validate import (
    check_bool,
    check_choice,
    check_generator,
    check_int_range,
    check_module,
    check_nonnegative,
    check_positive,
    check_seed,
)
from candidate_sampling.models import sparse_parameters

if TYPE_CHECKING:  # pandas and tqdm (the [train] extra) are imported by train() itself
    import pandas as pd

__all__ = ["OptimizerGroup", "iterate_batches", "make_optimizer", "train"]

OPTIMIZERS = ("adagrad", "sgd", "adam")


class OptimizerGroup:
    """Several optimizers stepped together (e.g. SparseAdam for embeddings + Adam for the rest)."""

    def __init__(self, optimizers: Sequence[torch.optim.Optimizer]) -> None:
        if isinstance(optimizers, (str, bytes)) or not isinstance(optimizers, Sequence):
            raise ValueError(
                "optimizers must be a sequence of torch optimizers, got "
                f"{type(optimizers).__name__}"
            )
        for i, opt in enumerate(optimizers):
            if not isinstance(opt, torch.optim.Optimizer):
                raise ValueError(
                    f"optimizers[{i}] must be a torch.optim.Optimizer, got {type(opt).__name__}"
                )
        self.optimizers = list(optimizers)

    def zero_grad(self, set_to_none: bool = True) -> None:
        set_to_none = check_bool("set_to_none", set_to_none)
        for opt in self.optimizers:
            opt.zero_grad(set_to_none=set_to_none)

    def step(self) -> None:
        for opt in self.optimizers:
            opt.step()


def make_optimizer(
    model: nn.Module,
    name: str = "adagrad",
    lr: float = 0.1,
    *,
    initial_accumulator_value: float = 0.0,
) -> torch.optim.Optimizer | OptimizerGroup:
    """An optimizer for ``model`` that handles sparse embedding gradients.

    ``"adagrad"``: ``torch.optim.Adagrad`` (sparse-capable). Keras's Adagrad, used by TF
    Recommenders, starts its accumulator at 0.1; PyTorch's at 0 — pass
    ``initial_accumulator_value=0.1`` for TF's steps (to about 5e-7 relative: Keras adds
    its epsilon 1e-7 under the square root, PyTorch 1e-10 after it). ``"sgd"``: plain SGD
    (sparse-capable). ``"adam"``: Adam, with ``SparseAdam`` for sparse embeddings.
    Defaults: ``name="adagrad"``, ``lr=0.1``.
    """
    check_module("model", model)
    check_choice("name", name, OPTIMIZERS)
    check_positive("lr", lr)
    check_nonnegative("initial_accumulator_value", initial_accumulator_value)
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("model has no trainable parameters")
    if name == "adagrad":
        return torch.optim.Adagrad(
            params, lr=lr, initial_accumulator_value=initial_accumulator_value
        )
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr)
    sparse, dense = sparse_parameters(model)
    opts: list[torch.optim.Optimizer] = []
    if sparse:
        opts.append(torch.optim.SparseAdam(sparse, lr=lr))
    if dense:
        opts.append(_adam(dense, lr))
    return opts[0] if len(opts) == 1 else OptimizerGroup(opts)


def _adam(params: list[nn.Parameter], lr: float) -> torch.optim.Adam:
    """``torch.optim.Adam``, fused where every parameter's device and dtype allow it.

    The fused update is one kernel per parameter (CUDA, CPU, MPS in recent PyTorch);
    the default one launches several elementwise kernels per parameter, which costs a
    small model a sizeable part of its step (benchmarks appendix, the pipeline). Same
    arithmetic: the two agree to float rounding.
    """
    try:
        return torch.optim.Adam(params, lr=lr, fused=True)
    except (RuntimeError, ValueError, TypeError):  # a device or dtype without the kernel
        return torch.optim.Adam(params, lr=lr)


def _check_tensors(name: str, tensors: Sequence[torch.Tensor]) -> None:
    """A non-empty sequence of tensors with at least one dimension each."""
    if isinstance(tensors, (str, bytes, torch.Tensor)) or not isinstance(tensors, Sequence):
        raise ValueError(
            f"{name} must be a sequence of tensors, e.g. (x, y), got {type(tensors).__name__}"
        )
    if not tensors:
        raise ValueError(f"{name} must hold at least one tensor")
    for i, t in enumerate(tensors):
        if not isinstance(t, torch.Tensor) or t.dim() < 1:
            raise ValueError(
                f"{name}[{i}] must be a tensor with a first (batch) dimension, got "
                f"{type(t).__name__}"
            )


def iterate_batches(
    tensors: Sequence[torch.Tensor],
    batch_size: int,
    *,
    shuffle: bool = True,
    generator: torch.Generator | None = None,
    drop_last: bool = False,
) -> Iterator[tuple[torch.Tensor, ...]]:
    """Yield tuples of mini-batches of ``tensors`` (equal first dimension), in a random order.

    The permutation is drawn on the CPU with ``generator`` and moved to the tensors' device.
    Defaults: ``shuffle=True``, ``drop_last=False``.
    """
    check_int_range("batch_size", batch_size, 1)
    shuffle, drop_last = check_bool("shuffle", shuffle), check_bool("drop_last", drop_last)
    _check_tensors("tensors", tensors)
    check_generator("generator", generator, "cpu")
    n = tensors[0].shape[0]
    for i, t in enumerate(tensors):
        if t.shape[0] != n:
            raise ValueError(
                f"tensors must share their first dimension, got {n} and {t.shape[0]} (tensor {i})"
            )
    order = torch.randperm(n, generator=generator) if shuffle else torch.arange(n)
    order = order.to(tensors[0].device)
    stop = n - n % batch_size if drop_last else n
    for start in range(0, stop, batch_size):
        idx = order[start : start + batch_size]
        yield tuple(t[idx] for t in tensors)


def train(
    model: nn.Module,
    loss_fn: Callable[[nn.Module, tuple[torch.Tensor, ...]], torch.Tensor],
    data: Sequence[torch.Tensor],
    *,
    epochs: int,
    batch_size: int,
    optimizer: torch.optim.Optimizer | OptimizerGroup | None = None,
    evaluate: Callable[[nn.Module], dict[str, float]] | None = None,
    seed: int = 0,
    drop_last: bool = False,
    progress: bool = True,
    description: str = "train",
) -> pd.DataFrame:
    """Train ``model`` for ``epochs`` passes over ``data``; one DataFrame row per epoch.

    ``loss_fn(model, batch)`` returns a scalar loss for a batch (a tuple of the ``data``
    tensors' rows, on the model's device). ``optimizer`` defaults to
    ``make_optimizer(model)`` (Adagrad, lr 0.1). ``evaluate(model)`` (in ``eval`` mode,
    without gradients) returns metrics added to the epoch's row. Columns: ``epoch``,
    ``loss`` (mean batch loss), ``seconds`` (training time of the epoch) and the metrics.
    Runs wherever the model's parameters are (CUDA, MPS or CPU).
    Defaults: ``seed=0``, ``drop_last=False``.
    """
    import pandas as pd
    from tqdm.auto import tqdm

    check_module("model", model)
    check_int_range("epochs", epochs, 1)
    check_int_range("batch_size", batch_size, 1)
    drop_last, progress = check_bool("drop_last", drop_last), check_bool("progress", progress)
    _check_tensors("data", data)
    device = next(model.parameters()).device
    data = [t.to(device) for t in data]
    optimizer = optimizer if optimizer is not None else make_optimizer(model)
    generator = torch.Generator().manual_seed(check_seed(seed))
    num_batches = (
        data[0].shape[0] // batch_size if drop_last else -(-data[0].shape[0] // batch_size)
    )
    rows = []
    bar = tqdm(total=epochs * num_batches, desc=description, disable=not progress, leave=False)
    for epoch in range(1, epochs + 1):
        model.train()
        start = time.perf_counter()
        total, count = torch.zeros((), device=device), 0
        for batch in iterate_batches(data, batch_size, generator=generator, drop_last=drop_last):
            optimizer.zero_grad()
            loss = loss_fn(model, batch)
            if loss.dim() != 0:
                raise ValueError(f"loss_fn must return a scalar, got shape {tuple(loss.shape)}")
            loss.backward()
            optimizer.step()
            total += loss.detach()
            count += 1
            bar.update(1)
        row = {
            "epoch": epoch,
            "loss": float(total) / max(count, 1),
            "seconds": time.perf_counter() - start,
        }
        if evaluate is not None:
            model.eval()
            with torch.no_grad():
                row.update(evaluate(model))
        rows.append(row)
        bar.set_postfix(loss=f"{row['loss']:.3f}")
    bar.close()
    return pd.DataFrame(rows)
