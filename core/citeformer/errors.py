"""Exceptions raised by citeformer.

The tree:

```text
CiteformerError
├── InvalidInputError (also a ValueError)
│   ├── InputTypeError          an argument of the wrong type (also a TypeError)
│   ├── NoSourcesError          no sources were given
│   ├── EmptySourceError        a source has no text
│   ├── EmptyQuestionError      the question is empty or not a string
│   └── PromptTooLongError      prompt plus max_new_tokens exceed the model's context
├── TokenizerMismatchError      the tokenizer cannot be aligned with the model's logits
├── GrammarViolationError       a generated token was rejected by the citation grammar
│   └── ServerIgnoredGrammarError   a server returned a marker outside 1..N
├── CitationOutOfRangeError     a text names a source that was not given (parsing)
├── ModelLoadError              the embedded model or its package is missing
├── MissingDependencyError      an optional package a feature needs (also an ImportError)
└── ServerError                 a serving engine did not answer with a completion
    ├── ServerConnectionError   unreachable, or the connection was lost mid-answer
    └── ServerResponseError     an HTTP error status, with what the server said
```
"""

from __future__ import annotations

import math

__all__ = [
    "MAX_BIAS",
    "CitationOutOfRangeError",
    "CiteformerError",
    "EmptyQuestionError",
    "EmptySourceError",
    "GrammarViolationError",
    "InputTypeError",
    "InvalidInputError",
    "MissingDependencyError",
    "ModelLoadError",
    "NoSourcesError",
    "PromptTooLongError",
    "ServerConnectionError",
    "ServerError",
    "ServerIgnoredGrammarError",
    "ServerResponseError",
    "TokenizerMismatchError",
    "check_float",
    "check_int",
    "check_positive_int",
    "shown",
]

MAX_BIAS = 1e4
"""The largest weight, bias or penalty, in logits, an option may set (``Readability``'s
penalties and biases, an evidence weight). The levers multiply one by at most a count of the
answer's words or sentences (bounded by ``max_new_tokens``) or by a score in 0..1, and add a
dozen such values to a logit per step: even at this bound that stays below 1e15, far from
float32's largest number (3.4e38), so no sum or product overflows to ``inf`` and no ``0 * inf``
leaves a NaN on a token the grammar forbids."""


class CiteformerError(Exception):
    """Base class of every error citeformer raises on purpose."""


class InvalidInputError(CiteformerError, ValueError):
    """An argument cannot be used as given."""


class InputTypeError(InvalidInputError, TypeError):
    """An argument has the wrong type (a ``TypeError`` too, so ``except TypeError`` catches it)."""


class NoSourcesError(InvalidInputError):
    """Nothing to cite: the list of sources is empty."""


class EmptySourceError(InvalidInputError):
    """A source has empty or whitespace-only text."""


class EmptyQuestionError(InvalidInputError):
    """The question is empty, whitespace-only or not a string."""


class PromptTooLongError(InvalidInputError):
    """The prompt and the generation budget do not fit in the model's context window."""


class TokenizerMismatchError(CiteformerError):
    """The tokenizer has tokens the model has no logits for: the grammar mask cannot be aligned."""


class GrammarViolationError(CiteformerError):
    """A token the citation grammar forbids reached the output; generation is stopped."""


class CitationOutOfRangeError(CiteformerError):
    """A marker in the text names a source outside 1..n_sources."""


class ModelLoadError(CiteformerError):
    """The embedded default model could not be found or loaded."""


class MissingDependencyError(CiteformerError, ImportError):
    """An optional package that a feature needs is not installed; the message says which extra."""


class ServerError(CiteformerError):
    """A serving engine could not be reached or did not answer with a completion."""


class ServerConnectionError(ServerError):
    """The server could not be reached, or the connection was lost before the answer ended."""


class ServerResponseError(ServerError):
    """The server answered with an error, or with something that is not a completion.

    ``status_code`` and ``body`` hold the HTTP status and what the server said.
    """

    def __init__(self, message: str, *, status_code: int, body: str = "") -> None:
        super().__init__(message)
        self.status_code = status_code
        """The HTTP status of the answer (200 for a malformed body or an error mid-stream)."""
        self.body = body
        """What the server sent, as text."""


class ServerIgnoredGrammarError(GrammarViolationError):
    """A server returned a marker outside 1..n_sources: it did not enforce the citation grammar."""

    def __init__(self, message: str, *, marker: str) -> None:
        super().__init__(message)
        self.marker = marker
        """The offending marker as the server wrote it, e.g. ``'[7]'``."""


def shown(value: object) -> str:
    """``repr(value)`` for a message, cut short: a huge int is named by its length, not written."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        # Never str() it: past 4,300 digits Python refuses to, and a message needs no more.
        digits = int(value.bit_length() * math.log10(2)) + 1
        return f"{'-' if value < 0 else ''}an int of about {digits} digits"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def check_positive_int(name: str, value: object) -> int:
    """``value`` if it is an int >= 1 (``True`` is no int here); else an error naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidInputError(f"{name} must be a positive int, got {shown(value)}")
    return value


def check_int(name: str, value: object, low: int, high: int) -> int:
    """``value`` if it is an int from ``low`` to ``high``; else an error naming ``name``.

    ``True`` is no int here. The range is checked before anything else reads the number, so a
    400-digit int is refused with a ``ValueError`` (``InvalidInputError``), not an
    ``OverflowError`` from ``math``.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputTypeError(
            f"{name} must be an int from {low} to {high}, got {type(value).__name__} "
            f"{shown(value)}"
        )
    if not low <= value <= high:
        raise InvalidInputError(f"{name} must be an int from {low} to {high}, got {shown(value)}")
    return value


def check_float(
    name: str, value: object, low: float, high: float, *, above: bool = False
) -> float:
    """``value`` as a float if it is a number from ``low`` to ``high``; else an error naming it.

    ``above``: ``value`` must be greater than ``low``, not equal to it. Bools, NaN and infinities
    are refused; an int is compared with the range before it is converted, so a 400-digit one is
    refused with a ``ValueError`` (``InvalidInputError``), not an ``OverflowError``.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputTypeError(f"{name} must be a number, got {type(value).__name__} {shown(value)}")
    if not (low < value <= high if above else low <= value <= high):  # NaN is in no range
        raise InvalidInputError(
            f"{name} must be a finite number {'>' if above else '>='} {low:g} and <= {high:g}, "
            f"got {shown(value)}"
        )
    return float(value)
