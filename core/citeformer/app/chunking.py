"""Cutting a text into passages on paragraph, sentence and word boundaries, in linear time.

``chunk_text`` cuts a text into passages of at most ``max_chars`` characters on paragraph
boundaries (blank lines) where it can, then on sentence boundaries, then between words, and only
as a last resort inside a word. Every passage records its exact character offsets
(``text[start:end] == passage``) and its 1-based line numbers. Passages have no leading or
trailing whitespace, do not overlap, come in document order, and together cover every
non-whitespace character of the text. Small consecutive paragraphs (a Markdown heading and the
paragraph under it) are packed into one passage while they fit; the pieces of a paragraph that
had to be split are packed with each other but never with a neighbouring paragraph.

Every boundary is a run of whitespace, found without a regular expression that backtracks over
that run (a file holding a million spaces in a row takes as long as a million letters), and line
numbers come from one list of newline offsets searched by bisection.
"""

from __future__ import annotations

import heapq
import re
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from citeformer import InputTypeError, InvalidInputError

__all__ = [
    "DEFAULT_MAX_CHARS",
    "Separator",
    "Span",
    "chunk_text",
]

DEFAULT_MAX_CHARS = 600
"""Default passage size bound, in characters (about 120-150 tokens of English prose)."""


@dataclass(frozen=True)
class Span:
    """One passage of a text: ``text[start:end]``, on lines ``line_start``..``line_end``."""

    text: str
    start: int
    """Character offset of the first character of the passage."""
    end: int
    """Character offset just past the last character of the passage."""
    line_start: int
    """1-based line of ``start`` (lines are separated by ``\\n``)."""
    line_end: int
    """1-based line of the last character of the passage."""


# A boundary is a whole run of whitespace (``str.isspace``, which is also what ``\s`` matches):
# - a paragraph break holds two line breaks (``\n``) or more, so a blank line, even one made of
#   spaces, separates paragraphs;
# - a sentence break holds a line break (a list item, a wrapped line) or follows ., ! or ?,
#   itself optionally followed by one closing quote or bracket;
# - a word break is any run.
# Each pattern matches at most two characters, so none backtracks over a run of whitespace.
_NEWLINE = re.compile(r"\n")
_NON_SPACE = re.compile(r"\S")
_SPACES = re.compile(r"\s+")
_SENTENCE_END = re.compile(r"[.!?][\"'\u201d\u2019)\]]?(?=\s)")

Separator = tuple[int, int]
"""``(start, end)`` of a stretch that separates two pieces (whitespace, stripped away)."""


def chunk_text(text: str, max_chars: int = DEFAULT_MAX_CHARS) -> list[Span]:
    """Cut ``text`` into passages of at most ``max_chars`` characters on natural boundaries.

    See the module docstring for the guarantees; a text with no non-whitespace character gives
    an empty list.
    """
    if not isinstance(text, str):
        raise InputTypeError(f"chunk_text() takes a str, got {type(text).__name__}")
    if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < 1:
        raise InvalidInputError(f"max_chars must be a positive int, got {max_chars!r}")
    newlines = [match.start() for match in _NEWLINE.finditer(text)]
    chunker = _Chunker(text, newlines, max_chars)
    # (start, end, paragraph index, whole paragraph?)
    units: list[tuple[int, int, int, bool]] = []
    paragraphs = _pieces(text, 0, len(text), _paragraph_breaks(text, newlines))
    for index, (start, end) in enumerate(paragraphs):
        if end - start <= max_chars:
            units.append((start, end, index, True))
        else:
            units.extend((s, e, index, False) for s, e in chunker.split(start, end))
    spans: list[tuple[int, int]] = []
    previous: tuple[int, int, int, bool] | None = None
    for unit in units:
        start, end, paragraph, whole = unit
        if (
            previous is not None
            and end - spans[-1][0] <= max_chars
            and (paragraph == previous[2] or (whole and previous[3]))
        ):
            spans[-1] = (spans[-1][0], end)
        else:
            spans.append((start, end))
        previous = unit
    return [
        Span(
            text[start:end], start, end,
            line_start=bisect_left(newlines, start) + 1,
            line_end=bisect_left(newlines, end - 1) + 1,
        )
        for start, end in spans
    ]


class _Chunker:
    """Splits one paragraph too long for ``max_chars`` at the finest boundary needed."""

    def __init__(self, text: str, newlines: Sequence[int], max_chars: int) -> None:
        self.text = text
        self.newlines = newlines
        self.max_chars = max_chars

    def split(self, start: int, end: int) -> list[tuple[int, int]]:
        result: list[tuple[int, int]] = []
        for s, e in _pieces(self.text, start, end, self._sentence_breaks(start, end)):
            if e - s <= self.max_chars:
                result.append((s, e))
                continue
            for ws, we in _pieces(self.text, s, e, self._word_breaks(s, e)):
                # A word longer than max_chars is cut every max_chars characters.
                result.extend(
                    (c, min(c + self.max_chars, we)) for c in range(ws, we, self.max_chars)
                )
        return result

    def _sentence_breaks(self, start: int, end: int) -> Iterator[Separator]:
        first = bisect_left(self.newlines, start)
        last = bisect_left(self.newlines, end)
        line_breaks = ((n, n + 1) for n in self.newlines[first:last])
        endings = ((m.end(), m.end() + 1) for m in _SENTENCE_END.finditer(self.text, start, end))
        return _merged(line_breaks, endings)

    def _word_breaks(self, start: int, end: int) -> Iterator[Separator]:
        return (match.span() for match in _SPACES.finditer(self.text, start, end))


def _paragraph_breaks(text: str, newlines: Sequence[int]) -> Iterator[Separator]:
    """From each line break to the next one when only whitespace lies between them."""
    for before, after in zip(newlines, newlines[1:], strict=False):
        if after == before + 1 or _NON_SPACE.search(text, before + 1, after) is None:
            yield before, after + 1


def _merged(first: Iterable[Separator], second: Iterable[Separator]) -> Iterator[Separator]:
    """Two ascending streams of separators as one (a separator may appear in both)."""
    return heapq.merge(first, second)


def _pieces(
    text: str, start: int, end: int, separators: Iterable[Separator]
) -> list[tuple[int, int]]:
    """The stripped, non-empty stretches of ``text[start:end]`` between ascending separators.

    A separator is part of a whitespace run; whatever of the run lies outside it is stripped
    from the pieces on either side, so splitting there is the same as splitting at the run.
    """
    pieces = []
    position = start
    for separator_start, separator_end in separators:
        if separator_start > position:
            pieces.append((position, separator_start))
        position = max(position, separator_end)
    pieces.append((position, end))
    return [stripped for s, e in pieces if (stripped := _strip(text, s, e)) is not None]


def _strip(text: str, start: int, end: int) -> tuple[int, int] | None:
    first = _NON_SPACE.search(text, start, end)
    if first is None:
        return None
    return first.start(), start + len(text[start:end].rstrip())
