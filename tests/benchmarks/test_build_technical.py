"""The builder of ``technical.jsonl``: how it cuts passages, what it refuses, that it reproduces
the committed file."""

from __future__ import annotations

import sys

import build_technical as builder
import pytest

from citeformer.errors import InvalidInputError

TOPIC = """\
The "demo" statement
********************

The "demo" statement is used to show how passages are cut from a
topic. Its lines are wrapped by the text writer, and a word can be non-
virtual across a line break.  Runs of  spaces become one.

   demo_stmt ::= "demo" expression

A second paragraph follows the grammar block. It ends here.

   for x in y:
       print(x)

"else" clause
=============

The "else" clause of the demo runs last, e.g. after the others. Done.
"""
TOPICS = {"demo": TOPIC}


def test_paragraphs_join_lines_and_carry_their_heading() -> None:
    paragraphs = builder.paragraphs(TOPIC)
    assert [p.kind for p in paragraphs] == ["heading", "text", "text", "text", "text",
                                            "heading", "text"]
    assert paragraphs[1].text.endswith("can be non-virtual across a line break. Runs of spaces "
                                       "become one.")
    assert paragraphs[1].title == "The demo statement"
    assert paragraphs[-1].title == "The demo statement: else clause"


def test_cut_text_joins_spans_around_code() -> None:
    passage = builder.cut("demo", ('The "demo" statement is used', "become one."),
                          ("A second paragraph", "It ends here."))
    text, title = builder.cut_text("demo-1", passage, TOPICS)
    assert text.split("\n") == [
        'The "demo" statement is used to show how passages are cut from a topic. Its lines are '
        "wrapped by the text writer, and a word can be non-virtual across a line break. Runs of "
        "spaces become one.",
        "A second paragraph follows the grammar block. It ends here.",
    ]
    assert title == "The demo statement"


def test_cut_text_takes_a_title_override() -> None:
    passage = builder.cut("demo", ("A second paragraph", "It ends here."), title="Demo: second")
    assert builder.cut_text("demo-2", passage, TOPICS)[1] == "Demo: second"


@pytest.mark.parametrize(("spans", "message"), [
    ((("is used to show", "become one."),), "starts mid-sentence"),
    ((("A second paragraph", "follows the grammar"),), "ends mid-sentence"),
    ((('The "demo" statement is used', "It ends here."),), "crosses a text or code paragraph"),
    ((("A second paragraph", "Done."),), "crosses a"),
    ((("No such words", "It ends here."),), "not found in topic 'demo'"),
])
def test_cut_text_refuses_a_bad_span(spans: tuple[tuple[str, str], ...], message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        builder.cut_text("bad", builder.Cut("demo", spans), TOPICS)


def test_cut_text_refuses_an_unknown_topic() -> None:
    with pytest.raises(InvalidInputError, match="no topic 'nope'"):
        builder.cut_text("bad", builder.cut("nope", ("a", "b")), TOPICS)


@pytest.mark.parametrize(("text", "message"), [
    ("Too short.", "has 10 characters"),
    ("x" * 701, "has 701 characters"),
    ("A long enough text that cites a footnote [1]. " * 6, "square bracket"),
    ("Words that never occur in the topic at all. " * 7, "not verbatim"),
])
def test_check_passage_refuses(text: str, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        builder.check_passage("bad", text, TOPIC)


TEXTS = {name: (f"Passage {name} says {name} and nothing more.", name)
         for name in ("a", "b", "c", "d")}


@pytest.mark.parametrize(("question", "message"), [
    (builder.q("t02", "Q?", "a", ["a"], ["b", "c"]), "is number 1"),
    (builder.q("t01", "Q?", "a", ["a"], ["b"]), "give 3 to 6 distinct"),
    (builder.q("t01", "Q?", "a", ["a"], ["b", "b"]), "give 3 to 6 distinct"),
    (builder.q("t01", "Q?", "a", ["a", "b", "c"], ["d"]), "give 1 or 2"),
    (builder.q("t01", "Q?", "zebra", ["a"], ["b", "c"]), "is in no gold passage"),
    (builder.q("t01", "Q?", "passage", ["a"], ["b", "c"]), "also in the distractors"),
    (builder.q("t01", "Q?", "a", ["a"], ["b", "x"]), "unknown passages"),
    (builder.q("t01", "Is it a?", "a", ["a"], ["b", "c"]), "the question itself holds"),
])
def test_check_question_refuses(question: builder.Question, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        builder.check_question(question, 1, TEXTS)


def test_check_question_accepts_a_good_one() -> None:
    builder.check_question(builder.q("t01", "Q?", "a", ["a"], ["b", "c"]), 1, TEXTS)


@pytest.mark.skipif(sys.version_info[:2] != (3, 11),
                    reason="the set was cut from the Python 3.11 reference manual")
def test_the_committed_file_is_what_the_table_builds() -> None:
    from pydoc_data.topics import topics

    rows = builder.build(topics)
    assert builder.render(rows) == builder.OUTPUT.read_text(encoding="utf-8")
    assert [row["id"] for row in rows] == [q.id for q in builder.QUESTIONS]
