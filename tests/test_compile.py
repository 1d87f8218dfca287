"""Compiled training: every public loss is one graph under ``torch.compile`` (issue 41).

A user who wraps a training step in ``torch.compile`` (default settings) should get one
graph per loss. The package's value checks read tensor values on the host, which would
break the graph at every check; they are skipped while dynamo traces
(``torch.compiler.is_compiling()``, see ``set_validate_args``), the shape checks stay.
``torch._dynamo.explain`` traces each loss with the checks *on* (the default) and counts
graphs and breaks. The list of losses is found in the package's ``__all__``: a new public
loss without an entry here fails :func:`test_every_public_loss_has_an_entry`.
"""

from __future__ import annotations

import pytest
import torch

import candidate_sampling
from candidate_sampling import CandidateSet
from candidate_sampling import losses as L
from candidate_sampling.scale import distributed, gradcache

_dynamo = pytest.importorskip("torch._dynamo")

B, D, V = 4, 3, 12
_g = torch.Generator().manual_seed(0)
QUERY = torch.randn(B, D, generator=_g)
KEYS = torch.randn(B, D, generator=_g)
TABLE = torch.randn(V, D, generator=_g)
IDS = torch.tensor([0, 1, 2, 1])
EXTRA_IDS = torch.tensor([5, 6, 1])
LOG_Q = torch.tensor([-1.0, -0.5, -2.0, -0.5])
EXTRA_LOG_Q = torch.tensor([-1.5, -0.2, -0.5])
LOGITS = torch.randn(B, 6, generator=_g)
POS_SCORES = torch.randn(B, generator=_g)
NEG_SCORES = torch.randn(B, 5, generator=_g)
LABELS = torch.tensor([0, 1, 0, 1])
PAIRS = torch.tensor([[0, 2], [2, 0], [1, 3], [3, 1]])
WEIGHT = torch.tensor([1.0, 0.5, 2.0, 1.0])


def _sets():
    positives = CandidateSet(KEYS, IDS, LOG_Q)
    extras = CandidateSet(TABLE[EXTRA_IDS], EXTRA_IDS, EXTRA_LOG_Q)
    return positives, extras


def _sampled(fn):
    def call():
        positives = CandidateSet.from_ids(IDS, TABLE, log_q=LOG_Q)
        candidates = CandidateSet.from_ids(EXTRA_IDS, TABLE, log_q=EXTRA_LOG_Q)
        return fn(QUERY, positives, candidates, sample_weight=WEIGHT)

    return call


def _in_batch(fn, **options):
    def call():
        positives, extras = _sets()
        return fn(QUERY, positives, extras, sample_weight=WEIGHT, **options)

    return call


#: name → a function of no arguments that calls the loss on the inputs above
CALLS = {
    "softmax_cross_entropy": lambda: L.softmax_cross_entropy(LOGITS, IDS % 6),
    "positive_column_cross_entropy": lambda: L.positive_column_cross_entropy(LOGITS, IDS),
    "sampled_softmax_from_scores": lambda: L.sampled_softmax_from_scores(
        POS_SCORES, NEG_SCORES, negative_log_q=LOG_Q.new_zeros(5), sample_weight=WEIGHT
    ),
    "nce_from_scores": lambda: L.nce_from_scores(POS_SCORES, NEG_SCORES, sample_weight=WEIGHT),
    "gbce_from_scores": lambda: L.gbce_from_scores(POS_SCORES, NEG_SCORES, num_items=V, t=0.5),
    "sampled_softmax_loss": _sampled(L.sampled_softmax_loss),
    "nce_loss": _sampled(L.nce_loss),
    "negative_sampling_loss": _sampled(L.negative_sampling_loss),
    "sampled_logistic_loss": _sampled(L.sampled_logistic_loss),
    "in_batch_softmax_loss": _in_batch(L.in_batch_softmax_loss),
    "sigmoid_pairwise_loss": _in_batch(L.sigmoid_pairwise_loss),
    "hard_negative_softmax_loss": _in_batch(
        L.hard_negative_softmax_loss, num_hard_negatives=2, tau_plus=0.1
    ),
    "gathered_softmax_loss": _in_batch(distributed.gathered_softmax_loss),
    "checkpointed_in_batch_softmax_loss": _in_batch(
        gradcache.checkpointed_in_batch_softmax_loss, block_size=2
    ),
    "ring_sigmoid_loss": lambda: distributed.ring_sigmoid_loss(
        QUERY, _sets()[0], sample_weight=WEIGHT
    ),
    "multi_positive_softmax_loss": lambda: L.multi_positive_softmax_loss(
        QUERY, _sets()[0], LABELS[:, None] == LABELS[None, :], sample_weight=WEIGHT
    ),
    "multi_positive_cross_entropy": lambda: L.multi_positive_cross_entropy(
        LOGITS[:, :B], LABELS[:, None] == LABELS[None, :]
    ),
    "decoupled_cross_entropy": lambda: L.decoupled_cross_entropy(LOGITS, IDS),
    "debiased_cross_entropy": lambda: L.debiased_cross_entropy(LOGITS, IDS, tau_plus=0.1),
    "info_nce_loss": lambda: L.info_nce_loss(QUERY, KEYS, symmetric=True, sample_weight=WEIGHT),
    "nt_xent_loss": lambda: L.nt_xent_loss(QUERY, KEYS, sample_weight=WEIGHT.repeat(2)),
    "reduce_loss": lambda: L.reduce_loss(POS_SCORES, "mean", sample_weight=WEIGHT),
    "nt_bxent_loss": lambda: L.nt_bxent_loss(QUERY, PAIRS),
    "supcon_loss": lambda: L.supcon_loss(QUERY, LABELS),
    "soft_nearest_neighbor_loss": lambda: L.soft_nearest_neighbor_loss(QUERY, LABELS),
    "alignment_loss": lambda: L.alignment_loss(QUERY, KEYS),
    "uniformity_loss": lambda: L.uniformity_loss(QUERY),
    "chunked_softmax_cross_entropy": lambda: L.chunked_softmax_cross_entropy(
        QUERY, TABLE, IDS, chunk_size=5, method="vocab"
    ),
    "chunked_softmax_cross_entropy[rows]": lambda: L.chunked_softmax_cross_entropy(
        QUERY, TABLE, IDS, chunk_size=2, method="rows"
    ),
    # modules: one instance each, called as a training step would
    "InfoNCELoss": lambda: L.InfoNCELoss(temperature=0.1)(QUERY, KEYS),
    "NTXentLoss": lambda: L.NTXentLoss()(QUERY, KEYS),
    "NTBXentLoss": lambda: L.NTBXentLoss()(QUERY, PAIRS),
    "SupConLoss": lambda: L.SupConLoss()(QUERY, LABELS),
    "SoftNearestNeighborLoss": lambda: L.SoftNearestNeighborLoss()(QUERY, LABELS),
    "SigmoidPairwiseLoss": lambda: L.SigmoidPairwiseLoss()(QUERY, _sets()[0]),
    "HardNegativeSoftmaxLoss": lambda: L.HardNegativeSoftmaxLoss(num_hard_negatives=2)(
        QUERY, *_sets()
    ),
    "chunked_softmax_cross_entropy[ignore_index]": lambda: L.chunked_softmax_cross_entropy(
        QUERY, TABLE, torch.tensor([0, -100, 2, 1]), sample_weight=WEIGHT, chunk_size=5
    ),
    "ChunkedSoftmaxCrossEntropy": lambda: L.ChunkedSoftmaxCrossEntropy(chunk_size=5)(
        QUERY, TABLE, IDS
    ),
    "RetrievalLoss": lambda: L.RetrievalLoss(item_probabilities=torch.full((V,), 1.0 / V))(
        QUERY, KEYS, IDS
    ),
}

#: losses whose call draws from a sampler first: the draw is host work by nature (unique
#: draws loop until k distinct ids); the loss of the draw is ``sampled_softmax_loss`` /
#: ``nce_loss`` above, and the draw is tested here outside the compiled region.
DRAWS = {
    "SampledSoftmaxLoss": L.sampled_softmax_loss,
    "NCELoss": L.nce_loss,
}


@pytest.mark.parametrize("name", sorted(DRAWS))
def test_a_sampled_module_compiles_to_one_graph_after_its_draw(name):
    """The module's draw runs eagerly (as a data loader would), then everything after it —
    gathering the rows of the draw and the positives, the loss — is one graph."""
    from candidate_sampling.sampling import UniformSampler

    draw = UniformSampler(V).sample(3, unique=True, generator=_g, positive_ids=IDS)
    fn = DRAWS[name]

    def call():
        positives = CandidateSet.positives_of(IDS, TABLE, draw=draw)
        return fn(QUERY, positives, CandidateSet.from_draw(draw, TABLE))

    eager = call()
    _dynamo.reset()
    explained = _dynamo.explain(call)()
    reasons = [b.reason.splitlines()[0] for b in explained.break_reasons]
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), reasons
    torch.testing.assert_close(torch.compile(call, backend="eager")(), eager)


def _is_loss(name: str) -> bool:
    return name.endswith(("_loss", "Loss", "cross_entropy", "CrossEntropy", "_from_scores"))


def public_losses() -> list[str]:
    names = set()
    for module in (L, distributed, gradcache):
        names |= {n for n in module.__all__ if _is_loss(n) and callable(getattr(module, n))}
    return sorted(names)


def test_every_public_loss_has_an_entry():
    missing = [n for n in public_losses() if n not in CALLS and n not in DRAWS]
    assert not missing, f"public losses without a compile check: {missing}"


@pytest.mark.parametrize("name", sorted(CALLS))
def test_a_public_loss_is_one_graph_under_torch_compile(name):
    assert candidate_sampling.get_validate_args()  # the default: checks on
    call = CALLS[name]
    eager = call()
    _dynamo.reset()
    explained = _dynamo.explain(call)()
    reasons = [b.reason.splitlines()[0] for b in explained.break_reasons]
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), reasons
    # the traced graph (the checks skipped, the compile-time branches taken) computes the
    # eager value; and the checks are on again once tracing is over
    torch.testing.assert_close(torch.compile(call, backend="eager")(), eager)
    assert candidate_sampling.get_validate_args()
