"""Markdown for a ``CitationAnswer``: the text, then the documents as a numbered reference list."""

from __future__ import annotations

import re

from citeformer_langchain.answer import CitationAnswer
from citeformer_langchain.inputs import document_title

_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]<>])")
_SNIPPET_CHARS = 80


def render_markdown(answer: CitationAnswer, *, heading: str | None = "Sources") -> str:
    """The answer text, then every document as ``N. Title`` so that ``[N]`` in the text is item N.

    The title is the first non-blank of the document's ``title``, ``file_name`` and ``source``
    metadata, else the start of its text in quotes. An http(s) ``source`` becomes the link
    target. All documents are listed, cited or not, so that Markdown's ordered list keeps the
    numbers of the markers (it renumbers a list that skips). ``heading=None`` leaves the heading
    out.
    """
    if not isinstance(answer, CitationAnswer):
        from citeformer.errors import InputTypeError

        raise InputTypeError(
            f"render_markdown() takes a CitationAnswer (what CitationRunnable returns), "
            f"got {type(answer).__name__}"
        )
    lines = [answer.text.strip()]
    if answer.documents:
        lines.append("")
        if heading:
            lines += [f"**{heading}**", ""]
        for number, document in enumerate(answer.documents, start=1):
            title = document_title(document)
            label = _escape(title) if title else f'"{_escape(_snippet(document.page_content))}"'
            source = str(document.metadata.get("source") or "")
            if source.startswith(("http://", "https://")) and " " not in source:
                label = f"[{label}](<{source}>)"
            lines.append(f"{number}. {label}")
    return "\n".join(lines) + "\n"


def _escape(text: str) -> str:
    # Titles are data, not markup: a `*` or `[` in a file name must not start emphasis or a link.
    return _MARKDOWN_SPECIAL.sub(r"\\\1", text)


def _snippet(text: str) -> str:
    flat = " ".join(text.split())
    if len(flat) <= _SNIPPET_CHARS:
        return flat
    cut = flat[: _SNIPPET_CHARS - 1]
    # End on a whole word when there is one to end on.
    return (cut.rsplit(" ", 1)[0] if " " in cut else cut).rstrip(" ,;:") + "…"
