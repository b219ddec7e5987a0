"""What the LlamaIndex tests share: nodes, a synthesizer on FakeGenerator, the guarantee."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llama_index.core.base.response.schema import Response
from llama_index.core.schema import NodeWithScore, TextNode

from citeformer.request import GenerationRequest
from citeformer.testing import FakeGenerator
from citeformer_llamaindex import CitationSynthesizer

CONTEXT_WORDS = 300
"""The fake's context window, in words: the prompt of three short nodes fits, 300 words do not."""

TEXTS = [
    "The Eiffel Tower is a wrought-iron lattice tower in Paris.",
    "It was built for the 1889 World's Fair.",
    "Gustave Eiffel's engineering company designed and built the tower.",
]


def cite_last(request: GenerationRequest) -> str:
    return f"The answer is here [{request.n_sources}]. Also here [1]."


def fake(script: Any = cite_last) -> FakeGenerator:
    return FakeGenerator(script, context_length=CONTEXT_WORDS)


class WordTokenizer:
    """One token per word, as FakeGenerator counts them."""

    def encode(self, text: str, add_special_tokens: bool = False) -> list[str]:
        return text.split()


def nodes(texts: Sequence[str] = TEXTS) -> list[NodeWithScore]:
    return [
        NodeWithScore(node=TextNode(id_=f"n{i}", text=t, metadata={"title": f"T{i}"}),
                      score=1.0 - i / 10)
        for i, t in enumerate(texts)
    ]


def synth(generator: Any = None, **kwargs: Any) -> CitationSynthesizer:
    return CitationSynthesizer(generator or fake(), max_new_tokens=16, **kwargs)


def assert_lined_up(response: Any) -> None:
    """Every [N] in the text is source_nodes[N-1], and metadata["citations"] says so."""
    citations = response.metadata["citations"]
    text = response.response if isinstance(response, Response) else response.response_txt
    assert citations
    for c in citations:
        assert text[c["start"]:c["end"]] == f"[{c['source_id']}]"
        assert response.source_nodes[c["source_id"] - 1].node.node_id == c["node_id"]
