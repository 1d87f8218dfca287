"""The training loop: batching, optimizers, per-epoch DataFrame, a loss that goes down."""

import pandas as pd
import pytest
import torch

from candidate_sampling import CandidateSet
from candidate_sampling.sampling.frequency import item_counts, item_probabilities
from candidate_sampling.losses import RetrievalLoss, in_batch_softmax_loss
from candidate_sampling.eval.metrics import retrieval_metrics
from candidate_sampling.models import ItemTower, TwoTowerModel, UserTower
from candidate_sampling.sampling.samplers import UniformSampler
from candidate_sampling.train import OptimizerGroup, iterate_batches, make_optimizer, train


def test_iterate_batches_covers_every_row_once():
    x = torch.arange(10)
    batches = list(iterate_batches((x, x * 2), 4, generator=torch.Generator().manual_seed(0)))
    assert [len(b[0]) for b in batches] == [4, 4, 2]
    seen = torch.cat([b[0] for b in batches])
    assert sorted(seen.tolist()) == list(range(10))
    assert all(torch.equal(b[1], b[0] * 2) for b in batches)
    assert len(list(iterate_batches((x,), 4, drop_last=True))) == 2


@pytest.mark.parametrize("sparse", [False, True])
def test_train_learns_a_planted_structure(sparse):
    torch.manual_seed(0)
    users = torch.arange(40).repeat(10)
    items = users % 8  # user u likes item u mod 8
    model = TwoTowerModel(UserTower(40, None, 8, sparse=sparse), ItemTower(8, 8, sparse=sparse))

    def loss_fn(m, batch):
        user_ids, item_ids = batch
        u, v = m(item_ids, user_ids=user_ids)
        return in_batch_softmax_loss(u, CandidateSet(v, item_ids))

    def evaluate(m):
        return retrieval_metrics(
            m.user_tower.all_users(),
            m.item_tower.all_items(),
            torch.arange(40),
            torch.arange(40) % 8,
            ks=(1,),
        )

    df = train(
        model,
        loss_fn,
        (users, items),
        epochs=8,
        batch_size=32,
        optimizer=make_optimizer(model, "adagrad", 0.3),
        evaluate=evaluate,
        progress=False,
    )
    assert isinstance(df, pd.DataFrame)
    assert list(df.columns[:3]) == ["epoch", "loss", "seconds"]
    assert df["epoch"].tolist() == list(range(1, 9))
    assert df["loss"].iloc[-1] < df["loss"].iloc[0]
    assert df["hit_rate@1"].iloc[-1] > 0.9


def test_train_with_the_retrieval_task_module():
    """RetrievalLoss (log Q from item frequencies, uniform extras) drops into the loop."""
    torch.manual_seed(1)
    users = torch.arange(40).repeat(5)
    items = users % 8
    model = TwoTowerModel(UserTower(40, None, 8), ItemTower(8, 8))
    task = RetrievalLoss(
        temperature=0.5,
        item_probabilities=item_probabilities(item_counts(items, 8)),
        sampler=UniformSampler(8),
        num_samples=4,
    )
    generator = torch.Generator().manual_seed(0)

    def loss_fn(m, batch):
        user_ids, item_ids = batch
        u, v = m(item_ids, user_ids=user_ids)
        return task(u, v, item_ids, item_encoder=m.item_tower, generator=generator)

    df = train(model, loss_fn, (users, items), epochs=4, batch_size=32, progress=False)
    assert df["loss"].notna().all() and df["loss"].iloc[-1] < df["loss"].iloc[0]


def test_adam_with_sparse_and_dense_parameters_is_a_group():
    model = torch.nn.Sequential(torch.nn.Embedding(5, 2, sparse=True), torch.nn.Linear(2, 2))
    opt = make_optimizer(model, "adam", 0.01)
    assert isinstance(opt, OptimizerGroup)
    out = model(torch.tensor([1, 2])).sum()
    out.backward()
    opt.step()
    opt.zero_grad()


def test_bad_inputs():
    model = TwoTowerModel(UserTower(3, None, 2), ItemTower(3, 2))
    with pytest.raises(ValueError, match="name must be one of"):
        make_optimizer(model, "rmsprop")
    with pytest.raises(ValueError, match="lr"):
        make_optimizer(model, "sgd", -1.0)
    with pytest.raises(ValueError, match="initial_accumulator_value"):
        make_optimizer(model, initial_accumulator_value=-0.1)
    with pytest.raises(ValueError, match="batch_size"):
        list(iterate_batches((torch.arange(3),), 0))
    with pytest.raises(ValueError, match="first dimension"):
        list(iterate_batches((torch.arange(3), torch.arange(4)), 2))
    with pytest.raises(ValueError, match="epochs"):
        train(model, lambda m, b: torch.zeros(()), (torch.arange(3),), epochs=0, batch_size=2)

    def vector_loss(m, batch):
        return m.user_tower(batch[0]).sum(1)

    with pytest.raises(ValueError, match="scalar"):
        train(model, vector_loss, (torch.arange(3),), epochs=1, batch_size=2, progress=False)
