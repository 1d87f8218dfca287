"""Test-wide settings.

Hypothesis draws its examples from a fixed seed (``derandomize``), so a CI run is
reproducible: a property that fails, fails on every run, and a green run stays green.
Set ``HYPOTHESIS_PROFILE=explore`` to search with fresh random examples locally.

The package's value checks are a process-wide switch
(:func:`candidate_sampling.set_validate_args`); the autouse fixture below puts it back
after every test, so a test that turns the checks off cannot leak that into the next one.

The chapters (``tests/test_chapters.py``) are ordered for two xdist workers (CI:
``python -m pytest -n auto`` on two cores, ``--dist worksteal``). Work stealing hands each
worker one half of the collected list and lets an idle worker take the tail of the other's
queue. So the chapters are split into two groups of about equal expected time (greedy,
longest first, from ``CI_SECONDS``), and each group is put at the head of one half: both
workers start on their chapters at once, the unit tests follow, and what is stolen at the
end is short. Without xdist the order changes nothing.
"""

import os

import pytest
from hypothesis import settings

import candidate_sampling

settings.register_profile("reproducible", derandomize=True, deadline=None, print_blob=True)
settings.register_profile("explore", deadline=None, max_examples=500)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "reproducible"))

if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    # Each xdist worker gets its share of the cores, for torch's threads in the worker and
    # (through OMP_NUM_THREADS, which kernels read at their start) in the chapter kernels it
    # starts (tests/test_chapters.py). With two workers on two cores, unit tests on two
    # threads each beside a one-thread kernel oversubscribed the cores (the unit tests alone,
    # two workers: 55 s on two threads each, 42 s on one).
    import torch

    _share = max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))
    os.environ.setdefault("OMP_NUM_THREADS", str(_share))
    torch.set_num_threads(min(torch.get_num_threads(), _share))


@pytest.fixture(autouse=True)
def _restore_validate_args():
    before = candidate_sampling.get_validate_args()
    yield
    candidate_sampling.set_validate_args(before)


def _is_chapter(item) -> bool:
    return getattr(item, "originalname", None) == "test_chapter_executes"


def pytest_collection_modifyitems(items):
    from test_chapters import CI_SECONDS  # tests/ is on sys.path (rootdir conftest)

    chapters = [i for i in items if _is_chapter(i)]
    if not chapters:
        return
    rest = [i for i in items if not _is_chapter(i)]

    def expected(item) -> float:  # a chapter missing from the table: assume the longest
        return CI_SECONDS.get(item.callspec.params["notebook"].stem, float("inf"))

    groups, load = ([], []), [0.0, 0.0]
    for item in sorted(chapters, key=expected, reverse=True):
        g = 0 if load[0] <= load[1] else 1
        groups[g].append(item)
        load[g] += min(expected(item), 1e6)
    half = len(items) // 2  # worksteal's first worker takes items[:half]
    head = max(0, half - len(groups[0]))
    items[:] = groups[0] + rest[:head] + groups[1] + rest[head:]
