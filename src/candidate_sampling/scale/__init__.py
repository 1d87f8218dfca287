"""Scale: more negatives than one batch holds, and harder ones (chapters 7–8).

Every source returns a :class:`~candidate_sampling.CandidateSet` (its columns with ids,
log Q and mask) that a loss takes as ``candidates``, concatenated with any other source:
:func:`~candidate_sampling.scale.distributed.gather_candidates`,
:meth:`~candidate_sampling.scale.memory.CrossBatchMemory.candidates_for`,
:meth:`~candidate_sampling.scale.mining.MinedNegatives.candidates`. Their log Q comes from
:mod:`candidate_sampling.sampling.frequency`; known items from
:class:`candidate_sampling.eval.KnownPairs`.

* :mod:`.distributed` — all-gather with gradients across ranks, global ids and log Q, the
  ring sigmoid loss, a process launcher.
* :mod:`.gradcache` — GradCache (exact large-batch gradients in chunks) and the
  checkpointed in-batch loss.
* :mod:`.memory` — a cross-batch memory / momentum queue with log Q and staleness.
* :mod:`.mining` — hard-negative mining over the catalogue with faiss (optional extra), in
  steps: search → exclusion_mask → survivors → choose_negatives → candidates.
"""
