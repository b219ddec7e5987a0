"""An answer as Markdown or HTML: linked markers, then the cited sources as a reference list.

Each reference shows the source's title, its file or URL, its page and the sentences of it that
the answer's citations were located in (``Citation.evidence``), so a reader can check a claim
without opening the source. Titles, locations and pages come from a source's ``title`` and
``metadata``; the metadata keys read are ``LOCATION_KEYS`` and ``page_label``/``page``.
"""

from __future__ import annotations

import html
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from citeformer.errors import InputTypeError, InvalidInputError
from citeformer.types import CitedAnswer, EvidenceSpan, Source

LOCATION_KEYS = ("path", "source", "file_name", "url")
"""Metadata keys a source's file or URL is read from, in order."""

SNIPPET_CHARS = 80
"""A source with neither title nor location is labelled by this many characters of its text."""

_MARKER = re.compile(r"\[(\d+)\]")
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]<>])")
_ID_PREFIX = re.compile(r"[A-Za-z][\w-]*")
_PARAGRAPH_BREAK = re.compile(r"\n\s*\n")
# A link target that cannot close Markdown's <...> or carry a script scheme.
_URL = re.compile(r"https?://[^\s<>\"']+")


@dataclass(frozen=True)
class Reference:
    """What the reference list shows of one source."""

    number: int
    """The source's 1-based id: marker ``[number]`` points here."""

    title: str | None
    """The source's title, else its location; ``None`` when it has neither."""

    location: str | None
    """The source's file or URL: the first non-blank of ``LOCATION_KEYS`` in its metadata."""

    url: str | None
    """An http(s) URL among the ``url``, ``source`` and ``path`` metadata, used as a link."""

    page: str | None
    """The page as a reader finds it: ``page_label`` as it is, else the 0-based ``page`` + 1."""

    snippet: str
    """The start of the source's text, white space folded (a label for an untitled source)."""

    evidence: tuple[EvidenceSpan, ...]
    """The located spans of the source that the answer's citations rest on, each once, in order
    of first citation."""


def references(
    answer: CitedAnswer,
    *,
    titles: Sequence[str | None] | None = None,
    locations: Sequence[str | None] | None = None,
    cited_only: bool = True,
) -> list[Reference]:
    """One ``Reference`` per cited source (in order of first citation), or per source.

    ``titles`` and ``locations``, one entry per source of the answer, replace what the
    metadata gives (``None`` in an entry keeps it).
    """
    if not isinstance(answer, CitedAnswer):
        raise InputTypeError(
            f"expected a CitedAnswer (what generate() returns), got {type(answer).__name__}"
        )
    titles = _per_source("titles", titles, len(answer.sources))
    locations = _per_source("locations", locations, len(answer.sources))
    spans: dict[int, dict[tuple[int, int], EvidenceSpan]] = {}
    for citation in answer.citations:
        found = spans.setdefault(citation.source_id, {})
        span = citation.evidence
        if span is not None:
            found.setdefault((span.source_start, span.source_end), span)
    numbers = answer.cited_ids if cited_only else range(1, len(answer.sources) + 1)
    return [
        _reference(
            number, answer.sources[number - 1], titles[number - 1], locations[number - 1],
            tuple(spans.get(number, {}).values()),
        )
        for number in numbers
    ]


def _per_source(
    name: str, values: Sequence[str | None] | None, n_sources: int
) -> list[str | None]:
    if values is None:
        return [None] * n_sources
    if isinstance(values, str) or not isinstance(values, Sequence):
        raise InputTypeError(
            f"{name}= takes a list with one entry per source, got {type(values).__name__}"
        )
    if len(values) != n_sources:
        raise InvalidInputError(
            f"{name}= has {len(values)} entries but the answer has {n_sources} sources; "
            "give one per source (None keeps the source's own)"
        )
    return list(values)


def _reference(
    number: int,
    source: Source,
    title: str | None,
    location: str | None,
    evidence: tuple[EvidenceSpan, ...],
) -> Reference:
    metadata = source.metadata
    location = _fold(location) or _first(metadata, LOCATION_KEYS)
    url = next(
        (
            value for value in (_first(metadata, (key,)) for key in ("url", "source", "path"))
            if value and _URL.fullmatch(value)
        ),
        None,
    )
    return Reference(
        number=number,
        title=_fold(title) or _fold(source.title) or location,
        location=location,
        url=url,
        page=_page(metadata),
        snippet=_snippet(source.text),
        evidence=evidence,
    )


def _fold(value: object) -> str | None:
    text = " ".join(str(value).split()) if value is not None else ""
    return text or None


def _first(metadata: Mapping[str, Any], keys: Sequence[str]) -> str | None:
    for key in keys:
        value = _fold(metadata.get(key))
        if value:
            return value
    return None


def _page(metadata: Mapping[str, Any]) -> str | None:
    # LlamaIndex's PDF readers store the printed label ("iv", "12"); LangChain's PDF loaders store
    # a 0-based index in "page" (and, in recent versions, the label too): the label is what a
    # reader looks for, the index is shown counted from 1.
    label = _fold(metadata.get("page_label"))
    if label:
        return label
    page = metadata.get("page")
    if isinstance(page, bool):
        return None
    if isinstance(page, int) or (isinstance(page, str) and page.strip().isdigit()):
        return str(int(page) + 1)
    return _fold(page)


def _snippet(text: str) -> str:
    flat = " ".join(text.split())
    if len(flat) <= SNIPPET_CHARS:
        return flat
    cut = flat[: SNIPPET_CHARS - 1]
    # End on a whole word when there is one to end on.
    return (cut.rsplit(" ", 1)[0] if " " in cut else cut).rstrip(" ,;:") + "…"


def _check_prefix(id_prefix: str) -> str:
    if not isinstance(id_prefix, str) or _ID_PREFIX.fullmatch(id_prefix) is None:
        raise InvalidInputError(
            f"id_prefix={id_prefix!r} cannot start an HTML id; use a letter followed by "
            "letters, digits, '-' or '_' (such as 'ref' or 'answer2-ref')"
        )
    return id_prefix


def unique_id_prefix() -> str:
    """A fresh ``id_prefix``, so that two answers shown on one page link to their own lists."""
    return f"cf{uuid.uuid4().hex[:8]}-ref"


# Markdown


def escape_markdown(text: str) -> str:
    """``text`` with the characters that start Markdown emphasis, code, links or HTML escaped."""
    # Titles and sources are data, not markup: a `*` or `[` in a file name must not start
    # emphasis or a link, and a `<script>` in a web page must not reach a renderer as HTML.
    return _MARKDOWN_SPECIAL.sub(r"\\\1", text)


def markdown_label(reference: Reference) -> str:
    """The reference's title (its text's start in quotes when untitled), linked to its URL."""
    if reference.title:
        label = escape_markdown(reference.title)
    else:
        label = f'"{escape_markdown(reference.snippet)}"'
    return f"[{label}](<{reference.url}>)" if reference.url else label


def markdown_evidence(reference: Reference) -> list[str]:
    """One list item per supporting span, quoted; a weak one is marked ``(weak support)``."""
    return [
        f'- "{escape_markdown(" ".join(span.text.split()))}"'
        + (" *(weak support)*" if span.weak else "")
        for span in reference.evidence
    ]


def to_markdown(
    answer: CitedAnswer,
    *,
    titles: Sequence[str | None] | None = None,
    locations: Sequence[str | None] | None = None,
    id_prefix: str = "ref",
    heading: str | None = "Sources",
) -> str:
    """The answer with each ``[k]`` linked to its reference, then the cited sources.

    ``[2]`` becomes ``[[2]](#ref-2)``; reference 2 is a list item holding the anchor
    ``<a id="ref-2"></a>``, its title (linked when the source has an http(s) URL), its file or
    URL when that differs from the title, its page (``page_label`` as it is, else LangChain's
    0-based ``page`` + 1) and, nested, each sentence its citations were located in, in quotes,
    marked *(weak support)* when the span shares little of the claim's wording. The answer's
    text and every source string are escaped, so neither can inject links or HTML.
    ``titles``/``locations`` (one entry per source) replace the metadata's; ``id_prefix`` makes
    the anchors unique when several answers share a page (``unique_id_prefix()``);
    ``heading=None`` leaves the heading out.
    """
    prefix = _check_prefix(id_prefix)
    refs = references(answer, titles=titles, locations=locations)
    lines = [_link_markers(answer.text.strip(), escape_markdown, _markdown_marker(prefix))]
    if refs:
        lines.append("")
        if heading:
            lines += [f"**{escape_markdown(heading)}**", ""]
        for ref in refs:
            item = f'- <a id="{prefix}-{ref.number}"></a>\\[{ref.number}\\] {markdown_label(ref)}'
            lines.append(item + "".join(f", {escape_markdown(d)}" for d in details(ref)))
            lines += ["  " + line for line in markdown_evidence(ref)]
    return "\n".join(lines) + "\n"


def _markdown_marker(prefix: str) -> Callable[[int], str]:
    return lambda number: f"[[{number}]](#{prefix}-{number})"


def details(ref: Reference, *, location: bool = True) -> list[str]:
    """What follows a reference's label, unescaped: ``page N`` after its location.

    The location is left out when the label already shows it, or with ``location=False``.
    """
    shown = []
    if location and ref.location and ref.location not in (ref.title, ref.url):
        shown.append(ref.location)
    if ref.page:
        shown.append(f"page {ref.page}")
    return shown


def _link_markers(
    text: str, escape: Callable[[str], str], marker: Callable[[int], str]
) -> str:
    # Escape the prose between markers, never the markers: escaping first would turn `[2]`
    # into `\[2\]` and leave nothing to link.
    out, last = [], 0
    for match in _MARKER.finditer(text):
        out.append(escape(text[last:match.start()]))
        out.append(marker(int(match.group(1))))
        last = match.end()
    out.append(escape(text[last:]))
    return "".join(out)


# HTML


def to_html(
    answer: CitedAnswer,
    *,
    titles: Sequence[str | None] | None = None,
    locations: Sequence[str | None] | None = None,
    id_prefix: str = "ref",
    heading: str | None = "Sources",
) -> str:
    """``to_markdown``'s content as an HTML fragment: ``<div class="citeformer-answer">``.

    ``[2]`` becomes ``<a href="#ref-2">[2]</a>``; the references are an ``<ol>`` whose items
    keep their source numbers (``<li id="ref-2" value="2">``), each with its supporting
    sentences as ``<q>`` items. All answer and source text is escaped; only an http(s) URL
    becomes an ``href``. The fragment is well-formed XML as well as HTML.
    """
    prefix = _check_prefix(id_prefix)
    refs = references(answer, titles=titles, locations=locations)

    def marker(number: int) -> str:
        return f'<a class="citeformer-marker" href="#{prefix}-{number}">[{number}]</a>'

    parts = ['<div class="citeformer-answer">']
    for paragraph in _PARAGRAPH_BREAK.split(answer.text.strip()):
        body = _link_markers(paragraph.strip(), _escape_html, marker).replace("\n", "<br/>")
        parts.append(f"<p>{body}</p>")
    if refs:
        if heading:
            parts.append(f"<p><strong>{_escape_html(heading)}</strong></p>")
        parts.append('<ol class="citeformer-references">')
        parts += [_html_reference(ref, prefix) for ref in refs]
        parts.append("</ol>")
    parts.append("</div>")
    return "\n".join(parts) + "\n"


def _escape_html(text: str) -> str:
    return html.escape(text, quote=True)


def _html_reference(ref: Reference, prefix: str) -> str:
    label = _escape_html(ref.title) if ref.title else f"&#8220;{_escape_html(ref.snippet)}&#8221;"
    if ref.url:
        label = f'<a href="{_escape_html(ref.url)}">{label}</a>'
    shown = "".join(f", {_escape_html(detail)}" for detail in details(ref))
    quotes = "".join(
        f"<li><q>{_escape_html(' '.join(span.text.split()))}</q>"
        + (' <em class="citeformer-weak">(weak support)</em>' if span.weak else "")
        + "</li>"
        for span in ref.evidence
    )
    evidence = f"<ul>{quotes}</ul>" if quotes else ""
    return f'<li id="{prefix}-{ref.number}" value="{ref.number}">{label}{shown}{evidence}</li>'
