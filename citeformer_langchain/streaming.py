"""The chunks of one streamed answer: text as it is generated, then the citations.

``answer_chunks`` turns a core stream into ``CitationAnswerChunk``s. ``astream`` iterates a
``LazyChunks``, which on its first chunk opens either an ``AwaitedChunks`` (an async generator's
stream, awaited) or a ``ThreadedChunks`` (an in-process stream, each chunk from a worker thread).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Generator, Sequence
from typing import Protocol, cast

from langchain_core.callbacks import AsyncCallbackManagerForChainRun
from langchain_core.documents import Document
from langchain_core.runnables.config import run_in_executor

from citeformer.request import (
    AnswerChunks,
    AnswerGenerator,
    AsyncAnswerChunks,
    AsyncAnswerGenerator,
    GenerationRequest,
)
from citeformer_langchain.answer import CitationAnswerChunk
from citeformer_langchain.tracing import AsyncModelRun, TracedModel

__all__ = [
    "AwaitedChunks",
    "ChunkSource",
    "LazyChunks",
    "ThreadedChunks",
    "TracedChunks",
    "answer_chunks",
    "traced_chunks",
]

_DONE = object()


def answer_chunks(
    stream: AnswerChunks, documents: Sequence[Document]
) -> Generator[CitationAnswerChunk, None, None]:
    """A chunk per piece of ``stream``, then the last one with the citations and documents."""
    pieces = iter(stream)
    shown = ""
    try:
        # The core streams only text its answer keeps (no open marker, no trailing space), so the
        # chunks join to the answer's text.
        for piece in pieces:
            shown += piece
            yield CitationAnswerChunk(content=piece)
    finally:
        # Closing the core's iterator stops its generation thread when the consumer leaves early;
        # without it the model would run on, holding the generator's lock.
        close = getattr(pieces, "close", None)
        if close is not None:
            close()
    yield CitationAnswerChunk.last(stream.answer, documents, shown=shown)


async def traced_chunks(
    generator: AnswerGenerator,
    model: TracedModel,
    request: GenerationRequest,
    documents: Sequence[Document],
    run_manager: AsyncCallbackManagerForChainRun,
) -> ChunkSource:
    """The chunks of ``generator``'s answer to ``request``, its model run started and each
    chunk reported to it: an async generator's stream awaited, an in-process one threaded."""
    run = await AsyncModelRun.start(run_manager, model, request)
    source: ChunkSource
    if isinstance(generator, AsyncAnswerGenerator):
        try:
            source = AwaitedChunks(generator.aanswer_stream(request), documents)
        except BaseException as error:
            await run.failed(error)
            raise
    else:
        # Starting an in-process stream blocks: it starts on the first chunk, in the thread.
        source = ThreadedChunks(_started(generator, request, documents))
    return TracedChunks(source, run)


def _started(
    generator: AnswerGenerator, request: GenerationRequest, documents: Sequence[Document]
) -> Generator[CitationAnswerChunk, None, None]:
    yield from answer_chunks(generator.answer_stream(request), documents)


class ChunkSource(Protocol):
    """Where ``LazyChunks`` takes its chunks from."""

    async def next(self) -> CitationAnswerChunk:
        """The next chunk; ``StopAsyncIteration`` after the last."""
        ...

    async def aclose(self) -> None:
        """Stop the generation, if it still runs."""
        ...


class LazyChunks:
    """What ``astream`` iterates: the chunks of one answer.

    An object rather than an async generator, on purpose. asyncio closes every unfinished async
    generator at once when ``asyncio.run`` ends; had a caller left ``async for`` early, this one
    would be closed there and by LangChain's own stream at the same time, and the second close
    fails (``aclose(): asynchronous generator is already running``). ``aclose`` here may be
    called any number of times, and stops the generation.
    """

    def __init__(self, start: Callable[[], Awaitable[ChunkSource]]) -> None:
        self._start = start  # reads the input and starts the generation, on the first chunk
        self._source: ChunkSource | None = None
        self._closed = False

    def __aiter__(self) -> LazyChunks:
        return self

    async def __anext__(self) -> CitationAnswerChunk:
        if self._closed:
            raise StopAsyncIteration
        if self._source is None:
            self._source = await self._start()
        try:
            return await self._source.next()
        except StopAsyncIteration:
            await self.aclose()
            raise

    async def aclose(self) -> None:
        """Stop the generation; closing again does nothing."""
        if self._closed:
            return
        self._closed = True
        if self._source is not None:
            await self._source.aclose()


class AwaitedChunks:
    """Chunks of an async generator's stream (``aanswer_stream``), then the last chunk."""

    def __init__(self, stream: AsyncAnswerChunks, documents: Sequence[Document]) -> None:
        self._stream = stream
        self._pieces = aiter(stream)
        self._documents = documents
        self._shown = ""
        self._ended = False

    async def next(self) -> CitationAnswerChunk:
        """The next chunk, awaited on the event loop."""
        if self._ended:
            raise StopAsyncIteration
        try:
            piece = await anext(self._pieces)
        except StopAsyncIteration:
            self._ended = True
            return CitationAnswerChunk.last(self._stream.answer, self._documents, shown=self._shown)
        self._shown += piece
        return CitationAnswerChunk(content=piece)

    async def aclose(self) -> None:
        """Close the stream: leaving early closes the connection, so the server stops."""
        aclose = getattr(self._pieces, "aclose", None)
        if aclose is not None and not self._ended:
            await aclose()


class ThreadedChunks:
    """Chunks of an in-process generation, each awaited from a worker thread."""

    def __init__(self, chunks: Generator[CitationAnswerChunk, None, None]) -> None:
        self._chunks = chunks
        # Steps run in executor threads, one at a time; the lock lets aclose() wait for a step
        # still running when the consumer stops early, instead of failing on a running generator.
        self._lock = threading.Lock()

    async def next(self) -> CitationAnswerChunk:
        """The next chunk, generated in a worker thread."""
        chunk = await run_in_executor(None, self._step)
        if chunk is _DONE:
            raise StopAsyncIteration
        return cast(CitationAnswerChunk, chunk)

    async def aclose(self) -> None:
        """Stop the model, waiting for its current token."""
        # With no step running (the caller left between chunks) that is done here, without
        # yielding to the event loop: a close that asyncio runs while shutting down may get no
        # further turn of the loop.
        if self._lock.acquire(blocking=False):
            try:
                self._chunks.close()
            finally:
                self._lock.release()
            return
        # A step is running (the caller was cancelled while waiting): close once it is done,
        # shielded so that a cancelled caller still stops the model.
        await asyncio.shield(run_in_executor(None, self._close))

    def _step(self) -> object:
        with self._lock:
            return next(self._chunks, _DONE)

    def _close(self) -> None:
        with self._lock:
            self._chunks.close()


class TracedChunks:
    """The chunks of another source, each reported to the model's run as it passes."""

    def __init__(self, source: ChunkSource, run: AsyncModelRun) -> None:
        self._source = source
        self._run = run

    async def next(self) -> CitationAnswerChunk:
        """The source's next chunk, reported (the last one ends the run)."""
        try:
            chunk = await self._source.next()
        except StopAsyncIteration:
            raise
        except BaseException as error:
            await self._run.failed(error)
            raise
        await self._run.streamed(chunk)
        return chunk

    async def aclose(self) -> None:
        """Stop the source; a run not ended yet ends as closed early."""
        await self._source.aclose()
        await self._run.failed(GeneratorExit("the stream was closed before its last chunk"))
