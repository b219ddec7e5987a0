"""parse_citations and scan_markers: examples and properties."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from citeformer import CitationOutOfRangeError, parse_citations, scan_markers
from citeformer.types import Citation


def test_markers_in_order_with_offsets() -> None:
    text = "Paris is the capital [1]. Berlin too [2][3]."
    assert parse_citations(text, 3) == [
        Citation(1, 21, 24), Citation(2, 37, 40), Citation(3, 40, 43)
    ]


def test_out_of_range_marker_raises_and_names_it() -> None:
    with pytest.raises(CitationOutOfRangeError, match=r"'\[7\]' at offset 6 names source 7"):
        parse_citations("Paris [7].", 3)


def test_other_bracket_shapes_are_not_citations() -> None:
    text = "See [a], [1, 2], [0], [01], [] and [ 1 ] but [2]."
    assert parse_citations(text, 3) == [Citation(2, 45, 48)]
    scan = scan_markers(text, 3)
    assert len(scan.malformed) == 6
    assert scan.fabricated == 6
    assert scan.total == 7


def test_scan_counts_out_of_range() -> None:
    scan = scan_markers("A [1]. B [99]. C [7][2].", 3)
    assert [c.source_id for c in scan.citations] == [1, 2]
    assert [c.source_id for c in scan.out_of_range] == [99, 7]
    assert scan.fabricated == 2


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "3"])
def test_n_sources_must_be_positive_int(bad: object) -> None:
    with pytest.raises(ValueError, match="n_sources must be a positive int"):
        parse_citations("x [1]", bad)  # type: ignore[arg-type]


prose = st.text(alphabet=st.characters(blacklist_characters="[]"), max_size=30)


@given(st.integers(1, 50), st.lists(st.tuples(prose, st.integers(1, 50)), max_size=8), prose)
def test_every_inserted_marker_is_found_exactly(
    n: int, pieces: list[tuple[str, int]], tail: str
) -> None:
    text, expected = "", []
    for chunk, k in pieces:
        text += chunk
        expected.append((k, len(text)))
        text += f"[{k}]"
    text += tail
    scan = scan_markers(text, n)
    found = sorted(scan.citations + scan.out_of_range, key=lambda c: c.start)
    assert [(c.source_id, c.start) for c in found] == expected
    for citation in found:
        assert text[citation.start:citation.end] == f"[{citation.source_id}]"
    assert all(c.source_id <= n for c in scan.citations)
    assert all(c.source_id > n for c in scan.out_of_range)
    if scan.out_of_range:
        with pytest.raises(CitationOutOfRangeError):
            parse_citations(text, n)
    else:
        assert parse_citations(text, n) == list(scan.citations)


@given(st.text(max_size=80), st.integers(1, 20))
def test_any_text_scans_without_error_and_offsets_hold(text: str, n: int) -> None:
    scan = scan_markers(text, n)
    for citation in scan.citations + scan.out_of_range:
        assert re.fullmatch(r"\[[1-9][0-9]*\]", text[citation.start:citation.end])
    for start, end in scan.malformed:
        assert text[start] == "[" and text[end - 1] == "]"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Paris is big [1", "Paris is big"),
        ("Paris is big [", "Paris is big"),
        ("Paris is big [1][2", "Paris is big [1]"),
        ("Paris is big [1].", "Paris is big [1]."),
        ("Paris is big", "Paris is big"),
    ],
)
def test_an_unfinished_marker_is_trimmed(text: str, expected: str) -> None:
    from citeformer.answers import trim_open_marker

    assert trim_open_marker(text) == expected


@pytest.mark.parametrize(
    ("decoded", "shown"),
    [
        ("Paris is ", "Paris is"),  # the space waits: a marker cut open after it drops it
        ("Paris is [", "Paris is"),
        ("Paris is [1", "Paris is"),
        ("Paris is [1]", "Paris is [1]"),
        ("Paris is [1]. ", "Paris is [1]."),
        ("Caf\ufffd", "Caf"),
    ],
)
def test_a_stream_shows_only_text_the_answer_keeps(decoded: str, shown: str) -> None:
    from citeformer.answers import safe_prefix, trim_open_marker

    assert safe_prefix(decoded) == shown
    assert trim_open_marker(decoded).startswith(shown)


@given(st.text(alphabet="ab1 7\n[]", max_size=60), st.integers(1, 9))
def test_every_bracket_is_accounted_for(text: str, n: int) -> None:
    scan = scan_markers(text, n)
    owned: list[int] = []
    for citation in (*scan.citations, *scan.out_of_range):
        owned += [citation.start, citation.end - 1]
    for start, end in scan.malformed:
        owned += [start, end - 1]
    owned += list(scan.stray)
    brackets = [i for i, char in enumerate(text) if char in "[]"]
    assert sorted(owned) == brackets


@pytest.mark.parametrize(
    ("text", "stray", "malformed"),
    [
        ("Paris [[1] is ] the capital of France [1].", (6, 14), ()),
        ("See [this bracket span is longer than 24 chars] too [2].", (), ((4, 47),)),
        ("Paris is [\n7] the capital [1].", (), ((9, 13),)),
        ("a [[1] ] [long bracketed span of prose here] [\n2] [", (2, 7, 50), ((9, 44), (45, 49))),
    ],
)
def test_strays_and_long_or_multiline_spans(
    text: str, stray: tuple[int, ...], malformed: tuple[tuple[int, int], ...]
) -> None:
    scan = scan_markers(text, 3)
    assert (scan.stray, scan.malformed) == (stray, malformed)
