"""Benchmark 5, the book's own cost: wall-clock time to execute every chapter.

Each notebook in ``notebooks/`` is executed top to bottom in a fresh kernel with
``nbclient`` (the executor Jupyter Book itself uses), from the ``notebooks/`` folder, on
whatever device ``get_device()`` picks, exactly as the book build and ``nbval`` run it.
Nothing is written back to the notebooks.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

from benchmarks.common import ROOT, fmt_seconds, markdown_table, write_json

BUDGET_S = 15 * 60  # the whole book, on 2 CPU cores


def _title(nb) -> str:
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    return ""


def execute(path: Path, timeout: int = 900) -> dict[str, Any]:
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
    )
    start = time.perf_counter()
    status = "ok"
    try:
        client.execute()
    except Exception as err:  # noqa: BLE001 - a failing chapter is reported, not fatal to the suite
        text = re.sub(r"\x1b\[[0-9;]*m", "", str(err)).strip().splitlines()
        errors = [line for line in text if "Error" in line] or text or [""]
        status = f"failed: {type(err).__name__}: {errors[-1][:150]}"
    return {
        "notebook": path.name,
        "title": _title(nb),
        "seconds": time.perf_counter() - start,
        "cells": sum(c.cell_type == "code" for c in nb.cells),
        "status": status,
    }


def run(out: Path, *, quick: bool, notebooks: list[Path] | None = None) -> dict[str, Any]:
    notebooks = notebooks if notebooks is not None else sorted((ROOT / "notebooks").glob("*.ipynb"))
    rows = []
    for path in notebooks:
        row = execute(path)
        rows.append(row)
        print(
            f"  book {row['notebook']:<40} {fmt_seconds(row['seconds'])} {row['status']}",
            flush=True,
        )
    total = sum(r["seconds"] for r in rows)
    result = {
        "benchmark": "book",
        "rows": rows,
        "total_s": total,
        "budget_s": BUDGET_S,
        "within_budget": total <= BUDGET_S,
    }
    write_json(out / "book.json", result)
    table = markdown_table(
        [
            {
                "nb": f"`{r['notebook']}`",
                "title": r["title"],
                "cells": r["cells"],
                "s": fmt_seconds(r["seconds"]),
                "status": r["status"],
            }
            for r in rows
        ]
        + [{"nb": "**total**", "s": f"**{fmt_seconds(total)}**"}],
        [
            ("nb", "notebook"),
            ("title", "chapter"),
            ("cells", "code cells"),
            ("s", "execution time"),
            ("status", "status"),
        ],
    )
    verdict = "within" if total <= BUDGET_S else "over"
    (out / "book.md").write_text(
        table + f"\nWhole book: {fmt_seconds(total)} for {len(rows)} chapters, {verdict} the "
        f"15-minute budget for one execution on 2 CPU cores.\n"
    )
    return result
