"""What a generator is to its callers: the protocols every generator and stream has.

``AnswerGenerator`` (``answer``, ``answer_stream``) and ``AsyncAnswerGenerator`` (their async
twins ``aanswer``, ``aanswer_stream``) are what the framework wrappers, the command line and
``citeformer.integration.as_async`` need of a generator; ``AnswerChunks`` and
``AsyncAnswerChunks`` what they read of a stream. ``citeformer.request`` re-exports them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from citeformer.request import GenerationRequest
    from citeformer.types import CitedAnswer

__all__ = ["AnswerChunks", "AnswerGenerator", "AsyncAnswerChunks", "AsyncAnswerGenerator"]


class AnswerChunks(Protocol):
    """A stream of one answer: iterate its text chunks once, then read ``answer``."""

    def __iter__(self) -> Iterator[str]:
        """The text chunks, which join to ``answer.text``."""
        ...

    @property
    def answer(self) -> CitedAnswer:
        """The finished answer, once iteration has ended."""
        ...


class AsyncAnswerChunks(Protocol):
    """An async stream of one answer: ``async for`` its chunks once, then read ``answer``."""

    def __aiter__(self) -> AsyncIterator[str]:
        """The text chunks, which join to ``answer.text``."""
        ...

    @property
    def answer(self) -> CitedAnswer:
        """The finished answer, once iteration has ended."""
        ...


@runtime_checkable
class AnswerGenerator(Protocol):
    """What the framework wrappers and the command line need of a generator.

    ``CiteGenerator`` (a model in this process), ``ServerGenerator`` (a model behind a serving
    engine) and ``citeformer.testing.FakeGenerator`` have it. Both methods take a checked
    ``GenerationRequest`` (``citeformer.build_request``). Optional: ``context_length`` (tokens
    the model accepts, or ``None``), read by the LlamaIndex wrapper.
    """

    def answer(self, request: GenerationRequest) -> CitedAnswer:
        """The answer to ``request``; every marker is ``[k]`` with 1 <= k <= N."""
        ...

    def answer_stream(self, request: GenerationRequest) -> AnswerChunks:
        """The answer to ``request`` as text chunks; the stream's ``answer`` is set at the end."""
        ...


@runtime_checkable
class AsyncAnswerGenerator(AnswerGenerator, Protocol):
    """A generator the wrappers' async paths await instead of running it in a worker thread.

    ``ServerGenerator`` and ``citeformer.testing.FakeGenerator`` are.
    """

    async def aanswer(self, request: GenerationRequest) -> CitedAnswer:
        """Async ``answer``."""
        ...

    def aanswer_stream(self, request: GenerationRequest) -> AsyncAnswerChunks:
        """Async ``answer_stream``: ``async for chunk in ...``, then ``.answer``."""
        ...
