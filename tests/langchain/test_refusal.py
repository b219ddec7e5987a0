"""The runnable's grounded refusal: ``abstained`` on the answer, ``refusal=`` to set or drop it."""

from __future__ import annotations

from citeformer import Refusal
from citeformer.testing import FakeGenerator, FakeServer
from citeformer_langchain import CitationAnswer, CitationRunnable
from tests.langchain.common import DOCS, ask

REFUSAL = "The sources do not answer this question."


def test_a_question_the_documents_do_not_answer_is_refused_and_the_server_not_asked() -> None:
    server = FakeServer()
    answer = CitationRunnable(generator=server.generator()).invoke(ask("Population of Peru?"))
    assert answer.abstained and answer.text == REFUSAL and answer.citations == []
    assert answer.documents == DOCS and server.requests == []
    refusal = answer.refusal
    assert refusal is not None and (refusal["band"], refusal["support"]) == ("refuse", 0.0)
    assert '"peru", "population"' in refusal["reason"]
    assert answer.to_dict()["refusal"] == refusal == answer.cited_answer.to_dict()["refusal"]


def test_a_custom_refusal_reaches_the_request_and_its_text_is_abstained() -> None:
    refusal = Refusal(text="Not in the documents.", threshold=0.9)
    fake = FakeGenerator(lambda request: request.refusal.text)
    answer = CitationRunnable(generator=fake, refusal=refusal).invoke(ask("Capital of France?"))
    assert fake.requests[-1].refusal is refusal
    assert answer.abstained and answer.text == "Not in the documents."  # the script wrote it
    answered = CitationRunnable(generator=FakeGenerator()).invoke(ask("Capital of France?"))
    assert not answered.abstained
    assert answered.refusal is not None and answered.refusal["band"] == "answer"


def test_an_answer_rebuilt_from_its_fields_keeps_its_refusal_check() -> None:
    answer = CitationRunnable(generator=FakeGenerator()).invoke(ask("Capital of France?"))
    rebuilt = CitationAnswer(**answer.model_dump(exclude={"type"}))  # holds no core answer
    assert rebuilt.refusal == answer.refusal
    assert rebuilt.cited_answer.refusal == answer.cited_answer.refusal is not None
