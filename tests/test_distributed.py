"""Cross-device negatives on torch.distributed: gloo processes against one process.

One launch (two spawned processes, gloo on 127.0.0.1) runs every multi-process check in
:func:`_worker` and returns numbers; the tests read them. A second launch (four
processes, which also form two groups of two) compares the recomputing ring with the
all-gather sigmoid loss and counts what each keeps for backward (:func:`_ring_worker`). The reference is the loss on the
concatenated batch, written with explicit loops in float64. Each rank's loss is a mean over
its rows and the parameter gradients are averaged over ranks, as DDP does.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from candidate_sampling.scale import distributed
from candidate_sampling import CandidateSet
from candidate_sampling.scale.distributed import (
    gather_candidates,
    gathered_softmax_loss,
    launch,
    rank_and_world_size,
    rank_sizes,
    ring_sigmoid_loss,
)
from candidate_sampling.losses import (
    Temperature,
    accidental_hits,
    mask_logits,
    positive_column_cross_entropy,
    reduce_loss,
    sigmoid_pairwise_loss,
)

F64 = torch.float64
TAU = 0.7


# --------------------------------------------------------------------------- references


def softmax_reference(u, v, ids, log_q, remove=True):
    """Mean over rows of −o_ii + log Σ_{j: j = i or id_j ≠ id_i} exp(o_ij), explicit loop
    (every j with ``remove=False``)."""
    rows = []
    for i in range(u.shape[0]):
        kept = [
            u[i] @ v[j] / TAU - log_q[j] for j in range(v.shape[0])
            if j == i or ids[j] != ids[i] or not remove
        ]
        rows.append(torch.logsumexp(torch.stack(kept), 0) - (u[i] @ v[i] / TAU - log_q[i]))
    return torch.stack(rows).mean()


def sigmoid_reference(u, v, ids, log_q, bias, remove=True):
    """Mean over rows of Σ_j −log σ(±z_ij), hits (j ≠ i, same id) skipped unless
    ``remove=False``, explicit loop."""
    rows = []
    for i in range(u.shape[0]):
        total = torch.zeros((), dtype=F64)
        for j in range(v.shape[0]):
            if remove and j != i and ids[j] == ids[i]:
                continue
            z = u[i] @ v[j] / TAU - log_q[j] + bias
            total = total - torch.nn.functional.logsigmoid(z if j == i else -z)
        rows.append(total)
    return torch.stack(rows).mean()


def make_data(sizes, seed=0, dim=4, num_items=5):
    gen = torch.Generator().manual_seed(seed)
    n = sum(sizes)
    x = torch.randn(n, dim, generator=gen, dtype=F64)
    y = torch.randn(n, dim, generator=gen, dtype=F64)
    ids = torch.randint(0, num_items, (n,), generator=gen)
    probs = torch.rand(num_items, generator=gen, dtype=F64) + 0.2
    weights = [torch.randn(dim, dim, generator=gen, dtype=F64) / dim**0.5 for _ in range(2)]
    return x, y, ids, probs / probs.sum(), weights


def step(loss_fn, x, y, ids, p, weights, world, average=True):
    """Loss and gradients (query weights, item weights, bias) averaged (or summed) over ranks."""
    params = [w.clone().requires_grad_() for w in weights]
    bias = torch.tensor(-0.5, dtype=F64, requires_grad=True)
    loss = loss_fn(x @ params[0], y @ params[1], ids, p, bias)
    loss.backward()
    values = [
        loss.detach(),
        params[0].grad,
        params[1].grad,
        torch.zeros((), dtype=F64) if bias.grad is None else bias.grad,
    ]
    if world > 1:
        for t in values:
            dist.all_reduce(t)
            if average:
                t /= world
    return values


def compare(local_fn, reference_fn, sizes, rank, world, seed=0):
    """Largest absolute difference over the loss and every gradient.

    With equal sizes each rank's mean loss is averaged over ranks (DDP); with unequal sizes
    the average of per-rank means is not the global mean, so ``local_fn`` returns its rows'
    *sum* divided by the global N and the ranks' values are summed."""
    x, y, ids, probs, weights = make_data(sizes, seed)
    start = sum(sizes[:rank])
    own = slice(start, start + sizes[rank])
    average = len(set(sizes)) == 1
    got = step(local_fn, x[own], y[own], ids[own], probs, weights, world, average)
    want = step(reference_fn, x, y, ids, probs, weights, 1)
    return max(float((a - b).abs().max()) for a, b in zip(got, want))


def _softmax_local(u, v, i, p, bias, remove=True):
    return gathered_softmax_loss(
        u, CandidateSet(v, i), item_probabilities=p, temperature=TAU,
        remove_accidental_hits=remove,
    )


def _softmax_local_default(u, v, i, p, bias):
    """The default hit rule: every rank's copies of a row's positive are draws, kept."""
    return gathered_softmax_loss(u, CandidateSet(v, i), item_probabilities=p, temperature=TAU)


def _softmax_local_sum(u, v, i, p, bias):
    total = gathered_softmax_loss(
        u, CandidateSet(v, i), item_probabilities=p, temperature=TAU, reduction="sum",
        remove_accidental_hits=True,
    )
    return total / 8  # N = 3 + 5 rows in the global batch


def _softmax_rank_order(u, v, i, p, bias, *, use_offset=True):
    """Rank-ordered candidates; row i's positive at the global index offset + i."""
    g = gather_candidates(CandidateSet(v, i), item_probabilities=p)
    rank, _ = rank_and_world_size()
    offset = sum(rank_sizes(u.shape[0])[:rank])
    rank_order = torch.roll(g.embeddings, offset, dims=0)
    ids = torch.roll(g.ids, offset)
    log_q = torch.roll(g.log_q, offset)
    columns = torch.arange(u.shape[0]) + (offset if use_offset else 0)
    logits = mask_logits(
        (u @ rank_order.T) / TAU - log_q,
        accidental_hits(i, ids, positive_columns=columns),
    )
    return reduce_loss(positive_column_cross_entropy(logits, columns))


def global_log_q(p):
    """log(N·p) of the global batch, rounded to float32 as the package's log Q always is."""
    return torch.log(len(p) * p).float().to(F64)


def _softmax_single(u, v, i, p, bias):
    return softmax_reference(u, v, i, global_log_q(p[i]))


def _softmax_single_keep(u, v, i, p, bias):
    return softmax_reference(u, v, i, global_log_q(p[i]), remove=False)


def _sigmoid_local(u, v, i, p, bias):
    return ring_sigmoid_loss(
        u, CandidateSet(v, i), item_probabilities=p, temperature=TAU, bias=bias,
        remove_accidental_hits=True,
    )


def _sigmoid_local_default(u, v, i, p, bias):
    return ring_sigmoid_loss(
        u, CandidateSet(v, i), item_probabilities=p, temperature=TAU, bias=bias
    )


def _sigmoid_single(u, v, i, p, bias):
    return sigmoid_reference(u, v, i, global_log_q(p[i]), bias)


def _sigmoid_single_keep(u, v, i, p, bias):
    return sigmoid_reference(u, v, i, global_log_q(p[i]), bias, remove=False)


def _set(n, d=2):
    return CandidateSet(torch.zeros(n, d), torch.arange(n))


def _masked_ring(rank):
    """Ring sigmoid (3 rows per rank) with an invalid column, global column 1, against a
    loop that drops that column's terms (its own row keeps its positive)."""
    x, y, ids, _, _ = make_data([3, 3])
    rows = slice(3 * rank, 3 * rank + 3)
    chunk = CandidateSet(y[rows], ids[rows], mask=torch.arange(6)[rows] != 1)
    got = ring_sigmoid_loss(
        x[rows], chunk, temperature=TAU, bias=-0.5, reduction="none", remove_accidental_hits=True
    )
    want = []
    for i in range(rows.start, rows.stop):
        total = torch.zeros((), dtype=F64)
        for j in range(6):
            if j != i and (ids[j] == ids[i] or j == 1):
                continue
            z = x[i] @ y[j] / TAU - 0.5
            total = total - torch.nn.functional.logsigmoid(z if j == i else -z)
        want.append(total)
    return float((got - torch.stack(want)).abs().max())


def _interleave(gathered, offset):
    """The bug: rows of the two ranks alternate (P N P N …) instead of forming blocks."""
    half = gathered.shape[0] // 2
    return torch.stack([gathered[:half], gathered[half:]], dim=1).flatten(0, 1)


def saved_bytes(fn):
    """Bytes of the storages autograd saves for backward while ``fn()`` runs, each once."""
    seen = {}

    def pack(t):
        storage = t.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    return out, sum(seen.values())


def _ring_against_gather(group=None, rows=4, dim=3):
    """The ring and the all-gather sigmoid loss of this rank's rows in float64: the largest
    difference of loss and every gradient (queries, positives, their per-column bias, the
    scalar bias, a learned temperature), and the bytes each saves for backward."""
    rank, world = rank_and_world_size(group)
    gen = torch.Generator().manual_seed(5)
    n = world * rows
    x, y = (torch.randn(n, dim, generator=gen, dtype=F64) for _ in range(2))
    col_bias = torch.randn(n, generator=gen, dtype=F64)
    ids = torch.randint(0, 2 * world, (n,), generator=gen)  # duplicates across ranks
    probs = torch.rand(2 * world, generator=gen, dtype=F64) + 0.2
    mask = torch.arange(n) != 1  # global column 1 invalid
    own = slice(rank * rows, (rank + 1) * rows)

    def run(use_ring):
        leaves = [t[own].clone().requires_grad_() for t in (x, y, col_bias)]
        bias = torch.tensor(-0.5, dtype=F64, requires_grad=True)
        tau = Temperature(0.7, learnable=True).to(F64)
        u, v, b = leaves
        positives = CandidateSet(v, ids[own], mask=mask[own], bias=b)
        options = {"temperature": tau, "bias": bias}

        def loss_fn():
            if use_ring:
                return ring_sigmoid_loss(
                    u,
                    positives,
                    item_probabilities=probs / probs.sum(),
                    group=group,
                    **options,
                )
            g = gather_candidates(positives, item_probabilities=probs / probs.sum(), group=group)
            return sigmoid_pairwise_loss(
                u, g.select(slice(0, rows)), g.select(slice(rows, None)), **options
            )

        loss, saved = saved_bytes(loss_fn)
        loss.backward()
        grads = [t.grad for t in (*leaves, bias, tau.log_scale)]
        return loss.detach(), grads, saved

    ring_loss, ring_grads, ring_saved = run(True)
    gather_loss, gather_grads, gather_saved = run(False)
    diffs = [(ring_loss - gather_loss).abs()] + [
        (a - b).abs().max() for a, b in zip(ring_grads, gather_grads)
    ]
    inputs = 2 * rows * dim * 8 + rows * 8 + rows * 4 + 8  # u, v, column bias, log Q, bias
    return {
        "max_abs_diff": float(torch.stack(diffs).max()),
        "ring_saved": ring_saved,
        "gather_saved": gather_saved,
        "inputs": inputs,
        "grad_norm": float(torch.cat([g.flatten() for g in ring_grads]).norm()),
    }


def _ring_worker():
    """At W = 4, and in two groups of 2 ranks ([0, 1] and [2, 3]) of the same processes."""
    rank, _ = rank_and_world_size()
    pairs = [dist.new_group([0, 1]), dist.new_group([2, 3])]
    return {
        4: _ring_against_gather(),
        2: _ring_against_gather(group=pairs[rank // 2]),
    }


def _worker():
    rank, world = rank_and_world_size()
    out = {"rank": rank, "world": world}
    equal = [6, 6]
    _, y, ids, _, _ = make_data(equal)
    out["duplicates_across_ranks"] = bool((ids[:6, None] == ids[None, 6:]).any())
    out["softmax"] = compare(_softmax_local, _softmax_single, equal, rank, world)
    out["softmax_rank_order"] = compare(_softmax_rank_order, _softmax_single, equal, rank, world)
    out["softmax_unequal"] = compare(_softmax_local_sum, _softmax_single, [3, 5], rank, world)
    out["sigmoid_ring"] = compare(_sigmoid_local, _sigmoid_single, equal, rank, world)
    out["softmax_default"] = compare(
        _softmax_local_default, _softmax_single_keep, equal, rank, world
    )
    out["sigmoid_ring_default"] = compare(
        _sigmoid_local_default, _sigmoid_single_keep, equal, rank, world
    )

    def no_offset(u, v, i, p, bias):
        return _softmax_rank_order(u, v, i, p, bias, use_offset=False)

    out["bug_no_offset"] = compare(no_offset, _softmax_single, equal, rank, world)
    original = distributed._local_first
    distributed._local_first = _interleave
    try:
        out["bug_interleaved"] = compare(_softmax_local, _softmax_single, equal, rank, world)
    finally:
        distributed._local_first = original

    rows = slice(0, 6) if rank == 0 else slice(6, 9)
    g = gather_candidates(
        CandidateSet(y[rows], ids[rows], mask=torch.arange(9)[rows] != 1),
        item_probabilities=torch.full((5,), 0.25, dtype=F64),
    )
    sizes = rank_sizes(6 if rank == 0 else 3)
    out["offset"], out["sizes"] = sum(sizes[:rank]), sizes
    out["first_id_is_local"] = int(g.ids[0]) == int(ids[0 if rank == 0 else 6])
    out["log_q"] = torch.unique(g.log_q).tolist()
    out["mask"] = g.mask.tolist()
    out["masked_sigmoid"] = _masked_ring(rank)
    from benchmarks.negatives import demo_gathered_step  # chapter 7's check, not the package's

    out["demo"] = demo_gathered_step(seed=3, rows_per_rank=5)
    try:
        ring_sigmoid_loss(torch.randn(2 + rank, 4), _set(2 + rank, d=4))
        out["ring_unequal_error"] = ""
    except ValueError as err:
        out["ring_unequal_error"] = str(err)
    return out


def _raises():
    raise KeyError("deliberate failure in a launched rank")


# --------------------------------------------------------------------------- tests


@pytest.fixture(scope="module")
def results():
    return launch(_worker, world_size=2, backend="gloo", timeout_s=120)


def test_both_ranks_ran_and_the_data_has_duplicates_across_ranks(results):
    assert [r["rank"] for r in results] == [0, 1] and {r["world"] for r in results} == {2}
    assert results[0]["duplicates_across_ranks"]


@pytest.mark.parametrize(
    "check", ["softmax", "softmax_rank_order", "softmax_unequal", "softmax_default"]
)
def test_gathered_softmax_equals_the_single_process_loss_and_gradients(results, check):
    for r in results:
        assert r[check] < 1e-10, (check, r[check])


@pytest.mark.parametrize("check", ["sigmoid_ring", "sigmoid_ring_default"])
def test_ring_sigmoid_equals_the_single_process_loss_and_gradients(results, check):
    for r in results:
        assert r[check] < 1e-10, (check, r[check])


@pytest.mark.parametrize("bug", ["bug_interleaved", "bug_no_offset"])
def test_the_comparison_catches_a_wrong_arrangement(results, bug):
    """An interleaved gather (sentence-transformers' bug) or a missing rank offset fails."""
    assert max(r[bug] for r in results) > 1e-2


def test_gather_reports_offsets_sizes_and_global_log_q(results):
    assert [r["offset"] for r in results] == [0, 6]
    assert results[0]["sizes"] == results[1]["sizes"] == [6, 3]
    assert all(r["first_id_is_local"] for r in results)
    # the mask travels with its columns: global column 1 (rank 0's row 1) is invalid
    assert results[0]["mask"] == [True, False] + [True] * 7
    assert results[1]["mask"] == [True] * 4 + [False] + [True] * 4
    # expected count of an item among N = 9 gathered positives drawn with p = 0.25
    for r in results:
        assert r["log_q"] == pytest.approx([float(torch.log(torch.tensor(9 * 0.25)))], abs=1e-6)


def test_chapter_7_demo_step_equals_the_one_process_step(results):
    """benchmarks.negatives.demo_gathered_step (moved out of the package) still agrees."""
    for r in results:
        demo = r["demo"]
        assert demo["world_size"] == 2
        assert demo["softmax_max_abs_diff"] < 1e-10 and demo["sigmoid_max_abs_diff"] < 1e-10


def test_ring_sigmoid_drops_a_masked_column_on_every_rank(results):
    for r in results:
        assert r["masked_sigmoid"] < 1e-10


def test_ring_refuses_unequal_batches(results):
    for r in results:
        assert "same number of rows B" in r["ring_unequal_error"]


@pytest.fixture(scope="module")
def ring_results():
    """4 ranks; each also runs the comparison in its group of 2 (one launch for both)."""
    values = launch(_ring_worker, world_size=4, backend="gloo", timeout_s=120)
    values = [{2: v[2], 4: v[4]} for v in values]
    return values + [{1: _ring_against_gather()}]  # and one process, no group


def test_ring_equals_the_all_gather_loss_and_gradients_at_1_2_and_4_ranks(ring_results):
    """Loss and the gradients of queries, positives, their column bias, the bias and a
    learned temperature, with duplicates across ranks and an invalid column, in float64."""
    for by_world in ring_results:
        for world, r in by_world.items():
            assert r["max_abs_diff"] < 1e-12, (world, r["max_abs_diff"])
            assert r["grad_norm"] > 0.1, world  # the comparison compares something


def test_ring_saves_only_its_inputs_and_the_gather_grows_with_the_ranks(ring_results):
    """What autograd keeps for backward: the ring, its inputs (queries, this rank's chunk,
    its log Q and bias) at any W; the all-gather, at least its (B, N) logits."""
    rows = 4
    for by_world in ring_results:
        for world, r in by_world.items():
            assert r["ring_saved"] == r["inputs"], (world, r)
            assert r["gather_saved"] >= rows * world * rows * 8, (world, r)
    for rank_result in ring_results[:4]:
        assert rank_result[4]["ring_saved"] == rank_result[2]["ring_saved"]
        growth = rank_result[4]["gather_saved"] - rank_result[2]["gather_saved"]
        assert growth >= 2 * rows * rows * 8  # two more ranks: two more (B, B) blocks


def test_one_process_needs_no_process_group():
    assert rank_and_world_size() == (0, 1)
    v = torch.randn(4, 3, dtype=F64, requires_grad=True)
    ids = torch.tensor([1, 2, 1, 3])
    p = torch.full((10,), 0.1, dtype=F64)
    g = gather_candidates(CandidateSet(v, ids), item_probabilities=p)
    assert g.embeddings is v and torch.equal(g.ids, ids)
    assert rank_sizes(4) == [4]
    torch.testing.assert_close(g.log_q, torch.full((4,), float(torch.log(torch.tensor(0.4)))))
    u = torch.randn(4, 3, dtype=F64)
    for remove in (True, None):  # None: the default keeps the batch's copies
        keep_or_remove = remove is True
        torch.testing.assert_close(
            gathered_softmax_loss(
                u, CandidateSet(v, ids), item_probabilities=p, temperature=TAU,
                remove_accidental_hits=remove,
            ),
            softmax_reference(u, v, ids, global_log_q(p[ids]), remove=keep_or_remove),
        )
        torch.testing.assert_close(
            ring_sigmoid_loss(
                u, CandidateSet(v, ids), item_probabilities=p, temperature=TAU, bias=-0.5,
                remove_accidental_hits=remove,
            ),
            sigmoid_reference(u, v, ids, global_log_q(p[ids]), -0.5, remove=keep_or_remove),
        )


def test_a_failing_rank_raises_with_its_traceback():
    with pytest.raises(RuntimeError, match="deliberate failure in a launched rank"):
        launch(_raises, world_size=1, timeout_s=60)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: launch(_raises, world_size=0), "world_size must be >= 1"),
        (lambda: launch(_raises, backend="mpi"), "backend must be 'gloo' or 'nccl'"),
        (lambda: gather_candidates(torch.zeros(3, 2)), "positives must be a CandidateSet"),
        (
            lambda: gather_candidates(_set(3), item_probabilities=torch.full((3,), 1.5)),
            "item_probabilities must lie in",
        ),
        (
            lambda: gather_candidates(
                CandidateSet(torch.zeros(3, 2), torch.arange(3), log_q=torch.zeros(3)),
                item_probabilities=torch.full((3,), 0.1),
            ),
            "item_probabilities or positives.log_q, not both",
        ),
        (
            lambda: gather_candidates(
                CandidateSet(torch.zeros(3, 2), torch.arange(3), log_q=torch.zeros(2, 3))
            ),
            r"positives.log_q must be shared by the batch",
        ),
        (
            # an id outside the table (a negative one would wrap around): refused
            lambda: gather_candidates(_set(3), item_probabilities=torch.full((2,), 0.1)),
            r"positives.ids must lie in \[0, 2\)",
        ),
        (
            lambda: ring_sigmoid_loss(torch.zeros(3, 2), _set(2)),
            "batch size B must agree",
        ),
        (lambda: distributed.rank_sizes(-1), "rows must be >= 0"),
        (lambda: distributed.all_gather_with_grad(torch.tensor(1.0)), "at least one dimension"),
    ],
)
def test_bad_arguments_name_themselves(call, message):
    with pytest.raises(ValueError, match=message):
        call()
