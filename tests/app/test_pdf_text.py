"""Unit tests for citeformer.app.pdf_text: the text of a PDF, page by page, and its refusals."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from citeformer.app.errors import DocumentError
from citeformer.app.pdf_text import PAGE_BREAK, page_of, pdf_to_text
from tests.app.pdfs import drawing_pdf, encrypted, needs_pypdf, text_pdf

PAGES = [
    "Annual Report on Towers\nThis report covers tall structures in Europe.",
    "The Eiffel Tower stands in Paris.\nIt was completed on 31 March 1889.",
    "The Berlin TV tower (Fernsehturm) was finished in 1969.\nIt stands at Alexanderplatz.",
]


@needs_pypdf
def test_pages_are_joined_by_a_blank_line_and_their_starts_recorded() -> None:
    pdf = pdf_to_text(text_pdf(PAGES), "report.pdf")
    assert pdf.text == PAGE_BREAK.join(PAGES)
    assert PAGE_BREAK == "\n\n"
    for number, (page, start) in enumerate(zip(PAGES, pdf.page_starts, strict=True), start=1):
        assert pdf.text[start:start + len(page)] == page
        assert pdf.page_of(start) == pdf.page_of(start + len(page) - 1) == number


@needs_pypdf
def test_a_page_without_text_keeps_the_numbering() -> None:
    # Page 2 of 3 is a picture: the third page is still page 3.
    data = text_pdf(["First page.", "", "Third page."])
    pdf = pdf_to_text(data, "gap.pdf")
    assert pdf.page_of(pdf.text.index("Third")) == 3
    assert pdf.page_of(pdf.text.index("First")) == 1


@pytest.mark.parametrize(("offset", "page"), [(0, 1), (9, 1), (10, 2), (19, 2), (20, 3), (99, 3)])
def test_page_of(offset: int, page: int) -> None:
    assert page_of((0, 10, 20), offset) == page


@needs_pypdf
def test_an_encrypted_pdf_is_refused_by_name() -> None:
    with pytest.raises(DocumentError, match=r"'secret.pdf' is encrypted and needs a password"):
        pdf_to_text(encrypted(text_pdf(PAGES), "secret"), "secret.pdf")


@needs_pypdf
def test_a_pdf_encrypted_only_against_editing_is_read() -> None:
    pdf = pdf_to_text(encrypted(text_pdf(PAGES), user_password=""), "locked.pdf")
    assert pdf.text == PAGE_BREAK.join(PAGES)


@needs_pypdf
def test_an_aes_encrypted_pdf_that_opens_without_a_password_is_read() -> None:
    pytest.importorskip("cryptography")  # pypdf's AES needs it (in citeformer[documents])
    import io

    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(text_pdf(PAGES))))
    writer.encrypt("", "owner", algorithm="AES-256")
    data = io.BytesIO()
    writer.write(data)
    assert pdf_to_text(data.getvalue(), "aes.pdf").text == PAGE_BREAK.join(PAGES)


@needs_pypdf
def test_a_pdf_without_text_is_refused_with_advice() -> None:
    with pytest.raises(DocumentError, match=r"'scan.pdf' has no extractable text \(2") as error:
        pdf_to_text(drawing_pdf(2), "scan.pdf")
    assert "OCR" in str(error.value)


@needs_pypdf
def test_the_real_image_only_pdfs_shipped_by_matplotlib() -> None:
    # matplotlib (a test dependency) ships its toolbar icons as one-page PDFs of drawings only:
    # files from a real writer, with compressed streams, that hold no text at all.
    matplotlib = pytest.importorskip("matplotlib")
    icons = sorted((Path(matplotlib.get_data_path()) / "images").glob("*.pdf"))
    if not icons:
        pytest.skip("this matplotlib ships no PDF icons")
    assert "home.pdf" in [icon.name for icon in icons]
    for icon in icons:
        with pytest.raises(DocumentError) as error:
            pdf_to_text(icon.read_bytes(), str(icon))
        assert str(error.value) == (
            f"{str(icon)!r} has no extractable text (1 page(s) of images or drawings, such as a "
            "scan); run OCR on it first, e.g. with ocrmypdf"
        )


@needs_pypdf
@pytest.mark.parametrize("fonttype", [3, 42], ids=["type3-fonts", "truetype-fonts"])
def test_a_pdf_written_by_matplotlib_is_read_page_by_page(fonttype: int) -> None:
    # No installed package ships a PDF with text, so matplotlib's PDF backend writes one: a
    # real writer's embedded fonts and compressed streams, unlike the hand-written test files.
    pytest.importorskip("matplotlib")
    import io

    from matplotlib import rc_context
    from matplotlib.backends.backend_pdf import PdfPages
    from matplotlib.figure import Figure

    pages = ["The Eiffel Tower stands in Paris.", "It was completed on 31 March 1889."]
    data = io.BytesIO()
    with rc_context({"pdf.fonttype": fonttype}), PdfPages(data) as pdf:
        for page in pages:
            figure = Figure(figsize=(4, 2))  # not pyplot's: no GUI backend, no global figure
            figure.text(0.05, 0.5, page)
            pdf.savefig(figure)
    text = pdf_to_text(data.getvalue(), "figures.pdf")
    assert text.text == PAGE_BREAK.join(pages)
    assert text.page_starts == (0, len(pages[0]) + len(PAGE_BREAK))
    assert text.page_of(text.text.index("1889")) == 2


@needs_pypdf
@pytest.mark.parametrize(
    "data",
    [text_pdf(PAGES)[:300], b"%PDF-1.4\nnot really a PDF", b""],
    ids=["truncated", "garbage", "empty"],
)
def test_a_corrupt_pdf_is_refused_by_name(data: bytes, capfd: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(DocumentError, match=r"'broken.pdf' is not a readable PDF"):
        pdf_to_text(data, "broken.pdf")
    assert capfd.readouterr().err == ""  # pypdf's own complaints are kept off stderr


def test_without_pypdf_the_message_says_what_to_install(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "pypdf", None)  # import pypdf now raises ImportError
    with pytest.raises(DocumentError, match=r"pip install 'pypdf>=5'"):
        pdf_to_text(b"%PDF-1.4", "report.pdf")
