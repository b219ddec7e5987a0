"""Rendering an answer for a reader: linked markers and the cited sources as references.

The modules:

```text
markup   an answer as Markdown or HTML (to_markdown, to_html), its reference list
styles   reference entries in a CSL citation style, formatted by citeproc-py
```
"""

from citeformer.render.markup import (
    Reference,
    escape_markdown,
    markdown_evidence,
    markdown_reference,
    references,
    to_html,
    to_markdown,
    unique_id_prefix,
)
from citeformer.render.styles import shipped_styles

__all__ = [
    "Reference",
    "escape_markdown",
    "markdown_evidence",
    "markdown_reference",
    "references",
    "shipped_styles",
    "to_html",
    "to_markdown",
    "unique_id_prefix",
]
