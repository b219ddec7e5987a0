"""render_markdown: the answer, then its documents as a numbered reference list; offline."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest
from langchain_core.documents import Document

from citeformer import CitedAnswer, build_request, parse_citations
from citeformer.errors import InvalidInputError
from citeformer.testing import FakeGenerator
from citeformer_langchain import CitationAnswer, render_markdown
from citeformer_langchain.inputs import to_sources

DOCS = [
    Document(page_content="The Eiffel Tower is in Paris.",
             metadata={"title": "Eiffel *Tower*", "source": "https://example.org/eiffel"}),
    Document(page_content="Big Ben is in London.", metadata={"source": "notes/big_ben.md"}),
    Document(page_content="The Colosseum   is in\nRome, and it is very old indeed, older than "
                          "both of the others by far, by about eighteen centuries.", id="c1"),
]


def cited(text: str, documents: list[Document]) -> CitedAnswer:
    sources = tuple(to_sources(documents))
    return CitedAnswer(text, tuple(parse_citations(text, len(sources))), sources, "stop", 50, 9)


def test_render_markdown() -> None:
    answer = CitationAnswer.from_cited_answer(cited("It is in Rome [3].", DOCS), DOCS)
    assert render_markdown(answer) == (
        "It is in Rome [3].\n"
        "\n"
        "**Sources**\n"
        "\n"
        "1. [Eiffel \\*Tower\\*](<https://example.org/eiffel>)\n"
        "2. notes/big\\_ben.md\n"
        '3. "The Colosseum is in Rome, and it is very old indeed, older than both of the…"\n'
    )
    plain = render_markdown(answer, heading=None)
    assert "**" not in plain
    assert plain.splitlines()[2].startswith("1. [Eiffel")
    with pytest.raises(TypeError, match="takes a CitationAnswer"):
        render_markdown(cited("It is in Rome [3].", DOCS))  # type: ignore[arg-type]


def test_render_markdown_titles_follow_the_title_rule() -> None:
    docs = [Document(page_content="A.", metadata={"file_name": "a.txt", "source": "x/a.txt"}),
            Document(page_content="B.", metadata={"title": " ", "source": "x/b.txt"})]
    answer = CitationAnswer.from_cited_answer(cited("A [1].", docs), docs)
    assert render_markdown(answer, heading=None).splitlines()[2:] == ["1. a.txt", "2. x/b.txt"]


PDF_PAGES = [
    Document(page_content="Intro text. The Eiffel Tower was completed in 1889.",
             metadata={"source": "reports/eiffel.pdf", "page": 4}),
    Document(page_content="Bees dance to show where flowers are.",
             metadata={"source": "bees.pdf", "page": 0, "page_label": "vii"}),
]


def test_render_markdown_shows_pages_and_supporting_sentences() -> None:
    fake = FakeGenerator("It was completed in 1889 [1]. Paris is large [2].")
    core = fake.answer(build_request("When?", to_sources(PDF_PAGES)))
    answer = CitationAnswer.from_cited_answer(core, PDF_PAGES)
    assert render_markdown(answer, heading=None).splitlines()[2:] == [
        "1. reports/eiffel.pdf, page 5",  # LangChain's PDF loaders count pages from 0
        '   - "The Eiffel Tower was completed in 1889."',
        "2. bees.pdf, page vii",  # the printed label wins over the index
        '   - "Bees dance to show where flowers are." *(weak support)*',
    ]


def test_jupyter_shows_a_citation_answer_rendered() -> None:
    fake = FakeGenerator("It was completed in 1889 [1].")
    answer = CitationAnswer.from_cited_answer(
        fake.answer(build_request("When?", to_sources(PDF_PAGES))), PDF_PAGES
    )
    root = ET.fromstring(answer._repr_html_())
    (item,) = [li for li in root.iter("li") if li.get("id")]
    assert item.get("value") == "1"
    assert "".join(item.itertext()).startswith("reports/eiffel.pdf, page 5")
    marker = next(a for a in root.iter("a") if a.get("class") == "citeformer-marker")
    assert marker.get("href") == f"#{item.get('id')}"
    markdown = answer._repr_markdown_()
    assert "\\[1\\] reports/eiffel.pdf, page 5" in markdown and "bees.pdf" not in markdown


def test_render_markdown_formats_entries_in_a_citation_style() -> None:
    docs = [
        Document(page_content="Bees dance to show where flowers are.",
                 metadata={"title": "Bees and wasps", "author": "Doe, Jane and Roe, Ann",
                           "date": "2021-05-03", "source": "https://example.org/bees", "page": 2}),
        *DOCS[1:],
    ]
    answer = CitationAnswer.from_cited_answer(cited("Bees dance [1].", docs), docs)
    assert render_markdown(answer, heading=None, style="harvard-cite-them-right").splitlines() == [
        "Bees dance [1].",
        "",
        "1. Doe, J. and Roe, A. (2021) *Bees and wasps*. Available at:"
        " <https://example.org/bees>, page 3",
        # Documents without bibliographic metadata keep their plain labels.
        "2. notes/big\\_ben.md",
        '3. "The Colosseum is in Rome, and it is very old indeed, older than both of the…"',
    ]
    assert render_markdown(answer, style=None) == render_markdown(answer)
    with pytest.raises(InvalidInputError, match="style='apa' is not a CSL style"):
        render_markdown(answer, style="apa")


def test_render_markdown_shows_the_titles_the_model_saw() -> None:
    from citeformer_langchain import CitationRunnable

    docs = [Document(page_content="Paris is in France.",
                     metadata={"title": "France", "heading": "Capitals"})]
    fake = FakeGenerator("Paris is in France [1].")
    answer = CitationRunnable(generator=fake, title_keys=("heading",)).invoke(
        {"question": "Where is Paris?", "context": docs}
    )
    assert [s.title for s in fake.requests[-1].sources] == ["Capitals"]
    assert render_markdown(answer, heading=None).splitlines()[2] == "1. Capitals"
    assert "\\[1\\] Capitals\n" in answer._repr_markdown_()
    assert 'value="1">Capitals<ul>' in answer._repr_html_()
