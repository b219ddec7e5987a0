"""The package's layout: its public names, each module's ``__all__``, and how its modules import:
no cycle among them (type-checking imports count), no private module of the core."""

from __future__ import annotations

import ast
import importlib
import pkgutil
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

import citeformer_langchain

PACKAGE = citeformer_langchain.__name__
MODULES = sorted(
    f"{PACKAGE}.{m.name}" for m in pkgutil.iter_modules(citeformer_langchain.__path__)
)


def module_imports(module: str, *, everywhere: bool = False) -> set[str]:
    """Every module ``module`` imports at its top level, in ``if TYPE_CHECKING:`` blocks too;
    ``everywhere``: inside its functions as well."""
    tree = ast.parse(Path(importlib.import_module(module).__file__ or "").read_text())
    found: set[str] = set()

    def walk(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, ast.ImportFrom) and node.module:
                found.add(node.module)
            elif isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.If):
                walk(node.body)
                walk(node.orelse)

    walk([node for node in ast.walk(tree) if isinstance(node, ast.stmt)] if everywhere
         else tree.body)
    return found


def test_the_public_api_is_the_packages_all() -> None:
    assert citeformer_langchain.__all__ == [
        "CitationAnswer", "CitationAnswerChunk", "CitationInput", "CitationRunnable",
        "DocumentCitation", "DocumentQuote", "MiniLMEmbeddings", "StandaloneQuestion",
        "render_markdown",
    ]
    tree = ast.parse(Path(citeformer_langchain.__file__ or "").read_text())
    body = tree.body[1:]  # after the docstring: imports and __all__ only
    assert all(isinstance(node, (ast.ImportFrom, ast.Assign)) for node in body)


@pytest.mark.parametrize("module", MODULES)
def test_every_module_lists_its_public_names(module: str) -> None:
    loaded = importlib.import_module(module)
    assert loaded.__all__, module
    assert all(hasattr(loaded, name) for name in loaded.__all__)


@pytest.mark.parametrize("module", MODULES)
def test_no_module_imports_a_private_module_of_the_core(module: str) -> None:
    private = [name for name in module_imports(module, everywhere=True)
               if name.startswith("citeformer.") and any(
                   part.startswith("_") for part in name.split("."))]
    assert private == []


def test_the_modules_import_each_other_without_a_cycle() -> None:
    graph = {module: {name for name in module_imports(module) if name in MODULES}
             for module in MODULES}
    try:
        order = list(TopologicalSorter(graph).static_order())
    except CycleError as error:  # pragma: no cover - the failure names the cycle
        pytest.fail(f"import cycle: {error.args[1]}")
    assert set(order) == set(MODULES)
