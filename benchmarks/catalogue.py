"""Benchmark 2, catalogue scale: one training step of a two-tower model against |V|.

Every configuration runs in a fresh subprocess (``python -m benchmarks.catalogue
'<json config>'``) so that its peak memory is its own. One step is: forward (user tower,
the method's scores and loss), backward, optimizer step. The model is the package's
:class:`~candidate_sampling.models.TwoTowerModel` (a user-id embedding and an item-id
embedding, d = 128) and the optimizer comes from
:func:`~candidate_sampling.train.make_optimizer`.

Methods (B = 512 positives per batch, drawn from a log-uniform (Zipfian) popularity):

* ``full``: logits ``u @ W.T`` over the whole catalogue, softmax cross-entropy;
* ``sampled``: :func:`~candidate_sampling.losses.sampled_softmax_loss` with the item
  tower as the item encoder, k = 4,096 negatives from the log-uniform sampler (with
  replacement, shared by the batch), logQ-corrected, accidental hits removed;
* ``in_batch``: :class:`~candidate_sampling.losses.RetrievalLoss`, in-batch softmax with
  logQ = log(B·p(y));
* ``mixed``: :class:`~candidate_sampling.losses.RetrievalLoss` with B' = 4,096 uniform
  extra negatives embedded by the item tower, Q* = B·p + B'/|V|.

Memory on the CPU is the process's resident set: after setup and two warm-up steps
(which create the optimizer's lazily allocated state) the peak RSS is reset to the
current RSS (``/proc/self/clear_refs``) and the *step's extra memory* is the peak RSS
during the timed steps minus the RSS before them. On CUDA it is
``torch.cuda.max_memory_allocated()`` minus the allocated bytes before the steps. The
item table and the optimizer state are counted separately, exactly, from their tensors.
"""

from __future__ import annotations

import gc
import json
import math
import subprocess
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

import torch

from benchmarks.common import (
    ROOT,
    current_rss_bytes,
    fmt_bytes,
    fmt_ratio,
    fmt_seconds,
    markdown_table,
    memory_available_bytes,
    peak_rss_bytes,
    peak_tensor_bytes,
    reset_peak_rss,
    return_freed_memory_to_os,
    size_label,
    summarize,
    write_json,
)
from candidate_sampling import CandidateSet
from candidate_sampling.device import get_device, seed_everything, synchronize
from candidate_sampling.losses import RetrievalLoss, sampled_softmax_loss, softmax_cross_entropy
from candidate_sampling.models import ItemTower, TwoTowerModel, UserTower
from candidate_sampling.sampling.samplers import LogUniformSampler, UniformSampler
from candidate_sampling.train import make_optimizer

METHODS = ("full", "sampled", "in_batch", "mixed")
NUM_USERS = 10_000
FLOAT_BYTES = 4


def default_config(**overrides: Any) -> dict[str, Any]:
    cfg = {
        "method": "sampled",
        "num_items": 10_000,
        "batch_size": 512,
        "dim": 128,
        "num_samples": 4096,
        "num_mixed_samples": 4096,
        "sparse": True,
        "optimizer": "adagrad",
        "repeats": 5,
        "min_seconds": 1.0,
        "seed": 0,
    }
    cfg.update(overrides)
    return cfg


def variant_name(cfg: dict[str, Any]) -> str:
    # the full softmax multiplies by the whole table: its gradient is dense whatever the flag
    grad = "sparse" if cfg["sparse"] and cfg["method"] != "full" else "dense"
    opt = {"adagrad": "Adagrad", "adam": "SparseAdam" if cfg["sparse"] else "Adam"}[
        cfg["optimizer"]
    ]
    return f"{cfg['method']} ({grad} grad, {opt})"


def estimated_bytes(cfg: dict[str, Any]) -> int:
    """A generous estimate of the process's memory for ``cfg`` (to skip what cannot fit)."""
    v, d, b = cfg["num_items"], cfg["dim"], cfg["batch_size"]
    table = v * d * FLOAT_BYTES
    states = 1 if cfg["optimizer"] == "adagrad" else 2
    total = table * (1 + states)
    if not cfg["sparse"] or cfg["method"] == "full":
        total += table  # a dense gradient of the table
    if cfg["method"] == "full":
        total += 4 * b * v * FLOAT_BYTES  # logits, log-softmax, their gradients
    return total + 600 * 2**20  # interpreter, torch, batches


def _tensor_bytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _optimizer_state_bytes(opt: Any, param: torch.Tensor) -> int:
    """Bytes of the optimizer's state tensors for ``param`` (the item table)."""
    optimizers = getattr(opt, "optimizers", [opt])
    total = 0
    for o in optimizers:
        if param in o.state:
            for value in o.state[param].values():
                if isinstance(value, torch.Tensor) and value.dim() > 0:
                    total += _tensor_bytes(value)
    return total


class TrainingStep:
    """One configuration's model, optimizer, samplers and batches; one call = one step.

    ``cfg`` gives |V|, B, d, k, B', the gradient type and the optimizer; ``methods`` the
    losses it will be asked for (the mixed loss needs the uniform sampler). A step is:
    the next prepared batch, ``zero_grad``, forward (user tower, the method's scores and
    loss), backward, optimizer step. The losses are the package's:
    :func:`~candidate_sampling.losses.softmax_cross_entropy` over ``u @ W.T`` (full),
    :func:`~candidate_sampling.losses.sampled_softmax_loss` with the item tower as the
    item encoder (sampled) and :class:`~candidate_sampling.losses.RetrievalLoss` (in-batch,
    and mixed with the tower embedding the extras).
    """

    def __init__(self, cfg: dict[str, Any], methods: list[str]) -> None:
        for method in methods:
            if method not in METHODS:
                raise ValueError(f"method must be one of {METHODS}, got {method!r}")
        self.cfg = cfg
        self.device = device = get_device()
        seed_everything(cfg["seed"])
        v, d, b, sparse = cfg["num_items"], cfg["dim"], cfg["batch_size"], cfg["sparse"]
        t0 = time.perf_counter()
        self.model = TwoTowerModel(
            UserTower(num_users=NUM_USERS, dim=d, sparse=sparse),
            ItemTower(v, d, sparse=sparse),
        ).to(device)
        self.optimizer = make_optimizer(
            self.model, cfg["optimizer"], lr=0.05 if cfg["optimizer"] == "adagrad" else 1e-3
        )
        self.table = self.model.item_tower.embedding.weight
        self.generator = torch.Generator(device=device).manual_seed(cfg["seed"])
        # positives and the sampled softmax's negatives: log-uniform (Zipfian) popularity
        self.popularity = LogUniformSampler(v, device=device)
        # in-batch: log Q = log(B·p(y)); mixed: log(B·p(y) + B'/|V|) (expected counts)
        self.in_batch = RetrievalLoss(item_probabilities=self.popularity.probs)
        self.mixed = (
            RetrievalLoss(
                item_probabilities=self.popularity.probs,
                sampler=UniformSampler(v, device=device),
                num_samples=cfg["num_mixed_samples"],
            )
            if "mixed" in methods
            else None
        )
        # a few batches prepared up front: data loading is not part of the step
        self.batches = []
        for _ in range(4):
            users = torch.randint(0, NUM_USERS, (b,), device=device, generator=self.generator)
            positives = self.popularity.sample(b, generator=self.generator).ids
            self.batches.append((users, positives))
        self.setup_s = time.perf_counter() - t0
        self.counter = 0

    def forward(self, method: str, users: torch.Tensor, positive_ids: torch.Tensor) -> torch.Tensor:
        """The loss of ``method`` on one batch (the forward half of a step)."""
        model, gen = self.model, self.generator
        if method == "full":
            u = model.user_tower(users)
            return softmax_cross_entropy(u @ self.table.T, positive_ids)
        if method == "sampled":
            u = model.user_tower(users)
            draw = self.popularity.sample(
                self.cfg["num_samples"], generator=gen, positive_ids=positive_ids
            )
            positives = CandidateSet.positives_of(positive_ids, model.item_tower, draw=draw)
            candidates = CandidateSet.from_draw(draw, model.item_tower)
            return sampled_softmax_loss(u, positives, candidates)
        u, items = model(positive_ids, user_ids=users)
        if method == "in_batch":
            return self.in_batch(u, items, positive_ids)
        return self.mixed(u, items, positive_ids, item_encoder=model.item_tower, generator=gen)

    def __call__(self, method: str, phases: dict[str, list[float]] | None = None) -> torch.Tensor:
        """One training step of ``method``; returns the (detached) loss.

        With ``phases`` the device is synchronised after the forward pass, the backward
        pass and the optimizer step, and their seconds are appended to ``phases``;
        without, nothing waits for the device (as in a training loop).
        """
        users, positive_ids = self.batches[self.counter % len(self.batches)]
        self.counter += 1
        if phases is not None:
            synchronize(self.device)
        t_start = time.perf_counter()
        self.optimizer.zero_grad()
        loss = self.forward(method, users, positive_ids)
        if phases is not None:
            synchronize(self.device)
        t_fwd = time.perf_counter()
        loss.backward()
        if phases is not None:
            synchronize(self.device)
        t_bwd = time.perf_counter()
        self.optimizer.step()
        if phases is not None:
            synchronize(self.device)
            t_end = time.perf_counter()
            phases["forward"].append(t_fwd - t_start)
            phases["backward"].append(t_bwd - t_fwd)
            phases["optimizer"].append(t_end - t_bwd)
            phases["step"].append(t_end - t_start)
        return loss.detach()


def run_group(cfg: dict[str, Any], methods: list[str]) -> list[dict[str, Any]]:
    """One setup (:class:`TrainingStep`) shared by ``methods``; one result per method.

    Every method is timed first (median of at least ``repeats`` steps, more until
    ``min_seconds``), then each one's memory is measured in a separate step (see the
    module docstring).
    """
    step = TrainingStep(cfg, methods)
    device, optimizer, table, setup_s = step.device, step.optimizer, step.table, step.setup_s

    results = []
    for method in methods:  # timing, with the allocator in its normal configuration
        phases: dict[str, list[float]] = {
            "forward": [],
            "backward": [],
            "optimizer": [],
            "step": [],
        }
        for _ in range(1 if method == "full" else 2):  # warm-up: lazy optimizer state, kernels
            first_loss = float(step(method))
        while len(phases["step"]) < cfg["repeats"] or (
            sum(phases["step"]) < cfg["min_seconds"]
            and len(phases["step"]) < 200
            and not (method == "full" and len(phases["step"]) >= 3)
        ):
            last_loss = float(step(method, phases))
        result = dict(cfg, method=method)
        result.update(
            {
                "variant": variant_name(result),
                "device": str(device),
                "setup_s": setup_s,
                "loss_first": first_loss,
                "loss_last": last_loss,
                "step": summarize(phases["step"]),
                "forward": summarize(phases["forward"]),
                "backward": summarize(phases["backward"]),
                "optimizer_step": summarize(phases["optimizer"]),
                "table_bytes": _tensor_bytes(table),
                "status": "ok" if math.isfinite(last_loss) else "non-finite loss",
            }
        )
        results.append(result)
    # memory: more steps per method, measured on their own (not timed)
    for result in results:
        method = result["method"]
        optimizer.zero_grad()  # the previous step's gradients are not this step's memory
        gc.collect()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
            torch.cuda.reset_peak_memory_stats(device)
            base = torch.cuda.memory_allocated(device)
            step(method)
            torch.cuda.synchronize(device)
            peak_bytes = torch.cuda.max_memory_allocated(device) - base
            kind = "CUDA: max_memory_allocated during a step − allocated before it"
        else:
            peak_bytes = peak_tensor_bytes(partial(step, method))
            kind = (
                "CPU: peak bytes of tensors allocated during a step and alive at once "
                "(PyTorch profiler memory timeline)"
            )
        result.update(
            {
                "step_extra_bytes": None if peak_bytes is None else int(peak_bytes),
                "memory_measure": kind,
                "optimizer_state_bytes": _optimizer_state_bytes(optimizer, table),
            }
        )
    if device.type == "cpu":  # a second, coarser view: the process's resident memory
        exact = return_freed_memory_to_os()
        for result in results:
            optimizer.zero_grad()
            gc.collect()
            return_freed_memory_to_os()
            peak_reset = reset_peak_rss()
            base = current_rss_bytes() if peak_reset else peak_rss_bytes()
            step(result["method"])
            result["step_rss_delta_bytes"] = max(int(peak_rss_bytes() - base), 0)
            result["rss_measure"] = (
                "peak RSS during a step − RSS before it, glibc returning freed memory"
                + ("" if exact else " (mallopt unavailable)")
                + ("" if peak_reset else " (peak not resettable: includes setup)")
            )
            result["process_rss_before_step"] = base
    return results


def run_config(cfg: dict[str, Any]) -> dict[str, Any]:
    """:func:`run_group` for the single method ``cfg["method"]``."""
    return run_group(cfg, [cfg["method"]])[0]


def run_in_subprocess(
    cfg: dict[str, Any], methods: list[str], timeout: float = 900
) -> list[dict[str, Any]]:
    """Run :func:`run_group` in a fresh interpreter; its results, or one error row per method."""
    cmd = [
        sys.executable,
        "-W",
        "ignore",
        "-m",
        "benchmarks.catalogue",
        json.dumps(cfg),
        ",".join(methods),
    ]

    def failed(status):
        rows = [dict(cfg, method=m) for m in methods]
        return [dict(r, variant=variant_name(r), status=status) for r in rows]

    try:
        proc = subprocess.run(
            cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        return failed(f"timed out after {timeout:.0f} s")
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("[")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        return failed(f"failed (exit {proc.returncode}): {tail[0][:200]}")
    return json.loads(lines[-1])


# --------------------------------------------------------------------------- the benchmark


def configurations(
    sizes: list[int], *, repeats: int, min_seconds: float
) -> list[tuple[dict[str, Any], list[str]]]:
    """Groups (config, methods) sharing one setup: the default path (sparse gradients,
    Adagrad) for every method, SparseAdam, and the dense-gradient anti-pattern (Adagrad,
    and Adam as in the source post) for the sampled softmax."""
    groups = []
    for v in sizes:
        base = {"num_items": v, "repeats": repeats, "min_seconds": min_seconds}
        groups.append((default_config(**base), list(METHODS)))
        groups.append((default_config(optimizer="adam", **base), ["sampled"]))
        groups.append((default_config(sparse=False, **base), ["sampled"]))
        groups.append((default_config(sparse=False, optimizer="adam", **base), ["sampled"]))
    return groups


def _find(rows, variant_prefix: str, v: int) -> dict[str, Any] | None:
    for r in rows:
        if r["variant"] == variant_prefix and r["num_items"] == v and r.get("status") == "ok":
            return r
    return None


SAMPLED = "sampled (sparse grad, Adagrad)"
FULL = "full (dense grad, Adagrad)"
DENSE = "sampled (dense grad, Adagrad)"
DENSE_ADAM = "sampled (dense grad, Adam)"


def headline_ratios(rows: list[dict[str, Any]], sizes: list[int]) -> dict[str, Any]:
    """Sampled vs full (time, memory) at the largest |V| where both ran; flatness; dense cost."""
    out: dict[str, Any] = {}
    both = [v for v in sizes if _find(rows, SAMPLED, v) and _find(rows, FULL, v)]
    if both:
        v = 10**6 if 10**6 in both else max(both)
        s, f = _find(rows, SAMPLED, v), _find(rows, FULL, v)
        out[f"sampled_vs_full_step_time@{size_label(v)}"] = (
            f["step"]["median_s"] / s["step"]["median_s"]
        )
        out[f"sampled_vs_full_step_memory@{size_label(v)}"] = f["step_extra_bytes"] / max(
            s["step_extra_bytes"], 1
        )
    sampled = [v for v in sizes if _find(rows, SAMPLED, v)]
    if len(sampled) >= 2:
        lo = min(sampled)
        hi = 10**6 if 10**6 in sampled else max(sampled)
        if hi != lo:
            out[f"sampled_step_time_{size_label(hi)}_over_{size_label(lo)}"] = (
                _find(rows, SAMPLED, hi)["step"]["median_s"]
                / _find(rows, SAMPLED, lo)["step"]["median_s"]
            )
    dense = [v for v in sizes if _find(rows, DENSE, v) and _find(rows, SAMPLED, v)]
    if dense:
        v = 10**6 if 10**6 in dense else max(dense)
        out[f"dense_vs_sparse_sampled_step_time@{size_label(v)}"] = (
            _find(rows, DENSE, v)["step"]["median_s"] / _find(rows, SAMPLED, v)["step"]["median_s"]
        )
    dense_adam = [v for v in sizes if _find(rows, DENSE_ADAM, v) and _find(rows, SAMPLED, v)]
    if dense_adam:
        v = 10**6 if 10**6 in dense_adam else max(dense_adam)
        out[f"dense_adam_vs_sparse_sampled_step_time@{size_label(v)}"] = (
            _find(rows, DENSE_ADAM, v)["step"]["median_s"]
            / _find(rows, SAMPLED, v)["step"]["median_s"]
        )
    return out


def targets(ratios: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's targets, each with its measured value and whether it is met."""
    checks = []
    for key, goal, better in (
        ("sampled_vs_full_step_time@1e6", 50.0, "higher"),
        ("sampled_vs_full_step_memory@1e6", 20.0, "higher"),
        ("sampled_step_time_1e6_over_1e4", 1.5, "lower"),
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


def table_markdown(rows: list[dict[str, Any]]) -> str:
    cols = [
        ("variant", "method (gradient, optimizer)"),
        ("V", r"\|V\|"),
        ("step", "step"),
        ("fwd", "forward"),
        ("bwd", "backward"),
        ("opt", "optimizer"),
        ("mem", "step's extra memory"),
        ("table", "item table"),
        ("state", "optimizer state (table)"),
        ("status", "status"),
    ]
    order = {name: i for i, name in enumerate(dict.fromkeys(r["variant"] for r in rows))}
    out = []
    for r in sorted(rows, key=lambda r: (order[r["variant"]], r["num_items"])):
        ok = r.get("status") == "ok"
        out.append(
            {
                "variant": r["variant"],
                "V": size_label(r["num_items"]),
                "step": fmt_seconds(r["step"]["median_s"]) if ok else "–",
                "fwd": fmt_seconds(r["forward"]["median_s"]) if ok else "–",
                "bwd": fmt_seconds(r["backward"]["median_s"]) if ok else "–",
                "opt": fmt_seconds(r["optimizer_step"]["median_s"]) if ok else "–",
                "mem": fmt_bytes(r["step_extra_bytes"]) if ok else "–",
                "table": fmt_bytes(r["num_items"] * r["dim"] * FLOAT_BYTES),
                "state": fmt_bytes(r["optimizer_state_bytes"]) if ok else "–",
                "status": r.get("status", ""),
            }
        )
    return markdown_table(out, cols)


def summary_markdown(ratios: dict[str, Any], checks: list[dict[str, Any]]) -> str:
    lines = ["Headline ratios (same run, side by side):", ""]
    for key, value in ratios.items():
        lines.append(f"- `{key}`: {fmt_ratio(value)}")
    lines += ["", "Targets:", ""]
    for c in checks:
        state = (
            "not measured in this run"
            if c["met"] is None
            else "**met**"
            if c["met"]
            else "**not met**"
        )
        lines.append(
            f"- `{c['ratio']}` {c['target']}: measured {fmt_ratio(c['measured'])}, {state}"
        )
    return "\n".join(lines) + "\n"


def plot(rows: list[dict[str, Any]], out: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    variants = []
    for r in rows:
        if r["variant"] not in variants:
            variants.append(r["variant"])
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for name in variants:
        pts = sorted(
            (r["num_items"], r["step"]["median_s"], r["step_extra_bytes"])
            for r in rows
            if r["variant"] == name and r.get("status") == "ok"
        )
        if not pts:
            continue
        style = "--" if "dense" in name else "-"
        xs = [p[0] for p in pts]
        axes[0].plot(xs, [p[1] * 1e3 for p in pts], style, marker="o", label=name)
        axes[1].plot(xs, [max(p[2], 1) / 2**20 for p in pts], style, marker="o", label=name)
    axes[0].set(
        xscale="log",
        yscale="log",
        xlabel="catalogue size |V|",
        ylabel="time per training step (ms)",
        title="Step time (B = 512, d = 128)",
    )
    axes[1].set(
        xscale="log",
        yscale="log",
        xlabel="catalogue size |V|",
        ylabel="step's extra peak memory (MiB)",
        title="Extra memory of one step",
    )
    axes[0].legend(fontsize=7)
    for ax in axes:
        ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    path = out / "catalogue.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return [path.name]


def v_of(row: dict[str, Any]) -> int:
    return row["num_items"]


def run(
    out: Path,
    *,
    quick: bool,
    sizes: list[int] | None = None,
    max_variant_size: int = 10**6,
    smoke: bool = False,
) -> dict[str, Any]:
    """Run the catalogue benchmark; writes catalogue.json / .md / .png into ``out``.

    The SparseAdam and dense-gradient variants run only up to ``max_variant_size``.
    """
    if sizes is None:
        sizes = [10**4, 10**5] if quick else [10**4, 10**5, 10**6, 10**7]
    repeats, min_seconds = (3, 0.3) if quick else (5, 2.0)
    if smoke:  # every group and method once, at the smallest size (CI)
        sizes, repeats, min_seconds = [10**3], 1, 0.0
    rows = []
    for cfg, methods in configurations(sizes, repeats=repeats, min_seconds=min_seconds):
        runnable = []
        for method in methods:
            row = dict(cfg, method=method)
            row["variant"] = variant_name(row)
            need, avail = estimated_bytes(row), memory_available_bytes()
            if avail is not None and need > 0.8 * avail:
                row["status"] = f"skipped: needs ~{fmt_bytes(need)}, {fmt_bytes(avail)} available"
            elif (
                row["num_items"] > max_variant_size
                and row["variant"] != SAMPLED
                and (method == "sampled")
            ):
                row["status"] = "not run at this size (time budget); see the smaller sizes"
            else:
                runnable.append(method)
                continue
            rows.append(row)
            print(
                f"  catalogue {row['variant']:<34} |V|={size_label(v_of(row)):>4}: {row['status']}",
                flush=True,
            )
        if not runnable:
            continue
        for row in run_in_subprocess(cfg, runnable):
            rows.append(row)
            step = (
                fmt_seconds(row["step"]["median_s"]) if row.get("status") == "ok" else row["status"]
            )
            print(
                f"  catalogue {row['variant']:<34} |V|={size_label(v_of(row)):>4}: {step}",
                flush=True,
            )
    ratios = headline_ratios(rows, sizes)
    checks = targets(ratios)
    result = {
        "benchmark": "catalogue",
        "sizes": sizes,
        "rows": rows,
        "ratios": ratios,
        "targets": checks,
    }
    write_json(out / "catalogue.json", result)
    (out / "catalogue.md").write_text(
        table_markdown(rows) + "\n" + summary_markdown(ratios, checks)
    )
    result["plots"] = plot(rows, out)
    return result


if __name__ == "__main__":
    print(json.dumps(run_group(json.loads(sys.argv[1]), sys.argv[2].split(","))), flush=True)
