"""Unit tests for citeformer.app.retrieval: top-k cosine search with a toy embedder."""

from __future__ import annotations

import math

import pytest

from citeformer.app.documents import DocumentError, Passage
from citeformer.app.retrieval import (
    DenseRetriever,
    EmbeddingError,
    embed_passages,
    embedding_text,
)
from tests.app.conftest import toy_embed


def passage(path: str, text: str, line: int = 1) -> Passage:
    return Passage(path, text, 0, len(text), line, line)


def test_retriever_ranks_by_cosine_best_first() -> None:
    # digit file names: the file-name header adds no letters to what is embedded
    passages = [passage("1.md", "zzz"), passage("2.md", "aaa bbb"), passage("3.md", "aaa")]
    calls: list[list[str]] = []

    def embed(texts):
        calls.append(list(texts))
        return [[t.count("a"), t.count("b"), t.count("z")] for t in texts]

    retriever = DenseRetriever(passages, embed)
    hits = retriever.search("aaaa", 2)
    assert [h.passage.path for h in hits] == ["3.md", "2.md"]
    assert math.isclose(hits[0].score, 1.0, rel_tol=1e-6)
    assert hits[0].score >= hits[1].score
    assert calls[0] == [embedding_text(p) for p in passages]
    assert calls[1] == ["aaaa"]  # the question is embedded bare


def test_retriever_k_larger_than_the_index_returns_everything() -> None:
    passages = [passage("a.md", "abc"), passage("b.md", "xyz")]
    assert len(DenseRetriever(passages, toy_embed).search("abc", 10)) == 2


def test_retriever_ties_keep_document_order_and_zero_vectors_are_safe() -> None:
    passages = [passage("1.md", "123"), passage("2.md", "456")]  # no letters: zero vectors
    hits = DenseRetriever(passages, toy_embed).search("abc", 2)
    assert [h.passage.path for h in hits] == ["1.md", "2.md"]
    assert all(h.score == 0 for h in hits)


def test_retriever_reports_batches() -> None:
    passages = [passage("a.md", f"text {i}") for i in range(5)]
    seen: list[tuple[int, int]] = []
    DenseRetriever(
        passages, toy_embed, batch_size=2, progress=lambda d, t: seen.append((d, t))
    )
    assert seen == [(2, 5), (4, 5), (5, 5)]


def test_retriever_rejects_bad_input() -> None:
    with pytest.raises(DocumentError):
        DenseRetriever([], toy_embed)
    retriever = DenseRetriever([passage("a.md", "abc")], toy_embed)
    with pytest.raises(ValueError):
        retriever.search("abc", 0)
    with pytest.raises(ValueError, match="vectors") as error:
        DenseRetriever([passage("a.md", "abc")], lambda texts: [])
    assert isinstance(error.value, EmbeddingError) and error.value.exit_code == 1


def test_a_retriever_from_known_vectors_searches_as_one_that_embeds() -> None:
    passages = [passage("1.md", "zzz"), passage("2.md", "aaa bbb"), passage("3.md", "aaa")]
    vectors = embed_passages(passages, toy_embed, batch_size=2)
    assert vectors.shape == (3, 26)
    known = DenseRetriever.from_vectors(passages, vectors, toy_embed)
    assert known.search("aaaa", 3) == DenseRetriever(passages, toy_embed).search("aaaa", 3)
    with pytest.raises(EmbeddingError, match="got 2 vectors for 3 passages"):
        DenseRetriever.from_vectors(passages, vectors[:2], toy_embed)
    with pytest.raises(DocumentError):
        DenseRetriever.from_vectors([], vectors[:0], toy_embed)
    assert embed_passages([], toy_embed).shape == (0,)


def test_embedding_text_puts_the_file_name_first() -> None:
    assert embedding_text(passage("docs/eiffel_tower.md", "It is tall.")) == (
        "eiffel tower: It is tall."
    )
    assert embedding_text(passage("docs/_.md", "Bare.")) == "Bare."
