"""What CitationRunnable accepts: the input dict, titles, blank documents and bad input; offline."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from langchain_core.documents import Document

from citeformer import Source
from citeformer.errors import (
    CiteformerError,
    EmptyQuestionError,
    EmptySourceError,
    InputTypeError,
    InvalidInputError,
    NoSourcesError,
)
from citeformer.integration import settings_template
from citeformer.testing import FakeGenerator
from citeformer.types import TITLE_KEYS
from citeformer_langchain import CitationRunnable
from citeformer_langchain.inputs import document_title, to_request, to_sources
from tests.langchain.common import DOCS, ask, assert_guarantee, best_source


@pytest.fixture
def gen() -> FakeGenerator:
    return FakeGenerator(best_source)


@pytest.fixture
def cite(gen: FakeGenerator) -> CitationRunnable:
    return CitationRunnable(generator=gen, max_new_tokens=48)


# --- titles ---------------------------------------------------------------------------------

def test_titles_come_from_title_then_file_name_then_source() -> None:
    assert TITLE_KEYS == ("title", "file_name", "source")
    both = {"title": "Eiffel", "file_name": "eiffel.txt", "source": "https://example.org/e"}
    assert document_title(Document(page_content="x", metadata=both)) == "Eiffel"
    named = {"file_name": "eiffel.txt", "source": "https://example.org/e"}
    assert document_title(Document(page_content="x", metadata=named)) == "eiffel.txt"
    assert document_title(Document(page_content="x", metadata={"source": "e.md"})) == "e.md"
    assert document_title(Document(page_content="x")) is None
    # Blank values are skipped; white space folds; any value is shown as text.
    blank = {"title": " ", "file_name": None, "source": 7}
    assert document_title(Document(page_content="x", metadata=blank)) == "7"
    spaced = {"title": "The  Eiffel\nTower"}
    assert document_title(Document(page_content="x", metadata=spaced)) == "The Eiffel Tower"


def test_title_keys_can_be_chosen(gen: FakeGenerator) -> None:
    docs = [Document(page_content="Paris is in France.",
                     metadata={"title": "France", "heading": "Capitals"})]
    assert document_title(docs[0], ("heading",)) == "Capitals"
    assert [s.title for s in to_sources(docs, ("heading", "title"))] == ["Capitals"]
    CitationRunnable(generator=gen, title_keys=["heading"]).invoke(ask("France?", docs))
    assert [s.title for s in gen.requests[-1].sources] == ["Capitals"]
    CitationRunnable(generator=gen, title_keys=()).invoke(ask("France?", docs))
    assert [s.title for s in gen.requests[-1].sources] == [None]


def test_documents_become_sources_in_order() -> None:
    sources = to_sources(DOCS)
    assert all(isinstance(s, Source) for s in sources)
    assert [s.text for s in sources] == [d.page_content for d in DOCS]
    assert [s.title for s in sources] == ["France", "de.txt", None]
    assert sources[1].metadata == {"source": "de.txt"}


# --- blank documents ------------------------------------------------------------------------

BLANK = Document(page_content=" \n", metadata={"title": "Empty page"})


def test_blank_documents_are_dropped_with_a_warning_and_never_numbered(
    cite: CitationRunnable, gen: FakeGenerator, caplog: pytest.LogCaptureFixture
) -> None:
    given = [BLANK, DOCS[0], Document(page_content=""), DOCS[2]]
    with caplog.at_level(logging.WARNING, logger="citeformer_langchain"):
        answer = cite.invoke(ask("capital of Spain?", given))
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        "dropping document 1 of 4 (Empty page) from input['context']: its page_content is empty",
        "dropping document 3 of 4 (untitled) from input['context']: its page_content is empty",
    ]
    # [N] is the N-th document the model saw, and the answer lists exactly those.
    assert [s.text for s in gen.requests[-1].sources] == [DOCS[0].page_content,
                                                         DOCS[2].page_content]
    assert answer.documents == [DOCS[0], DOCS[2]]
    assert answer.text == "Madrid is the capital of Spain [2]."
    assert answer.citations[0].document is DOCS[2]
    assert_guarantee(answer, [DOCS[0], DOCS[2]])
    chunks = list(cite.stream(ask("capital of Spain?", given)))
    assert chunks[-1].documents == [DOCS[0], DOCS[2]]
    assert chunks[-1].citations[0].document is DOCS[2]


def test_only_blank_documents_is_no_sources(cite: CitationRunnable, gen: FakeGenerator) -> None:
    with pytest.raises(NoSourcesError, match=r"input\['context'\] holds no document with text "
                                             r"\(all 2 have empty page_content"):
        cite.invoke(ask("Why?", [BLANK, Document(page_content="")]))
    assert gen.requests == []


def test_blank_documents_raise_when_asked(gen: FakeGenerator) -> None:
    strict = CitationRunnable(generator=gen, empty_sources="raise")
    with pytest.raises(EmptySourceError,
                       match=r"document 2 of 2 \(untitled\) from input\['context'\] has empty "
                             r"page_content; .*empty_sources='drop'"):
        strict.invoke(ask("Why?", [DOCS[0], Document(page_content="")]))
    with pytest.raises(EmptySourceError,
                       match="document 1 of 1 \\(Empty page\\) from input\\['documents'\\]"):
        strict.invoke({"input": "Why?", "documents": [BLANK]})
    assert gen.requests == []


def test_to_request_returns_the_documents_the_sources_are() -> None:
    template = settings_template({"policy": "auto"})
    request, documents = to_request(ask("Spain?", [BLANK, *DOCS]), template, {"max_new_tokens": 9})
    assert documents == DOCS
    assert [s.text for s in request.sources] == [d.page_content for d in DOCS]
    assert (request.question, request.max_new_tokens, request.policy.value) == ("Spain?", 9,
                                                                               "auto")


# --- bad input ------------------------------------------------------------------------------

BAD_INPUTS: list[tuple[str, Any, type[Exception], str]] = [
    ("not a dict", "What is the capital?", TypeError, "takes a dict"),
    ("documents only", {"context": DOCS}, InvalidInputError, "no 'question' \\(or 'input'\\)"),
    ("question only", {"question": "Why?"}, InvalidInputError, "no 'context' \\(or 'documents'\\)"),
    ("empty documents", ask("Why?", []), NoSourcesError, "is an empty list"),
    ("context as str", {"question": "Why?", "context": "Paris."}, TypeError, "list of Documents"),
    ("context None", {"question": "Why?", "context": None}, TypeError, "got NoneType"),
    ("one Document", {"question": "Why?", "context": DOCS[0]}, TypeError, "list of Documents"),
    ("str item", ask("Why?", [DOCS[0], "Berlin."]), TypeError, "item 2 is a str"),
    ("dict item", ask("Why?", [{"page_content": "x"}]), TypeError, "item 1 is a dict"),
    ("only blank page_content", ask("Why?", [Document(page_content=" \n")]), NoSourcesError,
     "no document with text"),
    ("question int", ask(42), EmptyQuestionError,
     "input\\['question'\\]: the question must be a string, got int"),
    ("question None", {"input": None, "context": DOCS}, EmptyQuestionError,
     "input\\['input'\\]: .*got NoneType"),
    ("question blank", ask("  "), EmptyQuestionError, "input\\['question'\\]: .*is empty"),
]


@pytest.mark.parametrize(("value", "error", "message"),
                         [case[1:] for case in BAD_INPUTS], ids=[case[0] for case in BAD_INPUTS])
def test_bad_input_is_a_clear_error(cite: CitationRunnable, gen: FakeGenerator,
                                    value: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message) as caught:
        cite.invoke(value)
    assert isinstance(caught.value, CiteformerError)
    with pytest.raises(error, match=message):
        list(cite.stream(value))
    with pytest.raises(error, match=message):
        asyncio.run(cite.ainvoke(value))

    async def drain() -> None:
        async for _ in cite.astream(value):
            pass

    with pytest.raises(error, match=message):
        asyncio.run(drain())
    assert gen.requests == []  # rejected before any generation


STRICT_BAD_INPUTS: list[tuple[str, Any, str]] = [
    ("empty page_content", ask("Why?", [DOCS[0], Document(page_content="")]),
     "document 2 of 2 \\(untitled\\) from input\\['context'\\] has empty page_content"),
    ("blank page_content", ask("Why?", [Document(page_content=" \n", metadata={"title": "T"})]),
     "document 1 of 1 \\(T\\)"),
]


@pytest.mark.parametrize(("value", "message"), [case[1:] for case in STRICT_BAD_INPUTS],
                         ids=[case[0] for case in STRICT_BAD_INPUTS])
def test_blank_documents_with_empty_sources_raise(gen: FakeGenerator, value: Any,
                                                 message: str) -> None:
    cite = CitationRunnable(generator=gen, empty_sources="raise")
    with pytest.raises(EmptySourceError, match=message):
        cite.invoke(value)
    with pytest.raises(EmptySourceError, match=message):
        asyncio.run(cite.ainvoke(value))
    assert gen.requests == []


def test_type_errors_are_citeformer_errors(cite: CitationRunnable) -> None:
    with pytest.raises(InputTypeError):
        cite.invoke("What is the capital?")  # type: ignore[arg-type]
    with pytest.raises(InputTypeError):
        cite.invoke(ask("Why?", [DOCS[0], "Berlin."]))  # type: ignore[list-item]
    with pytest.raises(InputTypeError, match="unknown generation option"):
        cite.invoke(ask("Why?"), max_tokens=3)
