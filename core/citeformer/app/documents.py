"""Loading the documents named by ``--docs`` and cutting them into located passages.

``load_documents`` reads ``.txt`` and ``.md`` files as UTF-8, ``.html``/``.htm`` pages as the text
a browser shows (``citeformer.app.html_text``) and ``.pdf`` files page by page with pypdf
(``citeformer.app.pdf_text``), from files and folders (recursively, in sorted order, hidden files
and folders skipped). A path that does not exist, a symlink loop, a folder that cannot be read or
has no document in it, or a file named on its own that cannot be used (binary, not UTF-8, empty,
unreadable; a PDF that is encrypted, corrupt or only images) raises ``DocumentError``. A file
*found inside a folder* that cannot be used, and a subfolder that cannot be read, are skipped with
a warning instead: a folder is a collection, and one stray entry should not stop a question about
the rest (if nothing readable is left, that is an error too). Symlinked subfolders are not
followed, so a link back up the tree cannot make the walk endless.

Every passage keeps exact offsets into its document's text (for HTML and PDF, the extracted
text), the line a reader finds it on (an HTML page's line in the ``.html`` file; a PDF's line
counted within its page) and, for a PDF, the pages it spans (``page`` and ``page_end``).
"""

from __future__ import annotations

import codecs
import errno
import functools
import os
import re
import warnings
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from citeformer import Source
from citeformer.app.chunking import DEFAULT_MAX_CHARS, chunk_text
from citeformer.app.errors import DocumentError
from citeformer.app.html_text import LineMap, html_to_text
from citeformer.app.pdf_text import page_of, pdf_to_text

TEXT_SUFFIXES = (".txt", ".md")
HTML_SUFFIXES = (".html", ".htm")
PDF_SUFFIXES = (".pdf",)
DOCUMENT_SUFFIXES = (*TEXT_SUFFIXES, *HTML_SUFFIXES, *PDF_SUFFIXES)
"""File name endings ``load_documents`` picks up inside folders (case-insensitive)."""

Warn = Callable[[str], None]

__all__ = [
    "DOCUMENT_SUFFIXES",
    "Document",
    "DocumentError",
    "Location",
    "Passage",
    "chunk_documents",
    "load_documents",
]


@dataclass(frozen=True)
class Document:
    """A loaded document; ``path`` is as the user named it (a folder's files under that name)."""

    path: str
    text: str
    """The text passages are cut from: the file's, or the text extracted from an HTML or PDF."""
    title: str | None = None
    """An HTML page's ``<title>``; ``None``: the file name stands for it."""
    page_starts: tuple[int, ...] = field(default=(), repr=False)
    """A PDF's: the offset in ``text`` where each page begins (empty: not paged)."""
    line_map: LineMap | None = field(default=None, repr=False)
    """An HTML page's: the ``.html`` file line of each stretch of ``text``."""

    @property
    def name(self) -> str:
        """The file name, without its folder."""
        return Path(self.path).name

    def page_of(self, offset: int) -> int | None:
        """The 1-based page holding ``text[offset]``; ``None`` for an unpaged document."""
        return page_of(self.page_starts, offset) if self.page_starts else None

    def line_of(self, offset: int) -> int:
        """The 1-based line a reader finds ``text[offset]`` on.

        The file's line for a text file or an HTML page, the line within its page for a PDF.
        """
        if self.line_map is not None:
            return self.line_map.line_of(offset)
        line = bisect_left(self._newlines, offset) + 1
        page = self.page_of(offset)
        if page is not None:
            line -= bisect_left(self._newlines, self.page_starts[page - 1])
        return line

    @functools.cached_property
    def _newlines(self) -> list[int]:
        return [match.start() for match in re.finditer("\n", self.text)]


@dataclass(frozen=True)
class Location:
    """Where a stretch of a passage lies in its document."""

    path: str
    file_start: int
    """Offset in the document's text (the file's, or the text extracted from it)."""
    file_end: int
    line: int
    """The 1-based line it begins on (for a PDF, within its page)."""
    page: int | None
    """The 1-based page it begins on; ``None`` for an unpaged document."""

    def describe(self, *, path: bool = True) -> str:
        """``path, line 3``, or ``path, page 2, line 5`` for a PDF; ``path=False``: ``line 3``."""
        parts = [self.path] if path else []
        if self.page is not None:
            parts.append(f"page {self.page}")
        return ", ".join([*parts, f"line {self.line}"])

    def as_dict(self) -> dict[str, Any]:
        """``path``, ``file_start``, ``file_end``, ``line`` and ``page``."""
        return {
            "path": self.path, "file_start": self.file_start, "file_end": self.file_end,
            "line": self.line, "page": self.page,
        }


@dataclass(frozen=True)
class Passage:
    """One chunk of one document, with what the reference list needs to locate it."""

    path: str
    text: str
    start: int
    end: int
    line_start: int
    line_end: int
    page: int | None = None
    """The page the passage begins on (a PDF's); ``None`` for an unpaged document."""
    page_end: int | None = None
    """The page it ends on: ``page`` but for a passage packed across a page break."""
    title: str | None = None
    """The document's title; ``None``: the file name."""
    document: Document | None = field(default=None, repr=False, compare=False)
    """The document the passage was cut from, which locates offsets within it."""

    @property
    def location(self) -> str:
        """``path, line 3``, ``path, lines 3-7``, or ``path, page 2`` (``pages 2-3``) for a PDF."""
        if self.page is not None:
            return f"{self.path}, {self.pages}"
        if self.line_start == self.line_end:
            return f"{self.path}, line {self.line_start}"
        return f"{self.path}, lines {self.line_start}-{self.line_end}"

    @property
    def pages(self) -> str:
        """``page 2``, or ``pages 2-3`` for a passage across a page break; ``""`` unpaged."""
        if self.page is None:
            return ""
        if self.page_end is None or self.page_end == self.page:
            return f"page {self.page}"
        return f"pages {self.page}-{self.page_end}"

    def locate(self, source_start: int, source_end: int) -> Location:
        """Where ``text[source_start:source_end]`` lies in the document."""
        file_start = self.start + source_start
        if self.document is None:
            line = self.line_start + self.text.count("\n", 0, source_start)
            page = self.page
        else:
            line = self.document.line_of(file_start)
            page = self.document.page_of(file_start)
        return Location(self.path, file_start, self.start + source_end, line, page)

    def to_source(self, **extra: Any) -> Source:
        """The passage as a ``Source``: titled by its document, located by its metadata."""
        metadata = {
            "path": self.path,
            "start": self.start,
            "end": self.end,
            "line_start": self.line_start,
            "line_end": self.line_end,
            "page": self.page,
            "page_end": self.page_end,
            **extra,
        }
        return Source(self.text, title=self.title or Path(self.path).name, metadata=metadata)


def load_documents(paths: Iterable[str | Path], *, warn: Warn | None = None) -> list[Document]:
    """Read the documents at ``paths`` (files or folders, recursively).

    Raises ``DocumentError`` for a path that cannot be used (see the module docstring) or when
    nothing readable is found. Entries of folders that cannot be used are skipped, and ``warn``
    (default: ``warnings.warn``) is called with a message for each. A file reached twice is read
    once.
    """
    warn = warn or _warn
    documents: list[Document] = []
    seen: set[Path] = set()
    names = [paths] if isinstance(paths, (str, Path)) else list(paths)
    if not names:
        raise DocumentError("no document paths were given")
    for name in names:
        path = Path(name)
        _check_exists(path, str(name))
        if path.is_dir():
            found = list(_walk(path, warn))
            if not found:
                raise DocumentError(
                    f"folder {str(name)!r} has no documents ({', '.join(DOCUMENT_SUFFIXES)} "
                    "files)"
                )
            for file in found:
                if file.resolve() in seen:
                    continue
                try:
                    documents.append(_valid_unicode(_read(file), warn))
                except DocumentError as error:
                    warn(f"skipping {error}")
                seen.add(file.resolve())
        elif path.is_file():
            if path.resolve() not in seen:
                documents.append(_valid_unicode(_read(path), warn))
                seen.add(path.resolve())
        else:
            raise DocumentError(f"{str(name)!r} is neither a file nor a folder")
    if not documents:
        raise DocumentError("none of the documents could be read (see the warnings above)")
    return documents


def chunk_documents(
    documents: Iterable[Document], max_chars: int = DEFAULT_MAX_CHARS
) -> list[Passage]:
    """All passages of ``documents``, in document order."""
    return [
        Passage(
            doc.path, span.text, span.start, span.end,
            line_start=doc.line_of(span.start), line_end=doc.line_of(span.end - 1),
            page=doc.page_of(span.start), page_end=doc.page_of(span.end - 1), title=doc.title,
            document=doc,
        )
        for doc in documents
        for span in chunk_text(doc.text, max_chars)
    ]


def _check_exists(path: Path, name: str) -> None:
    try:
        os.stat(path)
    except OSError as error:
        raise DocumentError(f"{name!r} {_why_missing(path, error)}") from None


def _why_missing(path: Path, error: OSError) -> str:
    if error.errno == errno.ELOOP:
        return "is a symlink loop (it points back at itself); fix or remove the link"
    if path.is_symlink():
        return f"is a broken symlink (its target {os.readlink(path)!r} does not exist)"
    if isinstance(error, PermissionError):
        return "cannot be reached: permission denied on a folder above it"
    if error.errno in (errno.ENOENT, errno.ENOTDIR):
        return "does not exist"
    return f"cannot be used: {error.strerror or error}"


def _walk(folder: Path, warn: Warn) -> Iterator[Path]:
    """The document files under ``folder``, in the order of their sorted path parts.

    A subfolder that cannot be listed is skipped with a warning; ``folder`` itself raises.
    """
    try:
        entries = _entries(folder)
    except OSError as error:
        raise DocumentError(f"folder {str(folder)!r} {_why_unlistable(error)}") from None
    yield from _walk_entries(entries, warn)


def _walk_entries(entries: list[os.DirEntry[str]], warn: Warn) -> Iterator[Path]:
    for entry in entries:
        if entry.name.startswith("."):
            continue
        path = Path(entry.path)
        if _is_folder(entry):
            try:
                children = _entries(path)
            except OSError as error:
                warn(f"skipping folder {str(path)!r}: it {_why_unlistable(error)}")
                continue
            yield from _walk_entries(children, warn)
        elif path.suffix.lower() in DOCUMENT_SUFFIXES:
            if _is_file(entry):
                yield path
            elif entry.is_symlink() and (problem := _link_problem(path)) is not None:
                warn(f"skipping {str(path)!r}: it {problem}")


def _entries(folder: Path) -> list[os.DirEntry[str]]:
    with os.scandir(folder) as entries:
        return sorted(entries, key=lambda entry: entry.name)


def _is_folder(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir(follow_symlinks=False)
    except OSError:
        return False


def _is_file(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_file()
    except OSError:
        return False


def _link_problem(path: Path) -> str | None:
    try:
        os.stat(path)
    except OSError as error:
        return _why_missing(path, error)
    return None  # a link to something that is not a file, such as a folder: not a document


def _why_unlistable(error: OSError) -> str:
    if isinstance(error, PermissionError):
        return "cannot be read: permission denied; check its permissions (ls -ld)"
    return f"cannot be read: {error.strerror or error}"


def _read(path: Path) -> Document:
    try:
        data = path.read_bytes()
    except OSError as error:
        raise DocumentError(f"{str(path)!r} cannot be read: {error.strerror or error}") from None
    suffix = path.suffix.lower()
    if suffix in PDF_SUFFIXES or data.startswith(b"%PDF-"):
        pdf = pdf_to_text(data, str(path))
        return Document(str(path), pdf.text, page_starts=pdf.page_starts)
    if b"\x00" in data[:8192]:
        raise DocumentError(f"{str(path)!r} is a binary file, not text")
    if suffix in HTML_SUFFIXES:
        page = html_to_text(_decode(path, data, _declared_charset(data)))
        if not page.text.strip():
            raise DocumentError(f"{str(path)!r} has no text outside its markup")
        return Document(str(path), page.text, title=page.title, line_map=page.lines)
    text = _decode(path, data, None)
    if not text.strip():
        raise DocumentError(f"{str(path)!r} is empty")
    return Document(str(path), text)


def _decode(path: Path, data: bytes, charset: str | None) -> str:
    encoding = "utf-8-sig" if charset is None or data.startswith(codecs.BOM_UTF8) else charset
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as error:
        name = "UTF-8" if encoding == "utf-8-sig" else encoding
        raise DocumentError(
            f"{str(path)!r} is not {name} text (undecodable byte at offset {error.start}); "
            "convert it to UTF-8"
        ) from None


_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?([A-Za-z0-9_.:-]+)""", re.IGNORECASE)


_BROWSER_CODECS = {
    **{name: name for name in (
        "utf-8", "cp866", "iso8859-2", "iso8859-3", "iso8859-4", "iso8859-5", "iso8859-6",
        "iso8859-7", "iso8859-8", "iso8859-10", "iso8859-13", "iso8859-14", "iso8859-15",
        "iso8859-16", "koi8-r", "koi8-u", "mac-roman", "mac-cyrillic", "cp874", "cp1250",
        "cp1251", "cp1252", "cp1253", "cp1254", "cp1255", "cp1256", "cp1257", "cp1258",
        "gb18030", "big5hkscs", "euc_jp", "iso2022_jp", "cp932", "cp949",
    )},
    # Names that browsers read as a wider encoding than Python's of the same name.
    "ascii": "cp1252", "iso8859-1": "cp1252", "iso8859-9": "cp1254", "iso8859-11": "cp874",
    "tis-620": "cp874", "gb2312": "gb18030", "gbk": "gb18030", "big5": "big5hkscs",
    "shift_jis": "cp932", "euc_kr": "cp949",
    # A page whose <meta> reads as ASCII is not UTF-16, whatever the <meta> says.
    "utf-16": "utf-8", "utf-16-le": "utf-8", "utf-16-be": "utf-8",
}
"""Python's codec name for each encoding of the WHATWG Encoding Standard (the encodings browsers
decode pages in) and the codec that decodes it as a browser does. Python knows other codecs by
name (``base64``, ``rot13``, ``unicode_escape``, ``utf-7``, EBCDIC) that no browser reads a page
in: a ``<meta>`` naming one declares no charset."""

_BROWSER_LABELS = {
    "windows-874": "cp874", "x-mac-cyrillic": "mac-cyrillic", "x-mac-roman": "mac-roman",
    "windows-31j": "cp932", "iso-8859-8-i": "iso8859-8", "x-user-defined": "cp1252",
}
"""Labels of the Encoding Standard that Python does not know."""


def _declared_charset(data: bytes) -> str | None:
    """The codec for the encoding an HTML page declares in a ``<meta>`` near its top.

    ``None`` (read as UTF-8) when it declares none, or names no encoding a browser reads pages in.
    """
    match = _CHARSET.search(data[:4096])
    if match is None:
        return None
    label = match.group(1).decode("ascii").lower()
    if label in _BROWSER_LABELS:
        return _BROWSER_LABELS[label]
    try:
        name = codecs.lookup(label).name
    except LookupError:
        return None
    return _BROWSER_CODECS.get(name)


_SURROGATE = re.compile("[\ud800-\udfff]")


def _valid_unicode(document: Document, warn: Warn) -> Document:
    """``document`` with its name, title and text made valid Unicode; one warning if they were not.

    A file name that is not UTF-8 (Latin-1 bytes on a UTF-8 system) reaches Python as lone
    surrogates (``os.fsdecode``), and so can a PDF's text; no encoder, tokenizer or terminal takes
    them. Each undecodable byte of the name, and each lone surrogate, is read as U+FFFD.
    """
    try:
        path = os.fsencode(document.path).decode("utf-8", "replace")
    except UnicodeEncodeError:  # a surrogate that no byte decodes to
        path = _SURROGATE.sub("\ufffd", document.path)
    title = None if document.title is None else _SURROGATE.sub("\ufffd", document.title)
    text = _SURROGATE.sub("\ufffd", document.text)
    if (path, title, text) == (document.path, document.title, document.text):
        return document
    what = [
        part for part, changed in (
            ("its name is not valid UTF-8", path != document.path),
            ("its text holds characters that are not valid Unicode (lone surrogates)",
             (title, text) != (document.title, document.text)),
        ) if changed
    ]
    warn(f"{path!r}: {' and '.join(what)}; each such character is read as U+FFFD")
    return replace(document, path=path, title=title, text=text)


def _warn(message: str) -> None:
    warnings.warn(message, stacklevel=3)
