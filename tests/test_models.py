"""Two-tower model: towers, the hashing trick, history bags, sparse gradients."""

import pytest
import torch

from candidate_sampling.models import ItemTower, TwoTowerModel, UserTower, sparse_parameters
from candidate_sampling.train import make_optimizer


def test_item_tower_exact_and_init_range():
    tower = ItemTower(10, 4)
    out = tower(torch.tensor([[1, 2], [3, 9]]))
    assert out.shape == (2, 2, 4)
    assert torch.equal(out[0, 0], tower.embedding.weight[1])
    assert float(tower.embedding.weight.detach().abs().max()) <= 0.05
    assert tower.all_items().shape == (10, 4)


def test_hashed_item_tower_sums_its_buckets():
    tower = ItemTower(1000, 3, num_hashes=3, num_buckets=17, seed=2)
    ids = torch.tensor([5, 999, 0])
    rows = tower.rows(ids)
    assert rows.shape == (3, 3)
    for k in range(3):  # hash function k owns rows [k*17, (k+1)*17)
        assert bool(((rows[:, k] >= 17 * k) & (rows[:, k] < 17 * (k + 1))).all())
    want = torch.stack([tower.embedding.weight[rows[i]].sum(0) for i in range(3)])
    assert torch.allclose(tower(ids), want)
    assert tower(ids.reshape(3, 1)).shape == (3, 1, 3)


def test_hashing_keeps_most_items_distinct():
    tower = ItemTower(2000, 8, num_hashes=2, num_buckets=100)
    emb = tower.all_items()
    distinct = torch.unique(emb.detach(), dim=0).shape[0]
    # two items coincide only if they collide under both hashes: 2,000 ids in 100 x 100
    # bucket pairs fill 10^4 (1 - e^-0.2) = 1,813 +- 12 of them, as a random function does
    assert distinct > 1813 - 5 * 12


def test_user_tower_history_mean_ignores_padding():
    tower = UserTower(num_items=6, dim=4)
    hist = torch.tensor([[1, 2, -1], [3, -1, -1], [-1, -1, -1]])
    out = tower(history=hist)
    w = tower.history_bag.weight
    assert torch.allclose(out[0], (w[1] + w[2]) / 2)
    assert torch.allclose(out[1], w[3])
    assert torch.allclose(out[2], torch.zeros(4))


def test_user_tower_id_plus_history():
    tower = UserTower(num_users=3, num_items=5, dim=2)
    out = tower(torch.tensor([2]), torch.tensor([[4, 0]]))
    want = (
        tower.user_embedding.weight[2]
        + (tower.history_bag.weight[4] + tower.history_bag.weight[0]) / 2
    )
    assert torch.allclose(out[0], want)


@pytest.mark.parametrize("num_hashes,buckets", [(0, None), (2, 11)])
def test_sparse_gradients_and_optimizers(num_hashes, buckets):
    model = TwoTowerModel(
        UserTower(4, 7, 3, sparse=True),
        ItemTower(7, 3, num_hashes=num_hashes, num_buckets=buckets, sparse=True),
    )
    sparse, dense = sparse_parameters(model)
    assert len(sparse) == 3 and not dense
    u, v = model(
        torch.tensor([2, 3]), user_ids=torch.tensor([0, 1]), history=torch.tensor([[1, -1], [2, 3]])
    )
    (u * v).sum().backward()
    assert all(p.grad.is_sparse for p in sparse)
    for name in ("adagrad", "sgd", "adam"):
        opt = make_optimizer(model, name, 0.1)
        before = model.item_tower.embedding.weight.detach().clone()
        opt.step()
        changed = (model.item_tower.embedding.weight.detach() != before).any(dim=1)
        assert 0 < int(changed.sum()) < before.shape[0] or num_hashes  # only touched rows move


def test_user_tower_all_users_is_the_id_table():
    tower = UserTower(num_users=6, dim=3)
    everyone = tower.all_users()
    assert everyone.shape == (6, 3)
    assert torch.equal(everyone, tower.user_embedding.weight)
    assert torch.equal(everyone[torch.tensor([4, 1])], tower(torch.tensor([4, 1])))
    everyone.sum().backward()  # the table itself: gradients reach the embedding
    assert tower.user_embedding.weight.grad is not None


@pytest.mark.parametrize(
    "tower", [UserTower(num_items=5, dim=2), UserTower(num_users=3, num_items=5, dim=2)]
)
def test_user_tower_all_users_needs_an_id_only_tower(tower):
    with pytest.raises(ValueError, match="all_users\\(\\) needs a tower of user ids only"):
        tower.all_users()


def test_two_tower_forward_takes_item_ids_then_keywords():
    model = TwoTowerModel(UserTower(num_users=4, num_items=6, dim=3), ItemTower(6, 3))
    items, users = torch.tensor([5, 0]), torch.tensor([3, 1])
    history = torch.tensor([[1, 2], [-1, 4]])
    u, v = model(items, user_ids=users, history=history)
    assert torch.equal(u, model.user_tower(users, history))
    assert torch.equal(v, model.item_tower(items))
    with pytest.raises(TypeError):
        model(items, users, history)  # user_ids and history are keyword-only
    history_only = TwoTowerModel(UserTower(num_items=6, dim=3), ItemTower(6, 3))
    u, v = history_only(items, history=history)
    assert u.shape == v.shape == (2, 3)
    id_only = TwoTowerModel(UserTower(num_users=4, dim=3), ItemTower(6, 3))
    with pytest.raises(ValueError, match="user_ids must be given"):
        id_only(items)


def test_score():
    model = TwoTowerModel(UserTower(3, None, 2), ItemTower(4, 2))
    u = model.user_tower(torch.tensor([0, 1]))
    v = model.item_tower.all_items()
    assert torch.allclose(model.score(u, v), u @ v.T)


def test_bad_inputs():
    with pytest.raises(ValueError, match="num_buckets must be given"):
        ItemTower(10, 4, num_hashes=2)
    with pytest.raises(ValueError, match="num_buckets needs"):
        ItemTower(10, 4, num_buckets=5)
    with pytest.raises(ValueError, match="dim"):
        ItemTower(10, 0)
    with pytest.raises(ValueError, match="item_ids must lie"):
        ItemTower(10, 4)(torch.tensor([10]))
    with pytest.raises(ValueError, match="num_users or num_items"):
        UserTower()
    tower = UserTower(num_users=3, num_items=5, dim=2)
    with pytest.raises(ValueError, match="history must be given"):
        tower(torch.tensor([0]))
    with pytest.raises(ValueError, match="user_ids must be given"):
        tower(None, torch.tensor([[1]]))
    with pytest.raises(ValueError, match="history must hold"):
        tower(torch.tensor([0]), torch.tensor([[5]]))
    with pytest.raises(ValueError, match="batch size"):
        tower(torch.tensor([0, 1]), torch.tensor([[1]]))
    with pytest.raises(ValueError, match="embedding size d"):
        TwoTowerModel(UserTower(3, None, 2), ItemTower(4, 3))


@pytest.mark.parametrize("optimizer", ["adagrad", "sgd", "adam"])
def test_default_model_is_sparse_and_a_step_touches_only_the_batch_rows(optimizer):
    """The default path for catalogue scale: sparse gradients, an optimizer that updates
    only the rows a batch used (issue: benchmarks; chapter 5)."""
    model = TwoTowerModel(UserTower(num_users=50, dim=4), ItemTower(1000, 4))
    sparse, dense = sparse_parameters(model)
    assert len(sparse) == 2 and not dense
    before = model.item_tower.embedding.weight.detach().clone()
    opt = make_optimizer(model, optimizer, lr=0.1)
    users, items = torch.tensor([1, 2, 3]), torch.tensor([10, 20, 10])
    u, v = model(items, user_ids=users)
    (u * v).sum().backward()
    assert model.item_tower.embedding.weight.grad.is_sparse
    opt.step()
    after = model.item_tower.embedding.weight.detach()
    changed = torch.nonzero((after != before).any(dim=1)).squeeze(1)
    assert changed.tolist() == [10, 20]


def test_user_tower_cpu_mean_matches_embedding_bag_value_and_gradient():
    """The dense CPU path (index_select + bmm) equals nn.EmbeddingBag's mean, padding included."""
    from candidate_sampling.models import UserTower, _mean_of_rows

    torch.manual_seed(0)
    tower = UserTower(num_users=None, num_items=50, dim=8, sparse=False)
    weight = tower.history_bag.weight
    history = torch.randint(0, 50, (16, 7))
    history[::3, 4:] = -1  # padded rows
    history[5] = -1  # a row with no history at all: the mean of nothing is 0
    padded = torch.where(history < 0, torch.full_like(history, 50), history)
    reference = torch.nn.functional.embedding_bag(
        padded, weight, mode="mean", padding_idx=50
    )
    ours = _mean_of_rows(weight, history, 50)
    torch.testing.assert_close(ours, reference, atol=1e-6, rtol=1e-5)
    g = torch.randn_like(ours)
    (ref_grad,) = torch.autograd.grad((reference * g).sum(), weight)
    (our_grad,) = torch.autograd.grad((ours * g).sum(), weight)
    torch.testing.assert_close(our_grad, ref_grad, atol=1e-6, rtol=1e-5)
    assert float(our_grad[50].abs().max()) == 0.0  # the padding row never learns


def test_hashed_item_tower_checks_its_ids_and_catalogue_against_the_hash_range():
    with pytest.raises(ValueError, match="num_items must be <= 2"):
        ItemTower(2**31, 4, num_hashes=2, num_buckets=16)
    tower = ItemTower(100, 4, num_hashes=2, num_buckets=16)
    with pytest.raises(ValueError, match=r"item_ids must lie in \[0, 100\)"):
        tower.rows(torch.tensor([100]))
    with pytest.raises(ValueError, match=r"item_ids must lie in \[0, 100\)"):
        tower(torch.tensor([-1]))
    assert torch.equal(tower.rows(torch.arange(100)), tower._rows(torch.arange(100)))
