"""Tests of the chunked exact softmax (chapter 10) against ``F.cross_entropy`` on full logits.

The reference builds the (N, |V|) logits ``query @ classes.T / τ + class_bias`` in float64
and applies ``F.cross_entropy`` (per-row weights applied by hand, since
``F.cross_entropy``'s ``weight`` is per class); the chunked loss and every gradient
(query, classes, class_bias, a learnable temperature, sample_weight) must agree to 1e-12.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import candidate_sampling
from candidate_sampling.losses import (
    ChunkedSoftmaxCrossEntropy,
    Temperature,
    chunked_softmax_cross_entropy,
    default_chunk_size,
    resolve_method,
)

D64 = torch.float64
TOL = 1e-12


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def make_problem(seed, *, n=23, num_classes=37, d=6, dtype=D64, ignored=True, scale=1.0):
    g = gen(seed)
    ids = torch.randint(num_classes, (n,), generator=g)
    if ignored:
        ids[::4] = -100
    return {
        "query": (torch.randn(n, d, generator=g, dtype=D64) * scale).to(dtype),
        "classes": (torch.randn(num_classes, d, generator=g, dtype=D64) * scale).to(dtype),
        "positive_ids": ids,
        "class_bias": torch.randn(num_classes, generator=g, dtype=D64).to(dtype),
        "sample_weight": torch.rand(n, generator=g, dtype=D64).to(dtype) + 0.1,
    }


def reference(
    query,
    classes,
    positive_ids,
    *,
    class_bias=None,
    temperature=1.0,
    ignore_index=-100,
    sample_weight=None,
    reduction="mean",
):
    """F.cross_entropy on the full logits, per-row weights as F.cross_entropy's weighted mean."""
    logits = query @ classes.T / temperature
    if class_bias is not None:
        logits = logits + class_bias
    if sample_weight is None:
        return F.cross_entropy(logits, positive_ids, ignore_index=ignore_index, reduction=reduction)
    per_row = F.cross_entropy(logits, positive_ids, ignore_index=ignore_index, reduction="none")
    kept = positive_ids != ignore_index
    w = torch.where(kept, sample_weight, torch.zeros_like(sample_weight))
    if reduction == "none":
        return per_row * w
    if reduction == "sum":
        return (per_row * w).sum()
    return (per_row * w).sum() / w.sum()


def leaves(problem, *, bias, weight, learn_temperature):
    """Fresh float64 leaves requiring grad; returns (kwargs for both, list of leaves)."""
    q = problem["query"].clone().requires_grad_()
    c = problem["classes"].clone().requires_grad_()
    kwargs = {"query": q, "classes": c, "positive_ids": problem["positive_ids"]}
    grads = [q, c]
    if bias:
        kwargs["class_bias"] = problem["class_bias"].clone().requires_grad_()
        grads.append(kwargs["class_bias"])
    if weight:
        kwargs["sample_weight"] = problem["sample_weight"].clone().requires_grad_()
        grads.append(kwargs["sample_weight"])
    if learn_temperature:
        kwargs["temperature"] = torch.tensor(0.7, dtype=D64, requires_grad=True)
        grads.append(kwargs["temperature"])
    else:
        kwargs["temperature"] = 0.7
    return kwargs, grads


CASES = [
    (method, reduction, bias, weight, learn_t, chunk)
    for method, reductions in (("vocab", ("mean", "sum", "none")), ("rows", ("mean", "sum")))
    for reduction in reductions
    for bias, weight, learn_t in ((True, True, True), (False, False, False), (True, False, True))
    for chunk in ((5, None) if method == "vocab" else (4, None))
]


@pytest.mark.parametrize("method,reduction,bias,weight,learn_t,chunk", CASES)
def test_value_and_every_gradient_match_full_logits(
    method, reduction, bias, weight, learn_t, chunk
):
    problem = make_problem(0)
    kwargs, grads = leaves(problem, bias=bias, weight=weight, learn_temperature=learn_t)
    got = chunked_softmax_cross_entropy(
        **kwargs, reduction=reduction, chunk_size=chunk, method=method
    )
    want = reference(**kwargs, reduction=reduction)
    assert got.dtype == D64 and got.shape == want.shape
    assert torch.allclose(got, want, atol=TOL, rtol=0)
    upstream = torch.randn(want.shape, generator=gen(1), dtype=D64)
    got_grads = torch.autograd.grad((got * upstream).sum(), grads)
    want_grads = torch.autograd.grad((want * upstream).sum(), grads)
    for leaf, a, b in zip(grads, got_grads, want_grads):
        assert a.shape == leaf.shape and a.dtype == leaf.dtype
        assert torch.allclose(a, b, atol=TOL, rtol=0), (a - b).abs().max()


def test_ignored_rows_get_zero_loss_and_zero_gradient():
    problem = make_problem(2)
    q = problem["query"].clone().requires_grad_()
    ids = problem["positive_ids"]
    per_row = chunked_softmax_cross_entropy(
        q, problem["classes"], ids, reduction="none", chunk_size=8
    )
    ignored = ids == -100
    assert ignored.any() and (per_row[ignored] == 0).all() and (per_row[~ignored] > 0).all()
    per_row.sum().backward()
    assert (q.grad[ignored] == 0).all()


def test_ignore_index_can_be_a_class_id_as_padding():
    problem = make_problem(3, ignored=False)
    ids = problem["positive_ids"].clone()
    ids[:5] = 0  # id 0 is the padding item, as in SASRec's sequences
    got = chunked_softmax_cross_entropy(
        problem["query"], problem["classes"], ids, ignore_index=0, chunk_size=6
    )
    want = F.cross_entropy(problem["query"] @ problem["classes"].T, ids, ignore_index=0)
    assert torch.allclose(got, want, atol=TOL, rtol=0)


@pytest.mark.parametrize("method", ["vocab", "rows"])
def test_every_row_ignored_gives_nan_mean_zero_sum_and_zero_gradients(method):
    problem = make_problem(4)
    ids = torch.full_like(problem["positive_ids"], -100)
    q = problem["query"].clone().requires_grad_()
    c = problem["classes"].clone().requires_grad_()
    mean = chunked_softmax_cross_entropy(q, c, ids, method=method)
    want = F.cross_entropy(q @ c.T, ids)
    assert math.isnan(mean.item()) and math.isnan(want.item())  # 0/0, as F.cross_entropy
    total = chunked_softmax_cross_entropy(q, c, ids, reduction="sum", method=method)
    assert float(total) == 0.0
    total.backward()
    assert (q.grad == 0).all() and (c.grad == 0).all()
    none = chunked_softmax_cross_entropy(q, c, ids, reduction="none")
    assert none.shape == ids.shape and (none == 0).all()


@pytest.mark.parametrize("method", ["vocab", "rows"])
def test_gradcheck(method):
    problem = make_problem(5, n=6, num_classes=11, d=3)
    kwargs, grads = leaves(problem, bias=True, weight=True, learn_temperature=True)
    names = ["query", "classes", "class_bias", "sample_weight", "temperature"]
    reduction = "none" if method == "vocab" else "mean"

    def fn(*tensors):
        args = dict(kwargs, **dict(zip(names, tensors)))
        return chunked_softmax_cross_entropy(
            **args, reduction=reduction, chunk_size=4, method=method
        )

    assert torch.autograd.gradcheck(fn, tuple(kwargs[n] for n in names))


@pytest.mark.parametrize("method", ["auto", "vocab", "rows"])
def test_no_grad_forward_gives_the_same_loss(method):
    problem = make_problem(14)
    q = problem["query"].clone().requires_grad_()
    with_grad = chunked_softmax_cross_entropy(
        q, problem["classes"], problem["positive_ids"], method=method
    )
    with torch.no_grad():
        without = chunked_softmax_cross_entropy(
            q, problem["classes"], problem["positive_ids"], method=method
        )
    assert without.grad_fn is None
    assert torch.allclose(with_grad.detach(), without, atol=TOL, rtol=0)


@pytest.mark.parametrize("method", ["vocab", "rows"])
def test_backward_twice_with_retain_graph(method):
    problem = make_problem(6)
    q = problem["query"].clone().requires_grad_()
    loss = chunked_softmax_cross_entropy(
        q, problem["classes"], problem["positive_ids"], method=method
    )
    loss.backward(retain_graph=True)
    first = q.grad.clone()
    loss.backward()
    assert torch.allclose(q.grad, 2 * first, atol=TOL, rtol=0)


@settings(max_examples=30, deadline=None)
@given(
    n=st.integers(1, 12),
    num_classes=st.integers(1, 40),
    d=st.integers(1, 5),
    chunk=st.integers(1, 45),
    method=st.sampled_from(["vocab", "rows"]),
    seed=st.integers(0, 2**16),
)
def test_any_chunk_size_gives_the_full_softmax(n, num_classes, d, chunk, method, seed):
    g = gen(seed)
    q = torch.randn(n, d, generator=g, dtype=D64, requires_grad=True)
    c = torch.randn(num_classes, d, generator=g, dtype=D64, requires_grad=True)
    ids = torch.randint(num_classes, (n,), generator=g)
    got = chunked_softmax_cross_entropy(
        q, c, ids, reduction="sum", chunk_size=chunk, method=method
    )
    want = F.cross_entropy(q @ c.T, ids, reduction="sum")
    assert torch.allclose(got, want, atol=TOL, rtol=0)
    ga = torch.autograd.grad(got, [q, c])
    gb = torch.autograd.grad(want, [q, c])
    for a, b in zip(ga, gb):
        assert torch.allclose(a, b, atol=TOL, rtol=0)


@settings(max_examples=20, deadline=None)
@given(shift=st.floats(-50, 50), seed=st.integers(0, 2**16))
def test_a_constant_added_to_every_bias_cancels(shift, seed):
    problem = make_problem(seed, ignored=False)
    base = chunked_softmax_cross_entropy(
        problem["query"], problem["classes"], problem["positive_ids"],
        class_bias=problem["class_bias"], chunk_size=7,
    )
    shifted = chunked_softmax_cross_entropy(
        problem["query"], problem["classes"], problem["positive_ids"],
        class_bias=problem["class_bias"] + shift, chunk_size=7,
    )
    assert torch.allclose(base, shifted, atol=1e-10, rtol=0)


@pytest.mark.parametrize("method", ["vocab", "rows"])
def test_huge_logits_do_not_overflow_float32(method):
    # logits of order 1e4: exp overflows float32 without the running max; the largest
    # logit of a row sits in the last block, so the running max must rescale the sum
    problem = make_problem(7, ignored=False, scale=60.0)
    q32, c32 = problem["query"].float(), problem["classes"].float()
    got = chunked_softmax_cross_entropy(
        q32, c32, problem["positive_ids"], reduction="none" if method == "vocab" else "sum",
        chunk_size=5, method=method,
    )
    want = reference(
        problem["query"], problem["classes"], problem["positive_ids"],
        reduction="none" if method == "vocab" else "sum",
    )
    assert torch.isfinite(got).all()
    assert torch.allclose(got.double(), want, rtol=1e-5, atol=1e-2)


@pytest.mark.parametrize("half", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("method", ["vocab", "rows"])
def test_half_inputs_accumulate_in_float32(half, method):
    problem = make_problem(8, n=64, num_classes=300, d=16)
    q = problem["query"].to(half).requires_grad_()
    c = problem["classes"].to(half).requires_grad_()
    b = problem["class_bias"].to(half).requires_grad_()
    ids = problem["positive_ids"]
    got = chunked_softmax_cross_entropy(
        q, c, ids, class_bias=b, temperature=0.05, chunk_size=64, method=method
    )
    got.backward()
    assert got.dtype == torch.float32 and torch.isfinite(got)
    # the float32 reference on the same (rounded) half values; τ = 0.05 puts logits near
    # 1e3 / 20 where float16 itself would lose digits
    q32, c32, b32 = (t.detach().float().requires_grad_() for t in (q, c, b))
    want = reference(q32, c32, ids, class_bias=b32, temperature=0.05)
    want.backward()
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-4)
    for leaf, ref in ((q, q32), (c, c32), (b, b32)):
        assert leaf.grad.dtype == half and torch.isfinite(leaf.grad).all()
        scale = ref.grad.abs().max()
        assert (leaf.grad.float() - ref.grad).abs().max() <= 1e-2 * scale


def test_mixed_dtypes_are_promoted():
    problem = make_problem(9)
    got = chunked_softmax_cross_entropy(
        problem["query"], problem["classes"].float(), problem["positive_ids"], chunk_size=4
    )
    assert got.dtype == D64
    want = reference(problem["query"], problem["classes"].float().double(), problem["positive_ids"])
    assert torch.allclose(got, want, atol=TOL, rtol=0)


def test_minus_infinity_bias_removes_a_class_as_f_cross_entropy_does():
    problem = make_problem(10, ignored=False)
    bias = problem["class_bias"].clone()
    ids = problem["positive_ids"]
    banned = [j for j in range(bias.shape[0]) if j not in set(ids.tolist())][:3]
    bias[banned] = float("-inf")
    got = chunked_softmax_cross_entropy(
        problem["query"], problem["classes"], ids, class_bias=bias, chunk_size=3,
        reduction="none",
    )
    want = reference(problem["query"], problem["classes"], ids, class_bias=bias, reduction="none")
    assert torch.isfinite(got).all() and torch.allclose(got, want, atol=TOL, rtol=0)


@pytest.mark.parametrize("method", ["vocab", "rows"])
@pytest.mark.parametrize("where", ["query", "classes", "class_bias"])
def test_nan_in_gives_nan_out(method, where):
    problem = make_problem(11, ignored=False)
    problem[where] = problem[where].clone()
    problem[where].view(-1)[3] = float("nan")
    kwargs = {k: problem[k] for k in ("query", "classes", "positive_ids", "class_bias")}
    got = chunked_softmax_cross_entropy(**kwargs, chunk_size=5, method=method)
    assert math.isnan(float(got))


def test_module_matches_function_and_repr():
    problem = make_problem(12)
    module = ChunkedSoftmaxCrossEntropy(temperature=0.5, chunk_size=9, method="vocab")
    got = module(
        problem["query"], problem["classes"], problem["positive_ids"],
        class_bias=problem["class_bias"],
    )
    want = chunked_softmax_cross_entropy(
        problem["query"], problem["classes"], problem["positive_ids"],
        class_bias=problem["class_bias"], temperature=0.5,
    )
    assert torch.allclose(got, want, atol=TOL, rtol=0)
    assert "chunk_size=9" in repr(module) and "method='vocab'" in repr(module)
    assert list(module.parameters()) == []


def test_default_chunk_size():
    assert default_chunk_size(1024, 10**6) == 2**21 // 1024
    assert default_chunk_size(10**6, 50) == 50  # never more than |V|
    assert default_chunk_size(2**16, 10**6) == 128
    assert default_chunk_size(2**20, 10**6) == 64  # 128 columns would pass 256 MiB
    assert default_chunk_size(1024, 10**5, "rows") == 256  # the measured fastest block
    assert default_chunk_size(1024, 10**6, "rows") == 2**28 // (4 * 10**6)  # the budget
    assert default_chunk_size(4096, 1000, "rows") == 256
    assert default_chunk_size(8, 100, "rows") == 8
    assert default_chunk_size(1024, 10**5, "rows", memory_budget=2**24) == 41
    assert default_chunk_size(1024, 10**5, "rows", element_size=8) == 256


def test_auto_resolves_to_rows_for_reduced_losses_within_the_budget():
    assert resolve_method(1024, 10**5) == "rows"
    assert resolve_method(1024, 10**5, reduction="sum") == "rows"
    assert resolve_method(1024, 10**5, reduction="none") == "vocab"
    assert resolve_method(1024, 10**5, half=True) == "vocab"
    assert resolve_method(1024, 10**6) == "rows"  # 67 x 1e6 logits fit in 256 MiB
    assert resolve_method(1024, 10**6, memory_budget=2**26) == "vocab"  # 16 rows: flat
    assert resolve_method(1024, 10**6, element_size=8) == "vocab"
    assert resolve_method(16, 10**6) == "rows"  # one block of 16 x 1e6
    assert resolve_method(16, 10**7) == "vocab"


@settings(max_examples=200, deadline=None)
@given(
    n=st.integers(0, 10**6),
    num_classes=st.integers(1, 10**7),
    budget=st.integers(1, 2**31),
    size=st.sampled_from([4, 8]),
    method=st.sampled_from(["vocab", "rows"]),
)
def test_the_default_block_never_exceeds_the_memory_budget(n, num_classes, budget, size, method):
    other = num_classes if method == "rows" else max(n, 1)
    if budget < other * size:  # not even one row / one column fits: a ValueError
        with pytest.raises(ValueError, match="memory_budget must hold"):
            default_chunk_size(
                n, num_classes, method, memory_budget=budget, element_size=size
            )
        return
    chunk = default_chunk_size(n, num_classes, method, memory_budget=budget, element_size=size)
    assert chunk >= 1 and chunk * other * size <= budget
    if resolve_method(n, num_classes, memory_budget=budget, element_size=size) == "rows":
        rows = default_chunk_size(
            n, num_classes, "rows", memory_budget=budget, element_size=size
        )
        assert rows >= min(n, 64)


def _largest_flat_buffer_bytes(fn, other_sizes) -> int:
    """Bytes of the largest one-dimensional ``torch.empty`` made while ``fn`` runs, but
    those of ``other_sizes`` elements: the chunked loss's logit block (its other 1-d
    buffers hold N or |V| numbers: losses, running sums, the bias gradient)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    sizes = [0]

    class Watch(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            flat = func is torch.ops.aten.empty.memory_format and out.dim() == 1
            if flat and out.numel() not in other_sizes:
                sizes.append(out.numel() * out.element_size())
            return out

    with Watch():
        fn()
    return max(sizes)


@pytest.mark.parametrize("budget", [2 * 18 * 8, 3 * 18 * 8, 2 * 37 * 8, 18 * 37 * 8, 10**6])
def test_the_same_result_whatever_the_memory_budget(budget):
    """Every budget that holds a row (or a column) gives the full softmax's loss and
    gradients, and the logit block the loss allocates never exceeds the budget."""
    problem = make_problem(31)  # 18 of the 23 rows kept, 37 classes, float64
    names = ("query", "classes", "class_bias", "sample_weight")

    def leaves():
        return {k: v.clone().requires_grad_() if k in names else v for k, v in problem.items()}

    ref_args, args = leaves(), leaves()
    want = reference(**ref_args)
    want_grads = torch.autograd.grad(want, [ref_args[k] for k in names])
    got = chunked_softmax_cross_entropy(**args, memory_budget=budget)
    got_grads = torch.autograd.grad(got, [args[k] for k in names])
    assert torch.allclose(got, want, atol=TOL, rtol=0)
    for a, b in zip(got_grads, want_grads):
        assert torch.allclose(a, b, atol=TOL, rtol=0)

    def step():
        loss = chunked_softmax_cross_entropy(**leaves(), memory_budget=budget)
        loss.backward()

    assert 0 < _largest_flat_buffer_bytes(step, (18, 23, 37)) <= budget


def test_a_budget_too_small_for_one_column_names_memory_budget():
    problem = make_problem(32, ignored=False)
    with pytest.raises(ValueError, match="memory_budget must hold"):
        chunked_softmax_cross_entropy(**problem, memory_budget=8)
    with pytest.raises(ValueError, match="memory_budget must be >= 1"):
        chunked_softmax_cross_entropy(**problem, memory_budget=0)


@pytest.mark.parametrize("scale", [30.0, 300.0])
def test_a_positive_far_below_the_row_max_keeps_its_exact_loss(scale):
    """The row form takes ℓ = −log p_t from its fused softmax; where p_t underflows
    (ℓ in the hundreds or thousands) the loss is recomputed from the logits: finite, exact."""
    problem = make_problem(33, ignored=False, num_classes=300, scale=scale)
    for dtype in (torch.float32, torch.float64):
        q, c = problem["query"].to(dtype), problem["classes"].to(dtype)
        ids = problem["positive_ids"]
        got = chunked_softmax_cross_entropy(q, c, ids, method="rows", reduction="sum")
        want = F.cross_entropy(q.double() @ c.double().T, ids, reduction="sum")
        assert torch.isfinite(got)
        assert torch.allclose(got.double(), want, rtol=1e-5 if dtype == torch.float32 else 1e-12)


# --------------------------------------------------------------------------- bad input


def _call(**overrides):
    problem = make_problem(13)
    kwargs = {k: problem[k] for k in ("query", "classes", "positive_ids")}
    kwargs.update(overrides)
    return chunked_softmax_cross_entropy(**kwargs)


BAD = [
    ({"query": torch.randn(23)}, "query must have shape"),
    ({"query": torch.randint(3, (23, 6))}, "query must be a floating-point"),
    ({"classes": torch.randn(37, 5, dtype=D64)}, "embedding dimension d must agree"),
    ({"classes": torch.randn(37)}, "classes must have shape"),
    ({"positive_ids": torch.zeros(22, dtype=torch.long)}, "number of rows N must agree"),
    ({"positive_ids": torch.zeros(23)}, "positive_ids must be an integer"),
    ({"positive_ids": torch.zeros(23, dtype=torch.bool)}, "positive_ids must be an integer"),
    ({"positive_ids": torch.full((23,), 37)}, r"positive_ids must lie in \[0, 37\)"),
    ({"positive_ids": torch.full((23,), -1)}, "positive_ids must lie in"),
    ({"class_bias": torch.randn(36, dtype=D64)}, "number of classes"),
    ({"class_bias": torch.zeros(37, dtype=torch.long)}, "class_bias must be a floating"),
    ({"sample_weight": torch.ones(22, dtype=D64)}, "number of rows N must agree"),
    ({"sample_weight": torch.ones(23, dtype=torch.long)}, "sample_weight must be a floating"),
    ({"temperature": 0.0}, "temperature must be > 0"),
    ({"temperature": -0.5}, "temperature must be > 0"),
    ({"temperature": torch.tensor(-1.0)}, "temperature must be > 0"),
    ({"temperature": torch.ones(2)}, "temperature must be a scalar"),
    ({"chunk_size": 0}, "chunk_size must be >= 1"),
    ({"chunk_size": -3}, "chunk_size must be >= 1"),
    ({"chunk_size": 2.5}, "chunk_size must be an int"),
    ({"reduction": "avg"}, "reduction must be one of"),
    ({"method": "fused"}, "method must be one of"),
    ({"method": "rows", "reduction": "none"}, 'method="rows"'),
    ({"ignore_index": 1.5}, "ignore_index must be an int"),
]


@pytest.mark.parametrize("overrides,message", BAD)
def test_bad_input_raises_value_error_naming_the_argument(overrides, message):
    with pytest.raises(ValueError, match=message):
        _call(**overrides)


def test_id_range_is_a_value_check_that_can_be_switched_off():
    with candidate_sampling.validate_args(False):
        # no ValueError: torch's own indexing error or a wrong answer instead (documented)
        try:
            _call(positive_ids=torch.full((23,), 10**6), method="rows")
        except (RuntimeError, IndexError):
            pass


@pytest.mark.parametrize("method", ["vocab", "rows"])
def test_a_learnable_temperature_module_gets_its_gradient(method):
    problem = make_problem(15)
    tau = Temperature(0.3, learnable=True).double()
    module = ChunkedSoftmaxCrossEntropy(temperature=tau, method=method, chunk_size=6)
    assert [p is tau.log_scale for p in module.parameters()] == [True]
    got = module(problem["query"], problem["classes"], problem["positive_ids"])
    (got_grad,) = torch.autograd.grad(got, [tau.log_scale])
    logits = problem["query"] @ problem["classes"].T * tau.scale
    want = F.cross_entropy(logits, problem["positive_ids"])
    (want_grad,) = torch.autograd.grad(want, [tau.log_scale])
    assert torch.allclose(got, want, atol=TOL, rtol=0)
    assert torch.allclose(got_grad, want_grad, atol=TOL, rtol=0)
    fixed_tau = Temperature(0.3)  # a float32 buffer: τ = float(its value), not 0.3 exactly
    fixed = chunked_softmax_cross_entropy(
        problem["query"], problem["classes"], problem["positive_ids"], temperature=fixed_tau
    )
    logits = problem["query"] @ problem["classes"].T / float(fixed_tau.value)
    want = F.cross_entropy(logits, problem["positive_ids"])
    assert torch.allclose(fixed, want, atol=TOL, rtol=0)


def test_module_rejects_bad_options():
    with pytest.raises(ValueError, match="chunk_size"):
        ChunkedSoftmaxCrossEntropy(chunk_size=0)
    with pytest.raises(ValueError, match="method"):
        ChunkedSoftmaxCrossEntropy(method="x")
    with pytest.raises(ValueError, match="temperature"):
        ChunkedSoftmaxCrossEntropy(temperature=0)


def _leading_block_banned(n, num_classes, banned, seed):
    """Float64 leaves with class_bias -inf on the first ``banned`` classes (never a positive)."""
    g = gen(seed)
    query = torch.randn(n, 3, generator=g, dtype=D64).requires_grad_()
    classes = torch.randn(num_classes, 3, generator=g, dtype=D64).requires_grad_()
    bias = torch.randn(num_classes, generator=g, dtype=D64)
    bias[:banned] = float("-inf")
    bias.requires_grad_()
    ids = torch.randint(banned, num_classes, (n,), generator=g)
    return query, classes, bias, ids


@pytest.mark.parametrize("method", ["vocab", "rows"])
@pytest.mark.parametrize("chunk", [1, 2, 3])
def test_a_leading_block_of_minus_infinity_bias_stays_finite(method, chunk):
    # the running max starts at -inf: a first block of -inf logits gave exp(-inf + inf) = NaN
    query, classes, bias, ids = _leading_block_banned(4, 10, 3, 20)
    reduction = "none" if method == "vocab" else "sum"
    kwargs = {"class_bias": bias, "reduction": reduction}
    got = chunked_softmax_cross_entropy(
        query, classes, ids, **kwargs, chunk_size=chunk, method=method
    )
    want = reference(query, classes, ids, **kwargs)
    assert torch.isfinite(got).all() and torch.allclose(got, want, atol=TOL, rtol=0)
    got_grads = torch.autograd.grad(got.sum(), (query, classes, bias))
    want_grads = torch.autograd.grad(want.sum(), (query, classes, bias))
    for a, b in zip(got_grads, want_grads):
        assert torch.isfinite(a).all() and torch.allclose(a, b, atol=TOL, rtol=0)


def test_a_leading_block_of_minus_infinity_bias_with_the_default_settings():
    n, num_classes = 2**14, 200  # the default vocabulary block: 2**21 // n = 128 classes
    chunk = default_chunk_size(n, num_classes, "vocab")
    assert chunk == 128 and resolve_method(n, num_classes, reduction="none") == "vocab"
    query, classes, bias, ids = _leading_block_banned(n, num_classes, chunk, 21)
    got = chunked_softmax_cross_entropy(query, classes, ids, class_bias=bias, reduction="none")
    want = reference(query, classes, ids, class_bias=bias, reduction="none")
    assert torch.isfinite(got).all() and torch.allclose(got, want, atol=TOL, rtol=0)
    got_grads = torch.autograd.grad(got.sum(), (query, bias))
    want_grads = torch.autograd.grad(want.sum(), (query, bias))
    for a, b in zip(got_grads, want_grads):  # the bias gradient sums n rows
        assert torch.isfinite(a).all() and torch.allclose(a, b, atol=TOL * n, rtol=0)
