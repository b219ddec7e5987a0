"""The readable text of an HTML page: its paragraphs, its ``<title>``, and the line each came from.

``html_to_text`` keeps what a browser shows as text: ``<script>``, ``<style>``, ``<template>``,
``<noscript>``, ``<svg>``, elements marked ``hidden`` or ``aria-hidden="true"`` and the
``<head>`` (but for its ``<title>``) are dropped; runs of white space collapse to one space, as a
browser renders them (``<pre>`` keeps its lines); block elements (``<p>``, ``<div>``, headings,
lists, tables...) end a paragraph with a blank line and ``<br>``, list items and table rows end a
line, and the cells of a row are joined by `` | ``, so the passages are cut where the page's
paragraphs end and a table reads as one row per line.

Of the page's frame, only the content is kept: navigation (``<nav>``, the roles ``navigation``,
``menu``, ``menubar`` and ``toolbar``) is dropped, and so are the page's own header, footer and
sidebars (``<header>``, ``<footer>``, ``<aside>`` and the roles ``banner``, ``contentinfo``,
``complementary``, ``search``), unless they sit inside an ``<article>`` or ``<main>``, where they
are the article's heading, byline or aside. A page with a ``<main>`` element (or
``role="main"``) that holds text is read from it alone: the rest of the page is its frame (a help
popup, a "skip to content" link, a site banner). A page whose text is all in its frame keeps it
(it is the page's whole text).

Offsets into the extracted text map back to lines of the ``.html`` file (``LineMap``), so a
reference says the line a reader finds the sentence on in the file they have.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass
from html.parser import HTMLParser

__all__ = [
    "HtmlText",
    "LineMap",
    "html_to_text",
]

_SKIPPED = frozenset({"script", "style", "template", "noscript", "svg", "head"})
"""Elements whose content is not shown as text (``<title>`` is read apart, as the title)."""

_NAVIGATION = frozenset({"nav"})
_NAVIGATION_ROLES = frozenset({"navigation", "menu", "menubar", "toolbar"})
"""The page's menus, dropped wherever they are."""

_FRAME = frozenset({"header", "footer", "aside"})
_FRAME_ROLES = frozenset({"banner", "contentinfo", "complementary", "search"})
"""The page's header, footer and sidebars, dropped outside an article or ``<main>``."""

_CELLS = frozenset({"td", "th"})
"""Elements that begin a table cell: joined to the row's cell before by `` | ``."""

_VOID = frozenset({
    "area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
    "track", "wbr",
})
"""Elements that never have an end tag."""

_PARAGRAPHS = frozenset({
    "address", "article", "aside", "blockquote", "body", "caption", "details", "dialog", "div",
    "dl", "fieldset", "figcaption", "figure", "footer", "form", "h1", "h2", "h3", "h4", "h5",
    "h6", "header", "hr", "html", "legend", "main", "nav", "ol", "p", "pre", "section",
    "summary", "table", "ul",
})
"""Elements that begin and end a paragraph."""

_LINES = frozenset({"br", "dd", "dt", "li", "tr", "option"})
"""Elements that begin and end a line."""

_WORDS = re.compile(r"\S+")
_CELL = " | "
_STRENGTH = {"": 0, " ": 1, _CELL: 2, "\n": 3, "\n\n": 4}


@dataclass(frozen=True)
class LineMap:
    """Which line of a file each stretch of a text extracted from it came from."""

    offsets: tuple[int, ...]
    """Offsets in the extracted text where a stretch begins, ascending (the first is 0)."""

    lines: tuple[int, ...]
    """The 1-based file line of each stretch."""

    def line_of(self, offset: int) -> int:
        """The file line of the extracted text's character at ``offset``."""
        index = bisect_right(self.offsets, offset) - 1
        return self.lines[max(index, 0)]


@dataclass(frozen=True)
class HtmlText:
    """What ``html_to_text`` extracts from a page."""

    text: str
    """The page's text, paragraphs separated by a blank line."""

    title: str | None
    """The text of ``<title>``, white space collapsed; ``None`` when missing or blank."""

    lines: LineMap
    """The file line of each offset of ``text``."""


def html_to_text(markup: str) -> HtmlText:
    """The text a browser would show of ``markup``, its title, and the line of each stretch.

    Its ``<main>`` when that holds text, else without the page's navigation, header, footer and
    sidebars, else (nothing but those hold text) all of it.
    """
    for main, frame in ((True, False), (False, False), (False, True)):
        page = _parse(markup, main=main, frame=frame)
        if page.text.strip():
            return page
    return page


def _parse(markup: str, *, main: bool, frame: bool) -> HtmlText:
    parser = _TextParser(main=main, frame=frame)
    parser.feed(markup)
    parser.close()
    return parser.result()


class _TextParser(HTMLParser):
    def __init__(self, *, main: bool, frame: bool) -> None:
        super().__init__(convert_charrefs=True)
        self._main_only = main  # read the text inside <main> alone
        self._frame = frame  # keep the page's navigation, header, footer and sidebars
        self._mains: list[tuple[str, int]] = []  # (tag, depth) of each open main element
        self._parts: list[str] = []
        self._length = 0
        self._offsets: list[int] = [0]
        self._lines: list[int] = [1]
        self._open: dict[str, int] = {}  # open elements of each tag
        self._hidden: list[tuple[str, int]] = []  # (tag, depth) of each element being dropped
        self._pre = 0
        self._title: list[str] | None = None
        self._title_text: list[str] = []
        self._pending = ""  # the break owed before the next word: "", " ", "\n" or "\n\n"

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self._title = []
        elif tag == "body":  # a <head> never closed ends where the body begins
            self._hidden = [(name, depth) for name, depth in self._hidden if name != "head"]
        if tag not in _VOID:
            depth = self._open[tag] = self._open.get(tag, 0) + 1
            named = dict(attrs)
            role = (named.get("role") or "").strip().lower()
            if self._hides(tag, named, role):
                self._hidden.append((tag, depth))
            if tag == "main" or role == "main":
                self._mains.append((tag, depth))
        self._block(tag, opening=True)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._block(tag, opening=True)  # <br/>, <hr/>: a break, and nothing to skip

    def handle_endtag(self, tag: str) -> None:
        if tag == "title" and self._title is not None:
            self._title_text += self._title
            self._title = None
        elif tag not in _VOID and self._open.get(tag):
            depth = self._open[tag]
            self._open[tag] = depth - 1
            for regions in (self._hidden, self._mains):
                if (tag, depth) in regions:  # and what it holds that was never closed
                    del regions[regions.index((tag, depth)):]
        self._block(tag, opening=False)

    def handle_data(self, data: str) -> None:
        if self._title is not None:
            self._title.append(data)
            return
        if self._hidden or (self._main_only and not self._mains):
            return
        line = self.getpos()[0]
        if self._pre:
            self._preformatted(data, line)
            return
        if data[:1].isspace():
            self._owe(" ")
        position = 0
        for word in _WORDS.finditer(data):
            line += data.count("\n", position, word.start())
            position = word.start()
            self._emit(word.group(), line)
            if word.end() < len(data):
                self._owe(" ")

    def result(self) -> HtmlText:
        title = " ".join("".join(self._title_text).split()) or None
        return HtmlText("".join(self._parts), title, LineMap(tuple(self._offsets),
                                                             tuple(self._lines)))

    def _hides(self, tag: str, attrs: dict[str, str | None], role: str) -> bool:
        """Whether the element opened by ``tag`` (``attrs``, ARIA ``role``) is dropped whole."""
        if tag in _SKIPPED or "hidden" in attrs or attrs.get("aria-hidden") == "true":
            return True
        if self._frame:
            return False
        if tag in _NAVIGATION or role in _NAVIGATION_ROLES:
            return True
        framing = tag in _FRAME or role in _FRAME_ROLES
        return framing and not (self._mains or self._open.get("article"))

    def _block(self, tag: str, *, opening: bool) -> None:
        if tag == "pre":
            self._pre = max(0, self._pre + (1 if opening else -1))
        if tag in _PARAGRAPHS:
            self._owe("\n\n")
        elif tag in _LINES:
            self._owe("\n")
        elif tag in _CELLS and opening:
            self._owe(_CELL)

    def _owe(self, brk: str) -> None:
        # The strongest break owed wins: a paragraph end over a line end over a space.
        if _STRENGTH[brk] > _STRENGTH[self._pending]:
            self._pending = brk

    def _preformatted(self, data: str, line: int) -> None:
        for number, text in enumerate(data.split("\n")):
            if number:
                self._owe("\n")
            if text.strip():
                self._emit(text.rstrip(), line + number, keep_indent=True)

    def _emit(self, text: str, line: int, *, keep_indent: bool = False) -> None:
        if self._length and self._pending:
            self._append(self._pending)
        elif keep_indent and not self._length:
            text = text.lstrip()
        self._pending = ""
        if self._offsets[-1] == self._length:
            self._lines[-1] = line
        elif line != self._lines[-1]:
            self._offsets.append(self._length)
            self._lines.append(line)
        self._append(text)

    def _append(self, text: str) -> None:
        self._parts.append(text)
        self._length += len(text)
