"""Server-sent event parsing (server/_sse.py): accept/reject tables, no server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from citeformer.errors import ServerResponseError
from citeformer.server._sse import EventParser, asse_events, sse_events

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


def lines_of(lines: list[str]) -> list[str]:
    """The lines as a server sends them: each with its line end."""
    return [f"{line}\n" for line in lines]


@pytest.mark.parametrize(("lines", "events"), CASES)
def test_events(lines: list[str], events: list) -> None:
    assert list(sse_events(iter(lines_of(lines)))) == events

    async def collect() -> list:
        async def source() -> AsyncIterator[str]:
            for line in lines_of(lines):
                yield line

        return [event async for event in asse_events(source())]

    assert asyncio.run(collect()) == events


@pytest.mark.parametrize("payload", ["<html>", "[1, 2]", "\"text\""])
def test_a_payload_that_is_not_a_json_object_is_an_error(payload: str) -> None:
    with pytest.raises(ServerResponseError, match="not a JSON object|not JSON"):
        list(sse_events(iter([f"data: {payload}\n", "\n"])))


STREAM = 'data: {"a": "x\u2028y"}\r\n\r\n: ping\r\rdata: {"b": 2}\n\ndata: {"c":\ndata: 3}\r\n\r\n'
EVENTS = [{"a": "x\u2028y"}, {"b": 2}, {"c": 3}]


@pytest.mark.parametrize("cut", range(1, len(STREAM)))
def test_a_stream_cut_anywhere_parses_the_same(cut: int) -> None:
    # CRLF, CR and LF line ends; a CR at the end of one piece and its LF in the next is one end.
    assert list(sse_events([STREAM[:cut], STREAM[cut:]])) == EVENTS


def test_a_stream_in_single_characters() -> None:
    assert list(sse_events(iter(STREAM))) == EVENTS


@pytest.mark.parametrize(
    ("text", "events"),
    [
        ("data: {\"a\": 1}\r\rdata: {\"b\": 2}\r\r", [{"a": 1}, {"b": 2}]),  # CR alone
        ("data: {\"a\": 1}\r\n\r\n", [{"a": 1}]),
        ("data: {\"a\": 1}\n\r\n", [{"a": 1}]),
    ],
)
def test_line_ends(text: str, events: list) -> None:
    assert list(sse_events([text])) == events


def test_a_line_longer_than_the_limit_is_an_error() -> None:
    parser = EventParser(max_line_chars=100)
    parser.feed("data: " + "x" * 50)
    with pytest.raises(ServerResponseError, match="line of more than 100 characters"):
        parser.feed("y" * 60)


def test_a_long_line_in_many_pieces_is_read_in_linear_time() -> None:
    # 20,000 pieces of one line: held as pieces, joined once when the line ends.
    pieces = ['data: {"a": "', *(["x"] * 20_000), '"}\n\n']
    (event,) = sse_events(pieces)
    assert event == {"a": "x" * 20_000}
