"""The levers: each one reads the answer so far and moves or removes probability in its logits.

Every lever steers one answer, after the grammar's and the quotes' masks: it reads the answer
from the ``AnswerState`` its row keeps (``citeformer.decoding.answer_state``: kept from each
token's characters alone and shared by every lever of the row; a lever reads a bounded tail of
it, the claim, the sentence or the last bytes, never the whole answer) and asks the step's
``StepEdits`` to remove tokens (keeping at least one) or to add finite values to some; the edits
of every row are then made together, in a few tensor operations over the batch
(``citeformer.decoding.edits``). So a token a mask removed stays removed: the 1..N guarantee and
verbatim quotes are untouched whatever the levers do. The settings behind the readability levers
are ``citeformer.readability.Readability``; ``EvidenceBias`` is the evidence scorer's
(``citeformer.evidence``).

``levers_for`` lists the levers of one request, in the order they act.
"""

from __future__ import annotations

import bisect
import math
import re
from collections.abc import Callable, Sequence

import numpy as np
import torch

from citeformer.decoding.answer_state import AnswerState, group_start
from citeformer.decoding.edits import CHAIN_SHARE, StepEdits, Wanted, WantedReader
from citeformer.decoding.vocab import PUNCTUATION, WORD, Vocabulary
from citeformer.errors import InvalidInputError
from citeformer.evidence.scoring import (
    Evidence,
    LexicalEvidence,
    Support,
    content_words,
)
from citeformer.grammar.markers import CLOSED_GROUP, MARKER_LIKE, OPEN_GROUP
from citeformer.readability import Readability
from citeformer.request import GenerationRequest
from citeformer.types import Policy

__all__ = [
    "AnswerState",
    "CachedSupport",
    "CiteAfterWord",
    "CiteClosed",
    "ClaimWords",
    "ClauseEnd",
    "CodeCopy",
    "EndBias",
    "EndIntent",
    "EvidenceBias",
    "Lever",
    "NumberCopy",
    "PeriodAfterMarker",
    "PunctuationRun",
    "Removing",
    "RepeatBlock",
    "WordRepeatBlock",
    "WrapUp",
    "levers_for",
]

_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")
_NAME_TAIL = re.compile(r"[A-Za-z0-9_.]*$")
_AFTER_PUNCTUATION = re.compile(rb"[,;:(] ?$")
_TRAILING_NUMBER = re.compile(r"\d+(?:[.,]\d+)*[.,]?$")
_MARKER_SPAN = 25
"""A ``MARKER_LIKE`` match starts at most this many characters before its ``]``."""
SUBORDINATORS = frozenset({
    "after", "although", "as", "because", "before", "if", "once", "since", "though", "unless",
    "until", "when", "whenever", "where", "whereas", "wherever", "while",
})
"""First words of a clause that is not yet a claim: ``ClauseEnd`` leaves its comma alone."""
# Where the grammar starts a new sentence: after a cite-group and its terminator.
_TERMINATORS = frozenset(".!?")
# The end of a word a sentence can be cited after: a letter, digit or closing quote or bracket.
_ENDS_A_WORD = re.compile(r"[\w\"'`)\u2019\u201d]$")


class CachedSupport(Support):
    """A ``Support`` that scores each claim once.

    The levers of a row ask for the same claim at many steps (``ClauseEnd``, ``EndIntent``,
    ``EvidenceBias``), and with ``EmbeddingEvidence`` a score is a model's forward pass.
    """

    def __init__(self, support: Support, size: int = 256) -> None:
        self._support = support
        self._size = size
        self._scores: dict[str, list[float]] = {}

    def scores(self, claim: str) -> list[float]:  # noqa: D102
        found = self._scores.get(claim)
        if found is None:
            if len(self._scores) >= self._size:  # a row's recent claims: bounded
                self._scores.clear()
            found = self._scores[claim] = self._support.scores(claim)
        return found


class Lever:
    """One steering effect on one answer's logits."""

    needs_raw = False
    """Whether ``edit`` reads ``edits.wanted()``, drawn from the model's scores before any mask."""

    def shares(self, state: AnswerState) -> bool:
        """Whether ``edit`` may read ``Wanted.chain_share`` at this step.

        The share costs a reduction over the row's vocabulary: a steering reads it only for the
        rows whose levers ask.
        """
        return False

    def may_share(self, state: AnswerState) -> bool:
        """``shares``'s cheap part (the text's), asked first: ``False`` where ``shares`` is."""
        return self.shares(state)

    def edit(self, state: AnswerState, edits: StepEdits) -> None:
        """Ask ``edits`` for this step's changes to the row of the answer ``state`` holds."""
        raise NotImplementedError

    batched = False
    """Whether the class steers many rows in one call (``edit_rows``), never raising for one."""

    @classmethod
    def edit_rows(
        cls, levers: Sequence[Lever], states: Sequence[AnswerState], rows: Sequence[int],
        edits: StepEdits,
    ) -> None:
        """``edit`` for many rows at once: the same edits, asked in fewer entries.

        ``levers[k]``, of the answer ``states[k]``, steers the logits row ``rows[k]``.
        """
        for lever, state, row in zip(levers, states, rows, strict=True):
            edits.row = row
            lever.edit(state, edits)

    def apply(
        self, state: AnswerState, logits: torch.Tensor, raw: torch.Tensor | None = None
    ) -> None:
        """Steer one row of logits (``[1, vocab]``, in place) alone; ``raw``: its unmasked scores.

        What a batch does for every row at once, for one row: for a test, or an engine that
        steers a row at a time.
        """
        edits = StepEdits(self._wanted(raw, logits) if raw is not None else None)
        self.edit(state, edits)
        edits.apply(logits)

    def _wanted(self, raw: torch.Tensor, logits: torch.Tensor) -> dict[int, Wanted] | None:
        return None


class Removing(Lever):
    """A lever that only removes tokens, from arrays its vocabulary shares.

    It steers every row of a batch in one call (``batched``), one removal entry per array the
    rows share.
    """

    batched = True

    def removals(self, state: AnswerState) -> tuple[np.ndarray, ...]:
        """The ids to remove from the row of the answer ``state`` holds, in the order removed."""
        raise NotImplementedError

    def edit(self, state: AnswerState, edits: StepEdits) -> None:  # noqa: D102
        for ids in self.removals(state):
            edits.remove(ids)

    @classmethod
    def edit_rows(  # noqa: D102
        cls, levers: Sequence[Lever], states: Sequence[AnswerState], rows: Sequence[int],
        edits: StepEdits,
    ) -> None:
        # Each row's k-th removal in round k, so each row's removals keep their order.
        rounds: list[dict[int, tuple[np.ndarray, list[int]]]] = []
        for lever, state, row in zip(levers, states, rows, strict=True):
            for k, ids in enumerate(lever.removals(state)):  # type: ignore[attr-defined]
                if k == len(rounds):
                    rounds.append({})
                rounds[k].setdefault(id(ids), (ids, []))[1].append(row)
        for shared in rounds:
            for ids, together in shared.values():
                edits.remove_rows(together, ids)


class EndIntent(Lever):
    """Where the model wants to end a sentence the grammar does not let end, it opens a marker.

    ``raw`` holds the model's scores before the masks. When every sentence-ending token is
    masked, a marker opener is allowed, and the model put probability ``p_end`` on ending, the
    openers' logits are raised so that after the masks they carry their own probability plus
    ``p_end``. Under ``AUTO`` (ending allowed), ``support`` decides how much of ``p_end`` moves
    to the openers. ``required``: a sentence ends only right after its cite-group, so a ``.``
    the grammar allows elsewhere continues a dotted term (``3`` to ``3.8``) and ending counts as
    masked there: the openers gain ``p_end`` beside the ``.``'s own share, and the model's doubt
    between ``Python 3 [1].`` and ``Python 3.8`` stays a doubt. ``refusal``: the sentence the
    grammar also allows as the whole answer (``GenerationRequest.offered_refusal``); where the
    answer so far is that sentence but its end, the wish to end it is left alone.
    """

    needs_raw = True

    def __init__(
        self,
        vocab: Vocabulary,
        *,
        support: Support | None = None,
        threshold: float | None = None,
        required: bool = False,
        refusal: str | None = None,
    ) -> None:
        self._vocab = vocab
        self._refusal = refusal
        self._support = support
        self._threshold = threshold
        self._required = required

    def edit(self, state: AnswerState, edits: StepEdits) -> None:  # noqa: D102
        wanted = edits.wanted()
        if wanted is None or not wanted.may_open or not 0 < wanted.end_over_open < math.inf:
            return
        if self._refusal is not None and _ends_next(self._refusal, state):
            return
        ending_allowed = state.data.endswith(b"]") if self._required else wanted.may_end
        share = self._auto_share(state) if ending_allowed else 1.0
        if share > 0:
            # The openers' p_open becomes p_open + share * p_end; a masked one stays masked.
            edits.add(self._vocab.openers, math.log1p(share * wanted.end_over_open))

    def _wanted(self, raw: torch.Tensor, logits: torch.Tensor) -> dict[int, Wanted]:
        reader = WantedReader(self._vocab.enders, self._vocab.openers, logits.device)
        return reader.after(reader.before(raw, [0]), logits, [0])

    def _auto_share(self, state: AnswerState) -> float:
        """The share of the wish to end that moves to the openers where ending is allowed."""
        if self._support is None or self._threshold is None:
            return 0.0
        if state.last_solid() == "]":
            return 0.0  # already cited
        claim = state.claim
        if len(claim.split()) < 3:
            return 0.0
        best = max(self._support.scores(claim))
        if best <= self._threshold:
            return 0.0
        return min(1.0, (best - self._threshold) / (1 - self._threshold) * 2)


class CiteAfterWord(Removing):
    """Keeps a marker from opening right after ``,`` ``;`` ``:`` or ``(``.

    Only while another token remains, so the sentence is cited where a word ends.
    """

    def __init__(self, vocab: Vocabulary) -> None:
        self._glued = (vocab.glued_opener_ids,)
        self._all = (vocab.any_openers,)

    def removals(self, state: AnswerState) -> tuple[np.ndarray, ...]:  # noqa: D102
        # The pattern spans at most 3 bytes: the last 4 answer it as the whole answer would.
        return self._all if _AFTER_PUNCTUATION.search(state.data[-4:]) else self._glued


class CiteClosed(Removing):
    """Keeps a marker from opening inside a span the claim opened and has not closed.

    The spans are parentheses, double quotes and backticks (``("j" | [1].``, ``... (or any
    other type [1].``). Only while another token remains: at the sentence bound the marker
    still opens.
    """

    def __init__(self, vocab: Vocabulary) -> None:
        self._all = (vocab.any_openers,)

    def removals(self, state: AnswerState) -> tuple[np.ndarray, ...]:  # noqa: D102
        return self._all if _is_open(state.claim) else ()


def _is_open(claim: str) -> bool:
    """Whether ``claim`` leaves a parenthesis, double quote or backtick span open."""
    return (
        claim.count("(") > claim.count(")")
        or claim.count("\u201c") > claim.count("\u201d")
        or claim.count('"') % 2 == 1
        or claim.count("`") % 2 == 1
    )


class ClauseEnd(Lever):
    """Where a claim a source supports has stated something new, a clause chained on it is cited.

    A small model chains a clause onto a complete claim instead of citing it (``... completed on
    31 March 1889, but it was actually finished on 1889 [2].``), and the clause adds nothing the
    source holds. Once the claim holds ``min_words`` words, a source supports it at ``threshold``
    or more (``support``, 0..1) and it holds a content word the question does not (it has said
    something, not only restated the question; nor a dependent clause still waiting for its main
    one, ``If ...``, ``When ...``), where the model wants ``,`` or ``;`` (they hold
    ``CHAIN_SHARE`` of its probability or more, before the masks) the probability of chaining
    goes to the marker openers and those tokens are removed: the claim is cited where it is
    complete. Only while another token remains.
    """

    needs_raw = True

    def __init__(
        self,
        vocab: Vocabulary,
        support: Support,
        question: str,
        *,
        threshold: float,
        min_words: int = 5,
    ) -> None:
        self._vocab = vocab
        self._support = support
        self._asked = set(content_words(question))
        self._threshold = threshold
        self._min_words = min_words
        self._claim: str | None = None
        self._supported = False

    def shares(self, state: AnswerState) -> bool:
        """Whether the claim so far is one whose chained clause is cited instead.

        The text's part of the rule; the model's wish to chain is the other, read only for the
        rows where this holds.
        """
        if not self.may_share(state):
            return False
        claim = state.claim
        if claim != self._claim:
            self._claim, self._supported = claim, self._supports(claim)
        return self._supported

    def may_share(self, state: AnswerState) -> bool:
        """The rule's checks of the answer's end and its claim's length."""
        if state.data.endswith(b"]") or not state.ends_with(_ENDS_A_WORD, 2):
            return False
        return state.claim_words >= self._min_words

    def _supports(self, claim: str) -> bool:
        """The claim's part of the rule, found once per claim."""
        if _is_open(claim):
            return False
        words = WORD.findall(claim)
        if words[0].lower() in SUBORDINATORS and "," not in claim:
            return False  # "If you want to silence the error," needs its main clause
        if not set(content_words(claim)) - self._asked:
            return False
        return max(self._support.scores(claim)) >= self._threshold

    def edit(self, state: AnswerState, edits: StepEdits) -> None:  # noqa: D102
        wanted = edits.wanted()
        if wanted is None or not wanted.may_open or wanted.chain_share < CHAIN_SHARE:
            return
        if not 0 < wanted.chain_over_open < math.inf or not self.shares(state):
            return
        edits.add(self._vocab.openers, math.log1p(wanted.chain_over_open))
        edits.remove(self._vocab.chainers)

    def _wanted(self, raw: torch.Tensor, logits: torch.Tensor) -> dict[int, Wanted]:
        vocab = self._vocab
        reader = WantedReader(vocab.enders, vocab.openers, logits.device, chainers=vocab.chainers)
        return reader.after(reader.before(raw, [0]), logits, [0])


class ClaimWords(Removing):
    """Keeps a marker from opening before its claim holds ``minimum`` words.

    A sentence that is only a marker's carrier (``The Queue [3].``, ``The comparison [2][3].``)
    names nothing a reader can check. A marker stacked on another (``[1][2]``) cites the same
    claim and is left free. Only while another token remains: at the sentence bound the marker
    still opens.
    """

    def __init__(self, vocab: Vocabulary, minimum: int) -> None:
        self._all = (vocab.any_openers,)
        self._minimum = minimum

    def removals(self, state: AnswerState) -> tuple[np.ndarray, ...]:  # noqa: D102
        if state.data.endswith(b"]") or state.claim_words >= self._minimum:
            return ()
        return self._all


class PeriodAfterMarker(Removing):
    """After a cite-group, a sentence ends with ``.``: ``!`` and ``?`` are removed there.

    A small model used them as an escape to go on writing (``... [2]! This is not a typo, but
    ...``); a cited answer states, it does not exclaim or ask. Only while another token remains.
    """

    def __init__(self, vocab: Vocabulary) -> None:
        self._loud = (vocab.loud_ender_ids,)

    def removals(self, state: AnswerState) -> tuple[np.ndarray, ...]:  # noqa: D102
        return self._loud if state.data.endswith(b"]") else ()


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


class PunctuationRun(Removing):
    """Removes tokens that would repeat one punctuation character more than ``limit`` times.

    Such runs (``****``, ``====``) are the markup underlines a small model copies from a source;
    at least one token is kept.
    """

    def __init__(self, vocab: Vocabulary, limit: int) -> None:
        self._runs = vocab.punctuation_runs
        self._limit = limit
        self._inside = (self._runs.longer_than(limit),)  # too long whatever comes before them

    def removals(self, state: AnswerState) -> tuple[np.ndarray, ...]:  # noqa: D102
        data = state.data
        if not data or data[-1] not in PUNCTUATION:
            return self._inside
        last, run = data[-1], 1
        while run < len(data) and data[-1 - run] == last:
            run += 1
        return (*self._inside, self._runs.extending(last, run, self._limit))


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


class WrapUp(Lever):
    """Near the grammar's sentence bound, makes citing where a word ends the likely choice.

    A sentence that reaches ``bound`` words must take a marker whatever it last wrote, often a
    comma (``..., which means that the interpreter, [4].``). Once the sentence holds
    ``bound - words`` words, while the answer ends in a word, the marker openers gain ``bias``
    logits, and ``bias`` more with each further word, so the sentence is cited at a word end
    before the bound forces it mid-phrase.
    """

    def __init__(self, vocab: Vocabulary, bound: int, words: int, bias: float) -> None:
        self._openers = vocab.openers
        self._start = max(1, bound - words)
        self._bias = bias

    def edit(self, state: AnswerState, edits: StepEdits) -> None:  # noqa: D102
        if state.last_open >= state.sentence_start:
            return  # the sentence holds a marker
        sentence = state.text[state.sentence_start:].lstrip(" ")
        if not _ENDS_A_WORD.search(sentence[-2:]):
            return
        past = sentence.count(" ") + 2 - self._start
        if past > 0:
            edits.add(self._openers, self._bias * past)


class EndBias(Lever):
    """Raises the end-of-answer tokens right after a cited sentence, more with each one.

    ``every_sentence`` (``AUTO``, where a sentence need not be cited): after any sentence, by
    the number of sentences written, so an answer that cites little still stops when done.
    """

    def __init__(
        self, stop_ids: Sequence[int], bias: float, *, every_sentence: bool = False
    ) -> None:
        self._stop = np.array(list(dict.fromkeys(stop_ids)), dtype=np.int64)
        self._bias = bias
        self._every = every_sentence
        # The sentences ended so far whose terminator white space followed, counted as the
        # answer's characters arrive; ``_solid``: the last character that is not white space.
        self._seen = 0
        self._ended = 0
        self._solid = ""
        self._ending = False

    def edit(self, state: AnswerState, edits: StepEdits) -> None:  # noqa: D102
        self._count(state.committed)
        text = state.text
        last = state.solid_before(len(text))
        if last < 0 or text[last] not in _TERMINATORS:
            return
        if not self._every:
            before = state.solid_before(last)
            if before < 0 or text[before] != "]":
                return
        # The last terminator is counted already where white space follows it.
        ended = self._ended + (last == len(text) - 1)
        edits.add(self._stop, self._bias * ended)

    def _count(self, committed: str) -> None:
        """Count the sentence ends among the characters not read yet.

        A sentence end: a terminator after a cite-group (after anything ``every_sentence``)
        that white space follows.
        """
        for char in committed[self._seen:]:
            if char.isspace():
                self._ended += self._ending
                self._ending = False
                continue
            self._ending = char in _TERMINATORS and (self._every or self._solid == "]")
            self._solid = char
        self._seen = len(committed)


class EvidenceBias(Lever):
    """Adds ``weight * score`` to the logits of id tokens at an open marker.

    The score of an id is how well its source supports the claim being cited (``support``);
    right after ``[k]``, opening another marker is worth no more than the best source still
    allowed after k, so a weaker source is not stacked after a strong one. Last of the levers:
    it only adds finite values.
    """

    def __init__(self, support: Support, weight: float, n_sources: int, vocab: Vocabulary) -> None:
        self._support = support
        self._weight = weight
        self._n = n_sources
        self._vocab = vocab
        self._id_tokens = vocab.id_token_ids.numpy()
        self._spelled: dict[str, list[tuple[str, list[int], list[int], list[int]]]] = {}
        self._claim: str | None = None
        self._best_by_prefix: dict[str, float] = {}
        self._bias_by_prefix: dict[str, tuple[np.ndarray, np.ndarray] | None] = {}

    def edit(self, state: AnswerState, edits: StepEdits) -> None:  # noqa: D102
        opened = state.last_open
        if opened < 0:
            return
        if state.last_close < opened:
            text = state.text
            match = OPEN_GROUP.search(text, group_start(text, opened))
            if match is not None:
                self._score(state.claim_before(match.start()))
                prefix = match.group(1)
                if prefix not in self._bias_by_prefix:
                    self._bias_by_prefix[prefix] = self._bias(prefix)
                bias = self._bias_by_prefix[prefix]
                if bias is not None:
                    edits.add(*bias)
        elif state.data.endswith(b"]") and state.text.count("]", opened) == 1:
            text = state.text
            match = CLOSED_GROUP.search(text, group_start(text, opened))
            if match is not None:
                self._score(state.claim_before(match.start()))
                best = self._best_by_prefix
                penalty = best["=" + match.group(1)] - best.get(">" + match.group(1), 0.0)
                if penalty > 0:
                    edits.add(self._vocab.openers, -(self._weight * penalty))

    def _score(self, claim: str) -> None:
        if claim == self._claim:
            return
        self._claim = claim
        self._best_by_prefix = self._prefix_scores(self._support.scores(claim))
        self._bias_by_prefix = {}

    def _bias(self, prefix: str) -> tuple[np.ndarray, np.ndarray] | None:
        """The id tokens that score after ``prefix`` and what each gains, or ``None`` for none.

        Only tokens whose digits continue ``prefix`` toward an id of a source can score: the
        groups of the digit strings that do, each spelled ``prefix + digits`` (found once per
        prefix). A token that gains nothing is left out: adding 0 leaves its logit as it is.
        """
        best = self._best_by_prefix
        positions: list[int] = []
        scores: list[float] = []
        for spelled, ends, ends_and_opens, open_ended in self._spellings(prefix):
            exact = best.get("=" + spelled) if spelled else None
            stacked = None if exact is None else min(exact, best.get(">" + spelled, 0.0))
            # A token ending the id scores that exact id, if it is one; ``][`` also commits to
            # citing a second, higher id: worth no more than the best of those, so a weaker
            # source is not stacked after a strong one.
            for group, score in (
                (ends, exact),
                (ends_and_opens, stacked),
                (open_ended, best.get(spelled)),
            ):
                if group and score:
                    positions.extend(group)
                    scores.extend([score] * len(group))
        if not positions:
            return None
        gains = torch.tensor(scores, dtype=torch.float32) * self._weight  # each token in 1 group
        return self._id_tokens[positions], gains.numpy()

    def _spellings(self, prefix: str) -> list[tuple[str, list[int], list[int], list[int]]]:
        """Per digit string that continues ``prefix`` toward an id: the id so far, its groups."""
        found = self._spelled.get(prefix)
        if found is None:
            groups = self._vocab.id_groups
            found = self._spelled[prefix] = [
                (prefix + digits, *groups[digits])
                for digits in sorted(_continuations(prefix, self._n)) if digits in groups
            ]
        return found

    def _prefix_scores(self, scores: Sequence[float]) -> dict[str, float]:
        # "12" -> best score of the ids spelled 12...; "=12" -> the score of id 12 itself;
        # ">12" -> the best score of the ids above 12. Scores are shifted so that the lowest is 0:
        # only the differences between sources matter.
        scores = list(scores[: self._n])
        for number, score in enumerate(scores, start=1):
            try:
                finite = math.isfinite(score)
            except (TypeError, OverflowError):
                finite = False
            if not finite:
                raise InvalidInputError(
                    f"the evidence scorer ({type(self._support).__name__}) scored source "
                    f"{number} {score!r:.40}; a score must be a finite number"
                )
        low = min(scores)
        best: dict[str, float] = {}
        above = 0.0
        for number in range(len(scores), 0, -1):
            spelled = str(number)
            shifted = scores[number - 1] - low
            best["=" + spelled] = shifted
            best[">" + spelled] = above
            above = max(above, shifted)
            for end in range(1, len(spelled) + 1):
                key = spelled[:end]
                best[key] = max(best.get(key, 0.0), shifted)
        return best


def _continuations(prefix: str, n: int) -> set[str]:
    """The digit strings that, after ``prefix``, begin or complete an id in 1..n."""
    found: set[str] = set()
    for number in range(1, n + 1):
        spelled = str(number)
        if spelled.startswith(prefix):
            rest = spelled[len(prefix):]
            found.update(rest[:end] for end in range(len(rest) + 1))
    return found


def _ends_next(sentence: str, state: AnswerState) -> bool:
    """Whether the answer (less leading white space) is ``sentence`` up to its terminator."""
    if state.first_solid >= 0 and len(state.text) - state.first_solid > len(sentence):
        return False  # longer than the sentence
    written = state.lstripped()
    return sentence.startswith(written) and sentence[len(written):].strip() in (".", "!", "?")


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


def levers_for(
    request: GenerationRequest,
    vocab: Vocabulary,
    stop_ids: Sequence[int],
    evidence: Evidence | None,
) -> list[Lever]:
    """The levers of one constrained request, in the order they act.

    ``evidence``: the scorer behind ``EvidenceBias`` (the request's own resolved against the
    generator's default), or ``None`` for none.
    """
    settings: Readability = request.readability
    policy = request.policy
    question, sources = request.question, request.sources
    # Bound once, each claim scored once: the levers that weigh a claim share the scores.
    bound = CachedSupport((evidence or LexicalEvidence()).bind(question, sources))
    levers: list[Lever] = []
    if settings.end_intent:
        support = threshold = None
        if policy is Policy.AUTO and settings.auto_cite_support is not None:
            support = bound
            threshold = settings.auto_cite_support
        levers.append(EndIntent(
            vocab, support=support, threshold=threshold, required=policy is Policy.REQUIRED,
            refusal=request.offered_refusal,
        ))
    if not settings.cite_after_punctuation:
        levers.append(CiteAfterWord(vocab))
    if settings.cite_closed:
        levers.append(CiteClosed(vocab))
    if settings.min_claim_words:
        levers.append(ClaimWords(vocab, settings.min_claim_words))
    if settings.clause_support is not None and policy is Policy.REQUIRED:
        levers.append(ClauseEnd(
            vocab, bound, question,
            threshold=settings.clause_support,
        ))
    if settings.period_after_marker:
        levers.append(PeriodAfterMarker(vocab))
    if settings.number_penalty:
        texts = [question, *(s.text for s in sources)]
        levers.append(NumberCopy(vocab, texts, settings.number_penalty))
    if settings.code_penalty:
        levers.append(CodeCopy(vocab, [question, *(s.text for s in sources)],
                               settings.code_penalty))
    if settings.no_repeat_ngram:
        levers.append(RepeatBlock(settings.no_repeat_ngram, vocab.exempt))
    if settings.no_repeat_words:
        levers.append(WordRepeatBlock(settings.no_repeat_words, vocab, stop_ids))
    if settings.max_punctuation_run:
        levers.append(PunctuationRun(vocab, settings.max_punctuation_run))
    sentence_words = request.grammar.max_sentence_words
    if settings.wrap_up_words and sentence_words and policy is Policy.REQUIRED:
        levers.append(WrapUp(vocab, sentence_words, settings.wrap_up_words, settings.wrap_up_bias))
    if settings.end_bias and stop_ids:
        levers.append(EndBias(stop_ids, settings.end_bias, every_sentence=policy is Policy.AUTO))
    if evidence is not None:
        levers.append(EvidenceBias(
            bound, evidence.weight, request.n_sources, vocab
        ))
    return levers
