"""The LangChain answer types: CitationAnswer, its chunks and its plain dict; offline."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from langchain_core.documents import Document

from citeformer import CitedAnswer, build_request, parse_citations
from citeformer.answers import cited_answer
from citeformer.grammar.quotes import find_quotes
from citeformer_langchain import CitationAnswer, CitationAnswerChunk, DocumentCitation
from citeformer_langchain.inputs import to_sources
from tests.langchain.common import answer_fields


def cited(text: str, documents: list[Document]) -> CitedAnswer:
    sources = tuple(to_sources(documents))
    return CitedAnswer(text, tuple(parse_citations(text, len(sources))), sources, "stop", 50, 9)


DOCS = [
    Document(page_content="The Eiffel Tower is in Paris.",
             metadata={"title": "Eiffel *Tower*", "source": "https://example.org/eiffel"}),
    Document(page_content="Big Ben is in London.", metadata={"source": "notes/big_ben.md"}),
    Document(page_content="The Colosseum   is in\nRome, and it is very old indeed, older than "
                          "both of the others by far, by about eighteen centuries.", id="c1"),
]


@given(
    n_documents=st.integers(min_value=1, max_value=12),
    picks=st.lists(st.integers(min_value=0, max_value=10_000), max_size=8),
)
def test_every_citation_points_at_the_right_document(n_documents: int, picks: list[int]) -> None:
    documents = [Document(page_content=f"fact {i}", metadata={"i": i}) for i in range(n_documents)]
    ids = [p % n_documents + 1 for p in picks]
    text = " ".join(f"Claim [{i}]." for i in ids)
    answer = CitationAnswer.from_cited_answer(cited(text, documents), documents)
    assert [c.source_id for c in answer.citations] == ids
    for citation in answer.citations:
        assert 1 <= citation.source_id <= len(documents)
        assert citation.document is documents[citation.source_id - 1]
        assert citation.document.metadata["i"] == citation.source_id - 1
        assert answer.text[citation.start:citation.end] == f"[{citation.source_id}]"
    assert answer.cited_ids == list(dict.fromkeys(ids))


def test_from_cited_answer_refuses_a_document_count_mismatch() -> None:
    from citeformer.errors import InvalidInputError

    with pytest.raises(InvalidInputError, match="2 sources but 1 documents"):
        CitationAnswer.from_cited_answer(cited("A [1].", DOCS[:2]), DOCS[:1])


def quoted() -> CitedAnswer:
    text = 'The Colosseum "is in Rome" [3], "older than both" [3].'
    sources = tuple(to_sources(DOCS))
    return CitedAnswer(text, tuple(parse_citations(text, 3)), sources, "stop", 50, 9,
                       quotes=find_quotes(text, sources))


def test_quotes_point_into_their_documents() -> None:
    core = quoted()
    answer = CitationAnswer.from_cited_answer(core, DOCS)
    assert [q.text for q in answer.quotes] == ["is in Rome", "older than both"]
    first = answer.quotes[0]
    assert first.document is DOCS[2]
    assert first.document.page_content[first.source_start:first.source_end] == "is in\nRome"
    assert answer.text[first.start:first.end] == "is in Rome"
    plain = json.loads(json.dumps(answer.to_dict()))
    assert plain["quotes"][1]["text"] == "older than both"
    assert "document" not in plain["quotes"][0]
    whole = CitationAnswerChunk(text="The ") + CitationAnswerChunk.from_cited_answer(core, DOCS)
    assert whole.quotes == answer.quotes


def test_to_dict_is_plain_json() -> None:
    answer = CitationAnswer.from_cited_answer(cited("Rome [3]. Paris [1].", DOCS), DOCS)
    data = answer.to_dict()
    assert json.loads(json.dumps(data)) == data
    assert data["citations"] == [{"source_id": 3, "start": 5, "end": 8, "evidence": None},
                                 {"source_id": 1, "start": 16, "end": 19, "evidence": None}]
    assert data["documents"][2]["id"] == "c1" and data["documents"][2]["source_id"] == 3
    assert data["prompt_tokens"] == 50 and data["generated_tokens"] == 9


def test_to_dict_is_the_core_dict_with_documents_for_sources() -> None:
    core = quoted()
    data = CitationAnswer.from_cited_answer(core, DOCS).to_dict()
    expected = core.to_dict()
    del expected["sources"]
    documents = data.pop("documents")
    assert data == expected  # citations and quotes exactly as the core writes them
    assert documents == [
        {"source_id": i, "id": d.id, "page_content": d.page_content, "metadata": d.metadata}
        for i, d in enumerate(DOCS, start=1)
    ]
    partial = CitationAnswerChunk(text="The ").to_dict()
    assert partial["finish_reason"] is None and partial["documents"] == []


def test_evidence_spans_point_into_the_page_content() -> None:
    documents = [Document(page_content="Rome is old. The Colosseum is in Rome.")]
    request = build_request("Where is the Colosseum?", to_sources(documents))
    core = cited_answer(request, "The Colosseum is in Rome [1].", "stop",
                        prompt_tokens=9, generated_tokens=8)
    answer = CitationAnswer.from_cited_answer(core, documents)
    (citation,) = answer.citations
    span = citation.evidence
    assert span is not None and span == core.citations[0].evidence
    assert citation.document.page_content[span.source_start:span.source_end] == span.text
    assert answer.to_dict()["citations"] == core.to_dict()["citations"]
    assert json.loads(json.dumps(answer.to_dict()))["citations"][0]["evidence"]["text"] == (
        span.text
    )


def test_citation_is_immutable() -> None:
    citation = DocumentCitation(source_id=1, start=0, end=3, document=DOCS[0])
    with pytest.raises(ValueError, match="frozen"):
        citation.source_id = 2  # type: ignore[misc]
    with pytest.raises(ValueError):
        DocumentCitation(source_id=0, start=0, end=3, document=DOCS[0])


def test_chunks_add_up_to_the_answer() -> None:
    answer = CitationAnswer.from_cited_answer(cited("In Paris [1].", DOCS), DOCS)
    final = CitationAnswerChunk.from_cited_answer(cited("In Paris [1].", DOCS), DOCS)
    chunks = [CitationAnswerChunk(text="In"), CitationAnswerChunk(text=" Paris"),
              final.model_copy(update={"content": " [1]."})]
    total = chunks[0] + chunks[1] + chunks[2]
    assert isinstance(total, CitationAnswerChunk)
    assert answer_fields(total) == answer_fields(answer)
    with pytest.raises(TypeError):
        chunks[0] + "text"  # type: ignore[operator]


def test_last_chunk_holds_what_the_others_did_not_show() -> None:
    core = cited("In Paris [1].", DOCS)
    last = CitationAnswerChunk.last(core, DOCS, shown="In Paris")
    assert last.text == " [1]." and last.finish_reason == "stop"
    total = CitationAnswerChunk(text="In") + CitationAnswerChunk(text=" Paris") + last
    assert answer_fields(total) == answer_fields(CitationAnswer.from_cited_answer(core, DOCS))
    assert CitationAnswerChunk.last(core, DOCS, shown="In Paris [1].").text == ""


def test_an_answer_keeps_the_core_answer_it_came_from() -> None:
    core = quoted()
    answer = CitationAnswer.from_cited_answer(core, DOCS)
    assert answer.cited_answer is core
    last = CitationAnswerChunk.last(core, DOCS, shown="The Colosseum ")
    whole = CitationAnswerChunk(text="The Colosseum ") + last
    assert whole.cited_answer is core  # the chunks add up to the very answer
    # A chunk that is not all of the answer, or an answer built by hand, stands for itself.
    assert last.cited_answer is not core and last.cited_answer.text == last.text
    by_hand = CitationAnswer(text="Rome [1].", documents=DOCS[2:])
    assert by_hand.cited_answer.text == "Rome [1]."
    assert [s.text for s in by_hand.cited_answer.sources] == [DOCS[2].page_content]


def test_runnable_answers_keep_what_the_model_was_shown() -> None:
    from citeformer.testing import FakeGenerator
    from citeformer_langchain import CitationRunnable

    fake = FakeGenerator("It is in Paris [1].")
    cite = CitationRunnable(generator=fake, title_keys=("source",))
    answer = cite.invoke({"question": "Where?", "context": DOCS[:1]})
    assert answer.cited_answer.sources == fake.requests[-1].sources
    assert answer.cited_answer.sources[0].title == "https://example.org/eiffel"
    chunks = list(cite.stream({"question": "Where?", "context": DOCS[:1]}))
    total = chunks[0]
    for chunk in chunks[1:]:
        total = total + chunk
    assert total.cited_answer.sources == fake.requests[-1].sources
