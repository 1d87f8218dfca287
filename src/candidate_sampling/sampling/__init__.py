"""Sampling: where candidates come from and how likely each one was (chapters 2–5).

* :mod:`.samplers` — uniform, log-uniform (Zipfian) and unigram candidate samplers; a draw
  carries every candidate's log expected count (TensorFlow's semantics).
* :mod:`.frequency` — item frequencies, batch-inclusion probabilities and the streaming
  frequency estimator of Yi et al. (2019): every log Q of an in-batch or mixed candidate.
* :mod:`.hashing` — the universal hash shared by the streaming estimator and hashed
  embedding tables.
"""

from candidate_sampling.sampling.frequency import *  # noqa: F401,F403
from candidate_sampling.sampling.frequency import __all__ as _frequency_all
from candidate_sampling.sampling.samplers import *  # noqa: F401,F403
from candidate_sampling.sampling.samplers import __all__ as _samplers_all

__all__ = [*_samplers_all, *_frequency_all]
