"""The real ``citeformer ask`` command: subprocesses with the embedded model and real embeddings."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
QUESTION = "When was the Eiffel Tower completed?"
MARKER = re.compile(r"\[(\d+)\]")


def command(*args: str, module: bool = False) -> list[str]:
    script = shutil.which("citeformer")
    if module or script is None:
        return [sys.executable, "-m", "citeformer", *args]
    return [script, *args]


def run(*args: str, module: bool = False, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        command(*args, module=module), cwd=ROOT, capture_output=True, text=True,
        timeout=timeout, encoding="utf-8",
    )


def check_markers(text: str, n_sources: int) -> list[int]:
    numbers = [int(m) for m in MARKER.findall(text)]
    assert all(1 <= k <= n_sources for k in numbers), (text, n_sources)
    return numbers


def test_ask_prints_an_answer_and_references_to_retrieved_passages() -> None:
    result = run("ask", QUESTION, "--docs", "examples/docs", "--max-new-tokens", "48")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    # progress on stderr: model load, then embedding
    assert "loading model" in result.stderr and "embedding" in result.stderr
    # and the library's own messages, logged, shown by the command
    assert "citeformer: SmolLM2-135M-Instruct ready in" in result.stderr
    answer, _, references = result.stdout.partition("\n\nReferences:\n")
    assert answer.strip(), result.stdout
    numbers = check_markers(answer, 3)  # default --top-k 3
    lines = [line for line in references.splitlines() if not line.startswith("    ")]
    if numbers:
        assert [int(line[1:line.index("]")]) for line in lines] == sorted(set(numbers))
        for line in lines:
            assert re.fullmatch(r"\[\d+\] examples/docs/[\w.]+\.(md|txt), lines? \d+(-\d+)?", line)
        # Under each, the supporting sentence: its line in the file the reference line names,
        # and the sentence as the file has it.
        path = ""
        for line in references.splitlines():
            if not line.startswith("    "):
                path = line.split("] ", 1)[1].split(",")[0]
                continue
            match = re.fullmatch(r'    line (\d+): "(.+)"( \(weak support\))?', line)
            assert match, line
            document = (ROOT / path).read_text(encoding="utf-8").splitlines()
            sentence = match[2].removesuffix("\u2026").split()[0]
            assert sentence in document[int(match[1]) - 1]
    else:
        assert lines[0].startswith("(none cited;")
    # the question is about the tower: the retriever must have found its file
    assert "eiffel_tower.md" in references or not numbers


def test_ask_json_is_well_formed_and_markers_point_at_retrieved_chunks() -> None:
    result = run("ask", QUESTION, "--docs", "examples/docs", "--json", "--max-new-tokens", "32",
                 "--top-k", "2")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)  # stdout is pure JSON
    assert set(data) >= {"text", "citations", "sources"}
    assert [s["id"] for s in data["sources"]] == [1, 2]
    assert any(s["path"].endswith("eiffel_tower.md") for s in data["sources"])
    for source in data["sources"]:
        document = (ROOT / source["path"]).read_text(encoding="utf-8")
        assert document[source["start"]:source["end"]] == source["text"]
        assert source["line_start"] == document.count("\n", 0, source["start"]) + 1
    text = data["text"]
    numbers = check_markers(text, len(data["sources"]))
    assert [c["source_id"] for c in data["citations"]] == numbers
    for citation in data["citations"]:
        assert text[citation["start"]:citation["end"]] == f"[{citation['source_id']}]"
        assert 1 <= citation["source_id"] <= len(data["sources"])
        evidence = citation["evidence"]
        if evidence is not None:
            document = (ROOT / evidence["path"]).read_text(encoding="utf-8")
            assert document[evidence["file_start"]:evidence["file_end"]] == evidence["text"]
            assert evidence["line"] == document.count("\n", 0, evidence["file_start"]) + 1


def test_ask_questions_writes_json_lines() -> None:
    result = run("ask", "--questions", "examples/questions.txt", "--docs", "examples/docs",
                 "--max-new-tokens", "24", "--quiet")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    answers = [json.loads(line) for line in result.stdout.splitlines()]
    assert [a["line"] for a in answers] == [1, 2, 3]
    for answer in answers:
        check_markers(answer["text"], len(answer["sources"]))


def test_ask_stream_via_python_dash_m() -> None:
    result = run("ask", "Who was the commander of Apollo 11?", "--docs", "examples/docs",
                 "--stream", "--max-new-tokens", "32", "--quiet", module=True)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""  # --quiet
    answer, _, references = result.stdout.partition("\n\nReferences:\n")
    assert answer.strip()
    numbers = check_markers(answer, 3)
    if numbers:
        assert all("examples/docs/" in line or line.startswith("    line ")
                   for line in references.splitlines())


# Each subprocess pays the import of torch and transformers; the unit tests cover the other
# bad inputs (empty folder, binary file, empty question, usage errors) through the same main().
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["ask", QUESTION, "--docs", "no/such/folder"], "does not exist"),
        (["ask", QUESTION, "--docs", "examples/docs", "--model", "./no-such-model"],
         "model folder './no-such-model' does not exist"),
        (["ask", QUESTION, "--docs", "examples/docs", "--device", "banana"],
         "device 'banana' is not a torch device"),
    ],
)
def test_bad_input_exits_2_without_traceback(args: list[str], message: str) -> None:
    result = run(*args, timeout=120)
    assert result.returncode == 2
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    assert "citeformer: error: " in result.stderr and message in result.stderr


UNNEEDED = ("citeformer.server", "sentence_transformers", "scipy", "sklearn", "pandas",
            "transformers.pipelines")
"""What a run with the embedded model over local documents loads none of."""


def test_ask_imports_nothing_it_does_not_need() -> None:
    """Both models load on transformers alone; nothing of the server's path without --server.

    httpx is loaded all the same: transformers imports the HF hub client, which is built on it.
    """
    code = (
        "import json, sys\n"
        "from citeformer.app.cli import main\n"
        f"status = main(['ask', {QUESTION!r}, '--docs', 'examples/docs', '--no-index-cache',\n"
        "               '--max-new-tokens', '8', '--quiet'])\n"
        "print(json.dumps([status, sorted(sys.modules)]))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                            text=True, timeout=300, encoding="utf-8")
    assert result.returncode == 0, result.stderr
    status, modules = json.loads(result.stdout.splitlines()[-1])
    assert status == 0, result.stderr
    assert "torch" in modules and "citeformer.evidence.embeddings" in modules  # it ran both
    assert [name for name in UNNEEDED if name in modules] == []
