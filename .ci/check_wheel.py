"""Run inside a clean virtual environment where only torch and the wheel are installed.

Checks that the package stands alone: it declares torch and numpy as its only required
dependencies; `import candidate_sampling` and every public module except the MovieLens
data helpers import with torch and numpy only; the version is the one the wheel's
metadata carries; the wheel holds the package and nothing of the book.
Usage (from .ci/check_wheel.sh): python check_wheel.py path/to/candidate_sampling-*.whl
"""

from __future__ import annotations

import importlib
import importlib.metadata as metadata
import pkgutil
import re
import sys
import zipfile
from pathlib import Path

# modules that need an extra, and the extra
NEEDS_EXTRA = {"candidate_sampling.data": "data", "candidate_sampling.data.movielens": "data"}
BOOK_ONLY = ("pandas", "pooch", "tqdm", "faiss", "matplotlib", "sklearn", "jupyter_book")


def main(wheel: Path) -> int:
    problems = []
    for name in BOOK_ONLY:
        if importlib.util.find_spec(name) is not None:
            problems.append(f"{name} is installed: the environment is not clean")

    requires = metadata.requires("candidate-sampling") or []
    required = sorted(
        re.split(r"[<>=!~ ;\[]", r)[0].lower() for r in requires if "extra ==" not in r
    )
    if required != ["numpy", "torch"]:
        problems.append(f"required dependencies are {required}, expected numpy and torch")
    extras = metadata.metadata("candidate-sampling").get_all("Provides-Extra") or []
    print(f"requires: {required}; extras: {extras}")

    import candidate_sampling

    version = metadata.version("candidate-sampling")
    if candidate_sampling.__version__ != version:
        problems.append(f"__version__ {candidate_sampling.__version__} != metadata {version}")
    if "site-packages" not in candidate_sampling.__file__:
        problems.append(f"imported from {candidate_sampling.__file__}, not the installed wheel")

    imported = []
    for info in pkgutil.walk_packages(candidate_sampling.__path__, "candidate_sampling."):
        if info.name in NEEDS_EXTRA:
            try:
                importlib.import_module(info.name)
            except ImportError as err:
                print(f"  {info.name}: needs the [{NEEDS_EXTRA[info.name]}] extra ({err})")
            continue
        try:
            importlib.import_module(info.name)
            imported.append(info.name)
        except ImportError as err:
            problems.append(f"{info.name} does not import with torch and numpy only: {err}")
    print(f"imported {len(imported)} modules with torch and numpy only")

    # a smoke test of the package itself, independent of any chapter
    import torch

    device = candidate_sampling.get_device()
    x = torch.randn(4, 3, device=device)
    if not torch.isfinite(x).all():
        problems.append("get_device() gave a device that cannot compute")

    names = zipfile.ZipFile(wheel).namelist()
    stray = [n for n in names if n.split("/")[0] in ("notebooks", "book", "tests", "benchmarks")]
    if stray:
        problems.append(f"the wheel holds book files: {stray[:5]}")
    if not any(n == "candidate_sampling/__init__.py" for n in names):
        problems.append("the wheel has no candidate_sampling/__init__.py")

    for problem in problems:
        print(f"FAIL {problem}")
    print(f"wheel {wheel.name}: version {version}, "
          f"{'ok' if not problems else f'{len(problems)} problems'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
