"""ServerGenerator against a scripted OpenAI-compatible server (httpx.MockTransport): offline.

The same behaviours run against a real llama.cpp server in tests/integration/test_llama_server.py.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from citeformer import (
    AnswerGenerator,
    CitedAnswer,
    InvalidInputError,
    Policy,
    ServerConnectionError,
    ServerGenerator,
    ServerIgnoredGrammarError,
    ServerResponseError,
    Source,
    build_grammar,
)
from citeformer import remote as remote_module
from citeformer.errors import (
    EmptyQuestionError,
    EmptySourceError,
    GrammarViolationError,
    NoSourcesError,
)
from citeformer.prompt import build_messages
from tests.fake_server import MODEL, FakeServer, byte_chunks, chat_chunks, sse

SOURCES = [
    Source("Paris is the capital of France.", title="France"),
    Source("Berlin is the capital of Germany."),
    "Madrid is the capital of Spain.",
]
QUESTION = "What are the capitals of France and Germany?"


@pytest.fixture(autouse=True)
def no_env_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CITEFORMER_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The backoff waits, recorded instead of slept (sync and async)."""
    waited: list[float] = []

    async def asleep(seconds: float) -> None:
        waited.append(seconds)

    monkeypatch.setattr(remote_module.time, "sleep", waited.append)
    monkeypatch.setattr(remote_module.asyncio, "sleep", asleep)
    return waited


def collect(stream: Any) -> list[str]:
    return list(stream)


async def acollect(stream: Any) -> list[str]:
    return [chunk async for chunk in stream]


# -- request bodies, per engine ------------------------------------------------------------


def expected_common(policy: Policy = Policy.REQUIRED) -> dict[str, Any]:
    sources = [s if isinstance(s, Source) else Source(s) for s in SOURCES]
    return {
        "model": MODEL,
        "messages": build_messages(QUESTION, sources, policy),
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
    sources = [s if isinstance(s, Source) else Source(s) for s in SOURCES]
    assert body == {
        **expected_common(Policy.QUOTES_ONLY),
        "ebnf": build_grammar(3, Policy.QUOTES_ONLY, max_quote_chars=80, quote_sources=sources),
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


def test_model_is_asked_of_the_server_when_not_given() -> None:
    server = FakeServer()
    gen = server.generator(model=None)
    assert gen.model is None
    gen.generate(QUESTION, SOURCES)
    gen.generate(QUESTION, SOURCES)
    paths = [r.url.path for r in server.requests]
    assert paths == ["/v1/models", "/v1/chat/completions", "/v1/chat/completions"]
    assert gen.model == MODEL and server.bodies[0]["model"] == MODEL


# -- connection settings -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "root"),
    [
        ("http://localhost:8080", "http://localhost:8080/v1"),
        ("http://localhost:8080/", "http://localhost:8080/v1"),
        ("https://llm.example.com/v1", "https://llm.example.com/v1"),
        ("http://lb.internal/llm", "http://lb.internal/llm/v1"),
    ],
)
def test_base_url_with_or_without_v1(given: str, root: str) -> None:
    assert ServerGenerator(given).base_url == root


@pytest.mark.parametrize("bad", ["localhost:8080", "ftp://host", "http://", "", "http://h:port"])
def test_bad_url_is_invalid_input(bad: str) -> None:
    with pytest.raises(InvalidInputError, match="URL|port"):
        ServerGenerator(bad)


def test_bad_settings_are_refused() -> None:
    with pytest.raises(InvalidInputError, match="unknown engine 'tgi'"):
        ServerGenerator("http://h", engine="tgi")
    with pytest.raises(ValueError, match="max_retries"):
        ServerGenerator("http://h", max_retries=-1)
    with pytest.raises(ValueError, match="timeout"):
        ServerGenerator("http://h", timeout=0)


def test_api_key_from_argument_then_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    def sent_key(**kwargs: Any) -> str | None:
        server = FakeServer()
        server.generator(**kwargs).generate(QUESTION, SOURCES)
        return server.requests[0].headers.get("authorization")

    assert sent_key() is None
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai")
    assert sent_key() == "Bearer sk-openai"
    monkeypatch.setenv("CITEFORMER_API_KEY", "sk-cite")
    assert sent_key() == "Bearer sk-cite"
    assert sent_key(api_key="sk-given") == "Bearer sk-given"


def test_retries_connection_errors_with_backoff(sleeps: list[float]) -> None:
    server = FakeServer()
    failures = iter([httpx.ConnectError("refused"), httpx.ConnectError("refused")])

    def respond(request: httpx.Request) -> httpx.Response:
        if (error := next(failures, None)) is not None:
            raise error
        return server.answer(request)

    server.respond = respond
    answer = server.generator(max_retries=2, retry_backoff=1.0).generate(QUESTION, SOURCES)
    assert answer.cited_ids == [1, 2]
    assert len(server.requests) == 3
    # retry_backoff * 2**attempt, with +-25% jitter
    assert 0.75 <= sleeps[0] <= 1.25 and 1.5 <= sleeps[1] <= 2.5


def test_retries_5xx_then_gives_up_with_the_servers_words(sleeps: list[float]) -> None:
    server = FakeServer(respond=lambda r: httpx.Response(503, json={"error": {
        "message": "Service Unavailable: model loading"}}))
    with pytest.raises(ServerResponseError, match="503.*after 3 attempts.*model loading") as info:
        server.generator(max_retries=2).generate(QUESTION, SOURCES)
    assert info.value.status_code == 503
    assert len(server.requests) == 3 and len(sleeps) == 2


def test_retry_after_header_is_honoured(sleeps: list[float]) -> None:
    server = FakeServer()
    statuses = iter([429])

    def respond(request: httpx.Request) -> httpx.Response:
        if (status := next(statuses, None)) is not None:
            return httpx.Response(status, headers={"Retry-After": "2"}, text="slow down")
        return server.answer(request)

    server.respond = respond
    server.generator().generate(QUESTION, SOURCES)
    assert sleeps == [2.0]


def test_unreachable_server_is_a_connection_error(sleeps: list[float]) -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("[Errno 111] Connection refused")

    server = FakeServer(respond=refuse)
    with pytest.raises(ServerConnectionError, match="could not reach.*llm.test.*refused"):
        server.generator(max_retries=1).generate(QUESTION, SOURCES)
    assert len(server.requests) == 2


def test_4xx_is_not_retried_and_shows_what_the_server_said(sleeps: list[float]) -> None:
    # llama-cpp-python answers a grammar it cannot parse with a 400 or 500 and its message.
    server = FakeServer(respond=lambda r: httpx.Response(400, json={"error": {
        "message": "parse: error parsing grammar: expecting ::= at {1,24}", "type": "x"}}))
    with pytest.raises(ServerResponseError) as info:
        server.generator().generate(QUESTION, SOURCES)
    message = str(info.value)
    assert "400" in message and "error parsing grammar: expecting ::= at {1,24}" in message
    assert "rejected the grammar" in message and "engine" in message
    assert info.value.status_code == 400 and "expecting" in info.value.body
    assert len(server.requests) == 1 and sleeps == []


def test_4xx_with_fastapi_detail_and_plain_text() -> None:
    detail = {"detail": [{"loc": ["body", "ebnf"], "msg": "extra fields not permitted"}]}
    server = FakeServer(respond=lambda r: httpx.Response(422, json=detail))
    with pytest.raises(ServerResponseError, match="422.*extra fields not permitted"):
        server.generator().generate(QUESTION, SOURCES)
    server = FakeServer(respond=lambda r: httpx.Response(401, text="invalid api key"))
    with pytest.raises(ServerResponseError, match="401.*invalid api key.*API key"):
        server.generator().generate(QUESTION, SOURCES)


def test_input_is_checked_before_any_request() -> None:
    server = FakeServer()
    gen = server.generator()
    with pytest.raises(EmptyQuestionError):
        gen.generate("  ", SOURCES)
    with pytest.raises(NoSourcesError):
        gen.stream(QUESTION, [])
    with pytest.raises(EmptySourceError):
        gen.astream(QUESTION, ["ok", " "])
    with pytest.raises(ValueError, match="max_new_tokens"):
        gen.generate(QUESTION, SOURCES, max_new_tokens=0)
    with pytest.raises(ValueError, match="temperature"):
        gen.generate(QUESTION, SOURCES, do_sample=True, temperature=0)
    with pytest.raises(TypeError, match="unknown grammar option"):
        gen.generate(QUESTION, SOURCES, max_words=3)
    with pytest.raises(TypeError, match="list of Source"):
        gen.generate(QUESTION, "one passage")
    with pytest.raises(ValueError, match="evidence= .* CiteGenerator only"):
        gen.generate(QUESTION, SOURCES, evidence="lexical")
    assert server.requests == []
    gen.request_body(QUESTION, SOURCES, evidence=None)  # the default of CiteGenerator's callers


# -- parsing the answer --------------------------------------------------------------------


def test_generate_parses_the_answer() -> None:
    server = FakeServer()
    answer = server.generator().generate(QUESTION, SOURCES)
    assert isinstance(answer, CitedAnswer)
    assert answer.text == "Paris is the capital of France [1]. Berlin is in Germany [2]."
    assert answer.cited_ids == [1, 2]
    assert [answer.text[c.start:c.end] for c in answer.citations] == ["[1]", "[2]"]
    assert answer.sources[2] == Source("Madrid is the capital of Spain.")
    assert answer.finish_reason == "stop"
    assert (answer.prompt_tokens, answer.generated_tokens) == (100, 8)


def test_length_cut_inside_a_marker_drops_it() -> None:
    server = FakeServer(pieces=["Paris is in France [1]. Berlin is in Germany [", "1"],
                        finish="length")
    gen = server.generator()
    answer = gen.generate(QUESTION, SOURCES)
    assert answer.finish_reason == "length"
    assert answer.text == "Paris is in France [1]. Berlin is in Germany"
    stream = gen.stream(QUESTION, SOURCES)
    assert "".join(stream) == answer.text and stream.answer == answer


@pytest.mark.parametrize(
    ("pieces", "marker"),
    [
        (["Paris is in France [7]."], "[7]"),
        (["Paris [1]. Berlin [", "12", "]."], "[12]"),
        (["Paris [1, 2]."], "[1, 2]"),
        (["Paris [0]."], "[0]"),
        (["Paris [source 1]."], "[source 1]"),
        (["Paris is in France [2"], "[2"),  # a stop inside a marker: the grammar cannot
    ],
)
def test_a_server_that_ignored_the_grammar_raises(pieces: list[str], marker: str) -> None:
    server = FakeServer(pieces=pieces)
    gen = server.generator()
    with pytest.raises(ServerIgnoredGrammarError) as info:
        gen.generate(QUESTION, SOURCES)
    assert info.value.marker == marker
    assert repr(marker) in str(info.value) and "ignored the citation grammar" in str(info.value)
    assert isinstance(info.value, GrammarViolationError)

    shown: list[str] = []
    with pytest.raises(ServerIgnoredGrammarError):
        for chunk in gen.stream(QUESTION, SOURCES):
            shown.append(chunk)
    assert marker not in "".join(shown)  # never reaches the reader, even streaming


def test_unknown_finish_reason_is_an_error() -> None:
    server = FakeServer(finish="abort")
    with pytest.raises(ServerResponseError, match="finish_reason 'abort'"):
        server.generator().generate(QUESTION, SOURCES)


def test_a_body_without_choices_is_an_error() -> None:
    server = FakeServer(respond=lambda r: httpx.Response(200, json={"object": "error"}))
    with pytest.raises(ServerResponseError, match="without choices"):
        server.generator().generate(QUESTION, SOURCES)
    server = FakeServer(respond=lambda r: httpx.Response(200, text="<html>proxy</html>"))
    with pytest.raises(ServerResponseError, match="not JSON"):
        server.generator().generate(QUESTION, SOURCES)


# -- streaming -----------------------------------------------------------------------------


def test_stream_holds_markers_back_and_joins_to_the_answer() -> None:
    pieces = ["Paris", " is the capital", " of France", " [", "1", "][", "3", "].", " Berlin",
              " is", " in Germany ", "[2", "]."]
    server = FakeServer(pieces=pieces)
    gen = server.generator()
    stream = gen.stream(QUESTION, SOURCES)
    chunks = collect(stream)
    assert "".join(chunks) == stream.answer.text
    assert stream.answer == gen.generate(QUESTION, SOURCES)
    assert stream.answer.cited_ids == [1, 3, 2]
    shown = ""
    for chunk in chunks:
        shown += chunk
        assert shown.count("[") == shown.count("]"), shown  # no chunk ends inside a marker
        assert shown == shown.rstrip() or shown == stream.answer.text
    assert chunks[:3] == ["Paris", " is the capital", " of France"]


def test_stream_answer_before_the_end_is_an_error() -> None:
    stream = FakeServer().generator().stream(QUESTION, SOURCES)
    with pytest.raises(RuntimeError, match="not finished"):
        _ = stream.answer
    collect(stream)
    with pytest.raises(RuntimeError, match="only once"):
        iter(stream)


def test_sse_cut_anywhere_in_bytes_parses_the_same() -> None:
    body = sse(chat_chunks(["Paris é [", "1", "]."], usage={"prompt_tokens": 7,
                                                           "completion_tokens": 4}))
    body = b": ping - keep-alive\r\n\r\nevent: message\r\nid: 1\r\n" + body

    def respond(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"},
                              content=byte_chunks(body, 7))

    stream = FakeServer(respond=respond).generator().stream(QUESTION, SOURCES)
    assert "".join(stream) == "Paris é [1]."
    assert (stream.answer.prompt_tokens, stream.answer.generated_tokens) == (7, 4)


def test_stream_without_usage_counts_pieces() -> None:
    body = sse(chat_chunks(["Paris [", "1", "]."]))
    server = FakeServer(respond=lambda r: httpx.Response(200, content=body))
    stream = server.generator().stream(QUESTION, SOURCES)
    collect(stream)
    assert stream.answer.generated_tokens == 3 and stream.answer.prompt_tokens == 0


def dropped_after(first: bytes) -> Iterator[bytes]:
    yield first
    raise httpx.RemoteProtocolError("peer closed connection without sending complete message")


def test_connection_lost_mid_stream_is_an_error_not_an_answer() -> None:
    first = sse(chat_chunks(["Paris is", " the capital [", "1", "]."], finish=None), done=False)
    server = FakeServer(respond=lambda r: httpx.Response(200, content=dropped_after(first)))
    stream = server.generator().stream(QUESTION, SOURCES)
    shown: list[str] = []
    with pytest.raises(ServerConnectionError, match="lost mid-answer.*not returned"):
        for chunk in stream:
            shown.append(chunk)
    assert "".join(shown) == "Paris is the capital [1]."
    with pytest.raises(RuntimeError, match="not finished"):
        _ = stream.answer


def test_stream_that_ends_without_finishing_is_an_error() -> None:
    body = sse(chat_chunks(["Paris [", "1", "]."], finish=None), done=False)
    server = FakeServer(respond=lambda r: httpx.Response(200, content=body))
    with pytest.raises(ServerConnectionError, match="without a finish reason or \\[DONE\\]"):
        collect(server.generator().stream(QUESTION, SOURCES))


def test_error_event_mid_stream_is_reported() -> None:
    body = sse([*chat_chunks(["Paris"], finish=None),
                {"error": {"message": "KV cache full", "code": 500}}], done=False)
    server = FakeServer(respond=lambda r: httpx.Response(200, content=body))
    with pytest.raises(ServerResponseError, match="mid-answer: KV cache full"):
        collect(server.generator().stream(QUESTION, SOURCES))


def test_stream_retries_before_the_first_byte(sleeps: list[float]) -> None:
    server = FakeServer()
    failures = iter([httpx.Response(502, text="bad gateway")])
    server.respond = lambda r: next(failures, None) or server.answer(r)
    stream = server.generator().stream(QUESTION, SOURCES)
    assert "".join(stream) == stream.answer.text
    assert len(server.requests) == 2 and len(sleeps) == 1


# -- async twins ---------------------------------------------------------------------------


def test_agenerate_and_astream_match_the_sync_results() -> None:
    server = FakeServer(pieces=["Paris is the capital of France [", "1", "]."])
    gen = server.generator(model=None)
    expected = gen.generate(QUESTION, SOURCES)

    async def run() -> tuple[CitedAnswer, list[str], CitedAnswer]:
        answer = await gen.agenerate(QUESTION, SOURCES)
        stream = gen.astream(QUESTION, SOURCES)
        chunks = await acollect(stream)
        return answer, chunks, stream.answer

    answer, chunks, streamed = asyncio.run(run())
    assert answer == expected == streamed
    assert "".join(chunks) == expected.text
    assert [r.url.path for r in server.requests].count("/v1/models") == 1


def async_dropped_after(first: bytes) -> AsyncIterator[bytes]:
    async def body() -> AsyncIterator[bytes]:
        yield first
        raise httpx.ReadError("connection reset by peer")

    return body()


def test_async_errors_match_the_sync_ones(sleeps: list[float]) -> None:
    first = sse(chat_chunks(["Paris [", "1", "]"], finish=None), done=False)
    dropping = FakeServer(respond=lambda r: httpx.Response(200, content=async_dropped_after(first)))
    ignoring = FakeServer(pieces=["Paris [9]."])
    refusing = FakeServer(respond=lambda r: httpx.Response(400, json={"error": "bad grammar"}))

    async def run() -> None:
        with pytest.raises(ServerConnectionError, match="lost mid-answer"):
            await acollect(dropping.generator().astream(QUESTION, SOURCES))
        with pytest.raises(ServerIgnoredGrammarError, match="'\\[9\\]'"):
            await ignoring.generator().agenerate(QUESTION, SOURCES)
        with pytest.raises(ServerIgnoredGrammarError):
            await acollect(ignoring.generator().astream(QUESTION, SOURCES))
        with pytest.raises(ServerResponseError, match="400.*bad grammar"):
            await refusing.generator().agenerate(QUESTION, SOURCES)

    asyncio.run(run())


def test_async_retries_with_backoff(sleeps: list[float]) -> None:
    server = FakeServer()
    failures = iter([httpx.ConnectError("refused")])

    def respond(request: httpx.Request) -> httpx.Response:
        if (error := next(failures, None)) is not None:
            raise error
        return server.answer(request)

    server.respond = respond
    answer = asyncio.run(server.generator(retry_backoff=0.5).agenerate(QUESTION, SOURCES))
    assert answer.cited_ids == [1, 2] and len(sleeps) == 1 and 0.375 <= sleeps[0] <= 0.625


# -- the interface -------------------------------------------------------------------------


def test_check_names_the_served_model() -> None:
    server = FakeServer()
    gen = server.generator(model=None)
    assert gen.check() == MODEL
    assert asyncio.run(gen.acheck()) == MODEL
    named = server.generator(model="other")
    assert named.check() == "other"  # a name given is kept


def test_check_fails_clearly_on_a_server_without_models() -> None:
    server = FakeServer(respond=lambda r: httpx.Response(200, json={"data": []}))
    with pytest.raises(ServerResponseError, match="no model.*model="):
        server.generator(model=None).check()


def test_is_an_answer_generator_and_closes() -> None:
    server = FakeServer()
    with server.generator() as gen:
        assert isinstance(gen, AnswerGenerator)
        gen.generate(QUESTION, SOURCES)
    assert gen._client is None
    assert "engine='llama.cpp'" in repr(gen)


def test_bodies_are_json_serialisable_for_every_policy() -> None:
    gen = ServerGenerator("http://h", "m", engine="vllm")
    for policy in (Policy.REQUIRED, Policy.AUTO):
        body = gen.request_body(QUESTION, SOURCES, policy, stream=True)
        assert json.loads(json.dumps(body)) == body
        assert body["structured_outputs"]["grammar"] == build_grammar(3, policy)
    body = gen.request_body(QUESTION, SOURCES, Policy.QUOTES_ONLY, verbatim_quotes=False)
    assert body["structured_outputs"]["grammar"] == build_grammar(3, Policy.QUOTES_ONLY)


# -- verbatim quotes (QUOTES_ONLY) ---------------------------------------------------------


def test_verbatim_quote_rules_travel_with_the_grammar() -> None:
    server = FakeServer(pieces=['The source says "the capital of', ' France" [', "1", "]."])
    gen = server.generator()
    answer = gen.generate(QUESTION, SOURCES, Policy.QUOTES_ONLY, min_quote_chars=4)
    sources = [s if isinstance(s, Source) else Source(s) for s in SOURCES]
    assert server.bodies[0]["grammar"] == build_grammar(
        3, Policy.QUOTES_ONLY, quote_sources=sources, min_quote_chars=4
    )
    assert "quote-1" in server.bodies[0]["grammar"]
    (quote,) = answer.quotes
    assert (quote.text, quote.source_id) == ("the capital of France", 1)
    assert SOURCES[0].text[quote.source_start:quote.source_end] == "the capital of France"
    stream = gen.stream(QUESTION, SOURCES, Policy.QUOTES_ONLY, min_quote_chars=4)
    shown = ""
    for chunk in stream:
        shown += chunk
        assert shown.count('"') % 2 == 0 or shown == stream.answer.text  # held until its marker
    assert stream.answer == answer


def test_a_quote_the_source_does_not_hold_raises() -> None:
    server = FakeServer(pieces=['It says "the capital of Spain" [1].'])
    with pytest.raises(ServerIgnoredGrammarError, match="not verbatim.*ignored the citation"):
        server.generator().generate(QUESTION, SOURCES, Policy.QUOTES_ONLY)
    relaxed = FakeServer(pieces=['It says "the capital of Spain" [1].']).generator()
    answer = relaxed.generate(QUESTION, SOURCES, Policy.QUOTES_ONLY, verbatim_quotes=False)
    assert answer.quotes == () and answer.cited_ids == [1]


def test_a_budget_cut_inside_a_quote_drops_it() -> None:
    server = FakeServer(pieces=['Paris [1]. It says "the capital'], finish="length")
    gen = server.generator()
    answer = gen.generate(QUESTION, SOURCES, Policy.QUOTES_ONLY)
    assert answer.text == "Paris [1]. It says" and answer.finish_reason == "length"
    assert "".join(gen.stream(QUESTION, SOURCES, Policy.QUOTES_ONLY)) == answer.text
