"""The steering payload: a request's steering settings to a processor inside an engine and back."""

from __future__ import annotations

import json

import pytest

from citeformer import InputTypeError, InvalidInputError, Policy, Source, build_request
from citeformer.decoding.payload import (
    HANDSHAKE,
    HANDSHAKE_REPLY,
    MAX_PAYLOAD_CHARS,
    request_from_payload,
    steering_payload,
)
from citeformer.errors import shown
from citeformer.evidence import EmbeddingEvidence, Evidence, LexicalEvidence
from citeformer.readability import OFF, Readability
from citeformer.request import GENERATOR_DEFAULT

SOURCES = [Source("Paris is the capital of France.", title="France"), Source("Berlin [x].")]


@pytest.mark.parametrize("evidence", [
    GENERATOR_DEFAULT, None, LexicalEvidence(weight=4, question_weight=0.5),
    EmbeddingEvidence(weight=3),
])
def test_what_steers_travels_and_comes_back_equal(evidence: object) -> None:
    request = build_request(
        "Capital?", SOURCES, Policy.QUOTES_ONLY, evidence=evidence, max_group=2,
        min_quote_chars=3, readability=Readability(end_bias=2.5, no_repeat_words=4),
    )
    back = request_from_payload(steering_payload(request))
    assert (back.question, back.sources, back.policy) == (
        request.question, request.sources, request.policy
    )
    assert back.grammar == request.grammar and back.readability == request.readability
    assert back.evidence == request.evidence
    # What the engine's processor builds from it is what CiteGenerator builds.
    assert back.grammar_text(spell_quotes=False) == request.grammar_text(spell_quotes=False)
    assert back.quotable_chars == request.quotable_chars and back.terms == request.terms
    off = build_request("Capital?", SOURCES, readability=None)
    assert request_from_payload(steering_payload(off)).readability == OFF


def test_a_custom_evidence_cannot_travel() -> None:
    class Mine(Evidence):
        name = "mine"

    with pytest.raises(InvalidInputError, match="cannot travel to a serving engine"):
        steering_payload(build_request("Q?", SOURCES, evidence=Mine(weight=1.0)))


def good() -> dict[str, object]:
    return json.loads(steering_payload(build_request("Capital?", SOURCES)))


@pytest.mark.parametrize(("payload", "error", "named"), [
    (3, InputTypeError, "citeformer must be a JSON string"),
    ("{", InvalidInputError, "citeformer is not valid JSON"),
    ("[1]", InputTypeError, "citeformer must be a JSON object"),
    ("[" * 100_000, InvalidInputError, "citeformer is not valid JSON"),
    (json.dumps({**good(), "v": 9}), InvalidInputError, "citeformer.v is 9"),
    (json.dumps({**good(), "extra": 1}), InvalidInputError, r"unknown field\(s\) \['extra'\]"),
    (json.dumps({**good(), "sources": []}), InvalidInputError, "citeformer: no sources"),
    (json.dumps({**good(), "sources": "x"}), InputTypeError, "citeformer.sources must be a list"),
    (json.dumps({**good(), "sources": [{"text": "a", "url": "b"}]}), InputTypeError,
     r"citeformer.sources\[0\] must be an object with text and title"),
    (json.dumps({**good(), "sources": [{"text": "a", "title": 3}]}), InputTypeError,
     r"citeformer.sources\[0\].title must be a string"),
    (json.dumps({**good(), "question": ""}), InvalidInputError,
     "citeformer: the question is empty"),
    (json.dumps({**good(), "policy": "loud"}), InvalidInputError, "unknown citation policy"),
    (json.dumps({**good(), "grammar": {"max_group": 0}}), InvalidInputError,
     "citeformer.grammar: max_group must be a positive int"),
    (json.dumps({**good(), "grammar": {"max_grop": 2}}), InputTypeError,
     "citeformer.grammar: .*max_grop"),
    (json.dumps({**good(), "readability": {"end_bias": -1}}), InvalidInputError,
     "citeformer.readability: end_bias must be a finite number >= 0"),
    (json.dumps({**good(), "readability": []}), InputTypeError,
     "citeformer.readability must be an object"),
    (json.dumps({**good(), "evidence": {"name": "bm25"}}), InvalidInputError,
     "citeformer.evidence.name is 'bm25'"),
    (json.dumps({**good(), "evidence": {"name": "lexical", "weight": -2}}), InvalidInputError,
     "citeformer.evidence: evidence weight must be a finite number > 0 and <= 10000"),
    (json.dumps({**good(), "evidence": 7}), InputTypeError, "citeformer.evidence must be null"),
    (json.dumps({**good(), "refusal": "No\u0000answer."}), InvalidInputError,
     r"citeformer.refusal: refusal text .* holds U\+0000"),
])
def test_a_malformed_payload_is_refused_naming_the_field(
    payload: object, error: type[Exception], named: str
) -> None:
    with pytest.raises(error, match=named) as raised:
        request_from_payload(payload)
    assert isinstance(raised.value, ValueError)  # what vLLM answers with an HTTP 400


def with_setting(section: str, name: str, value: object) -> str:
    """A good payload with one setting changed; ``json.dumps`` writes NaN and Infinity too."""
    data = good()
    if section == "evidence":
        data["evidence"] = {"name": "lexical", name: value}
    else:
        data[section] = {name: value}
    return json.dumps(data)


@pytest.mark.parametrize(("section", "name", "value"), [
    ("evidence", "weight", 1e308),  # its float32 product with a score is inf, then 0 * inf NaN
    ("evidence", "weight", 10**400),
    ("evidence", "weight", float("nan")),
    ("evidence", "question_weight", float("inf")),
    ("evidence", "question_weight", -1e308),
    ("readability", "end_bias", 1e308),
    ("readability", "end_bias", 10**400),
    ("readability", "wrap_up_bias", float("inf")),
    ("readability", "number_penalty", True),
    ("readability", "clause_support", float("nan")),
    ("readability", "no_repeat_ngram", 10**400),
    ("readability", "wrap_up_words", 1001),
    ("grammar", "max_group", 10**400),
    ("grammar", "max_word_chars", 1e308),
], ids=lambda value: shown(value) if isinstance(value, (int, float)) else None)
def test_a_number_out_of_its_range_is_refused_naming_the_field(
    section: str, name: str, value: object
) -> None:
    with pytest.raises(InvalidInputError, match=f"citeformer.{section}: .*{name}") as raised:
        request_from_payload(with_setting(section, name, value))
    assert isinstance(raised.value, ValueError)  # vLLM answers it with an HTTP 400, not a 500
    assert len(str(raised.value)) < 300


def test_a_payload_is_bounded() -> None:
    with pytest.raises(InvalidInputError, match=f"more than {MAX_PAYLOAD_CHARS}"):
        request_from_payload(" " * (MAX_PAYLOAD_CHARS + 1))


def test_the_handshake_is_no_payload() -> None:
    with pytest.raises(InvalidInputError):
        request_from_payload(HANDSHAKE)
    assert "payload version 1" in HANDSHAKE_REPLY
