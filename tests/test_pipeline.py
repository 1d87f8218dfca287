"""The logit pipeline and the CandidateSet contract (issue 20): steps against float64 loops,
property tests over CandidateSets, sample weights, peer semantics, and the bad-input classes
(NaN hidden, half-precision gathers, wrong names, broken contracts)."""

from __future__ import annotations

import inspect
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import candidate_sampling
from candidate_sampling import CandidateSet
from candidate_sampling.losses import (
    Temperature,
    apply_temperature,
    hard_negative_softmax_loss,
    in_batch_softmax_loss,
    logistic_terms,
    multi_positive_cross_entropy,
    multi_positive_softmax_loss,
    nce_loss,
    reduce_loss,
    sampled_softmax_loss,
    score,
    score_positives,
    sigmoid_pairwise_loss,
    supcon_loss,
)
from candidate_sampling.losses.hard_negatives import decoupled_cross_entropy, unmasked

D64 = torch.float64


def gen(seed):
    return torch.Generator().manual_seed(seed)


def random_set(c, d, seed, *, per_row=None, masked=False, num_ids=1000, log_q=True):
    g = gen(seed)
    rows = () if per_row is None else (per_row,)
    mask = None
    if masked:
        mask = torch.rand(*rows, c, generator=g) < 0.7
    return CandidateSet(
        torch.randn(c, d, generator=g, dtype=D64),
        torch.randint(0, num_ids, (c,), generator=g),
        torch.randn(*rows, c, generator=g, dtype=D64) if log_q else None,
        mask,
    )


# --------------------------------------------------------------------------- steps


def test_score_and_score_positives_match_loops():
    g = gen(0)
    q = torch.randn(3, 4, generator=g, dtype=D64)
    s = CandidateSet(
        torch.randn(6, 4, generator=g, dtype=D64), torch.arange(6),
        bias=torch.randn(6, generator=g, dtype=D64),
    )
    out = score(q, s)
    for i in range(3):
        for j in range(6):
            want = float(q[i] @ s.embeddings[j] + s.bias[j])
            assert float(out[i, j]) == pytest.approx(want, rel=1e-12)
    pos = score_positives(q, s)  # 6 = 3 rows × T = 2 positives
    assert pos.shape == (3, 2)
    for i in range(3):
        for t in range(2):
            want = float(q[i] @ s.embeddings[2 * i + t] + s.bias[2 * i + t])
            assert float(pos[i, t]) == pytest.approx(want, rel=1e-12)
    with pytest.raises(ValueError, match="positives must hold B·T columns"):
        score_positives(q, s.select(slice(0, 4)))


def test_temperature_fixed_and_learnable():
    scores = torch.randn(2, 3, dtype=D64)
    fixed = Temperature(0.5)
    assert list(fixed.parameters()) == []
    torch.testing.assert_close(apply_temperature(scores, fixed), scores / 0.5)
    torch.testing.assert_close(apply_temperature(scores, 0.5), scores / 0.5)
    learn = Temperature(0.5, learnable=True, max_scale=3.0)
    assert len(list(learn.parameters())) == 1
    assert float(learn.scale) == pytest.approx(2.0)
    apply_temperature(scores, learn).sum().backward()
    assert learn.log_scale.grad is not None
    capped = Temperature(0.1, learnable=True, max_scale=3.0)
    assert float(capped.scale) == pytest.approx(3.0)  # 1/τ = 10 is clamped
    assert float(Temperature.from_scale(4.0).value) == pytest.approx(0.25)
    with pytest.raises(ValueError, match="temperature must be > 0"):
        Temperature(-1.0)
    with pytest.raises(ValueError, match="scale must be > 0"):
        Temperature.from_scale(0.0)
    with pytest.raises(ValueError, match="max_scale must be > 0"):
        Temperature(1.0, max_scale=-1.0)
    with pytest.raises(ValueError, match="temperature must be a float or a Temperature"):
        apply_temperature(scores, torch.tensor(0.5))


def test_logistic_terms_match_loop():
    logits = torch.tensor([[-3.0, 0.0, 2.5], [40.0, -40.0, 1.0]], dtype=D64)
    labels = torch.tensor([[1.0, 0.0, 0.5], [0.0, 1.0, 1.0]], dtype=D64)
    out = logistic_terms(logits, labels)
    for i in range(2):
        for j in range(3):
            o, y = float(logits[i, j]), float(labels[i, j])
            log_sig, log_one_minus = -math.log1p(math.exp(-o)), -math.log1p(math.exp(o))
            want = -(y * log_sig + (1 - y) * log_one_minus)
            assert float(out[i, j]) == pytest.approx(want, rel=1e-10, abs=1e-12)
    removed = torch.tensor([[False, True, False], [False, False, False]])
    inf = logits.clone().requires_grad_(True)
    with torch.no_grad():
        inf[0, 1] = math.inf
    terms = logistic_terms(inf, labels, removed=removed)
    terms.sum().backward()
    assert float(terms[0, 1]) == 0.0 and bool(torch.isfinite(inf.grad).all())


@pytest.mark.parametrize("labels", [1.0, 0.0, 0.5, "tensor"])
def test_logistic_terms_are_exact_beyond_softplus_threshold(labels):
    """``F.softplus`` returns o itself for o > 20 (off by e^−o, gradient 1 instead of σ(o));
    the terms must keep the e^−o part and the gradient σ(o) − y (open_clip's SigLIP loss
    does, with log σ). The excess over max(o, 0) is compared, where the e^−o lives."""
    logits = torch.tensor([-35.0, -21.0, 20.5, 25.0, 33.0], dtype=D64, requires_grad=True)
    label = 0.25 if labels == "tensor" else labels
    terms = logistic_terms(logits, torch.full((5,), label, dtype=D64) if labels == "tensor"
                           else label)
    terms.sum().backward()
    for o, term, grad in zip(logits.tolist(), terms.tolist(), logits.grad.tolist()):
        softplus_excess = math.log1p(math.exp(-abs(o)))  # softplus(o) − max(o, 0)
        want = max(o, 0.0) + softplus_excess - label * o
        assert term - (max(o, 0.0) - label * o) == pytest.approx(softplus_excess, rel=1e-12)
        assert term == pytest.approx(want, rel=1e-15)
        sigma, sigma_minus = 1 / (1 + math.exp(-o)), 1 / (1 + math.exp(o))
        want_grad = (1 - label) * sigma - label * sigma_minus  # σ(o) − y, no cancellation
        assert grad == pytest.approx(want_grad, rel=1e-12, abs=1e-300)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_sample_weight_follows_keras(reduction):
    """Keras: "sum" Σ w ℓ (TFRS), "mean" Σ w ℓ / B (SUM_OVER_BATCH_SIZE), "none" w ℓ."""
    per_row = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=D64)
    w = torch.tensor([0.0, 1.0, 2.0, 0.5], dtype=D64)
    out = reduce_loss(per_row, reduction, sample_weight=w)
    want = {"mean": float((w * per_row).sum()) / 4, "sum": float((w * per_row).sum())}
    if reduction == "none":
        torch.testing.assert_close(out, w * per_row)
    else:
        assert float(out) == pytest.approx(want[reduction])
    ones = reduce_loss(per_row, reduction, sample_weight=torch.ones(4, dtype=D64))
    torch.testing.assert_close(ones, reduce_loss(per_row, reduction))
    with pytest.raises(ValueError, match="sample_weight must be finite and >= 0"):
        reduce_loss(per_row, reduction, sample_weight=torch.tensor([1.0, -1.0, 1.0, 1.0]))
    with candidate_sampling.validate_args(False):  # a value check: the switch turns it off
        reduce_loss(per_row, reduction, sample_weight=torch.tensor([1.0, -1.0, 1.0, 1.0]))


def test_every_loss_takes_sample_weight():
    g = gen(3)
    q = torch.randn(4, 3, generator=g, dtype=D64)
    pos = CandidateSet(torch.randn(4, 3, generator=g, dtype=D64), torch.arange(4))
    cands = random_set(5, 3, 4)
    w = torch.tensor([1.0, 0.0, 2.0, 1.0], dtype=D64)
    for fn, args in (
        (sampled_softmax_loss, (q, pos, cands)),
        (nce_loss, (q, pos, cands)),
        (in_batch_softmax_loss, (q, pos, cands)),
        (hard_negative_softmax_loss, (q, pos, cands)),
        (sigmoid_pairwise_loss, (q, pos, cands)),
    ):
        per_row = fn(*args, reduction="none")
        weighted = fn(*args, sample_weight=w)
        assert float(weighted) == pytest.approx(float((w * per_row).sum() / 4), rel=1e-12)


def test_every_other_loss_weights_its_rows_too():
    """The losses outside the candidate layout (contrastive, chunked exact, full softmax):
    weighted "mean" = Σ w ℓ / n and "sum" = Σ w ℓ over their own per-row losses."""
    from candidate_sampling.losses import (
        chunked_softmax_cross_entropy,
        info_nce_loss,
        nt_bxent_loss,
        nt_xent_loss,
        soft_nearest_neighbor_loss,
        softmax_cross_entropy,
    )

    g = gen(5)
    x, y = torch.randn(4, 3, generator=g, dtype=D64), torch.randn(4, 3, generator=g, dtype=D64)
    labels = torch.tensor([0, 1, 0, 1])
    pairs = torch.tensor([[0, 2], [1, 3]])
    table = torch.randn(9, 3, generator=g, dtype=D64)
    ids = torch.tensor([1, 4, 4, 8])
    cases = (
        (info_nce_loss, (x, y), 4),
        (nt_xent_loss, (x, y), 8),
        (nt_bxent_loss, (torch.cat([x, y]), pairs), 8),
        (supcon_loss, (x, labels), 4),
        (soft_nearest_neighbor_loss, (x, labels), 4),
        (chunked_softmax_cross_entropy, (x, table, ids), 4),
        (softmax_cross_entropy, (x @ table.T, ids), 4),
    )
    for fn, args, rows in cases:
        w = torch.linspace(0.0, 2.0, rows, dtype=D64)
        per_row = fn(*args, reduction="none")
        assert per_row.shape == (rows,), fn.__name__
        for reduction, want in (("mean", (w * per_row).sum() / rows),
                                ("sum", (w * per_row).sum())):
            got = fn(*args, sample_weight=w, reduction=reduction)
            assert float(got) == pytest.approx(float(want), rel=1e-10), fn.__name__


# --------------------------------------------------------------------------- properties


def _column_loss(fn, q, positives, candidates):
    return fn(q, positives, candidates, reduction="none")


SOFTMAX_LOSSES = [sampled_softmax_loss, in_batch_softmax_loss, hard_negative_softmax_loss]


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    sizes=st.tuples(st.integers(1, 4), st.integers(1, 4), st.integers(1, 4)),
    per_row=st.booleans(),
    fn=st.sampled_from(SOFTMAX_LOSSES + [nce_loss, sigmoid_pairwise_loss]),
)
def test_concat_commutes_with_the_loss_up_to_column_order(seed, sizes, per_row, fn):
    b = 3
    g = gen(seed)
    q = torch.randn(b, 4, generator=g, dtype=D64)
    positives = random_set(b, 4, seed + 1, num_ids=6)
    a = random_set(sizes[0], 4, seed + 2, num_ids=6)
    m = random_set(sizes[1], 4, seed + 3, num_ids=6, per_row=b if per_row else None, masked=True)
    c = random_set(sizes[2], 4, seed + 4, num_ids=6, log_q=False)
    one = _column_loss(fn, q, positives, CandidateSet.concat(a, m, c))
    other = _column_loss(fn, q, positives, c + m + a)
    torch.testing.assert_close(one, other, rtol=1e-12, atol=1e-12)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), col=st.integers(0, 5), fn=st.sampled_from(SOFTMAX_LOSSES))
def test_a_masked_column_equals_a_deleted_one(seed, col, fn):
    b, c = 3, 6
    g = gen(seed)
    q = torch.randn(b, 4, generator=g, dtype=D64)
    positives = random_set(b, 4, seed + 1, num_ids=5)
    cands = random_set(c, 4, seed + 2, num_ids=5)
    valid = torch.ones(c, dtype=torch.bool)
    valid[col] = False
    keep = [j for j in range(c) if j != col]
    masked = _column_loss(fn, q, positives, cands.with_mask(valid))
    deleted = _column_loss(fn, q, positives, cands.select(torch.tensor(keep)))
    torch.testing.assert_close(masked, deleted, rtol=1e-12, atol=1e-12)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), shift=st.floats(-20, 20), fn=st.sampled_from(SOFTMAX_LOSSES))
def test_a_constant_on_every_log_q_changes_nothing_under_a_softmax(seed, shift, fn):
    b = 3
    g = gen(seed)
    q = torch.randn(b, 4, generator=g, dtype=D64)
    positives = random_set(b, 4, seed + 1, num_ids=5)
    cands = random_set(5, 4, seed + 2, num_ids=5, per_row=b)

    def moved(s):
        return CandidateSet(s.embeddings, s.ids, s.log_q + shift, s.mask)

    base = _column_loss(fn, q, positives, cands)
    torch.testing.assert_close(base, _column_loss(fn, q, moved(positives), moved(cands)))
    # ...and the logistic loss does move with it
    nce = _column_loss(nce_loss, q, positives, cands)
    if abs(shift) > 1e-3:
        assert not torch.allclose(nce, _column_loss(nce_loss, q, moved(positives), moved(cands)))


# --------------------------------------------------------------------------- peer semantics


def test_repeated_ids_mask_every_copy_or_tensorflow_s_last_copy():
    """A draw with replacement repeats the positive's id: TF removes one copy, we all."""
    g = gen(5)
    table = torch.randn(6, 3, generator=g, dtype=D64)
    q = torch.randn(2, 3, generator=g, dtype=D64)
    pos = CandidateSet.from_ids(torch.tensor([1, 4]), table, log_q=0.0)
    draw = CandidateSet.from_ids(torch.tensor([1, 3, 1, 1, 5]), table, log_q=-0.5)
    every = sampled_softmax_loss(q, pos, draw, reduction="none")
    tf = sampled_softmax_loss(q, pos, draw, repeated_hits="tensorflow", reduction="none")
    # brute force: row 0's positive id 1 is at columns 0, 2, 3; TF removes column 3 only
    o = lambda i, ids, lq: [float(q[i] @ table[y]) - lq for y in ids]  # noqa: E731
    pos0 = float(q[0] @ table[1])
    lse = lambda v: max(v) + math.log(sum(math.exp(x - max(v)) for x in v))  # noqa: E731
    want_every = lse([pos0] + o(0, [3, 5], -0.5)) - pos0
    want_tf = lse([pos0] + o(0, [1, 3, 1, 5], -0.5)) - pos0
    assert float(every[0]) == pytest.approx(want_every, rel=1e-12)
    assert float(tf[0]) == pytest.approx(want_tf, rel=1e-12)
    torch.testing.assert_close(every[1], tf[1])  # no repeat of id 4: the same


def _pairwise_reference(logits, pos):
    """pytorch-metric-learning NT-Xent with several positives, per row: each positive
    against the anchor's negatives only, averaged over the row's positives."""
    out = []
    for i in range(logits.shape[0]):
        row = [float(v) for v in logits[i]]
        ps = [j for j in range(len(row)) if pos[i, j]]
        ns = [j for j in range(len(row)) if not pos[i, j]]
        if not ps:
            out.append(0.0)
            continue
        terms = []
        for p in ps:
            vals = [row[p]] + [row[n] for n in ns]
            m = max(vals)
            terms.append(m + math.log(sum(math.exp(v - m) for v in vals)) - row[p])
        out.append(sum(terms) / len(terms))
    return torch.tensor(out, dtype=D64)


@pytest.mark.parametrize("seed", range(3))
def test_pairwise_multi_positive_matches_the_per_pair_reference(seed):
    logits = torch.randn(5, 8, generator=gen(seed), dtype=D64) * 2
    pos = torch.rand(5, 8, generator=gen(seed + 10)) < 0.35
    pos[4] = False  # a row without a positive
    out = multi_positive_cross_entropy(logits, pos, variant="pairwise")
    torch.testing.assert_close(out, _pairwise_reference(logits, pos), rtol=1e-12, atol=1e-12)
    # per pair ≤ SupCon's L_out (the other positives leave the denominator)
    sup = multi_positive_cross_entropy(logits, pos, variant="out")
    assert bool((out <= sup + 1e-12).all())
    # one positive per row: the three forms agree
    one = torch.zeros(5, 8, dtype=torch.bool)
    one[torch.arange(5), torch.arange(5)] = True
    for variant in ("in", "pairwise"):
        torch.testing.assert_close(
            multi_positive_cross_entropy(logits, one, variant=variant),
            multi_positive_cross_entropy(logits, one, variant="out"),
        )


def test_supcon_pairwise_is_the_per_pair_form_on_views():
    emb = torch.randn(8, 3, generator=gen(7), dtype=D64)
    labels = torch.tensor([0, 1, 0, 2, 1, 0, 2, 2])
    z = torch.nn.functional.normalize(emb, dim=1)
    eye = torch.eye(8, dtype=torch.bool)
    logits = (z @ z.T / 0.3).masked_fill(eye, -1e300)
    pos = (labels[:, None] == labels[None, :]) & ~eye
    want = _pairwise_reference(logits.masked_fill(eye, -1e300), pos).mean()
    got = supcon_loss(emb, labels, temperature=0.3, variant="pairwise")
    assert float(got) == pytest.approx(float(want), rel=1e-10)


# --------------------------------------------------------------------------- bad inputs


def test_nan_in_gives_nan_out():
    """unmasked() no longer treats NaN as masked: DCL, debiased, multi-positive propagate."""
    logits = torch.randn(3, 4, dtype=D64)
    logits[1, 2] = float("nan")
    assert bool(unmasked(logits)[1, 2])
    assert math.isnan(float(decoupled_cross_entropy(logits, torch.arange(3))[1]))
    pos = torch.zeros(3, 4, dtype=torch.bool)
    pos[:, 0] = True
    assert math.isnan(float(multi_positive_cross_entropy(logits, pos)[1]))
    g = gen(8)
    q = torch.randn(3, 2, generator=g, dtype=D64)
    q[1, 0] = float("nan")
    positives = CandidateSet(torch.randn(3, 2, generator=g, dtype=D64), torch.arange(3))
    for mode in ("keep", "remove", "corrected"):
        loss = hard_negative_softmax_loss(q, positives, positive_in_denominator=mode)
        assert math.isnan(float(loss)), mode
    assert math.isnan(float(hard_negative_softmax_loss(q, positives, tau_plus=0.1)))
    cands = CandidateSet(positives.embeddings, positives.ids)
    assert math.isnan(float(multi_positive_softmax_loss(q, cands, pos[:, :3])))
    assert math.isnan(float(in_batch_softmax_loss(q, positives)))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"hardness_alpha": -1.0}, "hardness_alpha must be >= 0"),
        ({"dclw_sigma": -1.0, "positive_in_denominator": "remove"}, "dclw_sigma must be > 0"),
    ],
)
def test_errors_name_the_argument_the_caller_passed(kwargs, message):
    q = torch.randn(3, 2)
    positives = CandidateSet(torch.randn(3, 2), torch.arange(3))
    with pytest.raises(ValueError, match=message):
        hard_negative_softmax_loss(q, positives, **kwargs)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_tables_with_repeated_ids_keep_finite_gradients(dtype):
    """Two overflowing partial gradients of one row: +big and −big, summed in float32."""
    big = 3e4 if dtype == torch.float16 else 1e38
    table = torch.zeros(4, 2, dtype=dtype)
    table[1] = 1.0
    table.requires_grad_(True)
    q = torch.tensor([[big, 0.0], [-big, 0.0]], dtype=torch.float32)
    pos = CandidateSet.from_ids(torch.tensor([0, 3]), table)
    draw = CandidateSet.from_ids(torch.tensor([1, 1, 2]), table)  # id 1 twice
    loss = sampled_softmax_loss(q, pos, draw, reduction="sum")
    loss.backward()
    assert torch.isfinite(loss)
    assert bool(torch.isfinite(table.grad).all())


def test_half_query_used_twice_is_cast_once():
    """Sampled losses score a half query twice (positives, candidates): one cast."""
    q = torch.tensor([[6e4, 0.0]], dtype=torch.float16, requires_grad=True)
    pos = CandidateSet(torch.tensor([[1.0, 0.0]]), torch.tensor([0]))
    cands = CandidateSet(torch.tensor([[-1.0, 0.0], [1.0, 0.0]]), torch.tensor([1, 2]))
    sampled_softmax_loss(q, pos, cands, temperature=1e-3).backward()
    assert bool(torch.isfinite(q.grad).all())


def test_multi_positive_on_e_e_in_half_precision_is_finite():
    e = (torch.randn(6, 3, generator=gen(9)) * 100).half().requires_grad_(True)
    labels = torch.tensor([0, 0, 1, 1, 2, 2])
    eye = torch.eye(6, dtype=torch.bool)
    pos = (labels[:, None] == labels[None, :]) & ~eye
    cands = CandidateSet(e, torch.arange(6))
    loss = multi_positive_softmax_loss(e, cands, pos, removed=eye, temperature=0.05)
    loss.backward()
    assert torch.isfinite(loss) and bool(torch.isfinite(e.grad.float()).all())


def test_validate_switch_turns_every_value_check_off():
    q = torch.randn(2, 2)
    with candidate_sampling.validate_args(False):
        s = CandidateSet(torch.randn(2, 2), torch.tensor([0, -1]), torch.tensor([0.0, math.nan]))
        out = in_batch_softmax_loss(q, s, sample_weight=torch.tensor([-1.0, 1.0]))
    assert math.isnan(float(out))


def _loss_modules():
    """Every public loss module of ``candidate_sampling.losses``."""
    return [
        getattr(candidate_sampling.losses, name)
        for name in candidate_sampling.losses.__all__
        if inspect.isclass(getattr(candidate_sampling.losses, name))
        and issubclass(getattr(candidate_sampling.losses, name), torch.nn.Module)
        and name not in ("Temperature",)
    ]


# constructor options a module shows under another name in its repr
_SHOWN_AS = {
    "SigmoidPairwiseLoss": {"scale": "temperature", "learnable": "temperature"},
    "RetrievalLoss": {
        "item_probabilities": "log_q_source",
        "frequency_estimator": "log_q_source",
    },
}


@pytest.mark.parametrize("module", _loss_modules(), ids=lambda m: m.__name__)
def test_every_loss_module_repr_shows_every_option(module):
    """The class of HardNegativeSoftmaxLoss hiding min_logit and remove_accidental_hits:
    an option a module stores and passes on but does not print is invisible when a run's
    configuration is logged."""
    params = inspect.signature(module.__init__).parameters
    options = [name for name, p in params.items() if name != "self" and p.kind is not p.VAR_KEYWORD]
    required = {  # the positional arguments some modules have no default for
        "sampler": candidate_sampling.sampling.UniformSampler(20),
        "num_samples": 3,
    }
    args = [required[name] for name in options if params[name].default is params[name].empty]
    text = repr(module(*args))
    for name in options:
        shown = _SHOWN_AS.get(module.__name__, {}).get(name, name)
        assert f"{shown}=" in text or f"({shown}):" in text, (module.__name__, name, text)


def test_hard_negative_module_passes_every_option_to_its_function():
    q = torch.randn(5, 3, generator=gen(1), dtype=D64)
    c = torch.randn(5, 3, generator=gen(2), dtype=D64)
    ids = torch.tensor([0, 1, 2, 0, 3])
    positives = CandidateSet(c, ids)
    options = {
        "temperature": 0.3,
        "tau_plus": 0.2,
        "min_logit": 3.0,  # a floor N e^3 above the debiased sum of these rows: it binds
        "remove_accidental_hits": False,
    }
    module = candidate_sampling.losses.HardNegativeSoftmaxLoss(**options)
    expected = hard_negative_softmax_loss(q, positives, **options)
    assert torch.equal(module(q, positives), expected)
    # each of the two options changes the value: the module must not drop them
    for name, default in (("min_logit", None), ("remove_accidental_hits", True)):
        other = hard_negative_softmax_loss(q, positives, **{**options, name: default})
        assert not torch.allclose(other, expected), name
