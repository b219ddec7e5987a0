"""The examples in the docstrings the API reference shows work as written.

The API pages (``docs/api/*.md``) render the docstrings of the objects they name, as Markdown:
read here as mkdocstrings reads them (griffe, from the source, nothing imported), every docstring
of the modules those objects live in is Markdown, its ```python blocks compile, and a block that
is a whole program on the fakes of ``citeformer.testing`` runs in a fresh interpreter. The other
blocks show one step and need what the steps before set up (``retriever``, ``question``) or a
model; the pages' examples (``test_pages.py``) run those in full.
"""

from __future__ import annotations

import ast
import builtins
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

griffe = pytest.importorskip("griffe")

ROOT = Path(__file__).resolve().parents[2]
API_PAGES = sorted((ROOT / "docs" / "api").glob("*.md"))
PACKAGES = ("citeformer", "citeformer_langchain", "citeformer_llamaindex")
TIMEOUT_S = 120

_DIRECTIVE = re.compile(r"^::: (\S+)[ \t]*$", re.MULTILINE)
# A fence may be indented: the Setup/Instantiate/Invoke sections' blocks are.
_FENCE = re.compile(
    r"^(?P<indent>[ \t]*)```[ \t]*(?P<language>\w+)?[^\n]*\n(?P<body>.*?)^(?P=indent)```[ \t]*$",
    re.MULTILINE | re.DOTALL,
)
# reST that Markdown shows as text: a literal block opened by "Title::", a directive.
_REST = re.compile(r"(::[ \t]*$|^[ \t]*\.\. [\w-]+::)", re.MULTILINE)
_AWAIT_FLAGS = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT


def docstring_blocks(docstring: str, language: str) -> list[str]:
    """The bodies, dedented, of the fenced blocks of ``docstring`` tagged ``language``."""
    return [
        textwrap.dedent(match.group("body"))
        for match in _FENCE.finditer(docstring)
        if (match.group("language") or "").lower() == language
    ]


def free_names(code: str) -> set[str]:
    """The names ``code`` reads and neither binds, imports nor gets from builtins."""
    tree = ast.parse(code)
    bound: set[str] = set()
    read: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
    return read - bound - set(dir(builtins))


def _loader() -> griffe.GriffeLoader:
    loader = griffe.GriffeLoader(search_paths=[str(ROOT / "core"), str(ROOT)])
    for package in PACKAGES:
        loader.load(package)
    loader.resolve_aliases(implicit=False, external=False)
    return loader


def rendered_modules() -> list[griffe.Module]:
    """The modules that define what the API pages name, in the order the pages name them."""
    collection = _loader().modules_collection
    modules: dict[str, griffe.Module] = {}
    for page in API_PAGES:
        for name in _DIRECTIVE.findall(page.read_text(encoding="utf-8")):
            target = collection[name]
            target = target.final_target if target.is_alias else target
            module = target if target.is_module else target.module
            modules.setdefault(module.path, module)
    return list(modules.values())


def docstrings(obj: griffe.Object) -> Iterator[tuple[str, str]]:
    """(path, docstring) of ``obj`` and of everything it defines, aliases left out."""
    if obj.docstring is not None:
        yield obj.path, obj.docstring.value
    for member in obj.members.values():
        if not member.is_alias:
            yield from docstrings(member)


def _module_docstrings() -> list[tuple[str, list[tuple[str, str]]]]:
    return [(module.path, list(docstrings(module))) for module in rendered_modules()]


def _python_examples() -> list[tuple[str, str]]:
    """(where, code) of every ```python block, numbered within its docstring."""
    found = []
    for _, texts in _module_docstrings():
        for path, text in texts:
            for number, code in enumerate(docstring_blocks(text, "python"), start=1):
                found.append((f"{path}:{number}", code))
    return found


EXAMPLES = _python_examples()
RUNNABLE = [
    (where, code) for where, code in EXAMPLES
    if "citeformer.testing" in code and not free_names(code)
]


def test_the_api_pages_have_examples_to_check() -> None:
    assert len(EXAMPLES) >= 20, [where for where, _ in EXAMPLES]
    assert RUNNABLE, "no docstring example runs on citeformer.testing's fakes alone"


@pytest.mark.parametrize(
    ("module", "texts"),
    [pytest.param(module, texts, id=module) for module, texts in _module_docstrings()],
)
def test_docstrings_are_markdown(module: str, texts: list[tuple[str, str]]) -> None:
    # Fenced blocks may hold "::" (a slice, a GBNF rule); prose and sections may not.
    rest = [path for path, text in texts if _REST.search(_FENCE.sub("", text))]
    assert rest == [], "write ```python fences, not reST literal blocks or directives"


@pytest.mark.parametrize(("where", "code"), [pytest.param(*e, id=e[0]) for e in EXAMPLES])
def test_docstring_example_compiles(where: str, code: str) -> None:
    # An Async section awaits at the top level, as a notebook or `python -m asyncio` does.
    compile(code, where, "exec", flags=_AWAIT_FLAGS, dont_inherit=True)


@pytest.mark.parametrize(("where", "code"), [pytest.param(*e, id=e[0]) for e in RUNNABLE])
def test_docstring_example_runs(where: str, code: str) -> None:
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT_S
    )
    assert result.returncode == 0, f"{where} exited {result.returncode}:\n{code}\n{result.stderr}"


def test_fences_in_docstrings() -> None:
    docstring = (
        "Summary.\n\nSetup:\n    ```bash\n    pip install x\n    ```\n\n"
        "Instantiate:\n    ```python\n    import x\n    y = x.Thing()\n    ```\n"
    )
    assert docstring_blocks(docstring, "python") == ["import x\ny = x.Thing()\n"]
    assert docstring_blocks(docstring, "bash") == ["pip install x\n"]
    assert not _REST.search(_FENCE.sub("", docstring))
    assert _REST.search("Instantiate::\n\n    y = 1\n")
    assert _REST.search("Setup:\n    .. code-block:: bash\n")
    assert free_names("import x\ny = x.f(z, key=lambda w: w)\n") == {"z"}
    assert free_names("async for chunk in stream: print(chunk)\n") == {"stream"}
