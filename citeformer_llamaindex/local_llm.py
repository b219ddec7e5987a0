"""``LocalLLM``: citeformer's model as a plain LlamaIndex LLM, for the rest of an app."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    ChatResponseAsyncGen,
    ChatResponseGen,
    CompletionResponse,
    CompletionResponseAsyncGen,
    CompletionResponseGen,
    LLMMetadata,
    MessageRole,
)
from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.constants import DEFAULT_CONTEXT_WINDOW
from llama_index.core.llms.callbacks import llm_chat_callback, llm_completion_callback
from llama_index.core.llms.custom import CustomLLM

from citeformer.conversation import free_text_request
from citeformer.errors import InputTypeError
from citeformer.generation.protocols import AnswerGenerator
from citeformer.integration import AsyncChunks, as_async_loaded, or_default
from citeformer.request import GenerationRequest, option_names, request_template
from citeformer_llamaindex.llm import model_name

__all__ = ["DEFAULT_LOCAL_TOKENS", "LocalLLM"]

DEFAULT_LOCAL_TOKENS = 256
"""Most tokens a completion takes unless ``max_new_tokens`` says otherwise."""


class LocalLLM(CustomLLM):
    """citeformer's model writing free text: a LlamaIndex LLM for everything but cited answers.

    The same model as the ``CitationSynthesizer`` (the embedded SmolLM2-135M by default), run
    without the citation grammar, so that a whole LlamaIndex app runs offline on one model:
    ``Settings.llm``, a ``CondenseQuestionChatEngine``, a router's selector, a sub-question
    engine's question generator. Messages are rendered with the model's chat template
    (``is_chat_model``); a completion prompt is sent as one user message (``formatted=True``:
    as it is). Its generation options are the fields that are ``GenerationRequest`` options
    (``max_new_tokens``, ``do_sample``, ``temperature``, ``seed``), checked at construction; a
    call's keyword of the same name overrides one, and other call keywords (LlamaIndex
    components pass their own) are ignored.

    Which is which: ``LocalLLM`` writes text and cites nothing. ``CiteformerLLM`` (what
    ``CitationSynthesizer.llm`` returns) writes nothing: it only stands in for ``Settings.llm``
    beside a synthesizer, and raises if called, so that a component never silently answers
    without citations in its place. Answers with citations come from the synthesizer or
    ``CitationChatEngine`` alone.

    Instantiate:
        ```python
        from citeformer_llamaindex import LocalLLM

        llm = LocalLLM()                               # the embedded model, loaded on first use
        llm = LocalLLM(synthesizer.generator)          # the very model of a synthesizer
        llm = LocalLLM(CiteGenerator.from_pretrained(name), max_new_tokens=128)
        Settings.llm = llm
        ```

    Complete and chat:
        ```python
        llm.complete("Name a tower in Paris.").text
        llm.chat([ChatMessage(role="user", content="Hello")]).message.content
        for chunk in llm.stream_complete("Count to three."): print(chunk.delta, end="")
        ```

    Async:
        ```python
        await llm.acomplete("...")                     # a worker thread, off the event loop
        async for chunk in await llm.astream_chat(messages): ...
        ```
    """

    max_new_tokens: int = Field(default=DEFAULT_LOCAL_TOKENS)
    """Most tokens per completion."""

    # The request's own defaults, so that the LLM and the core cannot drift apart.
    do_sample: bool = Field(default=GenerationRequest.do_sample)
    """Sample instead of greedy decoding."""

    temperature: float = Field(default=GenerationRequest.temperature)
    """Sampling temperature, used when ``do_sample``."""

    seed: int | None = Field(default=None)
    """Seed for sampling."""

    _generator: AnswerGenerator | None = PrivateAttr(default=None)

    def __init__(self, generator: AnswerGenerator | None = None, **fields: Any) -> None:
        if generator is not None and not isinstance(generator, AnswerGenerator):
            raise InputTypeError(
                f"LocalLLM runs a citeformer generator (a CiteGenerator, or None for the "
                f"embedded model), got {type(generator).__name__}; a LlamaIndex LLM is already "
                "an LLM: use it as it is"
            )
        super().__init__(**fields)
        request_template(constrained=False, **self._options())  # a bad value raises here
        self._generator = generator

    @classmethod
    def _option_names(cls) -> tuple[str, ...]:
        # The fields that are generation options: a call may override each.
        return tuple(name for name in cls.model_fields if name in option_names())

    @classmethod
    def class_name(cls) -> str:
        return "LocalLLM"

    @property
    def generator(self) -> AnswerGenerator:
        """The generator that writes the text; the embedded model is loaded here, on first use,
        when none was given."""
        if self._generator is None:
            self._generator = or_default(None)
        return self._generator

    @property
    def metadata(self) -> LLMMetadata:
        generator = self.generator
        return LLMMetadata(
            context_window=getattr(generator, "context_length", None) or DEFAULT_CONTEXT_WINDOW,
            num_output=self.max_new_tokens,
            model_name=model_name(generator),
            is_chat_model=True,
        )

    # -- completions ---------------------------------------------------------------------------

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        text = self.generator.answer(self._request(self._prompt(prompt, formatted), kwargs)).text
        return CompletionResponse(text=text)

    @llm_completion_callback()
    def stream_complete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponseGen:
        request = self._request(self._prompt(prompt, formatted), kwargs)
        return _completions(self._pieces(request))

    @llm_completion_callback()
    async def acomplete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponse:
        text = await self._atext(self._prompt(prompt, formatted), kwargs)
        return CompletionResponse(text=text)

    @llm_completion_callback()
    async def astream_complete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponseAsyncGen:
        pieces = await self._apieces(self._prompt(prompt, formatted), kwargs)
        return _acompletions(pieces)

    # -- chat ----------------------------------------------------------------------------------

    @llm_chat_callback()
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        text = self.generator.answer(self._request(_dicts(messages), kwargs)).text
        return ChatResponse(message=ChatMessage(role=MessageRole.ASSISTANT, content=text))

    @llm_chat_callback()
    def stream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseGen:
        return _chats(self._pieces(self._request(_dicts(messages), kwargs)))

    @llm_chat_callback()
    async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        text = await self._atext(_dicts(messages), kwargs)
        return ChatResponse(message=ChatMessage(role=MessageRole.ASSISTANT, content=text))

    @llm_chat_callback()
    async def astream_chat(
        self, messages: Sequence[ChatMessage], **kwargs: Any
    ) -> ChatResponseAsyncGen:
        return _achats(await self._apieces(_dicts(messages), kwargs))

    # -- generation ----------------------------------------------------------------------------

    def _prompt(self, prompt: str, formatted: bool) -> list[dict[str, str]] | str:
        if formatted:
            return prompt
        system = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        return [*system, {"role": "user", "content": prompt}]

    def _options(self, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
        names, overrides = self._option_names(), overrides or {}
        chosen = {name: overrides[name] for name in names if name in overrides}
        return {**{name: getattr(self, name) for name in names}, **chosen}

    def _request(
        self, messages: list[dict[str, str]] | str, overrides: dict[str, Any]
    ) -> GenerationRequest:
        return free_text_request(self.generator, messages, **self._options(overrides))

    def _pieces(self, request: GenerationRequest) -> Iterator[str]:
        stream = self.generator.answer_stream(request)
        pieces = iter(stream)
        try:
            yield from pieces
        finally:
            # Stops the generation when the caller leaves early.
            close = getattr(pieces, "close", None)
            if close is not None:
                close()

    async def _atext(self, messages: list[dict[str, str]] | str, kwargs: dict[str, Any]) -> str:
        answering = await as_async_loaded(lambda: self.generator)
        return (await answering.answer(self._request(messages, kwargs))).text

    async def _apieces(
        self, messages: list[dict[str, str]] | str, kwargs: dict[str, Any]
    ) -> AsyncIterator[str]:
        answering = await as_async_loaded(lambda: self.generator)
        return _closing(await answering.stream(self._request(messages, kwargs)))


def _dicts(messages: Sequence[ChatMessage]) -> list[dict[str, str]]:
    return [{"role": m.role.value, "content": m.content or ""} for m in messages]


def _completions(pieces: Iterator[str]) -> CompletionResponseGen:
    text = ""
    for piece in pieces:
        text += piece
        yield CompletionResponse(text=text, delta=piece)


def _chats(pieces: Iterator[str]) -> ChatResponseGen:
    text = ""
    for piece in pieces:
        text += piece
        yield ChatResponse(
            message=ChatMessage(role=MessageRole.ASSISTANT, content=text), delta=piece
        )


async def _acompletions(pieces: AsyncIterator[str]) -> CompletionResponseAsyncGen:
    text = ""
    async for piece in pieces:
        text += piece
        yield CompletionResponse(text=text, delta=piece)


async def _achats(pieces: AsyncIterator[str]) -> ChatResponseAsyncGen:
    text = ""
    async for piece in pieces:
        text += piece
        yield ChatResponse(
            message=ChatMessage(role=MessageRole.ASSISTANT, content=text), delta=piece
        )


async def _closing(stream: AsyncChunks) -> AsyncIterator[str]:
    # Leaving early stops the generation (the model, or the server's connection).
    try:
        async for piece in stream:
            yield piece
    finally:
        await stream.aclose()
