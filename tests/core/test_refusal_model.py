"""Grounded refusal with the embedded model: refused rows run no model, offered ones may choose."""

from __future__ import annotations

import math

import pytest

from citeformer import CiteGenerator, Refusal, Source, build_request
from citeformer.evidence.refusal import DEFAULT_REFUSAL_TEXT

pytestmark = pytest.mark.integration

TOWER = [
    Source("The Eiffel Tower was completed on 31 March 1889.", title="Eiffel Tower"),
    Source("Honey bees communicate with a waggle dance."),
]
OFF_TOPIC = "What is the population of Peru?"
ANSWERED = "When was the Eiffel Tower completed?"


def test_a_refused_question_runs_no_model_alone_streamed_or_in_a_batch(
    default_generator: CiteGenerator,
) -> None:
    refused = build_request(OFF_TOPIC, TOWER, max_new_tokens=24)
    answer = default_generator.answer(refused)
    assert answer.abstained and answer.text == DEFAULT_REFUSAL_TEXT
    assert (answer.generated_tokens, answer.citations) == (0, ())
    stream = default_generator.answer_stream(refused)
    assert "".join(stream) == DEFAULT_REFUSAL_TEXT and stream.answer.abstained
    answered = build_request(ANSWERED, TOWER, max_new_tokens=24)
    first, second = default_generator.answer_batch([answered, refused])
    assert not first.abstained and first.citations and first.generated_tokens > 0
    assert second == answer


def test_without_refusal_the_model_answers_and_cites(default_generator: CiteGenerator) -> None:
    answer = default_generator.answer(build_request(OFF_TOPIC, TOWER, refusal=None,
                                                    max_new_tokens=24))
    assert not answer.abstained and answer.citations and answer.generated_tokens > 0


def test_offered_the_refusal_the_model_can_write_it_whole(
    default_generator: CiteGenerator,
) -> None:
    # SmolLM2 does not choose the refusal unprompted (benchmarks/README.md); told to, the grammar
    # lets it write the sentence with no marker under REQUIRED, the end-intent lever lets it end
    # there (it used to open a marker: "... this question [1]."), and the answer abstains.
    offered = Refusal(threshold=0.0, offer_below=math.inf)
    request = build_request(
        f"Repeat: {DEFAULT_REFUSAL_TEXT}", TOWER, refusal=offered, max_new_tokens=24,
        instructions=f"Say: {DEFAULT_REFUSAL_TEXT}",
    )
    answer = default_generator.answer(request)
    assert answer.text == DEFAULT_REFUSAL_TEXT, answer.text
    assert answer.abstained and answer.citations == ()


def test_a_refusal_sentence_with_a_trailing_space_written_whole_abstains(
    default_generator: CiteGenerator,
) -> None:
    # The grammar's literal holds the space, so the model writes it; the answer still abstains.
    sentence = f"{DEFAULT_REFUSAL_TEXT} "
    offered = Refusal(text=sentence, threshold=0.0, offer_below=math.inf)
    request = build_request(
        f"Repeat: {DEFAULT_REFUSAL_TEXT}", TOWER, refusal=offered, max_new_tokens=24,
        instructions=f"Say: {DEFAULT_REFUSAL_TEXT}",
    )
    answer = default_generator.answer(request)
    assert answer.text == sentence, answer.text
    assert answer.abstained and answer.citations == ()
