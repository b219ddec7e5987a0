"""``FakeServer``: a scripted OpenAI-compatible server on ``httpx.MockTransport``, no network."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import httpx

from citeformer.decoding.payload import HANDSHAKE, HANDSHAKE_REPLY, PAYLOAD_KEY

if TYPE_CHECKING:
    from citeformer.server import ServerGenerator

MODEL = "smollm2-test"
"""The model a ``FakeServer`` lists at ``GET /v1/models``."""

DEFAULT_PIECES = (
    "Paris is the capital", " of France [", "1", "].", " Berlin", " is in Germany [2", "].",
)


class FakeServer(httpx.MockTransport):
    """An OpenAI-compatible server that answers from a script and records every request.

    It is an ``httpx`` transport, sync and async: hand it to a ``ServerGenerator`` and nothing
    goes over the network. Completions (chat or text, streamed as server-sent events or not)
    answer ``pieces``, one piece an event, joined when not streamed, with ``finish`` as the
    finish reason; ``GET /v1/models`` lists ``MODEL``.

    Instantiate:
        ```python
        import httpx

        from citeformer import ServerGenerator
        from citeformer.testing import FakeServer

        server = FakeServer()                                   # the default answer, cites [1][2]
        server = FakeServer(pieces=["Paris [", "1", "]."])      # an answer in three events
        server = FakeServer(pieces=["Paris [7]."])              # a server ignoring the grammar
        server = FakeServer(pieces=["Paris is"], finish="length")
        server = FakeServer(respond=lambda request: httpx.Response(503, text="busy"))
        ```

    Use:
        ```python
        gen = ServerGenerator("http://llm.test", "my-model", transport=server)
        gen = server.generator()                                 # the same, model MODEL
        gen.generate("Capital of France?", sources)
        server.bodies[-1]["grammar"]                             # what was sent
        server.requests[-1].url.path                             # '/v1/chat/completions'
        ```

    ``respond`` replaces the answer to a request: it returns an ``httpx.Response`` or raises an
    ``httpx`` transport error (``httpx.ConnectError``...); ``server.answer(request)`` is the
    scripted answer, for a ``respond`` that fails only some requests. ``sse``, ``chat_chunks``
    and ``byte_chunks`` (this module) write bodies of your own.

    ``steering=True``: a vLLM running citeformer's steering processor, which refuses the
    handshake of ``ServerGenerator.steers()`` with the processor's reply (HTTP 400); without it,
    the handshake is answered like any request, as a vLLM without the processor does.
    Handshakes are counted in ``handshakes``, not listed in ``bodies``.
    """

    def __init__(
        self,
        pieces: Sequence[str] = DEFAULT_PIECES,
        finish: str = "stop",
        respond: Callable[[httpx.Request], httpx.Response] | None = None,
        steering: bool = False,
    ) -> None:
        super().__init__(self.handle)
        self.pieces = list(pieces)
        self.finish = finish
        self.respond = respond
        self.steering = steering
        self.requests: list[httpx.Request] = []

    @property
    def bodies(self) -> list[dict[str, Any]]:
        """The JSON bodies of the POST requests received, in order, handshakes left out."""
        return [body for body in self._posted() if not _is_handshake(body)]

    @property
    def handshakes(self) -> int:
        """How many steering handshakes (``ServerGenerator.steers``) were received."""
        return sum(_is_handshake(body) for body in self._posted())

    def _posted(self) -> list[dict[str, Any]]:
        return [json.loads(r.content) for r in self.requests if r.method == "POST"]

    def transport(self) -> FakeServer:
        """This server, as the transport to give ``ServerGenerator(transport=...)``."""
        return self

    def generator(self, **kwargs: Any) -> ServerGenerator:
        """A ``ServerGenerator`` on this server (model ``MODEL``, no backoff, unless given)."""
        from citeformer.server import ServerGenerator

        kwargs.setdefault("model", MODEL)
        kwargs.setdefault("retry_backoff", 0.0)
        return ServerGenerator("http://llm.test:8080", transport=self, **kwargs)

    def handle(self, request: httpx.Request) -> httpx.Response:
        """Record ``request`` and answer it (with ``respond``, if set)."""
        self.requests.append(request)
        if self.respond is not None:
            return self.respond(request)
        return self.answer(request)

    def answer(self, request: httpx.Request) -> httpx.Response:
        """The scripted answer to ``request``."""
        if request.url.path.endswith("/models"):
            return httpx.Response(200, json={"object": "list", "data": [
                {"id": MODEL, "object": "model", "owned_by": "me"}]})
        body = json.loads(request.content)
        if self.steering and _is_handshake(body):
            return httpx.Response(400, json={"error": {
                "message": HANDSHAKE_REPLY, "type": "BadRequestError", "code": 400}})
        text = "".join(self.pieces)
        usage = {"prompt_tokens": 100, "completion_tokens": len(self.pieces) + 1,
                 "total_tokens": 101 + len(self.pieces)}
        chat = request.url.path.endswith("/chat/completions")
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


def _is_handshake(body: dict[str, Any]) -> bool:
    return (body.get("vllm_xargs") or {}).get(PAYLOAD_KEY) == HANDSHAKE


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


def byte_chunks(data: bytes, size: int) -> Iterator[bytes]:
    """``data`` cut every ``size`` bytes, wherever that falls (mid-line, mid-character)."""
    for start in range(0, len(data), size):
        yield data[start:start + size]
