"""citeformer_llamaindex.events: each answer reported as a LlamaIndex LLM call, through the
instrumentation (in the query's span) and the callback manager. FakeGenerator, offline; one
query on the embedded model at the end (integration)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from llama_index.core import Document, MockEmbedding, VectorStoreIndex
from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.callbacks import (
    CallbackManager,
    CBEventType,
    LlamaDebugHandler,
    TokenCountingHandler,
)
from llama_index.core.callbacks.base_handler import BaseCallbackHandler
from llama_index.core.callbacks.schema import EventPayload
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
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
from llama_index.core.instrumentation.span_handlers import SimpleSpanHandler

from citeformer import CiteGenerator
from citeformer.conversation import free_text_request
from citeformer.errors import PromptTooLongError
from citeformer.request import build_request
from citeformer.testing import FakeGenerator
from citeformer_llamaindex import CitationChatEngine, CitationQueryEngine, core_answer
from citeformer_llamaindex.events import ModelCall, chat_messages, usage
from tests.event_loop import cancel_while_reading
from tests.llamaindex.common import TEXTS, cite_last, fake, nodes, synth

LLM_EVENTS = (
    LLMChatStartEvent, LLMChatInProgressEvent, LLMChatEndEvent,
    LLMCompletionStartEvent, LLMCompletionInProgressEvent, LLMCompletionEndEvent, ExceptionEvent,
)


class Collect(BaseEventHandler):
    events: list[BaseEvent] = []

    @classmethod
    def class_name(cls) -> str:
        return "Collect"

    def handle(self, event: BaseEvent, **kwargs: Any) -> None:
        self.events.append(event)

    def llm(self) -> list[Any]:
        return [e for e in self.events if isinstance(e, LLM_EVENTS)]


@pytest.fixture
def instrumented() -> Iterator[tuple[Collect, SimpleSpanHandler]]:
    root = get_dispatcher()
    events, spans = Collect(events=[]), SimpleSpanHandler()
    root.add_event_handler(events)
    root.add_span_handler(spans)
    try:
        yield events, spans
    finally:
        root.event_handlers.remove(events)
        root.span_handlers.remove(spans)


def index(embed_model: Any = None) -> VectorStoreIndex:
    docs = [Document(text=t, doc_id=f"d{i}") for i, t in enumerate(TEXTS)]
    return VectorStoreIndex.from_documents(docs, embed_model=embed_model or MockEmbedding(
        embed_dim=8
    ))


def ancestors(span_id: str, spans: SimpleSpanHandler) -> list[str]:
    """The span's own id and its parents', innermost first."""
    parents = {s.id_: s.parent_id for s in spans.completed_spans}
    chain: list[str] = []
    current: str | None = span_id
    while current is not None:
        chain.append(current)
        current = parents.get(current)
    return chain


def assert_one_chat_call(events: Collect, spans: SimpleSpanHandler, response: Any,
                         streamed: bool, query_span: str = "CitationQueryEngine.") -> None:
    """Start, one in-progress event per chunk if streamed, end: in the synthesizer's span,
    within the query's, with the messages shown and the answer with its token counts."""
    calls = events.llm()
    kinds = [type(e) for e in calls]
    assert kinds[0] is LLMChatStartEvent and kinds[-1] is LLMChatEndEvent, kinds
    middle = kinds[1:-1]
    assert middle == [LLMChatInProgressEvent] * len(middle)
    assert bool(middle) == streamed
    start, end = calls[0], calls[-1]
    answer = core_answer(response)
    assert end.response.message.content == answer.text
    assert end.response.message.role is MessageRole.ASSISTANT
    assert end.response.additional_kwargs == end.response.raw["usage"] == {
        "prompt_tokens": answer.prompt_tokens,
        "completion_tokens": answer.generated_tokens,
        "total_tokens": answer.prompt_tokens + answer.generated_tokens,
    }
    assert answer.prompt_tokens > 0
    assert start.messages == end.messages
    assert start.messages[-1].role is MessageRole.USER
    assert all(s.text in start.messages[-1].content for s in answer.sources)
    assert start.model_dict["class_name"] == "CiteformerLLM"
    if streamed:
        assert "".join(e.response.delta for e in middle_events(calls)) == answer.text
        assert middle_events(calls)[-1].response.message.content == answer.text
    assert len({e.span_id for e in calls}) == 1
    assert start.span_id.startswith(
        ("CitationSynthesizer.synthesize-", "CitationSynthesizer.asynthesize-")
    ), start.span_id
    assert any(s.startswith(query_span) for s in ancestors(start.span_id, spans)[1:])


def middle_events(calls: list[Any]) -> list[Any]:
    return [e for e in calls if isinstance(e, LLMChatInProgressEvent)]


# -- through a query engine -------------------------------------------------------------------


def test_query_reports_one_chat_call_in_the_query_span(instrumented: Any) -> None:
    events, spans = instrumented
    engine = CitationQueryEngine.from_args(index(), generator=fake(), max_new_tokens=16)
    response = engine.query("Who designed the tower?")
    assert_one_chat_call(events, spans, response, streamed=False)
    # The LLM call sits between the synthesizer's own start and end events.
    kinds = [type(e).__name__ for e in events.events]
    assert kinds.index("SynthesizeStartEvent") < kinds.index("LLMChatStartEvent")
    assert kinds.index("LLMChatEndEvent") < kinds.index("SynthesizeEndEvent")


def test_streaming_query_reports_each_chunk(instrumented: Any) -> None:
    events, spans = instrumented
    engine = CitationQueryEngine.from_args(
        index(), generator=fake(), max_new_tokens=16, streaming=True
    )
    response = engine.query("Who designed the tower?")
    assert [type(e) for e in events.llm()] == [LLMChatStartEvent]
    list(response.response_gen)
    assert_one_chat_call(events, spans, response, streamed=True)


@pytest.mark.parametrize("in_process", [False, True])
@pytest.mark.parametrize("streaming", [False, True])
def test_aquery_reports_the_call_too(instrumented: Any, streaming: bool, in_process: bool) -> None:
    # in_process: a generator without async twins runs in worker threads, which still report
    # into the query's span.
    events, spans = instrumented
    generator = fake().sync_only() if in_process else fake()
    engine = CitationQueryEngine.from_args(
        index(), generator=generator, max_new_tokens=16, streaming=streaming
    )

    async def run() -> Any:
        response = await engine.aquery("Who designed the tower?")
        if streaming:
            [chunk async for chunk in response.async_response_gen()]
        return response

    response = asyncio.run(run())
    assert_one_chat_call(events, spans, response, streamed=streaming)


def test_the_callback_manager_gets_an_llm_event_that_token_counting_reads() -> None:
    debug = LlamaDebugHandler()
    counter = TokenCountingHandler(tokenizer=str.split)
    engine = CitationQueryEngine.from_args(
        index(), generator=fake(), max_new_tokens=16,
        callback_manager=CallbackManager([debug, counter]),
    )
    response = engine.query("Who designed the tower?")
    ((start, end),) = debug.get_event_pairs(CBEventType.LLM)
    assert start.payload[EventPayload.SERIALIZED]["class_name"] == "CiteformerLLM"
    assert end.payload[EventPayload.MESSAGES] == start.payload[EventPayload.MESSAGES]
    assert end.payload[EventPayload.RESPONSE].message.content == response.response
    answer = core_answer(response)
    assert counter.prompt_llm_token_count == answer.prompt_tokens
    assert counter.completion_llm_token_count == answer.generated_tokens


class LLMEnds(BaseCallbackHandler):
    """The ids of the LLM events started, and each end call with its payload; with ``fail``,
    every end call of an LLM event raises it, as a faulty handler does."""

    def __init__(self, fail: Exception | None = None) -> None:
        super().__init__(event_starts_to_ignore=[], event_ends_to_ignore=[])
        self.starts: list[str] = []
        self.ends: list[tuple[str, dict[str, Any]]] = []
        self._fail = fail

    def on_event_start(self, event_type: CBEventType, payload: dict[str, Any] | None = None,
                       event_id: str = "", parent_id: str = "", **kwargs: Any) -> str:
        if event_type is CBEventType.LLM:
            self.starts.append(event_id)
        return event_id

    def on_event_end(self, event_type: CBEventType, payload: dict[str, Any] | None = None,
                     event_id: str = "", **kwargs: Any) -> None:
        if event_type is CBEventType.LLM:
            self.ends.append((event_id, payload or {}))
            if self._fail is not None:
                raise self._fail

    def start_trace(self, trace_id: str | None = None) -> None:
        pass

    def end_trace(self, trace_id: str | None = None,
                  trace_map: dict[str, list[str]] | None = None) -> None:
        pass


LEAVING = ["close", "aclose", "aclose-in-process", "cancel", "cancel-in-process"]


def leave_a_stream_early(how: str, synthesizer: Any, check: Callable[[], None]) -> None:
    """Read a streamed answer's first chunk, leave as ``how`` says, then ``check()`` while the
    response still lives (and, async, while its event loop still runs)."""
    if how == "close":
        response = synthesizer.synthesize("q", nodes())
        reader = response.response_gen
        next(reader)
        reader.close()
        check()
        return

    async def run() -> None:
        response = await synthesizer.asynthesize("q", nodes())
        reader = response.async_response_gen()
        if how.startswith("aclose"):
            await anext(reader)
            await reader.aclose()
        else:
            await cancel_while_reading(reader)  # while the next chunk is on its way
        check()

    asyncio.run(run())


@pytest.mark.parametrize("how", LEAVING)
def test_a_stream_left_early_ends_its_call_once_as_an_error(instrumented: Any, how: str) -> None:
    events, _ = instrumented
    ends = LLMEnds()
    generator = FakeGenerator("One two three four five six seven eight [1].", delay=0.02)
    in_process = how.endswith("in-process")
    synthesizer = synth(generator.sync_only() if in_process else generator, streaming=True,
                        callback_manager=CallbackManager([ends]))

    def check() -> None:
        kinds = [type(e) for e in events.llm()]
        assert kinds[0] is LLMChatStartEvent and kinds[-1] is ExceptionEvent, kinds
        assert set(kinds[1:-1]) == {LLMChatInProgressEvent}, kinds
        error = events.llm()[-1].exception
        # A cancelled stream ends with the task's cancellation, in process as from a server:
        # both are read through the same async stream (citeformer.integration.as_async).
        cancelled = how.startswith("cancel")
        assert isinstance(error, asyncio.CancelledError if cancelled else GeneratorExit)
        ((event_id, payload),) = ends.ends
        assert ends.starts == [event_id]
        assert payload == {EventPayload.EXCEPTION: error}

    leave_a_stream_early(how, synthesizer, check)


@pytest.mark.parametrize("how", ["answer", "aanswer", "aanswer-in-process", "stream", "astream"])
def test_a_handler_raising_at_the_end_of_a_call_gets_one_end(
    instrumented: Any, how: str
) -> None:
    events, _ = instrumented
    faulty = LLMEnds(fail=RuntimeError("the handler failed"))
    generator = fake().sync_only() if how.endswith("in-process") else fake()
    streaming = how in ("stream", "astream")
    synthesizer = synth(generator, streaming=streaming, callback_manager=CallbackManager([faulty]))

    async def aread() -> None:
        response = await synthesizer.asynthesize("q", nodes())
        if how == "astream":
            [chunk async for chunk in response.async_response_gen()]

    with pytest.raises(RuntimeError, match="the handler failed"):
        if how == "answer":
            synthesizer.synthesize("q", nodes())
        elif how == "stream":
            list(synthesizer.synthesize("q", nodes()).response_gen)
        else:
            asyncio.run(aread())
    ((event_id, payload),) = faulty.ends
    assert faulty.starts == [event_id] and EventPayload.RESPONSE in payload
    # The instrumentation still hears of the end, once: its handlers never raise into the call.
    kinds = [type(e) for e in events.llm()]
    assert kinds[0] is LLMChatStartEvent and kinds[-1] is LLMChatEndEvent, kinds
    assert ExceptionEvent not in kinds and kinds.count(LLMChatEndEvent) == 1


def test_an_error_is_reported_as_llamaindex_llms_report_it(instrumented: Any) -> None:
    events, _ = instrumented
    debug = LlamaDebugHandler()
    tiny = synth(FakeGenerator(context_length=10), callback_manager=CallbackManager([debug]))
    with pytest.raises(PromptTooLongError, match="largest is 'n2'") as raised:
        tiny.synthesize("q", nodes())
    assert [type(e) for e in events.llm()] == [LLMChatStartEvent, ExceptionEvent]
    assert events.llm()[1].exception is raised.value
    ((_, end),) = debug.get_event_pairs(CBEventType.LLM)
    assert end.payload[EventPayload.EXCEPTION] is raised.value


def test_chat_engine_turns_are_reported(instrumented: Any) -> None:
    events, spans = instrumented
    chat = CitationChatEngine(index().as_retriever(similarity_top_k=2), synth())
    response = chat.chat("Who designed the tower?")
    assert_one_chat_call(events, spans, response, streamed=False,
                         query_span="CitationChatEngine.chat")


@pytest.mark.parametrize("how", ["chat", "achat"])
def test_a_follow_up_reports_its_rewrite_as_a_completion_then_the_answer(
    instrumented: Any, how: str
) -> None:
    events, _ = instrumented
    debug = LlamaDebugHandler()

    def script(request: Any) -> str:  # the rewrite (no grammar, a prompt) or the cited answer
        return "Who designed the Eiffel Tower?" if request.prompt else cite_last(request)

    chat = CitationChatEngine(index().as_retriever(similarity_top_k=2),
                              synth(fake(script), callback_manager=CallbackManager([debug])))
    history = [ChatMessage(role=MessageRole.USER, content="Tell me about the Eiffel Tower."),
               ChatMessage(role=MessageRole.ASSISTANT, content="It is in Paris [1].")]
    if how == "chat":
        chat.chat("Who designed it?", chat_history=history)
    else:
        asyncio.run(chat.achat("Who designed it?", chat_history=history))
    kinds = [type(e) for e in events.llm()]
    assert kinds == [LLMCompletionStartEvent, LLMCompletionEndEvent,
                     LLMChatStartEvent, LLMChatEndEvent]
    rewrite = events.llm()[0]
    assert "Who designed it?" in rewrite.prompt and "[1]" not in rewrite.prompt
    assert events.llm()[1].response.text == "Who designed the Eiffel Tower?"
    assert len(debug.get_event_pairs(CBEventType.LLM)) == 2


# -- ModelCall --------------------------------------------------------------------------------


def test_a_request_with_a_prompt_of_its_own_is_a_completion_call(instrumented: Any) -> None:
    events, _ = instrumented
    debug = LlamaDebugHandler()
    generator = FakeGenerator("Who designed the Eiffel Tower?")
    request = free_text_request(generator, "Rewrite: who designed it?", max_new_tokens=16)
    model = {"class_name": "CiteformerLLM"}
    with ModelCall(request, model, CallbackManager([debug])) as call:
        stream = call.chunks(generator.answer_stream(request))
        text = "".join(stream)
    calls = events.llm()
    assert isinstance(calls[0], LLMCompletionStartEvent)
    assert calls[0].prompt == "Rewrite: who designed it?" and calls[0].model_dict == model
    assert all(isinstance(e, LLMCompletionInProgressEvent) for e in calls[1:-1])
    assert isinstance(calls[-1], LLMCompletionEndEvent)
    assert calls[-1].response.text == text == stream.answer.text
    assert calls[-1].response.additional_kwargs == usage(stream.answer)
    ((start, end),) = debug.get_event_pairs(CBEventType.LLM)
    assert start.payload[EventPayload.PROMPT] == "Rewrite: who designed it?"
    assert end.payload[EventPayload.COMPLETION].text == text


def test_chat_messages_are_the_requests_messages() -> None:
    request = build_request("Who built it?", ["Eiffel's company built it."])
    messages = chat_messages(request)
    assert [(m.role.value, m.content) for m in messages] == [
        (m["role"], m["content"]) for m in request.messages()
    ]


# -- on the embedded model --------------------------------------------------------------------


@pytest.mark.integration
def test_a_streamed_query_on_the_embedded_model_is_reported(
    instrumented: Any, default_generator: CiteGenerator
) -> None:
    events, spans = instrumented
    engine = CitationQueryEngine.from_args(
        index(), generator=default_generator, similarity_top_k=2, streaming=True,
        max_new_tokens=24, grammar_options={"max_sentence_words": 12},
    )
    response = engine.query("Who designed the Eiffel Tower?")
    tokens = list(response.response_gen)
    assert len(tokens) > 1
    assert_one_chat_call(events, spans, response, streamed=True)
    start = events.llm()[0]
    prompt = default_generator.prompt(
        "Who designed the Eiffel Tower?", core_answer(response).sources
    )
    assert all(m.content in prompt for m in start.messages)
