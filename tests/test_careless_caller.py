"""What a careless caller hits: every bad-input class on every public callable (issue 41).

The callables are found by walking the package's ``__all__`` lists (the top level and
every module of it), plus the public methods of every exported class;
:func:`test_every_public_callable_has_an_entry` fails when one has neither an entry in
:data:`ENTRIES` nor a reasoned exemption in :data:`EXEMPT`, so a new public function is
covered the day it is added.

An entry is one valid call, ``Entry(call, arg=Arg(kind, valid value, ...), ...)``, with
each argument described by its *kind*. From the kind the table derives the bad inputs of
every class that applies (:func:`variants`):

* ``ids``: a negative id, one out of range, float ids, bool ids, a wrong shape, an empty
  tensor, a tensor on another device (where one device is documented);
* ``floats``: NaN, ±inf, an integer dtype, a wrong shape, an empty tensor, another device,
  float16 extremes (values near 65504: the result must be finite wherever the float32
  call on the same values is);
* ``flag`` (a bool option): ``"no"`` and ``1``; ``generator``: ``0`` (a seed where a
  ``torch.Generator`` is wanted); ``draw`` and ``set``: the 2.0-style tuple (and a bare
  tensor) where a ``CandidateDraw`` or a ``CandidateSet`` is wanted; numbers, ranges and
  choices: out of range, NaN, a str, a bool; ``known``: a ``KnownPairs`` of another
  catalogue;
* mismatched lengths: ``same=`` names arguments that share a dimension; one is cut short.

What is expected: a ``ValueError`` whose message names the argument (the kind's
``names``), for every class; or, for NaN and ±inf in a float input, a non-finite result
("NaN where NaN came in"); for an empty tensor, a result or that ``ValueError`` — never
another exception (a cryptic ``IndexError``, ``AttributeError``, torch's ``TypeError``),
never a finite result where the input was invalid (silent).

Below the table, the issue's own examples, one test each, so each is named where it
fails.
"""

from __future__ import annotations

import importlib
import inspect
import math
import pkgutil
import re
from collections.abc import Callable
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any

import pytest
import torch
from torch import nn

import candidate_sampling
from candidate_sampling import CandidateSet
from candidate_sampling import losses as L
from candidate_sampling.candidates import gather_rows
from candidate_sampling.data import synthetic as S
from candidate_sampling.data import movielens as ML
from candidate_sampling.eval import baselines as BL
from candidate_sampling.eval import metrics as M
from candidate_sampling.eval.known_pairs import KnownPairs
from candidate_sampling import models as MD
from candidate_sampling.sampling import frequency as F
from candidate_sampling.sampling import samplers as SM
from candidate_sampling.scale import distributed as DI
from candidate_sampling.scale import gradcache as GC
from candidate_sampling.scale import memory as ME
from candidate_sampling.scale import mining as MI
from candidate_sampling import train as TR
from candidate_sampling import device as DV

# ============================================================================ the kinds


@dataclass
class Arg:
    """One argument: its kind, a valid value, and what the kind's bad inputs need.

    ``n``: the id range ``[0, n)`` of ``ids`` (None: only ``>= 0``); ``low`` / ``high``: the
    range of an ``int``; ``shape``: False when any shape is accepted; ``device``: True
    when the argument must be on one device with the others (a documented requirement);
    ``nan``: what a NaN / inf input must give, ``"nan"`` (a non-finite result, or an
    error naming it) or ``"raise"`` (an error: e.g. a log Q); ``empty``: False when an
    empty tensor is not an input at all; ``names``: the names an error may use for it
    (default: the argument's name); ``pad``: an id allowed below 0 (``-1`` padding);
    ``half``: False to skip float16 extremes; ``extra``: more (label, value, expect);
    ``skip``: classes that do not apply; ``at``: the flat index where NaN / inf go (an
    entry the call reads).
    """

    kind: str
    value: Any
    n: int | None = None
    low: int | float | None = None
    high: int | float | None = None
    shape: bool = True
    device: bool = False
    nan: str = "nan"
    empty: bool = True
    names: tuple[str, ...] = ()
    pad: int | None = None
    half: bool = True
    extra: list[tuple[str, Any, str]] = field(default_factory=list)
    skip: tuple[str, ...] = ()
    at: int = 0


def ids(value, n=None, **kw) -> Arg:
    return Arg("ids", value, n=n, **kw)


def floats(value, **kw) -> Arg:
    return Arg("floats", value, **kw)


def flag(value=True, **kw) -> Arg:
    return Arg("flag", value, **kw)


def integer(value, low=None, high=None, **kw) -> Arg:
    return Arg("int", value, low=low, high=high, **kw)


def positive(value, **kw) -> Arg:
    return Arg("positive", value, **kw)


def nonnegative(value, **kw) -> Arg:
    return Arg("nonnegative", value, **kw)


def real(value, low=None, high=None, **kw) -> Arg:
    return Arg("real", value, low=low, high=high, **kw)


def choice(value, **kw) -> Arg:
    return Arg("choice", value, **kw)


def probs(value, **kw) -> Arg:
    return Arg("probs", value, **kw)


def counts(value, **kw) -> Arg:
    """Counts or popularity: an integer or floating tensor, finite, >= 0."""
    return Arg("counts", value, **kw)


def log_q(value, **kw) -> Arg:
    return Arg("floats", value, nan="raise", **kw)


def weight(value, **kw) -> Arg:
    return Arg("weight", value, **kw)


def generator(**kw) -> Arg:
    return Arg("generator", None, **kw)


def draw_arg(value, **kw) -> Arg:
    return Arg("draw", value, **kw)


def set_arg(value, **kw) -> Arg:
    return Arg("set", value, **kw)


def known_arg(value, n, **kw) -> Arg:
    return Arg("known", value, n=n, **kw)


def temperature(value=1.0, **kw) -> Arg:
    return Arg("temperature", value, **kw)


def dtype_arg(value=torch.float32, **kw) -> Arg:
    return Arg("dtype", value, **kw)


def other(value, *bad: tuple[str, Any, str], **kw) -> Arg:
    """An argument with hand-written bad values only."""
    return Arg("other", value, extra=list(bad), **kw)


def _with(t: torch.Tensor, index, value) -> torch.Tensor:
    out = t.clone()
    out.reshape(-1)[index] = value
    return out


def variants(arg: Arg) -> list[tuple[str, Any, str]]:
    """(class, bad value, expect) of every bad-input class that applies to ``arg``.

    ``expect``: ``"raise"`` (a ValueError naming the argument), ``"nan"`` (that, or a
    non-finite result), ``"run"`` (that, or any result: no other exception), ``"half"``
    (float16 extremes: the result is finite wherever the float32 one is).
    """
    v, out = arg.value, []
    if arg.kind == "ids":
        low = -2 if arg.pad is not None else -1
        if v.numel():
            out.append(("negative id", _with(v, 0, low - 1), "raise"))
            if arg.n is not None:
                out.append(("out-of-range id", _with(v, -1, arg.n), "raise"))
        out.append(("float ids", v.double() + 0.5, "raise"))
        out.append(("bool ids", v != 0, "raise"))
        if arg.shape:
            out.append(("wrong shape", v[None], "raise"))
        if arg.empty:
            out.append(("empty", v[:0], "run"))
    elif arg.kind in ("floats", "probs", "weight", "counts"):
        # NaN must come out as NaN or be refused; ±inf may have a finite answer (a perfect
        # positive score) unless the kind refuses it (log Q, probabilities, weights, counts)
        nan = arg.nan if arg.kind == "floats" else "raise"
        inf = ("run" if arg.nan != "raise" else "raise") if arg.kind == "floats" else "raise"
        out.append(("NaN", _with(v, arg.at, float("nan")), nan))
        out.append(("+inf", _with(v, arg.at, float("inf")), inf))
        if arg.kind == "floats":
            out.append(("-inf", _with(v, arg.at, float("-inf")), inf))
        if arg.kind == "probs":
            out.append(("probability < 0", _with(v, arg.at, -0.25), "raise"))
            out.append(("probability > 1", _with(v, arg.at, 1.5), "raise"))
        if arg.kind in ("weight", "counts"):
            out.append(
                (
                    f"negative {arg.kind[:-1] if arg.kind == 'counts' else 'weight'}",
                    _with(v, arg.at, -1.0),
                    "raise",
                )
            )
        if arg.kind == "weight":
            out.append(("wrong length", v[:-1], "raise"))
        if arg.kind == "counts":
            out.append(("bool counts", v > 0, "raise"))
        else:
            out.append(("integer dtype", torch.ones(v.shape, dtype=torch.int64), "raise"))
        out.append(("complex dtype", v.to(torch.complex64), "raise"))
        if arg.shape and arg.kind != "weight":
            out.append(("wrong shape", v[None], "raise"))
        if arg.empty and arg.kind != "weight":
            out.append(("empty", v[:0], "run"))
        if arg.half and arg.kind == "floats" and v.numel():
            out.append(("float16 extremes", v, "half"))
    elif arg.kind == "flag":
        out += [("non-bool flag 'no'", "no", "raise"), ("non-bool flag 1", 1, "raise")]
    elif arg.kind == "generator":
        out += [("generator=0 (a seed)", 0, "raise"), ("generator 'x'", "x", "raise")]
    elif arg.kind == "draw":
        d = v
        out += [
            ("2.0-style tuple draw", (d.ids, d.log_q, d.positive_log_q), "raise"),
            ("a tensor of ids as the draw", d.ids, "raise"),
        ]
    elif arg.kind == "set":
        s = v
        out += [
            ("2.0-style tuple of tensors", (s.embeddings, s.ids), "raise"),
            ("a bare embedding tensor", s.embeddings, "raise"),
        ]
    elif arg.kind == "int":
        if arg.low is not None:
            out.append((f"int below {arg.low}", arg.low - 1, "raise"))
        if arg.high is not None:
            out.append((f"int above {arg.high}", arg.high + 1, "raise"))
        out += [("float for an int", 1.5, "raise"), ("bool for an int", True, "raise")]
        out += [("str for an int", "3", "raise")]
    elif arg.kind in ("positive", "nonnegative", "temperature", "real"):
        if arg.kind in ("positive", "temperature"):
            out += [("zero", 0.0, "raise"), ("negative", -1.0, "raise")]
        if arg.kind == "nonnegative":
            out.append(("negative", -1.0, "raise"))
        if arg.kind == "real" and arg.low is not None:
            out.append(("below range", arg.low - 1.0, "raise"))
        if arg.kind == "real" and arg.high is not None:
            out.append(("above range", arg.high + 1.0, "raise"))
        out += [("NaN number", float("nan"), "raise"), ("inf number", float("inf"), "raise")]
        out += [("str for a number", "x", "raise"), ("bool for a number", True, "raise")]
        if arg.kind == "temperature":
            out.append(("temperature whose 1/τ overflows", 1e-40, "raise"))
    elif arg.kind == "choice":
        out.append(("unknown choice", "bogus", "raise"))
    elif arg.kind == "dtype":
        out += [("dtype as a str", "float32", "raise"), ("integer dtype", torch.int64, "raise")]
    elif arg.kind == "known":
        other_catalogue = KnownPairs(torch.tensor([0]), torch.tensor([0]), num_items=arg.n + 7)
        out += [
            ("known of another catalogue", other_catalogue, "raise"),
            ("known 'x'", "x", "raise"),
        ]
    if arg.device and isinstance(v, torch.Tensor):
        out.append(("another device", v.to("meta"), "raise"))
    out += arg.extra
    return [o for o in out if o[0] not in arg.skip]


@dataclass
class Entry:
    """A valid call ``call(**{name: arg.value})`` and its arguments' kinds; ``same``: groups
    of arguments whose first dimension must agree (one is cut short: "mismatched
    lengths")."""

    call: Callable[..., Any]
    args: dict[str, Arg]
    same: list[tuple[str, ...]] = field(default_factory=list)


def E(call, *, same=(), **args: Arg) -> Entry:
    return Entry(call, args, list(same))


# ============================================================================ valid inputs

B, D, V = 4, 3, 10
_g = torch.Generator().manual_seed(0)
Q = torch.randn(B, D, generator=_g)
KEYS = torch.randn(B, D, generator=_g)
TABLE = torch.randn(V, D, generator=_g)
IDS = torch.tensor([0, 1, 2, 3])
CAND_IDS = torch.tensor([4, 5, 1])
LOGQ = torch.tensor([-1.0, -0.5, -2.0, -0.7])
CAND_LOGQ = torch.tensor([-1.5, -0.2, -0.5])
W = torch.tensor([1.0, 0.5, 2.0, 1.0])
LOGITS = torch.randn(B, 6, generator=_g)
REMOVED = LOGITS > 0  # removed entries, never where the NaN / inf variants go
REMOVED[0, 0] = REMOVED[-1, -1] = False
COLS = torch.tensor([0, 1, 2, 3])
POS_SCORES = torch.randn(B, generator=_g)
NEG_SCORES = torch.randn(B, 5, generator=_g)
NEG_MASK = NEG_SCORES > 1
NEG_MASK[0, 0] = NEG_MASK[-1, -1] = False
LABELS = torch.tensor([0, 1, 0, 1])
PAIRS = torch.tensor([[0, 2], [2, 0], [1, 3], [3, 1]])
PROBS = torch.full((V,), 1.0 / V)
COUNTS = torch.arange(1.0, V + 1.0)
USERS = torch.tensor([0, 1, 1, 2])
UE = torch.randn(3, D, generator=_g)
RANKS = torch.tensor([0, 3, 12, 1])
STRATA = torch.arange(V) % 3


def positives() -> CandidateSet:
    return CandidateSet(KEYS, IDS, LOGQ)


def extras() -> CandidateSet:
    return CandidateSet(TABLE[CAND_IDS], CAND_IDS, CAND_LOGQ)


def known() -> KnownPairs:
    return KnownPairs(torch.tensor([0, 0, 1]), torch.tensor([5, 6, 7]), num_items=V)


SAMPLER = SM.UniformSampler(V)
DRAW = SAMPLER.sample(3, unique=True, generator=torch.Generator().manual_seed(1), positive_ids=IDS)


def planted() -> S.PlantedRetrieval:
    return S.make_planted_retrieval(5, V, 4, seed=0)


def miner() -> MI.HardNegativeMiner:
    return MI.HardNegativeMiner(index="torch").build(TABLE)


def mined() -> MI.MinedNegatives:
    return MI.MinedNegatives(
        ids=torch.tensor([[3, 4], [5, -1], [6, 7], [8, 9]]),
        scores=torch.zeros(B, 2),
        ranks=torch.tensor([[0, 1]] * B),
        valid=torch.tensor([[True, True], [True, False], [True, True], [True, True]]),
    )


def movielens() -> ML.MovieLens:
    """A MovieLens of three ratings (the loader's frames, without the download)."""
    import pandas as pd

    ratings = pd.DataFrame(
        {"user_id": [1, 1, 2], "item_id": [1, 2, 2], "rating": [5, 3, 4], "timestamp": [3, 1, 2]}
    )
    items = pd.DataFrame({"item_id": [1, 2], "title": ["a", "b"], "genres": [[], []]})
    return ML.MovieLens(ratings, items, "test", None)


def linear() -> nn.Module:
    return nn.Linear(2, 1)


# the keyword arguments most losses share
def loss_options(**kw) -> dict[str, Arg]:
    return {
        "temperature": temperature(),
        "sample_weight": weight(W),
        "reduction": choice("mean"),
        **kw,
    }


def in_batch_args(**kw) -> dict[str, Arg]:
    return {
        "query": floats(Q, device=True),
        "positives": set_arg(positives()),
        "candidates": set_arg(extras()),
        **loss_options(),
        **kw,
    }


def sampled_args(**kw) -> dict[str, Arg]:
    return {
        "query": floats(Q, device=True),
        "positives": set_arg(CandidateSet.from_ids(IDS, TABLE, log_q=LOGQ)),
        "candidates": set_arg(CandidateSet.from_ids(CAND_IDS, TABLE, log_q=CAND_LOGQ)),
        **loss_options(),
        **kw,
    }


def embeddings_pair(name1="view1", name2="view2", **kw) -> dict[str, Arg]:
    return {name1: floats(Q), name2: floats(KEYS), **kw}


# ============================================================================ the table

ENTRIES: dict[str, Entry] = {
    # ------------------------------------------------------------ candidates
    "candidates.CandidateSet": E(
        CandidateSet,
        embeddings=floats(KEYS, empty=False),
        ids=ids(IDS, device=True, shape=True),
        log_q=log_q(LOGQ, device=True, shape=False),
        mask=other(
            torch.ones(B, dtype=torch.bool),
            ("float mask", torch.ones(B), "raise"),
            ("mask of another length", torch.ones(B + 1, dtype=torch.bool), "raise"),
            device=True,
        ),
        bias=floats(torch.zeros(B), device=True),
        source=other(
            "fixed",
            ("unknown source", "bogus", "raise"),
            ("source 7", 7, "raise"),
            ("runs that do not cover the columns", (("batch", 1),), "raise"),
        ),
        same=[("embeddings", "ids")],
    ),
    "candidates.CandidateSet.from_ids": E(
        CandidateSet.from_ids,
        ids=ids(CAND_IDS, V),
        classes=other(
            TABLE, ("classes 'x'", "x", "raise"), ("integer classes", TABLE.long(), "raise")
        ),
        log_q=log_q(CAND_LOGQ, shape=False),
        class_bias=floats(torch.zeros(V), at=int(CAND_IDS[0])),
        sparse=flag(False),
        source=other("fixed", ("unknown source", "bogus", "raise"), ("source 7", 7, "raise")),
        same=[("ids", "log_q")],
    ),
    "candidates.CandidateSet.from_draw": E(
        CandidateSet.from_draw,
        draw=draw_arg(DRAW),
        classes=other(
            TABLE,
            ("classes 'x'", "x", "raise"),
            ("encoder returning d + 1 columns", lambda i: torch.zeros(len(i), D + 1), "run"),
            names=("classes", "item encoder"),
        ),
        class_bias=floats(torch.zeros(V), at=int(DRAW.ids[0])),
        correct=flag(),
        sparse=flag(False),
    ),
    "candidates.CandidateSet.positives_of": E(
        CandidateSet.positives_of,
        positive_ids=ids(
            IDS, V, skip=("wrong shape",), extra=[("3-d ids", IDS[None, None], "raise")]
        ),
        classes=other(TABLE, ("classes 'x'", "x", "raise")),
        draw=draw_arg(DRAW),
        class_bias=floats(torch.zeros(V)),
        correct=flag(),
        sparse=flag(False),
    ),
    "candidates.CandidateSet.from_batch": E(
        CandidateSet.from_batch,
        embeddings=floats(KEYS),
        ids=ids(IDS, V, names=("ids",)),
        item_probabilities=probs(
            PROBS, extra=[("zero probability of a batch id", _with(PROBS, 0, 0.0), "raise")]
        ),
        num_draws=integer(8, 1),
        same=[("embeddings", "ids")],
    ),
    "candidates.CandidateSet.concat": E(
        lambda a, b: CandidateSet.concat(a, b),
        a=set_arg(positives(), names=("sets[0]",)),
        b=set_arg(
            extras(),
            names=("sets[1]",),
            extra=[
                (
                    "set of another d",
                    CandidateSet(torch.zeros(2, D + 1), torch.tensor([1, 2])),
                    "raise",
                )
            ],
        ),
    ),
    "candidates.CandidateSet.select": E(
        lambda columns: positives().select(columns),
        columns=other(
            torch.tensor([0, 2]),
            ("index out of range", torch.tensor([7]), "raise"),
            ("negative index", torch.tensor([-9]), "raise"),
            ("float index", torch.tensor([0.5]), "raise"),
            ("index 'x'", "x", "raise"),
            ("2-d index", torch.tensor([[0]]), "raise"),
        ),
    ),
    "candidates.CandidateSet.with_mask": E(
        lambda mask: positives().with_mask(mask),
        mask=other(
            torch.ones(B, dtype=torch.bool),
            ("float mask", torch.ones(B), "raise"),
            ("mask of another length", torch.ones(B + 2, dtype=torch.bool), "raise"),
            ("mask 'x'", "x", "raise"),
        ),
    ),
    "candidates.CandidateSet.detach": E(lambda: positives().detach()),
    "candidates.CandidateSet.hit_columns": E(lambda: extras().hit_columns()),
    "candidates.CandidateSet.with_source": E(
        lambda source: positives().with_source(source),
        source=other(
            "fixed",
            ("unknown source", "bogus", "raise"),
            ("source 7", 7, "raise"),
            ("runs that do not cover the columns", (("batch", 1),), "raise"),
        ),
    ),
    "candidates.gather_rows": E(
        gather_rows,
        classes=other(
            TABLE,
            ("classes 'x'", "x", "raise"),
            ("encoder returning a list", lambda i: [0] * len(i), "raise"),
        ),
        ids=ids(CAND_IDS, V),
        sparse=flag(False),
    ),
    # ------------------------------------------------------------ validation switch
    "_validate.set_validate_args": E(
        lambda value: candidate_sampling.set_validate_args(value), value=flag()
    ),
    "_validate.validate_args": E(
        lambda value: candidate_sampling.validate_args(value).__enter__(), value=flag()
    ),
    # ------------------------------------------------------------ losses: the pipeline
    "losses.core.Temperature": E(
        L.Temperature,
        temperature=temperature(0.5),
        learnable=flag(False),
        max_scale=positive(100.0),
    ),
    "losses.core.Temperature.from_scale": E(
        L.Temperature.from_scale,
        scale=temperature(10.0, names=("scale",)),
        learnable=flag(False),
        max_scale=positive(100.0),
    ),
    "losses.core.Temperature.forward": E(
        lambda scores: L.Temperature(0.5)(scores), scores=floats(LOGITS, shape=False)
    ),
    "losses.core.mask_value": E(L.mask_value, dtype=dtype_arg()),
    "losses.core.upcast": E(L.upcast, tensor=other(Q, ("tensor 'x'", "x", "raise"))),
    "losses.core.score": E(L.score, query=floats(Q, device=True), candidates=set_arg(extras())),
    "losses.core.score_positives": E(
        L.score_positives, query=floats(Q, device=True), positives=set_arg(positives())
    ),
    "losses.core.apply_temperature": E(
        L.apply_temperature,
        scores=floats(LOGITS, shape=False),
        temperature=temperature(0.5),
        inplace=flag(False),
    ),
    "losses.core.correct_logits": E(
        L.correct_logits,
        logits=floats(LOGITS, shape=False),
        log_q=log_q(LOGITS[0], shape=False),
        inplace=flag(False),
    ),
    "losses.core.accidental_hits": E(
        L.accidental_hits,
        positive_ids=ids(IDS, skip=("wrong shape",)),
        candidate_ids=ids(CAND_IDS),
        positive_columns=ids(torch.tensor([0, 1, 2, 0]), 3),
        repeated_hits=choice("mask_all"),
        same=[("positive_ids", "positive_columns")],
    ),
    "losses.core.hits_to_remove": E(
        L.hits_to_remove,
        positive_ids=ids(IDS, skip=("wrong shape",)),
        columns=set_arg(extras()),
        remove_accidental_hits=flag(None),
        positive_columns=ids(torch.tensor([0, 1, 2, 0]), 3),
        repeated_hits=choice("mask_all"),
        logistic=flag(False),
        same=[("positive_ids", "positive_columns")],
    ),
    "losses.core.mask_logits": E(
        L.mask_logits,
        logits=floats(LOGITS, shape=False),
        removed=other(
            REMOVED,
            ("float removed", REMOVED.float(), "raise"),
            ("removed larger than logits", torch.ones(2, B, 6, dtype=torch.bool), "raise"),
        ),
        inplace=flag(False),
    ),
    "losses.core.positive_column_cross_entropy": E(
        L.positive_column_cross_entropy,
        logits=floats(LOGITS),
        positive_columns=ids(COLS, 6, skip=("wrong shape",)),
        same=[("logits", "positive_columns")],
    ),
    "losses.core.logistic_terms": E(
        L.logistic_terms,
        logits=floats(LOGITS, shape=False),
        labels=other(
            1.0,
            ("labels 'x'", "x", "raise"),
            ("labels True", True, "raise"),
            ("labels larger than logits", torch.ones(2, B, 6), "raise"),
        ),
        removed=other(REMOVED, ("float removed", REMOVED.float(), "raise")),
        inplace=flag(False),
    ),
    "losses.core.reduce_loss": E(
        L.reduce_loss,
        per_row=floats(POS_SCORES),
        reduction=choice("mean"),
        valid=other(
            torch.ones(B, dtype=torch.bool),
            ("float valid", torch.ones(B), "raise"),
            ("valid of another length", torch.ones(B + 1, dtype=torch.bool), "raise"),
        ),
        sample_weight=weight(W),
        same=[("per_row", "valid", "sample_weight")],
    ),
    # ------------------------------------------------------------ losses: full / importance
    "losses.importance.softmax_cross_entropy": E(
        L.softmax_cross_entropy,
        logits=floats(LOGITS),
        positive_ids=ids(COLS, 6),
        sample_weight=weight(W),
        reduction=choice("mean"),
        same=[("logits", "positive_ids")],
    ),
    "losses.importance.importance_sampled_log_partition": E(
        L.importance_sampled_log_partition,
        scores=floats(LOGITS, shape=False),
        log_proposal=log_q(
            LOGITS[0] * 0 - 1.0,
            shape=False,
            extra=[("log_proposal larger than scores", torch.zeros(2, B, 6), "raise")],
        ),
    ),
    "losses.importance.importance_weights": E(
        L.importance_weights,
        scores=floats(LOGITS, shape=False),
        log_proposal=log_q(LOGITS[0] * 0 - 1.0, shape=False),
    ),
    "losses.importance.effective_sample_size": E(
        L.effective_sample_size,
        weights=counts(LOGITS.abs(), shape=False),
    ),
    # ------------------------------------------------------------ losses: sampled
    "losses.sampled.candidate_logits": E(
        L.candidate_logits,
        **sampled_args(),
        remove_accidental_hits=flag(),
        repeated_hits=choice("mask_all"),
        _drop=("sample_weight", "reduction"),
    ),
    "losses.sampled.sampled_softmax_loss": E(
        L.sampled_softmax_loss,
        **sampled_args(),
        remove_accidental_hits=flag(),
        repeated_hits=choice("mask_all"),
    ),
    "losses.sampled.sampled_softmax_from_scores": E(
        L.sampled_softmax_from_scores,
        positive_scores=floats(POS_SCORES, skip=("wrong shape",)),
        negative_scores=floats(NEG_SCORES),
        positive_log_q=log_q(LOGQ),
        negative_log_q=log_q(torch.zeros(5)),
        mask=other(NEG_MASK, ("float mask", NEG_SCORES, "raise")),
        **loss_options(),
        same=[("positive_scores", "negative_scores")],
    ),
    "losses.sampled.SampledSoftmaxLoss": E(
        L.SampledSoftmaxLoss,
        sampler=other(SAMPLER, ("sampler 'x'", "x", "raise")),
        num_samples=integer(3, 1),
        unique=flag(),
        temperature=temperature(),
        remove_accidental_hits=flag(),
        repeated_hits=choice("mask_all"),
        subtract_log_q=flag(),
        reduction=choice("mean"),
        sparse=flag(False),
    ),
    "losses.logistic.NCELoss": E(
        L.NCELoss,
        sampler=other(SAMPLER, ("sampler 'x'", "x", "raise")),
        num_samples=integer(3, 1),
        unique=flag(),
        temperature=temperature(),
        remove_accidental_hits=flag(False),
        repeated_hits=choice("mask_all"),
        subtract_log_q=flag(),
        reduction=choice("mean"),
        sparse=flag(False),
    ),
    "losses.logistic.nce_from_scores": E(
        L.nce_from_scores,
        positive_scores=floats(POS_SCORES, skip=("wrong shape",)),
        negative_scores=floats(NEG_SCORES),
        positive_log_q=log_q(LOGQ),
        negative_log_q=log_q(torch.zeros(5)),
        mask=other(NEG_MASK, ("float mask", NEG_SCORES, "raise")),
        **loss_options(),
        same=[("positive_scores", "negative_scores")],
    ),
    "losses.logistic.nce_loss": E(
        L.nce_loss,
        **sampled_args(),
        remove_accidental_hits=flag(False),
        repeated_hits=choice("mask_all"),
    ),
    "losses.logistic.negative_sampling_loss": E(
        L.negative_sampling_loss,
        **sampled_args(),
        remove_accidental_hits=flag(False),
        repeated_hits=choice("mask_all"),
    ),
    "losses.logistic.sampled_logistic_loss": E(
        L.sampled_logistic_loss, **sampled_args(), repeated_hits=choice("mask_all")
    ),
    # ------------------------------------------------------------ losses: in-batch
    "losses.retrieval.in_batch_logits": E(
        L.in_batch_logits,
        **in_batch_args(),
        remove_accidental_hits=flag(),
        repeated_hits=choice("mask_all"),
        removed=other(
            torch.zeros(B, B + 3, dtype=torch.bool),
            ("float removed", torch.zeros(B, B + 3), "raise"),
            ("removed of another shape", torch.zeros(B, B, dtype=torch.bool), "raise"),
        ),
        _drop=("sample_weight", "reduction"),
    ),
    "losses.retrieval.in_batch_softmax_loss": E(
        L.in_batch_softmax_loss,
        **in_batch_args(),
        remove_accidental_hits=flag(),
        repeated_hits=choice("mask_all"),
    ),
    "losses.retrieval.RetrievalLoss": E(
        L.RetrievalLoss,
        temperature=temperature(),
        item_probabilities=probs(PROBS),
        sampler=other(
            SAMPLER,
            ("sampler 'x'", "x", "raise"),
            ("sampler of another catalogue", SM.UniformSampler(V + 5), "raise"),
        ),
        num_samples=integer(2, 0),
        unique=flag(False),
        remove_accidental_hits=flag(),
        reduction=choice("mean"),
    ),
    "losses.retrieval.RetrievalLoss.forward": E(
        lambda **kw: L.RetrievalLoss(item_probabilities=PROBS, sampler=SAMPLER, num_samples=2)(
            **kw
        ),
        query=floats(Q),
        positive_embeddings=floats(KEYS),
        positive_ids=ids(IDS, V),
        item_encoder=other(
            lambda i: TABLE[i],
            ("encoder returning d + 1 columns", lambda i: torch.zeros(len(i), D + 1), "raise"),
            ("item_encoder 'x'", "x", "raise"),
            names=("item_encoder",),
        ),
        sample_weight=weight(W),
        generator=generator(),
        same=[("query", "positive_embeddings", "positive_ids")],
    ),
    # ------------------------------------------------------------ losses: contrastive
    "losses.contrastive.pairwise_cosine_similarity": E(
        L.pairwise_cosine_similarity,
        a=floats(Q),
        b=floats(KEYS),
        eps=positive(1e-8),
    ),
    "losses.contrastive.pairwise_squared_distance": E(
        L.pairwise_squared_distance, a=floats(Q), b=floats(KEYS)
    ),
    "losses.contrastive.info_nce_loss": E(
        L.info_nce_loss,
        **embeddings_pair("query", "key"),
        symmetric=flag(False),
        normalize=flag(False),
        **loss_options(),
        same=[("query", "key")],
    ),
    "losses.contrastive.nt_xent_loss": E(
        L.nt_xent_loss,
        **embeddings_pair(),
        temperature=temperature(0.5),
        sample_weight=weight(W.repeat(2)),
        reduction=choice("mean"),
        same=[("view1", "view2")],
    ),
    "losses.contrastive.nt_bxent_loss": E(
        L.nt_bxent_loss,
        embeddings=floats(Q),
        positive_pairs=ids(PAIRS, B, extra=[("self-pair", torch.tensor([[1, 1]]), "raise")]),
        **loss_options(),
    ),
    "losses.contrastive.supcon_loss": E(
        L.supcon_loss,
        embeddings=floats(Q),
        labels=ids(LABELS, skip=("negative id",)),
        variant=choice("out"),
        **loss_options(),
        same=[("embeddings", "labels")],
    ),
    "losses.contrastive.soft_nearest_neighbor_loss": E(
        L.soft_nearest_neighbor_loss,
        embeddings=floats(Q),
        labels=ids(LABELS, skip=("negative id",)),
        distance=choice("squared_euclidean"),
        **loss_options(),
        same=[("embeddings", "labels")],
    ),
    "losses.contrastive.alignment_loss": E(
        L.alignment_loss,
        **embeddings_pair(),
        alpha=positive(2.0),
        sample_weight=weight(W),
        same=[("view1", "view2")],
    ),
    "losses.contrastive.uniformity_loss": E(
        L.uniformity_loss,
        embeddings=floats(Q),
        t=positive(2.0),
        sample_weight=weight(W),
    ),
    "losses.contrastive.InfoNCELoss": E(
        L.InfoNCELoss,
        temperature=temperature(),
        symmetric=flag(False),
        normalize=flag(False),
        reduction=choice("mean"),
    ),
    "losses.contrastive.NTXentLoss": E(
        L.NTXentLoss, temperature=temperature(), reduction=choice("mean")
    ),
    "losses.contrastive.NTBXentLoss": E(
        L.NTBXentLoss, temperature=temperature(), reduction=choice("mean")
    ),
    "losses.contrastive.SupConLoss": E(
        L.SupConLoss, temperature=temperature(), variant=choice("out"), reduction=choice("mean")
    ),
    "losses.contrastive.SoftNearestNeighborLoss": E(
        L.SoftNearestNeighborLoss,
        temperature=temperature(),
        distance=choice("cosine"),
        reduction=choice("mean"),
    ),
    # ------------------------------------------------------------ losses: sigmoid
    "losses.sigmoid.sigmoid_pairwise_logits": E(
        L.sigmoid_pairwise_logits,
        query=floats(Q, device=True),
        candidates=set_arg(positives()),
        temperature=temperature(),
        bias=real(0.0, extra=[("bias tensor of shape (2,)", torch.zeros(2), "raise")]),
    ),
    "losses.sigmoid.sigmoid_pair_terms": E(
        L.sigmoid_pair_terms,
        logits=floats(LOGITS),
        positive_ids=ids(IDS, skip=("wrong shape",)),
        candidate_ids=ids(torch.arange(6)),
        positive_columns=ids(COLS, 6),
        remove_accidental_hits=flag(),
        removed=other(REMOVED, ("float removed", REMOVED.float(), "raise")),
        same=[("logits", "positive_ids", "positive_columns")],
    ),
    "losses.sigmoid.sigmoid_pairwise_loss": E(
        L.sigmoid_pairwise_loss,
        **in_batch_args(),
        bias=real(-1.0),
        remove_accidental_hits=flag(),
    ),
    "losses.sigmoid.SigmoidPairwiseLoss": E(
        L.SigmoidPairwiseLoss,
        scale=temperature(10.0, names=("scale",)),
        bias=real(-10.0),
        learnable=flag(),
        remove_accidental_hits=flag(),
        reduction=choice("mean"),
    ),
    "losses.sigmoid.SigmoidPairwiseLoss.forward": E(
        lambda **kw: L.SigmoidPairwiseLoss()(**kw),
        query=floats(Q, device=True),
        positives=set_arg(positives()),
        candidates=set_arg(extras()),
        sample_weight=weight(W),
    ),
    # ------------------------------------------------------------ losses: hard negatives
    "losses.hard_negatives.unmasked": E(L.unmasked, logits=floats(LOGITS, nan="run", shape=False)),
    "losses.hard_negatives.hard_negative_mining": E(
        L.hard_negative_mining,
        logits=floats(LOGITS, nan="run"),
        num_hard_negatives=integer(2, 0),
        positive_columns=ids(COLS, 6),
        same=[("logits", "positive_columns")],
    ),
    "losses.hard_negatives.hardness_weighted_logits": E(
        L.hardness_weighted_logits,
        logits=floats(LOGITS),
        scores=floats(LOGITS * 0.5, at=1),
        hardness_alpha=nonnegative(1.0),
        positive_columns=ids(COLS, 6),
    ),
    "losses.hard_negatives.guide_false_negative_mask": E(
        L.guide_false_negative_mask,
        guide_scores=floats(LOGITS, nan="run"),
        positive_columns=ids(COLS, 6),
        margin=nonnegative(0.1),
        margin_strategy=choice("absolute"),
    ),
    "losses.hard_negatives.decoupled_cross_entropy": E(
        L.decoupled_cross_entropy,
        logits=floats(LOGITS),
        positive_columns=ids(COLS, 6),
        positive_weight=floats(W, empty=False),
        same=[("logits", "positive_columns", "positive_weight")],
    ),
    "losses.hard_negatives.dclw_positive_weights": E(
        L.dclw_positive_weights, positive_scores=floats(POS_SCORES), sigma=positive(0.5)
    ),
    "losses.hard_negatives.corrected_logq_weights": E(
        L.corrected_logq_weights,
        logits=floats(LOGITS),
        positive_columns=ids(COLS, 6),
        positive_log_q=log_q(LOGQ),
        same=[("logits", "positive_columns", "positive_log_q")],
    ),
    "losses.hard_negatives.debiased_cross_entropy": E(
        L.debiased_cross_entropy,
        logits=floats(LOGITS),
        positive_columns=ids(COLS, 6),
        tau_plus=real(0.1, 0.0, 0.999),
        beta=nonnegative(0.5),
        min_logit=real(-10.0),
    ),
    "losses.hard_negatives.multi_positive_cross_entropy": E(
        L.multi_positive_cross_entropy,
        logits=floats(LOGITS),
        positive_mask=other(
            LOGITS > 0,
            ("float mask", (LOGITS > 0).float(), "raise"),
            ("mask of another shape", LOGITS[:, :2] > 0, "raise"),
        ),
        variant=choice("out"),
    ),
    "losses.hard_negatives.multi_positive_softmax_loss": E(
        L.multi_positive_softmax_loss,
        query=floats(Q, device=True),
        candidates=set_arg(positives()),
        positive_mask=other(
            LABELS[:, None] == LABELS[None, :],
            ("float mask", torch.ones(B, B), "raise"),
            ("mask of another shape", torch.ones(B, 2, dtype=torch.bool), "raise"),
        ),
        variant=choice("out"),
        removed=other(torch.eye(B, dtype=torch.bool), ("float removed", torch.eye(B), "raise")),
        **loss_options(),
    ),
    "losses.hard_negatives.hard_negative_softmax_loss": E(
        L.hard_negative_softmax_loss,
        **in_batch_args(),
        remove_accidental_hits=flag(),
        false_negative_mask=other(
            torch.zeros(B, B + 3, dtype=torch.bool),
            ("float mask", torch.zeros(B, B + 3), "raise"),
            ("mask of another shape", torch.zeros(B, B, dtype=torch.bool), "raise"),
        ),
        hardness_alpha=nonnegative(0.5),
        num_hard_negatives=integer(2, 0),
        positive_in_denominator=choice("keep"),
        tau_plus=real(0.1, 0.0, 0.999),
        beta=nonnegative(0.5),
        min_logit=real(-10.0),
    ),
    "losses.hard_negatives.HardNegativeSoftmaxLoss": E(
        L.HardNegativeSoftmaxLoss,
        temperature=temperature(),
        hardness_alpha=nonnegative(0.5),
        num_hard_negatives=integer(2, 0),
        positive_in_denominator=choice("remove"),
        dclw_sigma=positive(0.5),
        remove_accidental_hits=flag(),
        reduction=choice("mean"),
    ),
    "losses.hard_negatives.HardNegativeSoftmaxLoss.forward": E(
        lambda **kw: L.HardNegativeSoftmaxLoss(num_hard_negatives=2)(**kw),
        query=floats(Q, device=True),
        positives=set_arg(positives()),
        candidates=set_arg(extras()),
        false_negative_mask=other(
            torch.zeros(B, B + 3, dtype=torch.bool), ("float mask", torch.zeros(B, B + 3), "raise")
        ),
        sample_weight=weight(W),
    ),
    # ------------------------------------------------------------ losses: chunked, gBCE
    "losses.chunked.chunked_softmax_cross_entropy": E(
        L.chunked_softmax_cross_entropy,
        query=floats(Q, device=True),
        classes=floats(TABLE, device=True),
        positive_ids=ids(IDS, V, device=True),
        class_bias=floats(torch.zeros(V), device=True),
        temperature=temperature(),
        ignore_index=integer(-100),
        sample_weight=weight(W),
        reduction=choice("mean"),
        chunk_size=integer(4, 1),
        method=choice("vocab"),
        memory_budget=integer(2**20, 1),
        same=[("query", "positive_ids")],
    ),
    "losses.chunked.ChunkedSoftmaxCrossEntropy": E(
        L.ChunkedSoftmaxCrossEntropy,
        temperature=temperature(),
        reduction=choice("mean"),
        ignore_index=integer(-100),
        chunk_size=integer(4, 1),
        method=choice("auto"),
        memory_budget=integer(2**20, 1),
    ),
    "losses.chunked.ChunkedSoftmaxCrossEntropy.forward": E(
        lambda **kw: L.ChunkedSoftmaxCrossEntropy(chunk_size=4)(**kw),
        query=floats(Q),
        classes=floats(TABLE),
        positive_ids=ids(IDS, V),
        class_bias=floats(torch.zeros(V)),
        sample_weight=weight(W),
    ),
    "losses.chunked.default_chunk_size": E(
        L.default_chunk_size,
        num_rows=integer(8, 0),
        num_classes=integer(100, 1),
        method=choice("vocab"),
        memory_budget=integer(2**20, 1),
        element_size=integer(4, 1),
    ),
    "losses.chunked.resolve_method": E(
        L.resolve_method,
        num_rows=integer(8, 0),
        num_classes=integer(100, 1),
        reduction=choice("mean"),
        half=flag(False),
        memory_budget=integer(2**20, 1),
        element_size=integer(4, 1),
    ),
    "losses.gbce.gbce_beta": E(
        L.gbce_beta,
        num_samples=integer(3, 1, V - 1),
        num_items=integer(V, 2),
        t=real(0.5, 0.0, 1.0),
    ),
    "losses.gbce.gbce_from_scores": E(
        L.gbce_from_scores,
        positive_scores=floats(POS_SCORES),
        negative_scores=floats(NEG_SCORES),
        num_items=integer(V, 6, names=("num_items", "num_samples")),
        t=real(0.5, 0.0, 1.0),
        num_samples=integer(5, 1, V - 1),
        mask=other(NEG_MASK, ("float mask", NEG_SCORES, "raise")),
        sample_weight=weight(W),
        reduction=choice("mean"),
        same=[("positive_scores", "negative_scores")],
    ),
    # ------------------------------------------------------------ sampling
    "sampling.samplers.CandidateDraw": E(
        SM.CandidateDraw,
        ids=ids(DRAW.ids),
        log_q=log_q(DRAW.log_q),
        num_tries=integer(3, 1),
        unique=flag(),
        positive_log_q=log_q(DRAW.positive_log_q, skip=("-inf",)),
        positive_ids=ids(IDS),
        same=[("ids", "log_q"), ("positive_log_q", "positive_ids")],
    ),
    "sampling.samplers.CandidateDraw.check_positive_ids": E(
        DRAW.check_positive_ids,
        positive_ids=ids(IDS, skip=("empty",)),
    ),
    **{
        f"sampling.samplers.{cls.__name__}": E(
            cls,
            num_items=integer(V, 1),
            device=other(None, ("device 7.5", 7.5, "raise")),
            exclude=other(
                [1],
                ("exclude out of range", [V], "raise"),
                ("exclude negative", [-1], "raise"),
                ("exclude of floats", torch.tensor([1.5]), "raise"),
                ("exclude everything", list(range(V)), "raise"),
            ),
        )
        for cls in (SM.CandidateSampler, SM.UniformSampler, SM.LogUniformSampler)
    },
    "sampling.samplers.CandidateSampler.sample": E(
        SAMPLER.sample,
        num_samples=integer(3, 1),
        unique=flag(),
        generator=generator(),
        positive_ids=ids(IDS, V, shape=False),
    ),
    "sampling.samplers.CandidateSampler.log_q": E(
        SAMPLER.log_q, ids=ids(IDS, V, shape=False), draw=draw_arg(DRAW)
    ),
    "sampling.samplers.UnigramSampler": E(
        SM.UnigramSampler,
        counts=counts(COUNTS, extra=[("zero count", _with(COUNTS, 0, 0.0), "raise")]),
        distortion=nonnegative(0.75),
    ),
    "sampling.samplers.build_alias_table": E(
        SM.build_alias_table,
        weights=counts(COUNTS, extra=[("all zero", torch.zeros(V), "raise")]),
    ),
    "sampling.frequency.item_counts": E(
        F.item_counts, ids=ids(IDS, V, shape=False), num_items=integer(V, 1)
    ),
    "sampling.frequency.item_probabilities": E(
        F.item_probabilities,
        counts=counts(COUNTS, extra=[("all zero", torch.zeros(V), "raise")]),
    ),
    "sampling.frequency.inclusion_probability": E(
        F.inclusion_probability, probs=probs(PROBS, shape=False), num_draws=integer(4, 0)
    ),
    "sampling.frequency.log_expected_count": E(
        F.log_expected_count,
        probs=probs(PROBS, shape=False),
        num_samples=integer(3, 1),
        num_tries=integer(5, 3),
        unique=flag(),
    ),
    "sampling.frequency.batch_log_q": E(
        F.batch_log_q,
        ids=ids(IDS, V, shape=False),
        item_probabilities=probs(PROBS),
        num_draws=integer(4, 1),
    ),
    "sampling.frequency.mixed_log_q": E(
        F.mixed_log_q,
        batch_probs=probs(PROBS, shape=False),
        extra_probs=probs(PROBS, shape=False),
        batch_size=integer(4, 1),
        num_samples=integer(2, 0),
        form=choice("expected_count"),
        same=[("batch_probs", "extra_probs")],
    ),
    "sampling.frequency.StreamingFrequencyEstimator": E(
        F.StreamingFrequencyEstimator,
        num_buckets=integer(16, 1),
        learning_rate=real(0.1, 0.0, 1.0),
        num_hashes=integer(2, 1),
        hash_ids=flag(),
        warm_start=flag(),
        seed=integer(0, 0),
    ),
    "sampling.frequency.StreamingFrequencyEstimator.buckets": E(
        lambda ids: F.StreamingFrequencyEstimator(16).buckets(ids), ids=ids(IDS, shape=False)
    ),
    "sampling.frequency.StreamingFrequencyEstimator.update": E(
        lambda ids: F.StreamingFrequencyEstimator(16).update(ids), ids=ids(IDS, shape=False)
    ),
    "sampling.frequency.StreamingFrequencyEstimator.estimate": E(
        lambda ids: F.StreamingFrequencyEstimator(16).estimate(ids), ids=ids(IDS, shape=False)
    ),
    "sampling.frequency.StreamingFrequencyEstimator.log_inclusion": E(
        lambda ids: F.StreamingFrequencyEstimator(16).log_inclusion(ids), ids=ids(IDS, shape=False)
    ),
    # ------------------------------------------------------------ eval
    "eval.known_pairs.KnownPairs": E(
        KnownPairs,
        user_index=ids(USERS),
        item_ids=ids(IDS, V),
        num_items=integer(V, 1),
        dense_limit=integer(100, 0),
        same=[("user_index", "item_ids")],
    ),
    "eval.known_pairs.KnownPairs.to": E(
        lambda device: known().to(device), device=other("cpu", ("device 7.5", 7.5, "raise"))
    ),
    "eval.known_pairs.KnownPairs.check_catalogue": E(
        lambda num_items: known().check_catalogue(num_items), num_items=integer(V, V, V)
    ),
    "eval.known_pairs.KnownPairs.check_users": E(
        lambda num_users: known().check_users(num_users),
        num_users=integer(3, 2, names=("num_users", "users")),
    ),
    "eval.known_pairs.KnownPairs.counts": E(
        lambda user_index: known().counts(user_index), user_index=ids(USERS, skip=("negative id",))
    ),
    "eval.known_pairs.KnownPairs.mask": E(
        lambda user_index, item_ids: known().mask(user_index, item_ids),
        user_index=ids(USERS, skip=("negative id",)),
        item_ids=ids(IDS, pad=-1, skip=("negative id",)),
    ),
    "eval.known_pairs.KnownPairs.contains": E(
        lambda user_index, item_ids: known().contains(user_index, item_ids),
        user_index=ids(USERS, skip=("negative id",)),
        item_ids=ids(IDS, skip=("negative id",)),
        same=[("user_index", "item_ids")],
    ),
    "eval.known_pairs.KnownPairs.fill_": E(
        lambda scores, user_index, value: known().fill_(scores, user_index, value),
        scores=floats(torch.zeros(2, V), nan="run", half=False),
        user_index=ids(torch.tensor([0, 1]), skip=("negative id",)),
        value=other(float("-inf"), ("value 'x'", "x", "raise"), ("value True", True, "raise")),
        same=[("scores", "user_index")],
    ),
    "eval.metrics.check_pairs": E(
        M.check_pairs,
        user_index=ids(USERS, 3),
        positive_ids=ids(IDS, V),
        num_users=integer(3, 1),
        num_items=integer(V, 1),
        same=[("user_index", "positive_ids")],
    ),
    "eval.metrics.count_above": E(
        M.count_above,
        scores=floats(NEG_SCORES, nan="run", skip=("integer dtype",)),
        positive_scores=floats(POS_SCORES, nan="run", skip=("integer dtype",)),
        same=[("scores", "positive_scores")],
    ),
    "eval.metrics.metrics_from_ranks": E(
        M.metrics_from_ranks,
        ranks=ids(RANKS),
        user_index=ids(USERS, skip=("negative id",)),
        ks=other(
            (1, 10),
            ("ks of 0", (0,), "raise"),
            ("ks 'x'", "x", "raise"),
            ("ks of floats", (1.5,), "raise"),
        ),
        same=[("ranks", "user_index")],
    ),
    "eval.metrics.popularity_strata": E(
        M.popularity_strata,
        popularity=counts(COUNTS, skip=("negative count",)),
        num_strata=integer(3, 1, V),
    ),
    "eval.metrics.positive_ranks": E(
        M.positive_ranks,
        user_embeddings=floats(UE, nan="raise"),
        item_embeddings=floats(TABLE, nan="raise"),
        user_index=ids(USERS, 3),
        positive_ids=ids(IDS, V),
        known=known_arg(known(), V),
        chunk_size=integer(2, 1),
        same=[("user_index", "positive_ids")],
    ),
    "eval.metrics.retrieval_metrics": E(
        M.retrieval_metrics,
        user_embeddings=floats(UE, nan="raise"),
        item_embeddings=floats(TABLE, nan="raise"),
        user_index=ids(USERS, 3),
        positive_ids=ids(IDS, V),
        ks=other((1, 5), ("ks of 0", (0,), "raise")),
        known=known_arg(known(), V),
        chunk_size=integer(2, 1),
        same=[("user_index", "positive_ids")],
    ),
    "eval.metrics.top_k_items": E(
        M.top_k_items,
        user_embeddings=floats(UE, nan="raise"),
        item_embeddings=floats(TABLE, nan="raise"),
        k=integer(3, 1, V - 2),
        known=known_arg(known(), V),
        chunk_size=integer(2, 1),
    ),
    "eval.metrics.sample_unseen_negatives": E(
        M.sample_unseen_negatives,
        user_index=ids(USERS, 3),
        positive_ids=ids(IDS, V),
        num_users=integer(3, 1),
        num_items=integer(V, 1),
        num_negatives=integer(3, 1, V - 3),
        known=known_arg(known(), V),
        generator=generator(),
        same=[("user_index", "positive_ids")],
    ),
    "eval.metrics.sampled_ranks": E(
        M.sampled_ranks,
        user_embeddings=floats(UE, nan="raise"),
        item_embeddings=floats(TABLE, nan="raise"),
        user_index=ids(USERS, 3),
        positive_ids=ids(IDS, V),
        num_negatives=integer(3, 1, V - 3),
        known=known_arg(known(), V),
        generator=generator(),
        same=[("user_index", "positive_ids")],
    ),
    "eval.metrics.sampled_metrics": E(
        M.sampled_metrics,
        user_embeddings=floats(UE, nan="raise"),
        item_embeddings=floats(TABLE, nan="raise"),
        user_index=ids(USERS, 3),
        positive_ids=ids(IDS, V),
        num_negatives=integer(3, 1, V - 3),
        ks=other((1,), ("ks of 0", (0,), "raise")),
        known=known_arg(known(), V),
        generator=generator(),
        same=[("user_index", "positive_ids")],
    ),
    "eval.metrics.stratified_metrics": E(
        M.stratified_metrics,
        ranks=ids(RANKS),
        user_index=ids(USERS, skip=("negative id",)),
        positive_ids=ids(IDS, V),
        item_strata=ids(STRATA),
        ks=other((1,), ("ks of 0", (0,), "raise")),
        same=[("ranks", "user_index", "positive_ids")],
    ),
    "eval.metrics.top_k_stratum_shares": E(
        M.top_k_stratum_shares,
        top_ids=ids(torch.tensor([[0, 1], [2, 3]]), V),
        item_strata=ids(STRATA),
    ),
    "eval.metrics.user_bootstrap": E(
        M.user_bootstrap,
        values=floats(W, shape=False),
        users=ids(USERS, 3),
        num_users=integer(3, 3, names=("num_users", "users")),
        num_resamples=integer(5, 1),
        generator=generator(),
        same=[("values", "users")],
    ),
    "eval.metrics.user_bootstrap_interval": E(
        M.user_bootstrap_interval,
        values=floats(W),
        users=ids(USERS, 3),
        num_users=integer(3, 3, names=("num_users", "users")),
        num_resamples=integer(5, 1),
        confidence=real(0.9, 0.0, 1.0),
        generator=generator(),
        same=[("values", "users")],
    ),
    "eval.metrics.expected_calibration_error": E(
        M.expected_calibration_error,
        probabilities=probs(torch.tensor([0.1, 0.5, 0.9, 0.3])),
        labels=other(
            torch.tensor([0, 1, 1, 0]),
            ("label 2", torch.tensor([0, 2, 1, 0]), "raise"),
            ("NaN label", torch.tensor([0.0, float("nan"), 1.0, 0.0]), "raise"),
        ),
        num_bins=integer(2, 1),
        binning=choice("quantile"),
        same=[("probabilities", "labels")],
    ),
    "eval.baselines.interaction_matrix": E(
        BL.interaction_matrix,
        known=known_arg(known(), V, skip=("known of another catalogue",)),
        num_users=integer(3, 2),
        dtype=dtype_arg(),
    ),
    "eval.baselines.most_popular_scores": E(
        BL.most_popular_scores, counts=counts(COUNTS), generator=generator()
    ),
    "eval.baselines.ease_weights": E(
        BL.ease_weights, x=floats(torch.eye(3, V), nan="raise"), l2=positive(1.0)
    ),
    "eval.baselines.ease_scores": E(
        BL.ease_scores, x=floats(torch.eye(3, V), nan="raise"), l2=positive(1.0)
    ),
    "eval.baselines.item_knn_scores": E(
        BL.item_knn_scores, x=floats(torch.eye(3, V), nan="raise"), k=integer(2, 1, V)
    ),
    "eval.baselines.ranks_from_scores": E(
        BL.ranks_from_scores,
        scores=floats(UE @ TABLE.T, nan="raise"),
        user_index=ids(USERS, 3),
        positive_ids=ids(IDS, V),
        known=known_arg(known(), V),
        candidate_ids=ids(torch.tensor([[4, 5]] * B), V),
        chunk_size=integer(2, 1),
        same=[("user_index", "positive_ids")],
    ),
    "eval.baselines.top_k_from_scores": E(
        BL.top_k_from_scores,
        scores=floats(UE @ TABLE.T, nan="raise"),
        k=integer(2, 1, V - 2),
        known=known_arg(known(), V),
    ),
    # ------------------------------------------------------------ scale
    "scale.distributed.all_gather_with_grad": E(
        DI.all_gather_with_grad,
        tensor=other(Q, ("tensor 'x'", "x", "raise")),
        sizes=other(None, ("sizes 'x'", "x", "raise")),
    ),
    "scale.distributed.gather_candidates": E(
        DI.gather_candidates,
        positives=set_arg(CandidateSet(KEYS, IDS)),
        item_probabilities=probs(PROBS, names=("item_probabilities", "positives.ids")),
    ),
    "scale.distributed.gathered_softmax_loss": E(
        DI.gathered_softmax_loss,
        query=floats(Q, device=True),
        positives=set_arg(CandidateSet(KEYS, IDS)),
        candidates=set_arg(extras()),
        item_probabilities=probs(PROBS),
        **loss_options(),
        remove_accidental_hits=flag(),
        repeated_hits=choice("mask_all"),
    ),
    "scale.distributed.ring_sigmoid_loss": E(
        DI.ring_sigmoid_loss,
        query=floats(Q, device=True),
        positives=set_arg(CandidateSet(KEYS, IDS)),
        item_probabilities=probs(PROBS),
        bias=real(0.0),
        remove_accidental_hits=flag(),
        **loss_options(),
    ),
    "scale.distributed.rank_sizes": E(DI.rank_sizes, rows=integer(4, 0)),
    "scale.distributed.launch": E(
        lambda **kw: DI.launch(abs, 1, **kw),
        world_size=integer(1, 1),
        backend=other("gloo", ("backend 7", 7, "raise")),
        threads_per_rank=integer(1, 1),
        timeout_s=positive(60.0),
    ),
    "scale.gradcache.checkpointed_in_batch_softmax_loss": E(
        GC.checkpointed_in_batch_softmax_loss,
        **in_batch_args(),
        block_size=integer(2, 1),
        remove_accidental_hits=flag(),
    ),
    "scale.gradcache.gradcache_backward": E(
        lambda **kw: GC.gradcache_backward(linear(), loss_fn=lambda e: e.pow(2).sum(), **kw),
        inputs=other(
            (torch.randn(4, 2, generator=_g),),
            ("inputs a tensor", torch.randn(4, 2), "raise"),
            ("inputs empty", (), "raise"),
            ("inputs of strings", ("x",), "raise"),
        ),
        chunk_size=integer(2, 1),
    ),
    "scale.memory.CrossBatchMemory": E(
        ME.CrossBatchMemory,
        size=integer(6, 1),
        dim=integer(D, 1),
        dtype=dtype_arg(),
        device=other(None, ("device 7.5", 7.5, "raise")),
    ),
    "scale.memory.CrossBatchMemory.enqueue": E(
        lambda embeddings, ids: ME.CrossBatchMemory(6, D).enqueue(embeddings, ids),
        embeddings=floats(KEYS, nan="raise"),
        ids=ids(IDS),
        same=[("embeddings", "ids")],
    ),
    "scale.memory.CrossBatchMemory.ages": E(lambda: ME.CrossBatchMemory(6, D).ages()),
    "scale.memory.CrossBatchMemory.candidates_for": E(
        lambda **kw: ME.CrossBatchMemory(6, D).candidates_for(**kw),
        positives=floats(KEYS),
        positive_ids=ids(IDS, V),
        item_probabilities=probs(PROBS),
        same=[("positives", "positive_ids")],
    ),
    "scale.memory.embedding_drift": E(
        ME.embedding_drift, stored=floats(KEYS), current=floats(Q), same=[("stored", "current")]
    ),
    "scale.memory.make_momentum_encoder": E(
        ME.make_momentum_encoder, encoder=other(linear(), ("encoder 'x'", "x", "raise"))
    ),
    "scale.memory.momentum_update": E(
        lambda **kw: ME.momentum_update(**kw),
        target=other(linear(), ("target 'x'", "x", "raise")),
        source=other(linear(), ("source of other shapes", nn.Linear(3, 1), "raise")),
        momentum=real(0.9, 0.0, 1.0),
    ),
    "scale.mining.brute_force_top_k": E(
        MI.brute_force_top_k,
        queries=floats(Q, nan="raise"),
        item_embeddings=floats(TABLE, nan="raise"),
        k=integer(3, 1, V),
        chunk_size=integer(2, 1),
    ),
    "scale.mining.MinedNegatives": E(
        MI.MinedNegatives,
        ids=ids(mined().ids, pad=-1),
        scores=floats(mined().scores),
        ranks=ids(mined().ranks),
        valid=other(mined().valid, ("float valid", mined().valid.float(), "raise")),
        built_at=integer(3, 0),
        same=[("ids", "scores", "ranks", "valid")],
    ),
    "scale.mining.MinedNegatives.flat": E(lambda: mined().flat()),
    "scale.mining.MinedNegatives.candidates": E(
        lambda **kw: mined().candidates(**kw),
        classes=other(
            TABLE,
            ("classes 'x'", "x", "raise"),
            ("a table without the mined ids", TABLE[:5], "raise"),
        ),
        log_q=real(0.0),
        share=flag(),
    ),
    "scale.mining.exclusion_mask": E(
        MI.exclusion_mask,
        ids=ids(torch.tensor([[3, 4], [5, -1], [6, 7], [8, 9]]), pad=-1),
        positive_ids=ids(IDS, pad=-1, skip=("wrong shape",)),
        known=known_arg(known(), V, skip=("known of another catalogue",)),
        user_index=ids(USERS, skip=("negative id",)),
        same=[("ids", "positive_ids", "user_index")],
    ),
    "scale.mining.survivors": E(
        MI.survivors,
        scores=floats(NEG_SCORES.sort(1, descending=True).values, nan="run"),
        excluded=other(NEG_SCORES > 1, ("float excluded", NEG_SCORES, "raise")),
        range_min=integer(0, 0),
        range_max=integer(3, 1),
        max_score=real(5.0),
        relative_margin=real(0.05, 0.0, 0.999),
        absolute_margin=nonnegative(0.1),
        positive_scores=floats(POS_SCORES + 3),
        same=[("scores", "excluded", "positive_scores")],
    ),
    "scale.mining.choose_negatives": E(
        MI.choose_negatives,
        scores=floats(NEG_SCORES, nan="run"),
        ids=ids(torch.arange(5).repeat(B, 1)),
        ranks=ids(torch.arange(5).repeat(B, 1)),
        keep=other(NEG_SCORES > 0, ("float keep", NEG_SCORES, "raise")),
        num_negatives=integer(2, 1),
        sampling=choice("random"),
        generator=generator(),
        built_at=integer(0, 0),
        same=[("scores", "ids", "ranks", "keep")],
    ),
    "scale.mining.default_hnsw_m": E(MI.default_hnsw_m, num_items=integer(10, 0)),
    "scale.mining.HardNegativeMiner": E(
        MI.HardNegativeMiner,
        index=choice("torch"),
        hnsw_m=integer(8, 1),
        ef_construction=integer(8, 1),
        ef_search=integer(8, 1),
        nlist=integer(2, 1),
        nprobe=integer(2, 1),
        refresh_every=integer(5, 1),
        num_threads=integer(1, 1),
    ),
    "scale.mining.HardNegativeMiner.build": E(
        lambda **kw: MI.HardNegativeMiner(index="torch").build(**kw),
        item_embeddings=floats(TABLE, nan="raise"),
        item_ids=ids(
            torch.arange(V),
            extra=[("repeated item ids", torch.zeros(V, dtype=torch.long), "raise")],
        ),
        step=integer(0, 0),
        same=[("item_embeddings", "item_ids")],
    ),
    "scale.mining.HardNegativeMiner.maybe_refresh": E(
        lambda **kw: MI.HardNegativeMiner(index="torch").maybe_refresh(**kw),
        step=integer(0, 0),
        item_embeddings=floats(
            TABLE, nan="raise", shape=False, extra=[("embeddings 'x'", "x", "raise")]
        ),
    ),
    "scale.mining.HardNegativeMiner.memory_bytes": E(lambda: miner().memory_bytes()),
    "scale.mining.HardNegativeMiner.item_vectors": E(
        lambda ids: miner().item_vectors(ids), ids=ids(IDS, V, shape=False)
    ),
    "scale.mining.HardNegativeMiner.search": E(
        lambda **kw: miner().search(**kw), queries=floats(Q, nan="raise"), k=integer(3, 1, V)
    ),
    "scale.mining.HardNegativeMiner.mine": E(
        lambda **kw: miner().mine(**kw),
        queries=floats(Q, nan="raise"),
        num_negatives=integer(2, 1),
        positive_ids=ids(IDS, pad=-1, skip=("wrong shape",)),
        known=known_arg(known(), V),
        user_index=ids(USERS, skip=("negative id",)),
        range_min=integer(0, 0),
        range_max=integer(4, 1),
        max_score=real(10.0),
        relative_margin=real(0.05, 0.0, 0.999),
        absolute_margin=nonnegative(0.0),
        sampling=choice("random"),
        generator=generator(),
        fetch=integer(8, 1),
        same=[("queries", "positive_ids", "user_index")],
    ),
    # ------------------------------------------------------------ models
    "models.ItemTower": E(
        MD.ItemTower,
        num_items=integer(V, 1),
        dim=integer(4, 1),
        num_hashes=integer(2, 0),
        num_buckets=integer(8, 1),
        sparse=flag(),
        init_scale=positive(0.05),
        seed=integer(0, 0),
    ),
    "models.ItemTower.forward": E(
        lambda item_ids: MD.ItemTower(V, 4)(item_ids), item_ids=ids(IDS, V, shape=False)
    ),
    "models.ItemTower.rows": E(
        lambda item_ids: MD.ItemTower(V, 4, num_hashes=2, num_buckets=8).rows(item_ids),
        item_ids=ids(IDS, V, shape=False),
    ),
    "models.ItemTower.all_items": E(lambda: MD.ItemTower(V, 4).all_items()),
    "models.UserTower": E(
        MD.UserTower,
        num_users=integer(3, 1),
        num_items=integer(V, 1),
        dim=integer(4, 1),
        sparse=flag(),
        init_scale=positive(0.05),
    ),
    "models.UserTower.forward": E(
        lambda **kw: MD.UserTower(3, V, 4)(**kw),
        user_ids=ids(torch.tensor([0, 1]), 3),
        history=ids(torch.tensor([[1, -1], [2, 3]]), V, pad=-1),
        same=[("user_ids", "history")],
    ),
    "models.UserTower.all_users": E(lambda: MD.UserTower(3, None, 4).all_users()),
    "models.SharedHistoryTower": E(
        MD.SharedHistoryTower,
        item_tower=other(MD.ItemTower(V, 4), ("item_tower 'x'", "x", "raise")),
        mlp_layers=integer(1, 0),
    ),
    "models.SharedHistoryTower.forward": E(
        lambda history: MD.SharedHistoryTower(MD.ItemTower(V, 4))(history=history),
        history=ids(torch.tensor([[1, -1], [2, 3]]), V, pad=-1),
    ),
    "models.TwoTowerModel": E(
        MD.TwoTowerModel,
        user_tower=other(MD.UserTower(3, None, 4), ("user_tower 'x'", "x", "raise")),
        item_tower=other(
            MD.ItemTower(V, 4),
            ("item_tower 'x'", "x", "raise"),
            ("item tower of another d", MD.ItemTower(V, 5), "raise"),
        ),
    ),
    "models.TwoTowerModel.forward": E(
        lambda **kw: MD.TwoTowerModel(MD.UserTower(3, None, 4), MD.ItemTower(V, 4))(**kw),
        positive_ids=ids(IDS[:2], V),
        user_ids=ids(torch.tensor([0, 1]), 3),
        same=[("positive_ids", "user_ids")],
    ),
    "models.TwoTowerModel.score": E(
        lambda **kw: MD.TwoTowerModel(MD.UserTower(3, None, D), MD.ItemTower(V, D)).score(**kw),
        query=floats(Q),
        candidates=floats(
            TABLE, extra=[("candidates of another d", torch.zeros(V, D + 1), "raise")]
        ),
    ),
    "models.sparse_parameters": E(
        MD.sparse_parameters, module=other(linear(), ("module 'x'", "x", "raise"))
    ),
    "models.SASRec": E(
        MD.SASRec,
        num_items=integer(V, 1),
        dim=integer(8, 1),
        max_len=integer(4, 1),
        num_blocks=integer(1, 0),
        num_heads=integer(2, 1),
        dropout=real(0.1, 0.0, 0.99),
        init_std=positive(0.05),
    ),
    "models.SASRec.forward": E(
        lambda history: MD.SASRec(V, 8, max_len=4)(history),
        history=ids(
            torch.tensor([[-1, 3, 4, 5], [1, 2, 3, 4]]),
            V,
            pad=-1,
            extra=[("longer than max_len", torch.zeros(2, 5, dtype=torch.long), "raise")],
        ),
    ),
    "models.SASRec.user_states": E(
        lambda history: MD.SASRec(V, 8, max_len=4).user_states(history),
        history=ids(
            torch.tensor([[-1, 3, 4, 5], [1, 2, 3, 4]]),
            V,
            pad=-1,
            extra=[("padding in the middle", torch.tensor([[3, -1, 4, -1]]), "raise")],
        ),
    ),
    "models.SASRec.item_embeddings": E(lambda: MD.SASRec(V, 8, max_len=4).item_embeddings()),
    # ------------------------------------------------------------ data
    "data.synthetic.zipf_probabilities": E(
        S.zipf_probabilities, num_items=integer(V, 1), exponent=positive(1.0), dtype=dtype_arg()
    ),
    "data.synthetic.make_softmax_problem": E(
        S.make_softmax_problem,
        num_items=integer(V, 2),
        dim=integer(4, 1),
        zipf_exponent=positive(1.0),
        separation=positive(1.0),
        seed=integer(0, 0),
    ),
    "data.synthetic.make_context_problem": E(
        S.make_context_problem,
        num_items=integer(V, 2),
        num_contexts=integer(3, 1),
        dim=integer(4, 1),
        zipf_exponent=positive(1.0),
        signal=positive(1.0),
        seed=integer(0, 0),
    ),
    "data.synthetic.make_planted_retrieval": E(
        S.make_planted_retrieval,
        num_users=integer(5, 1),
        num_items=integer(V, 2),
        dim=integer(4, 1),
        zipf_exponent=positive(1.0),
        signal=positive(1.5),
        seed=integer(0, 0),
    ),
    "data.synthetic.SyntheticSoftmax.logits": E(
        lambda x: S.make_softmax_problem(V, 4).logits(x), x=floats(torch.randn(3, 4, generator=_g))
    ),
    "data.synthetic.SyntheticSoftmax.log_probs": E(
        lambda x: S.make_softmax_problem(V, 4).log_probs(x),
        x=floats(torch.randn(3, 4, generator=_g)),
    ),
    "data.synthetic.SyntheticSoftmax.context_log_probs": E(
        lambda: S.make_context_problem(V, 3, 4).context_log_probs()
    ),
    "data.synthetic.SyntheticSoftmax.sample": E(
        lambda **kw: S.make_softmax_problem(V, 4).sample(**kw),
        num_examples=integer(5, 1),
        generator=generator(),
    ),
    "data.synthetic.PlantedRetrieval.two_tower": E(lambda: planted().two_tower()),
    "data.synthetic.PlantedRetrieval.scores": E(
        lambda user_ids: planted().scores(user_ids), user_ids=ids(torch.tensor([0, 4]), 5)
    ),
    "data.synthetic.PlantedRetrieval.log_probs": E(
        lambda **kw: planted().log_probs(**kw),
        user_ids=ids(torch.tensor([0, 4]), 5),
        chunk_size=integer(2, 1),
    ),
    "data.synthetic.PlantedRetrieval.item_marginal": E(
        lambda **kw: planted().item_marginal(**kw), chunk_size=integer(2, 1)
    ),
    "data.synthetic.PlantedRetrieval.sample": E(
        lambda **kw: planted().sample(**kw),
        num_examples=integer(6, 1),
        generator=generator(),
        chunk_size=integer(2, 1),
    ),
    "data.movielens.random_split": E(
        ML.random_split, num=integer(10, 2), train_fraction=real(0.8, 0.0, 1.0), seed=integer(0, 0)
    ),
    "data.movielens.history_windows": E(
        ML.history_windows,
        user_index=ids(torch.tensor([0, 0, 1]), skip=("negative id",)),
        item_index=ids(torch.tensor([3, 4, 5])),
        position=ids(
            torch.tensor([0, 1, 0]),
            extra=[("position reaching another user", torch.tensor([0, 1, 1]), "raise")],
        ),
        length=integer(2, 1),
        same=[("user_index", "item_index", "position")],
    ),
    "data.movielens.interactions": E(
        ML.interactions, movielens=other(movielens(), ("movielens 'x'", "x", "raise"))
    ),
    "data.movielens.sequences": E(
        ML.sequences,
        movielens=other(movielens(), ("movielens 'x'", "x", "raise")),
        length=integer(3, 1),
    ),
    # ------------------------------------------------------------ train, device
    "train.OptimizerGroup": E(
        TR.OptimizerGroup,
        optimizers=other(
            [torch.optim.SGD(linear().parameters(), lr=0.1)],
            ("optimizers 'x'", "x", "raise"),
            ("optimizers [1]", [1], "raise"),
        ),
    ),
    "train.OptimizerGroup.zero_grad": E(
        lambda set_to_none: TR.OptimizerGroup(
            [torch.optim.SGD(linear().parameters(), lr=0.1)]
        ).zero_grad(set_to_none),
        set_to_none=flag(),
    ),
    "train.OptimizerGroup.step": E(
        lambda: TR.OptimizerGroup([torch.optim.SGD(linear().parameters(), lr=0.1)]).step()
    ),
    "train.make_optimizer": E(
        TR.make_optimizer,
        model=other(linear(), ("model 'x'", "x", "raise")),
        name=choice("adagrad"),
        lr=positive(0.1),
        initial_accumulator_value=nonnegative(0.0),
    ),
    "train.iterate_batches": E(
        lambda **kw: list(TR.iterate_batches(**kw)),
        tensors=other(
            (torch.arange(5), torch.arange(5)),
            ("tensors of other lengths", (torch.arange(5), torch.arange(4)), "raise"),
            ("tensors 'x'", "x", "raise"),
        ),
        batch_size=integer(2, 1),
        shuffle=flag(),
        generator=generator(),
        drop_last=flag(False),
    ),
    "train.train": E(
        lambda **kw: TR.train(linear(), lambda m, b: m(b[0]).pow(2).mean(), progress=False, **kw),
        data=other((torch.randn(4, 2),), ("data 'x'", "x", "raise")),
        epochs=integer(1, 1),
        batch_size=integer(2, 1),
        seed=integer(0, 0),
        drop_last=flag(False),
    ),
    "device.book_seed": E(DV.book_seed, seed=integer(0, 0)),
    "device.seed_everything": E(DV.seed_everything, seed=integer(0, 0)),
    "device.has_float64": E(
        DV.has_float64,
        device=other("cpu", ("device 7.5", 7.5, "raise"), ("device 'nope'", "nope", "raise")),
    ),
    "device.float64_or_float32": E(
        DV.float64_or_float32,
        device=other("cpu", ("device 7.5", 7.5, "raise"), ("device 'nope'", "nope", "raise")),
    ),
    "device.exact_float64": E(DV.exact_float64, tensor=other(Q, ("tensor 'x'", "x", "raise"))),
    "device.time_calls": E(
        lambda **kw: DV.time_calls(lambda: None, **kw),
        repeats=integer(2, 1),
        warmup=integer(0, 0),
        min_seconds=nonnegative(0.0),
        max_repeats=integer(3, 1),
    ),
}

#: Public callables without an entry, each with its reason.
EXEMPT: dict[str, str] = {
    "_validate.get_validate_args": "takes no argument",
    "data.movielens.default_cache_dir": "takes no argument",
    "data.movielens.load_movielens_100k": "downloads; its one argument is a path",
    "data.movielens.MovieLens": "a record of DataFrames built by load_movielens_100k",
    "data.movielens.MovieLensUnavailable": "an exception class",
    "data.synthetic.SyntheticBatch": "a record built by SyntheticSoftmax.sample",
    "data.synthetic.SyntheticSoftmax": (
        "built by make_softmax_problem / make_context_problem (entries above)"
    ),
    "data.synthetic.PlantedRetrieval": "built by make_planted_retrieval (entry above)",
    "device.get_device": "takes no argument (the environment variable is tested in test_device)",
    "device.seed_offset": "takes no argument (the environment variable is tested in test_device)",
    "scale.distributed.rank_and_world_size": "its one argument is a process group",
    "scale.gradcache.GradCacheOutput": "a NamedTuple returned by gradcache_backward",
    "scale.mining.import_faiss": "takes no argument",
    "losses.core.Temperature.extra_repr": "the module's repr",
    "losses.core._Loss.extra_repr": "the loss modules' repr",
    "losses.sigmoid.SigmoidPairwiseLoss.extra_repr": "the module's repr",
}

# the loss modules without a forward of their own share one
ENTRIES["losses.core._Loss.forward"] = E(
    lambda query, key, sample_weight: L.InfoNCELoss()(query, key, sample_weight=sample_weight),
    query=floats(Q),
    key=floats(KEYS),
    sample_weight=weight(W),
    same=[("query", "key")],
)
# the sampled modules share one forward
ENTRIES["losses.sampled._SampledLoss.forward"] = E(
    lambda **kw: L.SampledSoftmaxLoss(SAMPLER, 3)(**kw),
    query=floats(Q),
    classes=other(TABLE, ("classes 'x'", "x", "raise")),
    positive_ids=ids(
        IDS, V, skip=("wrong shape",), extra=[("3-d positive_ids", IDS[None, None], "raise")]
    ),
    class_bias=floats(torch.zeros(V), at=int(IDS[0])),
    sample_weight=weight(W),
    generator=generator(),
)


def _drop_options():
    """``_drop`` in an entry's arguments: options of the shared helpers the callable lacks."""
    for entry in ENTRIES.values():
        drop = entry.args.pop("_drop", None)
        for name in drop or ():
            entry.args.pop(name, None)


_drop_options()


# ============================================================================ the walk


def _modules():
    names = ["candidate_sampling"] + [
        m.name for m in pkgutil.walk_packages(candidate_sampling.__path__, "candidate_sampling.")
    ]
    return [importlib.import_module(n) for n in names]


def public_callables() -> dict[str, Any]:
    """``{"losses.core.score": score, "candidates.CandidateSet.select": ..., ...}``: every
    callable in an ``__all__`` of the package, and the public methods of the classes."""
    found: dict[str, Any] = {}
    for module in _modules():
        for name in getattr(module, "__all__", ()):
            obj = getattr(module, name)
            if not callable(obj):
                continue
            key = f"{obj.__module__.removeprefix('candidate_sampling.')}.{obj.__qualname__}"
            found[key] = obj
            if inspect.isclass(obj):
                for klass in obj.__mro__:
                    if not klass.__module__.startswith("candidate_sampling"):
                        continue
                    for attr, member in vars(klass).items():
                        # mutmut's copies of a method (`xǁClassǁname__mutmut_3`) are
                        # not public: skip them so the walk also runs on its mutants
                        if attr.startswith("_") or "__mutmut_" in attr:
                            continue
                        if isinstance(member, (classmethod, staticmethod)):
                            member = member.__func__
                        if inspect.isfunction(member):
                            owner = f"{klass.__module__.removeprefix('candidate_sampling.')}"
                            found[f"{owner}.{klass.__qualname__}.{attr}"] = member
    return found


def test_every_public_callable_has_an_entry():
    found = public_callables()
    missing = sorted(k for k in found if k not in ENTRIES and k not in EXEMPT)
    assert not missing, f"public callables without an entry or an exemption: {missing}"
    stale = sorted(k for k in [*ENTRIES, *EXEMPT] if k not in found)
    assert not stale, f"entries for names that are not public (renamed?): {stale}"


# ============================================================================ running a case


def _outputs(result) -> list[torch.Tensor]:
    """Every floating tensor in a result (tensors, tuples, dicts, dataclasses, sets)."""
    if isinstance(result, torch.Tensor):
        return [result] if result.is_floating_point() else []
    if isinstance(result, (int, float)) and not isinstance(result, bool):
        return [torch.tensor(float(result))]
    if isinstance(result, (tuple, list)):
        return [t for r in result for t in _outputs(r)]
    if isinstance(result, dict):
        return [t for r in result.values() for t in _outputs(r)]
    if is_dataclass(result) and not isinstance(result, type):
        return [t for f in fields(result) for t in _outputs(getattr(result, f.name))]
    if isinstance(result, nn.Module):
        return [p.detach() for p in result.parameters()]
    return []


def _finite(result) -> bool:
    return all(bool(torch.isfinite(t).all()) for t in _outputs(result))


def _half_extremes(value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``value`` scaled to the float16 extremes (|x| up to 6e4): (float16, its float32)."""
    scale = 6.0e4 / max(float(value.abs().max()), 1e-6)
    half = (value * scale).half()
    return half, half.float()


def run_variant(entry: Entry, name: str, arg: Arg, label: str, bad, expect: str) -> str | None:
    """None if the call does what ``expect`` says, else a one-line description.

    An error may name the argument, or (for an empty tensor or a wrong shape, whose length
    no longer matches) an argument that must agree with it in length (``Entry.same``)."""
    kwargs = {k: a.value for k, a in entry.args.items()}
    names = arg.names or (name,)
    if expect == "run" or label.endswith("wrong shape"):  # its length no longer agrees
        names = names + tuple(n for group in entry.same if name in group for n in group)
    if expect == "half":
        kwargs[name], reference = _half_extremes(bad)
        try:
            with_32 = entry.call(**{**kwargs, name: reference})
        except ValueError:
            return None  # an input the call refuses in float32 too
        if not _finite(with_32):
            return None
    else:
        kwargs[name] = bad
    try:
        result = entry.call(**kwargs)
    except ValueError as err:
        # the name as a whole word: "XXnum_itemsXX" (a mutant of the message) does not count
        if not any(re.search(rf"(?<![A-Za-z0-9]){re.escape(n)}(?![A-Za-z0-9])", str(err))
                   for n in names):
            return f"{label}: ValueError naming the wrong argument: {str(err)[:160]}"
        return None
    except Exception as err:  # noqa: BLE001 - any other exception is the defect
        kind = type(err).__name__
        return f"{label}: {kind} instead of a ValueError naming {names[0]}: {str(err)[:160]}"
    if expect == "raise":
        return f"{label}: accepted silently"
    if expect == "nan" and _finite(result):
        return f"{label}: a non-finite input gave a finite result"
    if expect == "half" and not _finite(result):
        return f"{label}: non-finite result in float16 where float32 is finite"
    return None


def _mismatched(entry: Entry, group: tuple[str, ...]):
    """The call with the first argument of ``group`` one row short (None if not possible)."""
    name = group[0]
    value = entry.args[name].value
    if not isinstance(value, torch.Tensor) or value.shape[0] < 2:
        return None
    return name, value[:-1]


def failures_of(key: str) -> list[str]:
    entry = ENTRIES[key]
    found = []
    for name, arg in entry.args.items():
        for label, bad, expect in variants(arg):
            failure = run_variant(entry, name, arg, f"{name}: {label}", bad, expect)
            if failure:
                found.append(failure)
    for group in entry.same:
        cut = _mismatched(entry, group)
        if cut is None:
            continue
        name, bad = cut
        arg = Arg("other", bad, names=group)
        failure = run_variant(entry, name, arg, f"mismatched lengths of {group}", bad, "raise")
        if failure:
            found.append(failure)
    return found


@pytest.mark.parametrize("key", sorted(ENTRIES))
def test_every_valid_call_runs(key):
    """The table's valid calls are valid: a bad variant is then the only change. One test
    per entry, so a mutation tester runs only the entries that reach the mutated code."""
    entry = ENTRIES[key]
    entry.call(**{k: a.value for k, a in entry.args.items()})


@pytest.mark.parametrize("key", sorted(ENTRIES))
def test_a_careless_call_fails_fast_and_names_its_argument(key):
    found = failures_of(key)
    assert not found, f"{key}:\n  " + "\n  ".join(found)


# ============================================================================ the issue's examples


def _miner_with_another_catalogue():
    other_catalogue = KnownPairs(torch.tensor([0]), torch.tensor([1]), num_items=500)
    return miner().mine(Q, num_negatives=2, known=other_catalogue, user_index=USERS)


#: (what, the call, the error's pattern): each example of issue 41 that raised a cryptic
#: error, named the wrong argument or returned a silent result
ISSUE_EXAMPLES = [
    ("Temperature(1e-40): 1/τ is inf", lambda: L.Temperature(1e-40), r"^temperature must lie"),
    (
        "SigmoidPairwiseLoss(scale=1e300): a NaN loss",
        lambda: L.SigmoidPairwiseLoss(scale=1e300),
        r"^scale must lie",
    ),
    (
        "KnownPairs.mask truncates 2.7 to 2",
        lambda: known().mask(USERS[:1], torch.tensor([2.7])),
        r"^item_ids must be an integer tensor",
    ),
    (
        "KnownPairs.mask accepts bools",
        lambda: known().mask(USERS[:1], torch.tensor([True])),
        r"^item_ids must be an integer tensor",
    ),
    (
        "min_logit without tau_plus or beta changes nothing",
        lambda: L.hard_negative_softmax_loss(Q, positives(), min_logit=-1.0),
        r"^min_logit needs tau_plus > 0 or beta > 0",
    ),
    (
        "correct_logits with a NaN log Q",
        lambda: L.correct_logits(LOGITS, _with(LOGITS[0], 1, float("nan"))),
        r"^log_q must be finite",
    ),
    (
        "correct_logits with an inf log Q",
        lambda: L.correct_logits(LOGITS, _with(LOGITS[0], 1, float("inf"))),
        r"^log_q must be finite",
    ),
    (
        "corrected_logq_weights with a -inf log Q",
        lambda: L.corrected_logq_weights(LOGITS, 0, positive_log_q=_with(LOGQ, 0, float("-inf"))),
        r"^positive_log_q must be finite",
    ),
    (
        "HardNegativeMiner.mine with a known of another catalogue",
        _miner_with_another_catalogue,
        r"^known must be built for the catalogue of 10 items",
    ),
    (
        "pairwise_cosine_similarity(eps=-1)",
        lambda: L.pairwise_cosine_similarity(Q, eps=-1.0),
        r"^eps must be > 0",
    ),
    (
        "a 2.0-style tuple draw to positives_of",
        lambda: CandidateSet.positives_of(
            IDS, TABLE, draw=(DRAW.ids, DRAW.log_q, DRAW.positive_log_q)
        ),
        r"^draw must be a CandidateDraw .*tuple draw .* is one CandidateDraw now",
    ),
    (
        "a 2.0-style tuple to a sampled loss",
        lambda: L.sampled_softmax_loss(Q, (TABLE, IDS), CandidateSet.from_draw(DRAW, TABLE)),
        r"^positives must be a CandidateSet, got tuple \(2\.0's tensors and tuples are gone",
    ),
    (
        "generator=0 in sampled_ranks",
        lambda: M.sampled_ranks(UE, TABLE, USERS, IDS, num_negatives=3, generator=0),
        r"^generator must be a torch\.Generator",
    ),
    (
        "generator=0 in sample_unseen_negatives",
        lambda: M.sample_unseen_negatives(
            USERS, IDS, num_users=3, num_items=V, num_negatives=3, generator=0
        ),
        r"^generator must be a torch\.Generator",
    ),
    (
        "generator=0 in mine",
        lambda: miner().mine(Q, num_negatives=2, sampling="random", generator=0),
        r"^generator must be a torch\.Generator",
    ),
    (
        "CandidateSet.select with a bad index",
        lambda: positives().select(torch.tensor([7])),
        r"^columns \(of a set of 4 columns\) must lie in \[0, 4\)",
    ),
    (
        "float positive_ids in a sampled loss",
        lambda: L.SampledSoftmaxLoss(SAMPLER, 3)(Q, TABLE, IDS.float()),
        r"^positive_ids must be an integer tensor",
    ),
    (
        "negative positive_ids in a sampled loss",
        lambda: L.SampledSoftmaxLoss(SAMPLER, 3)(Q, TABLE, _with(IDS, 0, -3)),
        r"^positive_ids must lie in \[0, 10\)",
    ),
    (
        "float positive_ids to positives_of",
        lambda: CandidateSet.positives_of(IDS.float(), TABLE),
        r"^positive_ids must be an integer tensor",
    ),
    (
        "an item encoder returning d + 1 columns",
        lambda: L.RetrievalLoss(sampler=SAMPLER, num_samples=2)(
            Q, KEYS, IDS, item_encoder=lambda i: torch.zeros(len(i), D + 1)
        ),
        r"^item_encoder must return embeddings of size d = 3",
    ),
    ("SASRec(dropout='x')", lambda: MD.SASRec(V, dropout="x"), r"^dropout must be a number"),
    (
        "KnownPairs.fill_(value='x')",
        lambda: known().fill_(torch.zeros(1, V), USERS[:1], value="x"),
        r"^value must be a number",
    ),
]


@pytest.mark.parametrize(
    "call, pattern", [(c, p) for _, c, p in ISSUE_EXAMPLES], ids=[w for w, _, _ in ISSUE_EXAMPLES]
)
def test_an_example_of_issue_41_fails_fast_and_names_its_argument(call, pattern):
    with pytest.raises(ValueError, match=pattern):
        call()


def test_sasrec_takes_right_padding_as_left_padding():
    """``pad_sequence``'s right padding gave an all-zero query; now the same state as the
    left-padded history, and a -1 inside a row is an error."""
    model = MD.SASRec(V, 8, max_len=4).eval()
    right, left = torch.tensor([[3, 4, -1, -1]]), torch.tensor([[-1, -1, 3, 4]])
    state = model.user_states(right)
    assert float(state.norm()) > 0
    torch.testing.assert_close(state, model.user_states(left))
    torch.testing.assert_close(model(right)[:, :2], model(left)[:, 2:])
    assert float(model(right)[:, 2:].abs().max()) == 0.0  # padded columns stay zero
    with pytest.raises(ValueError, match="padding inside row 0"):
        model.user_states(torch.tensor([[3, -1, 4, -1]]))


@pytest.mark.parametrize("method", ["vocab", "rows"])
def test_chunked_loss_of_all_zero_weights_is_zero_as_every_loss(method):
    zero = torch.zeros(B)
    loss = L.chunked_softmax_cross_entropy(Q, TABLE, IDS, sample_weight=zero, method=method)
    assert float(loss) == 0.0
    assert float(L.in_batch_softmax_loss(Q, positives(), sample_weight=zero)) == 0.0
    # every row ignored stays NaN, as F.cross_entropy
    ignored = torch.full((B,), -100)
    assert math.isnan(float(L.chunked_softmax_cross_entropy(Q, TABLE, ignored, method=method)))


# ============================================================================ docstrings

#: Options that change memory, speed or an error message, never a result: their defaults
#: need not be stated (``name`` is what an error calls an argument; a few callables'
#: result-changing ``name`` are checked by hand below).
NOT_RESULTS = {
    "chunk_size",
    "block_size",
    "sparse",
    "inplace",
    "progress",
    "description",
    "name",
    "num_threads",
    "dense_limit",
    "timeout_s",
    "threads_per_rank",
    "max_repeats",
    "warmup",
    "min_seconds",
    "repeats",
    "set_to_none",
    "device",
}

#: Peer-compatible options: a callable taking one names the peer whose behaviour it
#: reproduces (one of the spellings) in its docstring.
PEERS = {
    "repeated_hits": ("TensorFlow", "TF's", "TF "),
    "variant": ("pytorch-metric-learning",),
    "num_hard_negatives": ("TF Recommenders", "TFRS"),
    "initial_accumulator_value": ("Keras",),
    "margin_strategy": ("GISTEmbed", "sentence-transformers"),
    "relative_margin": ("NV-Retriever",),
    "symmetric": ("CLIP",),
    "max_scale": ("CLIP",),
    "distortion": ("word2vec",),
}


def _doc(obj) -> str:
    doc = inspect.getdoc(obj) or ""
    if inspect.isclass(obj):
        doc += "\n" + (inspect.getdoc(obj.__init__) or "")
    return doc


def _parameters(obj):
    try:
        return inspect.signature(obj.__init__ if inspect.isclass(obj) else obj).parameters
    except (TypeError, ValueError):
        return {}


def _states_default(doc: str, name: str, default) -> bool:
    """``name`` is mentioned, and within its sentence's reach the default value or the word
    "default"."""
    spellings = {repr(default), str(default)}
    if isinstance(default, str):
        spellings |= {f'"{default}"', f"'{default}'"}
    if isinstance(default, float) and math.isfinite(default):
        spellings.add(f"{default:g}")
    if isinstance(default, float) and math.isinf(default):
        spellings.add("-inf" if default < 0 else "inf")
    for match in re.finditer(re.escape(name), doc):
        window = doc[match.start() : match.start() + 250]
        if "default" in window or any(s in window for s in spellings):
            return True
    return False


def test_docstrings_state_every_default_that_changes_a_result():
    missing = []
    for key, obj in public_callables().items():
        doc = _doc(obj)
        for name, p in _parameters(obj).items():
            if p.default in (inspect.Parameter.empty, None) or name.startswith("_"):
                continue
            if name in NOT_RESULTS or name in ("self", "cls"):
                continue
            if not _states_default(doc, name, p.default):
                missing.append(f"{key}: {name}={p.default!r}")
    assert not missing, "defaults no docstring states:\n  " + "\n  ".join(missing)
    assert _states_default(_doc(TR.make_optimizer), "name", "adagrad")


def test_peer_compatible_options_name_their_peer():
    missing = []
    for key, obj in public_callables().items():
        doc = _doc(obj)
        for name in _parameters(obj):
            if name in PEERS and not any(peer in doc for peer in PEERS[name]):
                missing.append(f"{key}: {name} (names none of {PEERS[name]})")
    assert not missing, "\n  ".join(missing)


def test_the_package_ships_its_type_hints():
    """PEP 561: without ``py.typed`` a user's type checker ignores the package's hints; the
    wheel carries it through ``[tool.setuptools.package-data]``."""
    from pathlib import Path

    package = Path(candidate_sampling.__file__).parent
    assert (package / "py.typed").is_file()
    pyproject = (package.parents[1] / "pyproject.toml").read_text()
    assert 'candidate_sampling = ["py.typed"]' in pyproject
