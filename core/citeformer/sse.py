"""Server-sent events: the JSON payloads of an OpenAI-style completion stream.

An event is its ``data:`` lines up to a blank line
(https://html.spec.whatwg.org/multipage/server-sent-events.html); comments (``:``), ``event:``,
``id:`` and ``retry:`` lines carry no payload. OpenAI-compatible servers end a stream with
``data: [DONE]``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

from citeformer.errors import ServerResponseError


def sse_events(lines: Iterator[str]) -> Iterator[dict[str, Any] | None]:
    """The JSON payloads of a server-sent event stream; ``None`` for ``data: [DONE]``."""
    data: list[str] = []
    for line in lines:
        event = _line(line, data)
        if event is not _PENDING:
            yield event  # type: ignore[misc]
            if event is None:
                return
    if data:
        yield _payload("\n".join(data))


async def asse_events(lines: AsyncIterator[str]) -> AsyncIterator[dict[str, Any] | None]:
    """Async ``sse_events``."""
    data: list[str] = []
    async for line in lines:
        event = _line(line, data)
        if event is not _PENDING:
            yield event  # type: ignore[misc]
            if event is None:
                return
    if data:
        yield _payload("\n".join(data))


_PENDING = object()


def _line(line: str, data: list[str]) -> object:
    line = line.rstrip("\r")
    if not line:
        if not data:
            return _PENDING
        payload = "\n".join(data)
        data.clear()
        return _payload(payload)
    if line.startswith("data:"):
        value = line[5:]
        data.append(value[1:] if value.startswith(" ") else value)
    return _PENDING


def _payload(payload: str) -> dict[str, Any] | None:
    if payload.strip() == "[DONE]":
        return None
    try:
        event = json.loads(payload)
    except json.JSONDecodeError as error:
        raise ServerResponseError(
            f"the server sent an event that is not JSON: {payload[:300]!r}",
            status_code=200, body=payload,
        ) from error
    if not isinstance(event, dict):
        raise ServerResponseError(
            f"the server sent an event that is not a JSON object: {payload[:300]!r}",
            status_code=200, body=payload,
        )
    return event
