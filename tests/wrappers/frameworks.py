"""The two framework wrappers behind one face, so that a test of what both must do runs on each.

``FRAMEWORKS`` holds a ``Framework`` per wrapper: LangChain's ``CitationRunnable`` and
LlamaIndex's ``CitationSynthesizer``, built on any citeformer generator and asked the same
question from the same passages, sync or async, whole or streamed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from langchain_core.documents import Document
from llama_index.core.schema import NodeWithScore, TextNode

from citeformer_langchain import CitationRunnable
from citeformer_llamaindex import CitationSynthesizer

QUESTION = "What is the capital of France?"
TEXTS = ["Paris is the capital of France.", "Berlin is in Germany."]


class Framework(Protocol):
    """One wrapper, asked as its framework's users ask it."""

    name: str

    def answer(self, generator: Any, texts: Sequence[str] = TEXTS, **settings: Any) -> str:
        """The answer's text."""
        ...

    async def aanswer(self, generator: Any, texts: Sequence[str] = TEXTS, **settings: Any) -> str:
        """Async ``answer``."""
        ...

    def stream(
        self, generator: Any, texts: Sequence[str] = TEXTS, **settings: Any
    ) -> Iterator[str]:
        """The answer's text chunks."""
        ...

    def astream(
        self, generator: Any, texts: Sequence[str] = TEXTS, **settings: Any
    ) -> AsyncIterator[str]:
        """Async ``stream``."""
        ...


@dataclass
class LangChain:
    """``CitationRunnable``: ``invoke``, ``ainvoke``, ``stream``, ``astream``."""

    name: str = "langchain"

    def _input(self, texts: Sequence[str]) -> dict[str, Any]:
        return {"question": QUESTION, "context": [Document(page_content=t) for t in texts]}

    def answer(self, generator: Any, texts: Sequence[str] = TEXTS, **settings: Any) -> str:
        return CitationRunnable(generator=generator, **settings).invoke(self._input(texts)).text

    async def aanswer(self, generator: Any, texts: Sequence[str] = TEXTS, **settings: Any) -> str:
        runnable = CitationRunnable(generator=generator, **settings)
        return (await runnable.ainvoke(self._input(texts))).text

    def stream(
        self, generator: Any, texts: Sequence[str] = TEXTS, **settings: Any
    ) -> Iterator[str]:
        runnable = CitationRunnable(generator=generator, **settings)
        return (chunk.text for chunk in runnable.stream(self._input(texts)))

    async def astream(
        self, generator: Any, texts: Sequence[str] = TEXTS, **settings: Any
    ) -> AsyncIterator[str]:
        runnable = CitationRunnable(generator=generator, **settings)
        chunks = runnable.astream(self._input(texts))
        try:
            async for chunk in chunks:
                if chunk.text:
                    yield chunk.text
        finally:
            await chunks.aclose()  # type: ignore[attr-defined]


@dataclass
class LlamaIndex:
    """``CitationSynthesizer``: ``synthesize`` and ``asynthesize``, streaming or not."""

    name: str = "llamaindex"

    def _nodes(self, texts: Sequence[str]) -> list[NodeWithScore]:
        return [NodeWithScore(node=TextNode(id_=f"n{i}", text=t), score=1.0)
                for i, t in enumerate(texts)]

    def answer(self, generator: Any, texts: Sequence[str] = TEXTS, **settings: Any) -> str:
        synthesizer = CitationSynthesizer(generator, **settings)
        return str(synthesizer.synthesize(QUESTION, self._nodes(texts)))

    async def aanswer(self, generator: Any, texts: Sequence[str] = TEXTS, **settings: Any) -> str:
        synthesizer = CitationSynthesizer(generator, **settings)
        return str(await synthesizer.asynthesize(QUESTION, self._nodes(texts)))

    def stream(
        self, generator: Any, texts: Sequence[str] = TEXTS, **settings: Any
    ) -> Iterator[str]:
        synthesizer = CitationSynthesizer(generator, streaming=True, **settings)
        response: Any = synthesizer.synthesize(QUESTION, self._nodes(texts))
        return response.response_gen  # type: ignore[no-any-return]

    async def astream(
        self, generator: Any, texts: Sequence[str] = TEXTS, **settings: Any
    ) -> AsyncIterator[str]:
        synthesizer = CitationSynthesizer(generator, streaming=True, **settings)
        response: Any = await synthesizer.asynthesize(QUESTION, self._nodes(texts))
        chunks = response.async_response_gen()
        try:
            async for chunk in chunks:
                yield chunk
        finally:
            await chunks.aclose()


FRAMEWORKS: list[Framework] = [LangChain(), LlamaIndex()]
