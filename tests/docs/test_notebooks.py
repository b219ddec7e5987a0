"""The notebooks in notebooks/ run top to bottom without an error, and are committed without
outputs. Each one runs in a fresh kernel of this interpreter (the embedded model, CPU, offline);
about a minute per notebook once the model is cached."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import nbformat
import pytest
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

pytestmark = pytest.mark.integration

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
CELL_TIMEOUT_S = 600
KERNEL_NAME = "citeformer-test"


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


@pytest.fixture(scope="module")
def kernel_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A kernelspec that starts ipykernel in this very interpreter (the venv under test), so the
    test does not depend on which kernels happen to be installed for the user."""
    kernels = tmp_path_factory.mktemp("kernels")
    spec = kernels / KERNEL_NAME
    spec.mkdir()
    (spec / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": f"Python {sys.version_info.major}.{sys.version_info.minor} "
                "(citeformer tests)",
                "language": "python",
            }
        ),
        encoding="utf-8",
    )
    return kernels


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.name)
def test_notebook_runs_top_to_bottom(path: Path, kernel_dir: Path) -> None:
    notebook = nbformat.read(path, as_version=4)
    manager = KernelManager(
        kernel_name=KERNEL_NAME,
        kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(kernel_dir)]),
    )
    client = NotebookClient(
        notebook,
        km=manager,
        timeout=CELL_TIMEOUT_S,
        allow_errors=False,
        # The notebooks find the repository root from their own folder, as in Jupyter.
        resources={"metadata": {"path": str(NOTEBOOK_DIR)}},
    )
    try:
        client.execute()
    except CellExecutionError as error:
        pytest.fail(f"{path.name} failed:\n{error}")
    finally:
        # A kernel manager passed in is not shut down by nbclient: each kernel holds a model.
        if manager.has_kernel:
            manager.shutdown_kernel(now=True)
    errors = [
        output
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.outputs
        if output.output_type == "error"
    ]
    assert not errors, f"{path.name}: {errors}"
    assert all(
        cell.execution_count is not None for cell in notebook.cells if cell.cell_type == "code"
    ), f"{path.name}: not every code cell ran"
