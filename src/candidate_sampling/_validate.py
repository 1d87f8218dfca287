"""Argument checks shared by the package: fail fast, name the argument, say what was expected.

Two kinds of check:

* **Shape and dtype checks** (:func:`check_tensor`, :func:`check_same`, ...) and the
  type checks of options (:func:`check_bool`, :func:`check_int_range`,
  :func:`check_choice`, ...) read only metadata, cost nothing on any device, and always
  run.
* **Value checks** (:func:`check_ids`, :func:`check_finite`, :func:`check_probabilities`)
  read tensor *values*, which forces a device synchronisation on a GPU. They run while
  :func:`get_validate_args` is True (the default), like ``torch.distributions``'
  ``validate_args``; a training loop that has been debugged can turn them off with
  ``candidate_sampling.set_validate_args(False)`` or, for a block of code, with
  ``with candidate_sampling.validate_args(False): ...``.

  While ``torch.compile`` traces a function (``torch.compiler.is_compiling()``), the value
  checks are skipped whatever the switch says: each one reads a tensor value on the host,
  which would split the compiled graph (a *graph break*) at every check. The shape, dtype
  and option checks still run at trace time (they read metadata only), so a compiled loss
  is one graph and still refuses a wrong shape. Run a step eagerly once to have the values
  checked.

A public function checks its arguments once, at its entry, and calls unchecked cores
(``_name`` functions) for the steps inside: a public step called from inside a loss would
repeat what the loss checked.
"""

from __future__ import annotations

import contextlib
import math
import numbers
from collections.abc import Iterator, Sequence

import numpy as np
import torch

REDUCTIONS = ("mean", "sum", "none")

_VALIDATE = True


def set_validate_args(value: bool) -> None:
    """Turn the package's value checks (id ranges, finiteness, probability ranges) on or off.

    Shape and dtype checks are always on. Off saves the device synchronisations those
    checks force (several per loss call on a GPU); bad values then give torch's own error,
    or a wrong answer, instead of a ``ValueError`` naming the argument. Under
    ``torch.compile`` the value checks are skipped while the function is traced (each would
    break the graph; see the module docstring and the book's notation page), so a compiled
    loss is one graph; the shape checks still run.
    """
    global _VALIDATE
    _VALIDATE = check_bool("value", value)


def get_validate_args() -> bool:
    """Whether value checks run: the switch (True by default), and never while
    ``torch.compile`` traces (``torch.compiler.is_compiling()``)."""
    return _VALIDATE and not _is_compiling()


#: ``torch.compiler.is_compiling`` (torch >= 2.3); older versions have no such test and
#: run the checks (a graph break each) under ``torch.compile``.
_is_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", lambda: False)


@contextlib.contextmanager
def validate_args(value: bool) -> Iterator[None]:
    """Context manager: value checks on or off inside the block, restored afterwards."""
    previous = _VALIDATE
    set_validate_args(value)
    try:
        yield
    finally:
        set_validate_args(previous)


def check_bool(name: str, value: bool) -> bool:
    """``value`` must be a bool (Python's, or numpy's ``bool_``), not an int, a str or a
    tensor: ``remove_accidental_hits="no"`` would otherwise run as True. Type only, so it
    runs whatever :func:`get_validate_args` says. Returns the Python bool."""
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be a bool, got {type(value).__name__}")
    return bool(value)


def check_optional_bool(name: str, value: bool | None) -> bool | None:
    """``value`` must be None or a bool (:func:`check_bool`); None stays None."""
    return None if value is None else check_bool(name, value)


def check_real(name: str, value: float) -> float:
    """``value`` must be a real number: an int or a float (numpy's too), not a bool, a str
    or a tensor. Type only; the range checks build on it."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a number, got {type(value).__name__} {value!r}")
    return value


def check_positive(name: str, value: float) -> float:
    """``value`` must be a finite number > 0 (temperatures, learning rates, powers), or a
    one-element floating tensor (whose value is checked while validation is on)."""
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(f"{name} must be a scalar, got a tensor of shape {tuple(value.shape)}")
        if value.dtype == torch.bool or value.is_complex():
            raise ValueError(f"{name} must be a real number, got a tensor of dtype {value.dtype}")
        if not get_validate_args():
            return value
        checked = float(value.detach())
    else:
        checked = float(check_real(name, value))
    if not math.isfinite(checked) or checked <= 0:
        raise ValueError(f"{name} must be > 0 and finite, got {checked!r}")
    return value


def check_nonnegative(name: str, value: float) -> float:
    """``value`` must be a finite number >= 0 (weights, margins, tilts)."""
    check_real(name, value)
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be >= 0 and finite, got {value!r}")
    return value


def check_int_range(name: str, value: int, low: int, high: int | None = None) -> int:
    """``value`` must be an int with ``low <= value`` (and ``value <= high`` when given)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if value < low or (high is not None and value > high):
        bound = f"in [{low}, {high}]" if high is not None else f">= {low}"
        raise ValueError(f"{name} must be {bound}, got {value}")
    return value


def check_seed(seed: int) -> int:
    """``seed`` must be an int (Python's or numpy's) in ``[0, 2^64)``, what
    ``torch.Generator.manual_seed`` takes without wrapping (a str or a float would reach
    torch as a cryptic error). Returns the Python int."""
    if isinstance(seed, np.integer):
        seed = int(seed)
    return check_int_range("seed", seed, 0, 2**64 - 1)


def check_float_dtype(name: str, dtype: torch.dtype) -> torch.dtype:
    """``dtype`` must be a floating-point ``torch.dtype`` (not the string ``"float32"``)."""
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(f"{name} must be a floating-point torch.dtype, got {dtype!r}")
    return dtype


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
    wanted = "(" + ", ".join(str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"
    if tensor.dim() != len(shape):
        raise ValueError(f"{name} must have shape {wanted}, got {tuple(tensor.shape)}")
    for size, spec in zip(tensor.shape, shape):
        if isinstance(spec, int) and size != spec:
            raise ValueError(f"{name} must have shape {wanted}, got {tuple(tensor.shape)}")
    if not allow_empty and tensor.numel() == 0:
        raise ValueError(f"{name} must not be empty, got shape {tuple(tensor.shape)}")
    if floating is True and not tensor.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor, got {tensor.dtype}")
    if floating is False and (
        tensor.is_floating_point() or tensor.is_complex() or tensor.dtype == torch.bool
    ):
        raise ValueError(f"{name} must be an integer tensor of ids, got {tensor.dtype}")
    if floating is None and tensor.is_complex():
        raise ValueError(f"{name} must be a real tensor, got {tensor.dtype}")
    return tensor


def check_real_tensor(
    name: str, tensor: torch.Tensor, shape: Sequence[int | str | None]
) -> torch.Tensor:
    """A real tensor of ``shape``: integer or floating, not bool or complex (counts,
    popularity, scores that are only compared)."""
    check_tensor(name, tensor, shape, allow_empty=True)
    if tensor.dtype == torch.bool or tensor.is_complex():
        raise ValueError(f"{name} must be a real (integer or floating) tensor, got {tensor.dtype}")
    return tensor


def check_counts(
    name: str, counts: torch.Tensor, shape: Sequence[int | str | None] = ("V",)
) -> torch.Tensor:
    """Counts or weights: a real tensor of ``shape``, finite and >= 0 (a value check)."""
    check_real_tensor(name, counts, shape)
    if get_validate_args() and counts.numel():
        if counts.is_floating_point() and not bool(torch.isfinite(counts).all()):
            raise ValueError(f"{name} must be finite, got NaN or infinite entries")
        if bool((counts < 0).any()):
            raise ValueError(f"{name} must be >= 0, got minimum {counts.min().item()!r}")
    return counts


def check_generator(
    name: str, generator: object, device: torch.device | str | None = None
) -> torch.Generator | None:
    """``generator`` must be None or a ``torch.Generator`` (not a seed: ``generator=0`` would
    reach torch as a cryptic error), on ``device``'s type when given."""
    if generator is None:
        return None
    if not isinstance(generator, torch.Generator):
        raise ValueError(
            f"{name} must be a torch.Generator or None, got {type(generator).__name__} "
            f"{generator!r} (for a seed, pass torch.Generator().manual_seed(seed))"
        )
    if device is not None and generator.device.type != torch.device(device).type:
        raise ValueError(
            f"{name} must live on the device {torch.device(device)}, got a generator on "
            f"{generator.device}"
        )
    return generator


def check_device(name: str, device: object) -> torch.device | None:
    """``device``: None, a ``torch.device`` or a string naming one; returns the device."""
    if device is None:
        return None
    if not isinstance(device, (torch.device, str)):
        raise ValueError(f"{name} must be a torch.device or a string, got {type(device).__name__}")
    try:
        return torch.device(device)
    except (RuntimeError, ValueError) as err:
        raise ValueError(f"{name} must name a torch device, got {device!r}") from err


def check_callable(name: str, value: object, what: str) -> None:
    """``value`` must be callable (a module or a function), ``what`` says which."""
    if not callable(value):
        raise ValueError(f"{name} must be {what}, got {type(value).__name__}")


def check_module(name: str, value: object) -> torch.nn.Module:
    """``value`` must be an ``nn.Module``."""
    if not isinstance(value, torch.nn.Module):
        raise ValueError(f"{name} must be a torch.nn.Module, got {type(value).__name__}")
    return value


def check_bool_mask(
    name: str, mask: torch.Tensor, shape: Sequence[int | str | None]
) -> torch.Tensor:
    """A bool tensor of ``shape`` (:func:`check_tensor`), e.g. the columns a loss removes."""
    check_tensor(name, mask, shape)
    if mask.dtype != torch.bool:
        raise ValueError(f"{name} must be a bool tensor, got {mask.dtype}")
    return mask


def check_choice(name: str, value: str, choices: Sequence[str]) -> str:
    """``value`` must be one of ``choices`` (an option spelled as a string)."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")
    return value


def check_broadcasts_to(
    name: str, tensor: torch.Tensor, shape: Sequence[int], target: str = "logits"
) -> torch.Tensor:
    """``tensor`` must broadcast to ``shape`` (``target``'s shape) without enlarging it.

    A pipeline step's mask, log Q or labels may be smaller than the logits ((C,) against
    (B, C)), never larger: ``(B, 1)`` logits must not silently become ``(B, C)``. Shape
    only (no values).
    """
    if not isinstance(tensor, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
    shape = torch.Size(shape)
    try:
        fits = torch.broadcast_shapes(tensor.shape, shape) == shape
    except RuntimeError:
        fits = False
    if not fits:
        raise ValueError(
            f"{name} must broadcast to {target}' shape {tuple(shape)}, "
            f"got {tuple(tensor.shape)}"
        )
    return tensor


def check_same(what: str, **sizes: int) -> None:
    """All ``sizes`` must be equal, e.g. ``check_same("batch size B", query=q.shape[0], ...)``."""
    values = set(sizes.values())
    if len(values) > 1:
        listed = ", ".join(f"{k}={v}" for k, v in sizes.items())
        raise ValueError(f"{what} must agree, got {listed}")


def check_parallel(what: str, *, allow_empty: bool = False, **ids: torch.Tensor) -> int:
    """Parallel integer columns: each tensor of ``ids`` is (n,), all with the same n.

    ``what`` names n in the error (``"number of interactions n"``); e.g.
    ``check_parallel("number of pairs n", user_index=u, item_ids=i)``. Returns n. Shape
    and dtype only (no values): a pair of arrays never broadcasts against another.
    """
    for name, tensor in ids.items():
        check_tensor(name, tensor, ("n",), floating=False, allow_empty=allow_empty)
    check_same(what, **{name: tensor.shape[0] for name, tensor in ids.items()})
    return next(iter(ids.values())).shape[0]


def check_ids(
    name: str, ids: torch.Tensor, num_items: int | None, of: str | None = None
) -> torch.Tensor:
    """Integer ids must lie in ``[0, num_items)``, or be ``>= 0`` when ``num_items`` is None
    (no known catalogue size); the range is a value check. A negative id never wraps.
    ``of`` says what the range is (``"the rows of classes"``) in the error."""
    if not isinstance(ids, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor of ids, got {type(ids).__name__}")
    if ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool:
        raise ValueError(f"{name} must be an integer tensor of ids, got {ids.dtype}")
    if not get_validate_args() or not ids.numel():
        return ids
    if num_items is None:
        if int(ids.min()) < 0:
            raise ValueError(f"{name} must be >= 0, got {int(ids.min())}")
        return ids
    low, high = torch.stack([ids.min(), ids.max()]).tolist()  # one device sync
    if low < 0 or high >= num_items:
        where = f" ({of})" if of else ""
        raise ValueError(
            f"{name} must lie in [0, {num_items}){where}, got values in [{low}, {high}]"
        )
    return ids


def check_finite(name: str, tensor: torch.Tensor) -> torch.Tensor:
    """No NaN or infinity allowed (probabilities, log Q, counts); a value check."""
    if get_validate_args() and not bool(torch.isfinite(tensor).all()):
        raise ValueError(f"{name} must be finite, got NaN or infinite entries")
    return tensor


def check_reduction(reduction: str) -> str:
    """``reduction`` must be one of ``REDUCTIONS`` ("mean", "sum", "none")."""
    return check_choice("reduction", reduction, REDUCTIONS)


def check_probabilities(name: str, probs: torch.Tensor) -> torch.Tensor:
    """A floating tensor with every value in [0, 1] (NaN rejected); the range is a value check."""
    if not isinstance(probs, torch.Tensor) or not probs.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor of probabilities")
    if get_validate_args() and probs.numel() and not bool(((probs >= 0) & (probs <= 1)).all()):
        bad = probs[~((probs >= 0) & (probs <= 1))][0].item()
        raise ValueError(f"{name} must lie in [0, 1], got {bad!r}")
    return probs


def common_float_dtype(**tensors: torch.Tensor | None) -> torch.dtype:
    """The dtype a loss computes in: the promotion of the inputs' float dtypes, >= float32.

    Mixed inputs (a float64 query with a float32 table) are promoted as
    ``torch.promote_types`` does, the way ``torch.nn.functional`` promotes its operands;
    float16 and bfloat16 are computed in float32, so ``s / τ`` cannot overflow.
    """
    dtype = None
    for name, t in tensors.items():
        if t is None:
            continue
        if not t.is_floating_point():
            raise ValueError(f"{name} must be a floating-point tensor, got {t.dtype}")
        dtype = t.dtype if dtype is None else torch.promote_types(dtype, t.dtype)
    if dtype is None or dtype in (torch.float16, torch.bfloat16):
        return torch.float32
    return torch.promote_types(dtype, torch.float32)
