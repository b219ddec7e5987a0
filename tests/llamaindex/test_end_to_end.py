"""CitationSynthesizer end to end: the embedded model, a real VectorStoreIndex, real MiniLM
embeddings. Offline; about a minute on two CPU cores once the model is cached. The same
behaviours run on a FakeGenerator in tests/llamaindex/test_synthesizer.py."""

from __future__ import annotations

import asyncio
import math
import threading
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from typing import Any

import pytest
from llama_index.core import Document, VectorStoreIndex
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
from llama_index.core.prompts import PromptTemplate
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.schema import NodeWithScore, TextNode

from citeformer import CiteGenerator, GenerationRequest
from citeformer.errors import EmptySourceError, PromptTooLongError
from citeformer.render import escape_markdown
from citeformer_llamaindex import (
    PARENT_END_KEY,
    PARENT_START_KEY,
    CitationSynthesizer,
    MiniLMEmbedding,
    render_html,
    render_markdown,
)

pytestmark = pytest.mark.integration

MAX_NEW_TOKENS = 48
# A sentence must cite within this many words, so 48 tokens always reach a marker.
GRAMMAR = {"max_sentence_words": 14}

DOCUMENTS = {
    "eiffel": (
        "The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in Paris, France. "
        "It is named after the engineer Gustave Eiffel, whose company designed and built the "
        "tower between 1887 and 1889 as the entrance to the 1889 World's Fair."
    ),
    "everest": (
        "Mount Everest is Earth's highest mountain above sea level. It lies in the Mahalangur "
        "Himal sub-range of the Himalayas, on the border between Nepal and China. Its summit "
        "is 8,849 metres above sea level."
    ),
    "nile": (
        "The Nile is a major river in northeastern Africa. It flows north into the "
        "Mediterranean Sea and is about 6,650 kilometres long. Its drainage basin covers "
        "eleven countries."
    ),
    "honey": (
        "Honey is a sweet substance made by honey bees from the nectar of flowers. Bees store "
        "it in wax honeycombs inside the hive. Sealed honey keeps for a very long time."
    ),
    "python": (
        "Python is a high-level programming language created by Guido van Rossum and first "
        "released in 1991. Its design emphasises code readability through significant "
        "indentation."
    ),
}


class Recording:
    """The real generator, with each request it answers written down."""

    def __init__(self, generator: CiteGenerator) -> None:
        self._generator = generator
        self.requests: list[GenerationRequest] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._generator, name)

    def answer(self, request: GenerationRequest) -> Any:
        self.requests.append(request)
        return self._generator.answer(request)

    def answer_stream(self, request: GenerationRequest) -> Any:
        self.requests.append(request)
        return self._generator.answer_stream(request)


@pytest.fixture(scope="module")
def generator(default_generator: CiteGenerator) -> CiteGenerator:
    # default_generator (tests/conftest.py) is the embedded model, shared by the whole run.
    return default_generator


@pytest.fixture(scope="module")
def embed_model() -> MiniLMEmbedding:
    return MiniLMEmbedding()


@pytest.fixture(scope="module")
def index(embed_model: MiniLMEmbedding) -> VectorStoreIndex:
    docs = [Document(text=text, doc_id=name, metadata={"title": name})
            for name, text in DOCUMENTS.items()]
    return VectorStoreIndex.from_documents(docs, embed_model=embed_model)


def synthesizer(generator: Any, **kwargs: Any) -> CitationSynthesizer:
    return CitationSynthesizer(
        generator, max_new_tokens=MAX_NEW_TOKENS, grammar_options=GRAMMAR, **kwargs
    )


def assert_lined_up(response: Any) -> None:
    """Every [N] in the text is source_nodes[N-1], and metadata["citations"] says so."""
    text = response.response if isinstance(response, Response) else response.response_txt
    citations = response.metadata["citations"]
    assert citations, f"the model cited nothing: {text!r}"
    for c in citations:
        assert text[c["start"]:c["end"]] == f"[{c['source_id']}]"
        assert 1 <= c["source_id"] <= len(response.source_nodes)
        assert response.source_nodes[c["source_id"] - 1].node.node_id == c["node_id"]


def test_minilm_embedding_is_unit_length_and_ranks_the_right_document(
    embed_model: MiniLMEmbedding, index: VectorStoreIndex
) -> None:
    vector = embed_model.get_query_embedding("Who designed the Eiffel Tower?")
    assert len(vector) == 384
    assert math.isclose(sum(v * v for v in vector), 1.0, rel_tol=1e-4)
    assert asyncio.run(embed_model.aget_query_embedding("Who designed the Eiffel Tower?")) == (
        pytest.approx(vector, abs=1e-6)
    )
    top = index.as_retriever(similarity_top_k=1).retrieve("How tall is Mount Everest?")
    assert top[0].node.ref_doc_id == "everest"


def test_as_query_engine_query(generator: CiteGenerator, index: VectorStoreIndex) -> None:
    synth = synthesizer(generator)
    engine = index.as_query_engine(llm=synth.llm, response_synthesizer=synth, similarity_top_k=2)
    retrieved = engine.retrieve(_bundle("Who designed the Eiffel Tower?"))
    response = engine.query("Who designed the Eiffel Tower?")
    assert isinstance(response, Response)
    assert [n.node.node_id for n in response.source_nodes] == [
        n.node.node_id for n in retrieved
    ]
    assert response.source_nodes[0].node.ref_doc_id == "eiffel"
    assert_lined_up(response)
    assert response.metadata["finish_reason"] in ("stop", "length")


def test_retriever_query_engine_aquery(generator: CiteGenerator, index: VectorStoreIndex) -> None:
    engine = RetrieverQueryEngine(index.as_retriever(similarity_top_k=2),
                                  response_synthesizer=synthesizer(generator))
    response = asyncio.run(engine.aquery("How long is the Nile?"))
    assert isinstance(response, Response)
    assert response.source_nodes[0].node.ref_doc_id == "nile"
    assert_lined_up(response)


def test_streaming_sync(generator: CiteGenerator, index: VectorStoreIndex) -> None:
    synth = synthesizer(generator, streaming=True)
    engine = index.as_query_engine(llm=synth.llm, response_synthesizer=synth, similarity_top_k=2)
    response = engine.query("Where is Mount Everest?")
    assert isinstance(response, StreamingResponse)
    assert "citations" not in response.metadata
    tokens = list(response.response_gen)
    assert len(tokens) > 1
    assert "".join(tokens) == response.response_txt
    assert_lined_up(response)


def test_streaming_async(generator: CiteGenerator, index: VectorStoreIndex) -> None:
    synth = synthesizer(generator, streaming=True)
    engine = RetrieverQueryEngine(index.as_retriever(similarity_top_k=2),
                                  response_synthesizer=synth)

    async def run() -> tuple[AsyncStreamingResponse, list[str]]:
        response = await engine.aquery("What do bees make honey from?")
        assert isinstance(response, AsyncStreamingResponse)
        return response, [token async for token in response.async_response_gen()]

    response, tokens = asyncio.run(run())
    assert len(tokens) > 1
    assert "".join(tokens) == response.response_txt
    assert_lined_up(response)


def generating() -> list[threading.Thread]:
    """The core's generation threads still running (one per unfinished in-process stream)."""
    return [t for t in threading.enumerate() if t.name == "citeformer-generate" and t.is_alive()]


@pytest.mark.parametrize("reader", ["sync", "async"])
def test_a_reader_that_leaves_early_stops_the_model(generator: CiteGenerator, reader: str) -> None:
    # Room for a long answer: a model left running would still be generating when it is checked.
    synth = CitationSynthesizer(generator, max_new_tokens=256, streaming=True)
    nodes = [NodeWithScore(node=TextNode(id_=name, text=text), score=1.0)
             for name, text in DOCUMENTS.items()]
    question = "Where is Mount Everest, how high is it, and what is the Nile?"
    if reader == "sync":
        response = synth.synthesize(question, nodes)
        tokens = response.response_gen
        next(tokens)
        tokens.close()
        assert generating() == []
    else:

        async def leave() -> None:
            response = await synth.asynthesize(question, nodes)
            tokens = response.async_response_gen()
            await anext(tokens)
            await tokens.aclose()
            assert generating() == []  # while the response and its event loop live

        asyncio.run(leave())
    # The model is free at once for the next question.
    assert synthesizer(generator).synthesize("How long is the Nile?", nodes[2:3]).response


def test_update_prompts_changes_the_instructions_the_model_gets(
    generator: CiteGenerator, index: VectorStoreIndex
) -> None:
    recording = Recording(generator)
    synth = synthesizer(recording)
    engine = index.as_query_engine(llm=synth.llm, response_synthesizer=synth, similarity_top_k=2)
    custom = ("Answer in one short sentence from the numbered sources. "
              "End it with the source number in brackets, like [1].")
    engine.update_prompts({"response_synthesizer:instructions": PromptTemplate(custom)})
    response = engine.query("Who created Python?")
    (request,) = recording.requests
    assert request.instructions == custom
    assert custom in generator.prompt("Who created Python?", request.sources,
                                      instructions=request.instructions)
    assert_lined_up(response)


class Collect(BaseEventHandler):
    events: list[BaseEvent] = []

    @classmethod
    def class_name(cls) -> str:
        return "Collect"

    def handle(self, event: BaseEvent, **kwargs: Any) -> None:
        self.events.append(event)


@pytest.fixture
def events() -> Iterator[Collect]:
    root, handler = get_dispatcher(), Collect(events=[])
    root.add_event_handler(handler)
    try:
        yield handler
    finally:
        root.event_handlers.remove(handler)


def test_instrumentation_and_callbacks_with_chunked_nodes(
    generator: CiteGenerator, index: VectorStoreIndex, events: Collect
) -> None:
    debug = LlamaDebugHandler()
    synth = synthesizer(
        generator, citation_chunk_size=24, callback_manager=CallbackManager([debug])
    )
    engine = RetrieverQueryEngine(index.as_retriever(similarity_top_k=1),
                                  response_synthesizer=synth)
    response = engine.query("When was the Eiffel Tower built?")

    synth_events = [e for e in events.events
                    if isinstance(e, (SynthesizeStartEvent, SynthesizeEndEvent))]
    assert [type(e) for e in synth_events] == [SynthesizeStartEvent, SynthesizeEndEvent]
    assert synth_events[-1].response is response
    ((start, end),) = debug.get_event_pairs(CBEventType.SYNTHESIZE)
    assert start.payload[EventPayload.QUERY_STR] == "When was the Eiffel Tower built?"
    assert end.payload[EventPayload.RESPONSE] is response

    # citation_chunk_size: every chunk node is an exact slice of its parent, in the model's
    # own tokens, and the chunks are what [N] numbers.
    parent_text = DOCUMENTS["eiffel"]
    assert len(response.source_nodes) > 1
    for chunk in response.source_nodes:
        node = chunk.node
        start_char, end_char = node.metadata[PARENT_START_KEY], node.metadata[PARENT_END_KEY]
        assert parent_text[start_char:end_char] == node.text
        assert len(generator.tokenizer.encode(node.text, add_special_tokens=False)) <= 24
        assert node.ref_doc_id == "eiffel"
    assert_lined_up(response)


# -- bad input ------------------------------------------------------------------------------


def test_no_nodes_gives_the_empty_response(generator: CiteGenerator) -> None:
    assert synthesizer(generator).synthesize("Anything?", []).response == "Empty Response"
    stream = synthesizer(generator, streaming=True).synthesize("Anything?", [])
    assert "".join(stream.response_gen) == "Empty Response"


def test_empty_text_nodes(generator: CiteGenerator) -> None:
    nodes = [
        NodeWithScore(node=TextNode(id_="blank", text="  \n"), score=0.9),
        NodeWithScore(node=TextNode(id_="nile", text=DOCUMENTS["nile"]), score=0.8),
    ]
    response = synthesizer(generator).synthesize("How long is the Nile?", nodes)
    assert [n.node.node_id for n in response.source_nodes] == ["nile"]
    assert {c["node_id"] for c in response.metadata["citations"]} == {"nile"}
    assert_lined_up(response)
    with pytest.raises(EmptySourceError, match="'blank'"):
        synthesizer(generator, empty_sources="raise").synthesize("How long is the Nile?", nodes)


def test_no_generator_is_the_embedded_model(generator: CiteGenerator) -> None:
    # generator is CiteGenerator.default(), which CitationSynthesizer() loads on first use.
    nodes = [NodeWithScore(node=TextNode(id_="nile", text=DOCUMENTS["nile"]), score=0.9)]
    lazy = CitationSynthesizer(max_new_tokens=MAX_NEW_TOKENS, grammar_options=GRAMMAR)
    response = lazy.synthesize("How long is the Nile?", nodes)
    assert lazy.generator is generator
    assert response.response == synthesizer(generator).synthesize(
        "How long is the Nile?", nodes
    ).response
    assert_lined_up(response)


def test_nodes_larger_than_the_context(generator: CiteGenerator) -> None:
    assert generator.context_length is not None
    huge = "The river floods every year. " * (generator.context_length // 5)
    nodes = [
        NodeWithScore(node=TextNode(id_="nile", text=DOCUMENTS["nile"]), score=0.9),
        NodeWithScore(node=TextNode(id_="huge", text=huge), score=0.8),
    ]
    with pytest.raises(PromptTooLongError, match=r"largest is 'huge'.*similarity_top_k"):
        synthesizer(generator).synthesize("How long is the Nile?", nodes)
    with pytest.raises(PromptTooLongError, match="largest is 'huge'"):
        asyncio.run(synthesizer(generator, streaming=True).asynthesize("Nile?", nodes))


def _bundle(question: str) -> Any:
    from llama_index.core.schema import QueryBundle

    return QueryBundle(question)


def test_quotes_only_quotes_come_back_in_their_nodes_and_documents(
    index: VectorStoreIndex,
) -> None:
    # Whether the model quotes at all is its choice: in float32 it quotes here; in bfloat16 (the
    # default where the CPU computes it natively) it answers this question without a quote.
    float32 = CiteGenerator.default(progress=False, dtype="float32")
    synth = synthesizer(float32, policy="quotes_only")
    engine = index.as_query_engine(llm=synth.llm, response_synthesizer=synth, similarity_top_k=2)
    response = engine.query("How tall is Mount Everest?")
    quotes = response.metadata["quotes"]
    assert quotes, response.response
    for quote in quotes:
        node = response.source_nodes[quote["source_id"] - 1].node
        assert node.node_id == quote["node_id"]
        assert response.response[quote["start"]:quote["end"]] == quote["text"]
        original = node.get_content()[quote["source_start"]:quote["source_end"]]
        assert " ".join(original.split()) == quote["text"]
        document = DOCUMENTS[node.ref_doc_id]
        assert document[quote["document_start"]:quote["document_end"]] == original


# -- rendering ------------------------------------------------------------------------------


def test_a_real_answer_renders_with_file_page_and_supporting_sentences(
    generator: CiteGenerator,
) -> None:
    pages = {"eiffel": "12", "everest": "iv", "python": "3"}
    nodes = [
        NodeWithScore(node=TextNode(id_=name, text=DOCUMENTS[name], metadata={
            "file_name": f"{name}.pdf", "page_label": label}), score=1.0)
        for name, label in pages.items()
    ]
    response = synthesizer(generator).synthesize("Who designed the Eiffel Tower?", nodes)
    assert_lined_up(response)
    citations = response.metadata["citations"]
    cited = list(dict.fromkeys(c["node_id"] for c in citations))

    markdown = render_markdown(response)
    body, _, references = markdown.partition("**Sources**")
    assert body.count("](#ref-") == len(citations)
    for c in citations:
        assert f"[[{c['source_id']}]](#ref-{c['source_id']})" in body
    heads = [line for line in references.strip().splitlines() if line.startswith("- ")]
    assert len(heads) == len(cited)
    for head, node_id in zip(heads, cited, strict=True):
        number = [n.node.node_id for n in response.source_nodes].index(node_id) + 1
        assert head.startswith(f'- <a id="ref-{number}"></a>')
        assert head.endswith(f"{node_id}.pdf, page {pages[node_id]}")
    for name in pages.keys() - set(cited):
        assert f"{name}.pdf" not in markdown
    for c in citations:
        span = c["evidence"]
        assert span is not None, "lexical evidence, the default here, locates every citation"
        text = response.source_nodes[c["source_id"] - 1].node.get_content()
        assert text[span["source_start"]:span["source_end"]] == span["text"]
        assert f'"{escape_markdown(" ".join(span["text"].split()))}"' in references

    root = ET.fromstring(render_html(response))
    items = [li for li in root.iter("li") if li.get("id")]
    assert [li.get("id") for li in items] == [
        f"ref-{[n.node.node_id for n in response.source_nodes].index(i) + 1}" for i in cited
    ]
    for li, node_id in zip(items, cited, strict=True):
        assert "".join(li.itertext()).startswith(f"{node_id}.pdf, page {pages[node_id]}")
    hrefs = [a.get("href") for a in root.iter("a") if a.get("class") == "citeformer-marker"]
    assert hrefs == [f"#ref-{c['source_id']}" for c in citations]
