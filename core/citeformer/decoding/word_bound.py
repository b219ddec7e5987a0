"""A ``REQUIRED`` answer's longest word, kept in the grammar's bitmask instead of the grammar.

The ``REQUIRED`` grammar bounds a word at ``max_word_chars`` characters (``char{1,32}``). Xgrammar
fills a bounded repetition's mask token by token for everything that continues a word: 141 µs
a row on SmolLM2's vocabulary, against 58 µs for ``char+`` with this bound (median over the
stored technical answers, one thread; ``benchmarks/steering_speed.py --sections grammar``).
Where citeformer's own matcher fills the mask (transformers, llama.cpp, its processor inside
vLLM), the grammar is compiled with ``char+`` (``local_grammar``) and ``WordBound`` clears, in
the same bitmask, every token that would run a word past the bound: the tokens allowed are
exactly those of the bounded grammar. A serving engine that masks the grammar itself is sent the
bounded text.

A word is a run of the grammar's word characters (anything but white space, brackets and
``.!?``), counted in characters as xgrammar counts them. A word holding a dot is a dotted term
(``3.8``, ``str.join``) with up to ``TERM_EDGE_CHARS`` characters on each side: the grammar
bounds the edge before the term, ``term_tail.TermTails`` the one after it. Where a term's first
part is long enough that a word on its way to it may pass ``max_word_chars`` before its dot, or a
word of the refusal sentence the model may choose is longer than ``max_word_chars``, the bounded
grammar is compiled instead (``bounds_words``).

The same goes for a sentence's word count (``max_sentence_words``): xgrammar checks a token that
ends one word and begins the next (`` the``) against the whole stack in ``word (" " word){0,23}``,
and fills that rule's mask up to 16 times slower on a 128k-token vocabulary than one run over the
characters of a sentence's words (``benchmarks/steering_speed.py --sections shapes``). Where
``counts_words``, the grammar leaves the count out (and writes a sentence's plain words as one
run, ``char (char | " " char)*``, where no dotted term may appear) and ``WordBound`` clears every
token that would begin a word past the bound.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from citeformer.decoding.term_tail import BREAKS, TermTails, chars, split_words
from citeformer.decoding.vocab import Vocabulary
from citeformer.errors import GrammarViolationError
from citeformer.grammar.rules import TERM_EDGE_CHARS
from citeformer.request import GenerationRequest
from citeformer.types import Policy

__all__ = ["WordBound", "bounds_words", "counts_words", "word_bound_for"]

_DOT = ord(".")

# Where a token may begin within a sentence of the REQUIRED grammar: after a space (or at the
# answer's start), inside a word, inside a cite-group's brackets, after its "]", after the
# sentence's terminator.
_SPACE, _WORD, _GROUP, _CLOSED, _ENDED = range(5)
_PLACES = 5


def _move(place: int, byte: int) -> tuple[int, bool, bool]:
    """The place after ``byte``, whether it begins a word, whether it ends a sentence.

    Only moves the grammar allows matter (the grammar's mask is applied too): a word begins at a
    word byte after a space (a UTF-8 continuation byte never begins one), a sentence ends at a
    terminator after a cite-group's ``]``; a ``.`` inside a word belongs to a dotted term.
    """
    if place == _GROUP:
        return (_CLOSED if byte == ord("]") else _GROUP), False, False
    if place == _CLOSED and byte in b".!?":
        return _ENDED, False, True
    if byte in b" \t\n\r":
        return _SPACE, False, False
    if byte == ord("["):
        return _GROUP, False, False
    if byte == ord("]"):
        return _CLOSED, False, False
    if place == _WORD:
        return _WORD, False, False
    return _WORD, not 0x80 <= byte < 0xC0 and byte not in b".!?", False


_MOVES = [[_move(place, byte) for byte in range(256)] for place in range(_PLACES)]


class _Runs:
    """Per token of one vocabulary, the words it writes, in characters.

    ``lead``: the characters at its start before any break or dot (they continue the answer's
    last word); ``breaks``: whether it ends that word. ``inner``: its longest word between two
    breaks that holds no dot (a finished plain word); ``tail``: the word it ends in after a break
    when that holds no dot, else 0 (a dotted word is the grammar's to bound).
    """

    def __init__(self, token_bytes: list[bytes]) -> None:
        size = len(token_bytes)
        self.lead = np.zeros(size, np.int32)
        self.breaks = np.zeros(size, bool)
        self.inner = np.zeros(size, np.int32)
        self.tail = np.zeros(size, np.int32)
        self.tail_start = np.zeros(size, np.int32)
        for token_id, raw in enumerate(token_bytes):
            cuts = [i for i, byte in enumerate(raw) if byte in BREAKS]
            stop = next((i for i, byte in enumerate(raw) if byte in BREAKS or byte == _DOT), None)
            head = raw if stop is None else raw[:stop]
            self.lead[token_id] = chars(head)
            if not cuts:
                continue
            self.breaks[token_id] = True
            words = [raw[a + 1 : b] for a, b in zip(cuts, cuts[1:], strict=False)]
            self.inner[token_id] = max(
                [chars(word) for word in words if _DOT not in word], default=0
            )
            tail = raw[cuts[-1] + 1 :]
            self.tail_start[token_id] = cuts[-1] + 1
            self.tail[token_id] = 0 if _DOT in tail else chars(tail)
        self._masks = _MaskCache()

    def allowed(
        self, max_chars: int, run: int | None, width: int, stop_ids: tuple[int, ...]
    ) -> np.ndarray | None:
        """The packed bitmask row (``width`` int32 words) of what a run of ``run`` may take.

        The tokens that leave every plain word at most ``max_chars`` characters long, after a
        plain word of ``run`` characters (``None``: a dotted word), and the stop tokens; ``None``
        where that is every token.
        """
        run = -1 if run is None else min(run, max_chars + 1)
        return self._masks.get(
            (max_chars, run, width, stop_ids), lambda: self.over(max_chars, run), width, stop_ids
        )

    def over(self, max_chars: int, run: int, ids: int | slice = slice(None)) -> Any:
        """Whether each token (or the one ``ids`` names) runs a plain word past ``max_chars``.

        ``run``: the plain word the answer ends in, -1 for none to bound (a dotted word).
        """
        forbidden = (self.inner[ids] > max_chars) | (self.tail[ids] > max_chars)
        if run >= 0:
            forbidden |= self.lead[ids] > max_chars - run
        return forbidden


class _Counts:
    """Per token of one vocabulary and each place it may begin at, the words it begins.

    ``first[place]``: words it begins before any sentence end (they count for the answer's
    current sentence); ``later[place]``: the most words of a sentence it begins after one;
    ``ends``: whether it ends a sentence; ``trail``: then, the words of the sentence it ends in;
    ``final``: the place after it.
    """

    def __init__(self, token_bytes: list[bytes]) -> None:
        shape = (_PLACES, len(token_bytes))
        self.first = np.zeros(shape, np.int32)
        self.later = np.zeros(shape, np.int32)
        self.ends = np.zeros(shape, bool)
        self.trail = np.zeros(shape, np.int32)
        self.final = np.zeros(shape, np.int8)
        special = frozenset(b" \t\n\r[]")
        for token_id, raw in enumerate(token_bytes):
            if not raw or special.isdisjoint(raw) and raw[:1] not in (b".", b"!", b"?"):
                # Word bytes alone: a word where a token at a space begins, nothing in brackets.
                begins = bool(raw) and _MOVES[_SPACE][raw[0]][1]
                for place in (_SPACE, _CLOSED, _ENDED):
                    self.first[place, token_id] = begins
                    self.final[place, token_id] = _WORD
                self.final[_WORD, token_id] = _WORD
                self.final[_GROUP, token_id] = _GROUP
                continue
            for place in range(_PLACES):
                self._walk(token_id, raw, place)
        self.most_first = self.first.max(axis=1)
        self.most_later = int(self.later.max())
        self._masks = _MaskCache()

    def _walk(self, token_id: int, raw: bytes, place: int) -> None:
        count, ended, later = 0, False, 0
        start = place
        for byte in raw:
            place, begins, ends = _MOVES[place][byte]
            if ends:
                if ended:
                    later = max(later, count)
                else:
                    self.first[start, token_id] = count
                ended, count = True, 0
            elif begins:
                count += 1
        if ended:
            self.ends[start, token_id] = True
            self.trail[start, token_id] = count
            self.later[start, token_id] = max(later, count)
        else:
            self.first[start, token_id] = count
        self.final[start, token_id] = place

    def allowed(
        self, max_words: int, place: int, words: int, width: int, stop_ids: tuple[int, ...]
    ) -> np.ndarray | None:
        """The packed bitmask row of what may follow ``words`` words at ``place``, or ``None``.

        The tokens that begin no word past ``max_words`` in any sentence, and the stop tokens.
        """
        if words + self.most_first[place] <= max_words and self.most_later <= max_words:
            return None
        return self._masks.get(
            (max_words, place, words, width, stop_ids),
            lambda: self.over(max_words, place, words), width, stop_ids,
        )

    def over(self, max_words: int, place: int, words: int, ids: int | slice = slice(None)) -> Any:
        """Whether each token (or the one ``ids`` names) begins a word past ``max_words``."""
        return (self.first[place, ids] > max_words - words) | (self.later[place, ids] > max_words)


class _MaskCache:
    """Packed bitmask rows by key, each built once (``None`` where it keeps every token)."""

    def __init__(self) -> None:
        self._masks: dict[tuple[Any, ...], np.ndarray | None] = {}
        self._lock = threading.Lock()

    def get(
        self, key: tuple[Any, ...], forbidden: Any, width: int, stop_ids: tuple[int, ...]
    ) -> np.ndarray | None:
        with self._lock:
            if key not in self._masks:
                cleared = forbidden()
                cleared[list(stop_ids)] = False
                self._masks[key] = (
                    _packed(np.flatnonzero(cleared), width) if cleared.any() else None
                )
            return self._masks[key]


def _packed(forbidden: np.ndarray, width: int) -> np.ndarray:
    bits = np.ones(width * 32, dtype=bool)
    bits[forbidden] = False
    return np.packbits(bits, bitorder="little").view(np.int32)


def bounds_words(request: GenerationRequest) -> bool:
    """Whether ``WordBound`` keeps this request's word length (else its grammar does).

    ``REQUIRED`` answers, unless a dotted term's first part is longer than ``max_word_chars``
    minus ``TERM_EDGE_CHARS``: a word on its way to such a term may pass the bound before its
    dot, which the grammar, seeing the term, allows; or unless a word of the refusal sentence the
    model may choose is longer than ``max_word_chars`` (the refusal is a literal the grammar
    allows whole). Then the bounded grammar is compiled.
    """
    if not request.constrained or request.policy is not Policy.REQUIRED:
        return False
    longest = request.grammar.max_word_chars
    refusal = (request.offered_refusal or "").encode()
    if any(chars(word) > longest for word in split_words(refusal)):
        return False
    return all(len(term.split(".")[0]) <= longest - TERM_EDGE_CHARS for term in request.terms)


def counts_words(request: GenerationRequest) -> bool:
    """Whether ``WordBound`` keeps this request's sentence word count (else its grammar does).

    Where it ``bounds_words``, unless the refusal sentence the model may choose holds more words
    than a sentence may: the refusal is one literal, its words all of one count.
    """
    if not bounds_words(request):
        return False
    refusal = request.offered_refusal
    return refusal is None or len(refusal.split()) <= request.grammar.max_sentence_words


def word_bound_for(
    request: GenerationRequest, vocab: Vocabulary, stop_ids: Sequence[int]
) -> WordBound | None:
    """What bounds the words of ``request`` beside its ``local_grammar``, or ``None``."""
    if not bounds_words(request):
        return None
    max_words = request.grammar.max_sentence_words if counts_words(request) else None
    return WordBound(
        vocab, request.grammar.max_word_chars, stop_ids, max_words, terms=request.terms
    )


class WordBound:
    """Keeps every plain word of one answer at most ``max_chars`` characters, in its bitmask row.

    For a request that ``bounds_words`` (``word_bound_for`` makes it); ``max_words``, where it
    ``counts_words``: the most words of a sentence; ``terms``: the request's dotted terms, whose
    edge after them it bounds. ``stop_ids``: the tokens that end the answer, left to the grammar
    (their text is the tokenizer's, not the answer's). ``advance`` each generated token, as the
    matcher is.
    """

    def __init__(
        self, vocab: Vocabulary, max_chars: int, stop_ids: Sequence[int] = (),
        max_words: int | None = None, terms: Sequence[str] = (),
    ) -> None:
        self._vocab = vocab
        self._tails = TermTails(vocab, terms) if terms else None
        self._runs = vocab.table(_Runs)
        self._counts = None if max_words is None else vocab.table(_Counts)
        self.max_chars = max_chars
        self.max_words = max_words
        self._stop_ids = tuple(sorted({int(i) for i in stop_ids if 0 <= i < vocab.size}))
        self._word = b""
        self._place = _SPACE
        self.words = 0
        """Words of the answer's current sentence (counted where ``max_words`` is given)."""

    @property
    def run(self) -> int | None:
        """Characters of the plain word the answer ends in (0 after a break; ``None``: dotted)."""
        return None if _DOT in self._word else chars(self._word)

    def advance(self, token_id: int) -> None:
        """Move past one generated token, or raise if it runs a word or sentence past its bound."""
        runs = self._runs
        if token_id >= len(runs.lead) or token_id in self._stop_ids:
            return
        run = self.run
        if runs.over(self.max_chars, -1 if run is None else run, token_id):
            raise GrammarViolationError(
                f"token {token_id} was generated but it makes a word longer than "
                f"{self.max_chars} characters; the logits were not masked with this answer's "
                "grammar"
            )
        if self._counts is not None and self.max_words is not None:
            self._count(self._counts, self.max_words, token_id)
        raw = self._vocab.token_bytes[token_id]
        if self._tails is not None and not self._tails.fits_after(self._word, raw):
            raise GrammarViolationError(
                f"token {token_id} was generated but it writes more than {TERM_EDGE_CHARS} "
                "characters after a dotted term; the logits were not masked with this answer's "
                "grammar"
            )
        if runs.breaks[token_id]:
            self._word = raw[runs.tail_start[token_id] :]
        else:
            self._word += raw

    def _count(self, counts: _Counts, max_words: int, token_id: int) -> None:
        place = self._place
        if counts.over(max_words, place, self.words, token_id):
            raise GrammarViolationError(
                f"token {token_id} was generated but it makes a sentence longer than "
                f"{max_words} words; the logits were not masked with this answer's grammar"
            )
        if counts.ends[place, token_id]:
            self.words = int(counts.trail[place, token_id])
        else:
            self.words += int(counts.first[place, token_id])
        self._place = int(counts.final[place, token_id])

    def restrict(self, row: np.ndarray) -> None:
        """Clear, in one packed bitmask row (int32 words, in place), the tokens it forbids."""
        mask = self._runs.allowed(self.max_chars, self.run, row.shape[0], self._stop_ids)
        if mask is not None:
            np.bitwise_and(row, mask, out=row)
        if self._tails is not None:
            self._tails.restrict(row, self._word)
        if self._counts is not None and self.max_words is not None:
            mask = self._counts.allowed(
                self.max_words, self._place, self.words, row.shape[0], self._stop_ids
            )
            if mask is not None:
                np.bitwise_and(row, mask, out=row)
