"""Citation markers in text: finding them, sorting them, and every pattern that reads them.

The grammar writes a marker as ``[k]`` and a cite-group as markers back to back (``[1][3]``);
this module holds the regular expressions every other layer reads them with (the steering
levers, evidence, prompts, rendering, quote checks), so that one place says what a marker is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from citeformer.errors import CitationOutOfRangeError, check_positive_int
from citeformer.types import Citation

__all__ = [
    "CLOSED_GROUP",
    "MARKER",
    "MARKER_GROUP",
    "MARKER_LIKE",
    "OPEN_GROUP",
    "QUOTED_CITE",
    "MarkerScan",
    "parse_citations",
    "scan_markers",
    "strip_markers",
]

# A bracketed span with no bracket inside, of any length and across lines: a candidate marker,
# well-formed or not. Without nested brackets the scan is linear.
_BRACKETED = re.compile(r"\[([^\[\]]*)\]")
_WELL_FORMED = re.compile(r"[1-9][0-9]*")
_BRACKET = re.compile(r"[\[\]]")

MARKER = re.compile(r"\[(\d+)\]")
"""One marker ``[k]``; group 1 is k."""
MARKER_GROUP = re.compile(r"\s*(?:\[\d+\])+")
"""A cite-group (``[1]``, ``[2][3]``) with the white space before it."""
MARKER_LIKE = re.compile(r"\[[^\[\]\n]{0,24}\]")
"""Anything a reader takes for a marker (``[2]``, ``[1, 3]``): no word of the prose."""
OPEN_GROUP = re.compile(r"(?:\[\d+\]\s*)*\[(\d*)$")
"""The open marker group at the end of a text: ``[``, ``[1``, ``[1][2``, ``[1] [1``; group 1 holds
the digits written so far."""
CLOSED_GROUP = re.compile(r"(?:\[\d+\]\s*)*\[(\d+)\]$")
"""A group whose last marker was just closed (``[1]``, ``[1][3]``); group 1 is its id."""
QUOTED_CITE = re.compile(r'"([^"\[\]]*)"( ?)\[([1-9][0-9]*)\]')
"""A verbatim quote and its marker, ``"text" [k]``: groups text, the optional space, k."""


@dataclass(frozen=True)
class MarkerScan:
    """Every bracketed span of a text, sorted into what the grammar allows and what it does not."""

    citations: tuple[Citation, ...]
    """Markers ``[k]`` with 1 <= k <= n_sources."""

    out_of_range: tuple[Citation, ...]
    """Markers shaped ``[k]`` whose k names no source (k > n_sources)."""

    malformed: tuple[tuple[int, int], ...]
    """(start, end) of bracketed spans not shaped ``[k]``: ``[0]``, ``[01]``, ``[1, 2]``, a span
    of prose in brackets, one that crosses a line break."""

    stray: tuple[int, ...] = ()
    """Offsets of the brackets that belong to no bracketed span: a ``[`` never closed before the
    next bracket (``[[1]``), a ``]`` never opened (``is ]``), a ``[`` left open at the end."""

    @property
    def fabricated(self) -> int:
        """Markers that cannot be resolved to a source: out of range plus malformed."""
        return len(self.out_of_range) + len(self.malformed)

    @property
    def total(self) -> int:
        """Every marker and bracketed span: valid, out of range or malformed (strays aside)."""
        return len(self.citations) + self.fabricated


def scan_markers(text: str, n_sources: int) -> MarkerScan:
    """Sort every bracket in ``text``: valid, out-of-range and malformed markers, and strays.

    Every ``[`` and ``]`` of the text is accounted for: it belongs to exactly one marker or
    bracketed span, or it is listed in ``stray``.
    """
    check_positive_int("n_sources", n_sources)
    valid: list[Citation] = []
    out_of_range: list[Citation] = []
    malformed: list[tuple[int, int]] = []
    stray: list[int] = []
    covered = 0
    for match in _BRACKETED.finditer(text):
        stray += [m.start() for m in _BRACKET.finditer(text, covered, match.start())]
        covered = match.end()
        inner = match.group(1)
        if _WELL_FORMED.fullmatch(inner):
            citation = Citation(int(inner), match.start(), match.end())
            (valid if citation.source_id <= n_sources else out_of_range).append(citation)
        else:
            malformed.append((match.start(), match.end()))
    stray += [m.start() for m in _BRACKET.finditer(text, covered)]
    return MarkerScan(tuple(valid), tuple(out_of_range), tuple(malformed), tuple(stray))


def parse_citations(text: str, n_sources: int) -> list[Citation]:
    """Return the ``[k]`` markers of ``text`` in order; raise if one names a source outside 1..n.

    Bracketed spans of another shape (``[a]``, ``[1, 2]``) are not markers and are ignored here;
    ``scan_markers`` reports them.
    """
    scan = scan_markers(text, n_sources)
    if scan.out_of_range:
        bad = scan.out_of_range[0]
        raise CitationOutOfRangeError(
            f"marker {text[bad.start:bad.end]!r} at offset {bad.start} names source "
            f"{bad.source_id}, but only {n_sources} source(s) were given; "
            "use scan_markers() to count such markers instead of failing"
        )
    return list(scan.citations)


def strip_markers(text: str) -> str:
    """``text`` without citation markers (``[1]``, ``[2][3]``) and the space before them."""
    return MARKER_GROUP.sub("", text).strip()
