"""Finding citation markers in text."""

from __future__ import annotations

import re
from dataclasses import dataclass

from citeformer.errors import CitationOutOfRangeError
from citeformer.types import Citation

# A bracketed span with no bracket inside, of any length and across lines: a candidate marker,
# well-formed or not. Without nested brackets the scan is linear.
_BRACKETED = re.compile(r"\[([^\[\]]*)\]")
_WELL_FORMED = re.compile(r"[1-9][0-9]*")
_BRACKET = re.compile(r"[\[\]]")


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
    _check_n_sources(n_sources)
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


def _check_n_sources(n_sources: int) -> None:
    if isinstance(n_sources, bool) or not isinstance(n_sources, int) or n_sources < 1:
        raise ValueError(f"n_sources must be a positive int, got {n_sources!r}")
