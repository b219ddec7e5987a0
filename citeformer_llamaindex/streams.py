"""The text chunks of a streamed answer, as LlamaIndex's streaming responses read them.

Each of them calls ``on_end`` with the finished answer once read to the end (a stream left
early does not), so that the response's metadata is filled in then.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Callable, Generator, Iterator

from citeformer.request import AnswerChunks, AsyncAnswerChunks
from citeformer.types import CitedAnswer

__all__ = ["OnEnd", "async_chunks", "native_async_chunks", "no_async_chunks", "no_chunks",
           "sync_chunks"]

OnEnd = Callable[[CitedAnswer], None] | None
"""What a stream calls with its answer once read to the end."""


def sync_chunks(stream: AnswerChunks, on_end: OnEnd) -> Generator[str, None, None]:
    """The chunks of an in-process stream, read in the caller's thread."""
    yield from stream
    if on_end is not None:
        on_end(stream.answer)


async def async_chunks(stream: AnswerChunks, on_end: OnEnd) -> AsyncGenerator[str, None]:
    """The chunks of an in-process stream, each waited for in a worker thread."""
    chunks: Iterator[str] = iter(stream)
    try:
        while (chunk := await asyncio.to_thread(next, chunks, None)) is not None:
            yield chunk
    finally:
        # Stops the generation if the caller left early; a chunk still being fetched in a
        # worker thread makes close() raise, and that generation then ends on its own.
        close = getattr(chunks, "close", None)
        if close is not None:
            with contextlib.suppress(ValueError):
                close()
    if on_end is not None:
        on_end(stream.answer)


async def native_async_chunks(
    stream: AsyncAnswerChunks, on_end: OnEnd
) -> AsyncGenerator[str, None]:
    """The chunks of an async generator's stream (``aanswer_stream``), awaited."""
    chunks = aiter(stream)
    try:
        async for chunk in chunks:
            yield chunk
    finally:
        # Leaving early closes the connection, so the server stops generating.
        aclose = getattr(chunks, "aclose", None)
        if aclose is not None:
            await aclose()
    if on_end is not None:
        on_end(stream.answer)


def no_chunks() -> Generator[str, None, None]:
    """An empty stream, in place until the real one is set."""
    yield from ()


async def no_async_chunks() -> AsyncGenerator[str, None]:
    """An empty async stream, in place until the real one is set."""
    return
    yield  # pragma: no cover
