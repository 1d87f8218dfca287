"""GradCache: the chunked step gives the big batch's gradient; accumulation does not."""

from __future__ import annotations

import contextlib

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from candidate_sampling.scale import gradcache
from candidate_sampling.scale.gradcache import checkpointed_in_batch_softmax_loss, gradcache_backward
from candidate_sampling import CandidateSet
from candidate_sampling.losses import in_batch_softmax_loss
from candidate_sampling.losses.sigmoid import SigmoidPairwiseLoss

F64 = torch.float64


def tower(seed: int, dropout: float = 0.3) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Dropout(dropout), nn.Linear(16, 4)).to(F64)


def data(n: int = 20, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 6, generator=gen, dtype=F64)
    y = torch.randn(n, 6, generator=gen, dtype=F64)
    ids = torch.randint(0, 8, (n,), generator=gen)
    return x, y, ids


def grads(*modules: nn.Module) -> list[torch.Tensor]:
    out = [p.grad.clone() for m in modules for p in m.parameters()]
    for m in modules:
        m.zero_grad(set_to_none=True)
    return out


def max_diff(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    return max(float((x - y).abs().max()) for x, y in zip(a, b))


def one_pass_step(towers, inputs, loss_fn, chunk_size, seed):
    """The big-batch step with every activation kept. Chunks are embedded in the order GradCache
    embeds them, so that dropout draws the same masks from the same seed."""
    torch.manual_seed(seed)
    embeddings = [torch.cat([t(c) for c in x.split(chunk_size)]) for t, x in zip(towers, inputs)]
    loss = loss_fn(*embeddings)
    loss.backward()
    return loss.detach()


@pytest.mark.parametrize("chunk_size", [1, 3, 7, 20, 64])
def test_two_towers_with_dropout_match_the_big_batch_step(chunk_size):
    query_tower, item_tower = tower(0), tower(1)
    x, y, ids = data()

    def loss_fn(u, v):
        return in_batch_softmax_loss(u, CandidateSet(v, ids), temperature=0.5)

    torch.manual_seed(7)
    out = gradcache_backward([query_tower, item_tower], [x, y], loss_fn, chunk_size=chunk_size)
    cached = grads(query_tower, item_tower)
    want = one_pass_step([query_tower, item_tower], [x, y], loss_fn, chunk_size, seed=7)
    full = grads(query_tower, item_tower)
    assert abs(float(out.loss - want)) < 1e-10
    assert max_diff(cached, full) < 1e-10
    assert [e.shape for e in out.embeddings] == [(20, 4), (20, 4)]


def test_without_dropout_equals_a_single_full_batch_forward():
    query_tower, item_tower = tower(0, dropout=0.0), tower(1, dropout=0.0)
    x, y, ids = data(n=32)

    def loss_fn(u, v):
        return in_batch_softmax_loss(u, CandidateSet(v, ids))

    gradcache_backward([query_tower, item_tower], [x, y], loss_fn, chunk_size=5)
    cached = grads(query_tower, item_tower)
    loss_fn(query_tower(x), item_tower(y)).backward()
    assert max_diff(cached, grads(query_tower, item_tower)) < 1e-10


def _batch(v):
    """The batch's positives as columns with distinct ids (no accidental hits)."""
    return CandidateSet(v, torch.arange(v.shape[0]))


def test_rng_replay_is_what_makes_dropout_match(monkeypatch):
    query_tower, item_tower = tower(0), tower(1)
    x, y, _ = data()

    def loss_fn(u, v):
        return in_batch_softmax_loss(u, _batch(v))

    monkeypatch.setattr(gradcache._RngState, "replay", lambda self: contextlib.nullcontext())
    torch.manual_seed(7)
    gradcache_backward([query_tower, item_tower], [x, y], loss_fn, chunk_size=5)
    no_replay = grads(query_tower, item_tower)
    one_pass_step([query_tower, item_tower], [x, y], loss_fn, 5, seed=7)
    assert max_diff(no_replay, grads(query_tower, item_tower)) > 1e-3


def test_global_rng_advances_as_in_one_chunked_pass():
    encoder = tower(0)
    x, _, _ = data()
    torch.manual_seed(3)
    gradcache_backward(encoder, [x], lambda e: e.pow(2).mean(), chunk_size=6)
    after = torch.rand(3)
    torch.manual_seed(3)
    with torch.no_grad():
        for chunk in x.split(6):
            encoder(chunk)
    assert torch.equal(after, torch.rand(3))


def test_shared_encoder_two_views_and_a_learnable_loss():
    encoder = tower(2)
    x, y, _ = data()
    loss_module = SigmoidPairwiseLoss().to(F64)

    def loss_fn(a, b):
        return loss_module(a, _batch(b))

    torch.manual_seed(5)
    out = gradcache_backward(encoder, [x, y], loss_fn, chunk_size=4)
    cached = grads(encoder, loss_module)
    want = one_pass_step([encoder, encoder], [x, y], loss_fn, 4, seed=5)
    assert abs(float(out.loss - want)) < 1e-10
    assert max_diff(cached, grads(encoder, loss_module)) < 1e-10


def test_tuple_and_dict_inputs_and_loss_kwargs():
    class TwoInputs(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(6, 4).to(F64), nn.Linear(6, 4).to(F64)

        def forward(self, left, right):
            return self.a(left) + self.b(right)

    model = TwoInputs()
    x, y, ids = data(n=10)

    def loss_fn(u, v, *, candidate_ids):
        return in_batch_softmax_loss(u, CandidateSet(v, candidate_ids))

    gradcache_backward(
        model,
        [(x, y), {"left": y, "right": x}],
        loss_fn,
        chunk_size=3,
        loss_kwargs={"candidate_ids": ids},
    )
    cached = grads(model)
    loss_fn(model(x, y), model(left=y, right=x), candidate_ids=ids).backward()
    assert max_diff(cached, grads(model)) < 1e-10


def test_gradient_accumulation_computes_a_different_loss():
    """Same chunks, same examples: accumulation sees each chunk's negatives only."""
    query_tower, item_tower = tower(0, dropout=0.0), tower(1, dropout=0.0)
    x, y, _ = data(n=24)
    gradcache_backward(
        [query_tower, item_tower],
        [x, y],
        lambda u, v: in_batch_softmax_loss(u, _batch(v)),
        chunk_size=6,
    )
    big = grads(query_tower, item_tower)
    big_loss = in_batch_softmax_loss(query_tower(x), _batch(item_tower(y))).detach()
    chunk_losses = []
    for xc, yc in zip(x.split(6), y.split(6)):
        loss = in_batch_softmax_loss(query_tower(xc), _batch(item_tower(yc))) / 4
        loss.backward()
        chunk_losses.append(loss.detach())
    accumulated = grads(query_tower, item_tower)
    relative = (
        torch.cat([(a - b).flatten() for a, b in zip(accumulated, big)]).norm()
        / torch.cat([b.flatten() for b in big]).norm()
    )
    assert relative > 0.05
    # fewer candidates per row: each row's log-sum-exp runs over a subset, so the loss is smaller
    assert sum(chunk_losses) < big_loss


@settings(max_examples=25)
@given(
    batch=st.integers(1, 12),
    extra=st.integers(0, 6),
    block=st.integers(1, 14),
    seed=st.integers(0, 1000),
)
def test_checkpointed_loss_equals_the_one_pass_loss(batch, extra, block, seed):
    gen = torch.Generator().manual_seed(seed)
    n = batch + extra
    query = torch.randn(batch, 3, generator=gen, dtype=F64, requires_grad=True)
    embeddings = torch.randn(n, 3, generator=gen, dtype=F64, requires_grad=True)
    ids = torch.randint(0, 4, (n,), generator=gen)
    log_q = torch.randn(n, generator=gen, dtype=F64)
    # per-row log Q and mask on the extra columns: sliced with each block's rows
    extra_log_q = torch.randn(batch, extra, generator=gen, dtype=F64)
    extra_mask = torch.rand(batch, extra, generator=gen) < 0.7
    positives = CandidateSet(embeddings[:batch], ids[:batch], log_q[:batch])
    candidates = CandidateSet(embeddings[batch:], ids[batch:], extra_log_q, extra_mask)
    kwargs = {"temperature": 0.6, "reduction": "none"}
    got = checkpointed_in_batch_softmax_loss(
        query, positives, candidates, block_size=block, **kwargs
    )
    want = in_batch_softmax_loss(query, positives, candidates, **kwargs)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    weights = torch.rand(batch, generator=gen, dtype=F64)
    g_got = torch.autograd.grad((got * weights).sum(), [query, embeddings])
    g_want = torch.autograd.grad((want * weights).sum(), [query, embeddings])
    for a, b in zip(g_got, g_want):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda t, x: gradcache_backward(t, [x], lambda e: e.sum(), chunk_size=0),
            "chunk_size must be >= 1",
        ),
        (
            lambda t, x: gradcache_backward([t, t], [x], lambda e: e.sum(), chunk_size=2),
            "same length",
        ),
        (
            lambda t, x: gradcache_backward(t, x, lambda e: e.sum(), chunk_size=2),
            "inputs must be a sequence",
        ),
        (lambda t, x: gradcache_backward(t, [x], lambda e: e, chunk_size=2), "scalar tensor"),
        (
            lambda t, x: gradcache_backward(t, [(x, x[:3])], lambda e: e.sum(), chunk_size=2),
            "share their first dimension",
        ),
        (
            lambda t, x: gradcache_backward([t, 3], [x, x], lambda a, b: a.sum(), chunk_size=2),
            "must be callable",
        ),
        (
            lambda t, x: checkpointed_in_batch_softmax_loss(x, _batch(x), block_size=0),
            "block_size must be >= 1",
        ),
        (
            # fewer positive columns than rows: an error, not a positive wrapped around
            lambda t, x: checkpointed_in_batch_softmax_loss(x, _batch(x[:3]), block_size=2),
            "positives must have B = 20 columns",
        ),
        (
            lambda t, x: checkpointed_in_batch_softmax_loss(x, x, block_size=2),
            "positives must be a CandidateSet",
        ),
    ],
)
def test_bad_arguments_name_themselves(call, message):
    with pytest.raises(ValueError, match=message):
        call(tower(0), data()[0])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_checkpointed_loss_of_half_inputs_keeps_each_columns_hit_rule(dtype):
    """Half inputs are upcast inside the checkpointed loss; the upcast sets keep their
    sources, so a copy of a row's positive among the in-batch columns stays in the softmax
    (source "batch") and a candidate drawn with replacement keeps its hit, as in
    ``in_batch_softmax_loss`` on the same half inputs (it once became a "fixed" set and
    lost them: 1.08 against 1.29)."""
    from candidate_sampling import CandidateSet
    from candidate_sampling.losses import in_batch_softmax_loss
    from candidate_sampling.scale.gradcache import checkpointed_in_batch_softmax_loss

    gen = torch.Generator().manual_seed(0)
    query = torch.randn(4, 3, generator=gen)
    rows = torch.randn(4, 3, generator=gen)
    rows[2] = rows[0]
    positives = CandidateSet.from_batch(rows.to(dtype), torch.tensor([5, 6, 5, 7]))
    drawn = CandidateSet.from_ids(
        torch.tensor([5, 1]), torch.randn(8, 3, generator=gen).to(dtype)
    ).with_source("replacement")
    for extra in (None, drawn):
        want = in_batch_softmax_loss(query.to(dtype), positives, extra)
        got = checkpointed_in_batch_softmax_loss(query.to(dtype), positives, extra, block_size=2)
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
