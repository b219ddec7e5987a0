"""Where a contract PDF supports a claim: its numbered clauses are split as a reader reads them,
so a clause's number never ends the clause before it."""

from __future__ import annotations

from pathlib import Path

from citeformer import build_request
from citeformer.answers import cited_answer
from citeformer.app.documents import chunk_documents, load_documents
from tests.app.pdfs import needs_pypdf, text_pdf

PAGES = [
    "EMPLOYMENT CONTRACT\n"
    "1. Position. The employee is hired as a technician in the Lyon workshop.\n"
    "2. Probation. The first six months are a probation period, during which either party\n"
    "may end the contract with one week of written notice.\n"
    "3.",  # the next clause's number closes the page
    "Notice period. After probation, either party may end the contract with 3 months of\n"
    "written notice, e.g. by registered letter.\n"
    "4. Holidays. The employee has 25 days of paid holiday a year.",
]


@needs_pypdf
def test_a_claim_is_located_in_its_clause_on_its_page(tmp_path: Path) -> None:
    pdf = tmp_path / "contract.pdf"
    pdf.write_bytes(text_pdf(PAGES))
    (document,) = load_documents([pdf])
    (passage,) = chunk_documents([document], max_chars=4000)
    source = passage.to_source()
    request = build_request("What is the notice period?", [source])
    answer = cited_answer(request, "The notice period is 3 months [1].", "stop",
                          prompt_tokens=0, generated_tokens=0)
    (citation,) = answer.citations
    evidence = citation.evidence
    assert evidence is not None and not evidence.weak
    assert "3 months of\nwritten notice" in evidence.text
    assert "probation period, during which" not in evidence.text  # the clause before
    assert not evidence.text.rstrip().endswith("3.")
    assert document.page_of(passage.start + evidence.source_end - 1) == 2
