"""The two framework wrappers behind one face, so that a test of what both must do runs on each.

``FRAMEWORKS`` holds a ``Framework`` per wrapper: LangChain's ``CitationRunnable`` and
LlamaIndex's ``CitationSynthesizer``, built on any citeformer generator and asked the same
question from the same passages in each of the four ways (``HOWS``): whole or streamed, sync or
async. Each also reports the model errors its framework's tracing received (LangChain's
``on_llm_error``, LlamaIndex's ``EXCEPTION`` payload of the LLM event).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.documents import Document
from llama_index.core.callbacks import CallbackManager
from llama_index.core.callbacks.base_handler import BaseCallbackHandler as LlamaHandler
from llama_index.core.callbacks.schema import CBEventType, EventPayload
from llama_index.core.schema import NodeWithScore, TextNode

from citeformer_langchain import CitationAnswer, CitationRunnable
from citeformer_llamaindex import CitationSynthesizer

QUESTION = "What is the capital of France?"
TEXTS = ["Paris is the capital of France.", "Berlin is in Germany."]
How = Literal["invoke", "ainvoke", "stream", "astream"]
HOWS: tuple[How, ...] = ("invoke", "ainvoke", "stream", "astream")


@dataclass
class Answered:
    """What a wrapper returned, in the core's terms."""

    text: str
    abstained: bool
    source_ids: list[int]
    band: str | None


@dataclass
class Traced:
    """The model errors a wrapper's tracing received."""

    errors: list[BaseException] = field(default_factory=list)


class Framework:
    """One wrapper, asked as its framework's users ask it."""

    name = ""

    def ask(
        self, generator: Any, how: How, question: str = QUESTION, texts: Sequence[str] = TEXTS,
        traced: Traced | None = None, **settings: Any,
    ) -> Answered:
        """The answer, asked ``how``; an error is raised as the framework raises it."""
        if how == "invoke":
            return self.answer(generator, question, texts, traced, **settings)
        if how == "stream":
            return self.streamed(generator, question, texts, traced, **settings)

        async def ask() -> Answered:
            if how == "ainvoke":
                return await self.aanswer(generator, question, texts, traced, **settings)
            chunks = self.astream(generator, question, texts, traced, **settings)
            return await self.aread(chunks)

        return asyncio.run(ask())

    def build(self, generator: Any, traced: Traced | None = None, **settings: Any) -> Any:
        """The wrapper on ``generator``, its tracing into ``traced``."""
        raise NotImplementedError

    def answer(self, generator: Any, question: str, texts: Sequence[str],
               traced: Traced | None, **settings: Any) -> Answered:
        raise NotImplementedError

    async def aanswer(self, generator: Any, question: str, texts: Sequence[str],
                      traced: Traced | None, **settings: Any) -> Answered:
        raise NotImplementedError

    def streamed(self, generator: Any, question: str, texts: Sequence[str],
                 traced: Traced | None, **settings: Any) -> Answered:
        raise NotImplementedError

    def chunks(self, generator: Any, **settings: Any) -> Iterator[Any]:
        """The framework's own sync stream of the answer to ``QUESTION`` from ``TEXTS``."""
        raise NotImplementedError

    def astream(self, generator: Any, question: str = QUESTION, texts: Sequence[str] = TEXTS,
                traced: Traced | None = None, **settings: Any) -> AsyncIterator[Any]:
        """The framework's own async stream of the answer."""
        raise NotImplementedError

    async def aread(self, chunks: AsyncIterator[Any]) -> Answered:
        raise NotImplementedError


class LangChain(Framework):
    """``CitationRunnable``: ``invoke``, ``ainvoke``, ``stream``, ``astream``."""

    name = "langchain"

    def build(self, generator: Any, traced: Traced | None = None, **settings: Any) -> Any:
        return CitationRunnable(generator=generator, **settings)

    def _call(self, question: str, texts: Sequence[str], traced: Traced | None) -> tuple[
        dict[str, Any], Any
    ]:
        config: Any = {"callbacks": [_LangChainErrors(traced)]} if traced is not None else None
        return {"question": question, "context": [Document(page_content=t) for t in texts]}, config

    def answer(self, generator: Any, question: str, texts: Sequence[str],
               traced: Traced | None, **settings: Any) -> Answered:
        return _of_langchain(self.build(generator, **settings).invoke(
            *self._call(question, texts, traced)))

    async def aanswer(self, generator: Any, question: str, texts: Sequence[str],
                      traced: Traced | None, **settings: Any) -> Answered:
        return _of_langchain(await self.build(generator, **settings).ainvoke(
            *self._call(question, texts, traced)))

    def streamed(self, generator: Any, question: str, texts: Sequence[str],
                 traced: Traced | None, **settings: Any) -> Answered:
        chunks = list(self.build(generator, **settings).stream(
            *self._call(question, texts, traced)))
        return _of_langchain(_added(chunks))

    def chunks(self, generator: Any, **settings: Any) -> Iterator[Any]:
        return self.build(generator, **settings).stream(  # type: ignore[no-any-return]
            self._call(QUESTION, TEXTS, None)[0])

    def astream(self, generator: Any, question: str = QUESTION, texts: Sequence[str] = TEXTS,
                traced: Traced | None = None, **settings: Any) -> AsyncIterator[Any]:
        return self.build(generator, **settings).astream(  # type: ignore[no-any-return]
            *self._call(question, texts, traced))

    async def aread(self, chunks: AsyncIterator[Any]) -> Answered:
        return _of_langchain(_added([chunk async for chunk in chunks]))


class LlamaIndex(Framework):
    """``CitationSynthesizer``: ``synthesize`` and ``asynthesize``, streaming or not."""

    name = "llamaindex"

    def build(self, generator: Any, traced: Traced | None = None, **settings: Any) -> Any:
        if traced is not None:
            settings["callback_manager"] = CallbackManager([_LlamaIndexErrors(traced)])
        return CitationSynthesizer(generator, **settings)

    def _nodes(self, texts: Sequence[str]) -> list[NodeWithScore]:
        return [NodeWithScore(node=TextNode(id_=f"n{i}", text=t), score=1.0)
                for i, t in enumerate(texts)]

    def answer(self, generator: Any, question: str, texts: Sequence[str],
               traced: Traced | None, **settings: Any) -> Answered:
        response = self.build(generator, traced, **settings).synthesize(
            question, self._nodes(texts))
        return _of_llamaindex(response.response, response.metadata)

    async def aanswer(self, generator: Any, question: str, texts: Sequence[str],
                      traced: Traced | None, **settings: Any) -> Answered:
        response = await self.build(generator, traced, **settings).asynthesize(
            question, self._nodes(texts))
        return _of_llamaindex(response.response, response.metadata)

    def streamed(self, generator: Any, question: str, texts: Sequence[str],
                 traced: Traced | None, **settings: Any) -> Answered:
        synthesizer = self.build(generator, traced, streaming=True, **settings)
        response = synthesizer.synthesize(question, self._nodes(texts))
        return _of_llamaindex("".join(response.response_gen), response.metadata)

    def chunks(self, generator: Any, **settings: Any) -> Iterator[Any]:
        synthesizer = self.build(generator, streaming=True, **settings)
        return synthesizer.synthesize(QUESTION, self._nodes(TEXTS)).response_gen  # type: ignore[no-any-return]

    async def astream(  # type: ignore[override]
        self, generator: Any, question: str = QUESTION, texts: Sequence[str] = TEXTS,
        traced: Traced | None = None, **settings: Any,
    ) -> AsyncIterator[Any]:
        synthesizer = self.build(generator, traced, streaming=True, **settings)
        response = await synthesizer.asynthesize(question, self._nodes(texts))
        chunks = response.async_response_gen()
        try:
            async for chunk in chunks:
                yield chunk
        finally:
            await chunks.aclose()
        yield response  # last: the response, its metadata filled in

    async def aread(self, chunks: AsyncIterator[Any]) -> Answered:
        read = [chunk async for chunk in chunks]
        return _of_llamaindex("".join(read[:-1]), read[-1].metadata)


FRAMEWORKS: list[Framework] = [LangChain(), LlamaIndex()]


def _added(chunks: list[Any]) -> CitationAnswer:
    total = chunks[0]
    for chunk in chunks[1:]:
        total = total + chunk
    return total  # type: ignore[no-any-return]


def _of_langchain(answer: Any) -> Answered:
    refusal = answer.refusal
    return Answered(answer.text, bool(answer.abstained),
                    [c.source_id for c in answer.citations],
                    None if refusal is None else refusal["band"])


def _of_llamaindex(text: str | None, metadata: dict[str, Any]) -> Answered:
    refusal = metadata.get("refusal")
    return Answered(text or "", bool(metadata.get("abstained")),
                    [c["source_id"] for c in metadata.get("citations", [])],
                    None if refusal is None else refusal["band"])


class _LangChainErrors(BaseCallbackHandler):
    def __init__(self, traced: Traced | None) -> None:
        self.traced = traced

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        if self.traced is not None:
            self.traced.errors.append(error)


class _LlamaIndexErrors(LlamaHandler):
    def __init__(self, traced: Traced) -> None:
        super().__init__(event_starts_to_ignore=[], event_ends_to_ignore=[])
        self.traced = traced

    def on_event_start(self, event_type: CBEventType, payload: dict[str, Any] | None = None,
                       event_id: str = "", parent_id: str = "", **kwargs: Any) -> str:
        return event_id

    def on_event_end(self, event_type: CBEventType, payload: dict[str, Any] | None = None,
                     event_id: str = "", **kwargs: Any) -> None:
        if event_type is CBEventType.LLM and payload and EventPayload.EXCEPTION in payload:
            self.traced.errors.append(payload[EventPayload.EXCEPTION])

    def start_trace(self, trace_id: str | None = None) -> None:
        pass

    def end_trace(self, trace_id: str | None = None,
                  trace_map: dict[str, list[str]] | None = None) -> None:
        pass
