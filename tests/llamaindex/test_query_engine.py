"""CitationQueryEngine on citeformer.testing.FakeGenerator, with Settings.llm made to fail if
anything resolves it: no OpenAI key, no OpenAI package. Offline."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from llama_index.core import Document, MockEmbedding, Settings, VectorStoreIndex
from llama_index.core.base.response.schema import (
    AsyncStreamingResponse,
    Response,
    StreamingResponse,
)
from llama_index.core.callbacks import CallbackManager, CBEventType, LlamaDebugHandler
from llama_index.core.postprocessor import SimilarityPostprocessor
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.response_synthesizers import SimpleSummarize
from llama_index.core.schema import NodeWithScore, QueryBundle

from citeformer import Citation, CitedAnswer, Quote
from citeformer.errors import InputTypeError, InvalidInputError
from citeformer_llamaindex import CitationQueryEngine, CitationSynthesizer, core_answer
from citeformer_llamaindex.query_engine import DEFAULT_SIMILARITY_TOP_K
from tests.llamaindex.common import TEXTS, assert_lined_up, fake, synth

QUESTION = "Who designed the tower?"


@pytest.fixture(autouse=True)
def no_openai(monkeypatch: pytest.MonkeyPatch) -> None:
    """No OpenAI key, and reading ``Settings.llm`` fails: it would resolve to OpenAI."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)

    def resolved(self: Any) -> Any:
        raise AssertionError("Settings.llm was resolved")

    monkeypatch.setattr(type(Settings), "llm", property(resolved))


@pytest.fixture
def index() -> VectorStoreIndex:
    docs = [Document(text=t, doc_id=f"d{i}") for i, t in enumerate(TEXTS)]
    return VectorStoreIndex.from_documents(docs, embed_model=MockEmbedding(embed_dim=8))


def test_from_args_needs_no_openai(index: VectorStoreIndex) -> None:
    generator = fake()
    engine = CitationQueryEngine.from_args(index, generator=generator, max_new_tokens=16)
    assert isinstance(engine, RetrieverQueryEngine)
    response = engine.query(QUESTION)
    assert isinstance(response, Response)
    assert response.response == "The answer is here [3]. Also here [1]."
    assert len(response.source_nodes) == DEFAULT_SIMILARITY_TOP_K == 3
    assert_lined_up(response)
    (request,) = generator.requests
    assert [s.text for s in request.sources] == [
        n.node.get_content() for n in response.source_nodes
    ]
    assert request.max_new_tokens == 16


def test_as_query_engine_without_llm_resolves_settings_llm(index: VectorStoreIndex) -> None:
    # Why from_args exists: the index resolves Settings.llm before it sees the synthesizer.
    with pytest.raises(AssertionError, match="Settings.llm was resolved"):
        index.as_query_engine(response_synthesizer=synth())
    synthesizer = synth()
    engine = index.as_query_engine(llm=synthesizer.llm, response_synthesizer=synthesizer)
    assert_lined_up(engine.query(QUESTION))


def test_the_citations_are_the_core_ones_typed(index: VectorStoreIndex) -> None:
    generator = fake()
    engine = CitationQueryEngine.from_args(index, generator=generator, max_new_tokens=16)
    response = engine.query(QUESTION)
    answer = core_answer(response)
    assert isinstance(answer, CitedAnswer)
    assert all(isinstance(c, Citation) for c in answer.citations)
    direct = generator.answer(generator.requests[0])
    assert answer.citations == direct.citations
    assert [c.evidence for c in answer.citations] == [c.evidence for c in direct.citations]
    assert answer.text == direct.text == response.response
    # metadata keeps the same citations as dicts, each with its node's id.
    stored = response.metadata["citations"]
    assert [(c["source_id"], c["start"], c["end"]) for c in stored] == [
        (c.source_id, c.start, c.end) for c in answer.citations
    ]
    for citation, entry in zip(answer.citations, stored, strict=True):
        assert response.source_nodes[citation.source_id - 1].node.node_id == entry["node_id"]
    for node in response.source_nodes:  # LlamaIndex's own entries stay
        assert response.metadata[node.node.node_id] == node.node.metadata


def test_quotes_are_typed_too(index: VectorStoreIndex) -> None:
    def quote_first(request: Any) -> str:
        return f'"{request.sources[0].text.rstrip(".")}" [1].'

    engine = CitationQueryEngine.from_args(
        index, generator=fake(quote_first), policy="quotes_only", max_new_tokens=32,
        similarity_top_k=1,
    )
    response = engine.query("What is the Eiffel Tower?")
    quotes = core_answer(response).quotes
    assert quotes and all(isinstance(q, Quote) for q in quotes)


def test_streaming(index: VectorStoreIndex) -> None:
    engine = CitationQueryEngine.from_args(
        index, generator=fake(), max_new_tokens=16, streaming=True
    )
    response = engine.query(QUESTION)
    assert isinstance(response, StreamingResponse)
    assert "".join(response.response_gen) == response.response_txt
    assert_lined_up(response)
    assert core_answer(response).text == response.response_txt


@pytest.mark.parametrize("streaming", [False, True])
def test_aquery(index: VectorStoreIndex, streaming: bool) -> None:
    engine = CitationQueryEngine.from_args(
        index, generator=fake(), max_new_tokens=16, streaming=streaming
    )

    async def run() -> Any:
        response = await engine.aquery(QUESTION)
        if streaming:
            assert isinstance(response, AsyncStreamingResponse)
            [chunk async for chunk in response.async_response_gen()]
        else:
            assert isinstance(response, Response)
        return response

    assert_lined_up(asyncio.run(run()))


def test_similarity_top_k_and_retriever(index: VectorStoreIndex) -> None:
    top1 = CitationQueryEngine.from_args(
        index, generator=fake(), similarity_top_k=1, max_new_tokens=16
    )
    assert len(top1.query(QUESTION).source_nodes) == 1
    own = CitationQueryEngine.from_args(
        index, generator=fake(), retriever=index.as_retriever(similarity_top_k=2),
        max_new_tokens=16,
    )
    assert len(own.query(QUESTION).source_nodes) == 2
    with pytest.raises(InvalidInputError, match="similarity_top_k= or retriever=, not both"):
        CitationQueryEngine.from_args(
            index, generator=fake(), similarity_top_k=1, retriever=index.as_retriever()
        )


class KeepFirst(BaseNodePostprocessor):
    def _postprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        return nodes[:1]


def test_node_postprocessors_run_before_the_nodes_are_numbered(index: VectorStoreIndex) -> None:
    engine = CitationQueryEngine.from_args(
        index, generator=fake(), node_postprocessors=[SimilarityPostprocessor(), KeepFirst()],
        max_new_tokens=16,
    )
    response = engine.query(QUESTION)
    assert len(response.source_nodes) == 1
    assert_lined_up(response)


def test_the_callback_manager_reaches_the_synthesizer_and_the_engine(
    index: VectorStoreIndex,
) -> None:
    debug = LlamaDebugHandler()
    engine = CitationQueryEngine.from_args(
        index, generator=fake(), callback_manager=CallbackManager([debug]), max_new_tokens=16
    )
    assert engine.synthesizer.callback_manager is engine.callback_manager
    engine.query(QUESTION)
    # The retriever reports to its index's callback manager, as in LlamaIndex.
    for kind in (CBEventType.QUERY, CBEventType.SYNTHESIZE, CBEventType.LLM):
        assert len(debug.get_event_pairs(kind)) == 1, kind


def test_synthesizer_options_are_checked_by_the_synthesizer(index: VectorStoreIndex) -> None:
    with pytest.raises(InputTypeError, match="max_new_token"):
        CitationQueryEngine.from_args(index, generator=fake(), max_new_token=16)
    with pytest.raises(InputTypeError, match="response_mode"):
        CitationQueryEngine.from_args(index, generator=fake(), response_mode="compact")


def test_the_constructor_takes_a_retriever_and_a_citation_synthesizer(
    index: VectorStoreIndex,
) -> None:
    synthesizer = synth()
    engine = CitationQueryEngine(index.as_retriever(), synthesizer)
    assert engine.synthesizer is synthesizer
    assert_lined_up(engine.query(QUESTION))
    with pytest.raises(InputTypeError, match="must be a CitationSynthesizer, got SimpleSummarize"):
        CitationQueryEngine(index.as_retriever(), SimpleSummarize(llm=synthesizer.llm))  # type: ignore[arg-type]
    with pytest.raises(InputTypeError, match="retriever must be a LlamaIndex retriever"):
        CitationQueryEngine(index)  # type: ignore[arg-type]


def test_no_synthesizer_is_the_embedded_model_loaded_on_first_use(
    index: VectorStoreIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    loaded: list[bool] = []

    def default(*args: Any, **kwargs: Any) -> Any:
        loaded.append(True)
        return fake()

    monkeypatch.setattr("citeformer_llamaindex.answering.or_default", default)
    engine = CitationQueryEngine.from_args(index, max_new_tokens=16)
    assert not loaded
    assert_lined_up(engine.query(QUESTION))
    assert loaded == [True]


def test_with_retriever_and_prompts(index: VectorStoreIndex) -> None:
    engine = CitationQueryEngine.from_args(index, generator=fake(), max_new_tokens=16)
    other = engine.with_retriever(index.as_retriever(similarity_top_k=1))
    assert isinstance(other, CitationQueryEngine) and other.synthesizer is engine.synthesizer
    assert len(other.query(QUESTION).source_nodes) == 1
    engine.update_prompts({"response_synthesizer:instructions": "Answer briefly [1]."})
    assert engine.get_prompts()["response_synthesizer:instructions"].format() == (
        "Answer briefly [1]."
    )
    assert isinstance(engine.synthesizer, CitationSynthesizer)
