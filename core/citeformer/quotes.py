"""Verbatim quotes: a quoted span can only be text of the one source its marker names.

Under ``QUOTES_ONLY`` a quote is ``"text" [k]``: ``text`` must occur in source k, where a run of
white space in the source matches one space in the quote, and it must begin and end at word
boundaries there (``"the e"`` is not a quote of "the entrance"). Each source's quotable text (its
first ``quotable_chars`` characters, white space folded) is indexed by a suffix automaton, which
accepts exactly its substrings; reading the character before a quote (or a segment-start
sentinel) first is what ties a quote to a word start.

The automaton is enforced in two interchangeable forms:

- ``QuoteGuard`` (local generation): a byte-level state machine over the answer. While a quote is
  open it allows only tokens whose bytes continue a substring of some source; when the quote closes
  it allows only a marker naming a source that contains it. It runs after the structural grammar's
  mask and only removes tokens, so the 1..N guarantee is untouched.
- ``citeformer.quote_grammar.quote_rules`` (GBNF, for engines that take the grammar as text):
  the same automaton written as grammar rules. xgrammar precomputes a token mask for every rule
  position, which makes this form compile in about a second per 1,000 characters of source; the
  guard builds its index in a few milliseconds and caches it per text.
"""

from __future__ import annotations

import bisect
import re
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from citeformer.errors import GrammarViolationError
from citeformer.types import Quote, Source

DEFAULT_MIN_QUOTE_CHARS = 1
DEFAULT_QUOTABLE_CHARS = 2000

# Characters a quote cannot hold: the closing quote and the brackets that only markers may use.
_UNQUOTABLE = '"[]'
_WHITESPACE = re.compile(r"\s+")
_QUOTE, SPACE, _OPEN, _CLOSE = ord('"'), ord(" "), ord("["), ord("]")
_DIGITS = frozenset(b"0123456789")
# Segments are written between sentinels, so that their start and end count as word boundaries.
SENTINEL = 0
# Bytes that end a word: ASCII that is not a letter or digit. Non-ASCII bytes belong to words.
_BOUNDARY = frozenset(b for b in range(128) if not chr(b).isalnum())
_WORD_CHAR = r"A-Za-z0-9\u0080-\U0010ffff"


@dataclass(frozen=True)
class QuotableText:
    """A source's quotable text: white space runs folded to one space, cut at ``quotable_chars``."""

    text: str
    """The folded text a quote must be a substring of."""

    starts: tuple[int, ...]
    """``starts[i]``: offset in the original text where folded character i begins."""

    ends: tuple[int, ...]
    """``ends[i]``: offset in the original text just past folded character i (a folded space
    ends where its white space run ends)."""

    @classmethod
    def of(cls, original: str, quotable_chars: int) -> QuotableText:
        """The first ``quotable_chars`` characters of ``original``, white space folded."""
        chars: list[str] = []
        starts: list[int] = []
        ends: list[int] = []
        position = 0
        for match in _WHITESPACE.finditer(original):
            for offset in range(position, match.start()):
                chars.append(original[offset])
                starts.append(offset)
                ends.append(offset + 1)
            chars.append(" ")
            starts.append(match.start())
            ends.append(match.end())
            position = match.end()
        for offset in range(position, len(original)):
            chars.append(original[offset])
            starts.append(offset)
            ends.append(offset + 1)
        del chars[quotable_chars:], starts[quotable_chars:], ends[quotable_chars:]
        return cls("".join(chars), tuple(starts), tuple(ends))

    def locate(self, quote: str) -> tuple[int, int] | None:
        """Offsets in the original text of the first word-bounded occurrence of ``quote``.

        ``None`` when the text holds no occurrence that begins and ends at word boundaries.
        """
        if not quote:
            return None
        found = re.search(
            f"(?<![{_WORD_CHAR}]){re.escape(quote)}(?![{_WORD_CHAR}])", self.text
        )
        if found is None:
            return None
        return self.starts[found.start()], self.ends[found.end() - 1]

    def segments(self) -> list[str]:
        """The runs of quotable characters: the text split at quote marks and brackets."""
        return [s for s in re.split(r'["\[\]]', self.text) if s]


class SuffixAutomaton:
    """The minimal automaton accepting every substring of some segments (here, of one source).

    Built online (Blumer et al.) over a sequence of symbols: bytes for the guard, characters for
    GBNF. Every state accepts, since every prefix of a substring is a substring.
    """

    def __init__(self, segments: Iterable[Sequence[int]]) -> None:
        nxt: list[dict[int, int]] = [{}]
        link = [-1]
        length = [0]

        def clone(q: int, new_length: int) -> int:
            nxt.append(dict(nxt[q]))
            link.append(link[q])
            length.append(new_length)
            return len(nxt) - 1

        for segment in segments:
            last = 0
            for symbol in segment:
                if symbol in nxt[last]:  # generalized automaton: the state may already exist
                    q = nxt[last][symbol]
                    if length[q] == length[last] + 1:
                        last = q
                        continue
                    c = clone(q, length[last] + 1)
                    p = last
                    while p != -1 and nxt[p].get(symbol) == q:
                        nxt[p][symbol] = c
                        p = link[p]
                    link[q] = c
                    last = c
                    continue
                cur = len(nxt)
                nxt.append({})
                link.append(-1)
                length.append(length[last] + 1)
                p = last
                while p != -1 and symbol not in nxt[p]:
                    nxt[p][symbol] = cur
                    p = link[p]
                if p == -1:
                    link[cur] = 0
                else:
                    q = nxt[p][symbol]
                    if length[p] + 1 == length[q]:
                        link[cur] = q
                    else:
                        c = clone(q, length[p] + 1)
                        while p != -1 and nxt[p].get(symbol) == q:
                            nxt[p][symbol] = c
                            p = link[p]
                        link[q] = c
                        link[cur] = c
                last = cur
        self.next = nxt
        self._length = length

    def reach(self, weight: dict[int, int] | None = None, skip: int | None = None) -> list[int]:
        """For each state, the longest path out of it that never reads ``skip``.

        A symbol counts ``weight[symbol]`` (default 1).
        """
        reach = [0] * len(self.next)
        # A transition s -> t has length[t] > length[s]: decreasing length is a topological order.
        for state in sorted(range(len(self.next)), key=self._length.__getitem__, reverse=True):
            best = 0
            for symbol, target in self.next[state].items():
                if symbol == skip:
                    continue
                step = 1 if weight is None else weight.get(symbol, 1)
                best = max(best, step + reach[target])
            reach[state] = best
        return reach


# A UTF-8 continuation byte adds no character to the quote's length.
_BYTE_WEIGHT = {b: 0 if b & 0xC0 == 0x80 else 1 for b in range(256)}


class WordAutomaton:
    """The substring automaton of some segments, read so that quotes are word-bounded.

    Each segment is written between sentinels, so its start and end count as boundaries. Both
    enforcement forms use it: ``SourceIndex`` over UTF-8 bytes, ``quote_rules`` over characters.
    """

    def __init__(
        self, segments: Iterable[Sequence[int]], weight: dict[int, int] | None = None
    ) -> None:
        automaton = SuffixAutomaton([SENTINEL, *segment, SENTINEL] for segment in segments)
        self.next = automaton.next
        self.reach = automaton.reach(weight, skip=SENTINEL)
        """Longest continuation out of each state, in characters, never through a sentinel."""
        self.closable = [any(b in _BOUNDARY for b in t) for t in self.next]
        """Whether a quote may end at each state: some occurrence is followed by a boundary."""
        self.starts = tuple(t for b, t in self.next[0].items() if b in _BOUNDARY)
        """The states after a boundary character: where every quote begins."""


class SourceIndex:
    """One source's quotable text and its byte-level automaton, cached per (text, cap)."""

    def __init__(self, quotable: QuotableText) -> None:
        self.quotable = quotable
        automaton = WordAutomaton((s.encode() for s in quotable.segments()), _BYTE_WEIGHT)
        self.next = automaton.next
        self.reach = automaton.reach
        self.closable = automaton.closable
        self.starts = automaton.starts
        # First tokens of a quote from this source, per (vocabulary, minimum length): the costliest
        # mask of a quote, computed once per passage.
        self.opening_tokens: dict[tuple[VocabIndex, int], tuple[int, ...]] = {}

    def viable(self, state: int, chars: int, min_chars: int) -> bool:
        """Whether a quote at ``state``, ``chars`` long, can still grow to ``min_chars``."""
        return chars + self.reach[state] >= min_chars

    def root_viable(self, min_chars: int) -> bool:
        """Whether a quote of at least ``min_chars`` characters can start here."""
        # A quote cannot begin with a space.
        return any(
            _BYTE_WEIGHT[b] + self.reach[t] >= min_chars
            for start in self.starts
            for b, t in self.next[start].items() if b not in (SPACE, SENTINEL)
        )


# About 1 MB per 2,000-character passage: 64 passages cover the retrievals of a few recent
# questions without holding much memory.
_INDEX_CACHE: OrderedDict[tuple[str, int], SourceIndex] = OrderedDict()
_INDEX_CACHE_SIZE = 64
_INDEX_LOCK = threading.Lock()


def source_index(text: str, quotable_chars: int) -> SourceIndex:
    """The index of one source text, built once and kept (least recently used out) for reuse."""
    key = (text, quotable_chars)
    with _INDEX_LOCK:
        index = _INDEX_CACHE.get(key)
        if index is not None:
            _INDEX_CACHE.move_to_end(key)
            return index
    index = SourceIndex(QuotableText.of(text, quotable_chars))
    with _INDEX_LOCK:
        _INDEX_CACHE[key] = index
        if len(_INDEX_CACHE) > _INDEX_CACHE_SIZE:
            _INDEX_CACHE.popitem(last=False)
    return index


class VocabIndex:
    """A tokenizer's token bytes, sorted so that the tokens sharing a prefix form one range."""

    def __init__(self, token_bytes: Sequence[bytes]) -> None:
        pairs = sorted((b, i) for i, b in enumerate(token_bytes) if b)
        self.keys = [b for b, _ in pairs]
        self.ids = [i for _, i in pairs]
        self.token_bytes = list(token_bytes)
        self.with_quote = [i for i, b in enumerate(token_bytes) if _QUOTE in b]
        lo = bisect.bisect_left(self.keys, b"[")
        hi = bisect.bisect_left(self.keys, b"\\", lo)
        self.opening_bracket = self.ids[lo:hi]

    def span(self, prefix: bytes, lo: int, hi: int) -> tuple[int, int]:
        """The range of tokens in [lo, hi) that start with ``prefix``.

        All of [lo, hi) share ``prefix[:-1]``.
        """
        start = bisect.bisect_left(self.keys, prefix, lo, hi)
        last = prefix[-1]
        if last == 0xFF:
            return start, hi
        return start, bisect.bisect_left(self.keys, prefix[:-1] + bytes([last + 1]), start, hi)


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
        vocab: VocabIndex,
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
            chars += _BYTE_WEIGHT[byte]
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


_QUOTED = re.compile(r'"([^"\[\]]*)"( ?)\[([1-9][0-9]*)\]')


def find_quotes(
    text: str, sources: Sequence[Source], *, quotable_chars: int = DEFAULT_QUOTABLE_CHARS
) -> tuple[Quote, ...]:
    """Every ``"quote" [k]`` of an answer, located in source k; raise if one is not verbatim.

    Every double quote of the text must belong to such a span: a quote with no marker, or one
    whose text source k does not contain, raises ``GrammarViolationError``.
    """
    quotes = []
    covered = 0
    # Only the folded text is needed here, not the automaton: a server's answer must not build
    # indexes (or fill their cache) just to be located.
    folded: dict[int, QuotableText] = {}
    for match in _QUOTED.finditer(text):
        if '"' in text[covered:match.start()]:
            break
        covered = match.end()
        quoted, source_id = match.group(1), int(match.group(3))
        if not 1 <= source_id <= len(sources):
            raise GrammarViolationError(
                f"quote {quoted!r} cites [{source_id}], but only {len(sources)} source(s) exist"
            )
        if source_id not in folded:
            folded[source_id] = QuotableText.of(sources[source_id - 1].text, quotable_chars)
        where = folded[source_id].locate(quoted)
        if where is None:
            raise GrammarViolationError(
                f"quote {quoted!r} does not occur in source {source_id}, which its marker names"
            )
        quotes.append(Quote(quoted, source_id, match.start(1), match.end(1), *where))
    if '"' in text[covered:]:
        raise GrammarViolationError(
            f"the answer has a double quote at offset {text.index(chr(34), covered)} that does "
            f"not open a cited quote: {text!r}"
        )
    return tuple(quotes)


def trim_open_quote(text: str) -> str:
    """Drop a quote the token budget cut off before its marker closed (``... "a turning``)."""
    matches = list(_QUOTED.finditer(text))
    covered = matches[-1].end() if matches else 0
    dangling = text.find('"', covered)
    return text if dangling < 0 else text[:dangling].rstrip(" ")
