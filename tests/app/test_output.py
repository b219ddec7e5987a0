"""Unit tests for citeformer.app.output: the reference list and the ``--json`` object."""

from __future__ import annotations

import json

import pytest

from citeformer import build_request
from citeformer.app.documents import Document, Passage, chunk_documents
from citeformer.app.output import answer_json, format_references, shorten
from citeformer.app.retrieval import Hit
from citeformer.render import to_markdown
from citeformer.testing import FakeGenerator

FILE = "# Paris\n\nParis is the capital\nof France.\n\nBerlin is in Germany.\n"
PARIS, BERLIN = chunk_documents([Document("docs/paris.md", FILE)], max_chars=35)[1:]
HITS = [
    Hit(PARIS, 0.91234),
    Hit(BERLIN, 0.5),
    Hit(Passage("docs/other.txt", "Nothing here.", 0, 13, 1, 1), -0.25),
]


def answer(text: str, policy: str = "required", hits: list[Hit] = HITS):
    sources = [hit.passage.to_source(score=round(hit.score, 4)) for hit in hits]
    request = build_request("Capital?", sources, policy, max_new_tokens=64)
    return FakeGenerator(text).answer(request)


def as_json(cited, hits: list[Hit], question: str, policy: str) -> dict:
    """``answer_json`` of ``cited``, answered to ``question`` over ``hits``."""
    sources = [hit.passage.to_source(score=round(hit.score, 4)) for hit in hits]
    return answer_json(cited, hits, build_request(question, sources, policy), policy)


def test_the_passages_are_the_files_text() -> None:
    for hit in HITS[:2]:
        assert FILE[hit.passage.start:hit.passage.end] == hit.passage.text
    assert (PARIS.line_start, PARIS.line_end, BERLIN.line_start) == (3, 4, 6)


def test_references_list_the_cited_sources_with_their_supporting_sentences() -> None:
    text = format_references(answer("Berlin is in Germany [2]. Paris is the capital [1]."), HITS)
    assert text == (
        "\nReferences:\n"
        "[1] docs/paris.md, lines 3-4\n"
        '    line 3: "Paris is the capital of France."\n'
        "[2] docs/paris.md, line 6\n"
        '    line 6: "Berlin is in Germany."\n'
    )


def test_each_distinct_sentence_is_listed_once_with_its_best_support() -> None:
    text = "The capital is old and famous.\nIt lies in France on the Seine.\n\nIt has bridges."
    passage = chunk_documents([Document("p.md", text)], max_chars=200)[0]
    hits = [Hit(passage, 1.0)]
    # "Seine" is the second sentence; "bridges" the paragraph after; "Spain" nothing (weak).
    cited = answer("It is on the Seine [1]. It has many bridges [1]. It lies on the Seine [1]. "
                   "Spain [1].", hits=hits)
    lines = format_references(cited, hits).splitlines()
    assert lines[2] == "[1] p.md, lines 1-4"
    assert lines[3:] == [
        '    line 2: "It lies in France on the Seine."',
        '    line 4: "It has bridges."',
        '    line 1: "The capital is old and famous." (weak support)',
    ]
    assert [c.evidence.weak for c in cited.citations] == [False, False, False, True]


def test_uncited_passages_have_no_evidence_lines() -> None:
    text = format_references(answer("Berlin is in Germany [2]."), HITS, all_sources=True)
    assert text.splitlines()[2:] == [
        "[1] docs/paris.md, lines 3-4 (not cited)",
        "[2] docs/paris.md, line 6",
        '    line 6: "Berlin is in Germany."',
        "[3] docs/other.txt, line 1 (not cited)",
    ]


def test_every_reference_line_keeps_its_format() -> None:
    # Readers that parse "[n] path, line(s) ..." lines find them unchanged; evidence is indented.
    text = format_references(answer("Berlin [2]. Paris [1]. Nothing [3]."), HITS)
    refs = [line for line in text.splitlines() if line.startswith("[")]
    assert refs == ["[1] docs/paris.md, lines 3-4", "[2] docs/paris.md, line 6",
                    "[3] docs/other.txt, line 1"]
    others = [line for line in text.splitlines()[2:] if not line.startswith("[")]
    assert others and all(line.startswith("    ") for line in others)


def test_no_citation_points_at_all_sources() -> None:
    text = format_references(answer("I do not know.", "auto"), HITS)
    assert text.splitlines()[2] == "(none cited; 3 passage(s) were retrieved, see --all-sources)"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Short one.", "Short one."),
        ("Wrapped\n  over   lines.", "Wrapped over lines."),
        ("word " * 40, ("word " * 32).strip() + "\u2026"),
        ("x" * 200, "x" * 159 + "\u2026"),
        ("a, " * 60, ", ".join(["a"] * 53) + "\u2026"),
    ],
)
def test_shorten(text: str, expected: str) -> None:
    assert shorten(text) == expected
    assert len(shorten(text)) <= 160


def test_quotes_are_located_in_their_file() -> None:
    quoted = answer('It is "the capital of France" [1].', "quotes_only")
    (quote,) = quoted.quotes
    where = PARIS.locate(quote.source_start, quote.source_end)
    assert FILE[where.file_start:where.file_end] == "the capital\nof France"
    assert (where.path, where.line, where.page) == ("docs/paris.md", 3, None)
    assert format_references(quoted, HITS).splitlines()[-2:] == [
        "Quotes (verbatim):", '"the capital of France" [1] docs/paris.md, line 3',
    ]


def test_json_is_the_answers_dict_with_file_locations() -> None:
    cited = answer('It is "the capital of France" [1].', "quotes_only")
    data = as_json(cited, HITS, "Capital?", "quotes_only")
    json.dumps(data)  # serialisable as it is
    plain = cited.to_dict()
    assert (data["question"], data["policy"]) == ("Capital?", "quotes_only")
    assert data["refusal"] == {
        "measure": "lexical", "support": 1.0, "threshold": 0.5, "offer_below": None,
        "band": "answer",
        "reason": "support 1.00 >= threshold 0.5 (lexical: the best passage, or pair of "
                  "passages, holds 1 of the question's 1 word)",
    }
    for key in ("text", "finish_reason", "prompt_tokens", "generated_tokens"):
        assert data[key] == plain[key]
    assert data["sources"][0] == {
        "id": 1, "title": "paris.md", "text": PARIS.text, "path": "docs/paris.md",
        "start": 9, "end": 40, "line_start": 3, "line_end": 4, "page": None, "page_end": None,
        "score": 0.9123,
        "cited": True,
    }
    assert [s["cited"] for s in data["sources"]] == [True, False, False]
    assert all("metadata" not in s for s in data["sources"])
    (quote,) = data["quotes"]
    assert {k: quote[k] for k in plain["quotes"][0]} == plain["quotes"][0]
    assert FILE[quote["file_start"]:quote["file_end"]] == "the capital\nof France"
    assert (quote["path"], quote["line"], quote["page"]) == ("docs/paris.md", 3, None)


def test_json_citations_carry_their_evidence_in_the_passage_and_the_file() -> None:
    cited = answer("Berlin is in Germany [2]. Paris is the capital [1].")
    data = as_json(cited, HITS, "Capital?", "required")
    plain = cited.to_dict()["citations"]
    first, second = data["citations"]
    assert {k: first[k] for k in ("source_id", "start", "end")} == {
        "source_id": 2, "start": 21, "end": 24,
    }
    evidence = second["evidence"]
    assert {k: evidence[k] for k in plain[1]["evidence"]} == plain[1]["evidence"]
    assert evidence == {
        "source_start": 0, "source_end": 31, "text": "Paris is the capital\nof France.",
        "score": 1.0, "weak": False, "path": "docs/paris.md", "file_start": 9, "file_end": 40,
        "line": 3, "page": None,
    }
    assert PARIS.text[evidence["source_start"]:evidence["source_end"]] == evidence["text"]
    assert FILE[evidence["file_start"]:evidence["file_end"]] == evidence["text"]
    assert FILE[first["evidence"]["file_start"]:first["evidence"]["file_end"]] == (
        "Berlin is in Germany."
    )


def test_a_citation_without_evidence_stays_null() -> None:
    # A claim with no content word, for a question with none either: nothing to locate.
    sources = [hit.passage.to_source() for hit in HITS]
    request = build_request("Is it?", sources, "required", max_new_tokens=64)
    cited = FakeGenerator("It is [1].").answer(request)
    assert cited.citations[0].evidence is None
    data = as_json(cited, HITS, "Is it?", "required")
    assert data["citations"][0]["evidence"] is None
    assert format_references(cited, HITS).splitlines()[2:] == ["[1] docs/paris.md, lines 3-4"]


def test_pdf_passages_are_located_by_page() -> None:
    text = "Page one.\n\nPage two, line one.\nThe tower is tall."
    pdf = Document("r.pdf", text, page_starts=(0, 11))
    passages = chunk_documents([pdf], max_chars=30)
    assert [(p.text, p.page) for p in passages] == [
        ("Page one.", 1), ("Page two, line one.", 2), ("The tower is tall.", 2),
    ]
    hits = [Hit(p, 1.0) for p in passages]
    cited = answer("The tower is tall [3].", hits=hits)
    assert format_references(cited, hits).splitlines()[2:] == [
        "[3] r.pdf, page 2", '    page 2, line 2: "The tower is tall."',
    ]
    evidence = as_json(cited, hits, "q", "required")["citations"][0]["evidence"]
    assert (evidence["page"], evidence["line"]) == (2, 2)
    assert text[evidence["file_start"]:evidence["file_end"]] == "The tower is tall."


def test_a_weak_claim_on_a_sentence_a_strong_one_also_cites_keeps_its_flag() -> None:
    # Both claims locate the one sentence; the reference list once kept only the first span, so
    # "Bees sing at night [1]." rendered as supported.
    text = "Bees perform a waggle dance to show where flowers are."
    passage = Passage("bees.md", text, 0, len(text), 1, 1)
    hits = [Hit(passage, 1.0)]
    cited = answer("Bees perform a waggle dance [1]. Bees sing at night [1].", hits=hits)
    assert [c.evidence.weak for c in cited.citations] == [False, True]
    lines = format_references(cited, hits).splitlines()
    assert lines[3:] == [
        '    line 1: "Bees perform a waggle dance to show where flowers are."',
        '    line 1: "Bees perform a waggle dance to show where flowers are." (weak support)',
    ]
    markdown = to_markdown(cited)
    assert markdown.count("waggle dance to show") == 2 and "*(weak support)*" in markdown
