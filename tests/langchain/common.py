"""What the LangChain tests share: documents, inputs, a script for FakeGenerator, the guarantee."""

from __future__ import annotations

import re
from typing import Any

from langchain_core.documents import Document

from citeformer.request import GenerationRequest
from citeformer_langchain import CitationAnswer

WORD = re.compile(r"[a-z]+")

DOCS = [
    Document(page_content="Paris is the capital of France.", metadata={"title": "France"}),
    Document(page_content="Berlin is the capital of Germany.", metadata={"source": "de.txt"}),
    Document(page_content="Madrid is the capital of Spain.", metadata={}),
]


def best_source(request: GenerationRequest) -> str:
    """Repeats the source sharing most words with the question, citing it: each question gets a
    recognisably different answer."""
    words = set(WORD.findall(request.question.lower()))
    sources = request.sources
    best = max(
        range(len(sources)),
        key=lambda i: (len(words & set(WORD.findall(sources[i].text.lower()))), -i),
    )
    return f"{sources[best].text.rstrip('.')} [{best + 1}]."


def ask(question: Any, docs: list[Document] | None = None) -> dict[str, Any]:
    return {"question": question, "context": DOCS if docs is None else docs}


def assert_guarantee(answer: CitationAnswer, documents: list[Document]) -> None:
    assert answer.documents == documents
    for citation in answer.citations:
        assert 1 <= citation.source_id <= len(documents)
        assert citation.document is answer.documents[citation.source_id - 1]
        assert answer.text[citation.start:citation.end] == f"[{citation.source_id}]"


CHUNK_ONLY = {"type", "chunk_position", "tool_call_chunks"}
"""What an ``AIMessageChunk`` has beyond the ``AIMessage`` it adds up to."""


def answer_fields(answer: CitationAnswer) -> dict[str, Any]:
    """The fields of an answer or of its chunks' sum, but for those only a chunk has."""
    return {k: v for k, v in answer.model_dump().items() if k not in CHUNK_ONLY}
