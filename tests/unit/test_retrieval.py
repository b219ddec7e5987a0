"""Unit tests for citeformer.retrieval: the chunker, the document loader, the dense retriever."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from citeformer.errors import InvalidInputError
from citeformer.retrieval import (
    DenseRetriever,
    Document,
    DocumentError,
    Passage,
    chunk_documents,
    chunk_text,
    embedding_text,
    load_documents,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "docs"


# ----------------------------------------------------------------------------------------- chunker


def check_chunks(text: str, max_chars: int) -> None:
    spans = chunk_text(text, max_chars)
    covered = set()
    previous_end = 0
    for span in spans:
        assert text[span.start:span.end] == span.text
        assert 0 < len(span.text) <= max_chars
        assert span.text == span.text.strip()
        assert span.start >= previous_end  # ordered, no overlap
        previous_end = span.end
        assert span.line_start == text.count("\n", 0, span.start) + 1
        assert span.line_end == text.count("\n", 0, span.end - 1) + 1
        covered.update(range(span.start, span.end))
    missing = [i for i, char in enumerate(text) if not char.isspace() and i not in covered]
    assert not missing


prose = st.lists(
    st.sampled_from(list("abc xyz.!?\n\t\"')é\u2019") + ["\r\n", "\n\n", "Word ", " \n \n"]),
    max_size=150,
).map("".join)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=prose, max_chars=st.integers(1, 80))
def test_chunks_are_exact_bounded_and_cover_the_text(text: str, max_chars: int) -> None:
    check_chunks(text, max_chars)


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=300), max_chars=st.integers(1, 50))
def test_chunks_hold_for_any_unicode(text: str, max_chars: int) -> None:
    check_chunks(text, max_chars)


def test_small_paragraphs_are_packed_and_large_ones_split_on_sentences() -> None:
    text = "# Title\n\nShort one.\n\n" + " ".join(f"Sentence number {i} here." for i in range(8))
    spans = chunk_text(text, 60)
    assert spans[0].text == "# Title\n\nShort one."
    assert (spans[0].line_start, spans[0].line_end) == (1, 3)
    assert all(s.text.endswith(".") for s in spans)
    assert all(s.line_start == 5 for s in spans[1:])
    assert len(spans) > 2


def test_split_paragraph_pieces_are_not_packed_with_the_next_paragraph() -> None:
    long = "Aaaa aaaa aaaa. Bbbb bbbb bbbb. Cccc."
    spans = chunk_text(f"{long}\n\nTail.", 20)
    assert [s.text for s in spans] == ["Aaaa aaaa aaaa.", "Bbbb bbbb bbbb.", "Cccc.", "Tail."]


def test_a_word_longer_than_the_bound_is_cut() -> None:
    spans = chunk_text("x" * 25, 10)
    assert [len(s.text) for s in spans] == [10, 10, 5]


def test_whitespace_only_text_has_no_chunks() -> None:
    assert chunk_text(" \n\n\t ") == []
    assert chunk_text("") == []


def test_chunk_text_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError):
        chunk_text("text", 0)
    with pytest.raises(TypeError):
        chunk_text(b"bytes")  # type: ignore[arg-type]


def test_line_numbers_count_crlf_lines() -> None:
    span = chunk_text("one\r\n\r\ntwo\r\nthree", 12)[-1]
    assert span.text == "two\r\nthree"
    assert (span.line_start, span.line_end) == (3, 4)


# ------------------------------------------------------------------------------------------ loader


def test_loads_folders_recursively_sorted_and_skips_hidden_and_other_files(tmp_path: Path) -> None:
    (tmp_path / "b.md").write_text("Bee.\n", encoding="utf-8")
    (tmp_path / "a.txt").write_text("\ufeffAy.", encoding="utf-8")  # BOM dropped
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "c.MD").write_text("Sea.", encoding="utf-8")
    (tmp_path / "notes.rst").write_text("ignored", encoding="utf-8")
    (tmp_path / ".hidden").mkdir()
    (tmp_path / ".hidden" / "d.md").write_text("hidden", encoding="utf-8")
    docs = load_documents([tmp_path])
    assert [Path(d.path).relative_to(tmp_path).as_posix() for d in docs] == [
        "a.txt", "b.md", "sub/c.MD",
    ]
    assert docs[0].text == "Ay."


def test_a_file_given_twice_is_read_once(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("Ay.", encoding="utf-8")
    assert len(load_documents([tmp_path, tmp_path / "a.md"])) == 1


def test_a_named_file_of_any_suffix_is_read(tmp_path: Path) -> None:
    (tmp_path / "notes.rst").write_text("Text.", encoding="utf-8")
    assert load_documents([tmp_path / "notes.rst"])[0].text == "Text."


def test_missing_path_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(DocumentError, match="does not exist"):
        load_documents([tmp_path / "nope"])


def test_folder_without_documents_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "image.png").write_bytes(b"\x89PNG\x00")
    with pytest.raises(DocumentError, match="has no .txt or .md files"):
        load_documents([tmp_path])


def test_no_paths_is_an_error() -> None:
    with pytest.raises(DocumentError):
        load_documents([])


@pytest.mark.parametrize(
    ("data", "reason"),
    [(b"\x00\x01\x02binary", "binary"), (b"caf\xe9 latin-1", "not UTF-8"), (b" \n\t", "empty")],
)
def test_a_named_unusable_file_is_an_error(tmp_path: Path, data: bytes, reason: str) -> None:
    path = tmp_path / "doc.txt"
    path.write_bytes(data)
    with pytest.raises(DocumentError, match=reason):
        load_documents([path])


def test_unusable_files_inside_a_folder_are_skipped_with_a_warning(tmp_path: Path) -> None:
    (tmp_path / "good.md").write_text("Good text.", encoding="utf-8")
    (tmp_path / "bad.md").write_bytes(b"\x00\x00binary")
    (tmp_path / "empty.txt").write_text("", encoding="utf-8")
    warnings: list[str] = []
    docs = load_documents([tmp_path], warn=warnings.append)
    assert [Path(d.path).name for d in docs] == ["good.md"]
    assert len(warnings) == 2
    assert "bad.md" in warnings[0] and "binary" in warnings[0]
    assert "empty.txt" in warnings[1] and "empty" in warnings[1]


def test_default_warning_uses_the_warnings_module(tmp_path: Path) -> None:
    (tmp_path / "good.md").write_text("Good text.", encoding="utf-8")
    (tmp_path / "bad.md").write_bytes(b"\x00")
    with pytest.warns(UserWarning, match="binary"):
        load_documents([tmp_path])


def test_a_folder_of_only_unusable_files_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "bad.md").write_bytes(b"\x00")
    with pytest.raises(DocumentError, match="none of the documents"):
        load_documents([tmp_path], warn=lambda _: None)


def test_document_errors_are_input_errors() -> None:
    assert issubclass(DocumentError, InvalidInputError)


def test_the_example_documents_load_and_chunk() -> None:
    docs = load_documents([EXAMPLES])
    assert len(docs) >= 4
    passages = chunk_documents(docs)
    assert len(passages) >= len(docs)
    for passage in passages:
        doc = next(d for d in docs if d.path == passage.path)
        assert doc.text[passage.start:passage.end] == passage.text


# --------------------------------------------------------------------------------------- retriever


def passage(path: str, text: str, line: int = 1) -> Passage:
    return Passage(path, text, 0, len(text), line, line)


def bag_of_letters(texts):  # a deterministic toy embedder
    return [[t.lower().count(c) for c in "abcdefghijklmnopqrstuvwxyz"] for t in texts]


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


def test_retriever_k_larger_than_the_index_returns_everything() -> None:
    passages = [passage("a.md", "abc"), passage("b.md", "xyz")]
    assert len(DenseRetriever(passages, bag_of_letters).search("abc", 10)) == 2


def test_retriever_ties_keep_document_order_and_zero_vectors_are_safe() -> None:
    passages = [passage("1.md", "123"), passage("2.md", "456")]  # no letters: zero vectors
    hits = DenseRetriever(passages, bag_of_letters).search("abc", 2)
    assert [h.passage.path for h in hits] == ["1.md", "2.md"]
    assert all(h.score == 0 for h in hits)


def test_retriever_reports_batches() -> None:
    passages = [passage("a.md", f"text {i}") for i in range(5)]
    seen: list[tuple[int, int]] = []
    DenseRetriever(
        passages, bag_of_letters, batch_size=2, progress=lambda d, t: seen.append((d, t))
    )
    assert seen == [(2, 5), (4, 5), (5, 5)]


def test_retriever_rejects_bad_input() -> None:
    with pytest.raises(DocumentError):
        DenseRetriever([], bag_of_letters)
    retriever = DenseRetriever([passage("a.md", "abc")], bag_of_letters)
    with pytest.raises(ValueError):
        retriever.search("abc", 0)
    with pytest.raises(ValueError, match="vectors"):
        DenseRetriever([passage("a.md", "abc")], lambda texts: [])


def test_embedding_text_puts_the_file_name_first() -> None:
    assert embedding_text(passage("docs/eiffel_tower.md", "It is tall.")) == (
        "eiffel tower: It is tall."
    )


def test_passage_location_and_source() -> None:
    p = Passage("docs/a.md", "Text.", 10, 15, 3, 7)
    assert p.location == "docs/a.md, lines 3-7"
    assert Passage("docs/a.md", "Text.", 0, 5, 2, 2).location == "docs/a.md, line 2"
    source = p.to_source(score=0.5)
    assert source.title == "a.md"
    assert source.text == "Text."
    assert dict(source.metadata) == {
        "path": "docs/a.md", "start": 10, "end": 15, "line_start": 3, "line_end": 7, "score": 0.5,
    }


def test_document_name() -> None:
    assert Document("docs/a.md", "x").name == "a.md"
