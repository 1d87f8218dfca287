"""candidate_sampling: samplers and losses for training softmax models over huge catalogues.

The package behind the book *Candidate Sampling*. Modules, one concept each:

``candidates``  CandidateSet: candidate columns (embeddings, ids, log Q, mask) that every
                source of negatives returns and every softmax-family loss consumes
``device``      get_device (CUDA → MPS → CPU, or $CANDIDATE_SAMPLING_DEVICE), seed_everything,
                book_seed (every chapter's seeds, moved by $CANDIDATE_SAMPLING_SEED)
``data``        MovieLens-100K with a cache and verified sources
``synthetic``   Zipfian classification problems and a planted two-tower retrieval problem,
                with known true probabilities
``samplers``    uniform, log-uniform and unigram candidate samplers with expected counts
``losses``      full / sampled softmax, NCE, in-batch, mixed, contrastive losses
``frequency``   item frequency and batch-inclusion estimators (Yi et al. 2019)
``models``      the two-tower retrieval model (id, history or shared-history user towers)
``metrics``     Recall@K / NDCG@K over the full catalogue, sampled metrics, popularity strata
``baselines``   most popular, item-kNN and EASE (closed form); ranks from score matrices
``train``       a small training loop returning per-epoch metrics
``distributed`` negatives across devices: all-gather with gradients, global ids and log Q,
                ring sigmoid loss, a process launcher
``gradcache``   GradCache (exact big-batch gradients in chunks), checkpointed in-batch loss
``memory``      cross-batch memory / momentum queue with log Q, staleness, momentum encoder
``mining``      hard-negative mining with faiss (exact / HNSW / IVF) and a refresh schedule

Conventions (see the notation page of the book): logits are ``s / τ − log Q`` where Q is a
candidate's expected count in the sampled set; masks are finite (``finfo.min / 2``);
losses average over examples unless ``reduction`` says otherwise; options are keyword-only.
Value checks that force a device sync can be switched off with ``set_validate_args(False)``.
"""

from candidate_sampling._validate import get_validate_args, set_validate_args, validate_args
from candidate_sampling.candidates import CandidateSet
from candidate_sampling.device import (
    book_seed,
    get_device,
    seed_everything,
    seed_offset,
    time_calls,
)

__version__ = "0.2.0"
__all__ = [
    "CandidateSet",
    "book_seed",
    "get_device",
    "get_validate_args",
    "seed_everything",
    "seed_offset",
    "set_validate_args",
    "time_calls",
    "validate_args",
    "__version__",
]
