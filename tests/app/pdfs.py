"""PDF files for the tests, written byte by byte: pages of text in Helvetica, or only drawings.

Written by hand rather than by pypdf, so the reader is tested on a file it did not write; the
encrypted variants need pypdf's writer (``encrypted``).
"""

from __future__ import annotations

import importlib.util
import io
from collections.abc import Sequence

import pytest

needs_pypdf = pytest.mark.skipif(
    importlib.util.find_spec("pypdf") is None, reason="reading PDF needs citeformer[documents]"
)


def text_pdf(pages: Sequence[str], *, to_unicode: dict[str, int] | None = None) -> bytes:
    """A PDF with one page per item, each line of the item a line of 12 pt Helvetica.

    ``to_unicode`` maps characters of the pages to the UTF-16 code unit a reader extracts for
    them (the font's ``/ToUnicode`` CMap), e.g. ``{"X": 0xD800}``: a lone surrogate.
    """
    return _pdf([_text_stream(page) for page in pages], to_unicode or {})


def drawing_pdf(pages: int = 2) -> bytes:
    """A PDF whose pages hold only a filled rectangle: no text to extract, as a scan."""
    return _pdf([b"0.5 g 72 72 200 300 re f"] * pages)


def encrypted(data: bytes, user_password: str, owner_password: str = "owner") -> bytes:
    """``data`` encrypted by pypdf (RC4-128, which pypdf reads without a cipher package)."""
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(data)))
    writer.encrypt(user_password, owner_password, algorithm="RC4-128")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def _text_stream(text: str) -> bytes:
    lines = ["BT", "/F1 12 Tf", "14 TL", "72 720 Td"]
    for line in text.split("\n"):
        escaped = line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
        lines.append(f"({escaped}) Tj T*")
    lines.append("ET")
    return "\n".join(lines).encode("latin-1")


def _pdf(contents: Sequence[bytes], to_unicode: dict[str, int] | None = None) -> bytes:
    # Objects: 1 catalog, 2 page tree, 3 font, then a page and its content stream per page, then
    # the font's ToUnicode CMap if any.
    n = len(contents)
    kids = " ".join(f"{4 + 2 * i} 0 R" for i in range(n))
    cmap = f" /ToUnicode {4 + 2 * n} 0 R" if to_unicode else ""
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        f"<< /Type /Pages /Kids [{kids}] /Count {n} >>".encode(),
        f"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding{cmap} >>"
        .encode(),
    ]
    for i, stream in enumerate(contents):
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources "
            f"<< /Font << /F1 3 0 R >> >> /Contents {5 + 2 * i} 0 R >>".encode()
        )
        objects.append(_stream(stream))
    if to_unicode:
        objects.append(_stream(_cmap(to_unicode)))
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n".encode() + body + b"\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{offset:010d} 00000 n \n".encode() for offset in offsets)
    out += (
        f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n"
    ).encode()
    return bytes(out)


def _stream(data: bytes) -> bytes:
    return f"<< /Length {len(data)} >>\nstream\n".encode() + data + b"\nendstream"


def _cmap(to_unicode: dict[str, int]) -> bytes:
    chars = "\n".join(
        f"<{ord(char):02X}> <{unit:04X}>" for char, unit in sorted(to_unicode.items())
    )
    return (
        "/CIDInit /ProcSet findresource begin\n12 dict begin\nbegincmap\n"
        "/CMapName /Test def\n/CMapType 2 def\n"
        "1 begincodespacerange\n<00> <FF>\nendcodespacerange\n"
        f"{len(to_unicode)} beginbfchar\n{chars}\nendbfchar\n"
        "endcmap\nCMapName currentdict /CMap defineresource pop\nend\nend"
    ).encode()
