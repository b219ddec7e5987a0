"""What ``citeformer ask`` prints under an answer: the reference list, or the ``--json`` object."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from citeformer import CitedAnswer, EvidenceSpan, GenerationRequest
from citeformer.app.documents import Passage
from citeformer.app.retrieval import Hit
from citeformer.render.markup import evidence_by_source

__all__ = [
    "EVIDENCE_CHARS",
    "EVIDENCE_INDENT",
    "answer_json",
    "evidence_line",
    "format_references",
    "shorten",
]

EVIDENCE_CHARS = 160
"""Longest supporting sentence shown in the reference list; a longer one ends in an ellipsis."""

EVIDENCE_INDENT = "    "


def format_references(
    answer: CitedAnswer, hits: Sequence[Hit], *, all_sources: bool = False
) -> str:
    """The numbered reference list printed under the answer.

    Numbers are the answer's marker numbers. Only cited sources are listed, in ascending order,
    unless ``all_sources``: then every retrieved passage is, uncited ones marked ``(not cited)``.
    Under each cited passage, one indented line per sentence its citations found support in:
    where it is and the sentence, ``(weak support)`` when little of the claim's wording is there.
    """
    cited = sorted(set(answer.cited_ids))
    numbers = range(1, len(hits) + 1) if all_sources else cited
    evidence = evidence_by_source(answer)
    lines = ["", "References:"]
    if not numbers:
        lines.append(f"(none cited; {len(hits)} passage(s) were retrieved, see --all-sources)")
    for number in numbers:
        passage = hits[number - 1].passage
        note = "" if number in cited else " (not cited)"
        lines.append(f"[{number}] {passage.location}{note}")
        lines += [evidence_line(span, passage) for span in evidence.get(number, [])]
    if answer.quotes:
        lines += ["", "Quotes (verbatim):"]
        for quote in answer.quotes:
            where = hits[quote.source_id - 1].passage.locate(quote.source_start, quote.source_end)
            lines.append(f'"{quote.text}" [{quote.source_id}] {where.describe()}')
    return "\n".join(lines) + "\n"


def evidence_line(span: EvidenceSpan, passage: Passage) -> str:
    """``    line 4: "The sentence..."``, with `` (weak support)`` when ``span.weak``.

    The path is on the reference line above; ``page 2, line 5`` for a PDF.
    """
    where = passage.locate(span.source_start, span.source_end)
    weak = " (weak support)" if span.weak else ""
    return f'{EVIDENCE_INDENT}{where.describe(path=False)}: "{shorten(span.text)}"{weak}'


def shorten(text: str, limit: int = EVIDENCE_CHARS) -> str:
    """``text`` on one line (white space runs made one space), cut at a word to fit ``limit``."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    cut = flat[: limit - 1]
    if flat[limit - 1] != " " and " " in cut:
        cut = cut[: cut.rindex(" ")]
    return cut.rstrip(" ,;:") + "\u2026"


def answer_json(
    answer: CitedAnswer, hits: Sequence[Hit], request: GenerationRequest, policy: str
) -> dict[str, Any]:
    """The ``--json`` object: ``CitedAnswer.to_dict()`` with where each passage and span is.

    ``sources`` are all retrieved passages, ``id`` their marker number; each carries its file
    location (``path``, ``start``, ``end``, ``line_start``, ``line_end``, ``page``, ``page_end``:
    the pages of a PDF passage, ``None`` otherwise), its retrieval
    ``score`` and whether the answer ``cited`` it, in place of the ``metadata`` that held them.
    Each citation's ``evidence`` (offsets ``source_start``/``source_end`` in the passage) and each
    quote also carry ``path``, ``file_start``, ``file_end`` (offsets in the document's text),
    ``line`` and ``page`` (``None`` but for PDFs). ``refusal`` is the answer's
    (``citeformer.RefusalCheck``: ``measure``, ``support`` rounded to four places, ``threshold``,
    ``offer_below``, ``band``, ``reason``); ``None`` with ``--no-refusal``.
    """
    data = answer.to_dict()
    cited = set(answer.cited_ids)
    for source in data["sources"]:
        source.update(source.pop("metadata"), cited=source["id"] in cited)
    for citation, entry in zip(answer.citations, data["citations"], strict=True):
        span = citation.evidence
        if span is not None and entry["evidence"] is not None:
            passage = hits[citation.source_id - 1].passage
            entry["evidence"].update(passage.locate(span.source_start, span.source_end).as_dict())
    for quote, entry in zip(answer.quotes, data["quotes"], strict=True):
        where = hits[quote.source_id - 1].passage.locate(quote.source_start, quote.source_end)
        entry.update(where.as_dict())
    if data["refusal"] is not None:
        data["refusal"]["support"] = round(data["refusal"]["support"], 4)
    return {"question": request.question, "policy": policy, **data}


