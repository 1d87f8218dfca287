"""Tests of the sampled losses: loop references in float64, gradcheck, invariants, bad input."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from candidate_sampling.losses import (
    NCELoss,
    SampledSoftmaxLoss,
    effective_sample_size,
    importance_sampled_log_partition,
    importance_weights,
    nce_from_scores,
    nce_loss,
    negative_sampling_loss,
    sampled_logistic_loss,
    sampled_scores,
    sampled_softmax_from_scores,
    sampled_softmax_loss,
    softmax_cross_entropy,
)
from candidate_sampling.samplers import LogUniformSampler, UniformSampler, UnigramSampler

D64 = torch.float64


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# --------------------------------------------------------------------------- loop references


def ref_softmax_ce(logits, targets) -> list[float]:
    out = []
    for i in range(logits.shape[0]):
        row = [float(v) for v in logits[i]]
        m = max(row)
        lse = m + math.log(sum(math.exp(v - m) for v in row))
        out.append(lse - row[int(targets[i])])
    return out


def softplus(x: float) -> float:
    return max(x, 0.0) + math.log1p(math.exp(-abs(x)))


def corrected(s, lq, tau):
    return float(s) / tau - (float(lq) if lq is not None else 0.0)


def ref_sampled_softmax(pos, neg, pos_lq, neg_lq, mask, tau) -> list[float]:
    out = []
    for i in range(neg.shape[0]):
        o_t = corrected(pos[i], None if pos_lq is None else pos_lq[i], tau)
        terms = [o_t]
        for j in range(neg.shape[1]):
            if mask is not None and bool(mask[i, j]):
                continue
            lq = None if neg_lq is None else (neg_lq[j] if neg_lq.dim() == 1 else neg_lq[i, j])
            terms.append(corrected(neg[i, j], lq, tau))
        m = max(terms)
        out.append(m + math.log(sum(math.exp(v - m) for v in terms)) - o_t)
    return out


def ref_nce(pos, neg, pos_lq, neg_lq, mask, tau) -> list[float]:
    out = []
    for i in range(neg.shape[0]):
        total = softplus(-corrected(pos[i], None if pos_lq is None else pos_lq[i], tau))
        for j in range(neg.shape[1]):
            if mask is not None and bool(mask[i, j]):
                continue
            lq = None if neg_lq is None else (neg_lq[j] if neg_lq.dim() == 1 else neg_lq[i, j])
            total += softplus(corrected(neg[i, j], lq, tau))
        out.append(total)
    return out


def random_inputs(seed, b=5, k=7, per_row_q=False, dtype=D64):
    g = gen(seed)
    pos = torch.randn(b, generator=g, dtype=dtype) * 3
    neg = torch.randn(b, k, generator=g, dtype=dtype) * 3
    pos_lq = torch.randn(b, generator=g, dtype=dtype) - 2
    neg_lq = torch.randn(*((b, k) if per_row_q else (k,)), generator=g, dtype=dtype) - 2
    mask = torch.rand(b, k, generator=g) < 0.3
    return pos, neg, pos_lq, neg_lq, mask


# --------------------------------------------------------------------------- full softmax


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_softmax_cross_entropy_matches_loop(reduction):
    g = gen(0)
    logits = torch.randn(6, 11, generator=g, dtype=D64) * 4
    targets = torch.randint(0, 11, (6,), generator=g)
    ref = torch.tensor(ref_softmax_ce(logits, targets), dtype=D64)
    out = softmax_cross_entropy(logits, targets, reduction)
    expected = {"mean": ref.mean(), "sum": ref.sum(), "none": ref}[reduction]
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(
        softmax_cross_entropy(logits, targets), F.cross_entropy(logits, targets)
    )


# --------------------------------------------------------------------------- importance sampling


def test_importance_sampling_loop_reference_and_weights():
    g = gen(1)
    s = torch.randn(3, 9, generator=g, dtype=D64)
    lq = torch.log(torch.rand(3, 9, generator=g, dtype=D64) * 0.1 + 1e-3)
    out = importance_sampled_log_partition(s, lq)
    w = importance_weights(s, lq)
    for i in range(3):
        terms = [math.exp(float(s[i, j]) - float(lq[i, j])) for j in range(9)]
        assert out[i].item() == pytest.approx(math.log(sum(terms) / 9), rel=1e-12)
        for j in range(9):
            assert w[i, j].item() == pytest.approx(terms[j] / sum(terms), rel=1e-12)
    torch.testing.assert_close(w.sum(-1), torch.ones(3, dtype=D64))
    # a constant on log q cancels in the weights but not in log Z-hat
    torch.testing.assert_close(importance_weights(s, lq + 3.0), w)
    torch.testing.assert_close(importance_sampled_log_partition(s, lq + 3.0), out - 3.0)


def test_importance_sampling_with_the_model_as_proposal_is_exact():
    g = gen(2)
    scores = torch.randn(50, generator=g, dtype=D64) * 2
    log_z = torch.logsumexp(scores, 0)
    log_p = scores - log_z
    for m in (1, 3, 40):
        ids = torch.multinomial(log_p.exp(), m, replacement=True, generator=g)
        est = importance_sampled_log_partition(scores[ids], log_p[ids])
        torch.testing.assert_close(est, log_z)  # zero variance: every term equals Z


def test_importance_sampling_is_consistent_with_many_uniform_draws():
    g = gen(3)
    v = 1000
    scores = torch.randn(v, generator=g, dtype=D64)
    ids = torch.randint(0, v, (200_000,), generator=g)
    est = importance_sampled_log_partition(scores[ids], torch.full((1,), -math.log(v), dtype=D64))
    assert abs(est.item() - torch.logsumexp(scores, 0).item()) < 0.02


def test_effective_sample_size():
    assert effective_sample_size(torch.full((8,), 1 / 8)).item() == pytest.approx(8.0)
    assert effective_sample_size(torch.tensor([1.0, 0.0, 0.0])).item() == pytest.approx(1.0)


# --------------------------------------------------------------------------- sampled softmax


@pytest.mark.parametrize("per_row_q", [False, True])
@pytest.mark.parametrize("tau", [1.0, 0.3])
def test_sampled_softmax_from_scores_matches_loop(per_row_q, tau):
    pos, neg, pos_lq, neg_lq, mask = random_inputs(4, per_row_q=per_row_q)
    ref = torch.tensor(ref_sampled_softmax(pos, neg, pos_lq, neg_lq, mask, tau), dtype=D64)
    out = sampled_softmax_from_scores(pos, neg, pos_lq, neg_lq, mask, tau, "none")
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(
        sampled_softmax_from_scores(pos, neg, pos_lq, neg_lq, mask, tau), ref.mean()
    )
    torch.testing.assert_close(
        sampled_softmax_from_scores(pos, neg, pos_lq, neg_lq, mask, tau, "sum"), ref.sum()
    )


def embedding_problem(seed, b=6, v=30, d=4):
    g = gen(seed)
    query = torch.randn(b, d, generator=g, dtype=D64)
    weights = torch.randn(v, d, generator=g, dtype=D64)
    bias = torch.randn(v, generator=g, dtype=D64)
    positive_ids = torch.randint(0, v, (b,), generator=g)
    return query, weights, bias, positive_ids


def loop_scores(query, weights, bias, ids_row, i):
    return [
        sum(float(query[i, c]) * float(weights[y, c]) for c in range(query.shape[1]))
        + (float(bias[y]) if bias is not None else 0.0)
        for y in ids_row
    ]


@pytest.mark.parametrize("unique", [False, True])
@pytest.mark.parametrize("remove_hits", [True, False])
def test_sampled_softmax_loss_matches_loop(unique, remove_hits):
    query, weights, bias, pos_ids = embedding_problem(5)
    sampler = LogUniformSampler(30)
    draw = sampler.sample(12, unique=unique, generator=gen(5))
    pos_lq = sampler.log_expected_count(pos_ids, draw)
    tau = 0.7
    ref = []
    for i in range(query.shape[0]):
        t = int(pos_ids[i])
        o_t = loop_scores(query, weights, bias, [t], i)[0] / tau - float(pos_lq[i])
        terms = [o_t]
        s_neg = loop_scores(query, weights, bias, draw.ids.tolist(), i)
        for j, y in enumerate(draw.ids.tolist()):
            if remove_hits and y == t:
                continue
            terms.append(s_neg[j] / tau - float(draw.log_expected_count[j]))
        ref.append(math.log(sum(math.exp(v) for v in terms)) - o_t)
    out = sampled_softmax_loss(
        query,
        weights,
        bias,
        pos_ids,
        draw,
        temperature=tau,
        remove_accidental_hits=remove_hits,
        reduction="none",
    )
    torch.testing.assert_close(out, torch.tensor(ref, dtype=D64), rtol=1e-5, atol=1e-5)
    # the tuple form of the draw gives the same loss
    out2 = sampled_softmax_loss(
        query,
        weights,
        bias,
        pos_ids,
        (draw.ids, draw.log_expected_count, pos_lq),
        temperature=tau,
        remove_accidental_hits=remove_hits,
        reduction="none",
    )
    torch.testing.assert_close(out, out2)


def test_sampled_scores_and_sparse_gradient():
    query, weights, bias, pos_ids = embedding_problem(6)
    sampled = torch.tensor([3, 7, 7, 29])
    pos, neg = sampled_scores(query, weights, bias, pos_ids, sampled)
    torch.testing.assert_close(pos, (query * weights[pos_ids]).sum(-1) + bias[pos_ids])
    torch.testing.assert_close(neg, query @ weights[sampled].T + bias[sampled])
    dense_w = weights.clone().requires_grad_(True)
    sparse_w = weights.clone().requires_grad_(True)
    draw = (sampled, torch.zeros(4, dtype=D64), torch.zeros(6, dtype=D64))
    sampled_softmax_loss(query, dense_w, bias, pos_ids, draw).backward()
    sampled_softmax_loss(query, sparse_w, bias, pos_ids, draw, sparse=True).backward()
    assert sparse_w.grad.is_sparse
    torch.testing.assert_close(sparse_w.grad.to_dense(), dense_w.grad)
    untouched = sorted(set(range(30)) - set(sampled.tolist()) - set(pos_ids.tolist()))
    assert bool((dense_w.grad[untouched] == 0).all())


# --------------------------------------------------------------------------- NCE family


@pytest.mark.parametrize("per_row_q", [False, True])
@pytest.mark.parametrize("use_mask", [False, True])
def test_nce_from_scores_matches_loop(per_row_q, use_mask):
    pos, neg, pos_lq, neg_lq, mask = random_inputs(7, per_row_q=per_row_q)
    mask = mask if use_mask else None
    for tau in (1.0, 0.5):
        ref = torch.tensor(ref_nce(pos, neg, pos_lq, neg_lq, mask, tau), dtype=D64)
        torch.testing.assert_close(
            nce_from_scores(pos, neg, pos_lq, neg_lq, mask, tau, "none"), ref
        )
        torch.testing.assert_close(nce_from_scores(pos, neg, pos_lq, neg_lq, mask, tau), ref.mean())
    # no corrections = negative sampling
    ref = torch.tensor(ref_nce(pos, neg, None, None, mask, 1.0), dtype=D64)
    torch.testing.assert_close(nce_from_scores(pos, neg, mask=mask, reduction="none"), ref)


def test_nce_variants_follow_tfs_table():
    query, weights, bias, pos_ids = embedding_problem(8)
    sampler = UniformSampler(30)
    # make sure a few accidental hits are in the draw
    draw_ids = torch.cat([pos_ids[:2], torch.tensor([0, 5, 9])])
    draw_lq = torch.full((5,), math.log(5 / 30), dtype=D64)
    pos_lq = torch.full((6,), math.log(5 / 30), dtype=D64)
    draw = (draw_ids, draw_lq, pos_lq)
    pos, neg = sampled_scores(query, weights, bias, pos_ids, draw_ids)
    hits = pos_ids[:, None] == draw_ids[None, :]
    assert bool(hits.any())
    # NCE: hits kept (TF's default), log expected counts subtracted
    torch.testing.assert_close(
        nce_loss(query, weights, bias, pos_ids, draw), nce_from_scores(pos, neg, pos_lq, draw_lq)
    )
    # sampled logistic: hits removed
    torch.testing.assert_close(
        sampled_logistic_loss(query, weights, bias, pos_ids, draw),
        nce_from_scores(pos, neg, pos_lq, draw_lq, hits),
    )
    # negative sampling: no correction
    torch.testing.assert_close(
        negative_sampling_loss(query, weights, bias, pos_ids, draw), nce_from_scores(pos, neg)
    )
    # the CandidateDraw form works too
    d = sampler.sample(4, unique=True, generator=gen(0))
    assert torch.isfinite(nce_loss(query, weights, bias, pos_ids, d))


# --------------------------------------------------------------------------- gradcheck


def test_gradcheck_scores_level():
    pos, neg, pos_lq, neg_lq, mask = random_inputs(9, b=3, k=4)
    pos.requires_grad_(True)
    neg.requires_grad_(True)
    assert torch.autograd.gradcheck(
        lambda p, n: sampled_softmax_from_scores(p, n, pos_lq, neg_lq, mask, 0.8), (pos, neg)
    )
    assert torch.autograd.gradcheck(
        lambda p, n: nce_from_scores(p, n, pos_lq, neg_lq, mask, 0.8), (pos, neg)
    )
    s = torch.randn(2, 5, dtype=D64, requires_grad=True)
    lq = torch.randn(5, dtype=D64)
    assert torch.autograd.gradcheck(lambda x: importance_sampled_log_partition(x, lq), (s,))
    assert torch.autograd.gradcheck(lambda x: importance_weights(x, lq), (s,))
    logits = torch.randn(3, 6, dtype=D64, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda x: softmax_cross_entropy(x, torch.tensor([0, 5, 2])), (logits,)
    )


def test_gradcheck_embedding_level():
    query, weights, bias, pos_ids = embedding_problem(10, b=3, v=12, d=3)
    draw = LogUniformSampler(12).sample(5, unique=True, generator=gen(1))
    args = tuple(t.clone().requires_grad_(True) for t in (query, weights, bias))
    assert torch.autograd.gradcheck(
        lambda q, w, b: sampled_softmax_loss(q, w, b, pos_ids, draw, temperature=0.5), args
    )
    assert torch.autograd.gradcheck(lambda q, w, b: nce_loss(q, w, b, pos_ids, draw), args)


# --------------------------------------------------------------------------- invariants


@settings(max_examples=25, deadline=None)
@given(v=st.integers(2, 25), b=st.integers(1, 6), seed=st.integers(0, 10_000))
def test_every_class_sampled_once_without_correction_is_the_full_softmax(v, b, seed):
    query, weights, bias, pos_ids = embedding_problem(seed, b=b, v=v, d=3)
    draw = UniformSampler(v).sample(v, unique=True, generator=gen(seed))  # a permutation of V
    sampled = sampled_softmax_loss(query, weights, bias, pos_ids, draw, subtract_log_q=False)
    full = softmax_cross_entropy(query @ weights.T + bias, pos_ids)
    torch.testing.assert_close(sampled, full)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), c=st.floats(0.5, 20.0), sign=st.sampled_from([-1.0, 1.0]))
def test_constant_on_log_q_cancels_in_softmax_not_in_nce(seed, c, sign):
    pos, neg, pos_lq, neg_lq, mask = random_inputs(seed, b=4, k=6)
    shift = sign * c
    base = sampled_softmax_from_scores(pos, neg, pos_lq, neg_lq, mask, reduction="none")
    moved = sampled_softmax_from_scores(
        pos, neg, pos_lq + shift, neg_lq + shift, mask, reduction="none"
    )
    torch.testing.assert_close(base, moved)
    nce_base = nce_from_scores(pos, neg, pos_lq, neg_lq, mask, reduction="none")
    nce_moved = nce_from_scores(pos, neg, pos_lq + shift, neg_lq + shift, mask, reduction="none")
    assert bool(((nce_base - nce_moved).abs() > 1e-6).all())


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), per_row_q=st.booleans())
def test_masking_a_column_equals_deleting_it(seed, per_row_q):
    pos, neg, pos_lq, neg_lq, _ = random_inputs(seed, b=4, k=6, per_row_q=per_row_q)
    col = seed % 6
    keep = [j for j in range(6) if j != col]
    mask = torch.zeros(4, 6, dtype=torch.bool)
    mask[:, col] = True
    neg_lq_kept = neg_lq[..., keep]
    for fn in (sampled_softmax_from_scores, nce_from_scores):
        masked = fn(pos, neg, pos_lq, neg_lq, mask, reduction="none")
        deleted = fn(pos, neg[:, keep], pos_lq, neg_lq_kept, None, reduction="none")
        torch.testing.assert_close(masked, deleted)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_only_the_positive_left_gives_zero_loss_and_no_nan(dtype):
    pos = torch.tensor([2.0, -3.0, 40.0], dtype=dtype, requires_grad=True)
    neg = torch.tensor([[1.0, 5.0], [60.0, -2.0], [3.0, 3.0]], dtype=dtype, requires_grad=True)
    mask = torch.ones(3, 2, dtype=torch.bool)
    lq = torch.tensor([-1.0, -4.0], dtype=dtype)
    loss = sampled_softmax_from_scores(
        pos, neg, torch.full((3,), -2.0, dtype=dtype), lq, mask, reduction="none"
    )
    assert torch.equal(loss, torch.zeros(3, dtype=loss.dtype))
    loss.sum().backward()
    assert bool(torch.isfinite(pos.grad).all()) and bool((pos.grad == 0).all())
    assert bool((neg.grad == 0).all())
    # the embedding-level path: every sampled id is the row's own positive
    query = torch.randn(2, 3).to(dtype)
    weights = torch.randn(5, 3).to(dtype)
    draw = (torch.tensor([4, 4, 4]), torch.zeros(3, dtype=dtype), torch.zeros(2, dtype=dtype))
    out = sampled_softmax_loss(query, weights, None, torch.tensor([4, 4]), draw, reduction="none")
    assert torch.equal(out, torch.zeros(2))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_stays_finite_and_close_to_float32(dtype):
    pos, neg, pos_lq, neg_lq, mask = random_inputs(11, b=8, k=16, dtype=torch.float32)
    neg = neg * 20  # large scores: a float32-min style mask would overflow in half
    for fn in (sampled_softmax_from_scores, nce_from_scores):
        ref = fn(pos, neg, pos_lq, neg_lq, mask, 0.1, "none")
        p, n = pos.to(dtype).requires_grad_(True), neg.to(dtype).requires_grad_(True)
        out = fn(p, n, pos_lq.to(dtype), neg_lq.to(dtype), mask, 0.1, "none")
        assert bool(torch.isfinite(out).all())
        out.mean().backward()
        assert bool(torch.isfinite(p.grad.float()).all()) and bool(
            torch.isfinite(n.grad.float()).all()
        )
        torch.testing.assert_close(out, ref, rtol=0.05, atol=0.5)


def test_logistic_loss_never_sees_masked_infinities():
    pos = torch.tensor([1.0, 2.0], requires_grad=True)
    neg = torch.tensor([[math.inf, 0.5], [-math.inf, 1.0]], requires_grad=True)
    mask = torch.tensor([[True, False], [True, False]])
    out = nce_from_scores(pos, neg, mask=mask)
    out.backward()
    assert math.isfinite(out.item())
    assert bool(torch.isfinite(neg.grad).all()) and bool((neg.grad[:, 0] == 0).all())


# --------------------------------------------------------------------------- modules


@pytest.mark.parametrize(
    "cls,fn", [(SampledSoftmaxLoss, sampled_softmax_loss), (NCELoss, nce_loss)]
)
def test_modules_draw_then_call_the_functional(cls, fn):
    query, weights, bias, pos_ids = embedding_problem(12, v=50)
    counts = torch.arange(50, 0, -1).double()
    module = cls(UnigramSampler(counts), num_samples=8, temperature=0.5)
    out = module(query, weights, bias, pos_ids, generator=gen(3))
    draw = module.last_draw
    assert draw.ids.shape == (8,) and draw.unique
    torch.testing.assert_close(out, fn(query, weights, bias, pos_ids, draw, temperature=0.5))
    again = module(query, weights, bias, pos_ids, generator=gen(3))
    torch.testing.assert_close(out, again)


# --------------------------------------------------------------------------- bad input


def test_bad_inputs_scores_level():
    pos, neg, pos_lq, neg_lq, mask = random_inputs(13, b=3, k=4)
    for fn in (sampled_softmax_from_scores, nce_from_scores):
        with pytest.raises(ValueError, match="batch size"):
            fn(pos[:2], neg)
        with pytest.raises(ValueError, match="negative_scores"):
            fn(pos, neg[0])
        with pytest.raises(ValueError, match="positive_scores"):
            fn(pos[:0], neg[:0])  # empty batch
        with pytest.raises(ValueError, match="negative_log_q"):
            fn(pos, neg, pos_lq, neg_lq[:3])
        with pytest.raises(ValueError, match="negative_log_q"):
            fn(pos, neg, pos_lq, torch.full((4,), float("nan"), dtype=D64))
        with pytest.raises(ValueError, match="positive_log_q"):
            fn(pos, neg, torch.full((3,), math.inf, dtype=D64), neg_lq)
        with pytest.raises(ValueError, match="positive_log_q"):
            fn(pos, neg, pos_lq[:2], neg_lq)
        with pytest.raises(ValueError, match="mask"):
            fn(pos, neg, pos_lq, neg_lq, mask.long())
        with pytest.raises(ValueError, match="mask"):
            fn(pos, neg, pos_lq, neg_lq, mask[:, :2])
        with pytest.raises(ValueError, match="temperature"):
            fn(pos, neg, pos_lq, neg_lq, mask, temperature=0.0)
        with pytest.raises(ValueError, match="reduction"):
            fn(pos, neg, pos_lq, neg_lq, mask, reduction="avg")
    with pytest.raises(ValueError, match="targets"):
        softmax_cross_entropy(torch.randn(2, 3), torch.tensor([0, 3]))
    with pytest.raises(ValueError, match="batch size"):
        softmax_cross_entropy(torch.randn(2, 3), torch.tensor([0]))
    with pytest.raises(ValueError, match="logits"):
        softmax_cross_entropy(torch.randn(0, 3), torch.tensor([], dtype=torch.long))
    with pytest.raises(ValueError, match="log_q"):
        importance_sampled_log_partition(torch.randn(2, 3), torch.randn(4))
    with pytest.raises(ValueError, match="log_q"):
        importance_weights(torch.randn(3), torch.tensor([0.0, float("nan"), 0.0]))
    with pytest.raises(ValueError, match="scores"):
        importance_weights(torch.randn(2, 0), torch.randn(1))
    with pytest.raises(ValueError, match="weights"):
        effective_sample_size(torch.tensor([1, 0]))


def test_bad_inputs_embedding_level():
    query, weights, bias, pos_ids = embedding_problem(14, b=3, v=10, d=4)
    good = (torch.tensor([1, 2]), torch.zeros(2, dtype=D64), torch.zeros(3, dtype=D64))
    for fn in (sampled_softmax_loss, nce_loss, sampled_logistic_loss, negative_sampling_loss):
        with pytest.raises(ValueError, match="positive_ids"):
            fn(query, weights, bias, torch.tensor([0, 1, 10]), good)
        with pytest.raises(ValueError, match="sampled_ids"):
            fn(query, weights, bias, pos_ids, (torch.tensor([1, 10]),) + good[1:])
        with pytest.raises(ValueError, match="embedding dimension"):
            fn(query[:, :3], weights, bias, pos_ids, good)
        with pytest.raises(ValueError, match="batch size"):
            fn(query[:2], weights, bias, pos_ids, good)
        with pytest.raises(ValueError, match="class_bias"):
            fn(query, weights, bias[:5], pos_ids, good)
        with pytest.raises(ValueError, match="draw"):
            fn(query, weights, bias, pos_ids, good[:2])
        with pytest.raises(ValueError, match="sampled_log_q"):
            fn(query, weights, bias, pos_ids, (good[0], torch.zeros(3, dtype=D64), good[2]))
        with pytest.raises(ValueError, match="positive_ids"):
            fn(query[:0], weights, bias, pos_ids[:0], (good[0], good[1], good[2][:0]))
    # a true id that the proposal cannot draw has log Q = -inf: refused, not NaN
    sampler = UniformSampler(10, exclude=[0])
    draw = sampler.sample(3, generator=gen(0))
    with pytest.raises(ValueError, match="positive_log_q"):
        sampled_softmax_loss(query, weights, bias, torch.tensor([0, 1, 2]), draw)
    with pytest.raises(ValueError, match="num_samples"):
        SampledSoftmaxLoss(sampler, num_samples=0)
    with pytest.raises(ValueError, match="num_samples"):
        NCELoss(sampler, num_samples=10, unique=True)
    with pytest.raises(ValueError, match="sampler"):
        NCELoss("uniform", num_samples=3)
