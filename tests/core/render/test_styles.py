"""citeformer.render.styles: reference entries in a CSL style, in to_markdown and to_html."""

from __future__ import annotations

import datetime
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import citeproc
import pytest

from citeformer import CitedAnswer, Source, build_request
from citeformer.errors import InputTypeError, InvalidInputError, MissingDependencyError
from citeformer.render import references, to_html, to_markdown
from citeformer.render.styles import Run, csl_item, entry_text, format_entries, shipped_styles
from citeformer.testing import FakeGenerator
from tests.core.html_tags import Collect

HARVARD = "harvard-cite-them-right"
SOURCES = [
    Source("Honey bees dance to show where flowers are.", title="Bees and wasps",
           metadata={"author": "Doe, Jane and Roe, Ann", "date": "2021-05-03",
                     "url": "https://example.org/bees", "page": 2}),
    Source("The tower is 330 metres tall.", title="towers.pdf",
           metadata={"authors": ["Smith, John", "World Health Organization"], "year": 2019,
                     "title": "On towers", "journal": "Journal of Towers",
                     "doi": "https://doi.org/10.1000/xyz", "source": "towers.pdf"}),
    Source("Big Ben is a bell in London.", metadata={"file_name": "ben.txt"}),
]
TEXT = "Bees dance [1]. The tower is tall [2]. Ben is a bell [3]."
BEES = "Doe, J. and Roe, A. (2021) Bees and wasps. Available at: https://example.org/bees."


def answer(text: str = TEXT, sources: list[Source] = SOURCES) -> CitedAnswer:
    return FakeGenerator(text).answer(build_request("Where are bees?", sources))


@pytest.mark.parametrize(("metadata", "expected"), [
    ({"author": "Doe, Jane", "year": "2021"},
     {"author": [{"family": "Doe", "given": "Jane"}], "issued": {"date-parts": [[2021]]},
      "type": "document"}),
    ({"authors": "Doe, Jane; Roe, Ann and World Health Organization", "date": "2021-05"},
     {"author": [{"family": "Doe", "given": "Jane"}, {"family": "Roe", "given": "Ann"},
                 {"literal": "World Health Organization"}],
      "issued": {"date-parts": [[2021, 5]]}, "type": "document"}),
    ({"author": ["Doe, J.", " "], "date": datetime.date(2020, 1, 31), "publisher": "Pub"},
     {"author": [{"family": "Doe", "given": "J."}], "issued": {"date-parts": [[2020, 1, 31]]},
      "publisher": "Pub", "type": "book"}),
    ({"date": "2021-05-03T10:00:00+00:00", "year": 1999, "source": "https://x.org/a"},
     {"issued": {"date-parts": [[2021, 5, 3]]}, "URL": "https://x.org/a", "type": "webpage"}),
    ({"year": "spring 2020", "source": "notes/a.md", "container_title": "Proceedings"},
     {"issued": {"literal": "spring 2020"}, "container-title": "Proceedings", "type": "chapter"}),
    ({"journal": "J. Bees", "doi": "doi: 10.1/x", "url": "https://x.org/b", "type": "report"},
     {"container-title": "J. Bees", "DOI": "10.1/x", "URL": "https://x.org/b", "type": "report"}),
    ({"journal": "J. Bees", "type": "not-a-csl-type"},
     {"container-title": "J. Bees", "type": "article-journal"}),
    ({"type": "thesis", "title": "Own title"}, {"title": "Own title", "type": "thesis"}),
    # A title and a URL are what any web page has: no entry, the plain label stays.
    ({"title": "Bees", "url": "https://x.org/a", "page": 3}, None),
    ({"type": "pdf", "author": " ", "source": "a.pdf"}, None),
    ({}, None),
])
def test_csl_item_maps_the_metadata_keys(metadata: dict, expected: dict | None) -> None:
    item = csl_item(Source("text", metadata=metadata), "k")
    assert item == (None if expected is None else {"id": "k", **expected})


def test_csl_item_title_order() -> None:
    source = Source("text", title="Source title", metadata={"year": 2020, "title": "Meta title"})
    assert csl_item(source, "1", title="Given")["title"] == "Given"  # type: ignore[index]
    assert csl_item(source, "1")["title"] == "Meta title"  # type: ignore[index]
    assert csl_item(Source("t", title="Source title", metadata={"year": 2020}), "1") == {
        "id": "1", "title": "Source title", "issued": {"date-parts": [[2020]]}, "type": "document"
    }


def test_harvard_entry_is_citeprocs_own() -> None:
    (entry,) = format_entries(SOURCES[:1], HARVARD)
    assert entry is not None
    assert entry_text(entry) == BEES  # Cite Them Right's web page form, checked by eye
    assert entry == (
        Run("Doe, J. and Roe, A. (2021) "),
        Run("Bees and wasps", frozenset({"italic"})),
        Run(". Available at: https://example.org/bees."),
    )
    # The same item written by hand, through citeproc's own plain-text formatter.
    from citeproc import Citation, CitationItem, CitationStylesBibliography, CitationStylesStyle
    from citeproc import formatter as formatters
    from citeproc.source.json import CiteProcJSON

    item = {"id": "x", "type": "webpage", "title": "Bees and wasps",
            "author": [{"family": "Doe", "given": "Jane"}, {"family": "Roe", "given": "Ann"}],
            "issued": {"date-parts": [[2021, 5, 3]]}, "URL": "https://example.org/bees"}
    bibliography = CitationStylesBibliography(
        CitationStylesStyle(HARVARD, validate=False), CiteProcJSON([item]), formatters.plain
    )
    bibliography.register(Citation([CitationItem("x")]))
    assert [str(e) for e in bibliography.bibliography()] == [BEES]


def test_to_markdown_formats_the_entries_in_the_style() -> None:
    text = to_markdown(answer(), style=HARVARD)
    assert text.splitlines() == [
        "Bees dance [[1]](#ref-1). The tower is tall [[2]](#ref-2). Ben is a bell [[3]](#ref-3).",
        "",
        "**Sources**",
        "",
        # The URL is linked where the entry shows it; the page follows as without a style.
        '- <a id="ref-1"></a>\\[1\\] Doe, J. and Roe, A. (2021) *Bees and wasps*. Available at:'
        " <https://example.org/bees>, page 3",
        '  - "Honey bees dance to show where flowers are."',
        '- <a id="ref-2"></a>\\[2\\] Smith, J. and World Health Organization (2019) “On towers”,'
        " *Journal of Towers* \\[Preprint\\]. Available at: https://doi.org/10.1000/xyz,"
        " towers.pdf",
        '  - "The tower is 330 metres tall."',
        # No bibliographic metadata: the plain label, as without a style.
        '- <a id="ref-3"></a>\\[3\\] ben.txt',
        '  - "Big Ben is a bell in London."',
    ]
    plain = to_markdown(answer())
    assert text.splitlines()[-2:] == plain.splitlines()[-2:]
    assert to_markdown(answer(), style=None) == plain


def test_a_url_the_style_leaves_out_follows_the_entry() -> None:
    # With a DOI, Cite Them Right shows the DOI's address, not the URL.
    sources = [Source("Bees dance.", title="Bees", metadata={
        "author": "Doe, Jane", "year": 2020, "doi": "10.1/x", "url": "https://x.org/b_1",
        "page_label": "iv",
    })]
    cited = answer("Bees dance [1].", sources)
    (ref,) = references(cited, style=HARVARD)
    assert ref.entry is not None and "x.org" not in entry_text(ref.entry)
    assert to_markdown(cited, style=HARVARD).splitlines()[4] == (
        '- <a id="ref-1"></a>\\[1\\] Doe, J. (2020) *Bees*. Available at:'
        " https://doi.org/10.1/x. <https://x.org/b_1>, page iv"
    )
    (item,) = [li for li in ET.fromstring(to_html(cited, style=HARVARD)).iter("li")
               if li.get("id")]
    assert [(a.get("href"), a.text) for a in item.iter("a")] == [
        ("https://x.org/b_1", "https://x.org/b_1")
    ]


def test_titles_and_every_source_reach_the_entries() -> None:
    refs = references(answer("Ben [3]."), titles=["Own title", None, None], cited_only=False,
                      style=HARVARD)
    assert [ref.entry is not None for ref in refs] == [True, True, False]
    assert entry_text(refs[0].entry or ()).startswith("Doe, J. and Roe, A. (2021) Own title.")
    assert refs[2].title == "ben.txt"


def test_a_csl_file_of_ones_own(tmp_path: Path) -> None:
    shipped = Path(citeproc.STYLES_PATH) / f"{HARVARD}.csl"
    own = tmp_path / "my style.csl"
    own.write_text(
        shipped.read_text(encoding="utf-8").replace(
            '<text macro="year-date" prefix="(" suffix=")"/>',
            '<text macro="year-date" prefix="[" suffix="]"/>',
        ),
        encoding="utf-8",
    )
    for style in (own, str(own)):
        (entry,) = format_entries(SOURCES[:1], style)
        assert entry is not None and entry_text(entry) == BEES.replace("(2021)", "[2021]")
    copy = tmp_path / "copy.csl"
    shutil.copy(shipped, copy)
    assert to_html(answer(), style=copy) == to_html(answer(), style=HARVARD)


def test_shipped_styles() -> None:
    assert HARVARD in shipped_styles()


@pytest.mark.parametrize(("style", "error", "match"), [
    ("apa", InvalidInputError,
     r"style='apa' is not a CSL style shipped .*'harvard-cite-them-right'.*path of a \.csl"),
    ("", InvalidInputError, "is not a CSL style shipped"),
    ("styles/none.csl", InvalidInputError, "there is no CSL file at 'styles/none.csl'"),
    (Path("none"), InvalidInputError, "there is no CSL file"),
    (42, InputTypeError, "style= takes a style name or the path of a .csl file, got int"),
    (["apa"], InputTypeError, "got list"),
])
def test_bad_styles_are_refused(style: object, error: type[Exception], match: str) -> None:
    for render in (to_markdown, to_html):
        with pytest.raises(error, match=match):
            render(answer(), style=style)  # type: ignore[arg-type]
    # Checked even when no source is cited.
    with pytest.raises(error, match=match):
        to_markdown(answer("No marker here."), style=style)  # type: ignore[arg-type]


@pytest.mark.parametrize("content", ["not xml at all <", '<?xml version="1.0"?><nothing/>'])
def test_a_file_that_is_no_csl_style_is_refused(tmp_path: Path, content: str) -> None:
    bad = tmp_path / "bad.csl"
    bad.write_text(content, encoding="utf-8")
    with pytest.raises(InvalidInputError, match="bad.csl"):
        to_markdown(answer(), style=bad)


def test_a_style_without_a_bibliography_is_refused(tmp_path: Path) -> None:
    shipped = (Path(citeproc.STYLES_PATH) / f"{HARVARD}.csl").read_text(encoding="utf-8")
    start, end = shipped.index("<bibliography"), shipped.index("</bibliography>")
    notes = tmp_path / "notes.csl"
    notes.write_text(shipped[:start] + shipped[end + len("</bibliography>"):], encoding="utf-8")
    with pytest.raises(InvalidInputError, match="has no <bibliography>"):
        to_markdown(answer(), style=notes)


def test_without_citeproc_the_error_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "citeproc", None)  # import citeproc now raises ImportError
    with pytest.raises(MissingDependencyError, match=r"pip install 'citeproc-py>=0.11'"):
        to_markdown(answer(), style=HARVARD)
    assert to_markdown(answer()).startswith("Bees dance")  # no style, no citeproc needed


def test_rendering_does_not_import_citeproc() -> None:
    code = (
        "import sys, citeformer.render\n"
        "from citeformer.types import CitedAnswer\n"
        "assert 'citeproc' not in sys.modules and 'lxml' not in sys.modules, 'imported'\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr


HOSTILE = [
    Source("Bees dance.", title="<script>alert(1)</script> & *bees*",
           metadata={"author": '<img src=x onerror="alert(1)">, Eve </li>',
                     "publisher": "A & B <b>bold</b> [x](javascript:alert(1))",
                     "year": 2020, "url": "https://example.org/a?b=1&c=<2>"}),
]


def test_html_entries_are_escaped() -> None:
    page = to_html(answer("Bees dance [1].", HOSTILE), style=HARVARD)
    root = ET.fromstring(f"<root>{page}</root>")  # well-formed
    (item,) = [li for li in root.iter("li") if li.get("id")]
    shown = "".join(item.itertext())
    assert shown == (
        '<img src=x onerror="alert(1)">, E. </li> . (2020) <script>alert(1)</script> & *bees*.'
        " A & B <b>bold</b> [x](javascript:alert(1)). Available at:"
        " https://example.org/a?b=1&c=<2>.Bees dance."  # then the supporting sentence
    )
    assert [i.text for i in item.iter("i")] == ["<script>alert(1)</script> & *bees*"]
    # Not an address a link may carry: shown as text only.
    assert [a.get("href") for a in root.iter("a")] == ["#ref-1"]
    parser = Collect()
    parser.feed(page)
    assert {"script", "img", "b"}.isdisjoint(parser.tags)
    assert parser.tags.count("i") == 1


def test_markdown_entries_are_escaped() -> None:
    line = to_markdown(answer("Bees dance [1].", HOSTILE), style=HARVARD).splitlines()[4]
    assert line == (
        '- <a id="ref-1"></a>\\[1\\] \\<img src=x onerror="alert(1)"\\>, E. \\</li\\> . (2020)'
        " *\\<script\\>alert(1)\\</script\\> & \\*bees\\**. A & B \\<b\\>bold\\</b\\>"
        " \\[x\\](javascript:alert(1)). Available at: https://example.org/a?b=1&c=\\<2\\>."
    )
