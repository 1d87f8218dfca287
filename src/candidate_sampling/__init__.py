"""candidate_sampling: samplers and losses for training softmax models over huge catalogues.

The package behind the book *Candidate Sampling*. One job per module or subpackage:

* ``device`` — ``get_device`` (CUDA → MPS → CPU, or ``$CANDIDATE_SAMPLING_DEVICE``),
  ``seed_everything``, ``book_seed`` (every chapter's seeds, moved by
  ``$CANDIDATE_SAMPLING_SEED``), ``time_calls``.
* ``candidates`` — ``CandidateSet``: candidate columns with their embeddings, ids, log Q,
  mask and source (``SOURCES``: how each column came to be, which decides the default
  accidental-hit rule), made by every source of negatives and consumed by every loss.
* ``losses`` — the logit pipeline's steps and every loss: full / sampled softmax, NCE,
  in-batch and mixed negatives, contrastive, sigmoid, hard-negative, chunked exact softmax.
* ``sampling`` — uniform, log-uniform and unigram samplers with expected counts; item
  frequency and batch-inclusion estimators (Yi et al. 2019); hashing.
* ``scale`` — negatives across devices (all-gather with gradients), GradCache, the
  cross-batch memory / momentum queue, hard-negative mining with faiss.
* ``eval`` — Recall@K / NDCG@K over the full catalogue, sampled metrics, popularity
  strata, known pairs; baselines (most popular, item-kNN, EASE).
* ``data`` — MovieLens-100K with a verified cache (the ``[data]`` extra), synthetic
  problems with known true probabilities.
* ``models`` — the two-tower retrieval model (id, history or shared-history user towers).
* ``train`` — a small training loop returning per-epoch metrics (the ``[train]`` extra).

Conventions (see the notation page of the book): logits are ``s / τ − log Q`` where Q is a
candidate's expected count in the sampled set; masks are finite (``finfo.min / 2``);
losses average over examples unless ``reduction`` says otherwise; options are keyword-only.
Value checks that force a device sync can be switched off with ``set_validate_args(False)``.
"""

from candidate_sampling._validate import get_validate_args, set_validate_args, validate_args
from candidate_sampling.candidates import SOURCES, CandidateSet
from candidate_sampling.device import (
    book_seed,
    exact_float64,
    float64_or_float32,
    get_device,
    has_float64,
    seed_everything,
    seed_offset,
    time_calls,
)

__version__ = "0.3.0"
__all__ = [
    "CandidateSet",
    "SOURCES",
    "book_seed",
    "exact_float64",
    "float64_or_float32",
    "get_device",
    "has_float64",
    "get_validate_args",
    "seed_everything",
    "seed_offset",
    "set_validate_args",
    "time_calls",
    "validate_args",
    "__version__",
]
