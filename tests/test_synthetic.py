"""Synthetic softmax problems (chapters 1–4): known posteriors, Zipfian labels, bad input."""

import dataclasses
import math

import pytest
import torch

from candidate_sampling.synthetic import (
    make_context_problem,
    make_softmax_problem,
    zipf_probabilities,
)


def test_zipf_probabilities_brute_force():
    p = zipf_probabilities(7, exponent=1.3, dtype=torch.float64)
    raw = [1 / (r + 1) ** 1.3 for r in range(7)]
    expected = torch.tensor([v / sum(raw) for v in raw], dtype=torch.float64)
    assert torch.allclose(p, expected)
    assert torch.all(p[1:] < p[:-1])


def test_softmax_problem_posterior_is_bayes_rule():
    """P(y | x) from the stored W*, b* equals prior · Gaussian likelihood, normalised."""
    problem = make_softmax_problem(20, dim=3, separation=1.5, seed=1)
    x = torch.randn(5, 3)
    means, prior = problem.weights.double(), problem.prior.double()
    log_joint = torch.log(prior) - 0.5 * ((x.double()[:, None, :] - means[None]) ** 2).sum(-1)
    expected = torch.log_softmax(log_joint, dim=-1)
    assert torch.allclose(problem.log_probs(x).double(), expected, atol=1e-5)


def test_softmax_problem_labels_follow_the_prior():
    problem = make_softmax_problem(50, dim=4, seed=2)
    batch = problem.sample(200_000, torch.Generator().manual_seed(0))
    freq = torch.bincount(batch.positive_ids, minlength=50).double() / 200_000
    prior = problem.prior.double()
    sigma = torch.sqrt(prior * (1 - prior) / 200_000)
    assert torch.all((freq - prior).abs() < 5 * sigma + 1e-12)


def test_context_problem_joint_sampling_matches_table():
    problem = make_context_problem(30, num_contexts=4, dim=5, signal=2.0, seed=3)
    table = problem.context_log_probs().exp().double()  # (C, |V|)
    assert torch.allclose(table.sum(1), torch.ones(4, dtype=torch.float64), atol=1e-5)
    n = 200_000
    batch = problem.sample(n, torch.Generator().manual_seed(1))
    counts = torch.zeros(4, 30, dtype=torch.float64)
    counts.index_put_(
        (batch.context_ids, batch.positive_ids), torch.ones(n, dtype=torch.float64), accumulate=True
    )
    joint = table / 4
    sigma = torch.sqrt(joint * (1 - joint) / n)
    assert torch.all((counts / n - joint).abs() < 5 * sigma + 1e-12)
    assert torch.equal(batch.query, problem.contexts[batch.context_ids])


def test_batch_fields_use_the_package_vocabulary():
    problem = make_softmax_problem(12, dim=3, seed=4)
    batch = problem.sample(9, torch.Generator().manual_seed(2))
    assert [f.name for f in dataclasses.fields(batch)] == ["query", "positive_ids", "context_ids"]
    assert batch.query.shape == (9, 3) and batch.query.dtype == torch.float32
    assert batch.positive_ids.shape == (9,) and batch.positive_ids.dtype == torch.int64
    assert batch.context_ids is None
    again = problem.sample(9, torch.Generator().manual_seed(2))
    assert torch.equal(batch.query, again.query)
    assert torch.equal(batch.positive_ids, again.positive_ids)


def test_same_seed_same_problem_and_different_seed_differs():
    a, b = make_softmax_problem(10, seed=5), make_softmax_problem(10, seed=5)
    assert torch.equal(a.weights, b.weights) and torch.equal(a.bias, b.bias)
    assert not torch.equal(a.weights, make_softmax_problem(10, seed=6).weights)


def test_log_probs_normalised_and_finite():
    problem = make_softmax_problem(1000, dim=8, separation=3.0, seed=0)
    lp = problem.log_probs(problem.sample(64).query)
    assert torch.isfinite(lp).all()
    assert torch.allclose(lp.exp().sum(-1), torch.ones(64), atol=1e-4)
    assert math.isclose(float(problem.prior.sum()), 1.0, rel_tol=1e-5)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: zipf_probabilities(0), "num_classes"),
        (lambda: zipf_probabilities(5, exponent=0), "exponent"),
        (lambda: make_softmax_problem(1), "num_classes"),
        (lambda: make_softmax_problem(10, dim=0), "dim"),
        (lambda: make_softmax_problem(10, separation=-1.0), "separation"),
        (lambda: make_context_problem(10, num_contexts=0), "num_contexts"),
        (lambda: make_softmax_problem(10).sample(0), "num_examples"),
        (lambda: make_softmax_problem(10, dim=4).logits(torch.zeros(2, 3)), "x must have shape"),
        (lambda: make_softmax_problem(10).context_log_probs(), "make_context_problem"),
    ],
)
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()
