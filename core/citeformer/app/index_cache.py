"""Passage embeddings kept between runs: a second question over the same documents embeds none.

The layout, under citeformer's cache folder (``citeformer.default_model.cache_dir()``)::

    index/
      <embedder>-<hash>/          one folder per embedder (``embedder_name``)
        <hash of the docs>/       one per set of ``--docs`` paths (absolute, sorted)
          documents.json          those paths and the embedder, for a person looking
          <key>.vectors           one entry per document: the vectors of its passages

An entry's key is the SHA-256 of the texts embedded for the passages of one document, in order
(``embedding_text``: each passage behind the document's name). Those texts follow from the file's
content and the chunking settings (``--chunk-chars``), so the key is the file's content hash and
its chunking settings made exact: a renamed file (whose name heads every passage) or a chunker
that cuts differently gets a new key as well, which a hash of the bytes alone would miss.

After each run a folder holds the entries of that run's documents and nothing else: the entry of
a file that changed or is gone is deleted. An entry is a line ``citeformer index entry``, a line
with the SHA-256 (in hex) of the rest, and the rest: a NumPy ``.npz`` holding ``vectors``
(float32, one row per passage, as the embedder gave them), read without pickle. The checksum is
compared before NumPy reads a byte. The zip's own CRC-32 is no guard: NumPy stops reading where
the array's header says it ends, so a header changed to declare fewer dimensions (or a petabyte)
would be believed.

An entry whose checksum does not match, that cannot be read, whose shape does not fit its
passages, or whose vectors have another width than most of the entries looked up (the others are
not blamed for it) is embedded again with one ``IndexCacheWarning`` naming it, and rewritten. The
entries of format 1 (a bare ``<key>.npz``, no checksum) are stale: their keys are no longer looked
up, their documents are embedded again without a warning, and the files are deleted.

Entries are written to a temporary file beside them and renamed, so an interrupted run leaves no
half-written entry, and two processes writing one folder at once leave whole entries (and no
``fsync``: an entry a crash left empty reads as damaged and is rebuilt). A cache that cannot be
written is warned about, and the command goes on with the vectors it has.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import tempfile
import time
import warnings
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from citeformer.app.documents import Passage
from citeformer.app.retrieval import Embedder, EmbeddingError, embedding_text
from citeformer.default_model import cache_dir

__all__ = [
    "DOCUMENTS_FILE",
    "ENTRY_SUFFIX",
    "FORMAT",
    "IndexCache",
    "IndexCacheWarning",
    "Lookup",
    "embedder_name",
]

FORMAT = 2
"""Part of every key: a change to what an entry holds makes the old entries stale."""
ENTRY_SUFFIX = ".vectors"
DOCUMENTS_FILE = "documents.json"
_FORMER_SUFFIXES = (".npz",)  # the entries of format 1, deleted as stale
_MAGIC = b"citeformer index entry\n"
_HEAD = len(_MAGIC) + 65  # the magic line and the checksum's line
_PARTIAL = ".partial-"
_PARTIAL_EXPIRES_S = 3600  # a temporary file this old belongs to no running process


class IndexCacheWarning(UserWarning):
    """An entry of the index cache was damaged and is re-embedded, or it could not be written."""


def embedder_name(embed: Embedder) -> str:
    """What an embedder's vectors are filed under: its ``name``, else its qualified name.

    The real embedder (``citeformer.app.services.embed_texts``) names its model and its
    package's version; a function without a ``name`` is known as ``module.qualname``, so a
    test's fake and the real model never share entries.
    """
    name = getattr(embed, "name", None)
    if isinstance(name, str) and name:
        return name
    owner = embed if hasattr(embed, "__qualname__") else type(embed)
    return f"{owner.__module__}.{owner.__qualname__}"


@dataclass(frozen=True)
class _Document:
    """The passages of one document among those looked up, and what the cache holds of them."""

    path: str
    key: str
    rows: tuple[int, ...]
    """The indices of its passages in ``Lookup.passages``."""
    vectors: Any
    """Their stored vectors, or ``None``: they are to be embedded."""


@dataclass(frozen=True)
class Lookup:
    """What the cache holds of a list of passages, document by document."""

    passages: tuple[Passage, ...]
    documents: tuple[_Document, ...]

    @property
    def missing(self) -> list[Passage]:
        """The passages of the documents the cache has no vectors for, in document order."""
        return [self.passages[i] for doc in self.documents if doc.vectors is None
                for i in doc.rows]

    @property
    def stored(self) -> int:
        """How many of the passages have their vectors in the cache."""
        return len(self.passages) - len(self.missing)


class IndexCache:
    """The passage embeddings of one set of documents under one embedder, kept in a folder.

    Instantiate::

        cache = IndexCache.for_documents(["examples/docs"], embedder_name(embed))

    Use::

        lookup = cache.lookup(passages)
        fresh = embed_passages(lookup.missing, embed)  # nothing on a second run
        vectors = cache.complete(lookup, fresh)        # one row per passage, in order
    """

    def __init__(self, folder: Path, *, embedder: str, docs: Sequence[str] = ()) -> None:
        self.folder = folder
        self.embedder = embedder
        """The embedder's name (``embedder_name``)."""
        self.docs = tuple(docs)
        """The document paths the folder is for, as ``documents.json`` lists them."""

    @classmethod
    def for_documents(
        cls, docs: Sequence[str], embedder: str, *, root: Path | None = None
    ) -> IndexCache:
        """The cache of the documents at ``docs`` (files and folders) under ``embedder``.

        ``root``: where the embedder folders are (default: ``cache_dir() / "index"``). The paths
        count as absolute, without duplicates, in any order.
        """
        paths = sorted({os.path.realpath(path) for path in docs})
        root = cache_dir() / "index" if root is None else root
        folder = root / _folder_name(embedder) / _sha256(json.dumps(paths))[:16]
        return cls(folder, embedder=embedder, docs=paths)

    def lookup(self, passages: Sequence[Passage]) -> Lookup:
        """The stored vectors of each document of ``passages``; damaged entries are warned about."""
        rows: dict[str, list[int]] = {}
        for index, passage in enumerate(passages):
            rows.setdefault(passage.path, []).append(index)
        found: dict[str, tuple[str, Any, str | None]] = {}
        for path, indices in rows.items():
            key = _sha256(json.dumps([FORMAT, [embedding_text(passages[i]) for i in indices]]))
            found[path] = (key, *self._read(key, len(indices)))
        width = _usual_width([vectors for _, vectors, _ in found.values() if vectors is not None])
        documents = []
        for path, (key, vectors, problem) in found.items():
            if vectors is not None and width is not None and vectors.shape[1] != width:
                problem = (f"its vectors have {vectors.shape[1]} dimensions where most entries' "
                           f"have {width}")
                vectors = None
            if problem is not None:
                warnings.warn(
                    f"the index cache entry {self._entry(key)} is damaged ({problem}); "
                    f"embedding {path} again",
                    IndexCacheWarning, stacklevel=2,
                )
            documents.append(_Document(path, key, tuple(rows[path]), vectors))
        return Lookup(tuple(passages), tuple(documents))

    def complete(self, lookup: Lookup, fresh: Any) -> Any:
        """The vectors of all of ``lookup``'s passages: the stored ones, and ``fresh`` in between.

        ``fresh``: the vectors of ``lookup.missing``, in its order. They are written as new
        entries, and every entry of the folder that ``lookup`` did not use is deleted.
        """
        import numpy as np

        stored = [doc.vectors for doc in lookup.documents if doc.vectors is not None]
        fresh = np.asarray(fresh, dtype=np.float32)
        widths = {vectors.shape[1] for vectors in stored}
        if len(fresh):
            widths.add(fresh.shape[1])
        if len(widths) > 1:
            raise EmbeddingError(
                f"the index cache in {self.folder} holds vectors of another length than the "
                f"embedder {self.embedder!r} gives ({sorted(widths)}); an embedder changed "
                "under the same name: delete that folder, or pass --no-index-cache"
            )
        matrix = np.zeros((len(lookup.passages), widths.pop() if widths else 0), np.float32)
        new: list[tuple[str, Any]] = []
        offset = 0
        for doc in lookup.documents:
            vectors = doc.vectors
            if vectors is None:
                vectors = fresh[offset:offset + len(doc.rows)]
                offset += len(doc.rows)
                new.append((doc.key, vectors))
            matrix[list(doc.rows)] = vectors
        self._save(new, keep={doc.key for doc in lookup.documents})
        return matrix

    def _entry(self, key: str) -> Path:
        return self.folder / f"{key}{ENTRY_SUFFIX}"

    def _read(self, key: str, rows: int) -> tuple[Any, str | None]:
        """The vectors of an entry, or ``None`` and why not (``None`` too when it is missing)."""
        try:
            data = self._entry(key).read_bytes()
        except (FileNotFoundError, NotADirectoryError):  # not cached (or no cache folder)
            return None, None
        except OSError as error:
            return None, error.strerror or _first_line(error)
        if not data.startswith(_MAGIC):
            return None, "it does not begin as an entry does"
        if data[len(_MAGIC):_HEAD] != _checksum_line(data[_HEAD:]):
            return None, "its checksum does not match its content"
        # Whole as it was written; what was written wrong is still no reason to stop a run.
        try:
            vectors = _read_vectors(data[_HEAD:])
        except Exception as error:
            return None, _first_line(error)
        problem = _shape_problem(vectors, rows)
        return (vectors, None) if problem is None else (None, problem)

    def _save(self, new: list[tuple[str, Any]], keep: set[str]) -> None:
        import numpy as np

        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            documents = self.folder / DOCUMENTS_FILE
            about = {"format": FORMAT, "embedder": self.embedder, "documents": self.docs}
            text = json.dumps(about, indent=1).encode("utf-8")
            if not documents.is_file() or documents.read_bytes() != text:  # or of another format
                _write_atomically(documents, text)
            for key, vectors in new:
                archive = io.BytesIO()
                np.savez(archive, vectors=vectors)
                payload = archive.getvalue()
                _write_atomically(self._entry(key), _MAGIC + _checksum_line(payload) + payload)
            self._drop_stale(keep)
        except OSError as error:
            warnings.warn(
                f"the index cache in {self.folder} could not be written "
                f"({error.strerror or error}); these embeddings are not kept (set "
                "CITEFORMER_CACHE to a writable folder, or pass --no-index-cache)",
                IndexCacheWarning, stacklevel=3,
            )

    def _drop_stale(self, keep: set[str]) -> None:
        expired = time.time() - _PARTIAL_EXPIRES_S
        for path in self.folder.iterdir():
            if path.name.startswith(_PARTIAL):
                with contextlib.suppress(FileNotFoundError):
                    if path.stat().st_mtime < expired:  # left by a process that was killed
                        path.unlink()
            elif (path.suffix == ENTRY_SUFFIX and path.stem not in keep
                  or path.suffix in _FORMER_SUFFIXES):
                path.unlink(missing_ok=True)


def _checksum_line(payload: bytes) -> bytes:
    return hashlib.sha256(payload).hexdigest().encode("ascii") + b"\n"


def _read_vectors(payload: bytes) -> Any:
    import numpy as np

    if not payload.startswith(b"PK\x03\x04"):  # np.load would take it for a pickle
        raise ValueError("it holds no .npz archive")
    with np.load(io.BytesIO(payload), allow_pickle=False) as loaded:
        if "vectors" not in loaded.files:
            raise ValueError("its archive holds no vectors")
        return loaded["vectors"]


def _shape_problem(vectors: Any, rows: int) -> str | None:
    import numpy as np

    if vectors.dtype != np.float32 or vectors.ndim != 2:
        return f"it holds a {vectors.dtype} array of shape {vectors.shape}"
    if vectors.shape[0] != rows:
        return f"it holds {vectors.shape[0]} vectors for {rows} passages"
    if not np.isfinite(vectors).all():
        return "it holds values that are not finite"
    return None


def _usual_width(found: list[Any]) -> int | None:
    """The width of the vectors of most entries; ``None`` where no width is more common."""
    counts = Counter(vectors.shape[1] for vectors in found).most_common(2)
    if not counts or len(counts) == 2 and counts[0][1] == counts[1][1]:
        return None
    return int(counts[0][0])


def _write_atomically(target: Path, data: bytes | str) -> None:
    handle, partial = tempfile.mkstemp(prefix=_PARTIAL, suffix=target.suffix, dir=target.parent)
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(data.encode("utf-8") if isinstance(data, str) else data)
        os.replace(partial, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(partial)
        raise


def _folder_name(embedder: str) -> str:
    readable = re.sub(r"[^A-Za-z0-9.]+", "-", embedder).strip("-")[:48]
    return f"{readable}-{_sha256(embedder)[:12]}"


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
