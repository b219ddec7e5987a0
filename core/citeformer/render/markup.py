"""An answer as Markdown or HTML: linked markers, then the cited sources as a reference list.

Each reference shows the source's title, its file or URL, its page and the sentences of it that
the answer's citations were located in (``Citation.evidence``), so a reader can check a claim
without opening the source. Titles, locations and pages come from a source's ``title`` and
``metadata``; the metadata keys read are ``LOCATION_KEYS`` and ``page_label``/``page``. With
``style=``, a source's bibliographic metadata is formatted as an entry in that CSL citation style
(``citeformer.render.styles``), which takes the title's place.
"""

from __future__ import annotations

import html
import os
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from citeformer.errors import InputTypeError, InvalidInputError
from citeformer.grammar.markers import MARKER
from citeformer.render.styles import FORMATS, Entry, Run, entry_text, format_entries
from citeformer.types import CUT_NOTE, CitedAnswer, EvidenceSpan, Source

__all__ = [
    "LOCATION_KEYS",
    "SNIPPET_CHARS",
    "Reference",
    "details",
    "escape_markdown",
    "evidence_by_source",
    "markdown_evidence",
    "markdown_reference",
    "references",
    "to_html",
    "to_markdown",
    "unique_id_prefix",
    "untitled_label",
]

LOCATION_KEYS = ("path", "source", "file_name", "url")
"""Metadata keys a source's file or URL is read from, in order."""

SNIPPET_CHARS = 80
"""A source with neither title nor location is labelled by this many characters of its text."""

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
    """The located spans of the source that the answer's citations rest on, in order of first
    citation (``evidence_by_source``: a sentence twice where it backs one claim well and another
    weakly)."""

    entry: Entry | None = None
    """The source's bibliographic entry in the ``style=`` asked for, shown instead of the title;
    ``None`` without a style, or for a source without bibliographic metadata (the title is
    shown)."""


def references(
    answer: CitedAnswer,
    *,
    titles: Sequence[str | None] | None = None,
    locations: Sequence[str | None] | None = None,
    cited_only: bool = True,
    style: str | os.PathLike[str] | None = None,
) -> list[Reference]:
    """One ``Reference`` per cited source (in order of first citation), or per source.

    ``titles`` and ``locations``, one entry per source of the answer, replace what the
    metadata gives (``None`` in an entry keeps it). ``style``, a CSL style's name or the path of
    a ``.csl`` file, fills in each reference's ``entry`` (see ``citeformer.render.styles``).
    """
    if not isinstance(answer, CitedAnswer):
        raise InputTypeError(
            f"expected a CitedAnswer (what generate() returns), got {type(answer).__name__}"
        )
    titles = _per_source("titles", titles, len(answer.sources))
    locations = _per_source("locations", locations, len(answer.sources))
    spans = evidence_by_source(answer)
    numbers = list(answer.cited_ids if cited_only else range(1, len(answer.sources) + 1))
    entries: list[Entry | None] = (
        format_entries(
            [answer.sources[number - 1] for number in numbers], style,
            titles=[titles[number - 1] for number in numbers],
        )
        if style is not None
        else [None] * len(numbers)
    )
    return [
        _reference(
            number, answer.sources[number - 1], titles[number - 1], locations[number - 1],
            tuple(spans.get(number, ())), entry,
        )
        for number, entry in zip(numbers, entries, strict=True)
    ]


def evidence_by_source(answer: CitedAnswer) -> dict[int, list[EvidenceSpan]]:
    """Each cited source's evidence spans, in the order the answer's citations found them.

    A sentence that backs several claims is listed once for those it supports and once, flagged,
    for those it supports weakly (with the weakest score): a weak claim is never hidden behind a
    strong one that cites the same sentence.
    """
    spans: dict[int, dict[tuple[int, int, bool], EvidenceSpan]] = {}
    for citation in answer.citations:
        found = spans.setdefault(citation.source_id, {})
        span = citation.evidence
        if span is None:
            continue
        key = (span.source_start, span.source_end, span.weak)
        if key not in found or span.score < found[key].score:
            found[key] = span
    return {number: list(found.values()) for number, found in spans.items()}


def untitled_label(reference: Reference) -> str | None:
    """The label of a source with neither title nor location: the start of its text.

    ``None`` (shown as "untitled source") where a quote of its evidence shows that text already.
    """
    start = reference.snippet.rstrip("…")[:40]
    for span in reference.evidence:
        quote = " ".join(span.text.split())
        if quote.startswith(start) or start.startswith(quote[:40]):
            return None
    return reference.snippet


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
    entry: Entry | None,
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
        entry=entry,
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


def markdown_reference(reference: Reference, *, location: bool = True) -> str:
    """The reference's label, then its ``details`` after commas: the text of its list item."""
    shown = details(reference, location=location)
    label = _markdown_label(reference, followed=bool(shown))
    return label + "".join(f", {escape_markdown(detail)}" for detail in shown)


def _markdown_label(reference: Reference, *, followed: bool) -> str:
    if reference.entry:
        return _entry_markup(
            reference.entry, reference.url, escape_markdown, _markdown_formatting,
            lambda url: f"<{url}>", followed=followed,
        )
    if reference.title:
        label = escape_markdown(reference.title)
    elif (snippet := untitled_label(reference)) is None:
        label = "untitled source"
    else:
        label = f'"{escape_markdown(snippet)}"'
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
    style: str | os.PathLike[str] | None = None,
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
    ``heading=None`` leaves the heading out. ``style=``, a CSL style shipped with citeproc-py
    (``"harvard-cite-them-right"``) or the path of a ``.csl`` file, shows each source that has
    bibliographic metadata as an entry in that style in place of its title (see
    ``citeformer.render.styles``); a source without keeps its title. Needs ``citeformer[styles]``.
    """
    prefix = _check_prefix(id_prefix)
    refs = references(answer, titles=titles, locations=locations, style=style)
    lines = [_link_markers(
        answer.text.strip(), len(answer.sources), escape_markdown, _markdown_marker(prefix)
    ) + (f" *{CUT_NOTE}*" if answer.finish_reason == "length" else "")]
    if refs:
        lines.append("")
        if heading:
            lines += [f"**{escape_markdown(heading)}**", ""]
        for ref in refs:
            anchor = f'<a id="{prefix}-{ref.number}"></a>'
            lines.append(f"- {anchor}\\[{ref.number}\\] {markdown_reference(ref)}")
            lines += ["  " + line for line in markdown_evidence(ref)]
    return "\n".join(lines) + "\n"


def _markdown_marker(prefix: str) -> Callable[[int], str]:
    return lambda number: f"[[{number}]](#{prefix}-{number})"


def details(ref: Reference, *, location: bool = True) -> list[str]:
    """What follows a reference's label, unescaped: ``page N`` after its location.

    The location is left out when the label already shows it, or with ``location=False``.
    """
    shown = []
    if location and ref.location and not _labelled(ref, ref.location):
        shown.append(ref.location)
    if ref.page:
        shown.append(f"page {ref.page}")
    return shown


def _labelled(ref: Reference, text: str) -> bool:
    # The label shows the URL in every case: as the title's link, or in or after the entry.
    if ref.entry:
        return text == ref.url or text in entry_text(ref.entry)
    return text in (ref.title, ref.url)


def _entry_markup(
    entry: Entry,
    url: str | None,
    escape: Callable[[str], str],
    formatting: Callable[[frozenset[str]], tuple[str, str]],
    link: Callable[[str], str],
    *,
    followed: bool,
) -> str:
    # Every character of the entry is escaped; the only markup is what `formatting` and `link`
    # give, the link only for the reference's checked http(s) URL.
    appended = url is not None and url not in entry_text(entry)
    if followed and not appended:
        entry = _without_final_period(entry)
    out = []
    for run in entry:
        core = run.text.strip()
        lead = run.text[: len(run.text) - len(run.text.lstrip())]
        trail = run.text[len(core) + len(lead):]
        pieces = core.split(url) if url else [core]
        body = link(url).join(map(escape, pieces)) if url else escape(core)
        start, end = formatting(run.formats) if core else ("", "")
        out.append(f"{escape(lead)}{start}{body}{end}{escape(trail)}")
    if url and appended:
        out.append(f" {link(url)}")
    return "".join(out)


def _without_final_period(entry: Entry) -> Entry:
    # Details follow an entry after a comma, as they follow a title: "Available at: URL, page 3"
    # rather than "URL., page 3". An ellipsis stays.
    last = entry[-1] if entry else None
    if last is None or not last.text.endswith(".") or last.text.endswith(".."):
        return entry
    return (*entry[:-1], Run(last.text[:-1], last.formats))


def _markdown_formatting(formats: frozenset[str]) -> tuple[str, str]:
    # Markdown has italics and bold only; underline, small capitals and the rest show as text.
    marks = ("*" if "italic" in formats else "") + ("**" if "bold" in formats else "")
    return marks, marks[::-1]


_HTML_TAGS = {
    "italic": ("<i>", "</i>"),
    "bold": ("<b>", "</b>"),
    "underline": ("<u>", "</u>"),
    "small-caps": ('<span style="font-variant:small-caps">', "</span>"),
    "superscript": ("<sup>", "</sup>"),
    "subscript": ("<sub>", "</sub>"),
}


def _html_formatting(formats: frozenset[str]) -> tuple[str, str]:
    names = [name for name in FORMATS if name in formats]
    return (
        "".join(_HTML_TAGS[name][0] for name in names),
        "".join(_HTML_TAGS[name][1] for name in reversed(names)),
    )


def _link_markers(
    text: str, n_sources: int, escape: Callable[[str], str], marker: Callable[[int], str]
) -> str:
    # Escape the prose between markers, never the markers: escaping first would turn `[2]`
    # into `\[2\]` and leave nothing to link. A marker that names no source (an unconstrained
    # answer's `[7]` of 3) stays text: a link to it would lead nowhere.
    out, last = [], 0
    for match in MARKER.finditer(text):
        digits = match.group(1)
        if digits.startswith("0") or len(digits) > 6 or int(digits) > n_sources:
            continue
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
    style: str | os.PathLike[str] | None = None,
) -> str:
    """``to_markdown``'s content as an HTML fragment: ``<div class="citeformer-answer">``.

    ``[2]`` becomes ``<a href="#ref-2">[2]</a>``; the references are an ``<ol>`` whose items
    keep their source numbers (``<li id="ref-2" value="2">``), each with its supporting
    sentences as ``<q>`` items. All answer and source text is escaped; only an http(s) URL
    becomes an ``href``. The fragment is well-formed XML as well as HTML. ``style=`` formats
    the references as ``to_markdown``'s does, with ``<i>``, ``<b>`` and the like for the
    style's formatting.
    """
    prefix = _check_prefix(id_prefix)
    refs = references(answer, titles=titles, locations=locations, style=style)

    def marker(number: int) -> str:
        return f'<a class="citeformer-marker" href="#{prefix}-{number}">[{number}]</a>'

    parts = ['<div class="citeformer-answer">']
    paragraphs = _PARAGRAPH_BREAK.split(answer.text.strip())
    for number, paragraph in enumerate(paragraphs, start=1):
        body = _link_markers(
            paragraph.strip(), len(answer.sources), _escape_html, marker
        ).replace("\n", "<br/>")
        if number == len(paragraphs) and answer.finish_reason == "length":
            body += f' <em class="citeformer-cut">{_escape_html(CUT_NOTE)}</em>'
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


def _html_link(url: str, label: str | None = None) -> str:
    """``url`` as a link around ``label`` (HTML already), else around the URL itself."""
    return f'<a href="{_escape_html(url)}">{_escape_html(url) if label is None else label}</a>'


def _html_reference(ref: Reference, prefix: str) -> str:
    shown = details(ref)
    if ref.entry:
        label = _entry_markup(
            ref.entry, ref.url, _escape_html, _html_formatting, _html_link, followed=bool(shown)
        )
    else:
        if ref.title:
            label = _escape_html(ref.title)
        elif (snippet := untitled_label(ref)) is None:
            label = "untitled source"
        else:
            label = f"&#8220;{_escape_html(snippet)}&#8221;"
        if ref.url:
            label = _html_link(ref.url, label)
    label += "".join(f", {_escape_html(detail)}" for detail in shown)
    quotes = "".join(
        f"<li><q>{_escape_html(' '.join(span.text.split()))}</q>"
        + (' <em class="citeformer-weak">(weak support)</em>' if span.weak else "")
        + "</li>"
        for span in ref.evidence
    )
    evidence = f"<ul>{quotes}</ul>" if quotes else ""
    return f'<li id="{prefix}-{ref.number}" value="{ref.number}">{label}{evidence}</li>'
