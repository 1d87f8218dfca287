"""Benchmark: the exact softmax in chunks against the full logits and against sampling (ch. 10).

One gradient computation (forward + backward) of the softmax cross-entropy of ``N`` query
rows (D = 64) against a class table of ``|V|`` rows, by:

* ``naive full softmax`` — ``F.cross_entropy(query @ classes.T, positive_ids)``: the
  (N, |V|) logits, their log-softmax and their gradient all exist at once;
* ``chunked (auto)`` — :func:`~candidate_sampling.losses.chunked_softmax_cross_entropy`
  with its defaults, which is what the ratios compare; and its two methods explicitly,
  ``chunked (vocab)`` (blocks of classes, logits recomputed in the backward) and
  ``chunked (rows)`` (blocks of rows, gradients in the forward);
* ``torch LCE (default)`` — ``F.linear_cross_entropy`` with
  ``LinearCrossEntropyOptions()`` (torch's own chunked path with its automatic chunk);
  ``options=None``, the function's default, is the reference path: the full logits, the
  naive arm again, so it is not run twice;
* ``torch LCE (best chunk)`` — the same with the fastest ``batch_chunk_size`` of a sweep
  (each candidate timed once after a warm-up, the best one then timed with the others);
* ``sampled softmax (k = 1,024)`` — 1,024 uniform negatives shared by the batch, logQ
  corrected, the same plain-torch expression as the package's sampled softmax (chapter 4):
  the cost the exact loss is weighed against;
* Cut Cross-Entropy and Liger's fused linear cross-entropy when a CUDA device and the
  packages are present (they need Triton); otherwise the run says they were skipped.

**Time**: seconds per forward + backward, arms alternated in rounds (every arm once per
round) so that a change of machine load hits them alike; ratios are medians of
same-round ratios, and the spread (min–max over the rounds) is reported. Beside the wall
clock, the process's CPU time of the same calls (``*_cpu_time@`` ratios): on a shared
machine it counts this process's work and not the time others held the cores (run with
``OMP_NUM_THREADS=1`` there, so that it holds no spin-waits either).

**Memory**: the loss's *own* peak: the peak bytes of tensors allocated during forward +
backward and alive at once, from the PyTorch profiler's memory timeline
(:func:`benchmarks.common.peak_tensor_bytes`; on CUDA ``max_memory_allocated``), minus the
bytes of the gradients of the query and the class table that the call leaves behind. What
existed before the call (inputs, parameters) is not counted. The BLAS's private buffers
are not seen.

Sizes whose predicted peak (inputs, gradients and the arm's own memory, from the measured
bytes per logit of the smallest size) exceeds the memory budget are skipped with the
reason printed: ``--memory-gb`` (default: 6 GiB, or half the memory available if less).
Run it alone for larger sizes: ``python benchmarks/chunked.py --rows 1024 --sizes 1e6
--memory-gb 20``.

Targets (issue 23): the chunked loss's own peak ≥ 20× below the naive loss's at the
largest |V| the naive loss fits; its time ≤ 1.5× the naive loss's and ≤ 1.5× torch's
best-chunk ``linear_cross_entropy``. Issue 42: ``auto``'s time ≤ 1.0× torch's best chunk at
every size timed and ≤ 0.9× at |V| = 1e5, N = 1,024.
"""

from __future__ import annotations

import argparse
import gc
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.common import (  # noqa: E402
    fmt_bytes,
    fmt_ratio,
    fmt_seconds,
    markdown_table,
    memory_available_bytes,
    peak_tensor_bytes,
    size_label,
    write_json,
)
from candidate_sampling import time_calls  # noqa: E402
from candidate_sampling.device import get_device, synchronize  # noqa: E402
from candidate_sampling.losses.chunked import (  # noqa: E402
    chunked_softmax_cross_entropy,
    default_chunk_size,
    resolve_method,
)

DIM = 64
NUM_SAMPLES = 1024
NAIVE = "naive full softmax"
CHUNKED = "chunked (auto)"
VOCAB = "chunked (vocab)"
ROWS = "chunked (rows)"
TORCH_DEFAULT = "torch LCE (default)"
TORCH_BEST = "torch LCE (best chunk)"
SAMPLED = f"sampled softmax (k = {NUM_SAMPLES:,})"
CCE = "Cut Cross-Entropy"
LIGER = "Liger fused linear CE"
TORCH_CHUNKS = (32, 128, 512)

# bytes of the arm's own peak per logit N·|V| (and per class row for the row-chunked
# forms, which hold the (|V|, d) class gradient from the forward on), used only to skip
# sizes that would not fit before running them; replaced by measured values at run time
_GUESS_BYTES_PER_LOGIT = {NAIVE: 12.0, TORCH_DEFAULT: 0.0, TORCH_BEST: 0.0}


def has_linear_cross_entropy() -> bool:
    return hasattr(F, "linear_cross_entropy") and hasattr(torch.nn, "LinearCrossEntropyOptions")


def torch_lce(query, classes, ids, batch_chunk_size: int | None):
    if batch_chunk_size is None:
        options = torch.nn.LinearCrossEntropyOptions()
    else:
        options = torch.nn.LinearCrossEntropyOptions(
            batch_chunk_size=batch_chunk_size, chunking_method=None
        )
    return F.linear_cross_entropy(query, classes, ids, options=options)


def sampled_softmax(query, classes, ids, generator):
    """Sampled softmax with k uniform negatives shared by the batch, logQ corrected.

    ``o = [q·c_t − log Q_t, q·c_s − log Q_s]``, with ``Q = k / |V|`` for every id (a
    constant: it cancels, but is kept to cost what the corrected loss costs), accidental
    hits masked; cross-entropy with the positive in column 0.
    """
    num_classes = classes.shape[0]
    k = min(NUM_SAMPLES, num_classes)
    sampled = torch.randint(num_classes, (k,), generator=generator).to(query.device)
    log_q = math.log(k / num_classes)
    pos = (query * classes[ids]).sum(1, keepdim=True) - log_q
    neg = query @ classes[sampled].T - log_q
    neg = neg.masked_fill(sampled.unsqueeze(0) == ids.unsqueeze(1), torch.finfo(neg.dtype).min / 2)
    logits = torch.cat([pos, neg], 1)
    return F.cross_entropy(logits, torch.zeros_like(ids))


def optional_gpu_arms(device: torch.device) -> tuple[dict[str, Callable], list[str]]:
    """Cut Cross-Entropy and Liger when CUDA and the packages are present; else why not."""
    arms: dict[str, Callable] = {}
    skipped: list[str] = []
    if device.type != "cuda":
        skipped.append(
            f"{CCE} and {LIGER} skipped: they need Triton on a CUDA device, this run is on "
            f"{device.type} (CCE's CPU path builds the full logits)"
        )
        return arms, skipped
    try:
        from cut_cross_entropy import linear_cross_entropy as cce

        arms[CCE] = lambda q, c, ids: cce(q, c, ids)
    except ImportError as err:
        skipped.append(f"{CCE} skipped: {err}")
    try:
        from liger_kernel.transformers.functional import liger_fused_linear_cross_entropy

        arms[LIGER] = lambda q, c, ids: liger_fused_linear_cross_entropy(q, c, ids)
    except ImportError as err:
        skipped.append(f"{LIGER} skipped: {err}")
    return arms, skipped


def make_problem(n: int, num_classes: int, device: torch.device, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    query = torch.randn(n, DIM, generator=gen).to(device).requires_grad_()
    classes = (0.1 * torch.randn(num_classes, DIM, generator=gen)).to(device).requires_grad_()
    ids = torch.randint(num_classes, (n,), generator=gen).to(device)
    return query, classes, ids


def _time_once(step: Callable[[], None], device: torch.device) -> tuple[float, float]:
    """(wall-clock seconds, CPU seconds of this process) of one call, device synchronised.

    On a shared machine the wall clock counts the time other processes held the cores;
    the process's CPU time counts only its own work (with one torch thread it is the
    work itself; with several it includes OpenMP's spin-waits).
    """
    synchronize(device)
    start, start_cpu = time.perf_counter(), time.process_time()
    step()
    synchronize(device)
    return time.perf_counter() - start, time.process_time() - start_cpu


def _step(loss_fn: Callable, query, classes, ids) -> Callable[[], None]:
    def step() -> None:
        query.grad = None
        classes.grad = None
        loss_fn(query, classes, ids).backward()

    return step


def own_peak_bytes(step: Callable[[], None], query, classes, device) -> int | None:
    """Peak bytes allocated during ``step`` minus the gradients it leaves (see module doc)."""
    query.grad = classes.grad = None
    gc.collect()
    if device.type == "cuda":
        synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        step()
        synchronize(device)
        peak = torch.cuda.max_memory_allocated(device) - base
    elif device.type == "cpu":
        peak = peak_tensor_bytes(step)
        if peak is None:
            return None
    else:
        return None
    grads = sum(
        t.grad.numel() * t.grad.element_size() for t in (query, classes) if t.grad is not None
    )
    query.grad = classes.grad = None
    return int(peak - grads)


def predicted_bytes(arm: str, n: int, num_classes: int, per_logit: dict[str, float]) -> float:
    """Inputs + gradients + the arm's own peak (from bytes per logit measured earlier)."""
    inputs = 2 * 4 * (n + num_classes) * DIM  # the tensors and their gradients
    if arm in (NAIVE, TORCH_DEFAULT, TORCH_BEST):
        own = per_logit.get(arm, _GUESS_BYTES_PER_LOGIT[arm]) * n * num_classes
        if arm != NAIVE:  # the (chunk, |V|) block and a float32 class-gradient buffer
            own += 4 * (max(TORCH_CHUNKS) * num_classes + num_classes * DIM)
    elif arm == ROWS or (arm == CHUNKED and resolve_method(n, num_classes) == "rows"):
        rows = default_chunk_size(n, num_classes, "rows")
        own = 4 * (2 * rows * num_classes + num_classes * DIM)
    else:  # vocab blocks, sampled softmax: independent of |V| beyond the inputs
        own = 4 * 2 * n * max(default_chunk_size(n, num_classes), NUM_SAMPLES)
    return inputs + own


def measure_size(
    n: int,
    num_classes: int,
    *,
    repeats: int,
    device: torch.device,
    budget: float,
    per_logit: dict[str, float],
    torch_chunks: tuple[int, ...] = TORCH_CHUNKS,
    measure_memory: bool = True,
    skip: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Time and own peak memory of every arm at one (N, |V|); arms over budget skipped."""
    query, classes, ids = make_problem(n, num_classes, device)
    gen = torch.Generator().manual_seed(1)
    losses: dict[str, Callable] = {
        NAIVE: lambda q, c, t: F.cross_entropy(q @ c.T, t),
        CHUNKED: lambda q, c, t: chunked_softmax_cross_entropy(q, c, t),
        VOCAB: lambda q, c, t: chunked_softmax_cross_entropy(q, c, t, method="vocab"),
        ROWS: lambda q, c, t: chunked_softmax_cross_entropy(q, c, t, method="rows"),
        SAMPLED: lambda q, c, t: sampled_softmax(q, c, t, gen),
    }
    if has_linear_cross_entropy():
        losses[TORCH_DEFAULT] = lambda q, c, t: torch_lce(q, c, t, None)
    extra, _ = optional_gpu_arms(device)
    losses.update(extra)
    result: dict[str, Any] = {"n": n, "num_classes": num_classes, "dim": DIM, "arms": {}}
    skipped: dict[str, str] = {}
    steps: dict[str, Callable[[], None]] = {}
    for arm, fn in losses.items():
        if arm in skip:
            skipped[arm] = "left out of this run (--skip)"
            continue
        need = predicted_bytes(arm, n, num_classes, per_logit)
        if need > budget:
            skipped[arm] = (
                f"needs about {fmt_bytes(need)} > the memory budget of {fmt_bytes(budget)}"
            )
            continue
        steps[arm] = _step(fn, query, classes, ids)
    # torch's best chunk: each candidate timed once after a warm-up
    if has_linear_cross_entropy() and TORCH_BEST in skip:
        skipped[TORCH_BEST] = "left out of this run (--skip)"
    elif has_linear_cross_entropy():
        sweep: dict[int, float] = {}
        for chunk in torch_chunks:
            if chunk > n:
                continue
            need = predicted_bytes(TORCH_BEST, n, num_classes, per_logit)
            if need > budget:
                continue
            step = _step(lambda q, c, t, ch=chunk: torch_lce(q, c, t, ch), query, classes, ids)
            sweep[chunk] = min(time_calls(step, device=device, repeats=1, warmup=1))
        if sweep:
            best = min(sweep, key=sweep.get)
            result["torch_best_chunk"] = best
            result["torch_chunk_sweep_s"] = sweep
            steps[TORCH_BEST] = _step(
                lambda q, c, t: torch_lce(q, c, t, best), query, classes, ids
            )
        else:
            skipped[TORCH_BEST] = "no batch_chunk_size of the sweep fits the memory budget"
    times: dict[str, list[float]] = {arm: [] for arm in steps}
    cpu: dict[str, list[float]] = {arm: [] for arm in steps}
    for step in steps.values():
        time_calls(step, device=device, repeats=1, warmup=0)  # warm-up
    for _ in range(repeats):
        for arm, step in steps.items():
            wall, used = _time_once(step, device)
            times[arm].append(wall)
            cpu[arm].append(used)
    for arm, step in steps.items():
        peak = own_peak_bytes(step, query, classes, device) if measure_memory else None
        if peak is not None and arm in (NAIVE, TORCH_DEFAULT, TORCH_BEST):
            per_logit[arm] = max(per_logit.get(arm, 0.0), peak / (n * num_classes))
        result["arms"][arm] = {
            "times_s": times[arm],
            "median_s": statistics.median(times[arm]),
            "min_s": min(times[arm]),
            "max_s": max(times[arm]),
            "cpu_times_s": cpu[arm],
            "cpu_median_s": statistics.median(cpu[arm]),
            "own_peak_bytes": peak,
        }
    result["skipped"] = skipped
    result["auto_method"] = resolve_method(n, num_classes)
    result["chunk_sizes"] = {
        "vocab": default_chunk_size(n, num_classes, "vocab"),
        "rows": default_chunk_size(n, num_classes, "rows"),
    }
    result["matmul_flops"] = {  # multiply-adds x 2 of the score and gradient matmuls
        "naive and row-chunked (3 matmuls)": 3 * 2 * n * num_classes * DIM,
        "vocab-chunked (4 matmuls: scores recomputed)": 4 * 2 * n * num_classes * DIM,
        "sampled": 3 * 2 * n * min(NUM_SAMPLES, num_classes) * DIM,
    }
    del query, classes, ids, steps
    gc.collect()
    return result


def _label(n: int, num_classes: int) -> str:
    return f"{size_label(num_classes)},N={n}"


def _round_ratio(a: dict, b: dict, key: str = "times_s") -> float:
    """Median over rounds of a's time / b's time in the same round."""
    return statistics.median(x / y for x, y in zip(a[key], b[key]))


def headline(sizes: list[dict]) -> dict[str, float | None]:
    ratios: dict[str, float | None] = {}
    for s in sizes:
        arms, label = s["arms"], _label(s["n"], s["num_classes"])
        chunked = arms.get(CHUNKED)
        if chunked is None:
            continue
        naive = arms.get(NAIVE)
        if naive is not None:
            if naive["own_peak_bytes"] and chunked["own_peak_bytes"]:
                ratios[f"chunked_vs_naive_full_softmax_peak_memory@{label}"] = (
                    naive["own_peak_bytes"] / chunked["own_peak_bytes"]
                )
            ratios[f"chunked_vs_naive_full_softmax_time@{label}"] = _round_ratio(chunked, naive)
            if "cpu_times_s" in chunked:
                ratios[f"chunked_vs_naive_full_softmax_cpu_time@{label}"] = _round_ratio(
                    chunked, naive, "cpu_times_s"
                )
        best = arms.get(TORCH_BEST)
        if best is not None:
            ratios[f"chunked_vs_torch_linear_cross_entropy_time@{label}"] = _round_ratio(
                chunked, best
            )
            if "cpu_times_s" in chunked:
                ratios[f"chunked_vs_torch_linear_cross_entropy_cpu_time@{label}"] = (
                    _round_ratio(chunked, best, "cpu_times_s")
                )
            if VOCAB in arms:
                ratios[f"chunked_vocab_vs_torch_linear_cross_entropy_time@{label}"] = (
                    _round_ratio(arms[VOCAB], best)
                )
        if TORCH_DEFAULT in arms:
            ratios[f"chunked_vs_torch_linear_cross_entropy_default_time@{label}"] = (
                _round_ratio(chunked, arms[TORCH_DEFAULT])
            )
        if SAMPLED in arms:
            ratios[f"chunked_vs_sampled_softmax_time@{label}"] = _round_ratio(
                chunked, arms[SAMPLED]
            )
    return ratios


def targets(sizes: list[dict], ratios: dict[str, float | None]) -> list[dict[str, Any]]:
    """The issue's targets; memory at the largest |V| where the naive loss ran, per N."""
    checks = []

    def check(key: str, goal: float, higher: bool) -> None:
        value = ratios.get(key)
        met = None if value is None else (value >= goal if higher else value <= goal)
        checks.append(
            {
                "ratio": key,
                "target": ("≥ " if higher else "≤ ") + f"{goal}×",
                "measured": value,
                "met": met,
            }
        )

    for n in sorted({s["n"] for s in sizes}):
        ran = [s for s in sizes if s["n"] == n and NAIVE in s["arms"]]
        if ran:
            largest = max(ran, key=lambda s: s["num_classes"])
            label = _label(n, largest["num_classes"])
            check(f"chunked_vs_naive_full_softmax_peak_memory@{label}", 20.0, True)
            check(f"chunked_vs_naive_full_softmax_time@{label}", 1.5, False)
        with_torch = [s for s in sizes if s["n"] == n and TORCH_BEST in s["arms"]]
        if with_torch:
            largest = max(with_torch, key=lambda s: s["num_classes"])
            label = _label(n, largest["num_classes"])
            check(f"chunked_vs_torch_linear_cross_entropy_time@{label}", 1.5, False)
    # issue 42: ahead of torch's best chunk at every size timed, by 10% at 1e5, N = 1,024
    for s in sizes:
        if TORCH_BEST in s["arms"] and CHUNKED in s["arms"]:
            label = _label(s["n"], s["num_classes"])
            goal = 0.9 if (s["n"], s["num_classes"]) == (1024, 10**5) else 1.0
            check(f"chunked_vs_torch_linear_cross_entropy_time@{label}", goal, False)
    return checks


def extrapolate(sizes: list[dict], num_classes: int = 10**7) -> list[dict[str, Any]]:
    """Time at ``num_classes`` from the largest measured |V| per (N, arm): time ∝ |V|.

    Every arm's work is linear in |V| (sampled softmax's is not: it is held constant).
    Memory: the naive loss's own peak ∝ N·|V| (its measured bytes per logit); the chunked
    (vocab) loss's own peak does not grow with |V|.
    """
    rows = []
    for n in sorted({s["n"] for s in sizes}):
        mine = [s for s in sizes if s["n"] == n]
        for arm in (NAIVE, CHUNKED, VOCAB, ROWS, TORCH_BEST, SAMPLED):
            ran = [s for s in mine if arm in s["arms"]]
            if not ran:
                continue
            label, pick = arm, {id(s): arm for s in ran}
            if arm == CHUNKED:  # what auto runs at num_classes, from that method's figures
                resolved = resolve_method(n, num_classes)
                label = f"{CHUNKED} (= {resolved})"
                same = VOCAB if resolved == "vocab" else ROWS
                pick = {id(s): CHUNKED for s in ran if s.get("auto_method") == resolved}
                pick.update({id(s): same for s in mine if same in s["arms"]})
                ran = [s for s in mine if id(s) in pick] or ran
            top = max(ran, key=lambda s: s["num_classes"])
            arm = pick.get(id(top), arm)
            a = top["arms"][arm]
            scale = 1.0 if arm == SAMPLED else num_classes / top["num_classes"]
            peak = a["own_peak_bytes"]
            if peak is not None and arm in (NAIVE, ROWS, TORCH_BEST):
                peak = peak * num_classes / top["num_classes"]
            rows.append(
                {
                    "n": n,
                    "arm": label,
                    "from": top["num_classes"],
                    "time_s": a["median_s"] * scale,
                    "cpu_s": a["cpu_median_s"] * scale if a.get("cpu_median_s") else None,
                    "own_peak_bytes": peak,
                }
            )
    return rows


def report(result: dict[str, Any]) -> str:
    lines = [
        f"One forward + backward of the softmax cross-entropy, D = {DIM}, on "
        f"{result['device']} ({result['torch_threads']} torch threads); median of "
        f"{result['repeats']} rounds (min–max), arms alternated within each round; own "
        f"peak memory = {result['memory_method']}. Load average before → after: "
        f"{result['load_before']} → {result['load_after']}.\n"
    ]
    table = []
    for s in result["sizes"]:
        for arm, a in s["arms"].items():
            extra = ""
            if arm == TORCH_BEST:
                extra = f" ({s['torch_best_chunk']} rows)"
            elif arm == CHUNKED:
                extra = f" (= {s['auto_method']})"
            elif arm == VOCAB:
                extra = f" ({s['chunk_sizes']['vocab']} classes)"
            elif arm == ROWS:
                extra = f" ({s['chunk_sizes']['rows']} rows)"
            table.append(
                {
                    "n": f"{s['n']:,}",
                    "v": size_label(s["num_classes"]),
                    "arm": arm + extra,
                    "t": fmt_seconds(a["median_s"]),
                    "spread": f"{fmt_seconds(a['min_s'])}–{fmt_seconds(a['max_s'])}",
                    "cpu": fmt_seconds(a.get("cpu_median_s")),
                    "mem": fmt_bytes(a["own_peak_bytes"]),
                }
            )
        for arm, why in s["skipped"].items():
            table.append(
                {
                    "n": f"{s['n']:,}",
                    "v": size_label(s["num_classes"]),
                    "arm": arm,
                    "t": "skipped",
                    "spread": why,
                    "mem": "–",
                }
            )
    lines.append(
        markdown_table(
            table,
            [
                ("n", "N"),
                ("v", "\\|V\\|"),
                ("arm", "loss"),
                ("t", "time"),
                ("spread", "min–max"),
                ("cpu", "CPU time"),
                ("mem", "own peak memory"),
            ],
        )
    )
    ext = result.get("extrapolated")
    if ext:
        lines.append(
            "\nExtrapolated to \\|V\\| = 10^7 from the largest \\|V\\| each loss ran at (time and "
            "the growing memory ∝ |V|; the vocab-chunked loss's memory is flat; sampled "
            "softmax's cost held constant). An extrapolation, not a measurement:\n"
        )
        lines.append(
            markdown_table(
                [
                    {
                        "n": f"{r['n']:,}",
                        "arm": r["arm"],
                        "from": size_label(r["from"]),
                        "t": fmt_seconds(r["time_s"]),
                        "cpu": fmt_seconds(r.get("cpu_s")),
                        "mem": fmt_bytes(r["own_peak_bytes"]),
                    }
                    for r in ext
                ],
                [
                    ("n", "N"),
                    ("arm", "loss"),
                    ("from", "from \\|V\\|"),
                    ("t", "time at 1e7"),
                    ("cpu", "CPU time at 1e7"),
                    ("mem", "own peak at 1e7"),
                ],
            )
        )
    for note in result["notes"]:
        lines.append(f"\n{note}")
    lines.append("\nRatios:\n")
    lines += [f"- `{k}`: {fmt_ratio(v)}" for k, v in result["ratios"].items()]
    return "\n".join(lines) + "\n"


def plot(result: dict[str, Any], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(11, 4.2))
    styles = {1024: "-", 8192: "--"}
    for n in sorted({s["n"] for s in result["sizes"]}):
        mine = sorted((s for s in result["sizes"] if s["n"] == n), key=lambda s: s["num_classes"])
        for arm, color in (
            (NAIVE, "C3"),
            (CHUNKED, "C0"),
            (VOCAB, "C4"),
            (TORCH_BEST, "C2"),
            (SAMPLED, "C1"),
        ):
            pts = [(s["num_classes"], s["arms"][arm]) for s in mine if arm in s["arms"]]
            if not pts:
                continue
            x = [p[0] for p in pts]
            ls = styles.get(n, ":")
            ax_t.plot(
                x,
                [p[1].get("cpu_median_s") or p[1]["median_s"] for p in pts],
                ls,
                color=color,
                marker="o",
                label=f"{arm}, N = {n:,}",
            )
            mem = [(xx, p[1]["own_peak_bytes"]) for xx, p in zip(x, pts) if p[1]["own_peak_bytes"]]
            if mem:
                ax_m.plot([m[0] for m in mem], [m[1] / 2**20 for m in mem], ls, color=color,
                          marker="o", label=f"{arm}, N = {n:,}")
    for ax, ylabel in (
        (ax_t, "forward + backward, CPU time (s)"),
        (ax_m, "loss's own peak memory (MiB)"),
    ):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("catalogue size |V|")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
    ax_t.legend(fontsize=7)
    ax_t.set_title("time: chunking does not save work")
    ax_m.set_title("memory: chunking removes the N × |V| term")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def default_budget() -> float:
    available = memory_available_bytes()
    budget = 6 * 2**30
    return min(budget, available / 2) if available else budget


def run(
    out: Path,
    *,
    quick: bool,
    smoke: bool = False,
    rows: list[int] | None = None,
    sizes: list[int] | None = None,
    memory_budget: float | None = None,
    repeats: int | None = None,
    torch_chunks: tuple[int, ...] | None = None,
    skip: tuple[str, ...] = (),
) -> dict[str, Any]:
    """The chapter-10 benchmark; writes chunked.json, chunked.md and chunked.png into ``out``.

    ``smoke``: the smallest sizes, every arm and code path once (CI). ``quick``:
    N = 1,024 at |V| = 10^4 and 10^5, N = 8,192 at 10^4. Full: N = 1,024 at 10^4 … 10^6
    and N = 8,192 at 10^4 … 10^5, as far as the memory budget allows.
    """
    from benchmarks.common import load_average

    device = get_device()
    budget = memory_budget or default_budget()
    if smoke:
        grid = [(256, 2000)]
        reps = 1
    elif quick:
        grid = [(1024, 10**4), (1024, 10**5), (8192, 10**4)]
        reps = 5
    else:
        grid = [(1024, v) for v in (10**4, 10**5, 3 * 10**5, 10**6)]
        grid += [(8192, v) for v in (10**4, 10**5)]
        reps = 5
    if rows or sizes:
        grid = [(n, v) for n in (rows or [1024]) for v in (sizes or [10**4])]
    reps = repeats or reps
    grid.sort(key=lambda nv: nv[0] * nv[1])  # smallest first: bytes per logit measured early
    load_before = load_average()
    per_logit: dict[str, float] = {}
    measured = []
    for n, v in grid:
        print(f"  N = {n:,}, |V| = {size_label(v)}", flush=True)
        s = measure_size(
            n,
            v,
            repeats=reps,
            device=device,
            budget=budget,
            per_logit=per_logit,
            torch_chunks=torch_chunks or ((64,) if smoke else TORCH_CHUNKS),
            skip=skip,
        )
        for arm, why in s["skipped"].items():
            print(f"    {arm}: skipped, {why}", flush=True)
        measured.append(s)
    _, gpu_skipped = optional_gpu_arms(device)
    for note in gpu_skipped:
        print(f"  {note}", flush=True)
    notes = list(gpu_skipped)
    if not has_linear_cross_entropy():
        notes.append("torch.nn.functional.linear_cross_entropy is missing in this torch: skipped")
    notes.append(
        "torch LCE (default) is `LinearCrossEntropyOptions()` (torch's automatic chunk); "
        "`options=None`, the function's default, builds the full logits (the naive arm)."
    )
    ratios = headline(measured)
    result = {
        "benchmark": "chunked",
        "device": str(device),
        "torch_threads": torch.get_num_threads(),
        "repeats": reps,
        "memory_budget_bytes": budget,
        "memory_method": (
            "CUDA max_memory_allocated during the call minus the gradients it leaves"
            if device.type == "cuda"
            else "PyTorch profiler memory timeline (peak bytes of tensors allocated during "
            "the call and alive at once) minus the query's and class table's gradients"
        ),
        "load_before": load_before,
        "load_after": load_average(),
        "sizes": measured,
        "extrapolated": extrapolate(measured) if not smoke else [],
        "notes": notes,
        "ratios": ratios,
        "targets": targets(measured, ratios),
        "plots": [],
    }
    out.mkdir(parents=True, exist_ok=True)
    if plot(result, out / "chunked.png"):
        result["plots"] = ["chunked.png"]
    write_json(out / "chunked.json", result)
    (out / "chunked.md").write_text(report(result))
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true")
    mode.add_argument("--smoke", action="store_true")
    parser.add_argument("--rows", default=None, help="N values, e.g. 1024,8192")
    parser.add_argument("--sizes", default=None, help="|V| values, e.g. 1e4,1e5,1e6")
    parser.add_argument("--memory-gb", type=float, default=None, help="memory budget (GiB)")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument(
        "--torch-chunks", default=None, help="batch_chunk_size sweep of torch LCE, e.g. 64,128"
    )
    parser.add_argument(
        "--skip", default="", help=f"comma-separated arms to leave out, e.g. '{TORCH_DEFAULT}'"
    )
    args = parser.parse_args(argv)
    parse = (lambda s: [int(float(x)) for x in s.split(",")] if s else None)
    result = run(
        args.out,
        quick=args.quick,
        smoke=args.smoke,
        rows=parse(args.rows),
        sizes=parse(args.sizes),
        memory_budget=args.memory_gb * 2**30 if args.memory_gb else None,
        repeats=args.repeats,
        torch_chunks=tuple(parse(args.torch_chunks)) if args.torch_chunks else None,
        skip=tuple(a.strip() for a in args.skip.split(",") if a.strip()),
    )
    for key, value in result["ratios"].items():
        print(f"ratio {key}: {'n/a' if value is None else f'{value:.2f}x'}", flush=True)


if __name__ == "__main__":
    main()
