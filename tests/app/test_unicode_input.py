"""Text that is not valid Unicode where it enters: file names that are not UTF-8 and PDF text
holding lone surrogates are read with U+FFFD in their place, and the file named in one warning."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from citeformer.app.documents import chunk_documents, load_documents
from citeformer.app.retrieval import DenseRetriever, embedding_text
from tests.app.conftest import toy_embed
from tests.app.pdfs import needs_pypdf, text_pdf

LATIN_1_NAME = b"caf\xe9.txt"


def latin_1_named(folder: Path, text: str = "The cafe opened in 1901.") -> Path:
    """A file whose name is Latin-1 bytes, as a Windows share or an old archive leaves them."""
    path = os.path.join(os.fsencode(folder), LATIN_1_NAME)
    with open(path, "wb") as file:
        file.write(text.encode())
    return Path(os.fsdecode(path))


def encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def test_a_file_name_that_is_not_utf8_is_read_with_a_replacement(tmp_path: Path) -> None:
    latin_1_named(tmp_path)
    (tmp_path / "museum.md").write_text("The museum opened in 1950.", encoding="utf-8")
    warnings: list[str] = []
    documents = load_documents([tmp_path], warn=warnings.append)
    assert [d.name for d in documents] == ["caf\ufffd.txt", "museum.md"]
    assert len(warnings) == 1
    assert "caf\ufffd.txt" in warnings[0] and "not valid UTF-8" in warnings[0]
    for passage in chunk_documents(documents):
        assert encodable(embedding_text(passage))
        assert encodable(passage.location)
    hits = DenseRetriever(chunk_documents(documents), toy_embed).search("cafe", 1)
    assert hits[0].passage.text == "The cafe opened in 1901."


def test_a_file_named_directly_with_such_a_name_is_read_too(tmp_path: Path) -> None:
    path = latin_1_named(tmp_path)
    warnings: list[str] = []
    (document,) = load_documents([path], warn=warnings.append)
    assert document.path == str(tmp_path / "caf\ufffd.txt")
    assert document.text == "The cafe opened in 1901."
    assert len(warnings) == 1


@needs_pypdf
def test_pdf_text_with_lone_surrogates_is_read_with_replacements(tmp_path: Path) -> None:
    # The font's ToUnicode map gives 'X' the UTF-16 unit D800, which pypdf passes on as is.
    (tmp_path / "report.pdf").write_bytes(
        text_pdf(["The museum X opened in 1950.", "Its X roof was rebuilt in 1990."],
                 to_unicode={"X": 0xD800})
    )
    warnings: list[str] = []
    (document,) = load_documents([tmp_path], warn=warnings.append)
    assert "museum \ufffd opened in 1950." in document.text
    assert "\ufffd roof" in document.text
    assert encodable(document.text)
    assert document.page_starts and len(document.page_starts) == 2  # offsets unchanged
    assert document.text[document.page_starts[1]:].startswith("Its")
    assert len(warnings) == 1
    assert "report.pdf" in warnings[0] and "lone surrogates" in warnings[0]


def test_valid_names_and_text_give_no_warning(tmp_path: Path) -> None:
    (tmp_path / "café.md").write_text("Le café a ouvert en 1901. \U0001f600", encoding="utf-8")
    warnings: list[str] = []
    (document,) = load_documents([tmp_path], warn=warnings.append)
    assert document.name == "café.md"
    assert document.text.endswith("\U0001f600")
    assert warnings == []


@pytest.mark.integration
@needs_pypdf
def test_a_question_over_such_a_folder_is_answered_with_real_embeddings(
    tmp_path: Path, default_generator, capsys
) -> None:
    from citeformer.app import Services, main

    latin_1_named(tmp_path, "The Eiffel Tower was completed on 31 March 1889.")
    (tmp_path / "moon.pdf").write_bytes(
        text_pdf(["Apollo X 11 landed on the Moon on 20 July 1969."], to_unicode={"X": 0xD800})
    )
    services = Services(load_model=lambda name, **_: default_generator)
    code = main(["ask", "When was the Eiffel Tower completed?", "--docs", str(tmp_path),
                 "--max-new-tokens", "40", "-k", "2"], services=services)
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "1889" in captured.out
    assert "caf\ufffd.txt" in captured.out  # the reference names the file as it can be shown
    assert captured.err.count("not valid UTF-8") == 1
    assert captured.err.count("lone surrogates") == 1
