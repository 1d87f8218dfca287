"""Precision (issue 9 §6), the validation switch, dtype promotion, and bad-input paths.

* The half-precision grid: every loss of the package × τ × dtype × kind of input. Inputs
  are rounded to the dtype first; the reference is the same loss computed in float64 *on
  the rounded inputs*, so the grid measures the package's arithmetic, not the rounding of
  the inputs.
* ``validate_args(False)`` switches off the value checks (id ranges, finiteness,
  probability ranges) but never the shape and dtype checks.
* Mixed float dtypes are promoted (``torch.promote_types``), never rounded down.
* Every remaining bad-input path: the error type and a message naming the argument.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pytest
import torch

import candidate_sampling
import candidate_sampling.data.movielens
import candidate_sampling.data.synthetic
import candidate_sampling.losses.core
import candidate_sampling.eval.baselines
import candidate_sampling.models
import candidate_sampling.sampling.hashing
import candidate_sampling.train
from candidate_sampling import CandidateSet
from candidate_sampling.sampling.frequency import (
    StreamingFrequencyEstimator,
    inclusion_probability,
    item_counts,
    log_expected_count,
    mixed_log_q,
)
from candidate_sampling.eval import count_above, retrieval_metrics
from candidate_sampling.losses import (
    InfoNCELoss,
    NTXentLoss,
    RetrievalLoss,
    SampledSoftmaxLoss,
    accidental_hits,
    chunked_softmax_cross_entropy,
    correct_logits,
    corrected_logq_weights,
    debiased_cross_entropy,
    decoupled_cross_entropy,
    guide_false_negative_mask,
    hard_negative_mining,
    hard_negative_softmax_loss,
    hardness_weighted_logits,
    in_batch_softmax_loss,
    info_nce_loss,
    logistic_terms,
    mask_logits,
    nce_from_scores,
    nce_loss,
    negative_sampling_loss,
    nt_bxent_loss,
    nt_xent_loss,
    positive_column_cross_entropy,
    reduce_loss,
    sampled_logistic_loss,
    sampled_softmax_from_scores,
    sampled_softmax_loss,
    sigmoid_pair_terms,
    soft_nearest_neighbor_loss,
    softmax_cross_entropy,
    supcon_loss,
)
from candidate_sampling.scale.memory import CrossBatchMemory
from candidate_sampling.scale.mining import brute_force_top_k
from candidate_sampling.sampling.samplers import (
    UniformSampler,
    UnigramSampler,
    build_alias_table,
)

D64 = torch.float64


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# =========================================================================== validation switch


def test_validation_is_on_by_default_and_the_context_manager_restores_it():
    assert candidate_sampling.get_validate_args() is True
    with candidate_sampling.validate_args(False):
        assert candidate_sampling.get_validate_args() is False
        with candidate_sampling.validate_args(True):
            assert candidate_sampling.get_validate_args() is True
        assert candidate_sampling.get_validate_args() is False
    assert candidate_sampling.get_validate_args() is True
    with pytest.raises(RuntimeError, match="inside"), candidate_sampling.validate_args(False):
        raise RuntimeError("inside")
    assert candidate_sampling.get_validate_args() is True  # restored after an exception too
    candidate_sampling.set_validate_args(False)
    assert candidate_sampling.get_validate_args() is False
    candidate_sampling.set_validate_args(True)


@pytest.mark.parametrize("value", [0, 1, "False", None, 1.0, torch.tensor(False)])
def test_set_validate_args_rejects_non_bools(value):
    with pytest.raises(ValueError, match="value must be a bool"):
        candidate_sampling.set_validate_args(value)
    with (
        pytest.raises(ValueError, match="value must be a bool"),
        candidate_sampling.validate_args(value),
    ):
        pass
    assert candidate_sampling.get_validate_args() is True


def not_a_value_error(call: Callable[[], object]) -> None:
    """``call`` must not raise the package's ValueError: it may succeed or raise torch's own."""
    try:
        call()
    except ValueError as err:  # pragma: no cover - the failure path
        pytest.fail(f"the package still checked a value: {err}")
    except (IndexError, RuntimeError):
        pass


def test_out_of_range_ids_are_not_checked_with_validation_off():
    logits = torch.randn(2, 3)
    bad_ids = torch.tensor([0, 3])
    classes = torch.randn(5, 4)
    with pytest.raises(ValueError, match="positive_ids must lie in"):
        softmax_cross_entropy(logits, bad_ids)
    with pytest.raises(ValueError, match="ids must lie in"):
        CandidateSet.from_ids(torch.tensor([1, 7]), classes)
    with pytest.raises(ValueError, match="ids must be >= 0"):
        CandidateSet(classes[:2], torch.tensor([1, -7]))
    with pytest.raises(ValueError, match="ids must lie in"):
        item_counts(torch.tensor([0, 5]), 3)
    with pytest.raises(ValueError, match="probs must lie in"):
        inclusion_probability(torch.tensor([1.5]), 2)
    with pytest.raises(ValueError, match="positive_columns must lie in"):
        positive_column_cross_entropy(logits, torch.tensor([0, 7]))
    with candidate_sampling.validate_args(False):
        not_a_value_error(lambda: softmax_cross_entropy(logits, bad_ids))
        not_a_value_error(lambda: CandidateSet.from_ids(torch.tensor([1, 7]), classes))
        assert CandidateSet(classes[:2], torch.tensor([1, -7])).ids[1] == -7
        not_a_value_error(lambda: positive_column_cross_entropy(logits, torch.tensor([0, 7])))
        # pure value checks: without them the call goes through
        assert item_counts(torch.tensor([0, 5]), 3).shape == (6,)
        assert math.isnan(float(inclusion_probability(torch.tensor([1.5]), 2)))


def test_shape_and_dtype_errors_still_raise_with_validation_off():
    query, classes = torch.randn(2, 4), torch.randn(5, 4)
    positives = CandidateSet.from_ids(torch.tensor([0, 1]), classes)
    sampled = CandidateSet.from_ids(torch.tensor([1, 3]), classes)
    with candidate_sampling.validate_args(False):
        with pytest.raises(ValueError, match="batch size"):
            softmax_cross_entropy(torch.randn(2, 3), torch.tensor([0]))
        with pytest.raises(ValueError, match="positive_ids must be an integer"):
            softmax_cross_entropy(torch.randn(2, 3), torch.tensor([0.0, 1.0]))
        with pytest.raises(ValueError, match="embedding size d"):
            sampled_softmax_loss(query[:, :3], positives, sampled)
        with pytest.raises(ValueError, match=r"positives must have B = 3 columns"):
            in_batch_softmax_loss(torch.randn(3, 4), positives)
        with pytest.raises(ValueError, match="logits must have shape"):
            positive_column_cross_entropy(torch.randn(3), 0)
        with pytest.raises(ValueError, match="positive_columns must be an integer"):
            positive_column_cross_entropy(torch.randn(3, 2), torch.zeros(3))
        with pytest.raises(ValueError, match="temperature must be > 0"):
            info_nce_loss(query, query, temperature=-1.0)
        with pytest.raises(ValueError, match="reduction"):
            nt_xent_loss(query, query, reduction="avg")


# =========================================================================== dtype promotion


def sampled_problem(seed=0):
    g = gen(seed)
    positive_ids = torch.tensor([0, 3, 5])
    return {
        "query": torch.randn(3, 4, generator=g, dtype=D64),
        "classes": torch.randn(8, 4, generator=g, dtype=D64),
        "positive_ids": positive_ids,
        "class_bias": torch.randn(8, generator=g, dtype=D64),
    }


SAMPLED = torch.tensor([1, 3, 6])


def sampled_call(fn, query, classes, positive_ids, class_bias, **options):
    """``fn`` with the positives (log Q −0.7) and the draw (ids 1, 3, 6; log Q −1.1)."""
    positives = CandidateSet.from_ids(positive_ids, classes, log_q=-0.7, class_bias=class_bias)
    sampled = CandidateSet.from_ids(SAMPLED, classes, log_q=-1.1, class_bias=class_bias)
    return fn(query, positives, sampled, **options)


def as_dtypes(inputs, **dtypes):
    return {k: v.to(dtypes[k]) if k in dtypes else v for k, v in inputs.items()}


MIXES = [
    {"query": torch.float32},
    {"classes": torch.float32},
    {"class_bias": torch.float32},
    {"query": torch.float32, "classes": torch.float32},  # only the bias is float64
    {"query": torch.float16, "classes": torch.float32},
]


@pytest.mark.parametrize("mix", MIXES, ids=lambda m: ",".join(f"{k}={v}" for k, v in m.items()))
@pytest.mark.parametrize(
    "fn", [sampled_softmax_loss, nce_loss, negative_sampling_loss, sampled_logistic_loss]
)
def test_sampled_losses_promote_mixed_dtypes(fn, mix):
    """A float64 operand with a lower-precision one gives the float64 loss of the same values."""
    problem = sampled_problem()
    mixed = as_dtypes(problem, **mix)
    all64 = {
        k: v.double() if torch.is_tensor(v) and v.is_floating_point() else v
        for k, v in mixed.items()
    }  # the same (rounded) values, all in float64
    out = sampled_call(fn, **mixed, temperature=0.5)
    assert out.dtype == D64
    want = sampled_call(fn, **all64, temperature=0.5)
    torch.testing.assert_close(out, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("fn", [sampled_softmax_from_scores, nce_from_scores])
def test_from_scores_promote_mixed_dtypes(fn):
    g = gen(1)
    pos = torch.randn(3, generator=g, dtype=D64)
    neg = torch.randn(3, 5, generator=g).to(torch.float32)
    out = fn(pos, neg, temperature=0.3)
    assert out.dtype == D64
    torch.testing.assert_close(out, fn(pos, neg.double(), temperature=0.3), rtol=1e-12, atol=0)
    out = fn(pos.half(), neg, temperature=0.3)
    assert out.dtype == torch.float32


def test_in_batch_and_retrieval_losses_promote_mixed_dtypes():
    g = gen(2)
    query = torch.randn(4, 3, generator=g, dtype=D64)
    candidates = torch.randn(6, 3, generator=g).float()
    ids = torch.tensor([0, 1, 0, 2, 5, 1])
    log_q = torch.randn(6, generator=g, dtype=D64)

    def sets(c):
        return CandidateSet(c[:4], ids[:4], log_q[:4]), CandidateSet(c[4:], ids[4:], log_q[4:])

    out = in_batch_softmax_loss(query, *sets(candidates), temperature=0.2)
    assert out.dtype == D64
    want = in_batch_softmax_loss(query, *sets(candidates.double()), temperature=0.2)
    torch.testing.assert_close(out, want, rtol=1e-12, atol=0)
    # RetrievalLoss: float64 queries, float32 positives, a float64 item encoder for extras
    table = torch.randn(10, 3, generator=g, dtype=D64)
    probs = torch.full((10,), 0.1)
    for positives, encoder_dtype in ((candidates[:4], D64), (candidates[:4].half(), torch.float32)):
        loss = RetrievalLoss(
            temperature=0.2, item_probabilities=probs, sampler=UniformSampler(10), num_samples=3
        )
        out = loss(
            query,
            positives,
            ids[:4],
            item_encoder=lambda i, dt=encoder_dtype: table[i].to(dt),
            generator=gen(3),
        )
        assert out.dtype == D64
        want = loss(
            query,
            positives.double(),
            ids[:4],
            item_encoder=lambda i, dt=encoder_dtype: table[i].to(dt).double(),
            generator=gen(3),
        )
        torch.testing.assert_close(out, want, rtol=1e-12, atol=0)


def test_contrastive_losses_promote_mixed_dtypes():
    g = gen(4)
    a = torch.randn(5, 3, generator=g, dtype=D64)
    b = torch.randn(5, 3, generator=g).float()
    for options in ({}, {"symmetric": True}, {"normalize": True}):
        out = info_nce_loss(a, b, temperature=0.1, **options)
        assert out.dtype == D64
        want = info_nce_loss(a, b.double(), temperature=0.1, **options)
        torch.testing.assert_close(out, want, rtol=1e-12, atol=0)
    for first, second in ((a, b), (b, a), (a, b.half())):
        out = nt_xent_loss(first, second, temperature=0.1)
        assert out.dtype == D64
        want = nt_xent_loss(first.double(), second.double(), temperature=0.1)
        torch.testing.assert_close(out, want, rtol=1e-12, atol=0)
    assert InfoNCELoss(temperature=0.1)(a, b).dtype == D64
    assert NTXentLoss(temperature=0.1)(b, a).dtype == D64


def test_brute_force_top_k_promotes_half_and_mixed_dtypes():
    # float16 scores overflowed to inf (ties, wrong order); float32 x float16 was a torch error
    g = gen(5)
    queries = (torch.randn(4, 3, generator=g) * 300).half()
    items = (torch.randn(10, 3, generator=g) * 300).half()
    want_scores, want_ids = torch.topk(queries.double() @ items.double().T, 3, dim=1)
    for first, second in ((queries, items), (queries.float(), items), (queries, items.float())):
        scores, ids = brute_force_top_k(first, second, 3, chunk_size=3)
        assert scores.dtype == torch.float32 and torch.isfinite(scores).all()
        assert torch.equal(ids, want_ids)
        torch.testing.assert_close(scores.double(), want_scores, rtol=1e-6, atol=0)
    scores, ids = brute_force_top_k(queries.double(), items.float(), 3)
    assert scores.dtype == D64 and torch.equal(ids, want_ids)
    torch.testing.assert_close(scores, want_scores, rtol=1e-12, atol=0)


# =========================================================================== bad inputs


@pytest.mark.parametrize("name", ["batch_probs", "extra_probs"])
@pytest.mark.parametrize("bad", [float("nan"), -0.1, 1.5])
def test_mixed_log_q_rejects_bad_probabilities(name, bad):
    probs = {"batch_probs": torch.tensor([0.1, 0.2]), "extra_probs": torch.tensor([0.5, 0.5])}
    probs[name] = torch.tensor([0.1, bad])
    with pytest.raises(ValueError, match=rf"{name} must lie in \[0, 1\], got {bad}"):
        mixed_log_q(**probs, batch_size=4, num_samples=2)


def test_mixed_log_q_other_bad_inputs():
    q, r = torch.tensor([0.1, 0.2]), torch.tensor([0.5, 0.5])
    with pytest.raises(ValueError, match="form must be one of"):
        mixed_log_q(q, r, batch_size=4, num_samples=2, form="probability")
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        mixed_log_q(q, r, batch_size=0, num_samples=2)
    with pytest.raises(ValueError, match="num_samples must be >= 0"):
        mixed_log_q(q, r, batch_size=4, num_samples=-1)
    with pytest.raises(ValueError, match="same shape"):
        mixed_log_q(q, r[:1], batch_size=4, num_samples=2)
    with pytest.raises(ValueError, match="batch_probs must be a floating-point"):
        mixed_log_q(torch.tensor([0, 1]), r, batch_size=4, num_samples=2)
    with pytest.raises(ValueError, match="Q\\* must be > 0"):
        mixed_log_q(torch.tensor([0.0, 0.2]), torch.tensor([0.0, 0.5]), batch_size=4, num_samples=2)
    with pytest.raises(TypeError):
        mixed_log_q(q, r, 4, 2)  # batch_size and num_samples are keyword-only


@pytest.mark.parametrize(
    "weights,match",
    [
        (torch.tensor([1.0, -0.5, 2.0]), r"weights must be >= 0, got minimum -0.5"),
        (torch.zeros(4), "weights must not all be zero"),
        (torch.tensor([1.0, float("nan")]), "weights must be finite"),
        (torch.tensor([1.0, float("inf")]), "weights must be finite"),
        (torch.tensor([1.0, -float("inf")]), "weights must be finite"),
        (torch.tensor([]), r"weights must be a non-empty tensor of shape \(n,\), got \(0,\)"),
        (torch.ones(2, 3), r"weights must be a non-empty tensor of shape \(n,\), got \(2, 3\)"),
        (torch.tensor(1.0), r"weights must be a non-empty tensor of shape \(n,\), got \(\)"),
        ([1.0, 2.0], r"weights must be a non-empty tensor of shape \(n,\), got None"),
        (torch.tensor([True, False]), "weights must be a real tensor"),
    ],
)
def test_build_alias_table_rejects_bad_weights(weights, match):
    with pytest.raises(ValueError, match=match):
        build_alias_table(weights)


@pytest.mark.parametrize(
    "probs,kwargs,match",
    [
        (torch.tensor([0.1, 1.5]), {}, r"probs must lie in \[0, 1\], got 1.5"),
        (torch.tensor([-0.2, 0.5]), {}, r"probs must lie in \[0, 1\], got -0.2"),
        (torch.tensor([0.1, float("nan")]), {}, r"probs must lie in \[0, 1\], got nan"),
        (torch.tensor([0, 1]), {}, "probs must be a floating-point tensor"),
        (torch.tensor([0.1]), {"num_tries": 2}, "num_tries must be >= 3, got 2"),
        (
            torch.tensor([0.1]),
            {"num_tries": 5, "unique": False},
            r"num_tries must equal num_samples \(3\) when unique=False, got 5",
        ),
        (torch.tensor([0.1]), {"num_samples": 0, "num_tries": 0}, "num_samples must be >= 1"),
        (torch.tensor([0.1]), {"num_samples": 3.0}, "num_samples must be an int"),
        (torch.tensor([0.1]), {"unique": 1}, "unique must be a bool"),
    ],
)
def test_log_expected_count_rejects_bad_inputs(probs, kwargs, match):
    options = {"num_samples": 3, "num_tries": 3, "unique": True} | kwargs
    with pytest.raises(ValueError, match=match):
        log_expected_count(probs, **options)


def test_log_expected_count_arguments_are_keyword_only():
    with pytest.raises(TypeError):
        log_expected_count(torch.tensor([0.1]), 3, 3, True)


def test_draw_without_positive_log_q_asks_for_positive_ids():
    problem = sampled_problem()
    sampler = UnigramSampler(torch.arange(8, 0, -1).double())
    draw = sampler.sample(3, unique=True, generator=gen(0))  # no positive_ids
    assert draw.positive_log_q is None
    with pytest.raises(ValueError, match=r"without positive_ids.*positive_ids=\.\.\."):
        CandidateSet.positives_of(problem["positive_ids"], problem["classes"], draw=draw)
    # without the correction the positives' log Q is not needed
    positives = CandidateSet.positives_of(
        problem["positive_ids"], problem["classes"], draw=draw, correct=False
    )
    sampled = CandidateSet.from_draw(draw, problem["classes"], correct=False)
    for fn in (sampled_softmax_loss, nce_loss, negative_sampling_loss):
        assert torch.isfinite(fn(problem["query"], positives, sampled))


def test_draw_made_for_other_positive_ids_is_an_error():
    problem = sampled_problem()
    sampler = UnigramSampler(torch.arange(8, 0, -1).double())
    draw = sampler.sample(3, positive_ids=torch.tensor([0, 3, 5, 1]), generator=gen(0))
    with pytest.raises(ValueError, match="draw was made for positive_ids of shape"):
        CandidateSet.positives_of(problem["positive_ids"], problem["classes"], draw=draw)


def test_draw_whose_positive_ids_were_overwritten_in_place_is_an_error():
    # a reused id buffer: the draw holds the same tensor, so only its version tells
    sampler = UnigramSampler(torch.arange(8, 0, -1).double())
    ids = torch.tensor([0, 3, 5, 1])
    draw = sampler.sample(3, positive_ids=ids, generator=gen(0))
    draw.check_positive_ids(ids)  # untouched: fine
    ids.copy_(torch.tensor([2, 2, 4, 6]))
    with pytest.raises(ValueError, match="overwritten in place"):
        draw.check_positive_ids(ids)
    with torch.inference_mode():  # inference tensors keep no version: not refused
        frozen = torch.tensor([0, 3, 5, 1])
        sampler.sample(3, positive_ids=frozen, generator=gen(0)).check_positive_ids(frozen)


def test_more_positives_than_rows_is_an_error():
    problem = sampled_problem()
    positives = CandidateSet.from_ids(torch.tensor([0, 3, 5, 1]), problem["classes"])
    sampled = CandidateSet.from_ids(SAMPLED, problem["classes"])
    with pytest.raises(ValueError, match=r"positives must hold B·T columns"):
        sampled_softmax_loss(problem["query"], positives, sampled)
    with pytest.raises(ValueError, match=r"positives must have B = 3 columns"):
        in_batch_softmax_loss(problem["query"], positives, sampled)


@pytest.mark.parametrize("bad", [-0.5, 1.01, float("nan"), float("inf")])
def test_inclusion_probability_rejects_probabilities_outside_0_1(bad):
    with pytest.raises(ValueError, match=r"probs must lie in \[0, 1\]"):
        inclusion_probability(torch.tensor([0.3, bad], dtype=D64), 5)


# =========================================================================== half-precision grid
#
# Tolerance. Each case rounds its inputs to ``dtype`` and computes the reference in float64
# on those rounded values, so input rounding is not part of the error. The package upcasts
# float16 / bfloat16 to float32 *before* any arithmetic (spec: "scores and logits in at
# least float32"), hence the only error left is float32 arithmetic, for all three dtypes:
#
# * a score s = a·b (d terms) has error ≤ γ_d Σ|a_c b_c| ≤ d·u·|a||b| (u = float32 unit
#   roundoff = eps/2; Higham, Thm 3.1), and so ≤ d·u·S with S the score magnitude
#   (max |a||b| for dot products, 1 for cosines, (|a| + |b|)² for squared distances);
# * the logit o = s/τ − log Q adds one rounding each: |δo| ≤ (d + 2)·u·(S/τ + L),
#   L = max |log Q|; so every logit is known to (d + 2)·u·M with M = S/τ + L + 1;
# * log-sum-exp and cross-entropy over C columns, or the sum of C logistic terms, carry
#   the logits' error through with weights that sum to ≤ 2 per term, plus ~C·u·M of
#   their own rounding; the mean over B rows does not grow it.
#
# So |loss − loss₆₄| ≤ K·u·M with K ≈ 2(d + 2) + 2C; with d = 4 and C ≤ 14 columns here,
# K = 64 covers it, i.e. a relative tolerance of 64·u = 32·eps₃₂ ≈ 4e-6 of M. A loss that
# did its arithmetic in the half dtype itself would miss by eps_half / eps₃₂ = 8192
# (float16) or 65536 (bfloat16) times more and fail.
#
# Finiteness: wherever the float64 loss of the rounded inputs is finite and fits in
# float32 (the loss is returned in float32), the package's loss must be finite; each
# gradient entry must be finite wherever the float64 gradient entry is finite and fits
# in the *input* dtype (autograd returns a float16 leaf's gradient in float16, so a true
# gradient above 65504 cannot be finite there, whatever the loss does).

U32 = torch.finfo(torch.float32).eps / 2
K_ERR = 64
B, D, NUM_ITEMS, NUM_EXTRA = 4, 4, 10, 3
TEMPERATURES = (1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0)
DTYPES = (torch.float32, torch.float16, torch.bfloat16)
INPUT_KINDS = ("random", "far_apart", "identical_rows", "positives_far")
POSITIVE_IDS = torch.tensor([0, 1, 2, 3])  # ids of the rows' positives (distinct)
DUPLICATE_IDS = torch.tensor([3, 1, 3, 2])  # positive ids with a duplicate (rows 0, 2)


def base_inputs(kind: str) -> dict[str, torch.Tensor]:
    """float32 ``query`` (B, d), ``positives`` (B, d), ``items`` (|V|, d) of one kind."""
    g = gen(0)
    query = torch.randn(B, D, generator=g)
    positives = torch.randn(B, D, generator=g)
    items = torch.randn(NUM_ITEMS, D, generator=g)
    if kind == "far_apart":
        query, positives, items = query * 1e3, positives * 1e3, items * 1e3
    elif kind == "identical_rows":
        row = query[0]
        query, positives, items = (row.expand(n, D).clone() for n in (B, B, NUM_ITEMS))
    elif kind == "positives_far":
        positives = -1e3 * query  # each row's positive is far from its anchor
    return {"query": query, "positives": positives, "items": items}


def norms(t: torch.Tensor) -> float:
    return float(t.detach().double().norm(dim=-1).max())


def max_abs(*tensors: torch.Tensor) -> float:
    return max(float(t.detach().double().abs().max()) for t in tensors)


@dataclass
class Case:
    """One loss call: ``leaves`` get gradients, ``constants`` (log Q) are only rounded."""

    leaves: dict[str, torch.Tensor]
    call: Callable[[dict[str, torch.Tensor]], torch.Tensor]
    magnitude: Callable[[dict[str, torch.Tensor]], float]  # M = S/τ + L (rounded inputs)
    constants: dict[str, torch.Tensor] = field(default_factory=dict)


SAMPLED_IDS = torch.tensor([0, 5, 2, 6])  # ids 0 and 2 are rows 0 and 2's positives: hits
SAMPLED_LOG_Q = torch.tensor([-1.5, -0.3, -2.0, -0.9])
POSITIVE_LOG_Q = torch.tensor([-1.2, -0.4, -2.2, -0.7])
CANDIDATE_IDS = torch.cat([DUPLICATE_IDS, torch.tensor([1, 9, 3])])  # extras hit rows 1, 0, 2
CANDIDATE_LOG_Q = torch.tensor([-0.5, -1.0, -0.5, -2.0, -1.0, -3.0, -0.5])
ITEM_PROBS = torch.linspace(1.0, 2.0, NUM_ITEMS) / torch.linspace(1.0, 2.0, NUM_ITEMS).sum()


def sampled_case(fn, tau):
    def build(base):
        classes = torch.cat([base["positives"], base["items"][:NUM_EXTRA]])  # |V| = 7
        bias = torch.linspace(-1.0, 1.0, classes.shape[0])
        return Case(
            leaves={"query": base["query"], "classes": classes, "class_bias": bias},
            constants={"sampled_log_q": SAMPLED_LOG_Q, "positive_log_q": POSITIVE_LOG_Q},
            call=lambda t: fn(
                t["query"],
                CandidateSet.from_ids(
                    POSITIVE_IDS, t["classes"], log_q=t["positive_log_q"],
                    class_bias=t["class_bias"],
                ),
                CandidateSet.from_ids(
                    SAMPLED_IDS, t["classes"], log_q=t["sampled_log_q"],
                    class_bias=t["class_bias"],
                ),
                temperature=tau,
            ),
            magnitude=lambda t: (
                (norms(t["query"]) * norms(t["classes"]) + max_abs(t["class_bias"])) / tau
                + max_abs(t["sampled_log_q"], t["positive_log_q"])
            ),
        )

    return build


def from_scores_case(fn, tau):
    def build(base):
        q, pos, neg = (base[k].double() for k in ("query", "positives", "items"))
        mask = SAMPLED_IDS[None, :NUM_EXTRA] == POSITIVE_IDS[:, None]
        return Case(
            leaves={
                "positive_scores": (q * pos).sum(1).float(),
                "negative_scores": (q @ neg[:NUM_EXTRA].T).float(),
            },
            constants={"positive_log_q": POSITIVE_LOG_Q, "negative_log_q": SAMPLED_LOG_Q[:3]},
            call=lambda t: fn(
                t["positive_scores"],
                t["negative_scores"],
                positive_log_q=t["positive_log_q"],
                negative_log_q=t["negative_log_q"],
                mask=mask,
                temperature=tau,
            ),
            magnitude=lambda t: (
                max_abs(t["positive_scores"], t["negative_scores"]) / tau
                + max_abs(t["positive_log_q"], t["negative_log_q"])
            ),
        )

    return build


def softmax_case(tau):
    def build(base):
        classes = torch.cat([base["positives"], base["items"]]).double()
        logits = (base["query"].double() @ classes.T / tau).float()  # the input is logits
        return Case(
            leaves={"logits": logits},
            call=lambda t: softmax_cross_entropy(t["logits"], POSITIVE_IDS),
            magnitude=lambda t: max_abs(t["logits"]),
        )

    return build


def in_batch_case(tau, extras):
    def build(base):
        if not extras:
            return Case(
                leaves={"query": base["query"], "candidates": base["positives"]},
                call=lambda t: in_batch_softmax_loss(
                    t["query"], CandidateSet(t["candidates"], POSITIVE_IDS), temperature=tau
                ),
                magnitude=lambda t: norms(t["query"]) * norms(t["candidates"]) / tau,
            )
        candidates = torch.cat([base["positives"], base["items"][:NUM_EXTRA]])
        return Case(
            leaves={"query": base["query"], "candidates": candidates},
            constants={"log_q": CANDIDATE_LOG_Q},
            call=lambda t: in_batch_softmax_loss(
                t["query"],
                CandidateSet(t["candidates"][:B], CANDIDATE_IDS[:B], t["log_q"][:B]),
                CandidateSet(t["candidates"][B:], CANDIDATE_IDS[B:], t["log_q"][B:]),
                temperature=tau,
                remove_accidental_hits=True,
            ),
            magnitude=lambda t: (
                norms(t["query"]) * norms(t["candidates"]) / tau + max_abs(t["log_q"])
            ),
        )

    return build


def retrieval_case(tau):
    sampler = UniformSampler(NUM_ITEMS)
    log_q_max = float(torch.log(B * ITEM_PROBS.double() + NUM_EXTRA / NUM_ITEMS).abs().max())

    def build(base):
        loss = RetrievalLoss(
            temperature=tau, item_probabilities=ITEM_PROBS, sampler=sampler, num_samples=NUM_EXTRA
        )
        return Case(
            leaves={"query": base["query"], "positives": base["positives"], "items": base["items"]},
            call=lambda t: loss(
                t["query"],
                t["positives"],
                DUPLICATE_IDS,
                item_encoder=lambda ids: t["items"][ids],
                generator=gen(5),
            ),
            magnitude=lambda t: (
                norms(t["query"]) * max(norms(t["positives"]), norms(t["items"])) / tau + log_q_max
            ),
        )

    return build


def contrastive_case(name, tau):
    labels = torch.arange(B).repeat(2)
    pairs = torch.stack([torch.arange(2 * B), (torch.arange(2 * B) + B) % (2 * B)], dim=1)

    def build(base):
        leaves = {"view1": base["query"], "view2": base["positives"]}
        both = lambda t: torch.cat([t["view1"], t["view2"]])
        cosine = lambda t: 1.0 / tau
        if name == "info_nce_loss":
            return Case(
                leaves,
                lambda t: info_nce_loss(t["view1"], t["view2"], temperature=tau),
                lambda t: norms(t["view1"]) * norms(t["view2"]) / tau,
            )
        if name == "nt_xent_loss":
            return Case(
                leaves, lambda t: nt_xent_loss(t["view1"], t["view2"], temperature=tau), cosine
            )
        if name == "nt_bxent_loss":
            return Case(leaves, lambda t: nt_bxent_loss(both(t), pairs, temperature=tau), cosine)
        if name == "supcon_loss":
            return Case(leaves, lambda t: supcon_loss(both(t), labels, temperature=tau), cosine)
        return Case(
            leaves,
            lambda t: soft_nearest_neighbor_loss(both(t), labels, temperature=tau),
            lambda t: (2 * norms(both(t))) ** 2 / tau,
        )

    return build


LOSSES: dict[str, Callable[[float], Callable[[dict], Case]]] = {
    "softmax_cross_entropy": softmax_case,
    "sampled_softmax_loss": lambda tau: sampled_case(sampled_softmax_loss, tau),
    "nce_loss": lambda tau: sampled_case(nce_loss, tau),
    "negative_sampling_loss": lambda tau: sampled_case(negative_sampling_loss, tau),
    "sampled_logistic_loss": lambda tau: sampled_case(sampled_logistic_loss, tau),
    "sampled_softmax_from_scores": lambda tau: from_scores_case(sampled_softmax_from_scores, tau),
    "nce_from_scores": lambda tau: from_scores_case(nce_from_scores, tau),
    "in_batch_softmax_loss": lambda tau: in_batch_case(tau, extras=False),
    "in_batch_softmax_loss_mixed": lambda tau: in_batch_case(tau, extras=True),
    "RetrievalLoss": retrieval_case,
    "info_nce_loss": lambda tau: contrastive_case("info_nce_loss", tau),
    "nt_xent_loss": lambda tau: contrastive_case("nt_xent_loss", tau),
    "nt_bxent_loss": lambda tau: contrastive_case("nt_bxent_loss", tau),
    "supcon_loss": lambda tau: contrastive_case("supcon_loss", tau),
    "soft_nearest_neighbor_loss": lambda tau: contrastive_case("soft_nearest_neighbor_loss", tau),
}


def run_case(case: Case, dtype: torch.dtype):
    """Loss and gradients of the leaves, on inputs of ``dtype``."""
    leaves = {k: v.to(dtype).requires_grad_(True) for k, v in case.leaves.items()}
    constants = {k: v.to(dtype) for k, v in case.constants.items()}
    loss = case.call({**leaves, **constants})
    grads = torch.autograd.grad(loss, list(leaves.values()), allow_unused=True)
    grads = [torch.zeros_like(v) if g is None else g for v, g in zip(leaves.values(), grads)]
    return loss, grads, {**leaves, **constants}


@pytest.mark.parametrize("kind", INPUT_KINDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("tau", TEMPERATURES)
@pytest.mark.parametrize("loss_name", LOSSES)
def test_precision_grid(loss_name, tau, dtype, kind):
    case = LOSSES[loss_name](tau)(base_inputs(kind))
    loss, grads, inputs = run_case(case, dtype)
    # the reference: float64 arithmetic on the same rounded inputs
    rounded = Case(
        leaves={k: v.to(dtype).double() for k, v in case.leaves.items()},
        constants={k: v.to(dtype).double() for k, v in case.constants.items()},
        call=case.call,
        magnitude=case.magnitude,
    )
    ref_loss, ref_grads, _ = run_case(rounded, D64)
    assert loss.dtype == torch.float32
    ref = float(ref_loss.detach())
    if not math.isfinite(ref) or abs(ref) >= torch.finfo(torch.float32).max:
        return  # no finite answer to match (e.g. float16 scores that rounded to inf)
    assert math.isfinite(float(loss.detach())), f"loss {float(loss.detach())}, float64 {ref}"
    limit = torch.finfo(dtype).max / 2
    for name, grad, ref_grad in zip(case.leaves, grads, ref_grads):
        should_be_finite = torch.isfinite(ref_grad) & (ref_grad.abs() < limit)
        assert bool(torch.isfinite(grad[should_be_finite]).all()), f"gradient of {name}"
    magnitude = 1.0 + case.magnitude({k: v.double() for k, v in inputs.items()})
    error = abs(float(loss.detach()) - ref)
    assert error <= K_ERR * U32 * magnitude, (
        f"|loss - loss64| = {error:.3g} > {K_ERR} u M = {K_ERR * U32 * magnitude:.3g} "
        f"(loss64 = {ref:.6g}, M = {magnitude:.3g})"
    )


# =========================================================================== checks at the entries
#
# One test per class of defect: a length, shape or range the public entry did not check
# (a wrong answer, a wrapped index or torch's error naming nothing), a value check that
# ignored ``validate_args(False)``, a type error that did not name the argument.

Q4 = torch.randn(4, 3, generator=gen(7))
TABLE = torch.randn(10, 3, generator=gen(8))
PID = torch.tensor([0, 1, 2, 3])


def test_class_bias_length_must_be_the_number_of_classes():
    ids = torch.tensor([0, 9])
    for bias in (torch.zeros(5), torch.zeros(50)):  # too short (index error), too long (silent)
        with pytest.raises(ValueError, match=r"\|V\| must agree.*class_bias=" + str(len(bias))):
            CandidateSet.from_ids(ids, TABLE, class_bias=bias)
    with pytest.raises(ValueError, match="class_bias=3"):
        CandidateSet.positives_of(PID, TABLE, class_bias=torch.zeros(3))
    sampler = UniformSampler(10)
    draw = sampler.sample(3, generator=gen(0))
    with pytest.raises(ValueError, match="class_bias=50"):
        CandidateSet.from_draw(draw, TABLE, class_bias=torch.zeros(50))
    loss = SampledSoftmaxLoss(sampler, 3)
    with pytest.raises(ValueError, match="class_bias=3"):
        loss(Q4, TABLE, PID, class_bias=torch.zeros(3), generator=gen(0))
    # an item encoder has no |V|: every id must index class_bias
    encoder = torch.nn.Embedding(10, 3)
    with pytest.raises(ValueError, match=r"ids \(indices into class_bias of length 5\) must lie"):
        CandidateSet.from_ids(ids, encoder, class_bias=torch.zeros(5))
    assert CandidateSet.from_ids(ids, encoder, class_bias=torch.arange(10.0)).bias.tolist() == [
        0.0,
        9.0,
    ]
    with candidate_sampling.validate_args(False):  # the encoder's id range is a value check
        not_a_value_error(lambda: CandidateSet.from_ids(ids, encoder, class_bias=torch.zeros(5)))


def test_with_mask_checks_the_rows_as_the_constructor_does():
    per_row = CandidateSet(TABLE[:2], torch.tensor([0, 1]), log_q=torch.zeros(3, 2))
    with pytest.raises(ValueError, match=r"mask must have B = 3 rows.*\(4, 2\)"):
        per_row.with_mask(torch.ones(4, 2, dtype=torch.bool))
    masked = CandidateSet(TABLE[:2], torch.tensor([0, 1]), mask=torch.ones(3, 2, dtype=torch.bool))
    with pytest.raises(ValueError, match="mask must have B = 3 rows"):
        masked.with_mask(torch.ones(2, 2, dtype=torch.bool))
    # shared masks and matching rows still combine
    assert per_row.with_mask(torch.tensor([True, False])).mask.tolist() == [True, False]
    assert per_row.with_mask(torch.ones(3, 2, dtype=torch.bool)).mask.shape == (3, 2)


def test_per_row_rows_of_the_positives_are_named_positives():
    positives = CandidateSet(TABLE[:4], PID, log_q=torch.zeros(3, 4))
    with pytest.raises(ValueError, match=r"^positives' per-row log_q / mask must have B = 4"):
        in_batch_softmax_loss(Q4, positives)
    candidates = CandidateSet(TABLE[4:6], torch.tensor([4, 5]), log_q=torch.zeros(3, 2))
    with pytest.raises(ValueError, match=r"^candidates' per-row log_q / mask must have B = 4"):
        in_batch_softmax_loss(Q4, CandidateSet(TABLE[:4], PID), candidates)


def test_corrected_positive_in_denominator_takes_per_row_positive_log_q():
    log_q = torch.randn(4, generator=gen(9))
    shared = CandidateSet(TABLE[:4], PID, log_q=log_q)
    per_row = CandidateSet(TABLE[:4], PID, log_q=log_q[None, :].expand(4, 4).clone())
    a = hard_negative_softmax_loss(Q4, shared, positive_in_denominator="corrected")
    b = hard_negative_softmax_loss(Q4, per_row, positive_in_denominator="corrected")
    torch.testing.assert_close(a, b)
    # each row's own positive column is corrected by its diagonal entry log_q[i, i]
    other = per_row.log_q.clone()
    other[0, 1] += 3.0  # row 0's view of row 1's positive: a negative of row 0
    c = hard_negative_softmax_loss(
        Q4, CandidateSet(TABLE[:4], PID, log_q=other), positive_in_denominator="corrected"
    )
    assert not torch.allclose(a, c)


def test_sigmoid_pair_terms_checks_its_columns_and_removed():
    logits = torch.randn(4, 4, generator=gen(10))
    for bad in ([0, 1, 2, -1], [0, 1, 2, 9]):  # -1 used to wrap to the last column
        with pytest.raises(ValueError, match=r"positive_columns must lie in \[0, 4\)"):
            sigmoid_pair_terms(logits, PID, PID, positive_columns=torch.tensor(bad))
    with pytest.raises(ValueError, match=r"removed must broadcast to logits' shape \(4, 4\)"):
        sigmoid_pair_terms(
            logits, PID, PID, positive_columns=None, removed=torch.zeros(4, 3, dtype=torch.bool)
        )
    with pytest.raises(ValueError, match="removed must be a bool"):
        sigmoid_pair_terms(logits, PID, PID, positive_columns=None, removed=torch.zeros(4, 4))
    with pytest.raises(ValueError, match="number of columns C must agree"):
        sigmoid_pair_terms(logits, PID, PID[:3], positive_columns=None)
    with candidate_sampling.validate_args(False):
        columns = torch.tensor([0, 1, 2, 9])
        not_a_value_error(
            lambda: sigmoid_pair_terms(logits, PID, PID, positive_columns=columns)
        )


def test_accidental_hits_range_checks_positive_columns():
    with pytest.raises(ValueError, match=r"positive_columns must lie in \[0, 3\).*\[-1, 0\]"):
        accidental_hits(
            torch.tensor([5, 5]), torch.tensor([5, 5, 5]), positive_columns=torch.tensor([0, -1])
        )
    with pytest.raises(ValueError, match=r"positive_columns must lie in \[0, 4\)"):
        accidental_hits(PID, PID, positive_columns=torch.tensor([0, 1, 2, 7]))
    with candidate_sampling.validate_args(False):
        not_a_value_error(
            lambda: accidental_hits(PID, PID, positive_columns=torch.tensor([0, 1, 2, 7]))
        )


def test_pipeline_steps_never_broadcast_the_logits_up():
    narrow = torch.zeros(4, 1)
    with pytest.raises(ValueError, match=r"removed must broadcast to logits' shape \(4, 1\)"):
        mask_logits(narrow, torch.zeros(4, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"log_q must broadcast to logits' shape \(4, 1\)"):
        correct_logits(narrow, torch.zeros(4, 3))
    with pytest.raises(ValueError, match=r"labels must broadcast to logits' shape \(4, 1\)"):
        logistic_terms(narrow, torch.zeros(4, 3))
    with pytest.raises(ValueError, match=r"removed must broadcast to logits' shape \(4, 1\)"):
        logistic_terms(narrow, 0.0, removed=torch.zeros(4, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="removed must be a bool"):
        logistic_terms(narrow, 0.0, removed=torch.zeros(4, 1))
    with pytest.raises(ValueError, match="labels must be a number or a tensor"):
        logistic_terms(narrow, "1")
    # broadcasting *to* the logits is still the documented use
    wide = torch.zeros(4, 3)
    assert mask_logits(wide, torch.tensor([True, False, False])).shape == (4, 3)
    assert correct_logits(wide, torch.zeros(3)).shape == (4, 3)
    assert logistic_terms(wide, torch.ones(4, 1)).shape == (4, 3)


def test_reduce_loss_checks_valid_and_per_row():
    with pytest.raises(ValueError, match=r"valid must have shape \(4,\), got \(3,\)"):
        reduce_loss(torch.zeros(4), valid=torch.ones(3, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"valid must have shape \(4,\), got \(4, 4\)"):
        reduce_loss(torch.ones(4), valid=torch.ones(4, 4, dtype=torch.bool))  # was 1.0
    with pytest.raises(ValueError, match="valid must be a bool tensor"):
        reduce_loss(torch.zeros(4), valid=torch.ones(4))
    with pytest.raises(ValueError, match=r"per_row must have shape \(B,\), got \(4, 4\)"):
        reduce_loss(torch.ones(4, 4), reduction="none")


def test_chunked_softmax_rejects_negative_sample_weight_as_every_loss():
    weight = torch.tensor([1.0, -1.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="sample_weight must be finite and >= 0"):
        chunked_softmax_cross_entropy(Q4, TABLE, PID, sample_weight=weight)
    with candidate_sampling.validate_args(False):
        assert torch.isfinite(chunked_softmax_cross_entropy(Q4, TABLE, PID, sample_weight=weight))


def test_value_checks_of_hard_negative_steps_and_nt_bxent_obey_the_switch():
    logits = torch.randn(4, 6, generator=gen(11))
    bad = torch.tensor([0, 0, 0, 9])
    calls = [
        lambda: hard_negative_mining(logits, num_hard_negatives=2, positive_columns=bad),
        lambda: decoupled_cross_entropy(logits, bad),
        lambda: guide_false_negative_mask(logits, positive_columns=bad),
        lambda: hardness_weighted_logits(logits, logits, hardness_alpha=1.0, positive_columns=bad),
        lambda: debiased_cross_entropy(logits, bad, tau_plus=0.1),
        lambda: corrected_logq_weights(logits, bad, positive_log_q=None),
    ]
    for call in calls:
        with pytest.raises(ValueError, match=r"positive_columns must lie in \[0, 6\)"):
            call()
        with candidate_sampling.validate_args(False):
            not_a_value_error(call)
    self_pair = torch.tensor([[1, 1]])
    with pytest.raises(ValueError, match="must not contain self-pairs"):
        nt_bxent_loss(Q4, self_pair)
    with candidate_sampling.validate_args(False):
        not_a_value_error(lambda: nt_bxent_loss(Q4, self_pair))


def test_retrieval_loss_errors_name_the_argument():
    loss = RetrievalLoss(item_probabilities=torch.full((10,), 0.1))
    with pytest.raises(ValueError, match=r"positive_ids must lie in \[0, 10\)"):
        loss(Q4, TABLE[:4], torch.tensor([0, 1, 2, 10]))  # was an IndexError
    with pytest.raises(ValueError, match=r"positive_ids must lie in \[0, 10\)"):
        loss(Q4, TABLE[:4], torch.tensor([0, 1, 2, -1]))
    with pytest.raises(ValueError, match="positive_ids must be >= 0"):
        RetrievalLoss()(Q4, TABLE[:4], torch.tensor([0, 1, 2, -1]))
    with pytest.raises(ValueError, match="batch size B must agree.*positive_embeddings=3"):
        RetrievalLoss()(Q4, TABLE[:3], PID)
    with pytest.raises(ValueError, match=r"query must have shape \(B, d\)"):
        RetrievalLoss()(Q4[0], TABLE[:4], PID)
    zero = RetrievalLoss(item_probabilities=torch.tensor([0.0] + [1 / 9] * 9))
    with pytest.raises(ValueError, match="item_probabilities must be > 0.*positive_ids.*id 0"):
        zero(Q4, TABLE[:4], PID)


def test_count_above_takes_one_positive_score_per_row():
    with pytest.raises(ValueError, match=r"positive_scores must have shape \(n,\), got \(3, 4\)"):
        count_above(torch.zeros(3, 4), torch.zeros(3, 4))
    with pytest.raises(ValueError, match="number of rows n must agree.*positive_scores=2"):
        count_above(torch.zeros(3, 4), torch.zeros(2))
    with pytest.raises(ValueError, match=r"scores must have shape \(n, m\)"):
        count_above(torch.zeros(4), torch.zeros(4))
    assert count_above(torch.tensor([[0.0, 2.0, 1.0]]), torch.tensor([1.0])).tolist() == [1]


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: in_batch_softmax_loss(Q4, CandidateSet(TABLE[:4], PID), temperature="0.1"),
         "temperature must be a number, got str"),
        (lambda: in_batch_softmax_loss(Q4, CandidateSet(TABLE[:4], PID), temperature="a"),
         "temperature must be a number, got str"),
        (lambda: info_nce_loss(Q4, Q4, temperature=True), "temperature must be a float"),
        (lambda: chunked_softmax_cross_entropy(Q4, TABLE, PID, temperature="0.1"),
         "temperature must be a number, got str"),
        (lambda: hard_negative_softmax_loss(Q4, CandidateSet(TABLE[:4], PID), tau_plus="0.1"),
         "tau_plus must be a number, got str"),
        (lambda: hard_negative_softmax_loss(Q4, CandidateSet(TABLE[:4], PID), min_logit="a"),
         "min_logit must be a number, got str"),
        (lambda: hard_negative_softmax_loss(Q4, CandidateSet(TABLE[:4], PID), beta="1"),
         "beta must be a number, got str"),
        (lambda: retrieval_metrics(torch.randn(5, 3), TABLE, PID, PID, ks=10),
         "ks must be a sequence of ints"),
        (lambda: retrieval_metrics(torch.randn(5, 3), TABLE, PID, PID, ks="10"),
         "ks must be a sequence of ints"),
    ],
)
def test_options_of_the_wrong_type_name_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_cross_batch_memory_names_positive_ids():
    memory = CrossBatchMemory(4, 3)
    memory.enqueue(torch.randn(2, 3, generator=gen(12)), torch.tensor([4, 5]))
    with pytest.raises(ValueError, match="positive_ids must be >= 0, got -1"):
        memory.candidates_for(torch.randn(2, 3, generator=gen(13)), torch.tensor([0, -1]))


def test_chunked_softmax_minus_inf_bias_is_a_class_of_probability_zero():
    """As ``F.cross_entropy`` and the CandidateSet losses: −inf bias → probability 0."""
    bias = torch.zeros(10)
    bias[5] = float("-inf")  # a negative of every row
    reference = torch.nn.functional.cross_entropy(Q4 @ TABLE.T + bias, PID)
    for method in ("vocab", "rows"):
        loss = chunked_softmax_cross_entropy(Q4, TABLE, PID, class_bias=bias, method=method)
        torch.testing.assert_close(loss, reference)
    # the same column through the sampled softmax: dropped like a removed column
    positives = CandidateSet.from_ids(PID, TABLE, class_bias=bias)
    with_column = sampled_softmax_loss(
        Q4, positives, CandidateSet.from_ids(torch.tensor([5, 6]), TABLE, class_bias=bias)
    )
    without = sampled_softmax_loss(
        Q4, positives, CandidateSet.from_ids(torch.tensor([6]), TABLE, class_bias=bias)
    )
    torch.testing.assert_close(with_column, without)
    bias[0] = float("-inf")  # row 0's positive: its loss is +inf, never hidden
    per_row = chunked_softmax_cross_entropy(Q4, TABLE, PID, class_bias=bias, reduction="none")
    assert math.isinf(float(per_row[0])) and bool(torch.isfinite(per_row[1:]).all())
    bias[0] = float("nan")
    per_row = chunked_softmax_cross_entropy(Q4, TABLE, PID, class_bias=bias, reduction="none")
    assert bool(torch.isnan(per_row).all())


# every public seed and dtype argument: a wrong type is a ValueError naming it, never
# torch's "manual_seed expected a long" or "'str' object has no attribute" (audit class)
_SEEDED = [
    lambda s: candidate_sampling.seed_everything(s),
    lambda s: candidate_sampling.book_seed(s),
    lambda s: candidate_sampling.sampling.hashing.draw_hash_parameters(1, seed=s),
    lambda s: StreamingFrequencyEstimator(8, seed=s),
    lambda s: candidate_sampling.models.ItemTower(5, 2, seed=s),
    lambda s: candidate_sampling.data.synthetic.make_softmax_problem(5, 2, seed=s),
    lambda s: candidate_sampling.data.synthetic.make_context_problem(5, 3, 2, seed=s),
    lambda s: candidate_sampling.data.synthetic.make_planted_retrieval(3, 5, 2, seed=s),
    lambda s: candidate_sampling.data.movielens.random_split(10, seed=s),
    lambda s: candidate_sampling.train.train(
        torch.nn.Linear(2, 1), lambda m, b: m(b[0]).sum(), [torch.zeros(2, 2)],
        epochs=1, batch_size=2, seed=s, progress=False),
]


@pytest.mark.parametrize("bad", ["a", 1.5, -1, True, None])
@pytest.mark.parametrize("call", _SEEDED)
def test_a_seed_that_is_not_a_non_negative_int_names_seed(call, bad):
    with pytest.raises(ValueError, match="seed must be"):
        call(bad)


@pytest.mark.parametrize("seed", [3, np.int64(3), 2**64 - 1])
@pytest.mark.parametrize("call", _SEEDED)
def test_a_valid_seed_is_accepted(call, seed):
    call(seed)


@pytest.mark.parametrize("bad", ["float32", torch.int64, 32])
@pytest.mark.parametrize(
    "call",
    [
        lambda dt: candidate_sampling.data.synthetic.zipf_probabilities(4, dtype=dt),
        lambda dt: CrossBatchMemory(4, 2, dtype=dt),
        lambda dt: candidate_sampling.losses.core.mask_value(dt),
        lambda dt: candidate_sampling.eval.baselines.interaction_matrix(
            candidate_sampling.eval.KnownPairs(torch.tensor([0]), torch.tensor([1]), num_items=3),
            dtype=dt),
    ],
)
def test_a_dtype_that_is_not_a_floating_torch_dtype_names_dtype(call, bad):
    with pytest.raises(ValueError, match="dtype must be a floating-point torch.dtype"):
        call(bad)


@pytest.mark.parametrize("hash_ids", [True, False])
def test_frequency_estimator_names_ids_given_as_a_list_and_does_not_advance(hash_ids):
    est = StreamingFrequencyEstimator(8, hash_ids=hash_ids)
    for method in (est.update, est.estimate, est.log_inclusion):
        with pytest.raises(ValueError, match="ids must be a torch.Tensor"):
            method([1, 2])
    with pytest.raises(ValueError, match="ids must lie in"):
        est.update(torch.tensor([1, -2]))
    assert est.step == 0  # a rejected batch is not a step
    est.update(torch.tensor([[1, 2], [2, 3]]))  # any shape
    assert est.step == 1 and float(est.estimate(torch.tensor(2))) == 1.0
