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
(``3.8``, ``str.join``) with up to ``TERM_EDGE_CHARS`` characters on each side, which the grammar
bounds itself. Where a term's first part is long enough that a word on its way to it may pass
``max_word_chars`` before its dot, the bounded grammar is compiled instead (``bounds_words``).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np

from citeformer.decoding.vocab import Vocabulary
from citeformer.errors import GrammarViolationError
from citeformer.grammar.rules import TERM_EDGE_CHARS
from citeformer.request import GenerationRequest
from citeformer.types import Policy

__all__ = ["WordBound", "bounds_words"]

_BREAKS = frozenset(b" \t\n\r[]!?")
"""Bytes that end a word (a ``.`` can also belong to a dotted term)."""
_DOT = ord(".")


def _chars(raw: bytes) -> int:
    """Characters in ``raw`` as xgrammar counts them: UTF-8 first bytes (a cut one counts)."""
    return sum(1 for byte in raw if not 0x80 <= byte < 0xC0)


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
            cuts = [i for i, byte in enumerate(raw) if byte in _BREAKS]
            stop = next((i for i, byte in enumerate(raw) if byte in _BREAKS or byte == _DOT), None)
            head = raw if stop is None else raw[:stop]
            self.lead[token_id] = _chars(head)
            if not cuts:
                continue
            self.breaks[token_id] = True
            words = [raw[a + 1 : b] for a, b in zip(cuts, cuts[1:], strict=False)]
            self.inner[token_id] = max(
                [_chars(word) for word in words if _DOT not in word], default=0
            )
            tail = raw[cuts[-1] + 1 :]
            self.tail_start[token_id] = cuts[-1] + 1
            self.tail[token_id] = 0 if _DOT in tail else _chars(tail)
        self._masks: dict[tuple[int, int, int, tuple[int, ...]], np.ndarray | None] = {}
        self._lock = threading.Lock()

    def allowed(
        self, max_chars: int, run: int | None, width: int, stop_ids: tuple[int, ...]
    ) -> np.ndarray | None:
        """The packed bitmask row (``width`` int32 words) of what a run of ``run`` may take.

        The tokens that leave every plain word at most ``max_chars`` characters long, after a
        plain word of ``run`` characters (``None``: a dotted word), and the stop tokens; ``None``
        where that is every token.
        """
        run = -1 if run is None else min(run, max_chars + 1)
        key = (max_chars, run, width, stop_ids)
        with self._lock:
            if key not in self._masks:
                forbidden = self.over(max_chars, run)
                forbidden[list(stop_ids)] = False
                self._masks[key] = (
                    _packed(np.flatnonzero(forbidden), width) if forbidden.any() else None
                )
            return self._masks[key]

    def over(self, max_chars: int, run: int, ids: int | slice = slice(None)) -> Any:
        """Whether each token (or the one ``ids`` names) runs a plain word past ``max_chars``.

        ``run``: the plain word the answer ends in, -1 for none to bound (a dotted word).
        """
        forbidden = (self.inner[ids] > max_chars) | (self.tail[ids] > max_chars)
        if run >= 0:
            forbidden |= self.lead[ids] > max_chars - run
        return forbidden


_RUNS: weakref.WeakKeyDictionary[Vocabulary, _Runs] = weakref.WeakKeyDictionary()
_RUNS_LOCK = threading.Lock()


def _runs(vocab: Vocabulary) -> _Runs:
    with _RUNS_LOCK:
        runs = _RUNS.get(vocab)
        if runs is None:
            runs = _RUNS[vocab] = _Runs(vocab.token_bytes)
        return runs


def _packed(forbidden: np.ndarray, width: int) -> np.ndarray:
    bits = np.ones(width * 32, dtype=bool)
    bits[forbidden] = False
    return np.packbits(bits, bitorder="little").view(np.int32)


def bounds_words(request: GenerationRequest) -> bool:
    """Whether ``WordBound`` keeps this request's word length (else its grammar does).

    ``REQUIRED`` answers, unless a dotted term's first part is longer than ``max_word_chars``
    minus ``TERM_EDGE_CHARS``: a word on its way to such a term may pass the bound before its
    dot, which the grammar, seeing the term, allows. Then the bounded grammar is compiled.
    """
    if not request.constrained or request.policy is not Policy.REQUIRED:
        return False
    longest_plain = request.grammar.max_word_chars - TERM_EDGE_CHARS
    return all(len(term.split(".")[0]) <= longest_plain for term in request.terms)


class WordBound:
    """Keeps every plain word of one answer at most ``max_chars`` characters, in its bitmask row.

    For a request that ``bounds_words``. ``stop_ids``: the tokens that end the answer, left to the
    grammar (their text is the tokenizer's, not the answer's). ``advance`` each generated token,
    as the matcher is.
    """

    def __init__(self, vocab: Vocabulary, max_chars: int, stop_ids: Sequence[int] = ()) -> None:
        self._vocab = vocab
        self._runs = _runs(vocab)
        self.max_chars = max_chars
        self._stop_ids = tuple(sorted({int(i) for i in stop_ids if 0 <= i < vocab.size}))
        self._word = b""

    @property
    def run(self) -> int | None:
        """Characters of the plain word the answer ends in (0 after a break; ``None``: dotted)."""
        return None if _DOT in self._word else _chars(self._word)

    def advance(self, token_id: int) -> None:
        """Move past one generated token, or raise if it runs a word past the bound."""
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
        raw = self._vocab.token_bytes[token_id]
        if runs.breaks[token_id]:
            self._word = raw[runs.tail_start[token_id] :]
        else:
            self._word += raw

    def restrict(self, row: np.ndarray) -> None:
        """Clear, in one packed bitmask row (int32 words, in place), the tokens it forbids."""
        mask = self._runs.allowed(self.max_chars, self.run, row.shape[0], self._stop_ids)
        if mask is not None:
            np.bitwise_and(row, mask, out=row)
