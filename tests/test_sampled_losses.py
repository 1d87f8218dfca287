"""Tests of the sampled losses: loop references in float64, gradcheck, invariants, bad input.

Inputs are dicts named after the losses' parameters, so a test calls
``sampled_softmax_from_scores(**scores)`` or
``via_sets(sampled_softmax_loss, **problem, draw=draw)``.
The loop references implement TensorFlow's semantics (``_compute_sampled_logits``,
``sampled_softmax_loss``, ``nce_loss``), including ``num_true = T > 1``: each of the ``T``
true columns is labelled ``1/T``, a sampled id equal to *any* true id of its row is an
accidental hit.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import candidate_sampling
from candidate_sampling.losses import (
    NCELoss,
    SampledSoftmaxLoss,
    accidental_hits,
    candidate_logits,
    effective_sample_size,
    importance_sampled_log_partition,
    importance_weights,
    nce_from_scores,
    nce_loss,
    negative_sampling_loss,
    sampled_logistic_loss,
    sampled_softmax_from_scores,
    sampled_softmax_loss,
    softmax_cross_entropy,
)
from candidate_sampling import CandidateSet
from candidate_sampling import losses as L
from candidate_sampling.losses import score, score_positives
from candidate_sampling.sampling.samplers import LogUniformSampler, UniformSampler, UnigramSampler

D64 = torch.float64


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# --------------------------------------------------------------------------- inputs


def make_scores(seed, *, batch_size=5, num_samples=7, num_true=None, per_row_q=False, dtype=D64):
    """Keyword arguments of the ``*_from_scores`` losses: (B,) or (B, T) positives, (B, k)
    negatives, their log expected counts ((k,) or (B, k) for the negatives), a hit mask."""
    g = gen(seed)
    pos_shape = (batch_size,) if num_true is None else (batch_size, num_true)
    neg_q_shape = (batch_size, num_samples) if per_row_q else (num_samples,)
    return {
        "positive_scores": torch.randn(*pos_shape, generator=g, dtype=dtype) * 3,
        "negative_scores": torch.randn(batch_size, num_samples, generator=g, dtype=dtype) * 3,
        "positive_log_q": torch.randn(*pos_shape, generator=g, dtype=dtype) - 2,
        "negative_log_q": torch.randn(*neg_q_shape, generator=g, dtype=dtype) - 2,
        "mask": torch.rand(batch_size, num_samples, generator=g) < 0.3,
    }


def make_problem(seed, *, batch_size=6, num_classes=30, dim=4, num_true=None):
    """Keyword arguments of the embedding-level losses, less the draw: ``query`` (B, d), a
    class table ``classes`` (|V|, d), ``class_bias`` (|V|,) and ``positive_ids`` (B,) or
    (B, T) (distinct ids within a row)."""
    g = gen(seed)
    query = torch.randn(batch_size, dim, generator=g, dtype=D64)
    classes = torch.randn(num_classes, dim, generator=g, dtype=D64)
    class_bias = torch.randn(num_classes, generator=g, dtype=D64)
    if num_true is None:
        positive_ids = torch.randint(0, num_classes, (batch_size,), generator=g)
    else:
        order = torch.rand(batch_size, num_classes, generator=g).argsort(dim=1)
        positive_ids = order[:, :num_true]
    return {
        "query": query,
        "classes": classes,
        "class_bias": class_bias,
        "positive_ids": positive_ids,
    }


def sets_of(classes, positive_ids, draw, class_bias=None, subtract_log_q=True, sparse=False):
    """The two CandidateSets of a sampled loss: each row's positive(s) and the draw.

    ``draw``: a CandidateDraw (made with ``positive_ids``) or a tuple
    ``(sampled_ids, sampled_log_q, positive_log_q)``."""
    options = {"class_bias": class_bias, "sparse": sparse}
    if isinstance(draw, tuple):
        ids, sampled_lq, pos_lq = draw
        if not subtract_log_q:
            sampled_lq = pos_lq = None
        flat = None if pos_lq is None else pos_lq.reshape(-1)
        positives = CandidateSet.from_ids(positive_ids.reshape(-1), classes, log_q=flat, **options)
        return positives, CandidateSet.from_ids(ids, classes, log_q=sampled_lq, **options)
    positives = CandidateSet.positives_of(
        positive_ids, classes, draw=draw, correct=subtract_log_q, **options
    )
    return positives, CandidateSet.from_draw(draw, classes, correct=subtract_log_q, **options)


def via_sets(fn, *, query, classes, positive_ids, draw, class_bias=None,
             subtract_log_q=True, sparse=False, **options):
    """``fn(query, positives, candidates)`` with the sets of :func:`sets_of`."""
    positives, candidates = sets_of(classes, positive_ids, draw, class_bias, subtract_log_q, sparse)
    return fn(query, positives, candidates, **options)


def without(inputs, *names):
    return {k: v for k, v in inputs.items() if k not in names}


# --------------------------------------------------------------------------- loop references


def ref_softmax_ce(logits, positive_ids) -> list[float]:
    out = []
    for i in range(logits.shape[0]):
        row = [float(v) for v in logits[i]]
        m = max(row)
        lse = m + math.log(sum(math.exp(v - m) for v in row))
        out.append(lse - row[int(positive_ids[i])])
    return out


def logsumexp(values: list[float]) -> float:
    m = max(values)
    return m + math.log(sum(math.exp(v - m) for v in values))


def sigmoid_ce(x: float, z: float) -> float:
    """TF's ``sigmoid_cross_entropy_with_logits`` for one logit ``x`` and label ``z``."""
    return max(x, 0.0) - x * z + math.log1p(math.exp(-abs(x)))


def corrected(s, lq, tau):
    return float(s) / tau - (float(lq) if lq is not None else 0.0)


def row_values(t, i) -> list:
    """Row i of a (B,) or (B, T) tensor as a list of T entries (None if t is None)."""
    if t is None:
        return None
    return [t[i]] if t.dim() == 1 else list(t[i])


def neg_log_q(neg_lq, i, j):
    if neg_lq is None:
        return None
    return neg_lq[j] if neg_lq.dim() == 1 else neg_lq[i, j]


def sampled_logits(pos, neg, pos_lq, neg_lq, mask, tau, i):
    """Row i's corrected true logits and the kept sampled logits."""
    lqs = row_values(pos_lq, i) or [None] * len(row_values(pos, i))
    true = [corrected(s, lq, tau) for s, lq in zip(row_values(pos, i), lqs)]
    sampled = [
        corrected(neg[i, j], neg_log_q(neg_lq, i, j), tau)
        for j in range(neg.shape[1])
        if mask is None or not bool(mask[i, j])
    ]
    return true, sampled


def ref_sampled_softmax(pos, neg, pos_lq, neg_lq, mask, tau) -> list[float]:
    """TF: softmax cross-entropy over [true, sampled] with labels 1/T on the true columns."""
    out = []
    for i in range(neg.shape[0]):
        true, sampled = sampled_logits(pos, neg, pos_lq, neg_lq, mask, tau, i)
        out.append(logsumexp(true + sampled) - sum(true) / len(true))
    return out


def ref_nce(pos, neg, pos_lq, neg_lq, mask, tau) -> list[float]:
    """TF: per-row sum of sigmoid cross-entropies, label 1/T on true columns, 0 on sampled."""
    out = []
    for i in range(neg.shape[0]):
        true, sampled = sampled_logits(pos, neg, pos_lq, neg_lq, mask, tau, i)
        out.append(
            sum(sigmoid_ce(o, 1.0 / len(true)) for o in true)
            + sum(sigmoid_ce(o, 0.0) for o in sampled)
        )
    return out


def ref_from_scores(fn, scores, tau):
    ref = ref_sampled_softmax if fn is sampled_softmax_from_scores else ref_nce
    return torch.tensor(
        ref(
            scores["positive_scores"],
            scores["negative_scores"],
            scores.get("positive_log_q"),
            scores.get("negative_log_q"),
            scores.get("mask"),
            tau,
        ),
        dtype=D64,
    )


def loop_score(problem, i, y) -> float:
    q, w = problem["query"], problem["classes"]
    bias = problem.get("class_bias")
    s = sum(float(q[i, c]) * float(w[y, c]) for c in range(q.shape[1]))
    return s + (float(bias[y]) if bias is not None else 0.0)


def ref_embedding_loss(kind, problem, draw, tau, remove_hits, subtract_log_q=True):
    """TF's ``_compute_sampled_logits`` then the softmax or logistic loss, by loops.

    ``draw`` = (sampled_ids, sampled_log_q, positive_log_q). Accidental hit: a sampled id
    equal to any of the row's true ids.
    """
    sampled_ids, sampled_lq, pos_lq = draw
    pos_ids = problem["positive_ids"]
    out = []
    for i in range(pos_ids.shape[0]):
        true_ids = [int(y) for y in row_values(pos_ids, i)]
        lqs = row_values(pos_lq, i) if subtract_log_q else [None] * len(true_ids)
        true = [corrected(loop_score(problem, i, y), lq, tau) for y, lq in zip(true_ids, lqs)]
        sampled = []
        for j, y in enumerate(sampled_ids.tolist()):
            if remove_hits and y in true_ids:
                continue
            lq = sampled_lq[j] if subtract_log_q else None
            sampled.append(corrected(loop_score(problem, i, y), lq, tau))
        if kind == "softmax":
            out.append(logsumexp(true + sampled) - sum(true) / len(true))
        else:
            out.append(
                sum(sigmoid_ce(o, 1.0 / len(true)) for o in true)
                + sum(sigmoid_ce(o, 0.0) for o in sampled)
            )
    return torch.tensor(out, dtype=D64)


def as_tuple(draw):
    return (draw.ids, draw.log_q, draw.positive_log_q)


# --------------------------------------------------------------------------- full softmax


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_softmax_cross_entropy_matches_loop(reduction):
    g = gen(0)
    logits = torch.randn(6, 11, generator=g, dtype=D64) * 4
    positive_ids = torch.randint(0, 11, (6,), generator=g)
    ref = torch.tensor(ref_softmax_ce(logits, positive_ids), dtype=D64)
    out = softmax_cross_entropy(logits, positive_ids, reduction=reduction)
    expected = {"mean": ref.mean(), "sum": ref.sum(), "none": ref}[reduction]
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(
        softmax_cross_entropy(logits, positive_ids), F.cross_entropy(logits, positive_ids)
    )


# --------------------------------------------------------------------------- importance sampling


def test_importance_sampling_loop_reference_and_weights():
    g = gen(1)
    s = torch.randn(3, 9, generator=g, dtype=D64)
    log_proposal = torch.log(torch.rand(3, 9, generator=g, dtype=D64) * 0.1 + 1e-3)
    out = importance_sampled_log_partition(s, log_proposal)
    w = importance_weights(s, log_proposal)
    for i in range(3):
        terms = [math.exp(float(s[i, j]) - float(log_proposal[i, j])) for j in range(9)]
        assert out[i].item() == pytest.approx(math.log(sum(terms) / 9), rel=1e-12)
        for j in range(9):
            assert w[i, j].item() == pytest.approx(terms[j] / sum(terms), rel=1e-12)
    torch.testing.assert_close(w.sum(-1), torch.ones(3, dtype=D64))
    # a constant on log q cancels in the weights but not in log Z-hat
    torch.testing.assert_close(importance_weights(s, log_proposal + 3.0), w)
    torch.testing.assert_close(importance_sampled_log_partition(s, log_proposal + 3.0), out - 3.0)


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


def test_effective_sample_size_is_scale_free_and_refuses_all_zero_weights():
    # raw importance ratios, as a careless caller passes them: the normalised weights' ESS
    raw = torch.tensor([[2.0, 2.0], [3.0, 1.0]], dtype=torch.float64)
    normalised = raw / raw.sum(-1, keepdim=True)
    assert torch.allclose(effective_sample_size(raw), effective_sample_size(normalised))
    assert effective_sample_size(raw).tolist() == pytest.approx([2.0, 1.6])
    with pytest.raises(ValueError, match="weights must not all be zero"):
        effective_sample_size(torch.tensor([[0.5, 0.5], [0.0, 0.0]]))


@pytest.mark.parametrize("fn", [importance_sampled_log_partition, importance_weights])
def test_importance_sampling_never_enlarges_scores(fn):
    # log_proposal broadcasts *to* scores (one q shared by the rows), never beyond them
    assert fn(torch.zeros(2, 3), torch.zeros(3)).shape[0] == 2
    with pytest.raises(ValueError, match=r"log_proposal must broadcast to scores' shape \(3,\)"):
        fn(torch.zeros(3), torch.zeros(2, 3))
    with pytest.raises(ValueError, match=r"log_proposal must broadcast to scores' shape \(2, 1\)"):
        fn(torch.zeros(2, 1), torch.zeros(2, 3))


@pytest.mark.parametrize("scale", [1e-30, 1e30])
def test_effective_sample_size_is_finite_for_tiny_and_huge_float32_weights(scale):
    # raw importance ratios far from 1: squaring them under- or overflows float32
    weights = torch.tensor([[1.0, 1.0, 2.0]]) * scale
    assert effective_sample_size(weights).item() == pytest.approx(16 / 6)


def test_effective_sample_size_refuses_negative_weights():
    with pytest.raises(ValueError, match=r"weights must be >= 0, got minimum -1\.0"):
        effective_sample_size(torch.tensor([2.0, -1.0]))
    with pytest.raises(ValueError, match=r"weights must be >= 0, got minimum nan"):
        effective_sample_size(torch.tensor([0.5, float("nan")]))
    with candidate_sampling.validate_args(False):  # a value check: off with the switch
        assert effective_sample_size(torch.tensor([2.0, -1.0])).item() == pytest.approx(0.2)


# --------------------------------------------------------------------------- sampled softmax


@pytest.mark.parametrize("num_true", [None, 1, 3])
@pytest.mark.parametrize("per_row_q", [False, True])
@pytest.mark.parametrize("tau", [1.0, 0.3])
def test_sampled_softmax_from_scores_matches_loop(num_true, per_row_q, tau):
    scores = make_scores(4, num_true=num_true, per_row_q=per_row_q)
    ref = ref_from_scores(sampled_softmax_from_scores, scores, tau)
    out = sampled_softmax_from_scores(**scores, temperature=tau, reduction="none")
    assert out.shape == (5,) and out.dtype == D64
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(sampled_softmax_from_scores(**scores, temperature=tau), ref.mean())
    torch.testing.assert_close(
        sampled_softmax_from_scores(**scores, temperature=tau, reduction="sum"), ref.sum()
    )


@pytest.mark.parametrize("unique", [False, True])
@pytest.mark.parametrize("remove_hits", [True, False])
def test_sampled_softmax_loss_matches_loop(unique, remove_hits):
    problem = make_problem(5)
    sampler = LogUniformSampler(30)
    draw = sampler.sample(12, unique=unique, generator=gen(5), positive_ids=problem["positive_ids"])
    torch.testing.assert_close(draw.positive_log_q, sampler.log_q(problem["positive_ids"], draw))
    tau = 0.7
    ref = ref_embedding_loss("softmax", problem, as_tuple(draw), tau, remove_hits)
    options = {"temperature": tau, "remove_accidental_hits": remove_hits, "reduction": "none"}
    out = via_sets(sampled_softmax_loss, **problem, draw=draw, **options)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    # the tuple form of the draw gives the same loss
    via_tuple = via_sets(sampled_softmax_loss, **problem, draw=as_tuple(draw), **options)
    torch.testing.assert_close(out, via_tuple)


def test_scores_of_the_sets_and_sparse_gradient():
    problem = make_problem(6)
    query, classes, bias, pos_ids = (
        problem[k] for k in ("query", "classes", "class_bias", "positive_ids")
    )
    sampled = torch.tensor([3, 7, 7, 29])
    positives = CandidateSet.from_ids(pos_ids, classes, class_bias=bias)
    candidates = CandidateSet.from_ids(sampled, classes, class_bias=bias)
    pos, neg = score_positives(query, positives), score(query, candidates)
    torch.testing.assert_close(pos[:, 0], (query * classes[pos_ids]).sum(-1) + bias[pos_ids])
    torch.testing.assert_close(neg, query @ classes[sampled].T + bias[sampled])
    dense_w = classes.clone().requires_grad_(True)
    sparse_w = classes.clone().requires_grad_(True)
    draw = (sampled, torch.zeros(4, dtype=D64), torch.zeros(6, dtype=D64))
    via_sets(sampled_softmax_loss, query=query, classes=dense_w, positive_ids=pos_ids,
             draw=draw, class_bias=bias).backward()
    via_sets(sampled_softmax_loss, query=query, classes=sparse_w, positive_ids=pos_ids,
             draw=draw, class_bias=bias, sparse=True).backward()
    assert sparse_w.grad.is_sparse
    torch.testing.assert_close(sparse_w.grad.to_dense(), dense_w.grad)
    untouched = sorted(set(range(30)) - set(sampled.tolist()) - set(pos_ids.tolist()))
    assert bool((dense_w.grad[untouched] == 0).all())


# --------------------------------------------------------------------------- num_true > 1


def test_draw_with_multi_positive_ids_gives_their_log_q():
    sampler = UnigramSampler(torch.arange(20, 0, -1).double())
    positive_ids = torch.tensor([[1, 5, 19], [0, 2, 3]])
    for unique in (False, True):
        draw = sampler.sample(6, unique=unique, generator=gen(1), positive_ids=positive_ids)
        assert draw.positive_log_q.shape == (2, 3)
        assert draw.positive_log_q.dtype == torch.float32
        p = sampler.probs.double()[positive_ids]
        want = (1 - (1 - p) ** draw.num_tries if unique else draw.num_samples * p).log()
        torch.testing.assert_close(draw.positive_log_q.double(), want, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(draw.positive_log_q, sampler.log_q(positive_ids, draw))


@pytest.mark.parametrize("kind", ["softmax", "nce"])
@pytest.mark.parametrize("remove_hits", [True, False])
@pytest.mark.parametrize("subtract_log_q", [True, False])
@pytest.mark.parametrize("tau", [1.0, 0.4])
def test_multi_positive_losses_match_tf_semantics(kind, remove_hits, subtract_log_q, tau):
    """TF's num_true = 3: positive_ids (B, 3), labels 1/3, hits against any true id."""
    problem = make_problem(20, batch_size=5, num_classes=12, num_true=3)
    sampler = UnigramSampler(torch.arange(12, 0, -1).double() ** 2)
    draw = sampler.sample(8, unique=True, generator=gen(2), positive_ids=problem["positive_ids"])
    assert draw.positive_log_q.shape == (5, 3)
    hits = (problem["positive_ids"][:, :, None] == draw.ids[None, None, :]).any(1)
    assert bool(hits.any()) and bool((hits.sum(1) < 8).all())  # hits, never all sampled ids
    # hits on a true id other than the row's first: TF masks those too
    assert bool((problem["positive_ids"][:, 1:, None] == draw.ids).any())
    fn = sampled_softmax_loss if kind == "softmax" else nce_loss
    out = via_sets(
        fn,
        **problem,
        draw=draw,
        temperature=tau,
        remove_accidental_hits=remove_hits,
        subtract_log_q=subtract_log_q,
        reduction="none",
    )
    ref = ref_embedding_loss(kind, problem, as_tuple(draw), tau, remove_hits, subtract_log_q)
    assert out.shape == (5,)
    torch.testing.assert_close(out, ref, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("fn", [sampled_softmax_from_scores, nce_from_scores])
@pytest.mark.parametrize("num_true", [1, 4])
def test_multi_positive_scores_match_loop(fn, num_true):
    scores = make_scores(21, num_true=num_true, per_row_q=True)
    for tau in (1.0, 0.25):
        out = fn(**scores, temperature=tau, reduction="none")
        torch.testing.assert_close(out, ref_from_scores(fn, scores, tau))


@pytest.mark.parametrize("fn", [sampled_softmax_from_scores, nce_from_scores])
def test_one_true_column_as_b_by_1_equals_the_b_vector(fn):
    scores = make_scores(22)
    as_matrix = dict(
        scores,
        positive_scores=scores["positive_scores"][:, None],
        positive_log_q=scores["positive_log_q"][:, None],
    )
    torch.testing.assert_close(
        fn(**as_matrix, reduction="none"), fn(**scores, reduction="none"), rtol=1e-12, atol=1e-12
    )


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000), num_true=st.integers(2, 4))
def test_order_of_the_true_columns_does_not_matter(seed, num_true):
    scores = make_scores(seed, batch_size=3, num_samples=4, num_true=num_true)
    perm = torch.randperm(num_true, generator=gen(seed))
    permuted = dict(
        scores,
        positive_scores=scores["positive_scores"][:, perm],
        positive_log_q=scores["positive_log_q"][:, perm],
    )
    for fn in (sampled_softmax_from_scores, nce_from_scores):
        torch.testing.assert_close(fn(**permuted, reduction="none"), fn(**scores, reduction="none"))


@pytest.mark.parametrize("cls", [SampledSoftmaxLoss, NCELoss])
def test_modules_accept_multi_positive_ids(cls):
    problem = make_problem(23, num_classes=40, num_true=2)
    module = cls(LogUniformSampler(40), num_samples=10, temperature=0.5)
    out = module(**problem, generator=gen(4))
    assert module.last_draw.positive_log_q.shape == (6, 2)
    fn = sampled_softmax_loss if cls is SampledSoftmaxLoss else nce_loss
    torch.testing.assert_close(out, via_sets(fn, **problem, draw=module.last_draw, temperature=0.5))


# --------------------------------------------------------------------------- item encoders


def encoders(num_classes=30, dim=4):
    """An embedding table and a small MLP over one, both id → (n, d) in float64."""
    torch.manual_seed(0)
    embedding = nn.Embedding(num_classes, dim, dtype=D64)
    mlp = nn.Sequential(
        nn.Embedding(num_classes, 5, dtype=D64), nn.Linear(5, dim, dtype=D64), nn.Tanh()
    )
    return {"embedding": embedding, "mlp": mlp}


@pytest.mark.parametrize("encoder_name", ["embedding", "mlp"])
@pytest.mark.parametrize(
    "fn", [sampled_softmax_loss, nce_loss, negative_sampling_loss, sampled_logistic_loss]
)
@pytest.mark.parametrize("num_true", [None, 2])
def test_item_encoder_equals_the_table_path(encoder_name, fn, num_true):
    encoder = encoders()[encoder_name]
    problem = without(make_problem(24, num_true=num_true), "classes")
    draw = UniformSampler(30).sample(
        9, unique=True, generator=gen(5), positive_ids=problem["positive_ids"]
    )
    query = problem["query"].clone().requires_grad_(True)
    with_encoder = via_sets(
        fn, **dict(problem, query=query), classes=encoder, draw=draw, temperature=0.6
    )
    (grad_encoder,) = torch.autograd.grad(with_encoder, query)
    table = encoder(torch.arange(30)).detach()  # every item encoded: the class table
    with_table = via_sets(
        fn, **dict(problem, query=query), classes=table, draw=draw, temperature=0.6
    )
    (grad_table,) = torch.autograd.grad(with_table, query)
    torch.testing.assert_close(with_encoder, with_table, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(grad_encoder, grad_table, rtol=1e-12, atol=1e-12)


def test_item_encoder_gets_gradients_only_for_the_ids_it_encoded():
    encoder = encoders()["embedding"]
    problem = without(make_problem(25), "classes", "class_bias")
    draw = UniformSampler(30).sample(5, generator=gen(6), positive_ids=problem["positive_ids"])
    via_sets(sampled_softmax_loss, **problem, classes=encoder, draw=draw).backward()
    used = set(problem["positive_ids"].tolist()) | set(draw.ids.tolist())
    unused = sorted(set(range(30)) - used)
    assert bool((encoder.weight.grad[unused] == 0).all())
    assert bool((encoder.weight.grad[sorted(used)].abs().sum(1) > 0).all())


@pytest.mark.parametrize("cls", [SampledSoftmaxLoss, NCELoss])
def test_module_forward_with_an_item_encoder(cls):
    encoder = encoders()["mlp"]
    problem = without(make_problem(26), "classes")
    module = cls(UnigramSampler(torch.arange(30, 0, -1).double()), num_samples=7, temperature=0.5)
    out = module(**problem, classes=encoder, generator=gen(7))
    fn = sampled_softmax_loss if cls is SampledSoftmaxLoss else nce_loss
    table = encoder(torch.arange(30))
    torch.testing.assert_close(
        out, via_sets(fn, **problem, classes=table, draw=module.last_draw, temperature=0.5)
    )
    ref_kind = "softmax" if cls is SampledSoftmaxLoss else "nce"
    remove_hits = cls is SampledSoftmaxLoss  # TF's defaults
    ref = ref_embedding_loss(
        ref_kind,
        dict(problem, classes=table.detach()),
        as_tuple(module.last_draw),
        0.5,
        remove_hits,
    )
    torch.testing.assert_close(out.detach(), ref.mean(), rtol=1e-6, atol=1e-6)
    out.backward()  # gradients reach the encoder's parameters
    assert all(p.grad is not None and bool(p.grad.abs().sum() > 0) for p in encoder.parameters())


# --------------------------------------------------------------------------- NCE family


@pytest.mark.parametrize("per_row_q", [False, True])
@pytest.mark.parametrize("use_mask", [False, True])
def test_nce_from_scores_matches_loop(per_row_q, use_mask):
    scores = make_scores(7, per_row_q=per_row_q)
    if not use_mask:
        scores["mask"] = None
    for tau in (1.0, 0.5):
        ref = ref_from_scores(nce_from_scores, scores, tau)
        torch.testing.assert_close(
            nce_from_scores(**scores, temperature=tau, reduction="none"), ref
        )
        torch.testing.assert_close(nce_from_scores(**scores, temperature=tau), ref.mean())
    # no corrections = negative sampling
    plain = without(scores, "positive_log_q", "negative_log_q")
    torch.testing.assert_close(
        nce_from_scores(**plain, reduction="none"), ref_from_scores(nce_from_scores, plain, 1.0)
    )


def test_nce_variants_follow_tfs_table():
    problem = make_problem(8)
    pos_ids = problem["positive_ids"]
    # make sure a few accidental hits are in the draw
    draw_ids = torch.cat([pos_ids[:2], torch.tensor([0, 5, 9])])
    draw_lq = torch.full((5,), math.log(5 / 30), dtype=D64)
    pos_lq = torch.full((6,), math.log(5 / 30), dtype=D64)
    draw = (draw_ids, draw_lq, pos_lq)
    pos = score_positives(
        problem["query"],
        CandidateSet.from_ids(pos_ids, problem["classes"], class_bias=problem["class_bias"]),
    )[:, 0]
    neg = score(
        problem["query"],
        CandidateSet.from_ids(draw_ids, problem["classes"], class_bias=problem["class_bias"]),
    )
    hits = pos_ids[:, None] == draw_ids[None, :]
    assert bool(hits.any())
    corrections = {"positive_log_q": pos_lq, "negative_log_q": draw_lq}
    # NCE: hits kept (TF's default), log expected counts subtracted
    torch.testing.assert_close(
        via_sets(nce_loss, **problem, draw=draw), nce_from_scores(pos, neg, **corrections)
    )
    # sampled logistic: hits removed
    torch.testing.assert_close(
        via_sets(sampled_logistic_loss, **problem, draw=draw),
        nce_from_scores(pos, neg, **corrections, mask=hits),
    )
    # negative sampling: no correction
    torch.testing.assert_close(
        via_sets(negative_sampling_loss, **problem, draw=draw), nce_from_scores(pos, neg)
    )
    # the CandidateDraw form works too
    d = UniformSampler(30).sample(4, unique=True, generator=gen(0), positive_ids=pos_ids)
    assert torch.isfinite(via_sets(nce_loss, **problem, draw=d))


# --------------------------------------------------------------------------- gradcheck


def test_gradcheck_scores_level():
    for num_true in (None, 2):
        scores = make_scores(9, batch_size=3, num_samples=4, num_true=num_true)
        pos = scores["positive_scores"].requires_grad_(True)
        neg = scores["negative_scores"].requires_grad_(True)
        rest = without(scores, "positive_scores", "negative_scores")
        for fn in (sampled_softmax_from_scores, nce_from_scores):
            assert torch.autograd.gradcheck(
                lambda p, n, fn=fn, rest=rest: fn(p, n, **rest, temperature=0.8), (pos, neg)
            )
    s = torch.randn(2, 5, dtype=D64, requires_grad=True)
    log_proposal = torch.randn(5, dtype=D64)
    assert torch.autograd.gradcheck(
        lambda x: importance_sampled_log_partition(x, log_proposal), (s,)
    )
    assert torch.autograd.gradcheck(lambda x: importance_weights(x, log_proposal), (s,))
    logits = torch.randn(3, 6, dtype=D64, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda x: softmax_cross_entropy(x, torch.tensor([0, 5, 2])), (logits,)
    )


@pytest.mark.parametrize("num_true", [None, 2])
def test_gradcheck_embedding_level(num_true):
    problem = make_problem(10, batch_size=3, num_classes=12, dim=3, num_true=num_true)
    pos_ids = problem["positive_ids"]
    draw = LogUniformSampler(12).sample(5, unique=True, generator=gen(1), positive_ids=pos_ids)
    args = tuple(
        problem[k].clone().requires_grad_(True) for k in ("query", "classes", "class_bias")
    )
    for fn in (sampled_softmax_loss, nce_loss):
        assert torch.autograd.gradcheck(
            lambda q, w, b, fn=fn: via_sets(
                fn, query=q, classes=w, positive_ids=pos_ids, draw=draw, class_bias=b,
                temperature=0.5,
            ),
            args,
        )


# --------------------------------------------------------------------------- invariants


@settings(max_examples=25, deadline=None)
@given(v=st.integers(2, 25), b=st.integers(1, 6), seed=st.integers(0, 10_000))
def test_every_class_sampled_once_without_correction_is_the_full_softmax(v, b, seed):
    problem = make_problem(seed, batch_size=b, num_classes=v, dim=3)
    draw = UniformSampler(v).sample(v, unique=True, generator=gen(seed))  # a permutation of V
    sampled = via_sets(sampled_softmax_loss, **problem, draw=draw, subtract_log_q=False)
    logits = problem["query"] @ problem["classes"].T + problem["class_bias"]
    full = softmax_cross_entropy(logits, problem["positive_ids"])
    torch.testing.assert_close(sampled, full)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), c=st.floats(0.5, 20.0), sign=st.sampled_from([-1.0, 1.0]))
def test_constant_on_log_q_cancels_in_softmax_not_in_nce(seed, c, sign):
    scores = make_scores(seed, batch_size=4, num_samples=6)
    shift = sign * c
    moved = dict(
        scores,
        positive_log_q=scores["positive_log_q"] + shift,
        negative_log_q=scores["negative_log_q"] + shift,
    )
    base = sampled_softmax_from_scores(**scores, reduction="none")
    torch.testing.assert_close(base, sampled_softmax_from_scores(**moved, reduction="none"))
    nce_base = nce_from_scores(**scores, reduction="none")
    nce_moved = nce_from_scores(**moved, reduction="none")
    assert bool(((nce_base - nce_moved).abs() > 1e-6).all())


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), per_row_q=st.booleans(), num_true=st.sampled_from([None, 2]))
def test_masking_a_column_equals_deleting_it(seed, per_row_q, num_true):
    scores = make_scores(seed, batch_size=4, num_samples=6, per_row_q=per_row_q, num_true=num_true)
    col = seed % 6
    keep = [j for j in range(6) if j != col]
    mask = torch.zeros(4, 6, dtype=torch.bool)
    mask[:, col] = True
    deleted = dict(
        scores,
        negative_scores=scores["negative_scores"][:, keep],
        negative_log_q=scores["negative_log_q"][..., keep],
        mask=None,
    )
    for fn in (sampled_softmax_from_scores, nce_from_scores):
        masked = fn(**dict(scores, mask=mask), reduction="none")
        torch.testing.assert_close(masked, fn(**deleted, reduction="none"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_only_the_positive_left_gives_zero_loss_and_no_nan(dtype):
    pos = torch.tensor([2.0, -3.0, 40.0], dtype=dtype, requires_grad=True)
    neg = torch.tensor([[1.0, 5.0], [60.0, -2.0], [3.0, 3.0]], dtype=dtype, requires_grad=True)
    mask = torch.ones(3, 2, dtype=torch.bool)
    loss = sampled_softmax_from_scores(
        pos,
        neg,
        positive_log_q=torch.full((3,), -2.0, dtype=dtype),
        negative_log_q=torch.tensor([-1.0, -4.0], dtype=dtype),
        mask=mask,
        reduction="none",
    )
    assert torch.equal(loss, torch.zeros(3, dtype=loss.dtype))
    loss.sum().backward()
    assert bool(torch.isfinite(pos.grad).all()) and bool((pos.grad == 0).all())
    assert bool((neg.grad == 0).all())
    # the embedding-level path: every sampled id is the row's own positive
    query = torch.randn(2, 3).to(dtype)
    classes = torch.randn(5, 3).to(dtype)
    draw = (torch.tensor([4, 4, 4]), torch.zeros(3, dtype=dtype), torch.zeros(2, dtype=dtype))
    out = via_sets(
        sampled_softmax_loss, query=query, classes=classes, positive_ids=torch.tensor([4, 4]),
        draw=draw, reduction="none",
    )
    assert torch.equal(out, torch.zeros(2))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_stays_finite_and_close_to_float32(dtype):
    scores = make_scores(11, batch_size=8, num_samples=16, dtype=torch.float32)
    scores["negative_scores"] = scores["negative_scores"] * 20  # large: a float32-min mask
    # would overflow in half
    for fn in (sampled_softmax_from_scores, nce_from_scores):
        ref = fn(**scores, temperature=0.1, reduction="none")
        half = {k: v.to(dtype) if v.is_floating_point() else v for k, v in scores.items()}
        p = half["positive_scores"].requires_grad_(True)
        n = half["negative_scores"].requires_grad_(True)
        out = fn(**half, temperature=0.1, reduction="none")
        assert out.dtype == torch.float32
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
    problem = make_problem(12, num_classes=50)
    counts = torch.arange(50, 0, -1).double()
    module = cls(UnigramSampler(counts), num_samples=8, temperature=0.5)
    out = module(**problem, generator=gen(3))
    draw = module.last_draw
    assert draw.ids.shape == (8,) and draw.unique
    assert draw.positive_log_q.shape == (6,)
    torch.testing.assert_close(out, via_sets(fn, **problem, draw=draw, temperature=0.5))
    again = module(**problem, generator=gen(3))
    torch.testing.assert_close(out, again)


@pytest.mark.parametrize(
    "cls,fn", [(SampledSoftmaxLoss, sampled_softmax_loss), (NCELoss, nce_loss)]
)
def test_modules_pass_repeated_hits_on(cls, fn):
    """``repeated_hits`` reaches the functional: with draws that repeat a row's positive,
    "tensorflow" (only the last copy removed) and the default "mask_all" differ, and each
    equals the functional given the same draw."""
    problem = make_problem(14, num_classes=8)
    outs = {}
    for mode in ("mask_all", "tensorflow"):
        module = cls(UniformSampler(8), num_samples=24, unique=False,
                     remove_accidental_hits=True, repeated_hits=mode, reduction="none")
        outs[mode] = module(**problem, generator=gen(5))
        draw = module.last_draw
        want = via_sets(fn, **problem, draw=draw, remove_accidental_hits=True,
                        repeated_hits=mode, reduction="none")
        torch.testing.assert_close(outs[mode], want)
    assert (accidental_hits(draw.positive_ids, draw.ids).sum(1) > 1).any()
    assert not torch.allclose(outs["mask_all"], outs["tensorflow"])
    with pytest.raises(ValueError, match="repeated_hits"):
        cls(UniformSampler(8), 3, repeated_hits="last")


SAMPLED_LAYOUT = {
    "candidate_logits": lambda *a: torch.cat(candidate_logits(*a), dim=1),
    "sampled_softmax_loss": sampled_softmax_loss,
    "nce_loss": nce_loss,
    "negative_sampling_loss": negative_sampling_loss,
    "sampled_logistic_loss": sampled_logistic_loss,
}


@pytest.mark.parametrize("name", sorted(SAMPLED_LAYOUT))
def test_a_masked_positive_column_is_an_error(name):
    # a mask on positives (a row's positive marked invalid) was silently ignored
    problem = make_problem(16, num_true=2)
    draw = UnigramSampler(torch.arange(30, 0, -1).double()).sample(
        5, generator=gen(7), positive_ids=problem["positive_ids"]
    )
    positives, candidates = sets_of(problem["classes"], problem["positive_ids"], draw)
    fn, query = SAMPLED_LAYOUT[name], problem["query"]
    valid = torch.ones(positives.num_candidates, dtype=torch.bool)
    masked = valid.clone()
    masked[3] = False  # row 1's second positive
    with pytest.raises(ValueError, match=r"positives must not .* positives.mask is False"):
        fn(query, positives.with_mask(masked), candidates)
    # a mask that removes nothing is no mask
    torch.testing.assert_close(
        fn(query, positives.with_mask(valid), candidates), fn(query, positives, candidates)
    )
    with candidate_sampling.validate_args(False):  # a value check, like the others
        fn(query, positives.with_mask(masked), candidates)


def test_positives_of_keeps_the_draw_s_log_q_dtype():
    """A float64 draw stays float64 in the positive columns, as in ``from_draw``."""
    problem = make_problem(15, num_classes=20)
    draw = LogUniformSampler(20).sample(5, generator=gen(6), positive_ids=problem["positive_ids"])
    draw64 = dataclasses.replace(draw, log_q=draw.log_q.double(),
                                 positive_log_q=draw.positive_log_q.double())
    positives = CandidateSet.positives_of(problem["positive_ids"], problem["classes"], draw=draw64)
    candidates = CandidateSet.from_draw(draw64, problem["classes"])
    assert positives.log_q.dtype == candidates.log_q.dtype == torch.float64
    assert torch.equal(positives.log_q, draw64.positive_log_q)


def test_module_options_are_keyword_only_and_shown():
    sampler = UniformSampler(10)
    with pytest.raises(TypeError):
        SampledSoftmaxLoss(sampler, 3, True)
    module = NCELoss(sampler, 3, temperature=0.5)
    assert "num_samples=3" in repr(module) and "remove_accidental_hits=None" in repr(module)
    # None: the rule of each column's source (a unique draw's hits removed by the softmax)
    assert SampledSoftmaxLoss(sampler, 3).remove_accidental_hits is None


# --------------------------------------------------------------------------- bad input


def test_bad_inputs_scores_level():
    scores = make_scores(13, batch_size=3, num_samples=4)
    pos, neg = scores["positive_scores"], scores["negative_scores"]
    for fn in (sampled_softmax_from_scores, nce_from_scores):
        with pytest.raises(ValueError, match="batch size"):
            fn(pos[:2], neg)
        with pytest.raises(ValueError, match="negative_scores"):
            fn(pos, neg[0])
        with pytest.raises(ValueError, match="positive_scores"):
            fn(pos[:, None, None], neg)  # 3-D positives
        with pytest.raises(ValueError, match="positive_scores"):
            fn(pos.long(), neg)
        with pytest.raises(ValueError, match="must not be empty"):
            fn(pos[:0], neg[:0])  # empty batch
        with pytest.raises(ValueError, match="negative_log_q"):
            fn(**dict(scores, negative_log_q=scores["negative_log_q"][:3]))
        with pytest.raises(ValueError, match="negative_log_q"):
            fn(**dict(scores, negative_log_q=torch.full((4,), float("nan"), dtype=D64)))
        with pytest.raises(ValueError, match="positive_log_q"):
            fn(**dict(scores, positive_log_q=torch.full((3,), math.inf, dtype=D64)))
        with pytest.raises(ValueError, match="positive_log_q"):
            fn(**dict(scores, positive_log_q=scores["positive_log_q"][:2]))
        with pytest.raises(ValueError, match="positive_log_q"):
            fn(**dict(scores, positive_log_q=scores["positive_log_q"][:, None]))  # (B, 1) vs (B,)
        with pytest.raises(ValueError, match="mask"):
            fn(**dict(scores, mask=scores["mask"].long()))
        with pytest.raises(ValueError, match="mask"):
            fn(**dict(scores, mask=scores["mask"][:, :2]))
        with pytest.raises(ValueError, match="temperature"):
            fn(**scores, temperature=0.0)
        with pytest.raises(ValueError, match="reduction"):
            fn(**scores, reduction="avg")
        with pytest.raises(TypeError):
            fn(pos, neg, scores["positive_log_q"])  # corrections are keyword-only
    with pytest.raises(ValueError, match="positive_ids"):
        softmax_cross_entropy(torch.randn(2, 3), torch.tensor([0, 3]))
    with pytest.raises(ValueError, match="batch size"):
        softmax_cross_entropy(torch.randn(2, 3), torch.tensor([0]))
    with pytest.raises(ValueError, match="logits"):
        softmax_cross_entropy(torch.randn(0, 3), torch.tensor([], dtype=torch.long))
    with pytest.raises(ValueError, match="log_proposal"):
        importance_sampled_log_partition(torch.randn(2, 3), torch.randn(4))
    with pytest.raises(ValueError, match="log_proposal"):
        importance_weights(torch.randn(3), torch.tensor([0.0, float("nan"), 0.0]))
    with pytest.raises(ValueError, match="scores"):
        importance_weights(torch.randn(2, 0), torch.randn(1))
    with pytest.raises(ValueError, match="weights"):
        effective_sample_size(torch.tensor([1, 0]))


def test_bad_inputs_embedding_level():
    problem = make_problem(14, batch_size=3, num_classes=10, dim=4)
    query, classes = problem["query"], problem["classes"]
    positives = CandidateSet.from_ids(problem["positive_ids"], classes, log_q=0.0)
    sampled = CandidateSet.from_ids(torch.tensor([1, 2]), classes, log_q=0.0)
    for fn in (sampled_softmax_loss, nce_loss, sampled_logistic_loss, negative_sampling_loss):
        with pytest.raises(ValueError, match="embedding size d"):
            fn(query[:, :3], positives, sampled)
        with pytest.raises(ValueError, match="positives must hold B·T columns"):
            fn(query[:2], positives, sampled)
        with pytest.raises(ValueError, match="positives must be a CandidateSet"):
            fn(query, classes[:3], sampled)  # a bare tensor is not a set
        with pytest.raises(ValueError, match="candidates must be a CandidateSet"):
            fn(query, positives, classes[:2])
        with pytest.raises(ValueError, match="must not be empty"):
            fn(query[:0], positives, sampled)
        with pytest.raises(ValueError, match="temperature must be a float or a Temperature"):
            fn(query, positives, sampled, temperature=torch.tensor(0.5))
        with pytest.raises(ValueError, match="sample_weight must have shape"):
            fn(query, positives, sampled, sample_weight=torch.ones(2, dtype=D64))
        with pytest.raises(ValueError, match="sample_weight must be finite and >= 0"):
            fn(query, positives, sampled, sample_weight=torch.tensor([1.0, -1.0, 1.0]))
        with pytest.raises(TypeError):
            fn(query, positives, sampled, 1.0)  # options are keyword-only
    per_row = CandidateSet(sampled.embeddings, sampled.ids, torch.zeros(4, 2, dtype=D64))
    with pytest.raises(ValueError, match="per-row log_q / mask must have B = 3 rows"):
        sampled_softmax_loss(query, positives, per_row)
    with pytest.raises(ValueError, match="repeated_hits must be one of"):
        sampled_softmax_loss(query, positives, sampled, repeated_hits="first")
    with pytest.raises(ValueError, match="ids must lie in"):
        CandidateSet.from_ids(torch.tensor([0, 1, 10]), classes)
    with pytest.raises(ValueError, match="class_bias must have shape"):
        CandidateSet.from_ids(torch.tensor([0, 1]), classes, class_bias=torch.zeros(2, 1))
    with pytest.raises(ValueError, match="classes must be a class table"):
        CandidateSet.from_ids(torch.tensor([0, 1]), "item tower")
    with pytest.raises(ValueError, match="item encoder"):
        CandidateSet.from_ids(torch.tensor([0, 1]), lambda ids: torch.zeros(len(ids) + 1, 3))
    # a true id that the proposal cannot draw has log Q = -inf: refused, not NaN
    sampler = UniformSampler(10, exclude=[0])
    draw = sampler.sample(3, generator=gen(0), positive_ids=torch.tensor([0, 1, 2]))
    with pytest.raises(ValueError, match="positive_log_q is -inf"):
        CandidateSet.positives_of(torch.tensor([0, 1, 2]), classes, draw=draw)
    with pytest.raises(ValueError, match="num_samples"):
        SampledSoftmaxLoss(sampler, num_samples=0)
    with pytest.raises(ValueError, match="num_samples"):
        NCELoss(sampler, num_samples=10, unique=True)
    with pytest.raises(ValueError, match="sampler"):
        NCELoss("uniform", num_samples=3)


# ------------------------------------------------- the fused step of sampled_softmax_loss


def _fused_problem(seed, *, num_items=40, batch=9, k=25, unique=True, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    table = (torch.randn(num_items, 5, generator=g, dtype=torch.float64) * scale)
    query = (torch.randn(batch, 5, generator=g, dtype=torch.float64) * scale)
    positive_ids = torch.randint(num_items, (batch,), generator=g)
    sampler = UniformSampler(num_items)
    draw = sampler.sample(k, unique=unique, generator=g, positive_ids=positive_ids)
    return table.requires_grad_(), query.requires_grad_(), positive_ids, draw


def _dense_reference(query, table, positive_ids, draw, *, remove, repeated_hits, weight=None):
    """The loss from the public steps: candidate_logits (dense hit mask), cat, F.cross_entropy."""
    positives = CandidateSet.positives_of(positive_ids, table, draw=draw)
    candidates = CandidateSet.from_draw(draw, table)
    pos, neg = L.candidate_logits(
        query, positives, candidates, remove_accidental_hits=remove, repeated_hits=repeated_hits
    )
    losses = F.cross_entropy(torch.cat([pos, neg], 1), torch.zeros_like(positive_ids),
                             reduction="none")
    return losses.mean() if weight is None else (losses * weight).mean()  # Keras: / B


@pytest.mark.parametrize("unique", [True, False])
@pytest.mark.parametrize("remove", [None, True, False])
@pytest.mark.parametrize("repeated_hits", ["mask_all", "tensorflow"])
@pytest.mark.parametrize("weighted", [False, True])
def test_fused_sampled_softmax_equals_the_public_steps(unique, remove, repeated_hits, weighted):
    """Hits found by sorting (index pairs) and one fused softmax give the loss and the
    gradients of the dense hit mask, the concatenation and F.cross_entropy, in float64;
    few items, so that ids repeat and hit several rows."""
    for seed in range(5):
        table, query, positive_ids, draw = _fused_problem(seed, num_items=30, k=10 if unique else 25, unique=unique)
        weight = torch.rand(len(positive_ids), dtype=torch.float64) + 0.1 if weighted else None
        got = L.sampled_softmax_loss(
            query, CandidateSet.positives_of(positive_ids, table, draw=draw),
            CandidateSet.from_draw(draw, table), remove_accidental_hits=remove,
            repeated_hits=repeated_hits, sample_weight=weight,
        )
        got_grads = torch.autograd.grad(got, (query, table))
        want = _dense_reference(query, table, positive_ids, draw, remove=remove,
                                repeated_hits=repeated_hits, weight=weight)
        want_grads = torch.autograd.grad(want, (query, table))
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
        for a, b in zip(got_grads, want_grads):
            torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_fused_sampled_softmax_keeps_an_exact_loss_where_the_positive_underflows():
    """−log p of a positive far below the row's best logit underflows p to 0; those rows
    are recomputed as lse − o: finite and equal to the dense reference (float32 too)."""
    for dtype in (torch.float64, torch.float32):
        table, query, positive_ids, draw = _fused_problem(3, scale=40.0)
        table, query = table.detach().to(dtype), query.detach().to(dtype)
        got = L.sampled_softmax_loss(
            query, CandidateSet.positives_of(positive_ids, table, draw=draw),
            CandidateSet.from_draw(draw, table), reduction="none",
        )
        with torch.no_grad():
            want = _dense_reference(query.double(), table.double(), positive_ids, draw,
                                    remove=None, repeated_hits="mask_all")
        assert torch.isfinite(got).all() and got.max() > 200  # some p would underflow
        torch.testing.assert_close(got.double().mean(), want, rtol=1e-5, atol=0)


def test_fused_sampled_softmax_backward_twice_with_retain_graph():
    table, query, positive_ids, draw = _fused_problem(4)
    loss = L.sampled_softmax_loss(
        query, CandidateSet.positives_of(positive_ids, table, draw=draw),
        CandidateSet.from_draw(draw, table),
    )
    first = torch.autograd.grad(loss, query, retain_graph=True)[0]
    second = torch.autograd.grad(loss, query)[0]
    torch.testing.assert_close(first, second, rtol=0, atol=0)


def test_fused_sampled_softmax_with_int32_positive_ids_finds_the_same_hits():
    table, query, positive_ids, draw = _fused_problem(5, num_items=15, k=10)
    args = (CandidateSet.from_draw(draw, table),)
    got = L.sampled_softmax_loss(
        query, CandidateSet.positives_of(positive_ids.int(), table, draw=draw), *args
    )
    want = L.sampled_softmax_loss(
        query, CandidateSet.positives_of(positive_ids, table, draw=draw), *args
    )
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_fused_sampled_softmax_gradient_with_create_graph():
    """``create_graph=True`` with an upstream gradient that needs one (a gradient penalty,
    a meta-gradient through per-row weights) takes the allocating backward: the write into
    the forward's score buffer with ``out=`` cannot be part of a graph. Its first-order
    gradient equals the plain one, and it is differentiable in the upstream weights."""
    table, query, positive_ids, draw = _fused_problem(6)

    def per_row():
        return L.sampled_softmax_loss(
            query, CandidateSet.positives_of(positive_ids, table, draw=draw),
            CandidateSet.from_draw(draw, table), reduction="none",
        )

    weights = torch.linspace(0.5, 2.0, len(positive_ids), requires_grad=True)
    (with_graph,) = torch.autograd.grad(per_row(), query, grad_outputs=weights, create_graph=True)
    (plain,) = torch.autograd.grad(per_row(), query, grad_outputs=weights.detach())
    torch.testing.assert_close(with_graph.detach(), plain, rtol=0, atol=0)
    (d_weights,) = torch.autograd.grad(with_graph.sum(), weights)
    assert torch.isfinite(d_weights).all() and d_weights.abs().sum() > 0
