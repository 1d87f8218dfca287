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
:class:`~candidate_sampling.eval.KnownPairs` table, e.g. every movie a user rated) removed
first. Ranks count
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
its ``built_at`` attribute says how stale it is.

**The steps.** :meth:`HardNegativeMiner.mine` is the pipeline's four steps, each public:
search the index (:meth:`HardNegativeMiner.search`), filter the row's positives and known
items (:func:`exclusion_mask`), apply the rules and select (:func:`survivors`,
:func:`choose_negatives`), and build the loss's columns
(:meth:`MinedNegatives.candidates`).

**Mined negatives in the loss.** They enter the package's candidate contract as one more
:class:`~candidate_sampling.CandidateSet` (:meth:`MinedNegatives.candidates`), after the
batch's positives: ``in_batch_softmax_loss(u, positives, mined.candidates(item_tower))``,
each part with its own log Q. There is no proposal distribution behind a
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
    check_bool,
    check_bool_mask,
    check_choice,
    check_finite,
    check_generator,
    check_ids,
    check_int_range,
    check_nonnegative,
    check_real,
    check_same,
    check_tensor,
    common_float_dtype,
    get_validate_args,
)
from candidate_sampling.candidates import CandidateSet
from candidate_sampling.device import float64_or_float32
from candidate_sampling.eval.known_pairs import KnownPairs, check_known

__all__ = [
    "INDEX_KINDS",
    "HardNegativeMiner",
    "MinedNegatives",
    "brute_force_top_k",
    "choose_negatives",
    "default_hnsw_m",
    "exclusion_mask",
    "import_faiss",
    "survivors",
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
    queries: torch.Tensor, item_embeddings: torch.Tensor, k: int, *, chunk_size: int = 1024
) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact top-``k`` inner products: ``torch.topk(queries @ item_embeddings.T, k)``, in chunks.

    ``queries``: (B, d); ``item_embeddings``: (N, d), on the same device. Returns
    ``(scores, positions)``, each (B, k), sorted by decreasing score; ``positions`` index the
    rows of ``item_embeddings``. Memory is ``O(chunk_size · N)``. The reference every ANN
    index is measured against. NaN inputs raise (``topk`` would rank NaN first). Scores
    are computed and returned in ``common_float_dtype`` of the two inputs (float32 for
    float16 / bfloat16, whose scores would overflow and tie; mixed dtypes promoted).
    """
    check_tensor("queries", queries, ("B", "d"), floating=True)
    check_tensor("item_embeddings", item_embeddings, ("N", "d"), floating=True)
    check_same(
        "embedding size d", queries=queries.shape[1], item_embeddings=item_embeddings.shape[1]
    )
    check_int_range("k", k, 1, item_embeddings.shape[0])
    check_int_range("chunk_size", chunk_size, 1)
    check_finite("queries", queries)
    check_finite("item_embeddings", item_embeddings)
    dtype = common_float_dtype(queries=queries, item_embeddings=item_embeddings)
    return _top_k(queries.to(dtype), item_embeddings.to(dtype), k, chunk_size)


def _top_k(
    queries: torch.Tensor, item_embeddings: torch.Tensor, k: int, chunk_size: int = 1024
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`brute_force_top_k` without its checks (the miner checked its inputs once)."""
    scores, positions = [], []
    items_t = item_embeddings.T
    for start in range(0, queries.shape[0], chunk_size):
        s, p = torch.topk(queries[start : start + chunk_size] @ items_t, k, dim=1)
        scores.append(s)
        positions.append(p)
    return torch.cat(scores), torch.cat(positions)


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

    def __post_init__(self) -> None:
        # a hand-built set of mined negatives is checked as choose_negatives makes one
        check_tensor("ids", self.ids, ("B", "k"), floating=False, allow_empty=True)
        shape = tuple(self.ids.shape)
        check_tensor("scores", self.scores, shape, floating=True, allow_empty=True)
        check_tensor("ranks", self.ranks, shape, floating=False, allow_empty=True)
        check_tensor("valid", self.valid, shape, allow_empty=True)
        if self.valid.dtype != torch.bool:
            raise ValueError(f"valid must be a bool tensor, got {self.valid.dtype}")
        if self.built_at is not None:
            check_int_range("built_at", self.built_at, 0)
        if get_validate_args() and self.ids.numel():
            ok = ((self.ids >= 0) & (self.ranks >= 0)) | ~self.valid
            if not bool(ok.all()):
                raise ValueError(
                    "ids and ranks must be >= 0 where valid is True (-1 pads invalid entries)"
                )

    @classmethod
    def _unchecked(cls, ids, scores, ranks, valid, built_at=None) -> MinedNegatives:
        """Mined negatives made by :func:`choose_negatives` (right by construction)."""
        out = object.__new__(cls)
        out.ids, out.scores, out.ranks, out.valid, out.built_at = (
            ids, scores, ranks, valid, built_at
        )
        return out

    def flat(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The valid negatives as ``(ids (M,), rows (M,))``, row-major."""
        rows = torch.arange(self.ids.shape[0], device=self.ids.device)[:, None]
        rows = rows.expand_as(self.ids)
        return self.ids[self.valid], rows[self.valid]

    def candidates(
        self,
        classes: torch.Tensor | Callable[[torch.Tensor], torch.Tensor],
        *,
        log_q: float = 0.0,
        share: bool = True,
    ) -> CandidateSet:
        """Step 4, build: the valid mined negatives as a :class:`~candidate_sampling.CandidateSet`.

        ``classes``: the *current* item table (|V|, d) or item encoder (ids → (n, d)), so
        the loss trains the item tower through the mined columns (the index's vectors are
        stale). The M valid negatives become M columns, row-major, each with
        ``log_q`` — 0 by default, an expected count of 1: a row's own mined items are
        then *exact* terms of its partition function (module docstring). With
        ``share=True`` (default, as sentence-transformers does with explicit negatives)
        every row sees every row's mined negatives; with ``share=False`` each row sees only
        its own (a per-row (B, M) mask, True = valid). Source ``"mined"``: a softmax removes
        a mined copy of a row's positive by default. Use as the loss's ``candidates``:
        ``in_batch_softmax_loss(u, positives, mined.candidates(item_tower))``. Chapter 8.
        """
        if not isinstance(log_q, (int, float)) or isinstance(log_q, bool):
            raise ValueError(f"log_q must be a finite number, got {log_q!r}")
        if not math.isfinite(log_q):
            raise ValueError(f"log_q must be finite, got {log_q!r}")
        share = check_bool("share", share)
        ids, rows = self.flat()
        mask = None
        if not share:
            owner = torch.arange(self.ids.shape[0], device=rows.device)[:, None]
            mask = rows[None, :] == owner  # (B, M): row i keeps its own negatives
        out = CandidateSet.from_ids(ids, classes, log_q=float(log_q), source="mined")
        return out if mask is None else out.with_mask(mask.to(out.device))


def exclusion_mask(
    ids: torch.Tensor,
    *,
    positive_ids: torch.Tensor | None = None,
    known: KnownPairs | None = None,
    user_index: torch.Tensor | None = None,
) -> torch.Tensor:
    """Step 2, filter: (B, k) bool, True where a searched candidate may not be a negative.

    ``ids``: (B, k) candidate ids from the index (``-1`` where it returned fewer);
    ``positive_ids``: (B, T) ids of each row's positives (``-1`` pads); ``known`` with
    ``user_index`` (B,): a :class:`~candidate_sampling.eval.KnownPairs` of each row's
    known positives (e.g. every movie the user rated). Excluded: padding, a row's
    positives, its known items. On ``ids``' device. ``positive_ids`` may also be (B,).
    Chapter 8.
    """
    check_tensor("ids", ids, ("B", "k"), floating=False, allow_empty=True)
    if get_validate_args() and ids.numel() and int(ids.min()) < -1:
        raise ValueError(f"ids must be >= -1 (-1 pads), got {int(ids.min())}")
    positive_ids = _check_positive_ids(positive_ids, ids.shape[0])
    if (known is None) != (user_index is None):
        raise ValueError("known and user_index must be given together")
    if known is not None:
        check_known(known)
        check_tensor("user_index", user_index, (ids.shape[0],), floating=False, allow_empty=True)
    return _exclusion_mask(ids, positive_ids, known, user_index)


def _exclusion_mask(
    ids: torch.Tensor,
    positive_ids: torch.Tensor | None,
    known: KnownPairs | None,
    user_index: torch.Tensor | None,
) -> torch.Tensor:
    """:func:`exclusion_mask` of checked arguments (``positive_ids`` (B, T) or None)."""
    excluded = ids < 0
    if positive_ids is not None:
        excluded |= (ids[:, :, None] == positive_ids.to(ids.device)[:, None, :]).any(-1)
    if known is not None:
        excluded |= known._mask(user_index, ids).to(ids.device)
    return excluded


def survivors(
    scores: torch.Tensor,
    excluded: torch.Tensor,
    *,
    range_min: int,
    range_max: int,
    max_score: float | None = None,
    relative_margin: float | None = None,
    absolute_margin: float | None = None,
    positive_scores: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Step 3a, the rules: ``(ranks, keep)``, each (B, k), of candidates sorted by score.

    ``scores``: (B, k) sorted best first (as an index returns them); ``excluded``: from
    :func:`exclusion_mask`. ``ranks`` count the non-excluded candidates from 0 (the
    hardest); ``keep`` is True where a candidate passes every rule of the module
    docstring: rank in ``[range_min, range_max)``, score ``<= max_score``, and the
    positive-aware margins against ``positive_scores`` (B,). The scalar options are checked
    here too (cheap), so the step can be called alone. Chapter 8.
    ``relative_margin = 0.05`` is NV-Retriever's TopK-PercPos filter.
    """
    check_tensor("scores", scores, ("B", "k"), floating=True)
    check_bool_mask("excluded", excluded, tuple(scores.shape))
    check_int_range("range_min", range_min, 0)
    check_int_range("range_max", range_max, range_min + 1)
    _check_rules(max_score, relative_margin, absolute_margin)
    if (relative_margin is not None or absolute_margin is not None) and positive_scores is None:
        raise ValueError("relative_margin / absolute_margin need positive_scores")
    if positive_scores is not None:
        check_tensor("positive_scores", positive_scores, (scores.shape[0],), floating=True)
        check_finite("positive_scores", positive_scores)  # NaN would drop every candidate
    rules = {
        "max_score": max_score,
        "relative_margin": relative_margin,
        "absolute_margin": absolute_margin,
        "positive_scores": positive_scores,
    }
    return _survivors(scores, excluded, range_min, range_max, **rules)


def _survivors(scores, excluded, range_min, range_max, **rules) -> tuple:
    """:func:`survivors` of checked arguments; ``rules``: its keyword options."""
    max_score, positive_scores = rules.get("max_score"), rules.get("positive_scores")
    relative_margin, absolute_margin = rules.get("relative_margin"), rules.get("absolute_margin")
    device = scores.device
    ranks = torch.cumsum((~excluded).long(), dim=1) - 1
    keep = ~excluded & (ranks >= range_min) & (ranks < range_max)
    if max_score is not None:
        keep &= scores <= max_score
    # ---- positive-aware margin (NV-Retriever) ----
    if positive_scores is not None:
        s_pos = positive_scores.to(device=device, dtype=scores.dtype)[:, None]
        if relative_margin is not None:
            keep &= scores < s_pos - relative_margin * s_pos.abs()
        if absolute_margin is not None:
            keep &= scores < s_pos - absolute_margin
    # ---- end of the positive-aware margin ----
    return ranks, keep


def choose_negatives(
    scores: torch.Tensor,
    ids: torch.Tensor,
    ranks: torch.Tensor,
    keep: torch.Tensor,
    *,
    num_negatives: int,
    sampling: str = "top",
    generator: torch.Generator | None = None,
    built_at: int | None = None,
) -> MinedNegatives:
    """Step 3b, select: ``num_negatives`` of each row's kept candidates → :class:`MinedNegatives`.

    ``sampling="top"``: the hardest kept ones; ``"random"``: a uniform subset of them
    (``generator`` on any device), presented hardest first. Rows with fewer survivors, and
    a search narrower than ``num_negatives``, are padded with id ``-1``, score ``-inf``,
    rank ``-1`` and ``valid=False``. Inputs (B, k) as from :func:`survivors`. Chapter 8.
    """
    check_tensor("scores", scores, ("B", "k"), floating=True)
    shape = tuple(scores.shape)
    check_tensor("ids", ids, shape, floating=False)
    check_tensor("ranks", ranks, shape, floating=False)
    check_bool_mask("keep", keep, shape)
    check_choice("sampling", sampling, SAMPLING)
    check_int_range("num_negatives", num_negatives, 1)
    check_generator("generator", generator)
    if built_at is not None:
        check_int_range("built_at", built_at, 0)
    if get_validate_args() and not bool((((ids >= 0) & (ranks >= 0)) | ~keep).all()):
        raise ValueError("ids and ranks must be >= 0 where keep is True (-1 pads)")
    return _choose_negatives(scores, ids, ranks, keep, num_negatives, sampling, generator, built_at)


def _choose_negatives(
    scores: torch.Tensor,
    ids: torch.Tensor,
    ranks: torch.Tensor,
    keep: torch.Tensor,
    num_negatives: int,
    sampling: str,
    generator: torch.Generator | None,
    built_at: int | None,
) -> MinedNegatives:
    """:func:`choose_negatives` of checked arguments."""
    batch, fetched = scores.shape
    device = scores.device
    if sampling == "random":
        key = torch.rand(
            batch,
            fetched,
            generator=generator,
            dtype=float64_or_float32(generator.device if generator is not None else "cpu"),
            device=generator.device if generator is not None else "cpu",
        ).to(device=device, dtype=float64_or_float32(device))
    else:
        key = torch.arange(fetched, device=device, dtype=float64_or_float32(device))
        key = key[None, :].expand(batch, -1)
    key = torch.where(keep, key, torch.full_like(key, float("inf")))  # smallest first
    take = min(num_negatives, fetched)
    chosen = torch.topk(key, take, dim=1, largest=False, sorted=True).indices
    if sampling == "random":  # present the random subset hardest first
        chosen = torch.sort(chosen, dim=1).values
    valid = keep.gather(1, chosen)
    pad = num_negatives - take  # a catalogue smaller than the request

    def pick(values: torch.Tensor, fill: float) -> torch.Tensor:
        out = values.gather(1, chosen).masked_fill(~valid, fill)
        return torch.cat([out, out.new_full((batch, pad), fill)], 1) if pad else out

    picked = pick(ids, -1), pick(scores, float("-inf")), pick(ranks, -1)
    valid = torch.cat([valid, valid.new_zeros((batch, pad))], 1) if pad else valid
    return MinedNegatives._unchecked(*picked, valid, built_at)


def default_hnsw_m(num_items: int) -> int:
    """The HNSW graph degree ``hnsw_m=None`` stands for: 32 below 10^6 items, 48 from 10^6.

    Measured at 10^6 embedding-like items, d = 64, one protocol (``efSearch`` the smallest
    with validation recall@100 ≥ 0.95, timed on other queries against exact search; book
    appendix, section 6): M = 32 needs ``efSearch`` 256 for it (7.3× exact search), M = 48
    reaches it at the default ``ef_search`` of 128 (10.5×; M = 64: 7.6×), for a build of
    147 s instead of 92 s (two threads) and a graph half again as large (about 384 against
    256 MB of links). At 10^5 a graph of degree 32 is already at 0.97 with 128.
    """
    check_int_range("num_items", num_items, 0)
    return 48 if num_items >= 10**6 else 32


class HardNegativeMiner:
    """Mine per-query hard negatives from the whole catalogue with a faiss (or torch) index.

    Options (keyword-only): ``index`` — one of :data:`INDEX_KINDS` (module docstring);
    ``hnsw_m`` (graph degree; None, the default: 32 below 10^6 items, 48 from 10^6, the
    measured choice of :func:`default_hnsw_m`), ``ef_construction`` (40) and ``ef_search``
    (128) for HNSW;
    ``nlist`` (cells, default ``≈ 4√N``) and ``nprobe`` (cells scanned per query, 16) for
    IVF; ``refresh_every``: rebuild the index every so many steps in
    :meth:`maybe_refresh` (``None``: build once); ``num_threads``: faiss's OpenMP threads
    (``None`` leaves faiss's default). The index holds float32 copies of the item
    embeddings on the CPU (``index="torch"`` keeps them on their device, in at least
    float32).

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
        hnsw_m: int | None = None,
        ef_construction: int = 40,
        ef_search: int = 128,
        nlist: int | None = None,
        nprobe: int = 16,
        refresh_every: int | None = None,
        num_threads: int | None = None,
    ) -> None:
        check_choice("index", index, INDEX_KINDS)
        if hnsw_m is not None:
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

        ``step`` records when it was built (the ``built_at`` attribute). Returns ``self``.
        """
        check_tensor("item_embeddings", item_embeddings, ("N", "d"), floating=True)
        check_finite("item_embeddings", item_embeddings)  # faiss would index NaN as numbers
        n, d = item_embeddings.shape
        if item_ids is None:
            item_ids = torch.arange(n)
        check_tensor("item_ids", item_ids, (n,), floating=False)
        check_ids("item_ids", item_ids, None)  # -1 marks "no result"
        if step is not None:
            check_int_range("step", step, 0)
        if get_validate_args() and torch.unique(item_ids).shape[0] != n:
            raise ValueError("item_ids must be distinct: one row of item_embeddings per id")
        emb = item_embeddings.detach()
        if self.kind == "torch":
            # at least float32, as faiss: half-precision scores overflow and tie
            self._items = emb if emb.dtype not in (torch.float16, torch.bfloat16) else emb.float()
            self.index = None
        else:
            faiss = import_faiss()
            if self.num_threads is not None:
                faiss.omp_set_num_threads(self.num_threads)
            x = np.ascontiguousarray(emb.float().cpu().numpy())
            if self.kind == "flat":
                index = faiss.IndexFlatIP(d)
            elif self.kind == "hnsw":
                m = self.hnsw_m or default_hnsw_m(n)
                index = faiss.IndexHNSWFlat(d, m, faiss.METRIC_INNER_PRODUCT)
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

    def _check_catalogue(self, known: KnownPairs) -> None:
        """``known`` must be a table of this index's catalogue: of exactly its ``N`` items
        when the index holds ids ``0 … N − 1``, else of at least its largest id + 1."""
        largest = int(self._sorted_ids[-1]) if len(self._sorted_ids) else -1
        if largest == self.num_items - 1:  # distinct ids 0 … N − 1: the whole catalogue
            known.check_catalogue(self.num_items)
        elif known.num_items <= largest:
            raise ValueError(
                f"known must be built for a catalogue holding the index's ids (up to "
                f"{largest}), got known.num_items={known.num_items}"
            )

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
        check_tensor("ids", ids, ("B",), floating=False, allow_empty=True)
        positions, found = self._positions_of(ids)
        if get_validate_args() and not bool(found.all()):
            missing = int(ids.reshape(-1).cpu()[~found.reshape(-1)][0])
            raise ValueError(f"ids must all be in the index, got id {missing}")
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
        check_finite("queries", queries)
        return self._search(queries, k)

    def _search(self, queries: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`search` without its checks (:meth:`mine` checked its inputs once)."""
        q = queries.detach()
        if self.kind == "torch":
            scores, positions = _top_k(q.to(self._items.dtype), self._items, k)
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
        known: KnownPairs | None = None,
        user_index: torch.Tensor | None = None,
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

        The pipeline's steps, each a public function: :meth:`search` the index →
        :func:`exclusion_mask` (positives, known items) → :func:`survivors` (rank window,
        ceilings, positive-aware margins) → :func:`choose_negatives`; then
        :meth:`MinedNegatives.candidates` builds the loss's columns.

        ``queries``: (B, d) query embeddings (detached); ``num_negatives``: how many per row;
        ``positive_ids``: (B,) or (B, T) ids removed from the row's candidates (``-1``
        pads); ``known`` with ``user_index`` (B,): a
        :class:`~candidate_sampling.eval.KnownPairs` whose items are removed too (e.g.
        every movie the user rated); ``range_min`` / ``range_max``: the rank window among
        the remaining candidates (``range_max`` defaults to ``range_min + num_negatives``);
        ``max_score``: absolute score ceiling; ``relative_margin``: keep only scores
        ``< s⁺ − relative_margin · |s⁺|`` (for ``s⁺ > 0``: below
        ``(1 − relative_margin) · s⁺``; any sign, any positive scale);
        ``absolute_margin``: keep only scores ``< s⁺ − absolute_margin``, where ``s⁺`` is
        ``positive_scores`` (B,) or, by default, the query's score against the index's
        vector of ``positive_ids[:, 0]``; ``sampling``: ``"top"`` (hardest first) or
        ``"random"`` (uniform among the survivors, with ``generator``); ``fetch``: how many
        candidates to ask the index for — by default ``range_max`` plus the largest number
        of ids a row may have to drop (its positives and known positives), so that the
        window is exact; a smaller ``fetch`` bounds the search cost (an over-fetch factor,
        as production miners use) and rows whose window it cannot fill are padded.
        Returns :class:`MinedNegatives` on ``queries``' device. NaN queries or scores
        raise (an index turns NaN into arbitrary neighbours).
        ``relative_margin = 0.05`` is NV-Retriever's TopK-PercPos filter.
        """
        self._check_built()
        check_tensor("queries", queries, ("B", self.dim), floating=True)
        check_finite("queries", queries)  # an index turns NaN into arbitrary neighbours
        batch = queries.shape[0]
        check_int_range("num_negatives", num_negatives, 1)
        check_int_range("range_min", range_min, 0)
        if range_max is None:
            range_max = range_min + num_negatives
        check_int_range("range_max", range_max, range_min + 1)
        check_choice("sampling", sampling, SAMPLING)
        _check_rules(max_score, relative_margin, absolute_margin)
        pos = _check_positive_ids(positive_ids, batch)
        if (known is None) != (user_index is None):
            raise ValueError("known and user_index must be given together")
        if known is not None:
            check_known(known)
            self._check_catalogue(known)
            check_tensor("user_index", user_index, (batch,), floating=False)
        check_generator("generator", generator)
        if (relative_margin is not None or absolute_margin is not None) and (
            positive_scores is None
        ):
            if pos is None:
                raise ValueError(
                    "relative_margin / absolute_margin need positive_scores or positive_ids"
                )
            vectors = self.item_vectors(pos[:, 0])
            positive_scores = (queries.detach().float().cpu() * vectors).sum(1)
        if positive_scores is not None:
            check_tensor("positive_scores", positive_scores, (batch,), floating=True)
            check_finite("positive_scores", positive_scores)

        # how many to fetch: the window plus everything that may be removed in front of it
        extra = 0 if pos is None else pos.shape[1]
        if known is not None and batch:
            extra += int(known._counts_of(user_index).max())
        if fetch is None:
            fetch = range_max + extra
        check_int_range("fetch", fetch, 1)
        rules = {
            "max_score": max_score,
            "relative_margin": relative_margin,
            "absolute_margin": absolute_margin,
            "positive_scores": positive_scores,
        }
        if (
            self.kind == "torch"
            and sampling == "top"
            and range_min == 0
            and min(fetch, range_max) >= self.num_items
        ):  # the whole catalogue, every rank in the window: no full sort needed
            return self._mine_whole_catalogue(
                queries, num_negatives, pos, known, user_index, rules
            )
        scores, ids = self._search(queries, min(self.num_items, fetch))  # 1. search
        excluded = _exclusion_mask(ids, pos, known, user_index)
        # rank among the non-excluded candidates, hardest = 0: the indexes return each
        # list best first (-inf pads last), so sorting again is needed only if one did not
        if not bool((scores[:, 1:] <= scores[:, :-1]).all()):
            order = torch.argsort(scores, dim=1, descending=True, stable=True)
            scores, ids, excluded = (t.gather(1, order) for t in (scores, ids, excluded))
        ranks, keep = _survivors(scores, excluded, range_min, range_max, **rules)  # 3. rules
        return _choose_negatives(
            scores, ids, ranks, keep, num_negatives, sampling, generator, self.built_at
        )


    def _mine_whole_catalogue(
        self,
        queries: torch.Tensor,
        num_negatives: int,
        pos: torch.Tensor | None,
        known: KnownPairs | None,
        user_index: torch.Tensor | None,
        rules: dict,
    ) -> MinedNegatives:
        """:meth:`mine` when the search returns every item and the rank window holds them all
        (``index="torch"``, ``sampling="top"``, ``range_min=0``): the same negatives and
        ranks without sorting each row's |V| scores (ties aside). The rules only keep or
        drop a candidate, so they apply to the unsorted scores; the hardest kept ones are a
        top-k, handed to :func:`choose_negatives` best first; a rank is the number of
        non-excluded items that score higher."""
        scores = queries.detach().to(self._items.dtype) @ self._items.T  # (B, N), index order
        ids = self.item_ids.to(scores.device)[None, :].expand(scores.shape[0], -1)
        excluded = _exclusion_mask(ids, pos, known, user_index)
        # survivors' ranks assume sorted scores, but a window of [0, N) keeps every rank
        _, keep = _survivors(scores, excluded, 0, scores.shape[1], **rules)
        top = torch.topk(
            scores.masked_fill(~keep, float("-inf")), min(num_negatives, scores.shape[1]), dim=1
        )
        counted = scores.masked_fill(excluded, float("-inf"))
        # one (B, N) comparison per negative, not a (B, k, N) one: N may be the catalogue
        ranks = torch.stack([(counted > v[:, None]).sum(1) for v in top.values.unbind(1)], 1)
        mined = _choose_negatives(
            top.values,
            ids.gather(1, top.indices),
            ranks,
            keep.gather(1, top.indices),
            num_negatives,
            "top",
            None,
            self.built_at,
        )
        device = queries.device
        return MinedNegatives._unchecked(
            *(t.to(device) for t in (mined.ids, mined.scores, mined.ranks, mined.valid)),
            self.built_at,
        )


def _check_rules(
    max_score: float | None, relative_margin: float | None, absolute_margin: float | None
) -> None:
    if relative_margin is not None and not 0 <= check_real("relative_margin", relative_margin) < 1:
        raise ValueError(f"relative_margin must lie in [0, 1), got {relative_margin!r}")
    if absolute_margin is not None:
        check_nonnegative("absolute_margin", absolute_margin)
    if max_score is not None and not math.isfinite(check_real("max_score", max_score)):
        raise ValueError(f"max_score must be finite, got {max_score!r}")


def _check_positive_ids(positive_ids: torch.Tensor | None, batch: int) -> torch.Tensor | None:
    """(B,) or (B, T) integer ids → (B, T), or None."""
    if positive_ids is None:
        return None
    if not isinstance(positive_ids, torch.Tensor) or positive_ids.dim() not in (1, 2):
        shape = tuple(positive_ids.shape) if isinstance(positive_ids, torch.Tensor) else None
        raise ValueError(f"positive_ids must have shape (B,) or (B, T), got {shape}")
    check_tensor(
        "positive_ids", positive_ids, (batch,) + (None,) * (positive_ids.dim() - 1), floating=False
    )
    if get_validate_args() and positive_ids.numel() and int(positive_ids.min()) < -1:
        raise ValueError(f"positive_ids must be >= -1 (-1 pads), got {int(positive_ids.min())}")
    return positive_ids if positive_ids.dim() == 2 else positive_ids[:, None]
