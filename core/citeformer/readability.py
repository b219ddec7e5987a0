"""Readable answers: the settings of the processors that steer the prose around the markers.

The grammar decides what may be written; the levers of ``citeformer.decoding.levers`` only move
probability among the tokens it allows (or remove some of them), so the 1..N guarantee and
verbatim quotes are untouched:

- end intent: where the model wants to end a sentence (``.``, ``!``, ``?`` and tokens that begin
  with them) but the grammar first requires a cite-group, that probability goes to the tokens
  that open a marker, so the sentence is cited where the model meant it to end instead of running
  on. Under ``AUTO``, where ending is allowed, a share of it goes to a marker when a source
  supports the sentence well (the evidence scorer's score).
- repeat block: a token that would repeat an n-gram the answer has already written (the answer
  only, never the prompt: copying from the sources is what we want) is removed, as long as
  another token remains.
- word repeat block: the same for a word n-gram (markers left out, case folded), the unit a
  reader notices: ``... is a function that executes [1]. It is a function that executes ...``.
- claim words: a marker waits until the claim it cites holds three words, so no sentence is only
  a marker's carrier (``The Queue [3].``).
- clause end (``REQUIRED``): where a supported claim has said something new and the model
  wants a comma, it cites instead of chaining a clause the source does not hold.
- period after a marker: a cited sentence ends with ``.``; ``!`` and ``?`` after a cite-group
  were a small model's escape to go on writing.
- wrap up: near the grammar's sentence bound, citing where a word ends becomes likely, so a long
  sentence is not cut by a forced marker after a comma.
- number copy: a digit that would start or continue a number that no source (and not the
  question) holds is penalised, so numbers are copied rather than invented.
"""

from __future__ import annotations

from dataclasses import dataclass

from citeformer.errors import MAX_BIAS, InvalidInputError, check_float, check_int, shown

__all__ = [
    "MAX_COUNT",
    "OFF",
    "Readability",
]

MAX_COUNT = 1000
"""The largest value of each int setting (``no_repeat_ngram``, ``wrap_up_words``, ...): the most
words a sentence may hold (``GrammarOptions.max_sentence_words``), and more tokens than any
n-gram worth blocking."""


@dataclass(frozen=True)
class Readability:
    """Settings of the readability processors; ``None``/``0`` turns one off.

    Every setting is checked against its range: the penalties and biases (``number_penalty``,
    ``code_penalty``, ``end_bias``, ``wrap_up_bias``) 0 to ``MAX_BIAS`` (1e4 logits), the
    supports (``auto_cite_support``, ``clause_support``) 0 to 1, the ints 0 to ``MAX_COUNT``
    (1000); outside it, an ``InvalidInputError`` (a ``ValueError``) names the setting.
    """

    end_intent: bool = True
    """Move the probability of ending a sentence to opening a marker where the grammar requires
    one first (``REQUIRED``, and ``QUOTES_ONLY`` after a quote)."""

    auto_cite_support: float | None = 0.5
    """``AUTO`` only: at a sentence end, move part of the ending probability to opening a marker,
    more the better the best source supports the sentence above this score (the evidence
    scorer's support, 0..1; lexical when evidence is off); its effect on AUTO's coverage and
    precision is measured in benchmarks/README.md. ``None``: never."""

    no_repeat_ngram: int = 6
    """Block a token that repeats an n-gram of this many tokens already in the answer (0: off)."""

    no_repeat_words: int = 5
    """Block a token that would make the answer repeat a word n-gram of this many words (markers
    left out, case folded) that it already holds (0: off)."""

    max_punctuation_run: int = 3
    """The most times one ASCII punctuation character may repeat in a row (``...`` yes, ``****``
    or ``====``, the underlines of a source's markup, no); 0: off."""

    number_penalty: float = 8.0
    """Logit penalty for a digit that makes a number no source holds (0: off)."""

    code_penalty: float = 0.0
    """Logit penalty, inside a backtick span, for a token that makes a name (letters, digits,
    ``_``, ``.``) that begins no name of the sources or the question (0: off)."""

    cite_after_punctuation: bool = False
    """``False``: a marker may not open right after ``,`` ``;`` ``:`` or ``(`` (a space between
    included), so a sentence is cited where a word ends, not mid-phrase (``..., which is [4].``),
    unless nothing else is left (the sentence bound)."""

    cite_closed: bool = True
    """A marker may not open while the claim it would cite leaves a parenthesis, a double quote
    or a backtick span open (``... (or any other type [1].``), unless nothing else is left."""

    min_claim_words: int = 3
    """A marker may not open before the claim it would cite holds this many words (a sentence
    that only carries a marker, ``The Queue [3].``, names nothing), unless nothing else is left;
    a marker stacked on another is free (0: off)."""

    clause_support: float | None = 0.9
    """``REQUIRED``: where a claim of five words or more says something the question did not
    and a source supports it at this score or more (the evidence scorer's, 0..1), the wish to
    chain a clause on it (half the model's probability or more on ``,`` ``;``) opens a marker
    instead: ``... on 31 March 1889 [2].``, not ``..., but it was actually finished on 1889
    [2].`` A dependent clause (``If ...``, ``When ...``) keeps its comma. ``None``: off."""

    period_after_marker: bool = True
    """After a cite-group the sentence ends with ``.``, not ``!`` or ``?``, which a small model
    uses as an escape to go on writing (``... [2]! This is ...``)."""

    end_bias: float = 1.0
    """Logit bonus for ending the answer right after a cited sentence, per cited sentence
    already written (0: off): a complete answer stays a cheap place to stop."""

    wrap_up_words: int = 4
    """``REQUIRED``: in the last this many words before the grammar's sentence bound, raise the
    marker openers (``wrap_up_bias`` logits per word) where the answer ends in a word, so a long
    sentence is cited at a word end before the bound forces a marker mid-phrase (0: off)."""

    wrap_up_bias: float = 1.0
    """Logits per word past the ``wrap_up_words`` threshold."""

    def __post_init__(self) -> None:
        for flag in ("end_intent", "cite_after_punctuation", "cite_closed", "period_after_marker"):
            if not isinstance(getattr(self, flag), bool):
                raise InvalidInputError(
                    f"{flag} must be True or False, got {shown(getattr(self, flag))}"
                )
        for name in ("auto_cite_support", "clause_support"):
            if getattr(self, name) is not None:
                check_float(name, getattr(self, name), 0.0, 1.0)
        for name in ("no_repeat_ngram", "no_repeat_words"):
            value = check_int(name, getattr(self, name), 0, MAX_COUNT)
            if value == 1:
                raise InvalidInputError(f"{name} must be 0 (off) or an int >= 2, got 1")
        for name in ("wrap_up_words", "max_punctuation_run", "min_claim_words"):
            check_int(name, getattr(self, name), 0, MAX_COUNT)
        for name in ("number_penalty", "code_penalty", "end_bias", "wrap_up_bias"):
            check_float(name, getattr(self, name), 0.0, MAX_BIAS)


OFF = Readability(
    end_intent=False, auto_cite_support=None, no_repeat_ngram=0, no_repeat_words=0,
    number_penalty=0.0, cite_after_punctuation=True, period_after_marker=False, end_bias=0.0,
    wrap_up_words=0, max_punctuation_run=0, cite_closed=False, min_claim_words=0,
    clause_support=None,
)
"""Every readability processor turned off."""
