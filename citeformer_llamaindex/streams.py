"""The text chunks of a streamed answer, as LlamaIndex's streaming responses read them.

Each of them calls ``on_end`` with the finished answer once read to the end (a stream left
early does not), so that the response's metadata is filled in then. Each stops the generation
when its reader leaves early, and ``ClosingAsyncStreamingResponse`` passes that on from the
reader of an async response.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable, Generator

from llama_index.core.base.response.schema import AsyncStreamingResponse

from citeformer.generation.protocols import AnswerChunks, AsyncAnswerChunks
from citeformer.types import CitedAnswer

__all__ = ["ClosingAsyncStreamingResponse", "OnEnd", "async_chunks", "no_async_chunks",
           "no_chunks", "sync_chunks"]

OnEnd = Callable[[CitedAnswer], None] | None
"""What a stream calls with its answer once read to the end."""


class ClosingAsyncStreamingResponse(AsyncStreamingResponse):
    """An ``AsyncStreamingResponse`` whose stream stops when its reader leaves early.

    LlamaIndex's reads ``response_gen`` inside two async generators of its own
    (``async_response_gen`` over ``_yield_response``) and closes neither's source: a reader that
    breaks out and closes ``async_response_gen()`` leaves ``response_gen`` open as long as the
    response lives, and the model generating. Here each closes what it reads. The rest is
    LlamaIndex's: one reader at a time, and ``response_txt`` holds what was read.
    """

    async def async_response_gen(self) -> AsyncGenerator[str, None]:
        texts = self._yield_response()
        try:
            async for text in texts:
                yield text
        finally:
            await texts.aclose()

    async def _yield_response(self) -> AsyncGenerator[str, None]:
        async with self._lock:
            if self.response_txt is None and self.response_gen is not None:
                self.response_txt = ""
                try:
                    async for text in self.response_gen:
                        self.response_txt += text
                        yield text
                finally:
                    await self.response_gen.aclose()
            else:
                yield self.response_txt


def sync_chunks(stream: AnswerChunks, on_end: OnEnd) -> Generator[str, None, None]:
    """The chunks of an in-process stream, read in the caller's thread."""
    # Closing this generator closes the stream's iterator too (yield from passes close on).
    yield from stream
    if on_end is not None:
        on_end(stream.answer)


async def async_chunks(stream: AsyncAnswerChunks, on_end: OnEnd) -> AsyncGenerator[str, None]:
    """The chunks of an async stream (``citeformer.integration.as_async``), awaited."""
    chunks = aiter(stream)
    try:
        async for chunk in chunks:
            yield chunk
    finally:
        # Leaving early stops the generation: a model in this process stops, a server's
        # connection is closed.
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
