"""The substring automata behind verbatim quotes: which texts a quote of a source may be.

Under ``QUOTES_ONLY`` a quote is ``"text" [k]``: ``text`` must occur in source k, where a run of
white space in the source matches one space in the quote, and it must begin and end at word
boundaries there (``"the e"`` is not a quote of "the entrance"). Each source's quotable text (its
first ``quotable_chars`` characters, white space folded) is indexed by a suffix automaton, which
accepts exactly its substrings; reading the character before a quote (or a segment-start
sentinel) first is what ties a quote to a word start.

Two forms enforce the same automaton: ``citeformer.decoding.quote_guard.QuoteGuard`` over the
answer's bytes (local generation) and ``citeformer.grammar.quote_rules`` as GBNF rules (for
engines that take the grammar as text).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = [
    "BOUNDARY",
    "BYTE_WEIGHT",
    "SENTINEL",
    "SPACE",
    "QuotableText",
    "SuffixAutomaton",
    "WordAutomaton",
]

_WHITESPACE = re.compile(r"\s+")
SPACE = ord(" ")
# Segments are written between sentinels, so that their start and end count as word boundaries.
SENTINEL = 0
# Bytes that end a word: ASCII that is not a letter or digit. Non-ASCII bytes belong to words.
BOUNDARY = frozenset(b for b in range(128) if not chr(b).isalnum())
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
    def fold(cls, original: str, quotable_chars: int) -> QuotableText:
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
BYTE_WEIGHT = {b: 0 if b & 0xC0 == 0x80 else 1 for b in range(256)}


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
        self.closable = [any(b in BOUNDARY for b in t) for t in self.next]
        """Whether a quote may end at each state: some occurrence is followed by a boundary."""
        self.starts = tuple(t for b, t in self.next[0].items() if b in BOUNDARY)
        """The states after a boundary character: where every quote begins."""
