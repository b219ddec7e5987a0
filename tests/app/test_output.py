"""Unit tests for citeformer.app.output: the reference list and the ``--json`` object."""

from __future__ import annotations

import json

from citeformer import build_request
from citeformer.app.documents import Passage
from citeformer.app.output import answer_json, format_references, quote_location
from citeformer.app.retrieval import Hit
from citeformer.testing import FakeGenerator

FILE = "# Paris\n\nParis is the capital\nof France.\n\nBerlin is in Germany.\n"
HITS = [
    Hit(Passage("docs/paris.md", "Paris is the capital\nof France.", 9, 40, 3, 4), 0.91234),
    Hit(Passage("docs/paris.md", "Berlin is in Germany.", 42, 63, 6, 6), 0.5),
    Hit(Passage("docs/other.txt", "Nothing here.", 0, 13, 1, 1), -0.25),
]


def answer(text: str, policy: str = "required"):
    sources = [hit.passage.to_source(score=round(hit.score, 4)) for hit in HITS]
    request = build_request("Capital?", sources, policy, max_new_tokens=64)
    return FakeGenerator(text).answer(request)


def test_the_passages_are_the_files_text() -> None:
    for hit in HITS[:2]:
        assert FILE[hit.passage.start:hit.passage.end] == hit.passage.text


def test_references_list_the_cited_sources_in_ascending_order() -> None:
    text = format_references(answer("Berlin [2]. Paris [1]. Again [2]."), HITS)
    assert text == (
        "\nReferences:\n"
        "[1] docs/paris.md, lines 3-4\n"
        "[2] docs/paris.md, line 6\n"
    )


def test_all_sources_marks_the_uncited_ones() -> None:
    text = format_references(answer("Berlin [2]."), HITS, all_sources=True)
    assert text.splitlines()[2:] == [
        "[1] docs/paris.md, lines 3-4 (not cited)",
        "[2] docs/paris.md, line 6",
        "[3] docs/other.txt, line 1 (not cited)",
    ]


def test_no_citation_points_at_all_sources() -> None:
    text = format_references(answer("I do not know.", "auto"), HITS)
    assert text.splitlines()[2] == "(none cited; 3 passage(s) were retrieved, see --all-sources)"


def test_quotes_are_located_in_their_file() -> None:
    quoted = answer('It is "the capital of France" [1].', "quotes_only")
    (quote,) = quoted.quotes
    where = quote_location(quote, HITS[0].passage)
    assert FILE[where["file_start"]:where["file_end"]] == "the capital\nof France"
    assert (where["path"], where["line"]) == ("docs/paris.md", 3)
    assert format_references(quoted, HITS).splitlines()[-2:] == [
        "Quotes (verbatim):", '"the capital of France" [1] docs/paris.md, line 3',
    ]


def test_json_is_the_answers_dict_with_file_locations() -> None:
    cited = answer('It is "the capital of France" [1].', "quotes_only")
    data = answer_json(cited, HITS, "Capital?", "quotes_only")
    json.dumps(data)  # serialisable as it is
    plain = cited.to_dict()
    assert (data["question"], data["policy"]) == ("Capital?", "quotes_only")
    for key in ("text", "citations", "finish_reason", "prompt_tokens", "generated_tokens"):
        assert data[key] == plain[key]
    assert data["sources"][0] == {
        "id": 1, "title": "paris.md", "text": HITS[0].passage.text, "path": "docs/paris.md",
        "start": 9, "end": 40, "line_start": 3, "line_end": 4, "score": 0.9123, "cited": True,
    }
    assert [s["cited"] for s in data["sources"]] == [True, False, False]
    assert all("metadata" not in s for s in data["sources"])
    (quote,) = data["quotes"]
    assert {k: quote[k] for k in plain["quotes"][0]} == plain["quotes"][0]
    assert FILE[quote["file_start"]:quote["file_end"]] == "the capital\nof France"
    assert (quote["path"], quote["line"]) == ("docs/paris.md", 3)
