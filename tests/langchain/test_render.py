"""render_markdown: the answer, then its documents as a numbered reference list; offline."""

from __future__ import annotations

import pytest
from langchain_core.documents import Document

from citeformer import CitedAnswer, parse_citations
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
