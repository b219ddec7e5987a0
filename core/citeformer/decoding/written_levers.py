"""The levers that keep an answer from repeating itself or writing what no source holds.

Token and word n-grams said twice, numbers and code names the sources and question never wrote.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Sequence

import torch

from citeformer.decoding.answer_state import AnswerState
from citeformer.decoding.edits import StepEdits
from citeformer.decoding.lever import Lever
from citeformer.decoding.vocab import WORD, Vocabulary
from citeformer.grammar.markers import MARKER_LIKE

__all__ = ["CodeCopy", "NumberCopy", "RepeatBlock", "WordRepeatBlock"]

_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")
_NAME_TAIL = re.compile(r"[A-Za-z0-9_.]*$")
_TRAILING_NUMBER = re.compile(r"\d+(?:[.,]\d+)*[.,]?$")
_MARKER_SPAN = 25
"""A ``MARKER_LIKE`` match starts at most this many characters before its ``]``."""


class RepeatBlock(Lever):
    """Removes tokens that would repeat a token n-gram of the answer; keeps at least one token.

    The answer's n-grams are indexed as it grows (each token once), by their first n - 1 tokens.
    """

    def __init__(self, n: int, exempt: frozenset[int]) -> None:
        self._n = n
        self._exempt = exempt
        self._seen = 0
        self._next: dict[tuple[int, ...], set[int]] = {}

    def edit(self, state: AnswerState, edits: StepEdits) -> None:  # noqa: D102
        answer, n = state.tokens, self._n
        for end in range(max(self._seen, n - 1), len(answer)):
            token = answer[end]
            if token not in self._exempt:
                self._next.setdefault(tuple(answer[end - n + 1:end]), set()).add(token)
        self._seen = len(answer)
        if len(answer) < n - 1:
            return
        blocked = self._next.get(tuple(answer[len(answer) - (n - 1):]))
        if blocked:
            edits.remove(sorted(blocked))


class WordRepeatBlock(Lever):
    """Removes tokens that would make the answer say a word n-gram it has already said.

    Words are counted as a reader counts them (markers left out, case folded), so
    ``... the default encoding for strings [1]. It is the default encoding for ...`` is caught
    where a token n-gram block, fooled by a different split or a marker in between, is not. A
    token is removed when the word it begins, continues or closes would complete an n-gram that
    the answer already holds; the sources are never counted, ending the answer (``stop_ids``) is
    never blocked, and at least one token is kept.
    """

    def __init__(self, n: int, vocab: Vocabulary, stop_ids: Sequence[int] = ()) -> None:
        self._n = n
        self._parts = vocab.word_parts
        self._closers = frozenset(vocab.word_closers - set(stop_ids))  # ending is always allowed
        self._written: dict[tuple[str, bool | None], frozenset[int]] = {}
        # The answer's words up to ``_anchor`` (a point no later text can change them at) and
        # the words that followed each n - 1 of them there; the rest is read at each step.
        self._words: list[str] = []
        self._next: dict[tuple[str, ...], set[str]] = {}
        self._anchor = 0
        self._scanned = 0
        self._last_open = -_MARKER_SPAN

    def edit(self, state: AnswerState, edits: StepEdits) -> None:  # noqa: D102
        self._settle(state.committed)
        text = MARKER_LIKE.sub(" ", state.text[self._anchor:])
        tail = [w.lower() for w in WORD.findall(text)]
        blocked: set[int] = set()
        if text and WORD.fullmatch(text[-1]):
            # The answer ends inside a word: the next token continues it, or closes it and
            # perhaps begins the next one.
            partial = tail[-1]
            for word in self._said(tail[:-1]):
                if word == partial:
                    blocked |= self._closers
                elif word.startswith(partial):
                    blocked |= self._writing(word[len(partial):], glued=True)
            for word in self._said(tail):
                blocked |= self._writing(word, glued=False)
        else:
            for word in self._said(tail):
                blocked |= self._writing(word, glued=None)
        if blocked:
            edits.remove(sorted(blocked))

    def _settle(self, committed: str) -> None:
        """Move the anchor to the last point of ``committed`` where the words before are final.

        After a ``]`` or a line break no marker (``MARKER_LIKE``) spans the point; after other
        white space, none does unless a ``[`` stands in the 25 characters before it. Words end
        there too, so the text on each side gives the words it gives whole.
        """
        settled = self._anchor
        last_open = self._last_open
        for index in range(self._scanned, len(committed)):
            char = committed[index]
            if char == "[":
                last_open = index
            elif char in "]\n" or (char.isspace() and index - last_open >= _MARKER_SPAN):
                settled = index + 1
        self._scanned, self._last_open = len(committed), last_open
        if settled == self._anchor:
            return
        text = MARKER_LIKE.sub(" ", committed[self._anchor:settled])
        n, words = self._n, self._words
        for word in WORD.findall(text):
            words.append(word.lower())
            if len(words) >= n:
                self._next.setdefault(tuple(words[-n:-1]), set()).add(words[-1])
        self._anchor = settled

    def _said(self, tail: list[str]) -> set[str]:
        """The words that followed the answer's last ``n - 1`` words where it wrote them before.

        The answer's words are the settled ones, then ``tail``.
        """
        n, settled = self._n, self._words
        if len(settled) + len(tail) < n - 1:
            return set()
        recent = settled[max(0, len(settled) - (n - 1)):] + tail
        context = tuple(recent[len(recent) - (n - 1):])
        found = set(self._next.get(context, ()))  # the n-grams of the settled words
        for i in range(len(recent) - n + 1):  # those that end in the tail
            if tuple(recent[i:i + n - 1]) == context:
                found.add(recent[i + n - 1])
        return found

    def _writing(self, word: str, *, glued: bool | None) -> frozenset[int]:
        """Tokens that write ``word`` or may go on to it (found once per word and ``glued``).

        A token's word part is the whole of it, or a start of it that the token leaves open.
        ``glued``: only tokens whose word part starts the token (``True``), only those after a
        space or punctuation (``False``), any (``None``).
        """
        key = (word, glued)
        found = self._written.get(key)
        if found is None:
            ids = set()
            for end in range(1, len(word) + 1):
                for token_id, starts, closes in self._parts.get(word[:end], ()):
                    if glued is not None and starts != glued:
                        continue
                    if end == len(word) or not closes:
                        ids.add(token_id)
            found = self._written[key] = frozenset(ids)
        return found


class NumberCopy(Lever):
    """Penalises digit tokens that write a number no source holds (outside markers)."""

    def __init__(self, vocab: Vocabulary, texts: Sequence[str], penalty: float) -> None:
        self._vocab = vocab
        self._penalty = penalty
        numbers = {m.group(0) for text in texts for m in _NUMBER.finditer(text)}
        self._prefixes = {n[:i] for n in numbers for i in range(1, len(n) + 1)}
        self._numbers = numbers
        self._bad: dict[str, torch.Tensor] = {}

    def edit(self, state: AnswerState, edits: StepEdits) -> None:  # noqa: D102
        if state.last_open > state.last_close:
            return  # inside a marker: the grammar chooses its digits
        run = _trailing_number(state.text)
        bad = self._bad.get(run)
        if bad is None:
            bad = self._bad[run] = self._invented(run)
        edits.add(bad, -self._penalty)

    def _invented(self, run: str) -> torch.Tensor:
        """The digit tokens that, after the number ``run`` the answer ends in, write a new one."""
        bad = []
        for token_id, token in zip(
            self._vocab.digit_ids.tolist(), self._vocab.digit_texts, strict=True
        ):
            stripped = token.lstrip(" ")
            spaced = len(stripped) < len(token)
            lead = _NUMBER.match(stripped)
            digits = lead.group(0) if lead else ""
            number = digits if spaced or not run else run + digits
            whole = len(digits) < len(stripped)
            if (number in self._numbers) if whole else (number in self._prefixes):
                continue
            bad.append(token_id)
        return torch.tensor(bad, dtype=torch.long)


class CodeCopy(Lever):
    """Inside a backtick span, penalises tokens that write a name no source or question holds.

    A small model invents identifiers in code spans (`` `textwrap.wrap_whitesp` `` where the
    source says ``expandtabs``). The names are the runs of letters, digits, ``_`` and ``.`` of the
    texts, each dotted part and what follows each dot too (``wrap`` of ``textwrap.wrap``). A token
    made only of those characters, continuing the name the span ends in or starting a new one
    after a space, is penalised unless the name it makes begins a known one.
    """

    def __init__(self, vocab: Vocabulary, texts: Sequence[str], penalty: float) -> None:
        names: set[str] = set()
        for text in texts:
            for match in _NAME.finditer(text):
                name = match.group(0).rstrip(".")
                names.update(name[i + 1:] for i, c in enumerate(name) if c == ".")
                names.add(name)
        self._names = sorted(n for n in names if n)
        self._fresh = {n[:i] for n in self._names for i in range(1, len(n) + 1)}
        self._penalty = penalty
        self._ids, self._texts = vocab.name_tokens
        self._bad: dict[str, torch.Tensor] = {}
        self._seen = 0
        self._ticks = 0
        self._last_tick = -1

    def edit(self, state: AnswerState, edits: StepEdits) -> None:  # noqa: D102
        new = state.committed[self._seen:]
        if "`" in new:
            self._ticks += new.count("`")
            self._last_tick = self._seen + new.rfind("`")
        self._seen += len(new)
        opened = self._last_tick  # a cut character is never a backtick: the text's count
        if opened < 0 or self._ticks % 2 == 0:
            return
        text = state.text
        run = _NAME_TAIL.search(text, _run_start(text, _is_name_char, opened + 1))
        name = run.group(0) if run else ""
        bad = self._bad.get(name)
        if bad is None:
            bad = self._bad[name] = self._invented(name)
        edits.add(bad, -self._penalty)

    def _invented(self, name: str) -> torch.Tensor:
        """The name tokens that, after ``name`` the span ends in, begin no known name."""
        start = bisect.bisect_left(self._names, name)
        known = self._names[start:bisect.bisect_left(self._names, name + "\U0010ffff", start)]
        starts: set[str] = set()
        for whole in known:  # every longer prefix a glued token could make
            starts.update(whole[:i] for i in range(len(name) + 1, len(whole) + 1))
        fresh = self._fresh
        invented = [
            (t[1:] not in fresh) if t.startswith(" ") else (name + t not in starts)
            for t in self._texts
        ]
        return self._ids[torch.tensor(invented, dtype=torch.bool)] if invented else self._ids


def _is_name_char(char: str) -> bool:
    return char.isascii() and (char.isalnum() or char in "_.")


def _trailing_number(text: str) -> str:
    """The number the text ends in (``_TRAILING_NUMBER``), read from its end only."""
    match = _TRAILING_NUMBER.search(text, _run_start(text, lambda c: c.isdigit() or c in ".,"))
    return match.group(0) if match else ""


def _run_start(text: str, inside: Callable[[str], bool], floor: int = 0) -> int:
    """Where the run of characters ``inside`` accepts, that ``text`` ends in, starts.

    A line break at the very end is stepped over, as ``$`` steps over it. A search from there of
    a pattern anchored at the end and made of those characters finds what a search of the whole
    text does; ``floor``: no earlier than this.
    """
    index = len(text) - 1 if text.endswith("\n") else len(text)
    while index > floor and inside(text[index - 1]):
        index -= 1
    return index
