"""Small immutable value types shared by the core and the framework wrappers."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from citeformer.errors import InvalidInputError, shown

__all__ = [
    "CUT_NOTE",
    "TITLE_KEYS",
    "Citation",
    "CitedAnswer",
    "EvidenceSpan",
    "FinishReason",
    "Policy",
    "Quote",
    "RefusalCheck",
    "Source",
    "citation_dict",
    "title_from",
]


class Policy(str, enum.Enum):
    """Where the grammar requires citation markers."""

    REQUIRED = "required"
    """Every sentence ends with a cite-group before its terminator: ``Paris is in France [1].``"""

    QUOTES_ONLY = "quotes_only"
    """A double-quoted span must be followed by a cite-group; other prose may cite or not."""

    AUTO = "auto"
    """Cite-groups are allowed after any prose and never required."""

    @classmethod
    def coerce(cls, value: Policy | str) -> Policy:
        """Accept a ``Policy`` or its name/value in any case (``"required"``, ``"QUOTES_ONLY"``)."""
        if isinstance(value, Policy):
            return value
        if isinstance(value, str):
            key = value.strip().lower().replace("-", "_")
            for policy in cls:
                if key in (policy.value, policy.name.lower()):
                    return policy
        choices = ", ".join(p.value for p in cls)
        raise InvalidInputError(f"unknown citation policy {shown(value)}; use one of: {choices}")


TITLE_KEYS = ("title", "file_name", "source")
"""Metadata keys a document's title is read from, in order, by both framework wrappers."""


def title_from(metadata: Mapping[str, Any], keys: Sequence[str] = TITLE_KEYS) -> str | None:
    """The first non-blank value among ``metadata``'s ``keys`` (white space folded), or ``None``."""
    for key in keys:
        value = metadata.get(key)
        if value is not None and str(value).strip():
            return " ".join(str(value).split())
    return None


@dataclass(frozen=True)
class Source:
    """One retrieved passage. Its id is its 1-based position in the list passed to one call."""

    text: str
    """The passage the model reads and may cite."""

    title: str | None = None
    """A short label shown to the model next to the number (a file name, a page title)."""

    metadata: Mapping[str, Any] = field(default_factory=dict)
    """Anything the caller wants back with the answer (path, offsets, node id); not shown to the
    model."""


@dataclass(frozen=True)
class EvidenceSpan:
    """Where in its source a citation's claim is supported: one or two sentences of the source.

    ``source.text[source_start:source_end] == text``. ``score`` is lexical support, not
    entailment: the IDF-weighted share of the claim's content words that the span contains
    (1.0: every one of them; IDF over the source's sentences, so a word every sentence has counts
    little). ``weak`` is ``score < citeformer.evidence.spans.WEAK_SUPPORT``: the cited source has no
    sentence that shares much of the claim's wording, so an app may show it differently.
    """

    source_start: int
    """Offset in the source's text where the span begins (a sentence start)."""

    source_end: int
    """Offset just past the span's last sentence."""

    text: str
    """The span as the source writes it."""

    score: float
    """Lexical support of the claim by the span, 0..1 (see the class docstring)."""

    weak: bool
    """Whether ``score`` is below the documented threshold."""


@dataclass(frozen=True)
class Citation:
    """One ``[k]`` marker found in an answer."""

    source_id: int
    """1-based index into the sources of the call that produced the answer."""

    start: int
    """Offset of the marker's ``[`` in the answer text."""

    end: int
    """Offset just past the marker's ``]``: ``text[start:end] == f"[{source_id}]"``."""

    evidence: EvidenceSpan | None = field(default=None, compare=False)
    """The span of the cited source that best supports the claim this marker ends; set on the
    citations of a ``CitedAnswer`` (``None`` from ``parse_citations``). Not part of equality."""


@dataclass(frozen=True)
class Quote:
    """One verbatim quote ``"text" [k]`` in an answer, and where source k holds that text.

    ``answer.sources[q.source_id - 1].text[q.source_start:q.source_end]`` is the quoted text as
    the source writes it (a single space in the quote may stand for a run of white space there).
    """

    text: str
    """The quoted text, without its quote marks."""

    source_id: int
    """The source the quote's marker names; it contains ``text``."""

    start: int
    """Offset of the quoted text in the answer (just past the opening quote mark)."""

    end: int
    """Offset just past the quoted text in the answer: ``answer.text[start:end] == text``."""

    source_start: int
    """Offset in the source's text where the first occurrence of the quote begins."""

    source_end: int
    """Offset in the source's text just past that occurrence."""


FinishReason = Literal["stop", "length"]

CUT_NOTE = "(cut at max_new_tokens)"
"""What the renderers and the command line show after an answer the token budget cut short
(``finish_reason == "length"``): its last sentence may be unfinished, and uncited."""


@dataclass(frozen=True)
class RefusalCheck:
    """What weighing the question against its sources gave, before generating.

    How well the sources support the question, and what that let the answer be
    (``citeformer.Refusal``): every answer's ``refusal``.
    """

    measure: str
    """How support was measured: ``"lexical"`` or ``"embedding"`` (``Refusal.support``)."""

    support: float
    """The support measured (``Refusal.score``): for ``"lexical"`` the share of the question's
    words the best source, or pair of sources, holds; for ``"embedding"`` the closest source's
    cosine to the question."""

    threshold: float
    """Below it the answer is the refusal sentence, and the model is not run."""

    offer_below: float | None
    """Below it (at or above ``threshold``) the model chose between the refusal sentence and a
    cited answer; ``None``: no such band."""

    band: Literal["answer", "offer", "refuse"]
    """What ``support`` let the answer be: cited only, the model's choice, or the refusal."""

    reason: str
    """``band`` in one line, with the question's words the best passages lack under the lexical
    measure (``Refusal.explain``): ``support 0.00 < threshold 0.5 (lexical: the best passage,
    or pair of passages, holds 0 of the question's 2 words, not "capital", "peru")``."""

    def __post_init__(self) -> None:
        if self.band not in ("answer", "offer", "refuse"):
            raise InvalidInputError(
                f"refusal band must be 'answer', 'offer' or 'refuse', got {self.band!r}"
            )


@dataclass(frozen=True)
class CitedAnswer:
    """The result of one generation: the text, its parsed markers and the sources they index."""

    text: str
    """The answer as generated, markers included."""

    citations: tuple[Citation, ...]
    """Every marker in ``text``, in order of appearance."""

    sources: tuple[Source, ...]
    """The sources of the call; ``citations[i].source_id`` indexes this tuple from 1."""

    finish_reason: FinishReason
    """``"stop"``: the model ended the answer; ``"length"``: ``max_new_tokens`` ran out first."""

    prompt_tokens: int = 0
    """Number of tokens in the prompt the model saw."""

    generated_tokens: int = 0
    """Number of tokens generated, the end-of-sequence token included."""

    quotes: tuple[Quote, ...] = ()
    """Every verbatim quote (``QUOTES_ONLY``), located in the source it cites; empty otherwise."""

    abstained: bool = False
    """Whether the answer is the refusal sentence: the sources do not answer the question
    (``citeformer.evidence.refusal``); it then holds no marker."""

    refusal: RefusalCheck | None = None
    """How the sources' support of the question was weighed before generating, and why the
    answer is, or is not, the refusal sentence; ``None`` where nothing was weighed (``refusal``
    off, an unconstrained answer, or a threshold of 0 with no offer)."""

    constrained: bool = True
    """Whether the grammar held the text, so that every marker in it names a source; ``False``
    for an unconstrained answer (``constrained=False``), whose text may hold made-up markers
    (``[7]`` of 3 sources) that ``citations`` leaves out."""

    def __str__(self) -> str:
        """The text: ``print(answer)`` shows the answer, ``repr`` every field."""
        return self.text

    def source_for(self, citation: Citation) -> Source:
        """The source a citation points at."""
        return self.sources[citation.source_id - 1]

    @property
    def cited_ids(self) -> list[int]:
        """Distinct cited source ids, in order of first appearance."""
        return list(dict.fromkeys(c.source_id for c in self.citations))

    def _repr_markdown_(self) -> str:
        # Jupyter shows an answer rendered: linked markers, then its cited sources.
        from citeformer.render import to_markdown, unique_id_prefix

        return to_markdown(self, id_prefix=unique_id_prefix())

    def _repr_html_(self) -> str:
        from citeformer.render import to_html, unique_id_prefix

        return to_html(self, id_prefix=unique_id_prefix())

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CitedAnswer:
        """The answer ``to_dict`` wrote, checked as strictly as a generated one.

        Every field of its exact type, every offset pointing where it says, every marker of the
        text listed among the citations and, unless ``constrained`` is false, naming a source;
        anything else raises ``InvalidInputError`` naming the field.
        """
        from citeformer.answers import answer_from_dict

        return answer_from_dict(data)

    def to_dict(self) -> dict[str, Any]:
        """A plain, JSON-serialisable dict; ``CitedAnswer.from_dict`` reads it back."""
        return {
            "text": self.text,
            "citations": [citation_dict(c) for c in self.citations],
            "sources": [
                {"id": i, "title": s.title, "text": s.text, "metadata": dict(s.metadata)}
                for i, s in enumerate(self.sources, start=1)
            ],
            "quotes": [
                {
                    "text": q.text, "source_id": q.source_id, "start": q.start, "end": q.end,
                    "source_start": q.source_start, "source_end": q.source_end,
                }
                for q in self.quotes
            ],
            "finish_reason": self.finish_reason,
            "prompt_tokens": self.prompt_tokens,
            "generated_tokens": self.generated_tokens,
            "abstained": self.abstained,
            "refusal": None if self.refusal is None else dataclasses.asdict(self.refusal),
            "constrained": self.constrained,
        }


def citation_dict(citation: Citation) -> dict[str, Any]:
    """A citation as a plain dict, the one serialisation every layer builds on.

    Keys ``source_id``, ``start``, ``end`` and ``evidence`` (a dict of ``source_start``,
    ``source_end``, ``text``, ``score``, ``weak``, or ``None``).
    """
    span = citation.evidence
    return {
        "source_id": citation.source_id, "start": citation.start, "end": citation.end,
        "evidence": None if span is None else {
            "source_start": span.source_start, "source_end": span.source_end,
            "text": span.text, "score": round(span.score, 4), "weak": span.weak,
        },
    }
