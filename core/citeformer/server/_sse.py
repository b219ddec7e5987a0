"""Server-sent events: the JSON payloads of an OpenAI-style completion stream.

An event is its ``data:`` lines up to a blank line; a line ends at CRLF, LF or CR
(https://html.spec.whatwg.org/multipage/server-sent-events.html); comments (``:``), ``event:``,
``id:`` and ``retry:`` lines carry no payload. OpenAI-compatible servers end a stream with
``data: [DONE]``. ``EventParser`` reads text as it arrives, in pieces cut anywhere, and does no
I/O; ``sse_events`` and ``asse_events`` run it over an iterator of such pieces.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator
from typing import Any

from citeformer.errors import ServerResponseError

Event = dict[str, Any] | None
"""One payload: a JSON object, or ``None`` for ``data: [DONE]``."""

DEFAULT_MAX_LINE_CHARS = 16 * 1024 * 1024
_LINE_END = re.compile(r"\r\n|\r|\n")


class EventParser:
    """Turns pieces of an event stream into its payloads; the work is linear in the text."""

    def __init__(
        self, *, max_line_chars: int = DEFAULT_MAX_LINE_CHARS, origin: str = "the server"
    ) -> None:
        self._max_line_chars = max_line_chars
        self._origin = origin  # who sent the stream, for messages
        self._partial: list[str] = []  # the line being received, in the pieces it came in
        self._partial_chars = 0
        self._data: list[str] = []
        self.done = False
        """Whether ``data: [DONE]`` was received (the parser then takes nothing more)."""

    def feed(self, text: str) -> list[Event]:
        """The payloads that ``text`` completes."""
        if self.done:
            return []
        if "\n" not in text and "\r" not in text:
            self._hold(text)
            return []
        lines = _LINE_END.split("".join(self._partial) + text)
        rest = lines.pop()
        if rest == "" and text.endswith("\r"):
            # "\r" then "\n" in the next piece is one line end, not two: wait for that piece.
            lines[-1] += "\r"
            rest = lines.pop()
        self._partial, self._partial_chars = [], 0
        self._hold(rest)
        return self._events(lines)

    def close(self) -> list[Event]:
        """The payload of a last event sent without its blank line."""
        if self.done:
            return []
        lines = ["".join(self._partial).rstrip("\r")]
        self._partial, self._partial_chars = [], 0
        events = self._events(lines)
        if self._data and not self.done:
            events.append(_payload("\n".join(self._data), self._origin))
            self._data = []
        return events

    def _hold(self, text: str) -> None:
        if not text:
            return
        self._partial.append(text)
        self._partial_chars += len(text)
        if self._partial_chars > self._max_line_chars:
            raise ServerResponseError(
                f"{self._origin} sent a line of more than {self._max_line_chars} characters in its "
                "event stream, more than any completion event holds; the answer was not returned",
                status_code=200, body="".join(self._partial)[:1000],
            )

    def _events(self, lines: list[str]) -> list[Event]:
        events: list[Event] = []
        for line in lines:
            if line:
                if line.startswith("data:"):
                    value = line[5:]
                    self._data.append(value[1:] if value.startswith(" ") else value)
                continue
            if not self._data:
                continue
            event = _payload("\n".join(self._data), self._origin)
            self._data = []
            events.append(event)
            if event is None:
                self.done = True
                break
        return events


def sse_events(
    pieces: Iterable[str], *, max_line_chars: int = DEFAULT_MAX_LINE_CHARS,
    origin: str = "the server",
) -> Iterator[Event]:
    """The payloads of an event stream received as ``pieces`` of text; ``None`` for [DONE].

    ``max_line_chars`` bounds a line; ``origin`` names the sender in messages.
    """
    parser = EventParser(max_line_chars=max_line_chars, origin=origin)
    for piece in pieces:
        yield from parser.feed(piece)
        if parser.done:
            return
    yield from parser.close()


async def asse_events(
    pieces: AsyncIterable[str], *, max_line_chars: int = DEFAULT_MAX_LINE_CHARS,
    origin: str = "the server",
) -> AsyncIterator[Event]:
    """Async ``sse_events``."""
    parser = EventParser(max_line_chars=max_line_chars, origin=origin)
    async for piece in pieces:
        for event in parser.feed(piece):
            yield event
        if parser.done:
            return
    for event in parser.close():
        yield event


def _payload(payload: str, origin: str) -> Event:
    if payload.strip() == "[DONE]":
        return None
    try:
        event = json.loads(payload)
    except (json.JSONDecodeError, RecursionError) as error:
        raise ServerResponseError(
            f"{origin} sent an event that is not JSON (or JSON nested too deeply to read): "
            f"{payload[:300]!r}",
            status_code=200, body=payload[:1000],
        ) from error
    if not isinstance(event, dict):
        raise ServerResponseError(
            f"{origin} sent an event that is not a JSON object: {payload[:300]!r}",
            status_code=200, body=payload,
        )
    return event
