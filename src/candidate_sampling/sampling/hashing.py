"""Universal hashing of integer ids with tensor ops (shared by ``models`` and ``frequency``).

Carter–Wegman hashing: ``h(x) = ((a·x + b) mod P) mod H`` with the Mersenne prime
``P = 2^31 − 1``, ``1 <= a < P`` and ``0 <= b < P`` drawn once per hash function. For ids
in ``[0, P)`` the product ``a·x < 2^62`` fits in int64, so the whole computation is exact
integer arithmetic on the ids' device, vectorised over any shape.
"""

from __future__ import annotations

import torch

from candidate_sampling._validate import check_int_range

MERSENNE_PRIME = 2**31 - 1


def draw_hash_parameters(num_hashes: int, seed: int = 0) -> torch.Tensor:
    """``(num_hashes, 2)`` int64 tensor of ``(a, b)`` pairs, ``a`` in [1, P), ``b`` in [0, P)."""
    check_int_range("num_hashes", num_hashes, 1)
    generator = torch.Generator().manual_seed(seed)
    a = torch.randint(1, MERSENNE_PRIME, (num_hashes,), generator=generator, dtype=torch.int64)
    b = torch.randint(0, MERSENNE_PRIME, (num_hashes,), generator=generator, dtype=torch.int64)
    return torch.stack([a, b], dim=1)


def universal_hash(ids: torch.Tensor, params: torch.Tensor, num_buckets: int) -> torch.Tensor:
    """Hash ``ids`` (any shape, int64 in [0, 2^31 − 1)) with every ``(a, b)`` row of ``params``.

    Returns ``(*ids.shape, num_hashes)`` bucket indices in ``[0, num_buckets)``.
    """
    check_int_range("num_buckets", num_buckets, 1)
    x = ids.to(torch.int64).unsqueeze(-1)
    a = params[:, 0].to(x.device)
    b = params[:, 1].to(x.device)
    return ((a * x + b) % MERSENNE_PRIME) % num_buckets
