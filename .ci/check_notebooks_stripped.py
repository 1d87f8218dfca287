"""Fail if any tracked notebook is committed with outputs or execution counts.

The book build executes every chapter; stored outputs would only go stale. Uses the
standard library only, so it runs before anything is installed.
"""

import json
import subprocess
import sys

tracked = subprocess.run(
    ["git", "ls-files", "*.ipynb"], capture_output=True, text=True, check=True
).stdout.split()
dirty = []
for path in tracked:
    with open(path, encoding="utf-8") as handle:
        cells = json.load(handle)["cells"]
    for index, cell in enumerate(cells):
        if cell["cell_type"] == "code" and (cell.get("outputs") or cell.get("execution_count")):
            dirty.append(f"{path}: cell {index} has outputs or an execution count")
            break
if not tracked:
    sys.exit("no notebooks are tracked: nothing to check (is this the repository root?)")
if dirty:
    print("\n".join(dirty))
    sys.exit("strip them with: jupyter nbconvert --clear-output --inplace notebooks/*.ipynb")
print(f"{len(tracked)} notebooks, all without outputs")
