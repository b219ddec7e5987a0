"""The streams of a ``ServerGenerator``: an answer's chunks as they arrive, then the answer."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

import httpx

from citeformer.answers import StreamedAnswer
from citeformer.server._assemble import StreamAssembler, body_limit
from citeformer.server._engines import ServerCall
from citeformer.server._errors import undecodable_body
from citeformer.server._sse import Event, asse_events, sse_events
from citeformer.server._transport import Deadline, Transport


class _ServerStream(StreamedAnswer):
    """What a stream is handed: the transport, the prepared call and the deadline."""

    def __init__(self, transport: Transport, call: ServerCall, deadline: float | None) -> None:
        super().__init__()
        self._transport = transport
        self._call = call
        self._deadline = deadline


class ServerAnswerStream(_ServerStream):
    """Text chunks of one answer as the server sends them; ``answer`` holds the result at the end.

    The request is sent when iteration starts; leaving the loop early closes the connection, which
    makes the engine stop generating.
    """

    def __iter__(self) -> Iterator[str]:
        self._start()
        return self._chunks()

    def _chunks(self) -> Iterator[str]:
        run = _Run(self._call, self._deadline)
        response = self._transport.post(self._call.path, self._call.body, run.deadline)
        with contextlib.closing(response), run.reading():
            for event in run.events(self._transport.text(response, run.deadline)):
                if (chunk := run.assembler.feed(event)) is not None:
                    yield chunk
        self._answer, rest = run.assembler.finish()
        if rest:
            yield rest


class AsyncServerAnswerStream(StreamedAnswer):
    """Async ``ServerAnswerStream``: ``async for chunk in stream``, then ``stream.answer``.

    Nothing in it blocks the event loop: a call still to be prepared (``call`` a coroutine
    function: the first steered call asks the server whether it steers) is awaited on the first
    chunk, and the grammar the answer is checked against is compiled in a worker thread.
    """

    def __init__(
        self,
        transport: Transport,
        call: ServerCall | Callable[[], Awaitable[ServerCall]],
        deadline: float | None,
    ) -> None:
        super().__init__()
        self._transport = transport
        self._call = call
        self._deadline = deadline

    def __aiter__(self) -> AsyncIterator[str]:
        self._start()
        return self._chunks()

    async def _chunks(self) -> AsyncIterator[str]:
        call = self._call if isinstance(self._call, ServerCall) else await self._call()
        run = await asyncio.to_thread(_Run, call, self._deadline)
        async with self._transport.aclient() as client:
            response = await self._transport.apost(client, call.path, call.body, run.deadline)
            async with contextlib.aclosing(response):
                with run.reading():
                    async for event in run.aevents(self._transport.atext(response, run.deadline)):
                        if (chunk := run.assembler.feed(event)) is not None:
                            yield chunk
        self._answer, rest = run.assembler.finish()
        if rest:
            yield rest


class _Run:
    """One streamed answer in progress: its deadline and assembly."""

    def __init__(self, call: ServerCall, deadline: float | None) -> None:
        self.deadline = Deadline(deadline, call.base_url)
        self.assembler = StreamAssembler(call)
        self._max_line_chars = body_limit(call)
        self._origin = f"the server at {call.base_url}"
        self._base_url = call.base_url

    def events(self, text: Iterator[str]) -> Iterator[Event]:
        """The events of the body ``text``."""
        return sse_events(text, max_line_chars=self._max_line_chars, origin=self._origin)

    def aevents(self, text: AsyncIterator[str]) -> AsyncIterator[Event]:
        """The events of the async body ``text``."""
        return asse_events(text, max_line_chars=self._max_line_chars, origin=self._origin)

    @contextlib.contextmanager
    def reading(self) -> Iterator[None]:
        """A connection lost mid-answer (or cut by the deadline) becomes a clear error."""
        try:
            yield
        except httpx.TransportError as error:
            if self.deadline.passed():
                raise self.deadline.error() from error
            raise self.assembler.lost(error) from error
        except httpx.DecodingError as error:
            raise undecodable_body(error, self._base_url) from error
