"""Smoke test of benchmarks/negatives.py at tiny sizes: structure and ratios, no timing claims."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import negatives

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def test_gradcache_queue_rows_ratios_and_report(tmp_path):
    grad = negatives.gradcache_rows(64, chunk=16, block=16, d_in=8, d_hidden=16, d_out=4, repeats=1)
    assert set(grad["variants"]) == {
        "full batch",
        "GradCache (chunked loss)",
        "GradCache (one-pass loss)",
    }
    for row in grad["variants"].values():
        assert row["time"]["median_s"] > 0
        assert row["peak_bytes"] is None or row["peak_bytes"] > 0
    queue = negatives.queue_rows(8, [32], d_in=8, d_hidden=16, d_out=4, repeats=1)
    assert set(queue["steps"]) == {"in-batch", "queue 32"}
    ratios = negatives.headline(grad, queue, None)
    assert "queue_vs_in_batch_step_time@32" in ratios
    assert "gradcache_vs_full_batch_step_time@64" in ratios
    checks = negatives.targets(ratios, "64")
    assert [c["target"] for c in checks] == ["≥ 8.0×", "≤ 2.5×"]
    text = negatives.report(grad, queue, None, ratios)
    assert "GradCache" in text and "`queue_vs_in_batch_step_time@32`" in text
    json.dumps(ratios)
