"""The book's own consistency: table of contents, Colab cells, exercises, citation.

Run as a script to rewrite every chapter's Colab install cell from _config.yml (after
changing the repository URL or branch in a fork):

    python tests/test_book.py --sync-colab
"""

import ast
import json
import re
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
# Chapter notebooks: every notebook except companion files named 09b_* (not chapters).
CHAPTERS = [nb for nb in NOTEBOOKS if not nb.name.startswith("09b")]
MAX_LINE = 88
INSTALL_URL = re.compile(r"git\+([^\"'\s]+)")
LABEL = re.compile(r"^:label:\s*(\S+)", re.MULTILINE)


def _config() -> dict:
    return yaml.safe_load((ROOT / "_config.yml").read_text())


def _toc_files() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]]

    def walk(entries: list[dict]) -> None:
        for entry in entries:
            files.append(entry["file"])
            walk(entry.get("sections", []))

    for part in toc["parts"]:
        walk(part["chapters"])
    return files


def _cells(notebook: Path) -> list[dict]:
    return json.loads(notebook.read_text(encoding="utf-8"))["cells"]


def _source(cell: dict) -> str:
    return "".join(cell["source"])


def _install_url() -> str:
    """What every chapter's Colab cell must pip-install: git+<url>@<branch>."""
    repository = _config()["repository"]
    return f"{repository['url']}@{repository['branch']}"


def _package_version() -> str:
    import candidate_sampling

    return candidate_sampling.__version__


def test_every_notebook_is_in_the_table_of_contents():
    listed = set(_toc_files())
    for notebook in NOTEBOOKS:
        assert f"notebooks/{notebook.stem}" in listed, f"{notebook.name} missing from _toc.yml"


def test_every_toc_entry_exists():
    for entry in _toc_files():
        assert any((ROOT / f"{entry}{ext}").exists() for ext in (".md", ".ipynb")), entry


def test_colab_cell_installs_from_the_configured_repository_and_branch():
    """The hidden first cell of every chapter installs git+<url>@<branch> of _config.yml,
    the same repository and branch the Colab launch button opens the notebook from."""
    expected = _install_url()
    assert CHAPTERS, "no notebooks found"
    wrong = []
    for notebook in CHAPTERS:
        first = _cells(notebook)[0]
        source = _source(first)
        assert "google.colab" in source, f"{notebook.name}: first cell is not the Colab installer"
        assert "remove-cell" in first.get("metadata", {}).get("tags", []), notebook.name
        urls = INSTALL_URL.findall(source)
        if urls != [expected]:
            wrong.append(f"{notebook.name} installs {urls}")
    assert not wrong, (
        f"_config.yml says git+{expected}; " + "; ".join(wrong)
        + ". Fix with: python tests/test_book.py --sync-colab"
    )


def test_launch_and_download_buttons_are_configured():
    config = _config()
    repository = config["repository"]
    assert repository["url"].startswith("https://github.com/"), "Colab opens GitHub URLs"
    assert repository["branch"], "the Colab button and install cells need a branch"
    assert config["launch_buttons"]["colab_url"] == "https://colab.research.google.com"
    sphinx = config["sphinx"]
    assert sphinx.get("recursive_update") is True, "html_theme_options would be replaced"
    assert sphinx["config"]["html_copy_source"] is True      # the files behind downloads
    assert sphinx["config"]["html_theme_options"]["use_download_button"] is True



def test_every_cell_has_a_unique_id():
    """nbformat 4.5 cells carry an ``id``; a missing one is a build warning today and an
    error in future nbformat versions."""
    for nb in NOTEBOOKS:
        cells = json.loads(nb.read_text())["cells"]
        ids = [c.get("id") for c in cells]
        assert None not in ids, nb.name
        assert len(set(ids)) == len(ids), nb.name

def test_code_lines_fit_in_88_columns():
    """Every line of every code cell, magics and comments included, so no cell scrolls."""
    long_lines = []
    for notebook in NOTEBOOKS:
        for index, cell in enumerate(_cells(notebook)):
            if cell["cell_type"] != "code":
                continue
            for number, line in enumerate(_source(cell).splitlines(), start=1):
                if len(line) > MAX_LINE:
                    long_lines.append(
                        f"{notebook.name}: cell {index}, line {number} ({len(line)} chars): "
                        f"{line.strip()[:60]}"
                    )
    assert not long_lines, f"{len(long_lines)} code lines over {MAX_LINE} characters:\n" + (
        "\n".join(long_lines)
    )


def test_every_chapter_uses_the_package_device_and_seed():
    for notebook in NOTEBOOKS:
        code = "\n".join(_source(c) for c in _cells(notebook) if c["cell_type"] == "code")
        assert "get_device()" in code, notebook.name
        assert "seed_everything(" in code, notebook.name
        assert "assert " in code, f"{notebook.name} checks none of its claims"


def test_book_executes_every_chapter_and_uses_offline_math():
    """Every chapter is executed by the build, through the cache it shares with
    tests/test_chapters.py; the cache is keyed on src/ as well (book/_ext/execution_cache.py)."""
    config = _config()
    assert config["execute"]["execute_notebooks"] == "cache"
    assert "execution_cache" in config["sphinx"]["local_extensions"]
    assert not config["execute"].get("exclude_patterns"), "no chapter may skip execution"
    assert config["only_build_toc_files"] is True
    assert {"dollarmath", "amsmath"} <= set(config["parse"]["myst_enable_extensions"])
    assert "offline_mathjax" in config["sphinx"]["local_extensions"]


# --------------------------------------------------------------------------- exercises


def _python(source: str) -> ast.Module:
    """Parse a code cell, IPython magics and shell escapes turned into Python first."""
    from IPython.core.inputtransformer2 import TransformerManager

    return ast.parse(TransformerManager().transform_cell(source))


def _ends_in_assert(statements: list[ast.stmt]) -> bool:
    """The last statement is an assert, or a loop / branch / with-block ending in one."""
    if not statements:
        return False
    last = statements[-1]
    if isinstance(last, ast.Assert):
        return True
    if isinstance(last, (ast.For, ast.While, ast.With, ast.If)):
        return _ends_in_assert(last.body)
    return False


def _exercises(notebook: Path) -> tuple[list[str], list[str]]:
    """Labels of the chapter's exercises, and what is wrong with them."""
    labels, problems = [], []
    cells = _cells(notebook)
    solutions: dict[str, list[dict]] = {}
    open_label = None
    for index, cell in enumerate(cells):
        source = _source(cell)
        where = f"{notebook.name}: cell {index}"
        if cell["cell_type"] == "markdown" and re.search(r"^`{3,}\{exercise\}", source, re.MULTILINE):
            found = LABEL.findall(source)
            if len(found) != 1:
                problems.append(f"{where}: an exercise needs exactly one :label:")
            labels += found
        if cell["cell_type"] == "markdown" and "{solution-start}" in source:
            match = re.search(r"\{solution-start\}\s+(\S+)", source)
            if open_label is not None or not match:
                problems.append(f"{where}: solution-start without a label or nested")
                continue
            open_label = match.group(1)
            solutions[open_label] = []
            if not re.search(r"^:class:.*\bdropdown\b", source, re.MULTILINE):
                problems.append(f"{where}: solution of {open_label} is not a dropdown")
        elif cell["cell_type"] == "markdown" and "{solution-end}" in source:
            if open_label is None:
                problems.append(f"{where}: solution-end without solution-start")
            open_label = None
        elif open_label is not None and cell["cell_type"] == "code":
            solutions[open_label].append(cell)
            if "hide-input" in cell.get("metadata", {}).get("tags", []):
                problems.append(f"{where}: solution code is tagged hide-input")
    if open_label is not None:
        problems.append(f"{notebook.name}: solution of {open_label} is never closed")
    for label in labels:
        code_cells = solutions.get(label)
        if not code_cells:
            problems.append(f"{notebook.name}: exercise {label} has no solution code")
        elif not _ends_in_assert(_python(_source(code_cells[-1])).body):
            problems.append(f"{notebook.name}: the solution of {label} does not end in an assert")
    for label in set(solutions) - set(labels):
        problems.append(f"{notebook.name}: solution for an unknown exercise {label}")
    return labels, problems


def test_every_chapter_has_three_to_five_exercises_with_asserted_solutions():
    """The pattern of the exercises: ex-NN-slug labels, 3-5 per chapter, each solution a
    collapsed dropdown whose last code cell ends in an assert (so nbval tests it)."""
    problems, seen = [], {}
    for notebook in CHAPTERS:
        labels, found = _exercises(notebook)
        problems += found
        chapter = notebook.name[:2]
        if not 3 <= len(labels) <= 5:
            problems.append(f"{notebook.name}: {len(labels)} exercises, expected 3 to 5")
        for label in labels:
            if not re.fullmatch(rf"ex-{chapter}-[a-z0-9-]+", label):
                problems.append(f"{notebook.name}: label {label} is not ex-{chapter}-<slug>")
            if label in seen:
                problems.append(f"{label} is used by {seen[label]} and {notebook.name}")
            seen[label] = notebook.name
    assert not problems, "\n".join(problems)


# ---------------------------------------------------------------------------- CI


def test_ci_runs_the_readme_commands_and_the_wheel_check():
    """.ci/run calls the README's three Quickstart commands verbatim (the test command
    included), checks the wheel in a clean environment, and the deploy workflow runs
    .ci/run itself, so the published book is the one CI built."""
    readme = (ROOT / "README.md").read_text()
    block = readme.split("## Quickstart", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    commands = [line.split("#", 1)[0].strip() for line in block.strip().splitlines()]
    assert len(commands) == 3
    ci = (ROOT / ".ci" / "run").read_text()
    ci_lines = {line.strip() for line in ci.splitlines()}
    install, build, test = commands
    assert install in ci_lines
    assert any(line.startswith(build) for line in ci_lines), build
    assert test in ci_lines, f"CI does not run the README's test command {test!r}"
    assert "bash .ci/check_wheel.sh" in ci and "python -m build" in ci
    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "book.yml").read_text())
    steps = [step for job in workflow["jobs"].values() for step in job.get("steps", [])]
    assert any(step.get("run") == "bash .ci/run" for step in steps)
    uploads = [s for s in steps if str(s.get("uses", "")).startswith(
        "actions/upload-pages-artifact")]
    assert uploads and uploads[0]["with"]["path"] == "_build/html"


# ---------------------------------------------------------------------- API reference


def test_api_reference_has_a_page_per_subpackage():
    """book/api/<name>.md for the top level and every subpackage, each in _toc.yml and
    generated by the api-package directive; linked from the notation page; autodoc,
    autosummary, napoleon and nitpicky on (so -W catches a broken cross-reference)."""
    import pkgutil

    import candidate_sampling

    subpackages = sorted(
        i.name for i in pkgutil.iter_modules(candidate_sampling.__path__)
        if i.ispkg and not i.name.startswith("_")
    )
    assert {"losses", "sampling", "scale", "eval", "data"} <= set(subpackages)
    listed = set(_toc_files())
    assert "book/api/index" in listed
    for name in ["candidate_sampling", *subpackages]:
        page = ROOT / "book" / "api" / f"{name}.md"
        assert page.exists(), f"no API page for {name}: add book/api/{name}.md"
        assert f"book/api/{name}" in listed, f"book/api/{name} is not in _toc.yml"
        dotted = "candidate_sampling" if name == "candidate_sampling" else (
            f"candidate_sampling.{name}"
        )
        assert re.search(rf"^```{{api-package}} {re.escape(dotted)}$", page.read_text(),
                         re.MULTILINE), f"{page.name} does not document {dotted}"
    assert "api/index.md" in (ROOT / "book" / "notation.md").read_text()
    sphinx = _config()["sphinx"]
    assert {"sphinx.ext.autodoc", "sphinx.ext.autosummary", "sphinx.ext.napoleon"} <= set(
        sphinx["extra_extensions"]
    )
    assert "api_reference" in sphinx["local_extensions"]
    assert sphinx["config"]["nitpicky"] is True


# ------------------------------------------------------------- appendix and citation


def test_execution_status_page_is_an_executed_appendix():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    appendix = next(p for p in toc["parts"] if p.get("caption") == "Appendices")
    files = [chapter["file"] for chapter in appendix["chapters"]]
    assert "book/execution_status" in files
    assert files.index("book/execution_status") < files.index("book/bibliography")
    page = (ROOT / "book" / "execution_status.md").read_text()
    front_matter = yaml.safe_load(page.split("---")[1])
    assert front_matter["kernelspec"]["name"] == "python3"    # MyST-NB executes it
    assert front_matter["jupytext"]["text_representation"]["format_name"] == "myst"
    assert re.search(r"^```\{nb-exec-table\}", page, re.MULTILINE)
    code = page.split("```{code-cell}", 1)[1].split("```", 1)[0]
    for needed in ("platform.python_version()", "torch.__version__",
                   "candidate_sampling.__version__", "get_device()"):
        assert needed in code, f"the status page does not show {needed}"


def test_citation_version_and_repository_agree_everywhere():
    """CITATION.cff, the BibTeX block on the intro page, pyproject.toml and the package's
    __version__ name the same version; both citations name the repository in
    _config.yml, the book's title and its authors."""
    config = _config()
    version = _package_version()
    # the version lives in one place: pyproject.toml reads it from __version__
    pyproject = (ROOT / "pyproject.toml").read_text()
    project = pyproject.split("[project]", 1)[1].split("\n[", 1)[0]
    assert not re.search(r"^version\s*=", project, re.MULTILINE), "version belongs in __version__"
    assert re.search(r'^dynamic = \["version"\]', pyproject, re.MULTILINE)
    assert re.search(
        r'^version = \{ attr = "candidate_sampling.__version__" \}', pyproject, re.MULTILINE
    )
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert re.search(rf"^## {re.escape(version)}\b", changelog, re.MULTILINE), (
        f"CHANGELOG.md has no section for {version}"
    )

    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert cff["cff-version"] == "1.2.0"
    assert cff["message"] and cff["type"] == "software"
    assert str(cff["version"]) == version, f"CITATION.cff {cff['version']} != {version}"
    assert cff["repository-code"] == config["repository"]["url"]
    assert cff["title"] == config["title"]
    assert [author["name"] for author in cff["authors"]] == [config["author"]]

    intro = (ROOT / "book" / "intro.md").read_text()
    blocks = re.findall(r"^```bibtex\n(.*?)^```", intro, re.DOTALL | re.MULTILINE)
    assert len(blocks) == 1, "the intro page needs one ```bibtex block (How to cite)"
    bibtex = blocks[0]
    fields = dict(re.findall(r"^\s*(\w+)\s*=\s*\{(.*)\},?\s*$", bibtex, re.MULTILINE))
    assert fields["version"] == version, f"intro BibTeX {fields['version']} != {version}"
    assert fields["url"] == config["repository"]["url"]
    assert fields["title"] == config["title"]
    assert fields["author"] == "{" + config["author"] + "}"
    # any other mention of a version in the block (a note) must be the same one
    assert set(re.findall(r"\b\d+\.\d+\.\d+\b", bibtex)) == {version}


# --------------------------------------------------------------------------- script


def sync_colab_cells() -> list[str]:
    """Rewrite the git+... URL of every chapter's install cell from _config.yml."""
    expected = f"git+{_install_url()}"
    changed = []
    for notebook in CHAPTERS:
        text = notebook.read_text(encoding="utf-8")
        data = json.loads(text)
        first = data["cells"][0]
        if "google.colab" not in _source(first):
            raise SystemExit(f"{notebook.name}: first cell is not the Colab installer")
        lines = [INSTALL_URL.sub(lambda _: expected, line) for line in first["source"]]
        if lines != first["source"]:
            first["source"] = lines
            notebook.write_text(
                json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
            )
            changed.append(notebook.name)
    return changed


if __name__ == "__main__":
    if sys.argv[1:] != ["--sync-colab"]:
        raise SystemExit(__doc__)
    updated = sync_colab_cells()
    print(f"install cells now use git+{_install_url()}; rewrote: {updated or 'none'}")


# --------------------------------------------------------------------------- two layers
# A chapter's main path teaches; the evidence sits in collapsed boxes under each result
# (book/contributing.md, "How a chapter is written").
EVIDENCE_TITLE = "How sure are we?"
OPTIONAL_PREFIX = "Going deeper:"
DROPDOWN = re.compile(r"^(?:`{3,}|:{3,})\{dropdown\}[ \t]*(.*)$", re.MULTILINE)
FENCED = re.compile(r"^(`{3,}|:{3,})\s*\{.*?^\1\s*$", re.S | re.M)
# words about the book's making, and statistical apparatus, kept off the main path
MAKING = re.compile(
    r"\basserted\b|\bthe assert\b|the check asks|the issue behind|\bissue #?\d|"
    r"earlier version of this chapter|\bpost 00\d|CANDIDATE_SAMPLING_SEED",
    re.I,
)


def _hidden(cell: dict) -> bool:
    tags = cell.get("metadata", {}).get("tags", [])
    return any(t.startswith(("hide-", "remove-")) for t in tags)


def _main_path(cell: dict) -> str:
    """A markdown cell's text outside its fenced directives (dropdowns, exercises,
    solutions, figures), or '' for a hidden cell."""
    if cell["cell_type"] != "markdown" or _hidden(cell):
        return ""
    return FENCED.sub(" ", _source(cell))


def _headings(notebook: Path) -> list[tuple[int, str]]:
    out = []
    for index, cell in enumerate(_cells(notebook)):
        if cell["cell_type"] == "markdown":
            out += [(index, h.strip()) for h in re.findall(r"^##\s+(.*)$", _main_path(cell), re.M)]
    return out


@pytest.mark.parametrize("notebook", CHAPTERS, ids=lambda p: p.stem)
def test_chapter_opens_with_what_it_teaches_prerequisites_and_reading_time(notebook):
    title = next(c for c in _cells(notebook) if c["cell_type"] == "markdown")
    text = _source(title)
    assert text.startswith("# "), f"{notebook.name}: the first text cell is not the title"
    for needed in ("What you will learn", "Prerequisites", "Reading time"):
        assert needed in text, f"{notebook.name}: the opening lacks '{needed}'"
    # the reading time is a number of minutes that follows the main path's length (200
    # words a minute), not a placeholder or a figure left from an earlier draft
    stated = re.search(r"Reading time\W*[Aa]bout (\d+) minutes", text)
    assert stated, f"{notebook.name}: the reading time is not 'about N minutes'"
    words = sum(len(_main_path(c).split()) for c in _cells(notebook))
    expected = words / 200
    assert abs(int(stated.group(1)) - expected) <= max(3, 0.25 * expected), (
        f"{notebook.name}: reading time {stated.group(1)} minutes for {words} main-path "
        f"words (about {expected:.0f} at 200 a minute)"
    )


@pytest.mark.parametrize("notebook", CHAPTERS, ids=lambda p: p.stem)
def test_chapter_ends_with_summary_then_exercises_then_sources(notebook):
    names = [h for _, h in _headings(notebook)]
    for needed in ("Summary", "Exercises", "On the sources"):
        assert needed in names, f"{notebook.name}: no '## {needed}' section"
    order = [names.index(n) for n in ("Summary", "Exercises", "On the sources")]
    assert order == sorted(order), f"{notebook.name}: sections in the order {names[-6:]}"
    assert names.index("Summary") >= len(names) - 4, f"{notebook.name}: Summary is not at the end"
    cells = _cells(notebook)
    start = next(i for i, h in _headings(notebook) if h == "Summary")
    summary = _main_path(cells[start]).split("## Summary", 1)[1]
    bullets = re.findall(r"^[-*] ", summary, re.M)
    assert 1 <= len(bullets) <= 6, f"{notebook.name}: the summary has {len(bullets)} bullets"


@pytest.mark.parametrize("notebook", CHAPTERS, ids=lambda p: p.stem)
def test_dropdowns_hold_evidence_under_one_title(notebook):
    titles = [t.strip() for c in _cells(notebook) if c["cell_type"] == "markdown"
              for t in DROPDOWN.findall(_source(c))]
    assert EVIDENCE_TITLE in titles, f"{notebook.name}: no '{EVIDENCE_TITLE}' box"
    odd = [t for t in titles if t != EVIDENCE_TITLE and not t.startswith(OPTIONAL_PREFIX)]
    assert not odd, f"{notebook.name}: dropdowns titled {odd}"


@pytest.mark.parametrize("notebook", CHAPTERS, ids=lambda p: p.stem)
def test_main_path_speaks_of_its_subject_not_of_its_making(notebook):
    found = [
        f"cell {index}: {m.group(0)!r}"
        for index, cell in enumerate(_cells(notebook))
        for m in MAKING.finditer(_main_path(cell))
    ]
    assert not found, f"{notebook.name}: " + "; ".join(found)
