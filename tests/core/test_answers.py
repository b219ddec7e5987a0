"""Answer assembly: the re-check of a finished text, and what a stream may show."""

from __future__ import annotations

import pytest

from citeformer import GrammarViolationError, build_request
from citeformer.answers import (
    ChunkTracker,
    bad_markers,
    cited_answer,
    safe_prefix,
    trim_open_marker,
    unshown_text,
)

SOURCES = ["The tower was completed in 1889.", "Berlin is in Germany."]


def answer(text: str, finish: str = "stop", policy: str = "required", **options: object):  # type: ignore[no-untyped-def]
    request = build_request("When?", SOURCES, policy, **options)  # type: ignore[arg-type]
    return cited_answer(request, text, finish, prompt_tokens=5, generated_tokens=9)  # type: ignore[arg-type]


def test_a_finished_answer_is_parsed() -> None:
    result = answer("It was completed in 1889 [1].")
    assert [(c.source_id, c.start, c.end) for c in result.citations] == [(1, 25, 28)]
    assert (result.finish_reason, result.prompt_tokens, result.generated_tokens) == ("stop", 5, 9)


def test_an_answer_prints_as_its_text() -> None:
    result = answer("It was completed in 1889 [1].")
    assert str(result) == f"{result}" == "It was completed in 1889 [1]."
    assert repr(result).startswith("CitedAnswer(text=")  # every field, for debugging


@pytest.mark.parametrize(
    "text",
    [
        "Paris [7].",
        "Paris [0].",
        "Paris [1, 2].",
        "Paris [[1] is ] the capital [1].",
        "See [this bracket span is longer than 24 chars] too [2].",
        "Paris is [\n2] the capital [1].",
        "Paris is ] here [1].",
        "Paris [1",
    ],
)
def test_a_constrained_answer_with_any_bad_bracket_raises(text: str) -> None:
    with pytest.raises(GrammarViolationError, match="names no source in 1..2"):
        answer(text)


def test_unconstrained_answers_are_not_rechecked() -> None:
    result = answer("Paris [7] and [1].", constrained=False)
    assert [c.source_id for c in result.citations] == [1]


def test_a_budget_cut_drops_the_open_marker_and_its_space() -> None:
    result = answer("It was completed in 1889 [1", finish="length")
    assert result.text == "It was completed in 1889"
    assert result.citations == ()


def test_a_budget_cut_drops_an_open_quote() -> None:
    result = answer('It was "completed in', finish="length", policy="quotes_only")
    assert result.text == "It was"


def test_quotes_are_located() -> None:
    result = answer('It was "completed in 1889" [1].', policy="quotes_only")
    (quote,) = result.quotes
    assert SOURCES[0][quote.source_start:quote.source_end] == "completed in 1889"


def test_a_quote_the_source_does_not_hold_raises() -> None:
    with pytest.raises(GrammarViolationError, match="does not occur in source 2"):
        answer('It was "completed in 1889" [2].', policy="quotes_only")


def test_bad_markers_waits_for_an_open_marker_until_the_end() -> None:
    assert bad_markers("Paris [1", 2, finished=False) == []
    assert bad_markers("Paris [1", 2, finished=True) == ["[1"]
    assert bad_markers("Paris [[1", 2, finished=False) == ["[[1"]
    assert bad_markers("a ] b [7] c [x]", 2, finished=False) == ["] b [7] c [x", "[7]", "[x]"]


def test_stream_prefix_hides_open_markers_quotes_and_trailing_space() -> None:
    assert trim_open_marker("France [1") == "France"
    assert safe_prefix("Paris is \ufffd") == "Paris is"
    assert safe_prefix('He said "the tow', quotes=True) == "He said"
    assert safe_prefix('He said "the tow', quotes=False) == 'He said "the tow'


def test_chunks_join_to_the_answer() -> None:
    tracker = ChunkTracker(quotes=False)
    chunks = [tracker.update(text) for text in ("It ", "It was", "It was [", "It was [1].")]
    assert chunks == ["It", " was", None, " [1]."]
    final = answer("It was [1].")
    assert tracker.rest(final) == ""
    assert unshown_text("It was [1].", "It was") == " [1]."
    assert unshown_text("Other", "It was") == ""


@pytest.mark.parametrize(("text", "policy", "uncited"), [
    ("It was completed in 1889", "required", True),  # the budget ran out before the marker
    ("It was completed in 1889 [1]. Berlin is", "required", True),
    ("It was completed in 1889 [1].", "required", False),
    ("It was completed in 1889", "auto", False),  # nothing asked for a marker
])
def test_a_cut_answer_is_logged_with_whether_its_last_claim_went_uncited(
    text: str, policy: str, uncited: bool, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level("WARNING", logger="citeformer"):
        result = answer(text, "length", policy, max_new_tokens=9)
    assert result.finish_reason == "length"
    (record,) = caplog.records
    message = record.getMessage()
    assert "cut at max_new_tokens=9" in message
    assert ("before its last claim was cited" in message) == uncited


def test_a_whole_answer_logs_nothing(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("WARNING", logger="citeformer"):
        answer("It was completed in 1889 [1].")
    assert caplog.records == []
