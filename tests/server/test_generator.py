"""ServerGenerator against a scripted OpenAI-compatible server (citeformer.testing.FakeServer).

The same behaviours run against a real llama.cpp server in tests/server/test_llama_server.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from citeformer import (
    AnswerGenerator,
    AsyncAnswerGenerator,
    CitedAnswer,
    Policy,
    ServerConnectionError,
    ServerGenerator,
    ServerIgnoredGrammarError,
    ServerResponseError,
    Source,
    build_grammar,
    build_request,
)
from citeformer.errors import (
    EmptyQuestionError,
    EmptySourceError,
    GrammarViolationError,
    NoSourcesError,
)
from citeformer.request import GENERATOR_DEFAULT
from citeformer.server import AsyncServerAnswerStream, ServerAnswerStream
from citeformer.testing import MODEL, FakeServer, byte_chunks, chat_chunks, sse
from tests.server.common import NORMALIZED, QUESTION, SOURCES, acollect, collect


def test_model_is_asked_of_the_server_when_not_given() -> None:
    server = FakeServer()
    gen = server.generator(model=None)
    assert gen.model is None
    gen.generate(QUESTION, SOURCES)
    gen.generate(QUESTION, SOURCES)
    paths = [r.url.path for r in server.requests]
    assert paths == ["/v1/models", "/v1/chat/completions", "/v1/chat/completions"]
    assert gen.model == MODEL and server.bodies[0]["model"] == MODEL


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
    with pytest.raises(TypeError, match="unknown option"):
        gen.generate(QUESTION, SOURCES, max_words=3)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="list of Source"):
        gen.generate(QUESTION, "one passage")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="evidence= .*CiteGenerator, or vLLM with"):
        gen.generate(QUESTION, SOURCES, evidence="lexical")
    with pytest.raises(ValueError, match="evidence= .*CiteGenerator, or vLLM with"):
        gen.answer_stream(build_request(QUESTION, SOURCES, evidence="embedding"))
    assert server.requests == []
    gen.request_body(QUESTION, SOURCES, evidence=None)  # the default of CiteGenerator's callers


def test_evidence_left_at_its_default_is_not_an_error() -> None:
    server = FakeServer()
    request = build_request(QUESTION, SOURCES)
    assert request.evidence is GENERATOR_DEFAULT
    assert server.generator().answer(request).cited_ids == [1, 2]


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


def test_connection_lost_while_a_whole_answer_arrives_is_an_error() -> None:
    server = FakeServer(respond=lambda r: httpx.Response(200, content=dropped_after(b'{"ch')))
    with pytest.raises(ServerConnectionError, match="lost while the answer arrived.*not returned"):
        server.generator().generate(QUESTION, SOURCES)


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


def test_leaving_a_stream_early_closes_the_response() -> None:
    body = sse(chat_chunks(["Paris is", " the capital [", "1", "]."]))
    responses: list[httpx.Response] = []

    def respond(request: httpx.Request) -> httpx.Response:
        responses.append(httpx.Response(200, content=byte_chunks(body, 20)))
        return responses[-1]

    gen = FakeServer(respond=respond).generator()
    for chunk in gen.stream(QUESTION, SOURCES):
        assert chunk == "Paris is"
        assert not responses[0].is_closed
        break
    assert responses[0].is_closed  # a real server stops generating when the connection closes


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


def test_async_model_is_asked_of_the_server_when_not_given() -> None:
    server = FakeServer()
    gen = server.generator(model=None)
    answer = asyncio.run(gen.agenerate(QUESTION, SOURCES))
    assert answer.cited_ids == [1, 2] and gen.model == MODEL
    assert [r.url.path for r in server.requests] == ["/v1/models", "/v1/chat/completions"]


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


# -- the interface -------------------------------------------------------------------------


def test_the_package_exports_only_its_public_names() -> None:
    import citeformer
    import citeformer.server

    assert citeformer.server.__all__ == [
        "ENGINES", "AsyncServerAnswerStream", "Engine", "ServerAnswerStream", "ServerGenerator",
    ]
    for name in ("ServerGenerator", "ServerAnswerStream", "AsyncServerAnswerStream"):
        assert getattr(citeformer, name) is getattr(citeformer.server, name)
    assert citeformer.server.ENGINES == ("llama.cpp", "vllm", "vllm-guided", "sglang")


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
        assert isinstance(gen, AnswerGenerator) and isinstance(gen, AsyncAnswerGenerator)
        gen.generate(QUESTION, SOURCES)
        assert not gen._transport.closed
    assert gen._transport.closed
    assert "engine='llama.cpp'" in repr(gen)


def test_answer_takes_a_request_as_generate_takes_arguments() -> None:
    server = FakeServer()
    gen = server.generator()
    request = build_request(QUESTION, SOURCES, Policy.AUTO, max_new_tokens=40)
    assert gen.answer(request) == gen.generate(QUESTION, SOURCES, Policy.AUTO, max_new_tokens=40)
    stream = gen.answer_stream(request)
    assert isinstance(stream, ServerAnswerStream)
    assert "".join(stream) == stream.answer.text

    async def run() -> tuple[CitedAnswer, AsyncServerAnswerStream]:
        astream = gen.aanswer_stream(request)
        await acollect(astream)
        return await gen.aanswer(request), astream

    answer, astream = asyncio.run(run())
    assert answer == astream.answer == stream.answer
    assert server.bodies[0] == server.bodies[1] == server.bodies[4]
    assert server.bodies[0]["max_tokens"] == 40


def test_a_fake_server_is_a_transport_users_can_pass() -> None:
    server = FakeServer()
    gen = ServerGenerator("http://my-llm:9000", "served", transport=server)
    assert gen.generate(QUESTION, SOURCES).cited_ids == [1, 2]
    assert str(server.requests[0].url) == "http://my-llm:9000/v1/chat/completions"
    assert server.bodies[0]["model"] == "served" and server.transport() is server


# -- verbatim quotes (QUOTES_ONLY) ---------------------------------------------------------


def test_verbatim_quote_rules_travel_with_the_grammar() -> None:
    server = FakeServer(pieces=['The source says "the capital of', ' France" [', "1", "]."])
    gen = server.generator()
    answer = gen.generate(QUESTION, SOURCES, Policy.QUOTES_ONLY, min_quote_chars=4)
    assert server.bodies[0]["grammar"] == build_grammar(
        3, Policy.QUOTES_ONLY, quote_sources=NORMALIZED, min_quote_chars=4
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
