"""The readable text of an HTML page: its paragraphs, its ``<title>``, and the line each came from.

``html_to_text`` keeps what a browser shows as text: ``<script>``, ``<style>``, ``<template>``,
``<noscript>``, ``<svg>`` and the ``<head>`` (but for its ``<title>``) are dropped; runs of white
space collapse to one space, as a browser renders them (``<pre>`` keeps its lines); block elements
(``<p>``, ``<div>``, headings, lists, tables...) end a paragraph with a blank line and ``<br>``,
list items and table rows end a line, so the passages are cut where the page's paragraphs end.

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
_STRENGTH = {"": 0, " ": 1, "\n": 2, "\n\n": 3}


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
    """The text a browser would show of ``markup``, its title, and the line of each stretch."""
    parser = _TextParser()
    parser.feed(markup)
    parser.close()
    return parser.result()


class _TextParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self._parts: list[str] = []
        self._length = 0
        self._offsets: list[int] = [0]
        self._lines: list[int] = [1]
        self._skip: dict[str, int] = {}
        self._pre = 0
        self._title: list[str] | None = None
        self._title_text: list[str] = []
        self._pending = ""  # the break owed before the next word: "", " ", "\n" or "\n\n"

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self._title = []
        elif tag == "body":
            self._skip.pop("head", None)  # a <head> never closed ends where the body begins
        elif tag in _SKIPPED:
            self._skip[tag] = self._skip.get(tag, 0) + 1
        self._block(tag, opening=True)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._block(tag, opening=True)  # <br/>, <hr/>: a break, and nothing to skip

    def handle_endtag(self, tag: str) -> None:
        if tag == "title" and self._title is not None:
            self._title_text += self._title
            self._title = None
        elif self._skip.get(tag):
            self._skip[tag] -= 1
        self._block(tag, opening=False)

    def handle_data(self, data: str) -> None:
        if self._title is not None:
            self._title.append(data)
            return
        if any(self._skip.values()):
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

    def _block(self, tag: str, *, opening: bool) -> None:
        if tag == "pre":
            self._pre = max(0, self._pre + (1 if opening else -1))
        if tag in _PARAGRAPHS:
            self._owe("\n\n")
        elif tag in _LINES:
            self._owe("\n")

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
