"""The loss pipeline's named steps, each called alone (``candidate_sampling.losses.core``).

score → :func:`correct_logits` → :func:`accidental_hits` / :func:`mask_logits` →
:func:`positive_column_cross_entropy` → :func:`reduce_loss`; every step against a float64
loop reference, and every bad-input path with its error type and message.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from candidate_sampling.losses import (
    accidental_hits,
    apply_temperature,
    correct_logits,
    mask_logits,
    mask_value,
    positive_column_cross_entropy,
    reduce_loss,
    upcast,
)

D64 = torch.float64


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def logsumexp(values: list[float]) -> float:
    m = max(values)
    return m + math.log(sum(math.exp(v - m) for v in values))


def ref_positive_column_ce(logits, positive_columns) -> list[float]:
    """``logsumexp(row) − mean_t row[c_t]`` by loops; columns an int, (B,) or (B, T)."""
    out = []
    for i in range(logits.shape[0]):
        row = [float(v) for v in logits[i]]
        if isinstance(positive_columns, int):
            cols = [positive_columns]
        elif positive_columns.dim() == 1:
            cols = [int(positive_columns[i])]
        else:
            cols = [int(c) for c in positive_columns[i]]
        out.append(logsumexp(row) - sum(row[c] for c in cols) / len(cols))
    return out


# --------------------------------------------------------------------------- positive columns


@pytest.mark.parametrize("form", ["int", "vector", "matrix", "matrix_with_repeats"])
def test_positive_column_cross_entropy_matches_loop(form):
    g = gen(0)
    logits = torch.randn(5, 8, generator=g, dtype=D64) * 4
    columns = {
        "int": 3,
        "vector": torch.randint(0, 8, (5,), generator=g),
        "matrix": torch.rand(5, 8, generator=g).argsort(1)[:, :3],
        "matrix_with_repeats": torch.randint(0, 8, (5, 4), generator=g),
    }[form]
    out = positive_column_cross_entropy(logits, columns)
    assert out.shape == (5,) and out.dtype == D64
    want = torch.tensor(ref_positive_column_ce(logits, columns), dtype=D64)
    torch.testing.assert_close(out, want, rtol=1e-12, atol=1e-12)


def test_positive_column_cross_entropy_special_cases():
    g = gen(1)
    logits = torch.randn(4, 6, generator=g, dtype=D64)
    # column 0 for every row = a (B,) vector of zeros = a (B, 1) matrix of zeros
    zeros = torch.zeros(4, dtype=torch.long)
    a = positive_column_cross_entropy(logits, 0)
    torch.testing.assert_close(a, positive_column_cross_entropy(logits, zeros))
    torch.testing.assert_close(a, positive_column_cross_entropy(logits, zeros[:, None]))
    # the in-batch layout: the diagonal
    square = logits[:, :4]
    torch.testing.assert_close(
        positive_column_cross_entropy(square, torch.arange(4)),
        torch.nn.functional.cross_entropy(square, torch.arange(4), reduction="none"),
    )
    # a label of 1/T on each of T columns = the mean of the T single-column losses
    cols = torch.tensor([[0, 2], [1, 5], [3, 4], [5, 0]])
    torch.testing.assert_close(
        positive_column_cross_entropy(logits, cols),
        0.5
        * (
            positive_column_cross_entropy(logits, cols[:, 0])
            + positive_column_cross_entropy(logits, cols[:, 1])
        ),
    )


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_positive_column_cross_entropy_computes_half_in_float32(dtype):
    logits = (torch.randn(3, 5, generator=gen(2)) * 30).to(dtype)
    out = positive_column_cross_entropy(logits, torch.tensor([0, 4, 2]))
    assert out.dtype == torch.float32
    want = positive_column_cross_entropy(logits.double(), torch.tensor([0, 4, 2]))
    torch.testing.assert_close(out.double(), want, rtol=1e-6, atol=1e-5)


def test_positive_column_cross_entropy_gradcheck():
    logits = torch.randn(3, 5, dtype=D64, requires_grad=True)
    for cols in (2, torch.tensor([0, 4, 1]), torch.tensor([[0, 1], [2, 2], [4, 3]])):
        assert torch.autograd.gradcheck(
            lambda x, cols=cols: positive_column_cross_entropy(x, cols), (logits,)
        )


def test_positive_column_cross_entropy_bad_inputs():
    logits = torch.randn(3, 4)
    with pytest.raises(ValueError, match=r"logits must have shape \(B, C\), got \(4,\)"):
        positive_column_cross_entropy(logits[0], 0)
    with pytest.raises(ValueError, match="logits must be a floating-point"):
        positive_column_cross_entropy(torch.ones(3, 4, dtype=torch.long), 0)
    with pytest.raises(ValueError, match="logits must not be empty"):
        positive_column_cross_entropy(logits[:, :0], 0)
    # fewer columns than the positive column needs
    with pytest.raises(ValueError, match=r"positive_columns must lie in \[0, 4\).*got 4"):
        positive_column_cross_entropy(logits, 4)
    with pytest.raises(ValueError, match=r"positive_columns must lie in \[0, 2\)"):
        positive_column_cross_entropy(logits[:, :2], torch.tensor([0, 1, 2]))
    with pytest.raises(ValueError, match=r"positive_columns must lie in \[0, 4\)"):
        positive_column_cross_entropy(logits, -1)
    with pytest.raises(ValueError, match=r"positive_columns must lie in \[0, 4\)"):
        positive_column_cross_entropy(logits, torch.tensor([[0, 1], [2, 9], [0, 0]]))
    with pytest.raises(ValueError, match=r"positive_columns must lie in \[0, 4\)"):
        positive_column_cross_entropy(logits, torch.tensor([0, -1, 2]))
    with pytest.raises(ValueError, match="positive_columns must be an integer tensor"):
        positive_column_cross_entropy(logits, torch.tensor([0.0, 1.0, 2.0]))
    with pytest.raises(ValueError, match="positive_columns must be an integer tensor"):
        positive_column_cross_entropy(logits, torch.tensor([True, False, True]))
    with pytest.raises(ValueError, match="positive_columns must be an int or"):
        positive_column_cross_entropy(logits, 1.0)
    with pytest.raises(ValueError, match="positive_columns must be an int or"):
        positive_column_cross_entropy(logits, True)
    with pytest.raises(ValueError, match="positive_columns must be an int or"):
        positive_column_cross_entropy(logits, torch.zeros(3, 1, 1, dtype=torch.long))
    with pytest.raises(ValueError, match=r"positive_columns must have B = 3 rows"):
        positive_column_cross_entropy(logits, torch.tensor([0, 1]))


# --------------------------------------------------------------------------- accidental hits


def ref_hits(positive_ids, candidate_ids, positive_columns=None) -> list[list[bool]]:
    out = []
    for i in range(positive_ids.shape[0]):
        row_ids = positive_ids[i].reshape(-1).tolist()
        cand = candidate_ids if candidate_ids.dim() == 1 else candidate_ids[i]
        row = [int(c) in row_ids for c in cand]
        if positive_columns is not None:
            row[int(positive_columns[i])] = False
        out.append(row)
    return out


@pytest.mark.parametrize("num_true", [None, 1, 3])
@pytest.mark.parametrize("with_positive_columns", [False, True])
def test_accidental_hits_match_loop(num_true, with_positive_columns):
    g = gen(3)
    b, c = 5, 9
    shape = (b,) if num_true is None else (b, num_true)
    positive_ids = torch.randint(0, 6, shape, generator=g)
    candidate_ids = torch.randint(0, 6, (c,), generator=g)
    columns = torch.randint(0, c, (b,), generator=g) if with_positive_columns else None
    hits = accidental_hits(positive_ids, candidate_ids, positive_columns=columns)
    assert hits.dtype == torch.bool and hits.shape == (b, c)
    assert hits.tolist() == ref_hits(positive_ids, candidate_ids, columns)
    assert bool(hits.any())  # the draw does produce hits to check


def test_accidental_hits_in_batch_layout_marks_duplicates_not_the_positive():
    ids = torch.tensor([7, 1, 7, 3, 7])
    hits = accidental_hits(ids, ids, positive_columns=torch.arange(5))
    want = [[j != i and ids[j] == ids[i] for j in range(5)] for i in range(5)]
    assert hits.tolist() == want
    assert not bool(hits.diagonal().any())
    # without positive_columns the row's own column is a "hit" too
    assert bool(accidental_hits(ids, ids).diagonal().all())
    # mixed negatives: candidates = positives then extras
    cand = torch.cat([ids, torch.tensor([1, 9, 7])])
    hits = accidental_hits(ids, cand, positive_columns=torch.arange(5))
    assert hits[:, 5:].tolist() == [
        [False, False, True],
        [True, False, False],
        [False, False, True],
        [False, False, False],
        [False, False, True],
    ]


def ref_tensorflow_hits(positive_ids, candidate_ids):
    """TF's compute_accidental_hits: a map id -> its *last* position, one hit per true id."""
    last = {int(c): j for j, c in enumerate(candidate_ids)}
    out = [[False] * len(candidate_ids) for _ in positive_ids]
    for i, row in enumerate(positive_ids):
        for t in row.reshape(-1).tolist():
            if t in last:
                out[i][last[t]] = True
    return out


@pytest.mark.parametrize("num_true", [None, 2])
def test_repeated_hits_tensorflow_masks_only_the_last_copy(num_true):
    g = gen(11)
    shape = (6,) if num_true is None else (6, num_true)
    positive_ids = torch.randint(0, 4, shape, generator=g)
    candidate_ids = torch.randint(0, 4, (10,), generator=g)  # repeats surely
    tf_hits = accidental_hits(positive_ids, candidate_ids, repeated_hits="tensorflow")
    assert tf_hits.tolist() == ref_tensorflow_hits(positive_ids, candidate_ids)
    every = accidental_hits(positive_ids, candidate_ids)
    assert bool((tf_hits <= every).all()) and int(every.sum()) > int(tf_hits.sum())
    with pytest.raises(ValueError, match="repeated_hits must be one of"):
        accidental_hits(positive_ids, candidate_ids, repeated_hits="first")


def test_accidental_hits_bad_inputs():
    pos, cand = torch.tensor([0, 1]), torch.tensor([0, 1, 2])
    with pytest.raises(ValueError, match="positive_ids must have shape"):
        accidental_hits(pos[None, :, None], cand)
    with pytest.raises(ValueError, match="positive_ids must be an integer"):
        accidental_hits(pos.float(), cand)
    with pytest.raises(ValueError, match=r"candidate_ids must have shape \(C,\)"):
        accidental_hits(pos, cand[None, None])
    with pytest.raises(ValueError, match="candidate_ids must be an integer"):
        accidental_hits(pos, cand.float())
    with pytest.raises(ValueError, match=r"candidate_ids must have shape \(C,\)"):
        accidental_hits(pos, torch.zeros(3, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="positive_columns"):
        accidental_hits(pos, cand, positive_columns=torch.tensor([0]))
    with pytest.raises(ValueError, match="positive_columns"):
        accidental_hits(pos, cand, positive_columns=torch.tensor([0.0, 1.0]))


# --------------------------------------------------------------------------- masks, corrections


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16])
def test_mask_logits_is_finite_with_zero_gradient(dtype):
    logits = (torch.randn(3, 4, generator=gen(4)) * 10).to(dtype).requires_grad_(True)
    mask = torch.tensor([[True, False, False, False], [False] * 4, [False, True, True, True]])
    out = mask_logits(logits, mask)
    assert out.dtype == dtype
    assert mask_value(dtype) == torch.finfo(dtype).min / 2
    assert bool((out[mask] == mask_value(dtype)).all()) and bool(torch.isfinite(out).all())
    assert torch.equal(out[~mask], logits[~mask])
    # adding an ordinary logit to a masked one stays finite
    assert bool(torch.isfinite(out - 100).all())
    out.float().sum().backward()
    assert bool((logits.grad[mask] == 0).all()) and bool((logits.grad[~mask] == 1).all())
    assert mask_logits(logits, None) is logits


def test_mask_logits_and_mask_value_bad_inputs():
    with pytest.raises(ValueError, match="removed must be a bool tensor, got torch.int64"):
        mask_logits(torch.zeros(2, 2), torch.zeros(2, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="removed must be a bool tensor, got list"):
        mask_logits(torch.zeros(2, 2), [[True, False], [False, True]])
    with pytest.raises(ValueError, match="dtype must be a floating-point torch.dtype"):
        mask_value(torch.int64)


def test_masking_a_column_equals_deleting_it_in_the_cross_entropy():
    logits = torch.randn(4, 6, generator=gen(5), dtype=D64)
    mask = torch.zeros(4, 6, dtype=torch.bool)
    mask[:, 4] = True
    masked = positive_column_cross_entropy(mask_logits(logits, mask), torch.tensor([0, 1, 2, 3]))
    kept = logits[:, [0, 1, 2, 3, 5]]
    torch.testing.assert_close(
        masked, positive_column_cross_entropy(kept, torch.tensor([0, 1, 2, 3])), rtol=0, atol=1e-14
    )


def test_correct_logits_order_and_detached_log_q():
    scores = torch.randn(3, 5, generator=gen(6), dtype=D64, requires_grad=True)
    log_q = torch.randn(5, generator=gen(7), dtype=D64, requires_grad=True)
    out = correct_logits(apply_temperature(scores, 0.5), log_q)
    s, lq, o = scores.detach(), log_q.detach(), out.detach()
    for i in range(3):
        for j in range(5):  # s / τ − log Q: the correction is not divided by τ
            assert float(o[i, j]) == pytest.approx(float(s[i, j]) / 0.5 - float(lq[j]), rel=1e-14)
    out.sum().backward()
    assert log_q.grad is None  # log Q gets no gradient
    torch.testing.assert_close(scores.grad, torch.full((3, 5), 2.0, dtype=D64))
    assert correct_logits(scores, None) is scores
    half = apply_temperature(torch.full((2,), 60000.0, dtype=torch.float16), 0.01)
    assert half.dtype == torch.float32 and bool(torch.isfinite(half).all())  # upcast before /τ
    with pytest.raises(ValueError, match="temperature must be > 0"):
        apply_temperature(scores, -0.1)
    with pytest.raises(ValueError, match="temperature must be a float or a Temperature"):
        apply_temperature(scores, torch.ones(()))


def test_upcast():
    for dtype in (torch.float16, torch.bfloat16):
        assert upcast(torch.zeros(2, dtype=dtype)).dtype == torch.float32
    t64, t32, ids = torch.zeros(2, dtype=D64), torch.zeros(2), torch.zeros(2, dtype=torch.long)
    assert upcast(t64) is t64 and upcast(t32) is t32 and upcast(ids) is ids


# --------------------------------------------------------------------------- reduction


def test_reduce_loss_reductions():
    per_row = torch.tensor([1.0, 2.0, 6.0], dtype=D64)
    assert reduce_loss(per_row).item() == 3.0
    assert reduce_loss(per_row, "sum").item() == 9.0
    assert torch.equal(reduce_loss(per_row, "none"), per_row)
    with pytest.raises(ValueError, match="reduction must be one of"):
        reduce_loss(per_row, "batchmean")


def test_reduce_loss_with_valid_rows():
    per_row = torch.tensor([1.0, 5.0, 3.0, 100.0], dtype=D64, requires_grad=True)
    valid = torch.tensor([True, False, True, False])
    assert reduce_loss(per_row, valid=valid).item() == 2.0  # mean over the 2 valid rows
    assert reduce_loss(per_row, "sum", valid=valid).item() == 4.0
    none = reduce_loss(per_row, "none", valid=valid)
    assert none.tolist() == [1.0, 0.0, 3.0, 0.0]
    reduce_loss(per_row, valid=valid).backward()
    assert per_row.grad.tolist() == [0.5, 0.0, 0.5, 0.0]
    # an invalid row may hold NaN or inf: it never reaches the result or the gradient
    bad = torch.tensor([math.nan, 2.0, math.inf], requires_grad=True)
    keep = torch.tensor([False, True, False])
    out = reduce_loss(bad, valid=keep)
    out.backward()
    assert out.item() == 2.0 and bad.grad.tolist() == [0.0, 1.0, 0.0]


def test_reduce_loss_with_no_valid_row_is_a_connected_zero():
    per_row = torch.tensor([4.0, 7.0], requires_grad=True)
    out = reduce_loss(per_row, valid=torch.zeros(2, dtype=torch.bool))
    assert out.item() == 0.0 and out.requires_grad
    out.backward()
    assert per_row.grad.tolist() == [0.0, 0.0]


@settings(max_examples=25, deadline=None)
@given(values=st.lists(st.floats(-1e3, 1e3), min_size=1, max_size=12), seed=st.integers(0, 99))
def test_reduce_loss_mean_over_valid_equals_mean_of_the_valid_rows(values, seed):
    per_row = torch.tensor(values, dtype=D64)
    valid = torch.rand(len(values), generator=gen(seed)) < 0.5
    out = reduce_loss(per_row, valid=valid)
    want = per_row[valid].mean() if bool(valid.any()) else torch.zeros((), dtype=D64)
    torch.testing.assert_close(out, want, rtol=1e-12, atol=1e-12)
