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
        "Home\n\n"
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
    [("Home", 11), ("Eiffel Tower\n", 12), ("The tower", 13), ("on 31 March", 14),
     ("made of iron", 14), ("City: Paris", 15), ("year", 18), ("line two", 20)],
)
def test_every_offset_knows_its_line_in_the_html_file(words: str, line: int) -> None:
    page = html_to_text(PAGE)
    assert page.lines.line_of(page.text.index(words)) == line
    assert words.split()[0] in PAGE.splitlines()[line - 1]


def test_script_style_and_head_never_reach_the_text() -> None:
    page = html_to_text(PAGE)
    for hidden in ("never", "color", "Enable JavaScript", "utf-8"):
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
