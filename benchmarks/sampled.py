"""Benchmark: the package's sampled softmax against TensorFlow's (chapter 4), when TF imports.

TensorFlow's ``tf.nn.sampled_softmax_loss`` is the peer the book names for sampled softmax;
TensorFlow is an optional peer (``requirements-peers-tensorflow.txt``, an environment of its
own layered on the book's). Without it the benchmark prints why and writes a result that
says it was skipped.

One problem, float32: a class table of |V| = 10^6 rows (10^5 with ``--quick``, 10^4 with
``--smoke``), d = 128, B = 512 query rows, k = 4,096 log-uniform unique draws (TF's
defaults: logQ corrected, accidental hits removed). Both sides get the same inputs: the
same table, query, positive ids and the same pre-drawn samples (a
:class:`~candidate_sampling.sampling.samplers.CandidateDraw`, passed to TensorFlow as
``sampled_values``), so neither sampler is timed.

* ``loss``: forward + backward, gradients into the query and the class table; the
  package's table gradient is sparse (``sparse=True``: the rows touched), TensorFlow's is
  its ``IndexedSlices`` (``tf.GradientTape`` on a ``tf.Variable``);
* ``step``: a training step, the same forward + backward and a sparse Adagrad update of
  the touched table rows (``torch.optim.Adagrad`` on the sparse gradient;
  ``tf.compat.v1.train.AdagradOptimizer``, which applies ``IndexedSlices`` sparsely).

TensorFlow runs twice: eagerly and inside a ``tf.function`` (a traced graph, what Keras's
``fit`` runs); the ratio is against the faster of the two. Every arm runs on one CPU
thread (torch ``set_num_threads(1)``, TF's intra- and inter-op pools of 1), arms
alternated in rounds; ratios are medians of same-round ratios (package / TF, < 1: the
package is faster), wall clock and this process's CPU time (robust to other processes'
load on a shared machine), with their spread over the rounds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import torch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.common import fmt_ratio, fmt_seconds, markdown_table, size_label, write_json  # noqa: E402
from candidate_sampling import CandidateSet  # noqa: E402
from candidate_sampling.losses import sampled_softmax_loss  # noqa: E402
from candidate_sampling.sampling.samplers import LogUniformSampler  # noqa: E402

BATCH, DIM, NUM_SAMPLES, LR = 512, 128, 4096, 0.1


def import_tensorflow():
    """TensorFlow on one thread, or None when it does not import (with the reason)."""
    try:
        import tensorflow as tf
    except ImportError as err:
        return None, f"TensorFlow is not installed ({err}); pip install -r requirements-peers-tensorflow.txt"
    try:
        tf.config.threading.set_intra_op_parallelism_threads(1)
        tf.config.threading.set_inter_op_parallelism_threads(1)
    except RuntimeError:  # already initialised: keep its pools
        pass
    tf.get_logger().setLevel("ERROR")
    return tf, None


def make_problem(num_items: int, num_batches: int, seed: int = 0) -> dict[str, Any]:
    gen = torch.Generator().manual_seed(seed)
    table = torch.randn(num_items, DIM, generator=gen) * DIM**-0.5
    query = torch.randn(BATCH, DIM, generator=gen)
    sampler = LogUniformSampler(num_items)
    batches = []
    for _ in range(num_batches):
        positive_ids = sampler.sample(BATCH, generator=gen).ids
        draw = sampler.sample(NUM_SAMPLES, unique=True, generator=gen, positive_ids=positive_ids)
        batches.append((positive_ids, draw))
    return {"table": table, "query": query, "batches": batches}


def package_arms(problem: dict[str, Any]) -> dict[str, Callable[[int], None]]:
    table = torch.nn.Parameter(problem["table"].clone())
    query = problem["query"].clone().requires_grad_()
    optimizer = torch.optim.Adagrad([table], lr=LR, initial_accumulator_value=0.1)
    batches = problem["batches"]

    def loss_of(i: int) -> torch.Tensor:
        positive_ids, draw = batches[i % len(batches)]
        positives = CandidateSet.positives_of(positive_ids, table, draw=draw, sparse=True)
        negatives = CandidateSet.from_draw(draw, table, sparse=True)
        return sampled_softmax_loss(query, positives, negatives)

    def loss(i: int) -> None:
        table.grad = query.grad = None
        loss_of(i).backward()

    def step(i: int) -> None:
        optimizer.zero_grad(set_to_none=True)
        query.grad = None
        loss_of(i).backward()
        optimizer.step()

    return {"loss": loss, "step": step}


def tensorflow_arms(tf, problem: dict[str, Any], *, graph: bool) -> dict[str, Callable[[int], None]]:
    table = tf.Variable(problem["table"].numpy())
    bias = tf.zeros([problem["table"].shape[0]])
    query = tf.constant(problem["query"].numpy())
    optimizer = tf.compat.v1.train.AdagradOptimizer(LR, initial_accumulator_value=0.1)
    num_items = problem["table"].shape[0]
    feeds = []
    for positive_ids, draw in problem["batches"]:
        feeds.append(
            (
                tf.constant(positive_ids.numpy()[:, None]),
                tf.constant(draw.ids.numpy()),
                tf.constant(draw.positive_log_q.exp().numpy()[:, None]),
                tf.constant(draw.log_q.exp().numpy()),
            )
        )

    def loss_and_grads(labels, sampled, true_count, sampled_count):
        with tf.GradientTape() as tape:
            tape.watch(query)
            losses = tf.nn.sampled_softmax_loss(
                weights=table,
                biases=bias,
                labels=labels,
                inputs=query,
                num_sampled=NUM_SAMPLES,
                num_classes=num_items,
                sampled_values=(sampled, true_count, sampled_count),
                remove_accidental_hits=True,
            )
            mean = tf.reduce_mean(losses)
        return tape.gradient(mean, [query, table])

    def train(labels, sampled, true_count, sampled_count):
        grad_q, grad_table = loss_and_grads(labels, sampled, true_count, sampled_count)
        optimizer.apply_gradients([(grad_table, table)])
        return grad_q

    if graph:
        loss_and_grads = tf.function(loss_and_grads)
        train = tf.function(train)

    def loss(i: int) -> None:
        grads = loss_and_grads(*feeds[i % len(feeds)])
        _ = grads[0].numpy()  # wait for the result, as the torch arm does

    def step(i: int) -> None:
        _ = train(*feeds[i % len(feeds)]).numpy()

    return {"loss": loss, "step": step}


def _time_once(fn: Callable[[int], None], i: int) -> tuple[float, float]:
    start, start_cpu = time.perf_counter(), time.process_time()
    fn(i)
    return time.perf_counter() - start, time.process_time() - start_cpu


def _round_ratio(a: list[float], b: list[float]) -> tuple[float, float, float]:
    ratios = [x / y for x, y in zip(a, b)]
    return statistics.median(ratios), min(ratios), max(ratios)


def run(out: Path, *, quick: bool, smoke: bool = False, repeats: int | None = None,
        num_items: int | None = None) -> dict[str, Any]:
    """Writes sampled.json and sampled.md into ``out``; skipped (said so) without TF."""
    out.mkdir(parents=True, exist_ok=True)
    num_items = num_items or (10**4 if smoke else 10**5 if quick else 10**6)
    rounds = repeats or (2 if smoke else 10 if quick else 15)
    result: dict[str, Any] = {"benchmark": "sampled", "num_items": num_items, "ratios": {}}
    tf, why = import_tensorflow()
    if tf is None:
        print(f"  sampled: skipped, {why}", flush=True)
        result["skipped"] = why
        write_json(out / "sampled.json", result)
        (out / "sampled.md").write_text(f"Skipped: {why}.\n")
        return result
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        problem = make_problem(num_items, num_batches=4)
        contenders = {
            "package": package_arms(problem),
            "TF eager": tensorflow_arms(tf, problem, graph=False),
            "TF tf.function": tensorflow_arms(tf, problem, graph=True),
        }
        times: dict[tuple[str, str], list[float]] = {}
        cpu: dict[tuple[str, str], list[float]] = {}
        for what in ("loss", "step"):
            for name, arms in contenders.items():
                for i in range(2):  # warm-up (and tracing)
                    arms[what](i)
                times[name, what], cpu[name, what] = [], []
            for r in range(rounds):
                order = list(contenders) if r % 2 == 0 else list(reversed(contenders))
                for name in order:
                    wall, used = _time_once(contenders[name][what], r)
                    times[name, what].append(wall)
                    cpu[name, what].append(used)
    finally:
        torch.set_num_threads(threads)
    rows = []
    for (name, what), t in times.items():
        rows.append(
            {
                "arm": name,
                "what": what,
                "t": fmt_seconds(statistics.median(t)),
                "spread": f"{fmt_seconds(min(t))}–{fmt_seconds(max(t))}",
                "cpu": fmt_seconds(statistics.median(cpu[name, what])),
            }
        )
    label = size_label(num_items)
    spreads = {}
    for what in ("loss", "step"):
        best_tf = min(("TF eager", "TF tf.function"),
                      key=lambda n: statistics.median(cpu[n, what]))
        for kind, series in (("time", times), ("cpu_time", cpu)):
            mid, low, high = _round_ratio(series["package", what], series[best_tf, what])
            key = f"sampled_softmax_vs_tensorflow_{what}_{kind}@{label}"
            result["ratios"][key] = mid
            spreads[key] = {"min": low, "max": high, "against": best_tf}
    result["targets"] = [  # issue 42: the package at or ahead of TensorFlow
        {"ratio": key, "target": "≤ 1.0×", "measured": value, "met": value <= 1.0}
        for key, value in result["ratios"].items()
    ]
    result.update(
        {
            "shape": f"|V| = {label}, B = {BATCH}, d = {DIM}, k = {NUM_SAMPLES:,}",
            "tensorflow": tf.__version__,
            "torch": torch.__version__,
            "rounds": rounds,
            "arms": {f"{n}|{w}": {"times_s": times[n, w], "cpu_times_s": cpu[n, w]}
                     for (n, w) in times},
            "spread": spreads,
        }
    )
    write_json(out / "sampled.json", result)
    lines = [
        f"Sampled softmax, {result['shape']}, float32, one thread; TensorFlow "
        f"{tf.__version__}, torch {torch.__version__}; median of {rounds} interleaved rounds.\n",
        markdown_table(rows, [("arm", "arm"), ("what", "what"), ("t", "time"),
                              ("spread", "min–max"), ("cpu", "CPU time")]),
        "\nRatios (package / the faster TF arm by CPU time; min–max over rounds):\n",
    ]
    lines += [
        f"- `{k}`: {fmt_ratio(v)} ({fmt_ratio(spreads[k]['min'])}–{fmt_ratio(spreads[k]['max'])}, "
        f"against {spreads[k]['against']})"
        for k, v in result["ratios"].items()
    ]
    (out / "sampled.md").write_text("\n".join(lines) + "\n")
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true")
    mode.add_argument("--smoke", action="store_true")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--size", type=float, default=None, help="|V|, e.g. 1e6")
    args = parser.parse_args(argv)
    result = run(args.out, quick=args.quick, smoke=args.smoke, repeats=args.repeats,
                 num_items=int(args.size) if args.size else None)
    for key, value in result["ratios"].items():
        print(f"ratio {key}: {fmt_ratio(value)}")


if __name__ == "__main__":
    main()
