"""Hard-negative mining from the whole catalogue with an ANN index (chapter 8).

A *mined* negative for a query ``x`` is an item the current (or a recent) model scores
highly for ``x`` that is not one of ``x``'s positives. Finding them means a top-k search
over the whole catalogue for every query of the batch, which is what an approximate
nearest-neighbour (ANN) index is for. :class:`HardNegativeMiner` wraps
`faiss <https://github.com/facebookresearch/faiss>`_ (``faiss-cpu``, imported lazily):

* ``index="flat"``: ``faiss.IndexFlatIP``, exact inner-product search (the reference);
* ``index="hnsw"``: ``faiss.IndexHNSWFlat`` with the inner-product metric, a graph index
  (Malkov & Yashunin 2018): fast queries, approximate, recall set by ``ef_search``;
* ``index="ivf"``: ``faiss.IndexIVFFlat``, ``nlist`` k-means cells of which ``nprobe``
  are scanned per query;
* ``index="torch"``: exact ``torch.topk`` over ``queries @ items.T`` on the tensors' own
  device, no faiss needed (:func:`brute_force_top_k`).

**What is mined.** For each query row, the candidates are the catalogue sorted by score
``s(x, y) = u(x)·v(y)``, with the row's positives (by id) and any known positives (a
:class:`KnownPositives` table, e.g. every movie a user rated) removed first. Ranks count
the remaining candidates from 0 (the hardest). A candidate is kept when

* its rank lies in ``[range_min, range_max)`` (sentence-transformers'
  ``mine_hard_negatives`` names: skip the ``range_min`` hardest, look no further than
  ``range_max``);
* its score is at most ``max_score`` (an absolute ceiling);
* its score is below ``s⁺ − relative_margin · |s⁺|`` with ``s⁺ = s(x, y⁺)`` —
  NV-Retriever's positive-aware "TopK-PercPos" filter (Moreira et al. 2024), which keeps
  negatives below 95% of a (positive) teacher score with ``relative_margin = 0.05``. Written
  with ``|s⁺|`` the rule is the same for ``s⁺ > 0`` and still means "clearly below the
  positive" when ``s⁺ < 0`` (where ``(1 − m) · s⁺`` would lie *above* it); it is unchanged
  when every score is multiplied by a positive constant (a temperature). And below
  ``s⁺ − absolute_margin`` ("TopK-MarginPos", a margin in score units). ``y⁺`` is the
  row's first positive id. Both rules only keep something if the search reaches below the
  positive: when many items outscore it, pass a ``range_max`` (or ``fetch``) deep enough.

Of the kept candidates, ``num_negatives`` are returned per row: the hardest
(``sampling="top"``) or a uniform random subset (``sampling="random"``). Rows with too few
survivors are padded with id ``-1`` and ``valid=False``.

**Refreshing the index (ANCE).** The item embeddings change as the model trains, so an
index built at step ``t₀`` returns the negatives of a *stale* model. Xiong et al. (2021,
ANCE) rebuild it asynchronously every so many steps; :meth:`HardNegativeMiner.maybe_refresh`
rebuilds it when ``refresh_every`` steps have passed since the last build, and
:attr:`HardNegativeMiner.built_at` says how stale it is.

**Mined negatives in the loss.** They enter the package's candidate contract as extra
candidate rows (:func:`append_mined`): ``candidate_ids = cat([positive_ids, mined_ids])``,
``log_q = cat([log_q_batch, log_q_mined])``. There is no proposal distribution behind a
mined negative: it is a deterministic function of the query and of the index, included
with probability 1 for its own row and 0 for almost every other item, so no ``log Q``
makes a loss with mined negatives an unbiased estimate of the full softmax. The package
uses ``log_q = 0`` for mined columns (an expected count of 1): a row's own mined items are
then *exact* terms of its partition function, and the in-batch columns (with their own
``log Q``) estimate the rest. Chapter 8 derives this and measures what it costs.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from candidate_sampling._validate import (
    check_int_range,
    check_same,
    check_tensor,
)

__all__ = [
    "INDEX_KINDS",
    "HardNegativeMiner",
    "KnownPositives",
    "MinedCandidates",
    "MinedNegatives",
    "append_mined",
    "brute_force_top_k",
    "import_faiss",
]

INDEX_KINDS = ("flat", "hnsw", "ivf", "torch")
SAMPLING = ("top", "random")


def import_faiss():
    """Import ``faiss`` (package ``faiss-cpu``) or fail with a message saying how to get it."""
    try:
        import faiss  # optional dependency, imported on first use
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError(
            "candidate_sampling.scale.mining needs faiss for index='flat', 'hnsw' or 'ivf': "
            "pip install faiss-cpu (or use index='torch' for exact search without faiss)"
        ) from err
    return faiss


def brute_force_top_k(
    queries: torch.Tensor, items: torch.Tensor, k: int, *, chunk_size: int = 1024
) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact top-``k`` inner products: ``torch.topk(queries @ items.T, k)``, in query chunks.

    ``queries``: (B, d); ``items``: (N, d), on the same device. Returns ``(scores, positions)``,
    each (B, k), sorted by decreasing score; ``positions`` index the rows of ``items``.
    Memory is ``O(chunk_size · N)``. The reference every ANN index is measured against.
    """
    check_tensor("queries", queries, ("B", "d"), floating=True)
    check_tensor("items", items, ("N", "d"), floating=True)
    check_same("embedding size d", queries=queries.shape[1], items=items.shape[1])
    check_int_range("k", k, 1, items.shape[0])
    check_int_range("chunk_size", chunk_size, 1)
    scores, positions = [], []
    items_t = items.T
    for start in range(0, queries.shape[0], chunk_size):
        s, p = torch.topk(queries[start : start + chunk_size] @ items_t, k, dim=1)
        scores.append(s)
        positions.append(p)
    return torch.cat(scores), torch.cat(positions)


class KnownPositives:
    """A table of known (row key, item) pairs, e.g. every (user, movie) rating.

    ``keys``: (n,) and ``items``: (n,) integer tensors, one pair per known positive;
    ``num_items``: the catalogue size. Each pair is stored as ``key · num_items + item`` in
    a sorted int64 tensor, so :meth:`mask` answers "is this (row, candidate) pair known?"
    for a whole (B, C) block with one ``torch.searchsorted``, on any device. When
    ``(max key + 1) · num_items`` is at most ``dense_limit`` (default 2^26 entries, 64 MiB)
    a dense bool matrix is kept as well and :meth:`mask` is a plain lookup.
    """

    def __init__(
        self,
        keys: torch.Tensor,
        items: torch.Tensor,
        *,
        num_items: int,
        dense_limit: int = 2**26,
    ) -> None:
        check_tensor("keys", keys, ("n",), floating=False, allow_empty=True)
        check_tensor("items", items, ("n",), floating=False, allow_empty=True)
        check_same("number of pairs n", keys=keys.shape[0], items=items.shape[0])
        check_int_range("num_items", num_items, 1)
        if items.numel() and (int(items.min()) < 0 or int(items.max()) >= num_items):
            raise ValueError(f"items must lie in [0, {num_items}) (num_items)")
        if keys.numel() and int(keys.min()) < 0:
            raise ValueError("keys must be >= 0")
        self.num_items = num_items
        self.pairs = torch.unique(keys.long() * num_items + items.long())  # sorted
        row_keys, counts = torch.unique(self.pairs // num_items, return_counts=True)
        self._row_keys, self._row_counts = row_keys, counts
        self._dense = None
        num_keys = int(keys.max()) + 1 if keys.numel() else 0
        if 0 < num_keys * num_items <= dense_limit:
            dense = torch.zeros(num_keys * num_items, dtype=torch.bool, device=self.pairs.device)
            dense[self.pairs] = True
            self._dense = dense.view(num_keys, num_items)

    def to(self, device: torch.device | str) -> KnownPositives:
        """Move the table to ``device`` (returns ``self``)."""
        self.pairs = self.pairs.to(device)
        self._row_keys = self._row_keys.to(device)
        self._row_counts = self._row_counts.to(device)
        if self._dense is not None:
            self._dense = self._dense.to(device)
        return self

    def counts(self, row_keys: torch.Tensor) -> torch.Tensor:
        """(B,) number of known positives of each row key (0 for keys never seen)."""
        rk = row_keys.to(self._row_keys.device).long()
        pos = torch.searchsorted(self._row_keys, rk).clamp(max=max(len(self._row_keys) - 1, 0))
        if len(self._row_keys) == 0:
            return torch.zeros_like(rk)
        found = self._row_keys[pos] == rk
        return torch.where(found, self._row_counts[pos], torch.zeros_like(rk))

    def mask(self, row_keys: torch.Tensor, candidate_ids: torch.Tensor) -> torch.Tensor:
        """(B, C) bool: True where ``(row_keys[i], candidate_ids[.., j])`` is a known pair.

        ``row_keys``: (B,); ``candidate_ids``: (C,) shared or (B, C) per row. Ids outside
        ``[0, num_items)`` (e.g. the ``-1`` padding of :class:`MinedNegatives`) are never
        known.
        """
        check_tensor("row_keys", row_keys, ("B",), floating=False)
        device = self.pairs.device
        rk = row_keys.to(device).long()
        cand = candidate_ids.to(device).long()
        if cand.dim() == 1:
            cand = cand[None, :].expand(rk.shape[0], -1)
        check_tensor("candidate_ids", cand, (rk.shape[0], "C"), floating=False, allow_empty=True)
        inside = (cand >= 0) & (cand < self.num_items)
        if self._dense is not None:
            known_row = (rk >= 0) & (rk < self._dense.shape[0])
            rows = rk.clamp(0, self._dense.shape[0] - 1)[:, None].expand_as(cand)
            hit = self._dense[rows, cand.clamp(0, self.num_items - 1)]
            return hit & inside & known_row[:, None]
        query = rk[:, None] * self.num_items + cand.clamp(0, self.num_items - 1)
        if self.pairs.numel() == 0:
            return torch.zeros_like(inside)
        pos = torch.searchsorted(self.pairs, query.reshape(-1)).clamp(max=len(self.pairs) - 1)
        hit = (self.pairs[pos] == query.reshape(-1)).reshape(query.shape)
        return hit & inside


@dataclass
class MinedNegatives:
    """Per-row mined negatives; every tensor is (B, num_negatives).

    ``ids``: item ids (``-1`` where a row has fewer survivors than ``num_negatives``);
    ``scores``: their scores under the index's embeddings (``-inf`` where invalid);
    ``ranks``: their rank among the row's non-positive candidates (0 = hardest);
    ``valid``: which entries are real negatives. ``built_at``: the training step at which
    the index that produced them was built (``None`` if unknown).
    """

    ids: torch.Tensor
    scores: torch.Tensor
    ranks: torch.Tensor
    valid: torch.Tensor
    built_at: int | None = None

    def flat(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The valid negatives as ``(ids (M,), rows (M,))``, row-major."""
        rows = torch.arange(self.ids.shape[0], device=self.ids.device)[:, None]
        rows = rows.expand_as(self.ids)
        return self.ids[self.valid], rows[self.valid]


@dataclass
class MinedCandidates:
    """Mined negatives in the candidate contract (see :func:`append_mined`).

    ``candidate_ids``: (B + M,) = ``cat([positive_ids, mined_ids])``; ``mined_ids``: (M,);
    ``log_q``: (B + M,) or ``None``; ``mask``: (B, B + M) bool or ``None`` — True where a
    row must not see a column (another row's mined negative when ``share=False``).
    """

    candidate_ids: torch.Tensor
    mined_ids: torch.Tensor
    mined_rows: torch.Tensor
    log_q: torch.Tensor | None
    mask: torch.Tensor | None


def append_mined(
    positive_ids: torch.Tensor,
    mined: MinedNegatives,
    *,
    positive_log_q: torch.Tensor | None = None,
    mined_log_q: float = 0.0,
    share: bool = True,
) -> MinedCandidates:
    """Put mined negatives after the batch's positives: the candidate contract of chapter 5.

    ``candidates = cat([positives, v(mined_ids)])`` (the caller embeds ``mined_ids`` with the
    *current* item tower), ``candidate_ids = cat([positive_ids, mined_ids])`` and
    ``log_q = cat([positive_log_q, mined_log_q])``. ``positive_ids``: (B,); ``mined``: the
    miner's output for the same B rows; ``positive_log_q``: (B,) log expected count of the
    in-batch columns (``None``: no correction anywhere); ``mined_log_q``: the log expected
    count given to every mined column — 0 by default, a count of 1, which makes a row's own
    mined items exact terms of its partition function (module docstring). With
    ``share=True`` (default, as sentence-transformers does with explicit negatives) every
    row sees every row's mined negatives; with ``share=False`` each row sees only its own
    (``mask`` hides the others). Chapter 8.
    """
    check_tensor("positive_ids", positive_ids, ("B",), floating=False)
    check_same("batch size B", positive_ids=positive_ids.shape[0], mined=mined.ids.shape[0])
    if not math.isfinite(mined_log_q):
        raise ValueError(f"mined_log_q must be finite, got {mined_log_q!r}")
    ids, rows = mined.flat()
    ids, rows = ids.to(positive_ids.device), rows.to(positive_ids.device)
    batch = positive_ids.shape[0]
    candidate_ids = torch.cat([positive_ids, ids.to(positive_ids.dtype)])
    log_q = None
    if positive_log_q is not None:
        check_tensor("positive_log_q", positive_log_q, (batch,), floating=True)
        log_q = torch.cat([positive_log_q, positive_log_q.new_full((ids.shape[0],), mined_log_q)])
    mask = None
    if not share:
        owner = torch.cat([torch.full((batch,), -1, device=rows.device), rows])
        mask = (owner[None, :] >= 0) & (
            owner[None, :] != torch.arange(batch, device=rows.device)[:, None]
        )
    return MinedCandidates(candidate_ids, ids, rows, log_q, mask)


class HardNegativeMiner:
    """Mine per-query hard negatives from the whole catalogue with a faiss (or torch) index.

    Options (keyword-only): ``index`` — one of :data:`INDEX_KINDS` (module docstring);
    ``hnsw_m`` (graph degree, 32), ``ef_construction`` (40) and ``ef_search`` (128) for HNSW;
    ``nlist`` (cells, default ``≈ 4√N``) and ``nprobe`` (cells scanned per query, 16) for
    IVF; ``refresh_every``: rebuild the index every so many steps in
    :meth:`maybe_refresh` (``None``: build once); ``num_threads``: faiss's OpenMP threads
    (``None`` leaves faiss's default). The index holds float32 copies of the item
    embeddings on the CPU (``index="torch"`` keeps them on their device).

    Typical use in a training loop (ANCE)::

        miner = HardNegativeMiner(index="hnsw", refresh_every=100)
        for step, batch in enumerate(batches):
            miner.maybe_refresh(step, lambda: model.item_tower.all_items())
            mined = miner.mine(u.detach(), num_negatives=4, positive_ids=ids,
                               relative_margin=0.05)

    Chapter 8.
    """

    def __init__(
        self,
        *,
        index: str = "hnsw",
        hnsw_m: int = 32,
        ef_construction: int = 40,
        ef_search: int = 128,
        nlist: int | None = None,
        nprobe: int = 16,
        refresh_every: int | None = None,
        num_threads: int | None = None,
    ) -> None:
        if index not in INDEX_KINDS:
            raise ValueError(f"index must be one of {INDEX_KINDS}, got {index!r}")
        check_int_range("hnsw_m", hnsw_m, 2)
        check_int_range("ef_construction", ef_construction, 1)
        check_int_range("ef_search", ef_search, 1)
        if nlist is not None:
            check_int_range("nlist", nlist, 1)
        check_int_range("nprobe", nprobe, 1)
        if refresh_every is not None:
            check_int_range("refresh_every", refresh_every, 1)
        if num_threads is not None:
            check_int_range("num_threads", num_threads, 1)
        self.kind = index
        self.hnsw_m, self.ef_construction, self.ef_search = hnsw_m, ef_construction, ef_search
        self.nlist, self.nprobe = nlist, nprobe
        self.refresh_every = refresh_every
        self.num_threads = num_threads
        self.index = None
        self.item_ids: torch.Tensor | None = None
        self.built_at: int | None = None
        self.num_builds = 0
        self._items: torch.Tensor | None = None  # index="torch" only
        self._sorted_ids: torch.Tensor | None = None
        self._id_order: torch.Tensor | None = None
        self._quantizer = None
        self.dim: int | None = None

    # ------------------------------------------------------------------ building
    def build(
        self,
        item_embeddings: torch.Tensor,
        item_ids: torch.Tensor | None = None,
        *,
        step: int | None = None,
    ) -> HardNegativeMiner:
        """(Re)build the index over ``item_embeddings`` (N, d); ``item_ids`` (N,) default arange.

        ``step`` records when it was built (for :attr:`built_at`). Returns ``self``.
        """
        check_tensor("item_embeddings", item_embeddings, ("N", "d"), floating=True)
        n, d = item_embeddings.shape
        if item_ids is None:
            item_ids = torch.arange(n)
        check_tensor("item_ids", item_ids, (n,), floating=False)
        emb = item_embeddings.detach()
        if self.kind == "torch":
            self._items = emb
            self.index = None
        else:
            faiss = import_faiss()
            if self.num_threads is not None:
                faiss.omp_set_num_threads(self.num_threads)
            x = np.ascontiguousarray(emb.float().cpu().numpy())
            if self.kind == "flat":
                index = faiss.IndexFlatIP(d)
            elif self.kind == "hnsw":
                index = faiss.IndexHNSWFlat(d, self.hnsw_m, faiss.METRIC_INNER_PRODUCT)
                index.hnsw.efConstruction = self.ef_construction
                index.hnsw.efSearch = self.ef_search
            else:
                nlist = self.nlist or max(1, min(n // 39, round(4 * math.sqrt(n))))
                quantizer = faiss.IndexFlatIP(d)
                index = faiss.IndexIVFFlat(quantizer, d, nlist, faiss.METRIC_INNER_PRODUCT)
                index.train(x)
                index.nprobe = min(self.nprobe, nlist)
                index.make_direct_map()
                self._quantizer = quantizer  # keep the quantizer alive with the index
            index.add(x)
            self.index = index
            self._items = None
        ids = item_ids.detach().cpu().long()
        self.item_ids = ids
        self.dim = d
        order = torch.argsort(ids)
        self._sorted_ids, self._id_order = ids[order], order
        self.built_at = step
        self.num_builds += 1
        return self

    def maybe_refresh(
        self, step: int, item_embeddings: Callable[[], torch.Tensor] | torch.Tensor, item_ids=None
    ) -> bool:
        """Rebuild the index if it was never built or ``refresh_every`` steps have passed.

        ``item_embeddings``: a tensor (N, d) or a function returning one (called only when a
        rebuild happens, so the catalogue is re-embedded only then). Returns True if it
        rebuilt. With ``refresh_every=None`` the index is built once and never refreshed.
        """
        check_int_range("step", step, 0)
        due = self.index is None and self._items is None
        if not due and self.refresh_every is not None and self.built_at is not None:
            due = step - self.built_at >= self.refresh_every
        if due:
            emb = item_embeddings() if callable(item_embeddings) else item_embeddings
            self.build(emb, item_ids, step=step)
        return due

    @property
    def num_items(self) -> int:
        return 0 if self.item_ids is None else int(self.item_ids.shape[0])

    def memory_bytes(self) -> int:
        """Bytes the index holds (faiss's serialised size; the tensor's size for ``torch``)."""
        if self.kind == "torch":
            return 0 if self._items is None else self._items.numel() * self._items.element_size()
        if self.index is None:
            return 0
        faiss = import_faiss()
        return int(faiss.serialize_index(self.index).nbytes)

    def _check_built(self) -> None:
        if self.item_ids is None:
            raise ValueError("the index is empty: call build() or maybe_refresh() first")

    def _positions_of(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Index positions of item ``ids`` (any shape) and whether each id is in the index."""
        flat = ids.reshape(-1).cpu().long().contiguous()
        pos = torch.searchsorted(self._sorted_ids, flat).clamp(max=len(self._sorted_ids) - 1)
        found = self._sorted_ids[pos] == flat
        return self._id_order[pos].reshape(ids.shape), found.reshape(ids.shape)

    def item_vectors(self, ids: torch.Tensor) -> torch.Tensor:
        """The index's (possibly stale) float32 vectors of item ``ids`` (B,) → (B, d), on CPU."""
        self._check_built()
        positions, found = self._positions_of(ids)
        if not bool(found.all()):
            raise ValueError("ids must all be in the index")
        if self.kind == "torch":
            return self._items[positions.to(self._items.device)].float().cpu()
        x = self.index.reconstruct_batch(np.ascontiguousarray(positions.numpy(), dtype=np.int64))
        return torch.from_numpy(np.asarray(x))

    # ------------------------------------------------------------------ searching
    def search(self, queries: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The index's top-``k`` by inner product: ``(scores, ids)``, each (B, k), best first.

        Results come back on ``queries``' device; ids are item ids (``-1`` where the index
        returned fewer than ``k``, which HNSW and IVF can do), scores ``-inf`` there.
        """
        self._check_built()
        check_tensor("queries", queries, ("B", self.dim), floating=True)
        check_int_range("k", k, 1, self.num_items)
        q = queries.detach()
        if self.kind == "torch":
            scores, positions = brute_force_top_k(q.to(self._items.dtype), self._items, k)
            ids = self.item_ids.to(positions.device)[positions]
            return scores.to(queries.device), ids.to(queries.device)
        x = np.ascontiguousarray(q.float().cpu().numpy())
        d_np, i_np = self.index.search(x, k)
        positions = torch.from_numpy(i_np)
        scores = torch.from_numpy(d_np).float()
        missing = positions < 0
        ids = torch.where(
            missing, torch.full_like(positions, -1), self.item_ids[positions.clamp(min=0)]
        )
        scores = scores.masked_fill(missing, float("-inf"))
        return scores.to(queries.device), ids.to(queries.device)

    def mine(
        self,
        queries: torch.Tensor,
        *,
        num_negatives: int,
        positive_ids: torch.Tensor | None = None,
        known: KnownPositives | None = None,
        row_keys: torch.Tensor | None = None,
        range_min: int = 0,
        range_max: int | None = None,
        max_score: float | None = None,
        relative_margin: float | None = None,
        absolute_margin: float | None = None,
        positive_scores: torch.Tensor | None = None,
        sampling: str = "top",
        generator: torch.Generator | None = None,
        fetch: int | None = None,
    ) -> MinedNegatives:
        """Per-row hard negatives from the index (module docstring for the rules).

        ``queries``: (B, d) query embeddings (detached); ``num_negatives``: how many per row;
        ``positive_ids``: (B,) or (B, T) ids removed from the row's candidates (``-1``
        pads); ``known`` with ``row_keys`` (B,): a :class:`KnownPositives` table whose pairs
        are removed too (e.g. every movie the user rated); ``range_min`` / ``range_max``:
        the rank window among the remaining candidates (``range_max`` defaults to
        ``range_min + num_negatives``); ``max_score``: absolute score ceiling;
        ``relative_margin``: keep only scores ``< s⁺ − relative_margin · |s⁺|`` (for
        ``s⁺ > 0``: below ``(1 − relative_margin) · s⁺``; any sign, any positive scale);
        ``absolute_margin``: keep only scores ``< s⁺ − absolute_margin``, where ``s⁺`` is
        ``positive_scores`` (B,) or, by default, the query's score against the index's
        vector of ``positive_ids[:, 0]``; ``sampling``: ``"top"`` (hardest first) or
        ``"random"`` (uniform among the survivors, with ``generator``); ``fetch``: how many
        candidates to ask the index for — by default ``range_max`` plus the largest number
        of ids a row may have to drop (its positives and known positives), so that the
        window is exact; a smaller ``fetch`` bounds the search cost (an over-fetch factor,
        as production miners use) and rows whose window it cannot fill are padded.
        Returns :class:`MinedNegatives` on ``queries``' device.
        """
        self._check_built()
        check_tensor("queries", queries, ("B", self.dim), floating=True)
        batch = queries.shape[0]
        check_int_range("num_negatives", num_negatives, 1)
        check_int_range("range_min", range_min, 0)
        if range_max is None:
            range_max = range_min + num_negatives
        check_int_range("range_max", range_max, range_min + 1)
        if sampling not in SAMPLING:
            raise ValueError(f"sampling must be one of {SAMPLING}, got {sampling!r}")
        if relative_margin is not None and not 0 <= relative_margin < 1:
            raise ValueError(f"relative_margin must lie in [0, 1), got {relative_margin!r}")
        if absolute_margin is not None and (
            not math.isfinite(absolute_margin) or absolute_margin < 0
        ):
            raise ValueError(f"absolute_margin must be >= 0 and finite, got {absolute_margin!r}")
        if max_score is not None and not math.isfinite(max_score):
            raise ValueError(f"max_score must be finite, got {max_score!r}")
        if (known is None) != (row_keys is None):
            raise ValueError("known and row_keys must be given together")
        pos = None
        if positive_ids is not None:
            if positive_ids.dim() not in (1, 2):
                raise ValueError(
                    f"positive_ids must have shape (B,) or (B, T), got {tuple(positive_ids.shape)}"
                )
            check_tensor(
                "positive_ids",
                positive_ids,
                (batch,) + (None,) * (positive_ids.dim() - 1),
                floating=False,
            )
            pos = positive_ids if positive_ids.dim() == 2 else positive_ids[:, None]
        if row_keys is not None:
            check_tensor("row_keys", row_keys, (batch,), floating=False)
        needs_positive = relative_margin is not None or absolute_margin is not None
        if needs_positive and positive_scores is None:
            if pos is None:
                raise ValueError(
                    "relative_margin / absolute_margin need positive_scores or positive_ids"
                )
            vectors = self.item_vectors(pos[:, 0])
            positive_scores = (queries.detach().float().cpu() * vectors).sum(1)
        if positive_scores is not None:
            check_tensor("positive_scores", positive_scores, (batch,), floating=True)

        # how many to fetch: the window plus everything that may be removed in front of it
        extra = 0 if pos is None else pos.shape[1]
        if known is not None:
            extra += int(known.counts(row_keys).max()) if batch else 0
        if fetch is None:
            fetch = range_max + extra
        check_int_range("fetch", fetch, 1)
        fetch = min(self.num_items, fetch)
        scores, ids = self.search(queries, fetch)
        device = scores.device
        excluded = ids < 0
        if pos is not None:
            excluded |= (ids[:, :, None] == pos.to(device)[:, None, :]).any(-1)
        if known is not None:
            excluded |= known.mask(row_keys, ids).to(device)
        # rank among the non-excluded candidates, hardest = 0 (faiss returns sorted lists)
        order = torch.argsort(scores, dim=1, descending=True, stable=True)
        scores, ids, excluded = (
            scores.gather(1, order),
            ids.gather(1, order),
            excluded.gather(1, order),
        )
        ranks = torch.cumsum((~excluded).long(), dim=1) - 1
        keep = ~excluded & (ranks >= range_min) & (ranks < range_max)
        if max_score is not None:
            keep &= scores <= max_score
        if positive_scores is not None:
            s_pos = positive_scores.to(device=device, dtype=scores.dtype)[:, None]
            if relative_margin is not None:
                keep &= scores < s_pos - relative_margin * s_pos.abs()
            if absolute_margin is not None:
                keep &= scores < s_pos - absolute_margin
        # choose num_negatives survivors per row: a sort key, smallest first
        columns = torch.arange(fetch, device=device, dtype=torch.float64)[None, :].expand(batch, -1)
        if sampling == "random":
            key = torch.rand(
                batch,
                fetch,
                generator=generator,
                dtype=torch.float64,
                device=generator.device if generator is not None else "cpu",
            )
            key = key.to(device)
        else:
            key = columns
        key = torch.where(keep, key, torch.full_like(key, float("inf")))
        take = min(num_negatives, fetch)
        chosen = torch.topk(key, take, dim=1, largest=False, sorted=True).indices
        if sampling == "random":  # present the random subset hardest first
            chosen = torch.sort(chosen, dim=1).values
        valid = keep.gather(1, chosen)
        out_ids = torch.where(valid, ids.gather(1, chosen), torch.full_like(chosen, -1))
        out_scores = torch.where(
            valid, scores.gather(1, chosen), torch.full_like(scores[:, :take], float("-inf"))
        )
        out_ranks = torch.where(valid, ranks.gather(1, chosen), torch.full_like(chosen, -1))
        if take < num_negatives:  # a catalogue smaller than the request: pad
            pad = num_negatives - take
            out_ids = torch.cat([out_ids, out_ids.new_full((batch, pad), -1)], 1)
            out_scores = torch.cat(
                [out_scores, out_scores.new_full((batch, pad), float("-inf"))], 1
            )
            out_ranks = torch.cat([out_ranks, out_ranks.new_full((batch, pad), -1)], 1)
            valid = torch.cat([valid, valid.new_zeros((batch, pad))], 1)
        return MinedNegatives(out_ids, out_scores, out_ranks, valid, self.built_at)
