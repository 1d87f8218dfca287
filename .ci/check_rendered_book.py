"""Open every page of the built book in headless Chromium and check what a reader sees.

A page fails when
  * an equation is left as raw TeX, or MathJax reports an error, or MathJax was not loaded
    from the book itself (the build must typeset math offline);
  * an image does not load;
  * a cell output is a traceback.
Usage: python .ci/check_rendered_book.py _build/html [--screenshot DIR]
Needs Debian's chromium and chromium-driver and the PyPI package selenium.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

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


def pages_of(build: Path) -> list[Path]:
    skip = {"genindex.html", "search.html", "py-modindex.html"}
    return sorted(
        p for p in build.rglob("*.html")
        if p.name not in skip and "_static" not in p.parts and "_sources" not in p.parts
    )


def make_driver() -> webdriver.Chrome:
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
                 "--allow-file-access-from-files", "--window-size=1280,2000",
                 f"--user-data-dir={tempfile.mkdtemp(prefix='book-check-')}"):
        options.add_argument(flag)
    service = Service(executable_path=shutil.which("chromedriver") or "/usr/bin/chromedriver")
    driver = webdriver.Chrome(service=service, options=options)
    driver.set_script_timeout(60)
    driver.set_page_load_timeout(60)
    return driver


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("build", type=Path, help="the HTML build folder, e.g. _build/html")
    parser.add_argument("--screenshot", type=Path, help="save a PNG of every page here")
    args = parser.parse_args()
    pages = pages_of(args.build)
    if not pages:
        print(f"no HTML pages under {args.build}: build the book first")
        return 1
    driver = make_driver()
    failures, total_math = 0, 0
    try:
        for page in pages:
            driver.get(page.resolve().as_uri())
            report = driver.execute_async_script(PAGE_CHECK)
            total_math += report["math"]
            status = "FAIL" if report["problems"] else "ok"
            print(f"{status:4} {page.relative_to(args.build)}: {report['math']} math, "
                  f"{report['typeset']} typeset, {report['images']} images")
            for problem in report["problems"][:20]:
                print(f"       - {problem}")
            failures += bool(report["problems"])
            if args.screenshot:
                args.screenshot.mkdir(parents=True, exist_ok=True)
                driver.save_screenshot(str(args.screenshot / (page.stem + ".png")))
    finally:
        driver.quit()
    if total_math == 0:
        print("no math found on any page: the check would pass vacuously")
        return 1
    print(f"{len(pages)} pages checked, {failures} with problems")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
