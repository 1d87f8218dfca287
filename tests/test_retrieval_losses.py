"""In-batch and mixed-negative softmax losses against float64 loop references."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from candidate_sampling.losses import (
    InBatchSoftmaxLoss,
    MixedNegativesLoss,
    duplicate_positive_mask,
    in_batch_softmax_loss,
    mixed_log_q,
    mixed_negatives_loss,
)


def _reference(query, items, ids, log_q, extra, extra_ids, extra_log_q, tau, dedupe):
    """Loop reference: for each row, log-sum-exp over kept candidates minus the positive."""
    q, v = query.double(), items.double()
    cands = [
        (v[j], None if ids is None else int(ids[j]), 0.0 if log_q is None else float(log_q[j]), j)
        for j in range(v.shape[0])
    ]
    if extra is not None:
        for j in range(extra.shape[0]):
            cands.append(
                (
                    extra[j].double(),
                    None if extra_ids is None else int(extra_ids[j]),
                    0.0 if extra_log_q is None else float(extra_log_q[j]),
                    -1,
                )
            )
    losses = []
    for i in range(q.shape[0]):
        terms = []
        positive = None
        for emb, cid, lq, col in cands:
            logit = float(q[i] @ emb) / tau - lq
            if col == i:
                positive = logit
                terms.append(logit)
            elif dedupe and cid == int(ids[i]):
                continue
            else:
                terms.append(logit)
        m = max(terms)
        losses.append(m + math.log(sum(math.exp(t - m) for t in terms)) - positive)
    return torch.tensor(losses, dtype=torch.float64)


def _batch(seed, b=6, d=4, n_extra=5, n_items=5):
    g = torch.Generator().manual_seed(seed)
    return {
        "query": torch.randn(b, d, generator=g, dtype=torch.float64),
        "items": torch.randn(b, d, generator=g, dtype=torch.float64),
        "ids": torch.randint(0, n_items, (b,), generator=g),
        "log_q": torch.randn(b, generator=g, dtype=torch.float64),
        "extra": torch.randn(n_extra, d, generator=g, dtype=torch.float64),
        "extra_ids": torch.randint(0, n_items, (n_extra,), generator=g),
        "extra_log_q": torch.randn(n_extra, generator=g, dtype=torch.float64),
    }


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("tau", [1.0, 0.3])
@pytest.mark.parametrize("dedupe", [False, True])
def test_mixed_loss_matches_reference(seed, tau, dedupe):
    x = _batch(seed)
    got = mixed_negatives_loss(
        x["query"],
        x["items"],
        x["ids"],
        x["log_q"],
        x["extra"],
        x["extra_ids"],
        x["extra_log_q"],
        tau,
        dedupe,
        reduction="none",
    )
    want = _reference(
        x["query"],
        x["items"],
        x["ids"],
        x["log_q"],
        x["extra"],
        x["extra_ids"],
        x["extra_log_q"],
        tau,
        dedupe,
    )
    assert torch.allclose(got, want, atol=1e-10)


@pytest.mark.parametrize("seed", range(3))
def test_in_batch_loss_matches_reference(seed):
    x = _batch(seed)
    got = in_batch_softmax_loss(
        x["query"], x["items"], x["ids"], x["log_q"], 0.5, True, reduction="none"
    )
    want = _reference(x["query"], x["items"], x["ids"], x["log_q"], None, None, None, 0.5, True)
    assert torch.allclose(got, want, atol=1e-10)


def test_plain_in_batch_is_cross_entropy_on_the_diagonal():
    x = _batch(0)
    got = in_batch_softmax_loss(x["query"], x["items"])
    want = torch.nn.functional.cross_entropy(x["query"] @ x["items"].T, torch.arange(6))
    assert torch.allclose(got, want)


@pytest.mark.parametrize("dedupe", [False, True])
def test_in_batch_equals_mixed_with_no_extras(dedupe):
    x = _batch(1)
    a = in_batch_softmax_loss(x["query"], x["items"], x["ids"], x["log_q"], 0.7, dedupe)
    b = mixed_negatives_loss(
        x["query"],
        x["items"],
        x["ids"],
        x["log_q"],
        x["extra"][:0],
        x["extra_ids"][:0],
        x["extra_log_q"][:0],
        0.7,
        dedupe,
    )
    assert torch.allclose(a, b, atol=1e-12)


def test_masking_duplicates_equals_removing_them():
    """Row 0's positive (item 7) also sits in columns 2 and 4: masking = deleting them."""
    x = _batch(2)
    ids = torch.tensor([7, 1, 7, 3, 7, 5])
    full = mixed_negatives_loss(
        x["query"],
        x["items"],
        ids,
        x["log_q"],
        None,
        None,
        None,
        remove_duplicates=True,
        reduction="none",
    )
    keep = torch.tensor([0, 1, 3, 5])
    reduced = in_batch_softmax_loss(
        x["query"][keep],
        x["items"][keep],
        ids[keep],
        x["log_q"][keep],
        remove_duplicates=False,
        reduction="none",
    )
    assert torch.allclose(full[0], reduced[0], atol=1e-12)


def test_accidental_hits_among_extras_are_masked():
    x = _batch(3)
    ids = torch.arange(6)
    extra_ids = torch.tensor([0, 10, 11, 12, 13])  # extra 0 is row 0's positive
    masked = mixed_negatives_loss(
        x["query"],
        x["items"],
        ids,
        x["log_q"],
        x["extra"],
        extra_ids,
        x["extra_log_q"],
        remove_duplicates=True,
        reduction="none",
    )
    dropped = mixed_negatives_loss(
        x["query"],
        x["items"],
        ids,
        x["log_q"],
        x["extra"][1:],
        extra_ids[1:],
        x["extra_log_q"][1:],
        remove_duplicates=True,
        reduction="none",
    )
    assert torch.allclose(masked[0], dropped[0], atol=1e-12)
    assert not torch.allclose(masked[1:], dropped[1:])


def test_diagonal_layout_equals_positive_first_layout():
    from candidate_sampling.losses import positive_on_diagonal_loss, softmax_loss_positive_first

    logits = torch.randn(4, 7, dtype=torch.float64)
    moved = torch.stack(
        [torch.cat([row[i : i + 1], row[:i], row[i + 1 :]]) for i, row in enumerate(logits)]
    )
    assert torch.allclose(positive_on_diagonal_loss(logits), softmax_loss_positive_first(moved))


def test_duplicate_positive_mask():
    mask = duplicate_positive_mask(torch.tensor([4, 5, 4]), torch.tensor([4, 5, 4, 5, 9]))
    assert mask.tolist() == [
        [False, False, True, False, False],
        [False, False, False, True, False],
        [True, False, False, False, False],
    ]


def test_temperature_and_logq_order():
    """logit = s/τ − log Q, which differs from (s − log Q)/τ when τ ≠ 1."""
    x = _batch(4)
    tau = 0.2
    ours = in_batch_softmax_loss(x["query"], x["items"], log_q=x["log_q"], temperature=tau)
    scores = x["query"] @ x["items"].T
    ce = torch.nn.functional.cross_entropy
    labels = torch.arange(6)
    assert torch.allclose(ours, ce(scores / tau - x["log_q"][None], labels))
    other = ce((scores - x["log_q"][None]) / tau, labels)
    assert not torch.allclose(ours, other)
    one = in_batch_softmax_loss(x["query"], x["items"], log_q=x["log_q"], temperature=1.0)
    assert torch.allclose(one, ce(scores - x["log_q"][None], labels))


@given(shift=st.floats(-20, 20), seed=st.integers(0, 50))
@settings(max_examples=25, deadline=None)
def test_constant_shift_of_log_q_cancels(shift, seed):
    x = _batch(seed)
    args = (x["query"], x["items"], x["ids"])
    a = mixed_negatives_loss(*args, x["log_q"], x["extra"], x["extra_ids"], x["extra_log_q"])
    b = mixed_negatives_loss(
        *args, x["log_q"] + shift, x["extra"], x["extra_ids"], x["extra_log_q"] + shift
    )
    assert torch.allclose(a, b, atol=1e-9)


def test_mixed_log_q_forms():
    q = torch.tensor([0.01, 0.2, 0.0], dtype=torch.float64)
    r = torch.full((3,), 0.1, dtype=torch.float64)
    b, b2 = 8, 4
    expected = torch.log(b * q + b2 * r)
    assert torch.allclose(mixed_log_q(q, r, b, b2, "expected_count").double(), expected, atol=1e-6)
    assert torch.allclose(
        mixed_log_q(q, r, b, b2, "mixture").double(), expected - math.log(b + b2), atol=1e-6
    )
    incl = torch.log(1 - (1 - q) ** b * (1 - r) ** b2)
    assert torch.allclose(mixed_log_q(q, r, b, b2, "inclusion").double(), incl, atol=1e-6)


def test_mixture_and_expected_count_give_the_same_loss():
    """The factor B + B' cancels under the softmax when every column uses the same Q*."""
    x = _batch(5)
    g = torch.Generator().manual_seed(0)
    q_pos, q_ext = torch.rand(6, generator=g) / 10, torch.rand(5, generator=g) / 10
    r_pos, r_ext = torch.full((6,), 0.05), torch.full((5,), 0.05)
    losses = {}
    for form in ("mixture", "expected_count", "inclusion"):
        losses[form] = mixed_negatives_loss(
            x["query"],
            x["items"],
            x["ids"],
            mixed_log_q(q_pos, r_pos, 6, 5, form).double(),
            x["extra"],
            x["extra_ids"],
            mixed_log_q(q_ext, r_ext, 6, 5, form).double(),
        )
    assert torch.allclose(losses["mixture"], losses["expected_count"], atol=1e-6)
    assert not torch.allclose(losses["mixture"], losses["inclusion"], atol=1e-4)


def test_gradcheck():
    x = _batch(6, b=4, d=3, n_extra=3)
    x["ids"] = torch.tensor([0, 1, 0, 2])

    def f(q, v, e):
        return mixed_negatives_loss(
            q, v, x["ids"], x["log_q"][:4], e, x["extra_ids"][:3], x["extra_log_q"][:3], 0.5
        )

    inputs = (
        x["query"][:4].requires_grad_(),
        x["items"][:4].requires_grad_(),
        x["extra"][:3].requires_grad_(),
    )
    assert torch.autograd.gradcheck(f, inputs)


def test_modules_and_reductions():
    x = _batch(7)
    mod = MixedNegativesLoss(temperature=0.5, reduction="sum")
    assert torch.allclose(
        mod(
            x["query"],
            x["items"],
            x["ids"],
            x["log_q"],
            x["extra"],
            x["extra_ids"],
            x["extra_log_q"],
        ),
        mixed_negatives_loss(
            x["query"],
            x["items"],
            x["ids"],
            x["log_q"],
            x["extra"],
            x["extra_ids"],
            x["extra_log_q"],
            0.5,
            reduction="none",
        ).sum(),
    )
    ib = InBatchSoftmaxLoss()
    assert ib(x["query"], x["items"]).shape == ()


def test_float16_mask_is_finite():
    x = _batch(8)
    ids = torch.zeros(6, dtype=torch.int64)  # every column is a duplicate of every row
    loss = in_batch_softmax_loss(x["query"].half(), x["items"].half(), ids, reduction="none")
    assert torch.isfinite(loss).all()
    assert torch.allclose(loss, torch.zeros(6))


def test_bad_inputs():
    x = _batch(9)
    q, v = x["query"], x["items"]
    with pytest.raises(ValueError, match="temperature"):
        in_batch_softmax_loss(q, v, temperature=0.0)
    with pytest.raises(ValueError, match="batch size B"):
        in_batch_softmax_loss(q, v[:3])
    with pytest.raises(ValueError, match="embedding size d"):
        in_batch_softmax_loss(q, v[:, :2])
    with pytest.raises(ValueError, match="item_ids"):
        in_batch_softmax_loss(q, v, remove_duplicates=True)
    with pytest.raises(ValueError, match="item_ids"):
        in_batch_softmax_loss(q, v, torch.zeros(6))
    with pytest.raises(ValueError, match="log_q"):
        in_batch_softmax_loss(q, v, log_q=torch.full((6,), float("-inf")))
    with pytest.raises(ValueError, match="log_q and extra_log_q"):
        mixed_negatives_loss(q, v, x["ids"], x["log_q"], x["extra"], x["extra_ids"], None)
    with pytest.raises(ValueError, match="extra_ids"):
        mixed_negatives_loss(q, v, x["ids"], None, x["extra"], x["extra_ids"][:2])
    with pytest.raises(ValueError, match="reduction"):
        in_batch_softmax_loss(q, v, reduction="avg")
    with pytest.raises(ValueError, match="form"):
        mixed_log_q(torch.rand(3), torch.rand(3), 4, 2, "uniform")
    with pytest.raises(ValueError, match="batch_probs must lie"):
        mixed_log_q(torch.tensor([2.0]), torch.rand(1), 4, 2)
    with pytest.raises(ValueError, match="same shape"):
        mixed_log_q(torch.rand(3), torch.rand(2), 4, 2)
    with pytest.raises(ValueError, match="num_extra"):
        mixed_log_q(torch.rand(3), torch.rand(3), 4, -1)
    with pytest.raises(ValueError, match="Q\\* must be > 0"):
        mixed_log_q(torch.zeros(2), torch.zeros(2), 4, 2)
