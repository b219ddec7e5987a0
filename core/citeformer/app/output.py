"""What ``citeformer ask`` prints under an answer: the reference list, or the ``--json`` object."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from citeformer import CitedAnswer, Quote
from citeformer.app.documents import Passage
from citeformer.app.retrieval import Hit


def format_references(
    answer: CitedAnswer, hits: Sequence[Hit], *, all_sources: bool = False
) -> str:
    """The numbered reference list printed under the answer.

    Numbers are the answer's marker numbers. Only cited sources are listed, in ascending order,
    unless ``all_sources``: then every retrieved passage is, uncited ones marked ``(not cited)``.
    """
    cited = sorted(set(answer.cited_ids))
    numbers = range(1, len(hits) + 1) if all_sources else cited
    lines = ["", "References:"]
    if not numbers:
        lines.append(f"(none cited; {len(hits)} passage(s) were retrieved, see --all-sources)")
    for number in numbers:
        note = "" if number in cited else " (not cited)"
        lines.append(f"[{number}] {hits[number - 1].passage.location}{note}")
    if answer.quotes:
        lines += ["", "Quotes (verbatim):"]
        for quote in answer.quotes:
            where = quote_location(quote, hits[quote.source_id - 1].passage)
            lines.append(
                f'"{quote.text}" [{quote.source_id}] {where["path"]}, line {where["line"]}'
            )
    return "\n".join(lines) + "\n"


def answer_json(
    answer: CitedAnswer, hits: Sequence[Hit], question: str, policy: str
) -> dict[str, Any]:
    """The ``--json`` object: ``CitedAnswer.to_dict()`` with where each passage and quote is.

    ``sources`` are all retrieved passages, ``id`` their marker number; each carries its file
    location (``path``, ``start``, ``end``, ``line_start``, ``line_end``), its retrieval
    ``score`` and whether the answer ``cited`` it, in place of the ``metadata`` that held them.
    Each quote also carries ``path``, ``file_start``, ``file_end`` and ``line``.
    """
    data = answer.to_dict()
    cited = set(answer.cited_ids)
    for source in data["sources"]:
        source.update(source.pop("metadata"), cited=source["id"] in cited)
    for quote, entry in zip(answer.quotes, data["quotes"], strict=True):
        entry.update(quote_location(quote, hits[quote.source_id - 1].passage))
    return {"question": question, "policy": policy, **data}


def quote_location(quote: Quote, passage: Passage) -> dict[str, Any]:
    """Where a quote lies in the passage's file: path, character offsets, 1-based line."""
    # Source offsets are into the passage text, which is the file's text from passage.start.
    return {
        "path": passage.path,
        "file_start": passage.start + quote.source_start,
        "file_end": passage.start + quote.source_end,
        "line": passage.line_start + passage.text.count("\n", 0, quote.source_start),
    }
