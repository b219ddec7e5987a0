"""The README's examples work as written: every ```python block runs in a fresh interpreter and
every ``citeformer ask`` line of a ```bash block exits 0 and prints a cited answer.

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
TIMEOUT_S = 600
MAX_NEW_TOKENS = "32"
SERVER_URL = "http://localhost:8080"
VLLM_MODEL = 'VLLMGenerator.from_pretrained("Qwen/Qwen2.5-7B-Instruct")'
EMBEDDED_VLLM = 'VLLMGenerator.default(enforce_eager=True, distributed_executor_backend="uni")'

_FENCE = re.compile(r"^```[ \t]*(\w+)?[^\n]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)


def fenced_blocks(markdown: str, language: str) -> list[str]:
    """The bodies of the fenced blocks tagged ``language``, in order."""
    return [body for tag, body in _FENCE.findall(markdown) if (tag or "").lower() == language]


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


def _readme() -> str:
    assert README.is_file(), f"{README} is missing"
    return README.read_text(encoding="utf-8")


def _python_blocks() -> list[str]:
    return fenced_blocks(README.read_text(encoding="utf-8"), "python") if README.is_file() else []


def _ask_commands() -> list[list[str]]:
    return ask_commands(README.read_text(encoding="utf-8")) if README.is_file() else []


def test_readme_has_python_examples() -> None:
    assert fenced_blocks(_readme(), "python"), "README.md has no ```python block to test"


def test_readme_has_cli_examples() -> None:
    assert ask_commands(_readme()), "README.md has no `citeformer ask` line in a ```bash block"


@pytest.mark.parametrize(
    "code",
    [pytest.param(code, marks=pytest.mark.vllm) if "citeformer.vllm" in code else code
     for code in _python_blocks()],
    ids=lambda code: f"python-{code.strip().splitlines()[0][:40]}",
)
def test_readme_python_block_runs(code: str, request: pytest.FixtureRequest) -> None:
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
        f"README block exited {result.returncode}:\n{code}\n--- stdout\n{result.stdout}"
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


@pytest.mark.parametrize("argv", _ask_commands(), ids=lambda argv: " ".join(argv[2:4])[:50])
def test_readme_cli_command_runs(argv: list[str], request: pytest.FixtureRequest) -> None:
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
        "```\nplain\n```\n"
    )
    assert fenced_blocks(sample, "python") == ["print(1)\n"]
    assert ask_commands(sample) == [
        ["citeformer", "ask", "When?", "--docs", "examples/docs", "--max-new-tokens", "32"],
        ["citeformer", "ask", "Q", "--docs", "d", "--max-new-tokens", "8"],
    ]
