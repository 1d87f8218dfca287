"""Sphinx extension: one execution of each chapter, shared by the book build and pytest.

The book executes its notebooks through MyST-NB's jupyter-cache (``execute_notebooks:
cache`` in ``_config.yml``). jupyter-cache matches a notebook by a hash of its code cells
and kernel, so an edited notebook is executed again; but it knows nothing of the package
the notebooks import. This extension therefore puts the cache in a folder named after a
hash of everything else an execution depends on:

* every file under ``src/candidate_sampling/`` (the package the chapters import),
* ``pyproject.toml`` and ``requirements.txt`` (what is installed),
* the Python version and the installed versions of torch, numpy, faiss-cpu,
* the environment variables that change what a chapter computes
  (``CANDIDATE_SAMPLING_SEED``, ``CANDIDATE_SAMPLING_DEVICE``). The number of threads is
  not part of the key: it changes how fast a chapter runs, not what it asserts.

Change any of them and the build (and ``tests/test_chapters.py``) looks in an empty
folder, so every chapter runs again; Sphinx is told that every executed page is out of
date, so no page keeps outputs from an earlier key either. A stale cache cannot hide a
change to a notebook or to ``src/``.

``tests/test_chapters.py`` imports :func:`cache_path` from here, so ``python -m pytest``
and ``jupyter-book build .`` read and write the same cache, in either order: whichever
runs first executes a chapter, the other finds it.
"""

from __future__ import annotations

import hashlib
import os
import platform
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CACHE_ROOT = ROOT / "_build" / ".jupyter_cache"
ENVIRONMENT = ("CANDIDATE_SAMPLING_SEED", "CANDIDATE_SAMPLING_DEVICE")
DISTRIBUTIONS = ("torch", "numpy", "faiss-cpu", "pandas", "scikit-learn")


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "-"


def execution_key(root: Path = ROOT) -> str:
    """Hex digest of what a chapter's execution depends on besides its own cells."""
    digest = hashlib.sha256()
    files = sorted(
        p for p in (root / "src" / "candidate_sampling").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".pyc", ".pyo")
    )
    files += [root / "pyproject.toml", root / "requirements.txt"]
    for path in files:
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() if path.exists() else b"<missing>")
        digest.update(b"\0")
    for name in ENVIRONMENT:
        digest.update(f"{name}={os.environ.get(name, '')}\0".encode())
    digest.update(f"python={platform.python_version()}\0".encode())
    for name in DISTRIBUTIONS:
        digest.update(f"{name}={_version(name)}\0".encode())
    return digest.hexdigest()


def cache_path(root: Path = ROOT) -> Path:
    """The jupyter-cache folder for the current key: ``_build/.jupyter_cache/<key[:16]>``."""
    return root / "_build" / ".jupyter_cache" / execution_key(root)[:16]


# ------------------------------------------------------------------------------- Sphinx


def _set_cache_path(app, config) -> None:
    if config.nb_execution_mode != "cache":
        return
    key = execution_key(ROOT)
    app.candidate_sampling_execution_key = key
    config.nb_execution_cache_path = str(ROOT / "_build" / ".jupyter_cache" / key[:16])


def _outdated(app, env, added, changed, removed) -> list[str]:
    """With a new key, every executed page is read (and so looked up in the cache) again."""
    key = getattr(app, "candidate_sampling_execution_key", None)
    if key is None:
        return []
    old = getattr(env, "candidate_sampling_execution_key", None)
    env.candidate_sampling_execution_key = key
    if old is None or old == key:
        return []
    return [
        doc for doc in env.found_docs
        if doc not in added and doc not in changed and doc not in removed
        and _is_executed(env.doc2path(doc))
    ]


def _is_executed(path) -> bool:
    path = Path(path)
    if path.suffix == ".ipynb":
        return True
    if path.suffix == ".md" and path.exists():
        return "kernelspec:" in path.read_text(encoding="utf-8", errors="replace")[:2000]
    return False


def setup(app) -> dict:
    # after MyST-NB has registered nb_execution_mode, before it reads it (builder-inited)
    app.connect("config-inited", _set_cache_path, priority=800)
    app.connect("env-get-outdated", _outdated)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
