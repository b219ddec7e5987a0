"""The verbatim quote guard: while an answer is written, each quote can only continue a source.

Under ``QUOTES_ONLY`` a quote is ``"text" [k]`` with ``text`` a word-bounded substring of source
k (``citeformer.grammar.automata``). ``QuoteGuard`` is a byte-level state machine over the answer:
while a quote is open it allows only tokens whose bytes continue a substring of some source; when
the quote closes it allows only a marker naming a source that contains it. It runs after the
structural grammar's mask and only removes tokens, so the 1..N guarantee is untouched.

Serving engines that take the grammar as text get the same automaton spelled as GBNF rules
(``citeformer.grammar.quote_rules``); xgrammar precomputes a token mask for every rule position,
which makes that form slow to compile, where the guard builds its index quickly and caches it
per text (both timed in benchmarks/README.md, "Verbatim quotes").
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from citeformer.decoding.vocab import SortedVocab
from citeformer.errors import GrammarViolationError
from citeformer.grammar.automata import (
    BYTE_WEIGHT,
    SENTINEL,
    SPACE,
    QuotableText,
    WordAutomaton,
)
from citeformer.grammar.quotes import DEFAULT_MIN_QUOTE_CHARS, DEFAULT_QUOTABLE_CHARS
from citeformer.types import Source

__all__ = ["Mask", "QuoteGuard", "SourceIndex", "source_index"]

_QUOTE, _OPEN, _CLOSE = ord('"'), ord("["), ord("]")
_DIGITS = frozenset(b"0123456789")


class SourceIndex:
    """One source's quotable text and its byte-level automaton, cached per (text, cap)."""

    def __init__(self, quotable: QuotableText) -> None:
        self.quotable = quotable
        automaton = WordAutomaton((s.encode() for s in quotable.segments()), BYTE_WEIGHT)
        self.next = automaton.next
        self.reach = automaton.reach
        self.closable = automaton.closable
        self.starts = automaton.starts
        # First tokens of a quote from this source, per (vocabulary, minimum length): the costliest
        # mask of a quote, computed once per passage.
        self.opening_tokens: dict[tuple[SortedVocab, int], tuple[int, ...]] = {}

    def viable(self, state: int, chars: int, min_chars: int) -> bool:
        """Whether a quote at ``state``, ``chars`` long, can still grow to ``min_chars``."""
        return chars + self.reach[state] >= min_chars

    def root_viable(self, min_chars: int) -> bool:
        """Whether a quote of at least ``min_chars`` characters can start here."""
        # A quote cannot begin with a space.
        return any(
            BYTE_WEIGHT[b] + self.reach[t] >= min_chars
            for start in self.starts
            for b, t in self.next[start].items() if b not in (SPACE, SENTINEL)
        )


# About 1 MB per 2,000-character passage: 64 passages cover the retrievals of a few recent
# questions without holding much memory.
@functools.lru_cache(maxsize=64)
def source_index(text: str, quotable_chars: int) -> SourceIndex:
    """The index of one source text, built once and kept (least recently used out) for reuse."""
    return SourceIndex(QuotableText.fold(text, quotable_chars))


# Guard states (tuples, so that they hash and compare cheaply):
#   ("out",)                    prose; a '"' opens a quote
#   ("in", alive, chars)        inside a quote: alive = ((source id, automaton state), ...)
#   ("after", ids, spaced)      the quote closed; its marker follows after an optional space
#   ("id", ids, digits)         inside that marker, digits written so far
#   ("cited",)                  the marker closed; a second marker may not follow it
State = tuple[Any, ...]


@dataclass(frozen=True)
class Mask:
    """Tokens to keep (``allow``) or to remove (``deny``), by id."""

    ids: tuple[int, ...]
    allow: bool


class QuoteGuard:
    """Tracks one answer byte by byte and says which next tokens keep every quote verbatim."""

    def __init__(
        self,
        sources: Sequence[Source],
        vocab: SortedVocab,
        *,
        min_quote_chars: int = DEFAULT_MIN_QUOTE_CHARS,
        quotable_chars: int = DEFAULT_QUOTABLE_CHARS,
    ) -> None:
        self._vocab = vocab
        self._min = min_quote_chars
        self._indexes = {
            k: source_index(s.text, quotable_chars) for k, s in enumerate(sources, start=1)
        }
        self._openable = tuple(
            (k, start)
            for k, index in self._indexes.items() if index.root_viable(min_quote_chars)
            for start in index.starts
        )
        self.state: State = ("out",)

    @cached_property
    def _out_mask(self) -> Mask:
        return Mask(self._failing(("out",), self._vocab.with_quote), allow=False)

    @cached_property
    def _open_mask(self) -> Mask:
        # The union over sources of each one's opening tokens. A token that closes the quote
        # and starts its marker is then allowed only with the marker of its own source.
        allowed: set[int] = set()
        for k in dict.fromkeys(k for k, _ in self._openable):
            index = self._indexes[k]
            key = (self._vocab, self._min)
            if key not in index.opening_tokens:
                starts = tuple((k, start) for start in index.starts)
                index.opening_tokens[key] = tuple(self._walk(("in", starts, 0)))
            allowed.update(index.opening_tokens[key])
        return Mask(tuple(sorted(allowed)), allow=True)

    @cached_property
    def _cited_mask(self) -> Mask:
        candidates = [*self._vocab.opening_bracket, *self._vocab.with_quote]
        return Mask(self._failing(("cited",), candidates), allow=False)

    def advance(self, token_id: int) -> None:
        """Move past a generated token, or raise if it breaks a quote."""
        state = self.run(self.state, self._vocab.token_bytes[token_id])
        if state is None:
            raise GrammarViolationError(
                f"token {token_id} ({self._vocab.token_bytes[token_id]!r}) was generated but "
                "breaks a verbatim quote here; the quote mask was not applied"
            )
        self.state = state

    def mask(self) -> Mask:
        """The tokens that may come next."""
        kind = self.state[0]
        if kind == "out":
            return self._out_mask
        if kind == "cited":
            return self._cited_mask
        if kind == "in" and self.state[2] == 0:
            return self._open_mask
        return Mask(tuple(self._walk(self.state)), allow=True)

    def run(self, state: State | None, data: bytes) -> State | None:
        """The state after reading ``data`` from ``state``; ``None`` once a byte is refused."""
        for byte in data:
            if state is None:
                return None
            state = self.step(state, byte)
        return state

    def step(self, state: State, byte: int) -> State | None:
        """The state after one byte, or ``None`` if the byte is refused there."""
        kind = state[0]
        if kind == "out":
            if byte != _QUOTE:
                return state
            return ("in", self._openable, 0) if self._openable else None
        if kind == "in":
            _, alive, chars = state
            if byte == _QUOTE:
                ids = frozenset(k for k, s in alive if self._indexes[k].closable[s])
                return ("after", ids, False) if ids and chars >= self._min else None
            if byte == SENTINEL or (byte == SPACE and chars == 0):
                return None
            chars += BYTE_WEIGHT[byte]
            moved = tuple(
                (k, t) for k, s in alive
                if (t := self._indexes[k].next[s].get(byte)) is not None
                and self._indexes[k].viable(t, chars, self._min)
            )
            return ("in", moved, chars) if moved else None
        if kind == "after":
            _, ids, spaced = state
            if byte == SPACE and not spaced:
                return ("after", ids, True)
            return ("id", ids, "") if byte == _OPEN else None
        if kind == "id":
            _, ids, digits = state
            if byte in _DIGITS:
                digits += chr(byte)
                return ("id", ids, digits) if any(str(k).startswith(digits) for k in ids) else None
            if byte == _CLOSE and digits and int(digits) in ids:
                return ("cited",)
            return None
        # "cited": one marker per quote; anything else is prose again.
        return None if byte == _OPEN else self.step(("out",), byte)

    def _failing(self, state: State, candidates: Iterable[int]) -> tuple[int, ...]:
        token_bytes = self._vocab.token_bytes
        return tuple(sorted({i for i in candidates if self.run(state, token_bytes[i]) is None}))

    def _walk(self, start: State) -> list[int]:
        # Walk the sorted vocabulary and the state machine together: a token range is entered only
        # through a byte the machine can read next (inside a quote, the bytes some alive automaton
        # has), so the work follows the sources, not the vocabulary. Once a token has left the
        # quote and its marker, the rest of it is prose, checked token by token.
        vocab = self._vocab
        keys, ids = vocab.keys, vocab.ids
        allowed: list[int] = []
        stack: list[tuple[State, int, int, int]] = [(start, 0, 0, len(keys))]
        while stack:
            state, depth, lo, hi = stack.pop()
            while lo < hi and len(keys[lo]) == depth:
                allowed.append(ids[lo])
                lo += 1
            if lo >= hi:
                continue
            if state[0] in ("out", "cited"):
                allowed += [ids[j] for j in range(lo, hi) if self.run(state, keys[j][depth:])]
                continue
            prefix = keys[lo][:depth]
            for byte in self._next_bytes(state):
                sub_lo, sub_hi = vocab.span(prefix + bytes([byte]), lo, hi)
                if sub_lo < sub_hi and (after := self.step(state, byte)) is not None:
                    stack.append((after, depth + 1, sub_lo, sub_hi))
        return allowed

    def _next_bytes(self, state: State) -> set[int] | frozenset[int]:
        kind = state[0]
        if kind == "in":
            return {b for k, s in state[1] for b in self._indexes[k].next[s]} | {_QUOTE}
        if kind == "after":
            return _MARKER_START
        return _MARKER_BODY


_MARKER_START = frozenset((SPACE, _OPEN))
_MARKER_BODY = _DIGITS | {_CLOSE}
