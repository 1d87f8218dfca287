"""Run one chapter on an emulated device without float64 (Apple MPS), on the CPU.

    python .ci/run_chapter_without_float64.py notebooks/09_training_at_scale.ipynb [--report]

The chapter's code cells run in order as one script, with ``CANDIDATE_SAMPLING_DEVICE``
set to the stand-in device ``cpu:0`` and the emulation of
``tests/test_devices_without_float64.py`` active: a float64 tensor on the device raises,
as on MPS. With ``--report`` each such place is printed (cell and line) and the run goes
on, so one run lists them all. Exit status 0 when every cell, and so every assert, passed
(and, without ``--report``, nothing put float64 on the device). Not part of CI (about
twice a chapter's normal time); run it on a chapter after changing its device code.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import sys
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebook", type=Path)
    parser.add_argument("--report", action="store_true", help="list violations, go on")
    args = parser.parse_args()
    os.environ["CANDIDATE_SAMPLING_DEVICE"] = "cpu:0"
    sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests"), str(ROOT)]

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from test_devices_without_float64 import device_without_float64

    found: set[tuple[str, int]] = set()

    def report(message: str) -> None:
        for frame in reversed(traceback.extract_stack()):
            if frame.filename.startswith("<cell"):
                if (frame.filename, frame.lineno) not in found:
                    found.add((frame.filename, frame.lineno))
                    print(f"FLOAT64 ON THE DEVICE {frame.filename}:{frame.lineno}: {message}")
                return
        print(f"FLOAT64 ON THE DEVICE (outside a cell): {message}")

    notebook = args.notebook.resolve()
    os.chdir(notebook.parent)
    cells = [c for c in json.loads(notebook.read_text())["cells"] if c["cell_type"] == "code"]
    namespace = {"__name__": "__main__", "display": print}
    plt.show = lambda *a, **k: plt.close("all")
    with device_without_float64(report=report if args.report else None):
        for i, cell in enumerate(cells):
            tree = ast.parse("".join(cell["source"]))
            try:
                exec(compile(tree, f"<cell {i}>", "exec"), namespace)
            except BaseException:
                traceback.print_exc()
                print(f"{notebook.name}: FAILED at code cell {i} (id {cell.get('id')})")
                return 1
            finally:
                plt.close("all")
    print(f"{notebook.name}: passed on the emulated device"
          + (f", {len(found)} places put float64 on it" if found else ""))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
