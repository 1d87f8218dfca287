"""Benchmark 3, samplers: draws per second against |V| and k, with and without replacement.

All four contenders draw from the *same* distribution, the log-uniform (Zipfian)
``p(y) = log((y + 2)/(y + 1)) / log(|V| + 1)``:

* the package's :class:`~candidate_sampling.sampling.samplers.LogUniformSampler` (inverse CDF,
  O(1) per draw, no setup);
* the package's :class:`~candidate_sampling.sampling.samplers.UnigramSampler` given ``p`` as its
  counts (distortion 1): a Walker alias table, O(1) per draw after a one-off build whose
  time is reported separately;
* ``torch.multinomial(p, k, replacement)``, which works through all |V| probabilities on
  every call;
* ``numpy.random.choice(|V|, k, replace, p=p)``, likewise (it checks ``p`` and builds its
  cumulative sum on every call).

"Without replacement" means: the package draws until ``k`` distinct ids have been seen
(TensorFlow's ``unique=True``, which also yields the number of tries for the expected
counts); ``torch.multinomial`` and ``numpy.random.choice`` draw ``k`` distinct ids
sequentially, renormalising after each. The sets are distributed slightly differently;
the work asked of each is the same, k distinct ids. The package's timings include the
log expected counts it returns with every draw.
"""

from __future__ import annotations

import time
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.common import (
    fmt_rate,
    fmt_ratio,
    fmt_seconds,
    markdown_table,
    size_label,
    summarize,
    write_json,
)
from candidate_sampling import time_calls
from candidate_sampling.device import get_device, synchronize
from candidate_sampling.sampling.samplers import LogUniformSampler, UnigramSampler

CONTENDERS = (
    "log-uniform (package)",
    "alias table (package)",
    "torch.multinomial",
    "numpy.random.choice",
)


def log_uniform_probs(num_items: int) -> np.ndarray:
    ids = np.arange(num_items, dtype=np.float64)
    p = np.log1p(1.0 / (ids + 1.0)) / np.log(num_items + 1.0)
    return p / p.sum()


def run_grid(
    sizes: list[int],
    ks: list[int],
    *,
    repeats: int,
    min_seconds: float,
    device: torch.device | None = None,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """Time every contender for every (|V|, k, replacement); one dict per measurement."""
    device = device or get_device()
    rows: list[dict[str, Any]] = []
    for v in sizes:
        p_np = log_uniform_probs(v)
        dtype = torch.float64 if device.type != "mps" else torch.float32
        p_t = torch.as_tensor(p_np, dtype=dtype, device=device)
        gen = torch.Generator(device=device).manual_seed(seed)
        np.random.seed(seed)
        log_uniform = LogUniformSampler(v, device=device)
        synchronize(device)
        start = time.perf_counter()
        alias = UnigramSampler(p_t, distortion=1.0, device=device)
        synchronize(device)
        alias_setup = time.perf_counter() - start
        for k in ks:
            for replacement in (True, False):
                if not replacement and 4 * k > v:
                    continue  # k distinct ids out of a Zipfian |V| < 4k: tail-bound, skipped
                unique = not replacement
                calls = {
                    "log-uniform (package)": partial(
                        log_uniform.sample, k, unique=unique, generator=gen
                    ),
                    "alias table (package)": partial(alias.sample, k, unique=unique, generator=gen),
                    "torch.multinomial": partial(
                        torch.multinomial, p_t, k, replacement=replacement, generator=gen
                    ),
                    "numpy.random.choice": partial(
                        np.random.choice, v, size=k, replace=replacement, p=p_np
                    ),
                }
                for name, fn in calls.items():
                    times = time_calls(fn, device=device, repeats=repeats, min_seconds=min_seconds)
                    stats = summarize(times)
                    rows.append(
                        {
                            "contender": name,
                            "num_items": v,
                            "k": k,
                            "replacement": replacement,
                            "time": stats,
                            "draws_per_s": k / stats["median_s"],
                            "setup_s": alias_setup if name == "alias table (package)" else 0.0,
                        }
                    )
                print(
                    f"  samplers |V|={size_label(v):>4} k={k:>5} "
                    f"{'with' if replacement else 'without'} replacement: "
                    + ", ".join(
                        f"{r['contender'].split(' ')[0]} {fmt_rate(r['draws_per_s'])}/s"
                        for r in rows[-4:]
                    ),
                    flush=True,
                )
    return rows


def _get(rows, contender, v, k, replacement):
    for r in rows:
        if (r["contender"], r["num_items"], r["k"], r["replacement"]) == (
            contender,
            v,
            k,
            replacement,
        ):
            return r
    return None


def headline_ratios(rows: list[dict[str, Any]], sizes: list[int], ks: list[int]) -> dict[str, Any]:
    v = max(sizes)
    k = 4096 if 4096 in ks else max(ks)
    out: dict[str, Any] = {}
    for mine in ("alias table (package)", "log-uniform (package)"):
        tag = "alias" if mine.startswith("alias") else "loguniform"
        for other, otag in (("torch.multinomial", "multinomial"), ("numpy.random.choice", "numpy")):
            for replacement, rtag in ((True, "with"), (False, "without")):
                a, b = _get(rows, mine, v, k, replacement), _get(rows, other, v, k, replacement)
                if a and b:
                    out[f"{tag}_vs_{otag}_draws_{rtag}_replacement@{size_label(v)},k={k}"] = (
                        a["draws_per_s"] / b["draws_per_s"]
                    )
    return out


def table_markdown(rows: list[dict[str, Any]], setup: dict[int, float]) -> str:
    keys = sorted(
        {(r["num_items"], r["k"], r["replacement"]) for r in rows},
        key=lambda t: (not t[2], t[1], t[0]),
    )
    cols = [("V", r"\|V\|"), ("k", "k"), ("rep", "replacement")] + [
        (c, c + " draws/s") for c in CONTENDERS
    ]
    out = []
    for v, k, rep in keys:
        row = {"V": size_label(v), "k": f"{k:,}", "rep": "with" if rep else "without"}
        for c in CONTENDERS:
            r = _get(rows, c, v, k, rep)
            row[c] = fmt_rate(r["draws_per_s"]) if r else "–"
        out.append(row)
    setup_rows = [{"V": size_label(v), "s": fmt_seconds(s)} for v, s in sorted(setup.items())]
    return (
        markdown_table(out, cols)
        + "\nAlias-table build (once per distribution):\n\n"
        + markdown_table(setup_rows, [("V", r"\|V\|"), ("s", "build time")])
    )


def plot(rows: list[dict[str, Any]], out: Path, k: int) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for ax, replacement in zip(axes, (True, False)):
        for c in CONTENDERS:
            pts = sorted(
                (r["num_items"], r["draws_per_s"])
                for r in rows
                if r["contender"] == c and r["k"] == k and r["replacement"] == replacement
            )
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=c)
        ax.set(
            xscale="log",
            yscale="log",
            xlabel="catalogue size |V|",
            title=f"k = {k:,}, {'with' if replacement else 'without'} replacement",
        )
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("draws per second")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    path = out / "samplers.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return [path.name]


def run(out: Path, *, quick: bool, smoke: bool = False) -> dict[str, Any]:
    sizes = [10**4, 10**5, 10**6] if quick else [10**4, 10**5, 10**6, 10**7]
    ks = [4096, 65536] if quick else [64, 4096, 65536]
    repeats, min_seconds = (2, 0.05) if quick else (3, 0.3)
    if smoke:  # every contender, with and without replacement, once (CI)
        sizes, ks, repeats, min_seconds = [10**4], [64], 1, 0.0
    rows = run_grid(sizes, ks, repeats=repeats, min_seconds=min_seconds)
    setup = {r["num_items"]: r["setup_s"] for r in rows if r["contender"].startswith("alias")}
    ratios = headline_ratios(rows, sizes, ks)
    result = {
        "benchmark": "samplers",
        "sizes": sizes,
        "ks": ks,
        "rows": rows,
        "alias_setup_s": setup,
        "ratios": ratios,
    }
    write_json(out / "samplers.json", result)
    lines = ["", "Headline ratios (draws per second, same run):", ""]
    lines += [f"- `{key}`: {fmt_ratio(value)}" for key, value in ratios.items()]
    (out / "samplers.md").write_text(table_markdown(rows, setup) + "\n".join(lines) + "\n")
    result["plots"] = plot(rows, out, 4096 if 4096 in ks else ks[0])
    return result
