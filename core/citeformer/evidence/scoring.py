"""Scoring every source of a call against a claim: how well each supports what is being cited.

The grammar guarantees that a marker names a source that exists; it leaves the choice among
``[1]``..``[N]`` to the model, and a small model chooses little better than chance. At a step
where the answer so far ends in an open marker (``[`` or ``[`` plus the first digits of an id),
the evidence lever (``citeformer.decoding.levers.EvidenceBias``) scores every source against the
claim being cited (the text since the previous marker or sentence end) with a scorer from here
and adds ``weight * score`` to the logits of the tokens that write each id. It runs after the
grammar's mask and adds finite values only, so a token the grammar masked stays masked: evidence
decides among valid ids and can never widen the range.

Scorers:

- ``LexicalEvidence``: the share of the claim's content words (IDF-weighted over this call's
  sources) that occur in each source, with the question's share beside it (twice as much by
  default: a sentence of the answer is a claim about the question). No model, a fraction of a
  millisecond per marker.
- ``EmbeddingEvidence``: cosine similarity of the claim and each source under all-MiniLM-L6-v2
  (``citeformer[retrieval]``): one embedding per marker (the sources too at an answer's first);
  its cost and precision beside lexical's are measured in benchmarks/README.md.

Pass one to ``CiteGenerator.generate``/``stream`` as ``evidence=`` (or its name, ``"lexical"`` or
``"embedding"``); the default is ``"lexical"``; ``evidence=None`` leaves the choice to the model.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from citeformer.errors import MAX_BIAS, InputTypeError, InvalidInputError, check_float
from citeformer.grammar.markers import OPEN_GROUP
from citeformer.types import Source

__all__ = [
    "DEFAULT_EMBEDDING_WEIGHT",
    "DEFAULT_EVIDENCE",
    "DEFAULT_LEXICAL_WEIGHT",
    "DEFAULT_QUESTION_WEIGHT",
    "EVIDENCE_NAMES",
    "EmbeddingEvidence",
    "Evidence",
    "LexicalEvidence",
    "Support",
    "claim_before_marker",
    "claim_of",
    "content_words",
    "resolve_evidence",
]

DEFAULT_EVIDENCE = "lexical"
"""What ``CiteGenerator.generate``/``stream`` use unless told otherwise (its precision on the
held-out questions: benchmarks/README.md)."""
DEFAULT_LEXICAL_WEIGHT = 16.0
DEFAULT_QUESTION_WEIGHT = 2.0
"""How much the question counts beside the claim in ``LexicalEvidence`` (see there)."""
DEFAULT_EMBEDDING_WEIGHT = 12.0

_WORD = re.compile(r"[^\W_]+")
# Where the claim being cited starts: after the last marker or sentence terminator.
_CLAIM_START = re.compile(r".*(?:\]|[.!?](?=\s))", flags=re.DOTALL)

_STOPWORDS = frozenset({
    "a", "about", "above", "after", "again", "against", "all", "also", "am", "an", "and", "any",
    "are", "as", "at", "be", "because", "been", "before", "being", "below", "between", "both",
    "but", "by", "can", "could", "did", "do", "does", "doing", "down", "during", "each", "few",
    "for", "from", "further", "had", "has", "have", "having", "he", "her", "here", "hers",
    "herself", "him", "himself", "his", "how", "i", "if", "in", "into", "is", "it", "its",
    "itself", "just", "me", "more", "most", "my", "myself", "no", "nor", "not", "of", "off", "on",
    "once", "only", "or", "other", "our", "ours", "ourselves", "out", "over", "own", "same", "she",
    "should", "so", "some", "such", "than", "that", "the", "their", "theirs", "them", "themselves",
    "then", "there", "these", "they", "this", "those", "through", "to", "too", "under", "until",
    "up", "very", "was", "we", "were", "what", "when", "where", "which", "while", "who", "whom",
    "why", "will", "with", "would", "you", "your", "yours", "yourself", "yourselves", "known",
    "called", "one", "many", "much",
})


def content_words(text: str) -> list[str]:
    """Lower-cased words of ``text`` without stopwords, a plural ``s`` dropped from long words."""
    words = []
    for word in _WORD.findall(text.lower()):
        if word in _STOPWORDS:
            continue
        if len(word) > 4 and word.endswith("s") and not word.endswith("ss"):
            word = word[:-1]
        words.append(word)
    return words


def claim_before_marker(text: str) -> str | None:
    """The claim an open marker at the end of ``text`` cites, or None if no marker is open.

    ``"Paris is in France [1]. It was built in 1889 ["`` gives ``"It was built in 1889"``.
    """
    match = OPEN_GROUP.search(text)
    return None if match is None else claim_of(text[: match.start()])


def claim_of(head: str) -> str:
    """The claim a marker after ``head`` cites: the text since the last marker or sentence end."""
    start = _CLAIM_START.match(head)
    return head[start.end():].strip() if start else head.strip()


class Support:
    """Scores of every source of one call against a claim; made by ``Evidence.bind``."""

    def scores(self, claim: str) -> list[float]:
        """One score per source, in source order; only differences between them matter."""
        raise NotImplementedError


class Evidence:
    """A way to score sources against a claim, and the weight of that score in the logits.

    ``weight``: greater than 0 and at most ``MAX_BIAS`` (1e4); a score is in 0..1, so the bias it
    adds stays finite in float32 (``citeformer.errors.MAX_BIAS``).
    """

    name = "evidence"

    def __init__(self, *, weight: float) -> None:
        self.weight = check_float("evidence weight", weight, 0.0, MAX_BIAS, above=True)

    def bind(self, question: str, sources: Sequence[Source]) -> Support:
        """Prepare the scoring of ``sources`` for one call; heavy work waits for a marker."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}(weight={self.weight:g})"

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.weight == self.weight

    def __hash__(self) -> int:
        return hash((type(self), self.weight))


class LexicalEvidence(Evidence):
    """IDF-weighted share of the claim's content words found in each source (title included).

    IDF is computed over the call's sources, so a word every source shares ("tower" in five
    passages about towers) counts for little and the word that tells them apart ("1889") for
    much. A sentence of an answer is a claim about the question, so the question's own share in
    each source counts beside the claim's, ``question_weight`` times as much (the sum scaled
    back to 0..1): a short claim made of words several passages share ("the else clause is
    executed") then goes to the passage the question is about, while a claim whose words only
    another source holds still goes there. ``question_weight=0``: the claim alone. A claim with
    no content word in any source falls back to the question.
    """

    name = "lexical"

    def __init__(
        self, *, weight: float = DEFAULT_LEXICAL_WEIGHT,
        question_weight: float = DEFAULT_QUESTION_WEIGHT,
    ) -> None:
        super().__init__(weight=weight)
        self.question_weight = check_float("question_weight", question_weight, 0.0, MAX_BIAS)

    def bind(self, question: str, sources: Sequence[Source]) -> Support:  # noqa: D102
        return _LexicalSupport(question, sources, self.question_weight)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(weight={self.weight:g}, "
            f"question_weight={self.question_weight:g})"
        )

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, LexicalEvidence) and super().__eq__(other)
            and other.question_weight == self.question_weight
        )

    def __hash__(self) -> int:
        return hash((type(self), self.weight, self.question_weight))


class _LexicalSupport(Support):
    def __init__(self, question: str, sources: Sequence[Source], question_weight: float) -> None:
        self._sources = [
            set(content_words(f"{s.title or ''} {s.text}")) for s in sources
        ]
        counts = Counter(word for words in self._sources for word in words)
        n = len(sources)
        self._idf = {word: math.log(1 + n / df) for word, df in counts.items()}
        self._question = self._overlap(question)
        self._question_weight = question_weight

    def scores(self, claim: str) -> list[float]:
        result = self._overlap(claim)
        if not any(result):
            return list(self._question)
        weight = self._question_weight
        return [
            (own + weight * asked) / (1 + weight)
            for own, asked in zip(result, self._question, strict=True)
        ]

    def _overlap(self, text: str) -> list[float]:
        # Summed in word order, not set order (which follows the process's string hashing), so
        # that every process gets the same floats and breaks a tie between sources alike.
        words = sorted(set(content_words(text)) & self._idf.keys())
        total = sum(self._idf[w] for w in words)
        if not total:
            return [0.0] * len(self._sources)
        return [sum(self._idf[w] for w in words if w in source) / total for source in self._sources]


class EmbeddingEvidence(Evidence):
    """Cosine similarity of the claim and each source (title and text) under all-MiniLM-L6-v2.

    Needs ``citeformer[retrieval]``. Sources are embedded once per call, at its first marker;
    each new claim costs one embedding. A claim without a word falls back to the question.
    """

    name = "embedding"

    def __init__(self, *, weight: float = DEFAULT_EMBEDDING_WEIGHT) -> None:
        super().__init__(weight=weight)

    def bind(self, question: str, sources: Sequence[Source]) -> Support:  # noqa: D102
        return _EmbeddingSupport(question, sources)


class _EmbeddingSupport(Support):
    def __init__(self, question: str, sources: Sequence[Source]) -> None:
        self._texts = [f"{s.title}: {s.text}" if s.title else s.text for s in sources]
        self._question = question
        self._vectors: Any = None

    def scores(self, claim: str) -> list[float]:
        import torch

        from citeformer.evidence.embeddings import embed

        if self._vectors is None:
            self._vectors = torch.tensor(embed(self._texts))
        query = claim if _WORD.search(claim) else self._question
        vector = torch.tensor(embed([query])[0])
        return (self._vectors @ vector).tolist()  # type: ignore[no-any-return]


EVIDENCE_NAMES: dict[str, Callable[[], Evidence]] = {
    "lexical": LexicalEvidence,
    "embedding": EmbeddingEvidence,
}


def resolve_evidence(value: object) -> Evidence | None:
    """``None``, an ``Evidence`` or one of the names in ``EVIDENCE_NAMES``; anything else raises."""
    if value is None:
        return None
    if isinstance(value, Evidence):
        return value
    if isinstance(value, str):
        factory = EVIDENCE_NAMES.get(value.strip().lower())
        if factory is not None:
            return factory()
        raise InvalidInputError(
            f"unknown evidence scorer {value!r}; use one of: {', '.join(EVIDENCE_NAMES)}, "
            "an Evidence instance, or None to let the model choose alone"
        )
    raise InputTypeError(
        f"evidence must be None, a name ({', '.join(EVIDENCE_NAMES)}) or an Evidence instance, "
        f"got {type(value).__name__}"
    )
