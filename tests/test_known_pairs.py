"""KnownPairs, the one table of a user's known items (metrics, baselines, mining)."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import candidate_sampling as cs
from candidate_sampling.eval import KnownPairs


def _pairs(seed, users=6, items=11, n=30):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, users, (n,), generator=g), torch.randint(0, items, (n,), generator=g)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), dense=st.booleans(), n=st.integers(0, 40))
def test_mask_counts_and_contains_match_a_set(seed, dense, n):
    users, items = _pairs(seed, n=n)
    table = KnownPairs(users, items, num_items=11, dense_limit=2**20 if dense else 0)
    pairs = set(zip(users.tolist(), items.tolist()))
    assert len(table) == len(pairs)
    rows = torch.tensor([0, 3, 5, 7, -1])  # 7: a user the table never saw; -1 never known
    cand = torch.tensor([-1, 0, 4, 10, 11])  # -1 and 11 lie outside the catalogue
    got = table.mask(rows, cand)
    want = [[(u, c) in pairs for c in cand.tolist()] for u in rows.tolist()]
    assert got.tolist() == want
    per_row = torch.randint(-1, 12, (5, 3), generator=torch.Generator().manual_seed(seed))
    got_rows = table.mask(rows, per_row)
    assert got_rows.tolist() == [
        [(u, c) in pairs for c in r] for u, r in zip(rows.tolist(), per_row.tolist())
    ]
    counts = table.counts(rows)
    assert counts.tolist() == [sum(1 for p in pairs if p[0] == u) for u in rows.tolist()]
    assert table.contains(rows, cand).tolist() == [
        (u, c) in pairs for u, c in zip(rows.tolist(), cand.tolist())
    ]
    stored = set(zip(table.user_index.tolist(), table.item_ids.tolist()))
    assert stored == pairs


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_fill_sets_exactly_the_known_items_of_each_row(seed):
    users, items = _pairs(seed)
    table = KnownPairs(users, items, num_items=11)
    rows = torch.tensor([5, 0, 0, 9, 2])
    scores = torch.randn(5, 11, dtype=torch.float64)
    want = scores.clone()
    pairs = set(zip(users.tolist(), items.tolist()))
    for r, u in enumerate(rows.tolist()):
        for y in range(11):
            if (u, y) in pairs:
                want[r, y] = float("-inf")
    assert torch.equal(table.fill_(scores, rows), want)
    assert torch.equal(scores, want)  # in place


def test_empty_table_knows_nothing():
    empty = torch.zeros(0, dtype=torch.long)
    table = KnownPairs(empty, empty, num_items=4)
    assert len(table) == 0 and table.num_users == 0
    assert not table.mask(torch.tensor([0, 1]), torch.arange(4)).any()
    assert table.counts(torch.tensor([0, 3])).tolist() == [0, 0]
    scores = torch.zeros(2, 4)
    assert torch.equal(table.fill_(scores, torch.tensor([0, 1])), torch.zeros(2, 4))


def test_bad_inputs_name_the_argument():
    with pytest.raises(ValueError, match="number of pairs n must agree"):
        KnownPairs(torch.tensor([0, 1]), torch.tensor([2]), num_items=5)  # no broadcasting
    with pytest.raises(ValueError, match=r"item_ids must lie in \[0, 5\)"):
        KnownPairs(torch.tensor([0]), torch.tensor([5]), num_items=5)
    with pytest.raises(ValueError, match=r"item_ids must lie in \[0, 5\)"):
        KnownPairs(torch.tensor([0]), torch.tensor([-1]), num_items=5)  # no wrap-around
    with pytest.raises(ValueError, match="user_index must be >= 0"):
        KnownPairs(torch.tensor([-1]), torch.tensor([0]), num_items=5)
    with pytest.raises(ValueError, match="item_ids must be an integer"):
        KnownPairs(torch.tensor([0]), torch.tensor([0.0]), num_items=5)
    with pytest.raises(ValueError, match="user_index must have shape"):
        KnownPairs(torch.tensor([[0]]), torch.tensor([0]), num_items=5)
    with pytest.raises(ValueError, match="num_items must be >= 1"):
        KnownPairs(torch.tensor([0]), torch.tensor([0]), num_items=0)
    table = KnownPairs(torch.tensor([0]), torch.tensor([0]), num_items=5)
    with pytest.raises(ValueError, match="scores must have shape"):
        table.fill_(torch.zeros(1, 4), torch.tensor([0]))
    with pytest.raises(ValueError, match="item_ids must have shape"):
        table.mask(torch.tensor([0, 1]), torch.zeros(3, 2, dtype=torch.long))


def test_value_checks_obey_the_switch():
    with cs.validate_args(False):  # no sync, no error: the caller vouched for the ids
        KnownPairs(torch.tensor([0]), torch.tensor([3]), num_items=5)


def test_sparse_user_ids_cost_no_memory_per_absent_user():
    """Users 0 and 10^12: no dense table, no per-user array; questions still exact."""
    users = torch.tensor([0, 10**12, 10**12])
    table = KnownPairs(users, torch.tensor([1, 2, 3]), num_items=5)
    assert table._dense is None and table._users.numel() == 2
    assert table.num_users == 10**12 + 1
    rows = torch.tensor([10**12, 0, 7])
    assert table.counts(rows).tolist() == [2, 1, 0]
    assert table.mask(rows, torch.arange(5)).tolist() == [
        [False, False, True, True, False],
        [False, True, False, False, False],
        [False] * 5,
    ]
    scores = torch.zeros(3, 5)
    table.fill_(scores, rows)
    assert torch.isinf(scores).sum().item() == 3
