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
