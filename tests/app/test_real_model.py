"""``citeformer ask`` in this process with the embedded model and real embeddings: many questions
in one batched run, and a PDF whose passages are cited by page."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

import pytest

from citeformer import AnswerGenerator, CitedAnswer, CiteGenerator, GenerationRequest
from citeformer.app import Services, main
from citeformer.app.pdf_text import PAGE_BREAK
from citeformer.request import AnswerChunks
from tests.app.conftest import EXAMPLES
from tests.app.pdfs import needs_pypdf, text_pdf

pytestmark = pytest.mark.integration

MARKER = re.compile(r"\[(\d+)\]")
QUESTIONS = EXAMPLES.parent / "questions.txt"


class Recording:
    """The embedded model, counting the requests of each batched call."""

    def __init__(self, generator: CiteGenerator) -> None:
        self.generator = generator
        self.batches: list[int] = []

    def answer(self, request: GenerationRequest) -> CitedAnswer:
        return self.generator.answer(request)

    def answer_stream(self, request: GenerationRequest) -> AnswerChunks:
        return self.generator.answer_stream(request)

    def answer_batch(
        self, requests: Sequence[GenerationRequest], *, batch_size: int = 8
    ) -> list[CitedAnswer]:
        self.batches.append(len(requests))
        return self.generator.answer_batch(requests, batch_size=batch_size)


@pytest.fixture
def model(default_generator: CiteGenerator) -> Recording:
    return Recording(default_generator)


def services_of(generator: AnswerGenerator) -> Services:
    def load(name: str | None, *, progress: bool, **_: object) -> AnswerGenerator:
        return generator

    return Services(load_model=load)


def check_answer(answer: dict) -> None:
    """Markers in range, and every citation's evidence found where it says, in its file."""
    numbers = [int(k) for k in MARKER.findall(answer["text"])]
    assert all(1 <= k <= len(answer["sources"]) for k in numbers), answer["text"]
    assert [c["source_id"] for c in answer["citations"]] == numbers
    for citation in answer["citations"]:
        evidence = citation["evidence"]
        if evidence is None:
            continue
        source = answer["sources"][citation["source_id"] - 1]
        assert source["text"][evidence["source_start"]:evidence["source_end"]] == evidence["text"]
        assert evidence["path"] == source["path"]


def test_three_questions_in_one_batch(model: Recording, capsys) -> None:
    code = main(["ask", "--questions", str(QUESTIONS), "--docs", str(EXAMPLES),
                 "--max-new-tokens", "40", "--batch-size", "3", "-q"],
                services=services_of(model))
    captured = capsys.readouterr()
    assert code == 0, captured.err
    answers = [json.loads(line) for line in captured.out.splitlines()]
    questions = QUESTIONS.read_text(encoding="utf-8").splitlines()
    assert [(a["line"], a["question"]) for a in answers] == list(enumerate(questions, start=1))
    assert model.batches == [3]
    expected = ["eiffel_tower.md", "apollo_11.md", "honey_bee.md"]
    for answer, name in zip(answers, expected, strict=True):
        check_answer(answer)
        assert Path(answer["sources"][0]["path"]).name == name  # retrieved for its question
        for citation in answer["citations"]:
            evidence = citation["evidence"]
            if evidence is not None:
                document = Path(evidence["path"]).read_text(encoding="utf-8")
                assert document[evidence["file_start"]:evidence["file_end"]] == evidence["text"]


def test_the_readmes_off_topic_question_is_refused_over_the_examples(
    model: Recording, capsys
) -> None:
    # README.md: real retrieval over examples/docs; no passage holds the capital of Peru.
    code = main(["ask", "What is the capital of Peru?", "--docs", str(EXAMPLES), "--json", "-q"],
                services=services_of(model))
    captured = capsys.readouterr()
    assert code == 0, captured.err
    answer = json.loads(captured.out)
    assert answer["abstained"] is True and answer["citations"] == []
    assert answer["text"] == "The sources do not answer this question."
    assert answer["generated_tokens"] == 0  # no model ran for it
    code = main(["ask", "When was the Eiffel Tower completed?", "--docs", str(EXAMPLES), "--json",
                 "--max-new-tokens", "40", "-q"], services=services_of(model))
    answered = json.loads(capsys.readouterr().out)
    assert code == 0 and answered["abstained"] is False and answered["citations"]
    assert "1889" in answered["text"]
    # README.md: the embedded model chains ", but it was actually finished on 1889" onto the
    # supported claim unless the clause-end lever cites it where it is complete.
    assert ", but" not in answered["text"], answered["text"]


@needs_pypdf
def test_a_pdf_is_answered_with_its_pages(model: Recording, tmp_path, capsys) -> None:
    eiffel = (EXAMPLES / "eiffel_tower.md").read_text(encoding="utf-8").split("\n\n")
    apollo = (EXAMPLES / "apollo_11.md").read_text(encoding="utf-8").split("\n\n")
    # One paragraph per page, lines wrapped as a PDF lays them out.
    pages = [_wrap(p.lstrip("# ")) for p in [*eiffel[:3], *apollo[:2]]]
    pdf = tmp_path / "towers_and_moon.pdf"
    pdf.write_bytes(text_pdf(pages))
    extracted = PAGE_BREAK.join(pages)
    argv = ["ask", "When was the Eiffel Tower completed?", "--docs", str(pdf),
            "--max-new-tokens", "40", "--chunk-chars", "400", "-k", "2", "-q"]
    code = main([*argv, "--json"], services=services_of(model))
    captured = capsys.readouterr()
    assert code == 0, captured.err
    answer = json.loads(captured.out)
    check_answer(answer)
    completed = re.search(r"completed\s+on\s+31", extracted).start()  # wrapped anywhere
    (found,) = [s for s in answer["sources"] if s["start"] <= completed < s["end"]]
    assert found["page"] == 3  # the page that says it was retrieved, and named
    for source in answer["sources"]:
        assert extracted[source["start"]:source["end"]] == source["text"]
        assert source["page"] == 1 + sum(start <= source["start"] for start in _starts(pages)[1:])
        last = source["end"] - 1
        assert source["page_end"] == 1 + sum(start <= last for start in _starts(pages)[1:])
    for citation in answer["citations"]:
        evidence = citation["evidence"]
        if evidence is not None:
            assert extracted[evidence["file_start"]:evidence["file_end"]] == evidence["text"]
            on_page = sum(start <= evidence["file_start"] for start in _starts(pages))
            assert evidence["page"] == on_page

    code = main(argv, services=services_of(model))
    out = capsys.readouterr().out
    refs = [line for line in out.split("References:\n")[1].splitlines() if line.startswith("[")]
    for line in refs:
        k = int(line[1:line.index("]")])
        first, last = answer["sources"][k - 1]["page"], answer["sources"][k - 1]["page_end"]
        pages_shown = f"page {first}" if first == last else f"pages {first}-{last}"
        assert line == f"[{k}] {pdf}, {pages_shown}"  # a passage across a break names both


def _wrap(paragraph: str, width: int = 90) -> str:
    lines, line = [], ""
    for word in paragraph.split():
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}".strip()
    return "\n".join([*lines, line])


def _starts(pages: list[str]) -> list[int]:
    starts, position = [], 0
    for page in pages:
        starts.append(position)
        position += len(page) + len(PAGE_BREAK)
    return starts
