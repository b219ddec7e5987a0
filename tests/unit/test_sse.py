"""Server-sent event parsing: accept/reject tables, no server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from citeformer.errors import ServerResponseError
from citeformer.sse import asse_events, sse_events

CASES = [
    (["data: {\"a\": 1}", "", "data: [DONE]", ""], [{"a": 1}, None]),
    (["data: {\"a\": 1}\r", "\r", "data: [DONE]\r", "\r"], [{"a": 1}, None]),  # CRLF
    ([": ping", "", "event: message", "id: 7", "retry: 100", "data: {\"a\": 2}", ""], [{"a": 2}]),
    (["data: {\"a\":", "data:  3}", ""], [{"a": 3}]),  # one event over two data lines
    (["data:{\"a\": 4}", ""], [{"a": 4}]),  # no space after the colon
    (["data: {\"a\": 5}"], [{"a": 5}]),  # the last event without its blank line
    (["data: [DONE]", "", "data: {\"after\": 1}", ""], [None]),  # nothing after [DONE]
    (["", "", ""], []),
]


@pytest.mark.parametrize(("lines", "events"), CASES)
def test_events(lines: list[str], events: list) -> None:
    assert list(sse_events(iter(lines))) == events

    async def collect() -> list:
        async def source() -> AsyncIterator[str]:
            for line in lines:
                yield line

        return [event async for event in asse_events(source())]

    assert asyncio.run(collect()) == events


@pytest.mark.parametrize("payload", ["<html>", "[1, 2]", "\"text\""])
def test_a_payload_that_is_not_a_json_object_is_an_error(payload: str) -> None:
    with pytest.raises(ServerResponseError, match="not a JSON object|not JSON"):
        list(sse_events(iter([f"data: {payload}", ""])))
