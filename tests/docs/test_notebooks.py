"""The notebooks in notebooks/ are there and committed without outputs. They are run top to
bottom by the docs build (``tests/docs/test_site.py``), once per suite, in a fresh kernel of this
interpreter: a cell that fails fails the build."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK_DIR = ROOT / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
EXPECTED = {
    "01_langchain_rag.ipynb",
    "02_llamaindex_query_engine.ipynb",
    "03_fabrication_experiment.ipynb",
    "04_langchain_conversation.ipynb",
    "05_llamaindex_chat_engine.ipynb",
}


def test_the_notebooks_are_there() -> None:
    assert {path.name for path in NOTEBOOKS} >= EXPECTED


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.name)
def test_notebook_is_committed_without_outputs(path: Path) -> None:
    notebook = nbformat.read(path, as_version=4)
    nbformat.validate(notebook)
    assert notebook.cells and notebook.cells[0].cell_type == "markdown", (
        "a notebook starts with a markdown cell saying what it shows and how to run it"
    )
    dirty = [
        index
        for index, cell in enumerate(notebook.cells)
        if cell.cell_type == "code" and (cell.outputs or cell.execution_count is not None)
    ]
    assert not dirty, f"{path.name}: clear the outputs of cells {dirty} before committing"


@pytest.mark.integration
def test_importing_citeformer_in_a_kernel_prints_no_tqdm_warning() -> None:
    # transformers' first import of tqdm.auto warns "IProgress not found" in a kernel without
    # ipywidgets; citeformer imports it first, quietly, so a notebook's first cell stays clean.
    import nbclient

    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(
        "import warnings\n"
        "warnings.simplefilter('always')\n"
        "from citeformer import CiteGenerator\n"
        "import transformers\n"
        "print('imported')"
    )]
    nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3").execute()
    outputs = notebook.cells[0].outputs
    printed = "".join(o.get("text", "") for o in outputs)
    assert "imported" in printed
    assert "IProgress" not in printed and "TqdmWarning" not in printed, printed
