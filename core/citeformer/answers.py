"""What every generator shares once text is produced: streaming it, and re-checking the answer.

Showing an answer while it streams, and turning the finished text into a ``CitedAnswer`` whose
markers and quotes are re-checked; reading one back from ``to_dict``'s form as strictly
(``answer_from_dict``).

``CiteGenerator`` (a local model) and ``ServerGenerator`` (a serving engine) differ only in how
text is produced; both go through these functions, so an answer means the same from either.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar, cast

from citeformer.errors import (
    GrammarViolationError,
    InputTypeError,
    InvalidInputError,
    check_float,
    shown,
)
from citeformer.evidence.spans import with_evidence
from citeformer.grammar.markers import MARKER, scan_markers
from citeformer.grammar.quotes import find_quotes, trim_open_quote
from citeformer.request import GenerationRequest
from citeformer.types import (
    Citation,
    CitedAnswer,
    EvidenceSpan,
    FinishReason,
    Policy,
    Quote,
    RefusalCheck,
    Source,
)

__all__ = [
    "ChunkTracker",
    "StreamedAnswer",
    "WholeAnswer",
    "answer_from_dict",
    "bad_markers",
    "cited_answer",
    "safe_prefix",
    "trim_open_marker",
    "unshown_text",
]

logger = logging.getLogger(__name__)

_WORD = re.compile(r"[^\W_]")


def trim_open_marker(text: str) -> str:
    """Drop a marker cut off by the token budget (``... France [1``), and the space before it."""
    opened = text.rfind("[")
    if opened > text.rfind("]"):
        return text[:opened].rstrip(" ")
    return text


def safe_prefix(text: str, *, quotes: bool = False) -> str:
    """What a stream may show of ``text`` so far.

    No half-decoded character, no marker still open, no verbatim quote before its marker (the
    answer drops it if the budget cuts it), and no trailing white space, which the answer loses
    if the budget then cuts a marker open after it (tokenizers that spell " [" as " " then "["
    would otherwise stream a space the answer lacks).
    """
    text = trim_open_marker(text.rstrip("\ufffd"))
    return (trim_open_quote(text) if quotes else text).rstrip()


def bad_markers(text: str, n_sources: int, *, finished: bool) -> list[str]:
    """What the grammar forbids in ``text``, in order of appearance.

    Markers outside 1..n, malformed spans, and every bracket outside a marker; a last ``[``
    still open counts only once the answer is ``finished``.
    """
    scan = scan_markers(text, n_sources)
    found = [(c.start, text[c.start:c.end]) for c in scan.out_of_range]
    found += [(start, text[start:end]) for start, end in scan.malformed]
    last_bracket = max(text.rfind("["), text.rfind("]"))
    for offset in scan.stray:
        still_open = text[offset] == "[" and offset == last_bracket
        if finished or not still_open:
            found.append((offset, text[offset:offset + 12]))
    return [marker for _, marker in sorted(found)]


class StreamedAnswer:
    """Base of the answer streams: iterated once, then ``answer`` holds the ``CitedAnswer``."""

    def __init__(self) -> None:
        self._answer: CitedAnswer | None = None
        self._started = False

    @property
    def answer(self) -> CitedAnswer:
        """The finished ``CitedAnswer``; available once iteration has ended."""
        if self._answer is None:
            raise RuntimeError("the stream has not finished yet: iterate over it to the end first")
        return self._answer

    def _start(self) -> None:
        if self._started:
            raise RuntimeError("an answer stream can be iterated only once")
        self._started = True


class WholeAnswer(StreamedAnswer):
    """A finished answer as a stream of one chunk, iterated or async-iterated.

    For a refusal that ran no model, and an engine that does not stream.
    """

    def __init__(self, answer: CitedAnswer) -> None:
        super().__init__()
        self._done = answer

    def __iter__(self) -> Iterator[str]:
        self._start()
        self._answer = self._done
        return iter([self._done.text] if self._done.text else [])

    def __aiter__(self) -> AsyncIterator[str]:
        return self._chunks()

    async def _chunks(self) -> AsyncIterator[str]:
        for chunk in self:
            yield chunk


class ChunkTracker:
    """Turns the growing text of an answer into the chunks a stream shows; they join to it."""

    def __init__(self, *, quotes: bool) -> None:
        self._quotes = quotes
        self.emitted = ""

    def update(self, text: str) -> str | None:
        """The new visible text, once ``text`` (everything so far) shows more than before."""
        visible = safe_prefix(text, quotes=self._quotes)
        if len(visible) > len(self.emitted) and visible.startswith(self.emitted):
            chunk = visible[len(self.emitted):]
            self.emitted = visible
            return chunk
        return None

    def rest(self, answer: CitedAnswer) -> str:
        """What the finished answer holds beyond the chunks already shown."""
        return unshown_text(answer.text, self.emitted)


def unshown_text(text: str, shown: str) -> str:
    """What a finished answer's ``text`` holds beyond the ``shown`` chunks (they are a prefix)."""
    return text[len(shown):] if text.startswith(shown) else ""


def cited_answer(
    request: GenerationRequest,
    text: str,
    finish: FinishReason,
    *,
    prompt_tokens: int,
    generated_tokens: int,
    violation: Callable[[str, str], GrammarViolationError] | None = None,
) -> CitedAnswer:
    """The ``CitedAnswer`` of a finished text; a constrained text is re-checked.

    Every citation gets its ``evidence``: the span of its source that best supports the claim.

    A constrained text cut by the budget loses its open marker (and open quote); then any marker
    outside 1..N, malformed or left open, raises ``violation(marker, text)`` (by default a
    ``GrammarViolationError``), and a quote that is not verbatim a ``GrammarViolationError``:
    either can only mean that the grammar was not enforced.
    """
    n = request.n_sources
    quotable = request.quotable_chars
    quotes: tuple[Quote, ...] = ()
    if request.constrained:
        if finish == "length":
            text = trim_open_marker(text)
            if quotable is not None:
                text = trim_open_quote(text)
        bad = bad_markers(text, n, finished=True)
        if bad:
            raise (violation or _violation(n))(bad[0], text)
        if quotable is not None:
            quotes = find_quotes(text, request.sources, quotable_chars=quotable)
    if finish == "length":
        _warn_cut(request, text)
    return CitedAnswer(
        text=text,
        citations=with_evidence(
            text, scan_markers(text, n).citations, request.sources, request.question
        ),
        sources=request.sources,
        finish_reason=finish,
        prompt_tokens=prompt_tokens,
        generated_tokens=generated_tokens,
        quotes=quotes,
        abstained=request.abstains(text),
        refusal=request.refusal_check,
        constrained=request.constrained,
    )


def _warn_cut(request: GenerationRequest, text: str) -> None:
    """Log that the budget cut the answer.

    Under a policy that cites every claim, say whether its last claim went uncited (the budget
    ran out before its marker).
    """
    tail = text[text.rfind("]") + 1:]
    uncited = request.constrained and request.policy is Policy.REQUIRED and _WORD.search(tail)
    logger.warning(
        "the answer was cut at max_new_tokens=%d%s; raise max_new_tokens for a whole answer: %r",
        request.max_new_tokens, " before its last claim was cited" if uncited else "",
        text[-80:],
    )


def _violation(n: int) -> Callable[[str, str], GrammarViolationError]:
    def error(marker: str, text: str) -> GrammarViolationError:
        return GrammarViolationError(
            f"constrained output holds marker {marker!r}, which names no source in 1..{n}: "
            f"{text!r}"
        )

    return error


# -- reading an answer back ------------------------------------------------------------------
# An answer that comes back from storage or from another process (``CitedAnswer.from_dict``) may
# have been altered, or written by something else: every field must have its exact type (``True``
# is no int, ``"false"`` no bool), every offset must point where it says, and every marker of the
# text must name a source and be listed among the citations, as in an answer generated here.

T = TypeVar("T")
_MISSING = object()


class _Fields:
    """The fields of one mapping of the dict, read by exact type; errors name ``where``."""

    def __init__(self, data: object, where: str) -> None:
        if not isinstance(data, Mapping):
            raise InputTypeError(f"{where} must be a dict, got {shown(data)}")
        self._data = data
        self.where = where

    def _get(self, key: str, default: object) -> object:
        value = self._data.get(key, default)
        if value is _MISSING:
            raise InvalidInputError(f"{self.where} has no {key!r}; pass what to_dict() wrote")
        return value

    def _name(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where != "answer" else key

    def typed(self, key: str, kind: type[T], default: object = _MISSING) -> T:
        value = self._get(key, default)
        if kind is int and isinstance(value, bool) or not isinstance(value, kind):
            raise InputTypeError(
                f"{self._name(key)} must be {kind.__name__}, got {shown(value)} "
                f"({type(value).__name__})"
            )
        return value

    def maybe(self, key: str, kind: type[T]) -> T | None:
        return None if self._get(key, None) is None else self.typed(key, kind)

    def mapping(self, key: str) -> Mapping[Any, Any] | None:
        value = self._get(key, None)
        if value is not None and not isinstance(value, Mapping):
            raise InputTypeError(f"{self._name(key)} must be a dict or null, got {shown(value)}")
        return value

    def offset(self, key: str, default: object = _MISSING) -> int:
        value = self.typed(key, int, default)
        if value < 0:
            raise InvalidInputError(f"{self._name(key)} must be >= 0, got {shown(value)}")
        return value

    def number(self, key: str, low: float, high: float) -> float:
        return check_float(self._name(key), self._get(key, _MISSING), low, high)

    def items(self, key: str, default: object = _MISSING) -> list[_Fields]:
        value = self._get(key, default)
        if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
            raise InputTypeError(f"{self._name(key)} must be a list, got {shown(value)}")
        return [_Fields(item, f"{self._name(key)}[{i}]") for i, item in enumerate(value)]

    def error(self, message: str) -> InvalidInputError:
        return InvalidInputError(f"{self.where}: {message}; the dict was altered")


def answer_from_dict(data: object) -> CitedAnswer:
    """The ``CitedAnswer`` that ``data`` (``to_dict()``'s form) holds, checked whole."""
    fields = _Fields(data, "answer")
    text = fields.typed("text", str)
    sources = tuple(_source(item, i) for i, item in enumerate(fields.items("sources"), start=1))
    citations = tuple(_citation(item, sources) for item in fields.items("citations"))
    quotes = tuple(_quote(item, text, sources) for item in fields.items("quotes", ()))
    finish = fields.typed("finish_reason", str)
    if finish not in ("stop", "length"):
        raise InvalidInputError(f"finish_reason must be 'stop' or 'length', got {shown(finish)}")
    refusal = fields.mapping("refusal")
    answer = CitedAnswer(
        text=text, citations=citations, sources=sources,
        finish_reason=cast(FinishReason, finish),
        prompt_tokens=fields.offset("prompt_tokens", 0),
        generated_tokens=fields.offset("generated_tokens", 0),
        quotes=quotes, abstained=fields.typed("abstained", bool, False),
        refusal=None if refusal is None else _refusal(_Fields(refusal, "refusal")),
        constrained=fields.typed("constrained", bool, True),
    )
    _check_markers(answer, fields)
    return answer


def _source(fields: _Fields, number: int) -> Source:
    if fields.maybe("id", int) not in (None, number):
        raise fields.error(f"id is {fields.maybe('id', int)}, not its position {number}")
    metadata = fields.mapping("metadata") or {}
    if not all(isinstance(key, str) for key in metadata):
        raise fields.error("metadata keys must be strings")
    return Source(fields.typed("text", str), fields.maybe("title", str), dict(metadata))


def _citation(fields: _Fields, sources: tuple[Source, ...]) -> Citation:
    source_id = fields.typed("source_id", int)
    if not 1 <= source_id <= len(sources):
        raise fields.error(f"source_id {shown(source_id)} names none of the {len(sources)} sources")
    found = fields.mapping("evidence")
    evidence = None
    if found is not None:
        span = _Fields(found, f"{fields.where}.evidence")
        start, end = span.offset("source_start"), span.offset("source_end")
        evidence = EvidenceSpan(
            start, end, span.typed("text", str), span.number("score", 0.0, 1.0),
            span.typed("weak", bool),
        )
        if not start <= end or sources[source_id - 1].text[start:end] != evidence.text:
            raise span.error(f"{start}:{end} of source {source_id} is not its text")
    return Citation(source_id, fields.offset("start"), fields.offset("end"), evidence)


def _quote(fields: _Fields, text: str, sources: tuple[Source, ...]) -> Quote:
    quote = Quote(
        fields.typed("text", str), fields.typed("source_id", int), fields.offset("start"),
        fields.offset("end"), fields.offset("source_start"), fields.offset("source_end"),
    )
    if not 1 <= quote.source_id <= len(sources):
        raise fields.error(f"source_id {shown(quote.source_id)} names none of the sources")
    if text[quote.start:quote.end] != quote.text:
        raise fields.error(f"{quote.start}:{quote.end} of the answer is not its text")
    if not quote.source_start <= quote.source_end <= len(sources[quote.source_id - 1].text):
        raise fields.error(f"{quote.source_start}:{quote.source_end} is outside its source")
    return quote


def _refusal(fields: _Fields) -> RefusalCheck:
    # The ranges Refusal holds its numbers to; a support is a share, or a cosine under MiniLM.
    offer = fields.maybe("offer_below", object)
    if offer is not None and offer != math.inf:  # math.inf: offered to every answer
        offer = fields.number("offer_below", 0.0, 1.0)
    return RefusalCheck(
        measure=fields.typed("measure", str), support=fields.number("support", -1.0, 1.0),
        threshold=fields.number("threshold", 0.0, 1.0), offer_below=offer,
        band=fields.typed("band", str),  # type: ignore[arg-type]  # RefusalCheck checks it
        reason=fields.typed("reason", str),
    )


def _check_markers(answer: CitedAnswer, fields: _Fields) -> None:
    """Every marker of the text listed, in order and in place.

    None names a source outside the sources, unless the answer was unconstrained: its made-up
    markers are what it shows.
    """
    n = len(answer.sources)
    if n == 0:
        if (marker := MARKER.search(answer.text)) is not None:
            raise fields.error(f"the text holds {marker.group()!r} but there are no sources")
        found: tuple[Citation, ...] = ()
    else:
        scan = scan_markers(answer.text, n)
        if answer.constrained and scan.out_of_range:
            bad = scan.out_of_range[0]
            raise fields.error(
                f"the text holds {answer.text[bad.start:bad.end]!r} at {bad.start}, which names "
                f"none of the {n} sources"
            )
        found = scan.citations
    listed = [(c.source_id, c.start, c.end) for c in answer.citations]
    written = [(c.source_id, c.start, c.end) for c in found]
    if listed != written:
        raise fields.error(
            f"citations list {_markers(listed)} but the text holds {_markers(written)}"
        )
    if answer.abstained and written:
        raise fields.error("abstained, yet the text holds markers")


def _markers(found: list[tuple[int, int, int]]) -> str:
    listed = ", ".join(f"[{k}]@{shown(start)}" for k, start, _ in found[:8])
    return f"[{listed}{', ...' if len(found) > 8 else ''}]"
