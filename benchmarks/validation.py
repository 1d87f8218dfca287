"""Benchmark 5, value checks: one training step with the package's value checks on vs off.

The package checks argument *values* (ids in range, finite log Q, probabilities in [0, 1])
while :func:`candidate_sampling.get_validate_args` is True, the default; each such check
reads tensor values, which on a GPU waits for the device. A debugged training loop can turn
them off with ``candidate_sampling.set_validate_args(False)`` or, for a block,
``with candidate_sampling.validate_args(False):``. This benchmark measures what that saves.

The step is the catalogue benchmark's (:class:`benchmarks.catalogue.TrainingStep`, the
package's default path: sparse gradients, Adagrad), at its realistic shape: B = 512,
d = 128, |V| = 10^5 (``--quick``) or 10^6, and two losses:

* ``sampled``: :func:`~candidate_sampling.losses.sampled_softmax_loss` with the item tower
  as the item encoder, k = 4,096 log-uniform negatives drawn with the batch's
  ``positive_ids`` (headline ratio ``validation_on_vs_off_step_time``);
* ``mixed``: :class:`~candidate_sampling.losses.RetrievalLoss`, in-batch plus B' = 4,096
  uniform extras (ratio ``validation_on_vs_off_step_time@mixed``).

One step: draw, forward, backward, optimizer step, with no synchronisation inside it (as
in a training loop); :func:`candidate_sampling.time_calls` synchronises the device after
each step. Checks on and off alternate step by step on the same model, in the same run;
the ratio is the median step time with checks on over the median with them off (above 1:
the checks cost time). Shape and dtype checks, which read only metadata, run in both.
"""

from __future__ import annotations

import statistics
from functools import partial
from pathlib import Path
from typing import Any

from benchmarks.catalogue import TrainingStep, default_config
from benchmarks.common import (
    fmt_ratio,
    fmt_seconds,
    markdown_table,
    size_label,
    summarize,
    write_json,
)
from candidate_sampling import get_validate_args, time_calls, validate_args

#: method → the name of its ratio (step time with value checks on / off)
METHODS = {
    "sampled": "validation_on_vs_off_step_time",
    "mixed": "validation_on_vs_off_step_time@mixed",
}
LABELS = {
    "sampled": "sampled softmax (sampled_softmax_loss, k = 4,096)",
    "mixed": "mixed negatives (RetrievalLoss, B' = 4,096)",
}


def measure(
    cfg: dict[str, Any], methods: list[str], *, rounds: int, repeats: int, min_seconds: float
) -> list[dict[str, Any]]:
    """Step times of each method with value checks on and off; one row per (method, setting).

    Checks on and off alternate step by step (on, off, then off, on, ...), ``repeats``
    pairs per round (more until the round has ``min_seconds`` of timed steps), ``rounds``
    rounds after two untimed steps: on a machine shared with other work, a change of load
    then hits both settings alike. Each "on" row also carries the median over pairs of
    on / off (``paired_ratio_median``).
    """
    step = TrainingStep(cfg, methods)
    rows = []
    for method in methods:
        for _ in range(2):  # lazy optimizer state, kernel selection
            step(method)
        times: dict[bool, list[float]] = {True: [], False: []}
        pairs: list[float] = []
        losses: dict[bool, float] = {}
        for r in range(rounds):
            spent, done = 0.0, 0
            while done < repeats or spent < min_seconds:
                pair = {}
                for checks in (True, False) if (r + done) % 2 == 0 else (False, True):
                    with validate_args(checks):
                        (seconds,) = time_calls(
                            partial(step, method), device=step.device, repeats=1, warmup=0
                        )
                    pair[checks] = seconds
                    times[checks].append(seconds)
                    spent += seconds
                pairs.append(pair[True] / pair[False])
                done += 1
            for checks in (True, False):
                with validate_args(checks):
                    losses[checks] = float(step(method))
        for checks in (True, False):
            rows.append(
                {
                    "method": method,
                    "label": LABELS[method],
                    "validate_args": checks,
                    "num_items": cfg["num_items"],
                    "batch_size": cfg["batch_size"],
                    "dim": cfg["dim"],
                    "num_samples": cfg["num_samples"],
                    "num_mixed_samples": cfg["num_mixed_samples"],
                    "device": str(step.device),
                    "step": summarize(times[checks]),
                    "loss_last": losses[checks],
                    **({"paired_ratio_median": statistics.median(pairs)} if checks else {}),
                }
            )
    return rows


def ratios_of(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Median step time with checks on / with checks off, per method."""
    out = {}
    for method, key in METHODS.items():
        on = [r for r in rows if r["method"] == method and r["validate_args"]]
        off = [r for r in rows if r["method"] == method and not r["validate_args"]]
        if on and off:
            out[key] = on[0]["step"]["median_s"] / off[0]["step"]["median_s"]
    return out


def run(
    out: Path, *, quick: bool, num_items: int | None = None, smoke: bool = False
) -> dict[str, Any]:
    """Run the benchmark; writes validation.json / .md into ``out``."""
    v = num_items or (10**3 if smoke else 10**5 if quick else 10**6)
    rounds, repeats, min_seconds = (4, 3, 0.2) if quick else (6, 5, 1.0)
    if smoke:  # both losses, checks on and off, once (CI)
        rounds, repeats, min_seconds = 1, 1, 0.0
    cfg = default_config(num_items=v)
    before = get_validate_args()
    rows = measure(cfg, list(METHODS), rounds=rounds, repeats=repeats, min_seconds=min_seconds)
    assert get_validate_args() == before  # the switch is restored after every block
    ratios = ratios_of(rows)
    for method in METHODS:
        on, off = (
            next(r for r in rows if r["method"] == method and r["validate_args"] is flag)
            for flag in (True, False)
        )
        print(
            f"  validation {method:<8} |V|={size_label(v)}: checks on "
            f"{fmt_seconds(on['step']['median_s'])}, off {fmt_seconds(off['step']['median_s'])}",
            flush=True,
        )
    result = {
        "benchmark": "validation",
        "num_items": v,
        "rounds": rounds,
        "rows": rows,
        "ratios": ratios,
    }
    write_json(out / "validation.json", result)
    table = markdown_table(
        [
            {
                "step": r["label"],
                "checks": "on" if r["validate_args"] else "off",
                "median": fmt_seconds(r["step"]["median_s"]),
                "min": fmt_seconds(r["step"]["min_s"]),
                "n": r["step"]["n"],
            }
            for r in rows
        ],
        [
            ("step", f"training step (\\|V\\| = {size_label(v)}, B = 512, d = 128)"),
            ("checks", "value checks"),
            ("median", "median step"),
            ("min", "fastest step"),
            ("n", "steps"),
        ],
    )
    lines = ["", "Ratios (step time with value checks on / off, same run):", ""]
    lines += [f"- `{key}`: {fmt_ratio(value)}" for key, value in ratios.items()]
    (out / "validation.md").write_text(table + "\n".join(lines) + "\n")
    return result
