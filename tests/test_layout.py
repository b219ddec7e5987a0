"""The layout the code keeps: packages by stage, no import cycle, a declared public surface.

Read from the source files, not from imported modules, so that an import done lazily inside a
function (a display hook, a heavy optional library) does not count, and one done at module level
or under ``if TYPE_CHECKING:`` does.
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {
    "citeformer": ROOT / "core" / "citeformer",
    "citeformer_langchain": ROOT / "citeformer_langchain",
    "citeformer_llamaindex": ROOT / "citeformer_llamaindex",
}
MAX_TOP_MODULES = 14
STAGES = ("grammar", "decoding", "evidence", "render")
MAX_CLASS_LINES = 280
OVERSIZED_CLASSES: dict[str, str] = {}
"""Classes still above ``MAX_CLASS_LINES``, each with the reason (kept above it, as modules)."""
MAX_CORE_MODULE_LINES = 550
OVERSIZED_MODULES: dict[str, str] = {}
"""Core modules still above ``MAX_CORE_MODULE_LINES``, each with the reason; none may grow into
this list unnoticed (a test keeps every entry above the limit, so a split one leaves)."""
PUBLIC = {
    "citeformer": [
        "AnswerChunks", "AnswerGenerator", "AnswerStream", "AsyncAnswerChunks",
        "AsyncAnswerGenerator", "AsyncServerAnswerStream", "Citation", "CitationOutOfRangeError",
        "CiteGenerator", "CitedAnswer", "CiteformerError", "EmptyQuestionError", "EmptySourceError",
        "EvidenceSpan", "GenerationOptions", "GenerationRequest", "GrammarOptions",
        "GrammarViolationError", "InputTypeError", "InvalidInputError", "MarkerScan",
        "MissingDependencyError", "ModelLoadError", "NoSourcesError", "Policy",
        "PromptTooLongError", "Quote", "Refusal", "RefusalCheck", "ServerAnswerStream",
        "ServerConnectionError", "ServerError", "ServerGenerator", "ServerIgnoredGrammarError",
        "ServerResponseError", "Source",
        "TokenizerMismatchError", "build_grammar", "build_request", "dotted_terms",
        "parse_citations", "scan_markers",
    ],
    "citeformer_langchain": [
        "CitationAnswer", "CitationAnswerChunk", "CitationInput", "CitationRunnable",
        "DocumentCitation", "DocumentQuote", "MiniLMEmbeddings", "StandaloneQuestion",
        "render_markdown",
    ],
    "citeformer_llamaindex": [
        "INSTRUCTIONS_PROMPT_KEY", "PARENT_END_KEY", "PARENT_START_KEY", "CitationChatEngine",
        "CitationChunker", "CitationQueryEngine", "CitationStreamingChatResponse",
        "CitationSynthesizer", "CiteformerLLM",
        "LocalLLM", "MiniLMEmbedding", "core_answer", "render_html", "render_markdown",
    ],
}
"""Each package's public names: a name added or dropped is a decision, made here too."""


def modules() -> Iterator[tuple[str, Path]]:
    """(dotted name, path) of every module of the three packages."""
    for package, folder in PACKAGES.items():
        for path in sorted(folder.rglob("*.py")):
            parts = path.relative_to(folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            yield ".".join((package, *parts)), path


def module_level_imports(name: str, path: Path) -> set[str]:
    """The project modules ``name`` imports at module level (``TYPE_CHECKING`` blocks included)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, *([base] if base else [])])
                found.add(base)
                found.update(f"{base}.{alias.name}" for alias in node.names)
            elif isinstance(node, ast.If):
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)

    visit(tree.body)
    return found


def graph() -> dict[str, set[str]]:
    names = dict(modules())
    edges: dict[str, set[str]] = {}
    for name, path in names.items():
        targets = set()
        for imported in module_level_imports(name, path):
            # "from citeformer.grammar import rules" names the module citeformer.grammar.rules.
            while imported and imported not in names:
                imported = imported.rpartition(".")[0]
            if imported and imported != name:
                targets.add(imported)
        edges[name] = targets
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in edges[node]:
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in edges:
        if node not in index:
            connect(node)
    return found


@pytest.mark.parametrize("package", PUBLIC)
def test_the_public_names_are_the_listed_ones(package: str) -> None:
    module = importlib.import_module(package)
    assert module.__all__ == PUBLIC[package]
    assert all(getattr(module, name) is not None for name in module.__all__)


@pytest.mark.parametrize("package", ["citeformer_langchain", "citeformer_llamaindex"])
def test_a_wrappers_init_only_re_exports(package: str) -> None:
    tree = ast.parse((PACKAGES[package] / "__init__.py").read_text(encoding="utf-8"))
    body = tree.body[1:]  # after the docstring
    assert all(isinstance(node, (ast.ImportFrom, ast.Assign)) for node in body), package


def test_no_module_level_import_cycle() -> None:
    # A package's __init__ importing its own submodules is no cycle unless they import it back.
    assert cycles(graph()) == []


def test_the_cycle_check_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_every_package_is_installed() -> None:
    # A package missing from pyproject's list is left out of the wheel: imports of it fail in
    # an installed citeformer (a vLLM server's) and nowhere in this checkout.
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    listed = set(config["tool"]["setuptools"]["packages"])
    found = {name for name, path in modules() if path.name == "__init__.py"}
    assert found - listed == set()


def test_the_core_is_packaged_by_stage() -> None:
    core = PACKAGES["citeformer"]
    top = sorted(path.name for path in core.glob("*.py"))
    assert len(top) <= MAX_TOP_MODULES, top
    for stage in STAGES:
        assert (core / stage / "__init__.py").is_file(), stage
        # Each stage package opens with its module map.
        assert "The modules:\n\n```text\n" in (core / stage / "__init__.py").read_text(), stage


@pytest.mark.parametrize(
    ("name", "path"),
    [(name, path) for name, path in modules() if not any(
        part.startswith("_") and part != "__init__" for part in name.split(".")
    ) and path.name != "__main__.py"],
    ids=lambda value: value if isinstance(value, str) else "",
)
def test_every_public_module_declares_its_names(name: str, path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    declared = [
        node for node in tree.body
        if isinstance(node, (ast.Assign, ast.AnnAssign))
        and any(getattr(t, "id", None) == "__all__" for t in (
            node.targets if isinstance(node, ast.Assign) else [node.target]
        ))
    ]
    assert declared, f"{name} defines no __all__"
    from citeformer.errors import MissingDependencyError

    try:
        module = importlib.import_module(name)
    except MissingDependencyError:  # citeformer.vllm imports only inside vLLM
        return
    missing = [n for n in module.__all__ if not hasattr(module, n)]
    assert not missing, f"{name}.__all__ names what it does not define: {missing}"


def test_no_class_is_a_monolith() -> None:
    # In the core and in the adapters: a class that needs more has pieces to give away.
    sizes = {}
    for name, path in modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                sizes[f"{name}:{node.name}"] = (node.end_lineno or node.lineno) - node.lineno + 1
    over = {name: lines for name, lines in sizes.items() if lines > MAX_CLASS_LINES}
    assert set(over) - set(OVERSIZED_CLASSES) == set(), over
    assert set(OVERSIZED_CLASSES) <= set(over), sorted(set(OVERSIZED_CLASSES) - set(over))


def test_no_core_module_is_a_monolith() -> None:
    sizes = {
        name: len(path.read_text(encoding="utf-8").splitlines())
        for name, path in modules() if name.startswith("citeformer.") or name == "citeformer"
    }
    over = {name: lines for name, lines in sizes.items() if lines > MAX_CORE_MODULE_LINES}
    assert set(over) - set(OVERSIZED_MODULES) == set(), over
    # An entry no longer needed is dropped, so the list says what is left to split.
    assert set(OVERSIZED_MODULES) <= set(over), sorted(set(OVERSIZED_MODULES) - set(over))


def test_no_option_name_is_found_by_position() -> None:
    # fields(...)[3:]: reordering a field would silently change which names are options. They
    # are marked on their fields instead (citeformer.request.OPTION).
    for name, path in modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Subscript) and any(
                isinstance(call, ast.Call) and getattr(call.func, "id", None) == "fields"
                for call in ast.walk(node.value)
            ):
                raise AssertionError(f"{name}:{node.lineno} takes fields by position")


def test_no_wrapper_imports_a_private_core_module() -> None:
    for name, path in modules():
        if name.startswith("citeformer."):
            continue
        private = {
            imported for imported in module_level_imports(name, path) | _lazy_imports(path)
            if imported.startswith("citeformer.") and any(
                part.startswith("_") for part in imported.split(".")[1:]
            )
        }
        assert not private, f"{name} imports {sorted(private)}"


def _lazy_imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found
