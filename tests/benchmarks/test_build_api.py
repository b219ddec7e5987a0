"""The builder of ``api.jsonl``: how it cuts docstrings, what it refuses, that it reproduces the
committed file; and the committed file's rules."""

from __future__ import annotations

import os.path
import queue
import sys

import build_api as builder
import pytest
from citebench.data import Item, load_dataset

from citeformer.errors import InvalidInputError
from tests.benchmarks.built_rules import check_built_item

DOC = """\
Frobnicate the items of a sequence.

The items are frobnicated in place, one by one,
from left to right.  Runs of  spaces become one.

    >>> frob([1, 2])
    [2, 3]

An empty sequence is left as it is. It ends here.
"""
DOCS = {"demo.frob": DOC}


def test_resolve_finds_functions_of_submodules_and_methods() -> None:
    assert builder.resolve("os.path.join") is os.path.join
    assert builder.resolve("queue.Queue.get") is queue.Queue.get


@pytest.mark.parametrize("name", ["textwrap.no_such_function", "no_such_module.f"])
def test_resolve_refuses_an_unknown_name(name: str) -> None:
    with pytest.raises(InvalidInputError, match="names no importable object"):
        builder.resolve(name)


def test_cut_text_skips_the_doctest_and_titles_by_the_qualified_name() -> None:
    passage = builder.cut("demo.frob", ("Frobnicate the items", "spaces become one."),
                          ("An empty sequence", "It ends here."))
    text, title = builder.cut_text("frob", passage, DOCS)
    assert text.split("\n") == [
        "Frobnicate the items of a sequence.",
        "The items are frobnicated in place, one by one, from left to right. Runs of spaces "
        "become one.",
        "An empty sequence is left as it is. It ends here.",
    ]
    assert title == "demo.frob"


@pytest.mark.parametrize(("spans", "message"), [
    ((("No such words", "It ends here."),), "'No such words' not found in topic 'demo.frob'"),
    ((("The items are", "It ends here."),), "crosses a text or code paragraph '>>> frob"),
    ((("from left to right.", "become one."),), "starts mid-sentence"),
])
def test_cut_text_refuses_a_bad_span(spans: tuple[tuple[str, str], ...], message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        builder.cut_text("bad", builder.cut("demo.frob", *spans), DOCS)


def test_check_passage_refuses_square_brackets() -> None:
    text = "A passage that shows a list such as [1, 2] in its text. " * 6
    with pytest.raises(InvalidInputError, match="passage 'bad' holds a square bracket"):
        builder.check_passage("bad", text, text)


def test_build_refuses_missing_docstrings() -> None:
    with pytest.raises(InvalidInputError, match="no docstring given for"):
        builder.build(DOCS)


TEXTS = {name: (f"Passage {name} says {name} and nothing more.", f"demo.{name}")
         for name in ("a", "b", "c", "d")}


@pytest.mark.parametrize(("question", "message"), [
    (builder.q("a01", "Q?", "passage", ["a"], ["b", "c"]),
     r"question a01: the answer 'passage' is also in the distractors \['b', 'c'\]"),
    (builder.q("t01", "Q?", "a", ["a"], ["b", "c"]), "number the questions a01, a02"),
    (builder.q("a01", "Q?", "a", ["a"], ["b"]), "question a01 has passages"),
    (builder.q("a01", "Is it a?", "a", ["a"], ["b", "c"]), "question a01: the question itself"),
])
def test_check_question_refuses(question: builder.Question, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        builder.check_question(question, 1, TEXTS)


def test_check_question_accepts_a_good_one() -> None:
    builder.check_question(builder.q("a01", "Q?", "a", ["a"], ["b", "c"]), 1, TEXTS)


@pytest.mark.skipif(sys.version_info[:2] != (3, 11),
                    reason="the set was cut from the docstrings of Python 3.11")
def test_the_committed_file_is_what_the_table_builds() -> None:
    docs = builder.docstrings({passage.topic for passage in builder.P.values()})
    rows = builder.build(docs)
    assert builder.render(rows) == builder.OUTPUT.read_text(encoding="utf-8")
    assert [row["id"] for row in rows] == [q.id for q in builder.QUESTIONS]


API = load_dataset("api")


def test_api_set_size_ids_and_split() -> None:
    assert len(API) >= 48
    assert [item.id for item in API] == [f"a{k:02d}" for k in range(1, len(API) + 1)]
    assert len({item.question for item in API}) == len(API)
    dev = [item.id for item in API if item.split == "dev"]
    assert dev == [f"a{k:02d}" for k in range(1, len(API) + 1, 3)]


@pytest.mark.parametrize("item", API, ids=lambda item: item.id)
def test_api_question_follows_the_rules(item: Item) -> None:
    check_built_item(item)
    assert not any(">>>" in passage.text for passage in item.passages)


def test_api_gold_passage_is_not_always_first() -> None:
    first = sum("p1" in item.gold_passages for item in API)
    assert 0 < first < len(API) / 2
