"""A LlamaIndex response synthesizer whose ``[N]`` markers can only name retrieved nodes."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import warnings
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
from llama_index.core.indices.prompt_helper import ChatPromptHelper, PromptHelper
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
from typing_extensions import Never

from citeformer.errors import (
    EmptySourceError,
    InputTypeError,
    InvalidInputError,
    PromptTooLongError,
)
from citeformer.evidence import Evidence, resolve_evidence
from citeformer.grammar import GrammarOptions
from citeformer.prompt import default_instructions
from citeformer.request import (
    DEFAULT_MAX_NEW_TOKENS,
    DEFAULT_POLICY,
    GENERATOR_DEFAULT,
    GenerationRequest,
    build_request,
)
from citeformer.types import (
    TITLE_KEYS,
    AnswerChunks,
    AnswerGenerator,
    AsyncAnswerChunks,
    AsyncAnswerGenerator,
    CitedAnswer,
    Policy,
    Source,
    title_from,
)
from citeformer_llamaindex.llm import CiteformerLLM
from citeformer_llamaindex.splitting import CitationChunker

# LlamaIndex re-exports get_dispatcher without marking it public for type checkers.
dispatcher = instrument.get_dispatcher(__name__)  # type: ignore[attr-defined]
logger = logging.getLogger(__name__)

INSTRUCTIONS_PROMPT_KEY = "instructions"
"""The key of the instruction prompt in ``get_prompts()`` / ``update_prompts()``."""

EmptySources = Literal["drop", "raise"]
"""What to do with a node whose text is blank: leave it out (logged) or raise."""


class CitationSynthesizer(BaseSynthesizer):
    """Answers from the retrieved nodes with ``[N]`` markers that can only name those nodes.

    In the ``Response``, ``[N]`` refers to ``response.source_nodes[N - 1]``: the source nodes are
    exactly the nodes the model was shown, numbered in the order the retriever returned them
    (after any re-splitting, and without nodes dropped for blank text). ``additional_source_nodes``
    passed to ``synthesize`` come after them and are never cited.

    ``response.metadata`` holds, besides LlamaIndex's ``{node_id: node.metadata}``:

    - ``"citations"``: one dict per marker, in order of appearance:
      ``{"source_id": N, "start": s, "end": e, "evidence": span, "node_id": id}`` with
      ``response.response[s:e] == f"[{N}]"``, ``id == source_nodes[N - 1].node.node_id`` and
      ``span`` the sentence or two of the node's content that best support the claim (offsets
      in ``node.get_content(metadata_mode)``), or ``None``;
    - ``"quotes"`` (``QUOTES_ONLY``): one dict per verbatim quote ``"text" [N]``:
      ``{"text", "source_id", "start", "end", "node_id", "source_start", "source_end"}`` with
      ``response.response[start:end] == text`` and ``source_start``/``source_end`` the offsets
      of that text in the node's content (``node.get_content(metadata_mode)``, what the model
      saw); plus ``"document_start"``/``"document_end"`` in the original document when the node
      knows its ``start_char_idx`` and ``metadata_mode`` is ``NONE``;
    - ``"finish_reason"`` (``"stop"`` or ``"length"``), ``"prompt_tokens"``,
      ``"generated_tokens"``.

    When streaming, these keys appear once the stream has been read to the end.

    The citation and quote dicts are ``CitedAnswer.to_dict()``'s, with the node's id added.

    A node becomes a citeformer Source: its text (``node.get_content(metadata_mode)``) and, as
    its title, the first non-blank of its metadata ``title_keys`` (``title``, then ``file_name``,
    then ``source``).

    Bad input:

    - no nodes: LlamaIndex's behaviour, the ``empty_response`` text ("Empty Response") with no
      source nodes and no ``"citations"``; the generator is not called;
    - nodes with blank text: left out with a logged warning (``empty_sources="drop"``, the
      default), so they never get a number and are not among the source nodes, or
      ``EmptySourceError`` naming the node (``empty_sources="raise"``); if every node is blank,
      the ``empty_response`` as for no nodes;
    - nodes that do not fit the model's context with ``max_new_tokens``: ``PromptTooLongError``
      naming the largest node; retrieve fewer nodes (``similarity_top_k``), index with a smaller
      ``chunk_size`` or lower ``max_new_tokens``.

    Setup::

        pip install 'citeformer[llamaindex,retrieval]'

    Instantiate::

        from citeformer_llamaindex import CitationSynthesizer, MiniLMEmbedding
        synthesizer = CitationSynthesizer()         # the embedded SmolLM2-135M, loaded on first use
        synthesizer = CitationSynthesizer(CiteGenerator.from_pretrained(...), evidence="embedding",
                                          max_new_tokens=96, citation_chunk_size=128)
        synthesizer = CitationSynthesizer(ServerGenerator("http://vllm:8000", engine="vllm"))
        synthesizer = CitationSynthesizer(FakeGenerator())     # citeformer.testing, for tests
        synthesizer = CitationSynthesizer(llm=HuggingFaceLLM(model=model, tokenizer=tokenizer))
        synthesizer = CitationSynthesizer(                     # your own LLM, as it is
            llm=OpenAILike(api_base="http://vllm:8000/v1", model=name), engine="vllm")

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

    A generator with ``aanswer``/``aanswer_stream`` (``ServerGenerator``, ``FakeGenerator``) is
    awaited; a model in this process generates in a worker thread, off the event loop.

    Conversations: ``CitationChatEngine`` answers each turn with a synthesizer, passing the
    earlier turns as ``synthesize(..., history=[(role, text), ...])``.

    Customise the instructions::

        engine.update_prompts({"response_synthesizer:instructions": PromptTemplate("...")})
    """

    def __init__(
        self,
        generator: AnswerGenerator | None = None,
        *,
        llm: Any = None,
        engine: str | None = None,
        server_options: Mapping[str, Any] | None = None,
        policy: Policy | str = DEFAULT_POLICY,
        max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
        # The request's own defaults, so that the synthesizer and the core cannot drift apart.
        do_sample: bool = GenerationRequest.do_sample,
        temperature: float = GenerationRequest.temperature,
        seed: int | None = None,
        evidence: Evidence | str | None = GENERATOR_DEFAULT,
        grammar_options: Mapping[str, int | bool] | None = None,
        instructions: str | BasePromptTemplate | None = None,
        citation_chunk_size: int | None = None,
        citation_chunk_overlap: int = 0,
        text_splitter: TextSplitter | None = None,
        metadata_mode: MetadataMode = MetadataMode.NONE,
        title_keys: Sequence[str] = TITLE_KEYS,
        empty_sources: EmptySources = "drop",
        empty_nodes: EmptySources | None = None,
        streaming: bool = False,
        callback_manager: CallbackManager | None = None,
        empty_response: str | None = None,
        **unknown: Never,
    ) -> None:
        """Wrap ``generator``: a ``CiteGenerator``, a ``ServerGenerator`` (a llama.cpp, vLLM or
        SGLang server) or any ``citeformer.AnswerGenerator``; ``None`` is the embedded default
        model, loaded on first use.

        ``llm`` takes your own LlamaIndex LLM instead, as it is: a ``HuggingFaceLLM`` (a
        ``CiteGenerator`` over its model and tokenizer), or an ``OpenAILike``/``OpenAI`` whose
        ``api_base`` is a llama.cpp, vLLM or SGLang server, with ``engine=`` naming which (a
        ``ServerGenerator`` with the LLM's model name, API key, headers, timeout and retries;
        ``server_options`` adds or overrides ``ServerGenerator`` keywords). Any other LLM, an
        OpenAI LLM on OpenAI's own API (which takes no grammar), or a misspelt keyword is
        refused here, at construction.

        ``policy``, ``max_new_tokens``, ``do_sample``, ``temperature``, ``seed``, ``evidence``
        and ``grammar_options`` (``max_sentence_words=...`` and the other ``build_grammar``
        options) go to every generation; ``evidence="default"`` leaves it to the generator
        (``"lexical"`` in this process, none on a server). ``instructions`` replaces the
        policy's system instructions (also settable later as the ``"instructions"`` prompt).
        ``citation_chunk_size`` (in the generator's tokens) re-splits every node into chunks
        of at most that size, each its own source node (see ``CitationChunker``);
        ``text_splitter`` replaces the default ``SentenceSplitter`` for that.
        ``metadata_mode`` says which node metadata the model reads with the text (default:
        none); the first of ``title_keys`` with a non-blank value in a node's metadata is shown
        as its title. ``empty_sources`` says what a node with blank text does: ``"drop"``
        (logged) or ``"raise"``; ``empty_nodes`` is its former, deprecated name.
        """
        if unknown:
            raise InputTypeError(_unknown_message(sorted(unknown)))
        if generator is not None and not isinstance(generator, AnswerGenerator):
            missing = [m for m in ("answer", "answer_stream") if not hasattr(generator, m)]
            raise InputTypeError(
                f"generator must be a citeformer.CiteGenerator, a ServerGenerator or another "
                f"AnswerGenerator (or None for the embedded model); got {_short(generator)} of "
                f"type {type(generator).__name__}, which has no "
                f"{' or '.join(f'{m}()' for m in missing) or 'callable answer()'}"
            )
        generator = _generator_of(generator, llm, engine, server_options)
        self._empty_sources = _empty_sources_of(empty_sources, empty_nodes)
        if citation_chunk_size is not None and (
            isinstance(citation_chunk_size, bool)
            or not isinstance(citation_chunk_size, int)
            or citation_chunk_size < 1
        ):
            raise InvalidInputError(
                f"citation_chunk_size must be a positive int (tokens) or None, "
                f"got {citation_chunk_size!r}"
            )
        self._generator = generator
        self._policy = Policy.coerce(policy)
        self._options: dict[str, Any] = {
            "max_new_tokens": max_new_tokens,
            "do_sample": do_sample,
            "temperature": temperature,
            "seed": seed,
            **GrammarOptions.of(grammar_options or {}).as_dict(),
        }
        if evidence != GENERATOR_DEFAULT:
            resolve_evidence(evidence)  # an unknown name raises here rather than at the first query
            self._options["evidence"] = evidence
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
        super().__init__(
            llm=CiteformerLLM.describing(lambda: self.generator, num_output=max_new_tokens),
            callback_manager=callback_manager,
            # Given here so that BaseSynthesizer does not read the LLM's metadata, which would
            # load the default model now; this synthesizer packs no prompts with them.
            prompt_helper=PromptHelper(num_output=max_new_tokens),
            chat_prompt_helper=ChatPromptHelper(num_output=max_new_tokens),
            streaming=streaming,
            empty_response=empty_response,
        )

    @property
    def generator(self) -> AnswerGenerator:
        """The generator that writes the answers; the embedded default model is loaded here, on
        first use, when none was given."""
        if self._generator is None:
            from citeformer import CiteGenerator

            self._generator = CiteGenerator.default()
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
        return PromptTemplate(_default_instructions(self._policy), prompt_type=PromptType.CUSTOM)

    @staticmethod
    def _coerce_instructions(
        value: str | BasePromptTemplate | None,
    ) -> BasePromptTemplate | None:
        if value is None:
            return None
        if isinstance(value, str):
            value = PromptTemplate(value, prompt_type=PromptType.CUSTOM)
        if not isinstance(value, BasePromptTemplate):
            raise InputTypeError(
                f"the instructions must be a str or a prompt template, got {type(value).__name__}"
            )
        if value.template_vars:
            raise InvalidInputError(
                f"the instructions prompt takes no variables, but it names {value.template_vars}; "
                "remove the {...} placeholders: citeformer adds the numbered sources and the "
                "question itself"
            )
        return value

    # -- BaseSynthesizer -----------------------------------------------------------------------

    def get_response(
        self, query_str: str, text_chunks: Sequence[str], **response_kwargs: Any
    ) -> RESPONSE_TEXT_TYPE:
        """The answer text for plain text chunks, numbered from 1 in order (a generator if
        streaming). Blank chunks raise ``EmptySourceError``; use ``synthesize`` for the
        citations."""
        sources = [Source(chunk) for chunk in text_chunks]
        if self._streaming:
            return _sync_chunks(self._stream(query_str, sources), on_end=None)
        return self._generate(query_str, sources).text

    async def aget_response(
        self, query_str: str, text_chunks: Sequence[str], **response_kwargs: Any
    ) -> RESPONSE_TEXT_TYPE:
        """Async ``get_response``: an in-process generation runs in a worker thread; an async
        generator (``ServerGenerator``) is awaited."""
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
        *,
        history: Sequence[tuple[str, str]] = (),
        streaming: bool | None = None,
        **response_kwargs: Any,
    ) -> RESPONSE_TYPE:
        """Answer ``query`` from ``nodes``; ``[N]`` in the answer is ``source_nodes[N - 1]``.

        ``history``: the earlier turns of a conversation, ``("user" | "assistant", text)`` pairs,
        shown before the nodes without their citation markers (``CitationChatEngine`` passes
        them). ``streaming`` overrides the synthesizer's own setting for this call.
        """
        # The events, the empty case and the callback event mirror BaseSynthesizer.synthesize;
        # only the response is built here, because its source nodes are the cited nodes.
        dispatcher.event(SynthesizeStartEvent(query=query))
        streaming = self._streaming if streaming is None else streaming
        cited = self._cited_nodes(nodes)
        if not cited:
            return self._empty(query, StreamingResponse, streaming)
        if isinstance(query, str):
            query = QueryBundle(query_str=query)
        with self._callback_manager.event(
            CBEventType.SYNTHESIZE, payload={EventPayload.QUERY_STR: query.query_str}
        ) as event:
            sources = [self._to_source(node) for node in cited]
            source_nodes = cited + list(additional_source_nodes or [])
            metadata = self._get_metadata_for_response([n.node for n in source_nodes]) or {}
            response: RESPONSE_TYPE
            if streaming:
                stream = self._stream(query.query_str, sources, cited, history)
                streamed = StreamingResponse(
                    response_gen=_no_sync_chunks(), source_nodes=source_nodes, metadata=metadata
                )
                streamed.response_gen = _sync_chunks(
                    stream, on_end=self._finisher(streamed, metadata, cited)
                )
                response = streamed
            else:
                answer = self._generate(query.query_str, sources, cited, history)
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
        *,
        history: Sequence[tuple[str, str]] = (),
        streaming: bool | None = None,
        **response_kwargs: Any,
    ) -> RESPONSE_TYPE:
        """Async ``synthesize``: an in-process generation runs in a worker thread, off the event
        loop; an async generator (``ServerGenerator``) is awaited."""
        dispatcher.event(SynthesizeStartEvent(query=query))
        streaming = self._streaming if streaming is None else streaming
        cited = self._cited_nodes(nodes)
        if not cited:
            return self._empty(query, AsyncStreamingResponse, streaming)
        if isinstance(query, str):
            query = QueryBundle(query_str=query)
        with self._callback_manager.event(
            CBEventType.SYNTHESIZE, payload={EventPayload.QUERY_STR: query.query_str}
        ) as event:
            sources = [self._to_source(node) for node in cited]
            source_nodes = cited + list(additional_source_nodes or [])
            metadata = self._get_metadata_for_response([n.node for n in source_nodes]) or {}
            response: RESPONSE_TYPE
            if streaming:
                streamed = AsyncStreamingResponse(
                    response_gen=_no_chunks(), source_nodes=source_nodes, metadata=metadata
                )
                streamed.response_gen = await self._astream(
                    query.query_str, sources, cited, history,
                    on_end=self._finisher(streamed, metadata, cited),
                )
                response = streamed
            else:
                answer = await self._agenerate(query.query_str, sources, cited, history)
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
                continue
            if self._empty_sources == "raise":
                raise EmptySourceError(
                    f"node {position} of {len(nodes)} (id {node.node.node_id!r}) has empty text; "
                    "drop it before synthesis, or pass empty_sources='drop' to skip such nodes"
                )
            logger.warning(
                "dropping node %d of %d (id %r): its text is empty",
                position, len(nodes), node.node.node_id,
            )
        if self._chunker is not None:
            kept = self._chunker.split(kept)
        return kept

    def _to_source(self, node: NodeWithScore) -> Source:
        return Source(
            text=node.node.get_content(metadata_mode=self._metadata_mode),
            title=metadata_title(node.node.metadata, self._title_keys),
            metadata={"node_id": node.node.node_id, "score": node.score},
        )

    def _answer_metadata(
        self, answer: CitedAnswer, cited: Sequence[NodeWithScore]
    ) -> dict[str, Any]:
        data = answer.to_dict()
        return {
            "citations": [
                {**c, "node_id": cited[c["source_id"] - 1].node.node_id}
                for c in data["citations"]
            ],
            "quotes": [self._quote_metadata(q, cited[q["source_id"] - 1]) for q in data["quotes"]],
            "finish_reason": data["finish_reason"],
            "prompt_tokens": data["prompt_tokens"],
            "generated_tokens": data["generated_tokens"],
        }

    def _quote_metadata(self, quote: dict[str, Any], node: NodeWithScore) -> dict[str, Any]:
        entry = {**quote, "node_id": node.node.node_id}
        offset = getattr(node.node, "start_char_idx", None)
        if offset is not None and self._metadata_mode == MetadataMode.NONE:
            entry["document_start"] = offset + quote["source_start"]
            entry["document_end"] = offset + quote["source_end"]
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

    def _empty(self, query: QueryTextType, stream_type: type, streaming: bool) -> RESPONSE_TYPE:
        response: RESPONSE_TYPE
        if not streaming:
            response = Response(self._empty_response)
        elif stream_type is AsyncStreamingResponse:
            response = AsyncStreamingResponse(response_gen=self._empty_response_agenerator())
        else:
            response = StreamingResponse(response_gen=self._empty_response_generator())
        dispatcher.event(SynthesizeEndEvent(query=query, response=response))
        return response

    # -- generation ----------------------------------------------------------------------------

    def _request(
        self,
        question: str,
        sources: Sequence[Source],
        history: Sequence[tuple[str, str]] = (),
    ) -> GenerationRequest:
        options = dict(self._options)
        if history:
            options["history"] = history
        if self._instructions is not None:
            # Only custom instructions are passed: otherwise the core uses the policy's own.
            options["instructions"] = self._instructions.format()
        return build_request(question, sources, self._policy, **options)

    def _generate(
        self,
        question: str,
        sources: Sequence[Source],
        nodes: Sequence[NodeWithScore] = (),
        history: Sequence[tuple[str, str]] = (),
    ) -> CitedAnswer:
        request = self._request(question, sources, history)
        with self._explained(request, nodes):
            return self.generator.answer(request)

    def _stream(
        self,
        question: str,
        sources: Sequence[Source],
        nodes: Sequence[NodeWithScore] = (),
        history: Sequence[tuple[str, str]] = (),
    ) -> AnswerChunks:
        request = self._request(question, sources, history)
        with self._explained(request, nodes):
            return self.generator.answer_stream(request)

    async def _agenerate(
        self,
        question: str,
        sources: Sequence[Source],
        nodes: Sequence[NodeWithScore] = (),
        history: Sequence[tuple[str, str]] = (),
    ) -> CitedAnswer:
        generator = self._generator
        if not isinstance(generator, AsyncAnswerGenerator):
            # In-process generation (and loading the default model) blocks for seconds: off the
            # event loop.
            return await asyncio.to_thread(self._generate, question, sources, nodes, history)
        request = self._request(question, sources, history)
        with self._explained(request, nodes):
            return await generator.aanswer(request)

    async def _astream(
        self,
        question: str,
        sources: Sequence[Source],
        nodes: Sequence[NodeWithScore] = (),
        history: Sequence[tuple[str, str]] = (),
        *,
        on_end: Callable[[CitedAnswer], None] | None,
    ) -> AsyncGenerator[str, None]:
        generator = self._generator
        if not isinstance(generator, AsyncAnswerGenerator):
            # Preparing an in-process stream tokenizes the prompt and may compile a grammar:
            # off the loop too.
            stream = await asyncio.to_thread(self._stream, question, sources, nodes, history)
            return _async_chunks(stream, on_end=on_end)
        request = self._request(question, sources, history)
        with self._explained(request, nodes):
            return _native_async_chunks(generator.aanswer_stream(request), on_end=on_end)

    @contextlib.contextmanager
    def _explained(
        self, request: GenerationRequest, nodes: Sequence[NodeWithScore]
    ) -> Iterator[None]:
        try:
            yield
        except PromptTooLongError as error:
            sources = request.sources
            largest = max(range(len(sources)), key=lambda i: len(sources[i].text))
            name = nodes[largest].node.node_id if nodes else f"chunk {largest + 1}"
            raise PromptTooLongError(
                f"{error}. The {len(sources)} node(s) do not fit; the largest is {name!r} "
                f"({len(sources[largest].text)} characters). Retrieve fewer nodes "
                "(similarity_top_k), index with a smaller chunk_size, or lower max_new_tokens."
            ) from error

    def _token_counter(self) -> Callable[[str], list[Any]]:
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


def metadata_title(
    metadata: Mapping[str, Any], title_keys: Sequence[str] = TITLE_KEYS
) -> str | None:
    """The first non-blank value among ``metadata``'s ``title_keys`` (white space folded)."""
    return title_from(metadata, title_keys)


def _generator_of(
    generator: AnswerGenerator | None,
    llm: Any,
    engine: str | None,
    server_options: Mapping[str, Any] | None,
) -> AnswerGenerator | None:
    if llm is None:
        if engine is not None or server_options:
            raise InvalidInputError(
                "engine= and server_options= describe the server of an OpenAI-compatible llm=; "
                "without llm= they do nothing. Build a citeformer.ServerGenerator and pass it "
                "as the generator instead"
            )
        return generator
    if generator is not None:
        raise InvalidInputError(
            "CitationSynthesizer got both a generator and llm=; pass one: llm= is turned into "
            "a generator"
        )
    from citeformer_llamaindex.models import generator_from

    return generator_from(llm, engine=engine, server_options=server_options)


def _unknown_message(unknown: list[str]) -> str:
    import difflib
    import inspect

    names = sorted(
        name for name, parameter in inspect.signature(CitationSynthesizer).parameters.items()
        if parameter.kind is not inspect.Parameter.VAR_KEYWORD
    )
    hints = []
    for name in unknown:
        close = difflib.get_close_matches(name, names, n=1)
        hints.append(f"{name!r} (did you mean {close[0]!r}?)" if close else repr(name))
    return (
        f"CitationSynthesizer takes no keyword {', '.join(hints)}; its keywords are "
        f"{', '.join(names)}"
    )


def _empty_sources_of(empty_sources: str, empty_nodes: str | None) -> EmptySources:
    name, value = "empty_sources", empty_sources
    if empty_nodes is not None:
        warnings.warn(
            "CitationSynthesizer(empty_nodes=...) is deprecated; pass empty_sources=... instead",
            DeprecationWarning,
            stacklevel=3,
        )
        if empty_sources != "drop" and empty_sources != empty_nodes:
            raise InvalidInputError(
                f"empty_sources={empty_sources!r} and empty_nodes={empty_nodes!r} disagree; "
                "pass only empty_sources (empty_nodes is its deprecated name)"
            )
        name, value = "empty_nodes", empty_nodes
    if value == "drop":
        return "drop"
    if value == "raise":
        return "raise"
    raise InvalidInputError(f"{name} must be 'drop' or 'raise', got {value!r}")


def _default_instructions(policy: Policy) -> str:
    return default_instructions(policy)


def _sync_chunks(
    stream: AnswerChunks, on_end: Callable[[CitedAnswer], None] | None
) -> Generator[str, None, None]:
    yield from stream
    if on_end is not None:
        on_end(stream.answer)


async def _async_chunks(
    stream: AnswerChunks, on_end: Callable[[CitedAnswer], None] | None
) -> AsyncGenerator[str, None]:
    # Each chunk waits on the model, so the waiting happens in a worker thread.
    chunks: Iterator[str] = iter(stream)
    try:
        while (chunk := await asyncio.to_thread(next, chunks, None)) is not None:
            yield chunk
    finally:
        # Stops the generation if the caller left early; a chunk still being fetched in a
        # worker thread makes close() raise, and that generation then ends on its own.
        close = getattr(chunks, "close", None)
        if close is not None:
            with contextlib.suppress(ValueError):
                close()
    if on_end is not None:
        on_end(stream.answer)


async def _native_async_chunks(
    stream: AsyncAnswerChunks, on_end: Callable[[CitedAnswer], None] | None
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


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."
