"""Scale: more negatives than one batch holds, and harder ones (chapters 7–8).

* :mod:`.distributed` — all-gather with gradients across ranks, global ids and log Q, the
  ring sigmoid loss, a process launcher.
* :mod:`.gradcache` — GradCache (exact large-batch gradients in chunks) and the
  checkpointed in-batch loss.
* :mod:`.memory` — a cross-batch memory / momentum queue with log Q and staleness.
* :mod:`.mining` — hard-negative mining over the catalogue with faiss (optional extra).
"""
