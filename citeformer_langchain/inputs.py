"""What ``CitationRunnable`` accepts, and how one input becomes a ``GenerationRequest``."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from langchain_core.documents import Document
from langchain_core.messages import BaseMessage
from pydantic import BaseModel, ConfigDict, Field

from citeformer.types import TITLE_KEYS, title_from

if TYPE_CHECKING:
    from citeformer.request import GenerationRequest
    from citeformer.types import Policy, Source

logger = logging.getLogger(__name__)

QUESTION_KEYS = ("question", "input")
"""Where the question may be: ``"input"`` is the key ``create_retrieval_chain`` uses."""

DOCUMENT_KEYS = ("context", "documents")
"""Where the retrieved documents may be, first match wins."""

HISTORY_KEYS = ("chat_history", "history")
"""Where the earlier turns of a conversation may be, first match wins (the keys
``create_history_aware_retriever`` and ``RunnableWithMessageHistory`` examples use)."""

_ROLES = {"user": "user", "human": "user", "assistant": "assistant", "ai": "assistant"}
"""Roles of the history and the core's role for each (LangChain's aliases included)."""

EmptySources = Literal["drop", "raise"]
"""What to do with a document whose ``page_content`` is blank: leave it out (logged) or raise."""


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
    policy: Policy | str,
    options: Mapping[str, Any],
    *,
    title_keys: Sequence[str] = TITLE_KEYS,
    empty_sources: EmptySources = "drop",
) -> tuple[GenerationRequest, list[Document]]:
    """The checked request for one input, and the documents its sources are, in order.

    The documents are those the model sees: without the blank ones when ``empty_sources`` is
    ``"drop"``, so that source N of the request is always document N of the list returned.
    ``build_request`` checks the question and the sources; its errors name the input's key.
    """
    from citeformer.errors import EmptyQuestionError, NoSourcesError
    from citeformer.request import build_request

    question, question_key, documents, documents_key = read_input(value)
    kept = _with_text(documents, documents_key, title_keys, empty_sources)
    history = read_history(value)
    if history:
        options = {**options, "history": history}
    try:
        request = build_request(question, to_sources(kept, title_keys), policy, **options)
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
    from citeformer.errors import InputTypeError, InvalidInputError

    if not isinstance(value, Mapping):
        raise InputTypeError(
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

    documents = value[documents_key]
    if isinstance(documents, (str, Document)) or not isinstance(documents, Sequence):
        raise InputTypeError(
            f"input[{documents_key!r}] must be a list of Documents (a retriever's output), got "
            f"{type(documents).__name__} {_short(documents)}; do not format the documents into "
            "a string before this step, it numbers them itself"
        )
    for number, document in enumerate(documents, start=1):
        if not isinstance(document, Document):
            raise InputTypeError(
                f"input[{documents_key!r}] item {number} is a {type(document).__name__} "
                f"{_short(document)}, not a langchain_core.documents.Document; wrap text as "
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
    from citeformer.errors import InputTypeError, InvalidInputError

    if isinstance(history, (str, bytes, Mapping, BaseMessage)) or not isinstance(
        history, Sequence
    ):
        raise InputTypeError(
            f"{where} must be a list of HumanMessage/AIMessage or of (role, text) pairs, got "
            f"{type(history).__name__} {_short(history)}"
        )
    turns = []
    for index, turn in enumerate(history):
        if isinstance(turn, BaseMessage):
            kind = turn.role if turn.type == "chat" else turn.type  # type: ignore[attr-defined]
            text: object = str(turn.text)
        elif isinstance(turn, (tuple, list)) and len(turn) == 2:
            kind, text = turn
        else:
            raise InputTypeError(
                f"{where}[{index}] is a {type(turn).__name__} {_short(turn)}; a turn is a "
                "HumanMessage, an AIMessage or a (role, text) pair"
            )
        role = _ROLES.get(str(kind).lower()) if isinstance(kind, str) else None
        if role is None:
            advice = (
                "the citation instructions are the one system message: pass instructions= to "
                "replace them, and leave system messages out of the history"
                if kind == "system" else "keep only the user's and the assistant's turns"
            )
            raise InvalidInputError(
                f"{where}[{index}] is a {kind!r} turn; a history holds 'user' (human) and "
                f"'assistant' (ai) turns only: {advice}"
            )
        if not isinstance(text, str) or not text.strip():
            raise InvalidInputError(
                f"{where}[{index}] ({role}) has no text ({_short(text)}); drop empty turns"
            )
        turns.append((role, text))
    return turns


def document_title(document: Document, title_keys: Sequence[str] = TITLE_KEYS) -> str | None:
    """The first non-blank value among the document's ``title_keys`` metadata, else ``None``."""
    return title_from(document.metadata, title_keys)


def to_sources(
    documents: Sequence[Document], title_keys: Sequence[str] = TITLE_KEYS
) -> list[Source]:
    """citeformer Sources in the same order, so that source N is document N."""
    from citeformer.types import Source

    return [
        Source(text=d.page_content, title=document_title(d, title_keys), metadata=d.metadata)
        for d in documents
    ]


def _with_text(
    documents: list[Document],
    key: str,
    title_keys: Sequence[str],
    empty_sources: EmptySources,
) -> list[Document]:
    # A marker pointing at a blank document could support nothing, so it never gets a number.
    from citeformer.errors import EmptySourceError

    kept = []
    for number, document in enumerate(documents, start=1):
        if document.page_content.strip():
            kept.append(document)
            continue
        title = document_title(document, title_keys) or "untitled"
        if empty_sources == "raise":
            raise EmptySourceError(
                f"input[{key!r}] document {number} ({title}) has empty page_content; filter "
                "such documents out before this step, or pass empty_sources='drop' to leave "
                "them out, since a marker pointing at one could support nothing"
            )
        logger.warning(
            "dropping document %d of %d (%s) from input[%r]: its page_content is empty",
            number, len(documents), title, key,
        )
    return kept


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."
