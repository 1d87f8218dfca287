"""Losses for large-softmax training, as plain functions with thin ``nn.Module`` wrappers.

Submodules, one family each (all names are re-exported here):

* :mod:`.core` — the logit pipeline every loss is built from, one public function per
  step: score → temperature (:class:`Temperature`) → log Q correction → mask
  (accidental hits) → criterion (softmax cross-entropy, logistic terms) → reduction
  (``sample_weight``); and the modules' thin base.
* :mod:`.importance` — the full softmax and importance sampling (chapters 1–2).
* :mod:`.sampled` — sampled softmax over a :class:`~candidate_sampling.CandidateSet`
  of positives and one of candidates (chapter 4).
* :mod:`.logistic` — NCE, negative sampling, sampled logistic (chapter 3).
* :mod:`.retrieval` — the in-batch softmax over the batch's positives and any more
  candidate columns, and the ``RetrievalLoss`` task module (chapter 5).
* :mod:`.contrastive` — InfoNCE, NT-Xent, NT-BXent, supervised contrastive, soft nearest
  neighbour (chapter 6).
* :mod:`.sigmoid` — SigLIP's pairwise sigmoid loss with a learnable scale and bias
  (chapter 7).
* :mod:`.hard_negatives` — hard-negative selection and weighting, false-negative filters,
  debiased / hard-sample (HCL) losses, DCL and the corrected logQ, multi-positive InfoNCE
  (chapter 8).
* :mod:`.chunked` — the exact full-softmax cross-entropy in vocabulary or row chunks,
  never holding the (N, |V|) logits (chapter 10).
* :mod:`.gbce` — gSASRec's gBCE, BCE with sampled negatives and a calibration exponent
  (chapter 10).

Conventions (sign and order of temperature and logQ, masks, precision, reduction) are
stated in :mod:`.core` and on the book's notation page. Every option is keyword-only.
"""

from candidate_sampling.losses.core import *  # noqa: F401,F403
from candidate_sampling.losses.core import __all__ as _core_all
from candidate_sampling.losses.importance import *  # noqa: F401,F403
from candidate_sampling.losses.importance import __all__ as _importance_all
from candidate_sampling.losses.sampled import *  # noqa: F401,F403
from candidate_sampling.losses.sampled import __all__ as _sampled_all
from candidate_sampling.losses.logistic import *  # noqa: F401,F403
from candidate_sampling.losses.logistic import __all__ as _logistic_all
from candidate_sampling.losses.retrieval import *  # noqa: F401,F403
from candidate_sampling.losses.retrieval import __all__ as _retrieval_all
from candidate_sampling.losses.contrastive import *  # noqa: F401,F403
from candidate_sampling.losses.contrastive import __all__ as _contrastive_all

from candidate_sampling.losses.sigmoid import *  # noqa: F401,F403
from candidate_sampling.losses.sigmoid import __all__ as _sigmoid_all
from candidate_sampling.losses.hard_negatives import *  # noqa: F401,F403
from candidate_sampling.losses.hard_negatives import __all__ as _hard_negatives_all
from candidate_sampling.losses.chunked import *  # noqa: F401,F403
from candidate_sampling.losses.chunked import __all__ as _chunked_all
from candidate_sampling.losses.gbce import *  # noqa: F401,F403
from candidate_sampling.losses.gbce import __all__ as _gbce_all

__all__ = [
    *_core_all,
    *_importance_all,
    *_sampled_all,
    *_logistic_all,
    *_retrieval_all,
    *_contrastive_all,
    *_sigmoid_all,
    *_hard_negatives_all,
    *_chunked_all,
    *_gbce_all,
]
