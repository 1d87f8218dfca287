"""Benchmark: more negatives than one batch holds (chapter 7).

Three measurements, all on the same model: a two-tower retrieval model whose towers are
two-hidden-layer MLPs (``d_in`` → ``d_hidden`` → ``d_hidden`` → ``d_out``, ReLU), so that
the encoder has real activations to keep, trained with the in-batch softmax.

* **GradCache against the full batch** (``gradcache_vs_full_batch_*@N``): the peak memory
  and the time of one gradient computation (forward + backward) on a global batch of
  ``N`` rows, done in one pass or with :func:`~candidate_sampling.scale.gradcache.gradcache_backward`
  in chunks of ``c`` rows. The GradCache step computes the loss with
  :func:`~candidate_sampling.scale.gradcache.checkpointed_in_batch_softmax_loss` (row blocks of
  ``c``), otherwise the (N, N) score matrix, which both steps need, dominates both peaks;
  the ratio without it is reported too. Peak memory: on CUDA ``max_memory_allocated``
  during the step minus what was allocated before it; on the CPU the PyTorch profiler's
  memory timeline (peak bytes of tensors allocated during the step and alive at once).
* **Queue against in-batch** (``queue_vs_in_batch_step_time@K``): one step of ``B`` rows
  with a :class:`~candidate_sampling.scale.memory.CrossBatchMemory` of ``K`` entries (scores
  against ``B + K`` candidates, id masking, enqueue) over the plain in-batch step.
* **Two gloo ranks against one** (``distributed_2_ranks_vs_1_step_time@N``): the same
  global batch of ``N`` rows, split over two processes with one thread each (gathered
  softmax, gradients averaged over ranks as DDP does) or in one process with two threads;
  and the share of a rank's step spent in the gather (forward all-gather and its backward
  all-reduce) and in the gradient all-reduce.

Headline ratios are printed by ``benchmarks/run.py``; targets: peak memory of the full
batch ≥ 8× GradCache's at N = 8,192, GradCache's step time ≤ 2.5× the full batch's.
"""

from __future__ import annotations

import gc
import statistics
from functools import partial
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

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
from candidate_sampling import CandidateSet, time_calls
from candidate_sampling.device import get_device, synchronize
from candidate_sampling.scale.distributed import (
    all_gather_with_grad,
    gathered_softmax_loss,
    launch,
    rank_and_world_size,
    ring_sigmoid_loss,
)
from candidate_sampling.scale.gradcache import checkpointed_in_batch_softmax_loss, gradcache_backward
from candidate_sampling.losses import in_batch_softmax_loss, sigmoid_pairwise_loss
from candidate_sampling.scale.memory import CrossBatchMemory

TAU = 0.1


def make_towers(
    d_in: int, d_hidden: int, d_out: int, device: torch.device, seed: int = 0
) -> tuple[nn.Module, nn.Module]:
    """Two MLP towers with two hidden layers each (the same seed gives the same weights)."""
    torch.manual_seed(seed)

    def tower() -> nn.Module:
        return nn.Sequential(
            nn.Linear(d_in, d_hidden),
            nn.ReLU(),
            nn.Linear(d_hidden, d_hidden),
            nn.ReLU(),
            nn.Linear(d_hidden, d_out),
        ).to(device)

    return tower(), tower()


def make_inputs(n: int, d_in: int, device: torch.device, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d_in, generator=gen)
    return x.to(device), (x + 0.5 * torch.randn(n, d_in, generator=gen)).to(device)


def _zero_grad(*modules: nn.Module) -> None:
    for m in modules:
        m.zero_grad(set_to_none=True)


def _peak_bytes(fn, device: torch.device) -> int | None:
    gc.collect()
    if device.type == "cuda":
        synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        fn()
        synchronize(device)
        return int(torch.cuda.max_memory_allocated(device) - base)
    if device.type == "cpu":
        peak = peak_tensor_bytes(fn)
        return None if peak is None else int(peak)
    return None  # MPS: no per-step peak available


def gradcache_rows(
    n: int,
    *,
    chunk: int,
    block: int,
    d_in: int = 256,
    d_hidden: int = 1024,
    d_out: int = 128,
    repeats: int = 2,
    device: torch.device | None = None,
) -> dict[str, Any]:
    """Time and peak memory of the full-batch step and of two GradCache steps at N = n.

    ``chunk``: GradCache's encoder chunk; ``block``: the checkpointed loss's row block."""
    device = device or get_device()
    query_tower, item_tower = make_towers(d_in, d_hidden, d_out, device)
    x, y = make_inputs(n, d_in, device)
    ids = torch.arange(n, device=device)  # distinct: no accidental hits to remove

    def one_pass(u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        positives = CandidateSet(v, ids)
        return in_batch_softmax_loss(u, positives, temperature=TAU, remove_accidental_hits=False)

    def chunked(u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return checkpointed_in_batch_softmax_loss(
            u, CandidateSet(v, ids), block_size=block, temperature=TAU,
            remove_accidental_hits=False,
        )

    def full() -> None:
        _zero_grad(query_tower, item_tower)
        one_pass(query_tower(x), item_tower(y)).backward()

    def cached(checkpointed: bool) -> None:
        _zero_grad(query_tower, item_tower)
        loss_fn = chunked if checkpointed else one_pass
        gradcache_backward([query_tower, item_tower], [x, y], loss_fn, chunk_size=chunk)

    variants = {
        "full batch": full,
        "GradCache (chunked loss)": partial(cached, True),
        "GradCache (one-pass loss)": partial(cached, False),
    }
    out: dict[str, Any] = {
        "n": n,
        "chunk": chunk,
        "block": block,
        "d_in": d_in,
        "d_hidden": d_hidden,
        "d_out": d_out,
        "device": str(device),
        "variants": {},
    }
    # rounds: every variant once per round, so that a change of machine load during the
    # run hits all of them alike (the ratios are medians of same-round ratios)
    times: dict[str, list[float]] = {name: [] for name in variants}
    for name, fn in variants.items():
        time_calls(fn, device=device, repeats=1, warmup=0)  # warm-up
    for _ in range(repeats):
        for name, fn in variants.items():
            times[name] += time_calls(fn, device=device, repeats=1, warmup=0)
    for name, fn in variants.items():
        out["variants"][name] = {
            "time": summarize(times[name]),
            "times_s": times[name],
            "peak_bytes": _peak_bytes(fn, device),
        }
        _zero_grad(query_tower, item_tower)
    return out


def queue_rows(
    batch: int,
    queue_sizes: list[int],
    *,
    d_in: int = 256,
    d_hidden: int = 1024,
    d_out: int = 128,
    repeats: int = 3,
    device: torch.device | None = None,
) -> dict[str, Any]:
    """Step time (forward, backward, enqueue) with a queue of K entries vs in-batch."""
    device = device or get_device()
    query_tower, item_tower = make_towers(d_in, d_hidden, d_out, device)
    x, y = make_inputs(batch, d_in, device)
    ids = torch.arange(batch, device=device)
    out: dict[str, Any] = {"batch": batch, "device": str(device), "steps": {}}

    def step(memory: CrossBatchMemory | None) -> None:
        _zero_grad(query_tower, item_tower)
        u, v = query_tower(x), item_tower(y)
        if memory is None:
            loss = in_batch_softmax_loss(u, CandidateSet(v, ids), temperature=TAU)
        else:
            batch_set, queued = memory.candidates_for(v, ids)
            loss = in_batch_softmax_loss(u, batch_set, queued, temperature=TAU)
        loss.backward()
        if memory is not None:
            memory.enqueue(v, ids)

    steps = {"in-batch": partial(step, None)}
    gen = torch.Generator().manual_seed(1)
    for k in queue_sizes:
        memory = CrossBatchMemory(k, d_out, device=device)
        memory.enqueue(
            torch.randn(k, d_out, generator=gen).to(device),
            torch.randint(batch, 10 * k, (k,), generator=gen).to(device),
        )
        steps[f"queue {k}"] = partial(step, memory)
    times: dict[str, list[float]] = {name: [] for name in steps}
    for fn in steps.values():
        time_calls(fn, device=device, repeats=1, warmup=0)  # warm-up
    for _ in range(repeats):  # rounds, as in gradcache_rows
        for name, fn in steps.items():
            times[name] += time_calls(fn, device=device, repeats=1, warmup=0)
    for name in steps:
        out["steps"][name] = {**summarize(times[name]), "times_s": times[name]}
    return out


def _distributed_worker(
    global_batch: int, d_in: int, d_hidden: int, d_out: int, repeats: int
) -> dict[str, Any]:
    """One rank's step on its share of the global batch; run inside :func:`launch`."""
    rank, world = rank_and_world_size()
    device = torch.device("cpu")
    query_tower, item_tower = make_towers(d_in, d_hidden, d_out, device)
    x, y = make_inputs(global_batch, d_in, device)
    rows = global_batch // world
    x, y = x[rank * rows : (rank + 1) * rows], y[rank * rows : (rank + 1) * rows]
    ids = torch.arange(rank * rows, (rank + 1) * rows)
    params = [*query_tower.parameters(), *item_tower.parameters()]

    def barrier() -> None:
        if world > 1:
            dist.barrier()

    def step() -> None:
        barrier()
        _zero_grad(query_tower, item_tower)
        loss = gathered_softmax_loss(
            query_tower(x), CandidateSet(item_tower(y), ids), temperature=TAU,
            remove_accidental_hits=False,
        )
        loss.backward()
        if world > 1:  # DDP averages gradients (bucketed; here one tensor at a time)
            for p in params:
                dist.all_reduce(p.grad)
                p.grad /= world

    embeddings = item_tower(y).detach()

    def gather() -> None:
        barrier()
        e = embeddings.clone().requires_grad_()
        all_gather_with_grad(e).sum().backward()

    def grad_all_reduce() -> None:
        barrier()
        for p in params:
            dist.all_reduce(p.detach().clone())

    out = {
        "rank": rank,
        "world_size": world,
        "threads": torch.get_num_threads(),
        "step": summarize(time_calls(step, device=device, repeats=repeats, warmup=1)),
    }
    if world > 1:
        out["gather"] = summarize(time_calls(gather, device=device, repeats=repeats, warmup=1))
        out["grad_all_reduce"] = summarize(
            time_calls(grad_all_reduce, device=device, repeats=repeats, warmup=1)
        )
    return out


def distributed_rows(
    global_batch: int,
    *,
    d_in: int = 256,
    d_hidden: int = 1024,
    d_out: int = 128,
    repeats: int = 3,
) -> dict[str, Any]:
    """2 gloo ranks × 1 thread against 1 process × 2 threads, same global batch (CPU)."""
    args = (global_batch, d_in, d_hidden, d_out, repeats)
    one = launch(_distributed_worker, *args, world_size=1, backend="gloo", threads_per_rank=2)
    two = launch(_distributed_worker, *args, world_size=2, backend="gloo", threads_per_rank=1)
    return {"global_batch": global_batch, "one_process": one, "two_ranks": two}


def headline(grad: dict, queue: dict, distributed: dict | None) -> dict[str, float | None]:
    ratios: dict[str, float | None] = {}
    n = size_label(grad["n"])
    v = grad["variants"]
    full, chunked, plain = (
        v["full batch"],
        v["GradCache (chunked loss)"],
        v["GradCache (one-pass loss)"],
    )

    def mem_ratio(a, b):
        if a["peak_bytes"] is None or not b["peak_bytes"]:
            return None
        return a["peak_bytes"] / b["peak_bytes"]

    ratios[f"gradcache_vs_full_batch_peak_memory@{n}"] = mem_ratio(full, chunked)
    ratios[f"gradcache_one_pass_loss_vs_full_batch_peak_memory@{n}"] = mem_ratio(full, plain)
    ratios[f"gradcache_vs_full_batch_step_time@{n}"] = statistics.median(
        c / f for c, f in zip(chunked["times_s"], full["times_s"])
    )
    base = queue["steps"]["in-batch"]["times_s"]
    for name, stats in queue["steps"].items():
        if name.startswith("queue "):
            k = int(name.split()[1])
            ratios[f"queue_vs_in_batch_step_time@{k}"] = statistics.median(
                t / b for t, b in zip(stats["times_s"], base)
            )
    if distributed is not None:
        one = distributed["one_process"][0]["step"]["median_s"]
        two = max(r["step"]["median_s"] for r in distributed["two_ranks"])
        g = distributed["global_batch"]
        ratios[f"distributed_2_ranks_vs_1_step_time@{g}"] = two / one
        rank0 = distributed["two_ranks"][0]
        ratios[f"distributed_gather_share_of_step@{g}"] = (
            rank0["gather"]["median_s"] / rank0["step"]["median_s"]
        )
        ratios[f"distributed_grad_all_reduce_share_of_step@{g}"] = (
            rank0["grad_all_reduce"]["median_s"] / rank0["step"]["median_s"]
        )
    return ratios


def targets(ratios: dict[str, float | None], n_label: str) -> list[dict[str, Any]]:
    checks = []
    for key, goal, better in (
        (f"gradcache_vs_full_batch_peak_memory@{n_label}", 8.0, "higher"),
        (f"gradcache_vs_full_batch_step_time@{n_label}", 2.5, "lower"),
    ):
        value = ratios.get(key)
        met = None if value is None else (value >= goal if better == "higher" else value <= goal)
        checks.append(
            {
                "ratio": key,
                "target": ("≥ " if better == "higher" else "≤ ") + f"{goal}×",
                "measured": value,
                "met": met,
            }
        )
    return checks


def report(grad: dict, queue: dict, distributed: dict | None, ratios: dict) -> str:
    rows = [
        {
            "step": name,
            "time": fmt_seconds(r["time"]["median_s"]),
            "peak": fmt_bytes(r["peak_bytes"]),
        }
        for name, r in grad["variants"].items()
    ]
    text = (
        f"GradCache, N = {grad['n']:,} rows, encoder chunks of {grad['chunk']}, loss "
        f"blocks of {grad['block']} rows, MLP towers "
        f"{grad['d_in']} → {grad['d_hidden']} → {grad['d_hidden']} → {grad['d_out']} "
        f"({grad['device']}):\n\n"
        + markdown_table(
            rows,
            [
                ("step", "gradient step"),
                ("time", "median time"),
                ("peak", "peak memory of the step"),
            ],
        )
    )
    qrows = [{"step": k, "time": fmt_seconds(v["median_s"])} for k, v in queue["steps"].items()]
    text += f"\nQueue, B = {queue['batch']} rows per step:\n\n" + markdown_table(
        qrows, [("step", "candidates"), ("time", "median step time")]
    )
    if distributed is not None:
        drows = []
        for label, runs in (
            ("1 process × 2 threads", distributed["one_process"]),
            ("2 gloo ranks × 1 thread", distributed["two_ranks"]),
        ):
            for r in runs:
                drows.append(
                    {
                        "run": label,
                        "rank": r["rank"],
                        "step": fmt_seconds(r["step"]["median_s"]),
                        "gather": fmt_seconds(r["gather"]["median_s"]) if "gather" in r else "–",
                        "ar": (
                            fmt_seconds(r["grad_all_reduce"]["median_s"])
                            if "grad_all_reduce" in r
                            else "–"
                        ),
                    }
                )
        text += (
            f"\nDistributed, global batch {distributed['global_batch']:,} (CPU, gloo):\n\n"
            + markdown_table(
                drows,
                [
                    ("run", "run"),
                    ("rank", "rank"),
                    ("step", "step"),
                    ("gather", "gather fwd+bwd"),
                    ("ar", "gradient all-reduce"),
                ],
            )
        )
    text += "\nRatios:\n\n" + "\n".join(f"- `{k}`: {fmt_ratio(v)}" for k, v in ratios.items())
    return text + "\n"


def run(out: Path, *, quick: bool, distributed: bool = True, smoke: bool = False) -> dict[str, Any]:
    """The chapter-7 benchmark; writes negatives.json and negatives.md into ``out``.

    ``smoke``: the smallest sizes that still run every path once (CI).
    """
    device = get_device()
    repeats = 1 if smoke else 3 if quick else 7
    n, chunk, block = (1024, 256, 128) if smoke else (8192, 1024, 512)
    grad = gradcache_rows(n, chunk=chunk, block=block, repeats=repeats, device=device)
    queue = queue_rows(
        128 if smoke else 512,
        [1024] if smoke else [65536] if quick else [4096, 65536],
        repeats=1 if smoke else 3 if quick else 10,
        device=device,
    )
    dist_result = None
    if distributed:
        dist_result = distributed_rows(
            256 if smoke else 2048 if quick else 4096,
            repeats=1 if smoke else 3 if quick else 10,
        )
    ratios = headline(grad, queue, dist_result)
    result = {
        "benchmark": "negatives",
        "gradcache": grad,
        "queue": queue,
        "distributed": dist_result,
        "ratios": ratios,
        "targets": targets(ratios, size_label(grad["n"])),
        "note": "peak memory: "
        + (
            "CUDA max_memory_allocated"
            if device.type == "cuda"
            else "PyTorch profiler memory timeline (CPU)"
        ),
    }
    write_json(out / "negatives.json", result)
    (out / "negatives.md").write_text(report(grad, queue, dist_result, ratios))
    return result


# --------------------------------------------------------------------------- chapter 7's check


def demo_gathered_step(
    *,
    seed: int = 0,
    rows_per_rank: int = 16,
    dim: int = 8,
    num_items: int = 40,
    temperature: float = 0.5,
) -> dict[str, float]:
    """Chapter 7's check, run inside :func:`~candidate_sampling.scale.distributed.launch`.

    One gathered step on each rank against the one-process step (demo code: it lives with
    the benchmarks, not in the package; ``launch`` needs an importable function).

    Every rank draws the same global batch (``W · rows_per_rank`` rows of float64 features,
    item ids from ``num_items`` with repeats, so duplicates fall on different ranks), the
    same two linear towers, and keeps its own rows. It computes
    :func:`~candidate_sampling.scale.distributed.gathered_softmax_loss` and
    :func:`~candidate_sampling.scale.distributed.ring_sigmoid_loss` (with ids and log Q),
    back-propagates, and averages the parameter gradients over ranks (what DDP does). It
    also computes the single-process losses on the concatenated batch. Returns, for both
    losses, the global loss (mean of the ranks' losses), the reference, and the largest
    absolute difference over the loss and every parameter gradient. Chapter 7.
    """
    rank, world = rank_and_world_size()
    gen = torch.Generator().manual_seed(seed)
    n = world * rows_per_rank
    x = torch.randn(n, dim, generator=gen, dtype=torch.float64)
    y = torch.randn(n, dim, generator=gen, dtype=torch.float64)
    ids = torch.randint(0, num_items, (n,), generator=gen)
    probs = torch.rand(num_items, generator=gen, dtype=torch.float64) + 0.5
    probs = probs / probs.sum()
    w_query = torch.randn(dim, dim, generator=gen, dtype=torch.float64) / dim
    w_item = torch.randn(dim, dim, generator=gen, dtype=torch.float64) / dim
    own = slice(rank * rows_per_rank, (rank + 1) * rows_per_rank)
    out: dict[str, float] = {"rank": rank, "world_size": world}

    def step(loss_fn, rows):
        params = [w_query.clone().requires_grad_(), w_item.clone().requires_grad_()]
        bias = torch.tensor(-1.0, dtype=torch.float64, requires_grad=True)
        loss = loss_fn(x[rows] @ params[0], y[rows] @ params[1], ids[rows], bias)
        loss.backward()
        return loss.detach(), [p.grad for p in params] + [bias.grad]

    def softmax_local(u, v, i, bias):
        positives = CandidateSet(v, i)
        loss = gathered_softmax_loss(
            u, positives, item_probabilities=probs, temperature=temperature
        )
        return loss + 0 * bias

    def softmax_single(u, v, i, bias):
        positives = CandidateSet.from_batch(v, i, item_probabilities=probs)  # log(n·p), n = N
        return in_batch_softmax_loss(u, positives, temperature=temperature) + 0 * bias

    def sigmoid_local(u, v, i, bias):
        return ring_sigmoid_loss(
            u, CandidateSet(v, i), item_probabilities=probs, temperature=temperature, bias=bias
        )

    def sigmoid_single(u, v, i, bias):
        positives = CandidateSet.from_batch(v, i, item_probabilities=probs)
        return sigmoid_pairwise_loss(u, positives, temperature=temperature, bias=bias)

    for name, local, single in (
        ("softmax", softmax_local, softmax_single),
        ("sigmoid", sigmoid_local, sigmoid_single),
    ):
        loss, grads = step(local, own)
        if world > 1:
            for t in [loss, *grads]:
                dist.all_reduce(t, op=dist.ReduceOp.SUM)
                t /= world  # DDP averages gradients; the global loss is the mean of the ranks'
        ref_loss, ref_grads = step(single, slice(0, n))
        diffs = [(loss - ref_loss).abs()] + [(a - b).abs().max() for a, b in zip(grads, ref_grads)]
        out[f"{name}_loss"] = float(loss)
        out[f"{name}_reference"] = float(ref_loss)
        out[f"{name}_max_abs_diff"] = float(torch.stack(diffs).max())
    return out
