"""Requests to one server: URL and credentials, retries, Retry-After, redirects, the deadline
(server/_transport.py), through a scripted server (httpx.MockTransport)."""

from __future__ import annotations

import asyncio
import email.utils
import logging
import math
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from citeformer import (
    InvalidInputError,
    ServerConnectionError,
    ServerGenerator,
    ServerResponseError,
)
from citeformer.errors import InputTypeError
from citeformer.server._transport import MAX_WAIT_S, SAID_LIMIT_BYTES, retry_after
from citeformer.testing import FakeServer, byte_chunks, chat_chunks, sse
from tests.server.common import QUESTION, SOURCES, collect

# -- address and settings ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "root"),
    [
        ("http://localhost:8080", "http://localhost:8080/v1"),
        ("http://localhost:8080/", "http://localhost:8080/v1"),
        ("https://llm.example.com/v1", "https://llm.example.com/v1"),
        ("http://lb.internal/llm", "http://lb.internal/llm/v1"),
        ("http://user:secret@lb.internal:81/llm", "http://lb.internal:81/llm/v1"),
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


@pytest.mark.parametrize(
    ("setting", "value", "error"),
    [
        ("retry_backoff", -1.0, InvalidInputError),
        ("retry_backoff", math.nan, InvalidInputError),
        ("retry_backoff", math.inf, InvalidInputError),
        ("retry_backoff", "fast", InputTypeError),
        ("timeout", math.inf, InvalidInputError),
        ("timeout", math.nan, InvalidInputError),
        ("timeout", -3, InvalidInputError),
        ("max_retries", True, InvalidInputError),
        ("max_retries", 1.5, InvalidInputError),
        ("deadline", 0, InvalidInputError),
        ("deadline", -2.5, InvalidInputError),
        ("deadline", math.nan, InvalidInputError),
        ("deadline", math.inf, InvalidInputError),
        ("deadline", "10", InputTypeError),
    ],
)
def test_settings_are_checked(setting: str, value: Any, error: type[Exception]) -> None:
    with pytest.raises(error, match=setting) as info:
        ServerGenerator("http://h", **{setting: value})
    assert repr(value) in str(info.value) or str(value) in str(info.value)


def test_good_settings_are_kept() -> None:
    gen = ServerGenerator("http://h", timeout=5, max_retries=0, retry_backoff=0, deadline=30)
    assert (gen.timeout, gen.max_retries, gen.retry_backoff, gen.deadline) == (5.0, 0, 0.0, 30.0)
    assert ServerGenerator("http://h").deadline is None


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


# -- credentials in the URL ------------------------------------------------------------------


def test_a_password_in_the_url_is_sent_as_basic_auth_and_never_shown(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")  # the URL's credentials win over the env's
    server = FakeServer(respond=lambda r: httpx.Response(503, text="busy"))
    gen = ServerGenerator("http://alice:s3cret%21@llm.test:8080", "m", transport=server,
                          retry_backoff=0, max_retries=1)
    assert "s3cret" not in repr(gen) and "s3cret" not in gen.base_url
    with caplog.at_level(logging.INFO, logger="httpx"), pytest.raises(ServerResponseError) as info:
        gen.generate(QUESTION, SOURCES)
    assert "s3cret" not in str(info.value)
    request = server.requests[0]
    assert request.headers["authorization"] == httpx.BasicAuth("alice", "s3cret!")._auth_header
    assert "alice" not in str(request.url) and "s3cret" not in str(request.url)
    assert "HTTP Request" in caplog.text and "s3cret" not in caplog.text


def test_a_bad_url_with_a_password_does_not_show_it() -> None:
    with pytest.raises(InvalidInputError) as info:
        ServerGenerator("http://bob:hunter2@host:port")
    assert "hunter2" not in str(info.value) and "***" in str(info.value)
    with pytest.raises(InvalidInputError, match="one of them"):
        ServerGenerator("http://bob:hunter2@host", api_key="sk-1")


# -- retries ---------------------------------------------------------------------------------


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


def busy_then_answer(server: FakeServer, retry_after_values: list[str]) -> None:
    pending = iter(retry_after_values)

    def respond(request: httpx.Request) -> httpx.Response:
        if (value := next(pending, None)) is not None:
            return httpx.Response(429, headers={"Retry-After": value.encode()}, text="slow")
        return server.answer(request)

    server.respond = respond


def test_retry_after_header_is_honoured(sleeps: list[float]) -> None:
    server = FakeServer()
    busy_then_answer(server, ["2"])
    server.generator().generate(QUESTION, SOURCES)
    assert sleeps == [2.0]


def test_retry_after_is_cut_to_the_longest_wait(sleeps: list[float]) -> None:
    server = FakeServer()
    busy_then_answer(server, ["3600", "120"])
    server.generator(max_retries=2).generate(QUESTION, SOURCES)
    assert sleeps == [MAX_WAIT_S, MAX_WAIT_S] == [8.0, 8.0]  # 16 s in all with max_retries=2


@pytest.mark.parametrize("value", ["²", "1e3", "-1", "soon", "nan", "inf", "0x10", "١"])
def test_a_retry_after_that_is_not_seconds_falls_back_to_the_backoff(
    sleeps: list[float], value: str
) -> None:
    server = FakeServer()
    busy_then_answer(server, [value])
    server.generator(retry_backoff=1.0).generate(QUESTION, SOURCES)
    assert len(sleeps) == 1 and 0.75 <= sleeps[0] <= 1.25


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("2", 2.0), (" 1.5 ", 1.5), ("0", 0.0), ("²", None), ("", None), (None, None),
     ("Wed, 21 Oct 2015 07:28:00 GMT", 0.0), ("Wed, 21 Oct 2015 07:28:00", None)],
)
def test_retry_after_values(value: str | None, seconds: float | None) -> None:
    assert retry_after(value) == seconds


def test_retry_after_as_a_date() -> None:
    when = email.utils.formatdate(time.time() + 5, usegmt=True)
    after = retry_after(when)
    assert after is not None and 3.5 <= after <= 5.0


@pytest.mark.parametrize(
    ("error", "attempts", "match"),
    [
        # Unreachable: nothing was generated yet, so it is tried again.
        (httpx.ConnectError("[Errno 111] Connection refused"), 2,
         "could not reach.*llm.test.*refused"),
        # No answer in time: the server may be generating, so it is not.
        (httpx.ReadTimeout("timed out"), 1, "no answer within the timeout"),
    ],
)
def test_a_server_that_does_not_answer_is_a_connection_error(
    sleeps: list[float], error: httpx.TransportError, attempts: int, match: str
) -> None:
    def fail(request: httpx.Request) -> httpx.Response:
        raise error

    server = FakeServer(respond=fail)
    with pytest.raises(ServerConnectionError, match=match):
        server.generator(max_retries=1).generate(QUESTION, SOURCES)
    assert len(server.requests) == attempts and len(sleeps) == attempts - 1


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


def test_an_error_answer_is_read_only_so_far() -> None:
    sent: list[int] = []

    def huge() -> Iterator[bytes]:
        for _ in range(1000):
            sent.append(1)
            yield b"x" * 10_000

    server = FakeServer(respond=lambda r: httpx.Response(400, content=huge()))
    with pytest.raises(ServerResponseError, match="400") as info:
        server.generator().generate(QUESTION, SOURCES)
    assert len(info.value.body) == SAID_LIMIT_BYTES and len(sent) < 10


@pytest.mark.parametrize("status", [301, 302, 307, 308])
def test_a_redirect_says_where_to(status: int) -> None:
    location = "https://admin:pw@login.example.com/sso?next=/v1"
    server = FakeServer(respond=lambda r: httpx.Response(status, headers={"Location": location}))
    with pytest.raises(ServerResponseError) as info:
        server.generator().generate(QUESTION, SOURCES)
    message = str(info.value)
    assert "redirected POST /v1/chat/completions to https://admin:***@login.example.com" in message
    assert "not JSON" not in message and ":pw@" not in message
    assert info.value.status_code == status and len(server.requests) == 1


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


# -- the deadline ----------------------------------------------------------------------------


def test_a_wait_that_would_pass_the_deadline_is_not_waited(sleeps: list[float]) -> None:
    server = FakeServer()
    busy_then_answer(server, ["5"])
    with pytest.raises(ServerConnectionError, match="deadline of 2s.*retry was due in 5.0s"):
        server.generator(deadline=2).generate(QUESTION, SOURCES)
    assert sleeps == [] and len(server.requests) == 1


def test_each_request_waits_no_longer_than_the_deadline_leaves() -> None:
    server = FakeServer()
    server.generator(timeout=60, deadline=2.5).generate(QUESTION, SOURCES)
    timeout = server.requests[0].extensions["timeout"]
    assert 2.0 < timeout["read"] <= 2.5 and 2.0 < timeout["connect"] <= 2.5
    server.generator(timeout=1.5, deadline=30).generate(QUESTION, SOURCES)
    assert server.requests[1].extensions["timeout"]["read"] == 1.5


def test_the_deadline_counts_from_the_start_of_each_call(monkeypatch: pytest.MonkeyPatch) -> None:
    server = FakeServer()
    gen = server.generator(deadline=1)
    clock = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    gen.generate(QUESTION, SOURCES)
    stream = gen.stream(QUESTION, SOURCES)
    clock[0] += 5  # a stream's deadline starts when its iteration does
    assert "".join(stream) == stream.answer.text


def test_a_deadline_passed_while_the_answer_arrives_is_an_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    body = sse(chat_chunks(["Paris is the capital", " of France [", "1", "]."]))
    server = FakeServer(respond=lambda r: httpx.Response(200, content=byte_chunks(body, 50)))
    clock = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    stream = server.generator(deadline=10).stream(QUESTION, SOURCES)
    chunks = iter(stream)
    assert next(chunks) == "Paris is the capital"
    clock[0] += 11
    with pytest.raises(ServerConnectionError, match="within the deadline of 10s"):
        collect(chunks)
    with pytest.raises(RuntimeError, match="not finished"):
        _ = stream.answer
