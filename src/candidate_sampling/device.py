"""Where tensors live, and how runs are made repeatable.

``get_device()`` picks CUDA, then Apple MPS, then the CPU. Set the environment
variable ``CANDIDATE_SAMPLING_DEVICE`` (for example ``cpu`` or ``cuda:1``) to force a
device: every chapter calls ``get_device()``, so one variable moves the whole book.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from candidate_sampling._validate import check_seed

DEVICE_ENV_VAR = "CANDIDATE_SAMPLING_DEVICE"
SEED_ENV_VAR = "CANDIDATE_SAMPLING_SEED"
#: The distance between the seeds of two book runs. ``book_seed(s)`` under offset ``o``
#: is ``s + SEED_STRIDE * o``, so the streams of different offsets never share a seed as long
#: as a chapter uses seeds below the stride.
SEED_STRIDE = 1_000_003


def get_device() -> torch.device:
    """Return the device the book runs on: ``$CANDIDATE_SAMPLING_DEVICE``, else CUDA, MPS, CPU.

    Raises ``ValueError`` if the variable names a device that does not exist or is not
    available on this machine, rather than silently falling back to the CPU.
    """
    requested = os.environ.get(DEVICE_ENV_VAR, "").strip()
    if requested:
        try:
            device = torch.device(requested)
        except RuntimeError as err:
            raise ValueError(
                f"{DEVICE_ENV_VAR} must name a torch device such as 'cpu', 'cuda' or 'mps', "
                f"got {requested!r}"
            ) from err
        if device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(f"{DEVICE_ENV_VAR}={requested!r} but CUDA is not available here")
        if device.type == "mps" and not torch.backends.mps.is_available():
            raise ValueError(f"{DEVICE_ENV_VAR}={requested!r} but Apple MPS is not available here")
        return device
    if torch.cuda.is_available():
        return torch.device("cuda")
    if torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def seed_offset() -> int:
    """The book's seed offset: ``$CANDIDATE_SAMPLING_SEED`` (default 0), a non-negative int.

    Every chapter derives each of its seeds with :func:`book_seed`, so running the book with
    ``CANDIDATE_SAMPLING_SEED=1`` re-runs every experiment on fresh random streams: a claim
    that only holds for one stream fails there. Raises ``ValueError`` naming the variable
    when it is not a non-negative integer.
    """
    raw = os.environ.get(SEED_ENV_VAR, "").strip()
    if not raw:
        return 0
    try:
        offset = int(raw)
    except ValueError:
        offset = -1
    if offset < 0:
        raise ValueError(f"{SEED_ENV_VAR} must be a non-negative integer, got {raw!r}")
    return offset


def book_seed(seed: int = 0) -> int:
    """``seed`` moved by the book's seed offset: ``seed + SEED_STRIDE * seed_offset()``.

    With the variable unset this is ``seed`` itself. Chapters wrap every literal seed in it
    (``torch.manual_seed(book_seed(3))``), so one environment variable changes every random
    stream of the book at once.
    Defaults: ``seed=0``.
    """
    return check_seed(seed) + SEED_STRIDE * seed_offset()


def seed_everything(seed: int) -> torch.Generator:
    """Seed Python, NumPy and torch (all devices) and return a CPU ``torch.Generator``.

    The returned generator is for code that wants an explicit stream of randomness;
    samplers take their own ``generator`` on the tensor's device.
    """
    seed = check_seed(seed)
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


def synchronize(device: torch.device) -> None:
    """Wait for queued kernels on ``device`` to finish (for honest timings on GPUs)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def time_calls(
    fn: Callable[[], Any],
    *,
    device: torch.device | str | None = None,
    repeats: int = 5,
    warmup: int = 1,
    min_seconds: float = 0.0,
    max_repeats: int = 1000,
) -> list[float]:
    """Seconds taken by each call of ``fn``, with the device synchronised around every call.

    ``warmup`` untimed calls first (allocator, kernel selection); then at least ``repeats``
    timed calls, more (up to ``max_repeats``) until ``min_seconds`` of timed work have
    accumulated. ``device`` (default: :func:`get_device`) is synchronised so a GPU's
    queued kernels are counted. Report the median or the minimum, and compare timings
    only as ratios measured in the same run: absolute times depend on the machine.
    """
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be an int >= 1, got {repeats!r}")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup must be an int >= 0, got {warmup!r}")
    if isinstance(max_repeats, bool) or not isinstance(max_repeats, int) or max_repeats < 1:
        raise ValueError(f"max_repeats must be an int >= 1, got {max_repeats!r}")
    if (
        isinstance(min_seconds, bool)
        or not isinstance(min_seconds, (int, float))
        or not 0 <= min_seconds < float("inf")
    ):
        raise ValueError(f"min_seconds must be a finite number >= 0, got {min_seconds!r}")
    device = torch.device(device) if device is not None else get_device()
    for _ in range(warmup):
        fn()
    synchronize(device)
    times: list[float] = []
    while len(times) < repeats or (sum(times) < min_seconds and len(times) < max_repeats):
        start = time.perf_counter()
        fn()
        synchronize(device)
        times.append(time.perf_counter() - start)
    return times


def has_float64(device: torch.device | str) -> bool:
    """Whether ``device`` computes in float64: every device but Apple's MPS.

    The package's one test of it: every float64 step asks this (through
    :func:`exact_float64` or :func:`float64_or_float32`), so a device without float64 gets
    the CPU or float32 path everywhere, never an error from the backend. ``device``: a
    ``torch.device`` or a string such as ``"cuda:1"``.
    """
    if not isinstance(device, (torch.device, str)):
        raise ValueError(f"device must be a torch.device or a string, got {type(device).__name__}")
    try:
        device = torch.device(device)
    except RuntimeError as err:
        raise ValueError(f"device must name a torch device, got {device!r}") from err
    return device.type != "mps"


def exact_float64(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` in float64, on its own device, or on the CPU where float64 is missing (MPS).

    For the small exact computations of metrics, baselines, frequencies and log Q (ranks,
    counts, a Gram matrix, probabilities): Apple's MPS backend has no float64, so they move
    to the CPU there. Move the result back with ``.to(device, dtype)`` when it is needed on
    the device.
    """
    if not isinstance(tensor, torch.Tensor):
        raise ValueError(f"tensor must be a torch.Tensor, got {type(tensor).__name__}")
    device = tensor.device if has_float64(tensor.device) else torch.device("cpu")
    return tensor.to(device=device, dtype=torch.float64)


def float64_or_float32(device: torch.device | str) -> torch.dtype:
    """float64 where ``device`` has it, else float32: for work that stays on the device."""
    return torch.float64 if has_float64(device) else torch.float32

