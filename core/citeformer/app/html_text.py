"""The readable text of an HTML page: its paragraphs, its ``<title>``, and the line each came from.

The page is parsed by lxml (libxml2's HTML parser), which reads any markup in one linear pass,
however malformed or hostile: unclosed tags, stray ``<`` and deep nesting cost no more than the
bytes they take. Elements nested deeper than 2,048 levels end the page's text there (libxml2's
limit; browsers flatten such nesting at 512).

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
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

__all__ = [
    "HtmlText",
    "LineMap",
    "html_to_text",
]

_SKIPPED = frozenset({"script", "style", "template", "noscript", "svg", "head", "title"})
"""Elements whose content is not shown as text (``<title>`` is read apart, as the title)."""

_NAVIGATION = frozenset({"nav"})
_NAVIGATION_ROLES = frozenset({"navigation", "menu", "menubar", "toolbar"})
"""The page's menus, dropped wherever they are."""

_FRAME = frozenset({"header", "footer", "aside"})
_FRAME_ROLES = frozenset({"banner", "contentinfo", "complementary", "search"})
"""The page's header, footer and sidebars, dropped outside an article or ``<main>``."""

_CELLS = frozenset({"td", "th"})
"""Elements that begin a table cell: joined to the row's cell before by `` | ``."""

_PARAGRAPHS = frozenset({
    "address", "article", "aside", "blockquote", "body", "caption", "details", "dialog", "div",
    "dl", "fieldset", "figcaption", "figure", "footer", "form", "h1", "h2", "h3", "h4", "h5",
    "h6", "header", "hr", "html", "legend", "main", "nav", "ol", "p", "pre", "section",
    "summary", "table", "ul",
})
"""Elements that begin and end a paragraph."""

_LINES = frozenset({"br", "dd", "dt", "li", "tr", "option"})
"""Elements that begin and end a line."""

_LAST_LINE = 65535
"""libxml2 counts an HTML element's line up to this; past it, lines are counted here."""

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
    root = _parse(markup)
    if root is None:  # nothing but white space and comments
        return HtmlText("", None, LineMap((0,), (1,)))
    passes = [(False, False), (False, True)]
    if _has_main(root):
        passes.insert(0, (True, False))
    for main, frame in passes:
        text, lines = _Reader(main=main, frame=frame).read(root)
        if text.strip():
            break
    return HtmlText(text, _title(root), lines)


def _parse(markup: str) -> Any:
    from lxml import etree  # only a page needs it, not every command that imports this

    # Bytes in a stated encoding, so that a <meta charset> or an XML declaration in the page
    # cannot make libxml2 decode the text a second time; a lone surrogate cannot be encoded.
    # huge_tree: nesting to 2,048 levels (not 256) and text nodes past 10 MB.
    parser = etree.HTMLParser(encoding="utf-8", no_network=True, huge_tree=True)
    return etree.fromstring(markup.encode("utf-8", "replace"), parser)


def _has_main(root: Any) -> bool:
    if next(root.iter("main"), None) is not None:
        return True
    return any(_role(element) == "main" for element in root.iterfind(".//*[@role]"))


def _role(element: Any) -> str:
    return str(element.get("role") or "").strip().lower()


def _title(root: Any) -> str | None:
    """The first ``<title>`` outside an ``<svg>`` (an image's title is not the page's)."""
    for title in root.iter("title"):
        if not any(ancestor.tag == "svg" for ancestor in title.iterancestors()):
            return " ".join("".join(title.itertext()).split()) or None
    return None


def _walk(root: Any) -> Iterator[tuple[bool, Any]]:
    """``(True, node)`` as each node opens and ``(False, node)`` as it closes, in page order.

    Comments and processing instructions are nodes too, so their place (and the text after
    them) is kept; the walk is a loop, not a recursion, so no nesting depth can overflow it.
    """
    yield True, root
    stack = [(root, iter(root))]
    while stack:
        node, children = stack[-1]
        child = next(children, None)
        if child is None:
            stack.pop()
            yield False, node
        else:
            yield True, child
            stack.append((child, iter(child)))


class _Reader:
    def __init__(self, *, main: bool, frame: bool) -> None:
        self._main_only = main  # read the text inside <main> alone
        self._frame = frame  # keep the page's navigation, header, footer and sidebars
        self._parts: list[str] = []
        self._length = 0
        self._offsets: list[int] = [0]
        self._lines: list[int] = [1]
        self._line = 1  # the file line the text being read begins on
        self._hidden = 0  # open elements being dropped
        self._mains = 0  # open main elements
        self._articles = 0  # open <article> elements
        self._pre = 0
        self._pre_space = ""  # white space owed inside a <pre> line, kept if a word follows
        self._opened: list[tuple[bool, bool]] = []  # per open element: (hides, is a main)
        self._pending = ""  # the break owed before the next word: "", " ", "\n" or "\n\n"

    def read(self, root: Any) -> tuple[str, LineMap]:
        for opening, node in _walk(root):
            if opening:
                self._open(node)
            else:
                self._close(node)
        return "".join(self._parts), LineMap(tuple(self._offsets), tuple(self._lines))

    def _open(self, node: Any) -> None:
        line = node.sourceline or 0
        if self._line < line < _LAST_LINE:
            # libxml2 gives the line a start tag (or a comment) ends on: the text after it
            # begins there, and newlines inside tags, never seen in the text, are made good.
            self._line = line
        tag = node.tag
        if not isinstance(tag, str):  # a comment or processing instruction: no text shown
            self._opened.append((True, False))
            self._hidden += 1
            if not 0 < line < _LAST_LINE:  # else its line is where it ends, counted above
                self._count(node.text)
            return
        role = _role(node) if "role" in node.attrib else ""
        hides = self._hides(node, tag, role)
        is_main = tag == "main" or role == "main"
        self._opened.append((hides, is_main))
        self._hidden += hides
        self._mains += is_main
        self._articles += tag == "article"
        self._block(tag, opening=True)
        if node.text:
            self._data(node.text)

    def _close(self, node: Any) -> None:
        hides, is_main = self._opened.pop()
        self._hidden -= hides
        self._mains -= is_main
        tag = node.tag
        if isinstance(tag, str):
            self._articles -= tag == "article"
            self._block(tag, opening=False)
        if node.tail:
            self._data(node.tail)

    def _hides(self, node: Any, tag: str, role: str) -> bool:
        """Whether the element ``node`` (``tag``, ARIA ``role``) is dropped whole."""
        if tag in _SKIPPED or node.get("hidden") is not None:
            return True
        if node.get("aria-hidden") == "true":
            return True
        if self._frame:
            return False
        if tag in _NAVIGATION or role in _NAVIGATION_ROLES:
            return True
        framing = tag in _FRAME or role in _FRAME_ROLES
        return framing and not (self._mains or self._articles)

    def _data(self, data: str) -> None:
        line = self._line
        self._count(data)
        if self._hidden or (self._main_only and not self._mains):
            return
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

    def _count(self, data: str | None) -> None:
        if data:
            self._line += data.count("\n")

    def _block(self, tag: str, *, opening: bool) -> None:
        if tag == "pre":
            self._pre = max(0, self._pre + (1 if opening else -1))
            self._pre_space = ""
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
        # White space inside a line is kept, also where it ends one element and the next word
        # is another's (`<span>use </span>std`, as highlighted code is marked up); at the end
        # of a line it is dropped.
        for number, text in enumerate(data.split("\n")):
            if number:
                self._owe("\n")
                self._pre_space = ""
            words = text.rstrip()
            if words:
                self._emit(self._pre_space + words, line + number, keep_indent=True)
            self._pre_space = text[len(words):] if words else self._pre_space + text

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
