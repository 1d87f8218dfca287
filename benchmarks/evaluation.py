"""Benchmark 10, exact evaluation: a positive's rank over the whole catalogue, two schedules.

:func:`~candidate_sampling.eval.metrics.positive_ranks` and
:func:`~candidate_sampling.eval.baselines.ranks_from_scores` count, for every test pair
``(user, positive)``, the items the user's scores put above the positive, known items
removed. They share one private loop with two schedules that give the same ranks:

* **by chunk**: each chunk of pairs gets its own score rows, so a user with ten test
  pairs has its row made, filled and scanned ten times, in a few large launches;
* **by user**: the pairs are grouped by user, each user's row is made and filled once,
  and every pair of that user is counted against it through a broadcast view, one small
  launch per user.

By user is the default on the CPU for rows of at least 2^15 items when users have two
test pairs or more on average; by chunk otherwise, and always on a GPU (the rule this
benchmark checks: each row of the table says which schedule is the default there).
The shapes are the book's: chapter 9's planted catalogue (200 users, |V| = 10^5, 2,000
test pairs, d = 17), MovieLens-100K (943 users, 1,682 movies, 20,000 test pairs, d = 32)
and the case the by-user schedule cannot help, one pair per user (2,000 users, |V| = 10^5).
Each user knows 20 random training items. The two schedules are timed in alternating
blocks in the same run, and their ranks are checked to agree (up to a near tie that a
matrix product of another size rounds the other way). Headline ratio per shape:
``rank_by_chunk_vs_by_user_time@<shape>``, the by-chunk time over the by-user time
(above 1: grouping by user is faster).
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import torch

from benchmarks.common import fmt_ratio, fmt_seconds, markdown_table, summarize, write_json
from candidate_sampling import time_calls
from candidate_sampling.device import get_device
from candidate_sampling.eval import KnownPairs
from candidate_sampling.eval.metrics import _by_user_by_default, _ranks_of_pairs

#: shape name → (users, items, test pairs, embedding size)
SHAPES = {
    "chapter9": (200, 10**5, 2_000, 17),
    "movielens100k": (943, 1_682, 20_000, 32),
    "one_pair_per_user": (2_000, 10**5, 2_000, 17),
}
#: the smallest shapes on which each default still holds (by user on "chapter9" only)
SMOKE_SHAPES = {
    "chapter9": (20, 2**15, 100, 17),
    "movielens100k": (50, 500, 200, 32),
    "one_pair_per_user": (50, 2**15, 50, 17),
}
SCHEDULES = {"by chunk": False, "by user": True}


def _problem(users: int, items: int, pairs: int, dim: int, device: torch.device) -> dict:
    g = torch.Generator().manual_seed(0)
    if pairs == users:  # one pair per user
        user_index = torch.randperm(users, generator=g)
    else:
        user_index = torch.randint(0, users, (pairs,), generator=g)
    return {
        "user_embeddings": torch.randn(users, dim, generator=g).to(device),
        "item_embeddings": torch.randn(items, dim, generator=g).to(device),
        "users": user_index.to(device),
        "positives": torch.randint(0, items, (pairs,), generator=g).to(device),
        "known": KnownPairs(
            torch.arange(users).repeat_interleave(20),
            torch.randint(0, items, (20 * users,), generator=g),
            num_items=items,
        ).to(device),
    }


def _ranks(p: dict, by_user: bool) -> torch.Tensor:
    """positive_ranks' own call of the shared loop, with the schedule fixed."""
    ue, ie = p["user_embeddings"], p["item_embeddings"]
    with torch.no_grad():
        return _ranks_of_pairs(
            lambda u: ue[u] @ ie.T,
            p["users"],
            p["positives"],
            p["known"],
            2048,
            ie.shape[0],
            by_user=by_user,
        )


def measure(
    shapes: dict[str, tuple[int, int, int, int]], *, rounds: int, repeats: int, min_seconds: float
) -> list[dict[str, Any]]:
    """Median time of each schedule on each shape, in ``rounds`` alternating blocks."""
    device = get_device()
    rows = []
    for name, (users, items, pairs, dim) in shapes.items():
        p = _problem(users, items, pairs, dim, device)
        # the same ranks, up to a near tie that a matmul of another size rounds the other way
        differ = _ranks(p, by_user=False) != _ranks(p, by_user=True)
        assert float(differ.float().mean()) < 0.01, name
        times: dict[str, list[float]] = {s: [] for s in SCHEDULES}
        for r in range(rounds):
            order = list(SCHEDULES) if r % 2 == 0 else list(SCHEDULES)[::-1]
            for schedule in order:
                times[schedule] += time_calls(
                    partial(_ranks, p, SCHEDULES[schedule]),
                    device=device,
                    repeats=repeats,
                    min_seconds=min_seconds,
                )
        for schedule in SCHEDULES:
            rows.append(
                {
                    "shape": name,
                    "users": users,
                    "num_items": items,
                    "pairs": pairs,
                    "dim": dim,
                    "schedule": schedule,
                    "default": SCHEDULES[schedule] == _by_user_by_default(p["users"], items),
                    "device": str(device),
                    "time": summarize(times[schedule]),
                }
            )
    return rows


def ratios_of(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Per shape: median time by chunk / median time by user."""
    out = {}
    for name in dict.fromkeys(r["shape"] for r in rows):
        t = {r["schedule"]: r["time"]["median_s"] for r in rows if r["shape"] == name}
        out[f"rank_by_chunk_vs_by_user_time@{name}"] = t["by chunk"] / t["by user"]
    return out


def run(out: Path, *, quick: bool, smoke: bool = False) -> dict[str, Any]:
    """Run the benchmark; writes evaluation.json / .md into ``out``."""
    shapes = SMOKE_SHAPES if smoke else SHAPES
    rounds, repeats, min_seconds = (4, 3, 0.2) if quick else (6, 5, 1.0)
    if smoke:  # both schedules on every shape, once (CI)
        rounds, repeats, min_seconds = 1, 1, 0.0
    rows = measure(shapes, rounds=rounds, repeats=repeats, min_seconds=min_seconds)
    ratios = ratios_of(rows)
    for key, value in ratios.items():
        print(f"  evaluation {key}: {fmt_ratio(value)}", flush=True)
    result = {"benchmark": "evaluation", "rounds": rounds, "rows": rows, "ratios": ratios}
    write_json(out / "evaluation.json", result)
    table = markdown_table(
        [
            {
                "shape": f"{r['shape']} ({r['users']:,} users, \\|V\\| = {r['num_items']:,}, "
                f"{r['pairs']:,} pairs)",
                "schedule": r["schedule"] + (" (default)" if r["default"] else ""),
                "median": fmt_seconds(r["time"]["median_s"]),
                "min": fmt_seconds(r["time"]["min_s"]),
                "n": r["time"]["n"],
            }
            for r in rows
        ],
        [
            ("shape", "shape"),
            ("schedule", "schedule"),
            ("median", "median"),
            ("min", "fastest"),
            ("n", "calls"),
        ],
    )
    lines = ["", "Ratios (time by chunk / time by user, same run):", ""]
    lines += [f"- `{key}`: {fmt_ratio(value)}" for key, value in ratios.items()]
    (out / "evaluation.md").write_text(table + "\n".join(lines) + "\n")
    return result
