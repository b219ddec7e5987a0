"""One async path over any generator: its own coroutines where it has them, a worker thread else.

``as_async(generator)`` is the one place that decides how a coroutine asks a generator. An
``AsyncAnswerGenerator`` (``ServerGenerator``, ``citeformer.testing.FakeGenerator``) is awaited;
any other one (``CiteGenerator``: a model in this process) answers in a worker thread, and its
stream is read there one chunk at a time, only as the reader asks (the model runs no further
ahead than its own stream does), and closed when the reader stops. A request's refusal weighing
(lexical or a sentence model) runs in a worker thread before an async generator is asked.

Both framework wrappers await this and nothing else:

```python
from citeformer.integration import as_async

answering = as_async(generator)
answer = await answering.answer(request)
stream = await answering.stream(request)
async for chunk in stream:
    ...
stream.answer            # the CitedAnswer, once the loop ends
await stream.aclose()    # stops the generation; closing again does nothing
```
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import TYPE_CHECKING

from citeformer.errors import InputTypeError
from citeformer.generation.protocols import (
    AnswerChunks,
    AnswerGenerator,
    AsyncAnswerChunks,
    AsyncAnswerGenerator,
)

if TYPE_CHECKING:
    from citeformer.request import GenerationRequest
    from citeformer.types import CitedAnswer

__all__ = ["AsyncAnswering", "AsyncChunks", "as_async", "as_async_loaded"]

_DONE = object()


def as_async(generator: AnswerGenerator) -> AsyncAnswering:
    """``generator`` asked from coroutines without blocking the event loop.

    Raises:
        InputTypeError: ``generator`` is not an ``AnswerGenerator``.
    """
    if isinstance(generator, AsyncAnswering):
        return generator
    if not isinstance(generator, AnswerGenerator):
        raise InputTypeError(
            f"as_async takes a citeformer generator (CiteGenerator, ServerGenerator, or "
            f"another with answer() and answer_stream()), got {type(generator).__name__} "
            f"{generator!r:.60}"
        )
    return AsyncAnswering(generator)


async def as_async_loaded(load: Callable[[], AnswerGenerator]) -> AsyncAnswering:
    """``as_async`` of the generator ``load()`` returns, called in a worker thread.

    For a generator that may still have to load (the embedded default model: seconds).
    """
    return as_async(await asyncio.to_thread(load))


class AsyncAnswering:
    """A generator's ``answer`` and ``answer_stream`` as coroutines; made by ``as_async``."""

    def __init__(self, generator: AnswerGenerator) -> None:
        self.generator = generator
        """The generator asked."""
        self.native = isinstance(generator, AsyncAnswerGenerator)
        """Whether it is awaited (an ``AsyncAnswerGenerator``) rather than run in a thread."""

    def __repr__(self) -> str:
        return f"as_async({self.generator!r})"

    async def answer(self, request: GenerationRequest) -> CitedAnswer:
        """The answer to ``request``."""
        if not isinstance(self.generator, AsyncAnswerGenerator):
            return await asyncio.to_thread(self.generator.answer, request)
        await _weighed(request)
        return await self.generator.aanswer(request)

    async def stream(self, request: GenerationRequest) -> AsyncChunks:
        """The answer to ``request`` as a stream, started: ``async for`` it, then ``answer``.

        An in-process stream is prepared (prompt tokenized, grammar compiled) in a worker
        thread; an error in ``request`` that only the generator finds is raised here.
        """
        if not isinstance(self.generator, AsyncAnswerGenerator):
            stream = await asyncio.to_thread(self.generator.answer_stream, request)
            return _ThreadedChunks(stream)
        await _weighed(request)
        return _AwaitedChunks(self.generator.aanswer_stream(request))


class AsyncChunks:
    """The chunks of one answer, awaited: ``async for`` them once, then read ``answer``.

    An object rather than an async generator, on purpose: asyncio closes every unfinished async
    generator when ``asyncio.run`` ends, and a framework's stream may close it too; a second
    close of an async generator fails (``aclose(): asynchronous generator is already
    running``). ``aclose`` here may be called any number of times, and stops the generation.
    """

    def __init__(self, stream: AnswerChunks | AsyncAnswerChunks) -> None:
        self._stream = stream
        self._ended = False
        self._closed = False

    def __aiter__(self) -> AsyncChunks:
        return self

    async def __anext__(self) -> str:
        if self._ended or self._closed:
            raise StopAsyncIteration
        try:
            return await self._next()
        except StopAsyncIteration:
            self._ended = True
            raise

    @property
    def answer(self) -> CitedAnswer:
        """The finished answer, once iteration has ended."""
        return self._stream.answer

    async def aclose(self) -> None:
        """Stop the generation, if it still runs; closing again does nothing."""
        if self._closed:
            return
        self._closed = True
        if not self._ended:
            await self._stop()

    async def _next(self) -> str:
        raise NotImplementedError

    async def _stop(self) -> None:
        raise NotImplementedError


class _AwaitedChunks(AsyncChunks):
    """An async generator's stream, awaited on the event loop."""

    def __init__(self, stream: AsyncAnswerChunks) -> None:
        super().__init__(stream)
        self._pieces: AsyncIterator[str] | None = None

    async def _next(self) -> str:
        if self._pieces is None:
            self._pieces = aiter(self._stream)  # type: ignore[arg-type]
        return await anext(self._pieces)

    async def _stop(self) -> None:
        # Leaving early closes the connection, so a server stops generating.
        aclose = getattr(self._pieces, "aclose", None)
        if aclose is not None:
            await aclose()


class _ThreadedChunks(AsyncChunks):
    """An in-process stream, each chunk waited for in a worker thread, off the event loop."""

    def __init__(self, stream: AnswerChunks) -> None:
        super().__init__(stream)
        self._pieces: Iterator[str] | None = None
        # One step at a time; the lock lets a close wait for a step still running (the reader
        # was cancelled while waiting) instead of failing on a generator that is running.
        self._lock = threading.Lock()

    async def _next(self) -> str:
        piece = await asyncio.to_thread(self._step)
        if piece is _DONE:
            raise StopAsyncIteration
        return piece  # type: ignore[return-value]

    def _step(self) -> object:
        with self._lock:
            if self._pieces is None:
                self._pieces = iter(self._stream)  # type: ignore[arg-type]
            return next(self._pieces, _DONE)

    async def _stop(self) -> None:
        # With no step running (the reader left between chunks) the stream is closed here,
        # without giving the event loop a turn, which a close during asyncio's shutdown may
        # never get.
        if self._lock.acquire(blocking=False):
            try:
                self._close()
            finally:
                self._lock.release()
            return
        # A step is running: close once it is done, shielded, so that a cancelled reader still
        # stops the model.
        await asyncio.shield(asyncio.to_thread(self._locked_close))

    def _locked_close(self) -> None:
        with self._lock:
            self._close()

    def _close(self) -> None:
        close = getattr(self._pieces, "close", None)
        if close is not None:
            close()


async def _weighed(request: GenerationRequest) -> None:
    # The refusal weighing reads the question against every source (a sentence model, when
    # asked for): done once per request, cached on it, here in a worker thread.
    if request.refusal is not None and request.constrained:
        await asyncio.to_thread(getattr, request, "refusal_check")
