"""Argument checks shared by the package: fail fast, name the argument, say what was expected."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

REDUCTIONS = ("mean", "sum", "none")


def check_positive(name: str, value: float) -> float:
    """``value`` must be a finite number > 0 (temperatures, learning rates, powers)."""
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(f"{name} must be a scalar, got a tensor of shape {tuple(value.shape)}")
        checked = float(value.detach())
    else:
        checked = float(value)
    if not math.isfinite(checked) or checked <= 0:
        raise ValueError(f"{name} must be > 0 and finite, got {checked!r}")
    return value


def check_int_range(name: str, value: int, low: int, high: int | None = None) -> int:
    """``value`` must be an int with ``low <= value`` (and ``value <= high`` when given)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if value < low or (high is not None and value > high):
        bound = f"in [{low}, {high}]" if high is not None else f">= {low}"
        raise ValueError(f"{name} must be {bound}, got {value}")
    return value


def check_tensor(
    name: str,
    tensor: torch.Tensor,
    shape: Sequence[int | str | None],
    *,
    floating: bool | None = None,
    allow_empty: bool = False,
) -> torch.Tensor:
    """Check ``tensor``'s rank and sizes; ``None`` or a symbol in ``shape`` matches any size.

    ``shape`` is written with symbols, e.g. ``("B", "d")``; a symbol only documents the
    dimension in the error message. Use :func:`check_same` to tie symbols across tensors.
    """
    if not isinstance(tensor, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
    wanted = "(" + ", ".join(str(s) for s in shape) + ")"
    if tensor.dim() != len(shape):
        raise ValueError(f"{name} must have shape {wanted}, got {tuple(tensor.shape)}")
    for size, spec in zip(tensor.shape, shape):
        if isinstance(spec, int) and size != spec:
            raise ValueError(f"{name} must have shape {wanted}, got {tuple(tensor.shape)}")
    if not allow_empty and tensor.numel() == 0:
        raise ValueError(f"{name} must not be empty, got shape {tuple(tensor.shape)}")
    if floating is True and not tensor.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor, got {tensor.dtype}")
    if floating is False and (tensor.is_floating_point() or tensor.is_complex()):
        raise ValueError(f"{name} must be an integer tensor of ids, got {tensor.dtype}")
    return tensor


def check_same(what: str, **sizes: int) -> None:
    """All ``sizes`` must be equal, e.g. ``check_same("batch size B", query=q.shape[0], ...)``."""
    values = set(sizes.values())
    if len(values) > 1:
        listed = ", ".join(f"{k}={v}" for k, v in sizes.items())
        raise ValueError(f"{what} must agree, got {listed}")


def check_ids(name: str, ids: torch.Tensor, num_classes: int) -> torch.Tensor:
    """Integer ids must lie in ``[0, num_classes)``."""
    if ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool:
        raise ValueError(f"{name} must be an integer tensor of ids, got {ids.dtype}")
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= num_classes):
        raise ValueError(
            f"{name} must lie in [0, {num_classes}), got values in "
            f"[{int(ids.min())}, {int(ids.max())}]"
        )
    return ids


def check_finite(name: str, tensor: torch.Tensor) -> torch.Tensor:
    """No NaN or infinity allowed (probabilities, log Q, counts)."""
    if not bool(torch.isfinite(tensor).all()):
        raise ValueError(f"{name} must be finite, got NaN or infinite entries")
    return tensor


def check_reduction(reduction: str) -> str:
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")
    return reduction
