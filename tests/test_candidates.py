"""CandidateSet: constructors, concat, validation (chapters 4-9)."""

import pytest
import torch

import candidate_sampling as cs
from candidate_sampling import CandidateSet
from candidate_sampling.sampling.frequency import StreamingFrequencyEstimator
from candidate_sampling.sampling.samplers import UniformSampler, UnigramSampler


def _set(c=4, d=3, log_q=True, mask=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    return CandidateSet(
        torch.randn(c, d, generator=g, dtype=torch.float64),
        torch.arange(c),
        torch.randn(c, generator=g, dtype=torch.float64) if log_q else None,
        mask,
    )


def test_exported_at_top_level():
    assert cs.CandidateSet is CandidateSet


def test_from_draw_gathers_rows_and_log_q():
    table = torch.randn(20, 4)
    sampler = UnigramSampler(torch.arange(1, 21).double())
    pos = torch.tensor([3, 7])
    draw = sampler.sample(6, positive_ids=pos, generator=torch.Generator().manual_seed(0))
    s = CandidateSet.from_draw(draw, table)
    torch.testing.assert_close(s.embeddings, table[draw.ids])
    torch.testing.assert_close(s.log_q, draw.log_q)
    assert CandidateSet.from_draw(draw, table, correct=False).log_q is None
    encoded = CandidateSet.from_draw(draw, lambda ids: table[ids] * 2)
    torch.testing.assert_close(encoded.embeddings, 2 * table[draw.ids])
    p = CandidateSet.positives_of(pos, table, draw=draw)
    torch.testing.assert_close(p.log_q, draw.positive_log_q)
    torch.testing.assert_close(p.embeddings, table[pos])


def test_positives_of_rejects_a_draw_made_for_other_positives():
    table = torch.randn(20, 4)
    draw = UniformSampler(20).sample(5, positive_ids=torch.tensor([1, 2, 3]))
    with pytest.raises(ValueError, match="draw was made for positive_ids of shape"):
        CandidateSet.positives_of(torch.tensor([1, 2]), table, draw=draw)
    bare = UniformSampler(20).sample(5)
    with pytest.raises(ValueError, match="without positive_ids"):
        CandidateSet.positives_of(torch.tensor([1, 2]), table, draw=bare)


def test_positives_of_rejects_a_draw_made_for_other_ids_of_the_same_shape():
    # the shape alone matched: another batch's true_expected_count was used silently
    table = torch.randn(20, 4)
    sampler = UnigramSampler(torch.arange(20, 0, -1).double())
    draw = sampler.sample(5, positive_ids=torch.tensor([0, 3, 5, 1]))
    other = torch.tensor([9, 8, 7, 6])
    with pytest.raises(ValueError, match="draw was made for other positive_ids"):
        CandidateSet.positives_of(other, table, draw=draw)
    # the ids are a value check: skipped with validation off, as every value check
    with cs.validate_args(False):
        CandidateSet.positives_of(other, table, draw=draw)
    # the same ids in another tensor (int32, (B, T)) are this draw's
    pairs = torch.tensor([[0, 3], [5, 1]])
    draw = sampler.sample(5, positive_ids=pairs)
    p = CandidateSet.positives_of(pairs.int(), table, draw=draw)
    torch.testing.assert_close(p.log_q, draw.positive_log_q.reshape(-1))


def test_from_batch_log_q_is_expected_count():
    p = torch.tensor([0.5, 0.25, 0.125, 0.125])
    ids = torch.tensor([0, 1, 3])
    s = CandidateSet.from_batch(torch.randn(3, 2), ids, item_probabilities=p)
    torch.testing.assert_close(s.log_q, torch.log(3 * p[ids]))
    s = CandidateSet.from_batch(torch.randn(3, 2), ids, item_probabilities=p, num_draws=12)
    torch.testing.assert_close(s.log_q, torch.log(12 * p[ids]))
    est = StreamingFrequencyEstimator(8, hash_ids=False)
    est.update(ids)
    s = CandidateSet.from_batch(torch.randn(3, 2), ids, frequency_estimator=est)
    torch.testing.assert_close(s.log_q, est.log_inclusion(ids))
    assert CandidateSet.from_batch(torch.randn(3, 2), ids).log_q is None


def test_concat_keeps_each_columns_log_q_and_mask_and_broadcasts_rows():
    a = _set(3, seed=1)
    per_row = torch.randn(2, 4, dtype=torch.float64)
    mask = torch.tensor([[True, False, True, True], [True, True, True, False]])
    b = CandidateSet(torch.randn(4, 3, dtype=torch.float64), torch.arange(4), per_row, mask)
    c = CandidateSet(torch.randn(2, 3, dtype=torch.float64), torch.tensor([5, 6]))
    joined = CandidateSet.concat(a, b, c)
    assert joined.num_candidates == 9 and joined.batch_size == 2
    assert joined.log_q.shape == (2, 9) and joined.mask.shape == (2, 9)
    torch.testing.assert_close(joined.log_q[:, :3], a.log_q.expand(2, -1))
    torch.testing.assert_close(joined.log_q[:, 3:7], per_row)
    assert (joined.log_q[:, 7:] == 0).all()  # no correction in c's columns
    assert joined.mask[:, :3].all() and (joined.mask[:, 3:7] == mask).all()
    assert (a + b + c).ids.tolist() == joined.ids.tolist()
    torch.testing.assert_close(joined.select(slice(3, 7)).log_q, per_row)


def test_concat_promotes_dtypes_and_needs_matching_shapes():
    a = CandidateSet(torch.randn(2, 3, dtype=torch.float16), torch.arange(2))
    b = CandidateSet(torch.randn(2, 3), torch.arange(2))
    assert (a + b).embeddings.dtype == torch.float32
    with pytest.raises(ValueError, match="same embedding size d"):
        CandidateSet.concat(b, CandidateSet(torch.randn(2, 4), torch.arange(2)))
    r2 = CandidateSet(torch.randn(2, 3), torch.arange(2), torch.zeros(2, 2))
    r3 = CandidateSet(torch.randn(2, 3), torch.arange(2), torch.zeros(3, 2))
    with pytest.raises(ValueError, match="agree on B"):
        CandidateSet.concat(r2, r3)
    with pytest.raises(ValueError, match="at least one"):
        CandidateSet.concat()
    with pytest.raises(ValueError, match=r"sets\[1\] must be a CandidateSet"):
        CandidateSet.concat(b, torch.zeros(2))


def test_half_table_gathers_repeats_with_float32_gradients():
    table = torch.full((4, 2), 1.0, dtype=torch.float16, requires_grad=True)
    ids = torch.tensor([1, 1, 1, 2])
    s = CandidateSet.from_ids(ids, table)
    assert s.embeddings.dtype == torch.float32
    (s.embeddings * torch.tensor([[60000.0, 0.0], [60000.0, 0.0], [-60000.0, 0.0],
                                  [1.0, 0.0]])).sum().backward()
    assert torch.isfinite(table.grad).all()
    assert float(table.grad[1, 0]) == 60000.0


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(embeddings=torch.zeros(3), ids=torch.arange(3)), "embeddings must have shape"),
        (dict(embeddings=torch.zeros(3, 2, dtype=torch.long), ids=torch.arange(3)),
         "embeddings must be a floating"),
        (dict(embeddings=torch.zeros(3, 2), ids=torch.arange(2)), r"ids must have shape \(3,\)"),
        (dict(embeddings=torch.zeros(3, 2), ids=torch.zeros(3)), "ids must be an integer"),
        (dict(embeddings=torch.zeros(3, 2), ids=torch.tensor([0, -1, 2])), "ids must be >= 0"),
        (dict(embeddings=torch.zeros(3, 2), ids=torch.arange(3), log_q=torch.zeros(4)),
         "log_q must have shape"),
        (dict(embeddings=torch.zeros(3, 2), ids=torch.arange(3),
              log_q=torch.tensor([0.0, float("nan"), 0.0])), "log_q must be finite"),
        (dict(embeddings=torch.zeros(3, 2), ids=torch.arange(3), mask=torch.ones(3)),
         "mask must be a bool"),
        (dict(embeddings=torch.zeros(3, 2), ids=torch.arange(3),
              mask=torch.ones(2, 2, dtype=torch.bool)), "mask must have shape"),
        (dict(embeddings=torch.zeros(3, 2), ids=torch.arange(3), bias=torch.zeros(2)),
         "bias must have shape"),
        (dict(embeddings=torch.zeros(3, 2), ids=torch.arange(3), log_q=torch.zeros(2, 3),
              mask=torch.ones(4, 3, dtype=torch.bool)), "same number of rows"),
    ],
)
def test_bad_inputs_name_the_argument(kwargs, match):
    with pytest.raises(ValueError, match=match):
        CandidateSet(**kwargs)


def test_value_checks_obey_the_switch():
    with cs.validate_args(False):
        s = CandidateSet(torch.zeros(2, 2), torch.tensor([-1, 0]),
                         torch.tensor([float("nan"), 0.0]))
    assert int(s.ids[0]) == -1


def test_ids_are_int64_and_bad_sources_are_errors():
    s = CandidateSet(torch.zeros(2, 2), torch.tensor([0, 1], dtype=torch.int32))
    assert s.ids.dtype == torch.int64
    with pytest.raises(ValueError, match="ids must lie in"):
        CandidateSet.from_ids(torch.tensor([5]), torch.zeros(3, 2))
    with pytest.raises(ValueError, match="classes must be a class table"):
        CandidateSet.from_ids(torch.tensor([0]), 3)
    with pytest.raises(ValueError, match="item encoder"):
        CandidateSet.from_ids(torch.tensor([0, 1]), lambda ids: torch.zeros(3, 2))
    with pytest.raises(ValueError, match="draw must be a CandidateDraw"):
        CandidateSet.from_draw((torch.tensor([0]),), torch.zeros(3, 2))


def test_with_mask_ands_the_new_mask_into_the_sets_own():
    """A column stays valid only where both masks say so, (C,) and (B, C) alike."""
    emb, ids = torch.randn(3, 2), torch.tensor([4, 5, 6])
    s = CandidateSet(emb, ids, mask=torch.tensor([True, False, True]))
    out = s.with_mask(torch.tensor([False, True, True]))
    assert out.mask.tolist() == [False, False, True]
    per_row = torch.tensor([[True, True, False], [False, True, True]])
    out2 = s.with_mask(per_row)
    assert torch.equal(out2.mask, per_row & s.mask)
    assert s.with_mask(None) is s


def test_positives_of_names_a_missing_expected_count_truthfully():
    """A hand-built draw with positive ids but no positive_log_q: the error says that,
    not that the draw was made without positive ids."""
    import dataclasses

    ids = torch.tensor([1, 2, 3])
    draw = UniformSampler(10).sample(4, positive_ids=ids)
    stripped = dataclasses.replace(draw, positive_log_q=None)
    with pytest.raises(ValueError, match="carries no expected count"):
        CandidateSet.positives_of(ids, torch.randn(10, 4), draw=stripped)
    with pytest.raises(ValueError, match="without positive_ids"):
        CandidateSet.positives_of(ids, torch.randn(10, 4), draw=UniformSampler(10).sample(4))


# --------------------------------------------------------------------------- sources


def test_every_constructor_records_its_source_and_concat_keeps_it_per_column():
    from candidate_sampling.sampling.samplers import UniformSampler

    table = torch.randn(10, 3)
    ids = torch.tensor([1, 2, 2])
    batch = CandidateSet.from_batch(table[ids], ids)
    sampler = UniformSampler(10)
    gen = torch.Generator().manual_seed(0)
    replacement = CandidateSet.from_draw(sampler.sample(4, generator=gen), table)
    unique = CandidateSet.from_draw(sampler.sample(2, unique=True, generator=gen), table)
    fixed = CandidateSet.from_ids(torch.tensor([7, 8]), table)
    mined = CandidateSet.from_ids(torch.tensor([5]), table, source="mined")
    assert batch.source == (("batch", 3),) and fixed.source == (("fixed", 2),)
    assert replacement.source == (("replacement", 4),) and unique.source == (("unique", 2),)
    both = CandidateSet.concat(batch, replacement, unique, fixed, mined)
    assert both.source == (
        ("batch", 3), ("replacement", 4), ("unique", 2), ("fixed", 2), ("mined", 1)
    )
    # the softmax family's default removes hits only in the columns of a set
    assert both.hit_columns().tolist() == [False] * 7 + [True] * 5
    assert batch.hit_columns() is None and fixed.hit_columns().all()
    assert "source=batch:3+replacement:4+unique:2+fixed:2+mined:1" in repr(both)
    assert "source=batch," in repr(batch)
    # slices, index tensors, masks, detach and with_source keep (or set) it
    assert both.select(slice(2, 8)).source == (("batch", 1), ("replacement", 4), ("unique", 1))
    assert both.select(torch.tensor([11, 0, 1])).source == (("mined", 1), ("batch", 2))
    picked = torch.zeros(12, dtype=torch.bool)
    picked[[3, 4]] = True
    assert both.select(picked).source == (("replacement", 2),)
    assert both.with_mask(torch.ones(12, dtype=torch.bool)).source == both.source
    assert both.detach().source == both.source
    assert fixed.with_source("queue").source == (("queue", 2),)
    assert (batch + batch).source == (("batch", 6),)  # adjacent runs merge
    empty = CandidateSet(torch.zeros(0, 3), torch.zeros(0, dtype=torch.long))
    assert empty.source == () and empty.hit_columns() is None


def test_a_bad_source_is_an_error_naming_it():
    v, ids = torch.randn(3, 2), torch.arange(3)
    with pytest.raises(ValueError, match=r"source must be one of \('batch'"):
        CandidateSet(v, ids, source="sampled")
    with pytest.raises(ValueError, match="source must be one of"):
        CandidateSet(v, ids, source=(("batch", 2), ("bogus", 1)))
    with pytest.raises(ValueError, match="source must cover the C = 3 columns, got runs of 2"):
        CandidateSet(v, ids, source=(("batch", 2),))
    with pytest.raises(ValueError, match="source must be one of"):
        CandidateSet(v, ids, source=(("batch", 0), ("fixed", 3)))
    with pytest.raises(ValueError, match="source must be one of"):
        CandidateSet.from_ids(ids, torch.randn(5, 2), source="uniform")
    with pytest.raises(ValueError, match="source must be one of"):
        CandidateSet(v, ids).with_source("draws")
