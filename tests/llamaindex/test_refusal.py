"""The synthesizer's grounded refusal: ``metadata["abstained"]``, ``refusal=`` to set or drop it."""

from __future__ import annotations

from citeformer.testing import FakeServer
from tests.llamaindex.common import nodes, synth

REFUSAL = "The sources do not answer this question."


def test_nodes_that_do_not_answer_give_the_refusal_with_no_citation() -> None:
    server = FakeServer()
    response = synth(server.generator()).synthesize("Population of Peru?", nodes())
    assert response.response == REFUSAL and response.metadata["abstained"] is True
    assert response.metadata["citations"] == [] and server.requests == []
    refusal = response.metadata["refusal"]
    assert (refusal["band"], refusal["support"], refusal["threshold"]) == ("refuse", 0.0, 0.5)
    assert '"peru", "population"' in refusal["reason"]


def test_an_answered_question_is_not_abstained_and_refusal_none_answers_all() -> None:
    response = synth(FakeServer().generator()).synthesize("Who built the tower?", nodes())
    assert response.metadata["abstained"] is False and response.metadata["citations"]
    assert response.metadata["refusal"]["band"] == "answer"
    forced = synth(FakeServer().generator(), refusal=None).synthesize("Population of Peru?",
                                                                      nodes())
    assert forced.metadata["abstained"] is False and forced.metadata["citations"]
    assert forced.metadata["refusal"] is None


def test_a_streamed_refusal_says_so_too() -> None:
    response = synth(FakeServer().generator(), streaming=True).synthesize("Population of Peru?",
                                                                          nodes())
    assert "".join(response.response_gen) == REFUSAL
    assert response.metadata["abstained"] is True
    assert response.metadata["refusal"]["band"] == "refuse"
