"""Tests of candidate_sampling.sampling.samplers: probabilities, draws, expected counts, bad input."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from candidate_sampling.sampling.samplers import (
    CandidateDraw,
    LogUniformSampler,
    UniformSampler,
    UnigramSampler,
    build_alias_table,
)
from candidate_sampling.sampling.frequency import log_expected_count

V = 40
EXCLUDE = [0]
COUNTS = (torch.arange(1, V + 1, dtype=torch.float64) ** -1.1) * 1e4  # Zipfian counts


def make(name: str, num_items: int = V, exclude=EXCLUDE):
    if name == "uniform":
        return UniformSampler(num_items, exclude=exclude)
    if name == "log_uniform":
        return LogUniformSampler(num_items, exclude=exclude)
    counts = (torch.arange(1, num_items + 1, dtype=torch.float64) ** -1.1) * 1e4
    return UnigramSampler(counts, distortion=0.75, exclude=exclude)


SAMPLERS = ["uniform", "log_uniform", "unigram"]


def brute_probs(name: str) -> list[float]:
    """float64 reference probabilities with a loop, id 0 excluded and renormalised."""
    raw = []
    for c in range(V):
        if c in EXCLUDE:
            raw.append(0.0)
        elif name == "uniform":
            raw.append(1.0)
        elif name == "log_uniform":
            raw.append(math.log((c + 2) / (c + 1)) / math.log(V + 1))
        else:
            raw.append(float(COUNTS[c]) ** 0.75)
    total = sum(raw)
    return [r / total for r in raw]


# --------------------------------------------------------------------------- probabilities


@pytest.mark.parametrize("name", SAMPLERS)
def test_probs_match_brute_force(name):
    s = make(name)
    ref = torch.tensor(brute_probs(name), dtype=torch.float64)
    assert s.probs.shape == (V,)
    assert s.probs.dtype == torch.float32
    torch.testing.assert_close(s.probs.double(), ref, rtol=1e-6, atol=1e-9)
    assert s.probs[0] == 0
    assert abs(float(s.probs.double().sum()) - 1.0) < 1e-6


def test_log_uniform_formula_without_exclusion():
    n = 1000
    s = LogUniformSampler(n)
    c = torch.arange(n, dtype=torch.float64)
    ref = torch.log((c + 2) / (c + 1)) / math.log(n + 1)
    torch.testing.assert_close(s.probs.double(), ref, rtol=1e-6, atol=0)


@pytest.mark.parametrize("n", [1, 2, 3, 7, 100, 1000])
def test_alias_table_reproduces_the_distribution_exactly(n):
    g = torch.Generator().manual_seed(n)
    w = torch.rand(n, generator=g, dtype=torch.float64) ** 3
    w[torch.rand(n, generator=g) < 0.3] = 0.0  # zero weights must never be drawn
    w[0] = 1.0
    threshold, alias = build_alias_table(w)
    assert threshold.shape == (n,) and alias.shape == (n,)
    assert bool(((threshold >= 0) & (threshold <= 1)).all())
    # loop reference: P(j) = (threshold[j] + sum_{i: alias[i]=j} (1 - threshold[i])) / n
    p = [0.0] * n
    for i in range(n):
        p[i] += float(threshold[i]) / n
        p[int(alias[i])] += (1.0 - float(threshold[i])) / n
    ref = (w / w.sum()).tolist()
    for j in range(n):
        assert abs(p[j] - ref[j]) < 1e-7 / n + 1e-12
        if ref[j] == 0:
            assert p[j] == 0.0


# --------------------------------------------------------------------------- draws


@pytest.mark.parametrize("name", SAMPLERS)
@pytest.mark.parametrize("unique", [False, True])
def test_draw_shapes_and_dtypes(name, unique):
    s = make(name)
    g = torch.Generator().manual_seed(0)
    d = s.sample(12, unique=unique, generator=g)
    assert isinstance(d, CandidateDraw)
    assert d.ids.shape == (12,) and d.ids.dtype == torch.int64
    assert d.log_q.shape == (12,) and d.log_q.dtype == torch.float32
    assert d.unique is unique and d.num_samples == 12
    assert d.positive_log_q is None  # drawn without positive_ids
    assert bool((d.ids > 0).all()) and bool((d.ids < V).all())  # id 0 excluded
    if unique:
        assert d.ids.unique().numel() == 12
        assert d.num_tries >= 12
    else:
        assert d.num_tries == 12
    torch.testing.assert_close(d.log_q, s.log_q(d.ids, d))
    # with positive_ids the same draw also reports their log expected count
    positive_ids = torch.tensor([[1, 2], [V - 1, 5]])
    g2 = torch.Generator().manual_seed(0)
    d2 = s.sample(12, unique=unique, generator=g2, positive_ids=positive_ids)
    assert torch.equal(d2.ids, d.ids) and d2.num_tries == d.num_tries
    assert d2.positive_log_q.shape == (2, 2) and d2.positive_log_q.dtype == torch.float32
    torch.testing.assert_close(d2.positive_log_q, s.log_q(positive_ids, d2))


@pytest.mark.parametrize("name", SAMPLERS)
def test_same_seed_same_draw(name):
    s = make(name)
    a = s.sample(10, unique=True, generator=torch.Generator().manual_seed(3))
    b = s.sample(10, unique=True, generator=torch.Generator().manual_seed(3))
    assert torch.equal(a.ids, b.ids) and a.num_tries == b.num_tries


@pytest.mark.parametrize("name", SAMPLERS)
def test_unique_with_k_equal_to_allowed_classes_takes_every_class(name):
    s = make(name, num_items=12)
    d = s.sample(11, unique=True, generator=torch.Generator().manual_seed(0))
    assert sorted(d.ids.tolist()) == list(range(1, 12))


@settings(max_examples=30, deadline=None)
@given(
    n=st.integers(2, 60),
    excluded=st.sets(st.integers(0, 59), max_size=10),
    seed=st.integers(0, 1000),
)
def test_uniform_exclusion_map_hits_exactly_the_allowed_ids(n, excluded, seed):
    excluded = {e for e in excluded if e < n}
    if len(excluded) >= n:
        return
    s = UniformSampler(n, exclude=sorted(excluded))
    d = s.sample(n - len(excluded), unique=True, generator=torch.Generator().manual_seed(seed))
    assert sorted(d.ids.tolist()) == sorted(set(range(n)) - excluded)
    many = s.sample(500, generator=torch.Generator().manual_seed(seed))
    assert not (set(many.ids.tolist()) & excluded)


@pytest.mark.parametrize("cls", [UniformSampler, LogUniformSampler])
def test_ten_million_classes_and_65536_samples(cls):
    n, k = 10**7, 65536
    s = cls(n, exclude=[0])
    g = torch.Generator().manual_seed(0)
    d = s.sample(k, generator=g)
    assert d.ids.shape == (k,) and int(d.ids.min()) >= 1 and int(d.ids.max()) < n
    u = s.sample(k, unique=True, generator=g)
    assert u.ids.unique().numel() == k and u.num_tries >= k
    assert bool(torch.isfinite(u.log_q).all())
    assert bool((u.log_q <= 0).all())  # an inclusion probability is <= 1


def test_log_uniform_reaches_the_tail_of_ten_million():
    s = LogUniformSampler(10**7)
    d = s.sample(200_000, generator=torch.Generator().manual_seed(0))
    # P(id >= 9.9e6) = 1 - log(9.9e6 + 1)/log(1e7 + 1) ~ 6.2e-4: ~125 expected
    tail = int((d.ids >= 9_900_000).sum())
    assert 60 < tail < 200
    # consecutive tail ids are all reachable (no float32 quantisation of the inverse CDF)
    assert d.ids[d.ids >= 9_990_000].unique().numel() >= 5


def test_unigram_million_classes():
    n = 10**6
    counts = torch.arange(1, n + 1, dtype=torch.float64) ** -1.0 * 1e6
    s = UnigramSampler(counts, exclude=[0])
    g = torch.Generator().manual_seed(0)
    d = s.sample(65536, unique=True, generator=g)
    assert d.ids.unique().numel() == 65536 and int(d.ids.min()) >= 1
    # the most frequent allowed id (1) is in the draw almost surely
    assert bool((d.ids == 1).any())


# --------------------------------------------------------------------------- expected counts


def test_log_expected_count_formulas_brute_force():
    p = torch.tensor([0.0, 1e-9, 1e-3, 0.3, 1.0], dtype=torch.float64)
    with_repl = log_expected_count(p, num_samples=7, num_tries=7, unique=False)
    uniq = log_expected_count(p, num_samples=7, num_tries=19, unique=True)
    for i, pi in enumerate(p.tolist()):
        ref_r = math.log(7 * pi) if pi > 0 else -math.inf
        ref_u = math.log(1 - (1 - pi) ** 19) if pi > 0 else -math.inf
        if pi == 1e-9:  # the plain power loses digits; compare with the series 19 * p
            ref_u = math.log(19 * pi)
        assert with_repl[i].item() == pytest.approx(ref_r, rel=1e-6) or ref_r == with_repl[i].item()
        assert uniq[i].item() == pytest.approx(ref_u, rel=1e-5, abs=1e-6) or ref_u == uniq[i].item()


def _empirical(name: str, unique: bool, k: int, trials: int, seed: int = 0):
    """Mean count (inclusion frequency) per id over ``trials`` draws, and the mean reported
    expected count (ours and TF's k*p-fallback rule), all ids at once."""
    s = make(name)
    g = torch.Generator().manual_seed(seed)
    all_ids = torch.arange(V)
    ids, tries = [], []
    for _ in range(trials):
        d = s.sample(k, unique=unique, generator=g)
        ids.append(d.ids)
        tries.append(d.num_tries)
    last = s.log_q(all_ids, d).double().exp()  # the sampler's own report...
    p = s.probs.double()
    t = torch.tensor(tries, dtype=torch.float64)[:, None]
    if unique:  # ...checked against the formula, then the formula is averaged over trials
        torch.testing.assert_close(last, 1 - (1 - p) ** t[-1], rtol=1e-5, atol=1e-7)
        per_trial = 1 - (1 - p[None, :]) ** t
    else:
        torch.testing.assert_close(last, k * p, rtol=1e-5, atol=0)
        per_trial = (k * p).expand(trials, V)
    tf_rule = torch.where(t == k, k * p[None, :], per_trial)
    counts = torch.bincount(torch.cat(ids), minlength=V).double()
    return s, counts / trials, per_trial.mean(0), tf_rule.mean(0)


@pytest.mark.parametrize("name", SAMPLERS)
def test_expected_count_with_replacement_matches_mean_count(name):
    k, trials = 6, 2000
    s, mean_count, reported, _ = _empirical(name, False, k, trials)
    p = s.probs.double()
    torch.testing.assert_close(reported, k * p, rtol=1e-5, atol=0)
    sigma = (k * p * (1 - p) / trials).sqrt()
    # head (1, 2) and tail (V-2, V-1) ids and everything between: within 5 sigma
    for c in range(1, V):
        assert abs(mean_count[c] - reported[c]) <= 5 * sigma[c] + 1e-12, c
    assert mean_count[0] == 0 and reported[0] == 0  # excluded id


@pytest.mark.parametrize("name", SAMPLERS)
def test_expected_count_unique_matches_inclusion_frequency(name):
    k, trials = 5, 3000
    s, freq, reported, tf_reported = _empirical(name, True, k, trials)
    sigma = (reported * (1 - reported) / trials).sqrt()
    z = (freq - reported)[1:] / sigma[1:]
    assert float(z.abs().max()) < 5, z
    assert bool((reported <= 1).all())
    assert freq[0] == 0 and reported[0] == 0
    if name != "uniform":
        # TF's k*p fallback overstates the head ids' inclusion: far outside 5 sigma
        z_tf = (freq - tf_reported)[1:] / sigma[1:]
        assert float(z_tf.abs().max()) > 5
        assert float((k * s.probs).max()) > float(reported.max())


def test_unique_expected_count_understates_when_k_is_all_classes():
    # the documented limit of 1 - (1 - p)^tries: with k = |V| every id is included
    s = make("log_uniform", num_items=10)
    d = s.sample(9, unique=True, generator=torch.Generator().manual_seed(0))
    e = d.log_q.exp()
    assert bool((e <= 1).all()) and float(e.min()) < 1


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("name", SAMPLERS)
def test_bad_num_samples(name):
    s = make(name)
    with pytest.raises(ValueError, match="num_samples"):
        s.sample(0)
    with pytest.raises(ValueError, match="num_samples"):
        s.sample(-3, unique=True)
    with pytest.raises(ValueError, match="num_samples"):
        s.sample(V, unique=True)  # only V - 1 ids are drawable
    with pytest.raises(ValueError, match="num_samples"):
        s.sample(2.0)


def test_bad_constructor_arguments():
    with pytest.raises(ValueError, match="num_items"):
        UniformSampler(0)
    with pytest.raises(ValueError, match="num_items"):
        LogUniformSampler(-5)
    with pytest.raises(ValueError, match="exclude"):
        UniformSampler(5, exclude=[5])
    with pytest.raises(ValueError, match="exclude"):
        LogUniformSampler(3, exclude=[0, 1, 2])
    with pytest.raises(ValueError, match="counts"):
        UnigramSampler(torch.tensor([1.0, 0.0, 2.0]))
    with pytest.raises(ValueError, match="counts"):
        UnigramSampler(torch.tensor([1.0, -1.0]))
    with pytest.raises(ValueError, match="counts"):
        UnigramSampler(torch.tensor([1.0, float("nan")]))
    with pytest.raises(ValueError, match="counts"):
        UnigramSampler(torch.tensor([]))
    with pytest.raises(ValueError, match="counts"):
        UnigramSampler(torch.ones(2, 2))
    with pytest.raises(ValueError, match="distortion"):
        UnigramSampler(torch.ones(3), distortion=float("nan"))
    with pytest.raises(ValueError, match="distortion"):
        UnigramSampler(torch.ones(3), distortion=-1.0)


def test_bad_ids_generator_and_draw():
    s = UniformSampler(10)
    d = s.sample(3)
    with pytest.raises(ValueError, match="ids"):
        s.log_q(torch.tensor([10]), d)
    with pytest.raises(ValueError, match="ids"):
        s.log_q(torch.tensor([-1]), d)
    with pytest.raises(ValueError, match="ids"):
        s.log_q(torch.tensor([1.0]), d)
    with pytest.raises(ValueError, match="draw"):
        s.log_q(torch.tensor([1]), (d.ids, d.log_q))
    with pytest.raises(ValueError, match="generator"):
        s.sample(3, generator="seed")
    with pytest.raises(ValueError, match="unique"):
        s.sample(3, unique=1)
    with pytest.raises(TypeError):
        s.sample(3, True)
    with pytest.raises(ValueError, match=r"positive_ids must lie in \[0, 10\)"):
        s.sample(3, positive_ids=torch.tensor([0, 10]))
    with pytest.raises(ValueError, match="positive_ids must be an integer"):
        s.sample(3, positive_ids=torch.tensor([0.0, 1.0]))


def test_excluded_true_id_has_minus_infinite_log_count():
    s = UnigramSampler(torch.ones(5), exclude=[2])
    d = s.sample(3, unique=True, generator=torch.Generator().manual_seed(0))
    out = s.log_q(torch.tensor([[2, 3]]), d)
    assert out.shape == (1, 2)
    assert out[0, 0] == -math.inf and math.isfinite(out[0, 1].item())


@pytest.mark.parametrize("name", SAMPLERS)
def test_float32_only_device_path(name, monkeypatch):
    # Apple MPS has no float64: the samplers then work in float32 and draw the log-uniform
    # inverse CDF on the CPU. Exercise that code path here on the CPU.
    import candidate_sampling.device as device_module
    import candidate_sampling.sampling.samplers as samplers_module

    # the package's one test of a device (tests/test_devices_without_float64.py emulates
    # the whole device; here only the samplers' float32 arithmetic is checked)
    for module in (device_module, samplers_module):
        monkeypatch.setattr(module, "has_float64", lambda device: False)
    s = make(name)
    assert s.probs.dtype == torch.float32
    torch.testing.assert_close(
        s.probs.double(), torch.tensor(brute_probs(name), dtype=torch.float64), rtol=1e-5, atol=1e-8
    )
    a = s.sample(15, unique=True, generator=torch.Generator().manual_seed(0))
    b = s.sample(15, unique=True, generator=torch.Generator().manual_seed(0))
    assert torch.equal(a.ids, b.ids) and a.ids.unique().numel() == 15
    assert int(a.ids.min()) >= 1
    assert bool(torch.isfinite(a.log_q).all())


@settings(max_examples=40, deadline=None)
@given(
    log_weights=st.lists(st.floats(-25.0, 15.0), min_size=1, max_size=200),
    zeros=st.lists(st.booleans(), min_size=200, max_size=200),
)
def test_alias_table_property_weights_over_many_orders_of_magnitude(log_weights, zeros):
    w = torch.tensor(log_weights, dtype=torch.float64).exp()
    w[torch.tensor(zeros[: w.numel()])] = 0.0
    if float(w.sum()) == 0:
        w[0] = 1.0
    n = w.numel()
    threshold, alias = build_alias_table(w)
    t = threshold.double()
    p = t.clone().index_add_(0, alias, 1 - t) / n
    ref = w / w.sum()
    assert bool(((p - ref).abs() <= 1e-7 / n + 1e-7 * ref).all())
    assert bool((p[ref == 0] == 0).all())


def test_a_draw_knows_the_positive_ids_it_was_made_for():
    sampler = UniformSampler(20)
    ids = torch.tensor([3, 4, 5])
    draw = sampler.sample(4, generator=torch.Generator().manual_seed(0), positive_ids=ids)
    assert torch.equal(draw.positive_ids, ids)
    draw.check_positive_ids(ids.clone())  # the same batch: fine
    with pytest.raises(ValueError, match="draw was made for other positive_ids"):
        draw.check_positive_ids(torch.tensor([3, 4, 6]))
    with pytest.raises(ValueError, match=r"draw was made for positive_ids of shape \(3,\)"):
        draw.check_positive_ids(torch.tensor([[3, 4, 5]]))
    with pytest.raises(ValueError, match="draw was made without positive_ids"):
        sampler.sample(4).check_positive_ids(ids)
    import candidate_sampling as cs

    with cs.validate_args(False):  # values unchecked; the shape still is
        draw.check_positive_ids(torch.tensor([3, 4, 6]))


def test_unigram_zero_count_is_allowed_only_at_an_excluded_id():
    # the message says "exclude the id": a zero count at an excluded id was rejected too
    s = UnigramSampler(torch.tensor([0.0, 1.0, 2.0]), distortion=1.0, exclude=[0])
    torch.testing.assert_close(s.probs, torch.tensor([0.0, 1 / 3, 2 / 3]))
    d = s.sample(200, generator=torch.Generator().manual_seed(0))
    assert int(d.ids.min()) >= 1
    with pytest.raises(ValueError, match=r"counts must be > 0 .* got minimum 0.0 at an id not"):
        UnigramSampler(torch.tensor([0.0, 1.0, 0.0]), exclude=[0])
    with pytest.raises(ValueError, match=r"counts must be > 0 .* got minimum -1.0"):
        UnigramSampler(torch.tensor([-1.0, 1.0, 2.0]), exclude=[2])


def test_sampler_value_checks_obey_the_switch():
    import candidate_sampling as cs

    with pytest.raises(ValueError, match="counts must be finite"):
        UnigramSampler(torch.tensor([1.0, float("nan")]))
    with pytest.raises(ValueError, match="weights must be >= 0"):
        build_alias_table(torch.tensor([1.0, -1.0]))
    with cs.validate_args(False):
        UnigramSampler(torch.tensor([1.0, 2.0, 0.5]))  # no value check, no sync
        build_alias_table(torch.tensor([1.0, 2.0]))


# --- gaps a mutation audit found (each test fails on the mutant it names) ---------------


def test_uniform_unique_tries_follow_the_coupon_collector_expectation():
    """The uniform sampler's own unique path (4k > n): the number of raw draws needed for
    k distinct ids of n has mean Σ_{i<k} n / (n − i) and is never below k (a mutant that
    counted k − 1 + ... gave a minimum of 7 and a mean of 13.4 here)."""
    n, k, reps = 10, 8, 4000
    sampler = UniformSampler(n)
    gen = torch.Generator().manual_seed(0)
    tries = torch.tensor(
        [sampler.sample(k, unique=True, generator=gen).num_tries for _ in range(reps)],
        dtype=torch.float64)
    expected = sum(n / (n - i) for i in range(k))  # 14.29
    assert int(tries.min()) >= k
    assert abs(float(tries.mean()) - expected) < 5 * float(tries.std()) / reps ** 0.5


def test_alias_table_is_exact_when_prefix_sums_tie():
    """Integer weights make prefix sums tie exactly; the table must still give w / Σw
    (a search on the wrong side of a tie gave [.125, .5, .125, .25])."""
    w = torch.tensor([1.0, 3.0, 1.0, 3.0], dtype=torch.float64)
    threshold, alias = build_alias_table(w)
    t = threshold.double()
    p = t.clone().index_add_(0, alias, 1 - t) / w.numel()
    torch.testing.assert_close(p, w / w.sum(), rtol=0, atol=1e-12)
    s = UnigramSampler(torch.tensor([1, 3, 1, 3]), distortion=1.0)
    torch.testing.assert_close(s.probs.double(), w / w.sum(), rtol=1e-6, atol=0)
