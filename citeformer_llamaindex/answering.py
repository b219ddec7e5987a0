"""``Answering``: the generator of a synthesizer, and how each request reaches it."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Callable, Iterator, Sequence
from typing import Any

from llama_index.core.schema import NodeWithScore

from citeformer.errors import InvalidInputError, PromptTooLongError
from citeformer.generation.protocols import AnswerChunks, AnswerGenerator
from citeformer.integration import AsyncAnswering, as_async, as_async_loaded, or_default
from citeformer.request import GenerationRequest
from citeformer.types import CitedAnswer
from citeformer_llamaindex.events import ModelCall
from citeformer_llamaindex.nodes import too_long
from citeformer_llamaindex.streams import OnEnd, async_chunks

__all__ = ["Answering"]


class Answering:
    """Runs one generator for a synthesizer.

    With no generator given, the embedded default model is loaded on first use. An async
    generator (``ServerGenerator``) is awaited; a model in this process generates in a worker
    thread, off the event loop. A prompt too long for the model raises ``PromptTooLongError``
    naming the largest of the request's nodes. Each request is reported to LlamaIndex as an LLM
    call: ``call(request)`` makes its ``ModelCall`` (``citeformer_llamaindex.events``).
    """

    def __init__(
        self, generator: AnswerGenerator | None, call: Callable[[GenerationRequest], ModelCall]
    ) -> None:
        self._generator = generator
        self._call = call

    @property
    def generator(self) -> AnswerGenerator:
        """The generator; the embedded default model is loaded here, on first use, when none
        was given."""
        if self._generator is None:
            self._generator = or_default(None)
        return self._generator

    def answer(
        self, request: GenerationRequest, nodes: Sequence[NodeWithScore] = ()
    ) -> CitedAnswer:
        """The answer to ``request``, whose sources are ``nodes``."""
        generator = self.generator
        with self._call(request) as call, _explained(request, nodes):
            return call.ended(generator.answer(request))

    def stream(
        self, request: GenerationRequest, nodes: Sequence[NodeWithScore] = ()
    ) -> AnswerChunks:
        """The answer to ``request`` as a stream of text chunks."""
        generator = self.generator
        with self._call(request) as call, _explained(request, nodes):
            return call.chunks(generator.answer_stream(request))

    async def aanswer(
        self, request: GenerationRequest, nodes: Sequence[NodeWithScore] = ()
    ) -> CitedAnswer:
        """Async ``answer``."""
        answering = await self.answering()
        with self._call(request) as call, _explained(request, nodes):
            return call.ended(await answering.answer(request))

    async def astream(
        self,
        request: GenerationRequest,
        nodes: Sequence[NodeWithScore] = (),
        *,
        on_end: OnEnd,
    ) -> AsyncGenerator[str, None]:
        """Async ``stream``: the chunks to ``async for``, then ``on_end(answer)``."""
        answering = await self.answering()
        with self._call(request) as call, _explained(request, nodes):
            chunks = call.achunks(await answering.stream(request))
        return async_chunks(chunks, on_end=on_end)

    async def answering(self) -> AsyncAnswering:
        """The generator, asked from coroutines (``citeformer.integration.as_async``): a server
        awaited, a model in this process (and loading the default one) in a worker thread."""
        if self._generator is not None:
            return as_async(self._generator)
        return await as_async_loaded(lambda: self.generator)

    def token_counter(self) -> Callable[[str], list[Any]]:
        """Counts a text's tokens with the generator's tokenizer, for ``citation_chunk_size``."""
        if self._generator is not None and getattr(self._generator, "tokenizer", None) is None:
            raise InvalidInputError(
                f"citation_chunk_size counts tokens with the generator's tokenizer, and a "
                f"{type(self._generator).__name__} has none here; pass "
                "text_splitter=SentenceSplitter(chunk_size=..., tokenizer=...) with a tokenizer "
                "of the served model instead"
            )

        def count(text: str) -> list[Any]:
            # The generator is read here, at the first split, so the default model loads then.
            tokenizer = self.generator.tokenizer  # type: ignore[attr-defined]
            return list(tokenizer.encode(text, add_special_tokens=False))

        return count


@contextlib.contextmanager
def _explained(request: GenerationRequest, nodes: Sequence[NodeWithScore]) -> Iterator[None]:
    try:
        yield
    except PromptTooLongError as error:
        raise too_long(error, request.sources, nodes) from error
