"""The hard-negative miner (chapter 8): exact indexes against torch.topk, HNSW recall,
the mining rules against a float64 loop, the known-positive table, the refresh schedule."""

from __future__ import annotations

import sys

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from candidate_sampling import CandidateSet
from candidate_sampling.eval import KnownPairs
from candidate_sampling.losses import in_batch_softmax_loss
from candidate_sampling.scale.mining import (
    HardNegativeMiner,
    brute_force_top_k,
    choose_negatives,
    exclusion_mask,
    import_faiss,
    survivors,
)

pytest.importorskip("faiss")

D64 = torch.float64


def randn(*shape, seed=0, dtype=torch.float32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def clustered(n, d, *, clusters=50, seed=0):
    """Items near cluster centres (a little structure, as learned embeddings have)."""
    g = torch.Generator().manual_seed(seed)
    centres = torch.randn(clusters, d, generator=g)
    which = torch.randint(0, clusters, (n,), generator=g)
    return centres[which] + 0.5 * torch.randn(n, d, generator=g)


# ---------------------------------------------------------------- search


@pytest.mark.parametrize("kind", ["flat", "torch"])
def test_exact_indexes_equal_brute_force_topk(kind):
    items, queries = randn(3000, 16, seed=1), randn(40, 16, seed=2)
    miner = HardNegativeMiner(index=kind, num_threads=1).build(items)
    scores, ids = miner.search(queries, 25)
    ref_scores, ref_ids = torch.topk(queries @ items.T, 25, dim=1)
    assert torch.equal(ids, ref_ids)
    assert torch.allclose(scores, ref_scores, atol=1e-4)
    b_scores, b_ids = brute_force_top_k(queries, items, 25, chunk_size=7)
    assert torch.equal(b_ids, ref_ids) and torch.allclose(b_scores, ref_scores)


def test_item_ids_are_mapped():
    items = randn(500, 8, seed=3)
    item_ids = torch.arange(500) * 7 + 3
    miner = HardNegativeMiner(index="flat", num_threads=1).build(items, item_ids)
    _, ids = miner.search(randn(5, 8, seed=4), 10)
    _, pos = torch.topk(randn(5, 8, seed=4) @ items.T, 10, dim=1)
    assert torch.equal(ids, item_ids[pos])
    assert torch.allclose(miner.item_vectors(item_ids[[4, 9]]), items[[4, 9]])


@pytest.mark.parametrize(
    ("kind", "data", "options"),
    [("hnsw", "gaussian", {"ef_search": 128}), ("ivf", "clustered", {"nprobe": 16})],
)
def test_approximate_index_recall_at_k(kind, data, options):
    """On this test data: HNSW on Gaussian vectors, IVF on clustered ones (what each is
    good at; the chapter and the benchmark measure recall on other data)."""
    if data == "gaussian":
        items, queries = randn(5000, 32, seed=5), randn(200, 32, seed=6)
    else:
        items, queries = clustered(5000, 32, seed=5), clustered(200, 32, seed=6)
    k = 50
    miner = HardNegativeMiner(index=kind, num_threads=1, **options).build(items)
    _, ids = miner.search(queries, k)
    _, ref = torch.topk(queries @ items.T, k, dim=1)
    recall = sum(len(set(a.tolist()) & set(b.tolist())) for a, b in zip(ids, ref)) / ref.numel()
    assert recall >= 0.95, recall
    assert miner.memory_bytes() >= items.numel() * 4  # it stores the vectors


# ---------------------------------------------------------------- mining rules


def ref_mine(
    queries,
    items,
    num_negatives,
    positives,
    *,
    range_min,
    range_max,
    max_score,
    relative_margin,
    absolute_margin,
    known=None,
):
    """Loop reference: sort, drop positives / known pairs, rank window, score filters."""
    out = []
    for i in range(queries.shape[0]):
        scores = (items @ queries[i]).tolist()
        order = sorted(range(len(scores)), key=lambda j: (-scores[j], j))
        banned = set(positives[i]) | (known[i] if known else set())
        s_pos = scores[positives[i][0]]
        rank, kept = 0, []
        for j in order:
            if j in banned:
                continue
            ok = range_min <= rank < range_max
            ok &= max_score is None or scores[j] <= max_score
            ok &= relative_margin is None or scores[j] < s_pos - relative_margin * abs(s_pos)
            ok &= absolute_margin is None or scores[j] < s_pos - absolute_margin
            if ok:
                kept.append((j, rank))
            rank += 1
        out.append(kept[:num_negatives])
    return out


@settings(max_examples=30)
@given(
    st.integers(0, 5),
    st.integers(1, 30),
    st.sampled_from([None, 0.5, 1.5]),
    st.sampled_from([None, 0.0, 0.05, 0.3]),
    st.sampled_from([None, 0.1, 1.0]),
    st.integers(0, 1000),
)
def test_mine_matches_loop_reference(range_min, width, max_score, rel, absm, seed):
    items = randn(200, 6, seed=seed, dtype=D64)
    queries = randn(7, 6, seed=seed + 1, dtype=D64)
    positives = torch.randint(0, 200, (7, 2), generator=torch.Generator().manual_seed(seed))
    # make the first positive a good match so that the margins keep something
    queries = queries + 2 * items[positives[:, 0]]
    miner = HardNegativeMiner(index="torch").build(items)
    mined = miner.mine(
        queries,
        num_negatives=4,
        positive_ids=positives,
        range_min=range_min,
        range_max=range_min + width,
        max_score=max_score,
        relative_margin=rel,
        absolute_margin=absm,
    )
    ref = ref_mine(
        queries,
        items,
        4,
        positives.tolist(),
        range_min=range_min,
        range_max=range_min + width,
        max_score=max_score,
        relative_margin=rel,
        absolute_margin=absm,
    )
    for i in range(7):
        got = [
            (int(j), int(r)) for j, r, v in zip(mined.ids[i], mined.ranks[i], mined.valid[i]) if v
        ]
        assert got == ref[i]
        assert all(int(j) == -1 for j, v in zip(mined.ids[i], mined.valid[i]) if not v)


@settings(max_examples=30)
@given(
    st.sampled_from([200, 500]),
    st.sampled_from([1, 4]),
    st.sampled_from([None, 0.5, 1.5]),
    st.sampled_from([None, 0.0, 0.05, 0.3]),
    st.sampled_from([None, 0.1, 1.0]),
    st.booleans(),
    st.integers(0, 1000),
)
def test_whole_catalogue_mining_matches_loop_reference(
    range_max, num_negatives, max_score, rel, absm, with_known, seed
):
    """fetch and window covering every item (the torch index's path without a full sort):
    the same negatives and ranks as the loop, known items and padding included."""
    items = randn(200, 6, seed=seed, dtype=D64)
    queries = randn(7, 6, seed=seed + 1, dtype=D64)
    positives = torch.randint(0, 200, (7, 2), generator=torch.Generator().manual_seed(seed))
    queries = queries + 2 * items[positives[:, 0]]
    extra, excluded = {}, [list(p) for p in positives.tolist()]
    if with_known:  # user r knows the items 10 r .. 10 r + 29
        users = torch.arange(7).repeat_interleave(30)
        known_items = (10 * users + torch.arange(30).repeat(7)) % 200
        extra = {"known": KnownPairs(users, known_items, num_items=200),
                 "user_index": torch.arange(7)}
        for r in range(7):
            excluded[r] += [(10 * r + j) % 200 for j in range(30)]
    miner = HardNegativeMiner(index="torch").build(items)
    mined = miner.mine(queries, num_negatives=num_negatives, positive_ids=positives,
                       range_max=range_max, max_score=max_score, relative_margin=rel,
                       absolute_margin=absm, **extra)
    ref = ref_mine(queries, items, num_negatives, excluded, range_min=0,
                   range_max=range_max, max_score=max_score, relative_margin=rel,
                   absolute_margin=absm)
    assert mined.ids.shape == (7, num_negatives)
    for i in range(7):
        got = [
            (int(j), int(r)) for j, r, v in zip(mined.ids[i], mined.ranks[i], mined.valid[i]) if v
        ]
        assert got == ref[i]
        assert all(int(j) == -1 for j, v in zip(mined.ids[i], mined.valid[i]) if not v)


def test_relative_margin_any_sign_and_scale():
    """The positive-aware margin keeps only scores below the positive, whatever its sign.

    With s⁺ < 0 the old rule ``(1 − m)·s⁺`` lay *above* the positive and kept candidates
    that outscore it; ``s⁺ − m·|s⁺|`` keeps only those clearly below, and multiplying every
    score by a positive constant (a temperature) keeps the same set.
    """
    items = torch.tensor([[1.0], [-0.5], [-0.9], [-1.0], [-1.04], [-1.06], [-2.0]], dtype=D64)
    for scale in (1.0, 0.1, 20.0):
        query = torch.tensor([[scale]], dtype=D64)  # scores = scale * items
        miner = HardNegativeMiner(index="torch").build(items)
        mined = miner.mine(query, num_negatives=7, positive_ids=torch.tensor([3]),
                           range_max=7, relative_margin=0.05)
        kept = sorted(int(i) for i, v in zip(mined.ids[0], mined.valid[0]) if v)
        assert kept == [5, 6]  # below -1.05 * scale; the positive (-1.0) scores above them
        s_pos = scale * -1.0
        assert all(float(s) < s_pos for s, v in zip(mined.scores[0], mined.valid[0]) if v)
    # positive scores: the NV-Retriever rule, below 95% of the positive
    mined = HardNegativeMiner(index="torch").build(items).mine(
        torch.tensor([[1.0]], dtype=D64), num_negatives=7, positive_ids=torch.tensor([1]),
        range_max=7, relative_margin=0.05, positive_scores=torch.tensor([0.5], dtype=D64))
    kept = sorted(int(i) for i, v in zip(mined.ids[0], mined.valid[0]) if v)
    assert kept == [2, 3, 4, 5, 6]  # every score < 0.475, none of them the positive


def test_faiss_flat_mines_like_torch():
    items, queries = randn(1000, 8, seed=7), randn(20, 8, seed=8)
    pos = torch.randint(0, 1000, (20,), generator=torch.Generator().manual_seed(9))
    queries = queries + items[pos]
    kw = {
        "num_negatives": 5,
        "positive_ids": pos,
        "range_min": 2,
        "range_max": 40,
        "relative_margin": 0.05,
    }
    a = HardNegativeMiner(index="torch").build(items).mine(queries, **kw)
    b = HardNegativeMiner(index="flat", num_threads=1).build(items).mine(queries, **kw)
    assert torch.equal(a.ids, b.ids) and torch.equal(a.valid, b.valid)
    assert a.valid.any()


def test_an_index_that_returns_unsorted_lists_mines_the_same(monkeypatch):
    """mine() sorts again only when a search did not return its lists best first."""
    items, queries = randn(300, 8, seed=3), randn(12, 8, seed=4)
    pos = torch.arange(12)
    kw = {"num_negatives": 3, "positive_ids": pos, "range_min": 1, "range_max": 30}
    miner = HardNegativeMiner(index="torch").build(items)
    expected = miner.mine(queries, **kw)
    search = miner.search

    def shuffled(q, k):  # the same lists, each in a random order
        scores, ids = search(q, k)
        order = torch.argsort(torch.rand(scores.shape, generator=torch.Generator().manual_seed(5)))
        return scores.gather(1, order), ids.gather(1, order)

    monkeypatch.setattr(miner, "search", shuffled)
    got = miner.mine(queries, **kw)
    assert torch.equal(got.ids, expected.ids) and torch.equal(got.ranks, expected.ranks)
    assert torch.equal(got.valid, expected.valid)


@pytest.mark.parametrize("window", [{"range_max": 5, "fetch": 10}, {"range_max": 50}])
def test_nan_queries_raise_on_every_mining_path(window):
    """Whole-catalogue mining (no search call) checks its queries like the searched path."""
    miner = HardNegativeMiner(index="torch").build(randn(50, 4))
    queries = randn(3, 4)
    queries[0, 0] = float("nan")
    with pytest.raises(ValueError, match="queries must be finite"):
        miner.mine(queries, num_negatives=2, positive_ids=torch.arange(3), **window)


@pytest.mark.parametrize("window", [{"range_max": 5, "fetch": 10}, {"range_max": 50}])
def test_positive_ids_below_the_padding_value_raise_on_every_mining_path(window):
    """-1 pads a row's positives; a more negative id is a caller's mistake, not a pad."""
    miner = HardNegativeMiner(index="torch").build(randn(50, 4))
    with pytest.raises(ValueError, match="positive_ids must be >= -1"):
        miner.mine(randn(3, 4), num_negatives=2, positive_ids=torch.tensor([0, -5, 2]),
                   **window)
    padded = miner.mine(randn(3, 4), num_negatives=2, positive_ids=torch.tensor([0, -1, 2]),
                        **window)
    assert padded.valid.all()


def test_known_positives_are_excluded_and_rows_are_padded():
    items = randn(50, 4, seed=10, dtype=D64)
    queries = randn(3, 4, seed=11, dtype=D64)
    order = torch.argsort(queries @ items.T, dim=1, descending=True)
    # row 0 "already rated" its 5 best items; row 1 its best one; row 2 nothing
    known = KnownPairs(
        torch.tensor([0] * 5 + [1]), torch.cat([order[0, :5], order[1, :1]]), num_items=50
    )
    miner = HardNegativeMiner(index="torch").build(items)
    mined = miner.mine(queries, num_negatives=3, known=known, user_index=torch.arange(3))
    assert torch.equal(mined.ids[0], order[0, 5:8])
    assert torch.equal(mined.ids[1], order[1, 1:4])
    assert torch.equal(mined.ids[2], order[2, :3])
    assert torch.equal(mined.ranks, torch.arange(3).repeat(3, 1))
    # a window the catalogue cannot fill is padded with -1 and valid=False
    few = miner.mine(queries, num_negatives=3, range_min=48, range_max=60)
    assert torch.equal(few.valid.sum(1), torch.tensor([2, 2, 2]))
    assert bool((few.ids[~few.valid] == -1).all())


def test_random_sampling_stays_in_the_window():
    items, queries = randn(300, 5, seed=12), randn(30, 5, seed=13)
    miner = HardNegativeMiner(index="torch").build(items)
    gen = torch.Generator().manual_seed(0)
    mined = miner.mine(
        queries, num_negatives=4, range_min=3, range_max=20, sampling="random", generator=gen
    )
    assert bool(mined.valid.all())
    assert bool(((mined.ranks >= 3) & (mined.ranks < 20)).all())
    assert bool((mined.ranks[:, 1:] > mined.ranks[:, :-1]).all())  # hardest first
    top = miner.mine(queries, num_negatives=4, range_min=3, range_max=20)
    assert not torch.equal(mined.ids, top.ids)


# ---------------------------------------------------------------- candidate contract


def test_mined_candidates_layout_and_own_row_mask():
    items, queries = randn(100, 4, seed=14, dtype=D64), randn(3, 4, seed=15, dtype=D64)
    pos = torch.tensor([5, 6, 7])
    mined = (
        HardNegativeMiner(index="torch")
        .build(items)
        .mine(queries, num_negatives=2, positive_ids=pos)
    )
    own = mined.candidates(items, share=False)
    assert isinstance(own, CandidateSet) and len(own) == 6
    assert torch.equal(own.ids, mined.ids.reshape(-1))
    torch.testing.assert_close(own.embeddings, items[mined.ids.reshape(-1)])
    assert torch.equal(own.log_q, torch.zeros(6))
    expected = torch.zeros(3, 6, dtype=torch.bool)
    for i in range(3):
        for j in range(6):
            expected[i, j] = j // 2 == i  # True = valid: a row sees its own two
    assert torch.equal(own.mask, expected)
    shared = mined.candidates(items, log_q=-1.5)
    assert shared.mask is None and torch.equal(shared.log_q, torch.full((6,), -1.5))
    # in the loss: positives first, then the mined columns, each with its own log Q
    positives = CandidateSet(items[pos], pos, torch.tensor([-1.0, -2.0, -3.0], dtype=D64))
    per_row = in_batch_softmax_loss(queries, positives, own, reduction="none")
    for i in range(3):
        cols = [items[p] for p in pos.tolist()] + [items[int(y)] for y in mined.ids[i]]
        logq = [-1.0, -2.0, -3.0, 0.0, 0.0]
        logits = torch.stack([queries[i] @ c for c in cols]) - torch.tensor(logq, dtype=D64)
        torch.testing.assert_close(per_row[i], torch.logsumexp(logits, 0) - logits[i])


def test_the_steps_compose_to_mine():
    """search → exclusion_mask → survivors → choose_negatives is mine()."""
    items, queries = randn(80, 4, seed=21, dtype=D64), randn(5, 4, seed=22, dtype=D64)
    pos = torch.randint(0, 80, (5, 2), generator=torch.Generator().manual_seed(3))
    known = KnownPairs(torch.tensor([0, 0, 3]), torch.tensor([1, 2, 3]), num_items=80)
    users = torch.tensor([0, 1, 2, 3, 4])
    miner = HardNegativeMiner(index="torch").build(items)
    kw = {"range_min": 1, "range_max": 9, "max_score": 2.0}
    mined = miner.mine(queries, num_negatives=4, positive_ids=pos, known=known,
                       user_index=users, **kw)
    scores, ids = miner.search(queries, 80)
    excluded = exclusion_mask(ids, positive_ids=pos, known=known, user_index=users)
    ranks, keep = survivors(scores, excluded, **kw)
    steps = choose_negatives(scores, ids, ranks, keep, num_negatives=4)
    for a, b in zip((mined.ids, mined.ranks, mined.valid), (steps.ids, steps.ranks, steps.valid)):
        assert torch.equal(a, b)
    # and the rules, against a loop over the sorted catalogue
    for i in range(5):
        drop = set(pos[i].tolist()) | ({1, 2} if i == 0 else {3} if i == 3 else set())
        order = [int(y) for y in torch.argsort(queries[i] @ items.T, descending=True)]
        rest = [y for y in order if y not in drop]
        want = [y for r, y in enumerate(rest) if 1 <= r < 9 and float(queries[i] @ items[y]) <= 2.0]
        assert [int(y) for y, v in zip(mined.ids[i], mined.valid[i]) if v] == want[:4]


# ---------------------------------------------------------------- refresh schedule (ANCE)


def test_refresh_schedule():
    calls = []

    def embed():
        calls.append(1)
        return randn(40, 3, seed=len(calls))

    miner = HardNegativeMiner(index="flat", refresh_every=5, num_threads=1)
    rebuilt = [miner.maybe_refresh(step, embed) for step in range(12)]
    assert rebuilt == [s in (0, 5, 10) for s in range(12)]
    assert len(calls) == 3 and miner.num_builds == 3 and miner.built_at == 10
    once = HardNegativeMiner(index="torch")
    assert [once.maybe_refresh(s, embed) for s in range(4)] == [True, False, False, False]
    mined = once.mine(randn(2, 3), num_negatives=1)
    assert mined.built_at == 0


# ---------------------------------------------------------------- bad input


def test_bad_input():
    with pytest.raises(ValueError, match="index must be one of"):
        HardNegativeMiner(index="annoy")
    with pytest.raises(ValueError, match="refresh_every must be >= 1"):
        HardNegativeMiner(refresh_every=0)
    miner = HardNegativeMiner(index="torch")
    with pytest.raises(ValueError, match="the index is empty"):
        miner.search(randn(2, 3), 1)
    miner.build(randn(10, 3))
    q = randn(2, 3)
    with pytest.raises(ValueError, match="k must be in"):
        miner.search(q, 11)
    with pytest.raises(ValueError, match="num_negatives must be >= 1"):
        miner.mine(q, num_negatives=0)
    with pytest.raises(ValueError, match="range_max must be >= 4"):
        miner.mine(q, num_negatives=1, range_min=3, range_max=3)
    with pytest.raises(ValueError, match="relative_margin must lie in"):
        miner.mine(q, num_negatives=1, relative_margin=1.0, positive_ids=torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="need positive_scores or positive_ids"):
        miner.mine(q, num_negatives=1, absolute_margin=0.1)
    with pytest.raises(ValueError, match="sampling must be one of"):
        miner.mine(q, num_negatives=1, sampling="best")
    with pytest.raises(ValueError, match="known and user_index"):
        miner.mine(q, num_negatives=1, user_index=torch.arange(2))
    with pytest.raises(ValueError, match=r"queries must have shape \(B, 3\)"):
        miner.mine(randn(2, 4), num_negatives=1)
    with pytest.raises(ValueError, match="item_ids must be >= 0"):
        HardNegativeMiner(index="torch").build(randn(3, 3), torch.tensor([0, -1, 2]))
    with pytest.raises(ValueError, match="known must be a KnownPairs"):
        miner.mine(q, num_negatives=1, known=(torch.arange(2),), user_index=torch.arange(2))
    with pytest.raises(ValueError, match="user_index must have shape"):
        miner.mine(q, num_negatives=1, known=_table(), user_index=torch.arange(3))
    nan = torch.full((2, 3), float("nan"))
    with pytest.raises(ValueError, match="queries must be finite"):
        miner.mine(nan, num_negatives=1)
    with pytest.raises(ValueError, match="queries must be finite"):
        brute_force_top_k(nan, randn(4, 3), 2)
    with pytest.raises(ValueError, match="item_embeddings must be finite"):
        HardNegativeMiner(index="flat").build(nan)
    with pytest.raises(ValueError, match="positive_scores must be finite"):
        miner.mine(q, num_negatives=1, relative_margin=0.1, positive_scores=nan[:, 0])
    with pytest.raises(ValueError, match="log_q must be finite"):
        miner.mine(q, num_negatives=1).candidates(randn(10, 3), log_q=float("inf"))


def _table():
    return KnownPairs(torch.tensor([0]), torch.tensor([1]), num_items=10)


def test_missing_faiss_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "faiss", None)
    with pytest.raises(ImportError, match="pip install faiss-cpu"):
        import_faiss()
    with pytest.raises(ImportError, match="index='torch'"):
        HardNegativeMiner(index="hnsw").build(randn(5, 2))


def test_fetch_bounds_the_search_and_pads_rows():
    items = randn(100, 4, seed=16, dtype=D64)
    queries = randn(2, 4, seed=17, dtype=D64)
    order = torch.argsort(queries @ items.T, dim=1, descending=True)
    known = KnownPairs(torch.zeros(8, dtype=torch.long), order[0, :8], num_items=100)
    miner = HardNegativeMiner(index="torch").build(items)
    mined = miner.mine(
        queries, num_negatives=2, known=known, user_index=torch.tensor([0, 1]), fetch=8
    )
    assert not bool(mined.valid[0].any())  # its 8 best are all known: nothing left
    assert torch.equal(mined.ids[1], order[1, :2])
    exact = miner.mine(queries, num_negatives=2, known=known, user_index=torch.tensor([0, 1]))
    assert torch.equal(exact.ids[0], order[0, 8:10])


# ---------------------------------------------------------------- the benchmark (structure only)


def test_mining_benchmark_rows_and_headline(monkeypatch):
    """benchmarks/mining.py on a tiny catalogue: row structure and the headline rule."""
    root = str(__import__("pathlib").Path(__file__).resolve().parents[1])
    monkeypatch.syspath_prepend(root)
    from benchmarks import mining as bench

    rows = bench.run_size(
        2000, num_queries=8, repeats=1, device=torch.device("cpu"), ef_search=(16, 256), ivf=False
    )
    names = [r["contender"] for r in rows]
    assert names[0].startswith("exact torch.topk") and "faiss IndexFlatIP" in names
    assert all(0.0 <= r["recall"] <= 1.0 and r["qps"] > 0 for r in rows)
    assert next(r for r in rows if r["contender"] == "faiss IndexFlatIP")["recall"] == 1.0
    ratio, recall, setting = bench.headline(rows, 2000)
    hnsw = [r for r in rows if r["contender"] == "faiss HNSW"]
    good = [r for r in hnsw if r["recall"] >= bench.RECALL_TARGET]
    expected = good[0] if good else max(hnsw, key=lambda r: r["recall"])
    assert setting == expected["setting"] and recall == expected["recall"]
    assert ratio == pytest.approx(expected["qps"] / rows[0]["qps"])
    ids = torch.tensor([[1, 2, 3], [4, 5, 6]])
    assert bench.recall_at_k(ids, torch.tensor([[3, 2, 9], [7, 8, 9]])) == pytest.approx(2 / 6)


def test_the_steps_name_their_bad_arguments():
    scores, excluded = torch.zeros(2, 5), torch.zeros(2, 5, dtype=torch.bool)
    with pytest.raises(ValueError, match="range_max must be >= 3"):
        survivors(scores, excluded, range_min=2, range_max=2)
    with pytest.raises(ValueError, match="relative_margin must lie in"):
        survivors(scores, excluded, range_min=0, range_max=3, relative_margin=2.0,
                  positive_scores=torch.zeros(2))
    with pytest.raises(ValueError, match="need positive_scores"):
        survivors(scores, excluded, range_min=0, range_max=3, absolute_margin=0.1)
    with pytest.raises(ValueError, match=r"excluded must have shape \(2, 5\)"):
        survivors(scores, excluded[:, :3], range_min=0, range_max=3)
    ranks, keep = survivors(scores, excluded, range_min=0, range_max=3)
    ids = torch.arange(5).repeat(2, 1)
    with pytest.raises(ValueError, match="num_negatives must be >= 1"):
        choose_negatives(scores, ids, ranks, keep, num_negatives=0)
    with pytest.raises(ValueError, match="sampling must be one of"):
        choose_negatives(scores, ids, ranks, keep, num_negatives=1, sampling="all")


def test_four_sources_in_one_loss_each_with_its_own_correction():
    """In-batch + a queue + mined + uniform extras: one concat of CandidateSets, and the
    loss is the explicit log-sum-exp over every column with that column's own log Q,
    accidental hits (any source) and a mined column's own-row mask (float64 loop)."""
    from candidate_sampling.sampling import UniformSampler
    from candidate_sampling.sampling.frequency import batch_log_q
    from candidate_sampling.scale.memory import CrossBatchMemory

    g = torch.Generator().manual_seed(5)
    table = torch.randn(30, 4, generator=g, dtype=D64)
    p = torch.rand(30, generator=g, dtype=D64) + 0.1
    p /= p.sum()
    ids = torch.tensor([3, 7, 3, 11])
    u = torch.randn(4, 4, generator=g, dtype=D64)
    memory = CrossBatchMemory(5, 4, dtype=D64)
    memory.enqueue(table[[7, 1, 2, 20, 3]], torch.tensor([7, 1, 2, 20, 3]))
    batch, queued = memory.candidates_for(table[ids], ids, item_probabilities=p)
    mined = HardNegativeMiner(index="torch").build(table).mine(
        u, num_negatives=2, positive_ids=ids
    )
    mined_set = mined.candidates(table, share=False)
    draw = UniformSampler(30).sample(6, generator=torch.Generator().manual_seed(1))
    extras = CandidateSet.from_draw(draw, table)
    others = CandidateSet.concat(queued, mined_set, extras)
    got = in_batch_softmax_loss(u, batch, others, temperature=0.7, reduction="none")
    every = in_batch_softmax_loss(
        u, batch, others, temperature=0.7, reduction="none", remove_accidental_hits=True
    )

    cols = CandidateSet.concat(batch, others)
    assert cols.source == (("batch", 4), ("queue", 5), ("mined", len(mined_set)),
                           ("replacement", 6))
    n_q = 5
    log_q = torch.cat([
        batch_log_q(torch.cat([ids, memory.ids]), p, num_draws=4 + n_q).double(),
        torch.zeros(len(mined_set), dtype=D64),
        draw.log_q.double(),
    ])
    torch.testing.assert_close(cols.log_q.double(), log_q)
    mined_cols = range(4 + n_q, 4 + n_q + len(mined_set))
    hits_kept_elsewhere = 0
    for remove_everywhere, loss in ((False, got), (True, every)):
        for i in range(4):
            terms = []
            for j in range(len(cols)):
                hit = j != i and int(cols.ids[j]) == int(ids[i])
                if hit and (remove_everywhere or j in mined_cols):
                    continue  # by default only the mined set's hits go (a set source)
                hits_kept_elsewhere += hit and not remove_everywhere
                if j in mined_cols and not bool(cols.mask[i, j]):
                    continue  # another row's mined negative (share=False)
                terms.append(u[i] @ cols.embeddings[j] / 0.7 - log_q[j])
            logits = torch.stack(terms)
            own = u[i] @ table[ids[i]] / 0.7 - log_q[i]
            torch.testing.assert_close(loss[i], torch.logsumexp(logits, 0) - own)
    assert hits_kept_elsewhere > 0  # the batch's and the queue's copies of item 3


def test_torch_index_scores_half_embeddings_in_float32():
    items = torch.tensor([[300.0], [316.0], [1.0]], dtype=torch.float16)
    miner = HardNegativeMiner(index="torch").build(items)
    scores, ids = miner.search(torch.tensor([[300.0]], dtype=torch.float16), 3)
    assert ids.tolist() == [[1, 0, 2]] and bool(torch.isfinite(scores).all())


def test_absolute_margin_drops_a_candidate_exactly_at_the_margin():
    """NV-Retriever's rule keeps s < s⁺ − margin, strictly: at margin 0 a candidate that
    scores exactly as the positive (a duplicate under another id) is not a negative."""
    scores = torch.tensor([[1.0, 0.5, 0.2]])
    excluded = torch.zeros(1, 3, dtype=torch.bool)
    _, keep = survivors(scores, excluded, range_min=0, range_max=3, absolute_margin=0.0,
                        positive_scores=torch.tensor([0.5]))
    assert keep.tolist() == [[False, False, True]]
    _, keep = survivors(scores, excluded, range_min=0, range_max=3, absolute_margin=0.25,
                        positive_scores=torch.tensor([0.5]))
    assert keep.tolist() == [[False, False, True]]  # 0.2 < 0.25 kept, 0.5 dropped
    scores = torch.tensor([[1.0, 0.5, 0.25]])  # exactly s⁺ − margin (representable)
    _, keep = survivors(scores, excluded, range_min=0, range_max=3, absolute_margin=0.25,
                        positive_scores=torch.tensor([0.5]))
    assert keep.tolist() == [[False, False, False]]


def test_search_padding_is_never_a_negative():
    """An index that returns fewer results pads with id −1 (score −inf): the pads are
    excluded, and a request for more negatives than real survivors pads the result with
    invalid slots, never a valid id −1."""
    ids = torch.tensor([[3, -1, -1], [4, 7, -1]])
    scores = torch.tensor([[0.9, float("-inf"), float("-inf")], [0.8, 0.1, float("-inf")]])
    excluded = exclusion_mask(ids)
    assert excluded.tolist() == [[False, True, True], [False, False, True]]
    ranks, keep = survivors(scores, excluded, range_min=0, range_max=3)
    mined = choose_negatives(scores, ids, ranks, keep, num_negatives=3)
    assert mined.valid.sum(1).tolist() == [1, 2]
    assert not bool((mined.ids[mined.valid] == -1).any())
    assert bool((mined.ids[~mined.valid] == -1).all())


def test_default_hnsw_degree_follows_the_catalogue_size():
    """``hnsw_m=None``: 32 below 10^6 items, 48 from 10^6 (the degree that reaches
    recall@100 ≥ 0.95 at the default ``ef_search`` there, appendix section 6); a given
    ``hnsw_m`` is kept. The built graph has 2·M links per node on its base layer."""
    pytest.importorskip("faiss")
    from candidate_sampling.scale.mining import default_hnsw_m

    assert [default_hnsw_m(n) for n in (0, 10**5, 10**6 - 1, 10**6, 10**7)] == [
        32, 32, 32, 48, 48,
    ]
    items = torch.randn(50, 8, generator=torch.Generator().manual_seed(0))
    for hnsw_m, want in ((None, 32), (16, 16)):
        miner = HardNegativeMiner(index="hnsw", hnsw_m=hnsw_m, num_threads=1).build(items)
        assert miner.hnsw_m == hnsw_m
        assert miner.index.hnsw.nb_neighbors(0) == 2 * want
