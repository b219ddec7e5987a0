"""Reference entries in a CSL citation style (Harvard, APA, ...), formatted by citeproc-py.

A source's bibliographic metadata (the keys in ``STYLE_KEYS``) becomes one CSL-JSON item
(``csl_item``) and citeproc-py formats it in the style asked for (``format_entries``): the name of a
style shipped with citeproc-py (``shipped_styles()``) or the path of a ``.csl`` file. The entry
comes back as ``Run``s, plain text with its formatting (italic, bold, ...) beside it, so that
``citeformer.render.markup`` escapes every character itself for Markdown or HTML: nothing a title or
an author holds can become markup. A source with none of ``BIBLIOGRAPHIC_KEYS`` has no entry
(``None``) and keeps its plain label. Needs citeproc-py (citeformer's ``styles``
extra); citeproc-py is imported only when a style is used.
"""

from __future__ import annotations

import datetime
import functools
import os
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from citeformer.errors import InputTypeError, InvalidInputError, MissingDependencyError
from citeformer.types import Source

__all__ = [
    "BIBLIOGRAPHIC_KEYS",
    "CSL_TYPES",
    "FORMATS",
    "STYLE_KEYS",
    "Entry",
    "Run",
    "check_style",
    "csl_item",
    "entry_text",
    "format_entries",
    "shipped_styles",
]

STYLE_KEYS = (
    "author", "authors", "date", "year", "title", "url", "source", "publisher",
    "container_title", "journal", "doi", "type",
)
"""Metadata keys an entry is built from. ``author``/``authors``: ``"Last, First"``, several such
joined by ``" and "`` or ``";"``, or a list of them (a name without a comma, such as an
organisation, is kept as written). ``date`` (ISO ``2021-05-03``, ``2021-05``, ``2021``, or a
``datetime.date``), else ``year``. ``title``, else the source's title. ``url``, else an http(s)
``source``. ``publisher``; ``container_title``, else ``journal``; ``doi`` (a ``https://doi.org/``
prefix dropped); ``type``, a CSL item type (``CSL_TYPES``), else ``article-journal`` with a
``journal``, ``chapter`` with another container title, ``webpage`` with a URL, ``book`` with a
publisher and ``document`` otherwise."""

BIBLIOGRAPHIC_KEYS = (
    "author", "authors", "date", "year", "publisher", "container_title", "journal", "doi", "type",
)
"""A source gets an entry when its metadata holds one of these (``type`` only as a CSL type); a
title and a URL alone are what any web page or file has, and keep the plain label."""

CSL_TYPES = frozenset((
    "article", "article-journal", "article-magazine", "article-newspaper", "bill", "book",
    "broadcast", "chapter", "classic", "collection", "dataset", "document", "entry",
    "entry-dictionary", "entry-encyclopedia", "event", "figure", "graphic", "hearing",
    "interview", "legal_case", "legislation", "manuscript", "map", "motion_picture",
    "musical_score", "pamphlet", "paper-conference", "patent", "performance", "periodical",
    "personal_communication", "post", "post-weblog", "regulation", "report", "review",
    "review-book", "software", "song", "speech", "standard", "thesis", "treaty", "webpage",
))
"""The item types of CSL 1.0.2, what ``type`` may be."""

INSTALL = "pip install 'citeproc-py>=0.11'"
"""citeformer's ``styles`` extra by its package's name (``citeformer`` on PyPI is another
project)."""

FORMATS = ("italic", "bold", "underline", "small-caps", "superscript", "subscript")
"""The formatting a ``Run`` can carry."""


@dataclass(frozen=True)
class Run:
    """A stretch of an entry's text that has one formatting throughout."""

    text: str
    """Plain text, unescaped: the renderer escapes it for its output."""

    formats: frozenset[str] = frozenset()
    """The ``FORMATS`` the style gives this stretch (an empty set: upright text)."""


Entry = tuple[Run, ...]
"""One source's reference entry as the style formats it."""


def entry_text(entry: Entry) -> str:
    """The entry's text without its formatting."""
    return "".join(run.text for run in entry)


# CSL-JSON

_NAME_SEPARATOR = re.compile(r"\s*;\s*|\s+and\s+")
_ISO_DATE = re.compile(r"(\d{4})(?:-(\d{1,2})(?:-(\d{1,2}))?)?(?![\d])")
_HTTP = re.compile(r"https?://\S+")
_DOI_PREFIX = re.compile(r"^(?:https?://(?:dx\.)?doi\.org/|doi:\s*)", re.IGNORECASE)


def csl_item(source: Source, key: str, *, title: str | None = None) -> dict[str, Any] | None:
    """``source`` as a CSL-JSON item with id ``key``; ``None`` when it has no bibliographic data.

    ``title`` replaces the metadata's and the source's own title. Reads ``STYLE_KEYS``.
    """
    metadata = source.metadata
    kind = _fold(metadata.get("type"))
    kind = kind if kind in CSL_TYPES else None
    if kind is None and not any(_fold(metadata.get(k)) for k in BIBLIOGRAPHIC_KEYS if k != "type"):
        return None
    item: dict[str, Any] = {"id": key}
    authors = _names(_first_value(metadata, ("author", "authors")))
    if authors:
        item["author"] = authors
    issued = _issued(metadata)
    if issued:
        item["issued"] = issued
    texts = {
        "title": _fold(title) or _fold(metadata.get("title")) or _fold(source.title),
        "URL": _fold(metadata.get("url")) or _http(metadata.get("source")),
        "publisher": _fold(metadata.get("publisher")),
        "container-title": _fold(metadata.get("container_title")) or _fold(metadata.get("journal")),
        "DOI": _DOI_PREFIX.sub("", _fold(metadata.get("doi")) or "") or None,
    }
    item.update({name: value for name, value in texts.items() if value})
    item["type"] = kind or (
        "article-journal" if _fold(metadata.get("journal"))
        else "chapter" if "container-title" in item
        else "webpage" if "URL" in item
        else "book" if "publisher" in item
        else "document"
    )
    return item


def _fold(value: object) -> str | None:
    # The sentinels are how the formatter marks italics and the like: a value that held them
    # could forge formatting, so they go, with the white space folded.
    text = " ".join(str(value).split()).translate(_NO_SENTINELS) if value is not None else ""
    return text or None


def _first_value(metadata: Mapping[str, Any], keys: Sequence[str]) -> object:
    for key in keys:
        value = metadata.get(key)
        if value is not None and value != "" and value != []:
            return value
    return None


def _http(value: object) -> str | None:
    text = _fold(value)
    return text if text and _HTTP.fullmatch(text) else None


def _names(value: object) -> list[dict[str, str]]:
    if value is None:
        return []
    parts = value if isinstance(value, (list, tuple)) else _NAME_SEPARATOR.split(str(value))
    names = []
    for part in parts:
        name = _fold(part)
        if not name:
            continue
        family, comma, given = name.partition(",")
        if comma and family.strip():
            names.append({"family": family.strip(), "given": given.strip()})
        else:
            # "World Health Organization" has no given name to abbreviate: keep it whole.
            names.append({"literal": name})
    return names


def _issued(metadata: Mapping[str, Any]) -> dict[str, Any] | None:
    for key in ("date", "year"):
        value = metadata.get(key)
        if isinstance(value, bool) or value is None:
            continue
        if isinstance(value, datetime.date):
            return {"date-parts": [[value.year, value.month, value.day]]}
        text = _fold(value)
        if not text:
            continue
        match = _ISO_DATE.match(text)
        if match:
            year, month, day = (int(part) if part else 0 for part in match.groups())
            # A month or day out of range is dropped, not passed on: the style has no name
            # for month 13.
            parts = [year]
            if 1 <= month <= 12:
                parts.append(month)
                if 1 <= day <= 31:
                    parts.append(day)
            return {"date-parts": [parts]}
        return {"literal": text}
    return None


# Styles


def shipped_styles() -> list[str]:
    """The names of the CSL styles that come with citeproc-py."""
    return sorted(path.stem for path in _styles_path().glob("*.csl"))


def check_style(style: object) -> Path:
    """The CSL file ``style`` names: a style shipped with citeproc-py, or a ``.csl`` path.

    Raises ``InputTypeError`` for a value that is neither a string nor a path,
    ``InvalidInputError`` for an unknown name or a missing file, and ``MissingDependencyError`` when
    citeproc-py is not installed.
    """
    if not isinstance(style, (str, os.PathLike)):
        raise InputTypeError(
            f"style= takes a style name or the path of a .csl file, got {type(style).__name__}"
        )
    text = os.fspath(style)
    if not isinstance(text, str):
        raise InputTypeError(f"style= takes a text path, got bytes {text!r}")
    _import_citeproc()  # before looking for the file: a path is no use without it either
    if isinstance(style, os.PathLike) or text.endswith(".csl") or "/" in text or os.sep in text:
        path = Path(text).expanduser()
        if not path.is_file():
            raise InvalidInputError(f"style={text!r}: there is no CSL file at {str(path)!r}")
        return path
    path = _styles_path() / f"{text.strip()}.csl"
    if not text.strip() or not path.is_file():
        names = ", ".join(repr(name) for name in shipped_styles()[:5])
        raise InvalidInputError(
            f"style={text!r} is not a CSL style shipped with citeproc-py (those are: {names}); "
            "give one of those names or the path of a .csl file, such as one from "
            "https://github.com/citation-style-language/styles"
        )
    return path


def format_entries(
    sources: Sequence[Source],
    style: str | os.PathLike[str],
    *,
    titles: Sequence[str | None] | None = None,
) -> list[Entry | None]:
    """Each source's reference entry in ``style``; ``None`` for a source with no bibliographic data.

    ``titles``, one per source, replace the sources' titles (``None`` keeps one). Each source is
    formatted on its own: the numbering is citeformer's, so an author-date style's ``2021a``/
    ``2021b`` would tell a reader nothing.
    """
    path = check_style(style)
    csl = _load(str(path.resolve()), path.stat().st_mtime_ns)
    titles = titles if titles is not None else [None] * len(sources)
    if len(titles) != len(sources):
        raise InvalidInputError(
            f"titles= has {len(titles)} entries for {len(sources)} sources; give one per source"
        )
    entries: list[Entry | None] = []
    for source, title in zip(sources, titles, strict=True):
        item = csl_item(source, "item", title=title)
        entries.append(None if item is None else _runs(_render(csl, item)))
    return entries


def _import_citeproc() -> Any:
    try:
        import citeproc
    except ImportError as error:
        raise MissingDependencyError(
            f"citation styles need citeproc-py, which is not installed ({error}); run `{INSTALL}`"
        ) from error
    return citeproc


def _styles_path() -> Path:
    return Path(_import_citeproc().STYLES_PATH)


@functools.lru_cache(maxsize=32)
def _load(path: str, mtime_ns: int) -> Any:
    # Keyed on the modification time as well, so an edited .csl file is read again.
    from citeproc import CitationStylesStyle

    try:
        # The schema check only warns, and citeproc-py's copy of the schema predates some
        # valid styles: skip it.
        csl = CitationStylesStyle(path, validate=False)
    except Exception as error:  # lxml's syntax errors, citeproc's ValueErrors, a non-CSL file
        raise InvalidInputError(
            f"style={path!r} is not a CSL style citeproc-py can read: {error}"
        ) from error
    if not csl.has_bibliography():
        raise InvalidInputError(
            f"style={path!r} has no <bibliography> to format reference entries with; "
            "give a style that formats a reference list"
        )
    return csl


# A style object holds the formatter and, while it renders, which variables are substituted:
# one render at a time.
_render_lock = threading.Lock()


def _render(csl: Any, item: dict[str, Any]) -> str:
    from citeproc import Citation, CitationItem, CitationStylesBibliography
    from citeproc.source.json import CiteProcJSON

    with _render_lock:
        bibliography = CitationStylesBibliography(csl, CiteProcJSON([item]), _formatter())
        bibliography.register(Citation([CitationItem(item["id"])]))
        (entry,) = bibliography.bibliography()
        return str(entry)


# Formatting travels through citeproc as private-use characters around the text it applies to:
# citeproc upper- and title-cases, initialises and joins text, which would break escapes or tags
# put in beforehand; these characters have no case and are removed from every input value.
_OPEN = {name: chr(0xE000 + 2 * i) for i, name in enumerate(FORMATS)}
_CLOSE = {name: chr(0xE001 + 2 * i) for i, name in enumerate(FORMATS)}
_SENTINELS = {**{c: (name, True) for name, c in _OPEN.items()},
              **{c: (name, False) for name, c in _CLOSE.items()}}
_NO_SENTINELS = dict.fromkeys(map(ord, _SENTINELS))


@functools.cache
def _formatter() -> Any:
    # What citeproc calls a formatter (its html and plain modules are two): text stays as it
    # is, each kind of formatting becomes a pair of sentinels.
    from types import SimpleNamespace

    from citeproc.string import String

    def wrap(name: str) -> Any:
        return lambda text: String(f"{_OPEN[name]}{text}{_CLOSE[name]}")

    return SimpleNamespace(
        preformat=str, Italic=wrap("italic"), Oblique=wrap("italic"), Bold=wrap("bold"),
        # Light type has no Markdown or HTML element: shown as regular type.
        Light=str, Underline=wrap("underline"), SmallCaps=wrap("small-caps"),
        Superscript=wrap("superscript"), Subscript=wrap("subscript"),
    )


def _runs(rendered: str) -> Entry:
    depth = dict.fromkeys(FORMATS, 0)
    runs: list[Run] = []
    text: list[str] = []

    def flush() -> None:
        if text:
            formats = frozenset(name for name, count in depth.items() if count > 0)
            if runs and runs[-1].formats == formats:
                runs[-1] = Run(runs[-1].text + "".join(text), formats)
            else:
                runs.append(Run("".join(text), formats))
            text.clear()

    for char in rendered:
        if char in _SENTINELS:
            flush()
            name, opens = _SENTINELS[char]
            depth[name] = max(depth[name] + (1 if opens else -1), 0)
        else:
            text.append(char)
    flush()
    return tuple(runs)
