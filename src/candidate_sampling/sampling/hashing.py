"""Universal hashing of integer ids with tensor ops (shared by ``models`` and ``frequency``).

Carter–Wegman hashing: ``h(x) = ((a·s(x) + b) mod P) mod H`` with the Mersenne prime
``P = 2^31 − 1``, ``1 <= a < P`` and ``0 <= b < P`` drawn once per hash function, and
``s`` a fixed bijection of ``[0, P)`` that scrambles the ids first. For ids in ``[0, P)``
every product stays below ``2^62``, so the whole computation is exact integer arithmetic on
the ids' device, vectorised over any shape.

Why the scramble: Carter–Wegman's collision bound holds on average over the draw of
``(a, b)``. For one draw, ids that form an arithmetic progression — ``0, 1, …, n − 1``,
the usual case — can crowd into a fraction of the buckets: without ``s``, 9% of 2,000
draws put 1,000 consecutive ids into fewer than three quarters of the buckets a random
function fills (885 of 4,000), the worst into 90, and for 10^5 ids and 65,536 buckets one
draw in three fell below 95% of a random function's count. Two fixed rounds of "multiply
mod P, then xor-shift" break the progression; since ``s`` is a bijection, distinct ids
stay distinct and the guarantee over ``(a, b)`` is unchanged, and every draw tried then
fills the buckets as a random function does.
"""

from __future__ import annotations

import torch

from candidate_sampling._validate import check_ids, check_int_range, check_seed

MERSENNE_PRIME = 2**31 - 1


# (multiplier mod P, right shift) of each round of _scramble_ids
_SCRAMBLE_ROUNDS = ((1_103_515_245, 16), (747_796_405, 13))


def _scramble_ids(ids: torch.Tensor) -> torch.Tensor:
    """A fixed bijection of ``[0, P)`` (int64 ids in, the same shape out) that breaks
    arithmetic progressions: each round multiplies by a constant mod ``P`` (a bijection,
    since ``P`` is prime) and xors in the value shifted right (a bijection of 31-bit
    values); the one 31-bit value outside ``[0, P)``, ``2^31 − 1``, is mapped once more
    by the xor-shift (cycle walking), which keeps the round a bijection of ``[0, P)``.
    """
    x = ids
    for multiplier, shift in _SCRAMBLE_ROUNDS:
        y = (x * multiplier) % MERSENNE_PRIME
        y = y ^ (y >> shift)
        x = torch.where(y == MERSENNE_PRIME, y ^ (y >> shift), y)
    return x


def draw_hash_parameters(num_hashes: int, seed: int = 0) -> torch.Tensor:
    """``(num_hashes, 2)`` int64 tensor of ``(a, b)`` pairs, ``a`` in [1, P), ``b`` in [0, P)."""
    check_int_range("num_hashes", num_hashes, 1)
    generator = torch.Generator().manual_seed(check_seed(seed))
    a = torch.randint(1, MERSENNE_PRIME, (num_hashes,), generator=generator, dtype=torch.int64)
    b = torch.randint(0, MERSENNE_PRIME, (num_hashes,), generator=generator, dtype=torch.int64)
    return torch.stack([a, b], dim=1)


def universal_hash(ids: torch.Tensor, params: torch.Tensor, num_buckets: int) -> torch.Tensor:
    """Hash ``ids`` (any shape, int64 in [0, 2^31 − 1)) with every ``(a, b)`` row of ``params``.

    Returns ``(*ids.shape, num_hashes)`` bucket indices in ``[0, num_buckets)``. An id
    outside ``[0, P)`` is an error (a value check): the scramble is a bijection of that
    range only, and larger products would overflow int64.
    """
    check_int_range("num_buckets", num_buckets, 1)
    check_ids("ids", ids, MERSENNE_PRIME)
    return _hash_unchecked(ids, params, num_buckets)


def _hash_unchecked(ids: torch.Tensor, params: torch.Tensor, num_buckets: int) -> torch.Tensor:
    """:func:`universal_hash` for callers that checked ``ids`` against a range in [0, P)."""
    x = _scramble_ids(ids.to(torch.int64)).unsqueeze(-1)
    a = params[:, 0].to(x.device)
    b = params[:, 1].to(x.device)
    return ((a * x + b) % MERSENNE_PRIME) % num_buckets
