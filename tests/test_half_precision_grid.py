"""Half precision: no non-finite loss or gradient in float16 / bfloat16 where float32 is finite.

The grid (issue 41): dtypes × embedding scales × temperatures × losses. Each case rounds
its inputs to the half dtype once; the reference is the same call on those rounded values
in float32. Wherever the float32 loss is finite, the half loss must be; wherever a float32
gradient entry is finite and fits the half dtype (below half its largest value: autograd
returns a half leaf's gradient in the leaf's dtype, so a larger true gradient cannot be
finite there, whatever the package does), the half gradient entry must be finite.

The inputs are built the way a training step builds them, the patterns the issue found:
the sampled losses' positives and candidates gathered from one half class table by
:meth:`CandidateSet.positives_of` and :meth:`CandidateSet.from_draw` (with accidental
hits, an id in both: two gathers cast each partial gradient to float16 alone, +inf − inf);
the multi-positive loss with the query as its own candidates (SupCon's layout: one
tensor used twice); the checkpointed loss, whose blocks each use every positive column.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch

from candidate_sampling import CandidateSet
from candidate_sampling import losses as L
from candidate_sampling.sampling import CandidateDraw, UniformSampler
from candidate_sampling.scale import distributed, gradcache

DTYPES = (torch.float16, torch.bfloat16)
SCALES = (1.0, 1e2, 1e3)
SEEDS = (0, 1, 2, 3)
TEMPERATURES = (1e-3, 1e-1, 1.0, 10.0)
B, D, V = 4, 4, 10
POSITIVE_IDS = torch.tensor([0, 1, 2, 3])
LABELS = torch.tensor([0, 1, 0, 1])
#: a draw whose ids hold rows 0 and 2's positives (accidental hits) and a repeat
DRAW = CandidateDraw(
    ids=torch.tensor([0, 5, 2, 6, 7]),
    log_q=torch.tensor([-1.5, -0.3, -2.0, -0.9, -1.1]),
    num_tries=5,
    unique=True,
    positive_log_q=torch.tensor([-1.2, -0.4, -2.2, -0.7]),
    positive_ids=POSITIVE_IDS,
)
ITEM_PROBS = torch.linspace(1.0, 2.0, V) / torch.linspace(1.0, 2.0, V).sum()


def inputs(scale: float, seed: int = 0) -> dict[str, torch.Tensor]:
    """float32 leaves: ``query`` (B, d), ``keys`` (B, d), ``table`` (|V|, d), at ``scale``."""
    g = torch.Generator().manual_seed(seed)
    return {
        "query": torch.randn(B, D, generator=g) * scale,
        "keys": torch.randn(B, D, generator=g) * scale,
        "table": torch.randn(V, D, generator=g) * scale,
    }


def _sampled(fn) -> Callable:
    def call(t, tau):
        positives = CandidateSet.positives_of(POSITIVE_IDS, t["table"], draw=DRAW)
        return fn(t["query"], positives, CandidateSet.from_draw(DRAW, t["table"]), temperature=tau)

    return call


def _module(cls) -> Callable:
    def call(t, tau):
        loss = cls(UniformSampler(V), 5, temperature=tau, remove_accidental_hits=False)
        return loss(
            t["query"], t["table"], POSITIVE_IDS, generator=torch.Generator().manual_seed(4)
        )

    return call


def _in_batch(fn, **options) -> Callable:
    def call(t, tau):
        positives = CandidateSet(t["keys"], POSITIVE_IDS)
        extras = CandidateSet.from_ids(torch.tensor([1, 5, 7]), t["table"], log_q=0.0)
        return fn(t["query"], positives, extras, temperature=tau, **options)

    return call


#: name → call(leaves, τ) → loss
CASES: dict[str, Callable] = {
    "sampled_softmax_loss": _sampled(L.sampled_softmax_loss),
    "nce_loss": _sampled(L.nce_loss),
    "negative_sampling_loss": _sampled(L.negative_sampling_loss),
    "sampled_logistic_loss": _sampled(L.sampled_logistic_loss),
    "SampledSoftmaxLoss": _module(L.SampledSoftmaxLoss),
    "NCELoss": _module(L.NCELoss),
    "in_batch_softmax_loss": _in_batch(L.in_batch_softmax_loss, remove_accidental_hits=False),
    "sigmoid_pairwise_loss": _in_batch(L.sigmoid_pairwise_loss, remove_accidental_hits=False),
    "hard_negative_softmax_loss": _in_batch(L.hard_negative_softmax_loss, tau_plus=0.1),
    "checkpointed_in_batch_softmax_loss": _in_batch(
        gradcache.checkpointed_in_batch_softmax_loss, block_size=2, remove_accidental_hits=False
    ),
    "gathered_softmax_loss": _in_batch(
        distributed.gathered_softmax_loss, remove_accidental_hits=False
    ),
    "multi_positive_softmax_loss": lambda t, tau: L.multi_positive_softmax_loss(
        t["query"],
        CandidateSet(t["query"], torch.arange(B)),  # the query is its own candidates
        LABELS[:, None] == LABELS[None, :],
        removed=torch.eye(B, dtype=torch.bool),
        temperature=tau,
    ),
    "RetrievalLoss": lambda t, tau: L.RetrievalLoss(
        temperature=tau, item_probabilities=ITEM_PROBS, sampler=UniformSampler(V), num_samples=3
    )(
        t["query"],
        t["keys"],
        POSITIVE_IDS,
        item_encoder=lambda ids: t["table"][ids],
        generator=torch.Generator().manual_seed(5),
    ),
    "info_nce_loss": lambda t, tau: L.info_nce_loss(t["query"], t["keys"], temperature=tau),
    "nt_xent_loss": lambda t, tau: L.nt_xent_loss(t["query"], t["keys"], temperature=tau),
    "nt_bxent_loss": lambda t, tau: L.nt_bxent_loss(
        t["query"], torch.tensor([[0, 2], [2, 0], [1, 3], [3, 1]]), temperature=tau
    ),
    "supcon_loss": lambda t, tau: L.supcon_loss(t["query"], LABELS, temperature=tau),
    "soft_nearest_neighbor_loss": lambda t, tau: L.soft_nearest_neighbor_loss(
        t["query"], LABELS, temperature=tau
    ),
    "chunked_softmax_cross_entropy": lambda t, tau: L.chunked_softmax_cross_entropy(
        t["query"], t["table"], POSITIVE_IDS, temperature=tau, chunk_size=4
    ),
}


def run(case: Callable, leaves: dict[str, torch.Tensor], tau: float):
    """The loss and every leaf's gradient (zeros for a leaf the loss does not use)."""
    leaves = {k: v.detach().clone().requires_grad_(True) for k, v in leaves.items()}
    loss = case(leaves, tau)
    grads = torch.autograd.grad(loss, list(leaves.values()), allow_unused=True)
    grads = {k: torch.zeros_like(v) if g is None else g for (k, v), g in zip(leaves.items(), grads)}
    return loss.detach(), grads


def failures(name: str, dtype: torch.dtype) -> list[str]:
    """Every (seed, scale, τ) where the half call is non-finite and the float32 call is not."""
    found = []
    limit = torch.finfo(dtype).max / 2
    for seed, scale in ((seed, scale) for seed in SEEDS for scale in SCALES):
        rounded = {k: v.to(dtype) for k, v in inputs(scale, seed).items()}
        for tau in TEMPERATURES:
            loss, grads = run(CASES[name], rounded, tau)
            ref_loss, ref_grads = run(CASES[name], {k: v.float() for k, v in rounded.items()}, tau)
            where = f"seed {seed}, scale {scale:g}, τ {tau:g}"
            if math.isfinite(float(ref_loss)) and not math.isfinite(float(loss)):
                found.append(f"{where}: loss {float(loss)} (float32 {float(ref_loss):.4g})")
            for key, grad in grads.items():
                ref = ref_grads[key]
                should = torch.isfinite(ref) & (ref.abs() < limit)
                bad = should & ~torch.isfinite(grad.float())
                if bool(bad.any()):
                    found.append(
                        f"{where}: gradient of {key}: {int(bad.sum())} non-finite entries "
                        f"({int(torch.isnan(grad[bad]).sum())} NaN) where float32 is finite"
                    )
    return found


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", sorted(CASES))
def test_half_precision_is_finite_where_float32_is(name, dtype):
    found = failures(name, dtype)
    assert not found, f"{name} in {dtype}:\n  " + "\n  ".join(found)


def test_the_grid_reaches_the_overflowing_cases():
    """The grid is not vacuous: at scale 1e3 and τ = 1e-3 a sampled loss's table gradient
    overflows float16 (entries beyond 65504 that are excluded), and an accidental hit's
    entries, whose two halves cancel, are finite only because they are summed in float32."""
    rounded = {k: v.half() for k, v in inputs(1e3).items()}
    _, grads = run(CASES["nce_loss"], {k: v.float() for k, v in rounded.items()}, 1e-3)
    assert bool((grads["table"].abs() > torch.finfo(torch.float16).max).any())
    _, half_grads = run(CASES["nce_loss"], rounded, 1e-3)
    fits = grads["table"].abs() < torch.finfo(torch.float16).max / 2
    assert bool(torch.isfinite(half_grads["table"][fits]).all())
