"""Evaluation: full-catalogue and sampled ranking metrics, and the baselines every trained
model is compared with (chapters 5, 8 and 9).

* :mod:`.metrics` — Recall@K / NDCG@K over the full catalogue with seen items excluded,
  sampled metrics, popularity strata.
* :mod:`.baselines` — most popular, item-kNN and EASE (closed form).
* :mod:`.known_pairs` — :class:`KnownPairs`, the one table of a user's known items that
  metrics, baselines and the hard-negative miner all read.
"""

from candidate_sampling.eval.baselines import *  # noqa: F401,F403
from candidate_sampling.eval.baselines import __all__ as _baselines_all
from candidate_sampling.eval.known_pairs import KnownPairs
from candidate_sampling.eval.metrics import *  # noqa: F401,F403
from candidate_sampling.eval.metrics import __all__ as _metrics_all

__all__ = ["KnownPairs", *_metrics_all, *_baselines_all]
