"""Benchmark 6, the floor: each package loss against the least plain-torch code for it.

For every loss the benchmark holds a *floor*: the shortest plain PyTorch that computes the
same loss and the same gradients (no argument checks, no named pipeline steps, no dtype
handling), written here, next to the package call it is measured against. Before any
timing, each floor is checked against the package (loss and every gradient,
``torch.testing.assert_close``), so a ratio never compares two different computations.

The losses, at their realistic shapes (d = 128 everywhere):

* ``sampled_softmax``: :func:`~candidate_sampling.losses.sampled_softmax_loss` into a
  class table with a sparse gradient, |V| = 10^6 (10^5 with ``--quick``), B = 512,
  k = 4,096 log-uniform unique draws, logQ-corrected, accidental hits removed (TF's
  defaults). Floor: one ``F.embedding`` of the B positive and k sampled ids, the (B, k)
  matmul, the positive dot product, the corrections, the hit mask, a cross-entropy.
* ``nce``: :func:`~candidate_sampling.losses.nce_loss`, same shapes, TF's defaults (hits
  kept, log expected count subtracted). Floor: the same gather and matmul, two softplus.
* ``in_batch_softmax``: :func:`~candidate_sampling.losses.in_batch_softmax_loss`,
  B = 4,096 queries against their B positives, log Q = log(B·p(y)), τ = 0.05, duplicate
  positives removed by id. Floor: matmul, ``/ τ − log Q``, the id mask, a cross-entropy.
* ``mixed_softmax``: the same loss with B' = 4,096 extra uniform negatives appended to the
  candidates (C = 8,192) and the mixed expected count log(B·p + B'/|V|).
* ``info_nce``: :func:`~candidate_sampling.losses.info_nce_loss`, B = 4,096 pairs, cosine
  similarity, τ = 0.1. Floor: ``F.cross_entropy(normalize(q) @ normalize(k).T / τ, arange)``.
* ``nt_xent``: :func:`~candidate_sampling.losses.nt_xent_loss`, 2 × 4,096 views, τ = 0.5.
  Floor: normalise, (2N, 2N) matmul ``/ τ``, ``fill_diagonal_``, cross-entropy.

One step is forward and backward (gradients into the leaves: query, table or candidates,
views), with the gradients reset to ``None`` before it. Floor, package with value checks
off and package with them on (:func:`candidate_sampling.validate_args`) are timed in the
same run, interleaved step by step (the order alternates every round), each step
synchronised on the device; ratios are median step times, package / floor
(``<loss>_vs_floor_time@<size>`` with checks off, ``...,checks_on`` with them on).
Memory: the peak bytes of tensors allocated during one step and alive at once (CPU: the
PyTorch profiler's memory timeline, :func:`benchmarks.common.peak_tensor_bytes`; CUDA:
``max_memory_allocated`` minus what was allocated before), package with checks off over
floor (``<loss>_vs_floor_memory@<size>``). Where a ratio misses its target
(time ≤ 1.10× with checks off, ≤ 1.25× with them on, memory ≤ 1.10×) the benchmark
profiles both (``torch.profiler``, self time per operator and step) and writes the table.

On the CPU the benchmark runs with one torch thread (``threads``; restored afterwards):
the ratios are about the same with two, and one thread is far less disturbed by other
processes on a shared machine. The device (``get_device()``) labels every figure.
"""

from __future__ import annotations

import gc
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from benchmarks.common import (
    fmt_bytes,
    fmt_ratio,
    fmt_seconds,
    markdown_table,
    peak_tensor_bytes,
    size_label,
    summarize,
    write_json,
)
from candidate_sampling import CandidateSet, validate_args
from candidate_sampling.device import get_device, synchronize
from candidate_sampling.losses import (
    in_batch_softmax_loss,
    info_nce_loss,
    nce_loss,
    nt_xent_loss,
    sampled_softmax_loss,
)
from candidate_sampling.sampling.samplers import LogUniformSampler, UniformSampler

TIME_TARGET_OFF = 1.10
TIME_TARGET_ON = 1.25
MEMORY_TARGET = 1.10
#: quick → (min rounds, max rounds, seconds of timed steps per case, all contenders)
ROUNDS = {True: (7, 40, 8.0), False: (15, 200, 40.0)}
#: smoke (CI): one round of each contender per case, small tables and batches
SMOKE_ROUNDS = (1, 1, 0.0)
#: the contenders of every case, in their (alternating) timing order
CONTENDERS = ("floor", "package, checks off", "package, checks on")


# --------------------------------------------------------------------------- the floors


def _mask(dtype: torch.dtype) -> float:
    return torch.finfo(dtype).min / 2  # the package's finite mask value


def floor_sampled_softmax(query, table, positive_ids, sampled_ids, sampled_log_q, positive_log_q):
    """Sampled softmax, logQ-corrected, accidental hits removed, mean over rows."""
    b = query.shape[0]
    rows = F.embedding(torch.cat([positive_ids, sampled_ids]), table, sparse=True)
    pos = (query * rows[:b]).sum(1) - positive_log_q
    neg = query @ rows[b:].T - sampled_log_q
    neg = neg.masked_fill(positive_ids[:, None] == sampled_ids, _mask(neg.dtype))
    logits = torch.cat([pos[:, None], neg], 1)
    return F.cross_entropy(logits, torch.zeros(b, dtype=torch.long, device=query.device))


def floor_nce(query, table, positive_ids, sampled_ids, sampled_log_q, positive_log_q):
    """NCE: logistic loss on ``s − log Q`` of the positive and the k sampled ids, mean over rows."""
    b = query.shape[0]
    rows = F.embedding(torch.cat([positive_ids, sampled_ids]), table, sparse=True)
    pos = (query * rows[:b]).sum(1) - positive_log_q
    neg = query @ rows[b:].T - sampled_log_q
    return (F.softplus(-pos) + F.softplus(neg).sum(1)).mean()


def floor_in_batch_softmax(query, candidates, candidate_ids, log_q, temperature):
    """In-batch softmax over C ≥ B candidates (row i's positive is candidate i), hits removed."""
    b = query.shape[0]
    logits = query @ candidates.T / temperature - log_q
    hits = candidate_ids[:b, None] == candidate_ids[None, :]
    hits.fill_diagonal_(False)  # the positive's own column stays
    logits = logits.masked_fill(hits, _mask(logits.dtype))
    return F.cross_entropy(logits, torch.arange(b, device=query.device))


def floor_info_nce(query, key, temperature):
    """InfoNCE with cosine similarity: cross-entropy of each query against the B keys."""
    logits = F.normalize(query, dim=1) @ F.normalize(key, dim=1).T / temperature
    return F.cross_entropy(logits, torch.arange(query.shape[0], device=query.device))


def floor_nt_xent(view1, view2, temperature):
    """NT-Xent: 2N views, cosine / τ, self-pairs masked, each view's twin is its positive."""
    n = view1.shape[0]
    z = F.normalize(torch.cat([view1, view2]), dim=1)
    logits = (z @ z.T / temperature).fill_diagonal_(_mask(z.dtype))
    return F.cross_entropy(logits, torch.arange(2 * n, device=z.device).roll(n))


# --------------------------------------------------------------------------- the cases


@dataclass
class Case:
    """One loss at one shape: the package call and its floor on the same prepared batches.

    ``package(i)`` and ``floor(i)`` return the loss of batch ``i`` (of ``num_batches``);
    ``leaves`` are the tensors that receive gradients (reset before every step).
    """

    name: str
    label: str
    size: str
    shape: str
    leaves: list[torch.Tensor]
    package: Callable[[int], torch.Tensor]
    floor: Callable[[int], torch.Tensor]
    num_batches: int = 1
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))

    def step(self, fn: Callable[[int], torch.Tensor], i: int = 0) -> torch.Tensor:
        """Forward and backward of batch ``i``; the gradients stay on the leaves."""
        for t in self.leaves:
            t.grad = None
        loss = fn(i % self.num_batches)
        loss.backward()
        return loss.detach()

    def ratio_key(self, what: str, checks: bool | None = None) -> str:
        key = f"{self.name}_vs_floor_{what}@{self.size}"
        return key + ",checks_on" if checks else key


def _leaf(*shape: int, device: torch.device, gen: torch.Generator, scale: float = 1.0):
    x = torch.randn(*shape, generator=gen, device=device) * scale
    return x.requires_grad_(True)


def sampled_case(
    kind: str,
    *,
    num_items: int,
    batch: int = 512,
    dim: int = 128,
    num_samples: int = 4096,
    num_batches: int = 4,
    device: torch.device | None = None,
    seed: int = 0,
) -> Case:
    """``kind`` "sampled_softmax" or "nce": the embedding-level loss into a sparse table."""
    device = device or get_device()
    gen = torch.Generator(device=device).manual_seed(seed)
    table = _leaf(num_items, dim, device=device, gen=gen, scale=dim**-0.5)
    query = _leaf(batch, dim, device=device, gen=gen)
    sampler = LogUniformSampler(num_items, device=device)
    batches = []
    for _ in range(num_batches):
        positive_ids = sampler.sample(batch, generator=gen).ids
        draw = sampler.sample(num_samples, unique=True, generator=gen, positive_ids=positive_ids)
        batches.append((positive_ids, draw))
    package_fn, floor_fn = {
        "sampled_softmax": (sampled_softmax_loss, floor_sampled_softmax),
        "nce": (nce_loss, floor_nce),
    }[kind]

    def package(i):
        positive_ids, draw = batches[i]
        positives = CandidateSet.positives_of(positive_ids, table, draw=draw, sparse=True)
        return package_fn(query, positives, CandidateSet.from_draw(draw, table, sparse=True))

    def floor(i):
        positive_ids, draw = batches[i]
        return floor_fn(query, table, positive_ids, draw.ids, draw.log_q, draw.positive_log_q)

    label = {"sampled_softmax": "sampled softmax", "nce": "NCE"}[kind]
    return Case(
        name=kind,
        label=f"{label} (`{package_fn.__name__}`)",
        size=size_label(num_items),
        shape=f"|V| = {size_label(num_items)}, B = {batch}, k = {num_samples:,}, d = {dim}",
        leaves=[query, table],
        package=package,
        floor=floor,
        num_batches=num_batches,
        device=device,
    )


def in_batch_case(
    *,
    batch: int = 4096,
    num_extra: int = 0,
    dim: int = 128,
    num_items: int = 10**6,
    temperature: float = 0.05,
    device: torch.device | None = None,
    seed: int = 0,
) -> Case:
    """In-batch softmax (``num_extra = 0``) or mixed negatives (B' = ``num_extra`` extras)."""
    device = device or get_device()
    gen = torch.Generator(device=device).manual_seed(seed)
    popularity = LogUniformSampler(num_items, device=device)
    positive_ids = popularity.sample(batch, generator=gen).ids  # Zipfian: duplicates occur
    counts = batch * popularity.probs[positive_ids].double()
    candidate_ids = positive_ids
    if num_extra:
        extras = UniformSampler(num_items, device=device).sample(num_extra, generator=gen).ids
        candidate_ids = torch.cat([positive_ids, extras])
        counts = batch * popularity.probs[candidate_ids].double() + num_extra / num_items
    log_q = torch.log(counts).float()
    query = _leaf(batch, dim, device=device, gen=gen, scale=dim**-0.5)
    candidates = _leaf(batch + num_extra, dim, device=device, gen=gen, scale=dim**-0.5)

    def package(i):
        positives = CandidateSet(candidates[:batch], candidate_ids[:batch], log_q[:batch])
        extras = None
        if num_extra:
            extras = CandidateSet(candidates[batch:], candidate_ids[batch:], log_q[batch:])
        return in_batch_softmax_loss(  # hits removed in every column, as the floor does
            query, positives, extras, temperature=temperature, remove_accidental_hits=True
        )

    def floor(i):
        return floor_in_batch_softmax(query, candidates, candidate_ids, log_q, temperature)

    name = "mixed_softmax" if num_extra else "in_batch_softmax"
    size = f"B={batch}" + (f",B'={num_extra}" if num_extra else "")
    shape = f"B = {batch:,}" + (f", B' = {num_extra:,}" if num_extra else "") + f", d = {dim}"
    label = "mixed negatives" if num_extra else "in-batch softmax"
    return Case(
        name=name,
        label=f"{label} (`in_batch_softmax_loss`)",
        size=size,
        shape=shape + f", τ = {temperature}",
        leaves=[query, candidates],
        package=package,
        floor=floor,
        device=device,
    )


def info_nce_case(
    *,
    batch: int = 4096,
    dim: int = 128,
    temperature: float = 0.1,
    device: torch.device | None = None,
    seed: int = 0,
) -> Case:
    device = device or get_device()
    gen = torch.Generator(device=device).manual_seed(seed)
    query = _leaf(batch, dim, device=device, gen=gen)
    key = query.detach() + 0.5 * torch.randn(batch, dim, generator=gen, device=device)
    key.requires_grad_(True)

    def package(i):
        return info_nce_loss(query, key, temperature=temperature, normalize=True)

    def floor(i):
        return floor_info_nce(query, key, temperature)

    return Case(
        name="info_nce",
        label="InfoNCE, cosine (`info_nce_loss`)",
        size=f"B={batch}",
        shape=f"B = {batch:,}, d = {dim}, τ = {temperature}",
        leaves=[query, key],
        package=package,
        floor=floor,
        device=device,
    )


def nt_xent_case(
    *,
    n: int = 4096,
    dim: int = 128,
    temperature: float = 0.5,
    device: torch.device | None = None,
    seed: int = 0,
) -> Case:
    device = device or get_device()
    gen = torch.Generator(device=device).manual_seed(seed)
    view1 = _leaf(n, dim, device=device, gen=gen)
    view2 = view1.detach() + 0.5 * torch.randn(n, dim, generator=gen, device=device)
    view2.requires_grad_(True)

    def package(i):
        return nt_xent_loss(view1, view2, temperature=temperature)

    def floor(i):
        return floor_nt_xent(view1, view2, temperature)

    return Case(
        name="nt_xent",
        label="NT-Xent (`nt_xent_loss`)",
        size=f"N={n}",
        shape=f"2 × {n:,} views, d = {dim}, τ = {temperature}",
        leaves=[view1, view2],
        package=package,
        floor=floor,
        device=device,
    )


#: the case names, in the order they run
CASES = ("sampled_softmax", "nce", "in_batch_softmax", "mixed_softmax", "info_nce", "nt_xent")


def case_builders(
    quick: bool, device: torch.device, *, smoke: bool = False
) -> dict[str, Callable[[], Case]]:
    """The benchmark's cases by name (built one at a time: the 10^6-row table is 512 MiB)."""
    v = 10**4 if smoke else 10**5 if quick else 10**6
    b = {"batch": 256} if smoke else {}  # the contrastive cases' batch (4096 otherwise)
    return {
        "sampled_softmax": lambda: sampled_case("sampled_softmax", num_items=v, device=device),
        "nce": lambda: sampled_case("nce", num_items=v, device=device),
        "in_batch_softmax": lambda: in_batch_case(device=device, **b),
        "mixed_softmax": lambda: in_batch_case(
            num_extra=512 if smoke else 4096, device=device, **b
        ),
        "info_nce": lambda: info_nce_case(device=device, **b),
        "nt_xent": lambda: nt_xent_case(device=device, **({"n": 256} if smoke else {})),
    }


# --------------------------------------------------------------------------- measurements


def _grads(case: Case) -> list[torch.Tensor]:
    out = []
    for t in case.leaves:
        g = t.grad
        out.append(g.coalesce() if g is not None and g.is_sparse else g)
    return out


def check_case(case: Case, *, rtol: float = 1e-4) -> dict[str, float]:
    """Assert that the floor and the package give the same loss and gradients, every batch.

    Gradients are compared with ``atol = rtol · max |gradient|`` (a float32 sum over
    thousands of columns is exact only to rounding); a sparse gradient must touch the same
    rows. Runs with the package's value checks on. Returns the largest differences.
    """
    worst = {"loss_abs_diff": 0.0, "grad_max_abs_diff": 0.0}
    for i in range(case.num_batches):
        want = case.step(case.floor, i)
        want_grads = _grads(case)
        with validate_args(True):
            got = case.step(case.package, i)
        got_grads = _grads(case)
        torch.testing.assert_close(got, want, rtol=rtol, atol=rtol * abs(float(want)))
        worst["loss_abs_diff"] = max(worst["loss_abs_diff"], abs(float(got) - float(want)))
        for leaf, g, w in zip(case.leaves, got_grads, want_grads):
            assert g is not None and w is not None, "both must give every leaf a gradient"
            assert g.is_sparse == w.is_sparse, "sparse and dense gradients differ in kind"
            if w.is_sparse:
                torch.testing.assert_close(g.indices(), w.indices(), rtol=0, atol=0)
                g, w = g.values(), w.values()
            scale = float(w.abs().max()) or 1.0
            torch.testing.assert_close(g, w, rtol=rtol, atol=rtol * scale)
            worst["grad_max_abs_diff"] = max(
                worst["grad_max_abs_diff"], float((g - w).abs().max()) / scale
            )
    for t in case.leaves:
        t.grad = None
    return worst


def _contender(case: Case, name: str) -> tuple[Callable[[int], torch.Tensor], bool | None]:
    return {
        "floor": (case.floor, None),
        "package, checks off": (case.package, False),
        "package, checks on": (case.package, True),
    }[name]


def _timed_step(case: Case, name: str, i: int) -> float:
    fn, checks = _contender(case, name)
    with validate_args(bool(checks)):
        synchronize(case.device)
        start = time.perf_counter()
        case.step(fn, i)
        synchronize(case.device)
        return time.perf_counter() - start


def time_case(
    case: Case, *, min_rounds: int, max_rounds: int, budget_s: float
) -> dict[str, list[float]]:
    """Step times of the three contenders, interleaved: one step each per round.

    Two untimed steps each first; then rounds (the contenders' order reversed every other
    round) until ``min_rounds`` and ``budget_s`` seconds of timed steps, or ``max_rounds``.
    """
    for name in CONTENDERS:
        for i in range(2):
            _timed_step(case, name, i)
    times: dict[str, list[float]] = {name: [] for name in CONTENDERS}
    r = 0
    while r < max_rounds and (r < min_rounds or sum(map(sum, times.values())) < budget_s):
        order = CONTENDERS if r % 2 == 0 else tuple(reversed(CONTENDERS))
        for name in order:
            times[name].append(_timed_step(case, name, r))
        r += 1
    for t in case.leaves:
        t.grad = None
    return times


def memory_case(case: Case) -> dict[str, int | None]:
    """Peak bytes of tensors allocated during one step: floor and package (checks off)."""
    out: dict[str, int | None] = {}
    for name in ("floor", "package, checks off"):
        fn, checks = _contender(case, name)
        for t in case.leaves:
            t.grad = None
        gc.collect()
        with validate_args(bool(checks)):
            if case.device.type == "cuda":
                torch.cuda.synchronize(case.device)
                torch.cuda.reset_peak_memory_stats(case.device)
                base = torch.cuda.memory_allocated(case.device)
                case.step(fn)
                torch.cuda.synchronize(case.device)
                out[name] = int(torch.cuda.max_memory_allocated(case.device) - base)
            elif case.device.type == "cpu":
                out[name] = peak_tensor_bytes(lambda fn=fn: case.step(fn))
            else:
                out[name] = None
    for t in case.leaves:
        t.grad = None
    return out


def profile_case(case: Case, *, steps: int = 3, rows: int = 12) -> list[dict[str, Any]]:
    """Self time per operator and step (``torch.profiler``), floor vs package (checks off).

    Rows: the operators with the largest package − floor difference first, then the rest
    by package time; times in seconds per step (device time on CUDA, CPU time otherwise).
    """
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if case.device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    per_op: dict[str, dict[str, float]] = {}
    calls: dict[str, dict[str, float]] = {}
    for name in ("floor", "package, checks off"):
        fn, checks = _contender(case, name)
        with validate_args(bool(checks)):
            case.step(fn)
            synchronize(case.device)
            with profile(activities=activities) as prof:
                for i in range(steps):
                    case.step(fn, i)
                synchronize(case.device)
        for event in prof.key_averages():
            if case.device.type == "cuda":
                us = getattr(event, "self_device_time_total", 0) or getattr(
                    event, "self_cuda_time_total", 0
                )
            else:
                us = event.self_cpu_time_total
            if us <= 0:
                continue
            per_op.setdefault(event.key, {})[name] = us * 1e-6 / steps
            calls.setdefault(event.key, {})[name] = event.count / steps
    for t in case.leaves:
        t.grad = None
    table = []
    for op, t in per_op.items():
        f, p = t.get("floor", 0.0), t.get("package, checks off", 0.0)
        table.append(
            {
                "op": op,
                "floor_s": f,
                "package_s": p,
                "diff_s": p - f,
                "floor_calls": calls[op].get("floor", 0.0),
                "package_calls": calls[op].get("package, checks off", 0.0),
            }
        )
    table.sort(key=lambda r: -max(r["package_s"], r["floor_s"]))
    return table[:rows]


def run_case(
    case: Case, *, min_rounds: int, max_rounds: int, budget_s: float, profile_all: bool = False
) -> dict[str, Any]:
    """Check, time, measure memory and (above target) profile one case."""
    agreement = check_case(case)
    times = time_case(case, min_rounds=min_rounds, max_rounds=max_rounds, budget_s=budget_s)
    memory = memory_case(case)
    med = {name: statistics.median(t) for name, t in times.items()}
    paired = [p / f for p, f in zip(times["package, checks off"], times["floor"])]
    ratios = {
        case.ratio_key("time"): med["package, checks off"] / med["floor"],
        case.ratio_key("time", checks=True): med["package, checks on"] / med["floor"],
    }
    if memory.get("floor") and memory.get("package, checks off") is not None:
        ratios[case.ratio_key("memory")] = memory["package, checks off"] / memory["floor"]
    row = {
        "name": case.name,
        "label": case.label,
        "size": case.size,
        "shape": case.shape,
        "device": str(case.device),
        "torch_threads": torch.get_num_threads(),
        "agreement": agreement,
        "times": {name: summarize(t) for name, t in times.items()},
        "paired_ratio_checks_off_median": statistics.median(paired),
        "peak_bytes": memory,
        "ratios": ratios,
    }
    above = (
        ratios[case.ratio_key("time")] > TIME_TARGET_OFF
        or ratios[case.ratio_key("time", checks=True)] > TIME_TARGET_ON
        or ratios.get(case.ratio_key("memory"), 0.0) > MEMORY_TARGET
    )
    if above or profile_all:
        row["profile"] = profile_case(case)
    return row


# --------------------------------------------------------------------------- output


def targets_of(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The issue's targets (time ≤ 1.10× checks off, ≤ 1.25× on; memory ≤ 1.10×)."""
    checks = []
    for row in rows:
        for key, value in row["ratios"].items():
            goal = (
                MEMORY_TARGET
                if "_memory@" in key
                else TIME_TARGET_ON
                if key.endswith(",checks_on")
                else TIME_TARGET_OFF
            )
            checks.append(
                {
                    "ratio": key,
                    "target": f"≤ {goal:.2f}×",
                    "measured": value,
                    "met": None if value is None or not math.isfinite(value) else value <= goal,
                }
            )
    return checks


def tables_markdown(rows: list[dict[str, Any]]) -> str:
    """The time table, the memory table and, for any case above target, its profile."""
    device = rows[0]["device"] if rows else "?"
    threads = rows[0]["torch_threads"] if rows else "?"
    time_rows = []
    for r in rows:
        t = r["times"]
        time_rows.append(
            {
                "loss": r["label"],
                "shape": r["shape"].replace("|", r"\|"),  # |V| inside a table cell
                "floor": fmt_seconds(t["floor"]["median_s"]),
                "off": fmt_seconds(t["package, checks off"]["median_s"]),
                "on": fmt_seconds(t["package, checks on"]["median_s"]),
                "r_off": fmt_ratio(r["ratios"][f"{r['name']}_vs_floor_time@{r['size']}"]),
                "r_on": fmt_ratio(r["ratios"][f"{r['name']}_vs_floor_time@{r['size']},checks_on"]),
                "n": t["floor"]["n"],
            }
        )
    out = [
        (
            f"Forward + backward, median step time on {device} "
            f"({threads} torch thread{'s' if threads != 1 else ''}); ratios package / floor.\n"
        ),
        markdown_table(
            time_rows,
            [
                ("loss", "loss (package function)"),
                ("shape", "shape"),
                ("floor", "plain-torch floor"),
                ("off", "package, checks off"),
                ("on", "package, checks on"),
                ("r_off", "ratio, checks off"),
                ("r_on", "ratio, checks on"),
                ("n", "steps each"),
            ],
        ),
    ]
    mem_rows = []
    for r in rows:
        m = r["peak_bytes"]
        key = f"{r['name']}_vs_floor_memory@{r['size']}"
        mem_rows.append(
            {
                "loss": r["label"],
                "floor": fmt_bytes(m.get("floor")),
                "package": fmt_bytes(m.get("package, checks off")),
                "ratio": fmt_ratio(r["ratios"].get(key)),
            }
        )
    out += [
        (
            "\nPeak bytes of the tensors allocated during one step and alive at once "
            "(gradients included).\n"
        ),
        markdown_table(
            mem_rows,
            [
                ("loss", "loss"),
                ("floor", "floor"),
                ("package", "package (checks off)"),
                ("ratio", "ratio"),
            ],
        ),
    ]
    for r in rows:
        if "profile" not in r:
            continue
        out.append(f"\nProfile of one step, {r['label']} ({r['shape']}), self time per step:\n")
        out.append(profile_markdown(r["profile"]))
    return "\n".join(out)


def profile_markdown(profile: list[dict[str, Any]]) -> str:
    return markdown_table(
        [
            {
                "op": f"`{p['op']}`",
                "floor": fmt_seconds(p["floor_s"]) if p["floor_s"] else "–",
                "fc": f"{p['floor_calls']:g}",
                "package": fmt_seconds(p["package_s"]) if p["package_s"] else "–",
                "pc": f"{p['package_calls']:g}",
                "diff": ("+" if p["diff_s"] >= 0 else "−") + fmt_seconds(abs(p["diff_s"])),
            }
            for p in profile
        ],
        [
            ("op", "operator"),
            ("floor", "floor"),
            ("fc", "calls"),
            ("package", "package"),
            ("pc", "calls"),
            ("diff", "package − floor"),
        ],
    )


def run(
    out: Path,
    *,
    quick: bool,
    threads: int | None = 1,
    only: list[str] | None = None,
    profile_all: bool = False,
    smoke: bool = False,
) -> dict[str, Any]:
    """Run the benchmark; writes floor.json / floor.md into ``out``.

    ``threads``: torch threads on the CPU while it runs (None: leave as is); ``only``:
    a subset of the case names.
    """
    device = get_device()
    previous_threads = torch.get_num_threads()
    if device.type == "cpu" and threads:
        torch.set_num_threads(threads)
    min_rounds, max_rounds, budget_s = SMOKE_ROUNDS if smoke else ROUNDS[quick]
    rows = []
    try:
        for name, build in case_builders(quick, device, smoke=smoke).items():
            if only is not None and name not in only:
                continue
            case = build()
            row = run_case(
                case,
                min_rounds=min_rounds,
                max_rounds=max_rounds,
                budget_s=budget_s,
                profile_all=profile_all,
            )
            rows.append(row)
            t = row["times"]
            print(
                f"  floor {case.name:<17} {case.size:<14}: floor "
                f"{fmt_seconds(t['floor']['median_s'])}, package "
                f"{fmt_seconds(t['package, checks off']['median_s'])} (checks off), "
                f"{fmt_seconds(t['package, checks on']['median_s'])} (on); peak "
                f"{fmt_bytes(row['peak_bytes'].get('floor'))} vs "
                f"{fmt_bytes(row['peak_bytes'].get('package, checks off'))}",
                flush=True,
            )
            del case
            gc.collect()
    finally:
        torch.set_num_threads(previous_threads)
    ratios = {k: v for r in rows for k, v in r["ratios"].items()}
    checks = targets_of(rows)
    result = {
        "benchmark": "floor",
        "device": str(device),
        "torch_threads": threads if device.type == "cpu" and threads else previous_threads,
        "rows": rows,
        "ratios": ratios,
        "targets": checks,
    }
    write_json(out / "floor.json", result)
    write_markdown(out / "floor.md", rows, checks)
    return result


def write_markdown(path: Path, rows: list[dict[str, Any]], checks: list[dict[str, Any]]) -> None:
    """floor.md: the tables (:func:`tables_markdown`) and the targets, met or not."""
    lines = ["", "Targets:", ""]
    for c in checks:
        state = "–" if c["met"] is None else ("met" if c["met"] else "**not met**")
        lines.append(f"- `{c['ratio']}` {c['target']}: {fmt_ratio(c['measured'])}, {state}")
    path.write_text(tables_markdown(rows) + "\n".join(lines) + "\n")
