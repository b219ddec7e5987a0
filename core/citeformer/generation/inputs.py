"""The checks of what a caller hands a generator: the question, the sources, earlier turns.

Every string from outside (question, sources, titles, metadata, history) is checked here, each
error naming the bad value and what to do about it. ``citeformer.request`` re-exports them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from citeformer.errors import (
    EmptyQuestionError,
    EmptySourceError,
    InputTypeError,
    InvalidInputError,
    NoSourcesError,
)
from citeformer.grammar.markers import strip_markers
from citeformer.types import Source

__all__ = [
    "ROLES",
    "SourceLike",
    "check_encodable",
    "check_history",
    "check_question",
    "normalize_sources",
]

SourceLike = Source | str
"""A source as a caller may give it: a ``Source``, or its text."""

ROLES = ("user", "assistant")
"""The roles of an earlier turn."""


def normalize_sources(sources: Sequence[SourceLike]) -> tuple[Source, ...]:
    """Turn a list of ``Source`` or strings into Sources, rejecting what cannot be cited."""
    if isinstance(sources, (str, Source)) or not isinstance(sources, Sequence):
        raise InputTypeError(
            f"sources must be a list of Source or str, got {type(sources).__name__}; "
            "wrap a single passage in a list"
        )
    if not sources:
        raise NoSourcesError(
            "no sources were given, so there is nothing to cite; retrieve at least one passage"
        )
    normalized = []
    for position, item in enumerate(sources, start=1):
        source = Source(item) if isinstance(item, str) else item
        if not isinstance(source, Source):
            raise InputTypeError(
                f"source {position} is a {type(item).__name__}; pass Source objects or strings"
            )
        if not isinstance(source.text, str) or not source.text.strip():
            raise EmptySourceError(
                f"source {position} ({source.title or 'untitled'}) has empty text; "
                "drop it before calling, since a marker pointing at it could support nothing"
            )
        check_encodable(f"source {position}'s text", source.text)
        if isinstance(source.title, str):
            check_encodable(f"source {position}'s title", source.title)
        _check_metadata(f"source {position}'s metadata", source.metadata)
        normalized.append(source)
    return tuple(normalized)


def check_question(question: object) -> str:
    """The question, if it is a non-blank string."""
    if not isinstance(question, str):
        raise EmptyQuestionError(f"the question must be a string, got {type(question).__name__}")
    if not question.strip():
        raise EmptyQuestionError(f"the question is empty ({question!r}); ask something")
    return check_encodable("the question", question)


_SURROGATE = re.compile("[\ud800-\udfff]")


def check_encodable(name: str, text: str) -> str:
    """``text``, unless it holds a lone surrogate: a character no encoding can write.

    Such text comes from bytes decoded with ``errors="surrogateescape"`` or from a JSON escape
    of half a character pair; a tokenizer refuses it with a raw ``TypeError``. Every string from
    outside (question, sources, titles, metadata, history, instructions, prompt) is checked here.
    """
    found = _SURROGATE.search(text)
    if found is not None:
        raise InvalidInputError(
            f"{name} holds a lone surrogate (U+{ord(found.group()):04X}) at character "
            f"{found.start()}, which no text encoding can write; decode its bytes with "
            "errors='replace', or remove the character"
        )
    return text


def _check_metadata(name: str, value: object, depth: int = 0) -> None:
    # Metadata is not shown to the model but comes back in every answer (and its JSON).
    if isinstance(value, str):
        check_encodable(name, value)
    elif depth < 8 and isinstance(value, Mapping):
        for key, item in value.items():
            if isinstance(key, str):
                check_encodable(f"a key of {name}", key)
            _check_metadata(f"{name}[{key!r}]", item, depth + 1)
    elif depth < 8 and isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            _check_metadata(f"{name}[{index}]", item, depth + 1)


def check_history(history: object) -> tuple[tuple[str, str], ...]:
    """Earlier turns as ``(role, text)`` pairs: roles ``"user"``/``"assistant"``, no blank text."""
    if isinstance(history, (str, bytes, Mapping)) or not isinstance(history, Sequence):
        raise InputTypeError(
            f"history must be a list of (role, text) pairs, got {type(history).__name__}"
        )
    turns = []
    for index, turn in enumerate(history):
        if isinstance(turn, (str, bytes)) or not isinstance(turn, Sequence) or len(turn) != 2:
            raise InputTypeError(
                f"history[{index}] must be a (role, text) pair, got {turn!r:.60}"
            )
        role, text = turn
        if role not in ROLES:
            raise InvalidInputError(
                f"history[{index}] has role {role!r}; use 'user' or 'assistant'"
            )
        if not isinstance(text, str) or not text.strip():
            raise InvalidInputError(
                f"history[{index}] ({role}) has no text ({text!r:.40}); drop empty turns"
            )
        if not strip_markers(text):
            raise InvalidInputError(
                f"history[{index}] ({role}) holds only citation markers ({text!r:.40}); the "
                "model is shown earlier turns without their markers, so it would be an empty "
                "message: drop the turn"
            )
        turns.append((role, check_encodable(f"history[{index}] ({role})", text)))
    return tuple(turns)
