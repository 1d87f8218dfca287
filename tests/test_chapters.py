"""Every chapter of the table of contents executes without error, every `assert` included.

Each chapter is executed once per change, not once per tool: this test and the book build
(``jupyter-book build .``, ``execute_notebooks: cache``) share one jupyter-cache, in
``_build/.jupyter_cache/<key>``, where the key hashes ``src/``, ``pyproject.toml``,
``requirements.txt``, the installed torch / numpy / faiss and the book's environment
variables (``book/_ext/execution_cache.py``); jupyter-cache itself matches a notebook by
its code cells. So:

* after ``jupyter-book build .`` this test finds every chapter the build executed and
  passes without running it again (the build fails on a failing cell, and a failed
  execution is never cached);
* run first, it executes each chapter (as the build would: same cache, same working
  folder, same timeout) and caches the result, so the build that follows reuses it;
* a chapter that fails, or that was edited, or whose package changed, is executed here,
  and a failing cell fails the test with its traceback.

With pytest-xdist (``python -m pytest -n auto``, as CI runs it) the chapters execute two
at a time on two cores, each kernel with its share of the cores' threads
(``OMP_NUM_THREADS``), so they do not fight over the cores.

The chapters are whatever ``_toc.yml`` lists under ``notebooks/``. To re-execute one
chapter in a fresh kernel whatever the cache holds, use nbval:
``python -m pytest notebooks/04_sampled_softmax.ipynb``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import yaml

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "book" / "_ext"))

from execution_cache import cache_path  # noqa: E402


def toc_chapters() -> list[Path]:
    """The notebooks ``_toc.yml`` lists, in its order."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    entries = [toc["root"]]

    def walk(items: list[dict]) -> None:
        for item in items:
            entries.append(item["file"])
            walk(item.get("sections", []))

    for part in toc.get("parts", []):
        walk(part.get("chapters", []))
    return [ROOT / f"{e}.ipynb" for e in entries if (ROOT / f"{e}.ipynb").exists()]


def _timeout() -> int:
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    return int(config.get("execute", {}).get("timeout", 900))


def open_cache(path: Path | None = None):
    """The shared jupyter-cache (``cache_path()`` unless ``path``), its database created
    by one process at a time.

    jupyter-cache creates its tables on first use. Two xdist workers that reach an empty
    cache at the same moment both try, and one fails with "table settings already exists",
    so the first use holds an exclusive lock on a file beside the cache folder (POSIX
    ``flock``; where there is none, as on Windows, run the chapters without ``-n``)."""
    from jupyter_cache import get_cache

    path = cache_path() if path is None else path
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / f"{path.name}.lock", "w") as lock:
        if fcntl is not None:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file is closed
        cache = get_cache(str(path))
        cache.db  # creates the database and its tables if this process is the first
    return cache


def execute_or_reuse(notebook: Path) -> tuple[str, float]:
    """``("cached", s)`` if the cache holds this notebook's execution, else execute it
    and cache it (``("executed", s)``). Raises ``AssertionError`` with the traceback of a
    failing cell. Mirrors MyST-NB's cache client, so the book build finds the result."""
    import nbformat
    from jupyter_cache.base import CacheBundleIn
    from jupyter_cache.cache.db import NbProjectRecord
    from jupyter_cache.executors.utils import single_nb_execution

    cache = open_cache()
    nb = nbformat.read(notebook, as_version=4)
    try:
        record = cache.match_cache_notebook(nb)
    except KeyError:
        record = None
    if record is not None:
        return "cached", float(record.data.get("execution_seconds") or 0.0)
    stage = cache.add_nb_to_project(str(notebook))
    NbProjectRecord.remove_tracebacks([stage.pk], cache.db)
    result = single_nb_execution(
        nb, cwd=str(notebook.parent), timeout=_timeout(), allow_errors=False,
        meta_override=True,
    )
    if result.err is not None:
        NbProjectRecord.set_traceback(stage.uri, result.exc_string, cache.db)
        raise AssertionError(f"{notebook.name} failed:\n{result.exc_string}")
    cache.cache_notebook_bundle(
        CacheBundleIn(nb, stage.uri, data={"execution_seconds": result.time}),
        check_validity=False, overwrite=True,
    )
    return "executed", result.time


CHAPTERS = toc_chapters()

#: Seconds each chapter took in CI (one torch thread, two chapters at a time; the cache's
#: ``execution_seconds`` of a fresh-clone run, 2026-11-29). Only an order: ``conftest.py``
#: splits the chapters into two groups of equal expected time, one at the head of each
#: xdist worker's half, so the two workers finish together. A chapter missing here counts
#: as the longest.
CI_SECONDS = {
    "01_softmax_cross_entropy": 58, "02_importance_sampling": 11,
    "03_nce_negative_sampling": 42, "04_sampled_softmax": 73,
    "05_two_tower_retrieval": 102, "06_contrastive_losses": 81,
    "07_more_negatives": 95, "08_hard_negatives": 100, "09_training_at_scale": 103,
    "10_evaluating_at_scale": 37, "11_exact_or_sampled": 123,
}

# Under xdist, tests/conftest.py sets OMP_NUM_THREADS to each worker's share of the cores;
# the kernels started from here inherit it.

# Kernels started from here keep the memory they free (glibc's malloc, read at the kernel's
# start; other allocators ignore these). By default every tensor over 32 MiB gets fresh
# pages from the OS and gives them back when freed, so each step of chapter 5's batch of
# 8,192 (a 256 MiB logit matrix, several times over) spends most of its time zeroing new
# pages: on the 2-core CI machine that step took 1.25 s, and 0.74 s with the pages kept.
# A kernel's resident memory stays at its peak (under 3 GiB for every chapter).
os.environ.setdefault("MALLOC_MMAP_MAX_", "0")  # no mmap: large blocks come from the heap
os.environ.setdefault("MALLOC_TRIM_THRESHOLD_", str(2**40))  # ...which is never trimmed


def test_the_table_of_contents_lists_chapters():
    assert CHAPTERS, "_toc.yml lists no notebooks"


@pytest.mark.parametrize("notebook", CHAPTERS, ids=[nb.stem for nb in CHAPTERS])
def test_chapter_executes(notebook: Path):
    how, seconds = execute_or_reuse(notebook)
    print(f"{notebook.name}: {how} ({seconds:.0f} s)")


def _open_after(barrier, path: Path) -> None:
    barrier.wait()
    open_cache(path).list_cache_records()  # an exception exits the process with status 1


@pytest.mark.skipif(fcntl is None, reason="the lock needs POSIX flock")
def test_workers_opening_an_empty_cache_at_once_all_succeed(tmp_path):
    """Two xdist workers reached an empty cache together and one failed ("table settings
    already exists"): the first use is serialised by open_cache's lock."""
    import multiprocessing

    context = multiprocessing.get_context("fork")
    workers = 6
    barrier = context.Barrier(workers)
    path = tmp_path / "cache" / "key"
    processes = [
        context.Process(target=_open_after, args=(barrier, path)) for _ in range(workers)
    ]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=60)
    # 0 for each: a process that raised exits with 1, one still running has None
    assert [process.exitcode for process in processes] == [0] * workers
    assert (path / "global.db").exists()
