"""A dotted term's right edge, kept in the grammar's bitmask instead of the grammar.

A ``REQUIRED`` word that holds a ``.`` is a dotted term copied whole with at most
``TERM_EDGE_CHARS`` characters on each side: ``char{0,8} term char{0,8}``. Those bounded edges are
the costliest part of the grammar to mask: xgrammar settles a token that may run past the end of
a bounded run only against the whole stack. Where citeformer's own matcher fills the mask, the
grammar leaves both edges unbounded (``char* term char*``) and ``TermTails`` clears every token
that would begin a term past the edge before it or run the edge after it past
``TERM_EDGE_CHARS``: the tokens allowed are exactly those of the bounded grammar.

Only a word that is on its way through a term, or past one, has an edge after a term to bound.
In any other word the tokens that bring a dot are read in the filled mask, and checked one by one
where the grammar keeps one, only where the word is already long or a token's run before its dot
is (more than ``TERM_EDGE_CHARS + 1`` characters), or a token holds a long run after its dot.
"""

from __future__ import annotations

import bisect
import re
import threading
from collections.abc import Sequence

import numpy as np

from citeformer.decoding.vocab import Vocabulary
from citeformer.grammar.rules import TERM_EDGE_CHARS

__all__ = ["BREAKS", "TermTails", "chars", "split_words"]

BREAKS = frozenset(b" \t\n\r[]!?")
"""Bytes that end a word (a ``.`` can also belong to a dotted term)."""
_BREAK = re.compile(rb"[ \t\n\r\[\]!?]")
_NO_EDGE = 1 << 20
"""A token's edge length where its part in the word holds a dot (no edge takes it)."""


def chars(raw: bytes) -> int:
    """Characters in ``raw`` as xgrammar counts them: UTF-8 first bytes (a cut one counts)."""
    return sum(1 for byte in raw if not 0x80 <= byte < 0xC0)


def split_words(text: bytes) -> list[bytes]:
    """``text`` cut at every break: its words, empty ones included."""
    return _BREAK.split(text)


class _Segments:
    """Per token of one vocabulary, the bytes it adds to the answer's last word.

    ``segment``: its bytes before its first break; ``ends``: whether a break follows them;
    ``plain``: the segment's characters where it holds no dot, else ``_NO_EDGE``; ``suspects``:
    the tokens whose segment holds a dot and more than ``TERM_EDGE_CHARS`` characters after it;
    ``dotted``: the tokens whose segment holds a dot, by ``before_dot``, the characters before it.
    """

    def __init__(self, token_bytes: list[bytes]) -> None:
        size = len(token_bytes)
        self.segment: list[bytes] = []
        self.ends = np.zeros(size, bool)
        self.plain = np.zeros(size, np.int32)
        suspects = []
        dotted: list[tuple[int, int]] = []
        for token_id, raw in enumerate(token_bytes):
            cut = next((i for i, byte in enumerate(raw) if byte in BREAKS), None)
            segment = raw if cut is None else raw[:cut]
            self.segment.append(segment)
            self.ends[token_id] = cut is not None
            if b"." in segment:
                self.plain[token_id] = _NO_EDGE
                dotted.append((chars(segment.split(b".", 1)[0]), token_id))
                if chars(segment.rsplit(b".", 1)[1]) > TERM_EDGE_CHARS:
                    suspects.append(token_id)
            else:
                self.plain[token_id] = chars(segment)
        self.suspects = np.array(suspects, np.int64)
        dotted.sort()
        self.before_dot = [before for before, _ in dotted]
        self.dotted = np.array([token_id for _, token_id in dotted], np.int64)
        order = sorted(range(size), key=self.segment.__getitem__)
        self._order = np.array(order, np.int64)
        self._sorted = [self.segment[i] for i in order]
        self._within: dict[int, np.ndarray] = {}
        self._lock = threading.Lock()

    def within(self, edge: int) -> np.ndarray:
        """Whether each token's segment is dot-free and at most ``edge`` characters long."""
        with self._lock:
            if edge not in self._within:
                self._within[edge] = self.plain <= edge
            return self._within[edge]

    def starting(self, prefix: bytes) -> np.ndarray:
        """The tokens whose segment starts with ``prefix``."""
        low = bisect.bisect_left(self._sorted, prefix)
        high = bisect.bisect_left(self._sorted, prefix + b"\xff" * 4, lo=low)
        return self._order[low:high]

    def exactly(self, segment: bytes) -> np.ndarray:
        """The tokens whose segment is ``segment``."""
        low = bisect.bisect_left(self._sorted, segment)
        high = bisect.bisect_right(self._sorted, segment, lo=low)
        return self._order[low:high]


class TermTails:
    """Keeps the edges of each dotted term of one answer within ``TERM_EDGE_CHARS``.

    ``terms``: the dotted terms its grammar spells out. ``restrict`` clears tokens in the bitmask
    row the grammar filled (with ``char*`` on both sides of its terms) for the answer's last word
    ``word``.
    """

    def __init__(self, vocab: Vocabulary, terms: Sequence[str]) -> None:
        self._segments = vocab.table(_Segments)
        self._terms = tuple(term.encode() for term in terms)

    def parses(self, word: bytes) -> tuple[list[int], list[bytes]]:
        """How ``word`` reads as a left edge, a term and a right edge.

        The right edges' lengths where the term is whole, and the rest of each term it is on its
        way through.
        """
        edges: list[int] = []
        rests: list[bytes] = []
        for start in _starts(word):
            rest = word[start:]
            for term in self._terms:
                if len(rest) < len(term):
                    if term.startswith(rest):
                        rests.append(term[len(rest) :])
                elif rest.startswith(term) and b"." not in rest[len(term) :]:
                    edges.append(chars(rest[len(term) :]))
        return edges, rests

    def fits(self, word: bytes, *, whole: bool) -> bool:
        """Whether ``word`` is a plain word or (``whole``: all of) a term with its edges.

        A ``.`` that begins it is no word's: it ends a sentence after its cite-group.
        """
        if b"." not in word or word.startswith(b"."):
            return True
        edges, rests = self.parses(word)
        return any(edge <= TERM_EDGE_CHARS for edge in edges) or (not whole and bool(rests))

    def fits_after(self, word: bytes, raw: bytes) -> bool:
        """Whether the words ``raw`` writes after ``word`` (the last one unfinished) all fit."""
        pieces = split_words(word + raw)
        return all(
            self.fits(piece, whole=index < len(pieces) - 1) for index, piece in enumerate(pieces)
        )

    def restrict(self, row: np.ndarray, word: bytes) -> None:
        """Clear, in one packed bitmask row (in place), the tokens that run an edge too long."""
        segments = self._segments
        if word.startswith(b"."):
            return  # a sentence's end: a space or the answer's end follows
        if b"." not in word:
            # Only a token that brings a dot can begin a term past the edge before it (where more
            # than TERM_EDGE_CHARS + 1 characters come before its dot), or pass the edge after it
            # at once (with more than TERM_EDGE_CHARS characters after its dot).
            first = bisect.bisect_left(segments.before_dot, TERM_EDGE_CHARS + 2 - chars(word))
            for suspects in (segments.dotted[first:], segments.suspects):
                kept = (row[suspects >> 5] >> (suspects & 31)) & 1
                for token_id in suspects[kept.astype(bool)]:
                    if not self.fits(
                        word + segments.segment[token_id], whole=bool(segments.ends[token_id])
                    ):
                        _clear(row, int(token_id))
            return
        edges, rests = self.parses(word)
        room = max(0, TERM_EDGE_CHARS - min(edges, default=TERM_EDGE_CHARS))
        allowed = segments.within(room).copy()
        for rest in rests:
            for end in range(1, len(rest)):
                allowed[segments.exactly(rest[:end])] = True
            for token_id in segments.starting(rest):
                beyond = segments.segment[token_id][len(rest) :]
                if b"." not in beyond and chars(beyond) <= TERM_EDGE_CHARS:
                    allowed[token_id] = True
        size = min(allowed.size, row.size * 32)
        bits = np.ones(row.size * 32, bool)
        bits[:size] = allowed[:size]
        np.bitwise_and(row, np.packbits(bits, bitorder="little").view(np.int32), out=row)


def _starts(word: bytes) -> list[int]:
    """Where a term may begin in ``word``: after a dot-free left edge of at most 8 characters."""
    found = []
    count = 0
    for offset, byte in enumerate(word):
        if 0x80 <= byte < 0xC0:
            continue
        if count > TERM_EDGE_CHARS or byte == ord("."):
            break
        found.append(offset)
        count += 1
    return found


def _clear(row: np.ndarray, token_id: int) -> None:
    row.view(np.uint32)[token_id >> 5] &= np.uint32(~(1 << (token_id & 31)) & 0xFFFFFFFF)
