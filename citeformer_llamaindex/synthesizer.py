"""A LlamaIndex response synthesizer whose ``[N]`` markers can only name retrieved nodes."""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from llama_index.core.base.response.schema import (
    RESPONSE_TYPE,
    AsyncStreamingResponse,
    Response,
    StreamingResponse,
)
from llama_index.core.callbacks.base import CallbackManager
from llama_index.core.indices.prompt_helper import ChatPromptHelper, PromptHelper
from llama_index.core.node_parser import SentenceSplitter, TextSplitter
from llama_index.core.prompts import BasePromptTemplate, PromptTemplate, PromptType
from llama_index.core.prompts.mixin import PromptDictType
from llama_index.core.schema import MetadataMode, NodeWithScore
from llama_index.core.types import RESPONSE_TEXT_TYPE

from citeformer.errors import InputTypeError, InvalidInputError, shown
from citeformer.generation.protocols import AnswerGenerator
from citeformer.integration import (
    GRAMMAR_SETTING,
    EmptySources,
    call_request,
    check_empty_sources,
    check_generator,
    resolve_generator,
    settings_template,
    unknown_names_message,
)
from citeformer.prompt import default_instructions
from citeformer.request import DEFAULT_POLICY, GenerationRequest, option_names
from citeformer.types import TITLE_KEYS, CitedAnswer, Policy, Source
from citeformer_llamaindex.answering import Answering
from citeformer_llamaindex.base import CitingSynthesizer, check_streaming
from citeformer_llamaindex.events import ModelCall
from citeformer_llamaindex.llm import CiteformerLLM
from citeformer_llamaindex.models import generator_from
from citeformer_llamaindex.nodes import cited_nodes, response_metadata, to_source
from citeformer_llamaindex.splitting import CitationChunker
from citeformer_llamaindex.streams import (
    ClosingAsyncStreamingResponse,
    no_async_chunks,
    no_chunks,
    sync_chunks,
)

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from citeformer.request import GenerationOptions

__all__ = ["INSTRUCTIONS_PROMPT_KEY", "CitationSynthesizer"]

INSTRUCTIONS_PROMPT_KEY = "instructions"
"""The key of the instruction prompt in ``get_prompts()`` / ``update_prompts()``."""


class CitationSynthesizer(CitingSynthesizer):
    """Answers from the retrieved nodes with ``[N]`` markers that can only name those nodes.

    In the ``Response``, ``[N]`` refers to ``response.source_nodes[N - 1]``: the source nodes are
    exactly the nodes the model was shown, numbered in the order the retriever returned them
    (after any re-splitting, and without nodes dropped for blank text). ``additional_source_nodes``
    passed to ``synthesize`` come after them and are never cited.

    ``response.metadata`` holds, besides LlamaIndex's ``{node_id: node.metadata}``, the
    ``"citations"`` (``source_id``, ``start``, ``end``, ``evidence`` and ``node_id`` of each
    marker), the ``"quotes"``, the ``"finish_reason"``, the token counts and the whole
    ``"cited_answer"`` (``CitedAnswer.to_dict()``): see ``citeformer_llamaindex.nodes``;
    ``core_answer(response)`` reads them back typed, as the ``citeformer.Citation`` objects of
    the core answer. When streaming, these keys appear once the stream has been read to the
    end. A node's source is its ``node.get_content(metadata_mode)``, titled by the first
    non-blank of its metadata ``title_keys`` (``title``, then ``file_name``, then ``source``).

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

    Setup:
        ```bash
        pip install '/path/to/citeformer[llamaindex,retrieval]'
        ```

    Instantiate:
        ```python
        synthesizer = CitationSynthesizer()         # the embedded SmolLM2-135M, loaded on first use
        synthesizer = CitationSynthesizer(CiteGenerator.from_pretrained(...), evidence="embedding",
                                          max_new_tokens=96, citation_chunk_size=128)
        synthesizer = CitationSynthesizer(ServerGenerator("http://vllm:8000", engine="vllm"))
        synthesizer = CitationSynthesizer(FakeGenerator())     # citeformer.testing, for tests
        synthesizer = CitationSynthesizer(llm=HuggingFaceLLM(model=model, tokenizer=tokenizer))
        synthesizer = CitationSynthesizer(                     # your own LLM, as it is
            llm=OpenAILike(api_base="http://vllm:8000/v1", model=name), engine="vllm")
        ```

    Query:
        ```python
        index = VectorStoreIndex.from_documents(docs, embed_model=MiniLMEmbedding())
        engine = CitationQueryEngine(index.as_retriever(), synthesizer)
        # or: CitationQueryEngine.from_args(index, max_new_tokens=96), which builds the synthesizer
        # or: index.as_query_engine(llm=synthesizer.llm, response_synthesizer=synthesizer)
        response = engine.query("Who designed the Eiffel Tower?")
        response.response                          # 'Gustave Eiffel's company designed it [2].'
        response.source_nodes[2 - 1]               # the node [2] cites
        core_answer(response).citations            # (Citation(source_id=2, start=38, ...),)
        response.metadata["citations"]             # [{'source_id': 2, 'start': 38, ...}]
        ```

    No OpenAI: ``index.as_query_engine`` reads ``Settings.llm`` unless given ``llm=``;
    ``CitationQueryEngine`` never reads it.

    Each answer is reported to LlamaIndex as an LLM call, in events and to the callback manager
    (docs/quickstart/llamaindex.md, "Tracing").

    Stream:
        ```python
        synthesizer = CitationSynthesizer(streaming=True)
        response = engine.query(question)          # a StreamingResponse
        for token in response.response_gen:
            print(token, end="")
        response.metadata["citations"]             # filled in once the stream has ended
        ```

    Async:
        ```python
        response = await engine.aquery(question)   # with streaming=True: AsyncStreamingResponse
        async for token in response.async_response_gen():
            print(token, end="")
        ```

    A generator with ``aanswer``/``aanswer_stream`` is awaited; a model in this process generates
    in a worker thread. ``CitationChatEngine`` passes earlier turns as ``history=``.

    Customise the instructions:
        ```python
        engine.update_prompts({"response_synthesizer:instructions": PromptTemplate("...")})
        ```
    """

    def __init__(
        self,
        generator: AnswerGenerator | None = None,
        *,
        llm: Any = None,
        engine: str | None = None,
        server_options: Mapping[str, Any] | None = None,
        policy: Policy | str = DEFAULT_POLICY,
        grammar_options: Mapping[str, int | bool | str] | None = None,
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
        **options: Unpack[GenerationOptions],
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

        ``policy``, ``grammar_options`` (``{"max_sentence_words": 16}``: the ``build_grammar``
        options) and the generation options (``citeformer.GenerationOptions``: ``max_new_tokens``,
        ``do_sample``, ``temperature``, ``seed``, ``evidence``, ``constrained``,
        ``readability``, ``refusal``, a grammar option by its name) go to every generation; they
        are checked here, once. ``evidence="default"`` leaves it to the generator
        (``"lexical"`` in this process, none on a server). ``instructions`` (a str or a prompt
        template) replaces the policy's system instructions (also settable later as the
        ``"instructions"`` prompt). ``citation_chunk_size`` (in the generator's tokens)
        re-splits every node into chunks of at most that size, each its own source node (see
        ``CitationChunker``); ``text_splitter`` replaces the default ``SentenceSplitter``.
        ``metadata_mode`` says which node metadata the model reads with the text (default:
        none); the first of ``title_keys`` with a non-blank value in a node's metadata is shown
        as its title. ``empty_sources`` says what a node with blank text does: ``"drop"``
        (logged) or ``"raise"``; ``empty_nodes`` is its former, deprecated name.
        """
        unknown = set(options) - set(option_names())
        if unknown:
            raise InputTypeError(unknown_names_message(
                "CitationSynthesizer", unknown, _keywords(), noun="keyword", verb="takes"
            ))
        resolved = resolve_generator(
            "CitationSynthesizer", check_generator(generator, llm_kind="LlamaIndex LLM"), llm,
            engine=engine, server_options=server_options, from_llm=generator_from,
            generator_place="a generator",
        )
        self._empty_sources = _empty_sources_of(empty_sources, empty_nodes)
        settings: dict[str, Any] = {"policy": policy, **options}
        if grammar_options is not None:
            settings[GRAMMAR_SETTING] = grammar_options
        self._instructions = _instruction_prompt(settings.pop("instructions", None))
        if self._instructions is not None:
            # Only custom instructions are passed: otherwise the core uses the policy's own.
            settings["instructions"] = self._instructions.format()
        self._template = settings_template(settings)
        self._answering = Answering(resolved, self._model_call)
        self._chunker = _chunker(
            self._answering, citation_chunk_size, citation_chunk_overlap, text_splitter
        )
        self._metadata_mode = metadata_mode
        self._title_keys = _title_keys_of(title_keys)
        answering, tokens = self._answering, self._template.max_new_tokens
        super().__init__(
            llm=CiteformerLLM.describing(lambda: answering.generator, num_output=tokens),
            callback_manager=callback_manager,
            # Given here so that BaseSynthesizer does not read the LLM's metadata, which would
            # load the default model now; this synthesizer packs no prompts with them.
            prompt_helper=PromptHelper(num_output=tokens),
            chat_prompt_helper=ChatPromptHelper(num_output=tokens),
            streaming=check_streaming(streaming),
            empty_response=empty_response,
        )

    @property
    def generator(self) -> AnswerGenerator:
        """The generator that writes the answers; the embedded default model is loaded here, on
        first use, when none was given."""
        return self._answering.generator

    @property
    def llm(self) -> CiteformerLLM:
        """Pass as ``llm=`` to ``index.as_query_engine`` so ``Settings.llm`` is never resolved."""
        return self._llm  # type: ignore[return-value]

    def _model_call(self, request: GenerationRequest) -> ModelCall:
        # Read at each call: the callback manager may be replaced after construction.
        return ModelCall(request, self._llm.to_payload(), self._callback_manager)

    # -- prompts -------------------------------------------------------------------------------

    def _get_prompts(self) -> PromptDictType:
        if self._instructions is not None:
            return {INSTRUCTIONS_PROMPT_KEY: self._instructions}
        policy = self._template.policy
        return {INSTRUCTIONS_PROMPT_KEY: PromptTemplate(
            default_instructions(policy), prompt_type=PromptType.CUSTOM
        )}

    def _update_prompts(self, prompts: PromptDictType) -> None:
        # The dict also holds keys meant for other modules ("module:key"); only ours is read.
        if INSTRUCTIONS_PROMPT_KEY in prompts:
            instructions = _instruction_prompt(prompts[INSTRUCTIONS_PROMPT_KEY])
            self._instructions = instructions
            self._template = self._template.replace(
                instructions=None if instructions is None else instructions.format()
            )

    # -- BaseSynthesizer -----------------------------------------------------------------------

    def get_response(
        self, query_str: str, text_chunks: Sequence[str], **response_kwargs: Any
    ) -> RESPONSE_TEXT_TYPE:
        """The answer text for plain text chunks, numbered from 1 in order (a generator if
        streaming). Blank chunks raise ``EmptySourceError``; use ``synthesize`` for the
        citations."""
        request = call_request(self._template, query_str, [Source(c) for c in text_chunks])
        if self._streaming:
            return sync_chunks(self._answering.stream(request), on_end=None)
        return self._answering.answer(request).text

    async def aget_response(
        self, query_str: str, text_chunks: Sequence[str], **response_kwargs: Any
    ) -> RESPONSE_TEXT_TYPE:
        """Async ``get_response``: an in-process generation runs in a worker thread; an async
        generator (``ServerGenerator``) is awaited."""
        request = call_request(self._template, query_str, [Source(c) for c in text_chunks])
        if self._streaming:
            return await self._answering.astream(request, on_end=None)
        return (await self._answering.aanswer(request)).text

    # -- CitingSynthesizer ---------------------------------------------------------------------

    def _cited_nodes(self, nodes: Sequence[NodeWithScore]) -> list[NodeWithScore]:
        return cited_nodes(nodes, self._empty_sources, self._chunker)

    def _respond(
        self,
        query_str: str,
        cited: list[NodeWithScore],
        source_nodes: list[NodeWithScore],
        metadata: dict[str, Any],
        history: Sequence[tuple[str, str]],
        streaming: bool,
    ) -> RESPONSE_TYPE:
        request, mode = self._request(query_str, cited, history), self._metadata_mode
        if not streaming:
            answer = self._answering.answer(request, cited)
            return _answered(answer, cited, source_nodes, metadata, mode)
        stream = self._answering.stream(request, cited)
        response = StreamingResponse(no_chunks(), source_nodes, metadata)
        response.response_gen = sync_chunks(stream, on_end=_finisher(response, cited, mode))
        return response

    async def _arespond(
        self,
        query_str: str,
        cited: list[NodeWithScore],
        source_nodes: list[NodeWithScore],
        metadata: dict[str, Any],
        history: Sequence[tuple[str, str]],
        streaming: bool,
    ) -> RESPONSE_TYPE:
        request, mode = self._request(query_str, cited, history), self._metadata_mode
        if not streaming:
            answer = await self._answering.aanswer(request, cited)
            return _answered(answer, cited, source_nodes, metadata, mode)
        response = ClosingAsyncStreamingResponse(no_async_chunks(), source_nodes, metadata)
        response.response_gen = await self._answering.astream(
            request, cited, on_end=_finisher(response, cited, mode)
        )
        return response

    def _request(
        self, question: str, cited: Sequence[NodeWithScore], history: Sequence[tuple[str, str]]
    ) -> GenerationRequest:
        sources = [to_source(node, self._metadata_mode, self._title_keys) for node in cited]
        changes = {"history": history} if history else {}
        return call_request(self._template, question, sources, **changes)


def _answered(
    answer: CitedAnswer,
    cited: Sequence[NodeWithScore],
    source_nodes: list[NodeWithScore],
    metadata: dict[str, Any],
    mode: MetadataMode,
) -> Response:
    metadata.update(response_metadata(answer, cited, mode))
    return Response(answer.text, source_nodes=source_nodes, metadata=metadata)


def _finisher(
    response: StreamingResponse | AsyncStreamingResponse,
    cited: Sequence[NodeWithScore],
    mode: MetadataMode,
) -> Callable[[CitedAnswer], None]:
    # What a stream calls once read to the end: the metadata is known only then.
    metadata = response.metadata

    def finish(answer: CitedAnswer) -> None:
        if metadata is not None:
            metadata.update(response_metadata(answer, cited, mode))
        # Lets str(response) work even when the caller read response_gen directly.
        response.response_txt = answer.text

    return finish


def _chunker(
    answering: Answering,
    chunk_size: int | None,
    chunk_overlap: int,
    text_splitter: TextSplitter | None,
) -> CitationChunker | None:
    """What re-splits the nodes, if anything: ``text_splitter``, or a ``SentenceSplitter`` of
    ``chunk_size`` tokens of the generator."""
    if chunk_size is not None and (
        isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1
    ):
        raise InvalidInputError(
            f"citation_chunk_size must be a positive int (tokens) or None, got {chunk_size!r}"
        )
    if text_splitter is None and chunk_size is not None:
        text_splitter = SentenceSplitter(
            chunk_size=chunk_size, chunk_overlap=chunk_overlap, tokenizer=answering.token_counter()
        )
    return CitationChunker(text_splitter) if text_splitter is not None else None


def _keywords() -> list[str]:
    """Every keyword ``CitationSynthesizer`` takes: its own, and the generation options."""
    parameters = inspect.signature(CitationSynthesizer).parameters.items()
    own = [name for name, p in parameters if p.kind is not inspect.Parameter.VAR_KEYWORD]
    return [*own, *option_names()]


def _instruction_prompt(value: object) -> BasePromptTemplate | None:
    """The instructions as a prompt template, or ``None`` for the policy's own."""
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


def _title_keys_of(value: object) -> tuple[str, ...]:
    # A str is a sequence too: "title" would read the metadata keys "t", "i", ...
    if (
        isinstance(value, str)
        or not isinstance(value, Sequence)
        or not all(isinstance(key, str) for key in value)
    ):
        hint = f"; for one key pass [{value!r}]" if isinstance(value, str) else ""
        raise InputTypeError(
            "title_keys must be a list of metadata keys (str), such as ['title', 'file_name'], "
            f"got {type(value).__name__} {shown(value)}{hint}"
        )
    return tuple(value)


def _empty_sources_of(empty_sources: str, empty_nodes: str | None) -> EmptySources:
    if empty_nodes is None:
        return check_empty_sources(empty_sources)
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
    return check_empty_sources(empty_nodes, "empty_nodes")
