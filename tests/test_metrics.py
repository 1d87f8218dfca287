"""Full-catalogue retrieval metrics against brute-force loops."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from candidate_sampling.eval import KnownPairs
from candidate_sampling.eval.metrics import (
    expected_calibration_error,
    user_bootstrap,
    user_bootstrap_interval,
    sample_unseen_negatives,
    metrics_from_ranks,
    popularity_strata,
    positive_ranks,
    retrieval_metrics,
    sampled_metrics,
    sampled_ranks,
    stratified_metrics,
    top_k_items,
    top_k_stratum_shares,
)


def _data(seed=0, users=7, items=30, d=4, n=40):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(users, d, generator=g, dtype=torch.float64),
        torch.randn(items, d, generator=g, dtype=torch.float64),
        torch.randint(0, users, (n,), generator=g),
        torch.randint(0, items, (n,), generator=g),
    )


def _seen(seed=1, users=7, items=30, n=60):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, users, (n,), generator=g), torch.randint(0, items, (n,), generator=g)


def _known(pairs, items=30):
    return None if pairs is None else KnownPairs(*pairs, num_items=items)


@pytest.mark.parametrize("exclude", [False, True])
@pytest.mark.parametrize("chunk", [1, 3, 1000])
def test_ranks_match_loop(exclude, chunk):
    ue, ie, user_index, positive_ids = _data()
    seen_u, seen_i = _seen()
    got = positive_ranks(
        ue,
        ie,
        user_index,
        positive_ids,
        known=_known((seen_u, seen_i)) if exclude else None,
        chunk_size=chunk,
    )
    for n in range(user_index.shape[0]):
        u, t = int(user_index[n]), int(positive_ids[n])
        skip = {int(i) for uu, i in zip(seen_u, seen_i) if int(uu) == u} if exclude else set()
        target_score = float(ue[u] @ ie[t])
        want = sum(
            1 for y in range(ie.shape[0]) if y not in skip and float(ue[u] @ ie[y]) > target_score
        )
        assert int(got[n]) == want



@pytest.mark.parametrize("budget", [1, 64, 1 << 21])
def test_cpu_score_budget_changes_the_chunks_not_the_ranks(monkeypatch, budget):
    """The CPU cap on a chunk's scores (one row when the budget is below |V|) leaves every
    rank function's result as it is."""
    from candidate_sampling.eval import metrics
    from candidate_sampling.eval.baselines import ranks_from_scores

    ue, ie, user_index, positive_ids = _data()
    known = _known(_seen())
    want = positive_ranks(ue, ie, user_index, positive_ids, known=known)
    want_top = top_k_items(ue, ie, 5, known=known)
    monkeypatch.setattr(metrics, "CPU_SCORES_PER_CHUNK", budget)
    assert metrics._rows_per_chunk(2048, 30, torch.device("cpu")) == max(1, min(2048, budget // 30))
    assert metrics._rows_per_chunk(2048, 30, torch.device("meta")) == 2048
    assert torch.equal(positive_ranks(ue, ie, user_index, positive_ids, known=known), want)
    assert torch.equal(top_k_items(ue, ie, 5, known=known), want_top)
    got = ranks_from_scores(ue @ ie.T, user_index, positive_ids, known=known)
    assert torch.equal(got, want)


@pytest.mark.parametrize("budget", [1, 64, 1 << 21])
@pytest.mark.parametrize("chunk", [1, 3, 1000])
def test_both_rank_schedules_count_every_pair_against_its_users_row(monkeypatch, budget, chunk):
    """By user (the CPU's: pairs grouped by user, one row per user) and by chunk (a GPU's:
    one row per pair) give the loop's ranks, pairs in any order, users with one pair, many
    or none, known items removed but never the positive, a NaN item counted against."""
    from candidate_sampling.eval import metrics

    monkeypatch.setattr(metrics, "CPU_SCORES_PER_CHUNK", budget)
    g = torch.Generator().manual_seed(11)
    scores = torch.randn(9, 30, generator=g, dtype=torch.float64)
    scores[4, 7] = float("nan")
    users = torch.tensor([4, 0, 4, 8, 4, 0, 2, 2, 4, 8, 6, 0])  # 1, 3, 5, 7: no pair
    positives = torch.tensor([7, 3, 2, 29, 9, 3, 0, 11, 7, 5, 6, 18])
    seen_u, seen_i = _seen(seed=4, users=9, items=30, n=80)
    known = KnownPairs(seen_u, seen_i, num_items=30)
    want = []
    for u, t in zip(users.tolist(), positives.tolist()):
        row = scores[u].clone()  # the known items at -inf, the positive kept
        row[[int(i) for uu, i in zip(seen_u, seen_i) if int(uu) == u and int(i) != t]] = -math.inf
        want.append(sum(1 for y in range(30) if not row[y] <= row[t]))
    for by_user in (True, False):
        got = metrics._ranks_of_pairs(
            lambda u: scores[u], users, positives, known, chunk, 30, by_user=by_user
        )
        assert got.tolist() == want, by_user
    # a NaN positive ranks last; a NaN item counts against the positive (one more than -inf)
    row = scores[4].clone()
    row[7] = -math.inf
    row[[int(i) for uu, i in zip(seen_u, seen_i) if int(uu) == 4 and int(i) != 2]] = -math.inf
    assert want[0] == 30 and want[2] == sum(1 for y in range(30) if row[y] > row[2]) + 1
    # memory: a user's pairs are counted a chunk's worth at a time, never all at once
    counted = []
    count = metrics._count_above
    monkeypatch.setattr(
        metrics, "_count_above", lambda s, p: counted.append(s.shape[0]) or count(s, p)
    )
    many = torch.zeros(40, dtype=torch.int64)  # one user, 40 pairs
    metrics._ranks_of_pairs(lambda u: scores[u], many, positives[:1].repeat(40), known, chunk,
                            30, by_user=True)
    assert sum(counted) == 40 and max(counted) <= metrics._rows_per_chunk(
        chunk, 30, torch.device("cpu"))
    monkeypatch.setattr(metrics, "_count_above", count)
    # the default: by user for long rows and two pairs a user or more, by chunk otherwise
    ten_each, one_each = torch.arange(50).repeat(10), torch.arange(50)
    long_rows = metrics._BY_USER_MIN_ITEMS
    assert metrics._by_user_by_default(ten_each, long_rows)
    assert not metrics._by_user_by_default(ten_each, long_rows - 1)
    assert not metrics._by_user_by_default(one_each, long_rows)
    empty = torch.zeros(0, dtype=torch.int64)
    for by_user in (True, False):
        got = metrics._ranks_of_pairs(
            lambda u: scores[u], empty, empty, known, chunk, 30, by_user=by_user
        )
        assert got.shape == (0,) and got.dtype == torch.int64

def test_metrics_match_loop():
    ranks = torch.tensor([0, 3, 12, 1, 50])
    users = torch.tensor([0, 0, 1, 2, 2])
    got = metrics_from_ranks(ranks, users, ks=(2, 10))
    assert got["hit_rate@2"] == pytest.approx(2 / 5)
    assert got["hit_rate@10"] == pytest.approx(3 / 5)
    # per-user recall@10: user0 2/2, user1 0/1, user2 1/2
    assert got["recall@10"] == pytest.approx((1 + 0 + 0.5) / 3)
    ndcg = (1 / math.log2(2) + 1 / math.log2(5) + 1 / math.log2(3)) / 5
    assert got["ndcg@10"] == pytest.approx(ndcg)


def test_retrieval_metrics_perfect_model():
    items = torch.eye(5, dtype=torch.float64)
    users = torch.eye(5, dtype=torch.float64)
    m = retrieval_metrics(users, items, torch.arange(5), torch.arange(5), ks=(1,))
    assert m["hit_rate@1"] == 1.0 and m["ndcg@1"] == 1.0 and m["recall@1"] == 1.0


@pytest.mark.parametrize("exclude", [False, True])
def test_top_k_matches_sort(exclude):
    ue, ie, _, _ = _data(2)
    seen_u, seen_i = _seen(3)
    got = top_k_items(ue, ie, 5, known=_known((seen_u, seen_i)) if exclude else None, chunk_size=2)
    for u in range(ue.shape[0]):
        skip = {int(i) for uu, i in zip(seen_u, seen_i) if int(uu) == u} if exclude else set()
        scores = [(float(ue[u] @ ie[y]), y) for y in range(ie.shape[0]) if y not in skip]
        want = [y for _, y in sorted(scores, reverse=True)[:5]]
        assert got[u].tolist() == want


def test_positive_is_never_excluded():
    ue = torch.tensor([[1.0, 0.0]])
    ie = torch.tensor([[1.0, 0.0], [2.0, 0.0], [0.5, 0.0]])
    known = KnownPairs(torch.tensor([0, 0]), torch.tensor([0, 1]), num_items=3)
    ranks = positive_ranks(ue, ie, torch.tensor([0]), torch.tensor([0]), known=known)
    assert int(ranks[0]) == 0  # item 1 (seen) no longer outranks the positive


@pytest.mark.parametrize("exclude", [False, True])
def test_retrieval_metrics_are_metrics_of_the_positive_ranks(exclude):
    ue, ie, user_index, positive_ids = _data(4)
    seen = _known(_seen(5)) if exclude else None
    got = retrieval_metrics(
        ue, ie, user_index, positive_ids, ks=(1, 5, 10), known=seen, chunk_size=7
    )
    ranks = positive_ranks(ue, ie, user_index, positive_ids, known=seen)
    assert got == metrics_from_ranks(ranks, user_index, ks=(1, 5, 10))
    assert set(got) == {f"{m}@{k}" for m in ("hit_rate", "recall", "ndcg") for k in (1, 5, 10)}
    assert set(retrieval_metrics(ue, ie, user_index, positive_ids)) == {
        f"{m}@{k}" for m in ("hit_rate", "recall", "ndcg") for k in (10, 50, 100)
    }


def test_options_are_keyword_only():
    ue, ie, user_index, positive_ids = _data()
    with pytest.raises(TypeError):
        retrieval_metrics(ue, ie, user_index, positive_ids, (1,))
    with pytest.raises(TypeError):
        positive_ranks(ue, ie, user_index, positive_ids, None, 10)
    with pytest.raises(TypeError):
        top_k_items(ue, ie, 3, None)
    with pytest.raises(TypeError):
        metrics_from_ranks(torch.tensor([0]), torch.tensor([0]), (1,))


def test_bad_inputs():
    ue, ie, user_index, positive_ids = _data()
    with pytest.raises(ValueError, match="embedding size d"):
        positive_ranks(ue, ie[:, :2], user_index, positive_ids)
    with pytest.raises(ValueError, match="positive_ids must lie"):
        positive_ranks(ue, ie, user_index, positive_ids + 100)
    with pytest.raises(ValueError, match="user_index must lie"):
        positive_ranks(ue, ie, user_index + 100, positive_ids)
    with pytest.raises(ValueError, match="positive_ids must be an integer"):
        positive_ranks(ue, ie, user_index, positive_ids.double())
    with pytest.raises(ValueError, match="number of interactions"):
        positive_ranks(ue, ie, user_index, positive_ids[:3])
    with pytest.raises(ValueError, match="chunk_size"):
        positive_ranks(ue, ie, user_index, positive_ids, chunk_size=0)
    with pytest.raises(ValueError, match="known must be built for the catalogue of 30"):
        positive_ranks(ue, ie, user_index, positive_ids, known=_known(_seen(), items=31))
    with pytest.raises(ValueError, match="known holds pairs of user 7"):
        positive_ranks(ue, ie, user_index, positive_ids, known=_known(_seen(users=8)))
    with pytest.raises(ValueError, match="known must be a KnownPairs"):
        positive_ranks(ue, ie, user_index, positive_ids, known=(user_index, positive_ids))
    with pytest.raises(ValueError, match="known must be a KnownPairs"):
        sampled_ranks(ue, ie, user_index, positive_ids, known=(user_index, positive_ids))
    with pytest.raises(ValueError, match=r"ks\[0\] must be"):
        retrieval_metrics(ue, ie, user_index, positive_ids, ks=(0,))
    with pytest.raises(ValueError, match="k must be"):
        top_k_items(ue, ie, 0)


# ------------------------------------------- chapter 9: sampled and stratified metrics


@pytest.mark.parametrize("exclude", [False, True])
def test_sampled_ranks_match_a_loop_over_the_same_negatives(exclude):
    ue, ie, user_index, positive_ids = _data(items=60)
    pairs = _seen(items=60)
    seen = _known(pairs, items=60) if exclude else None
    ranks = sampled_ranks(
        ue,
        ie,
        user_index,
        positive_ids,
        num_negatives=12,
        known=seen,
        generator=torch.Generator().manual_seed(3),
    )
    negatives = sample_unseen_negatives(
        user_index,
        positive_ids,
        num_users=7,
        num_items=60,
        num_negatives=12,
        known=seen,
        generator=torch.Generator().manual_seed(3),
    )
    seen_pairs = set(zip(*(t.tolist() for t in pairs))) if exclude else set()
    for i in range(len(user_index)):
        u, p = int(user_index[i]), int(positive_ids[i])
        row = negatives[i].tolist()
        assert len(set(row)) == 12 and p not in row
        assert not any((u, y) in seen_pairs for y in row)
        expected = sum(float(ue[u] @ ie[y]) > float(ue[u] @ ie[p]) for y in row)
        assert int(ranks[i]) == expected


@pytest.mark.parametrize("exclude", [False, True])
def test_sampling_every_unseen_item_gives_the_full_catalogue_rank(exclude):
    """With as many negatives as unseen items, the sampled protocol ranks the positive
    among the whole catalogue (seen items excluded): the ranks equal positive_ranks."""
    ue, ie, _, _ = _data(items=20)
    user_index, positive_ids = torch.tensor([0, 1, 2]), torch.tensor([5, 6, 7])
    seen = (torch.tensor([0, 0, 1]), torch.tensor([1, 2, 3])) if exclude else None
    seen = _known(seen, items=20)
    full = positive_ranks(ue, ie, user_index, positive_ids, known=seen)
    # every row must be able to draw the same number: drop the users with fewer unseen
    m = 17 if exclude else 19
    rows = torch.tensor([0]) if exclude else torch.arange(3)
    got = sampled_ranks(ue, ie, user_index[rows], positive_ids[rows], num_negatives=m, known=seen)
    assert torch.equal(got, full[rows])


def test_sampled_negatives_are_uniform_over_unseen_items():
    """Each allowed item is drawn with probability m / allowed (5 binomial sd)."""
    n, items, m = 4000, 15, 5
    users, pos = torch.zeros(n, dtype=torch.long), torch.zeros(n, dtype=torch.long)
    seen = KnownPairs(torch.tensor([0, 0]), torch.tensor([3, 9]), num_items=items)
    neg = sample_unseen_negatives(
        users, pos, num_users=1, num_items=items, num_negatives=m, known=seen,
        generator=torch.Generator().manual_seed(0),
    )
    freq = torch.bincount(neg.reshape(-1), minlength=items).double() / n
    allowed = torch.ones(items, dtype=torch.bool)
    allowed[[0, 3, 9]] = False
    p = m / int(allowed.sum())
    assert torch.all(freq[~allowed] == 0)
    sigma = math.sqrt(p * (1 - p) / n)
    assert torch.all((freq[allowed] - p).abs() < 5 * sigma)


def test_sampled_metrics_are_metrics_of_the_sampled_ranks():
    ue, ie, user_index, positive_ids = _data(items=200)
    got = sampled_metrics(
        ue, ie, user_index, positive_ids, ks=(5, 10), generator=torch.Generator().manual_seed(1)
    )
    ranks = sampled_ranks(
        ue, ie, user_index, positive_ids, generator=torch.Generator().manual_seed(1)
    )
    assert int(ranks.max()) <= 100
    assert got == metrics_from_ranks(ranks, user_index, ks=(5, 10))


def test_sampled_metrics_bad_inputs():
    ue, ie, user_index, positive_ids = _data(items=30)
    with pytest.raises(ValueError, match="num_negatives must be <="):
        sampled_ranks(ue, ie, user_index, positive_ids, num_negatives=30)
    with pytest.raises(ValueError, match="num_negatives must be >= 1"):
        sampled_ranks(ue, ie, user_index, positive_ids, num_negatives=0)
    with pytest.raises(ValueError, match="positive_ids must lie"):
        sampled_metrics(ue, ie, user_index, positive_ids + 30, num_negatives=5)
    with pytest.raises(ValueError, match="embedding size d"):
        sampled_metrics(ue, ie[:, :2], user_index, positive_ids, num_negatives=5)
    with pytest.raises(TypeError):
        sampled_metrics(ue, ie, user_index, positive_ids, 5)


def test_popularity_strata_are_equal_sized_and_ordered():
    counts = torch.tensor([5, 50, 0, 7, 7, 100, 1, 2, 3, 9])
    strata = popularity_strata(counts, num_strata=5)
    assert strata.tolist() == [2, 0, 4, 1, 2, 0, 4, 3, 3, 1]  # ties (7, 7) by id
    assert torch.equal(torch.bincount(strata), torch.full((5,), 2))
    with pytest.raises(ValueError, match="num_strata"):
        popularity_strata(counts, num_strata=11)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    num_strata=st.integers(1, 6),
    n=st.integers(1, 60),
)
def test_stratified_metrics_partition_the_test_pairs(seed, num_strata, n):
    g = torch.Generator().manual_seed(seed)
    items = 30
    ranks = torch.randint(0, 40, (n,), generator=g)
    users = torch.randint(0, 5, (n,), generator=g)
    positive_ids = torch.randint(0, items, (n,), generator=g)
    strata = popularity_strata(torch.rand(items, generator=g), num_strata=num_strata)
    table = stratified_metrics(ranks, users, positive_ids, strata, ks=(3, 10))
    overall = metrics_from_ranks(ranks, users, ks=(3, 10))
    assert list(table.index) == list(range(num_strata))
    assert int(table.pairs.sum()) == n and math.isclose(table.share.sum(), 1.0)
    filled = table[table.pairs > 0]
    for key in ("hit_rate@3", "hit_rate@10", "ndcg@10"):
        assert math.isclose((filled.share * filled[key]).sum(), overall[key], abs_tol=1e-12)
    # a stratum's metrics are the metrics of its own pairs
    g0 = int(filled.index[0])
    members = strata[positive_ids] == g0
    alone = metrics_from_ranks(ranks[members], users[members], ks=(3, 10))
    assert math.isclose(filled.loc[g0, "recall@10"], alone["recall@10"])


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), k=st.integers(1, 8))
def test_top_k_stratum_shares_match_a_loop(seed, k):
    g = torch.Generator().manual_seed(seed)
    strata = popularity_strata(torch.rand(20, generator=g), num_strata=4)
    top = torch.randint(0, 20, (6, k), generator=g)
    shares = top_k_stratum_shares(top, strata)
    expected = [
        sum(int(strata[y]) == s for y in top.reshape(-1).tolist()) / (6 * k) for s in range(4)
    ]
    assert torch.allclose(shares, torch.tensor(expected, dtype=torch.float64))
    assert math.isclose(float(shares.sum()), 1.0)


def test_stratified_bad_inputs():
    strata = torch.tensor([0, 1, 1])
    with pytest.raises(ValueError, match="item_strata must be an integer"):
        top_k_stratum_shares(torch.tensor([[0]]), strata.double())
    with pytest.raises(ValueError, match="top_ids must lie"):
        top_k_stratum_shares(torch.tensor([[3]]), strata)
    with pytest.raises(ValueError, match="item_strata must be >= 0"):
        top_k_stratum_shares(torch.tensor([[0]]), torch.tensor([0, -1, 1]))
    with pytest.raises(ValueError, match="number of interactions"):
        stratified_metrics(torch.tensor([0, 1]), torch.tensor([0, 0]), torch.tensor([0]), strata)


def test_sample_unseen_negatives_names_bad_arguments():
    users, pos = torch.tensor([0, 1]), torch.tensor([2, 3])
    with pytest.raises(ValueError, match="num_negatives"):
        sample_unseen_negatives(users, pos, num_users=2, num_items=10, num_negatives=0)
    with pytest.raises(ValueError, match="positive_ids"):
        sample_unseen_negatives(users, pos + 10, num_users=2, num_items=10)
    with pytest.raises(ValueError, match="num_negatives|allowed|fewer"):
        sample_unseen_negatives(users, pos, num_users=2, num_items=10, num_negatives=10)


def test_stratified_metrics_accepts_user_index_on_another_device_and_checks_it():
    ranks = torch.tensor([0, 5, 20, 1])
    users = torch.tensor([0, 0, 1, 2])
    positives = torch.tensor([0, 1, 2, 3])
    strata = torch.tensor([0, 0, 1, 1])
    table = stratified_metrics(ranks, users, positives, strata, ks=(10,))
    assert table["pairs"].tolist() == [2, 2]
    with pytest.raises(ValueError, match="user_index"):
        stratified_metrics(ranks, users[:3], positives, strata, ks=(10,))


# ------------------------------------------------ a diverged model is an error, not a score


@pytest.mark.parametrize("which", ["user", "item"])
def test_nan_embeddings_are_an_error_not_rank_zero(which):
    ue, ie, user_index, positive_ids = _data(items=30)
    if which == "user":
        ue = torch.full_like(ue, float("nan"))
    else:
        ie = torch.full_like(ie, float("nan"))
    name = f"{which}_embeddings must be finite"
    for call in (
        lambda: positive_ranks(ue, ie, user_index, positive_ids),
        lambda: retrieval_metrics(ue, ie, user_index, positive_ids),
        lambda: sampled_ranks(ue, ie, user_index, positive_ids, num_negatives=5),
        lambda: sampled_metrics(ue, ie, user_index, positive_ids, num_negatives=5),
        lambda: top_k_items(ue, ie, 3),
    ):
        with pytest.raises(ValueError, match=name):
            call()


def test_nan_scores_count_against_the_positive_with_checks_off():
    """Checks off: no error, but a NaN model still scores no hits (NaN counts as higher)."""
    import candidate_sampling as cs

    ue, ie, user_index, positive_ids = _data(items=30)
    nan_u = torch.full_like(ue, float("nan"))
    with cs.validate_args(False):
        full = positive_ranks(nan_u, ie, user_index, positive_ids)
        sampled = sampled_ranks(nan_u, ie, user_index, positive_ids, num_negatives=5)
    assert bool((full == 30).all()) and bool((sampled == 5).all())
    assert metrics_from_ranks(full, user_index, ks=(10,))["hit_rate@10"] == 0.0
    # one NaN item: it outranks every positive, the others keep their exact rank
    one = ie.clone()
    one[0] = float("nan")
    keep = positive_ids != 0
    with cs.validate_args(False):
        got = positive_ranks(ue, one, user_index[keep], positive_ids[keep])
    clean = positive_ranks(ue, ie[1:], user_index[keep], positive_ids[keep] - 1)
    assert torch.equal(got, clean + 1)


def test_nan_popularity_is_an_error():
    with pytest.raises(ValueError, match="popularity must be finite"):
        popularity_strata(torch.tensor([1.0, float("nan"), 2.0]), num_strata=2)
    with pytest.raises(ValueError, match="ranks must be >= 0"):
        metrics_from_ranks(torch.tensor([-1, 2]), torch.tensor([0, 1]))


def test_half_precision_embeddings_are_scored_in_float32():
    """float16 scores 300·300 and 300·316 both overflow to inf and would tie (rank 0);
    scored in float32 the positive (item 0) ranks 1."""
    ue = torch.tensor([[300.0]], dtype=torch.float16)
    ie = torch.tensor([[300.0], [316.0]], dtype=torch.float16)
    users, positives = torch.tensor([0]), torch.tensor([0])
    assert positive_ranks(ue, ie, users, positives).tolist() == [1]
    assert top_k_items(ue, ie, 1).tolist() == [[1]]
    sampled = sampled_ranks(ue, ie, users, positives, num_negatives=1)
    assert sampled.tolist() == [1]


# --- user_bootstrap_interval: the book's interval for a comparison -------------------


def test_user_bootstrap_matches_a_loop_over_resampled_users():
    """Brute force: draw the users, collect their pairs, average; same draws, float64."""
    gen = torch.Generator().manual_seed(3)
    values = torch.rand(60, generator=gen, dtype=torch.float64)
    users = torch.randint(7, (60,), generator=gen)
    mean, low, high = user_bootstrap_interval(
        values, users, num_users=8, num_resamples=300,
        generator=torch.Generator().manual_seed(11))
    draws = torch.randint(8, (300, 8), generator=torch.Generator().manual_seed(11))
    estimates = []
    for row in draws:
        picked = torch.cat([values[users == u] for u in row.tolist()])
        estimates.append(float(picked.mean()))
    lo, hi = torch.quantile(torch.tensor(estimates, dtype=torch.float64),
                            torch.tensor([0.025, 0.975], dtype=torch.float64))
    assert mean == pytest.approx(float(values.mean()), abs=1e-12)
    assert low == pytest.approx(float(lo), abs=1e-12)
    assert high == pytest.approx(float(hi), abs=1e-12)


def test_user_bootstrap_without_users_is_the_ordinary_bootstrap_and_covers_the_mean():
    gen = torch.Generator().manual_seed(0)
    values = torch.randn(400, generator=gen, dtype=torch.float64)
    mean, low, high = user_bootstrap_interval(values, generator=gen)
    se = float(values.std()) / 400 ** 0.5
    assert low < mean < high
    # the 95% interval of a mean is about ±1.96 standard errors
    assert (high - low) / (2 * 1.96 * se) == pytest.approx(1.0, rel=0.15)


def test_user_bootstrap_widens_when_a_users_pairs_move_together():
    """Pairs of one user that agree are one unit, not many: the interval must widen."""
    gen = torch.Generator().manual_seed(1)
    per_user = torch.randn(40, generator=gen, dtype=torch.float64)
    users = torch.arange(40).repeat_interleave(25)
    values = per_user[users]  # 25 identical pairs per user
    _, lo_users, hi_users = user_bootstrap_interval(values, users, generator=gen)
    _, lo_pairs, hi_pairs = user_bootstrap_interval(values, generator=gen)
    assert hi_users - lo_users > 3 * (hi_pairs - lo_pairs)


def test_user_bootstrap_constant_nan_and_bad_input():
    assert user_bootstrap_interval(torch.full((5,), 0.25)) == (0.25, 0.25, 0.25)
    with_nan = torch.tensor([0.0, float("nan"), 1.0])
    assert all(math.isnan(x) for x in user_bootstrap_interval(with_nan))
    ones = torch.ones(3)
    for kwargs, name in [
        (dict(users=torch.tensor([0, -1, 1])), "users"),
        (dict(users=torch.tensor([0, 1, 5]), num_users=3), "users"),
        (dict(users=torch.ones(2, dtype=torch.long)), "users"),
        (dict(users=torch.tensor([0.0, 1.0, 2.0])), "users"),
        (dict(confidence=1.0), "confidence"),
        (dict(num_resamples=0), "num_resamples"),
        (dict(generator=0), "generator"),
    ]:
        with pytest.raises(ValueError, match=name):
            user_bootstrap_interval(ones, **kwargs)
    with pytest.raises(ValueError, match="values"):
        user_bootstrap_interval(torch.ones(3, 1))
    with pytest.raises(ValueError, match="values"):
        user_bootstrap_interval(torch.tensor([1, 0, 1]))  # hits must be float


# --- user_bootstrap: the draws behind the interval, for statistics of several models --


def test_user_bootstrap_rows_share_the_draws_and_match_a_loop():
    """(m, n) values: every row resampled with the same users; brute force, float64."""
    gen = torch.Generator().manual_seed(5)
    values = torch.rand(3, 50, generator=gen, dtype=torch.float64)
    users = torch.randint(6, (50,), generator=gen)
    draws = user_bootstrap(values, users, num_users=6, num_resamples=200,
                           generator=torch.Generator().manual_seed(2))
    assert draws.shape == (200, 3) and draws.dtype == torch.float64
    picks = torch.randint(6, (200, 6), generator=torch.Generator().manual_seed(2))
    for r, row in enumerate(picks.tolist()):
        columns = torch.cat([(users == u).nonzero().flatten() for u in row])
        expected = values[:, columns].mean(1)
        assert torch.allclose(draws[r], expected, rtol=0, atol=1e-12)
    # one row alone gives that row's column of the joint draws
    alone = user_bootstrap(values[1], users, num_users=6, num_resamples=200,
                           generator=torch.Generator().manual_seed(2))
    assert alone.shape == (200,)
    assert torch.allclose(alone, draws[:, 1], rtol=0, atol=1e-12)
    # the interval summarises the same draws
    _, low, high = user_bootstrap_interval(values[1], users, num_users=6, num_resamples=200,
                                           generator=torch.Generator().manual_seed(2))
    q = torch.quantile(alone, torch.tensor([0.025, 0.975], dtype=torch.float64))
    assert (low, high) == pytest.approx((float(q[0]), float(q[1])), abs=1e-12)


def test_user_bootstrap_of_one_value_per_user_is_the_plain_bootstrap_of_the_mean():
    gen = torch.Generator().manual_seed(7)
    per_user = torch.rand(30, generator=gen, dtype=torch.float64)
    draws = user_bootstrap(per_user, num_resamples=100,
                           generator=torch.Generator().manual_seed(1))
    idx = torch.randint(30, (100, 30), generator=torch.Generator().manual_seed(1))
    assert torch.allclose(draws, per_user[idx].mean(1), rtol=0, atol=1e-12)


def test_user_bootstrap_nan_and_bad_input():
    with_nan = torch.tensor([[0.0, 1.0, 0.5], [0.0, float("nan"), 1.0]])
    draws = user_bootstrap(with_nan, num_resamples=50)
    assert not draws[:, 0].isnan().any()
    # a draw that holds the NaN pair is NaN, never dropped
    assert draws[:, 1].isnan().any()
    for bad in (torch.ones(2, 2, 2), torch.ones(2, 3, dtype=torch.long), [0.0, 1.0]):
        with pytest.raises(ValueError, match="values"):
            user_bootstrap(bad)
    with pytest.raises(ValueError, match="users"):
        user_bootstrap(torch.ones(2, 3), torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="num_resamples"):
        user_bootstrap(torch.ones(3), num_resamples=0)


def test_user_bootstrap_refuses_resamples_without_pairs():
    """Users without pairs are resampled too (a cluster of size 0); a resample made only
    of them has no mean: a clear error, not a silent NaN (0 / 0)."""
    values, users = torch.ones(3), torch.zeros(3, dtype=torch.long)
    with pytest.raises(ValueError, match="without pairs"):
        user_bootstrap(values, users, num_users=5, num_resamples=200,
                       generator=torch.Generator().manual_seed(0))
    # a few users without pairs among many with pairs are fine
    users = torch.arange(30).repeat(2)
    draws = user_bootstrap(torch.rand(60, dtype=torch.float64), users, num_users=32,
                           num_resamples=200, generator=torch.Generator().manual_seed(0))
    assert bool(torch.isfinite(draws).all())


def _ece_loop(p, y, num_bins, binning):
    """Expected calibration error written out: sort, cut, and average bin by bin."""
    p, y = p.tolist(), [float(v) for v in y.tolist()]
    n = len(p)
    if binning == "quantile":
        order = sorted(range(n), key=lambda i: p[i])
        sizes = [n // num_bins + (b < n % num_bins) for b in range(num_bins)]
        groups, start = [], 0
        for size in sizes:
            groups.append(order[start : start + size])
            start += size
    else:
        groups = [[] for _ in range(num_bins)]
        for i in range(n):
            groups[min(int(p[i] * num_bins), num_bins - 1)].append(i)
    ece, predicted, observed, counts = 0.0, [], [], []
    for g in groups:
        counts.append(len(g))
        if not g:
            predicted.append(math.nan)
            observed.append(math.nan)
            continue
        mean_p = sum(p[i] for i in g) / len(g)
        mean_y = sum(y[i] for i in g) / len(g)
        predicted.append(mean_p)
        observed.append(mean_y)
        ece += len(g) / n * abs(mean_p - mean_y)
    return ece, predicted, observed, counts


@pytest.mark.parametrize("binning", ["quantile", "uniform"])
@pytest.mark.parametrize("num_bins", [1, 3, 10, 40])
def test_expected_calibration_error_matches_a_loop(binning, num_bins):
    g = torch.Generator().manual_seed(num_bins)
    p = torch.rand(37, generator=g, dtype=torch.float64) ** 3  # skewed: empty bins
    p[0], p[1] = 0.0, 1.0  # both ends of [0, 1]
    y = torch.rand(37, generator=g, dtype=torch.float64) < p
    ece, predicted, observed, counts = expected_calibration_error(
        p, y, num_bins=num_bins, binning=binning)
    ref = _ece_loop(p, y, num_bins, binning)
    assert math.isclose(ece, ref[0], rel_tol=1e-12, abs_tol=1e-15)
    assert counts.tolist() == ref[3] and int(counts.sum()) == 37
    for got, want in ((predicted, ref[1]), (observed, ref[2])):
        assert torch.allclose(got, torch.tensor(want, dtype=torch.float64),
                              rtol=1e-12, equal_nan=True)
    # float labels and float32 probabilities give the same answer
    again = expected_calibration_error(p.float(), y.double(), num_bins=num_bins,
                                       binning=binning)
    assert math.isclose(again[0], ece, rel_tol=1e-5, abs_tol=1e-7)


def test_expected_calibration_error_of_a_calibrated_and_an_overconfident_model():
    """Labels drawn with the predicted probabilities: ECE within a binomial bound of 0;
    the same predictions three times too large: ECE near the gap they open."""
    g = torch.Generator().manual_seed(0)
    n = 200_000
    p = 0.3 * torch.rand(n, generator=g, dtype=torch.float64)
    y = torch.rand(n, generator=g, dtype=torch.float64) < p
    ece, predicted, observed, _ = expected_calibration_error(p, y, num_bins=10)
    # each bin's frequency has s.e. at most sqrt(0.3 * 0.7 / (n / 10)); five of them
    assert ece < 5 * math.sqrt(0.3 * 0.7 / (n / 10))
    assert (predicted - observed).abs().max() < 5 * math.sqrt(0.3 * 0.7 / (n / 10))
    over, *_ = expected_calibration_error((3 * p).clamp(max=1), y, num_bins=10)
    assert abs(over - (3 * p).clamp(max=1).mean().item() + p.mean().item()) < 0.01


def test_expected_calibration_error_bad_inputs():
    p, y = torch.tensor([0.1, 0.5, 0.9]), torch.tensor([False, True, True])
    with pytest.raises(ValueError, match="probabilities"):
        expected_calibration_error(torch.tensor([0.1, 1.5, 0.2]), y)
    with pytest.raises(ValueError, match="probabilities"):
        expected_calibration_error(torch.tensor([0, 1, 1]), y)
    with pytest.raises(ValueError, match="probabilities"):
        expected_calibration_error(p[None], y)
    with pytest.raises(ValueError, match="labels"):
        expected_calibration_error(p, y[:2])
    with pytest.raises(ValueError, match="labels"):
        expected_calibration_error(p, torch.tensor([0, 2, 1]))
    with pytest.raises(ValueError, match="num_bins"):
        expected_calibration_error(p, y, num_bins=0)
    with pytest.raises(ValueError, match="binning"):
        expected_calibration_error(p, y, binning="equal")
    with pytest.raises(TypeError):
        expected_calibration_error(p, y, 10)  # options are keyword-only
