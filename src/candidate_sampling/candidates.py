"""``CandidateSet``: the columns a batch is scored against, with their ids, log Q and mask.

Every chapter from 4 on is about one object: a set of candidate columns, each with an
embedding, an id, a log expected count (the logQ correction) and a validity flag. Every
source of negatives makes one —

* the batch's own positives (:meth:`CandidateSet.from_batch`, log Q from item
  probabilities or a streaming frequency estimate, :mod:`candidate_sampling.sampling.frequency`),
* a sampler's draw (:meth:`CandidateSet.from_draw`, log Q from the draw, rows gathered
  from a class table or encoded by an item tower),
* any ids with a known correction (:meth:`CandidateSet.from_ids`): a queue, other ranks,
  a miner —

and :meth:`CandidateSet.concat` (or ``a + b``) joins sets column-wise, keeping every
column's own log Q, mask and **source**. Every softmax-family loss consumes one:
``loss(query, positives, candidates)`` (chapter 4 onwards; TF Recommenders'
``Retrieval.call`` is the model: one candidate matrix, one sampling probability, one id
vector).

**Sources and the hit rule.** Each column records how it came to be (``source``, one of
:data:`SOURCES`), because that decides whether a copy of a row's positive among the
columns — an *accidental hit* — must be removed for the loss to be unbiased (chapters 4
and 5 derive it by exact enumeration; the tests repeat it):

* ``"replacement"`` (draws with replacement), ``"batch"`` (the batch's own positives),
  ``"ranks"`` (other devices' positives) and ``"queue"`` (past batches' positives): each
  column is an independent draw whose expected count is its Q, so a copy of the positive
  is an ordinary draw — **keep** it (ranking NCE: the true model is a stationary point
  only with hits kept);
* ``"unique"`` (a draw without replacement), ``"mined"`` (a miner's top ids) and
  ``"fixed"`` (any set of distinct ids; the default of a set built by hand): the columns
  are a *set*, each id at most once with inclusion probability Q — **remove** the hit in a
  softmax (the positive is already its own column), as TensorFlow does.

Losses of the logistic family (NCE, negative sampling, the pairwise sigmoid loss) sum one
term per column, so every column whose log Q is its expected count is right as it is:
they keep hits for every source. Every loss's ``remove_accidental_hits=None`` (the
default) applies this rule per column; True or False overrides it for every column.

Shapes: ``embeddings`` (C, d) floating; ``ids`` (C,) int64, non-negative; ``log_q`` (C,)
shared by the batch, (B, C) per row, or None (no correction); ``mask`` (C,) or (B, C)
bool, **True = valid** (the column takes part), or None (all valid); ``bias`` (C,) an
additive score term per column (TF's ``biases``), or None. Shapes, dtypes and devices
are checked once, in the constructor; the value checks (negative ids, non-finite log Q)
obey :func:`candidate_sampling.get_validate_args`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from candidate_sampling._validate import (
    check_bool,
    check_finite,
    check_ids,
    check_same,
    check_tensor,
    _is_compiling,
    get_validate_args,
)

__all__ = ["CandidateSet", "SOURCES", "gather_rows"]

#: What a 2.0-style argument (a tuple, a bare tensor) is told to become.
_BUILD_A_SET = (
    "build one with CandidateSet.positives_of(positive_ids, classes, draw=draw), "
    "CandidateSet.from_draw(draw, classes), CandidateSet.from_ids(ids, classes) or "
    "CandidateSet(embeddings, ids, log_q)"
)

#: How a set's columns came to be (``CandidateSet.source``). The softmax family's
#: default removes the accidental hits of the *set* sources (``"unique"``, ``"mined"``,
#: ``"fixed"``) and keeps those of the *draw* sources (``"replacement"``, ``"batch"``,
#: ``"ranks"``, ``"queue"``); see the module docstring.
SOURCES = ("batch", "ranks", "queue", "replacement", "unique", "mined", "fixed")
_SET_SOURCES = frozenset({"unique", "mined", "fixed"})

#: ``source`` as stored: runs of ``(name, number of columns)``, in column order.
Runs = tuple[tuple[str, int], ...]

#: A class table (|V|, d) or an item encoder: ids (n,) → embeddings (n, d).
Classes = torch.Tensor | Callable[[torch.Tensor], torch.Tensor]

_HALF = (torch.float16, torch.bfloat16)


def gather_rows(
    classes: Classes, ids: torch.Tensor, *, sparse: bool = False, name: str = "classes"
) -> torch.Tensor:
    """Rows ``classes[ids]`` of a class table, or ``classes(ids)`` of an item encoder.

    ``classes``: (|V|, d) table or a callable ids (n,) → (n, d); ``ids``: (n,) integer.
    A half-precision table is gathered **once per distinct id** and upcast to float32
    before the repeats are expanded, so the gradient of a repeated id is accumulated in
    float32: two large partial gradients can no longer overflow float16 separately and
    meet as ``+inf − inf = NaN`` in the table's backward. ``sparse=True`` gathers with
    ``F.embedding(..., sparse=True)`` (sparse gradient of the table). Returns (n, d).
    """
    sparse = check_bool("sparse", sparse)
    check_tensor("ids", ids, ("n",), floating=False, allow_empty=True)
    if isinstance(classes, torch.Tensor):
        check_tensor(name, classes, ("|V|", "d"), floating=True)
        check_ids("ids", ids, classes.shape[0], f"the rows of {name}")
    elif not callable(classes):
        raise ValueError(
            f"{name} must be a class table (|V|, d) or an item encoder, got "
            f"{type(classes).__name__}"
        )
    return _gather_rows(classes, ids, sparse, name)


def _gather_rows(classes: Classes, ids: torch.Tensor, sparse: bool, name: str) -> torch.Tensor:
    """:func:`gather_rows` of checked arguments (the encoder's output is checked here)."""
    if isinstance(classes, torch.Tensor):
        ids = ids.to(classes.device).long()
        if classes.dtype in _HALF and not _is_compiling():
            uniq, inverse = torch.unique(ids, return_inverse=True)
            rows = torch.nn.functional.embedding(uniq, classes, sparse=sparse)
            return rows.float()[inverse]
        if classes.dtype in _HALF:  # a graph has no data-dependent shapes: no unique
            return torch.nn.functional.embedding(ids, classes, sparse=sparse).float()
        if sparse:
            return torch.nn.functional.embedding(ids, classes, sparse=True)
        return classes[ids]
    rows = classes(ids)
    if not isinstance(rows, torch.Tensor) or rows.dim() != 2 or rows.shape[0] != ids.shape[0]:
        got = tuple(rows.shape) if isinstance(rows, torch.Tensor) else type(rows).__name__
        raise ValueError(
            f"the item encoder ({name}) must map ids ({ids.shape[0]},) to embeddings "
            f"({ids.shape[0]}, d), got {got}"
        )
    if not rows.is_floating_point():
        raise ValueError(
            f"the item encoder ({name}) must return floating-point embeddings, got {rows.dtype}"
        )
    return rows


def _check_candidate_set(name: str, value: object, *, optional: bool = False) -> None:
    """``value`` must be a :class:`CandidateSet` (or None, when ``optional``)."""
    if optional and value is None:
        return
    if not isinstance(value, CandidateSet):
        wanted = "a CandidateSet or None" if optional else "a CandidateSet"
        hint = f" (2.0's tensors and tuples are gone: {_BUILD_A_SET})"
        if not isinstance(value, (torch.Tensor, tuple, list)):
            hint = ""
        raise ValueError(f"{name} must be {wanted}, got {type(value).__name__}{hint}")


def _check_draw(draw: object) -> None:
    """``draw`` must be a :class:`~candidate_sampling.sampling.samplers.CandidateDraw`."""
    from candidate_sampling.sampling.samplers import CandidateDraw

    if not isinstance(draw, CandidateDraw):
        hint = ""
        if isinstance(draw, (tuple, list)):
            hint = (
                ": 2.0's tuple draw (ids, log Q, positive log Q) is one CandidateDraw now, "
                "what sampler.sample(num_samples, positive_ids=...) returns"
            )
        raise ValueError(
            f"draw must be a CandidateDraw (sampler.sample(...)), got {type(draw).__name__}{hint}"
        )


def _check_columns(name: str, tensor: torch.Tensor, num_cols: int) -> None:
    """(C,) or (B, C)."""
    if not isinstance(tensor, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
    if tensor.dim() not in (1, 2) or tensor.shape[-1] != num_cols:
        raise ValueError(
            f"{name} must have shape (C,) or (B, C) with C = {num_cols} (embeddings), "
            f"got {tuple(tensor.shape)}"
        )


def _check_columns_index(columns: object, num: int) -> None:
    """:meth:`CandidateSet.select`'s ``columns``: a (C',) integer tensor in ``[0, C)`` or a
    (C,) bool tensor."""
    if not isinstance(columns, torch.Tensor):
        raise ValueError(
            f"columns must be a slice or a tensor of column indices, got {type(columns).__name__}"
        )
    if columns.dtype == torch.bool:
        check_tensor("columns", columns, (num,), allow_empty=True)
        return
    check_tensor("columns", columns, ("C'",), floating=False, allow_empty=True)
    check_ids(f"columns (of a set of {num} columns)", columns, num)


def _check_table_and_bias(
    classes: Classes, class_bias: torch.Tensor | None, ids: torch.Tensor, name: str = "ids"
) -> None:
    """``classes`` (a table or an encoder), ``class_bias`` (|V|,) and the range of ``ids``
    (integer (C,), checked by the caller) — every check of :meth:`CandidateSet.from_ids`
    but those of its ``log_q`` and ``mask``, which the set's own checks make."""
    if isinstance(classes, torch.Tensor):
        check_tensor("classes", classes, ("|V|", "d"), floating=True)
    elif not callable(classes):
        raise ValueError(
            "classes must be a class table (|V|, d) or an item encoder, got "
            f"{type(classes).__name__}"
        )
    if class_bias is not None:
        check_tensor("class_bias", class_bias, ("|V|",), floating=True)
        if isinstance(classes, torch.Tensor):
            check_same(
                "number of classes |V|", classes=classes.shape[0], class_bias=class_bias.shape[0]
            )
    if isinstance(classes, torch.Tensor):
        check_ids(name, ids, classes.shape[0], "the rows of classes")
    elif class_bias is not None:  # an item encoder has no |V| of its own: class_bias sets it
        check_ids(
            f"{name} (indices into class_bias of length {class_bias.shape[0]})",
            ids,
            class_bias.shape[0],
        )
    elif not _checks_its_ids(classes):
        check_ids(name, ids, None)


def _checks_its_ids(encoder: object) -> bool:
    """Whether an item encoder checks its ids' range itself (an ``ItemTower`` does: the
    set's check would read the same ids twice)."""
    from candidate_sampling.models import ItemTower

    return isinstance(encoder, ItemTower)


def _positives_and_log_q(
    positive_ids: torch.Tensor, draw, correct: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``positive_ids`` (B,) or (B, T), checked, and their log Q under ``draw`` (flat), or
    None (no draw, or ``correct=False``)."""
    if not isinstance(positive_ids, torch.Tensor) or positive_ids.dim() not in (1, 2):
        got = tuple(positive_ids.shape) if isinstance(positive_ids, torch.Tensor) else None
        raise ValueError(f"positive_ids must have shape (B,) or (B, T), got {got}")
    check_tensor(
        "positive_ids", positive_ids, ("B",) + ("T",) * (positive_ids.dim() - 1), floating=False
    )
    correct = check_bool("correct", correct)
    if draw is not None:
        _check_draw(draw)
    if draw is None or not correct:
        return positive_ids, None
    # the one check that the draw belongs to these ids (made with them; their shape; the
    # ids themselves while validation is on)
    draw.check_positive_ids(positive_ids)
    log_q = draw.positive_log_q
    if log_q is None:  # a hand-built draw with ids but no expected counts
        raise ValueError(
            "draw.positive_log_q is None: the draw carries no expected count for "
            "its positive_ids (sample with positive_ids=...)"
        )
    if get_validate_args() and bool(torch.isneginf(log_q).any()):
        raise ValueError(
            "draw.positive_log_q is -inf for some positive id: the proposal cannot "
            "draw it (an excluded id?), so the sampled loss is undefined for that row"
        )
    # the draw's own dtype, as from_draw keeps it (a float64 draw stays exact)
    return positive_ids, log_q.reshape(-1)


#: The attribute of a CandidateDraw that carries the rows gathered for the other half
#: (positives or draw) of a half-precision table.
_SHARED = "_cs_rows_for"


def _with_the_other_half(cls, draw, role, ids, classes, log_q, class_bias, sparse):
    """``role``'s set (``"positives"`` or ``"draw"``) of ``draw``, its rows gathered with
    the other role's when ``classes`` is a half table (see
    :meth:`CandidateSet.positives_of`); a float32 table, an encoder, or a draw without
    ``positive_ids`` is gathered alone. The other role's rows wait on the draw, used once,
    and only by a call with the same table (unchanged since), bias, ``sparse`` and grad
    mode."""
    sources = {"positives": "fixed", "draw": "unique" if draw.unique else "replacement"}
    half = isinstance(classes, torch.Tensor) and classes.dtype in (torch.float16, torch.bfloat16)
    if not half or draw.positive_ids is None or _is_compiling():
        return cls._from_checked_ids(
            ids, classes, log_q, None, class_bias, sparse, sources[role], log_q_checked=True
        )
    key = (classes._version, sparse, torch.is_grad_enabled())
    waiting = draw.__dict__.pop(_SHARED, None)
    if waiting is not None:
        for_role, table, bias_table, waiting_key, part = waiting
        same = table is classes and bias_table is class_bias and waiting_key == key
        if for_role == role and same:
            if log_q is not None:
                log_q = log_q.to(part.device)
            return cls._checked(
                part.embeddings, part.ids, log_q, None, part.bias, sources[role],
                log_q_checked=True,
            )
    other_ids = draw.ids if role == "positives" else draw.positive_ids.reshape(-1)
    other_ids = other_ids.to(ids.device)
    # the other role's ids are gathered now, before their own call checks them
    other_name = "draw.ids" if role == "positives" else "draw.positive_ids"
    _check_table_and_bias(classes, class_bias, other_ids, name=other_name)
    joined = cls._from_checked_ids(
        torch.cat([ids, other_ids]), classes, None, None, class_bias, sparse
    )
    num = ids.shape[0]
    mine, theirs = joined.select(slice(0, num)), joined.select(slice(num, None))
    other = "draw" if role == "positives" else "positives"
    object.__setattr__(draw, _SHARED, (other, classes, class_bias, key, theirs))
    if log_q is not None:
        log_q = log_q.to(mine.device)
    return cls._checked(
        mine.embeddings, mine.ids, log_q, None, mine.bias, sources[role], log_q_checked=True
    )


def _runs(source: str | Runs, num: int, name: str = "source") -> Runs:
    """``source`` (one name for every column, or runs) as runs covering ``num`` columns."""
    if isinstance(source, str):
        if source not in SOURCES:
            raise ValueError(f"{name} must be one of {SOURCES}, got {source!r}")
        return ((source, num),) if num else ()
    if not isinstance(source, tuple) or not all(
        isinstance(r, tuple) and len(r) == 2 and r[0] in SOURCES
        and isinstance(r[1], int) and not isinstance(r[1], bool) and r[1] > 0
        for r in source
    ):
        raise ValueError(
            f"{name} must be one of {SOURCES} or runs ((name, count), ...), got {source!r}"
        )
    if sum(count for _, count in source) != num:
        raise ValueError(
            f"{name} must cover the C = {num} columns, got runs of "
            f"{sum(count for _, count in source)}"
        )
    return _merged(source)


def _merged(runs) -> Runs:
    """Adjacent runs of one name joined: ``(("batch", 2), ("batch", 3))`` → ``(("batch", 5),)``."""
    out: list[tuple[str, int]] = []
    for name, count in runs:  # every count > 0 (_runs, _select_runs)
        if out and out[-1][0] == name:
            out[-1] = (name, out[-1][1] + count)
        else:
            out.append((name, count))
    return tuple(out)


def _select_runs(runs: Runs, columns, selected: int) -> Runs:
    """The runs of the columns ``columns`` (a slice or an index tensor) of a set, of which
    ``selected`` were picked."""
    if len(runs) <= 1:  # one name (or an empty set, of which nothing is selected)
        return ((runs[0][0], selected),) if selected else ()
    names = [name for name, count in runs for _ in range(count)]
    if isinstance(columns, slice):
        picked = names[columns]
    else:  # an index tensor on a mixed set: read its values (one host sync)
        index = columns.cpu()
        if index.dtype == torch.bool:
            index = index.nonzero().flatten()
        picked = [names[i] for i in index.tolist()]
    return _merged((name, 1) for name in picked)


@dataclass(frozen=True, eq=False)
class CandidateSet:
    """Candidate columns: ``embeddings`` (C, d), ``ids`` (C,), ``log_q``, ``mask``, ``bias``.

    A column ``j`` enters a loss as the logit ``(u_i·v_j + b_j) / τ − log Q_ij`` for row
    ``i``, and only where ``mask[i, j]`` is True (True = valid; None = all valid). ``log_q``
    is the log *expected count* of the column's item in the candidate set (see the
    notation page), (C,) or per row (B, C), or None for no correction; it never gets a
    gradient. ``ids`` are int64 (other integer dtypes are converted). ``source``: how the
    columns came to be, one of :data:`SOURCES` for every column (default ``"fixed"``: a
    set of distinct ids), or runs ``((name, count), ...)`` in column order (what
    :meth:`concat` makes); it decides the default accidental-hit rule (module docstring)
    and is stored as runs. Checked here, once: shapes, dtypes, one device for every tensor,
    the source, and — while :func:`~candidate_sampling.get_validate_args` is on — ids ≥ 0
    and a finite log Q. Chapters 4–9.
    """

    embeddings: torch.Tensor
    ids: torch.Tensor
    log_q: torch.Tensor | None = None
    mask: torch.Tensor | None = None
    bias: torch.Tensor | None = None
    source: str | Runs = "fixed"

    def __post_init__(self) -> None:
        self._check(ids_checked=False)

    def _check(self, *, ids_checked: bool, log_q_checked: bool = False) -> None:
        """The constructor's checks; ``ids_checked``: the ids' values were checked already
        (a constructor that gathered them from a table checked their range);
        ``log_q_checked``: the log Q's values too (a draw's, made finite by its sampler or
        checked by its own constructor)."""
        check_tensor("embeddings", self.embeddings, ("C", "d"), floating=True, allow_empty=True)
        num, device = self.embeddings.shape[0], self.embeddings.device
        object.__setattr__(self, "source", _runs(self.source, num))
        check_tensor("ids", self.ids, (num,), floating=False, allow_empty=True)
        if self.ids.dtype != torch.int64:
            object.__setattr__(self, "ids", self.ids.long())
        for name in ("ids", "log_q", "mask", "bias"):
            value = getattr(self, name)
            if value is not None and isinstance(value, torch.Tensor) and value.device != device:
                raise ValueError(
                    f"{name} must be on the embeddings' device {device}, got {value.device}"
                )
        if self.log_q is not None:
            _check_columns("log_q", self.log_q, num)
            if not self.log_q.is_floating_point():
                raise ValueError(f"log_q must be a floating-point tensor, got {self.log_q.dtype}")
            if not log_q_checked:
                check_finite("log_q", self.log_q)
        if self.mask is not None:
            _check_columns("mask", self.mask, num)
            if self.mask.dtype != torch.bool:
                raise ValueError(
                    f"mask must be a bool tensor (True = valid), got {self.mask.dtype}"
                )
        if (
            self.log_q is not None
            and self.mask is not None
            and self.log_q.dim() == 2
            and self.mask.dim() == 2
            and self.log_q.shape[0] != self.mask.shape[0]
        ):
            raise ValueError(
                f"log_q and mask must have the same number of rows B, got "
                f"{self.log_q.shape[0]} and {self.mask.shape[0]}"
            )
        if self.bias is not None:
            check_tensor("bias", self.bias, (num,), floating=True, allow_empty=True)
        if not ids_checked:
            check_ids("ids", self.ids, None)

    # ------------------------------------------------------------------ properties
    @classmethod
    def _unchecked(
        cls, embeddings, ids, log_q, mask, bias, source: str | Runs
    ) -> CandidateSet:
        """A set built from parts that were checked already (concat, slicing). ``source``
        is stated by every caller, never defaulted: it sets the accidental-hit rule, and a
        set remade without it once lost its columns' rule. A name for every column, or
        runs (kept as they are)."""
        out = object.__new__(cls)
        if isinstance(source, str):
            num = int(embeddings.shape[0])
            source = ((source, num),) if num else ()
        for name, value in zip(
            ("embeddings", "ids", "log_q", "mask", "bias", "source"),
            (embeddings, ids, log_q, mask, bias, source),
        ):
            object.__setattr__(out, name, value)
        return out

    def with_source(self, source: str | Runs) -> CandidateSet:
        """The same columns with another ``source`` (a name for every column, or runs)."""
        return CandidateSet._unchecked(
            self.embeddings, self.ids, self.log_q, self.mask, self.bias,
            _runs(source, self.num_candidates),
        )

    def hit_columns(self) -> torch.Tensor | None:
        """(C,) bool, True where the softmax family removes accidental hits by default: the
        columns of a *set* source (``"unique"``, ``"mined"``, ``"fixed"``); None when no
        column is. See the module docstring for the rule and its derivation."""
        if not any(name in _SET_SOURCES for name, _ in self.source):
            return None
        if all(name in _SET_SOURCES for name, _ in self.source):
            return torch.ones(self.num_candidates, dtype=torch.bool, device=self.device)
        return torch.cat([
            torch.full((count,), name in _SET_SOURCES, dtype=torch.bool, device=self.device)
            for name, count in self.source
        ])

    @property
    def num_candidates(self) -> int:
        """C, the number of columns."""
        return int(self.embeddings.shape[0])

    def __len__(self) -> int:
        return self.num_candidates

    @property
    def dim(self) -> int:
        """d, the embedding size."""
        return int(self.embeddings.shape[1])

    @property
    def device(self) -> torch.device:
        return self.embeddings.device

    @property
    def batch_size(self) -> int | None:
        """B when log Q or the mask is per row (B, C); None when every column is shared."""
        for t in (self.log_q, self.mask):
            if t is not None and t.dim() == 2:
                return int(t.shape[0])
        return None

    def __repr__(self) -> str:
        def shape(t):
            return None if t is None else tuple(t.shape)

        source = "+".join(
            name if len(self.source) == 1 else f"{name}:{count}" for name, count in self.source
        )
        return (
            f"CandidateSet(C={self.num_candidates}, d={self.dim}, log_q={shape(self.log_q)}, "
            f"mask={shape(self.mask)}, bias={shape(self.bias)}, source={source or None}, "
            f"dtype={self.embeddings.dtype})"
        )

    # ------------------------------------------------------------------ constructors
    @classmethod
    def _checked(
        cls,
        embeddings,
        ids,
        log_q,
        mask,
        bias,
        source: str | Runs,
        *,
        log_q_checked: bool,
    ) -> CandidateSet:
        """A set whose ids were range-checked by the caller (gathered from a table or
        checked against an encoder): every other field is checked as in the constructor."""
        out = cls._unchecked(embeddings, ids, log_q, mask, bias, source)
        out._check(ids_checked=True, log_q_checked=log_q_checked)
        return out

    @classmethod
    def from_ids(
        cls,
        ids: torch.Tensor,
        classes: Classes,
        *,
        log_q: torch.Tensor | float | None = None,
        mask: torch.Tensor | None = None,
        class_bias: torch.Tensor | None = None,
        sparse: bool = False,
        source: str = "fixed",
    ) -> CandidateSet:
        """Columns for given ``ids`` (C,), rows gathered from ``classes`` (table or encoder).

        ``log_q``: (C,), (B, C), a float given to every column (e.g. 0 = an expected count
        of 1, a mined negative), or None (default: no correction); ``mask``: (C,) or (B, C)
        bool, True = valid (default None: every column valid); ``source``: how the ids came
        to be (:data:`SOURCES`; default ``"fixed"``, distinct ids, whose hits a softmax
        removes); ``class_bias``: (|V|,)
        per-class score bias, gathered at ``ids``: |V| is the table's number of rows, and
        with an item encoder every id must be < ``len(class_bias)``. Half-precision tables
        are gathered as in :func:`gather_rows` (float32 gradients of repeated ids).
        """
        check_tensor("ids", ids, ("C",), floating=False, allow_empty=True)
        sparse = check_bool("sparse", sparse)
        if isinstance(log_q, bool) or not (
            log_q is None or isinstance(log_q, (int, float, torch.Tensor))
        ):
            raise ValueError(f"log_q must be a tensor, a number or None, got {log_q!r}")
        if isinstance(log_q, (int, float)) and not math.isfinite(log_q):
            raise ValueError(f"log_q must be finite, got {log_q!r}")
        _runs(source, 0)  # a bad name fails before the gather
        _check_table_and_bias(classes, class_bias, ids)
        return cls._from_checked_ids(ids, classes, log_q, mask, class_bias, sparse, source)

    @classmethod
    def _from_checked_ids(
        cls, ids, classes, log_q, mask, class_bias, sparse, source="fixed", log_q_checked=False
    ) -> CandidateSet:
        """:meth:`from_ids` of checked ``ids``, ``classes`` and ``class_bias``."""
        embeddings = _gather_rows(classes, ids, sparse, "classes")
        ids = ids.to(embeddings.device)
        if isinstance(log_q, (int, float)):
            log_q = torch.full(ids.shape, float(log_q), device=embeddings.device)
        bias = None
        if class_bias is not None:
            bias = class_bias[ids.to(class_bias.device).long()].to(embeddings.device)
        return cls._checked(embeddings, ids, log_q, mask, bias, source, log_q_checked=log_q_checked)

    @classmethod
    def from_draw(
        cls,
        draw,
        classes: Classes,
        *,
        class_bias: torch.Tensor | None = None,
        correct: bool = True,
        sparse: bool = False,
    ) -> CandidateSet:
        """The ``k`` sampled columns of a sampler's draw (a ``CandidateDraw``).

        Rows of ``draw.ids`` from a class table (|V|, d) or an item encoder; ``log_q`` =
        ``draw.log_q``, the log expected count of each sampled id under the draw (TF's
        ``sampled_expected_count``), with ``correct=True`` (the default), or None with
        ``correct=False`` (negative sampling). Source ``"unique"`` for a unique draw,
        ``"replacement"`` otherwise: the default hit rule then removes a unique draw's hits
        and keeps those of draws with replacement. A float16 / bfloat16 table is gathered
        together with the positives of the same draw (see :meth:`positives_of`). Chapters
        3–5.
        """
        _check_draw(draw)
        correct = check_bool("correct", correct)
        sparse = check_bool("sparse", sparse)
        _check_table_and_bias(classes, class_bias, draw.ids, name="draw.ids")
        log_q = draw.log_q if correct else None
        return _with_the_other_half(cls, draw, "draw", draw.ids, classes, log_q, class_bias, sparse)

    @classmethod
    def positives_of(
        cls,
        positive_ids: torch.Tensor,
        classes: Classes,
        *,
        draw=None,
        class_bias: torch.Tensor | None = None,
        correct: bool = True,
        sparse: bool = False,
    ) -> CandidateSet:
        """Each row's positive column(s) from a class table or encoder (sampled losses).

        ``positive_ids``: (B,) or (B, T) for ``T`` positives per row (TF's ``num_true``),
        flattened row-major into ``B·T`` columns. ``draw``: the
        :class:`~candidate_sampling.sampling.samplers.CandidateDraw` of the same step,
        made with these ``positive_ids``; its ``positive_log_q`` (TF's
        ``true_expected_count``) becomes the columns' log Q. A draw made for other
        positives (other ids, another shape, or no ``positive_log_q``) is an error
        (:meth:`~candidate_sampling.sampling.samplers.CandidateDraw.check_positive_ids`;
        the ids are a value check, skipped when validation is off).
        ``correct=False`` or no draw (the default, None): no correction.

        **Half precision.** With a float16 / bfloat16 table and a draw, the rows of the
        positives and of ``draw.ids`` are gathered in one call (:func:`gather_rows`: each
        distinct row upcast once), whichever of this method and :meth:`from_draw` comes
        first; the other one takes its rows from it. An id that is both a positive and a
        sampled candidate (an accidental hit) then gets its two gradients summed in float32
        and cast once: two gathers would cast each to float16 alone, where two large
        opposite halves overflow and meet as ``+inf − inf = NaN`` in the table's gradient.
        Chapters 3–4.
        """
        positive_ids, log_q = _positives_and_log_q(positive_ids, draw, correct)
        sparse = check_bool("sparse", sparse)
        flat = positive_ids.reshape(-1)
        _check_table_and_bias(classes, class_bias, flat, name="positive_ids")
        if draw is None or positive_ids is not draw.positive_ids:
            # a draw's positive log Q: NaN and +inf refused by the draw, -inf just above
            return cls._from_checked_ids(
                flat, classes, log_q, None, class_bias, sparse, log_q_checked=True
            )
        return _with_the_other_half(
            cls, draw, "positives", flat, classes, log_q, class_bias, sparse
        )

    @classmethod
    def from_batch(
        cls,
        embeddings: torch.Tensor,
        ids: torch.Tensor,
        *,
        item_probabilities: torch.Tensor | None = None,
        frequency_estimator=None,
        num_draws: int | None = None,
    ) -> CandidateSet:
        """The batch's own positives as columns, log Q from ``sampling.frequency``.

        ``embeddings``: (B, d) row ``i``'s positive; ``ids``: (B,). log Q (at most one
        source): ``item_probabilities`` (|V|,) ``p(y)`` → ``log(n·p(y))``, the expected
        count of ``y`` among ``n = num_draws`` positive draws (default ``n = B``: this
        batch; pass the global or queue size when the batch is joined with other ranks or
        a queue of past positives); ``frequency_estimator`` (a
        :class:`~candidate_sampling.sampling.frequency.StreamingFrequencyEstimator`) →
        its ``log_inclusion``, which equals the log expected count for rare items
        (chapter 5). Neither (the default): no correction; ``num_draws`` then is an error
        (it scales ``item_probabilities`` only). Source ``"batch"``: a copy of a row's
        positive among the other rows' is kept by default (chapter 5).
        """
        # shapes here; dtypes and values where they are used (batch_log_q or the
        # estimator for the ids, the set's own checks for both)
        check_tensor("embeddings", embeddings, ("B", "d"))
        check_tensor("ids", ids, ("B",))
        check_same("batch size B", embeddings=embeddings.shape[0], ids=ids.shape[0])
        if item_probabilities is not None and frequency_estimator is not None:
            raise ValueError("give item_probabilities or frequency_estimator, not both")
        if num_draws is not None and item_probabilities is None:
            raise ValueError(
                "num_draws needs item_probabilities (it is the n of log(n·p(y))); "
                f"got num_draws={num_draws!r} without them"
            )
        log_q = None
        if item_probabilities is not None:
            from candidate_sampling.sampling.frequency import batch_log_q

            n = embeddings.shape[0] if num_draws is None else num_draws
            log_q = batch_log_q(ids, item_probabilities, num_draws=n)  # checks the ids
        elif frequency_estimator is not None:
            from candidate_sampling.sampling.frequency import StreamingFrequencyEstimator

            if not isinstance(frequency_estimator, StreamingFrequencyEstimator):
                raise ValueError(
                    "frequency_estimator must be a StreamingFrequencyEstimator, got "
                    f"{type(frequency_estimator).__name__}"
                )
            log_q = frequency_estimator.log_inclusion(ids)  # checks the ids
        ids = ids.to(embeddings.device)
        if log_q is not None:
            log_q = log_q.to(embeddings.device, torch.float32)
            # batch_log_q is finite by construction (it refuses a probability of 0)
            return cls._checked(embeddings, ids, log_q, None, None, "batch", log_q_checked=True)
        return cls(embeddings, ids, source="batch")

    # ------------------------------------------------------------------ combining
    @staticmethod
    def concat(*sets: CandidateSet) -> CandidateSet:
        """Join sets column-wise: ``[a's columns | b's columns | ...]``, each keeping its own
        log Q, mask, bias and source.

        Parts without a log Q (or bias) get 0 in those columns (an uncorrected column) when
        another part has one; parts without a mask are all valid. A per-row part (B, C_k)
        broadcasts the shared (C_j,) parts to (B, C_j); per-row parts must agree on B.
        Embeddings are promoted to a common dtype (never rounded down). ``a + b`` is
        ``CandidateSet.concat(a, b)``.
        """
        if not sets:
            raise ValueError("concat needs at least one CandidateSet")
        for i, s in enumerate(sets):
            _check_candidate_set(f"sets[{i}]", s)
        if len(sets) == 1:
            return sets[0]
        if len({s.dim for s in sets}) > 1:
            raise ValueError(
                "every set must have the same embedding size d, got "
                + ", ".join(f"sets[{i}]: {s.dim}" for i, s in enumerate(sets))
            )
        if len({s.device for s in sets}) > 1:
            raise ValueError(
                "every set must be on one device, got "
                + ", ".join(f"sets[{i}]: {s.device}" for i, s in enumerate(sets))
            )
        rows = {s.batch_size for s in sets} - {None}
        if len(rows) > 1:
            raise ValueError(f"per-row (B, C) parts must agree on B, got {sorted(rows)}")
        batch = rows.pop() if rows else None
        embeddings = torch.cat([s.embeddings for s in sets])  # cat promotes the dtypes
        ids = torch.cat([s.ids for s in sets])

        def column(name: str, fill) -> torch.Tensor | None:
            """One optional column field of every part, joined; missing parts get ``fill``."""
            parts = [getattr(s, name) for s in sets]
            if all(p is None for p in parts):
                return None
            dtype = torch.bool
            if fill is not True:  # a floating field: the promotion of the parts, >= float32
                dtype = torch.float32
                for p in parts:
                    dtype = dtype if p is None else torch.promote_types(dtype, p.dtype)
            per_row = batch is not None and any(p is not None and p.dim() == 2 for p in parts)
            out = []
            for s, p in zip(sets, parts):
                if p is None:
                    p = torch.full((s.num_candidates,), fill, dtype=dtype, device=s.device)
                if per_row and p.dim() == 1:
                    p = p[None, :].expand(batch, -1)
                out.append(p.to(dtype))
            return torch.cat(out, dim=-1)

        log_q, mask, bias = column("log_q", 0.0), column("mask", True), column("bias", 0.0)
        source = _merged(run for s in sets for run in s.source)
        return CandidateSet._unchecked(embeddings, ids, log_q, mask, bias, source)

    def __add__(self, other: CandidateSet) -> CandidateSet:
        if not isinstance(other, CandidateSet):
            return NotImplemented
        return CandidateSet.concat(self, other)

    def select(self, columns: torch.Tensor | slice) -> CandidateSet:
        """The columns ``columns`` (an index tensor or a slice) of this set, with their
        log Q, mask, bias and source (an index tensor into a set of several sources is read
        on the host).

        ``columns``: a slice, a (C',) integer tensor of column indices in ``[0, C)`` (a
        value check; a negative index is an error, not counted from the end) or a (C,)
        bool tensor (True = keep)."""
        if not isinstance(columns, slice):
            _check_columns_index(columns, self.num_candidates)

        def pick(t):
            return None if t is None else t[..., columns]

        embeddings = self.embeddings[columns]
        return CandidateSet._unchecked(
            embeddings, self.ids[columns], pick(self.log_q), pick(self.mask),
            None if self.bias is None else self.bias[columns],
            _select_runs(self.source, columns, int(embeddings.shape[0])),
        )

    def with_mask(self, mask: torch.Tensor | None) -> CandidateSet:
        """The same columns with validity ``mask`` ((C,) or (B, C) bool, True = valid)
        ANDed into the set's own mask (None: the set's mask is kept)."""
        if mask is None:
            return self
        _check_columns("mask", mask, self.num_candidates)
        if mask.dtype != torch.bool:
            raise ValueError(f"mask must be a bool tensor (True = valid), got {mask.dtype}")
        rows = self.batch_size
        if mask.dim() == 2 and rows is not None and mask.shape[0] != rows:
            raise ValueError(
                f"mask must have B = {rows} rows, the set's per-row log_q / mask, got "
                f"{tuple(mask.shape)}"
            )
        mask = mask.to(self.device)
        if self.mask is not None:
            mask = mask & self.mask
        return CandidateSet._unchecked(
            self.embeddings, self.ids, self.log_q, mask, self.bias, self.source
        )

    def detach(self) -> CandidateSet:
        """The same set with embeddings (and bias) detached: a queue's stored columns."""
        return CandidateSet._unchecked(
            self.embeddings.detach(), self.ids, self.log_q, self.mask,
            None if self.bias is None else self.bias.detach(), self.source,
        )
