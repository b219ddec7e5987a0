"""One table per vocabulary: which tokens open a marker, write an id, end a sentence, and so on.

Every lever and the quote guard read their token classes from one ``Vocabulary``, built once
per vocabulary (``Vocabulary.cached``) from the raw bytes of every token, as xgrammar decodes
them. It needs no model and no tokenizer object, so a serving engine's processor builds the same
table from the same bytes.
"""

from __future__ import annotations

import bisect
import re
import threading
import weakref
from collections.abc import Callable, Sequence
from functools import cached_property
from typing import Any, TypeVar

import numpy as np
import torch

__all__ = ["PunctuationRuns", "SortedVocab", "Vocabulary"]

# A word as the answer's readers count it: letters, digits, apostrophes and hyphens.
WORD = re.compile(r"[\w'-]+")
_WORD_START = re.compile(r"([^\w'-]*)([\w'-]+)(.*)", flags=re.DOTALL)
_QUOTE = ord('"')
# ASCII punctuation and symbols but the marker brackets, which the grammar alone places.
PUNCTUATION = frozenset(b"!\"#$%&'()*+,-./:;<=>?@\\^_`{|}~")


_Table = TypeVar("_Table")


class Vocabulary:
    """The token classes of one vocabulary, by token id (built in about a second for 50k tokens).

    ``token_bytes[i]`` is the raw bytes token i writes (empty for special tokens).
    """

    def __init__(self, token_bytes: Sequence[bytes]) -> None:
        self.token_bytes = list(token_bytes)
        """Raw bytes of every token, by token id."""
        vocab = self.token_bytes
        self.size = len(vocab)
        """Number of token ids."""
        self.enders = _ids(vocab, lambda raw: raw[:1] in (b".", b"!", b"?"))
        """Tokens that begin with a sentence terminator."""
        self.loud_enders = _ids(vocab, lambda raw: raw[:1] in (b"!", b"?"))
        """Tokens that begin with ``!`` or ``?``."""
        self.chainers = _ids(vocab, lambda raw: raw[:1] in (b",", b";"))
        """Tokens that begin with ``,`` or ``;``: what chains a clause onto a claim."""
        self.openers = _ids(vocab, lambda raw: raw.lstrip(b" ").startswith(b"["))
        """Tokens that open a marker (``[``, `` [``)."""
        self.glued_openers = _ids(vocab, lambda raw: re.search(rb"[,;:(] ?\[", raw))
        """Tokens that write a marker opener right after , ; : or ( themselves (``,[``)."""
        self.digit_ids = _ids(vocab, lambda raw: raw.lstrip(b" ")[:1].isdigit())
        """Tokens that begin (after spaces) with a digit."""
        self.digit_texts = [
            vocab[i].decode("utf-8", errors="replace") for i in self.digit_ids.tolist()
        ]
        """Their text."""
        self.exempt = frozenset(
            token_id for token_id, raw in enumerate(vocab)
            if not raw or re.search(rb"[\[\]0-9]", raw)
        )
        """Tokens the repeat block never removes: markers, digits, special tokens."""
        self._tables: dict[Callable[[list[bytes]], Any], Any] = {}
        self._tables_lock = threading.Lock()
        self._build_id_tokens()

    def _build_id_tokens(self) -> None:
        ids: list[int] = []
        digits: list[str] = []
        closed: list[bool] = []
        opens: list[bool] = []
        for token_id, raw in enumerate(self.token_bytes):
            if not raw or not (raw[:1].isdigit() or raw[:1] == b"]"):
                continue
            text = raw.decode("utf-8", errors="replace")
            lead = re.match(r"\d*", text).group(0)  # type: ignore[union-attr]
            ids.append(token_id)
            digits.append(lead)
            closed.append(len(lead) < len(text))
            opens.append(re.match(r"\]\s*\[", text[len(lead):]) is not None)
        self.id_token_ids = torch.tensor(ids, dtype=torch.long)
        """Tokens that can write part of a marker's id: those starting with a digit or ``]``."""
        self.id_digits = digits
        """Leading digits of each id token ("" for a token starting with ``]``)."""
        self.id_closed = closed
        """Whether something follows the digits, so that the id token ends the id."""
        self.id_opens = opens
        """Whether the id token also opens the next marker of the group (``][``)."""

    @cached_property
    def any_openers(self) -> np.ndarray:
        """Every token that writes a marker opener: ``glued_openers``, then ``openers``."""
        return torch.cat([self.glued_openers, self.openers]).numpy()

    @cached_property
    def opener_bits(self) -> tuple[np.ndarray, np.ndarray]:
        """Where each of ``openers`` is in a row of xgrammar's bitmask: its word, its bit."""
        return self.opener_ids >> 5, self.opener_ids & 31

    @cached_property
    def opener_ids(self) -> np.ndarray:
        """``openers`` as one array: a lever's edit names it without a torch call in the step."""
        return self.openers.numpy()

    @cached_property
    def chainer_ids(self) -> np.ndarray:
        """``chainers`` as one array, as ``opener_ids``."""
        return self.chainers.numpy()

    @cached_property
    def glued_opener_ids(self) -> np.ndarray:
        """``glued_openers`` as one array every answer of the vocabulary shares."""
        return self.glued_openers.numpy()

    @cached_property
    def loud_ender_ids(self) -> np.ndarray:
        """``loud_enders`` as one array every answer of the vocabulary shares."""
        return self.loud_enders.numpy()

    @cached_property
    def id_groups(self) -> dict[str, tuple[list[int], list[int], list[int]]]:
        """The id tokens by their leading digits, as positions in ``id_token_ids``.

        Per digit string: the tokens that end the id, those that end it and open the next marker
        (``][``), and those that do not end it.
        """
        groups: dict[str, tuple[list[int], list[int], list[int]]] = {}
        for position, (digits, closed, opens) in enumerate(
            zip(self.id_digits, self.id_closed, self.id_opens, strict=True)
        ):
            ends, ends_and_opens, open_ended = groups.setdefault(digits, ([], [], []))
            if not closed:
                open_ended.append(position)
            elif opens:
                ends_and_opens.append(position)
            else:
                ends.append(position)
        return groups

    @cached_property
    def texts(self) -> list[str]:
        """Every token's text (bytes decoded, a broken character replaced)."""
        return [raw.decode("utf-8", errors="replace") for raw in self.token_bytes]

    @cached_property
    def name_tokens(self) -> tuple[torch.Tensor, list[str]]:
        """The ids and texts of the tokens made of name characters, for ``CodeCopy``.

        Name characters: letters, digits, ``_`` and ``.``, after at most one leading space.
        """
        found = [(i, t) for i, t in enumerate(self.texts) if _NAME_TOKEN.match(t)]
        return torch.tensor([i for i, _ in found], dtype=torch.long), [t for _, t in found]

    @cached_property
    def word_parts(self) -> dict[str, list[tuple[int, bool, bool]]]:
        """Tokens by the (case-folded) word their text begins with: ``(id, glued, ends)``.

        ``glued``: the word part starts the token (it continues a word the answer ends in);
        ``ends``: the token closes that word itself.
        """
        parts: dict[str, list[tuple[int, bool, bool]]] = {}
        for token_id, text in enumerate(self.texts):
            match = _WORD_START.match(text)
            if match is None or "[" in match.group(1):
                continue
            lead, word, rest = match.groups()
            parts.setdefault(word.lower(), []).append((token_id, not lead, bool(rest)))
        return parts

    @cached_property
    def word_closers(self) -> frozenset[int]:
        """Tokens that close a word the answer ends in (a space or punctuation begins them).

        Marker brackets are left out.
        """
        return frozenset(
            token_id for token_id, text in enumerate(self.texts)
            if text and "[" not in text and "]" not in text and not WORD.match(text)
        )

    @cached_property
    def punctuation_runs(self) -> PunctuationRuns:
        """Each token's runs of one ASCII punctuation character, for ``PunctuationRun``."""
        return PunctuationRuns(self.token_bytes)

    def table(self, kind: Callable[[list[bytes]], _Table]) -> _Table:
        """The table ``kind(token_bytes)`` of this vocabulary, built once.

        Under a lock: two threads asking at once build it once.
        """
        with self._tables_lock:
            if kind not in self._tables:
                self._tables[kind] = kind(self.token_bytes)
            found: _Table = self._tables[kind]
            return found

    @cached_property
    def sorted(self) -> SortedVocab:
        """The token bytes sorted by prefix, for the verbatim quote guard."""
        return SortedVocab(self.token_bytes)

    # TokenizerInfo is unhashable: keyed by id, with a weak reference to check the id's owner.
    _cache: dict[int, tuple[weakref.ref[Any], Vocabulary]] = {}
    _lock = threading.Lock()

    @classmethod
    def cached(cls, tokenizer_info: Any) -> Vocabulary:
        """The table of an ``xgrammar.TokenizerInfo``, built once and kept while it lives."""
        key = id(tokenizer_info)
        with cls._lock:
            entry = cls._cache.get(key)
            if entry is None or entry[0]() is not tokenizer_info:
                entry = (weakref.ref(tokenizer_info), cls(tokenizer_info.decoded_vocab))
                cls._cache[key] = entry
            return entry[1]


class PunctuationRuns:
    """Per token, its runs of one ASCII punctuation character (marker brackets aside).

    The longest run inside it, and the character and length of the run it begins with
    (``lead``: -1 where it begins with none).
    """

    def __init__(self, token_bytes: Sequence[bytes]) -> None:
        longest, lead, lead_length = [], [], []
        for raw in token_bytes:
            best, start = 0, 0
            for end in range(1, len(raw) + 1):
                if end == len(raw) or raw[end] != raw[start]:
                    if raw[start] in PUNCTUATION:
                        best = max(best, end - start)
                        if start == 0:
                            lead.append(raw[0])
                            lead_length.append(end)
                    start = end
            if not raw or raw[0] not in PUNCTUATION:
                lead.append(-1)
                lead_length.append(0)
            longest.append(best)
        self.longest = np.array(longest, dtype=np.int32)
        """The longest run of one punctuation character in each token."""
        self.lead = np.array(lead, dtype=np.int32)
        """The punctuation byte each token begins with, or -1."""
        self.lead_length = np.array(lead_length, dtype=np.int32)
        """How many times the token repeats it at its start."""
        self._longer: dict[int, np.ndarray] = {}

    def longer_than(self, limit: int) -> np.ndarray:
        """The ids of the tokens that hold a run longer than ``limit`` themselves.

        One array per limit, shared by every answer that asks: their removals are one entry.
        """
        found = self._longer.get(limit)
        if found is None:
            found = self._longer[limit] = np.flatnonzero(self.longest > limit)
        return found

    def extending(self, byte: int, run: int, limit: int) -> np.ndarray:
        """The ids of the tokens that would make a run of ``run`` ``byte``s too long."""
        return np.flatnonzero((self.lead == byte) & (self.lead_length > limit - run))


class SortedVocab:
    """A vocabulary's token bytes, sorted so that the tokens sharing a prefix form one range."""

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


_NAME_TOKEN = re.compile(r" ?[A-Za-z0-9_.]+$")


def _ids(vocab: Sequence[bytes], keep: Callable[[bytes], object]) -> torch.Tensor:
    return torch.tensor([i for i, raw in enumerate(vocab) if raw and keep(raw)], dtype=torch.long)
