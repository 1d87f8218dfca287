"""Sphinx extension: no launch buttons on pages written as MyST text notebooks.

sphinx-book-theme gives every executed page a Colab launch button, and for a ``.md``
text notebook (the execution-status appendix) that button opens the ``.md`` file, which
Colab cannot read. Chapters are ``.ipynb`` files and keep their buttons; the ``.md``
pages keep their download buttons (``.md`` and the executed ``.ipynb``).
"""

from __future__ import annotations

from pathlib import Path

from sphinx.application import Sphinx


def _drop_launch_buttons(app: Sphinx, pagename: str, templatename, context, doctree):
    if pagename not in app.env.all_docs:
        return
    source = Path(app.env.doc2path(pagename))
    if source.suffix == ".ipynb" or source.with_suffix(".ipynb").exists():
        return
    buttons = context.get("header_buttons")
    if buttons:
        context["header_buttons"] = [b for b in buttons if b.get("label") != "launch-buttons"]


def setup(app: Sphinx) -> dict:
    # sphinx-book-theme adds its launch buttons at priority 501; run after it.
    app.connect("html-page-context", _drop_launch_buttons, priority=502)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
