"""The request body each engine reads, grammar included (server/_engines.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from citeformer import InvalidInputError, Policy, ServerGenerator, build_grammar, build_request
from citeformer.prompt import build_messages
from citeformer.server import ENGINES
from citeformer.server._engines import GRAMMAR_FIELDS, prepare_call
from citeformer.testing import MODEL, FakeServer
from tests.server.common import NORMALIZED, QUESTION, SOURCES, collect


def expected_common(policy: Policy = Policy.REQUIRED) -> dict[str, Any]:
    return {
        "model": MODEL,
        "messages": build_messages(QUESTION, NORMALIZED, policy),
        "max_tokens": 48,
        "temperature": 0.0,
    }


def test_llama_cpp_body_carries_grammar_top_level() -> None:
    # llama-cpp-python server: CreateChatCompletionRequest.grammar, a GBNF string
    # (abetlen/llama-cpp-python, llama_cpp/server/types.py).
    server = FakeServer()
    server.generator().generate(QUESTION, SOURCES, max_new_tokens=48)
    (body,) = server.bodies
    assert server.requests[0].url.path == "/v1/chat/completions"
    assert body == {
        **expected_common(),
        "repeat_penalty": 1.0,  # the server's default is 1.1; CiteGenerator uses none
        "grammar": build_grammar(3, Policy.REQUIRED),
    }


def test_vllm_body_carries_structured_outputs_grammar() -> None:
    # vLLM >= 0.12: {"structured_outputs": {"grammar": ...}} as an extra body parameter
    # (https://docs.vllm.ai/en/latest/features/structured_outputs/).
    server = FakeServer()
    server.generator(engine="vllm").generate(QUESTION, SOURCES, Policy.AUTO, max_new_tokens=48)
    (body,) = server.bodies
    assert body == {
        **expected_common(Policy.AUTO),
        "structured_outputs": {"grammar": build_grammar(3, Policy.AUTO)},
    }
    assert "grammar" not in body and "guided_grammar" not in body


def test_older_vllm_body_carries_guided_grammar() -> None:
    # vLLM before v0.12.0: "guided_grammar" (https://docs.vllm.ai/en/v0.9.1/features/
    # structured_outputs.html; removed in v0.12.0 in favour of structured_outputs).
    server = FakeServer()
    server.generator(engine="vllm-guided").generate(QUESTION, SOURCES, max_new_tokens=48)
    (body,) = server.bodies
    assert body == {**expected_common(), "guided_grammar": build_grammar(3, Policy.REQUIRED)}


def test_sglang_body_carries_ebnf() -> None:
    # SGLang: "ebnf" on chat completions (https://docs.sglang.io/advanced_features/
    # structured_outputs.html; ChatCompletionRequest.ebnf in sglang's openai protocol.py).
    server = FakeServer()
    server.generator(engine="sglang").generate(
        QUESTION, SOURCES, Policy.QUOTES_ONLY, max_new_tokens=48, max_quote_chars=80
    )
    (body,) = server.bodies
    assert body == {
        **expected_common(Policy.QUOTES_ONLY),
        "ebnf": build_grammar(3, Policy.QUOTES_ONLY, max_quote_chars=80, quote_sources=NORMALIZED),
    }


def test_streamed_body_asks_for_sse_and_usage() -> None:
    server = FakeServer()
    collect(server.generator().stream(QUESTION, SOURCES, max_new_tokens=48))
    (body,) = server.bodies
    assert body == {
        **expected_common(),
        "stream": True,
        "stream_options": {"include_usage": True},
        "repeat_penalty": 1.0,
        "grammar": build_grammar(3, Policy.REQUIRED),
    }


def test_sampling_options_travel() -> None:
    server = FakeServer()
    server.generator().generate(
        QUESTION, SOURCES, max_new_tokens=48, do_sample=True, temperature=0.7, seed=3,
        instructions="Be brief.", max_sentence_words=10,
    )
    (body,) = server.bodies
    assert body["temperature"] == 0.7 and body["top_p"] == 1.0 and body["seed"] == 3
    # llama-cpp-python's server would cut the distribution to top_k 40 and min_p 0.05
    assert (body["top_k"], body["min_p"], body["repeat_penalty"]) == (0, 0.0, 1.0)
    assert body["messages"][0] == {"role": "system", "content": "Be brief."}
    assert body["grammar"] == build_grammar(3, Policy.REQUIRED, max_sentence_words=10)


def test_request_body_is_what_generate_sends() -> None:
    server = FakeServer()
    gen = server.generator(engine="sglang")
    expected = gen.request_body(QUESTION, SOURCES, max_new_tokens=48)
    gen.generate(QUESTION, SOURCES, max_new_tokens=48)
    assert server.bodies == [expected]


def test_own_prompt_goes_to_text_completions() -> None:
    server = FakeServer()
    answer = server.generator().generate(QUESTION, SOURCES, prompt="Sources: ...\nAnswer:\n")
    (body,) = server.bodies
    assert server.requests[0].url.path == "/v1/completions"
    assert body["prompt"] == "Sources: ...\nAnswer:\n" and "messages" not in body
    assert answer.text == "Paris is the capital of France [1]. Berlin is in Germany [2]."


def test_unconstrained_sends_no_grammar_and_keeps_only_valid_citations() -> None:
    server = FakeServer(pieces=["Paris [1]. Rome [7]."])
    answer = server.generator().generate(QUESTION, SOURCES, constrained=False)
    (body,) = server.bodies
    assert "grammar" not in body
    assert answer.text == "Paris [1]. Rome [7]." and answer.cited_ids == [1]


def test_bodies_are_json_serialisable_for_every_policy() -> None:
    gen = ServerGenerator("http://h", "m", engine="vllm", steering=False)
    for policy in (Policy.REQUIRED, Policy.AUTO):
        body = gen.request_body(QUESTION, SOURCES, policy, stream=True)
        assert json.loads(json.dumps(body)) == body
        assert body["structured_outputs"]["grammar"] == build_grammar(3, policy)
    body = gen.request_body(QUESTION, SOURCES, Policy.QUOTES_ONLY, verbatim_quotes=False)
    assert body["structured_outputs"]["grammar"] == build_grammar(3, Policy.QUOTES_ONLY)


def test_the_grammar_sent_is_the_requests_with_spelled_quotes() -> None:
    request = build_request(QUESTION, SOURCES, Policy.QUOTES_ONLY, min_quote_chars=4)
    call = prepare_call(request, "llama.cpp", "http://h/v1", model=None, stream=False)
    assert call.grammar == request.grammar_text(spell_quotes=True) == call.body["grammar"]
    assert "quote-1" in call.grammar and "model" not in call.body
    unconstrained = prepare_call(request.replace(constrained=False), "sglang", "http://h/v1",
                                 model="m", stream=False)
    assert unconstrained.grammar is None and "ebnf" not in unconstrained.body


@pytest.mark.parametrize("engine", ENGINES)
def test_every_engine_names_its_grammar_field(engine: str) -> None:
    gen = ServerGenerator("http://h", "m", engine=engine, steering=False)
    body = gen.request_body(QUESTION, SOURCES)
    path = GRAMMAR_FIELDS[engine].split(".")
    value: Any = body
    for name in path:
        value = value[name]
    assert value == build_grammar(3, Policy.REQUIRED)


def test_a_steered_vllm_body_carries_the_payload_and_the_markers_grammar() -> None:
    from citeformer.decoding.payload import request_from_payload
    from citeformer.grammar import marker_grammar

    server = FakeServer(steering=True)
    gen = server.generator(engine="vllm")
    assert gen.steers() and server.handshakes == 1
    gen.generate(QUESTION, SOURCES, Policy.AUTO, max_new_tokens=48, max_group=2)
    gen.generate(QUESTION, SOURCES, max_new_tokens=48)
    assert server.handshakes == 1  # asked once, then kept
    body = server.bodies[0]
    assert body["structured_outputs"] == {"grammar": marker_grammar(3, 2)}
    sent = request_from_payload(body["vllm_xargs"]["citeformer"])
    request = build_request(QUESTION, SOURCES, Policy.AUTO, max_group=2)
    assert (sent.question, sent.sources, sent.policy) == (QUESTION, tuple(NORMALIZED), Policy.AUTO)
    assert sent.grammar == request.grammar and sent.readability == request.readability
    assert json.loads(json.dumps(body)) == body


def test_a_vllm_without_the_processor_gets_the_grammar_alone(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = FakeServer()  # answers the handshake: no processor there
    gen = server.generator(engine="vllm")
    with caplog.at_level("WARNING", logger="citeformer.server"):
        assert not gen.steers()
    assert "does not run citeformer's steering processor" in caplog.text
    gen.generate(QUESTION, SOURCES, max_new_tokens=48)
    (body,) = server.bodies
    assert body["structured_outputs"] == {"grammar": build_grammar(3, Policy.REQUIRED)}
    assert "vllm_xargs" not in body and server.handshakes == 1
    with pytest.raises(InvalidInputError, match="does not run citeformer's steering processor"):
        FakeServer().generator(engine="vllm", steering=True).generate(QUESTION, SOURCES)


def test_steering_is_vllms_alone() -> None:
    server = FakeServer(steering=True)
    server.generator().generate(QUESTION, SOURCES)  # llama.cpp: never asked
    assert server.handshakes == 0 and "vllm_xargs" not in server.bodies[0]
    assert not server.generator(engine="vllm", steering=False).steers()
    assert server.handshakes == 0
    with pytest.raises(InvalidInputError, match="steering runs inside vLLM only"):
        ServerGenerator("http://h", engine="sglang", steering=True)
    with pytest.raises(InvalidInputError, match="steering must be True, False or None"):
        ServerGenerator("http://h", engine="vllm", steering="yes")  # type: ignore[arg-type]


def test_evidence_travels_only_to_a_steered_engine() -> None:
    from citeformer.evidence import LexicalEvidence

    steered = FakeServer(steering=True)
    steered.generator(engine="vllm").generate(QUESTION, SOURCES, evidence=LexicalEvidence(weight=4))
    payload = json.loads(steered.bodies[0]["vllm_xargs"]["citeformer"])
    assert payload["evidence"] == {"name": "lexical", "weight": 4.0, "question_weight": 2.0}
    with pytest.raises(InvalidInputError, match="evidence= .* only a steered engine"):
        FakeServer().generator(engine="vllm").generate(QUESTION, SOURCES, evidence="lexical")


def test_unknown_engine_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="unknown engine 'tgi'"):
        ServerGenerator("http://h", engine="tgi")
