"""Reading an answer back from ``CitedAnswer.to_dict``'s form, as strictly as one generated here.

An answer that comes back from storage or from another process may have been altered, or written
by something else: every field must have its exact type (``True`` is no int, ``"false"`` no bool),
every offset must point where it says, and every marker of the text must name a source and be
listed among the citations. Anything else raises ``InvalidInputError`` naming the field.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar, cast

from citeformer.errors import InputTypeError, InvalidInputError, shown
from citeformer.grammar.markers import MARKER, scan_markers
from citeformer.types import (
    Citation,
    CitedAnswer,
    EvidenceSpan,
    FinishReason,
    Quote,
    RefusalCheck,
    Source,
)

__all__ = ["answer_from_dict"]

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

    def number(self, key: str) -> float:
        value = self._get(key, _MISSING)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InputTypeError(f"{self._name(key)} must be a number, got {shown(value)}")
        if isinstance(value, int) and value.bit_length() > 64 or not math.isfinite(value):
            raise InvalidInputError(
                f"{self._name(key)} must be a finite number, got {shown(value)}"
            )
        return float(value)

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
            start, end, span.typed("text", str), span.number("score"), span.typed("weak", bool)
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
    offer = None if fields.maybe("offer_below", object) is None else fields.number("offer_below")
    return RefusalCheck(
        measure=fields.typed("measure", str), support=fields.number("support"),
        threshold=fields.number("threshold"), offer_below=offer,
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
