"""The docs site builds with ``mkdocs build --strict``: every link and anchor resolves, the API
reference renders from the docstrings, and every notebook runs top to bottom in a kernel of this
interpreter (the embedded model, CPU, offline), its outputs on its page. About a minute per
notebook once the model is cached."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.test_notebooks import NOTEBOOKS

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 1800


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


def test_the_api_reference_is_rendered(site: Path) -> None:
    page = (site / "api" / "citeformer" / "index.html").read_text(encoding="utf-8")
    for name in ("citeformer.CiteGenerator", "citeformer.CiteGenerator.generate",
                 "citeformer.Source"):
        assert f'id="{name}"' in page, name
    wrappers = (site / "api" / "langchain" / "index.html").read_text(encoding="utf-8")
    assert 'id="citeformer_langchain.CitationRunnable"' in wrappers


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.name)
def test_each_notebook_page_shows_its_outputs(site: Path, path: Path) -> None:
    page = (site / "notebooks" / path.stem / "index.html").read_text(encoding="utf-8")
    assert "jp-OutputArea-output" in page, f"{path.name} shows no output: was it executed?"


def test_the_fabrication_notebook_shows_its_table_and_chart(site: Path) -> None:
    page = (site / "notebooks" / "03_fabrication_experiment" / "index.html").read_text(
        encoding="utf-8"
    )
    assert "<th>fabricated</th>" in page
    assert 'src="data:image/png;base64,' in page


def test_the_benchmark_report_is_a_page(site: Path) -> None:
    report = (site / "benchmarks" / "report" / "index.html").read_text(encoding="utf-8")
    assert "Fabrication rate" in report
    assert (site / "benchmarks" / "results" / "quality.png").is_file()
