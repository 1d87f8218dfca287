"""The contrastive losses against the real peer libraries they name, not transcriptions.

Where a docstring or the notation page names pytorch-metric-learning (PML), lightly or
open_clip, the package promises that peer's semantics, or documents the difference. Each
test here runs the peer's installed code and the package on the same float64 leaf tensors
and compares the values (``rtol = atol = 1e-10``) and the gradients (autograd on those
leaves; a ``"none"`` reduction is contracted with fixed random weights first).

The peers are optional: each library has its own fixture, so a missing one skips only its
tests, and the module skips cleanly in an environment with none of them.

* PML imports normally (``pytorch_metric_learning.losses``).
* open_clip's package ``__init__`` imports torchvision, but ``open_clip/loss.py`` needs only
  torch: it is loaded by file path from the installed package (found with ``find_spec``,
  which locates a top-level package without running it).
* lightly's ``lightly.loss`` imports torchvision too: ``ntx_ent_loss.py`` and
  ``dcl_loss.py`` are loaded by file path, and the one import chain that reaches torchvision
  (``memory_bank.py``'s ``from lightly.models import utils``, used only to gather across
  processes) gets stand-in modules for the duration of the load (:func:`lightly_losses`).

The first run found two mismatches, both fixed in the package: the logistic terms were
``F.softplus``, linear beyond a logit of 20 (off by ``e^{−o}``, gradient 1 instead of
``σ(o)``; now ``−log σ(−o)``, SigLIP's form), and ``dclw_positive_weights`` claimed lightly
differentiates through its weights (it detaches them; the docstring now says so, and a test
shows the difference). Differences the package documents are tested as the documented
relation, citing where it is documented.

Run with the peers installed (``requirements-peers.txt``; ``.ci/run_peers`` does it all).
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import os
import sys
import types
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from candidate_sampling import CandidateSet
from candidate_sampling.losses import (
    InfoNCELoss,
    SigmoidPairwiseLoss,
    Temperature,
    dclw_positive_weights,
    decoupled_cross_entropy,
    hard_negative_softmax_loss,
    info_nce_loss,
    mask_logits,
    multi_positive_softmax_loss,
    nt_xent_loss,
    pairwise_cosine_similarity,
    sampled_softmax_loss,
    sigmoid_pairwise_loss,
    supcon_loss,
)
from candidate_sampling.scale.memory import CrossBatchMemory

D64 = torch.float64
TOL = {"rtol": 1e-10, "atol": 1e-10}


# --------------------------------------------------------------------------- the peers


def _peer_missing(reason: str) -> None:
    """Skip, or fail where CI installed the peers (``CANDIDATE_SAMPLING_REQUIRE_PEERS=1``,
    set by ``.ci/run``): a peer that stopped importing must not pass as a skip."""
    if os.environ.get("CANDIDATE_SAMPLING_REQUIRE_PEERS"):
        pytest.fail(f"{reason} (CANDIDATE_SAMPLING_REQUIRE_PEERS is set)")
    pytest.skip(reason)


def _peer_import(name: str) -> types.ModuleType:
    try:
        return importlib.import_module(name)
    except ImportError as error:
        _peer_missing(f"{name} does not import: {error}")


@pytest.fixture(scope="module")
def pml():
    """pytorch-metric-learning's losses, reducers and distances (skips if not installed)."""
    losses = _peer_import("pytorch_metric_learning.losses")
    reducers = _peer_import("pytorch_metric_learning.reducers")
    distances = _peer_import("pytorch_metric_learning.distances")
    return types.SimpleNamespace(losses=losses, reducers=reducers, distances=distances)


def _load_by_path(name: str, path: Path) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # visible to imports made while it runs
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def open_clip_loss():
    """``open_clip/loss.py`` loaded by path: ``ClipLoss`` and ``SigLipLoss`` (skips if absent).

    ``import open_clip`` would fail here (its ``__init__`` imports torchvision), so neither
    ``importorskip`` nor a package import is used; ``find_spec`` finds the installed
    package's folder without running its ``__init__``.
    """
    spec = importlib.util.find_spec("open_clip")
    if spec is None or not spec.submodule_search_locations:
        _peer_missing("open_clip_torch is not installed")
    path = Path(next(iter(spec.submodule_search_locations))) / "loss.py"
    if not path.is_file():
        _peer_missing(f"open_clip has no loss.py at {path}")
    name = "_peer_open_clip_loss"
    try:
        return _load_by_path(name, path)
    finally:
        sys.modules.pop(name, None)


@pytest.fixture(scope="module")
def lightly_losses():
    """lightly's ``NTXentLoss``, ``DCLLoss`` and ``DCLWLoss``, loaded by file path.

    ``dcl_loss.py`` imports only ``lightly.utils.dist`` (plain torch). ``ntx_ent_loss.py``
    imports ``lightly.models.modules.memory_bank``, whose package ``__init__``s import the
    model zoo and torchvision, and ``memory_bank.py`` itself does ``from lightly.models
    import utils`` (torchvision again), for ``utils.concat_all_gather``, which it calls only
    when gathering across processes (``gather_distributed=True`` and a world size > 1, never
    here). So, while the files load, ``sys.modules`` holds bare stand-ins for the packages
    ``lightly.models`` and ``lightly.models.modules`` and for ``lightly.models.utils`` (whose
    ``concat_all_gather`` raises), and ``memory_bank.py`` itself, loaded by path under its
    real name. Afterwards every one of those entries is put back as it was: the loaded
    classes keep their own module globals and need no ``sys.modules`` entry.
    """
    _peer_import("lightly.utils.dist")
    root = Path(next(iter(importlib.util.find_spec("lightly").submodule_search_locations)))

    def no_gather(*_args, **_kwargs):
        raise RuntimeError("stand-in lightly.models.utils: cross-process gathering not loaded")

    models = types.ModuleType("lightly.models")
    models.__path__ = []  # a package, so that its submodule names resolve in sys.modules
    modules = types.ModuleType("lightly.models.modules")
    modules.__path__ = []
    utils = types.ModuleType("lightly.models.utils")
    utils.concat_all_gather = no_gather
    models.utils, models.modules = utils, modules
    stand_ins = {m.__name__: m for m in (models, modules, utils)}
    memory_bank = "lightly.models.modules.memory_bank"
    private = {"ntx": "_peer_lightly_ntx_ent_loss", "dcl": "_peer_lightly_dcl_loss"}
    touched = [*stand_ins, memory_bank, *private.values()]
    saved = {name: sys.modules[name] for name in touched if name in sys.modules}
    try:
        sys.modules.update(stand_ins)
        _load_by_path(memory_bank, root / "models" / "modules" / "memory_bank.py")
        ntx = _load_by_path(private["ntx"], root / "loss" / "ntx_ent_loss.py")
        dcl = _load_by_path(private["dcl"], root / "loss" / "dcl_loss.py")
    finally:
        for name in touched:
            if name in saved:
                sys.modules[name] = saved[name]
            else:
                sys.modules.pop(name, None)
    return types.SimpleNamespace(
        NTXentLoss=ntx.NTXentLoss, DCLLoss=dcl.DCLLoss, DCLWLoss=dcl.DCLWLoss
    )


# --------------------------------------------------------------------------- helpers


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def leaf(
    n: int, d: int, *, seed: int, normalised: bool, norms: tuple[float, float] = (0.3, 3.0)
) -> torch.Tensor:
    """(n, d) float64 leaf: unit rows if ``normalised``, else rows of random ``norms``."""
    x = torch.randn(n, d, generator=_gen(seed), dtype=D64)
    x = F.normalize(x, dim=1)
    if not normalised:
        low, high = norms
        x = x * (low + (high - low) * torch.rand(n, 1, generator=_gen(seed + 1000), dtype=D64))
    return x.requires_grad_()


def assert_same(ours: torch.Tensor, peer: torch.Tensor, leaves) -> None:
    """Equal values, and equal gradients with respect to every leaf (float64, 1e-10)."""
    torch.testing.assert_close(ours, peer.to(ours.dtype), **TOL)
    weights = torch.rand(ours.shape, generator=_gen(99), dtype=D64) + 0.5
    g_ours = torch.autograd.grad((ours * weights).sum(), leaves, allow_unused=True)
    g_peer = torch.autograd.grad((peer * weights).sum(), leaves, allow_unused=True)
    for leaf_index, (a, b) in enumerate(zip(g_ours, g_peer)):
        a = torch.zeros_like(leaves[leaf_index]) if a is None else a
        b = torch.zeros_like(leaves[leaf_index]) if b is None else b
        torch.testing.assert_close(a, b, **TOL, msg=lambda m, i=leaf_index: f"leaf {i}: {m}")


def pml_reducer(pml, reduction: str):
    """The PML reducer for a package ``reduction`` (None: the loss's own default)."""
    return {
        "mean": None,
        "sum": pml.reducers.SumReducer(),
        "none": pml.reducers.DoNothingReducer(),
    }[reduction]


def pml_loss(cls, reduction: str, pml, **kwargs):
    reducer = pml_reducer(pml, reduction)
    return cls(**kwargs) if reducer is None else cls(reducer=reducer, **kwargs)


def per_anchor_mean(losses: torch.Tensor, anchors: torch.Tensor, n: int) -> torch.Tensor:
    """PML's per-pair losses averaged per anchor, 0 for an anchor with no pair: (n,)."""
    total = torch.zeros(n, dtype=losses.dtype).index_add(0, anchors, losses)
    count = torch.zeros(n, dtype=losses.dtype).index_add(0, anchors, torch.ones_like(losses))
    return total / count.clamp(min=1)


def positives_per_row(labels: torch.Tensor) -> torch.Tensor:
    same = labels[:, None] == labels[None, :]
    return (same.sum(1) - 1).to(D64)


def pair_weights(labels: torch.Tensor) -> torch.Tensor:
    """``sample_weight`` turning the package's mean over rows (each row the mean of its
    pairs, rows without a positive left out) into PML's mean over all positive pairs:
    ``w_i = |P(i)| · n_valid / Σ_j |P(j)|``, so that
    ``Σ_i w_i ℓ_i / n_valid = Σ_pairs ℓ / #pairs``."""
    count = positives_per_row(labels)
    return count * (count > 0).sum() / count.sum()


# labels where every class has 3 members (every row 2 positives), and uneven classes with a
# singleton (rows with 3, 2, 1 and 0 positives)
EVEN_LABELS = torch.tensor([2, 0, 1, 0, 2, 1, 1, 0, 2])
UNEVEN_LABELS = torch.tensor([0, 1, 0, 3, 2, 0, 1, 2, 1, 0, 2, 1])  # 3 is alone
MULTI_LABELS = {"three_each": EVEN_LABELS, "uneven": UNEVEN_LABELS}


# --------------------------------------------------------------------------- PML NT-Xent


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("normalised", [True, False])
@pytest.mark.parametrize("num_pairs", [2, 5])
@pytest.mark.parametrize("temperature", [0.07, 0.5, 1.0])
def test_pml_ntxent_with_simclr_pairs_is_nt_xent(
    pml, temperature, num_pairs, normalised, reduction
):
    """PML's ``NTXentLoss`` with labels ``arange(N).repeat(2)`` (each label exactly twice: the
    SimCLR pairs of ``cat(view1, view2)``) is ``nt_xent_loss(view1, view2)``. PML normalises
    (``CosineSimilarity``), forms one loss per positive pair (here one per view) and
    averages them (``MeanReducer``), the package averages over the 2N views: the same."""
    v1 = leaf(num_pairs, 4, seed=1, normalised=normalised)
    v2 = leaf(num_pairs, 4, seed=2, normalised=normalised)
    labels = torch.arange(num_pairs).repeat(2)
    peer = pml_loss(pml.losses.NTXentLoss, reduction, pml, temperature=temperature)
    got = peer(torch.cat([v1, v2]), labels)
    if reduction == "none":
        anchors, _ = got["loss"]["indices"]
        assert torch.equal(anchors, torch.arange(2 * num_pairs))  # one pair per view
        got = got["loss"]["losses"]
    ours = nt_xent_loss(v1, v2, temperature=temperature, reduction=reduction)
    assert_same(ours, got, [v1, v2])


@pytest.mark.parametrize("normalised", [True, False])
@pytest.mark.parametrize("labels", list(MULTI_LABELS), ids=str)
@pytest.mark.parametrize("temperature", [0.1, 0.7])
def test_pml_ntxent_per_pair_losses_are_the_pairwise_variant(pml, temperature, labels, normalised):
    """With 3+ members per label PML's NT-Xent is the per-pair form: each positive pair
    ``(a, p)`` against the anchor's negatives only. Its per-pair losses (``DoNothingReducer``)
    averaged per anchor are ``supcon_loss(..., variant="pairwise", reduction="none")``
    (hard_negatives.py, ``multi_positive_cross_entropy``); a singleton's row is 0 in both."""
    labels = MULTI_LABELS[labels]
    emb = leaf(len(labels), 5, seed=3, normalised=normalised)
    peer = pml.losses.NTXentLoss(temperature=temperature, reducer=pml.reducers.DoNothingReducer())
    out = peer(emb, labels)["loss"]
    anchors, _ = out["indices"]
    got = per_anchor_mean(out["losses"], anchors, len(labels))
    ours = supcon_loss(emb, labels, temperature=temperature, variant="pairwise", reduction="none")
    assert_same(ours, got, [emb])


@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("normalised", [True, False])
@pytest.mark.parametrize("labels", list(MULTI_LABELS), ids=str)
@pytest.mark.parametrize("temperature", [0.1, 0.7])
def test_pml_ntxent_reduces_over_pairs_the_package_over_rows(
    pml, temperature, labels, normalised, reduction
):
    """The documented difference (``multi_positive_cross_entropy``'s docstring): PML
    averages (``MeanReducer``) or sums (``SumReducer``) over all positive pairs, the
    package first over a row's pairs, then over rows. The package reproduces PML with
    ``sample_weight`` ∝ ``|P(i)|`` (:func:`pair_weights`; for ``"sum"`` exactly ``|P(i)|``),
    and without weights when every row has as many positives ("three_each")."""
    name = labels
    labels = MULTI_LABELS[name]
    emb = leaf(len(labels), 5, seed=4, normalised=normalised)
    peer = pml_loss(pml.losses.NTXentLoss, reduction, pml, temperature=temperature)
    got = peer(emb, labels)
    weight = pair_weights(labels) if reduction == "mean" else positives_per_row(labels)
    ours = supcon_loss(
        emb, labels, temperature=temperature, variant="pairwise", sample_weight=weight,
        reduction=reduction,
    )
    assert_same(ours, got, [emb])
    if name == "three_each" and reduction == "mean":
        plain = supcon_loss(emb, labels, temperature=temperature, variant="pairwise")
        assert_same(plain, peer(emb, labels), [emb])


@pytest.mark.parametrize("labels", list(MULTI_LABELS), ids=str)
@pytest.mark.parametrize("temperature", [0.1, 0.7])
def test_pml_per_anchor_reducer_is_the_package_mean(pml, temperature, labels):
    """PML configured to average per anchor first (``PerAnchorReducer``) and then over the
    anchors that have a pair (``AvgNonZeroReducer``) gives the package's own ``"mean"``
    of the pairwise variant, without weights: the two reductions differ only in order."""
    labels = MULTI_LABELS[labels]
    emb = leaf(len(labels), 5, seed=5, normalised=False)
    reducer = pml.reducers.PerAnchorReducer(reducer=pml.reducers.AvgNonZeroReducer())
    peer = pml.losses.NTXentLoss(temperature=temperature, reducer=reducer)
    ours = supcon_loss(emb, labels, temperature=temperature, variant="pairwise")
    assert_same(ours, peer(emb, labels), [emb])


@pytest.mark.parametrize("labels", list(MULTI_LABELS), ids=str)
@pytest.mark.parametrize("temperature", [0.1, 0.7])
def test_pml_ntxent_with_dot_products_is_multi_positive_softmax_loss(pml, temperature, labels):
    """Without normalisation (PML's ``DotProductSimilarity(normalize_embeddings=False)``;
    PML's distances normalise by default, the dot product too) PML's NT-Xent is
    ``multi_positive_softmax_loss(..., variant="pairwise")``, which scores with the plain
    dot product, on the batch as its own candidates with the diagonal removed (the
    docstring's "pytorch-metric-learning's NT-Xent"); per-anchor means compared."""
    labels = MULTI_LABELS[labels]
    n = len(labels)
    emb = leaf(n, 5, seed=6, normalised=False)
    peer = pml.losses.NTXentLoss(
        temperature=temperature,
        distance=pml.distances.DotProductSimilarity(normalize_embeddings=False),
        reducer=pml.reducers.DoNothingReducer(),
    )
    out = peer(emb, labels)["loss"]
    got = per_anchor_mean(out["losses"], out["indices"][0], n)
    eye = torch.eye(n, dtype=torch.bool)
    positive_mask = (labels[:, None] == labels[None, :]) & ~eye
    ours = multi_positive_softmax_loss(
        emb, CandidateSet(emb, labels), positive_mask, temperature=temperature,
        variant="pairwise", removed=eye, reduction="none",
    )
    assert_same(ours, got, [emb])


# --------------------------------------------------------------------------- PML SupCon


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("normalised", [True, False])
@pytest.mark.parametrize("labels", [*MULTI_LABELS, "simclr"], ids=str)
@pytest.mark.parametrize("temperature", [0.07, 0.5])
def test_pml_supcon_is_supcon_out(pml, temperature, labels, normalised, reduction):
    """PML's ``SupConLoss`` (HobbitLong's SupContrast, i.e. Khosla et al.'s ``L_out``) is
    ``supcon_loss(variant="out")``: cosine logits / τ, the anchor's row without itself,
    the mean of ``log p`` over its positives. PML's default ``AvgNonZeroReducer`` averages
    over the rows with a positive (a singleton's row is 0 and dropped), as the package's
    ``"mean"``; ``"sum"`` and ``"none"`` keep that row as 0 in both."""
    labels = torch.arange(4).repeat(2) if labels == "simclr" else MULTI_LABELS[labels]
    emb = leaf(len(labels), 5, seed=7, normalised=normalised)
    peer = pml_loss(pml.losses.SupConLoss, reduction, pml, temperature=temperature)
    got = peer(emb, labels)
    if reduction == "none":
        assert torch.equal(got["loss"]["indices"], torch.arange(len(labels)))
        got = got["loss"]["losses"]
    ours = supcon_loss(emb, labels, temperature=temperature, variant="out", reduction=reduction)
    assert_same(ours, got, [emb])


def test_pml_supcon_without_a_negative_pair_is_zero_the_package_is_l_out(pml):
    """The documented difference (``supcon_loss``' docstring): with one label for the whole
    batch no pair is negative, and PML returns 0; the package keeps Khosla et al.'s L_out,
    here ``log(n − 1)`` for identical rows (every other row is a positive of equal logit)."""
    n = 5
    emb = torch.ones(n, 3, dtype=D64)
    labels = torch.zeros(n, dtype=torch.int64)
    assert float(pml.losses.SupConLoss(temperature=0.1)(emb, labels)) == 0.0
    ours = supcon_loss(emb, labels, temperature=0.1, variant="out")
    torch.testing.assert_close(ours, torch.tensor(math.log(n - 1), dtype=D64), **TOL)


# --------------------------------------------------------------------------- PML memory


def _pml_memory_steps(pml, loss_name, *, temperature, memory_size, batch, steps, dim=3):
    """Runs PML's ``CrossBatchMemory`` and the package's queue side by side, step by step.

    PML enqueues the batch *first* (detached) and scores the batch against the whole memory
    (the batch's own rows included), dropping each row's own slot. The package's usage is
    ``candidates_for`` (the batch as the first B columns, then the queue) and ``enqueue``
    *after* the step. So a PML memory of M rows is a package queue of K = M − B past rows
    plus the batch: both hold the last M rows of the stream, once it has wrapped too.
    Cosine scores: the package is fed unit rows (its scores are dot products), PML
    normalises inside its distance. Yields ``(ours, peer, leaves)`` per step.
    """
    inner = getattr(pml.losses, loss_name)(temperature=temperature)
    peer = pml.losses.CrossBatchMemory(inner, dim, memory_size=memory_size)
    memory = CrossBatchMemory(memory_size - batch, dim, dtype=D64)
    variant = {"NTXentLoss": "pairwise", "SupConLoss": "out"}[loss_name]
    for step in range(steps):
        emb = leaf(batch, dim, seed=100 + step, normalised=False)
        labels = torch.randint(0, 3, (batch,), generator=_gen(200 + step))
        got = peer(emb, labels)
        unit = F.normalize(emb, dim=1)
        # detached: PML's memory (the batch's own copy included) carries no gradient
        current, queued = memory.candidates_for(unit.detach(), labels)
        columns = CandidateSet.concat(current, queued)
        itself = torch.zeros(batch, len(columns), dtype=torch.bool)
        itself[torch.arange(batch), torch.arange(batch)] = True
        positive_mask = (labels[:, None] == columns.ids[None, :]) & ~itself
        count = positive_mask.sum(1).to(D64)
        weight = count * (count > 0).sum() / count.sum().clamp(min=1)
        ours = multi_positive_softmax_loss(
            unit, columns, positive_mask, temperature=temperature, variant=variant,
            removed=itself, sample_weight=weight if variant == "pairwise" else None,
        )
        memory.enqueue(unit.detach(), labels)
        yield ours, got, [emb]


@pytest.mark.parametrize("loss_name", ["NTXentLoss", "SupConLoss"])
@pytest.mark.parametrize(
    ("memory_size", "batch"), [(12, 4), (10, 4), (5, 4)], ids=["aligned", "wraps", "one_row"]
)
@pytest.mark.parametrize("temperature", [0.1, 0.5])
def test_pml_cross_batch_memory_is_the_package_queue(
    pml, temperature, memory_size, batch, loss_name
):
    """PML's ``CrossBatchMemory(loss, memory_size=M)`` over 6 steps, through the filling and
    the wrap-around of its ring, equals the package's ``CrossBatchMemory(M − B)`` fed the
    same stream (see :func:`_pml_memory_steps`): the memory's labels are the queue's ids,
    every same-label column but the row's own slot is a positive, and the loss is the
    labelled queue's multi-positive loss (tests/test_memory.py,
    ``test_a_labelled_queue_feeds_the_multi_positive_loss``): "pairwise" for NT-Xent,
    weighted to PML's mean over pairs, and "out" for SupCon. Values and gradients, the
    gradient reaching only the anchors (PML's memory is detached, the batch's copy too)."""
    for ours, got, leaves in _pml_memory_steps(
        pml, loss_name, temperature=temperature, memory_size=memory_size, batch=batch,
        steps=6,
    ):
        assert_same(ours, got, leaves)


# --------------------------------------------------------------------------- lightly


@pytest.mark.parametrize("reduction", ["mean", "none"])
@pytest.mark.parametrize("normalised", [True, False])
@pytest.mark.parametrize("batch", [2, 6])
@pytest.mark.parametrize("temperature", [0.1, 0.5])
def test_lightly_ntxent_is_nt_xent(lightly_losses, temperature, batch, normalised, reduction):
    """lightly's ``NTXentLoss(memory_bank_size=0, gather_distributed=False)`` (SimCLR:
    (2N, 2N − 1) logits, each view's twin against the other 2N − 2 views, cross-entropy
    averaged over the 2N rows, ``out0`` rows first) is ``nt_xent_loss(out0, out1)``. For
    ``"none"`` lightly's own ``cross_entropy`` attribute is set to ``reduction="none"``."""
    out0 = leaf(batch, 4, seed=11, normalised=normalised)
    out1 = leaf(batch, 4, seed=12, normalised=normalised)
    peer = lightly_losses.NTXentLoss(temperature=temperature, memory_bank_size=0)
    if reduction == "none":
        peer.cross_entropy = torch.nn.CrossEntropyLoss(reduction="none")
    ours = nt_xent_loss(out0, out1, temperature=temperature, reduction=reduction)
    assert_same(ours, peer(out0, out1), [out0, out1])


def _lightly_bank_steps(lightly_losses, *, temperature, bank_size, batch, steps, dim=4):
    """lightly's NT-Xent with a memory bank (MoCo) and the package's queue, step by step.

    lightly's logits are ``[cos(out0_i, out1_i) | cos(out0_i, bank)] / τ`` (the bank only,
    no in-batch negatives), then ``out1`` (normalised, detached) replaces the oldest bank
    rows. That is ``sampled_softmax_loss`` with the queue as the shared candidates
    (accidental-hit removal off: lightly has no ids). lightly's bank starts full (random
    unit rows, set here to float64 ones) and the package's queue is filled with the same
    rows, in the same slots. At the wrap lightly keeps only the first ``K − ptr`` rows of
    the batch and restarts at slot 0 (``_dequeue_and_enqueue``); the package is fed those
    rows, so its ring stays slot for slot the same. Yields ``(ours, peer, leaves)``.
    """
    peer = lightly_losses.NTXentLoss(temperature=temperature, memory_bank_size=(bank_size, dim))
    peer = peer.double()
    bank = F.normalize(torch.randn(bank_size, dim, generator=_gen(30), dtype=D64), dim=1)
    peer.memory_bank.bank = bank.clone()
    peer.memory_bank.bank_ptr.zero_()
    memory = CrossBatchMemory(bank_size, dim, dtype=D64)
    memory.enqueue(bank, torch.zeros(bank_size, dtype=torch.long))
    ptr = 0
    for step in range(steps):
        out0 = leaf(batch, dim, seed=300 + step, normalised=False)
        out1 = leaf(batch, dim, seed=400 + step, normalised=False)
        got = peer(out0, out1)
        u0, u1 = F.normalize(out0, dim=1), F.normalize(out1, dim=1)
        ids = torch.arange(batch)
        _, queued = memory.candidates_for(u1, ids)
        ours = sampled_softmax_loss(
            u0, CandidateSet(u1, ids), queued, temperature=temperature,
            remove_accidental_hits=False,
        )
        kept = min(batch, bank_size - ptr)
        memory.enqueue(u1[:kept].detach(), ids[:kept])
        ptr = 0 if ptr + batch >= bank_size else ptr + batch
        assert int(peer.memory_bank.bank_ptr) == ptr
        yield ours, got, [out0, out1]


@pytest.mark.parametrize(("bank_size", "batch"), [(8, 4), (10, 4)], ids=["aligned", "wraps"])
@pytest.mark.parametrize("temperature", [0.1, 0.5])
def test_lightly_ntxent_memory_bank_is_the_queue(lightly_losses, temperature, bank_size, batch):
    """lightly's ``NTXentLoss(memory_bank_size=(K, d))`` over 5 steps equals the package's
    ``CrossBatchMemory(K)`` with ``sampled_softmax_loss`` (see :func:`_lightly_bank_steps`):
    values and gradients (to ``out0`` and to the positive ``out1``; the bank is detached
    in both). When K is not a multiple of B lightly drops the batch's tail at the wrap,
    which the package's ring would keep: the test feeds it lightly's rows to compare."""
    for ours, got, leaves in _lightly_bank_steps(
        lightly_losses, temperature=temperature, bank_size=bank_size, batch=batch, steps=5
    ):
        assert_same(ours, got, leaves)


def _views_logits(out0: torch.Tensor, out1: torch.Tensor, temperature: float):
    """The 2N-view logits of the package: cosine / τ, self-pairs masked; twins' columns."""
    z = torch.cat([out0, out1])
    n = out0.shape[0]
    logits = pairwise_cosine_similarity(z) / temperature
    logits = mask_logits(logits, torch.eye(2 * n, dtype=torch.bool))
    return logits, (torch.arange(2 * n) + n) % (2 * n)


def _dclw_weights(out0, out1, sigma, *, detach):
    cos = (F.normalize(out0, dim=1) * F.normalize(out1, dim=1)).sum(1)
    weights = dclw_positive_weights(cos.detach() if detach else cos, sigma=sigma)
    return weights.repeat(2)  # the same weight for both directions of a pair


@pytest.mark.parametrize("normalised", [True, False])
@pytest.mark.parametrize("batch", [2, 6])
@pytest.mark.parametrize("temperature", [0.07, 0.5])
def test_lightly_dcl_is_decoupled_cross_entropy(lightly_losses, temperature, batch, normalised):
    """lightly's ``DCLLoss`` (Yeh et al.'s eq. 6, both directions averaged: each view's twin
    out of the denominator, the other 2N − 2 views in it) is the mean over the 2N views of
    ``decoupled_cross_entropy`` on the package's NT-Xent logits, twin as the positive."""
    out0 = leaf(batch, 4, seed=21, normalised=normalised)
    out1 = leaf(batch, 4, seed=22, normalised=normalised)
    logits, twins = _views_logits(out0, out1, temperature)
    ours = decoupled_cross_entropy(logits, twins).mean()
    peer = lightly_losses.DCLLoss(temperature=temperature)
    assert_same(ours, peer(out0, out1), [out0, out1])


def _dcl_both_ways(out0, out1, temperature, **options):
    """``hard_negative_softmax_loss(..., positive_in_denominator="remove", **options)`` of
    the unit rows of ``out0`` against their positives ``out1`` plus the ``out0`` rows as
    extra candidates (row i's own ``out0_i`` has row i's id, so accidental-hit removal drops
    it), averaged with the other direction: lightly's ``DCLLoss`` layout."""
    ids = torch.arange(out0.shape[0])

    def one_way(a, b):
        a, b = F.normalize(a, dim=1), F.normalize(b, dim=1)
        return hard_negative_softmax_loss(
            a, CandidateSet(b, ids), CandidateSet(a, ids), temperature=temperature,
            positive_in_denominator="remove", **options,
        )

    return 0.5 * (one_way(out0, out1) + one_way(out1, out0))


@pytest.mark.parametrize("batch", [2, 6])
@pytest.mark.parametrize("temperature", [0.07, 0.5])
def test_lightly_dcl_is_hard_negative_softmax_loss_remove(lightly_losses, temperature, batch):
    """The same loss through the composed in-batch loss (:func:`_dcl_both_ways`): each
    direction is lightly's one-way ``_loss``, their mean ``DCLLoss``. The composed loss
    scores dot products, so it gets the unit rows, as lightly normalises them (the
    gradients then agree too, normalisation's Jacobian included)."""
    out0 = leaf(batch, 4, seed=23, normalised=False)
    out1 = leaf(batch, 4, seed=24, normalised=False)
    ours = _dcl_both_ways(out0, out1, temperature)
    peer = lightly_losses.DCLLoss(temperature=temperature)
    assert_same(ours, peer(out0, out1), [out0, out1])


@pytest.mark.parametrize("normalised", [True, False])
@pytest.mark.parametrize("sigma", [0.2, 0.5])
@pytest.mark.parametrize("batch", [3, 6])
@pytest.mark.parametrize("temperature", [0.1, 0.5])
def test_lightly_dclw_is_decoupled_with_dclw_weights(
    lightly_losses, temperature, batch, sigma, normalised
):
    """lightly's ``DCLWLoss(sigma)`` is :func:`test_lightly_dcl_is_decoupled_cross_entropy`
    with ``positive_weight = dclw_positive_weights(cos(out0_i, out1_i), sigma=σ)``
    (``2 − B · softmax(cos / σ)``, one weight per pair, used in both directions). lightly's
    ``negative_mises_fisher_weights`` computes them from ``out0.detach()``,
    ``out1.detach()``, so they pass no gradient: the gradients agree with the package's
    weights computed from detached cosines (the test below shows the package's
    gradient through the weights)."""
    out0 = leaf(batch, 4, seed=25, normalised=normalised)
    out1 = leaf(batch, 4, seed=26, normalised=normalised)
    logits, twins = _views_logits(out0, out1, temperature)
    weights = _dclw_weights(out0, out1, sigma, detach=True)
    ours = decoupled_cross_entropy(logits, twins, positive_weight=weights).mean()
    peer = lightly_losses.DCLWLoss(temperature=temperature, sigma=sigma)
    with warnings.catch_warnings():  # lightly wraps a tensor in torch.tensor(...)
        warnings.simplefilter("ignore", UserWarning)
        got = peer(out0, out1)
    assert_same(ours, got, [out0, out1])


@pytest.mark.parametrize("sigma", [0.2, 0.5])
@pytest.mark.parametrize("temperature", [0.1, 0.5])
def test_lightly_dclw_value_is_hard_negative_softmax_loss_dclw(lightly_losses, temperature, sigma):
    """``hard_negative_softmax_loss(..., positive_in_denominator="remove", dclw_sigma=σ)``
    in both directions (as in the DCL test above) has lightly's ``DCLWLoss`` value: its
    weights come from ``score_positives``, the cosines for unit rows. Values only: the
    composed loss differentiates through its weights (the test below)."""
    batch = 5
    out0 = leaf(batch, 4, seed=27, normalised=False)
    out1 = leaf(batch, 4, seed=28, normalised=False)
    ours = _dcl_both_ways(out0, out1, temperature, dclw_sigma=sigma)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        got = lightly_losses.DCLWLoss(temperature=temperature, sigma=sigma)(out0, out1)
    torch.testing.assert_close(ours, got, **TOL)


@pytest.mark.parametrize("route", ["weights", "composed"])
def test_lightly_detaches_dclw_weights_the_package_does_not(lightly_losses, route):
    """The documented difference (``dclw_positive_weights``' docstring): the package
    differentiates through its weights (``dclw_positive_weights`` on the live cosines, or
    ``dclw_sigma`` in the composed loss), as raminnakhli's DCL code does, lightly does not.
    Same value, different gradient; with detached weights the gradients agree (above)."""
    batch, temperature, sigma = 5, 0.2, 0.5
    out0 = leaf(batch, 4, seed=29, normalised=False)
    out1 = leaf(batch, 4, seed=30, normalised=False)
    if route == "weights":
        logits, twins = _views_logits(out0, out1, temperature)
        weights = _dclw_weights(out0, out1, sigma, detach=False)
        ours = decoupled_cross_entropy(logits, twins, positive_weight=weights).mean()
    else:
        ours = _dcl_both_ways(out0, out1, temperature, dclw_sigma=sigma)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        got = lightly_losses.DCLWLoss(temperature=temperature, sigma=sigma)(out0, out1)
    torch.testing.assert_close(ours, got, **TOL)
    ours_grad = torch.autograd.grad(ours, [out0, out1])
    peer_grad = torch.autograd.grad(got, [out0, out1])
    gap = max(float((a - b).abs().max()) for a, b in zip(ours_grad, peer_grad))
    assert gap > 1e-3, f"the gradients agree ({gap:.1e}): is the weight detached now?"


# --------------------------------------------------------------------------- open_clip


@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("normalised", [True, False])
@pytest.mark.parametrize("batch", [2, 7])
@pytest.mark.parametrize("logit_scale", [1.0, 14.3, 100.0])
def test_open_clip_clip_loss_is_symmetric_info_nce(
    open_clip_loss, logit_scale, batch, normalised, reduction
):
    """open_clip's ``ClipLoss`` (world_size 1: ``(CE(s·I Tᵀ) + CE(s·T Iᵀ)) / 2``, targets
    ``arange(B)``) is ``info_nce_loss(image, text, temperature=1/s, symmetric=True)``: the
    package averages the two directions per row, then over rows. ClipLoss takes features
    as given (CLIP normalises them in the model): raw features go to both when
    ``normalised`` is False (plain dot products); when True, the package's
    ``normalize=True`` on the raw features equals ClipLoss on ``F.normalize`` of them
    (gradients through the normalisation). ``"sum"`` is B times ClipLoss's mean."""
    image = leaf(batch, 5, seed=41, normalised=False)
    text = leaf(batch, 5, seed=42, normalised=False)
    if normalised:
        peer_in = (F.normalize(image, dim=1), F.normalize(text, dim=1))
    else:
        peer_in = (image, text)
    got = open_clip_loss.ClipLoss()(*peer_in, torch.tensor(logit_scale, dtype=D64))
    ours = info_nce_loss(
        image, text, temperature=1.0 / logit_scale, symmetric=True, normalize=normalised,
        reduction=reduction,
    )
    assert_same(ours, got * (batch if reduction == "sum" else 1), [image, text])


def test_open_clip_learned_logit_scale_is_a_learnable_temperature(open_clip_loss):
    """CLIP learns ``logit_scale = log(1/τ)`` and passes ``logit_scale.exp()`` to
    ``ClipLoss``; ``Temperature(τ, learnable=True)`` learns the same ``log(1/τ)``
    (core.py, "CLIP's ``logit_scale``"), so ``InfoNCELoss(symmetric=True)`` has the same
    value and the same gradient for the features and for that parameter."""
    image = leaf(6, 5, seed=43, normalised=True)
    text = leaf(6, 5, seed=44, normalised=True)
    temperature = Temperature(0.07, learnable=True).double()
    logit_scale = temperature.log_scale.detach().clone().requires_grad_()
    module = InfoNCELoss(temperature=temperature, symmetric=True)
    got = open_clip_loss.ClipLoss()(image, text, logit_scale.exp())
    ours = module(image, text)
    torch.testing.assert_close(ours, got, **TOL)
    g_ours = torch.autograd.grad(ours, [image, text, temperature.log_scale])
    g_peer = torch.autograd.grad(got, [image, text, logit_scale])
    for a, b in zip(g_ours, g_peer):
        torch.testing.assert_close(a, b, **TOL)


@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("normalised", [True, False])
@pytest.mark.parametrize("batch", [2, 7])
@pytest.mark.parametrize(("scale", "bias"), [(10.0, -10.0), (1.0, 0.0), (3.7, -2.5)])
def test_open_clip_siglip_loss_is_sigmoid_pairwise_loss(
    open_clip_loss, scale, bias, batch, normalised, reduction
):
    """open_clip's ``SigLipLoss`` (world_size 1: ``−Σ_ij log σ(y_ij (t·x_i·y_j + b)) / B``,
    ``y = 2I − 1``) is ``sigmoid_pairwise_loss(image, text, temperature=1/t, bias=b)``: the
    package's ``"mean"`` is documented as "SigLIP's sum over pairs divided by the batch
    size" (sigmoid.py), ``"sum"`` is B times it. Neither normalises the features. Raw rows
    have norms up to 1 here, so no logit exceeds 20 (beyond it, the test below)."""
    image = leaf(batch, 5, seed=45, normalised=normalised, norms=(0.3, 1.0))
    text = leaf(batch, 5, seed=46, normalised=normalised, norms=(0.3, 1.0))
    t, b = torch.tensor(scale, dtype=D64), torch.tensor(bias, dtype=D64)
    got = open_clip_loss.SigLipLoss()(image, text, t, b)
    ours = sigmoid_pairwise_loss(
        image, CandidateSet(text, torch.arange(batch)), temperature=1.0 / scale, bias=bias,
        reduction=reduction,
    )
    assert_same(ours, got * (batch if reduction == "sum" else 1), [image, text])


def test_open_clip_siglip_logits_above_twenty(open_clip_loss):
    """A batch the model already separates: each image equals its text (cosine 1) and is
    orthogonal to the others, with ``t = 40``, ``b = −19.5``, so the positive logits are
    20.5 and the negative ones −19.5. Every term is then about ``e^{−20}``, and the
    positives' terms are the ones beyond ``softplus``'s linear cut-off at 20: the
    package's value and gradient should still be SigLIP's (float64 on both sides)."""
    basis = torch.linalg.qr(torch.randn(5, 5, generator=_gen(53), dtype=D64))[0].T[:4]
    image = basis.clone().requires_grad_()
    text = basis.clone().requires_grad_()
    t, b = torch.tensor(40.0, dtype=D64), torch.tensor(-19.5, dtype=D64)
    got = open_clip_loss.SigLipLoss()(image, text, t, b)
    ours = sigmoid_pairwise_loss(
        image, CandidateSet(text, torch.arange(4)), temperature=1 / 40.0, bias=-19.5
    )
    assert_same(ours, got, [image, text])


def test_open_clip_siglip_learned_scale_and_bias(open_clip_loss):
    """SigLIP learns ``t' = log t`` (passed as ``exp(t')``) and ``b``;
    ``SigmoidPairwiseLoss`` learns the same two (``Temperature.from_scale``, ``bias``), from
    SigLIP's initial values (10, −10). Same value, and the same gradient for the features,
    ``t'`` and ``b``."""
    image = leaf(6, 5, seed=47, normalised=True)
    text = leaf(6, 5, seed=48, normalised=True)
    module = SigmoidPairwiseLoss().double()
    log_t = module.temperature.log_scale.detach().clone().requires_grad_()
    bias = module.bias.detach().clone().requires_grad_()
    got = open_clip_loss.SigLipLoss()(image, text, log_t.exp(), bias)
    ours = module(image, CandidateSet(text, torch.arange(6)))
    torch.testing.assert_close(ours, got, **TOL)
    g_ours = torch.autograd.grad(ours, [image, text, module.temperature.log_scale, module.bias])
    g_peer = torch.autograd.grad(got, [image, text, log_t, bias])
    for a, b in zip(g_ours, g_peer):
        torch.testing.assert_close(a, b, **TOL)


def test_open_clip_siglip_keeps_duplicate_ids_unless_told(open_clip_loss):
    """SigLIP has no ids: every off-diagonal pair is a negative. The package drops the
    terms of columns that repeat a row's positive id by default (sigmoid.py, "Accidental
    hits ... are dropped with zero weight"); with ``remove_accidental_hits=False`` it is
    SigLIP again, duplicates and all. With the default the loss is smaller here."""
    image = leaf(6, 5, seed=49, normalised=True)
    text = leaf(6, 5, seed=50, normalised=True)
    ids = torch.tensor([0, 1, 0, 2, 3, 1])
    t, b = torch.tensor(5.0, dtype=D64), torch.tensor(-3.0, dtype=D64)
    got = open_clip_loss.SigLipLoss()(image, text, t, b)
    kwargs = {"temperature": 0.2, "bias": -3.0}
    kept = sigmoid_pairwise_loss(
        image, CandidateSet(text, ids), remove_accidental_hits=False, **kwargs
    )
    assert_same(kept, got, [image, text])
    dropped = sigmoid_pairwise_loss(image, CandidateSet(text, ids), **kwargs)
    assert float(dropped.detach()) < float(got.detach())


def test_open_clip_siglip_other_ranks_are_extra_candidates(open_clip_loss):
    """With W ranks, open_clip's rank-r SigLIP loss is its own block plus each other rank's
    text block with negative labels only, all over the local B (``SigLipLoss.forward``
    adds ``_loss(..., negative_only=True)`` per received block; called here directly, one
    process standing in for the ring). That is ``sigmoid_pairwise_loss`` with the other
    ranks' positives as extra ``candidates`` (distinct ids), the sum the package's
    ``ring_sigmoid_loss`` computes chunk by chunk."""
    batch, ranks = 3, 3
    image = leaf(batch, 4, seed=51, normalised=True)
    texts = [leaf(batch, 4, seed=52 + r, normalised=True) for r in range(ranks)]
    t, b = torch.tensor(8.0, dtype=D64), torch.tensor(-4.0, dtype=D64)
    peer = open_clip_loss.SigLipLoss()
    got = peer._loss(image, texts[0], t, b) + sum(
        peer._loss(image, other, t, b, negative_only=True) for other in texts[1:]
    )
    others = CandidateSet(torch.cat(texts[1:]), torch.arange(batch, batch * ranks))
    ours = sigmoid_pairwise_loss(
        image, CandidateSet(texts[0], torch.arange(batch)), others, temperature=1 / 8.0,
        bias=-4.0,
    )
    assert_same(ours, got, [image, *texts])
