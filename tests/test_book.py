"""The book's own consistency: table of contents, Colab cells, stored notebooks."""

import json
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def _config() -> dict:
    return yaml.safe_load((ROOT / "_config.yml").read_text())


def _toc_files() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]]
    for part in toc["parts"]:
        files += [chapter["file"] for chapter in part["chapters"]]
    return files


def test_every_notebook_is_in_the_table_of_contents():
    listed = set(_toc_files())
    for notebook in NOTEBOOKS:
        assert f"notebooks/{notebook.stem}" in listed, f"{notebook.name} missing from _toc.yml"


def test_every_toc_entry_exists():
    for entry in _toc_files():
        assert any((ROOT / f"{entry}{ext}").exists() for ext in (".md", ".ipynb")), entry


def test_colab_cell_points_at_the_configured_repository():
    url = _config()["repository"]["url"]
    assert NOTEBOOKS, "no notebooks found"
    for notebook in NOTEBOOKS:
        cells = json.loads(notebook.read_text())["cells"]
        first = cells[0]
        source = "".join(first["source"])
        assert "google.colab" in source, f"{notebook.name}: first cell is not the Colab installer"
        assert "remove-cell" in first.get("metadata", {}).get("tags", []), notebook.name
        urls = re.findall(r"git\+(https://[^\"'\s]+)", source)
        assert urls == [url], f"{notebook.name} installs from {urls}, _config.yml says {url}"


def test_every_chapter_uses_the_package_device_and_seed():
    for notebook in NOTEBOOKS:
        code = "\n".join(
            "".join(c["source"]) for c in json.loads(notebook.read_text())["cells"]
            if c["cell_type"] == "code"
        )
        assert "get_device()" in code, notebook.name
        assert "seed_everything(" in code, notebook.name
        assert "assert " in code, f"{notebook.name} checks none of its claims"


def test_book_executes_every_chapter_and_uses_offline_math():
    config = _config()
    assert config["execute"]["execute_notebooks"] == "force"
    assert config["only_build_toc_files"] is True
    assert {"dollarmath", "amsmath"} <= set(config["parse"]["myst_enable_extensions"])
    assert "offline_mathjax" in config["sphinx"]["local_extensions"]
