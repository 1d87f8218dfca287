"""gBCE (Petrov & Macdonald 2023): β, the reduction to BCE at t = 0, a float64 reference."""

import math

import pytest
import torch
import torch.nn.functional as F

from candidate_sampling.losses.gbce import gbce_beta, gbce_from_scores


def _reference(pos, neg, mask, beta):
    """−log σ(s⁺)^β − Σ_j log(1 − σ(s⁻_j)), row by row with explicit sums, float64."""
    rows = []
    for i in range(pos.shape[0]):
        sig = 1.0 / (1.0 + math.exp(-float(pos[i])))
        total = -beta * math.log(sig)
        for j in range(neg.shape[1]):
            if mask is not None and bool(mask[i, j]):
                continue
            total -= math.log(1.0 - 1.0 / (1.0 + math.exp(-float(neg[i, j]))))
        rows.append(total)
    return torch.tensor(rows, dtype=torch.float64)


@pytest.mark.parametrize("k,items,t", [(1, 10, 0.0), (4, 9, 1.0), (256, 1682, 0.75)])
def test_beta_follows_the_paper(k, items, t):
    alpha = k / (items - 1)
    assert gbce_beta(k, items, t) == pytest.approx(alpha * (t * (1 - 1 / alpha) + 1 / alpha))


def test_beta_ends_t0_is_one_and_t1_is_alpha():
    assert gbce_beta(7, 101, 0.0) == pytest.approx(1.0, abs=1e-15)
    assert gbce_beta(7, 101, 1.0) == pytest.approx(7 / 100, abs=1e-15)
    # all negatives sampled (α = 1): β = 1 whatever t
    assert gbce_beta(100, 101, 0.3) == pytest.approx(1.0)


def test_matches_float64_reference_with_mask():
    g = torch.Generator().manual_seed(0)
    pos = torch.randn(6, generator=g, dtype=torch.float64) * 3
    neg = torch.randn(6, 5, generator=g, dtype=torch.float64) * 3
    mask = torch.rand(6, 5, generator=g) < 0.3
    beta = gbce_beta(5, 40, 0.75)
    got = gbce_from_scores(pos, neg, num_items=40, t=0.75, mask=mask, reduction="none")
    torch.testing.assert_close(got, _reference(pos, neg, mask, beta), rtol=1e-12, atol=1e-12)
    mean = gbce_from_scores(pos, neg, num_items=40, t=0.75, mask=mask)
    torch.testing.assert_close(mean, got.mean(), rtol=1e-12, atol=0)


def test_t0_is_exactly_bce():
    g = torch.Generator().manual_seed(1)
    pos = torch.randn(8, generator=g, dtype=torch.float64)
    neg = torch.randn(8, 3, generator=g, dtype=torch.float64)
    logits = torch.cat([pos[:, None], neg], 1)
    labels = torch.zeros_like(logits)
    labels[:, 0] = 1.0
    bce = F.binary_cross_entropy_with_logits(logits, labels, reduction="none").sum(1)
    got = gbce_from_scores(pos, neg, num_items=1000, t=0.0, reduction="none")
    assert torch.equal(got, bce) or torch.allclose(got, bce, rtol=0, atol=1e-15)


def test_paper_transformed_logit_form_agrees():
    """gSASRec's code: BCE on log(1 / (σ(s⁺)^(−β) − 1)) for the positive."""
    g = torch.Generator().manual_seed(2)
    pos = torch.randn(5, generator=g, dtype=torch.float64)
    neg = torch.randn(5, 4, generator=g, dtype=torch.float64)
    beta = gbce_beta(4, 50, 0.75)
    z = torch.log(1.0 / (torch.sigmoid(pos) ** (-beta) - 1.0))
    logits = torch.cat([z[:, None], neg], 1)
    labels = torch.zeros_like(logits)
    labels[:, 0] = 1.0
    paper = F.binary_cross_entropy_with_logits(logits, labels, reduction="none").sum(1)
    got = gbce_from_scores(pos, neg, num_items=50, t=0.75, reduction="none")
    torch.testing.assert_close(got, paper, rtol=1e-10, atol=1e-12)


def test_gradcheck_and_masked_terms_get_no_gradient():
    g = torch.Generator().manual_seed(3)
    pos = torch.randn(4, generator=g, dtype=torch.float64, requires_grad=True)
    neg = torch.randn(4, 3, generator=g, dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[True, False, False]] * 4)

    def f(p, n):
        return gbce_from_scores(p, n, num_items=20, t=0.5, mask=mask, reduction="sum")

    assert torch.autograd.gradcheck(f, (pos, neg))
    f(pos, neg).backward()
    assert (neg.grad[:, 0] == 0).all()


def test_extreme_scores_stay_finite_and_half_inputs_upcast():
    pos = torch.tensor([-200.0, 200.0], dtype=torch.float16)
    neg = torch.tensor([[200.0], [-200.0]], dtype=torch.float16)
    out = gbce_from_scores(pos, neg, num_items=10, t=0.9, reduction="none")
    assert out.dtype == torch.float32 and torch.isfinite(out).all()
    assert out[1] == pytest.approx(0.0, abs=1e-6)


def test_num_samples_overrides_the_column_count():
    pos, neg = torch.zeros(2), torch.zeros(2, 4)
    a = gbce_from_scores(pos, neg, num_items=101, t=1.0, num_samples=10, reduction="none")
    beta = 10 / 100
    torch.testing.assert_close(a, beta * math.log(2) + 4 * math.log(2) * torch.ones(2))


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"num_items": 1, "t": 0.5}, "num_items must be"),
        ({"num_items": 10, "t": 1.5}, "t must lie in"),
        ({"num_items": 10, "t": -0.1}, "t must lie in"),
        ({"num_items": 10, "t": float("nan")}, "t must lie in"),
        ({"num_items": 10, "t": True}, "t must be a number"),
        # no num_samples passed: the error names negative_scores' k, not num_samples
        ({"num_items": 3, "t": 0.5}, r"negative_scores must have at most .* 2 columns .*k = 4"),
        ({"num_items": 3, "t": 0.5, "num_samples": 3}, r"num_samples must be in \[1, 2\]"),
        ({"num_items": 3, "t": 0.5, "num_samples": 0}, r"num_samples must be in \[1, 2\]"),
        ({"num_items": 10, "t": 0.5, "reduction": "avg"}, "reduction must be"),
    ],
)
def test_bad_options(kwargs, message):
    with pytest.raises(ValueError, match=message):
        gbce_from_scores(torch.zeros(2), torch.zeros(2, 4), **kwargs)


def test_bad_tensors():
    with pytest.raises(ValueError, match="positive_scores must have shape"):
        gbce_from_scores(torch.zeros(2, 1), torch.zeros(2, 4), num_items=10, t=0.5)
    with pytest.raises(ValueError, match="negative_scores must have shape"):
        gbce_from_scores(torch.zeros(2), torch.zeros(2), num_items=10, t=0.5)
    with pytest.raises(ValueError, match="batch size B must agree"):
        gbce_from_scores(torch.zeros(3), torch.zeros(2, 4), num_items=10, t=0.5)
    with pytest.raises(ValueError, match="floating-point"):
        gbce_from_scores(torch.zeros(2, dtype=torch.long), torch.zeros(2, 4), num_items=10, t=0)
    with pytest.raises(ValueError, match="mask must be a bool"):
        gbce_from_scores(
            torch.zeros(2), torch.zeros(2, 4), num_items=10, t=0.5, mask=torch.zeros(2, 4)
        )
    with pytest.raises(ValueError, match="mask must have shape"):
        gbce_from_scores(
            torch.zeros(2), torch.zeros(2, 4), num_items=10, t=0.5,
            mask=torch.zeros(2, 3, dtype=torch.bool),
        )


def test_sample_weight_weights_rows():
    pos, neg = torch.randn(3, dtype=torch.float64), torch.randn(3, 2, dtype=torch.float64)
    w = torch.tensor([0.0, 1.0, 2.0], dtype=torch.float64)
    rows = gbce_from_scores(pos, neg, num_items=30, t=0.5, reduction="none")
    got = gbce_from_scores(pos, neg, num_items=30, t=0.5, sample_weight=w, reduction="sum")
    torch.testing.assert_close(got, (w * rows).sum())
