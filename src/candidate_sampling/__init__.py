"""candidate_sampling: samplers and losses for training softmax models over huge catalogues.

The package behind the book *Candidate Sampling*. Modules, one concept each:

``device``      get_device (CUDA → MPS → CPU, or $CANDIDATE_SAMPLING_DEVICE), seed_everything
``data``        MovieLens-100K with a cache and verified sources
``synthetic``   Zipfian classification problems with known true probabilities
``samplers``    uniform, log-uniform and unigram candidate samplers with expected counts
``losses``      full / sampled softmax, NCE, in-batch, mixed, contrastive losses
``frequency``   item frequency and batch-inclusion estimators (Yi et al. 2019)
``models``      the two-tower retrieval model
``metrics``     Recall@K / NDCG@K over the full catalogue
``train``       a small training loop returning per-epoch metrics

Conventions (see the notation page of the book): logits are ``s / τ − log Q`` where Q is a
candidate's expected count in the sampled set; masks are finite (``finfo.min / 2``);
losses average over examples unless ``reduction`` says otherwise.
"""

from candidate_sampling.device import get_device, seed_everything

__version__ = "0.1.0"
__all__ = ["get_device", "seed_everything", "__version__"]
