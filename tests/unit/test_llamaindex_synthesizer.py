"""CitationSynthesizer with a scripted generator: fast and offline.

Every behaviour here is also exercised against the embedded model in
tests/integration/test_llamaindex_query.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
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
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.prompts import PromptTemplate
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.schema import NodeRelationship, NodeWithScore, TextNode

from citeformer import CitedAnswer, Policy, Source
from citeformer.answers import normalize_sources
from citeformer.citations import parse_citations
from citeformer.errors import EmptySourceError, PromptTooLongError
from citeformer.prompt import DEFAULT_INSTRUCTIONS
from citeformer.quotes import find_quotes
from citeformer_llamaindex import (
    PARENT_END_KEY,
    PARENT_START_KEY,
    CitationChunker,
    CitationSynthesizer,
    CiteformerLLM,
)

Script = Callable[[str, Sequence[Source]], str]


def cite_last(question: str, sources: Sequence[Source]) -> str:
    return f"The answer is here [{len(sources)}]. Also here [1]."


class WordTokenizer:
    def encode(self, text: str, add_special_tokens: bool = False) -> list[str]:
        return text.split()


class ScriptedStream:
    """Same surface as citeformer.AnswerStream: iterate for chunks, then ``.answer``."""

    def __init__(self, answer: CitedAnswer) -> None:
        self._final = answer
        self._answer: CitedAnswer | None = None
        self.closed = False

    @property
    def answer(self) -> CitedAnswer:
        if self._answer is None:
            raise RuntimeError("the stream has not finished yet")
        return self._answer

    def __iter__(self) -> Iterator[str]:
        return self._chunks()

    def _chunks(self) -> Iterator[str]:
        try:
            text = self._final.text
            cut = 0
            for index, char in enumerate(text):
                if char == " ":
                    yield text[cut:index + 1]
                    cut = index + 1
            yield text[cut:]
            self._answer = self._final
        finally:
            self.closed = True


class ScriptedGenerator:
    """A CiteGenerator stand-in: same generate/stream surface, real input checks, real
    CitedAnswer objects; one "token" per whitespace-separated word."""

    context_length = 200
    tokenizer = WordTokenizer()

    def __init__(self, script: Script = cite_last) -> None:
        self.script = script
        self.calls: list[dict[str, Any]] = []
        self.streams: list[ScriptedStream] = []

    def _answer(self, question: str, sources: Sequence[Any], **kwargs: Any) -> CitedAnswer:
        normalized = normalize_sources(sources)
        self.calls.append({"question": question, "sources": normalized, **kwargs})
        prompt = len(question.split()) + sum(len(s.text.split()) for s in normalized)
        if prompt + kwargs["max_new_tokens"] > self.context_length:
            raise PromptTooLongError(f"the prompt is {prompt} tokens; too long")
        text = self.script(question, normalized)
        quoting = Policy.coerce(kwargs.get("policy", Policy.REQUIRED)) is Policy.QUOTES_ONLY
        return CitedAnswer(
            text=text,
            citations=tuple(parse_citations(text, len(normalized))),
            sources=normalized,
            finish_reason="stop",
            prompt_tokens=prompt,
            generated_tokens=len(text.split()) + 1,
            quotes=find_quotes(text, normalized) if quoting else (),
        )

    def generate(self, question: str, sources: Sequence[Any], policy: Any = Policy.REQUIRED,
                 **kwargs: Any) -> CitedAnswer:
        return self._answer(question, sources, policy=policy, **kwargs)

    def stream(self, question: str, sources: Sequence[Any], policy: Any = Policy.REQUIRED,
               **kwargs: Any) -> ScriptedStream:
        stream = ScriptedStream(self._answer(question, sources, policy=policy, **kwargs))
        self.streams.append(stream)
        return stream


TEXTS = [
    "The Eiffel Tower is a wrought-iron lattice tower in Paris.",
    "It was built for the 1889 World's Fair.",
    "Gustave Eiffel's engineering company designed and built the tower.",
]


def nodes(texts: Sequence[str] = TEXTS) -> list[NodeWithScore]:
    return [
        NodeWithScore(node=TextNode(id_=f"n{i}", text=t, metadata={"title": f"T{i}"}),
                      score=1.0 - i / 10)
        for i, t in enumerate(texts)
    ]


def synth(generator: ScriptedGenerator | None = None, **kwargs: Any) -> CitationSynthesizer:
    return CitationSynthesizer(generator or ScriptedGenerator(), max_new_tokens=16, **kwargs)


def assert_lined_up(response: Any) -> None:
    """Every [N] in the text is source_nodes[N-1], and metadata["citations"] says so."""
    citations = response.metadata["citations"]
    text = response.response if isinstance(response, Response) else response.response_txt
    assert citations
    for c in citations:
        assert text[c["start"]:c["end"]] == f"[{c['source_id']}]"
        assert response.source_nodes[c["source_id"] - 1].node.node_id == c["node_id"]


# -- query engines --------------------------------------------------------------------------


@pytest.fixture
def index() -> VectorStoreIndex:
    docs = [Document(text=t, doc_id=f"d{i}") for i, t in enumerate(TEXTS)]
    return VectorStoreIndex.from_documents(docs, embed_model=MockEmbedding(embed_dim=8))


def test_as_query_engine_with_synthesizer_llm_needs_no_openai(index: VectorStoreIndex) -> None:
    synthesizer = synth()
    engine = index.as_query_engine(
        llm=synthesizer.llm, response_synthesizer=synthesizer, similarity_top_k=3
    )
    response = engine.query("Who designed the tower?")
    assert isinstance(response, Response)
    assert response.response == "The answer is here [3]. Also here [1]."
    assert len(response.source_nodes) == 3
    assert_lined_up(response)
    assert [c["source_id"] for c in response.metadata["citations"]] == [3, 1]
    sent = synthesizer.generator.calls[0]["sources"]
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
    assert llm.metadata.context_window == ScriptedGenerator.context_length
    assert llm.metadata.num_output == 16
    with pytest.raises(NotImplementedError, match="stands in for Settings.llm"):
        llm.complete("hello")


def test_metadata_keeps_llamaindex_node_metadata() -> None:
    response = synth().synthesize("q", nodes())
    assert response.metadata["n0"] == {"title": "T0"}
    assert set(response.metadata) >= {"citations", "finish_reason", "prompt_tokens", "n2"}


def test_quotes_are_located_in_their_nodes() -> None:
    def quote_second(question: str, sources: Sequence[Source]) -> str:
        return 'It was "built for the 1889" [2] fair.'

    # A node 107 characters into its document, as node parsers record it.
    chunk = NodeWithScore(node=TextNode(id_="c", text="It was built   for the 1889 World's Fair.",
                                        start_char_idx=107, end_char_idx=148), score=0.5)
    response = synth(ScriptedGenerator(quote_second), policy="quotes_only").synthesize(
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


def test_titles_and_generation_settings_reach_the_generator() -> None:
    generator = ScriptedGenerator()
    CitationSynthesizer(generator, policy="auto", max_new_tokens=9, seed=3).synthesize("q", nodes())
    call = generator.calls[0]
    assert [s.title for s in call["sources"]] == ["T0", "T1", "T2"]
    assert call["sources"][0].metadata["node_id"] == "n0"
    assert call["policy"] is Policy.AUTO
    assert (call["max_new_tokens"], call["seed"], call["do_sample"]) == (9, 3, False)
    assert call["instructions"] == DEFAULT_INSTRUCTIONS[Policy.AUTO]


def test_additional_source_nodes_come_after_the_cited_ones() -> None:
    extra = NodeWithScore(node=TextNode(id_="extra", text="not shown"), score=None)
    response = synth().synthesize("q", nodes(), additional_source_nodes=[extra])
    assert [n.node.node_id for n in response.source_nodes] == ["n0", "n1", "n2", "extra"]
    assert_lined_up(response)


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


def test_stream_async_citations_after_the_end(index: VectorStoreIndex) -> None:
    synthesizer = synth(streaming=True)
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


def test_async_stream_left_early_closes_the_generation() -> None:
    synthesizer = synth(streaming=True)

    async def run() -> None:
        response = await synthesizer.asynthesize("q", nodes())
        agen = response.response_gen
        assert await agen.__anext__() == "The "
        await agen.aclose()
        assert "citations" not in response.metadata

    asyncio.run(run())
    (stream,) = synthesizer.generator.streams
    assert stream.closed


def test_get_response_direct() -> None:
    assert synth().get_response("q", ["a b", "c d"]) == "The answer is here [2]. Also here [1]."
    chunks = synth(streaming=True).get_response("q", ["a b"])
    assert "".join(chunks) == "The answer is here [1]. Also here [1]."
    assert asyncio.run(synth().aget_response("q", ["a"])).endswith("[1].")


# -- prompts --------------------------------------------------------------------------------


def test_prompts_exposed_and_customisable_through_the_query_engine(
    index: VectorStoreIndex,
) -> None:
    synthesizer = synth()
    engine = index.as_query_engine(llm=synthesizer.llm, response_synthesizer=synthesizer)
    prompts = engine.get_prompts()
    key = "response_synthesizer:instructions"
    assert prompts[key].get_template() == DEFAULT_INSTRUCTIONS[Policy.REQUIRED]
    engine.update_prompts({key: PromptTemplate("Answer like a pirate; cite like [1].")})
    engine.query("Who?")
    assert synthesizer.generator.calls[-1]["instructions"] == "Answer like a pirate; cite like [1]."
    assert synthesizer.get_prompts()["instructions"].get_template().startswith("Answer like")


def test_instructions_prompt_with_variables_is_refused() -> None:
    with pytest.raises(ValueError, match=r"takes no variables.*query_str"):
        synth().update_prompts({"instructions": PromptTemplate("Answer {query_str}")})
    assert synth(instructions="Be brief [1].").get_prompts()["instructions"].format() == (
        "Be brief [1]."
    )


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


# -- bad input ------------------------------------------------------------------------------


def test_no_nodes_is_the_empty_response_without_calling_the_generator() -> None:
    generator = ScriptedGenerator()
    response = synth(generator, empty_response="Nothing found.").synthesize("q", [])
    assert isinstance(response, Response)
    assert (response.response, response.source_nodes) == ("Nothing found.", [])
    assert generator.calls == []
    streamed = synth(generator, streaming=True).synthesize("q", [])
    assert "".join(streamed.response_gen) == "Empty Response"
    astreamed = asyncio.run(synth(generator, streaming=True).asynthesize("q", []))
    assert isinstance(astreamed, AsyncStreamingResponse)
    assert generator.calls == []


def test_empty_text_nodes_are_dropped_and_never_numbered() -> None:
    generator = ScriptedGenerator()
    mixed = nodes([TEXTS[0], "   \n", TEXTS[1], ""])
    response = synth(generator).synthesize("q", mixed)
    assert [n.node.node_id for n in response.source_nodes] == ["n0", "n2"]
    assert [s.text for s in generator.calls[0]["sources"]] == [TEXTS[0], TEXTS[1]]
    assert response.response == "The answer is here [2]. Also here [1]."
    assert_lined_up(response)
    assert response.metadata["citations"][0]["node_id"] == "n2"


def test_only_empty_text_nodes_give_the_empty_response() -> None:
    generator = ScriptedGenerator()
    response = synth(generator).synthesize("q", nodes(["", " "]))
    assert response.response == "Empty Response"
    assert generator.calls == []


def test_empty_text_nodes_raise_when_asked() -> None:
    with pytest.raises(EmptySourceError, match=r"node 2 of 3 \(id 'n1'\) has empty text"):
        synth(empty_nodes="raise").synthesize("q", nodes([TEXTS[0], " ", TEXTS[1]]))
    with pytest.raises(ValueError, match="empty_nodes must be"):
        synth(empty_nodes="skip")  # type: ignore[arg-type]


def test_nodes_too_large_for_the_context_name_the_largest_node() -> None:
    huge = " ".join(["word"] * 300)
    for streaming in (False, True):
        with pytest.raises(PromptTooLongError, match=r"largest is 'n1' \(1499 characters\)"):
            synth(streaming=streaming).synthesize("q", nodes([TEXTS[0], huge]))
    with pytest.raises(PromptTooLongError, match="similarity_top_k"):
        asyncio.run(synth().asynthesize("q", nodes([huge])))


def test_empty_question_is_refused_by_the_core() -> None:
    with pytest.raises(ValueError):
        CitationSynthesizer(_RealChecks(), max_new_tokens=4).synthesize("  ", nodes())


class _RealChecks(ScriptedGenerator):
    def _answer(self, question: str, sources: Sequence[Any], **kwargs: Any) -> CitedAnswer:
        from citeformer.answers import check_question

        check_question(question)
        return super()._answer(question, sources, **kwargs)


# -- citation chunks ------------------------------------------------------------------------


LONG = (
    "The Eiffel Tower is in Paris. It opened in 1889.  It is 330 metres tall.\n\n"
    "Gustave Eiffel's company built it. It was the tallest structure until 1930. "
    "Millions visit it every year."
)


def test_citation_chunk_size_splits_into_exact_child_nodes() -> None:
    generator = ScriptedGenerator()
    parent = TextNode(id_="p", text=LONG, metadata={"file_name": "eiffel.txt"},
                      start_char_idx=100, end_char_idx=100 + len(LONG))
    parent.relationships[NodeRelationship.SOURCE] = Document(text="doc", doc_id="doc"
                                                             ).as_related_node_info()
    other = NodeWithScore(node=TextNode(id_="q", text="Short one."), score=0.5)
    synthesizer = synth(generator, citation_chunk_size=12)
    response = synthesizer.synthesize("q", [NodeWithScore(node=parent, score=0.9), other])
    chunks = response.source_nodes
    assert len(chunks) > 3
    assert [s.text for s in generator.calls[0]["sources"]] == [c.node.text for c in chunks]
    assert chunks[-1].node.node_id == "q:chunk-0"
    for i, chunk in enumerate(chunks[:-1]):
        node = chunk.node
        start, end = node.metadata[PARENT_START_KEY], node.metadata[PARENT_END_KEY]
        assert LONG[start:end] == node.text
        assert (node.start_char_idx, node.end_char_idx) == (100 + start, 100 + end)
        assert node.node_id == f"p:chunk-{i}"
        assert node.relationships[NodeRelationship.PARENT].node_id == "p"
        assert node.ref_doc_id == "doc"
        assert node.metadata["file_name"] == "eiffel.txt"
        assert PARENT_START_KEY not in node.get_content(metadata_mode="llm")
        assert chunk.score == 0.9
        assert len(node.text.split()) <= 12
    assert generator.calls[0]["sources"][0].title == "eiffel.txt"
    assert_lined_up(response)
    assert response.metadata["citations"][0]["node_id"] == chunks[-1].node.node_id


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.sampled_from(["Paris.", "tower", "1889", "  ", "\n\n", "Eiffel's", "a", "it.", " "]),
        min_size=1, max_size=80,
    ),
    st.integers(min_value=2, max_value=20),
    st.integers(min_value=0, max_value=1),
)
def test_chunk_offsets_are_exact_for_any_text(words: list[str], size: int, overlap: int) -> None:
    text = " ".join(words)
    chunker = CitationChunker(SentenceSplitter(chunk_size=size, chunk_overlap=overlap,
                                               tokenizer=str.split))
    node = NodeWithScore(node=TextNode(id_="p", text=text))
    for chunk in chunker.split([node]):
        meta = chunk.node.metadata
        assert text[meta[PARENT_START_KEY]:meta[PARENT_END_KEY]] == chunk.node.text
        assert chunk.node.text.strip()


def test_chunker_refuses_a_splitter_that_rewrites_text() -> None:
    class Upper(SentenceSplitter):
        def split_text(self, text: str) -> list[str]:
            return [text.upper()]

    with pytest.raises(ValueError, match="not a slice of the node's text"):
        CitationChunker(Upper()).split(nodes(["abc"]))


def test_bad_citation_chunk_size() -> None:
    with pytest.raises(ValueError, match="citation_chunk_size must be a positive int"):
        synth(citation_chunk_size=0)


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
    generator.generate = generator.stream = None  # type: ignore[method-assign]

    async def run() -> tuple[Any, list[str], Any]:
        response = await synthesizer.asynthesize("Where?", nodes())
        synthesizer._streaming = True
        streaming = await synthesizer.asynthesize("Where?", nodes())
        chunks = [c async for c in streaming.async_response_gen()]
        return response, chunks, streaming

    response, chunks, streaming = asyncio.run(run())
    assert isinstance(streaming, AsyncStreamingResponse)
    assert_lined_up(response)
    assert "".join(chunks) == response.response
    assert_lined_up(streaming)


def test_server_generator_citation_chunk_size_needs_a_splitter() -> None:
    from tests.fake_server import FakeServer

    with pytest.raises(ValueError, match="has none here.*text_splitter"):
        CitationSynthesizer(FakeServer().generator(), citation_chunk_size=64)
    splitter = SentenceSplitter(chunk_size=64, chunk_overlap=0, tokenizer=str.split)
    assert CitationSynthesizer(FakeServer().generator(), text_splitter=splitter)
