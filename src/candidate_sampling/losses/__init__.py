"""Losses for large-softmax training, as plain functions with thin ``nn.Module`` wrappers.

Submodules, one family each (all names are re-exported here):

* :mod:`.core` — the pipeline steps every loss is built from (correct, mask, the
  positive-column cross-entropy, reduce) and the modules' thin base.
* :mod:`.sampled` — full softmax, importance sampling, sampled softmax, NCE, negative
  sampling, sampled logistic (chapters 1–4).
* :mod:`.retrieval` — the in-batch softmax over one candidate matrix (plain, corrected,
  mixed negatives) and the ``RetrievalLoss`` task module (chapter 5).
* :mod:`.contrastive` — InfoNCE, NT-Xent, NT-BXent, supervised contrastive, soft nearest
  neighbour (chapter 6).
* :mod:`.sigmoid` — SigLIP's pairwise sigmoid loss with a learnable scale and bias
  (chapter 7).
* :mod:`.hard_negatives` — hard-negative selection and weighting, false-negative filters,
  debiased / hard-sample (HCL) losses, DCL and the corrected logQ, multi-positive InfoNCE
  (chapter 8).

Conventions (sign and order of temperature and logQ, masks, precision, reduction) are
stated in :mod:`.core` and on the book's notation page. Every option is keyword-only.
"""

from candidate_sampling.losses.core import *  # noqa: F401,F403
from candidate_sampling.losses.core import __all__ as _core_all
from candidate_sampling.losses.sampled import *  # noqa: F401,F403
from candidate_sampling.losses.sampled import __all__ as _sampled_all
from candidate_sampling.losses.retrieval import *  # noqa: F401,F403
from candidate_sampling.losses.retrieval import __all__ as _retrieval_all
from candidate_sampling.losses.contrastive import *  # noqa: F401,F403
from candidate_sampling.losses.contrastive import __all__ as _contrastive_all

from candidate_sampling.losses.sigmoid import *  # noqa: F401,F403
from candidate_sampling.losses.sigmoid import __all__ as _sigmoid_all
from candidate_sampling.losses.hard_negatives import *  # noqa: F401,F403
from candidate_sampling.losses.hard_negatives import __all__ as _hard_negatives_all

__all__ = [
    *_core_all,
    *_sampled_all,
    *_retrieval_all,
    *_contrastive_all,
    *_sigmoid_all,
    *_hard_negatives_all,
]
