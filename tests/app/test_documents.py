"""Unit tests for citeformer.app.documents: loading files and folders, passages with locations."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from citeformer import InvalidInputError
from citeformer.app.documents import (
    Document,
    DocumentError,
    Passage,
    chunk_documents,
    load_documents,
)
from tests.app.conftest import EXAMPLES
from tests.app.pdfs import drawing_pdf, encrypted, needs_pypdf, text_pdf

AS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
needs_permissions = pytest.mark.skipif(
    AS_ROOT, reason="root reads whatever chmod forbids; the simulated test covers this case"
)


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


def test_files_come_in_the_order_of_their_path_parts(tmp_path: Path) -> None:
    # "sub" < "sub.md" as names, although "sub.md" < "sub/a.md" as strings
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.md").write_text("A.", encoding="utf-8")
    (tmp_path / "sub.md").write_text("S.", encoding="utf-8")
    (tmp_path / "B.md").write_text("B.", encoding="utf-8")
    docs = load_documents([tmp_path])
    assert [Path(d.path).relative_to(tmp_path).as_posix() for d in docs] == [
        "B.md", "sub/a.md", "sub.md",
    ]


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
    with pytest.raises(DocumentError, match=r"has no documents \(.txt, .md, .html, .htm, .pdf"):
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
    assert DocumentError("x").exit_code == 2


def test_the_example_documents_load_and_chunk() -> None:
    docs = load_documents([EXAMPLES])
    assert len(docs) >= 4
    passages = chunk_documents(docs)
    assert len(passages) >= len(docs)
    for passage in passages:
        doc = next(d for d in docs if d.path == passage.path)
        assert doc.text[passage.start:passage.end] == passage.text


# -------------------------------------------------------------------- links and permissions


def test_a_symlink_to_itself_is_a_symlink_loop(tmp_path: Path) -> None:
    loop = tmp_path / "loop.md"
    loop.symlink_to(loop)
    with pytest.raises(DocumentError, match="is a symlink loop") as error:
        load_documents([loop])
    assert "does not exist" not in str(error.value)


def test_two_links_pointing_at_each_other_are_a_symlink_loop(tmp_path: Path) -> None:
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    with pytest.raises(DocumentError, match=f"'{tmp_path / 'a'}' is a symlink loop"):
        load_documents([tmp_path / "a"])


def test_a_broken_symlink_names_its_target(tmp_path: Path) -> None:
    (tmp_path / "link.md").symlink_to(tmp_path / "gone.md")
    with pytest.raises(DocumentError, match=r"broken symlink \(its target .*gone.md"):
        load_documents([tmp_path / "link.md"])


def test_bad_links_inside_a_folder_are_skipped_with_a_warning(tmp_path: Path) -> None:
    (tmp_path / "good.md").write_text("Good text.", encoding="utf-8")
    (tmp_path / "loop.md").symlink_to(tmp_path / "loop.md")
    (tmp_path / "dangling.txt").symlink_to(tmp_path / "gone.txt")
    (tmp_path / "linked.md").symlink_to(tmp_path / "good.md")  # a good link: read once
    warnings: list[str] = []
    docs = load_documents([tmp_path], warn=warnings.append)
    assert [Path(d.path).name for d in docs] == ["good.md"]
    assert len(warnings) == 2
    assert "dangling.txt" in warnings[0] and "broken symlink" in warnings[0]
    assert "loop.md" in warnings[1] and "symlink loop" in warnings[1]


def test_a_symlinked_folder_is_not_followed(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("Ay.", encoding="utf-8")
    (tmp_path / "up").symlink_to(tmp_path)  # would make the walk endless
    docs = load_documents([tmp_path])
    assert [Path(d.path).name for d in docs] == ["a.md"]


def refuse_to_list(monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
    """Make ``os.scandir`` of ``folder`` fail as an unreadable folder does (even for root)."""
    real = os.scandir

    def scandir(path: str | os.PathLike[str]) -> object:
        if Path(path) == folder:
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)


def test_an_unreadable_folder_named_directly_says_so(tmp_path, monkeypatch) -> None:
    (tmp_path / "a.md").write_text("Ay.", encoding="utf-8")
    refuse_to_list(monkeypatch, tmp_path)
    with pytest.raises(DocumentError, match="cannot be read: permission denied") as error:
        load_documents([tmp_path])
    assert str(tmp_path) in str(error.value)
    assert "has no documents" not in str(error.value)


def test_an_unreadable_subfolder_is_skipped_with_a_warning(tmp_path, monkeypatch) -> None:
    (tmp_path / "a.md").write_text("Ay.", encoding="utf-8")
    (tmp_path / "locked").mkdir()
    (tmp_path / "locked" / "b.md").write_text("Bee.", encoding="utf-8")
    refuse_to_list(monkeypatch, tmp_path / "locked")
    warnings: list[str] = []
    docs = load_documents([tmp_path], warn=warnings.append)
    assert [Path(d.path).name for d in docs] == ["a.md"]
    (warning,) = warnings
    assert str(tmp_path / "locked") in warning and "permission denied" in warning


@needs_permissions
def test_an_unreadable_folder_on_disk(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    (locked / "b.md").write_text("Bee.", encoding="utf-8")
    (tmp_path / "a.md").write_text("Ay.", encoding="utf-8")
    locked.chmod(0)
    try:
        with pytest.raises(DocumentError, match="cannot be read: permission denied"):
            load_documents([locked])
        warnings: list[str] = []
        assert [Path(d.path).name for d in load_documents([tmp_path], warn=warnings.append)] == [
            "a.md"
        ]
        assert "permission denied" in warnings[0]
    finally:
        locked.chmod(0o700)


@needs_permissions
def test_an_unreadable_file_named_directly(tmp_path: Path) -> None:
    path = tmp_path / "secret.md"
    path.write_text("Hidden.", encoding="utf-8")
    path.chmod(0)
    try:
        with pytest.raises(DocumentError, match="cannot be read: Permission denied"):
            load_documents([path])
    finally:
        path.chmod(0o600)


# --------------------------------------------------------------------------------- passages


def test_passages_keep_their_documents_offsets_and_lines() -> None:
    text = "# Title\n\nFirst paragraph here.\n\nSecond one."
    (first, second) = chunk_documents([Document("docs/a.md", text)], max_chars=30)
    assert (first.text, first.line_start, first.line_end) == ("# Title\n\nFirst paragraph here.",
                                                               1, 3)
    assert text[second.start:second.end] == second.text == "Second one."
    assert (second.path, second.line_start) == ("docs/a.md", 5)


def test_passage_location_and_source() -> None:
    p = Passage("docs/a.md", "Text.", 10, 15, 3, 7)
    assert p.location == "docs/a.md, lines 3-7"
    assert Passage("docs/a.md", "Text.", 0, 5, 2, 2).location == "docs/a.md, line 2"
    source = p.to_source(score=0.5)
    assert source.title == "a.md"
    assert source.text == "Text."
    assert dict(source.metadata) == {
        "path": "docs/a.md", "start": 10, "end": 15, "line_start": 3, "line_end": 7,
        "page": None, "page_end": None, "score": 0.5,
    }


def test_document_name() -> None:
    assert Document("docs/a.md", "x").name == "a.md"


# ------------------------------------------------------------------------------ HTML and PDF

PDF_PAGES = [
    "Annual Report on Towers\nThis report covers tall structures in Europe.",
    "The Eiffel Tower stands in Paris.\nIt was completed on 31 March 1889.",
    "The Berlin TV tower was finished in 1969.\nIt stands at Alexanderplatz.",
]


def test_html_pages_are_read_as_their_text_with_title_and_file_lines(tmp_path: Path) -> None:
    (tmp_path / "tower.html").write_text(
        "<html><head><title>Eiffel Tower</title></head>\n<body>\n<h1>History</h1>\n"
        "<p>It was completed\non 31 March 1889.</p>\n</body></html>\n",
        encoding="utf-8",
    )
    (document,) = load_documents([tmp_path])
    assert document.text == "History\n\nIt was completed on 31 March 1889."
    assert document.title == "Eiffel Tower"
    (passage,) = chunk_documents([document])
    assert (passage.line_start, passage.line_end) == (3, 5)  # lines of the .html file
    assert passage.locate(passage.text.index("on 31"), len(passage.text)).line == 5
    source = passage.to_source()
    assert source.title == "Eiffel Tower"
    assert source.text == document.text


def test_an_html_page_in_its_declared_encoding(tmp_path: Path) -> None:
    page = '<meta charset="iso-8859-1"><p>Caf\xe9 cr\xe8me.</p>'
    (tmp_path / "cafe.htm").write_bytes(page.encode("latin-1"))
    assert load_documents([tmp_path / "cafe.htm"])[0].text == "Caf\xe9 cr\xe8me."


def test_an_html_page_without_text_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "empty.html").write_text("<html><script>x()</script></html>", encoding="utf-8")
    with pytest.raises(DocumentError, match="has no text outside its markup"):
        load_documents([tmp_path / "empty.html"])


@needs_pypdf
def test_pdf_passages_know_their_page_and_their_line_on_it(tmp_path: Path) -> None:
    (tmp_path / "report.pdf").write_bytes(text_pdf(PDF_PAGES))
    (document,) = load_documents([tmp_path])
    assert document.text == "\n\n".join(PDF_PAGES)
    passages = chunk_documents([document], max_chars=80)
    assert [(p.page, p.line_start, p.line_end) for p in passages] == [(1, 1, 2), (2, 1, 2),
                                                                      (3, 1, 2)]
    assert [p.location for p in passages][1] == f"{tmp_path / 'report.pdf'}, page 2"
    assert passages[1].to_source().metadata["page"] == 2
    assert passages[1].to_source().metadata["page_end"] == 2
    where = passages[1].locate(passages[1].text.index("It was"), len(passages[1].text))
    assert (where.page, where.line) == (2, 2)
    assert document.text[where.file_start:where.file_end] == "It was completed on 31 March 1889."


@needs_pypdf
def test_a_passage_across_a_page_break_carries_both_pages(tmp_path: Path) -> None:
    # It was once labelled with its first page only.
    (tmp_path / "report.pdf").write_bytes(text_pdf(PDF_PAGES))
    (passage, *_) = chunk_documents(load_documents([tmp_path]), max_chars=200)
    assert passage.text.startswith("Annual Report") and "31 March 1889" in passage.text
    assert (passage.page, passage.page_end) == (1, 2)
    assert passage.location == f"{tmp_path / 'report.pdf'}, pages 1-2"
    assert {k: passage.to_source().metadata[k] for k in ("page", "page_end")} == {
        "page": 1, "page_end": 2}
    where = passage.locate(passage.text.index("It was"), passage.text.index("1889") + 4)
    assert (where.page, where.line) == (2, 2)


@needs_pypdf
def test_a_pdf_by_its_content_whatever_its_name(tmp_path: Path) -> None:
    (tmp_path / "report.bin").write_bytes(text_pdf(PDF_PAGES))
    (document,) = load_documents([tmp_path / "report.bin"])
    assert document.page_starts[0] == 0 and len(document.page_starts) == 3


@needs_pypdf
def test_unusable_pdfs_in_a_folder_are_skipped_with_a_warning_each(tmp_path: Path) -> None:
    (tmp_path / "a_report.pdf").write_bytes(text_pdf(PDF_PAGES))
    (tmp_path / "b_secret.pdf").write_bytes(encrypted(text_pdf(PDF_PAGES), "secret"))
    (tmp_path / "c_scan.pdf").write_bytes(drawing_pdf())
    (tmp_path / "d_broken.pdf").write_bytes(text_pdf(PDF_PAGES)[:300])
    warnings: list[str] = []
    docs = load_documents([tmp_path], warn=warnings.append)
    assert [Path(d.path).name for d in docs] == ["a_report.pdf"]
    assert len(warnings) == 3
    assert "b_secret.pdf" in warnings[0] and "is encrypted" in warnings[0]
    assert "c_scan.pdf" in warnings[1] and "no extractable text" in warnings[1]
    assert "d_broken.pdf" in warnings[2] and "not a readable PDF" in warnings[2]


@needs_pypdf
@pytest.mark.parametrize(
    ("data", "message"),
    [(lambda: encrypted(text_pdf(PDF_PAGES), "secret"), "is encrypted"),
     (drawing_pdf, "has no extractable text"),
     (lambda: b"%PDF-1.7\n" + b"\x00garbage" * 50, "is not a readable PDF")],
    ids=["encrypted", "image-only", "corrupt"],
)
def test_an_unusable_pdf_named_directly_is_an_error(tmp_path: Path, data, message) -> None:
    path = tmp_path / "report.pdf"
    path.write_bytes(data())
    with pytest.raises(DocumentError, match=message) as error:
        load_documents([path])
    assert str(path) in str(error.value)


def test_without_pypdf_a_pdf_in_a_folder_is_skipped_with_the_install_hint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "pypdf", None)
    (tmp_path / "notes.md").write_text("Notes.", encoding="utf-8")
    (tmp_path / "report.pdf").write_bytes(text_pdf(PDF_PAGES))
    warnings: list[str] = []
    assert [d.name for d in load_documents([tmp_path], warn=warnings.append)] == ["notes.md"]
    (warning,) = warnings
    assert "report.pdf" in warning and "pip install 'pypdf>=5'" in warning
    with pytest.raises(DocumentError, match=r"pip install 'pypdf>=5'"):
        load_documents([tmp_path / "report.pdf"])


# -- a <meta charset> that names no encoding a browser reads pages in (base64 once aborted the
# whole run with a LookupError) --------------------------------------------------------------


@pytest.mark.parametrize("charset", ["base64", "rot13", "hex", "zlib", "unicode_escape",
                                     "utf-7", "cp037", "no-such-charset"])
def test_a_charset_that_is_no_text_encoding_is_read_as_utf8(tmp_path: Path, charset: str) -> None:
    page = f'<meta charset="{charset}"><p>Caf\xe9 \\x41 +AGEA-.</p>'
    (tmp_path / "page.html").write_text(page, encoding="utf-8")
    assert load_documents([tmp_path / "page.html"])[0].text == "Caf\xe9 \\x41 +AGEA-."


@pytest.mark.parametrize("charset", ["base64", "rot13", "hex", "no-such-charset"])
def test_a_page_in_an_undeclared_encoding_in_a_folder_is_skipped_with_a_warning(
    tmp_path: Path, charset: str
) -> None:
    page = f'<meta charset="{charset}"><p>Caf\xe9.</p>'
    (tmp_path / "bad.html").write_bytes(page.encode("latin-1"))
    (tmp_path / "good.md").write_text("Good text.", encoding="utf-8")
    warnings: list[str] = []
    assert [d.name for d in load_documents([tmp_path], warn=warnings.append)] == ["good.md"]
    (warning,) = warnings
    assert "bad.html" in warning and "is not UTF-8 text" in warning
    with pytest.raises(DocumentError, match="is not UTF-8 text"):
        load_documents([tmp_path / "bad.html"])


@pytest.mark.parametrize(
    ("charset", "data", "text"),
    [("latin-1", b"\x93Caf\xe9\x94", "\u201cCaf\xe9\u201d"),  # read as windows-1252, as browsers do
     ("windows-1252", b"\x93Caf\xe9\x94", "\u201cCaf\xe9\u201d"),
     ("ISO-8859-1", b"Caf\xe9", "Caf\xe9"),
     ("koi8-r", "\u041c\u0438\u0440".encode("koi8-r"), "\u041c\u0438\u0440"),
     ("shift_jis", "\u6771\u4eac".encode("cp932"), "\u6771\u4eac"),
     ("utf-16", "Caf\xe9".encode(), "Caf\xe9")],  # a <meta> readable as ASCII: not UTF-16
)
def test_a_declared_text_encoding_is_read_as_a_browser_reads_it(
    tmp_path: Path, charset: str, data: bytes, text: str
) -> None:
    (tmp_path / "page.html").write_bytes(f'<meta charset="{charset}"><p>'.encode() + data)
    assert load_documents([tmp_path / "page.html"])[0].text == text
