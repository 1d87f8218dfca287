"""Non-neural baselines against brute-force references and their defining properties."""

import pytest
import torch

import candidate_sampling
from candidate_sampling.eval import KnownPairs
from candidate_sampling.eval.baselines import (
    ease_scores,
    ease_weights,
    interaction_matrix,
    item_knn_scores,
    most_popular_scores,
    ranks_from_scores,
    top_k_from_scores,
)
from candidate_sampling.eval.metrics import positive_ranks, top_k_items


def _matrix(seed=0, users=12, items=9, density=0.35, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(users, items, generator=g) < density).to(dtype)


def test_interaction_matrix_marks_each_pair_once():
    users = torch.tensor([0, 0, 2, 2, 2])
    items = torch.tensor([1, 3, 0, 0, 4])
    x = interaction_matrix(KnownPairs(users, items, num_items=5))
    want = torch.zeros(3, 5)
    for u, i in zip(users.tolist(), items.tolist()):
        want[u, i] = 1
    assert torch.equal(x, want)
    assert x.dtype == torch.float32


def test_most_popular_orders_by_count_and_breaks_ties_by_id():
    counts = torch.tensor([3, 7, 3, 0, 7, 1])
    scores = most_popular_scores(counts)
    order = torch.argsort(scores, descending=True).tolist()
    assert order == [1, 4, 0, 2, 5, 3]  # 7, 7 (ids 1 < 4), 3, 3 (ids 0 < 2), 1, 0
    assert len(set(scores.tolist())) == len(counts)  # no ties at all


def test_most_popular_breaks_ties_at_random_with_a_generator():
    counts = torch.tensor([3, 7, 3, 0, 7, 1, 3, 0])

    def order(seed):
        scores = most_popular_scores(counts, generator=torch.Generator().manual_seed(seed))
        assert len(set(scores.tolist())) == len(counts)  # still no ties
        return torch.argsort(scores, descending=True).tolist()

    # the counts still decide: 7, 7, then the three 3s, then 1, then the two 0s
    for seed in range(20):
        o = order(seed)
        assert set(o[:2]) == {1, 4} and set(o[2:5]) == {0, 2, 6} and o[5] == 5
        assert set(o[6:]) == {3, 7}
    assert order(4) == order(4)  # one seed, one list
    # every order of the three items with count 3 is equally likely: 6 orders, 3,000
    # draws, each count binomial(3000, 1/6); five standard deviations bound it
    tally = {}
    for seed in range(3000):
        key = tuple(order(seed)[2:5])
        tally[key] = tally.get(key, 0) + 1
    assert len(tally) == 6
    sd = (3000 * (1 / 6) * (5 / 6)) ** 0.5
    assert all(abs(n - 500) < 5 * sd for n in tally.values()), tally
    # the smaller id wins a tie half the time, not always
    first = sum(order(seed).index(1) < order(seed).index(4) for seed in range(400))
    assert abs(first - 200) < 5 * (400 * 0.25) ** 0.5


def test_most_popular_rejects_a_generator_that_is_not_one():
    with pytest.raises(ValueError, match="generator must be a torch.Generator or None"):
        most_popular_scores(torch.tensor([1.0, 2.0]), generator=3)


@pytest.mark.parametrize("l2", [0.5, 3.0, 50.0])
def test_ease_matches_per_column_ridge_regression(l2):
    x = _matrix()
    b = ease_weights(x, l2)
    items = x.shape[1]
    for j in range(items):
        others = [i for i in range(items) if i != j]
        xo = x[:, others]
        # ridge regression of item j on every other item, solved directly
        coef = torch.linalg.solve(
            xo.T @ xo + l2 * torch.eye(items - 1, dtype=x.dtype), xo.T @ x[:, j]
        )
        assert torch.allclose(b[others, j], coef, atol=1e-10)
        assert b[j, j] == 0


def test_ease_satisfies_the_optimality_conditions():
    x = _matrix(seed=3, users=30, items=15)
    l2 = 2.0
    b = ease_weights(x, l2)
    assert torch.all(b.diagonal() == 0)  # the constraint B_jj = 0
    gram = x.T @ x
    # gradient of ‖X − XB‖² + λ‖B‖² is 2((XᵀX + λI)B − XᵀX); with diag(B) = 0 imposed,
    # only its off-diagonal entries must vanish (the diagonal ones are the multipliers)
    grad = (gram + l2 * torch.eye(15, dtype=x.dtype)) @ b - gram
    off = ~torch.eye(15, dtype=torch.bool)
    assert grad[off].abs().max() < 1e-10

    # and a perturbation that keeps diag(B) = 0 never lowers the objective
    def objective(w):
        return ((x - x @ w) ** 2).sum() + l2 * (w**2).sum()

    g = torch.Generator().manual_seed(4)
    for _ in range(5):
        step = 1e-3 * torch.randn(15, 15, generator=g, dtype=x.dtype)
        step.diagonal().zero_()
        assert objective(b + step) >= objective(b)


def test_ease_scores_and_dtype():
    x = _matrix(dtype=torch.float32)
    scores = ease_scores(x, 1.0)
    assert scores.dtype == torch.float32
    assert torch.allclose(scores.double(), x.double() @ ease_weights(x.double(), 1.0), atol=1e-5)


def test_ease_large_l2_tends_to_scaled_gram():
    # as λ → ∞, (XᵀX + λI)⁻¹ ≈ I/λ − XᵀX/λ², so B_ij ≈ (XᵀX)_ij / λ off the diagonal
    x = _matrix(seed=5)
    l2 = 1e6
    b = ease_weights(x, l2) * l2
    gram = x.T @ x
    off = ~torch.eye(x.shape[1], dtype=torch.bool)
    assert torch.allclose(b[off], gram[off], rtol=1e-4, atol=1e-4)


def test_item_knn_matches_loops():
    x = _matrix(seed=6)
    x[:, 2] = 0  # an item nobody saw: similarity 0, no NaN
    items = x.shape[1]
    sim = torch.zeros(items, items, dtype=x.dtype)
    for i in range(items):
        for j in range(items):
            ni, nj = x[:, i].norm(), x[:, j].norm()
            if i != j and ni > 0 and nj > 0:
                sim[i, j] = (x[:, i] @ x[:, j]) / (ni * nj)
    assert torch.allclose(item_knn_scores(x), x @ sim, atol=1e-12)
    k = 3
    pruned = torch.zeros_like(sim)
    for j in range(items):
        top = torch.topk(sim[:, j], k).indices
        pruned[top, j] = sim[top, j]
    assert torch.allclose(item_knn_scores(x, k=k), x @ pruned, atol=1e-12)
    assert not torch.isnan(item_knn_scores(x)).any()


@pytest.mark.parametrize("exclude", [False, True])
@pytest.mark.parametrize("chunk", [1, 4, 1000])
def test_ranks_from_scores_match_positive_ranks(exclude, chunk):
    g = torch.Generator().manual_seed(7)
    ue = torch.randn(6, 3, generator=g, dtype=torch.float64)
    ie = torch.randn(20, 3, generator=g, dtype=torch.float64)
    users = torch.randint(0, 6, (25,), generator=g)
    positives = torch.randint(0, 20, (25,), generator=g)
    seen = (torch.randint(0, 6, (40,), generator=g), torch.randint(0, 20, (40,), generator=g))
    ex = KnownPairs(*seen, num_items=20) if exclude else None
    got = ranks_from_scores(ue @ ie.T, users, positives, known=ex, chunk_size=chunk)
    want = positive_ranks(ue, ie, users, positives, known=ex)
    assert torch.equal(got, want)


def test_ranks_from_scores_loop_and_positive_never_excluded():
    scores = torch.tensor([[0.5, 0.9, 0.1, 0.7], [0.2, 0.3, 0.4, 0.1]])
    users = torch.tensor([0, 0, 1])
    positives = torch.tensor([0, 1, 3])
    # user 0 saw items 1 and 0 in training; user 1 saw item 3 (its own positive)
    seen = KnownPairs(torch.tensor([0, 0, 1]), torch.tensor([1, 0, 3]), num_items=4)
    got = ranks_from_scores(scores, users, positives, known=seen)
    # user 0, positive 0 (0.5): item 1 excluded, item 3 (0.7) higher -> 1
    # user 0, positive 1 (0.9): nothing higher -> 0
    # user 1, positive 3 (0.1): items 0, 1, 2 higher -> 3 (the positive is not removed)
    assert got.tolist() == [1, 0, 3]
    assert ranks_from_scores(scores, users, positives).tolist() == [2, 0, 3]


@pytest.mark.parametrize(
    "l2,message",
    [
        (float("inf"), "l2 must be > 0 and finite, got inf"),  # was an all-NaN B
        (float("nan"), "l2 must be > 0 and finite, got nan"),
        (-1.0, "l2 must be > 0 and finite, got -1.0"),
        (True, "l2 must be a number, got bool True"),  # was accepted as 1
        ("1", "l2 must be a number, got str"),
    ],
)
def test_ease_l2_must_be_a_positive_finite_number(l2, message):
    with pytest.raises(ValueError, match=message):
        ease_weights(_matrix(), l2)
    with pytest.raises(ValueError, match=message):
        ease_scores(_matrix(), l2)


def test_bad_inputs_fail_fast():
    x = _matrix()
    with pytest.raises(ValueError, match="l2"):
        ease_weights(x, 0.0)
    with pytest.raises(ValueError, match="x must have shape"):
        ease_weights(x[0], 1.0)
    with pytest.raises(ValueError, match="k must be"):
        item_knn_scores(x, k=0)
    with pytest.raises(ValueError, match="positive_ids must lie"):
        ranks_from_scores(x, torch.tensor([0]), torch.tensor([99]))
    with pytest.raises(ValueError, match="known must be a KnownPairs"):
        ranks_from_scores(x, torch.tensor([0]), torch.tensor([1]), known=torch.tensor([0]))
    with pytest.raises(ValueError, match="known must be built for the catalogue of 9"):
        top_k_from_scores(x, 2, known=KnownPairs(torch.tensor([0]), torch.tensor([0]), num_items=8))
    with pytest.raises(ValueError, match="known must be a KnownPairs"):
        interaction_matrix((torch.tensor([0]), torch.tensor([5])))
    with pytest.raises(ValueError, match="num_users must be >= 3"):
        known = KnownPairs(torch.tensor([2]), torch.tensor([1]), num_items=5)
        interaction_matrix(known, num_users=2)


def test_ranks_among_candidates_match_loop():
    g = torch.Generator().manual_seed(8)
    scores = torch.randn(5, 30, generator=g, dtype=torch.float64)
    users = torch.randint(0, 5, (12,), generator=g)
    positives = torch.randint(0, 30, (12,), generator=g)
    candidates = torch.randint(0, 30, (12, 7), generator=g)
    got = ranks_from_scores(scores, users, positives, candidate_ids=candidates)
    for n in range(12):
        u, t = int(users[n]), int(positives[n])
        want = sum(1 for c in candidates[n].tolist() if scores[u, c] > scores[u, t])
        assert int(got[n]) == want


@pytest.mark.parametrize("exclude", [False, True])
def test_top_k_from_scores_matches_top_k_items(exclude):
    g = torch.Generator().manual_seed(9)
    ue = torch.randn(6, 3, generator=g, dtype=torch.float64)
    ie = torch.randn(25, 3, generator=g, dtype=torch.float64)
    seen = (torch.randint(0, 6, (30,), generator=g), torch.randint(0, 25, (30,), generator=g))
    ex = KnownPairs(*seen, num_items=25) if exclude else None
    assert torch.equal(
        top_k_from_scores(ue @ ie.T, 5, known=ex), top_k_items(ue, ie, 5, known=ex)
    )


def test_top_k_larger_than_a_user_s_unknown_items_is_an_error():
    # user 1 knows 3 of 5 items: a top 3 would have recommended one of them
    g = torch.Generator().manual_seed(10)
    ue = torch.randn(3, 2, generator=g, dtype=torch.float64)
    ie = torch.randn(5, 2, generator=g, dtype=torch.float64)
    known = KnownPairs(torch.tensor([1, 1, 1, 0]), torch.tensor([0, 2, 4, 1]), num_items=5)
    message = r"k must be <= 2 \(user 1 has 3 known items of 5\), got 3"
    with pytest.raises(ValueError, match=message):
        top_k_items(ue, ie, 3, known=known)
    with pytest.raises(ValueError, match=message):
        top_k_from_scores(ue @ ie.T, 3, known=known)
    top = top_k_from_scores(ue @ ie.T, 2, known=known)  # the largest k allowed
    assert torch.equal(top, top_k_items(ue, ie, 2, known=known))
    assert set(top[1].tolist()) == {1, 3}
    assert top_k_items(ue, ie, 5).shape == (3, 5)  # without known: any k <= |V|
    with candidate_sampling.validate_args(False):  # a value check, like the others
        assert top_k_from_scores(ue @ ie.T, 3, known=known).shape == (3, 3)


# SharedHistoryTower (models.py) is the user tower of chapter 9's re-run of the source
# post; its tests live here with the chapter's other additions.


@pytest.mark.parametrize("hashes", [0, 3])
def test_shared_history_tower_is_the_masked_mean_of_the_item_tower(hashes):
    from candidate_sampling.models import ItemTower, SharedHistoryTower

    items = ItemTower(40, 6, num_hashes=hashes, num_buckets=16 if hashes else None, seed=2)
    tower = SharedHistoryTower(items)
    history = torch.tensor([[3, 7, -1, 9], [-1, -1, -1, -1], [39, 0, 0, -1]])
    got = tower(history=history)
    want = torch.stack(
        [
            items(torch.tensor([3, 7, 9])).mean(0),
            torch.zeros(6),  # an empty history is the zero vector
            items(torch.tensor([39, 0, 0])).mean(0),
        ]
    )
    assert torch.allclose(got, want, atol=1e-6)
    # the towers share one table: a history gradient reaches the item embeddings
    got.sum().backward()
    assert items.embedding.weight.grad is not None


def test_shared_history_tower_mlp_and_sharing_in_two_tower_model():
    from candidate_sampling.models import ItemTower, SharedHistoryTower, TwoTowerModel
    from candidate_sampling.train import make_optimizer

    items = ItemTower(20, 4, sparse=True)
    tower = SharedHistoryTower(items, mlp_layers=3)
    linear = [m for m in tower.mlp if isinstance(m, torch.nn.Linear)]
    assert len(linear) == 3 and len(tower.mlp) == 5  # Linear, ReLU, Linear, ReLU, Linear
    model = TwoTowerModel(tower, items)
    # the shared table is one parameter, listed once
    assert sum(p is items.embedding.weight for p in model.parameters()) == 1
    opt = make_optimizer(model, "adam", 0.01)  # SparseAdam for the table, Adam for the MLP
    u, v = model(torch.tensor([1, 2]), history=torch.tensor([[3, -1], [4, 5]]))
    (u * v).sum().backward()
    assert items.embedding.weight.grad.is_sparse
    opt.step()


def test_shared_history_tower_bad_inputs():
    from candidate_sampling.models import ItemTower, SharedHistoryTower

    tower = SharedHistoryTower(ItemTower(10, 4))
    with pytest.raises(ValueError, match="history must be given"):
        tower()
    with pytest.raises(ValueError, match="history must hold item ids"):
        tower(history=torch.tensor([[10, 1]]))
    with pytest.raises(ValueError, match="history must hold item ids"):
        tower(history=torch.tensor([[-2, 1]]))
    with pytest.raises(ValueError, match="item_tower must be an ItemTower"):
        SharedHistoryTower(torch.nn.Linear(2, 2))


def test_nan_scores_and_counts_are_errors():
    x = _matrix()
    bad = x.clone()
    bad[0, 0] = float("nan")
    with pytest.raises(ValueError, match="scores must be finite"):
        ranks_from_scores(bad, torch.tensor([0]), torch.tensor([1]))
    with pytest.raises(ValueError, match="scores must be finite"):
        top_k_from_scores(bad, 2)
    with pytest.raises(ValueError, match="x must be finite"):
        ease_weights(bad, 1.0)
    with pytest.raises(ValueError, match="x must be finite"):
        item_knn_scores(bad)
    with pytest.raises(ValueError, match="counts must be finite"):
        most_popular_scores(torch.tensor([1.0, float("nan")]))
