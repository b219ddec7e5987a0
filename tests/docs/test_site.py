"""The docs site builds with ``mkdocs build --strict``: every link and anchor resolves, the API
reference renders from the docstrings, and every notebook runs top to bottom in a kernel of this
interpreter (the embedded model, CPU, offline), its outputs on its page. The built site reads
from its folder (``file://``): pages are files and every link names one. About a minute per
notebook once the model is cached."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from tests.docs.test_notebooks import NOTEBOOKS

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 1800
_LINK = re.compile(r'(?:href|src)="([^"]*)"')


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    # No cache of executed notebooks: the build must run each one now.
    env = {**os.environ, "CITEFORMER_DOCS_CACHE": "false", "NO_MKDOCS_2_WARNING": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT_S, env=env,
    )
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stderr[-8000:]}"
    return out


def test_every_link_names_a_file_of_the_site(site: Path) -> None:
    # Over file:// a link to a folder shows a listing or nothing: each must name a file.
    broken = []
    # 404.html is served by a web server for any missing path: its links are absolute.
    for page in set(site.rglob("*.html")) - {site / "404.html"}:
        for link in _LINK.findall(page.read_text(encoding="utf-8")):
            parts = urlsplit(link)
            if parts.scheme or parts.netloc or not parts.path:
                continue  # another site, data:, mailto:, or an anchor of this page
            target = (page.parent / unquote(parts.path)).resolve()
            if not target.is_file():
                broken.append(f"{page.relative_to(site)}: {link}")
    assert broken == []


def test_the_site_loads_nothing_from_the_network(site: Path) -> None:
    # Search included: its index is a script and its worker shim ships with the site.
    assert (site / "search" / "search_index.js").is_file()
    remote = [
        f"{page.relative_to(site)}: {tag}"
        for page in site.rglob("*.html")
        for tag in re.findall(r'<(?:script|link)[^>]*(?:src|href)="https?://[^"]*"',
                              page.read_text(encoding="utf-8"))
        if "<script" in tag or 'rel="stylesheet"' in tag
    ]
    assert remote == []


def test_the_home_page_shows_an_answer_with_linked_markers(site: Path) -> None:
    page = (site / "index.html").read_text(encoding="utf-8")
    assert "'/path/to/citeformer[langchain]'" in page  # PyPI's citeformer is another project
    assert 'class="citeformer-marker" href="#ref-2"' in page
    assert 'id="ref-2"' in page


def test_the_api_reference_is_rendered(site: Path) -> None:
    page = (site / "api" / "citeformer.html").read_text(encoding="utf-8")
    for name in ("citeformer.CiteGenerator", "citeformer.CiteGenerator.generate",
                 "citeformer.Source"):
        assert f'id="{name}"' in page, name
    wrappers = (site / "api" / "langchain.html").read_text(encoding="utf-8")
    assert 'id="citeformer_langchain.CitationRunnable"' in wrappers
    for reference in ("citeformer.html", "langchain.html", "llamaindex.html", "modules.html"):
        text = (site / "api" / reference).read_text(encoding="utf-8")
        # Docstring examples are highlighted code, not reST shown as text.
        assert '<span class="kn">import</span>' in text, reference
        assert ".. code-block::" not in text, reference


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.name)
def test_each_notebook_page_shows_its_outputs(site: Path, path: Path) -> None:
    page = (site / "notebooks" / f"{path.stem}.html").read_text(encoding="utf-8")
    assert "jp-OutputArea-output" in page, f"{path.name} shows no output: was it executed?"


def test_no_page_and_no_search_entry_shows_a_path_of_the_build(site: Path) -> None:
    shown = [page.relative_to(site).as_posix() for page in site.rglob("*.html")
             if str(ROOT) in page.read_text(encoding="utf-8")]
    assert shown == []
    index = json.loads((site / "search" / "search_index.json").read_text(encoding="utf-8"))
    assert [doc["location"] for doc in index["docs"] if str(ROOT) in doc["text"]] == []


def test_the_search_indexes_every_page(site: Path) -> None:
    index = json.loads((site / "search" / "search_index.json").read_text(encoding="utf-8"))
    located = {doc["location"].split("#")[0] for doc in index["docs"]}
    pages = {page.relative_to(site).as_posix() for page in site.rglob("*.html")} - {"404.html"}
    assert pages - located == set()


def test_the_fabrication_notebook_shows_its_table_and_chart(site: Path) -> None:
    page = (site / "notebooks" / "03_fabrication_experiment.html").read_text(encoding="utf-8")
    assert ">fabricated</th>" in page
    # The table fits the column, and its answers, red markers and all, wrap.
    assert "table-layout:fixed; width:100%" in page and "white-space:normal" in page
    assert 'src="data:image/png;base64,' in page


@pytest.mark.parametrize("name", ["01_langchain_rag", "02_llamaindex_query_engine",
                                  "05_llamaindex_chat_engine"])
def test_a_streamed_answer_shows_as_sentences(site: Path, name: str) -> None:
    page = (site / "notebooks" / f"{name}.html").read_text(encoding="utf-8")
    assert "chunks" in page and "; together:" in page


def test_no_notebook_page_shows_a_tqdm_warning(site: Path) -> None:
    pages = [path.stem for path in NOTEBOOKS
             if "IProgress" in (site / "notebooks" / f"{path.stem}.html").read_text("utf-8")]
    assert pages == []


def test_the_query_engine_notebook_renders_its_response(site: Path) -> None:
    page = (site / "notebooks" / "02_llamaindex_query_engine.html").read_text(encoding="utf-8")
    assert "citeformer-answer" in page and "citeformer-marker" in page


def test_the_benchmark_report_is_a_page(site: Path) -> None:
    report = (site / "benchmarks" / "report.html").read_text(encoding="utf-8")
    assert "Fabrication rate" in report
    assert (site / "benchmarks" / "results" / "quality.png").is_file()
    summary = (site / "benchmarks.html").read_text(encoding="utf-8")
    assert 'src="benchmarks/results/headline.png"' in summary
