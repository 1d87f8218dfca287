"""Cross-batch memory: FIFO order, ages, log Q of queued items, hit masking, momentum."""

from __future__ import annotations

import math
from collections import deque

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

from candidate_sampling import CandidateSet
from candidate_sampling.losses import in_batch_softmax_loss
from candidate_sampling.scale.memory import (
    CrossBatchMemory,
    embedding_drift,
    make_momentum_encoder,
    momentum_update,
)

F64 = torch.float64


@given(size=st.integers(1, 12), batches=st.lists(st.integers(1, 9), min_size=1, max_size=8))
def test_fifo_keeps_the_newest_entries_like_a_deque(size, batches):
    memory = CrossBatchMemory(size, 2, dtype=F64)
    reference: deque = deque(maxlen=size)  # (id, step), oldest on the left
    next_id = 0
    for step, n in enumerate(batches, start=1):
        ids = torch.arange(next_id, next_id + n)
        next_id += n
        memory.enqueue(ids[:, None].to(F64).repeat(1, 2), ids)
        reference.extend((int(i), step) for i in ids)
    newest_first = list(reversed(reference))
    assert len(memory) == len(reference)
    assert memory.ids.tolist() == [i for i, _ in newest_first]
    assert memory.embeddings[:, 0].tolist() == [float(i) for i, _ in newest_first]
    assert memory.ages().tolist() == [len(batches) + 1 - s for _, s in newest_first]
    assert memory.step == len(batches)


def test_entries_are_detached_and_converted():
    memory = CrossBatchMemory(4, 3)
    emb = torch.randn(2, 3, dtype=F64, requires_grad=True)
    memory.enqueue(emb * 2, torch.tensor([5, 6], dtype=torch.int32))
    assert memory.embeddings.dtype == torch.float32 and not memory.embeddings.requires_grad
    assert memory.ids.dtype == torch.int64 and memory.ids.tolist() == [6, 5]
    torch.testing.assert_close(memory.embeddings, (emb * 2).detach().float().flip(0))


def test_candidates_are_batch_then_queue_with_expected_count_log_q():
    gen = torch.Generator().manual_seed(0)
    probs = torch.rand(10, generator=gen, dtype=F64) + 0.1
    probs /= probs.sum()
    memory = CrossBatchMemory(6, 3, dtype=F64)
    memory.enqueue(torch.randn(4, 3, generator=gen, dtype=F64), torch.tensor([1, 2, 3, 1]))
    positives = torch.randn(3, 3, generator=gen, dtype=F64, requires_grad=True)
    ids = torch.tensor([1, 7, 9])
    batch, queued = memory.candidates_for(positives, ids, item_probabilities=probs)
    assert isinstance(batch, CandidateSet) and isinstance(queued, CandidateSet)
    assert batch.embeddings is positives and not queued.embeddings.requires_grad
    torch.testing.assert_close(queued.embeddings, memory.embeddings)
    assert batch.ids.tolist() == [1, 7, 9] and queued.ids.tolist() == [1, 3, 2, 1]
    # expected count of y among 3 batch + 4 queued popularity draws: (3 + 4)·p(y)
    both = CandidateSet.concat(batch, queued)
    torch.testing.assert_close(
        both.log_q, torch.log(7 * probs[both.ids]).float(), rtol=0, atol=1e-6
    )
    plain_batch, plain_queue = memory.candidates_for(positives, ids)
    assert plain_batch.log_q is None and plain_queue.log_q is None


def test_queued_copies_of_a_positive_are_kept_by_default_and_masked_on_request():
    """Queued columns are past positives, draws from the batch's marginal: the default hit
    rule keeps a queued copy of a row's positive; ``remove_accidental_hits=True`` gives the
    loss with those copies deleted."""
    gen = torch.Generator().manual_seed(1)
    memory = CrossBatchMemory(8, 4, dtype=F64)
    queue_ids = torch.tensor([3, 0, 3, 5, 1, 3, 6, 2])
    memory.enqueue(torch.randn(8, 4, generator=gen, dtype=F64), queue_ids)
    query = torch.randn(3, 4, generator=gen, dtype=F64)
    positives = torch.randn(3, 4, generator=gen, dtype=F64)
    ids = torch.tensor([3, 4, 5])
    batch, queued = memory.candidates_for(positives, ids)
    assert batch.source == (("batch", 3),) and queued.source == (("queue", 8),)
    per_row = in_batch_softmax_loss(
        query, batch, queued, reduction="none", remove_accidental_hits=True
    )
    columns = torch.cat([batch.embeddings, queued.embeddings])
    column_ids = torch.cat([batch.ids, queued.ids])
    for i in range(3):
        keep = [j for j in range(11) if j == i or column_ids[j] != ids[i]]
        logits = query[i] @ columns[keep].T
        want = torch.logsumexp(logits, 0) - query[i] @ positives[i]
        torch.testing.assert_close(per_row[i], want)
    unmasked = in_batch_softmax_loss(
        query, batch, queued, remove_accidental_hits=False, reduction="none"
    )
    assert unmasked[0] > per_row[0]  # three queued copies of item 3 were kept
    by_default = in_batch_softmax_loss(query, batch, queued, reduction="none")
    torch.testing.assert_close(by_default, unmasked)


def test_an_empty_queue_gives_the_plain_in_batch_loss():
    memory = CrossBatchMemory(4, 2)
    u, v, ids = torch.randn(3, 2), torch.randn(3, 2), torch.tensor([0, 1, 2])
    batch, queued = memory.candidates_for(v, ids)
    assert len(queued) == 0
    torch.testing.assert_close(
        in_batch_softmax_loss(u, batch, queued), in_batch_softmax_loss(u, CandidateSet(v, ids))
    )


def test_half_precision_queue_refuses_what_it_would_store_as_inf():
    memory = CrossBatchMemory(4, 2, dtype=torch.float16)
    memory.enqueue(torch.tensor([[1e4, -2.0]]), torch.tensor([0]))  # fits float16
    with pytest.raises(ValueError, match="embeddings must fit the queue's dtype torch.float16"):
        memory.enqueue(torch.tensor([[1e5, 0.0]]), torch.tensor([1]))
    assert torch.isfinite(memory.embeddings).all() and len(memory) == 1
    wide = CrossBatchMemory(4, 2)  # float32 storage keeps it
    wide.enqueue(torch.tensor([[1e5, 0.0]]), torch.tensor([1]))
    assert float(wide.embeddings[0, 0]) == 1e5


def test_negative_and_nan_entries_are_refused():
    memory = CrossBatchMemory(4, 2)
    with pytest.raises(ValueError, match="ids must be >= 0"):
        memory.enqueue(torch.zeros(1, 2), torch.tensor([-1]))
    with pytest.raises(ValueError, match="embeddings must be finite"):
        memory.enqueue(torch.tensor([[float("nan"), 0.0]]), torch.tensor([0]))
    memory.enqueue(torch.zeros(2, 2), torch.tensor([0, 1]))
    # a negative batch id would read item_probabilities[-1]: refused by name
    with pytest.raises(ValueError, match=r"positive_ids must lie in \[0, 3\)"):
        memory.candidates_for(
            torch.zeros(1, 2), torch.tensor([-1]), item_probabilities=torch.full((3,), 1 / 3)
        )


def test_a_bad_queued_id_is_blamed_on_the_queue_not_on_positive_ids():
    memory = CrossBatchMemory(8, 2)
    memory.enqueue(torch.zeros(6, 2), torch.arange(6))  # queued ids 0..5
    positives, batch_ids = torch.zeros(2, 2), torch.tensor([0, 1])  # valid batch ids
    # a queued id beyond item_probabilities' |V| = 4
    with pytest.raises(ValueError, match=r"^memory\.ids \(the queued ids\) must lie in \[0, 4\)"):
        memory.candidates_for(positives, batch_ids, item_probabilities=torch.full((4,), 0.25))
    # a queued id the probabilities give 0 (log Q would be -inf)
    probs = torch.tensor([0.5, 0.5, 0.0, 0.0, 0.0, 0.0])
    with pytest.raises(
        ValueError, match=r"> 0 for every id of memory\.ids \(the queued ids\), got 0 for id [2-5]"
    ):
        memory.candidates_for(positives, batch_ids, item_probabilities=probs)
    # a bad batch id is still blamed on positive_ids
    with pytest.raises(ValueError, match=r"every id of positive_ids, got 0 for id 2"):
        memory.candidates_for(positives, torch.tensor([0, 2]), item_probabilities=probs)


def test_value_checks_obey_the_switch():
    import candidate_sampling as cs

    memory = CrossBatchMemory(4, 2)
    with cs.validate_args(False):
        memory.enqueue(torch.tensor([[float("nan"), 0.0]]), torch.tensor([0]))
    assert len(memory) == 1


def test_enqueue_more_than_capacity_keeps_the_last_rows():
    memory = CrossBatchMemory(3, 1)
    memory.enqueue(torch.arange(5.0)[:, None], torch.arange(5))
    assert memory.ids.tolist() == [4, 3, 2] and len(memory) == 3


def test_momentum_update_and_frozen_copy():
    torch.manual_seed(0)
    source = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    target = make_momentum_encoder(source)
    assert all(not p.requires_grad for p in target.parameters())
    assert all(p.requires_grad for p in source.parameters())
    before = [p.detach().clone() for p in target.parameters()]
    with torch.no_grad():
        for p in source.parameters():
            p.add_(1.0)
        source[1].running_mean.fill_(2.0)
    momentum_update(target, source, momentum=0.9)
    for t, b, s in zip(target.parameters(), before, source.parameters()):
        torch.testing.assert_close(t, 0.9 * b + 0.1 * s.detach())
    assert torch.equal(target[1].running_mean, source[1].running_mean)
    momentum_update(target, source, momentum=0.0)
    for t, s in zip(target.parameters(), source.parameters()):
        torch.testing.assert_close(t, s.detach())
    frozen = [p.clone() for p in target.parameters()]
    with torch.no_grad():
        source[0].weight.mul_(3)
    momentum_update(target, source, momentum=1.0)
    assert all(torch.equal(a, b) for a, b in zip(frozen, target.parameters()))


def test_embedding_drift():
    a = torch.tensor([[3.0, 4.0], [1.0, 0.0]])
    b = torch.tensor([[3.0, 4.0], [0.0, 1.0]])
    torch.testing.assert_close(embedding_drift(a, b), torch.tensor([0.0, math.sqrt(2.0)]))
    torch.testing.assert_close(embedding_drift(b, b), torch.zeros(2))


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: CrossBatchMemory(0, 2), "size must be >= 1"),
        (lambda: CrossBatchMemory(2, 0), "dim must be >= 1"),
        (lambda: CrossBatchMemory(2, 2, dtype=torch.int64), "dtype must be a floating"),
        (
            lambda: CrossBatchMemory(2, 2).enqueue(
                torch.zeros(1, 3), torch.zeros(1, dtype=torch.int64)
            ),
            "embeddings must have shape",
        ),
        (
            lambda: CrossBatchMemory(2, 2).enqueue(torch.zeros(2, 2), torch.zeros(2)),
            "ids must be an integer tensor",
        ),
        (
            lambda: CrossBatchMemory(2, 2).enqueue(
                torch.zeros(2, 2), torch.zeros(3, dtype=torch.int64)
            ),
            "number of rows n must agree",
        ),
        (
            lambda: CrossBatchMemory(2, 2).candidates_for(
                torch.zeros(2, 2), torch.zeros(3, dtype=torch.int64)
            ),
            "batch size B must agree",
        ),
        (
            lambda: CrossBatchMemory(2, 2).candidates_for(
                torch.zeros(1, 2),
                torch.zeros(1, dtype=torch.int64),
                item_probabilities=torch.full((3,), 2.0),
            ),
            "item_probabilities must lie in",
        ),
        (
            lambda: momentum_update(nn.Linear(2, 2), nn.Linear(2, 2), momentum=1.5),
            "momentum must be in",
        ),
        (
            lambda: momentum_update(nn.Linear(2, 2), nn.Linear(3, 2), momentum=0.5),
            "same parameters",
        ),
        (lambda: make_momentum_encoder(lambda x: x), "encoder must be an nn.Module"),
        (lambda: embedding_drift(torch.zeros(2, 2), torch.zeros(3, 2)), "same shape"),
    ],
)
def test_bad_arguments_name_themselves(call, message):
    with pytest.raises(ValueError, match=message):
        call()


@pytest.mark.parametrize("variant", ["pairwise", "out"])
def test_a_labelled_queue_feeds_the_multi_positive_loss(variant):
    """XBM with labels: the queue's ids are class labels, every same-label column is a
    positive, each positive against the anchor's negatives only ("pairwise", as
    pytorch-metric-learning's NT-Xent) or SupCon's L_out; against a float64 loop."""
    from candidate_sampling.losses import multi_positive_softmax_loss

    gen = torch.Generator().manual_seed(4)
    memory = CrossBatchMemory(6, 3, dtype=F64)
    memory.enqueue(torch.randn(6, 3, generator=gen, dtype=F64), torch.tensor([0, 1, 2, 0, 1, 2]))
    emb = torch.randn(4, 3, generator=gen, dtype=F64)
    labels = torch.tensor([0, 0, 1, 3])  # label 3: no positive anywhere (left out of the mean)
    batch, queued = memory.candidates_for(emb, labels)
    columns = CandidateSet.concat(batch, queued)
    positive_mask = labels[:, None] == columns.ids[None, :]
    itself = torch.zeros_like(positive_mask)
    itself[torch.arange(4), torch.arange(4)] = True  # an anchor is not its own positive
    positive_mask &= ~itself
    got = multi_positive_softmax_loss(
        emb, columns, positive_mask, temperature=0.5, variant=variant, removed=itself,
        reduction="none",
    )
    s = emb @ columns.embeddings.T / 0.5
    for i in range(4):
        pos = [j for j in range(10) if bool(positive_mask[i, j])]
        neg = [j for j in range(10) if j != i and j not in pos]
        if not pos:
            assert float(got[i]) == 0.0
            continue
        if variant == "pairwise":
            terms = [torch.logsumexp(s[i, [p] + neg], 0) - s[i, p] for p in pos]
        else:
            terms = [torch.logsumexp(s[i, pos + neg], 0) - s[i, p] for p in pos]
        torch.testing.assert_close(got[i], torch.stack(terms).mean())


def test_a_float32_queue_is_not_rounded_to_half_positives():
    memory = CrossBatchMemory(2, 2)  # float32 storage
    memory.enqueue(torch.tensor([[1e5, -3.0]]), torch.tensor([4]))
    batch, queued = memory.candidates_for(torch.zeros(1, 2, dtype=torch.float16), torch.tensor([0]))
    assert queued.embeddings.dtype == torch.float32 and float(queued.embeddings[0, 0]) == 1e5
    assert batch.embeddings.dtype == torch.float16
