"""CitationSynthesizer on citeformer.testing.FakeGenerator: fast and offline.

Every behaviour here is also exercised against the embedded model in
tests/llamaindex/test_end_to_end.py.
"""

from __future__ import annotations

import asyncio
import gc
import inspect
import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from llama_index.core import Document, MockEmbedding, VectorStoreIndex
from llama_index.core.base.response.schema import (
    AsyncStreamingResponse,
    Response,
    StreamingResponse,
)
from llama_index.core.callbacks import CallbackManager, CBEventType, LlamaDebugHandler
from llama_index.core.callbacks.schema import EventPayload
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.instrumentation.events import BaseEvent
from llama_index.core.instrumentation.events.synthesis import (
    SynthesizeEndEvent,
    SynthesizeStartEvent,
)
from llama_index.core.instrumentation.span_handlers import SimpleSpanHandler
from llama_index.core.prompts import PromptTemplate
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.schema import NodeWithScore, TextNode

from citeformer import Policy
from citeformer.errors import (
    EmptyQuestionError,
    EmptySourceError,
    InputTypeError,
    InvalidInputError,
    PromptTooLongError,
)
from citeformer.evidence import LexicalEvidence
from citeformer.grammar import GrammarOptions
from citeformer.prompt import DEFAULT_INSTRUCTIONS
from citeformer.request import (
    DEFAULT_MAX_NEW_TOKENS,
    DEFAULT_POLICY,
    GENERATOR_DEFAULT,
    GenerationRequest,
    build_request,
)
from citeformer.testing import FakeGenerator
from citeformer.types import TITLE_KEYS
from citeformer_llamaindex import CitationSynthesizer, CiteformerLLM
from citeformer_llamaindex.nodes import metadata_title
from tests.event_loop import cancel_while_reading
from tests.llamaindex.common import (
    CONTEXT_WORDS,
    TEXTS,
    assert_lined_up,
    fake,
    nodes,
    synth,
)

# -- query engines --------------------------------------------------------------------------


@pytest.fixture
def index() -> VectorStoreIndex:
    docs = [Document(text=t, doc_id=f"d{i}") for i, t in enumerate(TEXTS)]
    return VectorStoreIndex.from_documents(docs, embed_model=MockEmbedding(embed_dim=8))


def test_as_query_engine_with_synthesizer_llm_needs_no_openai(index: VectorStoreIndex) -> None:
    generator = fake()
    synthesizer = synth(generator)
    engine = index.as_query_engine(
        llm=synthesizer.llm, response_synthesizer=synthesizer, similarity_top_k=3
    )
    response = engine.query("Who designed the tower?")
    assert isinstance(response, Response)
    assert response.response == "The answer is here [3]. Also here [1]."
    assert len(response.source_nodes) == 3
    assert_lined_up(response)
    assert [c["source_id"] for c in response.metadata["citations"]] == [3, 1]
    sent = generator.requests[0].sources
    assert [s.text for s in sent] == [n.node.get_content() for n in response.source_nodes]


def test_retriever_query_engine(index: VectorStoreIndex) -> None:
    synthesizer = synth()
    engine = RetrieverQueryEngine(index.as_retriever(similarity_top_k=2),
                                  response_synthesizer=synthesizer)
    response = engine.query("When was it built?")
    assert len(response.source_nodes) == 2
    assert_lined_up(response)
    assert response.metadata["finish_reason"] == "stop"
    assert response.metadata["prompt_tokens"] > 0


def test_synthesizer_llm_refuses_completions() -> None:
    llm = synth().llm
    assert isinstance(llm, CiteformerLLM)
    assert llm.metadata.context_window == CONTEXT_WORDS
    assert llm.metadata.num_output == 16
    with pytest.raises(NotImplementedError, match="stands in for Settings.llm"):
        llm.complete("hello")


def test_metadata_keeps_llamaindex_node_metadata() -> None:
    response = synth().synthesize("q", nodes())
    assert response.metadata["n0"] == {"title": "T0"}
    assert set(response.metadata) >= {"citations", "finish_reason", "prompt_tokens", "n2"}


def test_quotes_are_located_in_their_nodes() -> None:
    def quote_second(request: GenerationRequest) -> str:
        return 'It was "built for the 1889" [2] fair.'

    # A node 107 characters into its document, as node parsers record it.
    chunk = NodeWithScore(node=TextNode(id_="c", text="It was built   for the 1889 World's Fair.",
                                        start_char_idx=107, end_char_idx=148), score=0.5)
    response = synth(fake(quote_second), policy="quotes_only").synthesize(
        "q", [nodes()[0], chunk]
    )
    (quote,) = response.metadata["quotes"]
    assert quote["node_id"] == "c" and quote["source_id"] == 2
    assert response.response[quote["start"]:quote["end"]] == "built for the 1889"
    content = chunk.node.get_content()
    assert content[quote["source_start"]:quote["source_end"]] == "built   for the 1889"
    assert (quote["document_start"], quote["document_end"]) == (
        107 + quote["source_start"], 107 + quote["source_end"]
    )


def test_citation_and_quote_dicts_are_the_core_ones_with_the_node_id() -> None:
    def quote_second(request: GenerationRequest) -> str:
        return 'It was "built for the 1889" [2] fair [1].'

    generator = fake(quote_second)
    chunk = NodeWithScore(node=TextNode(id_="c", text="It was built for the 1889 World's Fair.",
                                        start_char_idx=10), score=0.5)
    response = synth(generator, policy="quotes_only").synthesize("q", [nodes()[0], chunk])
    core = generator.aanswer  # the same script, answered again: the core's own dict
    request = generator.requests[0]
    expected = asyncio.run(core(request)).to_dict()
    ids = {1: "n0", 2: "c"}
    assert response.metadata["citations"] == [
        {**c, "node_id": ids[c["source_id"]]} for c in expected["citations"]
    ]
    for citation in response.metadata["citations"]:  # evidence indexes the node's content
        span = citation["evidence"]
        content = response.source_nodes[citation["source_id"] - 1].node.get_content()
        assert content[span["source_start"]:span["source_end"]] == span["text"]
    (quote,) = expected["quotes"]
    assert response.metadata["quotes"] == [{
        **quote, "node_id": "c",
        "document_start": 10 + quote["source_start"], "document_end": 10 + quote["source_end"],
    }]
    assert {k: response.metadata[k] for k in ("finish_reason", "prompt_tokens",
                                              "generated_tokens")} == {
        k: expected[k] for k in ("finish_reason", "prompt_tokens", "generated_tokens")
    }


def test_titles_and_generation_settings_reach_the_generator() -> None:
    generator = fake()
    CitationSynthesizer(generator, policy="auto", max_new_tokens=9, seed=3).synthesize("q", nodes())
    (request,) = generator.requests
    assert [s.title for s in request.sources] == ["T0", "T1", "T2"]
    assert request.sources[0].metadata["node_id"] == "n0"
    assert request.policy is Policy.AUTO
    assert (request.max_new_tokens, request.seed, request.do_sample) == (9, 3, False)
    # No instructions of its own: the model is shown the policy's.
    assert request.instructions is None
    assert request.messages()[0]["content"] == DEFAULT_INSTRUCTIONS[Policy.AUTO]


def test_one_checked_request_per_call(index: VectorStoreIndex) -> None:
    generator = fake()
    synthesizer = CitationSynthesizer(
        generator, policy="auto", max_new_tokens=20, do_sample=True, temperature=0.5, seed=7,
        grammar_options={"max_group": 2}, instructions="Be brief [1].",
    )
    synthesizer.synthesize("q", nodes())
    asyncio.run(synthesizer.asynthesize("q", nodes()))
    synthesizer.get_response("q", TEXTS)
    expected = build_request(
        "q", generator.requests[0].sources, "auto", max_new_tokens=20, do_sample=True,
        temperature=0.5, seed=7, max_group=2, instructions="Be brief [1].",
    )
    assert len(generator.requests) == 3
    for request in generator.requests:
        assert isinstance(request, GenerationRequest)
        assert (request.question, request.policy, request.max_new_tokens, request.do_sample,
                request.temperature, request.seed, request.grammar, request.instructions) == (
            expected.question, expected.policy, expected.max_new_tokens, expected.do_sample,
            expected.temperature, expected.seed, expected.grammar, expected.instructions)
    assert [s.text for s in generator.requests[2].sources] == TEXTS


def test_defaults_are_the_core_defaults() -> None:
    defaults = {name: parameter.default
                for name, parameter in inspect.signature(CitationSynthesizer).parameters.items()}
    assert defaults["policy"] is DEFAULT_POLICY
    # The generation options are the core's keywords (citeformer.GenerationOptions), not
    # parameters of their own: what reaches the generator is the core's defaults.
    assert {"max_new_tokens", "do_sample", "temperature"}.isdisjoint(defaults)
    generator = FakeGenerator()
    CitationSynthesizer(generator).synthesize("q", nodes())
    (request,) = generator.requests
    assert request.grammar == GrammarOptions()
    assert request.max_new_tokens == DEFAULT_MAX_NEW_TOKENS
    assert request.policy is DEFAULT_POLICY
    assert (request.do_sample, request.temperature) == (
        GenerationRequest.do_sample, GenerationRequest.temperature
    )


def test_additional_source_nodes_come_after_the_cited_ones() -> None:
    extra = NodeWithScore(node=TextNode(id_="extra", text="not shown"), score=None)
    response = synth().synthesize("q", nodes(), additional_source_nodes=[extra])
    assert [n.node.node_id for n in response.source_nodes] == ["n0", "n1", "n2", "extra"]
    assert_lined_up(response)


# -- the generator ----------------------------------------------------------------------------


def test_the_default_model_loads_on_first_use(monkeypatch: pytest.MonkeyPatch) -> None:
    import citeformer

    scripted = fake()
    loads: list[bool] = []

    def default(cls: Any) -> FakeGenerator:
        loads.append(True)
        return scripted

    monkeypatch.setattr(citeformer.CiteGenerator, "default", classmethod(default))
    synthesizer = CitationSynthesizer(max_new_tokens=16, streaming=False)
    assert loads == []  # constructing it loads nothing
    response = synthesizer.synthesize("q", nodes())
    assert loads == [True]
    assert_lined_up(response)
    assert synthesizer.generator is scripted

    loads.clear()
    lazy = CitationSynthesizer()
    assert loads == []
    assert lazy.llm.metadata.context_window == CONTEXT_WORDS  # reading it loads the model
    assert loads == [True]


def test_async_paths_await_an_async_generator_and_thread_an_in_process_one() -> None:
    generator = fake()
    called: list[tuple[str, bool]] = []
    loop_thread = threading.get_ident()
    for name in ("answer", "answer_stream", "aanswer", "aanswer_stream"):
        original = getattr(generator, name)

        def spy(request: Any, _name: str = name, _original: Any = original) -> Any:
            called.append((_name, threading.get_ident() == loop_thread))
            return _original(request)

        setattr(generator, name, spy)

    async def both(synthesizer: CitationSynthesizer) -> None:
        await synthesizer.asynthesize("q", nodes())
        synthesizer._streaming = True
        streaming = await synthesizer.asynthesize("q", nodes())
        _ = [token async for token in streaming.async_response_gen()]

    asyncio.run(both(synth(generator)))
    assert called == [("aanswer", True), ("aanswer_stream", True)]
    called.clear()
    asyncio.run(both(synth(generator.sync_only())))
    assert called == [("answer", False), ("answer_stream", False)]  # in worker threads


# -- evidence -------------------------------------------------------------------------------


def test_evidence_is_left_to_the_generator_unless_set() -> None:
    generator = fake()
    synth(generator).synthesize("q", nodes())
    assert generator.requests[-1].evidence is GENERATOR_DEFAULT  # not passed: "lexical" locally
    synth(generator, evidence=None).synthesize("q", nodes())
    assert generator.requests[-1].evidence is None
    stronger = LexicalEvidence(weight=16.0)
    synth(generator, evidence=stronger).synthesize("q", nodes())
    assert generator.requests[-1].evidence is stronger
    with pytest.raises(InvalidInputError, match="unknown evidence scorer 'lex'"):
        synth(generator, evidence="lex")


def test_evidence_default_reaches_a_server_unasked() -> None:
    from tests.fake_server import FakeServer

    response = synth(FakeServer().generator()).synthesize("Who built the tower?", nodes())
    assert_lined_up(response)
    with pytest.raises(InvalidInputError, match="evidence="):
        synth(FakeServer().generator(), evidence="lexical").synthesize(
            "Who built the tower?", nodes())


# -- async and streaming --------------------------------------------------------------------


def test_aquery(index: VectorStoreIndex) -> None:
    synthesizer = synth()
    engine = index.as_query_engine(llm=synthesizer.llm, response_synthesizer=synthesizer,
                                   similarity_top_k=3)
    response = asyncio.run(engine.aquery("Who designed the tower?"))
    assert isinstance(response, Response)
    assert_lined_up(response)


def test_stream_sync_citations_after_the_end(index: VectorStoreIndex) -> None:
    synthesizer = synth(streaming=True)
    engine = index.as_query_engine(llm=synthesizer.llm, response_synthesizer=synthesizer,
                                   similarity_top_k=3)
    response = engine.query("Who designed the tower?")
    assert isinstance(response, StreamingResponse)
    assert "citations" not in response.metadata
    tokens = list(response.response_gen)
    assert len(tokens) > 1
    assert "".join(tokens) == "The answer is here [3]. Also here [1]."
    assert str(response) == "".join(tokens)
    assert_lined_up(response)


def test_stream_get_response() -> None:
    response = synth(streaming=True).synthesize("q", nodes())
    final = response.get_response()
    assert final.response == "The answer is here [3]. Also here [1]."
    assert_lined_up(final)


@pytest.mark.parametrize("in_process", [True, False], ids=["in-process", "async"])
def test_stream_async_citations_after_the_end(index: VectorStoreIndex, in_process: bool) -> None:
    generator = fake()
    synthesizer = synth(generator.sync_only() if in_process else generator, streaming=True)
    engine = index.as_query_engine(llm=synthesizer.llm, response_synthesizer=synthesizer,
                                   similarity_top_k=3)

    async def run() -> tuple[AsyncStreamingResponse, list[str]]:
        response = await engine.aquery("Who designed the tower?")
        assert isinstance(response, AsyncStreamingResponse)
        return response, [token async for token in response.async_response_gen()]

    response, tokens = asyncio.run(run())
    assert len(tokens) > 1
    assert "".join(tokens) == response.response_txt
    assert_lined_up(response)


@pytest.mark.parametrize("in_process", [True, False], ids=["in-process", "async"])
def test_async_stream_left_early_closes_the_generation(in_process: bool) -> None:
    generator = fake()
    synthesizer = synth(generator.sync_only() if in_process else generator, streaming=True)

    async def run() -> None:
        response = await synthesizer.asynthesize("q", nodes())
        agen = response.response_gen
        assert await agen.__anext__() == "The"
        await agen.aclose()
        assert "citations" not in response.metadata

    asyncio.run(run())
    (stream,) = generator.streams
    assert stream.closed and not stream.finished


@pytest.mark.parametrize("in_process", [True, False], ids=["in-process", "async"])
def test_breaking_out_of_an_async_stream_stops_cleanly(
    caplog: pytest.LogCaptureFixture, in_process: bool
) -> None:
    generator = FakeGenerator("The answer is here [1]. Also here [1].", delay=0.01)
    synthesizer = synth(generator.sync_only() if in_process else generator, streaming=True)

    async def leave_early() -> None:
        response = await synthesizer.asynthesize("q", nodes())
        async for _ in response.async_response_gen():
            break

    with caplog.at_level(logging.WARNING, logger="asyncio"):
        asyncio.run(leave_early())
        gc.collect()
    assert [r.getMessage() for r in caplog.records if r.name == "asyncio"] == []
    (stream,) = generator.streams
    assert stream.closed and not stream.finished


@pytest.mark.parametrize("in_process", [True, False], ids=["in-process", "async"])
@pytest.mark.parametrize("leave", ["aclose", "cancel"])
def test_a_reader_that_leaves_an_async_response_stops_the_generation_at_once(
    in_process: bool, leave: str
) -> None:
    # LlamaIndex's AsyncStreamingResponse keeps response_gen, and its own reader never closes it:
    # the stream must stop when the reader does, while the response still lives.
    generator = FakeGenerator("One two three four five six seven eight [1].", delay=0.02)
    synthesizer = synth(generator.sync_only() if in_process else generator, streaming=True)

    async def run() -> None:
        response = await synthesizer.asynthesize("q", nodes())
        reader = response.async_response_gen()
        if leave == "aclose":
            await anext(reader)
            await reader.aclose()
        else:
            await cancel_while_reading(reader)  # while the next piece is being generated
        (stream,) = generator.streams
        assert stream.closed and not stream.finished
        assert stream.generated <= 2  # the piece read, and at most the one in flight
        # The response is still whole for another reader: what was read, and no deadlock.
        assert (await response.get_response()).response == "One"
        assert "citations" not in response.metadata

    asyncio.run(run())


def test_closing_a_sync_stream_stops_the_generation() -> None:
    generator = fake("One two three four five six seven eight [1].")
    response = synth(generator, streaming=True).synthesize("q", nodes())
    reader = response.response_gen
    assert next(reader) == "One"
    reader.close()
    (stream,) = generator.streams
    assert stream.closed and not stream.finished and stream.generated == 1


def test_get_response_direct() -> None:
    assert synth().get_response("q", ["a b", "c d"]) == "The answer is here [2]. Also here [1]."
    chunks = synth(streaming=True).get_response("q", ["a b"])
    assert "".join(chunks) == "The answer is here [1]. Also here [1]."
    assert asyncio.run(synth().aget_response("q", ["a"])).endswith("[1].")


# -- prompts --------------------------------------------------------------------------------


def test_prompts_exposed_and_customisable_through_the_query_engine(
    index: VectorStoreIndex,
) -> None:
    generator = fake()
    synthesizer = synth(generator)
    engine = index.as_query_engine(llm=synthesizer.llm, response_synthesizer=synthesizer)
    prompts = engine.get_prompts()
    key = "response_synthesizer:instructions"
    assert prompts[key].get_template() == DEFAULT_INSTRUCTIONS[Policy.REQUIRED]
    engine.update_prompts({key: PromptTemplate("Answer like a pirate; cite like [1].")})
    engine.query("Who?")
    assert generator.requests[-1].instructions == "Answer like a pirate; cite like [1]."
    assert synthesizer.get_prompts()["instructions"].get_template().startswith("Answer like")


def test_instructions_prompt_with_variables_is_refused() -> None:
    with pytest.raises(ValueError, match=r"takes no variables.*query_str"):
        synth().update_prompts({"instructions": PromptTemplate("Answer {query_str}")})
    assert synth(instructions="Be brief [1].").get_prompts()["instructions"].format() == (
        "Be brief [1]."
    )
    with pytest.raises(InputTypeError, match="must be a str or a prompt template, got int"):
        synth(instructions=3)  # type: ignore[arg-type]


# -- instrumentation and callbacks ----------------------------------------------------------


class Collect(BaseEventHandler):
    events: list[BaseEvent] = []

    @classmethod
    def class_name(cls) -> str:
        return "Collect"

    def handle(self, event: BaseEvent, **kwargs: Any) -> None:
        self.events.append(event)


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


@pytest.mark.parametrize("streaming", [False, True])
def test_instrumentation_events_and_spans(instrumented: Any, streaming: bool) -> None:
    events, spans = instrumented
    response = synth(streaming=streaming).synthesize("q", nodes())
    synth_events = [e for e in events.events
                    if isinstance(e, (SynthesizeStartEvent, SynthesizeEndEvent))]
    assert [type(e) for e in synth_events] == [SynthesizeStartEvent, SynthesizeEndEvent]
    assert synth_events[1].response is response
    assert synth_events[0].span_id == synth_events[1].span_id
    assert synth_events[0].span_id.startswith("CitationSynthesizer.synthesize-")
    names = [s.id_ for s in spans.completed_spans]
    assert sum(n.startswith("CitationSynthesizer.synthesize-") for n in names) == 1


def test_instrumentation_async(instrumented: Any) -> None:
    events, spans = instrumented
    asyncio.run(synth().asynthesize("q", nodes()))
    kinds = [type(e) for e in events.events]
    assert SynthesizeStartEvent in kinds and SynthesizeEndEvent in kinds
    assert any(s.id_.startswith("CitationSynthesizer.asynthesize-")
               for s in spans.completed_spans)


def test_callback_manager_synthesize_event(index: VectorStoreIndex) -> None:
    debug = LlamaDebugHandler()
    synthesizer = synth(callback_manager=CallbackManager([debug]))
    engine = RetrieverQueryEngine(index.as_retriever(), response_synthesizer=synthesizer)
    response = engine.query("Who designed it?")
    (start, end), = debug.get_event_pairs(CBEventType.SYNTHESIZE)
    assert start.payload[EventPayload.QUERY_STR] == "Who designed it?"
    assert end.payload[EventPayload.RESPONSE] is response
    assert len(debug.get_event_pairs(CBEventType.QUERY)) == 1


def test_empty_nodes_emit_events_like_llamaindex(instrumented: Any) -> None:
    events, _ = instrumented
    debug = LlamaDebugHandler()
    response = synth(callback_manager=CallbackManager([debug])).synthesize("q", [])
    assert [type(e) for e in events.events] == [SynthesizeStartEvent, SynthesizeEndEvent]
    assert debug.get_event_pairs(CBEventType.SYNTHESIZE) == []
    assert response.response == "Empty Response"


# -- titles ---------------------------------------------------------------------------------


def test_titles_come_from_title_then_file_name_then_source() -> None:
    assert TITLE_KEYS == ("title", "file_name", "source")
    both = {"title": "Eiffel", "file_name": "eiffel.txt", "source": "https://example.org/e"}
    assert metadata_title(both) == "Eiffel"
    assert metadata_title({"file_name": "eiffel.txt", "source": "https://example.org/e"}) == (
        "eiffel.txt"
    )
    assert metadata_title({"source": "e.md"}) == "e.md"
    assert metadata_title({}) is None
    assert metadata_title({"title": " ", "file_name": None, "source": 7}) == "7"
    assert metadata_title({"title": "The  Eiffel\nTower"}) == "The Eiffel Tower"
    generator = fake()
    given = [NodeWithScore(node=TextNode(id_=f"n{i}", text=t, metadata=m))
             for i, (t, m) in enumerate(zip(TEXTS, [{"file_name": "a.txt", "source": "x"},
                                                    {"source": "b.md"}, {}], strict=True))]
    synth(generator).synthesize("q", given)
    assert [s.title for s in generator.requests[-1].sources] == ["a.txt", "b.md", None]


def test_title_keys_can_be_chosen() -> None:
    generator = fake()
    given = [NodeWithScore(node=TextNode(text=TEXTS[0], metadata={"title": "T", "h": "H"}))]
    synth(generator, title_keys=["h"]).synthesize("q", given)
    assert [s.title for s in generator.requests[-1].sources] == ["H"]
    synth(generator, title_keys=()).synthesize("q", given)
    assert [s.title for s in generator.requests[-1].sources] == [None]


# -- bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"streaming": "x"}, "streaming must be True or False, got 'x'"),
        ({"streaming": 1}, "streaming must be True or False, got 1"),
        ({"title_keys": 5}, r"title_keys must be a list of metadata keys .* got int 5"),
        ({"title_keys": "title"}, r"title_keys must be a list of metadata keys .* \['title'\]"),
        ({"title_keys": ["title", 3]}, r"title_keys must be a list of metadata keys .* got list"),
    ],
)
def test_a_setting_of_the_wrong_type_is_refused_naming_it(
    options: dict[str, Any], message: str
) -> None:
    with pytest.raises(InputTypeError, match=message):
        synth(**options)


def test_a_per_call_streaming_of_the_wrong_type_is_refused() -> None:
    with pytest.raises(InputTypeError, match="streaming must be True or False, got 'no'"):
        synth().synthesize("q", nodes(), streaming="no")
    with pytest.raises(InputTypeError, match="streaming must be True or False, got 0"):
        asyncio.run(synth().asynthesize("q", nodes(), streaming=0))


def test_no_nodes_is_the_empty_response_without_calling_the_generator() -> None:
    generator = fake()
    response = synth(generator, empty_response="Nothing found.").synthesize("q", [])
    assert isinstance(response, Response)
    assert (response.response, response.source_nodes) == ("Nothing found.", [])
    assert generator.requests == []
    streamed = synth(generator, streaming=True).synthesize("q", [])
    assert "".join(streamed.response_gen) == "Empty Response"
    astreamed = asyncio.run(synth(generator, streaming=True).asynthesize("q", []))
    assert isinstance(astreamed, AsyncStreamingResponse)
    assert generator.requests == []


def test_empty_text_nodes_are_dropped_with_a_warning_and_never_numbered(
    caplog: pytest.LogCaptureFixture,
) -> None:
    generator = fake()
    mixed = nodes([TEXTS[0], "   \n", TEXTS[1], ""])
    with caplog.at_level(logging.WARNING, logger="citeformer_llamaindex"):
        response = synth(generator).synthesize("q", mixed)
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [
        "dropping node 2 of 4 (id 'n1'): its text is empty",
        "dropping node 4 of 4 (id 'n3'): its text is empty",
    ]
    assert [n.node.node_id for n in response.source_nodes] == ["n0", "n2"]
    assert [s.text for s in generator.requests[0].sources] == [TEXTS[0], TEXTS[1]]
    assert response.response == "The answer is here [2]. Also here [1]."
    assert_lined_up(response)
    assert response.metadata["citations"][0]["node_id"] == "n2"


def test_only_empty_text_nodes_give_the_empty_response() -> None:
    generator = fake()
    response = synth(generator).synthesize("q", nodes(["", " "]))
    assert response.response == "Empty Response"
    assert generator.requests == []


def test_empty_text_nodes_raise_when_asked() -> None:
    with pytest.raises(EmptySourceError, match=r"node 2 of 3 \(id 'n1'\) has empty text"):
        synth(empty_sources="raise").synthesize("q", nodes([TEXTS[0], " ", TEXTS[1]]))
    with pytest.raises(ValueError, match="empty_sources must be 'drop' or 'raise', got 'skip'"):
        synth(empty_sources="skip")  # type: ignore[arg-type]


def test_empty_nodes_is_a_deprecated_name_of_empty_sources() -> None:
    with pytest.warns(DeprecationWarning, match="empty_nodes.*empty_sources"):
        strict = synth(empty_nodes="raise")
    with pytest.raises(EmptySourceError, match=r"node 2 of 3 \(id 'n1'\) has empty text"):
        strict.synthesize("q", nodes([TEXTS[0], " ", TEXTS[1]]))
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="empty_nodes must be"):
        synth(empty_nodes="skip")  # type: ignore[arg-type]
    with pytest.warns(DeprecationWarning), pytest.raises(InvalidInputError, match="disagree"):
        synth(empty_sources="raise", empty_nodes="drop")


def test_nodes_too_large_for_the_context_name_the_largest_node() -> None:
    huge = " ".join(["word"] * 300)
    for streaming in (False, True):
        with pytest.raises(PromptTooLongError, match=r"largest is 'n1' \(1499 characters\)"):
            synth(streaming=streaming).synthesize("q", nodes([TEXTS[0], huge]))
    with pytest.raises(PromptTooLongError, match="similarity_top_k"):
        asyncio.run(synth().asynthesize("q", nodes([huge])))
    with pytest.raises(PromptTooLongError, match="largest is 'n0'"):
        asyncio.run(synth(fake().sync_only(), streaming=True).asynthesize("q", nodes([huge])))


def test_empty_question_is_refused_by_the_core() -> None:
    generator = fake()
    with pytest.raises(EmptyQuestionError, match="the question is empty"):
        CitationSynthesizer(generator, max_new_tokens=4).synthesize("  ", nodes())
    assert generator.requests == []


# -- a ServerGenerator (a scripted OpenAI-compatible server) -------------------------------


def server_synth(**kwargs: Any) -> tuple[Any, CitationSynthesizer]:
    from tests.fake_server import FakeServer

    server = FakeServer(pieces=["It is in Paris [", "1", "].", " Gustave Eiffel's company",
                                " built it [", "3", "]."])
    return server, CitationSynthesizer(server.generator(), max_new_tokens=24, **kwargs)


def test_server_generator_synthesize_and_stream() -> None:
    server, synthesizer = server_synth()
    assert synthesizer.llm.metadata.model_name == "smollm2-test"
    response = synthesizer.synthesize("Where is it and who built it?", nodes())
    assert isinstance(response, Response)
    assert response.response == "It is in Paris [1]. Gustave Eiffel's company built it [3]."
    assert_lined_up(response)
    assert response.metadata["finish_reason"] == "stop"
    assert server.bodies[0]["max_tokens"] == 24
    assert server.bodies[0]["messages"][0]["content"] == DEFAULT_INSTRUCTIONS[Policy.REQUIRED]

    server, synthesizer = server_synth(streaming=True)
    streaming = synthesizer.synthesize("Where is it and who built it?", nodes())
    assert isinstance(streaming, StreamingResponse)
    assert "".join(streaming.response_gen) == response.response
    assert_lined_up(streaming)


def test_server_generator_async_paths_await_the_server() -> None:
    _, synthesizer = server_synth()
    generator = synthesizer.generator
    called: list[str] = []
    for name in ("answer", "answer_stream"):  # the sync methods must not be used on async paths
        original = getattr(generator, name)

        def spy(*args: Any, _name: str = name, _original: Any = original, **kwargs: Any) -> Any:
            called.append(_name)
            return _original(*args, **kwargs)

        setattr(generator, name, spy)

    async def run() -> tuple[Any, list[str], Any]:
        response = await synthesizer.asynthesize("Where?", nodes())
        synthesizer._streaming = True
        streaming = await synthesizer.asynthesize("Where?", nodes())
        chunks = [c async for c in streaming.async_response_gen()]
        return response, chunks, streaming

    response, chunks, streaming = asyncio.run(run())
    assert called == []
    assert isinstance(streaming, AsyncStreamingResponse)
    assert_lined_up(response)
    assert "".join(chunks) == response.response
    assert_lined_up(streaming)


# -- the option schema ----------------------------------------------------------------------


def test_the_settings_are_checked_once_and_each_call_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made: list[GenerationRequest] = []
    check = GenerationRequest.__post_init__

    def counted(self: GenerationRequest) -> None:
        check(self)
        made.append(self)

    monkeypatch.setattr(GenerationRequest, "__post_init__", counted)
    generator = fake()
    synthesizer = synth(generator, grammar_options={"max_group": 2}, seed=4)
    assert len(made) == 1  # the template
    synthesizer.synthesize("q", nodes())
    asyncio.run(synthesizer.asynthesize("q", nodes()))
    "".join(synth(generator, streaming=True).synthesize("q", nodes()).response_gen)
    assert len(made) == 5  # one request per call (and one more template)
    assert made[1:3] == generator.requests[:2]


def test_every_generation_option_of_the_core_is_a_keyword() -> None:
    from citeformer.readability import Readability

    generator = fake()
    steady = Readability(end_intent=False)
    synth(generator, readability=steady, constrained=False, max_group=1).synthesize("q", nodes())
    request = generator.requests[-1]
    assert (request.readability, request.constrained, request.grammar.max_group) == (
        steady, False, 1
    )


@pytest.mark.parametrize("name", ["history", "prompt"])
def test_the_options_of_one_call_are_not_settings(name: str) -> None:
    with pytest.raises(InputTypeError, match=f"{name} belong to one call"):
        synth(**{name: "x"})


def test_the_grammar_is_given_one_way() -> None:
    generator = fake()
    synth(generator, grammar=GrammarOptions(max_group=1)).synthesize("q", nodes())
    assert generator.requests[-1].grammar == GrammarOptions(max_group=1)
    with pytest.raises(InputTypeError, match="both grammar_options= and grammar="):
        synth(grammar=GrammarOptions(), grammar_options={"max_group": 1})
