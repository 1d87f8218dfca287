"""Check that the book build executed no chapter: each was executed once, by pytest.

Usage: python .ci/check_executed_once.py SINCE
where SINCE is the Unix time at which the book build started. Every chapter of _toc.yml
must have a record in the shared jupyter-cache (book/_ext/execution_cache.py), created
before SINCE, i.e. by `python -m pytest` (tests/test_chapters.py). A record created after
SINCE means the build executed that chapter a second time (a key mismatch between the two,
or a notebook changed between the stages). Text pages the build executes (the execution
status appendix) are not chapters and are not counted.
"""

from __future__ import annotations

import sys
from datetime import timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "book" / "_ext"))
sys.path.insert(0, str(ROOT / "tests"))

from execution_cache import cache_path  # noqa: E402
from test_chapters import toc_chapters  # noqa: E402


def main(since: float) -> int:
    import nbformat
    from jupyter_cache import get_cache

    cache = get_cache(str(cache_path()))
    problems = []
    for notebook in toc_chapters():
        nb = nbformat.read(notebook, as_version=4)
        try:
            record = cache.match_cache_notebook(nb)
        except KeyError:
            problems.append(f"{notebook.name}: no execution in the cache {cache_path()}")
            continue
        created = record.created
        if created.tzinfo is None:  # jupyter-cache stores datetime.utcnow()
            created = created.replace(tzinfo=timezone.utc)
        created = created.timestamp()
        when = "by pytest, before the build" if created < since else "BY THE BUILD (twice)"
        print(f"{notebook.name}: executed once, {when} "
              f"({record.data.get('execution_seconds', 0):.0f} s)")
        if created >= since:
            problems.append(f"{notebook.name} was executed again by the book build")
    for problem in problems:
        print(f"FAIL {problem}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(float(sys.argv[1])))
