"""Contrastive losses (chapter 6) against float64 loop references, invariants, stability."""

from __future__ import annotations

import math
import warnings

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from candidate_sampling import CandidateSet
from candidate_sampling.losses import (
    InfoNCELoss,
    NTBXentLoss,
    NTXentLoss,
    SoftNearestNeighborLoss,
    SupConLoss,
    Temperature,
    alignment_loss,
    in_batch_softmax_loss,
    info_nce_loss,
    nt_bxent_loss,
    nt_xent_loss,
    pairwise_cosine_similarity,
    pairwise_squared_distance,
    soft_nearest_neighbor_loss,
    supcon_loss,
    uniformity_loss,
)

D64 = torch.float64


def randn(*shape, seed=0, dtype=D64):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def cos(a, b):
    return float(a @ b / (a.norm() * b.norm()))


# ---------------------------------------------------------------- loop references


def ref_info_nce(q, k, tau, symmetric=False):
    b = q.shape[0]
    total = 0.0
    for i in range(b):
        row = [float(q[i] @ k[j]) / tau for j in range(b)]
        loss_qk = math.log(sum(math.exp(v) for v in row)) - row[i]
        if symmetric:
            col = [float(q[j] @ k[i]) / tau for j in range(b)]
            loss_kq = math.log(sum(math.exp(v) for v in col)) - col[i]
            total += 0.5 * (loss_qk + loss_kq)
        else:
            total += loss_qk
    return total / b


def ref_nt_xent(v1, v2, tau):
    z = torch.cat([v1, v2])
    n2 = z.shape[0]
    n = n2 // 2
    total = 0.0
    for i in range(n2):
        p = (i + n) % n2
        denom = sum(math.exp(cos(z[i], z[k]) / tau) for k in range(n2) if k != i)
        total += -math.log(math.exp(cos(z[i], z[p]) / tau) / denom)
    return total / n2


def ref_nt_bxent(x, pairs, tau):
    n = x.shape[0]
    positives = {(int(i), int(j)) for i, j in pairs}
    total = 0.0
    for i in range(n):
        pos, neg = [], []
        for j in range(n):
            if j == i:
                continue
            z = cos(x[i], x[j]) / tau
            sig = 1.0 / (1.0 + math.exp(-z))
            if (i, j) in positives:
                pos.append(-math.log(sig))
            else:
                neg.append(-math.log(1.0 - sig))
        total += (sum(pos) / len(pos) if pos else 0.0) + (sum(neg) / len(neg) if neg else 0.0)
    return total / n


def ref_supcon(x, labels, tau, variant):
    n = x.shape[0]
    rows = []
    for i in range(n):
        denom = sum(math.exp(cos(x[i], x[a]) / tau) for a in range(n) if a != i)
        probs = [
            math.exp(cos(x[i], x[p]) / tau) / denom
            for p in range(n)
            if p != i and labels[p] == labels[i]
        ]
        if not probs:
            continue
        if variant == "out":
            rows.append(-sum(math.log(pr) for pr in probs) / len(probs))
        else:
            rows.append(-math.log(sum(probs) / len(probs)))
    return sum(rows) / len(rows) if rows else 0.0


def ref_snn(x, labels, temp, distance="squared_euclidean"):
    n = x.shape[0]

    def dist(a, b):
        if distance == "squared_euclidean":
            return float(((a - b) ** 2).sum())
        return 1.0 - cos(a, b)

    rows = []
    for i in range(n):
        same = sum(
            math.exp(-dist(x[i], x[j]) / temp)
            for j in range(n)
            if j != i and labels[j] == labels[i]
        )
        rest = sum(math.exp(-dist(x[i], x[k]) / temp) for k in range(n) if k != i)
        if any(labels[j] == labels[i] for j in range(n) if j != i):
            rows.append(-math.log(same / rest))
    return sum(rows) / len(rows)


# ---------------------------------------------------------------- against references


@pytest.mark.parametrize("symmetric", [False, True])
@pytest.mark.parametrize("tau", [0.1, 1.0])
def test_info_nce_matches_loop(symmetric, tau):
    q, k = randn(6, 4, seed=1), randn(6, 4, seed=2)
    got = info_nce_loss(q, k, temperature=tau, symmetric=symmetric)
    assert got.item() == pytest.approx(ref_info_nce(q, k, tau, symmetric), rel=1e-10)


def test_info_nce_normalize_uses_cosine():
    q, k = randn(5, 3, seed=3), randn(5, 3, seed=4)
    got = info_nce_loss(q * 7.0, k * 0.2, temperature=0.5, normalize=True)
    want = ref_info_nce(F.normalize(q, dim=1), F.normalize(k, dim=1), 0.5)
    assert got.item() == pytest.approx(want, rel=1e-10)


@pytest.mark.parametrize("tau", [0.05, 0.5, 2.0])
def test_nt_xent_matches_loop(tau):
    v1, v2 = randn(5, 3, seed=5), randn(5, 3, seed=6)
    assert nt_xent_loss(v1, v2, temperature=tau).item() == pytest.approx(
        ref_nt_xent(v1, v2, tau), rel=1e-10
    )


@pytest.mark.parametrize("tau", [0.1, 1.0])
def test_nt_bxent_matches_loop(tau):
    x = randn(8, 3, seed=7)
    pairs = torch.tensor(
        [[0, 2], [0, 4], [1, 4], [1, 6], [2, 3], [3, 7], [4, 3], [7, 6], [0, 2]]
    )  # a duplicate counts once; rows 5, 6 have no positive
    got = nt_bxent_loss(x, pairs, temperature=tau)
    assert got.item() == pytest.approx(ref_nt_bxent(x, pairs.tolist(), tau), rel=1e-10)


@pytest.mark.parametrize("variant", ["out", "in"])
@pytest.mark.parametrize("tau", [0.1, 0.7])
def test_supcon_matches_loop(variant, tau):
    x = randn(9, 4, seed=8)
    labels = torch.tensor([0, 1, 0, 2, 1, 0, 3, 2, 1])  # label 3 has no positive
    got = supcon_loss(x, labels, temperature=tau, variant=variant)
    assert got.item() == pytest.approx(ref_supcon(x, labels.tolist(), tau, variant), rel=1e-10)


@pytest.mark.parametrize("distance", ["squared_euclidean", "cosine"])
@pytest.mark.parametrize("temp", [0.3, 5.0])
def test_snn_matches_loop(distance, temp):
    x = randn(10, 3, seed=9)
    labels = torch.tensor([0, 1, 0, 2, 1, 0, 3, 2, 1, 1])  # label 3 is alone
    got = soft_nearest_neighbor_loss(x, labels, temperature=temp, distance=distance)
    assert got.item() == pytest.approx(ref_snn(x, labels.tolist(), temp, distance), rel=1e-9)


def test_pairwise_helpers_match_definitions():
    a, b = randn(4, 3, seed=10), randn(5, 3, seed=11)
    assert torch.allclose(pairwise_squared_distance(a, b), torch.cdist(a, b) ** 2)
    assert torch.allclose(
        pairwise_cosine_similarity(a, b), F.cosine_similarity(a[:, None], b[None], dim=-1)
    )
    assert torch.equal(pairwise_squared_distance(a).diagonal(), torch.zeros(4, dtype=D64))


def test_alignment_and_uniformity_match_definitions():
    x, y = randn(6, 3, seed=12), randn(6, 3, seed=13)
    f, g = F.normalize(x, dim=1), F.normalize(y, dim=1)
    assert alignment_loss(x, y).item() == pytest.approx(
        ((f - g).norm(dim=1) ** 2).mean().item(), rel=1e-9
    )
    want = torch.pdist(f).pow(2).mul(-2).exp().mean().log()
    assert uniformity_loss(x).item() == pytest.approx(want.item(), rel=1e-10)
    # a collapsed representation is the least uniform: exactly 0
    assert uniformity_loss(x[:1].repeat(5, 1)).item() == pytest.approx(0.0, abs=1e-12)


# ---------------------------------------------------------------- reductions and rows
# without positives


def test_reductions_and_none_shapes():
    x, labels = randn(6, 3, seed=14), torch.tensor([0, 0, 1, 1, 2, 3])
    none = supcon_loss(x, labels, temperature=0.5, reduction="none")
    assert none.shape == (6,) and none[4] == 0 and none[5] == 0
    assert supcon_loss(x, labels, temperature=0.5).item() == pytest.approx(none[:4].mean().item())
    assert supcon_loss(x, labels, temperature=0.5, reduction="sum").item() == pytest.approx(
        none.sum().item()
    )
    snn = soft_nearest_neighbor_loss(x, labels, reduction="none")
    assert snn.shape == (6,) and snn[4] == 0 and snn[5] == 0
    assert nt_xent_loss(x[:3], x[3:], reduction="none").shape == (6,)
    assert info_nce_loss(x, x, reduction="none").shape == (6,)


@pytest.mark.parametrize("fn", [supcon_loss, soft_nearest_neighbor_loss])
def test_no_row_with_a_positive_gives_zero_with_a_gradient_path(fn):
    x = randn(4, 3, seed=15).requires_grad_()
    loss = fn(x, torch.arange(4))
    assert loss.item() == 0.0
    loss.backward()
    assert torch.equal(x.grad, torch.zeros_like(x))


def test_nt_bxent_row_without_positive_has_only_negative_term():
    x = randn(4, 3, seed=16)
    per = nt_bxent_loss(x, torch.tensor([[0, 1]]), temperature=0.5, reduction="none")
    logits = pairwise_cosine_similarity(x) / 0.5
    assert per[2].item() == pytest.approx(F.softplus(logits[2, [0, 1, 3]]).mean().item())


# ---------------------------------------------------------------- invariants


@pytest.mark.parametrize("n", [1, 2, 5])
@pytest.mark.parametrize("tau", [0.07, 1.0])
def test_identical_embeddings_give_log_2n_minus_1(n, tau):
    v = torch.ones(n, 4, dtype=D64)
    assert nt_xent_loss(v, v, temperature=tau).item() == pytest.approx(
        math.log(2 * n - 1), abs=1e-12
    )


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(2, 6),
    seed=st.integers(0, 10_000),
    tau=st.floats(0.05, 5.0),
    num_classes=st.integers(1, 4),
)
def test_l_in_is_at_most_l_out(n, seed, tau, num_classes):
    x = randn(n, 3, seed=seed)
    labels = torch.randint(0, num_classes, (n,), generator=torch.Generator().manual_seed(seed))
    l_in = supcon_loss(x, labels, temperature=tau, variant="in", reduction="none")
    l_out = supcon_loss(x, labels, temperature=tau, variant="out", reduction="none")
    assert bool((l_in <= l_out + 1e-12).all())


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 6), seed=st.integers(0, 10_000), tau=st.floats(0.05, 5.0))
def test_nt_xent_equals_supcon_with_pair_labels_equals_ce_without_diagonal(n, seed, tau):
    v1, v2 = randn(n, 3, seed=seed), randn(n, 3, seed=seed + 1)
    nt = nt_xent_loss(v1, v2, temperature=tau)
    z = torch.cat([v1, v2])
    labels = torch.arange(n).repeat(2)
    for variant in ("out", "in"):
        assert supcon_loss(z, labels, temperature=tau, variant=variant).item() == pytest.approx(
            nt.item(), rel=1e-10, abs=1e-12
        )
    # cross-entropy over the similarity matrix with the diagonal deleted (not masked)
    sim = pairwise_cosine_similarity(z) / tau
    off = ~torch.eye(2 * n, dtype=torch.bool)
    sim_no_diag = sim[off].view(2 * n, 2 * n - 1)
    twin = (torch.arange(2 * n) + n) % (2 * n)
    target = twin - (twin > torch.arange(2 * n)).long()  # column index after deletion
    ce = F.cross_entropy(sim_no_diag, target)
    assert ce.item() == pytest.approx(nt.item(), rel=1e-10, abs=1e-12)


def _in_batch_reference(query, key, temperature):
    """The chapter-5 in-batch softmax with distinct ids: no accidental hit to remove."""
    positives = CandidateSet(key, torch.arange(query.shape[0]))
    return in_batch_softmax_loss(query, positives, temperature=temperature)


@settings(max_examples=25, deadline=None)
@given(b=st.integers(1, 7), seed=st.integers(0, 10_000), tau=st.floats(0.05, 5.0))
def test_in_batch_softmax_is_one_directional_info_nce(b, seed, tau):
    q, k = randn(b, 4, seed=seed), randn(b, 4, seed=seed + 1)
    want = _in_batch_reference(q, k, tau)
    assert info_nce_loss(q, k, temperature=tau).item() == pytest.approx(
        want.item(), rel=1e-10, abs=1e-12
    )


@settings(max_examples=20, deadline=None)
@given(
    n=st.integers(2, 6),
    seed=st.integers(0, 10_000),
    shift=st.floats(-3, 3),
    scale=st.floats(0.2, 5.0),
)
def test_invariances(n, seed, shift, scale):
    """Cosine losses ignore each row's scale; SNN (squared Euclidean) ignores translation."""
    x = randn(n, 3, seed=seed)
    labels = torch.arange(n) % 2
    pairs = torch.tensor([[0, 1], [1, 0]])
    assert nt_xent_loss(x * scale, x.flip(0), temperature=0.3).item() == pytest.approx(
        nt_xent_loss(x, x.flip(0), temperature=0.3).item(), rel=1e-9
    )
    assert nt_bxent_loss(x * scale, pairs, temperature=0.3).item() == pytest.approx(
        nt_bxent_loss(x, pairs, temperature=0.3).item(), rel=1e-9
    )
    assert soft_nearest_neighbor_loss(x + shift, labels, temperature=0.7).item() == pytest.approx(
        soft_nearest_neighbor_loss(x, labels, temperature=0.7).item(), rel=1e-7, abs=1e-9
    )


@settings(max_examples=20, deadline=None)
@given(n=st.integers(2, 7), seed=st.integers(0, 10_000), temp=st.floats(0.05, 5.0))
def test_snn_with_cosine_distance_is_supcon_l_in_minus_log_num_positives(n, seed, temp):
    x = randn(n, 3, seed=seed)
    labels = torch.randint(0, 3, (n,), generator=torch.Generator().manual_seed(seed))
    same = (labels[:, None] == labels[None, :]).sum(1) - 1
    snn = soft_nearest_neighbor_loss(
        x, labels, temperature=temp, distance="cosine", reduction="none"
    )
    l_in = supcon_loss(x, labels, temperature=temp, variant="in", reduction="none")
    want = torch.where(same > 0, l_in - same.clamp(min=1).double().log(), 0.0)
    assert torch.allclose(snn, want, rtol=1e-9, atol=1e-9)


def test_symmetric_info_nce_is_mean_of_both_directions():
    q, k = randn(5, 3, seed=17), randn(5, 3, seed=18)
    both = info_nce_loss(q, k, temperature=0.4, symmetric=True)
    assert both.item() == pytest.approx(
        0.5 * (info_nce_loss(q, k, temperature=0.4) + info_nce_loss(k, q, temperature=0.4)).item(),
        rel=1e-12,
    )


# ---------------------------------------------------------------- gradients


def test_gradcheck_all_losses():
    x = randn(6, 3, seed=19).requires_grad_()
    y = randn(6, 3, seed=20).requires_grad_()
    labels = torch.tensor([0, 1, 0, 1, 2, 2])
    pairs = torch.tensor([[0, 2], [1, 3], [3, 1], [4, 5]])
    assert torch.autograd.gradcheck(
        lambda a, b: info_nce_loss(a, b, temperature=0.5, symmetric=True), (x, y)
    )
    assert torch.autograd.gradcheck(
        lambda a, b: info_nce_loss(a, b, temperature=0.5, normalize=True), (x, y)
    )
    assert torch.autograd.gradcheck(lambda a, b: nt_xent_loss(a, b, temperature=0.3), (x, y))
    assert torch.autograd.gradcheck(lambda a: nt_bxent_loss(a, pairs, temperature=0.3), (x,))
    for variant in ("out", "in"):
        assert torch.autograd.gradcheck(
            lambda a, v=variant: supcon_loss(a, labels, temperature=0.3, variant=v), (x,)
        )
    for distance in ("squared_euclidean", "cosine"):
        assert torch.autograd.gradcheck(
            lambda a, m=distance: soft_nearest_neighbor_loss(
                a, labels, temperature=0.8, distance=m
            ),
            (x,),
        )
    # a learnable Temperature: its log-scale gradient against central differences
    temp = Temperature(0.8, learnable=True)
    soft_nearest_neighbor_loss(x.detach(), labels, temperature=temp).backward()
    log_s, h = float(temp.log_scale.detach()), 1e-6

    def loss_at(ls):
        return float(soft_nearest_neighbor_loss(x.detach(), labels, temperature=math.exp(-ls)))

    numeric = (loss_at(log_s + h) - loss_at(log_s - h)) / (2 * h)
    assert float(temp.log_scale.grad) == pytest.approx(numeric, rel=1e-4, abs=1e-6)
    assert torch.autograd.gradcheck(lambda a, b: alignment_loss(a, b), (x, y))
    assert torch.autograd.gradcheck(lambda a: uniformity_loss(a), (x,))


def test_learnable_temperature_gets_a_gradient_and_moves():
    torch.manual_seed(0)
    x = torch.randn(16, 2)
    labels = torch.arange(16) % 4
    module = SoftNearestNeighborLoss(temperature=Temperature(1.0, learnable=True))
    assert isinstance(module.temperature.log_scale, torch.nn.Parameter)
    assert len(list(module.parameters())) == 1
    opt = torch.optim.SGD(module.parameters(), lr=0.1)
    before = module.temperature.value.item()
    for _ in range(3):
        opt.zero_grad()
        module(x, labels).backward()
        opt.step()
    after = module.temperature.value.item()
    assert after != before and after > 0
    fixed = SoftNearestNeighborLoss(temperature=2.0)
    assert list(fixed.parameters()) == []
    assert fixed.temperature == pytest.approx(2.0)
    assert fixed(x, labels).item() == pytest.approx(
        soft_nearest_neighbor_loss(x, labels, temperature=2.0).item(), rel=1e-6
    )


def test_modules_match_functions():
    x, y = randn(6, 3, seed=21), randn(6, 3, seed=22)
    labels = torch.tensor([0, 1, 0, 1, 2, 2])
    pairs = torch.tensor([[0, 2], [1, 3]])
    assert InfoNCELoss(temperature=0.5, symmetric=True)(x, y) == info_nce_loss(
        x, y, temperature=0.5, symmetric=True
    )
    assert NTXentLoss(temperature=0.3)(x, y) == nt_xent_loss(x, y, temperature=0.3)
    assert NTBXentLoss(temperature=0.3)(x, pairs) == nt_bxent_loss(x, pairs, temperature=0.3)
    assert SupConLoss(temperature=0.3, variant="in")(x, labels) == supcon_loss(
        x, labels, temperature=0.3, variant="in"
    )


MODULES = [
    (InfoNCELoss, {"symmetric": True}),
    (NTXentLoss, {}),
    (NTBXentLoss, {}),
    (SupConLoss, {"variant": "in"}),
    (SoftNearestNeighborLoss, {"distance": "cosine"}),
]


@pytest.mark.parametrize(("module", "options"), MODULES)
def test_module_options_are_keyword_only(module, options):
    with pytest.raises(TypeError):
        module(0.5)
    with pytest.raises(TypeError):
        module(0.5, **options)
    assert module(temperature=0.5, **options) is not None


@pytest.mark.parametrize(("module", "options"), MODULES)
@pytest.mark.parametrize("temperature", [-1.0, 0.0, float("inf"), float("nan")])
def test_module_rejects_a_bad_temperature(module, options, temperature):
    with pytest.raises(ValueError, match="temperature must be > 0"):
        module(temperature=temperature, **options)


def test_module_reprs_list_their_options():
    assert repr(InfoNCELoss(temperature=0.2, symmetric=True)) == (
        "InfoNCELoss(temperature=0.2, symmetric=True, normalize=False, reduction='mean')"
    )
    assert repr(NTXentLoss()) == "NTXentLoss(temperature=0.5, reduction='mean')"
    assert "variant='in'" in repr(SupConLoss(variant="in"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a learnable T must not warn when printed
        snn = repr(SoftNearestNeighborLoss(temperature=Temperature(2.0, learnable=True)))
    assert "distance='squared_euclidean'" in snn
    assert "Temperature(temperature=2, learnable=True)" in snn


# ---------------------------------------------------------------- stability


def _all_losses(x, labels, tau):
    n = x.shape[0] // 2
    pairs = torch.stack([torch.arange(2 * n), (torch.arange(2 * n) + n) % (2 * n)], dim=1)
    return {
        "info_nce": info_nce_loss(x[:n], x[n:], temperature=tau, normalize=True, symmetric=True),
        "info_nce_dot": info_nce_loss(x[:n], x[n:], temperature=tau),
        "nt_xent": nt_xent_loss(x[:n], x[n:], temperature=tau),
        "nt_bxent": nt_bxent_loss(x, pairs, temperature=tau),
        "supcon_out": supcon_loss(x, labels, temperature=tau),
        "supcon_in": supcon_loss(x, labels, temperature=tau, variant="in"),
        "snn_sq": soft_nearest_neighbor_loss(x, labels, temperature=tau),
        "snn_cos": soft_nearest_neighbor_loss(x, labels, temperature=tau, distance="cosine"),
    }


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("tau", [1e-3, 100.0])
@pytest.mark.parametrize("scale", [1.0, 1e3])
def test_finite_values_and_gradients(dtype, tau, scale):
    """Tiny and huge τ, half precision, far-apart embeddings: never NaN or inf.

    One exception is not a bug: with float16 inputs 1e3 apart and τ = 1e-3, the *true*
    gradient of the two scale-dependent losses (dot-product InfoNCE, squared-Euclidean
    SNN) is ~1e6, beyond float16's largest value 65504, so it cannot be stored in the
    input's dtype. The test checks that this is the only case, against float32 gradients.
    """
    torch.manual_seed(23)
    x = (torch.randn(8, 4) * scale).to(dtype).requires_grad_()
    x32 = x.detach().float().requires_grad_()
    labels = torch.tensor([0, 1, 2, 3, 0, 1, 2, 3])
    reference = _all_losses(x32, labels, tau)
    for name, loss in _all_losses(x, labels, tau).items():
        assert loss.dtype == torch.float32, name
        assert torch.isfinite(loss), (name, loss)
        (grad,) = torch.autograd.grad(loss, x)
        (grad32,) = torch.autograd.grad(reference[name], x32)
        assert bool(torch.isfinite(grad32).all()), name
        if grad32.abs().max() < torch.finfo(dtype).max / 2:
            assert bool(torch.isfinite(grad).all()), name
        else:
            assert (dtype, tau, scale) == (torch.float16, 1e-3, 1e3), name
            assert name in {"info_nce_dot", "snn_sq"}, name


def test_snn_far_apart_positives_stay_finite_where_the_ratio_underflows():
    x = torch.tensor([[0.0, 0.0], [30.0, 0.0], [0.0, 1.0], [30.0, 1.0]], requires_grad=True)
    labels = torch.tensor([0, 0, 1, 1])  # each point's only positive is far away
    dist = pairwise_squared_distance(x.detach())
    ratio = torch.exp(-dist[0, 1]) / (torch.exp(-dist[0, 1]) + torch.exp(-dist[0, 2]))
    assert ratio.item() == 0.0  # the ratio form gives -log(0) = inf
    loss = soft_nearest_neighbor_loss(x, labels, temperature=1.0)
    assert torch.isfinite(loss) and loss.item() == pytest.approx(899.0, rel=1e-5)
    loss.backward()
    assert bool(torch.isfinite(x.grad).all()) and x.grad.abs().sum() > 0


def test_nt_bxent_does_not_saturate_at_small_temperature():
    """A confident wrong pair keeps a loss linear in 1/τ and a non-zero gradient."""
    x = torch.tensor([[1.0, 0.0], [1.0, 0.1], [0.0, 1.0]], requires_grad=True)
    pairs = torch.tensor([[0, 2], [2, 0]])  # 0 and 1 are near-identical negatives
    tau = 1e-3
    loss = nt_bxent_loss(x, pairs, temperature=tau, reduction="none")
    z01 = cos(x[0].detach(), x[1].detach()) / tau
    assert loss[0].item() > z01 / 2 > 100  # BCE on a saturated sigmoid would stop at 100
    loss.sum().backward()
    assert x.grad.abs().sum() > 0


def test_half_inputs_match_float32_on_same_values():
    x = randn(8, 4, seed=24, dtype=torch.float32).to(torch.bfloat16)
    labels = torch.tensor([0, 1, 2, 3, 0, 1, 2, 3])
    half = _all_losses(x, labels, 0.5)
    full = _all_losses(x.float(), labels, 0.5)
    for name in half:
        assert half[name].item() == pytest.approx(full[name].item(), rel=1e-5), name


# ---------------------------------------------------------------- bad inputs


def test_bad_inputs_raise_value_errors_naming_the_argument():
    x, y = randn(4, 3), randn(4, 3, seed=1)
    labels = torch.tensor([0, 1, 0, 1])
    pairs = torch.tensor([[0, 1]])
    cases = [
        (lambda: info_nce_loss(x, randn(5, 3)), "batch size"),
        (lambda: info_nce_loss(x, randn(4, 2)), "embedding size"),
        (lambda: info_nce_loss(x[0], y), "query"),
        (lambda: info_nce_loss(x, y, temperature=0.0), "temperature"),
        (lambda: info_nce_loss(x, y, temperature=-1.0), "temperature"),
        (lambda: info_nce_loss(x, y, temperature=float("nan")), "temperature"),
        (lambda: info_nce_loss(x, y, reduction="avg"), "reduction"),
        (lambda: nt_xent_loss(x, randn(3, 3)), "batch size"),
        (lambda: nt_xent_loss(x, y, temperature=torch.tensor([0.1, 0.2])), "temperature"),
        (lambda: nt_xent_loss(x.long(), y), "view1"),
        (lambda: nt_bxent_loss(x, torch.tensor([[0, 4]])), "positive_pairs"),
        (lambda: nt_bxent_loss(x, torch.tensor([[-1, 2]])), "positive_pairs"),
        (lambda: nt_bxent_loss(x, torch.tensor([[1, 1]])), "positive_pairs"),
        (lambda: nt_bxent_loss(x, torch.tensor([0, 1])), "positive_pairs"),
        (lambda: nt_bxent_loss(x, pairs.float()), "positive_pairs"),
        (lambda: nt_bxent_loss(x, pairs, temperature=0.0), "temperature"),
        (lambda: supcon_loss(x, labels[:3]), "number of rows"),
        (lambda: supcon_loss(x, labels.float()), "labels"),
        (lambda: supcon_loss(x, labels.bool()), "labels"),
        (lambda: supcon_loss(x, labels, variant="mid"), "variant"),
        (lambda: supcon_loss(x, labels, temperature=-0.1), "temperature"),
        (lambda: soft_nearest_neighbor_loss(x, labels, distance="l1"), "distance"),
        (lambda: soft_nearest_neighbor_loss(x, labels, temperature=0.0), "temperature"),
        (lambda: soft_nearest_neighbor_loss(x, labels[None]), "labels"),
        (lambda: soft_nearest_neighbor_loss(torch.zeros(0, 3), labels[:0]), "embeddings"),
        (lambda: alignment_loss(x, randn(5, 3)), "shape"),
        (lambda: alignment_loss(x, y, alpha=0), "alpha"),
        (lambda: uniformity_loss(x[:1]), "embeddings"),
        (lambda: uniformity_loss(x, t=-2), "t must"),
        (lambda: pairwise_squared_distance(x, randn(2, 5)), "embedding size"),
        (lambda: SoftNearestNeighborLoss(temperature=0.0), "temperature"),
        (lambda: SoftNearestNeighborLoss(temperature=1.0, distance="l2"), "distance"),
        (lambda: SupConLoss(variant="x"), "variant"),
        (lambda: NTXentLoss(temperature=-1.0), "temperature"),
        (lambda: NTBXentLoss(reduction="mean!"), "reduction"),
        (lambda: InfoNCELoss(temperature=0.0), "temperature"),
    ]
    for call, match in cases:
        with pytest.raises(ValueError, match=match):
            call()
