"""Markdown for a ``CitationAnswer``: the text, then the documents as a numbered reference list.

The labels, pages and supporting sentences come from ``citeformer.render``, which also renders
the answer as HTML (``to_html``), from the core answer the ``CitationAnswer`` keeps; this module
only keeps LangChain's list of every document.
"""

from __future__ import annotations

import os

from citeformer.errors import InputTypeError
from citeformer.render.markup import markdown_evidence, markdown_reference, references
from citeformer.types import CUT_NOTE
from citeformer_langchain.answer import CitationAnswer

__all__ = ["render_markdown"]


def render_markdown(
    answer: CitationAnswer,
    *,
    heading: str | None = "Sources",
    style: str | os.PathLike[str] | None = None,
) -> str:
    """The answer text, then every document as ``N. Title`` so that ``[N]`` in the text is item N.

    The title is the one the model was shown (the first non-blank of the document's ``title``,
    ``file_name`` and ``source`` metadata, or of the runnable's ``title_keys``), else the start of
    its text in quotes. An http(s) ``source`` becomes the link target. The page follows the title
    (``page_label`` as it is, else LangChain's 0-based ``page`` + 1: ``page 3`` for ``page=2``),
    and under a cited document come the sentences its citations were located in, quoted, marked
    *(weak support)* when weak. All documents are
    listed, cited or not, so that Markdown's ordered list keeps the numbers of the markers (it
    renumbers a list that skips). ``heading=None`` leaves the heading out. ``style=`` (a CSL
    style's name, such as ``"harvard-cite-them-right"``, or a ``.csl`` path; needs
    ``citeformer[styles]``) shows a document whose metadata has an author, a date, a publisher
    and the like as an entry in that style, as ``citeformer.render.to_markdown`` does.
    """
    if not isinstance(answer, CitationAnswer):
        raise InputTypeError(
            f"render_markdown() takes a CitationAnswer (what CitationRunnable returns), "
            f"got {type(answer).__name__}"
        )
    lines = [answer.text.strip() + (f" *{CUT_NOTE}*" if answer.finish_reason == "length" else "")]
    if answer.documents:
        lines.append("")
        if heading:
            lines += [f"**{heading}**", ""]
        for ref in references(answer.cited_answer, cited_only=False, style=style):
            lines.append(f"{ref.number}. {markdown_reference(ref, location=False)}")
            lines += ["   " + line for line in markdown_evidence(ref)]
    return "\n".join(lines) + "\n"
