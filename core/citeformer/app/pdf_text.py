"""The text of a PDF, page by page, with pypdf (citeformer's ``documents`` extra).

``pdf_to_text`` joins the pages' extracted text with a blank line between two pages and records
where each page begins, so any offset into the text knows its page (``PdfText.page_of``). A PDF
that is encrypted (and does not open with the empty password), holds no extractable text (a
scanned or image-only file), or cannot be parsed raises ``DocumentError`` naming the file.
"""

from __future__ import annotations

import contextlib
import io
import logging
import warnings
from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from citeformer.app.errors import DocumentError

__all__ = [
    "INSTALL",
    "PAGE_BREAK",
    "PdfText",
    "page_of",
    "pdf_to_text",
]

PAGE_BREAK = "\n\n"
"""What stands between the text of two pages: a paragraph break, so no passage glues the last
sentence of one page to the first of the next."""

INSTALL = "pip install 'pypdf>=5' 'cryptography>=43'"
"""The hint for what reading PDF needs. By the packages' names: ``citeformer`` on PyPI is another
project, so ``pip install 'citeformer[documents]'`` would install that one."""


@dataclass(frozen=True)
class PdfText:
    """What ``pdf_to_text`` extracts."""

    text: str
    """The pages' text, joined by ``PAGE_BREAK``."""

    page_starts: tuple[int, ...]
    """Offset in ``text`` where each page begins; ``page_starts[0] == 0``."""

    def page_of(self, offset: int) -> int:
        """The 1-based page of the character at ``offset``."""
        return page_of(self.page_starts, offset)


def page_of(page_starts: tuple[int, ...], offset: int) -> int:
    """The 1-based page holding ``offset``, given where each page begins."""
    return max(bisect_right(page_starts, offset), 1)


def pdf_to_text(data: bytes, name: str) -> PdfText:
    """The text of the PDF file ``name`` whose bytes are ``data``.

    Raises ``DocumentError`` when pypdf is missing, and for a PDF that is encrypted, corrupt or
    has no text.
    """
    try:
        import pypdf
    except ImportError:
        raise DocumentError(
            f"{name!r} is a PDF, and reading PDF files needs pypdf: {INSTALL}"
        ) from None
    with _quiet_pypdf():
        try:
            reader = pypdf.PdfReader(io.BytesIO(data))
            _open(reader, name)
            pages = [_page_text(page) for page in reader.pages]
        except DocumentError:
            raise
        except pypdf.errors.DependencyError as error:
            # AES-encrypted files, even those that open with the empty password, need a cipher.
            raise DocumentError(f"{name!r} cannot be decrypted: {error}; {INSTALL}") from None
        except Exception as error:  # pypdf raises PdfReadError, but also KeyError, ValueError...
            reason = str(error).strip() or type(error).__name__
            raise DocumentError(
                f"{name!r} is not a readable PDF ({reason}); check that the file is complete, "
                "or save it again as PDF"
            ) from None
    if not any(text.strip() for text in pages):
        raise DocumentError(
            f"{name!r} has no extractable text ({len(pages)} page(s) of images or drawings, "
            "such as a scan); run OCR on it first, e.g. with ocrmypdf"
        )
    starts = []
    position = 0
    for text in pages:
        starts.append(position)
        position += len(text) + len(PAGE_BREAK)
    return PdfText(PAGE_BREAK.join(pages), tuple(starts))


def _open(reader: Any, name: str) -> None:
    if not reader.is_encrypted:
        return
    # Many PDFs are encrypted only against editing: they open with the empty user password.
    if not reader.decrypt(""):
        raise DocumentError(
            f"{name!r} is encrypted and needs a password to open; save a decrypted copy "
            "(e.g. qpdf --decrypt --password=... in.pdf out.pdf) and pass that"
        )


def _page_text(page: Any) -> str:
    text: str = page.extract_text() or ""
    return text.replace("\r\n", "\n").replace("\r", "\n").strip()


@contextlib.contextmanager
def _quiet_pypdf() -> Iterator[None]:
    # pypdf logs and warns about every irregularity it repairs ("EOF marker not found"); the
    # command reports what matters itself, and --quiet must leave stderr empty.
    logger = logging.getLogger("pypdf")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(level)
