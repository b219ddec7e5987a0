"""Loading the ``.txt``/``.md`` files named by ``--docs`` and cutting them into passages.

``load_documents`` reads ``.txt`` and ``.md`` files from files and folders (recursively, in
sorted order, hidden files and folders skipped) as UTF-8. A path that does not exist, a symlink
loop, a folder that cannot be read or has no ``.txt``/``.md`` file in it, or a file named on its
own that is binary, not UTF-8, empty or unreadable raises ``DocumentError``. A file *found inside
a folder* that cannot be used, and a subfolder that cannot be read, are skipped with a warning
instead: a folder is a collection, and one stray entry should not stop a question about the rest
(if nothing readable is left, that is an error too). Symlinked subfolders are not followed, so a
link back up the tree cannot make the walk endless.
"""

from __future__ import annotations

import errno
import os
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from citeformer import Source
from citeformer.app.chunking import DEFAULT_MAX_CHARS, chunk_text
from citeformer.app.errors import InputError

DOCUMENT_SUFFIXES = (".txt", ".md")
"""File name endings ``load_documents`` picks up inside folders (case-insensitive)."""

Warn = Callable[[str], None]


class DocumentError(InputError):
    """A document path cannot be used.

    It is missing, a symlink loop, unreadable, a folder with no documents, or a file that is
    binary, not UTF-8 or empty.
    """


@dataclass(frozen=True)
class Document:
    """A loaded text file; ``path`` is as the user named it (a folder's files under that name)."""

    path: str
    text: str

    @property
    def name(self) -> str:
        """The file name, without its folder."""
        return Path(self.path).name


@dataclass(frozen=True)
class Passage:
    """One chunk of one document, with what the reference list needs to locate it."""

    path: str
    text: str
    start: int
    end: int
    line_start: int
    line_end: int

    @property
    def location(self) -> str:
        """``path, line 3`` or ``path, lines 3-7``."""
        if self.line_start == self.line_end:
            return f"{self.path}, line {self.line_start}"
        return f"{self.path}, lines {self.line_start}-{self.line_end}"

    def to_source(self, **extra: Any) -> Source:
        """The passage as a ``Source``: titled by file name, located by its metadata."""
        metadata = {
            "path": self.path,
            "start": self.start,
            "end": self.end,
            "line_start": self.line_start,
            "line_end": self.line_end,
            **extra,
        }
        return Source(self.text, title=Path(self.path).name, metadata=metadata)


def load_documents(paths: Iterable[str | Path], *, warn: Warn | None = None) -> list[Document]:
    """Read the ``.txt``/``.md`` documents at ``paths`` (files or folders, recursively).

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
                    f"folder {str(name)!r} has no {' or '.join(DOCUMENT_SUFFIXES)} files"
                )
            for file in found:
                if file.resolve() in seen:
                    continue
                try:
                    documents.append(_read(file))
                except DocumentError as error:
                    warn(f"skipping {error}")
                seen.add(file.resolve())
        elif path.is_file():
            if path.resolve() not in seen:
                documents.append(_read(path))
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
        Passage(doc.path, span.text, span.start, span.end, span.line_start, span.line_end)
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
    if b"\x00" in data[:8192]:
        raise DocumentError(f"{str(path)!r} is a binary file, not text")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise DocumentError(
            f"{str(path)!r} is not UTF-8 text (undecodable byte at offset {error.start}); "
            "convert it to UTF-8"
        ) from None
    if not text.strip():
        raise DocumentError(f"{str(path)!r} is empty")
    return Document(str(path), text)


def _warn(message: str) -> None:
    warnings.warn(message, stacklevel=3)
