"""Sphinx extension: typeset math with the MathJax copy installed by pip, not a CDN.

MathJax 3.2.2 comes from the PyPI package ``django-static-mathjax`` (import name
``mathjax``; Apache-2.0; it has no dependencies and needs no Django to be used as files).
We copy its single-file SVG build, ``es5/tex-svg-full.js``, into the book's ``_static``
folder and point Sphinx at it. SVG output needs no web fonts, so a build read from disk,
on a machine with no internet, shows typeset math.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from sphinx.application import Sphinx
from sphinx.errors import ExtensionError

MATHJAX_FILE = Path("es5") / "tex-svg-full.js"
TARGET = "mathjax/tex-svg-full.js"  # relative to _static


def _mathjax_source() -> Path:
    try:
        import mathjax  # the django-static-mathjax package
    except ImportError as err:  # pragma: no cover - requirements.txt installs it
        raise ExtensionError(
            "offline_mathjax: the package django-static-mathjax is not installed; "
            "run `python -m pip install -r requirements.txt`"
        ) from err
    source = Path(mathjax.__file__).parent / "static" / "mathjax" / MATHJAX_FILE
    if not source.is_file():
        raise ExtensionError(f"offline_mathjax: {source} is missing from django-static-mathjax")
    return source


def _use_local_mathjax(app: Sphinx, config) -> None:
    config.mathjax_path = TARGET


def _copy_mathjax(app: Sphinx, exception: Exception | None) -> None:
    if exception is not None or app.builder.format != "html":
        return
    target = Path(app.outdir) / "_static" / TARGET
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(_mathjax_source(), target)


def setup(app: Sphinx) -> dict:
    _mathjax_source()  # fail early, before executing any notebook
    app.connect("config-inited", _use_local_mathjax, priority=900)
    app.connect("build-finished", _copy_mathjax)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
