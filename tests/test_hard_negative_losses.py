"""Chapter 8 losses (losses.hard_negatives) against float64 loop references and invariants."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from candidate_sampling.losses.contrastive import supcon_loss
from candidate_sampling.losses.core import mask_value, positive_column_cross_entropy
from candidate_sampling.losses.hard_negatives import (
    HardNegativeSoftmaxLoss,
    corrected_logq_weights,
    dclw_positive_weights,
    debiased_cross_entropy,
    decoupled_cross_entropy,
    guide_false_negative_mask,
    hard_negative_mining,
    hard_negative_softmax_loss,
    hardness_weighted_logits,
    multi_positive_cross_entropy,
    multi_positive_softmax_loss,
)
from candidate_sampling import CandidateSet
from candidate_sampling.losses.retrieval import in_batch_logits, in_batch_softmax_loss

D64 = torch.float64


def sets(query, candidates, candidate_ids=None, log_q=None):
    """The batch's positives (first B rows) and the extras as CandidateSets; distinct
    default ids."""
    b = query.shape[0]
    ids = torch.arange(candidates.shape[0]) if candidate_ids is None else candidate_ids

    def part(cols):
        return CandidateSet(candidates[cols], ids[cols], None if log_q is None else log_q[cols])

    return part(slice(0, b)), (part(slice(b, None)) if candidates.shape[0] > b else None)


def one_matrix(fn, query, candidates, *, candidate_ids=None, log_q=None, **options):
    """``fn`` on a one-matrix batch (row i's positive = candidate i)."""
    return fn(query, *sets(query, candidates, candidate_ids, log_q), **options)


def hn_loss(*args, **kwargs):
    return one_matrix(hard_negative_softmax_loss, *args, **kwargs)


def randn(*shape, seed=0, dtype=D64):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def lse(values):
    m = max(values)
    return m + math.log(sum(math.exp(v - m) for v in values))


# ---------------------------------------------------------------- loop references


def ref_softmax_rows(logits, keep, pos_col, loss="ce", weights=None):
    """Per-row losses from explicit sums over the kept columns of each row."""
    out = []
    for i in range(logits.shape[0]):
        cols = [j for j in range(logits.shape[1]) if keep[i][j]]
        o = {j: float(logits[i, j]) for j in cols}
        p = int(pos_col[i])
        negs = [o[j] for j in cols if j != p]
        if loss == "ce":
            out.append(lse([o[p], *negs]) - o[p])
        else:  # decoupled
            w = 1.0 if weights is None else float(weights[i])
            out.append(lse(negs) - w * o[p])
    return out


def ref_tfrs_hard_negative_mining(logits, labels, k):
    """TF Recommenders' HardNegativeMining in NumPy: top_k(logits + labels * MAX_FLOAT)."""
    max_float = np.finfo(np.float32).max / 100.0
    num_sampled = min(k + 1, logits.shape[1])
    shifted = logits + labels * max_float
    idx = np.argsort(-shifted, axis=1, kind="stable")[:, :num_sampled]
    return np.take_along_axis(logits, idx, 1), np.take_along_axis(labels, idx, 1), idx


def ref_hcl_criterion(out_1, out_2, tau_plus, beta, temperature, estimator="hard"):
    """joshr17/HCL image/main.py `criterion` re-typed with loops (float64)."""
    out = torch.cat([out_1, out_2])
    n2 = out.shape[0]
    b = n2 // 2
    total = 0.0
    for i in range(n2):
        partner = (i + b) % n2
        pos = math.exp(float(out_1[i % b] @ out_2[i % b]) / temperature)
        neg = [
            math.exp(float(out[i] @ out[j]) / temperature)
            for j in range(n2)
            if j not in (i, partner)
        ]
        if estimator == "hard":
            n = n2 - 2
            imp = [v**beta for v in neg]
            reweight = sum(a * v for a, v in zip(imp, neg)) / (sum(imp) / len(imp))
            ng = (-tau_plus * n * pos + reweight) / (1 - tau_plus)
            ng = max(ng, n * math.exp(-1 / temperature))
        else:
            ng = sum(neg)
        total += -math.log(pos / (pos + ng))
    return total / n2


def simclr_logits(out_1, out_2, temperature):
    out = torch.cat([out_1, out_2])
    n2 = out.shape[0]
    logits = out @ out.T / temperature
    logits = logits.masked_fill(torch.eye(n2, dtype=torch.bool), mask_value(logits.dtype))
    cols = (torch.arange(n2) + n2 // 2) % n2
    return logits, cols


# ---------------------------------------------------------------- hard-negative mining


@pytest.mark.parametrize("k", [0, 1, 3, 7, 20])
def test_hard_negative_mining_matches_tfrs(k):
    logits = randn(5, 8, seed=1)
    labels = torch.eye(5, 8, dtype=D64)
    kept, columns = hard_negative_mining(
        logits, num_hard_negatives=k, positive_columns=torch.arange(5)
    )
    ref_logits, ref_labels, ref_idx = ref_tfrs_hard_negative_mining(
        logits.numpy(), labels.numpy(), k
    )
    assert kept.shape == (5, min(k, 7) + 1)
    assert torch.equal(columns[:, 0], torch.arange(5))
    for i in range(5):  # the same set of columns, the positive included
        assert sorted(columns[i].tolist()) == sorted(ref_idx[i].tolist())
    # the same softmax cross-entropy (TFRS: CategoricalCrossentropy with one-hot labels)
    ref_ce = -(ref_labels * (ref_logits - np.log(np.exp(ref_logits).sum(1, keepdims=True)))).sum(1)
    ours = positive_column_cross_entropy(kept, 0)
    assert np.allclose(ours.numpy(), ref_ce, rtol=1e-12, atol=1e-12)
    # hardest first after the positive
    assert bool((kept[:, 1:-1] >= kept[:, 2:]).all()) if kept.shape[1] > 2 else True


def test_hard_negative_mining_gradient_only_through_kept_columns():
    logits = randn(4, 6, seed=2).requires_grad_()
    kept, columns = hard_negative_mining(logits, num_hard_negatives=2, positive_columns=0)
    kept.sum().backward()
    expected = torch.zeros(4, 6, dtype=D64)
    expected.scatter_(1, columns, 1.0)
    assert torch.equal(logits.grad, expected)


@settings(max_examples=25)
@given(st.integers(1, 6), st.integers(2, 9), st.integers(0, 10_000))
def test_hard_negative_mining_with_every_column_is_the_full_loss(b, extra, seed):
    logits = randn(b, b + extra, seed=seed)
    cols = torch.arange(b)
    kept, _ = hard_negative_mining(logits, num_hard_negatives=b + extra, positive_columns=cols)
    assert torch.allclose(
        positive_column_cross_entropy(kept, 0),
        positive_column_cross_entropy(logits, cols),
        atol=1e-12,
    )


def test_hard_negative_loss_against_loop():
    q, c = randn(6, 5, seed=3), randn(10, 5, seed=4)
    ids = torch.tensor([0, 1, 2, 0, 3, 4, 5, 6, 1, 7])
    log_q = randn(10, seed=5)
    loss = hn_loss(
        q,
        c,
        candidate_ids=ids,
        log_q=log_q,
        temperature=0.7,
        num_hard_negatives=3,
        remove_accidental_hits=True,
        reduction="none",
    )
    logits = (q @ c.T) / 0.7 - log_q
    expected = []
    for i in range(6):
        negs = [float(logits[i, j]) for j in range(10) if j != i and int(ids[j]) != int(ids[i])]
        hardest = sorted(negs, reverse=True)[:3]
        expected.append(lse([float(logits[i, i]), *hardest]) - float(logits[i, i]))
    assert torch.allclose(loss, torch.tensor(expected, dtype=D64), atol=1e-12)


# ---------------------------------------------------------------- hardness weighting


def test_hardness_weighting_against_loop():
    q, c = randn(5, 4, seed=6), randn(5, 4, seed=7)
    alpha, tau = 7.0, 0.5
    loss = hn_loss(q, c, temperature=tau, hardness_alpha=alpha, reduction="none")
    s = q @ c.T
    expected = []
    for i in range(5):
        terms = [float(s[i, i]) / tau] + [
            float(s[i, j]) / tau + alpha * float(s[i, j]) for j in range(5) if j != i
        ]
        expected.append(lse(terms) - float(s[i, i]) / tau)
    assert torch.allclose(loss, torch.tensor(expected, dtype=D64), atol=1e-12)


def test_hardness_weight_passes_no_gradient():
    """d loss / d s_ij equals the softmax weight / τ, as if exp(α s_ij) were a constant."""
    logits = randn(3, 4, seed=8).requires_grad_()
    scores = randn(3, 4, seed=9).requires_grad_()
    out = hardness_weighted_logits(logits, scores, hardness_alpha=5.0, positive_columns=0)
    out.sum().backward()
    assert scores.grad is None
    assert torch.equal(logits.grad, torch.ones(3, 4, dtype=D64))
    assert torch.equal(out[:, 0], logits[:, 0])


# ---------------------------------------------------------------- false negatives


def test_guide_mask_against_loop_and_gistembed_rules():
    g = randn(6, 9, seed=10)
    cols = torch.tensor([0, 1, 2, 3, 4, 5])
    for strategy in ("absolute", "relative"):
        for margin in (0.0, 0.1, 0.5):
            mask = guide_false_negative_mask(
                g, positive_columns=cols, margin=margin, margin_strategy=strategy
            )
            for i in range(6):
                gp = float(g[i, i])
                for j in range(9):
                    thr = gp - margin if strategy == "absolute" else gp * (1 - margin)
                    assert bool(mask[i, j]) == (j != i and float(g[i, j]) > thr)


def test_hand_built_batch_known_false_negatives_are_removed():
    """Rows 0 and 1 are two views of one class: without the mask each is the other's
    negative; with it, the loss equals the loss on a batch where that column is deleted."""
    q = torch.tensor([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [-1.0, 0.0]], dtype=D64)
    c = torch.tensor([[1.0, 0.1], [0.95, 0.0], [0.0, 1.0], [-1.0, 0.1]], dtype=D64)
    fn = torch.zeros(4, 4, dtype=torch.bool)
    fn[0, 1] = fn[1, 0] = True  # the known false negatives
    masked = hn_loss(q, c, false_negative_mask=fn, reduction="none")
    plain = hn_loss(q, c, reduction="none")
    logits = q @ c.T
    for i in range(4):
        keep = [j for j in range(4) if not fn[i, j]]
        assert math.isclose(
            float(masked[i]),
            lse([float(logits[i, j]) for j in keep]) - float(logits[i, i]),
            rel_tol=1e-12,
        )
    assert masked[0] < plain[0] and masked[1] < plain[1]
    assert torch.equal(masked[2:], plain[2:])
    # the guide filter finds exactly those two when the guide sees the classes
    guide = torch.tensor(
        [
            [1.0, 0.99, 0.0, -1.0],
            [0.99, 1.0, 0.0, -1.0],
            [0.0, 0.0, 1.0, 0.0],
            [-1.0, -1.0, 0.0, 1.0],
        ],
        dtype=D64,
    )
    assert torch.equal(
        guide_false_negative_mask(guide, positive_columns=torch.arange(4), margin=0.05), fn
    )


def test_positive_column_is_never_masked_by_a_false_negative_mask():
    q, c = randn(3, 4, seed=11), randn(3, 4, seed=12)
    every = torch.ones(3, 3, dtype=torch.bool)
    loss = hn_loss(q, c, false_negative_mask=every, reduction="none")
    assert torch.allclose(loss, torch.zeros(3, dtype=D64))


@settings(max_examples=25)
@given(st.integers(2, 6), st.integers(0, 10_000))
def test_masking_a_column_equals_deleting_it(b, seed):
    q, c = randn(b, 3, seed=seed), randn(b + 3, 3, seed=seed + 1)
    drop = b + 1
    fn = torch.zeros(b, b + 3, dtype=torch.bool)
    fn[:, drop] = True
    keep = [j for j in range(b + 3) if j != drop]
    for mode in ("keep", "remove", "corrected"):
        masked = hn_loss(
            q, c, false_negative_mask=fn, positive_in_denominator=mode
        )
        deleted = hn_loss(q, c[keep], positive_in_denominator=mode)
        assert torch.allclose(masked, deleted, atol=1e-12)


# ---------------------------------------------------------------- debiased / hard (HCL)


@pytest.mark.parametrize(("tau_plus", "beta"), [(0.0, 0.0), (0.1, 0.0), (0.1, 1.0), (0.05, 0.5)])
def test_debiased_matches_hcl_reference_code(tau_plus, beta):
    out_1 = F.normalize(randn(8, 6, seed=13), dim=1)
    out_2 = F.normalize(out_1 + 0.3 * randn(8, 6, seed=14), dim=1)
    t = 0.5
    logits, cols = simclr_logits(out_1, out_2, t)
    ours = debiased_cross_entropy(logits, cols, tau_plus=tau_plus, beta=beta, min_logit=-1 / t)
    ref = ref_hcl_criterion(out_1, out_2, tau_plus, beta, t)
    assert math.isclose(float(ours.mean()), ref, rel_tol=1e-10)
    if tau_plus == 0 and beta == 0:  # the plain NT-Xent
        assert torch.allclose(ours, positive_column_cross_entropy(logits, cols), atol=1e-12)


def test_debiased_gradient_matches_reference_gradient():
    base_1, base_2 = randn(6, 5, seed=15), randn(6, 5, seed=16)
    t, tau_plus, beta = 0.5, 0.1, 1.0

    def ours(a, b):
        o1, o2 = F.normalize(a, dim=1), F.normalize(b, dim=1)
        logits, cols = simclr_logits(o1, o2, t)
        return debiased_cross_entropy(
            logits, cols, tau_plus=tau_plus, beta=beta, min_logit=-1 / t
        ).mean()

    def reference(a, b):  # the HCL criterion, vectorised as in the authors' code
        o1, o2 = F.normalize(a, dim=1), F.normalize(b, dim=1)
        out = torch.cat([o1, o2])
        n = o1.shape[0]
        neg = torch.exp(out @ out.T / t)
        mask = torch.ones(n, 2 * n, dtype=torch.bool)
        for i in range(n):
            mask[i, i] = mask[i, i + n] = False
        mask = torch.cat([mask, mask])
        neg = neg.masked_select(mask).view(2 * n, -1)
        pos = torch.exp((o1 * o2).sum(-1) / t)
        pos = torch.cat([pos, pos])
        big_n = 2 * n - 2
        imp = (beta * neg.log()).exp()
        reweight = (imp * neg).sum(-1) / imp.mean(-1)
        ng = (-tau_plus * big_n * pos + reweight) / (1 - tau_plus)
        ng = torch.clamp(ng, min=big_n * math.e ** (-1 / t))
        return (-torch.log(pos / (pos + ng))).mean()

    a1, b1 = base_1.clone().requires_grad_(), base_2.clone().requires_grad_()
    a2, b2 = base_1.clone().requires_grad_(), base_2.clone().requires_grad_()
    ours(a1, b1).backward()
    reference(a2, b2).backward()
    assert torch.allclose(a1.grad, a2.grad, atol=1e-10)
    assert torch.allclose(b1.grad, b2.grad, atol=1e-10)


def test_debiased_floor_and_masked_rows():
    # tau_plus close to 1 makes the estimate negative: the floor takes over, loss stays finite
    logits = torch.tensor([[3.0, 0.0, 0.1], [0.0, 0.0, 0.0]], dtype=D64)
    loss = debiased_cross_entropy(logits, 0, tau_plus=0.9, min_logit=-2.0)
    expected0 = math.log(math.exp(3.0) + 2 * math.exp(-2.0)) - 3.0
    assert math.isclose(float(loss[0]), expected0, rel_tol=1e-12)
    masked = logits.clone()
    masked[0, 1:] = mask_value(D64)
    out = debiased_cross_entropy(masked, 0, tau_plus=0.1)
    assert float(out[0]) == 0.0 and torch.isfinite(out).all()


@pytest.mark.parametrize("beta", [0.0, 0.5])
@pytest.mark.parametrize("min_logit", [None, -1.0])
def test_debiased_nan_in_gives_nan_out(beta, min_logit):
    # a NaN estimate failed `diff > 0` and was replaced by the finite floor e^{min_logit}
    logits = torch.tensor([[2.0, float("nan"), 0.5], [1.0, 0.0, 0.5]], dtype=D64)
    out = debiased_cross_entropy(logits, 0, tau_plus=0.1, beta=beta, min_logit=min_logit)
    assert math.isnan(float(out[0])) and math.isfinite(float(out[1]))
    q, c = randn(3, 4, seed=37), randn(5, 4, seed=38)
    c[4, 0] = float("nan")  # an extra candidate column of NaN logits in every row
    loss = hn_loss(q, c, tau_plus=0.1, beta=beta, min_logit=min_logit, reduction="none")
    assert torch.isnan(loss).all()


# ---------------------------------------------------------------- the positive in the denominator


def test_decoupled_against_loop_with_masks():
    q, c = randn(5, 4, seed=17), randn(8, 4, seed=18)
    ids = torch.tensor([0, 1, 0, 2, 3, 4, 1, 5])
    log_q = randn(8, seed=19)
    loss = hn_loss(
        q, c, candidate_ids=ids, log_q=log_q, positive_in_denominator="remove",
        remove_accidental_hits=True, reduction="none",
    )
    logits = q @ c.T - log_q
    keep = [[j == i or int(ids[j]) != int(ids[i]) for j in range(8)] for i in range(5)]
    ref = ref_softmax_rows(logits, keep, range(5), loss="decoupled")
    assert torch.allclose(loss, torch.tensor(ref, dtype=D64), atol=1e-12)


def test_dclw_against_reference_formula():
    z1 = F.normalize(randn(6, 5, seed=20), dim=1)
    z2 = F.normalize(z1 + 0.5 * randn(6, 5, seed=21), dim=1)
    tau, sigma = 0.1, 0.5
    # raminnakhli/Decoupled-Contrastive-Learning DCLW, one direction, re-typed with loops
    pos_sims = [float(z1[i] @ z2[i]) for i in range(6)]
    soft = [math.exp(s / sigma) for s in pos_sims]
    weights = [2 - 6 * v / sum(soft) for v in soft]
    total = 0.0
    for i in range(6):
        negs = [float(z1[i] @ z1[j]) / tau for j in range(6) if j != i]
        negs += [float(z1[i] @ z2[j]) / tau for j in range(6) if j != i]
        total += -weights[i] * pos_sims[i] / tau + lse(negs)
    ref = total / 6
    # the package: candidates = [z2 | z1], the query's own view z1_i masked
    cand = torch.cat([z2, z1])
    fn = torch.zeros(6, 12, dtype=torch.bool)
    fn[torch.arange(6), torch.arange(6) + 6] = True
    ours = hn_loss(
        z1,
        cand,
        temperature=tau,
        false_negative_mask=fn,
        positive_in_denominator="remove",
        dclw_sigma=sigma,
    )
    assert math.isclose(float(ours), ref, rel_tol=1e-10)
    w = dclw_positive_weights(torch.tensor(pos_sims, dtype=D64), sigma=sigma)
    assert torch.allclose(w, torch.tensor(weights, dtype=D64), atol=1e-12)
    assert math.isclose(float(w.mean()), 1.0, rel_tol=1e-12)


def test_corrected_logq_against_loop():
    q, c = randn(5, 4, seed=22), randn(7, 4, seed=23)
    log_q = randn(7, seed=24)
    tau = 0.8
    loss = hn_loss(
        q, c, log_q=log_q, temperature=tau, positive_in_denominator="corrected", reduction="none"
    )
    s = q @ c.T
    expected = []
    for i in range(5):
        pos = float(s[i, i]) / tau  # the positive: exact term, no correction
        negs = [float(s[i, j]) / tau - float(log_q[j]) for j in range(7) if j != i]
        p_hat = math.exp(pos - lse([pos, *negs]))
        expected.append((1 - p_hat) * (lse(negs) - (pos - float(log_q[i]))))
    assert torch.allclose(loss, torch.tensor(expected, dtype=D64), atol=1e-12)


def test_corrected_logq_gradient_is_the_softmax_gradient_reweighted():
    """Both losses' gradients are (weight) x grad(DCL); they differ only in the weight."""
    logits = randn(4, 6, seed=25)
    log_q_pos = randn(4, seed=26)
    cols = torch.arange(4)
    a = logits.clone().requires_grad_()
    positive_column_cross_entropy(a, cols).sum().backward()
    b = logits.clone().requires_grad_()
    w = corrected_logq_weights(b, cols, positive_log_q=log_q_pos)
    (w * decoupled_cross_entropy(b, cols)).sum().backward()
    p_tilde = torch.softmax(logits, 1)[torch.arange(4), cols]  # uses the corrected positive
    ratio = w / (1 - p_tilde)
    assert torch.allclose(b.grad, a.grad * ratio[:, None], atol=1e-12)
    # without a correction on the positive the weights coincide: the same gradient
    c = logits.clone().requires_grad_()
    w0 = corrected_logq_weights(c, cols, positive_log_q=None)
    (w0 * decoupled_cross_entropy(c, cols)).sum().backward()
    assert torch.allclose(c.grad, a.grad, atol=1e-12)
    assert w.requires_grad is False


def test_decoupled_rows_without_negatives_are_left_out():
    q, c = randn(3, 2, seed=27), randn(3, 2, seed=28)
    fn = torch.zeros(3, 3, dtype=torch.bool)
    fn[0, 1:] = True  # row 0 has no negative left
    per_row = hn_loss(
        q, c, false_negative_mask=fn, positive_in_denominator="remove", reduction="none"
    )
    assert float(per_row[0]) == 0.0
    mean = hn_loss(
        q, c, false_negative_mask=fn, positive_in_denominator="remove"
    )
    assert torch.allclose(mean, per_row[1:].mean())


# ---------------------------------------------------------------- several positives


@pytest.mark.parametrize("variant", ["out", "in", "pairwise"])
def test_multi_positive_equals_supcon(variant):
    emb = randn(12, 5, seed=29)
    labels = torch.tensor([0, 1, 0, 2, 1, 0, 3, 2, 1, 0, 4, 2])
    z = F.normalize(emb, dim=1)
    eye = torch.eye(12, dtype=torch.bool)
    pos = (labels[:, None] == labels[None, :]) & ~eye
    ours = multi_positive_softmax_loss(
        z, CandidateSet(z, torch.arange(12)), pos, temperature=0.2, variant=variant, removed=eye
    )
    ref = supcon_loss(emb, labels, temperature=0.2, variant=variant)
    assert torch.allclose(ours, ref, atol=1e-12)


def test_multi_positive_against_loop_and_jensen():
    logits = randn(4, 7, seed=30)
    pos = torch.zeros(4, 7, dtype=torch.bool)
    pos[0, [0, 3]] = pos[1, [1]] = pos[2, [2, 4, 6]] = True  # row 3: none
    out = multi_positive_cross_entropy(logits, pos, variant="out")
    inn = multi_positive_cross_entropy(logits, pos, variant="in")
    for i in range(3):
        row = [float(v) for v in logits[i]]
        z = lse(row)
        ps = [j for j in range(7) if pos[i, j]]
        assert math.isclose(float(out[i]), -sum(row[j] - z for j in ps) / len(ps), rel_tol=1e-12)
        assert math.isclose(
            float(inn[i]), -math.log(sum(math.exp(row[j] - z) for j in ps) / len(ps)), rel_tol=1e-12
        )
    assert float(out[3]) == float(inn[3]) == 0.0
    assert bool((inn <= out + 1e-12).all())
    # the same number of positives per row: core's (B, T) positive columns
    two = torch.tensor([[0, 3], [1, 5], [2, 4], [3, 6]])
    pos2 = torch.zeros(4, 7, dtype=torch.bool)
    pos2[torch.arange(4)[:, None], two] = True
    assert torch.allclose(
        multi_positive_cross_entropy(logits, pos2, variant="out"),
        positive_column_cross_entropy(logits, two),
        atol=1e-12,
    )


# ---------------------------------------------------------------- the composed loss


def test_defaults_equal_the_in_batch_softmax():
    q, c = randn(6, 4, seed=31), randn(9, 4, seed=32)
    ids = torch.tensor([0, 1, 2, 0, 3, 4, 5, 6, 1])
    log_q = randn(9, seed=33)
    for kw in (
        {},
        {"candidate_ids": ids},
        {"candidate_ids": ids, "log_q": log_q, "temperature": 0.3},
    ):
        assert torch.allclose(
            hn_loss(q, c, **kw), one_matrix(in_batch_softmax_loss, q, c, **kw), atol=1e-12
        )
    module = HardNegativeSoftmaxLoss(temperature=0.3)
    assert torch.allclose(
        module(q, *sets(q, c, ids, log_q)),
        one_matrix(in_batch_softmax_loss, q, c, candidate_ids=ids, log_q=log_q, temperature=0.3),
        atol=1e-12,
    )
    assert "temperature=0.3" in repr(module)


def test_half_precision_is_computed_in_float32():
    q, c = randn(4, 3, seed=34, dtype=torch.float16), randn(4, 3, seed=35, dtype=torch.float16)
    for mode in ("keep", "remove", "corrected"):
        out = hn_loss(
            q, c, positive_in_denominator=mode, hardness_alpha=5.0, num_hard_negatives=2
        )
        assert out.dtype == torch.float32 and torch.isfinite(out)


def _masked_pair(seed):
    """The same masked (B, C) logits in float16 and float32, each with its own mask value;
    row 3 keeps only its positive (column 0)."""
    logits = randn(4, 6, seed=seed, dtype=torch.float32).half()
    removed = torch.zeros(4, 6, dtype=torch.bool)
    removed[:, 4:] = True
    removed[0, 1] = True
    removed[3, 1:] = True
    half = logits.masked_fill(removed, mask_value(torch.float16))
    single = logits.float().masked_fill(removed, mask_value(torch.float32))
    return half, single


POSITIVES = torch.zeros(4, 6, dtype=torch.bool)
POSITIVES[:, 0] = POSITIVES[0, 1] = POSITIVES[1, 2] = True  # [0, 1] is masked
HALF_STEPS = {
    "multi_positive": lambda o: multi_positive_cross_entropy(o, POSITIVES),
    "multi_positive_in": lambda o: multi_positive_cross_entropy(o, POSITIVES, variant="in"),
    "debiased": lambda o: debiased_cross_entropy(o, 0, tau_plus=0.1),
    "debiased_hard": lambda o: debiased_cross_entropy(o, 0, tau_plus=0.1, beta=0.5),
    "decoupled": lambda o: decoupled_cross_entropy(o, 0),
    "mining": lambda o: decoupled_cross_entropy(
        hard_negative_mining(o, num_hard_negatives=3, positive_columns=0)[0], 0
    ),
}


@pytest.mark.parametrize("step", sorted(HALF_STEPS))
def test_float16_masked_logits_are_read_as_masked(step):
    # the float16 mask value (-32752) was upcast first and then not recognised as masked
    half, single = _masked_pair(36)
    got, want = HALF_STEPS[step](half), HALF_STEPS[step](single)
    assert got.dtype == torch.float32
    assert torch.allclose(got, want, atol=1e-3, rtol=1e-3), (got, want)


def test_gradcheck_modes_without_stop_gradient():
    """gradcheck applies where the loss is differentiated as written (DCL, DCLW, debiased,
    hard-negative selection); the stop-gradient weights are checked against formulas above."""
    q = randn(3, 2, seed=36).requires_grad_()
    c = randn(5, 2, seed=37).requires_grad_()
    log_q = randn(5, seed=38)
    for kw in (
        {"positive_in_denominator": "remove", "dclw_sigma": 0.5},
        {"positive_in_denominator": "remove", "log_q": log_q},
        {"tau_plus": 0.1, "beta": 1.0},
        {"num_hard_negatives": 2, "log_q": log_q},
    ):
        assert torch.autograd.gradcheck(lambda a, b: hn_loss(a, b, **kw), (q, c))


def test_hardness_gradient_treats_the_weight_as_a_constant():
    q0, c0 = randn(4, 3, seed=44), randn(4, 3, seed=45)
    alpha = 6.0
    q1, c1 = q0.clone().requires_grad_(), c0.clone().requires_grad_()
    hn_loss(q1, c1, hardness_alpha=alpha).backward()
    bonus = alpha * (q0 @ c0.T)
    bonus.fill_diagonal_(0.0)
    q2, c2 = q0.clone().requires_grad_(), c0.clone().requires_grad_()
    positive_column_cross_entropy(q2 @ c2.T + bonus, torch.arange(4)).mean().backward()
    assert torch.allclose(q1.grad, q2.grad, atol=1e-12)
    assert torch.allclose(c1.grad, c2.grad, atol=1e-12)


def test_in_batch_logits_is_the_first_step():
    q, c = randn(3, 2, seed=39), randn(5, 2, seed=40)
    logits = one_matrix(in_batch_logits, q, c, temperature=0.5)
    kept, _ = hard_negative_mining(logits, num_hard_negatives=1, positive_columns=torch.arange(3))
    direct = hn_loss(q, c, temperature=0.5, num_hard_negatives=1)
    assert torch.allclose(direct, positive_column_cross_entropy(kept, 0).mean(), atol=1e-12)


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"positive_in_denominator": "drop"}, "positive_in_denominator must be one of"),
        ({"dclw_sigma": 0.5}, "dclw_sigma needs"),
        ({"tau_plus": 0.1, "positive_in_denominator": "remove"}, "tau_plus and beta"),
        ({"tau_plus": 1.0}, "tau_plus must lie in"),
        ({"beta": -1.0}, "beta must be >= 0"),
        ({"hardness_alpha": -1.0}, "hardness_alpha must be >= 0"),
        ({"hardness_alpha": float("nan")}, "hardness_alpha must be >= 0"),
        ({"dclw_sigma": 0.0, "positive_in_denominator": "remove"}, "dclw_sigma must be > 0"),
        ({"num_hard_negatives": -1}, "num_hard_negatives must be >= 0"),
        ({"false_negative_mask": torch.zeros(3, 3)}, "false_negative_mask must be a bool"),
        (
            {"false_negative_mask": torch.zeros(2, 3, dtype=torch.bool)},
            "false_negative_mask must have shape",
        ),
        ({"temperature": -1.0}, "temperature must be > 0"),
        ({"reduction": "avg"}, "reduction must be one of"),
    ],
)
def test_bad_input_names_the_argument(kwargs, message):
    q, c = randn(3, 2, seed=41), randn(3, 2, seed=42)
    with pytest.raises(ValueError, match=message):
        hn_loss(q, c, **kwargs)


def test_bad_input_of_the_steps():
    logits = randn(3, 4, seed=43)
    with pytest.raises(ValueError, match="positive_columns must lie in"):
        hard_negative_mining(logits, num_hard_negatives=1, positive_columns=4)
    with pytest.raises(ValueError, match="positive_columns must have shape"):
        decoupled_cross_entropy(logits, torch.arange(2))
    with pytest.raises(ValueError, match="margin_strategy must be one of"):
        guide_false_negative_mask(logits, positive_columns=0, margin_strategy="ratio")
    with pytest.raises(ValueError, match="margin must be >= 0"):
        guide_false_negative_mask(logits, positive_columns=0, margin=-0.1)
    with pytest.raises(ValueError, match="positive_mask must be a bool"):
        multi_positive_cross_entropy(logits, torch.zeros(3, 4))
    with pytest.raises(ValueError, match="variant must be one of"):
        multi_positive_cross_entropy(logits, torch.zeros(3, 4, dtype=torch.bool), variant="x")
    with pytest.raises(ValueError, match="sigma must be > 0"):
        dclw_positive_weights(randn(3), sigma=0.0)
    with pytest.raises(ValueError, match="positive_log_q must have shape"):
        corrected_logq_weights(logits, 0, positive_log_q=randn(2))
    with pytest.raises(ValueError, match="min_logit must be finite"):
        debiased_cross_entropy(logits, 0, tau_plus=0.1, min_logit=float("nan"))
    with pytest.raises(ValueError, match="scores must have shape"):
        hardness_weighted_logits(logits, randn(3, 3), hardness_alpha=1.0, positive_columns=0)
