"""An HTML parser that records start tags and text, for checking what rendered HTML shows."""

from __future__ import annotations

from html.parser import HTMLParser


class Collect(HTMLParser):
    """Start tags in ``tags``, text in ``data``, in document order."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.data: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)

    def handle_data(self, data: str) -> None:
        self.data.append(data)
