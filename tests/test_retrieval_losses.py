"""The in-batch softmax (chapter 5) against float64 loop references.

Every batch is a dict of plain tensors (``query``, ``candidates``, ``candidate_ids``,
``log_q``): the first ``B`` candidate rows are the rows' positives, mixed negatives are
extra rows after them. :func:`in_batch` turns it into the loss's two CandidateSets
(``positives`` = the first ``B`` columns, ``candidates`` = the rest), so the loop reference
stays written over one matrix.
"""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from candidate_sampling.sampling.frequency import (
    StreamingFrequencyEstimator,
    item_probabilities,
    mixed_log_q,
)
from candidate_sampling import CandidateSet
from candidate_sampling.losses import (
    RetrievalLoss,
    accidental_hits,
    in_batch_logits,
    in_batch_softmax_loss,
    mask_value,
    positive_column_cross_entropy,
)
from candidate_sampling.sampling.samplers import UniformSampler, UnigramSampler

D64 = torch.float64


def reference_loss(
    query,
    candidates,
    *,
    positive_ids=None,
    candidate_ids=None,
    log_q=None,
    temperature=1.0,
    remove_accidental_hits=None,
    hits_from=0,
):
    """Loop reference in float64: per row, log-sum-exp over kept columns minus column i;
    accidental hits are removed only in columns ``j >= hits_from``."""
    q, v = query.double(), candidates.double()
    batch, num_cand = q.shape[0], v.shape[0]
    if remove_accidental_hits is None:
        remove_accidental_hits = candidate_ids is not None
    if positive_ids is None and candidate_ids is not None:
        positive_ids = candidate_ids[:batch]
    losses = []
    for i in range(batch):
        terms, positive = [], None
        for j in range(num_cand):
            logit = float(q[i] @ v[j]) / temperature
            if log_q is not None:
                logit -= float(log_q[j])
            if j == i:
                positive = logit
            elif (remove_accidental_hits and j >= hits_from
                  and int(candidate_ids[j]) == int(positive_ids[i])):
                continue  # an accidental hit: the row's positive id in another column
            terms.append(logit)
        m = max(terms)
        losses.append(m + math.log(sum(math.exp(t - m) for t in terms)) - positive)
    return torch.tensor(losses, dtype=D64)


def make_batch(seed, *, batch_size=6, num_extra=5, dim=4, num_items=5, dtype=D64):
    """``B`` queries and ``C = B + num_extra`` candidate rows, ids in ``[0, num_items)``."""
    g = torch.Generator().manual_seed(seed)
    num_cand = batch_size + num_extra
    return {
        "query": torch.randn(batch_size, dim, generator=g, dtype=dtype),
        "candidates": torch.randn(num_cand, dim, generator=g, dtype=dtype),
        "candidate_ids": torch.randint(0, num_items, (num_cand,), generator=g),
        "log_q": torch.randn(num_cand, generator=g, dtype=dtype),
    }


def as_sets(query, candidates, candidate_ids=None, log_q=None):
    """(positives, extras) CandidateSets of a one-matrix batch; no ids: distinct ones."""
    batch = query.shape[0]
    if candidate_ids is None:
        candidate_ids = torch.arange(candidates.shape[0])
    def part(cols):
        return CandidateSet(
            candidates[cols], candidate_ids[cols], None if log_q is None else log_q[cols]
        )
    extras = part(slice(batch, None)) if candidates.shape[0] > batch else None
    return part(slice(0, batch)), extras


def in_batch(fn, query, candidates, *, candidate_ids=None, log_q=None,
             remove_accidental_hits=None, **options):
    """``fn(query, positives, extras, ...)``; hits removed by default when ids are given."""
    if remove_accidental_hits is None:
        remove_accidental_hits = candidate_ids is not None
    positives, extras = as_sets(query, candidates, candidate_ids, log_q)
    return fn(query, positives, extras, remove_accidental_hits=remove_accidental_hits, **options)


def loss_of(*args, **kwargs):
    return in_batch(in_batch_softmax_loss, *args, **kwargs)


def logits_of(*args, **kwargs):
    return in_batch(in_batch_logits, *args, **kwargs)


def without(batch, *names):
    return {k: v for k, v in batch.items() if k not in names}


# ---------------------------------------------------------------- against the loop reference


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("temperature", [1.0, 0.3])
@pytest.mark.parametrize("remove_accidental_hits", [None, False, True])
@pytest.mark.parametrize("num_extra", [0, 5])
def test_matches_loop_reference(seed, temperature, remove_accidental_hits, num_extra):
    """C ≥ B candidates, log Q on every column (the positive's included)."""
    batch = make_batch(seed, num_extra=num_extra)
    options = {"temperature": temperature, "remove_accidental_hits": remove_accidental_hits}
    got = loss_of(**batch, **options, reduction="none")
    assert got.dtype == D64 and got.shape == (6,)
    assert torch.allclose(got, reference_loss(**batch, **options), rtol=0, atol=1e-10)


@pytest.mark.parametrize("seed", range(3))
def test_without_ids_or_log_q_matches_reference(seed):
    batch = make_batch(seed)
    got = loss_of(batch["query"], batch["candidates"], reduction="none")
    want = reference_loss(batch["query"], batch["candidates"])
    assert torch.allclose(got, want, rtol=0, atol=1e-10)


def test_plain_in_batch_is_cross_entropy_on_the_diagonal():
    batch = make_batch(0, num_extra=0)
    got = loss_of(batch["query"], batch["candidates"])
    want = torch.nn.functional.cross_entropy(
        batch["query"] @ batch["candidates"].T, torch.arange(6)
    )
    assert torch.allclose(got, want)


def test_extra_columns_are_cross_entropy_with_the_positive_in_column_i():
    batch = make_batch(1)
    got = loss_of(**without(batch, "candidate_ids"), temperature=0.4)
    logits = batch["query"] @ batch["candidates"].T / 0.4 - batch["log_q"][None]
    want = torch.nn.functional.cross_entropy(logits, torch.arange(6))
    assert torch.allclose(got, want, rtol=0, atol=1e-12)


@pytest.mark.parametrize("remove_accidental_hits", [False, True])
def test_no_extras_is_the_same_as_zero_extra_rows(remove_accidental_hits):
    batch = make_batch(1, num_extra=0)
    extra = make_batch(2, num_extra=0)
    a = loss_of(**batch, remove_accidental_hits=remove_accidental_hits)
    b = loss_of(
        batch["query"],
        torch.cat([batch["candidates"], extra["candidates"][:0]]),
        candidate_ids=torch.cat([batch["candidate_ids"], extra["candidate_ids"][:0]]),
        log_q=torch.cat([batch["log_q"], extra["log_q"][:0]]),
        remove_accidental_hits=remove_accidental_hits,
    )
    assert torch.allclose(a, b, rtol=0, atol=1e-12)


def test_reductions():
    batch = make_batch(3)
    none = loss_of(**batch, reduction="none")
    assert loss_of(**batch).item() == pytest.approx(none.mean().item(), rel=1e-12)
    summed = loss_of(**batch, reduction="sum")
    assert summed.item() == pytest.approx(none.sum().item(), rel=1e-12)


# ---------------------------------------------------------------- accidental hits


def test_masking_duplicates_equals_removing_them():
    """Row 0's positive (item 7) also sits in columns 2 and 4: masking = deleting them."""
    batch = make_batch(2, num_extra=0)
    batch["candidate_ids"] = torch.tensor([7, 1, 7, 3, 7, 5])
    full = loss_of(**batch, reduction="none")
    keep = torch.tensor([0, 1, 3, 5])
    reduced = loss_of(
        batch["query"][keep],
        batch["candidates"][keep],
        candidate_ids=batch["candidate_ids"][keep],
        log_q=batch["log_q"][keep],
        remove_accidental_hits=False,
        reduction="none",
    )
    assert torch.allclose(full[0], reduced[0], rtol=0, atol=1e-12)


def test_accidental_hits_among_extras_are_masked():
    batch = make_batch(3)
    batch["candidate_ids"] = torch.tensor([0, 1, 2, 3, 4, 5, 0, 10, 11, 12, 13])
    masked = loss_of(**batch, reduction="none")  # extra 0 is row 0's positive
    keep = torch.tensor([0, 1, 2, 3, 4, 5, 7, 8, 9, 10])
    dropped = loss_of(
        batch["query"],
        batch["candidates"][keep],
        candidate_ids=batch["candidate_ids"][keep],
        log_q=batch["log_q"][keep],
        reduction="none",
    )
    assert torch.allclose(masked[0], dropped[0], rtol=0, atol=1e-12)
    assert not torch.allclose(masked[1:], dropped[1:])


def test_hit_removal_masks_exactly_the_other_columns_holding_the_row_s_positive():
    """Column j ≠ i is masked iff candidate_ids[j] == positive id of row i: duplicates
    among the positives and extras alike; column i itself never."""
    batch = make_batch(4, batch_size=6, num_extra=6, num_items=4)
    batch["candidate_ids"][:6] = torch.tensor([0, 1, 0, 2, 0, 3])  # duplicates of 0
    batch["candidate_ids"][6:] = torch.tensor([1, 0, 9, 3, 3, 8])  # hits among extras
    logits = logits_of(**batch, temperature=0.5)
    masked = logits == mask_value(logits.dtype)
    ids = batch["candidate_ids"].tolist()
    want = [[j != i and ids[j] == ids[i] for j in range(12)] for i in range(6)]
    assert masked.tolist() == want
    unmasked = batch["query"] @ batch["candidates"].T / 0.5 - batch["log_q"][None]
    assert torch.equal(logits[~masked], unmasked[~masked])
    off = logits_of(**batch, temperature=0.5, remove_accidental_hits=False)
    assert torch.equal(off, unmasked)


def test_positive_ids_come_with_the_positives():
    """Row i's positive id is positives.ids[i]: no second id vector can disagree with it."""
    batch = make_batch(5, batch_size=4, num_extra=4, num_items=3)
    batch["candidate_ids"] = torch.tensor([0, 1, 2, 0, 5, 6, 7, 0])
    positives, extras = as_sets(**batch)
    every = in_batch_logits(batch["query"], positives, extras, remove_accidental_hits=True)
    masked = every == mask_value(D64)
    assert torch.nonzero(masked).tolist() == [[0, 3], [0, 7], [3, 0], [3, 7]]
    # the default: the batch's copies (columns 0 and 3) are kept, the hand-built extras'
    # (a "fixed" set) removed
    masked = in_batch_logits(batch["query"], positives, extras) == mask_value(D64)
    assert torch.nonzero(masked).tolist() == [[0, 7], [3, 7]]


def test_float16_mask_is_finite():
    batch = make_batch(8, num_extra=3)
    ids = torch.zeros(9, dtype=torch.int64)  # every column is a duplicate of every row
    loss = loss_of(
        batch["query"].half(), batch["candidates"].half(), candidate_ids=ids, reduction="none"
    )
    assert loss.dtype == torch.float32
    assert torch.isfinite(loss).all()
    assert torch.allclose(loss, torch.zeros(6))


def test_half_inputs_are_computed_in_float32():
    batch = make_batch(9, dtype=torch.float32)
    q16, v16 = batch["query"].half(), batch["candidates"].half()
    half = loss_of(
        q16, v16, candidate_ids=batch["candidate_ids"], log_q=batch["log_q"], temperature=0.05
    )
    full = loss_of(
        q16.float(),
        v16.float(),
        candidate_ids=batch["candidate_ids"],
        log_q=batch["log_q"],
        temperature=0.05,
    )
    assert half.dtype == torch.float32 and torch.isfinite(half)
    assert half.item() == pytest.approx(full.item(), rel=1e-6)


# ---------------------------------------------------------------- properties


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    batch_size=st.integers(1, 5),
    num_extra=st.integers(0, 4),
    num_items=st.integers(1, 4),
    temperature=st.floats(0.1, 3.0),
)
def test_masking_a_column_equals_deleting_it(seed, batch_size, num_extra, num_items, temperature):
    """Row i's loss with hit removal = its loss over the columns that are not its hits."""
    batch = make_batch(seed, batch_size=batch_size, num_extra=num_extra, num_items=num_items)
    masked = loss_of(**batch, temperature=temperature, reduction="none")
    ids = batch["candidate_ids"]
    for i in range(batch_size):
        keep = [i] + [j for j in range(ids.shape[0]) if j != i and ids[j] != ids[i]]
        deleted = loss_of(
            batch["query"][i : i + 1],
            batch["candidates"][keep],
            log_q=batch["log_q"][keep],
            temperature=temperature,
            reduction="none",
        )
        assert masked[i].item() == pytest.approx(deleted.item(), rel=1e-12, abs=1e-12)


@settings(max_examples=25, deadline=None)
@given(shift=st.floats(-20, 20), seed=st.integers(0, 50), temperature=st.floats(0.1, 3.0))
def test_constant_shift_of_log_q_cancels(shift, seed, temperature):
    batch = make_batch(seed)
    a = loss_of(**batch, temperature=temperature)
    shifted = dict(batch, log_q=batch["log_q"] + shift)
    b = loss_of(**shifted, temperature=temperature)
    assert torch.allclose(a, b, rtol=0, atol=1e-9)


# ---------------------------------------------------------------- pipeline steps


def test_diagonal_layout_equals_positive_first_layout():
    logits = torch.randn(4, 7, dtype=D64)
    moved = torch.stack(
        [torch.cat([row[i : i + 1], row[:i], row[i + 1 :]]) for i, row in enumerate(logits)]
    )
    assert torch.allclose(
        positive_column_cross_entropy(logits, torch.arange(4)),
        positive_column_cross_entropy(moved, 0),
    )


def test_accidental_hits_with_positive_columns():
    mask = accidental_hits(
        torch.tensor([4, 5, 4]), torch.tensor([4, 5, 4, 5, 9]), positive_columns=torch.arange(3)
    )
    assert mask.tolist() == [
        [False, False, True, False, False],
        [False, False, False, True, False],
        [True, False, False, False, False],
    ]


def test_temperature_and_logq_order():
    """logit = s/τ − log Q, which differs from (s − log Q)/τ when τ ≠ 1."""
    batch = without(make_batch(4), "candidate_ids")
    tau = 0.2
    ours = loss_of(**batch, temperature=tau)
    scores = batch["query"] @ batch["candidates"].T
    log_q = batch["log_q"][None]
    ce = torch.nn.functional.cross_entropy
    labels = torch.arange(6)
    assert torch.allclose(ours, ce(scores / tau - log_q, labels))
    assert not torch.allclose(ours, ce((scores - log_q) / tau, labels))
    one = loss_of(**batch, temperature=1.0)
    assert torch.allclose(one, ce(scores - log_q, labels))


def test_mixed_log_q_forms():
    q = torch.tensor([0.01, 0.2, 0.0], dtype=D64)
    r = torch.full((3,), 0.1, dtype=D64)
    b, b2 = 8, 4
    expected = torch.log(b * q + b2 * r)

    def form(name):
        return mixed_log_q(q, r, batch_size=b, num_samples=b2, form=name).double()

    assert torch.allclose(form("expected_count"), expected, atol=1e-6)
    assert torch.allclose(mixed_log_q(q, r, batch_size=b, num_samples=b2).double(), expected)
    assert torch.allclose(form("mixture"), expected - math.log(b + b2), atol=1e-6)
    incl = torch.log(1 - (1 - q) ** b * (1 - r) ** b2)
    assert torch.allclose(form("inclusion"), incl, atol=1e-6)


def test_mixture_and_expected_count_give_the_same_loss():
    """The factor B + B' cancels under the softmax when every column uses the same Q*."""
    batch = make_batch(5)
    g = torch.Generator().manual_seed(0)
    q = torch.rand(11, generator=g) / 10
    r = torch.full((11,), 0.05)
    losses = {}
    for form in ("mixture", "expected_count", "inclusion"):
        log_q = mixed_log_q(q, r, batch_size=6, num_samples=5, form=form).double()
        losses[form] = loss_of(**dict(batch, log_q=log_q))
    assert torch.allclose(losses["mixture"], losses["expected_count"], atol=1e-6)
    assert not torch.allclose(losses["mixture"], losses["inclusion"], atol=1e-4)


def test_gradcheck():
    batch = make_batch(6, batch_size=4, num_extra=3, dim=3, num_items=3)
    batch["candidate_ids"][:4] = torch.tensor([0, 1, 0, 2])

    def f(query, candidates):
        return loss_of(
            query,
            candidates,
            candidate_ids=batch["candidate_ids"],
            log_q=batch["log_q"],
            temperature=0.5,
        )

    inputs = (batch["query"].requires_grad_(), batch["candidates"].requires_grad_())
    assert torch.autograd.gradcheck(f, inputs)


# ---------------------------------------------------------------- RetrievalLoss


def _retrieval_setup(seed=0, batch_size=6, num_items=20, dim=4):
    g = torch.Generator().manual_seed(seed)
    table = torch.randn(num_items, dim, generator=g, dtype=D64)
    positive_ids = torch.tensor([0, 3, 3, 7, 1, 0])[:batch_size]
    query = torch.randn(batch_size, dim, generator=g, dtype=D64)
    counts = torch.randint(1, 50, (num_items,), generator=g)
    return table, query, positive_ids, item_probabilities(counts)


def test_retrieval_loss_modules_and_reductions():
    batch = make_batch(7, num_extra=0)
    ids = batch["candidate_ids"]
    module = RetrievalLoss(temperature=0.5, reduction="sum")
    got = module(batch["query"], batch["candidates"], ids)
    options = {"candidate_ids": ids, "temperature": 0.5, "reduction": "none"}
    # the default keeps the batch's copies of a row's positive (TF Recommenders' default)
    want = loss_of(batch["query"], batch["candidates"], **options,
                   remove_accidental_hits=False).sum()
    assert torch.allclose(got, want, rtol=0, atol=1e-12)
    assert len(set(ids.tolist())) < len(ids)  # there are copies to keep
    removing = RetrievalLoss(temperature=0.5, reduction="sum", remove_accidental_hits=True)
    want = loss_of(batch["query"], batch["candidates"], **options,
                   remove_accidental_hits=True).sum()
    torch.testing.assert_close(removing(batch["query"], batch["candidates"], ids), want)
    assert not torch.isclose(want, got)
    plain = RetrievalLoss(remove_accidental_hits=False)
    assert plain(batch["query"], batch["candidates"][:6], ids[:6]).shape == ()


@pytest.mark.parametrize("temperature", [1.0, 0.5])
def test_retrieval_loss_with_item_probabilities_and_uniform_extras(temperature):
    """log Q = log(B·q(y) + B'·r(y)) on every column, positives and extras alike."""
    table, query, positive_ids, q = _retrieval_setup()
    batch_size, num_samples, num_items = 6, 4, 20
    sampler = UniformSampler(num_items)
    module = RetrievalLoss(
        temperature=temperature, item_probabilities=q, sampler=sampler, num_samples=num_samples
    )
    calls = []

    def item_encoder(ids):
        calls.append(ids)
        return table[ids]

    got = module(
        query,
        table[positive_ids],
        positive_ids,
        item_encoder=item_encoder,
        generator=torch.Generator().manual_seed(11),
    )
    extra_ids = sampler.sample(num_samples, generator=torch.Generator().manual_seed(11)).ids
    assert len(calls) == 1 and torch.equal(calls[0], extra_ids)
    candidate_ids = torch.cat([positive_ids, extra_ids])
    r = sampler.probs.double()  # the sampler's per-draw probability, 1/|V| (float32)
    assert torch.allclose(r, torch.full((num_items,), 1.0 / num_items, dtype=D64))
    log_q = torch.log(batch_size * q.double()[candidate_ids] + num_samples * r[candidate_ids])
    hand_built = {  # extras drawn with replacement: the default keeps every hit
        "candidate_ids": candidate_ids,
        "log_q": log_q.float(),
        "temperature": temperature,
        "remove_accidental_hits": False,
    }
    want = loss_of(query, table[candidate_ids], **hand_built)
    assert torch.allclose(got, want, rtol=0, atol=1e-12)
    loop = reference_loss(query, table[candidate_ids], **{**hand_built, "log_q": log_q}).mean()
    assert got.item() == pytest.approx(loop.item(), rel=0, abs=1e-6)
    via_mixed = mixed_log_q(
        q[candidate_ids],
        sampler.probs[candidate_ids],
        batch_size=batch_size,
        num_samples=num_samples,
    )
    assert torch.allclose(via_mixed.double(), log_q, rtol=0, atol=1e-6)


def test_retrieval_loss_with_unique_extras_uses_their_expected_count():
    """With unique draws the extras' expected count is 1 − (1 − r)^num_tries, not B'·r."""
    table, query, positive_ids, q = _retrieval_setup(seed=1)
    counts = torch.arange(1, 21) ** 2
    sampler = UnigramSampler(counts, distortion=1.0)
    module = RetrievalLoss(
        temperature=0.5, item_probabilities=q, sampler=sampler, num_samples=5, unique=True
    )
    got = module(
        query,
        table[positive_ids],
        positive_ids,
        item_encoder=lambda ids: table[ids],
        generator=torch.Generator().manual_seed(5),
    )
    draw = sampler.sample(5, unique=True, generator=torch.Generator().manual_seed(5))
    assert draw.num_tries > 5  # repeats were drawn, so B'·r would be the wrong count
    candidate_ids = torch.cat([positive_ids, draw.ids])
    r = sampler.probs.double()[candidate_ids]
    extra_count = 1 - (1 - r) ** draw.num_tries
    assert torch.allclose(torch.log(extra_count[6:]), draw.log_q.double(), rtol=0, atol=1e-6)
    log_q = torch.log(6 * q.double()[candidate_ids] + extra_count)
    # the default: the batch's copies kept, the unique draw's hits removed
    want = reference_loss(
        query, table[candidate_ids], candidate_ids=candidate_ids, log_q=log_q, temperature=0.5,
        remove_accidental_hits=True, hits_from=6,
    ).mean()
    assert got.item() == pytest.approx(want.item(), rel=0, abs=1e-6)


def test_retrieval_loss_with_a_frequency_estimator_updates_and_uses_it():
    table, query, positive_ids, _ = _retrieval_setup(seed=2)
    estimator = StreamingFrequencyEstimator(20, learning_rate=0.5, hash_ids=False)
    twin = StreamingFrequencyEstimator(20, learning_rate=0.5, hash_ids=False)
    module = RetrievalLoss(temperature=0.7, frequency_estimator=estimator)
    assert module.frequency_estimator is estimator
    batches = [positive_ids, torch.tensor([0, 1, 2, 4, 5, 6]), torch.tensor([0, 3, 8, 9, 1, 0])]
    for step, ids in enumerate(batches, 1):
        got = module(query, table[ids], ids)
        twin.update(ids)
        assert estimator.step == step
        assert torch.equal(estimator.gap, twin.gap)
        log_q = torch.log(twin.estimate(ids).double()).float()
        want = loss_of(
            query, table[ids], candidate_ids=ids, log_q=log_q, temperature=0.7,
            remove_accidental_hits=False,
        )
        assert torch.allclose(got, want, rtol=0, atol=1e-12)
    assert len(set(twin.estimate(ids).tolist())) > 1  # item 0 every step, item 8 once
    uncorrected = RetrievalLoss(temperature=0.7)(query, table[ids], ids)
    assert not torch.allclose(got, uncorrected)


@pytest.mark.parametrize("num_probs,num_sampled", [(10, 20), (20, 10)])
def test_retrieval_loss_catalogue_sizes_must_agree(num_probs, num_sampled):
    # item_probabilities shorter than the sampler's catalogue was an IndexError at forward
    probs = torch.full((num_probs,), 1 / num_probs)
    message = (
        rf"number of items \|V\| must agree, got item_probabilities={num_probs}, "
        rf"sampler.num_items={num_sampled}"
    )
    with pytest.raises(ValueError, match=message):
        RetrievalLoss(item_probabilities=probs, sampler=UniformSampler(num_sampled), num_samples=5)
    with pytest.raises(ValueError, match=message):  # the sampler is unused without extras
        RetrievalLoss(item_probabilities=probs, sampler=UniformSampler(num_sampled))


def test_retrieval_loss_errors():
    table, query, positive_ids, q = _retrieval_setup()
    estimator = StreamingFrequencyEstimator(20, hash_ids=False)
    sampler = UniformSampler(20)
    with pytest.raises(ValueError, match="not both"):
        RetrievalLoss(item_probabilities=q, frequency_estimator=estimator)
    with pytest.raises(ValueError, match="needs a sampler"):
        RetrievalLoss(num_samples=3)
    with pytest.raises(ValueError, match="sampler must be a CandidateSampler"):
        RetrievalLoss(sampler="uniform", num_samples=3)
    with pytest.raises(ValueError, match="frequency_estimator must be"):
        RetrievalLoss(frequency_estimator=q)
    with pytest.raises(ValueError, match="item_probabilities must lie"):
        RetrievalLoss(item_probabilities=q * 100)
    with pytest.raises(ValueError, match="item_probabilities must have shape"):
        RetrievalLoss(item_probabilities=q[None])
    with pytest.raises(ValueError, match="num_samples must be"):
        RetrievalLoss(sampler=sampler, num_samples=-1)
    with pytest.raises(ValueError, match="temperature"):
        RetrievalLoss(temperature=0.0)
    with pytest.raises(ValueError, match="reduction"):
        RetrievalLoss(reduction="avg")
    with pytest.raises(TypeError):
        RetrievalLoss(0.5)  # options are keyword-only
    module = RetrievalLoss(sampler=sampler, num_samples=3)
    with pytest.raises(ValueError, match="item_encoder"):
        module(query, table[positive_ids], positive_ids)
    for needs_ids in (RetrievalLoss(), RetrievalLoss(item_probabilities=q), module):
        with pytest.raises(TypeError):
            needs_ids(query, table[positive_ids], item_encoder=lambda ids: table[ids])
    with pytest.raises(TypeError):
        module(query, table[positive_ids], positive_ids, lambda ids: table[ids])


def test_retrieval_loss_repr_lists_its_options():
    q = item_probabilities(torch.arange(1, 11))
    module = RetrievalLoss(
        temperature=0.1, item_probabilities=q, sampler=UniformSampler(10), num_samples=3
    )
    text = repr(module)
    for option in (
        "temperature=0.1",
        "num_samples=3",
        "unique=False",
        "remove_accidental_hits=None",
        "reduction='mean'",
        "log_q_source='item_probabilities'",
    ):
        assert option in text, text
    assert "log_q_source='none'" in repr(RetrievalLoss())
    estimator = StreamingFrequencyEstimator(10, hash_ids=False)
    assert "log_q_source='frequency_estimator'" in repr(
        RetrievalLoss(frequency_estimator=estimator)
    )


# ---------------------------------------------------------------- bad inputs


def test_bad_inputs():
    batch = make_batch(9)
    q, v, ids, log_q = batch["query"], batch["candidates"], batch["candidate_ids"], batch["log_q"]
    positives, extras = as_sets(**batch)
    with pytest.raises(ValueError, match="temperature"):
        in_batch_softmax_loss(q, positives, extras, temperature=0.0)
    with pytest.raises(ValueError, match="positives must have B = 6 columns"):
        in_batch_softmax_loss(q, positives.select(slice(0, 3)))  # fewer positives than rows
    with pytest.raises(ValueError, match="positives must have B = 6 columns"):
        in_batch_softmax_loss(q, CandidateSet(v[:7], ids[:7]))  # B + 1 positives
    with pytest.raises(ValueError, match="embedding size d"):
        in_batch_softmax_loss(q[:, :2], positives)
    with pytest.raises(ValueError, match="positives must be a CandidateSet"):
        in_batch_softmax_loss(q, v[:6])
    with pytest.raises(ValueError, match="candidates must be a CandidateSet"):
        in_batch_softmax_loss(q, positives, v[6:])
    with pytest.raises(ValueError, match="ids must have shape"):
        CandidateSet(v, ids[:6])
    with pytest.raises(ValueError, match="ids must be an integer"):
        CandidateSet(v, torch.zeros(11))
    with pytest.raises(ValueError, match="log_q must have shape"):
        CandidateSet(v, ids, log_q[:6])
    with pytest.raises(ValueError, match="log_q must be finite"):
        CandidateSet(v, ids, torch.full((11,), float("-inf")))
    nan_log_q = log_q.clone()
    nan_log_q[3] = float("nan")
    with pytest.raises(ValueError, match="log_q must be finite"):
        CandidateSet(v, ids, nan_log_q)
    with pytest.raises(ValueError, match="ids must be >= 0"):
        CandidateSet(v, torch.full((11,), -1))  # a negative id would wrap item_probabilities
    with pytest.raises(ValueError, match="reduction"):
        in_batch_softmax_loss(q, positives, reduction="avg")
    with pytest.raises(ValueError, match="repeated_hits"):
        in_batch_softmax_loss(q, positives, repeated_hits="first")
    with pytest.raises(ValueError, match="sample_weight must have shape"):
        in_batch_softmax_loss(q, positives, sample_weight=torch.ones(5, dtype=D64))
    with pytest.raises(TypeError):
        in_batch_softmax_loss(q, positives, extras, 0.5)  # options are keyword-only
    with pytest.raises(ValueError, match="form"):
        mixed_log_q(torch.rand(3), torch.rand(3), batch_size=4, num_samples=2, form="uniform")
    with pytest.raises(ValueError, match="batch_probs must lie"):
        mixed_log_q(torch.tensor([2.0]), torch.rand(1), batch_size=4, num_samples=2)
    with pytest.raises(ValueError, match="same shape"):
        mixed_log_q(torch.rand(3), torch.rand(2), batch_size=4, num_samples=2)
    with pytest.raises(ValueError, match="num_samples"):
        mixed_log_q(torch.rand(3), torch.rand(3), batch_size=4, num_samples=-1)
    with pytest.raises(ValueError, match="Q\\* must be > 0"):
        mixed_log_q(torch.zeros(2), torch.zeros(2), batch_size=4, num_samples=2)


def test_in_batch_logits_follow_repeated_hits_tensorflow():
    """``repeated_hits="tensorflow"`` in the in-batch layout masks what
    ``accidental_hits(..., repeated_hits="tensorflow")`` marks (only the last copy of a
    repeated positive id), not every copy as ``"mask_all"`` does."""
    from candidate_sampling.losses import in_batch_logits
    from candidate_sampling.losses.core import accidental_hits, mask_logits

    gen = torch.Generator().manual_seed(0)
    q, v = torch.randn(4, 3, generator=gen), torch.randn(4, 3, generator=gen)
    ids = torch.tensor([3, 3, 5, 3])
    positives = CandidateSet(v, ids)
    raw = in_batch_logits(q, positives, remove_accidental_hits=False)
    own = torch.arange(4)
    for mode in ("tensorflow", "mask_all"):
        got = in_batch_logits(q, positives, repeated_hits=mode, remove_accidental_hits=True)
        hits = accidental_hits(ids, ids, positive_columns=own, repeated_hits=mode)
        torch.testing.assert_close(got, mask_logits(raw, hits))
        # the default keeps the batch's copies, whatever the rule for removed ones
        torch.testing.assert_close(in_batch_logits(q, positives, repeated_hits=mode), raw)
    tf = in_batch_softmax_loss(q, positives, repeated_hits="tensorflow",
                               remove_accidental_hits=True)
    every = in_batch_softmax_loss(q, positives, repeated_hits="mask_all",
                                  remove_accidental_hits=True)
    assert not torch.isclose(tf, every)
