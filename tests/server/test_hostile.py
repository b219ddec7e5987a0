"""Whatever a server sends, the promise holds: a real HTTP server on 127.0.0.1, scripted per case
to misbehave, and the same cases on httpx.MockTransport.

Every answer that reaches a caller is one the grammar sent with the request accepts (a prefix
when the budget cut it), with markers in 1..N and verbatim quotes; anything else is a clear
``ServerIgnoredGrammarError``, ``ServerResponseError`` or ``ServerConnectionError``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from citeformer import (
    CitedAnswer,
    Policy,
    ServerConnectionError,
    ServerGenerator,
    ServerIgnoredGrammarError,
    ServerResponseError,
)
from citeformer.errors import CiteformerError
from citeformer.testing import MODEL, chat_chunks, sse
from tests.server.common import QUESTION, SOURCES

TOWER_QUESTION = "When was the Eiffel Tower completed?"
TOWER = [
    "The Eiffel Tower was completed in March 1889 and painted red-brown.",
    "Gustave Eiffel's company designed and built the tower in Paris.",
    "Honey bees communicate with a waggle dance.",
]

Respond = Callable[["Handler", dict[str, Any]], None]


class Handler(BaseHTTPRequestHandler):
    """Answers with the script of its server; HTTP/1.0, so a body ends when the socket does."""

    server: Hostile

    def do_GET(self) -> None:
        self._answer({})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", 0))
        self._answer(json.loads(self.rfile.read(length)))

    def _answer(self, body: dict[str, Any]) -> None:
        self.server.requests.append((self.command, self.path, dict(self.headers), body))
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.server.respond(self, body)

    def send(self, status: int, content: bytes | str, headers: dict[str, str] | None = None,
             content_type: str = "application/json") -> None:
        data = content.encode() if isinstance(content, str) else content
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def send_json(self, data: Any, status: int = 200) -> None:
        self.send(status, json.dumps(data))

    def send_events(self, events: list[Any], *, done: bool = True, delay: float = 0.0) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for event in events:
            self.wfile.write(sse([event], done=False))
            self.wfile.flush()
            if delay:
                time.sleep(delay)
        if done:
            self.wfile.write(b"data: [DONE]\r\n\r\n")

    def log_message(self, *_: Any) -> None:
        pass


class Hostile(ThreadingHTTPServer):
    """A server on a free loopback port that answers every request with ``respond``."""

    daemon_threads = True

    def __init__(self, respond: Respond) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.respond = respond
        self.requests: list[tuple[str, str, dict[str, str], dict[str, Any]]] = []
        self.released = threading.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


@contextlib.contextmanager
def serving(respond: Respond) -> Iterator[Hostile]:
    server = Hostile(respond)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.released.set()
        server.shutdown()
        server.server_close()


def completion(text: Any, finish: Any = "stop", **extra: Any) -> dict[str, Any]:
    choice = {"index": 0, "message": {"role": "assistant", "content": text},
              "finish_reason": finish}
    return {"id": "x", "object": "chat.completion", "choices": [choice], **extra}


def answering(text: str, finish: str = "stop") -> Respond:
    """A server that writes ``text`` whatever grammar it was sent (three characters an event)."""

    def respond(handler: Handler, body: dict[str, Any]) -> None:
        if handler.command == "GET":
            handler.send_json({"object": "list", "data": [{"id": MODEL, "object": "model"}]})
        elif body.get("stream"):
            pieces = [text[i:i + 3] for i in range(0, len(text), 3)]
            handler.send_events(chat_chunks(pieces, finish))
        else:
            handler.send_json(completion(text, finish))

    return respond


def generator(server: Hostile, **kwargs: Any) -> ServerGenerator:
    kwargs.setdefault("retry_backoff", 0.0)
    return ServerGenerator(server.url, MODEL, **kwargs)


async def _astream(stream: Any) -> CitedAnswer:
    chunks = [chunk async for chunk in stream]
    assert "".join(chunks) == stream.answer.text
    return stream.answer  # type: ignore[no-any-return]


def _stream(stream: Any) -> CitedAnswer:
    assert "".join(stream) == stream.answer.text
    return stream.answer  # type: ignore[no-any-return]


WAYS: dict[str, Callable[..., CitedAnswer]] = {
    "generate": lambda gen, *args, **options: gen.generate(*args, **options),
    "stream": lambda gen, *args, **options: _stream(gen.stream(*args, **options)),
    "agenerate": lambda gen, *args, **options: asyncio.run(gen.agenerate(*args, **options)),
    "astream": lambda gen, *args, **options: asyncio.run(_astream(gen.astream(*args, **options))),
}
"""The four ways to ask: each returns the answer (the streams check that their chunks join)."""


def outcome_of(way: str, gen: ServerGenerator, *args: Any, **options: Any) -> CitedAnswer | str:
    """The answer, or the error raised, as ``"ErrorName: message"``."""
    try:
        return WAYS[way](gen, *args, **options)
    except CiteformerError as error:
        return f"{type(error).__name__}: {error}"


def every_way(gen: ServerGenerator, *args: Any, **options: Any) -> list[CitedAnswer | str]:
    """The outcome of each of the four ways."""
    return [outcome_of(way, gen, *args, **options) for way in WAYS]


# -- 1. the answer is re-parsed against the grammar that was sent ------------------------------

IGNORED = [
    ("nested-bracket", Policy.REQUIRED, "Paris [[1] is ] the capital of France [1].", "stop"),
    ("long-bracket-span", Policy.AUTO, "See [this bracket span is longer than 24 chars] too [2].",
     "stop"),
    ("marker-over-a-line-break", Policy.AUTO, "Paris is [\n7] the capital [1].", "stop"),
    ("sentence-without-marker", Policy.REQUIRED,
     "Paris is the capital of France. Berlin is in Germany [2].", "stop"),
    ("answer-that-cannot-end", Policy.REQUIRED, "Paris is the capital of France [1]. Berlin",
     "stop"),
    ("out-of-range", Policy.AUTO, "Paris is the capital [7].", "stop"),
]


@pytest.mark.parametrize(("policy", "text", "finish"), [c[1:] for c in IGNORED],
                         ids=[c[0] for c in IGNORED])
def test_an_answer_the_grammar_refuses_is_never_returned(
    policy: Policy, text: str, finish: str
) -> None:
    with serving(answering(text, finish)) as server:
        outcomes = every_way(generator(server), QUESTION, SOURCES, policy)
    for outcome in outcomes:
        assert isinstance(outcome, str), outcome
        assert outcome.startswith("ServerIgnoredGrammarError: ")
        assert "ignored the citation grammar" in outcome and "'grammar' field" in outcome


def test_a_fabricated_quote_cut_by_the_budget_is_never_returned() -> None:
    # Before the grammar was re-parsed, the budget cut dropped the quote and returned 'He said'.
    text = 'He said "the tower was painted gold in 1999" loudly and more'
    with serving(answering(text, "length")) as server:
        outcomes = every_way(generator(server), TOWER_QUESTION, TOWER, Policy.QUOTES_ONLY)
    assert all(str(o).startswith("ServerIgnoredGrammarError: ") for o in outcomes), outcomes


def test_a_vllm_that_ignores_guided_grammar_is_told_to_use_structured_outputs() -> None:
    with serving(answering("Paris is the capital. Berlin [2].")) as server:
        (outcome, *_) = every_way(generator(server, engine="vllm-guided"), QUESTION, SOURCES)
    assert "'guided_grammar' field" in str(outcome) and "use engine='vllm'" in str(outcome)


def test_a_server_that_obeys_the_grammar_is_answered() -> None:
    text = 'It says "The Eiffel Tower was completed in March 1889" [1].'
    with serving(answering(text)) as server:
        outcomes = every_way(generator(server), TOWER_QUESTION, TOWER, Policy.QUOTES_ONLY)
    assert all(isinstance(o, CitedAnswer) and o.text == text for o in outcomes), outcomes
    assert [len(o.quotes) for o in outcomes if isinstance(o, CitedAnswer)] == [1, 1, 1, 1]


# -- 2. a body that is not one completion is a clear ServerResponseError ------------------------


def events_of(*events: Any, done: bool = True) -> Respond:
    def respond(handler: Handler, body: dict[str, Any]) -> None:
        handler.send_events(list(events), done=done)

    return respond


def json_of(data: Any) -> Respond:
    def respond(handler: Handler, body: dict[str, Any]) -> None:
        handler.send_json(data)

    return respond


MALFORMED = [
    ("content-a-number", json_of(completion(12345)), False, "message.content is a int"),
    ("content-null", json_of(completion(None)), False, "holds no text"),
    ("choices-an-object", json_of({"choices": {"0": completion("Paris [1].")["choices"][0]}}),
     False, "choices is a dict"),
    ("two-choices", json_of({"choices": completion("a [1].")["choices"] * 2}), False,
     "2 choices"),
    ("prompt-tokens-text", json_of(completion("Paris [1].", usage={"prompt_tokens": "abc"})),
     False, "usage.prompt_tokens is 'abc'"),
    ("usage-a-list", json_of(completion("Paris [1].", usage=[1, 2])), False, "usage is a list"),
    ("finish-a-number", json_of(completion("Paris [1].", finish=3)), False, "finish_reason is 3"),
    ("message-a-string", json_of({"choices": [{"index": 0, "message": "Paris [1]."}]}), False,
     "message is a str"),
    ("body-a-list", json_of([completion("Paris [1].")]), False, "not a JSON object"),
    ("sse-two-choices", events_of(
        {"choices": [{"index": 0, "delta": {"content": "Paris is "}}]},
        {"choices": [{"index": 1, "delta": {"content": "Rome is "}}]},
        {"choices": [{"index": 0, "delta": {"content": "here [1]."}, "finish_reason": "stop"}]},
    ), True, "a choice of index 1"),
    ("sse-choices-a-number", events_of({"choices": 5}), True, "choices is a int"),
    ("sse-choices-of-strings", events_of({"choices": ["hello"]}), True, "a choice is a str"),
    ("sse-delta-content-a-list", events_of({"choices": [{"index": 0, "delta": {"content": [1]}}]}),
     True, "delta.content is a list"),
    ("sse-text-after-finish", events_of(
        {"choices": [{"index": 0, "delta": {"content": "Paris [1]."}, "finish_reason": "stop"}]},
        {"choices": [{"index": 0, "delta": {"content": " More [2]."}}]},
    ), True, "text after the finish reason"),
    ("sse-completion-tokens-negative", events_of(
        {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": -1}}), True,
     "usage.completion_tokens is -1"),
    ("sse-not-json", lambda h, b: h.send(200, b"data: {oops\n\n", content_type="text/plain"),
     True, "not JSON"),
]


@pytest.mark.parametrize(("respond", "stream", "match"), [c[1:] for c in MALFORMED],
                         ids=[c[0] for c in MALFORMED])
def test_a_malformed_body_is_a_clear_error(respond: Respond, stream: bool, match: str) -> None:
    with serving(respond) as server:
        gen = generator(server)
        call = (lambda: "".join(gen.stream(QUESTION, SOURCES))) if stream else (
            lambda: gen.generate(QUESTION, SOURCES))
        with pytest.raises(ServerResponseError, match=match) as info:
            call()
    assert info.value.status_code == 200 and "127.0.0.1" in str(info.value)


def corrupt_gzip(handler: Handler, body: dict[str, Any]) -> None:
    content_type = "text/event-stream" if body.get("stream") else "application/json"
    handler.send(200, b"\x1f\x8b\x08\x00 this is not gzip", {"Content-Encoding": "gzip"},
                 content_type=content_type)


def nested_arrays(handler: Handler, body: dict[str, Any]) -> None:
    handler.send(200, "[" * 200_000 + "]" * 200_000)


def huge_headers(handler: Handler, body: dict[str, Any]) -> None:
    handler.send_response(200)
    for n in range(1600):
        handler.send_header(f"X-Filler-{n}", "x" * 1000)
    handler.end_headers()


@pytest.mark.parametrize("stream", [False, True], ids=["generate", "stream"])
def test_a_corrupt_gzip_body_is_a_response_error(stream: bool) -> None:
    # Once a raw httpx.DecodingError.
    with serving(corrupt_gzip) as server:
        gen = generator(server)
        call = (lambda: "".join(gen.stream(QUESTION, SOURCES))) if stream else (
            lambda: gen.generate(QUESTION, SOURCES))
        with pytest.raises(ServerResponseError, match="Content-Encoding cannot decode"):
            call()


def test_json_nested_past_the_recursion_limit_is_a_response_error() -> None:
    # 400 KB of nested arrays once raised a raw RecursionError.
    with serving(nested_arrays) as server, pytest.raises(
        ServerResponseError, match="nested too deeply"
    ):
        generator(server).generate(QUESTION, SOURCES)


def test_oversized_headers_are_named_as_such() -> None:
    # 1.6 MB of headers once read "could not reach the server".
    with serving(huge_headers) as server, pytest.raises(ServerConnectionError) as info:
        generator(server, max_retries=0).generate(QUESTION, SOURCES)
    message = str(info.value)
    assert "malformed HTTP response" in message and "headers are larger" in message
    assert "could not reach" not in message


def test_a_redirect_says_the_server_redirected_and_where() -> None:
    def respond(handler: Handler, body: dict[str, Any]) -> None:
        handler.send(302, "", {"Location": "https://sso.example.com/login?next=/v1"})

    with serving(respond) as server:
        outcomes = every_way(generator(server), QUESTION, SOURCES)
        assert len(server.requests) == 4  # not followed, not retried
    for outcome in outcomes:
        assert str(outcome).startswith("ServerResponseError: ")
        assert "redirected POST /v1/chat/completions to https://sso.example.com/login" in outcome
        assert "not JSON" not in str(outcome)


@pytest.mark.parametrize("value", ["²", "٣", "1e9", "NaN", "Mon, 99 Foo 2024"])
def test_an_odd_retry_after_falls_back_to_the_backoff(value: str) -> None:
    calls = iter(range(100))

    def respond(handler: Handler, body: dict[str, Any]) -> None:
        if next(calls) == 0:
            handler.send_response(429)
            handler.send_header("Retry-After", value)
            handler.send_header("Content-Length", "0")
            handler.end_headers()
        else:
            handler.send_json(completion("Paris is the capital [1]."))

    with serving(respond) as server:
        started = time.perf_counter()
        answer = generator(server, retry_backoff=0.01).generate(QUESTION, SOURCES, Policy.AUTO)
        assert time.perf_counter() - started < 2
    assert answer.text == "Paris is the capital [1]."


# -- 3. bounds: the size of an answer, the time of a call ---------------------------------------


def test_an_answer_longer_than_max_new_tokens_can_produce_is_refused() -> None:
    with serving(answering("word " * 2000 + "[1].")) as server:
        outcomes = every_way(generator(server), QUESTION, SOURCES, Policy.AUTO,
                             max_new_tokens=16)
    for outcome in outcomes:
        assert str(outcome).startswith("ServerResponseError: ") and "max_new_tokens" in outcome


def test_sixty_four_thousand_events_stream_in_linear_time() -> None:
    events = 64_000
    pieces = [" [1]" if k % 7 == 6 else " word" for k in range(events)]

    def respond(handler: Handler, body: dict[str, Any]) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.end_headers()
        handler.wfile.write(sse(chat_chunks(pieces, "length")))

    with serving(respond) as server:
        stream = generator(server).stream(QUESTION, SOURCES, Policy.AUTO, max_new_tokens=events)
        started = time.perf_counter()
        chunks = list(stream)
        elapsed = time.perf_counter() - started
    assert "".join(chunks) == stream.answer.text == "".join(pieces)
    print(f"{events} events streamed and checked in {elapsed:.2f}s")
    assert elapsed < 30


def trickling(handler: Handler, body: dict[str, Any]) -> None:
    """Sends a little every 50 ms, for ever: no read ever times out."""
    if body.get("stream"):
        pieces = [" word"] * 10_000
        handler.send_events(chat_chunks(pieces), delay=0.05)
        return
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.end_headers()
    while not handler.server.released.is_set():
        handler.wfile.write(b" ")
        handler.wfile.flush()
        time.sleep(0.05)


def stalling(handler: Handler, body: dict[str, Any]) -> None:
    """Sends the headers, then nothing."""
    handler.send_response(200)
    handler.send_header("Content-Type", "text/event-stream")
    handler.end_headers()
    handler.wfile.flush()
    handler.server.released.wait(30)


def processing(handler: Handler, body: dict[str, Any]) -> None:
    """Answers ``102 Processing`` every 50 ms, for ever: each resets a read timeout."""
    while not handler.server.released.is_set():
        handler.wfile.write(b"HTTP/1.1 102 Processing\r\n\r\n")
        handler.wfile.flush()
        time.sleep(0.05)


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("respond", [trickling, stalling, processing],
                         ids=["trickling", "stalling", "processing"])
def test_the_deadline_ends_every_call(respond: Respond, way: str) -> None:
    with serving(respond) as server:
        gen = generator(server, timeout=30, deadline=0.6)
        started = time.perf_counter()
        outcome = outcome_of(way, gen, QUESTION, SOURCES, Policy.AUTO)
        elapsed = time.perf_counter() - started
    assert str(outcome).startswith("ServerConnectionError: "), outcome
    assert "within the deadline of 0.6s" in str(outcome)
    assert elapsed < 3, elapsed  # 0.6 s, and the time to start a client and see it pass


# -- 4. a password in the URL is sent, never shown ----------------------------------------------


def test_a_password_in_the_url_is_sent_as_basic_auth_and_shown_nowhere(
    caplog: pytest.LogCaptureFixture,
) -> None:
    expected = "Basic " + base64.b64encode(b"alice:s3cret").decode()

    def respond(handler: Handler, body: dict[str, Any]) -> None:
        if handler.headers.get("Authorization") != expected:
            handler.send_json({"error": {"message": "who are you"}}, status=401)
        elif body.get("messages", [{}])[-1].get("content", "").endswith("fail?"):
            handler.send_json({"error": {"message": "boom"}}, status=500)
        else:
            answering("Paris is the capital [1].")(handler, body)

    with serving(respond) as server, caplog.at_level(logging.INFO, logger="httpx"):
        url = server.url.replace("http://", "http://alice:s3cret@")
        gen = ServerGenerator(url, retry_backoff=0, max_retries=1)
        outcomes = every_way(gen, QUESTION, SOURCES, Policy.AUTO)
        failures = every_way(gen, "Is Paris the capital of France, or should this fail?", SOURCES,
                             Policy.AUTO)
        assert all(path.startswith("/v1/") for _, path, _, _ in server.requests)
    assert all(isinstance(o, CitedAnswer) for o in outcomes), outcomes
    assert all(str(f).startswith("ServerResponseError: ") and "boom" in f for f in failures)
    shown = " ".join([repr(gen), gen.base_url, *map(str, failures), caplog.text])
    assert "HTTP Request: POST" in caplog.text and "s3cret" not in shown and "alice" not in shown


# -- the same cases without a network (httpx.MockTransport) ------------------------------------


def mock(respond: Callable[[httpx.Request], httpx.Response], **kwargs: Any) -> ServerGenerator:
    return ServerGenerator("http://llm.test", MODEL, retry_backoff=0.0,
                           transport=httpx.MockTransport(respond), **kwargs)


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (completion(12345), "message.content is a int"),
        ({"choices": {"0": {}}}, "choices is a dict"),
        (completion("Paris [1].", usage={"prompt_tokens": "abc"}), "usage.prompt_tokens"),
        ({"choices": [None]}, "a choice is a NoneType"),
        ({"choices": [{"index": True, "text": "a [1]."}]}, "index True"),
        ({"choices": [{"index": 0, "text": 7}]}, "text is a int"),
    ],
)
def test_malformed_bodies_offline(data: Any, match: str) -> None:
    gen = mock(lambda r: httpx.Response(200, json=data))
    with pytest.raises(ServerResponseError, match=match):
        gen.generate(QUESTION, SOURCES)


@pytest.mark.parametrize(
    ("events", "match"),
    [
        ([{"choices": 5}], "choices is a int"),
        ([{"choices": ["hello"]}], "a choice is a str"),
        ([{"choices": [{"index": 0, "delta": {"content": "a"}},
                       {"index": 1, "delta": {"content": "b"}}]}], "index 1"),
        ([{"choices": [{"index": 0, "delta": "Paris"}]}], "delta is a str"),
        ([{"usage": "many"}], "usage is a str"),
    ],
)
def test_malformed_events_offline(events: list[Any], match: str) -> None:
    gen = mock(lambda r: httpx.Response(200, content=sse(events)))
    with pytest.raises(ServerResponseError, match=match):
        "".join(gen.stream(QUESTION, SOURCES))


def test_a_redirect_offline() -> None:
    gen = mock(lambda r: httpx.Response(307, headers={"Location": "http://other:1/v1"}))
    with pytest.raises(ServerResponseError, match="redirected POST .* to http://other:1/v1"):
        gen.generate(QUESTION, SOURCES)


def test_the_grammar_offline() -> None:
    gen = mock(lambda r: httpx.Response(200, json=completion("Paris is [\n7] the capital [1].")))
    with pytest.raises(ServerIgnoredGrammarError, match="ignored the citation grammar"):
        gen.generate(QUESTION, SOURCES, Policy.AUTO)


def test_a_password_offline() -> None:
    seen: list[httpx.Request] = []

    def respond(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(503, text="down")

    gen = ServerGenerator("https://u:pw0rd@llm.test", "m", retry_backoff=0, max_retries=0,
                          transport=httpx.MockTransport(respond))
    with pytest.raises(ServerResponseError) as info:
        gen.generate(QUESTION, SOURCES)
    assert "pw0rd" not in str(info.value) + repr(gen) + str(seen[0].url)
    assert seen[0].headers["authorization"] == "Basic " + base64.b64encode(b"u:pw0rd").decode()
