"""citeformer.render: an answer as Markdown and HTML with linked markers and its cited sources."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from citeformer import CitedAnswer, Source, build_request
from citeformer.errors import InputTypeError, InvalidInputError
from citeformer.render import references, to_html, to_markdown
from citeformer.testing import FakeGenerator
from tests.core.html_tags import Collect

SOURCES = [
    Source("The Eiffel Tower is in Paris. It was completed in 1889.", title="Eiffel *Tower*",
           metadata={"source": "https://example.org/eiffel", "page": 2}),
    Source("Honey bees <script>alert(1)</script> dance. Bees make honey.",
           metadata={"path": "docs/bees & wasps.pdf", "page_label": "iv"}),
    Source("Big Ben is a bell in London.", metadata={"file_name": "ben.txt"}),
    Source("Nothing here is about towers at all, and this text is long enough to be cut short "
           "when it labels the source."),
]
QUESTION = "When was the Eiffel Tower completed?"


def answer(text: str) -> CitedAnswer:
    return FakeGenerator(text).answer(build_request(QUESTION, SOURCES))


def test_references_list_cited_sources_with_location_page_and_evidence() -> None:
    refs = references(answer("It was completed in 1889 [1]. Bees dance [2]. Again 1889 [1]."))
    assert [r.number for r in refs] == [1, 2]
    eiffel, bees = refs
    assert (eiffel.title, eiffel.url, eiffel.page) == (
        "Eiffel *Tower*", "https://example.org/eiffel", "3"  # LangChain's 0-based page 2
    )
    assert [s.text for s in eiffel.evidence] == ["It was completed in 1889."]  # once, not twice
    assert (bees.title, bees.location, bees.url, bees.page) == (
        "docs/bees & wasps.pdf", "docs/bees & wasps.pdf", None, "iv"
    )
    every = references(answer("Bees [2]."), cited_only=False)
    assert [r.number for r in every] == [1, 2, 3, 4]
    assert every[2].title == "ben.txt" and every[3].title is None
    assert every[3].snippet.endswith("…") and len(every[3].snippet) <= 80


def test_to_markdown_links_markers_and_lists_the_cited_sources() -> None:
    text = to_markdown(answer("It was completed in 1889 [1]. Bees *dance* [2][4]."))
    assert text.splitlines() == [
        "It was completed in 1889 [[1]](#ref-1). Bees \\*dance\\* [[2]](#ref-2)[[4]](#ref-4).",
        "",
        "**Sources**",
        "",
        '- <a id="ref-1"></a>\\[1\\] [Eiffel \\*Tower\\*](<https://example.org/eiffel>), page 3',
        '  - "It was completed in 1889."',
        '- <a id="ref-2"></a>\\[2\\] docs/bees & wasps.pdf, page iv',
        '  - "Honey bees \\<script\\>alert(1)\\</script\\> dance."',
        # Untitled: the start of its text would repeat the quote below it.
        '- <a id="ref-4"></a>\\[4\\] untitled source',
        '  - "Nothing here is about towers at all, and this text is long enough to be cut short'
        ' when it labels the source." *(weak support)*',
    ]


def test_to_markdown_options() -> None:
    cited = answer("Big Ben rings [3].")
    text = to_markdown(cited, titles=[None, None, "Ben", None], locations=[None] * 4,
                       id_prefix="a2-ref", heading=None)
    assert text.splitlines()[0] == "Big Ben rings [[3]](#a2-ref-3)."
    assert text.splitlines()[2] == '- <a id="a2-ref-3"></a>\\[3\\] Ben, ben.txt'
    assert "**" not in text
    assert to_markdown(answer("No marker here.")) == "No marker here.\n"


@pytest.mark.parametrize(("options", "error", "match"), [
    ({"titles": ["a"]}, InvalidInputError, "1 entries but the answer has 4 sources"),
    ({"titles": "abcd"}, InputTypeError, "one entry per source"),
    ({"id_prefix": 'x" onclick="'}, InvalidInputError, "cannot start an HTML id"),
    ({"id_prefix": "2ref"}, InvalidInputError, "cannot start an HTML id"),
])
def test_bad_options_are_refused(options: dict, error: type[Exception], match: str) -> None:
    for render in (to_markdown, to_html):
        with pytest.raises(error, match=match):
            render(answer("Bees [2]."), **options)


def test_a_non_answer_is_refused() -> None:
    with pytest.raises(InputTypeError, match="expected a CitedAnswer .*got str"):
        to_html("Bees [2].")  # type: ignore[arg-type]


def test_to_html_escapes_everything_and_is_well_formed() -> None:
    hostile = list(SOURCES)
    hostile[2] = Source("Big Ben </q></li> rings.", title='<img src=x onerror="alert(1)">',
                        metadata={"url": "javascript:alert(1)"})
    cited = FakeGenerator("Bees <script>x()</script> & dance [2]. Ben rings [3].").answer(
        build_request(QUESTION, hostile)
    )
    page = to_html(cited, id_prefix="r7")
    root = ET.fromstring(f"<root>{page}</root>")  # well-formed: every tag closed, entities known
    assert "<script" not in page and "<img" not in page
    markers = [a for a in root.iter("a") if a.get("class") == "citeformer-marker"]
    assert [(a.text, a.get("href")) for a in markers] == [("[2]", "#r7-2"), ("[3]", "#r7-3")]
    items = {li.get("id"): li for li in root.iter("li") if li.get("id")}
    assert list(items) == ["r7-2", "r7-3"] and items["r7-3"].get("value") == "3"
    assert "".join(items["r7-3"].itertext()).startswith('<img src=x onerror="alert(1)">')
    assert all(a.get("href", "").startswith(("#", "http")) for a in root.iter("a"))
    parser = Collect()
    parser.feed(page)
    assert "script" not in parser.tags and "img" not in parser.tags
    assert any("<script>x()</script> & dance" in d for d in parser.data)
    assert "Honey bees <script>alert(1)</script> dance." in "".join(parser.data)


def test_to_html_marks_weak_support_and_links_urls() -> None:
    root = ET.fromstring(to_html(answer("It was completed in 1889 [1]. It opened in Paris [4].")))
    items = [li for li in root.iter("li") if li.get("id")]
    link = items[0].find("a")
    assert link is not None and link.get("href") == "https://example.org/eiffel"
    assert [q.text for q in items[0].iter("q")] == ["It was completed in 1889."]
    assert items[0].find(".//em") is None
    weak = items[1].find(".//em")
    assert weak is not None and weak.text == "(weak support)"


def test_jupyter_shows_an_answer_rendered() -> None:
    cited = answer("Bees dance [2].")
    first, second = cited._repr_html_(), cited._repr_html_()
    assert 'href="#' in first and "docs/bees &amp; wasps.pdf" in first
    ids = [li.get("id") for li in ET.fromstring(first).iter("li") if li.get("id")]
    assert ids and ids != [li.get("id") for li in ET.fromstring(second).iter("li") if li.get("id")]
    assert "\\[2\\] docs/bees & wasps.pdf, page iv" in cited._repr_markdown_()


def test_an_answer_cut_by_the_budget_says_so_where_it_ends() -> None:
    cut = FakeGenerator("Bees dance [2]. The tower was completed in 1889 [1].", cut=5).answer(
        build_request(QUESTION, SOURCES)
    )
    assert cut.finish_reason == "length"
    first_line = to_markdown(cut).split("\n")[0]
    assert first_line.endswith(" *(cut at max_new_tokens)*")
    html = to_html(cut)
    ET.fromstring(html)  # still well-formed
    assert '<em class="citeformer-cut">(cut at max_new_tokens)</em></p>' in html
    whole = answer("Bees dance [2].")
    assert "cut at" not in to_markdown(whole) and "cut at" not in to_html(whole)
