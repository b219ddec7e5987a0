"""What ``CitationRunnable`` accepts, and how one input becomes a ``GenerationRequest``."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from langchain_core.documents import Document
from langchain_core.messages import BaseMessage
from pydantic import BaseModel, ConfigDict, Field

from citeformer.errors import (
    EmptyQuestionError,
    InputTypeError,
    InvalidInputError,
    NoSourcesError,
)
from citeformer.integration import (
    EmptySources,
    call_request,
    history_turn,
    keep_with_text,
    short,
)
from citeformer.types import TITLE_KEYS, Source, title_from

if TYPE_CHECKING:
    from citeformer.request import GenerationRequest

__all__ = [
    "DOCUMENT_KEYS",
    "HISTORY_KEYS",
    "QUESTION_KEYS",
    "CitationInput",
    "document_title",
    "read_history",
    "read_input",
    "to_request",
    "to_sources",
    "to_turns",
]

logger = logging.getLogger(__name__)

QUESTION_KEYS = ("question", "input")
"""Where the question may be: ``"input"`` is the key ``create_retrieval_chain`` uses."""

DOCUMENT_KEYS = ("context", "documents")
"""Where the retrieved documents may be, first match wins."""

HISTORY_KEYS = ("chat_history", "history")
"""Where the earlier turns of a conversation may be, first match wins (the keys
``create_history_aware_retriever`` and ``RunnableWithMessageHistory`` examples use)."""


class CitationInput(BaseModel):
    """The input dict: a question under ``question`` or ``input``, documents under ``context`` or
    ``documents``, earlier turns under ``chat_history`` (or ``history``). Other keys are allowed
    and ignored, so the output of an existing retrieval step can be passed as it is.
    """

    model_config = ConfigDict(extra="allow")

    question: str | None = Field(default=None, description="The question to answer.")
    input: str | None = Field(
        default=None, description="The question, when there is no 'question' key."
    )
    context: list[Document] | None = Field(
        default=None,
        description=(
            "The retrieved documents; a marker [N] cites the N-th (1-based) of those with text."
        ),
    )
    documents: list[Document] | None = Field(
        default=None, description="The retrieved documents, when there is no 'context' key."
    )
    chat_history: list[BaseMessage | tuple[str, str]] | None = Field(
        default=None,
        description=(
            "Earlier turns: HumanMessage/AIMessage, or ('user' | 'assistant', text) pairs; "
            "shown before this turn's documents, without their citation markers."
        ),
    )


def to_request(
    value: object,
    template: GenerationRequest,
    overrides: Mapping[str, Any],
    *,
    title_keys: Sequence[str] = TITLE_KEYS,
    empty_sources: EmptySources = "drop",
) -> tuple[GenerationRequest, list[Document]]:
    """The request for one input, and the documents its sources are, in order.

    The request is ``template`` with the input's question, documents and history, and the call's
    ``overrides`` (checked there, once). The documents are those the model sees: without the
    blank ones when ``empty_sources`` is ``"drop"``, so that source N of the request is always
    document N of the list returned. The question's and the sources' errors name the input's key.
    """
    question, question_key, documents, documents_key = read_input(value)
    kept = keep_with_text(
        documents, _page_content, empty_sources, noun="document", field="page_content",
        label=lambda document: document_title(document, title_keys) or "untitled",
        origin=f" from input[{documents_key!r}]", logger=logger,
    )
    changes = dict(overrides)
    history = read_history(value)
    if history:
        changes["history"] = history
    try:
        request = call_request(template, question, to_sources(kept, title_keys), **changes)
    except EmptyQuestionError as error:
        raise EmptyQuestionError(f"input[{question_key!r}]: {error}") from error
    except NoSourcesError as error:
        if documents:
            raise NoSourcesError(
                f"input[{documents_key!r}] holds no document with text (all "
                f"{len(documents)} have empty page_content and were dropped): {error}"
            ) from error
        raise NoSourcesError(f"input[{documents_key!r}] is an empty list: {error}") from error
    return request, kept


def read_input(value: object) -> tuple[Any, str, list[Document], str]:
    """The question (not yet checked), its key, the documents and their key, or a clear error.

    Raises ``InputTypeError`` (a ``TypeError``) for a value that is not a dict or documents that
    are not a list of ``Document``, and ``InvalidInputError`` for a missing key.
    """
    if not isinstance(value, Mapping):
        raise InputTypeError(
            f"CitationRunnable takes a dict with the question under 'question' (or 'input') and "
            f"the retrieved Documents under 'context' (or 'documents'), got "
            f"{type(value).__name__} {short(value)}; to start from a question string use "
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

    documents = value[documents_key]
    if isinstance(documents, (str, Document)) or not isinstance(documents, Sequence):
        raise InputTypeError(
            f"input[{documents_key!r}] must be a list of Documents (a retriever's output), got "
            f"{type(documents).__name__} {short(documents)}; do not format the documents into "
            "a string before this step, it numbers them itself"
        )
    for number, document in enumerate(documents, start=1):
        if not isinstance(document, Document):
            raise InputTypeError(
                f"input[{documents_key!r}] item {number} is a {type(document).__name__} "
                f"{short(document)}, not a langchain_core.documents.Document; wrap text as "
                "Document(page_content=text)"
            )
    return value[question_key], question_key, list(documents), documents_key


def read_history(value: object) -> list[tuple[str, str]]:
    """The earlier turns of the input as ``(role, text)`` pairs; ``[]`` when there are none.

    A history is a list of ``HumanMessage``/``AIMessage`` (or ``ChatMessage`` with such a role)
    or of ``(role, text)`` pairs, role ``"user"``/``"human"`` or ``"assistant"``/``"ai"``.
    Raises ``InputTypeError`` for anything else, ``InvalidInputError`` for a system or tool
    message and for a turn without text, naming the turn.
    """
    if not isinstance(value, Mapping):
        return []
    key = next((k for k in HISTORY_KEYS if k in value), None)
    if key is None or value[key] is None:
        return []
    return to_turns(value[key], f"input[{key!r}]")


def to_turns(history: object, where: str = "chat_history") -> list[tuple[str, str]]:
    """``history`` (LangChain messages or ``(role, text)`` pairs) as the core's turns."""
    if isinstance(history, (str, bytes, Mapping, BaseMessage)) or not isinstance(
        history, Sequence
    ):
        raise InputTypeError(
            f"{where} must be a list of HumanMessage/AIMessage or of (role, text) pairs, got "
            f"{type(history).__name__} {short(history)}"
        )
    turns = []
    for index, turn in enumerate(history):
        if isinstance(turn, BaseMessage):
            role = turn.role if turn.type == "chat" else turn.type  # type: ignore[attr-defined]
            text: object = str(turn.text)
        elif isinstance(turn, (tuple, list)) and len(turn) == 2:
            role, text = turn
        else:
            raise InputTypeError(
                f"{where}[{index}] is a {type(turn).__name__} {short(turn)}; a turn is a "
                "HumanMessage, an AIMessage or a (role, text) pair"
            )
        turns.append(history_turn(role, text, f"{where}[{index}]"))
    return turns


def document_title(document: Document, title_keys: Sequence[str] = TITLE_KEYS) -> str | None:
    """The first non-blank value among the document's ``title_keys`` metadata, else ``None``."""
    return title_from(document.metadata, title_keys)


def to_sources(
    documents: Sequence[Document], title_keys: Sequence[str] = TITLE_KEYS
) -> list[Source]:
    """citeformer Sources in the same order, so that source N is document N."""
    return [
        Source(text=d.page_content, title=document_title(d, title_keys), metadata=d.metadata)
        for d in documents
    ]


def _page_content(document: Document) -> str:
    return document.page_content
