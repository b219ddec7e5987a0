"""What ``CitationRunnable`` accepts, and how ``Document``s become citeformer Sources."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from langchain_core.documents import Document
from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from citeformer.types import Source

QUESTION_KEYS = ("question", "input")
"""Where the question may be: ``"input"`` is the key ``create_retrieval_chain`` uses."""

DOCUMENT_KEYS = ("context", "documents")
"""Where the retrieved documents may be, first match wins."""

TITLE_KEYS = ("title", "source")
"""Metadata keys a document's title is taken from, first match wins."""


class CitationInput(BaseModel):
    """The input dict: a question under ``question`` or ``input``, documents under ``context`` or
    ``documents``. Other keys (``chat_history``, ...) are allowed and ignored, so the output of an
    existing retrieval step can be passed as it is.
    """

    model_config = ConfigDict(extra="allow")

    question: str | None = Field(default=None, description="The question to answer.")
    input: str | None = Field(
        default=None, description="The question, when there is no 'question' key."
    )
    context: list[Document] | None = Field(
        default=None,
        description="The retrieved documents; a marker [N] cites the N-th (1-based).",
    )
    documents: list[Document] | None = Field(
        default=None, description="The retrieved documents, when there is no 'context' key."
    )


def read_input(value: object) -> tuple[str, list[Document]]:
    """The question and the documents of one input, or a clear error naming what is wrong.

    Raises ``TypeError`` for a value that is not a dict or documents that are not a list of
    ``Document``; citeformer's ``InvalidInputError`` for a missing key, ``EmptyQuestionError`` for
    a question that is not a non-blank string, ``NoSourcesError`` for an empty list and
    ``EmptySourceError`` for a document whose ``page_content`` is blank.
    """
    from citeformer.errors import (
        EmptyQuestionError,
        EmptySourceError,
        InvalidInputError,
        NoSourcesError,
    )

    if not isinstance(value, Mapping):
        raise TypeError(
            f"CitationRunnable takes a dict with the question under 'question' (or 'input') and "
            f"the retrieved Documents under 'context' (or 'documents'), got "
            f"{type(value).__name__} {_short(value)}; to start from a question string use "
            "CitationRunnable.from_retriever(retriever) or "
            '{"context": retriever, "question": RunnablePassthrough()} | CitationRunnable()'
        )
    question_key = next((k for k in QUESTION_KEYS if k in value), None)
    documents_key = next((k for k in DOCUMENT_KEYS if k in value), None)
    if question_key is None or documents_key is None:
        wanted = QUESTION_KEYS if question_key is None else DOCUMENT_KEYS
        raise InvalidInputError(
            f"the input has no {wanted[0]!r} (or {wanted[1]!r}) key; it has "
            f"{sorted(map(str, value))}. Pass {{'question': ..., 'context': [Document, ...]}}"
        )

    question = value[question_key]
    if not isinstance(question, str):
        raise EmptyQuestionError(
            f"input[{question_key!r}] must be the question as a str, got "
            f"{type(question).__name__} {_short(question)}"
        )
    if not question.strip():
        raise EmptyQuestionError(f"input[{question_key!r}] is empty ({question!r}); ask something")

    documents = value[documents_key]
    if isinstance(documents, (str, Document)) or not isinstance(documents, Sequence):
        raise TypeError(
            f"input[{documents_key!r}] must be a list of Documents (a retriever's output), got "
            f"{type(documents).__name__} {_short(documents)}; do not format the documents into "
            "a string before this step, it numbers them itself"
        )
    if not documents:
        raise NoSourcesError(
            f"input[{documents_key!r}] is an empty list: the retriever found nothing, so there "
            "is nothing to cite; check the retriever, or answer 'not found' before this step"
        )
    for number, document in enumerate(documents, start=1):
        if not isinstance(document, Document):
            raise TypeError(
                f"input[{documents_key!r}] item {number} is a {type(document).__name__} "
                f"{_short(document)}, not a langchain_core.documents.Document; wrap text as "
                "Document(page_content=text)"
            )
        if not document.page_content.strip():
            raise EmptySourceError(
                f"input[{documents_key!r}] document {number} "
                f"({document_title(document) or 'untitled'}) has empty page_content; filter "
                "such documents out before this step, since a marker pointing at one could "
                "support nothing"
            )
    return question, list(documents)


def document_title(document: Document) -> str | None:
    """The document's ``title`` metadata, else its ``source``, else ``None``."""
    for key in TITLE_KEYS:
        value = document.metadata.get(key)
        if value is not None and str(value).strip():
            return " ".join(str(value).split())
    return None


def to_sources(documents: Sequence[Document]) -> list[Source]:
    """citeformer Sources in the same order, so that source N is document N."""
    from citeformer.types import Source

    return [
        Source(text=d.page_content, title=document_title(d), metadata=d.metadata)
        for d in documents
    ]


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."
