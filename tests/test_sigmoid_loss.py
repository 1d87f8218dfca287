"""The pairwise sigmoid (SigLIP) loss against explicit sums, its NCE reading, its module."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from candidate_sampling import CandidateSet
from candidate_sampling.losses import Temperature, in_batch_softmax_loss, nce_from_scores
from candidate_sampling.losses.sigmoid import (
    SIGLIP_BIAS_INIT,
    SIGLIP_SCALE_INIT,
    SigmoidPairwiseLoss,
    sigmoid_pairwise_logits,
    sigmoid_pairwise_loss,
)

F64 = torch.float64


def brute_force(query, candidates, *, temperature, bias, log_q=None, ids=None):
    """Per-row Σ_j −log σ(y_ij z_ij) with explicit loops; hits (j ≠ i, same id) skipped."""
    rows = []
    for i in range(query.shape[0]):
        total = torch.zeros((), dtype=F64)
        for j in range(candidates.shape[0]):
            if ids is not None and j != i and ids[j] == ids[i]:
                continue
            z = query[i] @ candidates[j] / temperature + bias
            if log_q is not None:
                z = z - log_q[j]
            label = 1.0 if j == i else -1.0
            total = total - torch.log(torch.sigmoid(label * z))
        rows.append(total)
    return torch.stack(rows)


def as_sets(query, candidates, candidate_ids=None, log_q=None):
    """(positives, extras) of a one-matrix batch (row i's positive = candidate i)."""
    b = query.shape[0]
    ids = torch.arange(candidates.shape[0]) if candidate_ids is None else candidate_ids

    def part(cols):
        return CandidateSet(candidates[cols], ids[cols], None if log_q is None else log_q[cols])

    return part(slice(0, b)), (part(slice(b, None)) if candidates.shape[0] > b else None)


def sig(query, candidates, *, candidate_ids=None, log_q=None, remove_accidental_hits=None,
        **options):
    """The loss on a one-matrix batch; hits removed by default when ids are given."""
    if remove_accidental_hits is None:
        remove_accidental_hits = candidate_ids is not None
    positives, extras = as_sets(query, candidates, candidate_ids, log_q)
    return sigmoid_pairwise_loss(
        query, positives, extras, remove_accidental_hits=remove_accidental_hits, **options
    )


def random_inputs(batch, extra, dim, seed, num_ids=None):
    gen = torch.Generator().manual_seed(seed)
    num = batch + extra
    query = torch.randn(batch, dim, generator=gen, dtype=F64)
    candidates = torch.randn(num, dim, generator=gen, dtype=F64)
    log_q = torch.randn(num, generator=gen, dtype=F64)
    ids = torch.randint(0, num_ids or num, (num,), generator=gen)
    return query, candidates, log_q, ids


@given(
    batch=st.integers(1, 6),
    extra=st.integers(0, 5),
    dim=st.integers(1, 4),
    temperature=st.floats(0.2, 3.0),
    bias=st.floats(-5.0, 5.0),
    seed=st.integers(0, 10_000),
)
def test_matches_explicit_sums_with_log_q_and_hits(batch, extra, dim, temperature, bias, seed):
    query, candidates, log_q, ids = random_inputs(batch, extra, dim, seed, num_ids=3)
    got = sig(
        query,
        candidates,
        temperature=temperature,
        bias=bias,
        log_q=log_q,
        candidate_ids=ids,
        reduction="none",
    )
    want = brute_force(query, candidates, temperature=temperature, bias=bias, log_q=log_q, ids=ids)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)
    plain = sig(query, candidates, temperature=temperature, bias=bias)
    want_plain = brute_force(query, candidates, temperature=temperature, bias=bias).mean()
    torch.testing.assert_close(plain, want_plain, rtol=1e-10, atol=1e-10)


def test_reductions_and_explicit_positive_ids():
    query, candidates, _, ids = random_inputs(4, 3, 3, 0, num_ids=4)
    per_row = sig(query, candidates, candidate_ids=ids, reduction="none")
    assert per_row.shape == (4,)
    torch.testing.assert_close(
        sig(query, candidates, candidate_ids=ids), per_row.mean()
    )
    torch.testing.assert_close(
        sig(query, candidates, candidate_ids=ids, reduction="sum"),
        per_row.sum(),
    )
    kept = sig(
        query, candidates, candidate_ids=ids, remove_accidental_hits=False, reduction="none"
    )
    torch.testing.assert_close(kept, brute_force(query, candidates, temperature=1.0, bias=0.0))


def test_bias_is_nce_with_log_q_minus_b():
    """SigLIP's bias is NCE's −log(k·q) when every candidate has the same Q (chapter 3)."""
    query, candidates, _, _ = random_inputs(5, 0, 3, 1)
    bias, tau = -2.3, 0.7
    scores = query @ candidates.T
    off = ~torch.eye(5, dtype=torch.bool)
    nce = nce_from_scores(
        scores.diagonal()[:, None],
        scores[off].view(5, 4),
        positive_log_q=torch.full((5, 1), -bias, dtype=F64),
        negative_log_q=torch.full((5, 4), -bias, dtype=F64),
        temperature=tau,
    )
    torch.testing.assert_close(
        sig(query, candidates, temperature=tau, bias=bias), nce
    )


def test_a_constant_in_log_q_moves_the_bias_and_does_not_cancel():
    query, candidates, log_q, _ = random_inputs(4, 2, 3, 2)
    shifted = sig(query, candidates, log_q=log_q + 1.5, bias=0.5)
    torch.testing.assert_close(
        shifted, sig(query, candidates, log_q=log_q, bias=-1.0)
    )
    assert not torch.isclose(
        shifted, sig(query, candidates, log_q=log_q, bias=0.5)
    )
    # ...while the softmax ignores the same constant
    torch.testing.assert_close(
        in_batch_softmax_loss(query, *as_sets(query, candidates, log_q=log_q + 1.5)),
        in_batch_softmax_loss(query, *as_sets(query, candidates, log_q=log_q)),
    )


@pytest.mark.parametrize("num_candidates", [2, 7, 100])
def test_optimal_bias_of_uninformative_scores_is_minus_log_k(num_candidates):
    """With equal scores the bias's stationary point is the prior log-odds −log(C − 1)."""
    query = torch.zeros(2, 3, dtype=F64)
    candidates = torch.randn(num_candidates, 3, dtype=F64)
    bias = torch.tensor(-math.log(num_candidates - 1), dtype=F64, requires_grad=True)
    (grad,) = torch.autograd.grad(sig(query, candidates, bias=bias), bias)
    assert abs(float(grad)) < 1e-12
    other = torch.tensor(0.5 - math.log(num_candidates - 1), dtype=F64, requires_grad=True)
    (grad,) = torch.autograd.grad(sig(query, candidates, bias=other), other)
    assert float(grad) > 0.1


def test_bias_gradient_is_the_calibration_gap():
    """∂L/∂b = (Σ_ij σ(z_ij) − B) / B: zero when the probabilities sum to the positives."""
    query, candidates, log_q, _ = random_inputs(6, 4, 3, 3)
    bias = torch.tensor(-1.2, dtype=F64, requires_grad=True)
    loss = sig(query, candidates, bias=bias, log_q=log_q, temperature=0.8)
    (grad,) = torch.autograd.grad(loss, bias)
    every = CandidateSet(candidates, torch.arange(10), log_q)
    z = sigmoid_pairwise_logits(query, every, bias=-1.2, temperature=0.8)
    torch.testing.assert_close(grad, (torch.sigmoid(z).sum() - 6) / 6)


def test_gradcheck_through_embeddings_and_bias_and_the_scale_gradient():
    query, candidates, log_q, ids = random_inputs(3, 2, 2, 4, num_ids=3)
    inputs = (
        query.requires_grad_(),
        candidates.requires_grad_(),
        torch.tensor(-0.4, dtype=F64, requires_grad=True),
    )

    def fn(q, c, b):
        return sig(q, c, temperature=0.7, bias=b, log_q=log_q, candidate_ids=ids)

    assert torch.autograd.gradcheck(fn, inputs)
    # a learnable scale (Temperature) gets d loss / d log t: checked by central differences
    temp = Temperature.from_scale(1 / 0.7, learnable=True)
    q, c = query.detach(), candidates.detach()
    sig(q, c, temperature=temp, bias=-0.4, log_q=log_q, candidate_ids=ids).backward()
    log_t, h = float(temp.log_scale.detach()), 1e-6

    def at(lt):
        tau = math.exp(-lt)
        return float(sig(q, c, temperature=tau, bias=-0.4, log_q=log_q, candidate_ids=ids))

    numeric = (at(log_t + h) - at(log_t - h)) / (2 * h)
    assert float(temp.log_scale.grad) == pytest.approx(numeric, rel=1e-4, abs=1e-6)


def test_half_inputs_are_computed_in_float32():
    query, candidates, _, _ = random_inputs(4, 0, 3, 5)
    half = sig(query.half(), candidates.half(), temperature=0.05, bias=-3.0)
    assert half.dtype == torch.float32 and torch.isfinite(half)
    ref = sig(query.half().double(), candidates.half().double(), temperature=0.05, bias=-3.0)
    assert abs(float(half) - float(ref)) < 1e-3 * abs(float(ref))


def test_module_initialises_as_siglip_and_learns_scale_and_bias():
    module = SigmoidPairwiseLoss()
    assert math.isclose(float(module.temperature.log_scale.detach()), math.log(10.0), rel_tol=1e-6)
    assert float(module.bias.detach()) == SIGLIP_BIAS_INIT == -10.0
    assert SIGLIP_SCALE_INIT == 10.0
    assert math.isclose(float(module.scale.detach()), 10.0, rel_tol=1e-6)
    assert math.isclose(float(module.temperature.value.detach()), 0.1, rel_tol=1e-6)
    names = {name for name, _ in module.named_parameters()}
    assert names == {"temperature.log_scale", "bias"}
    query, candidates, _, ids = random_inputs(4, 2, 3, 6, num_ids=3)
    module = module.double()
    positives, extras = as_sets(query, candidates, ids)
    loss = module(query, positives, extras)
    torch.testing.assert_close(  # the logistic family keeps accidental hits by default
        loss,
        sig(query, candidates, temperature=0.1, bias=-10.0, candidate_ids=ids,
            remove_accidental_hits=False),
    )
    loss.backward()
    assert module.temperature.log_scale.grad is not None and module.bias.grad is not None
    fixed = SigmoidPairwiseLoss(scale=1.0, bias=1.0, learnable=False)
    assert not list(fixed.parameters()) and float(fixed.bias) == 1.0
    assert "temperature=0.1" in repr(SigmoidPairwiseLoss())


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"temperature": 0.0}, "temperature must be > 0"),
        ({"temperature": -1.0}, "temperature must be > 0"),
        ({"temperature": torch.tensor(0.5)}, "temperature must be a float or a Temperature"),
        ({"bias": float("nan")}, "bias must be finite"),
        ({"bias": torch.ones(2)}, "bias must be a scalar"),
        ({"reduction": "avg"}, "reduction must be one of"),
        ({"sample_weight": torch.ones(2)}, "sample_weight must have shape"),
    ],
)
def test_bad_arguments_name_themselves(kwargs, message):
    query, candidates = torch.randn(3, 2), torch.randn(5, 2)
    with pytest.raises(ValueError, match=message):
        sig(query, candidates, **kwargs)


def test_bad_shapes_and_module_options():
    positives = CandidateSet(torch.randn(2, 2), torch.arange(2))
    with pytest.raises(ValueError, match="positives must have B = 3 columns"):
        sigmoid_pairwise_loss(torch.randn(3, 2), positives)
    with pytest.raises(ValueError, match="positives must be a CandidateSet"):
        sigmoid_pairwise_loss(torch.randn(3, 2), torch.randn(3, 2))
    with pytest.raises(ValueError, match="embedding size d must agree"):
        sigmoid_pairwise_loss(torch.randn(2, 4), positives)
    with pytest.raises(ValueError, match="query must have shape"):
        sigmoid_pairwise_loss(torch.randn(3), positives)
    with pytest.raises(ValueError, match="bias must be finite"):
        SigmoidPairwiseLoss(bias=float("inf"))
    with pytest.raises(ValueError, match="scale must be a number"):
        SigmoidPairwiseLoss(scale="big")
    with pytest.raises(ValueError, match="scale must be > 0"):
        SigmoidPairwiseLoss(scale=-1.0)  # the learnable scale is named as such
    with pytest.raises(ValueError, match="reduction must be one of"):
        SigmoidPairwiseLoss(reduction="avg")
