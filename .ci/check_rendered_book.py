"""Open every page of the built book in headless Chromium and check what a reader sees.

A page fails when
  * an equation is left as raw TeX, or MathJax reports an error, or MathJax was not loaded
    from the book itself (the build must typeset math offline);
  * an image does not load;
  * a cell output is a traceback;
  * a chapter page (under notebooks/) has fewer than 3 exercises, a solution that is not a
    collapsed dropdown (hidden until its title is clicked, shown after), or a solution
    without code; or lacks its .ipynb download or its Colab button for the repository
    URL and branch in _config.yml;
  * a prose page (under book/) lacks its .md download; a Colab button opens anything but
    an .ipynb;
  * the execution-status page has no execution table with a row per chapter, a failed
    status, or no table of the machine the build ran on;
  * the intro page has no BibTeX block with the version and URL of CITATION.cff;
  * an API reference page (book/api/) documents no object or has no summary table, or
    any page shows an unrendered reST directive (``.. automodule::``);
  * a dropdown (``{dropdown}``, e.g. a chapter's *How sure are we?*) is open when the page
    loads or does not open when asked;
  * a code block, a cell output or a displayed equation scrolls sideways at a 1280-pixel
    window, with every dropdown, folded code cell and solution opened (each such block is
    named).
Usage: python .ci/check_rendered_book.py _build/html [--screenshot DIR] [--browsers N]
Needs Debian's chromium and chromium-driver and the PyPI packages selenium and PyYAML.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import unquote, urlparse

import yaml
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

ROOT = Path(__file__).resolve().parents[1]
MIN_EXERCISES = 3
# Pages under notebooks/ allowed to have no exercises (none: every chapter has them).
NO_EXERCISES: set[str] = set()
STATUS_PAGE = "book/execution_status.html"
# API reference pages (book/api/): each documents objects, except these prose pages
API_DIR = "book/api/"
API_PROSE = {"index", "changelog"}
INTRO_PAGE = "book/intro.html"

# Runs in the page after MathJax has finished; returns a list of problems found.
PAGE_CHECK = r"""
const done = arguments[arguments.length - 1];
const problems = [];
const inspect = () => {
  const mj = window.MathJax;
  const mathNodes = document.querySelectorAll('.math, span.math, div.math');
  if (mathNodes.length) {
    const script = [...document.scripts].find(s => /mathjax/i.test(s.src || ''));
    if (!script) problems.push('page has math but loads no MathJax script');
    else if (!script.src.startsWith('file:')) problems.push('MathJax is not loaded from the book: ' + script.src);
    if (!mj || !mj.startup) problems.push('MathJax did not start');
  }
  for (const node of mathNodes) {
    if (!node.querySelector('mjx-container') && node.tagName !== 'MJX-CONTAINER') {
      problems.push('untypeset math: ' + node.textContent.trim().slice(0, 80));
    }
  }
  for (const err of document.querySelectorAll('mjx-merror, [data-mjx-error]')) {
    problems.push('MathJax error: ' + (err.getAttribute('data-mjx-error') || err.textContent).slice(0, 120));
  }
  // Raw TeX delimiters left in prose (code blocks and scripts excluded).
  const walker = document.createTreeWalker(document.querySelector('main') || document.body, NodeFilter.SHOW_TEXT);
  while (walker.nextNode()) {
    const text = walker.currentNode.textContent;
    const parent = walker.currentNode.parentElement;
    if (parent.closest('pre, code, script, style, mjx-container, .highlight, textarea')) continue;
    if (/\\\(|\\\[|\$\$|\\begin\{|\\frac\{/.test(text)) problems.push('raw TeX in text: ' + text.trim().slice(0, 80));
  }
  for (const img of document.images) {
    if (!img.complete || img.naturalWidth === 0) problems.push('image failed to load: ' + img.src);
  }
  for (const out of document.querySelectorAll('.cell_output, .output')) {
    if (out.querySelector('.traceback') || /Traceback \(most recent call last\)/.test(out.textContent)) {
      problems.push('cell output is a traceback: ' + out.textContent.trim().slice(0, 120));
    }
  }
  done({problems, math: mathNodes.length, images: document.images.length,
        typeset: document.querySelectorAll('mjx-container').length});
};
if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
  MathJax.startup.promise.then(inspect, e => { problems.push('MathJax failed: ' + e); inspect(); });
} else { inspect(); }
"""


# Runs after PAGE_CHECK; reports what the book-level checks need, clicking every solution
# open to see that it is collapsed before the click and shown after it.
BOOK_CHECK = r"""
const done = arguments[arguments.length - 1];
const shown = el => getComputedStyle(el).visibility !== 'hidden'
  && getComputedStyle(el).display !== 'none';
const body = adm => [...adm.children].filter(c => !c.classList.contains('admonition-title'));
const solutions = [...document.querySelectorAll('.admonition.solution')];
const report = {
  exercises: [...document.querySelectorAll('.admonition.exercise')].map(e => e.id),
  solutions: solutions.map(sol => ({
    id: sol.id,
    dropdown: sol.classList.contains('dropdown'),
    toggleHidden: sol.classList.contains('toggle-hidden'),
    hiddenBefore: body(sol).length > 0 && body(sol).every(c => !shown(c)),
    hasCode: !!sol.querySelector('.cell_input, div.highlight, pre'),
  })),
  downloads: [...document.querySelectorAll('.dropdown-download-buttons a')]
    .map(a => ({text: a.textContent.trim(), href: a.href})),
  colab: [...document.querySelectorAll('a[href*="colab.research.google.com"]')]
    .map(a => a.href),
  bibtex: [...document.querySelectorAll('div.highlight-bibtex pre')].map(p => p.textContent),
  apiObjects: document.querySelectorAll('dl.py:not(.module)').length,
  apiSummary: document.querySelectorAll('table.autosummary tr').length,
  rawRst: ((document.querySelector('main') || document.body).innerText.match(
    /^\s*\.\. (auto\w+|py:\w+)::.*$/m) || [null])[0],
  tables: [...document.querySelectorAll('main table, article table')].map(t => ({
    head: [...t.querySelectorAll('thead th, thead td')].map(c => c.textContent.trim()),
    rows: [...t.querySelectorAll('tbody tr')]
      .map(r => [...r.children].map(c => c.textContent.trim())),
  })),
};
for (const sol of solutions) {
  const title = sol.querySelector('.admonition-title');
  if (title) title.click();
}
setTimeout(() => {
  solutions.forEach((sol, i) => {
    report.solutions[i].shownAfterClick = !sol.classList.contains('toggle-hidden')
      && body(sol).length > 0 && body(sol).every(shown);
  });
  done(report);
}, 200);
"""


# Runs after BOOK_CHECK (which opened the solutions): every dropdown must render closed and
# open when asked; then, with every <details> open (dropdowns and folded code cells), no
# code block or cell output may be wider than its box at the window's 1280 pixels.
LAYOUT_CHECK = r"""
const done = arguments[arguments.length - 1];
const problems = [];
const dropdowns = [...document.querySelectorAll('details.sd-dropdown')];
const titleOf = d => (d.querySelector('summary') || d).textContent.trim().slice(0, 60);
for (const d of dropdowns) {
  if (d.open) problems.push('dropdown open when the page loads: ' + titleOf(d));
}
for (const d of document.querySelectorAll('details')) d.open = true;
setTimeout(() => {
  for (const d of dropdowns) {
    const body = [...d.children].filter(c => c.tagName !== 'SUMMARY');
    if (!d.open || !body.some(c => c.getClientRects().length > 0)) {
      problems.push('dropdown does not open: ' + titleOf(d));
    }
  }
  const blocks = [...document.querySelectorAll(
    'div.highlight pre, div.cell_output pre, div.cell_output div.output, div.cell_output table, '
    + 'div.math, mjx-container[display="true"]')];
  let scrolling = 0;
  for (const el of blocks) {
    if (el.getClientRects().length === 0 || el.clientWidth === 0) continue;  // not shown
    if (el.scrollWidth > el.clientWidth + 1) {
      scrolling += 1;
      problems.push(`scrolls sideways (${el.scrollWidth} > ${el.clientWidth} px): `
        + el.textContent.trim().replace(/\s+/g, ' ').slice(0, 70));
    }
  }
  done({problems, dropdowns: dropdowns.length, blocks: blocks.length, scrolling});
}, 300);
"""


def _local_file(href: str) -> Path | None:
    url = urlparse(href)
    return Path(unquote(url.path)) if url.scheme == "file" else None


def book_problems(name: str, report: dict, config: dict, version: str) -> list[str]:
    """The checks of issue 14 for one page; `name` is its path inside the build."""
    problems = []
    repository = config["repository"]
    colab = config["launch_buttons"]["colab_url"].rstrip("/")
    downloads = {d["text"]: d["href"] for d in report["downloads"]}
    for href in downloads.values():
        path = _local_file(href)
        if path is not None and not path.is_file():
            problems.append(f"download link to a missing file: {href}")
    for href in report["colab"]:
        if not href.endswith(".ipynb"):
            problems.append(f"Colab button opens a file Colab cannot read: {href}")
    if name.startswith("notebooks/"):
        stem = Path(name).stem
        if ".ipynb" not in downloads:
            problems.append("no .ipynb download button")
        org_repo = repository["url"].rstrip("/").split("github.com/")[-1]
        expected = f"{colab}/github/{org_repo}/blob/{repository['branch']}/notebooks/{stem}.ipynb"
        if expected not in report["colab"]:
            problems.append(f"no Colab button for {expected} (found {report['colab']})")
        if stem not in NO_EXERCISES and len(report["exercises"]) < MIN_EXERCISES:
            problems.append(f"{len(report['exercises'])} exercises, expected >= {MIN_EXERCISES}")
        if len(report["solutions"]) < len(report["exercises"]):
            problems.append(f"{len(report['exercises'])} exercises but "
                            f"{len(report['solutions'])} solutions")
        for sol in report["solutions"]:
            what = f"solution {sol['id'] or '?'}"
            if not sol["dropdown"]:
                problems.append(f"{what} is not a dropdown")
            if not (sol["toggleHidden"] and sol["hiddenBefore"]):
                problems.append(f"{what} is not collapsed when the page opens")
            if not sol["shownAfterClick"]:
                problems.append(f"{what} does not open when its title is clicked")
            if not sol["hasCode"]:
                problems.append(f"{what} shows no code")
    elif name.startswith("book/") and ".md" not in downloads:
        problems.append("no .md download button")
    if name.startswith(API_DIR) and Path(name).stem not in API_PROSE:
        if report["apiObjects"] < 1:
            problems.append("API page documents no object (autodoc produced nothing)")
        if report["apiSummary"] < 1:
            problems.append("API page has no summary table of its public names")
    if report.get("rawRst"):
        problems.append(f"unrendered reStructuredText on the page: {report['rawRst'][:80]}")
    if name == STATUS_PAGE:
        problems += status_problems(report)
    if name == INTRO_PAGE:
        blocks = [b for b in report["bibtex"] if re.search(r"@\w+\{", b)]
        if len(blocks) != 1:
            problems.append(f"expected one BibTeX block (How to cite), found {len(blocks)}")
        else:
            fields = dict(re.findall(r"^\s*(\w+)\s*=\s*\{(.*)\},?\s*$", blocks[0], re.MULTILINE))
            if fields.get("version") != version:
                problems.append(f"BibTeX version {fields.get('version')} != {version}")
            if fields.get("url") != repository["url"]:
                problems.append(f"BibTeX url {fields.get('url')} != {repository['url']}")
    return problems


def status_problems(report: dict) -> list[str]:
    """The execution table: a row per chapter built, every status a success."""
    problems = []
    tables = [t for t in report["tables"] if "Status" in t["head"] and "Document" in t["head"]]
    if len(tables) != 1:
        return [f"expected one execution table (nb-exec-table), found {len(tables)}"]
    head, rows = tables[0]["head"], tables[0]["rows"]
    document, status = head.index("Document"), head.index("Status")
    listed = {row[document]: row[status] for row in rows}
    chapters = report["chapters"]
    if not chapters:
        problems.append("no chapter pages in the build")
    for chapter in chapters:
        if chapter not in listed:
            problems.append(f"execution table has no row for {chapter}")
    for doc, state in listed.items():
        if state != "\u2705":
            problems.append(f"execution table: {doc} has status {state!r}, not a success")
    machine = " ".join(" ".join(" ".join(r) for r in t["rows"]) for t in report["tables"])
    for needed in ("Python", "PyTorch", "candidate_sampling", "device"):
        if needed not in machine:
            problems.append(f"the table of the machine lacks {needed}")
    return problems


def is_redirect(page: Path) -> bool:
    """Jupyter Book's index.html only forwards to the root page, which is checked itself;
    opening it races the redirect."""
    head = page.read_text(encoding="utf-8", errors="replace")[:500].lower()
    return 'http-equiv="refresh"' in head and "<body" not in head


def pages_of(build: Path) -> list[Path]:
    skip = {"genindex.html", "search.html", "py-modindex.html"}
    return sorted(
        p for p in build.rglob("*.html")
        if p.name not in skip and "_static" not in p.parts and "_sources" not in p.parts
        and not is_redirect(p)
    )


def make_driver() -> webdriver.Chrome:
    options = webdriver.ChromeOptions()
    options.binary_location = (
        shutil.which("chromium") or shutil.which("google-chrome") or "/usr/bin/chromium"
    )
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
                 "--allow-file-access-from-files", "--window-size=1280,2000",
                 f"--user-data-dir={tempfile.mkdtemp(prefix='book-check-')}"):
        options.add_argument(flag)
    service = Service(executable_path=shutil.which("chromedriver") or "/usr/bin/chromedriver")
    driver = webdriver.Chrome(service=service, options=options)
    # generous: on a loaded 2-core machine a long chapter page takes over a minute to load
    driver.set_script_timeout(180)
    driver.set_page_load_timeout(180)
    return driver


def check_pages(pages: list[tuple[Path, str]], chapters: list[str], config: dict,
                version: str, screenshot: Path | None) -> dict[str, tuple[dict, dict]]:
    """Open each ``(page, name)`` in one browser of its own: ``{name: (report, book)}``."""
    results = {}
    driver = make_driver()
    try:
        for page, name in pages:
            driver.get(page.resolve().as_uri())
            report = driver.execute_async_script(PAGE_CHECK)
            book = driver.execute_async_script(BOOK_CHECK)
            book["chapters"] = chapters
            report["problems"] += book_problems(name, book, config, version)
            layout = driver.execute_async_script(LAYOUT_CHECK)
            report["problems"] += layout["problems"]
            report["dropdowns"], report["scrolling"] = layout["dropdowns"], layout["scrolling"]
            results[name] = (report, book)
            if screenshot:
                screenshot.mkdir(parents=True, exist_ok=True)
                driver.save_screenshot(str(screenshot / (page.stem + ".png")))
    finally:
        driver.quit()
    return results


def split_by_size(pages: list[tuple[Path, str]], parts: int) -> list[list[tuple[Path, str]]]:
    """``parts`` lists of about equal HTML size (largest first, each to the lightest list):
    a page's cost is mostly its math and outputs, which its size follows."""
    shares: list[list[tuple[Path, str]]] = [[] for _ in range(max(1, parts))]
    load = [0] * len(shares)
    for item in sorted(pages, key=lambda item: item[0].stat().st_size, reverse=True):
        lightest = load.index(min(load))
        shares[lightest].append(item)
        load[lightest] += item[0].stat().st_size
    return [share for share in shares if share]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("build", type=Path, help="the HTML build folder, e.g. _build/html")
    parser.add_argument("--screenshot", type=Path, help="save a PNG of every page here")
    parser.add_argument("--browsers", type=int, default=2,
                        help="browsers checking pages at once (default 2: MathJax keeps one "
                             "core busy per page)")
    args = parser.parse_args()
    pages = pages_of(args.build)
    if not pages:
        print(f"no HTML pages under {args.build}: build the book first")
        return 1
    if args.browsers < 1:
        parser.error(f"--browsers must be at least 1, got {args.browsers}")
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    version = str(yaml.safe_load((ROOT / "CITATION.cff").read_text())["version"])
    names = [page.relative_to(args.build).as_posix() for page in pages]
    chapters = sorted(n[: -len(".html")] for n in names if n.startswith("notebooks/"))
    shares = split_by_size(list(zip(pages, names)), args.browsers)
    results: dict[str, tuple[dict, dict]] = {}
    with ThreadPoolExecutor(max_workers=len(shares)) as pool:
        for share in pool.map(
            lambda share: check_pages(share, chapters, config, version, args.screenshot),
            shares,
        ):
            results.update(share)
    seen = {"status": False, "intro": False, "exercises": 0, "api": 0}
    failures, total_math, total_scrolling = 0, 0, 0
    for name in names:  # reported in page order, whichever browser opened the page
        report, book = results[name]
        seen["status"] |= name == STATUS_PAGE
        seen["intro"] |= name == INTRO_PAGE
        seen["exercises"] += len(book["exercises"])
        seen["api"] += book["apiObjects"] if name.startswith(API_DIR) else 0
        total_math += report["math"]
        total_scrolling += report["scrolling"]
        status = "FAIL" if report["problems"] else "ok"
        print(f"{status:4} {name}: {report['math']} math, "
              f"{report['typeset']} typeset, {report['images']} images, "
              f"{len(book['exercises'])} exercises, {len(book['solutions'])} solutions, "
              f"{report['dropdowns']} dropdowns, {report['scrolling']} blocks scrolling")
        for problem in report["problems"][:30]:
            print(f"       - {problem}")
        failures += bool(report["problems"])
    if total_math == 0:
        print("no math found on any page: the check would pass vacuously")
        return 1
    for key, page in (("status", STATUS_PAGE), ("intro", INTRO_PAGE)):
        if not seen[key]:
            print(f"{page} is not in the build")
            failures += 1
    if not seen["api"]:
        print("no API reference objects on any page under book/api/")
        failures += 1
    if not seen["exercises"]:
        print("no exercises found on any page: the check would pass vacuously")
        return 1
    print(f"{len(pages)} pages checked in {len(shares)} browsers, {failures} with problems; "
          f"{total_scrolling} code, output or equation blocks scroll sideways at 1280 pixels")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
