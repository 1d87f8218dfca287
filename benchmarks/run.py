"""Run the benchmark suite: ``python benchmarks/run.py [--smoke|--quick] [--out D] [--only N]``.

Benchmarks (the book's "Benchmarks" appendix explains each one):

``catalogue``  time and extra memory of one training step against |V| for the full, sampled,
               in-batch and mixed softmax; sparse vs dense gradients;
``samplers``   draws per second of the package's samplers, torch.multinomial and
               numpy.random.choice on the same distribution;
``pipeline``   the source post's Python pipeline against the package's vectorised one on
               MovieLens-100K (examples per second);
``validation`` one training step (sampled softmax; mixed negatives) with the package's
               value checks on vs off (``candidate_sampling.validate_args``);
``floor``      each package loss (sampled softmax, NCE, in-batch, mixed, InfoNCE, NT-Xent)
               against the least plain-torch code for the same loss and gradients: step
               time with value checks off and on, and peak memory;
``negatives``  more negatives than a batch holds: GradCache vs full-batch peak memory and
               step time, a 65,536-entry queue vs in-batch, 2 gloo ranks vs 1;
``mining``     faiss HNSW / IVF / IndexFlatIP vs exact ``torch.topk`` for top-100 mining:
               queries/s, recall@100, index build time and memory (--quick: 10^5);
``chunked``    the exact softmax in chunks (chapter 10) against the full logits, torch's
               ``F.linear_cross_entropy`` and sampled softmax: time and own peak memory
               against N and |V|;
``sampled``    sampled softmax (|V| = 10^6, B = 512, k = 4,096) and a sparse-Adagrad
               training step against TensorFlow's ``tf.nn.sampled_softmax_loss``, when
               TensorFlow imports (``requirements-peers-tensorflow.txt``); else skipped
               with a message;
``evaluation`` exact full-catalogue ranks of test pairs, grouped by user (the CPU's
               schedule) vs one score row per pair (a GPU's), same ranks;
``book``       execution time of every chapter (skipped by ``--quick`` unless named in
               ``--only``).

Each benchmark writes ``NAME.json``, a markdown table ``NAME.md`` and (where it has one) a
plot ``NAME.png`` into ``--out``, plus ``summary.json`` / ``summary.md`` with the machine
and every headline ratio, each of which is also printed on its own line
(``ratio NAME: 12.3x``). Everything runs on ``get_device()`` (CUDA, then MPS, then the
CPU; ``--device`` or ``$CANDIDATE_SAMPLING_DEVICE`` to choose).

Three modes:

* **full** (no flag): the sizes and repeats the appendix reports (tens of minutes on 2
  CPU cores, ``book`` included);
* ``--quick``: smaller catalogues and fewer repeats, ``book`` skipped (a few minutes);
  ratios close to a full run's, for a first look;
* ``--smoke``: the smallest sizes that still run every benchmark's code path once and
  write its JSON / markdown / plot, ``book`` skipped (under a minute on 2 cores). It is
  what CI runs (``.ci/run``): a test that the suite works, **not a measurement** — its
  ratios are noise and are labelled ``mode: smoke`` in ``summary.json``.

``--only`` runs a subset (and keeps the other entries of an earlier run of the same mode
in ``summary.json``). ``--repeats N`` runs each selected benchmark N times in a row and
reports every headline ratio as its median over the runs, with the minimum and maximum
(``summary.json``: ``ratio_runs``); the appendix is regenerated with

    python benchmarks/run.py --repeats 3 --out book/benchmarks
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

BENCHMARKS = (
    "catalogue",
    "samplers",
    "pipeline",
    "validation",
    "floor",
    "negatives",
    "mining",
    "chunked",
    "sampled",
    "evaluation",
    "book",
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    size = parser.add_mutually_exclusive_group()
    size.add_argument(
        "--quick",
        action="store_true",
        help="small sizes and few repeats (a few minutes on 2 CPU cores)",
    )
    size.add_argument(
        "--smoke",
        action="store_true",
        help="smallest sizes, one repeat: every code path once, no measurement (CI, < 1 min)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=ROOT / "benchmarks" / "results",
        help="folder for the JSON, markdown and PNG results",
    )
    parser.add_argument(
        "--only", default=None, help=f"comma-separated subset of {','.join(BENCHMARKS)}"
    )
    parser.add_argument(
        "--sizes",
        default=None,
        help="catalogue sizes for the catalogue benchmark, e.g. 1e4,1e5,1e6",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="run each selected benchmark this many times; summary.json/.md report every "
        "headline ratio's median, min and max over the runs (the appendix uses 3)",
    )
    parser.add_argument(
        "--device",
        default=None,
        help="force a device (sets $CANDIDATE_SAMPLING_DEVICE), e.g. cpu, cuda",
    )
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats must be >= 1, got {args.repeats}")
    if args.only is not None:
        names = [n.strip() for n in args.only.split(",") if n.strip()]
        unknown = [n for n in names if n not in BENCHMARKS]
        if unknown:
            parser.error(f"--only: unknown benchmark(s) {unknown}; choose from {BENCHMARKS}")
        args.only = names
    if args.sizes is not None:
        args.sizes = [int(float(s)) for s in args.sizes.split(",")]
    return args


def smoke_kwargs(run) -> dict:
    """``{"smoke": True}`` for a benchmark whose ``run`` takes it, else ``{}`` (quick sizes)."""
    import inspect

    return {"smoke": True} if "smoke" in inspect.signature(run).parameters else {}


def ratio_spread(runs: list[dict]) -> dict[str, dict]:
    """Per ratio, over the runs that produced a number: values, median, min, max."""
    import statistics

    out = {}
    for key in dict.fromkeys(k for run in runs for k in run):
        values = [run[key] for run in runs if run.get(key) is not None]
        if values:
            out[key] = {
                "values": values,
                "median": statistics.median(values),
                "min": min(values),
                "max": max(values),
            }
    return out


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    if args.device:
        os.environ["CANDIDATE_SAMPLING_DEVICE"] = args.device
    import warnings

    warnings.filterwarnings("ignore", category=UserWarning)

    from benchmarks import (
        book,
        catalogue,
        chunked,
        evaluation,
        floor,
        mining,
        negatives,
        pipeline,
        sampled,
        samplers,
        validation,
    )
    from benchmarks.common import (
        fmt_ratio,
        load_average,
        machine_info,
        markdown_table,
        print_ratio,
        write_json,
    )

    selected = args.only or [
        b for b in BENCHMARKS if not ((args.quick or args.smoke) and b == "book")
    ]
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    machine = machine_info()
    mode = "smoke" if args.smoke else "quick" if args.quick else "full"
    print(
        f"benchmarks ({mode}) on {machine['device']}: {machine['cpu']}, "
        f"{machine['cpu_count']} cores, torch {machine['torch']}, "
        f"load average {machine['load_average_1_5_15min']}",
        flush=True,
    )
    if machine["device"] == "cpu":
        print("no GPU here: CPU figures only", flush=True)
    modules = {
        "catalogue": catalogue,
        "samplers": samplers,
        "pipeline": pipeline,
        "validation": validation,
        "floor": floor,
        "negatives": negatives,
        "mining": mining,
        "chunked": chunked,
        "sampled": sampled,
        "evaluation": evaluation,
        "book": book,
    }
    # a run of a subset (--only) keeps the other benchmarks' entries of an earlier run
    previous = {}
    if (out / "summary.json").exists():
        try:
            old = json.loads((out / "summary.json").read_text())
            if old.get("mode") == mode:
                previous = old.get("benchmarks", {})
        except (OSError, ValueError):
            previous = {}
    entries = {k: v for k, v in previous.items() if k in BENCHMARKS and k not in selected}
    start_all = time.perf_counter()
    failures: list[str] = []
    for name in selected:
        runs: list[dict] = []  # the ratios of each run of this benchmark
        for rep in range(args.repeats):
            label = f" (run {rep + 1} of {args.repeats})" if args.repeats > 1 else ""
            print(f"== {name}{label}", flush=True)
            before = machine_info()
            start = time.perf_counter()
            kwargs = {"sizes": args.sizes} if name == "catalogue" and args.sizes else {}
            if args.smoke:
                kwargs.update(smoke_kwargs(modules[name].run))
            try:
                result = modules[name].run(out, quick=args.quick or args.smoke, **kwargs)
            except Exception as err:  # noqa: BLE001 - report, run the other benchmarks, exit 1
                message = f"{type(err).__name__}: {err}"
                print(f"  {name} FAILED: {message}", flush=True)
                failures.append(name)
                entries[name] = {"failed": message, "utc": before["utc"]}
                break
            result["mode"] = mode
            result["seconds"] = time.perf_counter() - start
            result["machine"] = before
            result["load_average_after"] = load_average()
            result["run"] = rep + 1
            write_json(out / f"{name}.json", result)  # the files of the last run are kept
            for key, value in result.get("ratios", {}).items():
                print_ratio(key, value)
            runs.append(result.get("ratios", {}))
            entries[name] = {
                "seconds": result["seconds"],
                "plots": result.get("plots", []),
                "utc": before["utc"],
                "torch_threads": before["torch_threads"],
                "load_average_before": before["load_average_1_5_15min"],
                "load_average_after": result["load_average_after"],
                "ratios": result.get("ratios", {}),
                "targets": result.get("targets", []),
                "runs": rep + 1,
            }
        if len(runs) > 1:
            # every headline ratio over the runs: the median is reported, with min and max
            spread = ratio_spread(runs)
            entries[name]["ratio_runs"] = {k: v["values"] for k, v in spread.items()}
            entries[name]["ratios"] = {k: v["median"] for k, v in spread.items()}
            for key, v in spread.items():
                print(
                    f"ratio {key} over {len(v['values'])} runs: median {fmt_ratio(v['median'])}"
                    f" (min {fmt_ratio(v['min'])}, max {fmt_ratio(v['max'])})",
                    flush=True,
                )
    ordered = {k: entries[k] for k in BENCHMARKS if k in entries}
    ratios = {k: v for e in ordered.values() for k, v in e.get("ratios", {}).items()}
    targets = [t for e in ordered.values() for t in e.get("targets", [])]
    summary = {
        "mode": mode,
        "machine": machine,
        "benchmarks": ordered,
        "ratios": ratios,
        "targets": targets,
        "failures": failures,
        "seconds": time.perf_counter() - start_all,
    }
    write_json(out / "summary.json", summary)
    spreads = {k: v for e in ordered.values() for k, v in e.get("ratio_runs", {}).items()}
    rows = [
        {
            "k": f"`{k}`",
            "v": fmt_ratio(v),
            "n": len(spreads.get(k, [v])),
            "r": (
                f"{fmt_ratio(min(spreads[k]))} – {fmt_ratio(max(spreads[k]))}"
                if k in spreads else "–"
            ),
        }
        for k, v in ratios.items()
    ]
    target_rows = [
        {
            "k": f"`{t['ratio']}`",
            "t": t["target"],
            "v": fmt_ratio(t["measured"]),
            "met": "–" if t["met"] is None else ("yes" if t["met"] else "**no**"),
        }
        for t in targets
    ]
    runs = [
        {
            "b": name,
            "utc": e.get("utc", ""),
            "s": f"{e['seconds']:.0f} s" if "seconds" in e else e.get("failed", ""),
            "thr": e.get("torch_threads", ""),
            "load": " → ".join(
                str(x[0]) for x in (e.get("load_average_before"), e.get("load_average_after")) if x
            ),
        }
        for name, e in ordered.items()
    ]
    (out / "summary.md").write_text(
        f"Mode: {mode}; device: {machine['device']}; CPU: {machine['cpu']}, "
        f"{machine['cpu_count']} cores, {machine['memory_total_gb']} GB; Python "
        f"{machine['python']}, torch {machine['torch']}, NumPy {machine['numpy']}.\n\n"
        + markdown_table(
            runs,
            [
                ("b", "benchmark"),
                ("utc", "measured (UTC)"),
                ("s", "took"),
                ("thr", "torch threads"),
                ("load", "1-min load average before → after"),
            ],
        )
        + "\nTargets:\n\n"
        + markdown_table(
            target_rows, [("k", "ratio"), ("t", "target"), ("v", "measured"), ("met", "met")]
        )
        + "\nAll headline ratios:\n\n"
        + markdown_table(
            rows,
            [("k", "ratio"), ("v", "value (median over runs)"), ("n", "runs"),
             ("r", "min – max")],
        )
    )
    print(f"done in {summary['seconds']:.0f} s; results in {out}", flush=True)
    if failures:
        print(f"failed: {', '.join(failures)}", flush=True)
    return summary


if __name__ == "__main__":
    sys.exit(1 if main()["failures"] else 0)
