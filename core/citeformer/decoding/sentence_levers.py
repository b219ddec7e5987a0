"""The levers that shape a sentence: where it ends, where its marker opens, how it stops.

They read the claim being written, the answer's last characters and what the model wanted
before the masks (``StepEdits.wanted``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

import numpy as np
import torch

from citeformer.decoding.answer_state import AnswerState
from citeformer.decoding.edits import CHAIN_SHARE, StepEdits, Wanted, WantedReader
from citeformer.decoding.lever import Lever, Removing
from citeformer.decoding.vocab import PUNCTUATION, WORD, Vocabulary
from citeformer.evidence.scoring import Support, content_words

__all__ = [
    "SUBORDINATORS",
    "CiteAfterWord",
    "CiteClosed",
    "ClaimWords",
    "ClauseEnd",
    "EndBias",
    "EndIntent",
    "PeriodAfterMarker",
    "PunctuationRun",
    "WrapUp",
]

_AFTER_PUNCTUATION = re.compile(rb"[,;:(] ?$")
SUBORDINATORS = frozenset({
    "after", "although", "as", "because", "before", "if", "once", "since", "though", "unless",
    "until", "when", "whenever", "where", "whereas", "wherever", "while",
})
"""First words of a clause that is not yet a claim: ``ClauseEnd`` leaves its comma alone."""
# Where the grammar starts a new sentence: after a cite-group and its terminator.
_TERMINATORS = frozenset(".!?")
# The end of a word a sentence can be cited after: a letter, digit or closing quote or bracket.
_ENDS_A_WORD = re.compile(r"[\w\"'`)\u2019\u201d]$")


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
            edits.add(self._vocab.opener_ids, math.log1p(share * wanted.end_over_open))

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
        edits.add(self._vocab.opener_ids, math.log1p(wanted.chain_over_open))
        edits.remove(self._vocab.chainer_ids)

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


class WrapUp(Lever):
    """Near the grammar's sentence bound, makes citing where a word ends the likely choice.

    A sentence that reaches ``bound`` words must take a marker whatever it last wrote, often a
    comma (``..., which means that the interpreter, [4].``). Once the sentence holds
    ``bound - words`` words, while the answer ends in a word, the marker openers gain ``bias``
    logits, and ``bias`` more with each further word, so the sentence is cited at a word end
    before the bound forces it mid-phrase.
    """

    def __init__(self, vocab: Vocabulary, bound: int, words: int, bias: float) -> None:
        self._openers = vocab.opener_ids
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


def _ends_next(sentence: str, state: AnswerState) -> bool:
    """Whether the answer (less leading white space) is ``sentence`` up to its terminator."""
    if state.first_solid >= 0 and len(state.text) - state.first_solid > len(sentence):
        return False  # longer than the sentence
    written = state.lstripped()
    return sentence.startswith(written) and sentence[len(written):].strip() in (".", "!", "?")
