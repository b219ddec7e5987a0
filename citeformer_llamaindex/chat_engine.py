"""``CitationChatEngine``: a LlamaIndex chat engine whose answers cite only this turn's nodes."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable, Generator, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    ChatResponseAsyncGen,
    ChatResponseGen,
    MessageRole,
)
from llama_index.core.base.response.schema import (
    AsyncStreamingResponse,
    Response,
    StreamingResponse,
)
from llama_index.core.callbacks import CallbackManager, trace_method
from llama_index.core.chat_engine.types import (
    AgentChatResponse,
    BaseChatEngine,
    StreamingAgentChatResponse,
)
from llama_index.core.memory import BaseMemory, Memory
from llama_index.core.schema import NodeWithScore, QueryBundle
from llama_index.core.tools import ToolOutput

from citeformer.conversation import (
    DEFAULT_CONDENSE_TOKENS,
    condense_messages,
    free_text_request,
    standalone_question,
)
from citeformer.errors import InputTypeError, InvalidInputError
from citeformer.generation.protocols import AnswerGenerator
from citeformer.integration import as_async_loaded
from citeformer.request import GenerationRequest, check_question
from citeformer_llamaindex.events import ModelCall
from citeformer_llamaindex.history import to_messages, to_turns
from citeformer_llamaindex.synthesizer import CitationSynthesizer

if TYPE_CHECKING:
    from llama_index.core.base.base_retriever import BaseRetriever
    from llama_index.core.indices.base import BaseIndex
    from llama_index.core.postprocessor.types import BaseNodePostprocessor

__all__ = ["DEFAULT_HISTORY_TOKENS", "CitationChatEngine", "CitationStreamingChatResponse"]

DEFAULT_HISTORY_TOKENS = 1024
"""Tokens of earlier turns the default memory keeps (the latest turns that fit; tiktoken's
count): small local models have small contexts, and the nodes need room beside them."""


@dataclass
class CitationStreamingChatResponse(StreamingAgentChatResponse):
    """A streamed chat answer; ``metadata`` holds the citations once the stream has ended.

    ``metadata`` is the synthesizer's ``response.metadata`` (``"citations"``, ``"quotes"``,
    ``"finish_reason"``, the token counts and each node's metadata by node id); it is filled in
    when ``response_gen`` (or ``async_response_gen()``) has been read to the end.
    """

    metadata: dict[str, Any] = field(default_factory=dict)

    # LlamaIndex's readers read the chat stream and never close it: a reader that leaves early
    # would leave the model generating as long as the response lives. These close it.

    @property
    def response_gen(self) -> Generator[str, None, None]:
        """The answer's text chunks; closing this early stops the generation."""
        return _closing(super().response_gen, self.chat_stream)

    async def async_response_gen(self) -> AsyncGenerator[str, None]:
        """The answer's text chunks; closing this early stops the generation."""
        texts = super().async_response_gen()
        try:
            async for text in texts:
                yield text
        finally:
            await texts.aclose()
            if self.achat_stream is not None:
                await self.achat_stream.aclose()


class CitationChatEngine(BaseChatEngine):
    """A condense-plus-context chat engine whose every ``[N]`` names one of this turn's nodes.

    Each turn: the follow-up and the history are condensed into a standalone question by the same
    model without the citation grammar ("When was it finished?" becomes "When was the Eiffel
    Tower finished?"); the retriever is asked that question; the ``CitationSynthesizer`` answers
    the follow-up as asked from the retrieved nodes, with the earlier turns shown before them
    (without their citation markers, which numbered other nodes) and the grammar allowing only
    ``[1]``..``[N]`` of this turn's N nodes. The answer, markers included, enters the history.

    ``chat``/``achat`` return an ``AgentChatResponse``; ``stream_chat``/``astream_chat`` a
    ``CitationStreamingChatResponse``. In both, ``[N]`` is ``response.source_nodes[N - 1]``,
    ``response.metadata`` is the synthesizer's (``"citations"``: ``source_id``, ``start``,
    ``end``, ``node_id`` per marker; ``"finish_reason"``...; filled in at the end of a stream), and
    ``response.sources[0].raw_input["message"]`` is the standalone question the retriever got.
    A streamed turn enters the history once its stream has been read to the end.

    History: ``chat_history`` (or the memory) holds user and assistant messages. A system or tool
    message is refused (``InvalidInputError``): the citation instructions are the one system
    message (``instructions=`` replaces them), and a tool's output is not a source.

    Instantiate:
        ```python
        from citeformer_llamaindex import CitationChatEngine

        chat = CitationChatEngine.from_index(index, max_new_tokens=48)   # the embedded model
        chat = CitationChatEngine.from_index(index, llm=HuggingFaceLLM(model=m, tokenizer=t))
        chat = CitationChatEngine.from_index(
            index, llm=OpenAILike(api_base="http://vllm:8000/v1", model=name), engine="vllm")
        chat = CitationChatEngine(retriever, CitationSynthesizer(FakeGenerator()))   # for tests
        ```

    Chat:
        ```python
        chat.chat("Tell me about the Eiffel Tower.")
        response = chat.chat("When was it finished?")
        response.response                         # 'It was finished in 1889 [2].'
        response.source_nodes[2 - 1]              # the node [2] cites
        response.metadata["citations"]            # [{'source_id': 2, 'start': 24, ...}]
        ```

    Stream:
        ```python
        response = chat.stream_chat("Who built it?")
        for token in response.response_gen:
            print(token, end="")
        response.metadata["citations"]            # once the stream has ended
        ```

    Async:
        ```python
        response = await chat.achat("Who built it?")
        response = await chat.astream_chat("Who built it?")
        async for token in response.async_response_gen(): ...
        ```
    """

    def __init__(
        self,
        retriever: BaseRetriever,
        synthesizer: CitationSynthesizer | None = None,
        *,
        memory: BaseMemory | None = None,
        chat_history: Sequence[ChatMessage] | None = None,
        skip_condense: bool = False,
        condense_tokens: int = DEFAULT_CONDENSE_TOKENS,
        node_postprocessors: Sequence[BaseNodePostprocessor] | None = None,
        callback_manager: CallbackManager | None = None,
    ) -> None:
        """Chat over ``retriever``, answering with ``synthesizer`` (default: a
        ``CitationSynthesizer()`` on the embedded model, whose generator also condenses).

        ``memory`` keeps the turns (default: a ``Memory`` of the last
        ``DEFAULT_HISTORY_TOKENS`` tokens, holding ``chat_history``). ``skip_condense`` asks the
        retriever the follow-up as it is. ``condense_tokens`` bounds the standalone question.
        ``node_postprocessors`` run on the retrieved nodes, with the standalone question.
        """
        if not callable(getattr(retriever, "retrieve", None)):
            raise InputTypeError(
                f"retriever must be a LlamaIndex retriever (with retrieve()), got "
                f"{type(retriever).__name__}; from an index: CitationChatEngine.from_index(index)"
            )
        if synthesizer is not None and not isinstance(synthesizer, CitationSynthesizer):
            raise InputTypeError(
                f"synthesizer must be a CitationSynthesizer, got {type(synthesizer).__name__}: "
                "only its answers carry citations that can name this turn's nodes alone"
            )
        if memory is not None and chat_history is not None:
            raise InvalidInputError(
                "pass chat_history= or memory=, not both: put the history in the memory"
            )
        if isinstance(condense_tokens, bool) or not isinstance(condense_tokens, int) or (
            condense_tokens < 1
        ):
            raise InvalidInputError(
                f"condense_tokens must be a positive int, got {condense_tokens!r}"
            )
        if chat_history is not None:
            to_turns(chat_history, "chat_history")
        self._retriever = retriever
        self._synthesizer = synthesizer if synthesizer is not None else CitationSynthesizer()
        self._memory = memory if memory is not None else Memory.from_defaults(
            chat_history=list(chat_history or []), token_limit=DEFAULT_HISTORY_TOKENS
        )
        self._skip_condense = skip_condense
        self._condense_tokens = condense_tokens
        self._postprocessors = list(node_postprocessors or [])
        self.callback_manager = callback_manager or CallbackManager([])

    @classmethod
    def from_defaults(
        cls,
        retriever: BaseRetriever,
        *,
        memory: BaseMemory | None = None,
        chat_history: Sequence[ChatMessage] | None = None,
        skip_condense: bool = False,
        condense_tokens: int = DEFAULT_CONDENSE_TOKENS,
        node_postprocessors: Sequence[BaseNodePostprocessor] | None = None,
        callback_manager: CallbackManager | None = None,
        **synthesizer_options: Any,
    ) -> CitationChatEngine:
        """A chat engine over ``retriever``; ``synthesizer_options`` are
        ``CitationSynthesizer``'s (``generator``, ``llm``, ``engine``, ``max_new_tokens``...)."""
        return cls(
            retriever,
            CitationSynthesizer(**synthesizer_options),
            memory=memory,
            chat_history=chat_history,
            skip_condense=skip_condense,
            condense_tokens=condense_tokens,
            node_postprocessors=node_postprocessors,
            callback_manager=callback_manager,
        )

    @classmethod
    def from_index(
        cls, index: BaseIndex[Any], *, similarity_top_k: int = 3, **options: Any
    ) -> CitationChatEngine:
        """A chat engine over ``index.as_retriever(similarity_top_k=...)``; ``options`` are
        ``from_defaults``'s."""
        retriever = index.as_retriever(similarity_top_k=similarity_top_k)
        return cls.from_defaults(retriever, **options)

    @property
    def synthesizer(self) -> CitationSynthesizer:
        """What answers each turn; its generator also writes the standalone questions."""
        return self._synthesizer

    @property
    def chat_history(self) -> list[ChatMessage]:
        """Every turn so far, answers with their markers."""
        return list(self._memory.get_all())

    def reset(self) -> None:
        """Forget the conversation."""
        self._memory.reset()

    # -- turns ---------------------------------------------------------------------------------

    @trace_method("chat")
    def chat(
        self, message: str, chat_history: list[ChatMessage] | None = None
    ) -> AgentChatResponse:
        """Answer ``message`` from the nodes retrieved for its standalone question."""
        message, history, question, nodes = self._turn(message, chat_history)
        response = self._synthesizer.synthesize(
            message, nodes, history=history, streaming=False
        )
        assert isinstance(response, Response)
        self._remember(message, str(response))
        return _chat_response(response, question, nodes)

    @trace_method("chat")
    def stream_chat(
        self, message: str, chat_history: list[ChatMessage] | None = None
    ) -> CitationStreamingChatResponse:
        """``chat``, the answer streamed; the turn enters the history once the stream ends."""
        message, history, question, nodes = self._turn(message, chat_history)
        response = self._synthesizer.synthesize(message, nodes, history=history, streaming=True)
        assert isinstance(response, StreamingResponse) and response.response_gen is not None
        deltas = _deltas(response.response_gen, partial(self._remember, message))
        return _streamed_response(response, question, nodes, chat_stream=deltas)

    @trace_method("chat")
    async def achat(
        self, message: str, chat_history: list[ChatMessage] | None = None
    ) -> AgentChatResponse:
        """Async ``chat``: a model in this process runs in worker threads, off the event loop."""
        message, history, question, nodes = await self._aturn(message, chat_history)
        response = await self._synthesizer.asynthesize(
            message, nodes, history=history, streaming=False
        )
        assert isinstance(response, Response)
        await self._aremember(message, str(response))
        return _chat_response(response, question, nodes)

    @trace_method("chat")
    async def astream_chat(
        self, message: str, chat_history: list[ChatMessage] | None = None
    ) -> CitationStreamingChatResponse:
        """Async ``stream_chat``: read ``async_response_gen()``."""
        message, history, question, nodes = await self._aturn(message, chat_history)
        response = await self._synthesizer.asynthesize(
            message, nodes, history=history, streaming=True
        )
        assert isinstance(response, AsyncStreamingResponse)
        deltas = _adeltas(response.async_response_gen(), partial(self._aremember, message))
        return _streamed_response(response, question, nodes, achat_stream=deltas)

    # -- steps ---------------------------------------------------------------------------------

    def _turn(
        self, message: str, chat_history: list[ChatMessage] | None
    ) -> tuple[str, list[tuple[str, str]], str, list[NodeWithScore]]:
        """One turn's checked message, the history, the standalone question and its nodes."""
        message = check_question(message)
        if chat_history is not None:
            to_turns(chat_history, "chat_history")
            self._memory.set(chat_history)
        history = to_turns(self._memory.get(input=message), "the memory")
        question = self._condensed(history, message)
        return message, history, question, self._retrieve(question)

    async def _aturn(
        self, message: str, chat_history: list[ChatMessage] | None
    ) -> tuple[str, list[tuple[str, str]], str, list[NodeWithScore]]:
        """Async ``_turn``."""
        message = check_question(message)
        if chat_history is not None:
            to_turns(chat_history, "chat_history")
            await self._memory.aset(chat_history)
        history = to_turns(await self._memory.aget(input=message), "the memory")
        question = await self._acondensed(history, message)
        return message, history, question, await self._aretrieve(question)

    def _condensed(self, history: list[tuple[str, str]], message: str) -> str:
        if self._skip_condense or not history:
            return message
        generator = self._synthesizer.generator
        request = _rewrite(generator, history, message, self._condense_tokens)
        with _reported(request, self._synthesizer) as call:
            answer = call.ended(generator.answer(request))
        return standalone_question(answer.text, message)

    async def _acondensed(self, history: list[tuple[str, str]], message: str) -> str:
        if self._skip_condense or not history:
            return message
        # Reading the generator may load the default model, which blocks for seconds.
        answering = await as_async_loaded(lambda: self._synthesizer.generator)
        request = _rewrite(answering.generator, history, message, self._condense_tokens)
        with _reported(request, self._synthesizer) as call:
            answer = call.ended(await answering.answer(request))
        return standalone_question(answer.text, message)

    def _retrieve(self, question: str) -> list[NodeWithScore]:
        nodes = self._retriever.retrieve(question)
        for postprocessor in self._postprocessors:
            nodes = postprocessor.postprocess_nodes(nodes, query_bundle=QueryBundle(question))
        return nodes

    async def _aretrieve(self, question: str) -> list[NodeWithScore]:
        nodes = await self._retriever.aretrieve(question)
        for postprocessor in self._postprocessors:
            nodes = await postprocessor.apostprocess_nodes(
                nodes, query_bundle=QueryBundle(question)
            )
        return nodes

    def _remember(self, message: str, answer: str) -> None:
        # Both messages at once, when the answer is complete: an abandoned stream leaves no
        # question without its answer in the history.
        self._memory.put_messages(to_messages(message, answer))

    async def _aremember(self, message: str, answer: str) -> None:
        await self._memory.aput_messages(to_messages(message, answer))


def _chat_response(
    response: Response, question: str, nodes: list[NodeWithScore]
) -> AgentChatResponse:
    return AgentChatResponse(
        response=str(response),
        sources=[_retrieval(question, nodes)],
        source_nodes=list(response.source_nodes),
        metadata=response.metadata if response.metadata is not None else {},
    )


def _streamed_response(
    response: StreamingResponse | AsyncStreamingResponse,
    question: str,
    nodes: list[NodeWithScore],
    **stream: Any,
) -> CitationStreamingChatResponse:
    return CitationStreamingChatResponse(
        sources=[_retrieval(question, nodes)],
        source_nodes=list(response.source_nodes),
        # The synthesizer fills this very dict in once its stream has ended.
        metadata=response.metadata if response.metadata is not None else {},
        # Read in the caller's thread: no thread polling a queue beside the model.
        is_writing_to_memory=False,
        **stream,
    )


def _retrieval(question: str, nodes: list[NodeWithScore]) -> ToolOutput:
    # What LlamaIndex's condense-plus-context engine reports: the retriever's input and output.
    return ToolOutput(
        tool_name="retriever",
        content=str(nodes),
        raw_input={"message": question},
        raw_output=nodes,
    )


def _closing(
    texts: Generator[str, None, None], stream: Generator[Any, None, None] | None
) -> Generator[str, None, None]:
    try:
        yield from texts
    finally:
        if stream is not None:
            stream.close()


def _deltas(
    tokens: Generator[str, None, None], on_end: Callable[[str], None]
) -> ChatResponseGen:
    text = ""
    try:
        for token in tokens:
            text += token
            yield ChatResponse(
                message=ChatMessage(role=MessageRole.ASSISTANT, content=text), delta=token
            )
    finally:
        tokens.close()
    on_end(text)


async def _adeltas(
    tokens: AsyncGenerator[str, None], on_end: Callable[[str], Any]
) -> ChatResponseAsyncGen:
    text = ""
    try:
        async for token in tokens:
            text += token
            yield ChatResponse(
                message=ChatMessage(role=MessageRole.ASSISTANT, content=text), delta=token
            )
    finally:
        await tokens.aclose()
    await on_end(text)


def _rewrite(
    generator: AnswerGenerator, history: list[tuple[str, str]], message: str, tokens: int
) -> GenerationRequest:
    """The request for the standalone question of ``message`` after ``history``."""
    messages = condense_messages(history, message)
    return free_text_request(generator, messages, max_new_tokens=tokens)


def _reported(request: GenerationRequest, synthesizer: CitationSynthesizer) -> ModelCall:
    """The rewrite, reported as a completion call of the synthesizer's model."""
    return ModelCall(request, synthesizer.llm.to_payload(), synthesizer.callback_manager)
