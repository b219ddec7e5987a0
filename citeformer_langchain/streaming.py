"""The chunks of one streamed answer: text as it is generated, then the citations.

``answer_chunks`` turns a core stream into ``CitationAnswerChunk``s. ``astream`` iterates a
``LazyChunks``, which on its first chunk opens the core's async stream
(``citeformer.integration.as_async``: a server's awaited, an in-process model's read in a worker
thread) as an ``AnswerChunkSource``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator, Sequence
from typing import Protocol

from langchain_core.callbacks import AsyncCallbackManagerForChainRun
from langchain_core.documents import Document

from citeformer.generation.protocols import AnswerChunks
from citeformer.integration import AsyncAnswering, AsyncChunks
from citeformer.request import GenerationRequest
from citeformer_langchain.answer import CitationAnswerChunk
from citeformer_langchain.tracing import AsyncModelRun, TracedModel

__all__ = [
    "AnswerChunkSource",
    "ChunkSource",
    "LazyChunks",
    "TracedChunks",
    "answer_chunks",
    "traced_chunks",
]


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
    answering: AsyncAnswering,
    model: TracedModel,
    request: GenerationRequest,
    documents: Sequence[Document],
    run_manager: AsyncCallbackManagerForChainRun,
) -> ChunkSource:
    """The chunks of ``answering``'s answer to ``request``, its model run started and each
    chunk reported to it."""
    run = await AsyncModelRun.start(run_manager, model, request)
    try:
        stream = await answering.stream(request)
    except BaseException as error:
        await run.failed(error)
        raise
    return TracedChunks(AnswerChunkSource(stream, documents), run)


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


class AnswerChunkSource:
    """The pieces of a core stream as ``CitationAnswerChunk``s, then the last chunk."""

    def __init__(self, stream: AsyncChunks, documents: Sequence[Document]) -> None:
        self._stream = stream
        self._documents = documents
        self._shown = ""
        self._ended = False

    async def next(self) -> CitationAnswerChunk:
        """The next chunk."""
        if self._ended:
            raise StopAsyncIteration
        try:
            piece = await anext(self._stream)
        except StopAsyncIteration:
            self._ended = True
            return CitationAnswerChunk.last(self._stream.answer, self._documents, shown=self._shown)
        self._shown += piece
        return CitationAnswerChunk(content=piece)

    async def aclose(self) -> None:
        """Stop the generation: a model stops, a server's connection is closed."""
        await self._stream.aclose()


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
