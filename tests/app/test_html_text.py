"""Unit tests for citeformer.app.html_text: a page's readable text, title and source lines."""

from __future__ import annotations

import pytest

from citeformer.app.html_text import LineMap, html_to_text

PAGE = """<!doctype html>
<html>
<head>
  <meta charset="utf-8">
  <title>The  Eiffel
     Tower</title>
  <style>p { color: red }</style>
  <script>var shown = "<p>never</p>";</script>
</head>
<body>
<nav><a href="/">Home</a></nav>
<h1>Eiffel Tower</h1>
<p>The tower was completed
   on 31 March 1889. It is <b>330</b>&nbsp;metres tall &amp; made of iron.</p>
<ul><li>Designer: Gustave Eiffel</li><li>City: Paris</li></ul>
<pre>
  height = 330
  year   = 1889
</pre>
<p>Line one<br>line two</p>
<noscript>Enable JavaScript.</noscript>
</body>
</html>
"""


def test_the_text_a_browser_shows_with_paragraph_breaks() -> None:
    page = html_to_text(PAGE)
    assert page.text == (
        "Eiffel Tower\n\n"
        "The tower was completed on 31 March 1889. It is 330 metres tall & made of iron.\n\n"
        "Designer: Gustave Eiffel\nCity: Paris\n\n"
        "  height = 330\n  year   = 1889\n\n"
        "Line one\nline two"
    )


def test_the_title_comes_from_the_title_element() -> None:
    assert html_to_text(PAGE).title == "The Eiffel Tower"
    assert html_to_text("<p>No title.</p>").title is None
    assert html_to_text("<title> </title><p>Blank title.</p>").title is None


@pytest.mark.parametrize(
    ("words", "line"),
    [("Eiffel Tower\n", 12), ("The tower", 13), ("on 31 March", 14),
     ("made of iron", 14), ("City: Paris", 15), ("year", 18), ("line two", 20)],
)
def test_every_offset_knows_its_line_in_the_html_file(words: str, line: int) -> None:
    page = html_to_text(PAGE)
    assert page.lines.line_of(page.text.index(words)) == line
    assert words.split()[0] in PAGE.splitlines()[line - 1]


def test_script_style_and_head_never_reach_the_text() -> None:
    page = html_to_text(PAGE)
    for hidden in ("never", "color", "Enable JavaScript", "utf-8", "Home"):
        assert hidden not in page.text


def test_inline_elements_join_words_without_adding_space() -> None:
    assert html_to_text("<p>un<b>believ</b>able, <i>really</i> so</p>").text == (
        "unbelievable, really so"
    )


def test_an_unclosed_head_ends_at_the_body() -> None:
    assert html_to_text("<head><title>T</title><body><p>Shown.</p>").text == "Shown."


def test_markup_without_text_gives_no_text() -> None:
    assert html_to_text("<html><script>x = 1</script><img src=a.png></html>").text == ""


def test_line_map_bisects() -> None:
    lines = LineMap((0, 10, 25), (3, 5, 9))
    assert [lines.line_of(o) for o in (0, 9, 10, 24, 25, 1000)] == [3, 3, 5, 5, 9, 9]


# -- tables and the page's frame (a population table once read "YearPopulation\n19504,200", and a
# model answered "... contains 2024 pages" from a footer's copyright year) ---------------------


def test_table_cells_are_separated_and_rows_are_lines() -> None:
    table = ("<table><caption>Population</caption><tr><th>Year</th><th>Population</th></tr>"
             "<tr><td>1950</td><td>4,200</td></tr><tr><td>2000</td><td><b>5</b>,100</td></tr>"
             "</table><p>After.</p>")
    assert html_to_text(table).text == (
        "Population\n\nYear | Population\n1950 | 4,200\n2000 | 5,100\n\nAfter."
    )


PAGE_FRAME = """<body>
<header><a href="/">Tower News</a> <form role="search"><input> Search</form></header>
<nav><ul><li>Home</li><li>About</li></ul></nav>
<div role="navigation"><div>Sections</div> More sections</div>
<main>
<article>
<header><h1>The tower turns 135</h1><p>By A. Writer</p></header>
<p>The tower was completed in 1889.</p>
<aside>Related: its lifts.</aside>
<footer>Filed under history.</footer>
</article>
</main>
<aside class="sidebar">Most read: 10 pages</aside>
<div role="contentinfo">Contact us</div>
<footer>&copy; 2024 Tower News. 2024 pages.</footer>
<p hidden>Never shown.</p>
</body>"""


def test_the_pages_frame_is_dropped_and_the_articles_own_kept() -> None:
    text = html_to_text(PAGE_FRAME).text
    assert text == (
        "The tower turns 135\n\nBy A. Writer\n\nThe tower was completed in 1889.\n\n"
        "Related: its lifts.\n\nFiled under history."
    )
    for dropped in ("Tower News", "Search", "Home", "Sections", "Most read", "Contact", "2024",
                    "Never"):
        assert dropped not in text


def test_lines_are_kept_past_a_dropped_frame() -> None:
    page = html_to_text(PAGE_FRAME)
    line = page.lines.line_of(page.text.index("The tower was"))
    assert "The tower was completed" in PAGE_FRAME.splitlines()[line - 1]


def test_a_frame_left_open_inside_another_closes_with_it() -> None:
    assert html_to_text("<aside><nav>menu</aside><p>kept</p>").text == "kept"
    assert html_to_text("<div role=navigation><div>x</div>menu</div><p>kept</p>").text == "kept"


def test_a_page_that_is_all_frame_keeps_its_text() -> None:
    assert html_to_text("<header><h1>Only a header</h1></header>").text == "Only a header"
    assert html_to_text("<footer>Only this</footer><p hidden>not this</p>").text == "Only this"


def test_a_page_with_main_is_read_from_it_alone() -> None:
    page = ('<div id="help"><h2>Keyboard shortcuts</h2><p>Press ? for help</p></div>'
            '<a href="#content">Skip to main content</a>'
            '<div role="main"><h1>Ownership</h1><p>Rules of memory.</p></div><p>Footnote.</p>')
    assert html_to_text(page).text == "Ownership\n\nRules of memory."
    assert html_to_text(page.replace('role="main"', "")).text == (
        "Keyboard shortcuts\n\nPress ? for help\n\nSkip to main content\n\nOwnership\n\n"
        "Rules of memory.\n\nFootnote.")
    # An empty <main> is no content: the page outside it is read.
    assert html_to_text("<main> </main><p>The text.</p>").text == "The text."


# -- hostile markup: libxml2 reads it in one linear pass (the timings are in
# benchmarks/html_reader.py) ------------------------------------------------------------------


def test_hidden_elements_nested_thousands_deep_show_nothing() -> None:
    page = "<p>Before.</p>" + "<div hidden>secret" * 16_000 + "</div>" * 16_000
    assert html_to_text(page).text == "Before."


def test_a_run_of_unclosed_tags_leaves_the_text_before_it() -> None:
    assert html_to_text("<p>Text.</p>" + "<a" * 30_000).text == "Text."
    assert html_to_text("<p>Text.</p>" + "<a " * 30_000 + "<p>More.</p>").text == "Text.\n\nMore."


def test_nesting_deeper_than_pythons_recursion_limit_is_read() -> None:
    page = "<div>" * 1_500 + "Deep." + "</div>" * 1_500 + "<p>After.</p>"
    assert html_to_text(page).text == "Deep.\n\nAfter."


def test_nesting_past_libxml2s_depth_limit_ends_the_text() -> None:
    page = "<p>Before.</p>" + "<div>x" * 3_000 + "<p>After.</p>"
    text = html_to_text(page).text
    assert text.startswith("Before.\n\nx\n\nx") and "After." not in text


def test_highlighted_code_keeps_the_spaces_between_its_tokens() -> None:
    page = ('<pre><code><span class="kw">use </span>std::fs;\n'
            '<span class="kw">fn </span>main() {\n    <span>let </span>x  =  1;  \n}</code></pre>')
    assert html_to_text("<p>Code:</p>" + page).text == (
        "Code:\n\nuse std::fs;\nfn main() {\n    let x  =  1;\n}"
    )


def test_text_after_a_comment_is_kept_on_its_line() -> None:
    markup = "<p>One <!-- a\ncomment\n--> two\nthree</p>\n<!---->four"
    page = html_to_text(markup)
    assert page.text == "One two three\n\nfour"
    lines = [page.lines.line_of(page.text.index(word)) for word in ("One", "two", "three", "four")]
    assert lines == [1, 3, 4, 5]


def test_lines_past_65535_are_counted() -> None:
    # libxml2 gives no element a line past 65,535: from there on they are counted here.
    markup = "<p>First.</p>" + "\n" * 65_600 + "<p>Far.</p>\n<p>Farther\nstill.</p>\n\nLast."
    page = html_to_text(markup)
    lines = [page.lines.line_of(page.text.index(word))
             for word in ("First.", "Far.", "Farther", "still.", "Last.")]
    assert lines == [1, 65_601, 65_602, 65_603, 65_605]


def test_a_declared_encoding_in_the_markup_does_not_decode_the_text_again() -> None:
    page = ('<?xml version="1.0" encoding="iso-8859-1"?><html><head><meta charset="koi8-r">'
            "<title>Caf\xe9</title></head><p>Cr\xe8me br\xfbl\xe9e \u2014 \u6771\u4eac.</p></html>")
    assert html_to_text(page).text == "Cr\xe8me br\xfbl\xe9e \u2014 \u6771\u4eac."
    assert html_to_text(page).title == "Caf\xe9"


def test_an_images_title_is_not_the_pages() -> None:
    assert html_to_text("<svg><title>Icon</title></svg><p>Text.</p>").title is None
    page = "<head><title>Page</title></head><body><svg><title>Icon</title></svg>Text.</body>"
    assert html_to_text(page).title == "Page"
    assert html_to_text(page).text == "Text."


@pytest.mark.parametrize("markup", ["", "   \n ", "<!-- only a comment -->"])
def test_markup_with_no_element_gives_no_text(markup: str) -> None:
    page = html_to_text(markup)
    assert (page.text, page.title, page.lines.line_of(0)) == ("", None, 1)
