"""Item frequency estimators: exact counts, batch inclusion, Yi et al.'s streaming estimator."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from candidate_sampling.sampling.hashing import (
    MERSENNE_PRIME,
    draw_hash_parameters,
    universal_hash,
)
from candidate_sampling.sampling.frequency import (
    StreamingFrequencyEstimator,
    inclusion_probability,
    item_counts,
    item_probabilities,
    mixed_log_q,
)


def test_item_counts_matches_loop():
    ids = torch.tensor([[0, 3, 3], [1, 3, 0]])
    counts = item_counts(ids, 5)
    expected = [sum(int(v == c) for v in ids.reshape(-1)) for c in range(5)]
    assert counts.tolist() == expected


def test_item_probabilities_sum_to_one():
    probs = item_probabilities(torch.tensor([2, 0, 6]))
    assert torch.allclose(probs, torch.tensor([0.25, 0.0, 0.75]))


@given(p=st.floats(0.0, 1.0), num_draws=st.integers(0, 10_000))
@settings(max_examples=50, deadline=None)
def test_inclusion_probability_matches_closed_form(p, num_draws):
    got = float(inclusion_probability(torch.tensor([p], dtype=torch.float64), num_draws))
    assert got == pytest.approx(1 - (1 - p) ** num_draws, abs=1e-12)


def test_inclusion_probability_small_p_is_expected_count():
    p = torch.tensor([1e-12], dtype=torch.float64)
    assert float(inclusion_probability(p, 100)) == pytest.approx(1e-10, rel=1e-6)


def test_inclusion_probability_keeps_shape_and_dtype():
    for dtype in (torch.float32, torch.float64):
        p = torch.tensor([[0.0, 0.5], [1.0, 1e-3]], dtype=dtype)
        out = inclusion_probability(p, 4)
        assert out.shape == (2, 2) and out.dtype == dtype
        assert out[0, 0] == 0 and out[1, 0] == 1
        assert torch.equal(inclusion_probability(p, 0), torch.zeros_like(p))  # no draws


def test_mixed_log_q_inclusion_with_no_extra_draws_is_the_batch_inclusion():
    # B' = 0 extra draws: r(y) must not matter, even r = 1 (0 · log(1 − 1) is not NaN)
    q = torch.tensor([0.0, 0.2, 0.5, 1.0], dtype=torch.float64)
    r = torch.tensor([1.0, 1.0, 0.0, 0.5], dtype=torch.float64)
    batch_only = mixed_log_q(q[1:], r[1:], batch_size=3, num_samples=0, form="inclusion")
    want = torch.log(1 - (1 - q[1:]) ** 3)
    torch.testing.assert_close(batch_only.double(), want, rtol=1e-6, atol=1e-7)
    with pytest.raises(ValueError, match="Q"):  # q = 0 and no extra draws: never a candidate
        mixed_log_q(q, r, batch_size=3, num_samples=0, form="inclusion")


def test_universal_hash_range_and_determinism():
    params = draw_hash_parameters(3, seed=1)
    ids = torch.arange(10_000)
    buckets = universal_hash(ids, params, 97)
    assert buckets.shape == (10_000, 3)
    assert int(buckets.min()) >= 0 and int(buckets.max()) < 97
    assert torch.equal(buckets, universal_hash(ids, draw_hash_parameters(3, seed=1), 97))
    # roughly uniform: every bucket used, none grossly over-full
    counts = torch.bincount(buckets[:, 0], minlength=97)
    assert int(counts.min()) > 0 and int(counts.max()) < 3 * 10_000 / 97


def _loop_reference(batches, num_buckets, alpha):
    """Algorithm 2 with a Python loop, identity hash, duplicates counted once per step."""
    last = [0.0] * num_buckets
    gap = [0.0] * num_buckets
    for t, batch in enumerate(batches, start=1):
        for b in sorted(set(batch)):
            observed = t - last[b]
            gap[b] = observed if last[b] == 0 else (1 - alpha) * gap[b] + alpha * observed
            last[b] = t
    return last, gap


def test_streaming_update_matches_loop_reference():
    gen = torch.Generator().manual_seed(0)
    batches = [torch.randint(0, 20, (8,), generator=gen) for _ in range(50)]
    est = StreamingFrequencyEstimator(20, learning_rate=0.2, hash_ids=False)
    for batch in batches:
        est.update(batch)
    last, gap = _loop_reference([b.tolist() for b in batches], 20, 0.2)
    assert torch.allclose(est.last_seen[0], torch.tensor(last, dtype=torch.float64))
    assert torch.allclose(est.gap[0], torch.tensor(gap, dtype=torch.float64))


def test_duplicates_in_a_batch_count_once():
    once = StreamingFrequencyEstimator(5, learning_rate=0.5, hash_ids=False)
    many = StreamingFrequencyEstimator(5, learning_rate=0.5, hash_ids=False)
    for _ in range(4):
        once.update(torch.tensor([1, 2]))
        many.update(torch.tensor([1, 1, 1, 2]))
    assert torch.equal(once.gap, many.gap)
    assert float(many.estimate(torch.tensor([1]))) == pytest.approx(1.0)


def test_paper_zero_initialisation():
    est = StreamingFrequencyEstimator(3, learning_rate=0.1, hash_ids=False, warm_start=False)
    est.update(torch.tensor([0]))
    est.update(torch.tensor([1]))
    # first sighting of item 1 at t=2: B = 0.9 * 0 + 0.1 * 2
    assert float(est.gap[0, 1]) == pytest.approx(0.2)


def test_unseen_items_get_small_estimate():
    est = StreamingFrequencyEstimator(10, learning_rate=0.1, hash_ids=False)
    for _ in range(9):
        est.update(torch.tensor([0]))
    assert float(est.estimate(torch.tensor([5]))) == pytest.approx(1 / 10)
    assert float(est.estimate(torch.tensor([0]))) == pytest.approx(1.0)


@pytest.mark.parametrize(
    "num_hashes,num_buckets,hash_ids", [(1, 50, False), (1, 400, True), (3, 400, True)]
)
def test_streaming_estimate_converges_to_inclusion_probability(num_hashes, num_buckets, hash_ids):
    """Stream with known frequencies: the estimate approaches 1 − (1 − p)^B."""
    num_items, batch = 50, 16
    probs = torch.linspace(1, 10, num_items, dtype=torch.float64)
    probs /= probs.sum()
    gen = torch.Generator().manual_seed(0)
    est = StreamingFrequencyEstimator(
        num_buckets, learning_rate=0.02, num_hashes=num_hashes, hash_ids=hash_ids, seed=3
    )
    errors = []
    truth = inclusion_probability(probs, batch)
    for step in range(1, 2001):
        est.update(torch.multinomial(probs, batch, replacement=True, generator=gen))
        if step in (20, 2000):
            got = est.estimate(torch.arange(num_items)).double()
            errors.append(float(((got - truth).abs() / truth).mean()))
    assert errors[1] < 0.15
    assert errors[1] < errors[0]


def test_log_inclusion_is_log_estimate():
    est = StreamingFrequencyEstimator(8, learning_rate=0.5, hash_ids=False)
    est.update(torch.tensor([1, 2]))
    est.update(torch.tensor([1]))
    ids = torch.tensor([1, 2, 3])
    assert torch.allclose(est.log_inclusion(ids), torch.log(est.estimate(ids)))
    assert not hasattr(est, "log_q")  # an inclusion probability is not a log expected count


def test_bad_inputs():
    with pytest.raises(ValueError, match="num_items"):
        item_counts(torch.tensor([0]), 0)
    with pytest.raises(ValueError, match="ids must lie"):
        item_counts(torch.tensor([3]), 2)
    with pytest.raises(ValueError, match="counts must have a positive sum"):
        item_probabilities(torch.zeros(3))
    with pytest.raises(ValueError, match="counts must be non-negative"):
        item_probabilities(torch.tensor([1.0, -1.0]))
    with pytest.raises(ValueError, match="num_draws must be >= 0"):
        inclusion_probability(torch.tensor([0.1]), -1)
    with pytest.raises(ValueError, match="num_draws must be an int"):
        inclusion_probability(torch.tensor([0.1]), 2.0)
    with pytest.raises(ValueError, match="probs must lie"):
        inclusion_probability(torch.tensor([1.5]), 3)
    with pytest.raises(ValueError, match="probs must lie"):
        inclusion_probability(torch.tensor([-0.1]), 3)
    with pytest.raises(ValueError, match="probs must lie"):
        inclusion_probability(torch.tensor([float("nan")]), 3)
    with pytest.raises(ValueError, match="probs must be a floating-point"):
        inclusion_probability(torch.tensor([0, 1]), 3)
    with pytest.raises(ValueError, match="learning_rate"):
        StreamingFrequencyEstimator(10, learning_rate=0.0)
    with pytest.raises(ValueError, match="learning_rate"):
        StreamingFrequencyEstimator(10, learning_rate=1.5)
    with pytest.raises(ValueError, match="num_buckets"):
        StreamingFrequencyEstimator(0)
    with pytest.raises(ValueError, match="num_hashes"):
        StreamingFrequencyEstimator(10, num_hashes=2, hash_ids=False)
    est = StreamingFrequencyEstimator(10, hash_ids=False)
    with pytest.raises(ValueError, match="ids must lie"):
        est.update(torch.tensor([10]))
    with pytest.raises(ValueError, match="ids must be an integer"):
        est.update(torch.tensor([1.0]))
    with pytest.raises(ValueError, match=r"ids must lie in \[0, 10\)"):
        est.estimate(torch.tensor([-1]))
    assert math.isfinite(float(est.estimate(torch.tensor([3]))))


def test_batch_log_q_is_the_log_expected_count_and_names_bad_ids():
    from candidate_sampling.sampling.frequency import batch_log_q

    p = torch.tensor([0.5, 0.25, 0.25, 0.0], dtype=torch.float64)
    ids = torch.tensor([[0, 2], [1, 1]])
    got = batch_log_q(ids, p, num_draws=6)
    assert got.dtype == torch.float32 and got.shape == (2, 2)
    torch.testing.assert_close(got, torch.log(6 * p[ids]).float())
    with pytest.raises(ValueError, match=r"positive_ids must lie in \[0, 4\)"):
        batch_log_q(torch.tensor([-1]), p, num_draws=2, name="positive_ids")  # no wrap to p[-1]
    with pytest.raises(ValueError, match="must be > 0 for every id of ids, got 0 for id 3"):
        batch_log_q(torch.tensor([0, 3]), p, num_draws=2)
    with pytest.raises(ValueError, match="num_draws must be >= 1"):
        batch_log_q(ids, p, num_draws=0)
    with pytest.raises(ValueError, match="item_probabilities must lie in"):
        batch_log_q(ids, p * 3, num_draws=1)


def test_multi_hash_estimate_is_one_over_the_largest_gap_under_collisions():
    """Algorithm 2 reads the *largest* gap over the hash functions (a collision only
    shortens a gap); brute force over the buckets, with many collisions (40 ids in 20
    buckets; a min over the hashes gave 0.33 where this gives 0.23)."""
    est = StreamingFrequencyEstimator(num_buckets=20, num_hashes=3, learning_rate=0.3,
                                      seed=1)
    gen = torch.Generator().manual_seed(0)
    for _ in range(60):
        est.update(torch.randint(0, 40, (6,), generator=gen))
    ids = torch.arange(40)
    buckets = est.buckets(ids)  # (40, 3)
    expected = torch.empty(40, dtype=torch.float64)
    for i in range(40):
        gaps = []
        for m in range(3):
            b = int(buckets[i, m])
            unseen = float(est.last_seen[m, b]) == 0
            gaps.append(est.step + 1.0 if unseen else float(est.gap[m, b]))
        expected[i] = 1.0 / max(max(gaps), 1.0)
    torch.testing.assert_close(est.estimate(ids).double(), expected, rtol=1e-6, atol=0)
    assert (buckets[:, 0, None] == buckets[None, :, 0]).sum() > 40  # collisions happen



def _plain_round_inverse(value: int, multiplier: int, shift: int) -> int:
    """The input of one scramble round (multiply mod P, then xor-shift) that gives ``value``."""
    z = value
    for _ in range(31 // shift + 1):  # z ^ (z >> shift) = value, solved by iteration
        z = value ^ (z >> shift)
    return z * pow(multiplier, -1, MERSENNE_PRIME) % MERSENNE_PRIME


def test_scramble_is_a_bijection_of_0_to_p_including_the_walked_values():
    """The ids are scrambled by a fixed bijection of [0, P) before hashing, so distinct ids
    stay distinct (Carter–Wegman's guarantee is kept). The two ids whose plain round would
    land on 2^31 − 1, outside [0, P), are walked once more; both are checked explicitly."""
    from candidate_sampling.sampling.hashing import _SCRAMBLE_ROUNDS, _scramble_ids

    first, second = _SCRAMBLE_ROUNDS
    walked_in_first = _plain_round_inverse(MERSENNE_PRIME, *first)
    walked_in_second = _plain_round_inverse(_plain_round_inverse(MERSENNE_PRIME, *second), *first)
    gen = torch.Generator().manual_seed(0)
    ids = torch.cat([
        torch.arange(1_000_000),
        torch.arange(MERSENNE_PRIME - 1_000_000, MERSENNE_PRIME),
        torch.randint(0, MERSENNE_PRIME, (1_000_000,), generator=gen),
        torch.tensor([walked_in_first, walked_in_second]),
    ]).unique()
    out = _scramble_ids(ids)
    assert out.shape == ids.shape and out.dtype == torch.int64
    assert int(out.min()) >= 0 and int(out.max()) < MERSENNE_PRIME
    assert out.unique().numel() == ids.numel()
    # the walked ids really are the edge cases: their plain rounds leave [0, P)
    y = walked_in_first * first[0] % MERSENNE_PRIME
    assert y ^ (y >> first[1]) == MERSENNE_PRIME


def test_hash_of_consecutive_ids_fills_buckets_as_a_random_function():
    """Ids 0..n-1 (an arithmetic progression) used to crowd into a fraction of the buckets
    for about one draw of (a, b) in six (the worst of 2,000: 90 of 4,000 buckets). A random
    function fills 885 ± 9 buckets with 1,000 ids; every draw must come within 7 sd."""
    ids = torch.arange(1000)
    expected = 4000 * (1 - (1 - 1 / 4000) ** 1000)
    sd = (4000 * math.exp(-0.25) * (1 - 1.25 * math.exp(-0.25))) ** 0.5
    filled = [
        universal_hash(ids, draw_hash_parameters(1, seed), 4000).unique().numel()
        for seed in range(300)
    ]
    assert min(filled) > expected - 7 * sd, min(filled)
    assert abs(sum(filled) / len(filled) - expected) < 2 * sd


def test_hash_names_ids_outside_its_range():
    """The hash is exact for ids in [0, 2^31 - 1) only (a bijection there, no overflow):
    negative, larger and float ids are errors naming ``ids``, at the hash itself and
    through the hashed estimator (which used to hash 2^40 silently)."""
    params = draw_hash_parameters(2, seed=0)
    for bad in (torch.tensor([-1]), torch.tensor([MERSENNE_PRIME]), torch.tensor([2**40])):
        with pytest.raises(ValueError, match=r"ids must lie in \[0, 2147483647\)"):
            universal_hash(bad, params, 100)
        with pytest.raises(ValueError, match=r"ids must lie in \[0, 2147483647\)"):
            StreamingFrequencyEstimator(100, num_hashes=2).update(bad)
    with pytest.raises(ValueError, match="ids must be an integer tensor"):
        universal_hash(torch.tensor([1.5]), params, 100)
    edge = universal_hash(torch.tensor([MERSENNE_PRIME - 1]), params, 100)
    assert edge.shape == (1, 2) and int(edge.min()) >= 0 and int(edge.max()) < 100
