"""A scripted OpenAI-compatible server on ``httpx.MockTransport``: records every request and
answers chat/text completions, streamed (SSE) or not, with text split into the pieces given."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import httpx

from citeformer import ServerGenerator

MODEL = "smollm2-test"


def sse(events: Sequence[dict[str, Any] | str], *, done: bool = True) -> bytes:
    """An SSE body as sse-starlette writes it: ``data: ...`` lines, CRLF, a blank line each."""
    lines = [f"data: {e if isinstance(e, str) else json.dumps(e)}\r\n\r\n" for e in events]
    if done:
        lines.append("data: [DONE]\r\n\r\n")
    return "".join(lines).encode()


def chat_chunks(
    pieces: Sequence[str], finish: str | None = "stop", usage: dict[str, int] | None = None
) -> list[dict[str, Any]]:
    """The ``chat.completion.chunk`` events of a streamed answer written in ``pieces``."""
    events: list[dict[str, Any]] = [
        {"object": "chat.completion.chunk", "choices": [
            {"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}]}
    ]
    for piece in pieces:
        events.append({"object": "chat.completion.chunk", "choices": [
            {"index": 0, "delta": {"content": piece}, "finish_reason": None}]})
    if finish is not None:
        events.append({"object": "chat.completion.chunk", "choices": [
            {"index": 0, "delta": {}, "finish_reason": finish}]})
    if usage is not None:
        events.append({"object": "chat.completion.chunk", "choices": [], "usage": usage})
    return events


class FakeServer:
    """Answers every completion with ``pieces`` (joined when not streaming).

    ``respond`` replaces the answer for a request: return an ``httpx.Response`` or raise an
    ``httpx`` transport error.
    """

    def __init__(
        self,
        pieces: Sequence[str] = ("Paris is the capital", " of France [", "1", "].", " Berlin",
                                 " is in Germany [2", "]."),
        finish: str = "stop",
        respond: Callable[[httpx.Request], httpx.Response] | None = None,
    ) -> None:
        self.pieces = list(pieces)
        self.finish = finish
        self.respond = respond
        self.requests: list[httpx.Request] = []

    @property
    def bodies(self) -> list[dict[str, Any]]:
        return [json.loads(r.content) for r in self.requests if r.method == "POST"]

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    def generator(self, **kwargs: Any) -> ServerGenerator:
        kwargs.setdefault("model", MODEL)
        kwargs.setdefault("retry_backoff", 0.0)
        return ServerGenerator("http://llm.test:8080", transport=self.transport(), **kwargs)

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if self.respond is not None:
            return self.respond(request)
        return self.answer(request)

    def answer(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"object": "list", "data": [
                {"id": MODEL, "object": "model", "owned_by": "me"}]})
        body = json.loads(request.content)
        text = "".join(self.pieces)
        usage = {"prompt_tokens": 100, "completion_tokens": len(self.pieces) + 1,
                 "total_tokens": 101 + len(self.pieces)}
        chat = request.url.path == "/v1/chat/completions"
        if body.get("stream"):
            if chat:
                events = chat_chunks(self.pieces, self.finish, usage)
            else:
                events = [{"choices": [{"index": 0, "text": p, "finish_reason": None}]}
                          for p in self.pieces]
                events.append({"choices": [{"index": 0, "text": "", "finish_reason": self.finish}]})
            return httpx.Response(
                200, headers={"content-type": "text/event-stream"}, content=sse(events)
            )
        choice: dict[str, Any] = {"index": 0, "finish_reason": self.finish}
        if chat:
            choice["message"] = {"role": "assistant", "content": text}
        else:
            choice["text"] = text
        return httpx.Response(200, json={"id": "x", "choices": [choice], "usage": usage})


def byte_chunks(data: bytes, size: int) -> Iterator[bytes]:
    """``data`` cut every ``size`` bytes, wherever that falls (mid-line, mid-character)."""
    for start in range(0, len(data), size):
        yield data[start:start + size]
