"""Unit tests for citeformer.app.chunking: passages on natural boundaries, exact offsets."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from citeformer.app.chunking import chunk_text


def check_chunks(text: str, max_chars: int) -> None:
    spans = chunk_text(text, max_chars)
    covered = set()
    previous_end = 0
    for span in spans:
        assert text[span.start:span.end] == span.text
        assert 0 < len(span.text) <= max_chars
        assert span.text == span.text.strip()
        assert span.start >= previous_end  # ordered, no overlap
        previous_end = span.end
        assert span.line_start == text.count("\n", 0, span.start) + 1
        assert span.line_end == text.count("\n", 0, span.end - 1) + 1
        covered.update(range(span.start, span.end))
    missing = [i for i, char in enumerate(text) if not char.isspace() and i not in covered]
    assert not missing


prose = st.lists(
    st.sampled_from(list("abc xyz.!?\n\t\"')é\u2019") + ["\r\n", "\n\n", "Word ", " \n \n"]),
    max_size=150,
).map("".join)

# Every kind of white space str.isspace knows (line separators, no-break spaces, information
# separators), runs of it, and what may end a sentence.
spacey = st.lists(
    st.sampled_from(
        ["a", "bc", ".", "!", "?", ")", "]", "\u201d", "'", " ", "  ", "\t", "\n", "\r\n",
         "\n \n", "\x0b", "\x0c", "\x1c", "\x85", "\xa0", "\u2028", "\u3000", " " * 30]
    ),
    max_size=200,
).map("".join)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=prose, max_chars=st.integers(1, 80))
def test_chunks_are_exact_bounded_and_cover_the_text(text: str, max_chars: int) -> None:
    check_chunks(text, max_chars)


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=300), max_chars=st.integers(1, 50))
def test_chunks_hold_for_any_unicode(text: str, max_chars: int) -> None:
    check_chunks(text, max_chars)


@settings(max_examples=300, deadline=None)
@given(text=spacey, max_chars=st.integers(1, 60))
def test_offsets_round_trip_through_any_white_space(text: str, max_chars: int) -> None:
    spans = chunk_text(text, max_chars)
    check_chunks(text, max_chars)
    # Offsets alone rebuild the passages, and the line numbers, from the text.
    assert [text[s.start:s.end] for s in spans] == [s.text for s in spans]
    lines = text.split("\n")
    for span in spans:
        first = sum(len(line) + 1 for line in lines[:span.line_start - 1])
        assert first <= span.start <= first + len(lines[span.line_start - 1])
    # What lies between two passages is white space only.
    gaps = zip([0] + [s.end for s in spans], [s.start for s in spans] + [len(text)], strict=True)
    assert all(not text[a:b].strip() for a, b in gaps)


def test_small_paragraphs_are_packed_and_large_ones_split_on_sentences() -> None:
    text = "# Title\n\nShort one.\n\n" + " ".join(f"Sentence number {i} here." for i in range(8))
    spans = chunk_text(text, 60)
    assert spans[0].text == "# Title\n\nShort one."
    assert (spans[0].line_start, spans[0].line_end) == (1, 3)
    assert all(s.text.endswith(".") for s in spans)
    assert all(s.line_start == 5 for s in spans[1:])
    assert len(spans) > 2


def test_split_paragraph_pieces_are_not_packed_with_the_next_paragraph() -> None:
    long = "Aaaa aaaa aaaa. Bbbb bbbb bbbb. Cccc."
    spans = chunk_text(f"{long}\n\nTail.", 20)
    assert [s.text for s in spans] == ["Aaaa aaaa aaaa.", "Bbbb bbbb bbbb.", "Cccc.", "Tail."]


@pytest.mark.parametrize(
    ("text", "max_chars", "pieces"),
    [
        # after . ! ? and after one closing quote or bracket behind them
        ("One two. Three four! Five six? Seven.", 12,
         ["One two.", "Three four!", "Five six?", "Seven."]),
        ('He said "yes." Then (he left.) Done.', 16,
         ['He said "yes."', "Then (he left.)", "Done."]),
        ("Yes.) No way", 10, ["Yes.)", "No way"]),
        # two closers end no sentence: the cut falls between words
        ('Odd.") No way', 10, ['Odd.") No', "way"]),
        # a single line break ends a sentence too
        ("a list item\nanother item", 12, ["a list item", "another item"]),
        # a blank line, even of spaces and tabs, separates paragraphs
        ("Para one.\n   \t \nPara two.", 12, ["Para one.", "Para two."]),
    ],
)
def test_sentence_and_paragraph_boundaries(text: str, max_chars: int, pieces: list[str]) -> None:
    assert [s.text for s in chunk_text(text, max_chars)] == pieces


def test_a_word_longer_than_the_bound_is_cut() -> None:
    spans = chunk_text("x" * 25, 10)
    assert [len(s.text) for s in spans] == [10, 10, 5]


def test_whitespace_only_text_has_no_chunks() -> None:
    assert chunk_text(" \n\n\t ") == []
    assert chunk_text("") == []


def test_chunk_text_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError):
        chunk_text("text", 0)
    with pytest.raises(TypeError):
        chunk_text(b"bytes")  # type: ignore[arg-type]


def test_line_numbers_count_crlf_lines() -> None:
    span = chunk_text("one\r\n\r\ntwo\r\nthree", 12)[-1]
    assert span.text == "two\r\nthree"
    assert (span.line_start, span.line_end) == (3, 4)


@pytest.mark.parametrize(
    ("gap", "first"),
    [
        (" " * 300_000, "first"),
        ("\n" + " " * 300_000 + "\n", "first"),
        (". " + " " * 300_000, "first."),
        (" \n" * 150_000, "first"),
    ],
)
def test_long_runs_of_white_space(gap: str, first: str) -> None:
    # A boundary search that backtracked over the run would take minutes here.
    text = f"first{gap}last"
    spans = chunk_text(text, 40)
    assert [(s.text, s.start) for s in spans] == [(first, 0), ("last", len(text) - 4)]
    assert spans[-1].line_start == spans[-1].line_end == gap.count("\n") + 1
