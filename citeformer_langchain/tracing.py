"""The model's run inside a chain step's run, as LangChain's callbacks expect a model to report it.

A ``CitationRunnable`` (and a ``StandaloneQuestion``) asks its model itself, not through a
LangChain model's ``invoke``, because the grammar has to reach the model's logits. So that
tracers (LangSmith, Phoenix, a callback handler, ``astream_events``) still see the model, each
call is reported as a child run of the step's own: ``on_chat_model_start`` with the messages the
model is shown (``on_llm_start`` with the prompt for a completion model: a
``HuggingFacePipeline``, an ``OpenAI``, or a request with its own ``prompt``), then
``on_llm_new_token`` per streamed piece, then ``on_llm_end`` with the text and token usage, or
``on_llm_error``. The callbacks, tags and metadata of a user's own model (``llm=``) are that run's
too, as they would be had the model been invoked.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal

from langchain_core.callbacks import (
    AsyncCallbackManager,
    AsyncCallbackManagerForChainRun,
    AsyncCallbackManagerForLLMRun,
    CallbackManager,
    CallbackManagerForChainRun,
    CallbackManagerForLLMRun,
    Callbacks,
)
from langchain_core.load.serializable import to_json_not_implemented
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, convert_to_messages
from langchain_core.outputs import (
    ChatGeneration,
    ChatGenerationChunk,
    Generation,
    GenerationChunk,
    LLMResult,
)

from citeformer.generation.protocols import AnswerGenerator
from citeformer.prompt import render_prompt
from citeformer.request import GenerationRequest
from citeformer.types import CitedAnswer
from citeformer_langchain.answer import CitationAnswer, CitationAnswerChunk

__all__ = ["AsyncModelRun", "ModelRun", "TracedModel"]

_COMPLETION_MODELS = ("HuggingFacePipeline", "OpenAI")


@dataclass(frozen=True)
class TracedModel:
    """What a model run is reported as: its kind, name and parameters, and the user's own
    model's callbacks, tags and metadata."""

    generator: AnswerGenerator
    kind: Literal["chat", "llm"]
    serialized: dict[str, Any]
    name: str
    metadata: dict[str, Any] = field(default_factory=dict)
    callbacks: Callbacks = None
    tags: list[str] = field(default_factory=list)
    verbose: bool = False

    @classmethod
    def of(cls, generator: AnswerGenerator, llm: Any = None) -> TracedModel:
        """The model run by ``generator``, built from ``llm`` when one was given."""
        described = llm if llm is not None else generator
        completion = llm is not None and type(llm).__name__ in _COMPLETION_MODELS
        serialized = _serialized(llm if llm is not None else generator)
        return cls(
            generator=generator,
            kind="llm" if completion else "chat",
            serialized=serialized,
            name=type(described).__name__,
            metadata={
                "ls_provider": _provider(generator),
                "ls_model_name": _model_name(generator),
                **(getattr(llm, "metadata", None) or {}),
            },
            callbacks=getattr(llm, "callbacks", None),
            tags=list(getattr(llm, "tags", None) or []),
            verbose=bool(getattr(llm, "verbose", False)),
        )

    def kind_for(self, request: GenerationRequest) -> Literal["chat", "llm"]:
        """A request with a ``prompt`` of its own shows the model that text, not messages."""
        return "llm" if request.prompt is not None else self.kind

    def prompt(self, request: GenerationRequest) -> str:
        """The text a completion model is shown."""
        if request.prompt is not None:
            return request.prompt
        return render_prompt(request.messages(), getattr(self.generator, "tokenizer", None))

    def messages(self, request: GenerationRequest) -> list[BaseMessage]:
        """The messages a chat model is shown."""
        return convert_to_messages(
            [(message["role"], message["content"]) for message in request.messages()]
        )

    def parameters(self, request: GenerationRequest) -> dict[str, Any]:
        """The invocation parameters a tracer shows beside the run."""
        return {
            "max_new_tokens": request.max_new_tokens,
            "do_sample": request.do_sample,
            "temperature": request.temperature,
            "policy": str(request.policy),
            "constrained": request.constrained,
            "sources": len(request.sources),
        }

    def callback_settings(
        self,
        run_manager: CallbackManagerForChainRun | AsyncCallbackManagerForChainRun,
        request: GenerationRequest,
    ) -> dict[str, Any]:
        """The keywords of ``CallbackManager.configure`` for this model's run under
        ``run_manager``'s: the step's callbacks inherited, the model's own local."""
        return {
            "inheritable_callbacks": run_manager.get_child(),
            "local_callbacks": self.callbacks,
            "verbose": self.verbose,
            "local_tags": self.tags,
            "inheritable_metadata": {
                **self.metadata,
                "ls_model_type": self.kind_for(request),
                "ls_max_tokens": request.max_new_tokens,
                "ls_temperature": request.temperature if request.do_sample else 0.0,
            },
        }

    def start_event(self, request: GenerationRequest) -> tuple[str, list[Any], dict[str, Any]]:
        """The callback manager's method that starts this call, its inputs and its keywords."""
        options = {"invocation_params": self.parameters(request), "name": self.name,
                   "batch_size": 1}
        if self.kind_for(request) == "chat":
            return "on_chat_model_start", [self.messages(request)], options
        return "on_llm_start", [self.prompt(request)], options


class ModelRun:
    """One model call reported as a child run of a chain step's run.

    ``with ModelRun.start(run_manager, model, request) as run:`` reports the start; inside,
    ``run.streamed(chunk)`` reports each chunk and ``run.ended(answer)`` the end. Leaving the
    block by an exception (a stream closed early included) reports it as the run's error.
    """

    def __init__(self, manager: CallbackManagerForLLMRun, kind: Literal["chat", "llm"]) -> None:
        self._manager = manager
        self._kind = kind
        self._text = ""
        self._done = False

    @classmethod
    def start(
        cls,
        run_manager: CallbackManagerForChainRun,
        model: TracedModel,
        request: GenerationRequest,
    ) -> ModelRun:
        """Report the start of ``model``'s call on ``request`` under ``run_manager``'s run."""
        callbacks = CallbackManager.configure(**model.callback_settings(run_manager, request))
        event, inputs, options = model.start_event(request)
        (manager,) = getattr(callbacks, event)(model.serialized, inputs, **options)
        return cls(manager, model.kind_for(request))

    def streamed(self, chunk: CitationAnswerChunk) -> None:
        """Report a streamed chunk; the last one (it has a finish reason) ends the run."""
        if chunk.text:
            self._text += chunk.text
            self._manager.on_llm_new_token(chunk.text, chunk=_piece(self._kind, chunk.text))
        if chunk.finish_reason is not None:
            self.ended(chunk, text=self._text)

    def ended(self, answer: CitationAnswer | CitedAnswer, *, text: str | None = None) -> None:
        """Report the end of the call, with ``answer``'s text and token usage."""
        self._done = True
        self._manager.on_llm_end(_result(self._kind, answer, text))

    def failed(self, error: BaseException) -> None:
        """Report the call's error (also a stream left early)."""
        if not self._done:
            self._done = True
            self._manager.on_llm_error(error)

    def __enter__(self) -> ModelRun:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, _: TracebackType | None
    ) -> None:
        if error is not None:
            self.failed(error)


class AsyncModelRun:
    """``ModelRun`` for an async step: reported on the event loop, awaited."""

    def __init__(
        self, manager: AsyncCallbackManagerForLLMRun, kind: Literal["chat", "llm"]
    ) -> None:
        self._manager = manager
        self._kind = kind
        self._text = ""
        self._done = False

    @classmethod
    async def start(
        cls,
        run_manager: AsyncCallbackManagerForChainRun,
        model: TracedModel,
        request: GenerationRequest,
    ) -> AsyncModelRun:
        """Report the start of ``model``'s call on ``request`` under ``run_manager``'s run."""
        callbacks = AsyncCallbackManager.configure(
            **model.callback_settings(run_manager, request)
        )
        event, inputs, options = model.start_event(request)
        (manager,) = await getattr(callbacks, event)(model.serialized, inputs, **options)
        return cls(manager, model.kind_for(request))

    async def streamed(self, chunk: CitationAnswerChunk) -> None:
        """Report a streamed chunk; the last one (it has a finish reason) ends the run."""
        if chunk.text:
            self._text += chunk.text
            await self._manager.on_llm_new_token(chunk.text, chunk=_piece(self._kind, chunk.text))
        if chunk.finish_reason is not None:
            await self.ended(chunk, text=self._text)

    async def ended(
        self, answer: CitationAnswer | CitedAnswer, *, text: str | None = None
    ) -> None:
        """Report the end of the call, with ``answer``'s text and token usage."""
        self._done = True
        await self._manager.on_llm_end(_result(self._kind, answer, text))

    async def failed(self, error: BaseException) -> None:
        """Report the call's error (also a stream left early)."""
        if self._done:
            return
        self._done = True
        # LangChain shields the report in a task of its own, which a stream closed while asyncio
        # shuts down would leave pending: with no handler there is nothing to report anyway.
        if self._manager.handlers:
            await self._manager.on_llm_error(error)

    async def __aenter__(self) -> AsyncModelRun:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, _: TracebackType | None
    ) -> None:
        if error is not None:
            await self.failed(error)


def _piece(kind: str, text: str) -> ChatGenerationChunk | GenerationChunk:
    if kind == "chat":
        return ChatGenerationChunk(message=AIMessageChunk(content=text))
    return GenerationChunk(text=text)


def _result(kind: str, answer: CitationAnswer | CitedAnswer, text: str | None) -> LLMResult:
    text = answer.text if text is None else text
    info = {"finish_reason": answer.finish_reason}
    prompt, generated = answer.prompt_tokens, answer.generated_tokens
    usage = {
        "prompt_tokens": prompt, "completion_tokens": generated, "total_tokens": prompt + generated,
    }
    generation: Generation
    if kind == "chat":
        message = AIMessage(content=text, response_metadata=info, usage_metadata={
            "input_tokens": prompt, "output_tokens": generated, "total_tokens": prompt + generated,
        })
        generation = ChatGeneration(message=message, generation_info=info)
    else:
        generation = Generation(text=text, generation_info=info)
    return LLMResult(generations=[[generation]], llm_output={"token_usage": usage})


def _serialized(model: Any) -> dict[str, Any]:
    serialized = getattr(model, "_serialized", None)  # what LangChain's models report themselves
    if isinstance(serialized, dict):
        return serialized
    return dict(to_json_not_implemented(model))


def _provider(generator: AnswerGenerator) -> str:
    engine = getattr(generator, "engine", None)
    if isinstance(engine, str):
        return engine  # a ServerGenerator: "vllm", "llama.cpp", "sglang"
    if getattr(generator, "model", None) is not None:
        return "huggingface"
    return type(generator).__name__.lower()


def _model_name(generator: AnswerGenerator) -> str | None:
    model = getattr(generator, "model", None)
    if isinstance(model, str) or model is None:
        return model
    return getattr(model, "name_or_path", None) or type(model).__name__
