"""Tests that kill mutants: brute-force references where the other tests never looked.

``mutmut`` (configured in ``pyproject.toml``, issue 41) changes one operator, constant or
argument at a time in ``losses/core.py``, ``candidates.py``, ``sampling/frequency.py``,
``eval/metrics.py`` and ``losses/chunked.py`` and runs the tests; a mutant that changes a
result and survives is a test that would not notice that bug. Each test here pins a
result the survivors changed, against a reference written with loops or explicit sums in
float64, at the boundaries (a rank equal to K, a weight of 0, a single column) where an
off-by-one or a flipped comparison shows. The book's benchmarks appendix lists what
survives and why (the equivalent mutants).
"""

from __future__ import annotations

import math

import pytest
import torch

from candidate_sampling.eval import metrics_from_ranks, positive_ranks
from candidate_sampling.eval.metrics import count_above

D64 = torch.float64


def _metrics_by_hand(ranks: list[int], users: list[int], k: int) -> dict[str, float]:
    """hit rate, per-user recall and NDCG@k of 0-based ranks, with loops."""
    hits = [1.0 if r < k else 0.0 for r in ranks]
    gains = [1.0 / math.log2(r + 2.0) if r < k else 0.0 for r in ranks]
    per_user: dict[int, list[float]] = {}
    for u, h in zip(users, hits):
        per_user.setdefault(u, []).append(h)
    recall = sum(sum(h) / len(h) for h in per_user.values()) / len(per_user)
    return {
        f"hit_rate@{k}": sum(hits) / len(hits),
        f"recall@{k}": recall,
        f"ndcg@{k}": sum(gains) / len(gains),
    }


@pytest.mark.parametrize("k", [1, 2, 5, 10])
def test_metrics_at_the_rank_boundary_match_a_loop(k):
    """A positive ranked exactly K is not in the top K (ranks are 0-based): ``ranks < k``,
    never ``<=``; its neighbours K − 1 and K + 1 on either side."""
    ranks = [k - 1, k, k + 1, 0, k, k - 1, 3 * k]
    users = [0, 0, 1, 2, 2, 3, 3]
    got = metrics_from_ranks(torch.tensor(ranks), torch.tensor(users), ks=(k,))
    want = _metrics_by_hand(ranks, users, k)
    assert got.keys() == want.keys()
    for key, value in want.items():
        assert got[key] == pytest.approx(value, rel=1e-12, abs=1e-15), key


def test_count_above_counts_strictly_higher_scores_ties_for_the_positive_nan_against():
    scores = torch.tensor(
        [[1.0, 2.0, 2.0, 0.5], [float("nan"), 0.0, -1.0, 3.0], [-float("inf"), 1.0, 1.0, 1.0]],
        dtype=D64,
    )
    positive = torch.tensor([2.0, 0.0, 1.0], dtype=D64)
    want = [sum(1 for s in row if not s <= p) for row, p in zip(scores.tolist(), positive.tolist())]
    assert count_above(scores, positive).tolist() == want == [0, 2, 0]


def test_positive_ranks_match_a_loop_with_ties_and_known_items():
    from candidate_sampling.eval import KnownPairs

    g = torch.Generator().manual_seed(0)
    users = torch.randint(-2, 3, (5, 2), generator=g).to(D64)
    items = torch.randint(-2, 3, (9, 2), generator=g).to(D64)  # many exact ties
    user_index = torch.tensor([0, 1, 2, 2, 4, 3])
    positive_ids = torch.tensor([3, 0, 8, 1, 5, 5])
    known = KnownPairs(torch.tensor([2, 2, 4]), torch.tensor([0, 6, 1]), num_items=9)
    got = positive_ranks(users, items, user_index, positive_ids, known=known, chunk_size=2)
    scores = users @ items.T
    want = []
    for u, p in zip(user_index.tolist(), positive_ids.tolist()):
        removed = {y for uu, y in zip([2, 2, 4], [0, 6, 1]) if uu == u and y != p}
        want.append(sum(1 for y in range(9) if y not in removed and scores[u, y] > scores[u, p]))
    assert got.tolist() == want


# --------------------------------------------------------------------------- the hit rule


def _hits_by_hand(positive_ids, candidate_ids, sources, rule, positive_columns, tensorflow):
    """(B, C) bool with loops: which columns a loss removes (see ``hits_to_remove``)."""
    set_sources = {"unique", "mined", "fixed"}
    rows = []
    for i, pos in enumerate(positive_ids):
        pos = pos if isinstance(pos, list) else [pos]
        row = []
        for j, cand in enumerate(candidate_ids):
            hit = cand in pos
            if tensorflow and any(
                candidate_ids[k] == cand for k in range(j + 1, len(candidate_ids))
            ):
                hit = False  # TF removes only the last copy of a repeated id
            if positive_columns is not None and positive_columns[i] == j:
                hit = False  # the row's own positive column
            if rule is None:
                hit = hit and sources[j] in set_sources
            row.append(hit if rule is not False else False)
        rows.append(row)
    return rows


@pytest.mark.parametrize("rule", [None, True, False])
@pytest.mark.parametrize("tensorflow", [False, True])
@pytest.mark.parametrize("with_columns", [False, True])
@pytest.mark.parametrize("num_true", [1, 2])
def test_hits_to_remove_matches_a_loop(rule, tensorflow, with_columns, num_true):
    from candidate_sampling import CandidateSet
    from candidate_sampling.losses import hits_to_remove

    candidate_ids = [3, 1, 4, 1, 5, 3, 2]
    sources = ["batch", "batch", "unique", "unique", "unique", "fixed", "replacement"]
    runs = (("batch", 2), ("unique", 3), ("fixed", 1), ("replacement", 1))
    columns = CandidateSet(torch.zeros(7, 2), torch.tensor(candidate_ids), source=runs)
    positive_ids = [[3, 2], [1, 9], [4, 4]] if num_true == 2 else [3, 1, 5]
    positive_columns = [0, 1, 4] if with_columns else None
    got = hits_to_remove(
        torch.tensor(positive_ids),
        columns,
        rule,
        positive_columns=None if positive_columns is None else torch.tensor(positive_columns),
        repeated_hits="tensorflow" if tensorflow else "mask_all",
    )
    want = _hits_by_hand(positive_ids, candidate_ids, sources, rule, positive_columns, tensorflow)
    if not any(any(r) for r in want) and (rule is False or got is None):
        assert got is None or not bool(got.any())
        return
    assert got is not None and got.tolist() == want
    # the logistic family keeps every hit by default; True still removes them
    assert hits_to_remove(torch.tensor(positive_ids), columns, None, logistic=True) is None


# --------------------------------------------------------------------------- gathering rows


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16])
@pytest.mark.parametrize("sparse", [False, True])
def test_gather_rows_of_a_table_and_an_encoder_match_indexing(dtype, sparse):
    from candidate_sampling.candidates import gather_rows

    g = torch.Generator().manual_seed(1)
    table = torch.randn(6, 3, generator=g, dtype=torch.float64).to(dtype).requires_grad_()
    ids = torch.tensor([4, 0, 4, 2, 4])
    rows = gather_rows(table, ids, sparse=sparse)
    want = table.detach().double()[ids]
    assert rows.dtype == (torch.float32 if dtype == torch.float16 else dtype)
    torch.testing.assert_close(rows.double(), want)
    weights = torch.arange(1.0, 6.0, dtype=rows.dtype)[:, None]
    (rows * weights).sum().backward()
    grad = table.grad.to_dense() if table.grad.is_sparse else table.grad
    expected = torch.zeros(6, 3, dtype=torch.float64)
    for k, i in enumerate(ids.tolist()):  # every copy's gradient, summed per row
        expected[i] += k + 1.0
    torch.testing.assert_close(grad.double(), expected)
    reference = table.detach().double()
    encoded = gather_rows(lambda i: reference[i], torch.tensor([1, 3]))
    torch.testing.assert_close(encoded, reference[torch.tensor([1, 3])])
    with pytest.raises(ValueError, match="item encoder"):  # (d, n): rows and columns swapped
        gather_rows(lambda i: reference[i][:, :2].T, torch.tensor([1, 3, 5]))


# --------------------------------------------------------------------------- expected counts


@pytest.mark.parametrize("unique", [False, True])
def test_log_expected_count_matches_the_formula(unique):
    from candidate_sampling.sampling import log_expected_count

    probs = torch.tensor([0.0, 1e-9, 0.01, 0.3, 1.0], dtype=D64)
    k, tries = 4, 7 if unique else 4
    got = log_expected_count(probs, num_samples=k, num_tries=tries, unique=unique)
    want = []
    for p in probs.tolist():
        value = 1.0 - (1.0 - p) ** tries if unique else k * p
        if unique and 0 < p < 1e-6:
            value = tries * p  # 1 − (1 − p)^n to first order, as expm1/log1p keep it
        want.append(math.log(value) if value > 0 else -math.inf)
    assert got.dtype == torch.float32
    for g, w in zip(got.tolist(), want):
        assert g == pytest.approx(w, rel=1e-6) if math.isfinite(w) else g == w
    with pytest.raises(ValueError, match="num_tries"):
        log_expected_count(probs, num_samples=k, num_tries=k + 1, unique=False)
    with pytest.raises(ValueError, match="num_tries"):
        log_expected_count(probs, num_samples=k, num_tries=k - 1, unique=True)


def test_temperature_and_loss_modules_forward_their_options():
    from candidate_sampling.losses import InfoNCELoss, Temperature, info_nce_loss

    scores = torch.tensor([[1.0, -2.0], [0.5, 4.0]], dtype=D64)
    assert torch.equal(Temperature(0.5)(scores), scores / 0.5)
    assert torch.equal(Temperature(2.0, learnable=True)(scores).detach(), scores / 2.0)
    g = torch.Generator().manual_seed(2)
    q, k = torch.randn(3, 4, generator=g, dtype=D64), torch.randn(3, 4, generator=g, dtype=D64)
    w = torch.tensor([1.0, 0.0, 2.0], dtype=D64)
    module = InfoNCELoss(temperature=0.3, symmetric=True, reduction="sum")
    want = info_nce_loss(q, k, temperature=0.3, symmetric=True, reduction="sum", sample_weight=w)
    assert module(q, k, sample_weight=w) == want


# --------------------------------------------------------------------------- the chunked loss

_CHUNKED_DTYPES = {
    # query, classes, class_bias, temperature (a tensor that gets a gradient), sample_weight
    "float64": (D64, D64, D64, D64, D64),
    "float32 with a float64 temperature and weights": (
        torch.float32, torch.float32, torch.float32, D64, D64,
    ),
    "float64 query, float32 classes": (D64, torch.float32, torch.float32, torch.float32, D64),
}


@pytest.mark.parametrize("dtypes", list(_CHUNKED_DTYPES))
@pytest.mark.parametrize("method", ["rows", "vocab", "auto"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("compiling", [False, True])
@pytest.mark.parametrize("plain", [False, True])
def test_chunked_loss_matches_the_full_softmax_in_every_branch(
    monkeypatch, dtypes, method, reduction, compiling, plain
):
    """Loss and every gradient against ``F.cross_entropy`` on the full logits in float64:
    blocks that do not divide the rows (7 rows, 3 a block) or the classes (5, 2 a block),
    an ignored row, a weight of 0, a non-unit upstream gradient (2.5), mixed dtypes (each
    gradient in its input's dtype), and the branch taken under ``torch.compile`` and on an
    accelerator (separate softmax passes, ignored rows kept with weight 0), forced on the
    CPU here. ``plain``: a float temperature and no ``sample_weight`` (the defaults' path)."""
    from candidate_sampling.losses import chunked as C

    if method == "rows" and reduction == "none":
        pytest.skip("the row form needs a reduction")
    if compiling:
        monkeypatch.setattr(C, "_is_compiling", lambda: True)
    dq, dc, db, dt, dw = _CHUNKED_DTYPES[dtypes]
    g = torch.Generator().manual_seed(7)
    base = {
        "query": torch.randn(7, 3, generator=g, dtype=D64),
        "classes": torch.randn(5, 3, generator=g, dtype=D64),
        "class_bias": torch.randn(5, generator=g, dtype=D64),
        "temperature": torch.tensor(0.7, dtype=D64),
        "sample_weight": torch.tensor([1.0, 0.0, 2.0, 0.5, 1.0, 3.0, 1.5], dtype=D64),
    }
    ids = torch.tensor([0, 4, -100, 2, 2, 1, 3])
    kinds = dict(zip(base, (dq, dc, db, dt, dw)))
    if plain:
        base["temperature"] = torch.tensor(0.7, dtype=D64)  # passed as a float below
        base["sample_weight"] = torch.ones(7, dtype=D64)
    inputs = {k: v.to(kinds[k]).requires_grad_() for k, v in base.items()}
    loss = C.chunked_softmax_cross_entropy(
        inputs["query"], inputs["classes"], ids, class_bias=inputs["class_bias"],
        temperature=0.7 if plain else inputs["temperature"],
        sample_weight=None if plain else inputs["sample_weight"],
        reduction=reduction, method=method,
        chunk_size={"rows": 3, "vocab": 2, "auto": None}[method],
    )
    ref = {k: v.detach().to(kinds[k]).double().requires_grad_() for k, v in base.items()}
    logits = ref["query"] @ ref["classes"].T / ref["temperature"] + ref["class_bias"]
    per_row = torch.nn.functional.cross_entropy(logits, ids, reduction="none")
    weighted = per_row * ref["sample_weight"]
    keep = ids != -100
    want = {
        "none": weighted,
        "sum": weighted.sum(),
        "mean": weighted.sum() / ref["sample_weight"][keep].sum(),
    }[reduction]
    tol = {"rtol": 1e-10, "atol": 1e-12} if dtypes == "float64" else {"rtol": 2e-5, "atol": 2e-6}
    torch.testing.assert_close(loss.detach().double(), want.detach(), **tol)
    upstream = torch.linspace(0.5, 2.0, 7, dtype=D64) if reduction == "none" else 2.5
    (loss * upstream.to(loss.dtype) if reduction == "none" else loss * upstream).sum().backward()
    (want * upstream).sum().backward()
    for name, x in inputs.items():
        if plain and name in ("temperature", "sample_weight"):
            assert x.grad is None, name  # not passed: nothing flows to them
            continue
        assert x.grad is not None and x.grad.dtype == x.dtype, name
        torch.testing.assert_close(x.grad.double(), ref[name].grad, **tol, msg=name)


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("repeated_hits", ["mask_all", "tensorflow"])
def test_accidental_hits_match_a_loop_on_random_ids(seed, repeated_hits):
    """Random ids from a small range (repeats, a hit in column 0, rows with no hit)."""
    from candidate_sampling.losses import accidental_hits

    g = torch.Generator().manual_seed(seed)
    num_true = 1 + seed % 2
    cand = torch.randint(0, 5, (1 + seed % 6,), generator=g)
    pos = torch.randint(0, 5, (4, num_true), generator=g)
    columns = torch.randint(0, cand.numel(), (4,), generator=g) if seed % 3 == 0 else None
    got = accidental_hits(
        pos.squeeze(1) if num_true == 1 else pos, cand,
        positive_columns=columns, repeated_hits=repeated_hits,
    )
    c, want = cand.tolist(), []
    for i, row in enumerate(pos.tolist()):
        want.append([
            v in row
            and not (repeated_hits == "tensorflow" and v in c[j + 1:])
            and not (columns is not None and int(columns[i]) == j)
            for j, v in enumerate(c)
        ])
    assert got.tolist() == want


def test_module_reprs_list_their_options():
    from candidate_sampling.losses import InfoNCELoss, Temperature

    assert repr(Temperature(0.5)) == "Temperature(temperature=0.5, learnable=False)"
    assert repr(Temperature(0.5, learnable=True, max_scale=100.0)) == (
        "Temperature(temperature=0.5, learnable=True, max_scale=100.0)"
    )
    text = repr(InfoNCELoss(temperature=0.3, reduction="sum"))
    assert text.startswith("InfoNCELoss(") and ", reduction='sum'" in text, text


# --------------------------------------------------------------------------- candidate sets


def test_candidate_set_repr_and_detach_keep_every_field():
    from candidate_sampling import CandidateSet

    emb = torch.randn(3, 2, dtype=D64, requires_grad=True)
    bias = torch.tensor([0.1, -0.2, 0.3], dtype=D64, requires_grad=True)
    mask = torch.tensor([[True, False, True], [True, True, False]])
    log_q = torch.tensor([-1.0, -2.0, -3.0], dtype=D64)
    cs = CandidateSet(emb, torch.tensor([4, 1, 2]), log_q=log_q, mask=mask, bias=bias,
                      source=(("batch", 2), ("unique", 1)))
    assert repr(cs) == (
        "CandidateSet(C=3, d=2, log_q=(3,), mask=(2, 3), bias=(3,), "
        "source=batch:2+unique:1, dtype=torch.float64)"
    )
    assert repr(CandidateSet(emb, torch.tensor([4, 1, 2]))) == (
        "CandidateSet(C=3, d=2, log_q=None, mask=None, bias=None, source=fixed, "
        "dtype=torch.float64)"
    )
    d = cs.detach()
    assert not d.embeddings.requires_grad and not d.bias.requires_grad
    assert torch.equal(d.embeddings, emb.detach()) and torch.equal(d.bias, bias.detach())
    assert torch.equal(d.ids, cs.ids) and torch.equal(d.log_q, log_q)
    assert torch.equal(d.mask, mask) and d.source == cs.source
    assert CandidateSet(emb, torch.tensor([4, 1, 2])).detach().bias is None


def test_gather_rows_defaults_and_its_errors_name_their_argument():
    from candidate_sampling.candidates import gather_rows

    table = torch.randn(4, 2, requires_grad=True)
    gather_rows(table, torch.tensor([1, 1, 3])).sum().backward()
    assert not table.grad.is_sparse  # dense by default
    with pytest.raises(ValueError, match=r"(?<![A-Za-z])classes(?![A-Za-z])"):
        gather_rows(torch.zeros(4), torch.tensor([1]))
    with pytest.raises(ValueError, match=r"(?<![A-Za-z])sparse(?![A-Za-z])"):
        gather_rows(table, torch.tensor([1]), sparse="no")
    with pytest.raises(ValueError, match=r"(?<![A-Za-z])ids(?![A-Za-z])"):
        gather_rows(table, torch.tensor([1.0]))


def _half_draw():
    from candidate_sampling.sampling.samplers import CandidateDraw

    positives = torch.tensor([0, 3, 5])
    return CandidateDraw(
        ids=torch.tensor([2, 0, 2, 5]), log_q=torch.tensor([-1.0, -2.0, -1.0, -3.0]),
        num_tries=4, unique=False, positive_log_q=torch.tensor([-2.0, -4.0, -3.0]),
        positive_ids=positives,
    ), positives


def _as_sets(table, bias, order, correct, sparse, draw=None):
    from candidate_sampling import CandidateSet

    made, positives = _half_draw()
    draw = draw or made
    calls = {
        "positives": lambda: CandidateSet.positives_of(
            positives, table, draw=draw, class_bias=bias, correct=correct, sparse=sparse),
        "draw": lambda: CandidateSet.from_draw(
            draw, table, class_bias=bias, correct=correct, sparse=sparse),
    }
    out = {role: calls[role]() for role in order}
    return out["positives"], out["draw"]


@pytest.mark.parametrize("order", [("positives", "draw"), ("draw", "positives")])
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("correct", [False, True])
@pytest.mark.parametrize("sparse", [False, True])
def test_half_table_shared_gather_matches_the_float32_gather(order, with_bias, correct, sparse):
    """The positives' and the draw's rows of a float16 table, gathered once and shared,
    against each gathered alone from the float32 copy: values, ids, log Q, bias, source
    and the table's (and bias's) gradient."""
    g = torch.Generator().manual_seed(3)
    base = torch.randn(6, 3, generator=g)
    base_bias = torch.randn(6, generator=g)
    half = base.half().requires_grad_()
    ref = half.detach().float().requires_grad_()
    half_bias = base_bias.half().requires_grad_() if with_bias else None
    ref_bias = half_bias.detach().float().requires_grad_() if with_bias else None
    got = _as_sets(half, half_bias, order, correct, sparse)
    want = _as_sets(ref, ref_bias, order, correct, sparse)
    weights = [torch.arange(1.0, 4.0)[:, None] * 3.0, -torch.arange(1.0, 5.0)[:, None]]
    totals = [0.0, 0.0]
    for a, b, w in zip(got, want, weights):
        assert a.embeddings.dtype == torch.float32
        torch.testing.assert_close(a.embeddings, b.embeddings)
        assert torch.equal(a.ids, b.ids) and a.source == b.source
        assert (a.log_q is None) == (b.log_q is None) == (not correct)
        if correct:
            torch.testing.assert_close(a.log_q, b.log_q)
        assert (a.bias is None) == (not with_bias)
        for side, s in enumerate((a, b)):
            totals[side] = totals[side] + (s.embeddings * w).sum()
            if with_bias:
                torch.testing.assert_close(a.bias.float(), b.bias.float())
                totals[side] = totals[side] + (s.bias.float() * w[:, 0]).sum()
    totals[0].backward()
    totals[1].backward()
    def dense(t):
        return t.to_dense() if t.is_sparse else t

    assert dense(half.grad).dtype == torch.float16
    torch.testing.assert_close(dense(half.grad).float(), dense(ref.grad).half().float())
    if with_bias:
        torch.testing.assert_close(
            dense(half_bias.grad).float(), dense(ref_bias.grad).half().float())


def test_half_table_shared_gather_is_not_reused_when_anything_changed():
    """The rows waiting on a draw are taken only by a call with the same table (not
    edited since), the same bias and grad mode; otherwise they are gathered afresh."""
    from candidate_sampling import CandidateSet

    table = torch.arange(18.0).reshape(6, 3).half().requires_grad_()
    draw, positives = _half_draw()
    CandidateSet.positives_of(positives, table, draw=draw)
    with torch.no_grad():
        table[2] += 100.0  # edited after the first gather: the draw's rows must see it
    got = CandidateSet.from_draw(draw, table)
    torch.testing.assert_close(got.embeddings, table.detach().float()[draw.ids])
    other = (table.detach() * 2).requires_grad_()
    draw, positives = _half_draw()
    CandidateSet.positives_of(positives, table, draw=draw)
    got = CandidateSet.from_draw(draw, other)  # another table
    torch.testing.assert_close(got.embeddings, other.detach().float()[draw.ids])
    draw, positives = _half_draw()
    bias = torch.ones(6).half()
    CandidateSet.positives_of(positives, table, draw=draw)
    got = CandidateSet.from_draw(draw, table, class_bias=bias)  # a bias now
    assert got.bias is not None and torch.equal(got.bias.float(), torch.ones(4))
    draw, positives = _half_draw()
    with torch.no_grad():
        CandidateSet.positives_of(positives, table, draw=draw)
    got = CandidateSet.from_draw(draw, table)  # grad mode on now
    assert got.embeddings.requires_grad
    draw, positives = _half_draw()
    first = CandidateSet.positives_of(positives, table, draw=draw)
    again = CandidateSet.positives_of(positives, table, draw=draw)  # same role twice
    torch.testing.assert_close(again.embeddings, first.embeddings)
    assert again.ids.tolist() == positives.tolist()


# --------------------------------------------------------------------------- top-k and sampled protocol


def test_top_k_items_at_the_largest_k_known_items_leave_matches_a_loop():
    """k = |V| − (most known items of a user) is allowed and exact; one more is refused;
    a ``known`` with a user beyond ``num_users`` is refused; blocks of one user agree."""
    from candidate_sampling.eval import KnownPairs
    from candidate_sampling.eval.metrics import top_k_items

    g = torch.Generator().manual_seed(5)
    users, items = torch.randn(3, 4, generator=g, dtype=D64), torch.randn(7, 4, generator=g, dtype=D64)
    known = KnownPairs(torch.tensor([0, 0, 2]), torch.tensor([1, 5, 3]), num_items=7)
    k = 7 - 2
    got = top_k_items(users, items, k, known=known, chunk_size=1)
    scores = users @ items.T
    seen = {0: {1, 5}, 1: set(), 2: {3}}
    for u in range(3):
        order = sorted((y for y in range(7) if y not in seen[u]), key=lambda y: -float(scores[u, y]))
        assert got[u].tolist() == order[:k]
    assert torch.equal(top_k_items(users, items, k, known=known), got)
    with pytest.raises(ValueError, match=r"^k must be <= 5"):
        top_k_items(users, items, k + 1, known=known)
    beyond = KnownPairs(torch.tensor([0, 3]), torch.tensor([1, 2]), num_items=7)
    with pytest.raises(ValueError, match="known"):
        top_k_items(users, items, 2, known=beyond)


def test_sample_unseen_negatives_default_count_and_known_users_in_range():
    from candidate_sampling.eval import KnownPairs
    from candidate_sampling.eval.metrics import sample_unseen_negatives

    g = torch.Generator().manual_seed(0)
    neg = sample_unseen_negatives(
        torch.tensor([0, 1]), torch.tensor([3, 4]), num_users=2, num_items=500, generator=g
    )
    assert neg.shape == (2, 100)  # the default num_negatives
    beyond = KnownPairs(torch.tensor([0, 2]), torch.tensor([1, 2]), num_items=500)
    with pytest.raises(ValueError, match="known"):
        sample_unseen_negatives(
            torch.tensor([0, 1]), torch.tensor([3, 4]), num_users=2, num_items=500,
            known=beyond, generator=g,
        )


# --------------------------------------------------------------------------- frequencies


def test_frequencies_at_their_smallest_valid_inputs_and_output_dtype():
    from candidate_sampling.sampling.frequency import (
        item_counts,
        item_probabilities,
        mixed_log_q,
    )

    assert item_counts(torch.tensor([0, 0]), 1).tolist() == [2]  # a catalogue of one
    # a total of exactly 1 (a single count) is a valid distribution
    assert item_probabilities(torch.tensor([0, 1, 0])).tolist() == [0.0, 1.0, 0.0]
    assert item_probabilities(torch.tensor([0.0, 0.25, 0.75])).tolist() == [0.0, 0.25, 0.75]
    q = torch.tensor([0.5, 0.25, 0.25], dtype=D64)
    r = torch.full((3,), 1 / 3, dtype=D64)
    for form in ("expected_count", "mixture", "inclusion"):
        got = mixed_log_q(q, r, batch_size=4, num_samples=2, form=form)
        assert got.dtype == torch.float32 and got.shape == (3,)
        value = {
            "expected_count": 4 * q + 2 * r,
            "mixture": (4 * q + 2 * r) / 6,
            "inclusion": 1 - (1 - q) ** 4 * (1 - r) ** 2,
        }[form]
        torch.testing.assert_close(got, torch.log(value).float())
    with pytest.raises(ValueError, match="item_probabilities"):
        from candidate_sampling.sampling.frequency import batch_log_q

        batch_log_q(torch.tensor([0, 1]), torch.tensor([1, 1]), num_draws=2)


# --------------------------------------------------------------------------- temperature, log Q


def test_temperature_from_scale_defaults_and_range_in_the_callers_terms():
    from candidate_sampling.losses import Temperature

    t = Temperature.from_scale(4.0)
    assert not t.learnable and t.max_scale is None
    assert float(t.value) == pytest.approx(0.25) and float(t.scale) == pytest.approx(4.0)
    for scale, shown in ((1e39, r"1e\+39"), (1e-39, "1e-39")):
        with pytest.raises(ValueError, match=rf"^scale must lie in .*got {shown}$"):
            Temperature.from_scale(scale)
    assert float(Temperature.from_scale(3e38).scale) == pytest.approx(3e38, rel=1e-5)


def test_correct_logits_copies_by_default_and_writes_in_place_when_asked():
    from candidate_sampling.losses import correct_logits

    logits = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    log_q = torch.tensor([0.5, -1.0])
    out = correct_logits(logits, log_q)
    assert torch.equal(out, torch.tensor([[0.5, 3.0], [2.5, 5.0]]))
    assert torch.equal(logits, torch.tensor([[1.0, 2.0], [3.0, 4.0]]))  # untouched
    same = correct_logits(logits, log_q, inplace=True)
    assert same.data_ptr() == logits.data_ptr() and torch.equal(logits, out)
    with pytest.raises(ValueError, match=r"^inplace must be a bool"):
        correct_logits(logits, log_q, inplace="no")


def test_sample_unseen_negatives_may_use_every_unseen_item():
    """A user who knows items {1, 2, 3}, its positive 1 among them: the unseen items are
    {0, 4, 5}, so 3 negatives is the most, and they are exactly those."""
    from candidate_sampling.eval import KnownPairs
    from candidate_sampling.eval.metrics import sample_unseen_negatives

    known = KnownPairs(torch.tensor([0, 0, 0]), torch.tensor([1, 2, 3]), num_items=6)
    g = torch.Generator().manual_seed(0)
    neg = sample_unseen_negatives(
        torch.tensor([0]), torch.tensor([1]), num_users=1, num_items=6, num_negatives=3,
        known=known, generator=g,
    )
    assert sorted(neg[0].tolist()) == [0, 4, 5]
    with pytest.raises(ValueError, match=r"^num_negatives must be <= .*\(3 for"):
        sample_unseen_negatives(
            torch.tensor([0]), torch.tensor([1]), num_users=1, num_items=6,
            num_negatives=4, known=known, generator=g,
        )


def test_calibration_error_of_one_prediction_and_its_default_bins():
    from candidate_sampling.eval.metrics import expected_calibration_error

    ece, predicted, observed, counts = expected_calibration_error(
        torch.tensor([0.7]), torch.tensor([1])
    )
    assert ece == pytest.approx(0.3) and counts.sum() == 1 and predicted.shape == (10,)
    assert predicted.dtype == observed.dtype == torch.float64
    assert int(torch.isnan(predicted).sum()) == 9  # empty bins are NaN
    p = torch.linspace(0.05, 0.95, 40)
    y = (torch.arange(40) % 3 == 0)
    assert expected_calibration_error(p, y)[0] == expected_calibration_error(p, y, num_bins=10)[0]


def test_chunked_loss_module_defaults_match_the_function():
    from candidate_sampling.losses import ChunkedSoftmaxCrossEntropy, chunked_softmax_cross_entropy

    g = torch.Generator().manual_seed(0)
    q, c = torch.randn(5, 3, generator=g, dtype=D64), torch.randn(9, 3, generator=g, dtype=D64)
    ids = torch.tensor([0, 8, 3, 3, 1])
    want = chunked_softmax_cross_entropy(q, c, ids)
    assert ChunkedSoftmaxCrossEntropy()(q, c, ids) == want
    small = ChunkedSoftmaxCrossEntropy(chunk_size=1, memory_budget=1)(q, c, ids)
    torch.testing.assert_close(small, want)


@pytest.mark.parametrize("runs", [(("batch", 3),), (("batch", 2), ("unique", 1)),
                                  (("queue", 1), ("batch", 1), ("mined", 1))])
def test_select_keeps_each_columns_source_as_a_loop_does(runs):
    from candidate_sampling import CandidateSet

    cs = CandidateSet(torch.randn(3, 2), torch.tensor([7, 8, 9]), source=runs)
    names = [n for n, c in runs for _ in range(c)]

    def merged(picked):
        out = []
        for n in picked:
            if out and out[-1][0] == n:
                out[-1] = (n, out[-1][1] + 1)
            else:
                out.append((n, 1))
        return tuple(out)

    for index in ([2, 0], [1], [0, 1, 2], [2, 2]):
        got = cs.select(torch.tensor(index))
        assert got.source == merged([names[i] for i in index]), index
        assert got.ids.tolist() == [7 + i for i in index]
    assert cs.select(slice(1, 3)).source == merged(names[1:3])
    assert cs.select(torch.tensor([True, False, True])).source == merged([names[0], names[2]])
    empty = cs.select(torch.tensor([], dtype=torch.long))
    assert empty.num_candidates == 0 and empty.source == ()
    with pytest.raises(ValueError, match=r"(?<![A-Za-z])columns(?![A-Za-z])"):
        cs.select(torch.tensor([0.0]))


def test_popularity_strata_break_ties_by_id_and_default_to_deciles():
    from candidate_sampling.eval.metrics import popularity_strata

    popularity = torch.tensor([5, 1, 5, 3, 1, 1, 5, 0, 3, 2, 2, 4])
    got = popularity_strata(popularity, num_strata=4)
    order = sorted(range(12), key=lambda i: (-int(popularity[i]), i))
    want = [0] * 12
    for r, i in enumerate(order):
        want[i] = r * 4 // 12
    assert got.tolist() == want
    assert popularity_strata(torch.arange(20.0)).max() == 9  # ten strata by default


def test_user_bootstrap_default_resamples_and_a_single_resample():
    from candidate_sampling.eval.metrics import user_bootstrap

    values = torch.tensor([1.0, 0.0, 1.0, 1.0])
    users = torch.tensor([0, 0, 1, 2])
    g = torch.Generator().manual_seed(0)
    assert user_bootstrap(values, users, generator=g).shape == (2000,)
    one = user_bootstrap(values, users, num_resamples=1, generator=g)
    assert one.shape == (1,) and 0.0 <= float(one[0]) <= 1.0
    same = user_bootstrap(values[:2], users[:2], num_users=1, num_resamples=3, generator=g)
    assert same.tolist() == [0.5, 0.5, 0.5]  # one user: every resample is user 0


def test_concat_fills_missing_fields_and_broadcasts_per_row_parts_as_a_loop_does():
    from candidate_sampling import CandidateSet

    g = torch.Generator().manual_seed(4)
    a = CandidateSet(torch.randn(2, 3, generator=g, dtype=D64), torch.tensor([1, 2]),
                     log_q=torch.tensor([[-1.0, -2.0], [-3.0, -4.0]]), source="batch")
    b = CandidateSet(torch.randn(3, 3, generator=g), torch.tensor([5, 6, 7]),
                     bias=torch.tensor([0.5, -0.5, 1.5]),
                     mask=torch.tensor([True, False, True]), source="unique")
    c = CandidateSet(torch.randn(1, 3, generator=g), torch.tensor([9]),
                     log_q=torch.tensor([-7.0], dtype=D64), source="unique")
    joined = CandidateSet.concat(a, b, c)
    assert joined.embeddings.dtype == D64
    torch.testing.assert_close(
        joined.embeddings, torch.cat([a.embeddings, b.embeddings.double(), c.embeddings.double()])
    )
    assert joined.ids.tolist() == [1, 2, 5, 6, 7, 9]
    # log Q: a's per-row block, 0 where b has none, c's shared value broadcast to the rows
    assert joined.log_q.dtype == D64 and joined.log_q.tolist() == [
        [-1.0, -2.0, 0.0, 0.0, 0.0, -7.0], [-3.0, -4.0, 0.0, 0.0, 0.0, -7.0],
    ]
    assert joined.bias.tolist() == [0.0, 0.0, 0.5, -0.5, 1.5, 0.0]
    assert joined.mask.tolist() == [True, True, True, False, True, True]
    assert joined.source == (("batch", 2), ("unique", 4))
    assert (a + b).source == (("batch", 2), ("unique", 3))
    assert joined.hit_columns().tolist() == [False, False, True, True, True, True]
    assert c.hit_columns().tolist() == [True] and a.hit_columns() is None
    with pytest.raises(ValueError, match="same embedding size d"):
        CandidateSet.concat(a, CandidateSet(torch.zeros(1, 2), torch.tensor([0])))


def test_every_way_to_remake_a_set_keeps_its_mask_and_bias():
    from candidate_sampling import CandidateSet
    from candidate_sampling.candidates import _merged

    g = torch.Generator().manual_seed(6)
    table = torch.randn(5, 2, generator=g)
    mask = torch.tensor([[True, False, True], [False, True, True]])
    bias = torch.tensor([0.5, -1.0, 2.0])
    cs = CandidateSet(table[:3], torch.tensor([0, 1, 2]), mask=mask, bias=bias)
    for made in (cs.with_source("unique"), cs.with_mask(mask), cs.select(slice(0, 3)),
                 cs.select(torch.tensor([0, 1, 2]))):
        assert torch.equal(made.mask, mask) and torch.equal(made.bias, bias)
    assert torch.equal(cs.select(torch.tensor([2, 0])).mask, mask[:, [2, 0]])
    ids = torch.tensor([4, 0, 3])
    full_bias = torch.arange(5.0)
    made = CandidateSet.from_ids(ids, table, mask=mask, class_bias=full_bias, log_q=0.0)
    assert torch.equal(made.mask, mask) and torch.equal(made.bias, full_bias[ids])
    assert torch.equal(made.embeddings, table[ids]) and made.log_q.tolist() == [0.0] * 3
    # adjacent runs of one name join, wherever they are
    assert _merged([("fixed", 1), ("batch", 2), ("batch", 1), ("fixed", 1)]) == (
        ("fixed", 1), ("batch", 3), ("fixed", 1),
    )


def test_pairs_of_a_catalogue_of_one_item_are_valid():
    from candidate_sampling.eval.metrics import check_pairs

    check_pairs(torch.tensor([0, 1]), torch.tensor([0, 0]), num_users=2, num_items=1)
    with pytest.raises(ValueError, match="positive_ids"):
        check_pairs(torch.tensor([0]), torch.tensor([1]), num_users=1, num_items=1)


def test_a_half_table_with_a_draw_made_without_positives_is_gathered_alone():
    from candidate_sampling import CandidateSet
    from candidate_sampling.sampling.samplers import CandidateDraw

    table = torch.randn(6, 3).half()
    draw = CandidateDraw(ids=torch.tensor([2, 0, 5]), log_q=torch.zeros(3), num_tries=3,
                         unique=False)
    got = CandidateSet.from_draw(draw, table)
    torch.testing.assert_close(got.embeddings, table.float()[draw.ids])
    assert got.source == (("replacement", 3),)


@pytest.mark.parametrize("method", ["rows", "vocab"])
def test_chunked_loss_with_a_temperature_tensor_that_needs_no_gradient(method):
    from candidate_sampling.losses import chunked_softmax_cross_entropy

    g = torch.Generator().manual_seed(8)
    q = torch.randn(4, 3, generator=g, dtype=D64, requires_grad=True)
    c = torch.randn(6, 3, generator=g, dtype=D64)
    ids = torch.tensor([5, 0, 2, 2])
    got = chunked_softmax_cross_entropy(q, c, ids, temperature=torch.tensor(0.25), method=method)
    want = torch.nn.functional.cross_entropy(q @ c.T / 0.25, ids)
    torch.testing.assert_close(got, want)


def test_empty_ids_and_empty_sets_are_valid_everywhere_they_are_documented():
    from candidate_sampling import CandidateSet
    from candidate_sampling.candidates import gather_rows

    table = torch.randn(4, 2)
    none = torch.tensor([], dtype=torch.long)
    assert gather_rows(table, none).shape == (0, 2)
    assert CandidateSet.from_ids(none, table).num_candidates == 0
    empty = CandidateSet(torch.zeros(0, 2), none, bias=torch.zeros(0), log_q=torch.zeros(0))
    assert empty.num_candidates == 0 and empty.bias.shape == (0,)
    assert empty.select(torch.zeros(0, dtype=torch.bool)).num_candidates == 0
    assert empty.select(none).num_candidates == 0


# --------------------------------------------------------------------------- core steps' defaults


def test_logistic_terms_match_the_formula_for_each_kind_of_label():
    from candidate_sampling.losses import logistic_terms

    z = torch.tensor([[2.0, -1.0, 0.5], [-3.0, 0.0, 1.5]], dtype=D64)
    removed = torch.tensor([[False, True, False], [False, False, True]])

    def by_hand(y):
        return torch.nn.functional.softplus(z) - y * z  # −y log σ(z) − (1 − y) log σ(−z)

    for labels in (0.0, 1.0, torch.tensor([[1.0, 0.0, 1.0], [0.0, 1.0, 0.0]], dtype=D64)):
        y = labels if isinstance(labels, torch.Tensor) else torch.full_like(z, labels)
        torch.testing.assert_close(logistic_terms(z, labels), by_hand(y))
        got = logistic_terms(z, labels, removed=removed)
        torch.testing.assert_close(got, by_hand(y).masked_fill(removed, 0.0))
    before = z.clone()
    logistic_terms(z, 1.0, removed=removed)
    assert torch.equal(z, before)  # a copy unless inplace=True


def test_apply_temperature_copies_unless_told_and_divides_by_every_tau():
    from candidate_sampling.losses import apply_temperature

    x = torch.tensor([1.0, -2.0, 4.0])
    assert torch.equal(apply_temperature(x), x)  # τ = 1 by default
    for tau in (2.0, 0.5):
        got = apply_temperature(x, tau)
        assert torch.equal(got, x / tau) and torch.equal(x, torch.tensor([1.0, -2.0, 4.0]))
    y = x.clone()
    out = apply_temperature(y, 2.0, inplace=True)
    assert out.data_ptr() == y.data_ptr() and torch.equal(y, x / 2.0)


def test_loss_modules_default_to_tau_one_and_the_mean():
    from candidate_sampling.losses import InfoNCELoss, info_nce_loss

    g = torch.Generator().manual_seed(9)
    q, k = torch.randn(4, 3, generator=g, dtype=D64), torch.randn(4, 3, generator=g, dtype=D64)
    module = InfoNCELoss()
    assert module(q, k) == info_nce_loss(q, k, temperature=1.0, reduction="mean")
    assert "reduction='mean'" in repr(module)


def test_check_positive_columns_names_what_the_columns_index():
    from candidate_sampling.losses.core import check_positive_columns

    with pytest.raises(ValueError, match="logits"):
        check_positive_columns(torch.tensor([0, 5]), 2, 3)
    with pytest.raises(ValueError, match="columns"):
        check_positive_columns(torch.tensor([0, 5]), 2, 3, of="columns")


@pytest.mark.parametrize("bad", [torch.tensor([1.0, 2.0]), torch.tensor([True, False])])
def test_accidental_hits_refuse_float_and_bool_positive_ids(bad):
    from candidate_sampling.losses import accidental_hits

    with pytest.raises(ValueError, match="positive_ids"):
        accidental_hits(bad, torch.tensor([1, 2, 3]))


def test_streaming_estimator_defaults_and_smallest_settings():
    from candidate_sampling.sampling.frequency import StreamingFrequencyEstimator

    ids = [torch.tensor([3, 5, 3]), torch.tensor([5, 7]), torch.tensor([3, 9]),
           torch.tensor([11, 13, 3]), torch.tensor([5, 2])]

    def run(**kw):
        est = StreamingFrequencyEstimator(4, **kw)
        for batch in ids:
            est.update(batch)
        return est.estimate(torch.arange(14))

    assert torch.equal(run(), run(seed=0))  # seed 0 by default
    assert not torch.equal(run(seed=0), run(seed=1))  # the seed picks the hash
    one = StreamingFrequencyEstimator(1, learning_rate=1.0)
    for batch in ids:
        one.update(batch)
    # one bucket seen at every step with η = 1: the last gap is 1, so p̂ = 1
    assert one.estimate(torch.tensor([0])).tolist() == [1.0]


def test_metric_arguments_that_must_agree_with_the_catalogue():
    from candidate_sampling.eval.metrics import (
        stratified_metrics,
        top_k_items,
        user_bootstrap_interval,
    )

    ranks, users, ids = torch.tensor([0, 3]), torch.tensor([0, 1]), torch.tensor([1, 4])
    got = stratified_metrics(ranks, users, ids, torch.tensor([0, 0, 1, 1, 1]), ks=(1,))
    assert len(got) == 2
    # strata of 4 items for a positive id of 4: the ids are checked against their length
    with pytest.raises(ValueError, match=r"^positive_ids must lie in \[0, 4\)"):
        stratified_metrics(ranks, users, ids, torch.tensor([0, 0, 1, 1]), ks=(1,))
    emb = torch.randn(3, 2)
    assert top_k_items(emb, torch.randn(4, 2), 4).shape == (3, 4)
    with pytest.raises(ValueError, match=r"^k must"):
        top_k_items(emb, torch.randn(4, 2), 5)
    values, users = torch.tensor([1.0, 0.0, 1.0, 0.5]), torch.tensor([0, 1, 2, 2])
    a = user_bootstrap_interval(values, users, generator=torch.Generator().manual_seed(3))
    b = user_bootstrap_interval(values, users, num_resamples=2000,
                                generator=torch.Generator().manual_seed(3))
    assert a == b  # 2,000 resamples by default
    with pytest.raises(ValueError, match="confidence"):
        user_bootstrap_interval(values, users, confidence=0.0)


# --------------------------------------------------------------------------- third round
# Each test below pins what a surviving mutant of the full run changed: a choice the
# docstring states (which chunked path runs, with which block), a dtype promised by a
# docstring, a boundary of a budget or a count, or the words of an error message.


def _spy_chunked_paths(monkeypatch):
    """Record ``(method, chunk)`` of every chunked autograd call, then run it as usual."""
    from candidate_sampling.losses import chunked as C

    calls: list[tuple[str, int]] = []
    rows_apply, vocab_apply = C._RowsChunked.apply, C._VocabChunked.apply

    def rows(*args):
        calls.append(("rows", args[7]))
        return rows_apply(*args)

    def vocab(*args):
        calls.append(("vocab", args[6]))
        return vocab_apply(*args)

    monkeypatch.setattr(C._RowsChunked, "apply", rows)
    monkeypatch.setattr(C._VocabChunked, "apply", vocab)
    return calls


_AUTO_CASES = {
    # case: the path ``method="auto"`` (or the given method) must run
    "train": "rows",
    "forward only": "vocab",  # under torch.no_grad()
    "nothing needs a gradient": "vocab",
    "only the bias needs one": "rows",
    "reduction none": "vocab",
    "half classes": "vocab",
    "budget one row short": "vocab",  # holds 9 of the 10 rows
    "budget exactly the rows": "rows",
    "float64 budget one row short": "vocab",  # 8 bytes a logit: 9 rows, not 19
    "ignored rows": "rows",  # 12 rows, 2 ignored: the budget holds the 10 kept
    "chunk given": "rows",
    "rows given": "rows",
    "vocab given": "vocab",
}


@pytest.mark.parametrize("case", list(_AUTO_CASES))
def test_auto_runs_the_path_and_block_its_docstring_states(monkeypatch, case):
    """``method="auto"``: :func:`resolve_method` (rows for mean / sum while the budget
    holds min(kept rows, 64) rows of |V| logits, classes not half) unless no gradient can
    follow (a forward alone: vocab); ``chunk_size=None``: :func:`default_chunk_size` of the
    kept rows, the method run, the budget and the size of the computing dtype."""
    from candidate_sampling.losses import chunked as C

    calls = _spy_chunked_paths(monkeypatch)
    n, v, d = 10, 50, 3
    g = torch.Generator().manual_seed(3)
    dtype = D64 if case.startswith("float64") else torch.float32
    size = dtype.itemsize
    query = torch.randn(n, d, generator=g, dtype=dtype)
    classes = torch.randn(v, d, generator=g, dtype=dtype)
    bias = torch.randn(v, generator=g, dtype=dtype)
    ids = torch.randint(v, (n,), generator=g)
    reduction, budget = "mean", C.DEFAULT_MEMORY_BUDGET
    if case == "ignored rows":
        query = torch.cat([query, query[:2]])
        ids = torch.cat([ids, torch.tensor([-100, -100])])
        budget = size * v * n
    if case == "half classes":
        classes = classes.half()
    if case == "reduction none":
        reduction = "none"
    if case.endswith("one row short"):
        budget = size * v * n - 1
    if case == "budget exactly the rows":
        budget = size * v * n
    if case != "nothing needs a gradient":
        (bias if case == "only the bias needs one" else query).requires_grad_()
    method = {"rows given": "rows", "vocab given": "vocab"}.get(case, "auto")
    chunk = 3 if case == "chunk given" else None
    with torch.set_grad_enabled(case != "forward only"):
        C.chunked_softmax_cross_entropy(
            query, classes, ids, class_bias=bias, reduction=reduction, method=method,
            chunk_size=chunk, memory_budget=budget,
        )
    want = _AUTO_CASES[case]
    if method == "auto" and case not in ("forward only", "nothing needs a gradient"):
        assert C.resolve_method(
            n, v, reduction=reduction, half=case == "half classes", memory_budget=budget,
            element_size=size,
        ) == want
    block = chunk or C.default_chunk_size(n, v, want, memory_budget=budget, element_size=size)
    assert calls == [(want, block)]


def test_chunked_budget_and_block_boundaries():
    """The smallest budget that holds one row (rows) or one class column (vocab) is
    accepted, one byte less is refused; element sizes and budgets of 1 are valid; one row
    of a huge vocabulary takes 2**21 classes a block."""
    from candidate_sampling.losses import chunked as C

    assert C.default_chunk_size(1, 10, "vocab", memory_budget=4) == 1
    assert C.default_chunk_size(0, 10, "vocab", memory_budget=4) == 1
    assert C.default_chunk_size(3, 10, "rows", memory_budget=40) == 1
    assert C.default_chunk_size(3, 10, "rows", memory_budget=10, element_size=1) == 1
    for method, budget in (("rows", 39), ("vocab", 3)):
        with pytest.raises(ValueError, match="^memory_budget must hold one"):
            C.default_chunk_size(1, 10, method, memory_budget=budget)
    assert C.default_chunk_size(1, 2**22) == 2**21
    assert C.default_chunk_size(2, 2**22) == 2**20
    size = C.default_chunk_size(5, 1000, "rows", memory_budget=10**6 + 3)
    assert type(size) is int and size == 5
    size = C.default_chunk_size(5, 1000, "vocab", memory_budget=4 * 5 * 333 + 3)
    assert type(size) is int and size == 333
    assert C.resolve_method(1, 1, memory_budget=1, element_size=1) == "rows"
    assert C.resolve_method(1, 2, memory_budget=1, element_size=1) == "vocab"
    g = torch.Generator().manual_seed(0)
    query = torch.randn(2, 3, generator=g, requires_grad=True)
    classes = torch.randn(50, 3, generator=g)
    ids = torch.tensor([1, 2])
    with pytest.raises(ValueError, match="^memory_budget must hold one row"):
        C.chunked_softmax_cross_entropy(query, classes, ids, method="rows", memory_budget=199)
    C.chunked_softmax_cross_entropy(query, classes, ids, method="rows", memory_budget=200)


@pytest.mark.parametrize("method", ["rows", "vocab"])
@pytest.mark.parametrize("compiling", [False, True])
def test_chunked_loss_dtype_and_weights_that_sum_below_one(monkeypatch, method, compiling):
    """The loss comes back in the promotion of query, classes and bias (>= float32) whatever
    dtype the weights have; a mean weighted by weights summing to 0.5 divides by 0.5; a
    catalogue of one class with an ignored row (its id replaced by a valid 0 under
    compilation); a mean over no kept row is NaN also with weights."""
    from candidate_sampling.losses import chunked as C

    if compiling:
        monkeypatch.setattr(C, "_is_compiling", lambda: True)
    g = torch.Generator().manual_seed(4)
    for dq, dc, db, want in (
        (torch.float32, D64, None, D64),
        (torch.float32, torch.float32, D64, D64),
        (torch.float16, torch.float32, None, torch.float32),
        (D64, torch.float16, torch.float16, D64),
        (torch.float16, torch.float16, None, torch.float32),
    ):
        q = torch.randn(4, 3, generator=g, dtype=D64)
        c = torch.randn(6, 3, generator=g, dtype=D64)
        b = None if db is None else torch.randn(6, generator=g, dtype=D64)
        w = torch.full((4,), 0.125, dtype=D64)
        ids = torch.tensor([0, 5, 2, 3])
        loss = C.chunked_softmax_cross_entropy(
            q.to(dq).requires_grad_(), c.to(dc), ids, class_bias=None if b is None else b.to(db),
            sample_weight=w.float() if want == D64 else w, method=method,
        )
        assert loss.dtype == want, (dq, dc, db)
        logits = q.to(dq).double() @ c.to(dc).double().T
        if b is not None:
            logits = logits + b.to(db).double()
        ref = torch.nn.functional.cross_entropy(logits, ids)  # equal weights: plain mean
        tol = 1e-12 if want == D64 else 1e-5
        assert float(loss.detach()) == pytest.approx(float(ref), rel=tol), (dq, dc, db)
    one = torch.randn(1, 3, generator=g, dtype=D64)
    q = torch.randn(3, 3, generator=g, dtype=D64, requires_grad=True)
    loss = C.chunked_softmax_cross_entropy(
        q, one, torch.tensor([0, -100, 0]), method=method, reduction="sum"
    )
    assert float(loss) == 0.0
    none_kept = C.chunked_softmax_cross_entropy(
        q, one, torch.full((3,), -100), sample_weight=torch.ones(3, dtype=D64), method=method
    )
    assert math.isnan(float(none_kept))


def _message(fn, *args, **kwargs) -> str:
    with pytest.raises(ValueError) as err:
        fn(*args, **kwargs)
    return str(err.value)


def test_candidate_errors_say_what_was_expected_and_what_came():
    """The words of the errors a porting user meets first: the 2.0 hint only for a tuple
    or a tensor, "or None" only where None is allowed, the encoder's output named, the
    shape a check wanted."""
    from candidate_sampling import CandidateSet
    from candidate_sampling.candidates import _check_candidate_set, gather_rows
    from candidate_sampling.losses import score

    table = torch.randn(5, 2)
    assert _message(_check_candidate_set, "negatives", 3).endswith("got int")
    assert _message(_check_candidate_set, "negatives", 3, optional=True) == (
        "negatives must be a CandidateSet or None, got int"
    )
    assert "2.0's tensors and tuples are gone" in _message(
        _check_candidate_set, "negatives", (1, 2)
    )
    assert _message(score, torch.randn(2, 2), 3).endswith("got int")
    assert _message(CandidateSet.from_draw, 3, table) == (
        "draw must be a CandidateDraw (sampler.sample(...)), got int"
    )
    msg = _message(CandidateSet.from_draw, (1, 2, 3), table)
    assert msg.endswith(
        "got tuple: 2.0's tuple draw (ids, log Q, positive log Q) is one CandidateDraw now, "
        "what sampler.sample(num_samples, positive_ids=...) returns"
    )
    assert _message(gather_rows, lambda ids: [1, 2], torch.tensor([0, 1])) == (
        "the item encoder (classes) must map ids (2,) to embeddings (2, d), got list"
    )
    assert _message(gather_rows, lambda ids: torch.zeros(2, 3, 1), torch.tensor([0, 1])) == (
        "the item encoder (classes) must map ids (2,) to embeddings (2, d), got (2, 3, 1)"
    )
    assert _message(gather_rows, torch.randn(5), torch.tensor([0, 1])) == (
        "classes must have shape (|V|, d), got (5,)"
    )
    assert _message(gather_rows, torch.arange(10).reshape(5, 2), torch.tensor([0])) == (
        "classes must be a floating-point tensor, got torch.int64"
    )
    assert _message(gather_rows, lambda ids: table[ids], torch.tensor([0.0])) == (
        "ids must be an integer tensor of ids, got torch.float32"
    )
    assert _message(gather_rows, table, torch.tensor([7])) == (
        "ids must lie in [0, 5) (the rows of classes), got values in [7, 7]"
    )
    s = CandidateSet(torch.randn(3, 2), torch.tensor([0, 1, 2]))
    assert _message(s.select, torch.tensor([True, False])) == (
        "columns must have shape (3,), got (2,)"
    )
    assert _message(s.select, torch.tensor([0.0])) == (
        "columns must be an integer tensor of ids, got torch.float32"
    )
    empty = CandidateSet(torch.randn(0, 2), torch.zeros(0, dtype=torch.long))
    assert empty.select(torch.zeros(0, dtype=torch.bool)).num_candidates == 0
    assert _message(
        CandidateSet.from_batch, torch.randn(3, 2), torch.tensor([0, 1])
    ) == "batch size B must agree, got embeddings=3, ids=2"


def test_an_encoder_that_does_not_check_its_ids_is_checked_by_the_set():
    """A plain callable gets the set's range check (a negative id would wrap around in
    ``table[ids]``); the name in the error is the argument's."""
    from candidate_sampling import CandidateSet

    table = torch.randn(5, 2)
    encoder = lambda ids: table[ids]  # noqa: E731
    bad = torch.tensor([1, -1])
    assert _message(CandidateSet.from_ids, bad, encoder) == "ids must be >= 0, got -1"
    assert _message(CandidateSet.positives_of, bad, encoder).startswith("positive_ids must be >= 0")
    ok = CandidateSet.from_ids(torch.tensor([4, 0]), encoder)
    assert torch.equal(ok.embeddings, table[[4, 0]])


@pytest.mark.parametrize("sparse", [False, True])
def test_half_table_under_compilation_is_gathered_row_by_row_in_float32(monkeypatch, sparse):
    """Under ``torch.compile`` (no data-dependent shapes, so no ``unique``) a half table
    is gathered with ``F.embedding`` and upcast: the rows, a float32 result, and a sparse
    gradient exactly when ``sparse=True``."""
    from candidate_sampling import candidates as CS

    monkeypatch.setattr(CS, "_is_compiling", lambda: True)
    table = torch.randn(6, 3, dtype=torch.float16, requires_grad=True)
    ids = torch.tensor([4, 1, 4, 0])
    rows = CS.gather_rows(table, ids, sparse=sparse)
    assert rows.dtype == torch.float32
    assert torch.equal(rows, table.detach()[ids].float())
    rows.sum().backward()
    assert table.grad.is_sparse == sparse
    want = torch.zeros(6, 3, dtype=torch.float16)
    want.index_add_(0, ids, torch.ones(4, 3, dtype=torch.float16))
    assert torch.equal(table.grad.to_dense(), want)
    monkeypatch.undo()
    table.grad = None
    CS.gather_rows(table, ids, sparse=sparse).sum().backward()  # the unique path
    assert table.grad.is_sparse == sparse
    assert torch.equal(table.grad.to_dense(), want)


def test_from_batch_log_q_is_float32_and_its_source_batch():
    """An estimator that keeps float64 statistics still gives float32 log Q (as
    ``batch_log_q``), and the set's source is ``"batch"`` with either source of log Q."""
    from candidate_sampling import CandidateSet
    from candidate_sampling.sampling.frequency import StreamingFrequencyEstimator

    est = StreamingFrequencyEstimator(64, hash_ids=False)
    est.update(torch.tensor([1, 2, 1]))
    est.update(torch.tensor([1, 3]))
    e, ids = torch.randn(3, 2), torch.tensor([1, 2, 3])
    s = CandidateSet.from_batch(e, ids, frequency_estimator=est)
    assert s.log_q.dtype == torch.float32 and s.source == (("batch", 3),)
    torch.testing.assert_close(s.log_q, est.log_inclusion(ids).float())
    p = torch.tensor([0.1, 0.4, 0.3, 0.2], dtype=D64)
    s = CandidateSet.from_batch(e, ids, item_probabilities=p)
    assert s.log_q.dtype == torch.float32 and s.source == (("batch", 3),)


@pytest.mark.parametrize("which", ["query", "embeddings", "bias"])
def test_scores_are_computed_in_the_promotion_of_their_inputs(which):
    """``score`` and ``score_positives``: float64 anywhere makes the whole product float64
    (exact against a float64 reference, where float32 would round); the bias is added in
    that dtype."""
    from candidate_sampling import CandidateSet
    from candidate_sampling.losses import score, score_positives

    g = torch.Generator().manual_seed(9)
    q = torch.randn(3, 4, generator=g, dtype=D64) * (1 + 1e-9)
    e = torch.randn(3, 4, generator=g, dtype=D64) * (1 + 1e-9)
    b = torch.randn(3, generator=g, dtype=D64) * (1 + 1e-9)
    cast = {k: (D64 if k == which else torch.float32) for k in ("query", "embeddings", "bias")}
    q_, e_, b_ = q.to(cast["query"]), e.to(cast["embeddings"]), b.to(cast["bias"])
    s = CandidateSet(e_, torch.arange(3), bias=b_)
    full = score(q_, s)
    pos = score_positives(q_, s)
    want = q_.double() @ e_.double().T + b_.double()
    assert full.dtype == D64 and pos.dtype == D64
    torch.testing.assert_close(full, want, rtol=1e-15, atol=1e-15)
    torch.testing.assert_close(pos[:, 0], want.diagonal(), rtol=1e-15, atol=1e-15)


def test_reduce_loss_keeps_the_losses_dtype_and_takes_an_empty_batch():
    from candidate_sampling.losses import reduce_loss

    per_row = torch.tensor([1.0, 2.0, 4.0])
    w = torch.tensor([0.5, 1.0, 0.25], dtype=D64)
    for reduction, want in (("none", [0.5, 2.0, 1.0]), ("sum", 3.5), ("mean", 3.5 / 3)):
        out = reduce_loss(per_row, reduction, sample_weight=w)
        assert out.dtype == torch.float32, reduction
        torch.testing.assert_close(out, torch.tensor(want))
    empty = torch.zeros(0)
    assert reduce_loss(empty, "sum").item() == 0.0 and reduce_loss(empty, "none").shape == (0,)


def test_metrics_rank_in_the_promotion_of_user_and_item_embeddings():
    """Two items whose scores differ by 1e-12 in float64 tie in float32: ranks are counted
    in the promotion of both tables, float64 whichever of the two is float64."""
    from candidate_sampling.eval.metrics import top_k_items

    for users, items in (
        (torch.tensor([[1.0, 1.0 + 1e-12]], dtype=D64), torch.tensor([[1.0, 0.0], [0.0, 1.0]])),
        (torch.tensor([[1.0, 1.0]]), torch.tensor([[1.0, 0.0], [0.0, 1.0 + 1e-12]], dtype=D64)),
    ):
        rank = positive_ranks(users, items, torch.tensor([0]), torch.tensor([0]))
        assert rank.tolist() == [1]  # item 1 scores higher only in float64
        assert top_k_items(users, items, 1).tolist() == [[1]]


def test_metric_errors_and_boundaries_the_survivors_moved():
    from candidate_sampling.eval import KnownPairs
    from candidate_sampling.eval.metrics import top_k_items, user_bootstrap

    assert _message(metrics_from_ranks, torch.tensor([0, 1]), torch.tensor([0])) == (
        "number of interactions n must agree, got ranks=2, user_index=1"
    )
    users, items = torch.randn(2, 3), torch.randn(3, 3)
    one = KnownPairs(torch.tensor([0]), torch.tensor([1]), num_items=3)
    assert _message(top_k_items, users, items, 3, known=one).startswith("k must be <= 2")
    assert top_k_items(users, items, 2, known=one)[0].tolist() != [1, 1]
    assert _message(user_bootstrap, torch.zeros(0, dtype=D64)) == (
        "values must not be empty, got shape (0,)"
    )
    assert _message(user_bootstrap, [1.0]) == (
        "values must be a tensor of shape (n,) or (m, n), got list"
    )
    assert _message(user_bootstrap, torch.zeros(1, 1, 1)) == (
        "values must be a tensor of shape (n,) or (m, n), got (1, 1, 1)"
    )
    assert _message(
        user_bootstrap, torch.zeros(2, dtype=D64), torch.tensor([0, -1])
    ) == "users must be >= 0, got -1"


def test_estimator_device_errors_and_buckets_dtype():
    from candidate_sampling.sampling.frequency import StreamingFrequencyEstimator

    assert _message(StreamingFrequencyEstimator, 8, device=5) == (
        "device must be a torch.device or a string, got int"
    )
    est = StreamingFrequencyEstimator(8, hash_ids=False)
    got = est.buckets(torch.tensor([3, 7], dtype=torch.int32))
    assert got.dtype == torch.int64 and got.tolist() == [[3], [7]]


@pytest.mark.parametrize("first", ["positives", "draw"])
def test_a_half_table_checks_the_other_halfs_ids_before_gathering_them(first):
    """The first of ``positives_of`` / ``from_draw`` on a half table gathers the other's
    rows too, so it checks their range first: a ValueError naming them, not torch's bare
    IndexError from the gather."""
    from candidate_sampling import CandidateSet
    from candidate_sampling.sampling.samplers import CandidateDraw

    table = torch.randn(6, 3).half()
    ok_ids, bad_ids = torch.tensor([2, 0]), torch.tensor([2, 9])
    positives = bad_ids if first == "draw" else ok_ids
    draw = CandidateDraw(
        ids=ok_ids if first == "draw" else bad_ids, log_q=torch.tensor([-1.0, -2.0]),
        num_tries=2, unique=False, positive_log_q=torch.tensor([-2.0, -4.0]),
        positive_ids=positives,
    )
    name = "draw.positive_ids" if first == "draw" else "draw.ids"
    call = (
        (lambda: CandidateSet.from_draw(draw, table)) if first == "draw"
        else (lambda: CandidateSet.positives_of(positives, table, draw=draw))
    )
    assert _message(call) == (
        f"{name} must lie in [0, 6) (the rows of classes), got values in [2, 9]"
    )


def test_concat_promotes_embeddings_and_keeps_float_fields_at_least_float32():
    """Embeddings: the promotion of the parts (float16 + float64 → float64, exact);
    log Q and bias of half parts: float32, also when every part has one."""
    from candidate_sampling import CandidateSet

    a = CandidateSet(
        torch.tensor([[1.5, -2.0]], dtype=torch.float16), torch.tensor([0]),
        log_q=torch.tensor([-1.0], dtype=torch.float16),
        bias=torch.tensor([0.25], dtype=torch.float16),
    )
    b = CandidateSet(
        torch.tensor([[1.0 + 1e-12, 3.0]], dtype=D64), torch.tensor([1]),
        log_q=torch.tensor([-2.0], dtype=torch.float16),
        bias=torch.tensor([0.5], dtype=torch.float16),
    )
    joined = a + b
    assert joined.embeddings.dtype == D64 and joined.embeddings[1, 0].item() == 1.0 + 1e-12
    assert joined.log_q.dtype == torch.float32 and joined.bias.dtype == torch.float32
    assert joined.log_q.tolist() == [-1.0, -2.0] and joined.bias.tolist() == [0.25, 0.5]
    c = CandidateSet(torch.tensor([[0.0, 1.0]], dtype=torch.float16), torch.tensor([2]))
    both = a + c
    assert both.embeddings.dtype == torch.float16 and both.log_q.tolist() == [-1.0, 0.0]
    assert both.log_q.dtype == torch.float32


def test_sets_name_the_argument_whose_ids_are_out_of_range_and_keep_sparse_gradients():
    """``from_draw`` names ``draw.ids``, ``positives_of`` ``positive_ids``; ``from_ids``
    refuses a log Q of the wrong kind in its own words; ``positives_of(sparse=True)``
    without a draw still gives the table a sparse gradient; a set remade from checked
    parts takes the source its caller states (a name over its C columns, or runs)."""
    from candidate_sampling import CandidateSet
    from candidate_sampling.sampling.samplers import CandidateDraw

    table = torch.randn(6, 3, requires_grad=True)
    draw = CandidateDraw(
        ids=torch.tensor([2, 9]), log_q=torch.tensor([-1.0, -2.0]), num_tries=2,
        unique=False, positive_log_q=None, positive_ids=None,
    )
    assert _message(CandidateSet.from_draw, draw, table) == (
        "draw.ids must lie in [0, 6) (the rows of classes), got values in [2, 9]"
    )
    assert _message(CandidateSet.positives_of, torch.tensor([[1], [8]]), table) == (
        "positive_ids must lie in [0, 6) (the rows of classes), got values in [1, 8]"
    )
    assert _message(CandidateSet.positives_of, [1, 2], table) == (
        "positive_ids must have shape (B,) or (B, T), got None"
    )
    assert _message(CandidateSet.positives_of, torch.zeros(1, 1, 1, dtype=torch.long), table) == (
        "positive_ids must have shape (B,) or (B, T), got (1, 1, 1)"
    )
    assert _message(CandidateSet.from_ids, torch.tensor([0]), table, log_q="x") == (
        "log_q must be a tensor, a number or None, got 'x'"
    )
    CandidateSet.positives_of(torch.tensor([1, 1, 4]), table, sparse=True).embeddings.sum().backward()
    assert table.grad.is_sparse
    assert table.grad.to_dense()[:, 0].tolist() == [0.0, 2.0, 0.0, 0.0, 1.0, 0.0]
    def remade(num, source):
        return CandidateSet._unchecked(
            torch.zeros(num, 2), torch.arange(num), None, None, None, source
        ).source

    assert remade(4, "mined") == (("mined", 4),) and remade(0, "fixed") == ()
    assert remade(4, (("batch", 1), ("unique", 3))) == (("batch", 1), ("unique", 3))
