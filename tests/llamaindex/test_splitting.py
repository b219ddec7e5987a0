"""CitationChunker and the synthesizer's citation_chunk_size: exact child nodes; offline."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from llama_index.core import Document
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.schema import NodeRelationship, NodeWithScore, TextNode

from citeformer.errors import InvalidInputError
from citeformer_llamaindex import (
    PARENT_END_KEY,
    PARENT_START_KEY,
    CitationChunker,
    CitationSynthesizer,
)
from tests.llamaindex.common import WordTokenizer, assert_lined_up, fake, nodes, synth

LONG = (
    "The Eiffel Tower is in Paris. It opened in 1889.  It is 330 metres tall.\n\n"
    "Gustave Eiffel's company built it. It was the tallest structure until 1930. "
    "Millions visit it every year."
)


def test_citation_chunk_size_splits_into_exact_child_nodes() -> None:
    generator = fake()
    generator.tokenizer = WordTokenizer()  # type: ignore[attr-defined]
    parent = TextNode(id_="p", text=LONG, metadata={"file_name": "eiffel.txt"},
                      start_char_idx=100, end_char_idx=100 + len(LONG))
    parent.relationships[NodeRelationship.SOURCE] = Document(text="doc", doc_id="doc"
                                                             ).as_related_node_info()
    other = NodeWithScore(node=TextNode(id_="q", text="Short one."), score=0.5)
    synthesizer = synth(generator, citation_chunk_size=12)
    response = synthesizer.synthesize("q", [NodeWithScore(node=parent, score=0.9), other])
    chunks = response.source_nodes
    assert len(chunks) > 3
    assert [s.text for s in generator.requests[0].sources] == [c.node.text for c in chunks]
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
    assert generator.requests[0].sources[0].title == "eiffel.txt"
    assert_lined_up(response)
    assert response.metadata["citations"][0]["node_id"] == chunks[-1].node.node_id


def test_citation_chunk_size_reads_the_default_models_tokenizer_on_first_use(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import citeformer

    generator = fake()
    generator.tokenizer = WordTokenizer()  # type: ignore[attr-defined]
    loads: list[bool] = []

    def default(cls: Any) -> Any:
        loads.append(True)
        return generator

    monkeypatch.setattr(citeformer.CiteGenerator, "default", classmethod(default))
    synthesizer = CitationSynthesizer(citation_chunk_size=4, max_new_tokens=16)
    assert loads == []
    response = synthesizer.synthesize("q", nodes())
    assert loads == [True]
    assert all(len(n.node.text.split()) <= 4 for n in response.source_nodes)


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

    with pytest.raises(InvalidInputError, match="not a slice of the node's text"):
        CitationChunker(Upper()).split(nodes(["abc"]))


def test_bad_citation_chunk_size() -> None:
    with pytest.raises(ValueError, match="citation_chunk_size must be a positive int"):
        synth(citation_chunk_size=0)


def test_server_generator_citation_chunk_size_needs_a_splitter() -> None:
    from tests.fake_server import FakeServer

    with pytest.raises(ValueError, match="has none here.*text_splitter"):
        CitationSynthesizer(FakeServer().generator(), citation_chunk_size=64)
    splitter = SentenceSplitter(chunk_size=64, chunk_overlap=0, tokenizer=str.split)
    assert CitationSynthesizer(FakeServer().generator(), text_splitter=splitter)
