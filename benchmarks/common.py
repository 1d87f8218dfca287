"""Shared helpers of the benchmark suite: timing summaries, memory, machine, output files.

Timing itself is the package's :func:`candidate_sampling.time_calls` (device synchronised
around every call); :func:`summarize` reduces its list of seconds.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from candidate_sampling.device import get_device

ROOT = Path(__file__).resolve().parents[1]


# --------------------------------------------------------------------------- machine


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def memory_total_bytes() -> int | None:
    return _meminfo("MemTotal")


def memory_available_bytes() -> int | None:
    """``MemAvailable`` from /proc/meminfo (Linux), else None."""
    return _meminfo("MemAvailable")


def _meminfo(key: str) -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def machine_info(device: torch.device | None = None) -> dict[str, Any]:
    """What the numbers were measured on: CPU, cores, memory, versions, device, load."""
    device = device or get_device()
    info: dict[str, Any] = {
        "utc": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S"),
        "platform": platform.platform(),
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "memory_total_gb": round((memory_total_bytes() or 0) / 2**30, 1),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "device": str(device),
        "load_average_1_5_15min": load_average(),
    }
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
    return info


# --------------------------------------------------------------------------- timing


def summarize(times: Sequence[float]) -> dict[str, float]:
    """Median, minimum and count of a list of timings (seconds)."""
    return {
        "median_s": statistics.median(times),
        "min_s": min(times),
        "n": len(times),
    }


# --------------------------------------------------------------------------- memory


def _status_kb(key: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def current_rss_bytes() -> int | None:
    """Resident set size of this process now (Linux ``VmRSS``)."""
    return _status_kb("VmRSS")


def peak_rss_bytes() -> int:
    """Peak resident set size of this process (``VmHWM``; ``ru_maxrss`` elsewhere)."""
    peak = _status_kb("VmHWM")
    if peak is not None:
        return peak
    import resource

    scale = 1 if sys.platform == "darwin" else 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


def return_freed_memory_to_os() -> bool:
    """Make glibc give freed memory back to the OS, so that RSS follows live tensors.

    glibc keeps freed blocks (and raises its mmap threshold after freeing a large block),
    so a process's RSS can stay high after tensors are freed, and later allocations reuse
    that memory without raising the RSS. Fixing the mmap threshold at 128 kB (every
    tensor larger than that is its own mapping, unmapped when freed) and trimming the
    heap makes the RSS — and its peak — track the bytes actually in use. Returns False
    where glibc's ``mallopt`` is not available (then the peak RSS is a lower bound).
    """
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        m_trim_threshold, m_mmap_threshold = -1, -3
        ok = libc.mallopt(m_mmap_threshold, 128 * 1024) == 1
        ok = libc.mallopt(m_trim_threshold, 128 * 1024) == 1 and ok
        libc.malloc_trim(0)
        return bool(ok)
    except (OSError, AttributeError):
        return False


def peak_tensor_bytes(fn: Callable[[], Any]) -> int | None:
    """Peak bytes of tensor memory allocated (and not yet freed) while ``fn()`` runs.

    Uses the PyTorch profiler's allocation records (``profile_memory=True``) and its
    memory timeline: every allocation made through PyTorch's CPU allocator during the call
    (outputs, temporaries inside operators, gradients, optimizer updates) counts from its
    creation to its release; memory that existed before the call does not. Libraries'
    private buffers (e.g. the BLAS's) are not seen. Returns None if the profiler's memory
    timeline is unavailable in this PyTorch.
    """
    try:
        from torch.profiler import ProfilerActivity, profile
        from torch.profiler._memory_profiler import Action, MemoryProfile
    except ImportError:
        return None
    with profile(
        activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True, with_stack=True
    ) as prof:
        fn()
    try:
        timeline = MemoryProfile(prof.profiler.kineto_results).timeline
    except Exception:  # noqa: BLE001 - a private API: any failure means 'unavailable'
        return None
    created: set = set()
    current = peak = 0
    for _, action, (key, _version), size in timeline:
        if key.device.type != "cpu":
            continue
        if action == Action.CREATE:
            created.add(key)
            current += size
        elif action == Action.DESTROY and key in created:
            created.discard(key)
            current -= size
        peak = max(peak, current)
    return peak


def reset_peak_rss() -> bool:
    """Reset the peak RSS to the current RSS (Linux ≥ 4.0: ``echo 5 > /proc/self/clear_refs``).

    Returns False where that is not possible; the peak then includes the setup.
    """
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


# --------------------------------------------------------------------------- output


def markdown_table(rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str]]) -> str:
    """A GitHub/MyST markdown table: ``columns`` are (key, header); values pre-formatted."""
    header = "| " + " | ".join(h for _, h in columns) + " |"
    rule = "|" + "|".join("---:" if i else ":---" for i in range(len(columns))) + "|"
    lines = [header, rule]
    for row in rows:
        lines.append("| " + " | ".join(str(row.get(k, "")) for k, _ in columns) + " |")
    return "\n".join(lines) + "\n"


def fmt_seconds(s: float | None) -> str:
    if s is None or (isinstance(s, float) and not np.isfinite(s)):
        return "–"
    if s >= 1:
        return f"{s:.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.1f} ms"
    return f"{s * 1e6:.0f} µs"


def fmt_bytes(b: float | None) -> str:
    if b is None:
        return "–"
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(b) >= size:
            return f"{b / size:.1f} {unit}" if abs(b) < 100 * size else f"{b / size:.0f} {unit}"
    return f"{b:.0f} B"


def fmt_rate(r: float | None) -> str:
    if r is None:
        return "–"
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if r >= size:
            return f"{r / size:.1f}{unit}"
    return f"{r:.0f}"


def _ratio_digits(r: float) -> str:
    """One decimal from 10 up, two below (a ratio near 1 needs the second)."""
    return f"{r:.1f}" if abs(r) >= 10 else f"{r:.2f}"


def fmt_ratio(r: float | None) -> str:
    return "–" if r is None else f"{_ratio_digits(r)}×"


def size_label(n: int) -> str:
    """10000 → '1e4' (for exact powers of ten), else the number."""
    exp = round(float(np.log10(n))) if n > 0 else 0
    return f"1e{exp}" if 10**exp == n else str(n)


def write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, default=_json_default) + "\n")


def _json_default(obj: Any) -> Any:
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.floating,)):
        return float(obj)
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def print_ratio(name: str, value: float | None) -> str:
    """Print a headline ratio on its own line, ``ratio NAME: 12.3x``; returns the line."""
    line = f"ratio {name}: {'n/a' if value is None else _ratio_digits(value) + 'x'}"
    print(line, flush=True)
    return line
