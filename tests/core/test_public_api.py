"""The public surface: names other issues and outside checks rely on."""

from __future__ import annotations

import subprocess
import sys

import citeformer
from citeformer import Citation, CitedAnswer, Policy, Source


def test_all_lists_the_public_names() -> None:
    expected = {
        "Source", "Policy", "build_grammar", "parse_citations", "scan_markers", "Citation",
        "CiteGenerator", "CitedAnswer", "AnswerStream", "MarkerScan",
        "ServerGenerator", "ServerAnswerStream", "AsyncServerAnswerStream", "AnswerGenerator",
        "ServerError", "ServerConnectionError", "ServerResponseError", "ServerIgnoredGrammarError",
    }
    assert expected <= set(citeformer.__all__)
    assert all(hasattr(citeformer, name) for name in citeformer.__all__)


def test_import_does_not_pull_in_frameworks() -> None:
    code = (
        "import sys, citeformer; "
        "bad = [m for m in sys.modules if m.startswith(('langchain', 'llama_index'))]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_policy_members() -> None:
    assert {p.name for p in Policy} == {"REQUIRED", "QUOTES_ONLY", "AUTO"}


def test_cited_answer_to_dict_is_plain() -> None:
    import json

    answer = CitedAnswer(
        text="Paris [1].",
        citations=(Citation(1, 6, 9),),
        sources=(Source("Paris is in France.", title="France", metadata={"path": "a.md"}),),
        finish_reason="stop",
    )
    data = json.loads(json.dumps(answer.to_dict()))
    assert data["citations"] == [{"source_id": 1, "start": 6, "end": 9, "evidence": None}]
    assert data["sources"][0] == {
        "id": 1, "title": "France", "text": "Paris is in France.", "metadata": {"path": "a.md"}
    }
    assert answer.source_for(answer.citations[0]).title == "France"
    assert answer.cited_ids == [1]


def test_both_generators_are_answer_generators() -> None:
    from citeformer import AnswerGenerator, CiteGenerator, ServerGenerator

    assert isinstance(ServerGenerator("http://localhost:8080"), AnswerGenerator)
    for name in ("generate", "stream", "answer", "answer_stream"):
        assert callable(getattr(CiteGenerator, name))
    assert issubclass(citeformer.ServerIgnoredGrammarError, citeformer.GrammarViolationError)
    assert issubclass(citeformer.ServerConnectionError, citeformer.CiteformerError)
