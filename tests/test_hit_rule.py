"""The accidental-hit rule of every source, checked by exact enumeration (chapters 4–5).

A loss is *unbiased* here in the sense the book uses: at the true model the expected
gradient is zero (the true model is a stationary point of the expected loss). On a toy
problem — 2 contexts, 3 items, known ``P(y | x)`` — every batch and every candidate draw is
enumerated with its probability, the package's loss is averaged exactly in float64, and
the gradient with respect to the score table is taken at the true scores.

What the enumeration shows, and what every loss's default (``remove_accidental_hits=None``)
therefore does for each column's source (:func:`~candidate_sampling.losses.hits_to_remove`):

=============================  ===============================  ====================
source                         softmax family                   logistic family
=============================  ===============================  ====================
draws with replacement         keep (exact; removing biases)    keep (exact)
the batch's own positives      keep (exact, with or without     keep (exact)
                               log Q; removing biases)
a unique draw (Poisson)        remove (exact; keeping biases)   keep (exact)
a fixed set (every item once)  remove (= the full softmax)      —
batch + extras (mixed)         keep (not exact: less biased     —
                               than removing)
=============================  ===============================  ====================

The scores are a table ``S`` (contexts × items): the query of context ``x`` is the one-hot
vector ``e_x`` and item ``y``'s embedding is the column ``S[:, y]``, so ``u·v = S[x, y]``.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from candidate_sampling import CandidateSet
from candidate_sampling.losses import (
    in_batch_softmax_loss,
    nce_loss,
    sampled_softmax_loss,
    sigmoid_pairwise_loss,
)
from candidate_sampling.sampling.samplers import CandidateDraw

D64 = torch.float64
P_X = torch.tensor([0.4, 0.6], dtype=D64)
P_Y_GIVEN_X = torch.tensor([[0.7, 0.2, 0.1], [0.1, 0.3, 0.6]], dtype=D64)
P_Y = P_X @ P_Y_GIVEN_X  # the item marginal: the distribution of a batch's positives
NUM_X, NUM_Y = P_Y_GIVEN_X.shape
PAIRS = [(x, y) for x in range(NUM_X) for y in range(NUM_Y)]
P_PAIR = torch.tensor([float(P_X[x] * P_Y_GIVEN_X[x, y]) for x, y in PAIRS], dtype=D64)
EXACT = 1e-12  # float64 rounding of a few hundred terms
BIASED = 1e-3  # every biased rule here is off by more than 3e-3


def _table(scores: torch.Tensor) -> torch.Tensor:
    return scores.clone().requires_grad_(True)


def _query(xs) -> torch.Tensor:
    return torch.eye(NUM_X, dtype=D64)[torch.as_tensor(xs)]


def _gradient(expected_loss: torch.Tensor, table: torch.Tensor) -> float:
    (grad,) = torch.autograd.grad(expected_loss, table)
    return float(grad.abs().max())


def _batches(batch_size: int):
    """Every batch of ``batch_size`` i.i.d. (x, y) pairs with its probability."""
    for combo in itertools.product(range(len(PAIRS)), repeat=batch_size):
        xs = [PAIRS[c][0] for c in combo]
        ys = torch.tensor([PAIRS[c][1] for c in combo])
        yield float(torch.prod(P_PAIR[list(combo)])), xs, ys


def _in_batch_gradient(scores, *, correct: bool, remove, batch_size: int = 3) -> float:
    """Max |E ∇| of the in-batch softmax over every batch, at ``scores``."""
    table = _table(scores)
    total = torch.zeros((), dtype=D64)
    for weight, xs, ys in _batches(batch_size):
        positives = CandidateSet.from_batch(table.T[ys], ys)
        if correct:  # log(B p(y)) in float64 (from_batch rounds it to float32)
            log_q = torch.log(batch_size * P_Y[ys])
            positives = CandidateSet(positives.embeddings, ys, log_q, source=positives.source)
        loss = in_batch_softmax_loss(_query(xs), positives, remove_accidental_hits=remove)
        total = total + weight * loss
    return _gradient(total, table)


@pytest.mark.parametrize("correct", [True, False], ids=["log Q", "no correction"])
def test_in_batch_softmax_keeps_the_batchs_copies(correct):
    """The other rows' positives are i.i.d. draws from p(y), independent of row i: row i's
    softmax is ranking NCE with noise p, whose true model is a stationary point only with
    every copy of its positive kept. Without the correction the stationary point is the
    PMI score log P(y|x) − log p(y)."""
    truth = torch.log(P_Y_GIVEN_X)
    if not correct:
        truth = truth - torch.log(P_Y)
    default = _in_batch_gradient(truth, correct=correct, remove=None)
    assert default < EXACT
    assert _in_batch_gradient(truth, correct=correct, remove=False) < EXACT
    assert _in_batch_gradient(truth, correct=correct, remove=True) > BIASED


def _draw_with_replacement(ids, positive_id, probs, *, num_samples):
    return CandidateDraw(
        ids=torch.as_tensor(ids),
        log_q=torch.log(num_samples * probs[torch.as_tensor(ids)]),
        num_tries=num_samples,
        unique=False,
        positive_log_q=torch.log(num_samples * probs[positive_id]),
        positive_ids=positive_id,
    )


def _sampled_gradient(loss_fn, scores, draws, *, remove) -> float:
    """Max |E ∇| of a sampled loss, one row per (x, y) pair, over ``draws``: an iterable of
    (probability, ids, log Q of the ids, unique) shared by the row."""
    table = _table(scores)
    total = torch.zeros((), dtype=D64)
    for (x, y), p_pair in zip(PAIRS, P_PAIR):
        positive = torch.tensor([y])
        for p_draw, ids, log_q, positive_log_q, unique in draws(y):
            draw = CandidateDraw(
                ids=ids, log_q=log_q, num_tries=len(ids), unique=unique,
                positive_log_q=positive_log_q, positive_ids=positive,
            )
            positives = CandidateSet.positives_of(positive, table.T, draw=draw)
            candidates = CandidateSet.from_draw(draw, table.T)
            loss = loss_fn(_query([x]), positives, candidates, remove_accidental_hits=remove)
            total = total + float(p_pair) * p_draw * loss
    return _gradient(total, table)


PROPOSAL = torch.tensor([0.5, 0.3, 0.2], dtype=D64)


def _with_replacement(num_samples: int):
    def draws(y):
        for ids in itertools.product(range(NUM_Y), repeat=num_samples):
            ids = torch.tensor(ids)
            yield (
                float(torch.prod(PROPOSAL[ids])),
                ids,
                torch.log(num_samples * PROPOSAL[ids]),
                torch.log(num_samples * PROPOSAL[[y]]),
                False,
            )

    return draws


INCLUSION = torch.tensor([0.8, 0.5, 0.3], dtype=D64)


def _poisson_unique(y):
    """Independent inclusion of each item with probability π(y): the unique draw for which
    removing hits is exact (TensorFlow's draw-until-k-distinct is close to it)."""
    for included in itertools.product([False, True], repeat=NUM_Y):
        mask = torch.tensor(included)
        p = float(torch.prod(torch.where(mask, INCLUSION, 1 - INCLUSION)))
        ids = torch.arange(NUM_Y)[mask]
        yield p, ids, torch.log(INCLUSION[ids]), torch.log(INCLUSION[[y]]), True


def test_sampled_softmax_keeps_hits_drawn_with_replacement():
    truth = torch.log(P_Y_GIVEN_X)
    draws = _with_replacement(2)
    assert _sampled_gradient(sampled_softmax_loss, truth, draws, remove=None) < EXACT
    assert _sampled_gradient(sampled_softmax_loss, truth, draws, remove=True) > BIASED


def test_sampled_softmax_removes_the_hits_of_a_unique_draw():
    truth = torch.log(P_Y_GIVEN_X)
    assert _sampled_gradient(sampled_softmax_loss, truth, _poisson_unique, remove=None) < EXACT
    assert _sampled_gradient(sampled_softmax_loss, truth, _poisson_unique, remove=False) > BIASED


@pytest.mark.parametrize("draws", [_with_replacement(2), _poisson_unique],
                         ids=["with replacement", "unique"])
def test_nce_keeps_every_hit(draws):
    """NCE sums one logistic term per column; with log Q the column's expected count, every
    term is right as it is, whatever the draw: keeping hits is exact, removing biases."""
    truth = torch.log(P_Y_GIVEN_X)  # NCE's optimum: F = log P(y | x), self-normalised
    assert _sampled_gradient(nce_loss, truth, draws, remove=None) < EXACT
    assert _sampled_gradient(nce_loss, truth, draws, remove=True) > BIASED


def test_a_fixed_set_of_every_item_is_the_full_softmax_with_its_hit_removed():
    """Every item once, log Q = 0 (an expected count of 1): with the positive's copy
    removed (the default for a fixed set) the sampled softmax is the full softmax."""
    table = _table(torch.randn(NUM_X, NUM_Y, generator=torch.Generator().manual_seed(0),
                               dtype=D64))
    xs, ys = [0, 1, 1, 0], torch.tensor([2, 0, 1, 1])
    catalogue = CandidateSet.from_ids(torch.arange(NUM_Y), table.T, log_q=0.0)
    assert catalogue.source == (("fixed", NUM_Y),)
    positives = CandidateSet.positives_of(ys, table.T)
    got = sampled_softmax_loss(_query(xs), positives, catalogue)
    full = torch.nn.functional.cross_entropy(table[xs], ys)
    torch.testing.assert_close(got, full, rtol=0, atol=1e-12)
    kept = sampled_softmax_loss(_query(xs), positives, catalogue, remove_accidental_hits=False)
    assert float(kept.detach() - full.detach()) > 0.1  # the positive counted twice


def test_sigmoid_pairwise_loss_keeps_the_batchs_copies():
    """SigLIP's loss: B positive pairs and B(B − 1) negative pairs, the negatives drawn from
    p(x) p(y), copies included. The Bayes logit is log(P(y|x)/p(y)) − log(B − 1), a
    stationary point only with the copies kept."""
    batch_size = 3
    truth = torch.log(P_Y_GIVEN_X / P_Y) - math.log(batch_size - 1)

    def gradient(remove):
        table = _table(truth)
        total = torch.zeros((), dtype=D64)
        for weight, xs, ys in _batches(batch_size):
            positives = CandidateSet.from_batch(table.T[ys], ys)
            loss = sigmoid_pairwise_loss(_query(xs), positives, remove_accidental_hits=remove)
            total = total + weight * loss
        return _gradient(total, table)

    assert gradient(None) < EXACT
    assert gradient(True) > BIASED


def test_mixed_negatives_keeping_is_less_biased_than_removing():
    """The batch's B positives plus B' uniform extras drawn with replacement, every column
    corrected by the expected count Q* = B p(y) + B' r(y). Neither rule is exact (the row's
    positive can only sit in a batch column, not in an extra one), but keeping the hits —
    the default for both sources — is several times less biased than removing them."""
    batch_size, num_samples = 3, 1
    uniform = torch.full((NUM_Y,), 1.0 / NUM_Y, dtype=D64)
    truth = torch.log(P_Y_GIVEN_X)

    def gradient(remove):
        table = _table(truth)
        total = torch.zeros((), dtype=D64)
        for weight, xs, ys in _batches(batch_size):
            for extra in itertools.product(range(NUM_Y), repeat=num_samples):
                extra = torch.tensor(extra)
                draw = CandidateDraw(
                    ids=extra, log_q=torch.log(num_samples * uniform[extra]),
                    num_tries=num_samples, unique=False,
                )
                ids = torch.cat([ys, extra])
                q_star = torch.log(batch_size * P_Y[ids] + num_samples * uniform[ids])
                positives = CandidateSet.from_batch(table.T[ys], ys)
                extras = CandidateSet.from_draw(draw, table.T, correct=False)
                assert extras.source == (("replacement", num_samples),)
                positives = CandidateSet(positives.embeddings, ys, q_star[:batch_size],
                                         source=positives.source)
                extras = CandidateSet(extras.embeddings, extra, q_star[batch_size:],
                                      source=extras.source)
                loss = in_batch_softmax_loss(
                    _query(xs), positives, extras, remove_accidental_hits=remove
                )
                total = total + weight * float(torch.prod(uniform[extra])) * loss
        return _gradient(total, table)

    keep, remove = gradient(None), gradient(True)
    assert gradient(False) == pytest.approx(keep, rel=1e-9)
    assert keep > 1e-4  # not exact
    assert keep < remove / 4, (keep, remove)


@pytest.mark.parametrize("unique", [False, True], ids=["with replacement", "unique"])
def test_retrieval_loss_follows_the_rule_of_its_extras_draw(unique):
    """RetrievalLoss: the batch's copies are kept; the extras' hits are kept when drawn
    with replacement and removed when drawn unique (the default, None)."""
    from candidate_sampling.losses import RetrievalLoss
    from candidate_sampling.sampling.samplers import UniformSampler

    gen = torch.Generator().manual_seed(3)
    table = torch.randn(3, 4, generator=gen, dtype=D64)
    query = torch.randn(4, 4, generator=gen, dtype=D64)
    ids = torch.tensor([0, 1, 0, 2])  # a copy of item 0 in the batch
    module = RetrievalLoss(sampler=UniformSampler(3), num_samples=3, unique=unique)
    got = module(query, table[ids], ids, item_encoder=lambda i: table[i],
                 generator=torch.Generator().manual_seed(1))
    extra = module.sampler.sample(3, unique=unique, generator=torch.Generator().manual_seed(1))
    assert bool((extra.ids[:, None] == ids[None, :]).any())  # hits among the extras
    columns = torch.cat([ids, extra.ids])
    logits = query @ table[columns].T
    for i in range(4):
        hit = (columns == ids[i]) & (torch.arange(7) != i)
        removed = hit & (torch.arange(7) >= 4) if unique else torch.zeros(7, dtype=torch.bool)
        logits[i, removed] = -float("inf")
    want = torch.nn.functional.cross_entropy(logits, torch.arange(4))
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
