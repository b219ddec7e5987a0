"""A LlamaIndex response synthesizer whose ``[N]`` markers can only name retrieved nodes."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, Callable, Generator, Iterator, Mapping, Sequence
from typing import Any, Literal

import llama_index.core.instrumentation as instrument
from llama_index.core.base.response.schema import (
    RESPONSE_TYPE,
    AsyncStreamingResponse,
    Response,
    StreamingResponse,
)
from llama_index.core.callbacks.base import CallbackManager
from llama_index.core.callbacks.schema import CBEventType, EventPayload
from llama_index.core.constants import DEFAULT_CONTEXT_WINDOW
from llama_index.core.instrumentation.events.synthesis import (
    SynthesizeEndEvent,
    SynthesizeStartEvent,
)
from llama_index.core.node_parser import SentenceSplitter, TextSplitter
from llama_index.core.prompts import BasePromptTemplate, PromptTemplate, PromptType
from llama_index.core.prompts.mixin import PromptDictType
from llama_index.core.response_synthesizers.base import BaseSynthesizer, QueryTextType
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle
from llama_index.core.types import RESPONSE_TEXT_TYPE

from citeformer import AnswerGenerator, CitedAnswer, CiteGenerator, Policy, Quote, Source
from citeformer.answers import DEFAULT_MAX_NEW_TOKENS
from citeformer.errors import EmptySourceError, PromptTooLongError
from citeformer.prompt import DEFAULT_INSTRUCTIONS
from citeformer_llamaindex.llm import CiteformerLLM
from citeformer_llamaindex.splitting import CitationChunker

dispatcher = instrument.get_dispatcher(__name__)
logger = logging.getLogger(__name__)

INSTRUCTIONS_PROMPT_KEY = "instructions"
"""The key of the instruction prompt in ``get_prompts()`` / ``update_prompts()``."""

EmptyNodes = Literal["drop", "raise"]


class CitationSynthesizer(BaseSynthesizer):
    """Answers from the retrieved nodes with ``[N]`` markers that can only name those nodes.

    In the ``Response``, ``[N]`` refers to ``response.source_nodes[N - 1]``: the source nodes are
    exactly the nodes the model was shown, numbered in the order the retriever returned them
    (after any re-splitting, and without nodes dropped for blank text). ``additional_source_nodes``
    passed to ``synthesize`` come after them and are never cited.

    ``response.metadata`` holds, besides LlamaIndex's ``{node_id: node.metadata}``:

    - ``"citations"``: one dict per marker, in order of appearance:
      ``{"source_id": N, "start": s, "end": e, "node_id": id}`` with
      ``response.response[s:e] == f"[{N}]"`` and ``id == source_nodes[N - 1].node.node_id``;
    - ``"quotes"`` (``QUOTES_ONLY``): one dict per verbatim quote ``"text" [N]``:
      ``{"text", "source_id", "start", "end", "node_id", "source_start", "source_end"}`` with
      ``response.response[start:end] == text`` and ``source_start``/``source_end`` the offsets
      of that text in the node's content (``node.get_content(metadata_mode)``, what the model
      saw); plus ``"document_start"``/``"document_end"`` in the original document when the node
      knows its ``start_char_idx`` and ``metadata_mode`` is ``NONE``;
    - ``"finish_reason"`` (``"stop"`` or ``"length"``), ``"prompt_tokens"``,
      ``"generated_tokens"``.

    When streaming, these keys appear once the stream has been read to the end.

    Bad input:

    - no nodes: LlamaIndex's behaviour, the ``empty_response`` text ("Empty Response") with no
      source nodes and no ``"citations"``; the generator is not called;
    - nodes with blank text: dropped (``empty_nodes="drop"``, the default, logged) so they never
      get a number, or ``EmptySourceError`` naming the node (``empty_nodes="raise"``); if every
      node is blank, the ``empty_response`` as for no nodes;
    - nodes that do not fit the model's context with ``max_new_tokens``: ``PromptTooLongError``
      naming the largest node; retrieve fewer nodes (``similarity_top_k``), index with a smaller
      ``chunk_size`` or lower ``max_new_tokens``.

    Setup::

        pip install 'citeformer[llamaindex,retrieval]'

    Instantiate::

        from citeformer_llamaindex import CitationSynthesizer, MiniLMEmbedding
        synthesizer = CitationSynthesizer()                    # the embedded SmolLM2-135M
        synthesizer = CitationSynthesizer(CiteGenerator.from_pretrained(...),
                                          max_new_tokens=96, citation_chunk_size=128)
        synthesizer = CitationSynthesizer(ServerGenerator("http://vllm:8000", engine="vllm"))

    Query (no OpenAI needed: ``llm=synthesizer.llm`` stops LlamaIndex resolving ``Settings.llm``)::

        index = VectorStoreIndex.from_documents(docs, embed_model=MiniLMEmbedding())
        engine = index.as_query_engine(llm=synthesizer.llm, response_synthesizer=synthesizer)
        # or: RetrieverQueryEngine(index.as_retriever(), response_synthesizer=synthesizer)
        response = engine.query("Who designed the Eiffel Tower?")
        response.response                          # 'Gustave Eiffel's company designed it [2].'
        response.source_nodes[2 - 1]               # the node [2] cites
        response.metadata["citations"]             # [{'source_id': 2, 'start': 38, ...}]

    Stream::

        synthesizer = CitationSynthesizer(streaming=True)
        response = engine.query(question)          # a StreamingResponse
        for token in response.response_gen:
            print(token, end="")
        response.metadata["citations"]             # filled in once the stream has ended

    Async::

        response = await engine.aquery(question)   # with streaming=True: AsyncStreamingResponse
        async for token in response.async_response_gen():
            print(token, end="")

    Customise the instructions::

        engine.update_prompts({"response_synthesizer:instructions": PromptTemplate("...")})
    """

    def __init__(
        self,
        generator: AnswerGenerator | None = None,
        *,
        policy: Policy | str = Policy.REQUIRED,
        max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
        do_sample: bool = False,
        temperature: float = 1.0,
        seed: int | None = None,
        grammar_options: Mapping[str, int] | None = None,
        instructions: str | BasePromptTemplate | None = None,
        citation_chunk_size: int | None = None,
        citation_chunk_overlap: int = 0,
        text_splitter: TextSplitter | None = None,
        metadata_mode: MetadataMode = MetadataMode.NONE,
        title_keys: Sequence[str] = ("title", "file_name"),
        empty_nodes: EmptyNodes = "drop",
        streaming: bool = False,
        callback_manager: CallbackManager | None = None,
        empty_response: str | None = None,
    ) -> None:
        """Wrap ``generator`` (default: ``CiteGenerator.default()``, loaded now), or a
        ``ServerGenerator`` (a llama.cpp, vLLM or SGLang server), whose ``agenerate`` and
        ``astream`` the async paths then await instead of using a worker thread.

        ``policy``, ``max_new_tokens``, ``do_sample``, ``temperature``, ``seed`` and
        ``grammar_options`` (``max_sentence_words=...`` and the other ``build_grammar``
        options) go to every generation. ``instructions`` replaces the policy's system
        instructions (also settable later as the ``"instructions"`` prompt).
        ``citation_chunk_size`` (in the generator's tokens) re-splits every node into chunks
        of at most that size, each its own source node (see ``CitationChunker``);
        ``text_splitter`` replaces the default ``SentenceSplitter`` for that.
        ``metadata_mode`` says which node metadata the model reads with the text (default:
        none); the first of ``title_keys`` found in a node's metadata is shown as its title.
        """
        if empty_nodes not in ("drop", "raise"):
            raise ValueError(f"empty_nodes must be 'drop' or 'raise', got {empty_nodes!r}")
        if citation_chunk_size is not None and (
            isinstance(citation_chunk_size, bool)
            or not isinstance(citation_chunk_size, int)
            or citation_chunk_size < 1
        ):
            raise ValueError(
                f"citation_chunk_size must be a positive int (tokens) or None, "
                f"got {citation_chunk_size!r}"
            )
        self._generator: Any = generator if generator is not None else CiteGenerator.default()
        self._policy = Policy.coerce(policy)
        self._generation: dict[str, Any] = {
            "max_new_tokens": max_new_tokens,
            "do_sample": do_sample,
            "temperature": temperature,
            "seed": seed,
            **dict(grammar_options or {}),
        }
        self._instructions = self._coerce_instructions(instructions)
        if text_splitter is None and citation_chunk_size is not None:
            text_splitter = SentenceSplitter(
                chunk_size=citation_chunk_size,
                chunk_overlap=citation_chunk_overlap,
                tokenizer=self._token_counter(),
            )
        self._chunker = CitationChunker(text_splitter) if text_splitter is not None else None
        self._metadata_mode = metadata_mode
        self._title_keys = tuple(title_keys)
        self._empty_nodes = empty_nodes
        super().__init__(
            llm=CiteformerLLM(
                model_name=_model_name(self._generator),
                context_window=(
                    getattr(self._generator, "context_length", None) or DEFAULT_CONTEXT_WINDOW
                ),
                num_output=max_new_tokens,
            ),
            callback_manager=callback_manager,
            streaming=streaming,
            empty_response=empty_response,
        )

    @property
    def generator(self) -> AnswerGenerator:
        """The generator that writes the answers (a ``CiteGenerator`` or ``ServerGenerator``)."""
        return self._generator

    @property
    def llm(self) -> CiteformerLLM:
        """Pass as ``llm=`` to ``index.as_query_engine`` so ``Settings.llm`` is never resolved."""
        return self._llm  # type: ignore[return-value]

    # -- prompts -------------------------------------------------------------------------------

    def _get_prompts(self) -> PromptDictType:
        return {INSTRUCTIONS_PROMPT_KEY: self._instruction_prompt()}

    def _update_prompts(self, prompts: PromptDictType) -> None:
        # The dict also holds keys meant for other modules ("module:key"); only ours is read.
        if INSTRUCTIONS_PROMPT_KEY in prompts:
            self._instructions = self._coerce_instructions(prompts[INSTRUCTIONS_PROMPT_KEY])

    def _instruction_prompt(self) -> BasePromptTemplate:
        if self._instructions is not None:
            return self._instructions
        return PromptTemplate(DEFAULT_INSTRUCTIONS[self._policy], prompt_type=PromptType.CUSTOM)

    @staticmethod
    def _coerce_instructions(
        value: str | BasePromptTemplate | None,
    ) -> BasePromptTemplate | None:
        if value is None:
            return None
        if isinstance(value, str):
            value = PromptTemplate(value, prompt_type=PromptType.CUSTOM)
        if not isinstance(value, BasePromptTemplate):
            raise TypeError(
                f"the instructions must be a str or a prompt template, got {type(value).__name__}"
            )
        if value.template_vars:
            raise ValueError(
                f"the instructions prompt takes no variables, but it names {value.template_vars}; "
                "remove the {...} placeholders: citeformer adds the numbered sources and the "
                "question itself"
            )
        return value

    def _instruction_text(self) -> str:
        return self._instruction_prompt().format()

    # -- BaseSynthesizer -----------------------------------------------------------------------

    def get_response(
        self, query_str: str, text_chunks: Sequence[str], **response_kwargs: Any
    ) -> RESPONSE_TEXT_TYPE:
        """The answer text for plain text chunks, numbered from 1 in order (a generator if
        streaming). Blank chunks raise ``EmptySourceError``; use ``synthesize`` for the
        citations."""
        sources = [Source(chunk) for chunk in text_chunks]
        if self._streaming:
            return iter(self._stream(query_str, sources))
        return self._generate(query_str, sources).text

    async def aget_response(
        self, query_str: str, text_chunks: Sequence[str], **response_kwargs: Any
    ) -> RESPONSE_TEXT_TYPE:
        """Async ``get_response``: an in-process generation runs in a worker thread; a
        ``ServerGenerator`` is awaited."""
        sources = [Source(chunk) for chunk in text_chunks]
        if self._streaming:
            return await self._astream(query_str, sources, on_end=None)
        answer = await self._agenerate(query_str, sources)
        return answer.text

    @dispatcher.span
    def synthesize(
        self,
        query: QueryTextType,
        nodes: list[NodeWithScore],
        additional_source_nodes: Sequence[NodeWithScore] | None = None,
        **response_kwargs: Any,
    ) -> RESPONSE_TYPE:
        """Answer ``query`` from ``nodes``; ``[N]`` in the answer is ``source_nodes[N - 1]``."""
        # The events, the empty case and the callback event mirror BaseSynthesizer.synthesize;
        # only the response is built here, because its source nodes are the cited nodes.
        dispatcher.event(SynthesizeStartEvent(query=query))
        cited = self._cited_nodes(nodes)
        if not cited:
            return self._empty(query, StreamingResponse)
        if isinstance(query, str):
            query = QueryBundle(query_str=query)
        with self._callback_manager.event(
            CBEventType.SYNTHESIZE, payload={EventPayload.QUERY_STR: query.query_str}
        ) as event:
            sources = [self._to_source(node) for node in cited]
            source_nodes = cited + list(additional_source_nodes or [])
            metadata = self._get_metadata_for_response([n.node for n in source_nodes]) or {}
            response: RESPONSE_TYPE
            if self._streaming:
                stream = self._stream(query.query_str, sources, cited)
                streaming = StreamingResponse(
                    response_gen=_no_sync_chunks(), source_nodes=source_nodes, metadata=metadata
                )
                streaming.response_gen = _sync_chunks(
                    stream, on_end=self._finisher(streaming, metadata, cited)
                )
                response = streaming
            else:
                answer = self._generate(query.query_str, sources, cited)
                metadata.update(self._answer_metadata(answer, cited))
                response = Response(answer.text, source_nodes=source_nodes, metadata=metadata)
            event.on_end(payload={EventPayload.RESPONSE: response})
        dispatcher.event(SynthesizeEndEvent(query=query, response=response))
        return response

    @dispatcher.span
    async def asynthesize(
        self,
        query: QueryTextType,
        nodes: list[NodeWithScore],
        additional_source_nodes: Sequence[NodeWithScore] | None = None,
        **response_kwargs: Any,
    ) -> RESPONSE_TYPE:
        """Async ``synthesize``: an in-process generation runs in a worker thread, off the event
        loop; a ``ServerGenerator`` is awaited."""
        dispatcher.event(SynthesizeStartEvent(query=query))
        cited = self._cited_nodes(nodes)
        if not cited:
            return self._empty(query, AsyncStreamingResponse)
        if isinstance(query, str):
            query = QueryBundle(query_str=query)
        with self._callback_manager.event(
            CBEventType.SYNTHESIZE, payload={EventPayload.QUERY_STR: query.query_str}
        ) as event:
            sources = [self._to_source(node) for node in cited]
            source_nodes = cited + list(additional_source_nodes or [])
            metadata = self._get_metadata_for_response([n.node for n in source_nodes]) or {}
            response: RESPONSE_TYPE
            if self._streaming:
                streaming = AsyncStreamingResponse(
                    response_gen=_no_chunks(), source_nodes=source_nodes, metadata=metadata
                )
                streaming.response_gen = await self._astream(
                    query.query_str, sources, cited,
                    on_end=self._finisher(streaming, metadata, cited),
                )
                response = streaming
            else:
                answer = await self._agenerate(query.query_str, sources, cited)
                metadata.update(self._answer_metadata(answer, cited))
                response = Response(answer.text, source_nodes=source_nodes, metadata=metadata)
            event.on_end(payload={EventPayload.RESPONSE: response})
        dispatcher.event(SynthesizeEndEvent(query=query, response=response))
        return response

    # -- translation ---------------------------------------------------------------------------

    def _cited_nodes(self, nodes: Sequence[NodeWithScore]) -> list[NodeWithScore]:
        """The nodes the model will see, numbered from 1 in this order."""
        kept: list[NodeWithScore] = []
        for position, node in enumerate(nodes, start=1):
            if node.node.get_content(metadata_mode=MetadataMode.NONE).strip():
                kept.append(node)
            elif self._empty_nodes == "raise":
                raise EmptySourceError(
                    f"node {position} of {len(nodes)} (id {node.node.node_id!r}) has empty text; "
                    "drop it before synthesis, or pass empty_nodes='drop' to skip such nodes"
                )
            else:
                logger.info("dropping node %r: its text is empty", node.node.node_id)
        if self._chunker is not None:
            kept = self._chunker.split(kept)
        return kept

    def _to_source(self, node: NodeWithScore) -> Source:
        metadata = node.node.metadata
        title = next((str(metadata[k]) for k in self._title_keys if metadata.get(k)), None)
        return Source(
            text=node.node.get_content(metadata_mode=self._metadata_mode),
            title=title,
            metadata={"node_id": node.node.node_id, "score": node.score},
        )

    def _answer_metadata(self, answer: CitedAnswer, cited: Sequence[NodeWithScore]) -> dict:
        return {
            "citations": [
                {
                    "source_id": c.source_id,
                    "start": c.start,
                    "end": c.end,
                    "node_id": cited[c.source_id - 1].node.node_id,
                }
                for c in answer.citations
            ],
            "quotes": [self._quote_metadata(q, cited[q.source_id - 1]) for q in answer.quotes],
            "finish_reason": answer.finish_reason,
            "prompt_tokens": answer.prompt_tokens,
            "generated_tokens": answer.generated_tokens,
        }

    def _quote_metadata(self, quote: Quote, node: NodeWithScore) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "text": quote.text,
            "source_id": quote.source_id,
            "start": quote.start,
            "end": quote.end,
            "node_id": node.node.node_id,
            "source_start": quote.source_start,
            "source_end": quote.source_end,
        }
        offset = getattr(node.node, "start_char_idx", None)
        if offset is not None and self._metadata_mode == MetadataMode.NONE:
            entry["document_start"] = offset + quote.source_start
            entry["document_end"] = offset + quote.source_end
        return entry

    def _finisher(
        self,
        response: StreamingResponse | AsyncStreamingResponse,
        metadata: dict[str, Any],
        cited: Sequence[NodeWithScore],
    ) -> Callable[[CitedAnswer], None]:
        def finish(answer: CitedAnswer) -> None:
            metadata.update(self._answer_metadata(answer, cited))
            # Lets str(response) work even when the caller read response_gen directly.
            response.response_txt = answer.text

        return finish

    def _empty(self, query: QueryTextType, stream_type: type) -> RESPONSE_TYPE:
        response: RESPONSE_TYPE
        if not self._streaming:
            response = Response(self._empty_response)
        elif stream_type is AsyncStreamingResponse:
            response = AsyncStreamingResponse(response_gen=self._empty_response_agenerator())
        else:
            response = StreamingResponse(response_gen=self._empty_response_generator())
        dispatcher.event(SynthesizeEndEvent(query=query, response=response))
        return response

    # -- generation ----------------------------------------------------------------------------

    def _call_kwargs(self) -> dict[str, Any]:
        return {
            "policy": self._policy,
            "instructions": self._instruction_text(),
            **self._generation,
        }

    def _generate(
        self, question: str, sources: list[Source], nodes: Sequence[NodeWithScore] = ()
    ) -> CitedAnswer:
        with self._explained(sources, nodes):
            return self._generator.generate(question, sources, **self._call_kwargs())

    def _stream(
        self, question: str, sources: list[Source], nodes: Sequence[NodeWithScore] = ()
    ) -> Any:
        with self._explained(sources, nodes):
            return self._generator.stream(question, sources, **self._call_kwargs())

    async def _agenerate(
        self, question: str, sources: list[Source], nodes: Sequence[NodeWithScore] = ()
    ) -> CitedAnswer:
        agenerate = getattr(self._generator, "agenerate", None)
        if agenerate is None:
            # In-process generation blocks for seconds: off the event loop.
            return await asyncio.to_thread(self._generate, question, sources, nodes)
        with self._explained(sources, nodes):
            answer: CitedAnswer = await agenerate(question, sources, **self._call_kwargs())
            return answer

    async def _astream(
        self,
        question: str,
        sources: list[Source],
        nodes: Sequence[NodeWithScore] = (),
        *,
        on_end: Callable[[CitedAnswer], None] | None,
    ) -> AsyncGenerator[str, None]:
        astream = getattr(self._generator, "astream", None)
        if astream is None:
            # Preparing an in-process stream tokenizes the prompt and may compile a grammar:
            # off the loop too.
            stream = await asyncio.to_thread(self._stream, question, sources, nodes)
            return _async_chunks(stream, on_end=on_end)
        with self._explained(sources, nodes):
            return _native_async_chunks(
                astream(question, sources, **self._call_kwargs()), on_end=on_end
            )

    @contextlib.contextmanager
    def _explained(self, sources: list[Source], nodes: Sequence[NodeWithScore]) -> Iterator[None]:
        try:
            yield
        except PromptTooLongError as error:
            largest = max(range(len(sources)), key=lambda i: len(sources[i].text))
            name = nodes[largest].node.node_id if nodes else f"chunk {largest + 1}"
            raise PromptTooLongError(
                f"{error}. The {len(sources)} node(s) do not fit; the largest is {name!r} "
                f"({len(sources[largest].text)} characters). Retrieve fewer nodes "
                "(similarity_top_k), index with a smaller chunk_size, or lower max_new_tokens."
            ) from error

    def _token_counter(self) -> Callable[[str], list]:
        tokenizer = getattr(self._generator, "tokenizer", None)
        if tokenizer is None:
            raise ValueError(
                f"citation_chunk_size counts tokens with the generator's tokenizer, and a "
                f"{type(self._generator).__name__} has none here; pass "
                "text_splitter=SentenceSplitter(chunk_size=..., tokenizer=...) with a tokenizer "
                "of the served model instead"
            )

        def count(text: str) -> list:
            return list(tokenizer.encode(text, add_special_tokens=False))

        return count


def _sync_chunks(
    stream: Any, on_end: Callable[[CitedAnswer], None] | None
) -> Generator[str, None, None]:
    yield from stream
    if on_end is not None:
        on_end(stream.answer)


async def _async_chunks(
    stream: Any, on_end: Callable[[CitedAnswer], None] | None
) -> AsyncGenerator[str, None]:
    # Each chunk waits on the model, so the waiting happens in a worker thread.
    chunks: Iterator[str] = iter(stream)
    try:
        while (chunk := await asyncio.to_thread(next, chunks, None)) is not None:
            yield chunk
    finally:
        # Stops the generation if the caller left early; a chunk still being fetched in a
        # worker thread makes close() raise, and that generation then ends on its own.
        with contextlib.suppress(ValueError):
            chunks.close()  # type: ignore[attr-defined]
    if on_end is not None:
        on_end(stream.answer)


async def _native_async_chunks(
    stream: Any, on_end: Callable[[CitedAnswer], None] | None
) -> AsyncGenerator[str, None]:
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


def _no_sync_chunks() -> Generator[str, None, None]:
    yield from ()


async def _no_chunks() -> AsyncGenerator[str, None]:
    return
    yield  # pragma: no cover


def _model_name(generator: Any) -> str:
    if isinstance(getattr(generator, "model", None), str):  # a served model's name
        return str(generator.model)
    config = getattr(getattr(generator, "model", None), "config", None)
    return str(getattr(config, "_name_or_path", None) or "citeformer")
