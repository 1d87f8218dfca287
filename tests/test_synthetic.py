"""Synthetic softmax problems (chapters 1–4): known posteriors, Zipfian labels, bad input."""

import dataclasses
import math

import pytest
import torch

from candidate_sampling.data.synthetic import (
    PlantedRetrieval,
    make_context_problem,
    make_planted_retrieval,
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
        (lambda: zipf_probabilities(0), "num_items"),
        (lambda: zipf_probabilities(5, exponent=0), "exponent"),
        (lambda: make_softmax_problem(1), "num_items"),
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


# ----------------------------------------------------------- planted retrieval (chapter 9)


def test_planted_log_probs_are_the_softmax_of_the_planted_scores():
    """log P(y | u) = log_softmax(a_u · e_y + b_y), checked in float64 by explicit sums."""
    planted = make_planted_retrieval(6, 40, dim=3, signal=2.0, seed=1)
    users = torch.tensor([0, 3, 5, 3])
    a, e = planted.user_vectors.double(), planted.item_vectors.double()
    b = planted.item_bias.double()
    scores = torch.stack([torch.stack([a[u] @ e[y] + b[y] for y in range(40)]) for u in users])
    expected = scores - torch.logsumexp(scores, dim=1, keepdim=True)
    for chunk in (None, 1, 3):
        got = planted.log_probs(users, chunk_size=chunk).double()
        assert got.shape == (4, 40) and got.dtype == torch.float64
        assert torch.allclose(got, expected, atol=1e-5)
    user_emb, item_emb = planted.two_tower()
    assert user_emb.shape == (6, 4) and item_emb.shape == (40, 4)
    assert torch.allclose((user_emb[users] @ item_emb.T).double(), scores, atol=1e-5)


def test_planted_sampling_frequencies_match_the_exact_probabilities():
    """Per user, the empirical item frequencies lie within 5 binomial standard deviations
    of the exact P(y | u); the users are uniform within the same bound."""
    planted = make_planted_retrieval(3, 25, dim=4, signal=2.0, zipf_exponent=1.2, seed=2)
    n = 150_000
    users, items = planted.sample(n, torch.Generator().manual_seed(0), chunk_size=2)
    assert users.shape == items.shape == (n,) and items.dtype == torch.int64
    user_counts = torch.bincount(users, minlength=3).double()
    sd = math.sqrt(n * (1 / 3) * (2 / 3))
    assert torch.all((user_counts - n / 3).abs() < 5 * sd)
    probs = planted.log_probs(torch.arange(3)).double().exp()
    for u in range(3):
        mine = items[users == u]
        freq = torch.bincount(mine, minlength=25).double() / len(mine)
        sigma = torch.sqrt(probs[u] * (1 - probs[u]) / len(mine))
        assert torch.all((freq - probs[u]).abs() < 5 * sigma + 1e-12), u
    # a chi-square statistic of all cells stays below its mean + 5 standard deviations
    counts = torch.zeros(3, 25, dtype=torch.float64)
    counts.index_put_((users, items), torch.ones(n, dtype=torch.float64), accumulate=True)
    expected = user_counts[:, None] * probs
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    dof = 3 * 24
    assert chi2 < dof + 5 * math.sqrt(2 * dof)


def test_planted_sampling_with_given_users_keeps_their_order():
    planted = make_planted_retrieval(5, 30, dim=2, seed=3)
    users = torch.tensor([4, 0, 4, 2, 2, 2, 1])
    got_users, items = planted.sample(7, torch.Generator().manual_seed(1), user_ids=users)
    assert torch.equal(got_users, users) and items.shape == (7,)
    a = planted.sample(50, torch.Generator().manual_seed(2))
    b = planted.sample(50, torch.Generator().manual_seed(2))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_planted_marginal_is_the_average_conditional_and_close_to_zipf():
    planted = make_planted_retrieval(400, 200, dim=8, signal=1.0, seed=4)
    marginal = planted.item_marginal(chunk_size=7)
    exact = planted.log_probs(torch.arange(400)).double().exp().mean(0)
    assert marginal.shape == (200,) and marginal.dtype == torch.float64
    assert torch.allclose(marginal, exact, atol=1e-6)
    assert math.isclose(float(marginal.sum()), 1.0, rel_tol=1e-5)
    # the bias keeps the marginal near the Zipf prior: the head in the same order
    assert torch.equal(torch.argsort(marginal, descending=True)[:3], torch.arange(3))
    assert isinstance(planted, PlantedRetrieval) and planted.num_items == 200


def test_planted_problem_is_seeded_and_lives_on_its_device():
    a = make_planted_retrieval(4, 10, dim=3, seed=7)
    b = make_planted_retrieval(4, 10, dim=3, seed=7)
    assert torch.equal(a.item_vectors, b.item_vectors) and torch.equal(a.item_bias, b.item_bias)
    assert not torch.equal(
        a.user_vectors, make_planted_retrieval(4, 10, dim=3, seed=8).user_vectors
    )
    assert (a.num_users, a.num_items, a.dim, a.device.type) == (4, 10, 3, "cpu")


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: make_planted_retrieval(0, 10), "num_users"),
        (lambda: make_planted_retrieval(3, 1), "num_items"),
        (lambda: make_planted_retrieval(3, 10, dim=0), "dim"),
        (lambda: make_planted_retrieval(3, 10, zipf_exponent=0.0), "zipf_exponent"),
        (lambda: make_planted_retrieval(3, 10, signal=-1.0), "signal"),
        (lambda: make_planted_retrieval(3, 10).sample(0), "num_examples"),
        (lambda: make_planted_retrieval(3, 10).log_probs(torch.tensor([3])), "user_ids"),
        (lambda: make_planted_retrieval(3, 10).log_probs(torch.tensor([0.0])), "user_ids"),
        (
            lambda: make_planted_retrieval(3, 10).log_probs(torch.tensor([0]), chunk_size=0),
            "chunk_size",
        ),
        (
            lambda: make_planted_retrieval(3, 10).sample(2, user_ids=torch.tensor([0])),
            "user_ids must have num_examples",
        ),
    ],
)
def test_planted_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()
