"""Grounded refusal: answering "the sources do not answer this" when they do not.

Before anything is generated, the question is weighed against its sources (``Refusal.support``):

- support below ``threshold``: the answer is the refusal sentence, with no marker, and the model
  is not run;
- support in ``[threshold, offer_below)``: the grammar allows the refusal sentence as a whole
  answer beside a cited one, the prompt tells the model so, and the model chooses;
- above: the model answers, citing.

Two measures of support:

- ``"lexical"`` (the default, no dependency): the largest share of the question's content words
  (``question_words``: not the words that only say how to answer, nor markers it demands) that
  one source, or two together, hold (title and text): a question that takes two passages to
  answer ("In which country was the inventor of the telephone born?") is weighed as answered;
- ``"embedding"``: the largest cosine between the question and one source under all-MiniLM-L6-v2
  (``citeformer[retrieval]``).

The default thresholds were chosen on the dev splits of the labeled sets for no false refusal,
and measured on their test splits (``benchmarks/refusal_signals.py``; benchmarks/README.md).
"""

from __future__ import annotations

import enum
import itertools
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

from citeformer.errors import InvalidInputError, check_float, shown
from citeformer.evidence.scoring import content_words
from citeformer.grammar.rules import refusal_flaw
from citeformer.types import CitedAnswer, RefusalCheck, Source

__all__ = [
    "ASKING_WORDS",
    "DEFAULT_REFUSAL_TEXT",
    "DEFAULT_THRESHOLDS",
    "SUPPORT_MEASURES",
    "Band",
    "Refusal",
    "RequestWeighing",
    "embedding_support",
    "lexical_cover",
    "lexical_support",
    "question_words",
]

DEFAULT_REFUSAL_TEXT = "The sources do not answer this question."
DEFAULT_THRESHOLDS = {"lexical": 0.5, "embedding": 0.45}
"""Each measure's default ``threshold``: about the largest that refuses no answerable question of
the three labeled sets' dev splits (67 questions)."""
SUPPORT_MEASURES = tuple(DEFAULT_THRESHOLDS)
_MAX_TEXT_CHARS = 500

# Words that say how to answer, not what about: "According to the documents, explain briefly
# ... and cite your source [2]." is weighed by the rest; a question made of nothing else ("Summarize
# the documents.") is about whatever they hold, and is never refused.
ASKING_WORDS = frozenset({
    "according", "answer", "answering", "briefly", "cite", "citation", "cited", "citing",
    "context", "describe", "detail", "document", "explain", "give", "mention", "must", "passage",
    "please", "provided", "question", "quote", "quoted", "quoting", "reference", "said", "say",
    "says", "source", "summarize", "tell", "text", "verbatim", "word", "write",
})
# A marker the question demands, and a source it points at: "[7]", "source 1", "the first passage".
_POINTERS = re.compile(
    r"\[[^\[\]]*\]"
    r"|\b(?:source|passage|document|doc|reference)s?\s*(?:no\.?\s*|#\s*)?\d+\b"
    r"|\b(?:first|second|third|last|other)\s+(?:source|passage|document)s?\b",
    flags=re.IGNORECASE,
)


class Band(enum.Enum):
    """What a request's support lets the answer be."""

    ANSWER = "answer"
    """A cited answer only."""
    OFFER = "offer"
    """A cited answer or the refusal sentence, as the model chooses."""
    REFUSE = "refuse"
    """The refusal sentence, without running the model."""


@dataclass(frozen=True)
class Refusal:
    """When an answer is the refusal sentence instead of a cited claim (``refusal=`` option).

    ``refusal=None`` turns refusal off: every answer then cites (under ``REQUIRED``), whatever
    the sources hold.
    """

    text: str = DEFAULT_REFUSAL_TEXT
    """The refusal sentence: the whole answer when the sources do not answer (no marker)."""

    support: str = "lexical"
    """How support is measured: ``"lexical"`` or ``"embedding"`` (see the module)."""

    threshold: float | None = None
    """Support below which the answer is the refusal, from 0 to 1 (a support is at most 1);
    ``None``: the measure's default (``DEFAULT_THRESHOLDS``); 0: never without the model's
    choice."""

    offer_below: float | None = None
    """Support below which (and at or above ``threshold``) the model may choose the refusal,
    from ``threshold`` to 1; ``None``: no such band. ``math.inf`` offers it to every answer not
    refused outright."""

    def __post_init__(self) -> None:
        if not isinstance(self.text, str) or not self.text.strip():
            raise InvalidInputError(
                f"refusal text must be a non-blank string, got {shown(self.text)}"
            )
        if len(self.text) > _MAX_TEXT_CHARS:
            raise InvalidInputError(
                f"refusal text must be one line of at most {_MAX_TEXT_CHARS} characters, got "
                f"{len(self.text)}: {self.text[:80]!r}"
            )
        if (flaw := refusal_flaw(self.text)) is not None:
            raise InvalidInputError(
                f"refusal text cannot be {self.text[:80]!r}: {flaw}; a marker or quote in it "
                "would cite nothing"
            )
        if self.support not in SUPPORT_MEASURES:
            raise InvalidInputError(
                f"refusal support must be one of {', '.join(SUPPORT_MEASURES)}, got "
                f"{shown(self.support)}"
            )
        if self.threshold is not None:
            object.__setattr__(
                self, "threshold", check_float("refusal threshold", self.threshold, 0.0, 1.0)
            )
        if self.offer_below is not None and self.offer_below != math.inf:
            object.__setattr__(
                self, "offer_below", check_float(
                    "refusal offer_below (or math.inf)", self.offer_below, 0.0, 1.0
                )
            )
        if self.offer_below is not None and self.offer_below < self.limit:
            raise InvalidInputError(
                f"refusal offer_below ({self.offer_below}) is below its threshold ({self.limit}),"
                " so no answer could be offered the choice; raise offer_below or lower threshold"
            )

    @property
    def limit(self) -> float:
        """The threshold in effect (``threshold``, or the measure's default)."""
        return DEFAULT_THRESHOLDS[self.support] if self.threshold is None else self.threshold

    def score(
        self, question: str, sources: Sequence[Source], history: Sequence[tuple[str, str]] = ()
    ) -> float:
        """How well the best of ``sources`` supports ``question``, by ``support``.

        A follow-up is weighed with the user's turn before it as well, and the better of the
        two counts (``"When was it built?"`` after a question naming the tower).
        """
        return self.weigh(question, sources, history)[0]

    @property
    def decides(self) -> bool:
        """Whether support is measured at all: a threshold above 0, or a band that offers."""
        return self.limit > 0 or self.offer_below is not None

    def band(
        self, question: str, sources: Sequence[Source], history: Sequence[tuple[str, str]] = ()
    ) -> Band:
        """What the support of ``question`` by ``sources`` lets the answer be."""
        if not self.decides:
            return Band.ANSWER  # nothing to measure
        return self.band_at(self.score(question, sources, history))

    def explain(
        self,
        question: str,
        sources: Sequence[Source],
        history: Sequence[tuple[str, str]] = (),
        *,
        weighed: tuple[float, str] | None = None,
    ) -> str:
        """Why the answer to ``question`` over ``sources`` is in its ``band``, in one line.

        The support against the thresholds and, for the lexical measure, the question's words
        the best source (or pair of sources) lacks: ``support 0.00 < threshold 0.5 (lexical: the
        best passage, or pair of passages, holds 0 of the question's 2 words, not "capital",
        "peru")``. ``weighed``: what ``weigh`` already gave for them, not measured again.
        """
        support, asked = weighed or self.weigh(question, sources, history)
        band = self.band_at(support)
        if band is Band.REFUSE:
            line = f"support {support:.2f} < threshold {self.limit:g}"
        elif band is Band.OFFER:
            line = (f"support {support:.2f} in [{self.limit:g}, {self.offer_below:g}): the model "
                    "chose between the refusal and a cited answer")
        else:
            line = f"support {support:.2f} >= threshold {self.limit:g}"
        if self.support != "lexical":
            return f"{line} (embedding: the closest passage's cosine to the question)"
        words, held = lexical_cover(asked, sources)
        if not words:
            return f"{line} (lexical: the question names nothing to look for)"
        missing = ", ".join(f'"{word}"' for word in sorted(words - held))
        counted = f"{len(words)} word" + ("s" if len(words) > 1 else "")
        return (f"{line} (lexical: the best passage, or pair of passages, holds {len(held)} of the "
                f"question's {counted}" + (f", not {missing})" if missing else ")"))

    def weigh(
        self, question: str, sources: Sequence[Source], history: Sequence[tuple[str, str]] = ()
    ) -> tuple[float, str]:
        """The support (``score``), and the text weighed for it.

        That text is the question, or the user's turn before it joined to it.
        """
        measure = lexical_support if self.support == "lexical" else embedding_support
        asked = [question]
        earlier = [text for role, text in history if role == "user"]
        if earlier:
            asked.append(f"{earlier[-1]} {question}")
        return max(((measure(text, sources), text) for text in asked), key=lambda pair: pair[0])

    def known_band(self) -> Band | None:
        """The band whatever the support, where the thresholds alone decide it; else ``None``.

        Lexical support lies in [0, 1]: a threshold of 0 with ``offer_below`` above 1 offers
        the refusal to every question, as a serving engine's processor is told
        (``citeformer.decoding.payload``), with nothing to weigh.
        """
        if not self.decides:
            return Band.ANSWER
        if self.support == "lexical" and self.limit == 0 and (
            self.offer_below is not None and self.offer_below > 1
        ):
            return Band.OFFER
        return None

    def band_at(self, support: float) -> Band:
        """The band of a question whose support (``score``) is ``support``."""
        if support < self.limit:
            return Band.REFUSE
        if self.offer_below is not None and support < self.offer_below:
            return Band.OFFER
        return Band.ANSWER

    def instruction(self) -> str:
        """What the prompt adds when the model may choose the refusal."""
        return f" If the sources do not answer the question, write only: {self.text}"


def question_words(question: str) -> set[str]:
    """The content words of ``question`` that ``lexical_support`` weighs.

    Left out: bracketed markers (``[7]``), pointers at a source (``source 1``, ``the first
    passage``) and ``ASKING_WORDS``. Empty for a question about the sources themselves
    (``"What does source 1 say, word for word?"``), which is then never refused.
    """
    return set(content_words(_POINTERS.sub(" ", question))) - ASKING_WORDS


def lexical_support(question: str, sources: Sequence[Source]) -> float:
    """The largest share of the question's words (``question_words``) one or two sources hold.

    Two sources count together, for a question that takes two passages to answer. A source's
    words are its title's and its text's; 1.0 for a question without such words (nothing to
    weigh).
    """
    words, held = lexical_cover(question, sources)
    return len(held) / len(words) if words else 1.0


PAIRED_SOURCES = 32
"""Sources whose pairs are weighed: the ones holding the most of the question's words.

The best pair is found wherever it lies among them (every question of the benchmarks has at most
about ten sources, so all of theirs are); past them, pairs of lesser sources are not weighed,
which keeps a request of 3,000 sources to 496 pairs instead of 4.5 million.
"""


def lexical_cover(question: str, sources: Sequence[Source]) -> tuple[set[str], set[str]]:
    """The question's words (``question_words``), and the most of them one or two sources hold.

    Pairs are weighed among the ``PAIRED_SOURCES`` sources that hold the most words alone.
    """
    words = question_words(question)
    held = list(dict.fromkeys(  # in the sources' order: the first best is named
        frozenset(words & set(content_words(f"{s.title or ''} {s.text}"))) for s in sources
    ))
    best = max(held, key=len, default=frozenset())
    if len(held) > PAIRED_SOURCES:  # the largest, kept in the sources' order
        largest = sorted(range(len(held)), key=lambda i: -len(held[i]))[:PAIRED_SOURCES]
        held = [held[i] for i in sorted(largest)]
    for one, other in itertools.combinations(held, 2):
        if len(one | other) > len(best):
            best = one | other
    return words, set(best)


def embedding_support(question: str, sources: Sequence[Source]) -> float:
    """The largest cosine between the question and one source (all-MiniLM-L6-v2)."""
    from citeformer.evidence.embeddings import embed

    texts = [f"{s.title}: {s.text}" if s.title else s.text for s in sources]
    query, *vectors = embed([question, *texts])
    return max(sum(a * b for a, b in zip(query, v, strict=True)) for v in vectors)


# -- one request, weighed ---------------------------------------------------------------------


@dataclass(frozen=True)
class RequestWeighing:
    """What one request's ``refusal`` makes of its question and sources, weighed once.

    ``GenerationRequest.weighing`` is this; its ``refusal_*`` properties read it.
    """

    refusal: Refusal | None
    """The request's refusal; ``None``: every answer is generated."""

    question: str
    """The question weighed."""

    sources: tuple[Source, ...]
    """The sources it is weighed against."""

    history: tuple[tuple[str, str], ...] = ()
    """Earlier turns: a follow-up is also weighed with the user's turn before it."""

    constrained: bool = True
    """Whether the grammar is enforced; without it nothing is weighed."""

    @cached_property
    def check(self) -> RefusalCheck | None:
        """What weighing the question against the sources gave: every answer's ``refusal``.

        ``None`` without ``refusal`` or the grammar, or with nothing to decide (a threshold of 0
        and no offer). The question is weighed once, for the band, the support and the reason.
        """
        refusal = self.refusal
        if refusal is None or not self.constrained or not refusal.decides:
            return None
        weighed = refusal.weigh(self.question, self.sources, self.history)
        return RefusalCheck(
            measure=refusal.support, support=weighed[0], threshold=refusal.limit,
            offer_below=refusal.offer_below, band=refusal.band_at(weighed[0]).value,
            reason=refusal.explain(self.question, self.sources, self.history, weighed=weighed),
        )

    @property
    def band(self) -> Band:
        """What the sources' support of the question lets the answer be (``Refusal.band``).

        ``Band.ANSWER`` without ``refusal`` or without the grammar; where the thresholds alone
        decide it (a serving engine's processor), nothing is weighed.
        """
        if self.refusal is not None and self.constrained:
            known = self.refusal.known_band()
            if known is not None:
                return known
        check = self.check
        return Band.ANSWER if check is None else Band(check.band)

    @property
    def offered(self) -> str | None:
        """The refusal sentence when the model may choose it (``Band.OFFER``), else ``None``."""
        if self.refusal is not None and self.band is Band.OFFER:
            return self.refusal.text
        return None

    def refused(self) -> CitedAnswer | None:
        """The refusal answer when the support is too low to run the model (``Band.REFUSE``)."""
        if self.refusal is None or self.band is not Band.REFUSE:
            return None
        return CitedAnswer(
            text=self.refusal.text, citations=(), sources=self.sources, finish_reason="stop",
            abstained=True, refusal=self.check,
        )

    def abstains(self, text: str) -> bool:
        """Whether ``text`` is the refusal sentence."""
        return self.refusal is not None and text.strip() == self.refusal.text.strip()
