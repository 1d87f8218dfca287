"""Link each chapter's first mention of a package function or class to the API reference.

In the markdown cells of every chapter listed in ``_toc.yml``, the first mention of a
public name of ``candidate_sampling`` written as inline code — ```sampled_softmax_loss```,
```sampled_softmax_loss()```, ```losses.sampled_softmax_loss``` or the full dotted name —
becomes a cross-reference to its entry in the API reference, keeping the text as written:

    {py:obj}`sampled_softmax_loss <candidate_sampling.losses.sampled.sampled_softmax_loss>`

Later mentions in the same chapter stay plain code. Code fences, headings, existing links
and roles, and inline code with arguments (```loss(q, v, ...)```) are left alone; names
that two modules define, and short names that are also ordinary words (``train``), are
not linked. The targets are checked by the book build (``nitpicky`` and ``-W``): a wrong
one fails it. The script is idempotent: a chapter whose name is already linked keeps it.

    python .ci/link_api.py            # report what would change; exit 1 if anything would
    python .ci/link_api.py --write    # rewrite the notebooks (outputs untouched)
    python .ci/link_api.py --write notebooks/04_sampled_softmax.ipynb   # one chapter
"""

from __future__ import annotations

import argparse
import importlib
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "book" / "_ext"))
sys.path.insert(0, str(ROOT / "tests"))

# short names that are also ordinary words in prose: never linked on their own
STOPLIST = {"train", "data", "eval", "models", "device", "losses", "sampling", "scale"}
INLINE_CODE = re.compile(r"(?<![`{}\]\w])`([A-Za-z_][\w.]*?)(\(\))?`(?!`)")
FENCE = re.compile(r"^\s*(```|~~~|:::)")


def api_names() -> dict[str, str]:
    """Every spelling a chapter may use -> the documented full name (module.name)."""
    from api_reference import ROOT_PACKAGE, public_modules, public_names, public_subpackages

    root = importlib.import_module(ROOT_PACKAGE)
    packages = [root]
    queue = public_subpackages(root)
    while queue:
        name = queue.pop(0)
        package = importlib.import_module(name)
        packages.append(package)
        queue += public_subpackages(package)
    owners: dict[str, set[str]] = {}
    spellings: dict[str, str] = {}
    for package in packages:
        for module in public_modules(package):
            for name in public_names(module):
                full = f"{module.__name__}.{name}"
                owners.setdefault(name, set()).add(full)
                short_module = module.__name__.split(".")[-1]
                short_package = package.__name__.split(".")[-1]
                for spelling in (full, f"{short_module}.{name}", f"{short_package}.{name}",
                                 f"{package.__name__}.{name}"):
                    spellings[spelling] = full
    for name, fulls in owners.items():
        if len(fulls) == 1 and name not in STOPLIST and (len(name) > 3 or name.isupper()):
            spellings[name] = next(iter(fulls))
    # the top level's re-exports (candidate_sampling.get_device)
    for name in public_names(root):
        obj = getattr(root, name, None)
        module = getattr(obj, "__module__", "")
        if module and not module.split(".")[-1].startswith("_"):
            spellings[f"{ROOT_PACKAGE}.{name}"] = f"{module}.{name}"
    return spellings


def link_cell(text: str, spellings: dict[str, str], seen: set[str]) -> str:
    """Link the first mention (not yet in ``seen``) of each name in one markdown cell."""
    out, fenced = [], False
    for line in text.split("\n"):
        if FENCE.match(line):
            fenced = not fenced
            out.append(line)
            continue
        if fenced or line.lstrip().startswith("#"):
            out.append(line)
            continue
        for role in re.finditer(r"\{py:\w+\}`[^`<]*<([\w.]+)>`", line):
            seen.add(role.group(1))  # already linked (idempotent)

        def replace(match: re.Match) -> str:
            written = match.group(1)
            target = spellings.get(written)
            if target is None or target in seen:
                return match.group(0)
            seen.add(target)
            return f"{{py:obj}}`{written}{match.group(2) or ''} <{target}>`"

        out.append(INLINE_CODE.sub(replace, line))
    return "\n".join(out)


def link_notebook(path: Path, spellings: dict[str, str]) -> tuple[str, list[str]]:
    """The notebook's new JSON text and the names linked in it."""
    data = json.loads(path.read_text(encoding="utf-8"))
    seen: set[str] = set()
    # names already linked anywhere in the chapter count as linked
    for cell in data["cells"]:
        if cell["cell_type"] == "markdown":
            for role in re.finditer(r"\{py:\w+\}`[^`<]*<([\w.]+)>`", "".join(cell["source"])):
                seen.add(role.group(1))
    before = set(seen)
    for cell in data["cells"]:
        if cell["cell_type"] != "markdown":
            continue
        text = "".join(cell["source"])
        new = link_cell(text, spellings, seen)
        if new != text:
            cell["source"] = new.splitlines(keepends=True)
    return json.dumps(data, indent=1, ensure_ascii=False) + "\n", sorted(seen - before)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path, help="default: every chapter")
    parser.add_argument("--write", action="store_true", help="rewrite the notebooks")
    args = parser.parse_args(argv)
    from test_chapters import toc_chapters

    spellings = api_names()
    pending = 0
    for path in args.notebooks or toc_chapters():
        text, linked = link_notebook(path, spellings)
        if not linked:
            print(f"{path.name}: nothing to link")
            continue
        pending += 1
        print(f"{path.name}: {len(linked)} first mentions linked: {', '.join(linked)}")
        if args.write:
            path.write_text(text, encoding="utf-8")
    if pending and not args.write:
        print(f"{pending} chapters would change; run with --write")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
