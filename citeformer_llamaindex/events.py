"""Each request the model answers, reported as LlamaIndex's own LLMs report a call.

A request shown as chat messages is a chat call (``LLMChatStartEvent``, an
``LLMChatInProgressEvent`` per streamed chunk, ``LLMChatEndEvent``); one with a whole
``prompt`` of its own is a completion call (the ``LLMCompletion*Event``s). The events go to
LlamaIndex's instrumentation, in the span active when the call starts, and to the callback
manager as a ``CBEventType.LLM`` event, as ``llama_index.core.llms.callbacks`` sends them. The
response carries the answer text and its token counts where LlamaIndex's OpenAI LLMs put them:
``additional_kwargs`` and ``raw["usage"]`` (``prompt_tokens``, ``completion_tokens``,
``total_tokens``), which ``TokenCountingHandler`` reads.

A call ends once, whatever happens: with its answer, or with its error (an ``ExceptionEvent``
and an ``EXCEPTION`` payload, as LlamaIndex's own LLMs report one). A stream its reader left
early (closed, dropped or a cancelled task) stops generating and ends with the error that left
it: a ``GeneratorExit`` saying so, or the task's ``CancelledError``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from types import TracebackType
from typing import Any

import llama_index.core.instrumentation as instrument
from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    CompletionResponse,
    MessageRole,
)
from llama_index.core.callbacks.base import CallbackManager
from llama_index.core.callbacks.schema import CBEventType, EventPayload
from llama_index.core.instrumentation.events import BaseEvent
from llama_index.core.instrumentation.events.exception import ExceptionEvent
from llama_index.core.instrumentation.events.llm import (
    LLMChatEndEvent,
    LLMChatInProgressEvent,
    LLMChatStartEvent,
    LLMCompletionEndEvent,
    LLMCompletionInProgressEvent,
    LLMCompletionStartEvent,
)
from llama_index.core.instrumentation.span import active_span_id

from citeformer.generation.protocols import AnswerChunks, AsyncAnswerChunks
from citeformer.request import GenerationRequest
from citeformer.types import CitedAnswer

__all__ = ["ModelCall", "chat_messages", "usage"]

# LlamaIndex re-exports get_dispatcher without marking it public for type checkers.
dispatcher = instrument.get_dispatcher(__name__)  # type: ignore[attr-defined]


class ModelCall:
    """One request to the model, from its start events to its end (or error) events.

    Used as a context manager around asking the generator: entering sends the start events,
    an error leaving it sends the error. ``ended(answer)`` sends the end events;
    ``chunks``/``achunks`` wrap a stream so that each chunk is reported and its end too. Only
    the first end counts: a callback handler that raises in ``on_event_end`` gets no second
    end, as an error, for the same event.
    """

    def __init__(
        self,
        request: GenerationRequest,
        model: dict[str, Any],
        callback_manager: CallbackManager | None,
    ) -> None:
        """``model`` is the LLM's ``to_payload()``, the ``model_dict`` of the start event."""
        self._prompt = request.prompt
        self._messages = chat_messages(request) if request.prompt is None else []
        self._model = model
        self._callbacks = callback_manager
        self._span_id: str | None = None
        self._event_id = ""
        self._text = ""
        self._ended = False

    def __enter__(self) -> ModelCall:
        # Streamed chunks and the end arrive after the span that started the call has closed:
        # every event names the span of the start, as LlamaIndex's LLMs do.
        self._span_id = active_span_id.get()
        if self._prompt is None:
            payload: dict[str, Any] = {EventPayload.MESSAGES: self._messages}
            dispatcher.event(LLMChatStartEvent(
                messages=self._messages, additional_kwargs={}, model_dict=self._model,
                span_id=self._span_id,
            ))
        else:
            payload = {EventPayload.PROMPT: self._prompt}
            dispatcher.event(LLMCompletionStartEvent(
                prompt=self._prompt, additional_kwargs={}, model_dict=self._model,
                span_id=self._span_id,
            ))
        if self._callbacks is not None:
            self._event_id = self._callbacks.on_event_start(CBEventType.LLM, payload={
                **payload, EventPayload.ADDITIONAL_KWARGS: {}, EventPayload.SERIALIZED: self._model,
            })
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if error is not None:
            self._failed(error)

    def ended(self, answer: CitedAnswer) -> CitedAnswer:
        """``answer``, once its end events are sent."""
        tokens = usage(answer)
        raw = {"usage": tokens, "finish_reason": answer.finish_reason}
        if self._prompt is None:
            response: Any = ChatResponse(
                message=ChatMessage(role=MessageRole.ASSISTANT, content=answer.text),
                raw=raw, additional_kwargs=tokens,
            )
            payload: dict[str, Any] = {
                EventPayload.MESSAGES: self._messages, EventPayload.RESPONSE: response
            }
        else:
            response = CompletionResponse(text=answer.text, raw=raw, additional_kwargs=tokens)
            payload = {EventPayload.PROMPT: self._prompt, EventPayload.COMPLETION: response}
        event: BaseEvent
        if self._prompt is None:
            event = LLMChatEndEvent(
                messages=self._messages, response=response, span_id=self._span_id
            )
        else:
            event = LLMCompletionEndEvent(
                prompt=self._prompt, response=response, span_id=self._span_id
            )
        self._end(payload, event)
        return answer

    def chunks(self, stream: AnswerChunks) -> AnswerChunks:
        """``stream``, each chunk reported as it is read and the answer at its end."""
        return _ReportedChunks(stream, self)

    def achunks(self, stream: AsyncAnswerChunks) -> AsyncAnswerChunks:
        """Async ``chunks``."""
        return _AsyncReportedChunks(stream, self)

    def _chunk(self, delta: str) -> None:
        self._text += delta
        if self._prompt is None:
            dispatcher.event(LLMChatInProgressEvent(
                messages=self._messages,
                response=ChatResponse(
                    message=ChatMessage(role=MessageRole.ASSISTANT, content=self._text),
                    delta=delta,
                ),
                span_id=self._span_id,
            ))
        else:
            dispatcher.event(LLMCompletionInProgressEvent(
                prompt=self._prompt,
                response=CompletionResponse(text=self._text, delta=delta),
                span_id=self._span_id,
            ))

    def _failed(self, error: BaseException) -> None:
        self._end(
            {EventPayload.EXCEPTION: error}, ExceptionEvent(exception=error, span_id=self._span_id)
        )

    def _end(self, payload: dict[str, Any], event: BaseEvent) -> None:
        if self._ended:
            return
        self._ended = True
        try:
            if self._callbacks is not None:
                self._callbacks.on_event_end(
                    CBEventType.LLM, payload=payload, event_id=self._event_id
                )
        finally:
            # The dispatcher swallows its handlers' errors; the callback manager does not.
            dispatcher.event(event)


class _ReportedChunks:
    """A stream whose chunks and end are reported to its ``ModelCall``."""

    def __init__(self, stream: AnswerChunks, call: ModelCall) -> None:
        self._stream = stream
        self._call = call

    def __iter__(self) -> Iterator[str]:
        chunks = iter(self._stream)
        try:
            for chunk in chunks:
                self._call._chunk(chunk)
                yield chunk
        except BaseException as error:
            # Also a reader that left early (GeneratorExit): the generation stops, then the call
            # ends with the error, as LlamaIndex's LLMs end a stream that raised.
            try:
                close = getattr(chunks, "close", None)
                if close is not None:
                    close()
            finally:
                self._call._failed(_reported(error))
            raise
        self._call.ended(self._stream.answer)

    @property
    def answer(self) -> CitedAnswer:
        return self._stream.answer


class _AsyncReportedChunks:
    """Async ``_ReportedChunks``."""

    def __init__(self, stream: AsyncAnswerChunks, call: ModelCall) -> None:
        self._stream = stream
        self._call = call

    async def __aiter__(self) -> AsyncIterator[str]:
        chunks = aiter(self._stream)
        try:
            async for chunk in chunks:
                self._call._chunk(chunk)
                yield chunk
        except BaseException as error:
            # Also a cancelled task (CancelledError) and a reader that left early.
            try:
                aclose = getattr(chunks, "aclose", None)
                if aclose is not None:
                    await aclose()
            finally:
                self._call._failed(_reported(error))
            raise
        self._call.ended(self._stream.answer)

    @property
    def answer(self) -> CitedAnswer:
        return self._stream.answer


def _reported(error: BaseException) -> BaseException:
    """The error a stream ended with, as its call reports it: a bare ``GeneratorExit`` (the
    reader closed the stream) says so."""
    if isinstance(error, GeneratorExit) and not error.args:
        return GeneratorExit("the stream was closed before its last chunk")
    return error


def chat_messages(request: GenerationRequest) -> list[ChatMessage]:
    """The chat messages the model is shown for ``request``, as LlamaIndex's."""
    return [
        ChatMessage(role=MessageRole(m["role"]), content=m["content"])
        for m in request.messages()
    ]


def usage(answer: CitedAnswer) -> dict[str, int]:
    """The answer's token counts under the names OpenAI's usage gives them."""
    return {
        "prompt_tokens": answer.prompt_tokens,
        "completion_tokens": answer.generated_tokens,
        "total_tokens": answer.prompt_tokens + answer.generated_tokens,
    }
