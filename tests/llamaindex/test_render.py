"""render_markdown / render_html: a CitationSynthesizer's answer with its nodes as references;
offline, on FakeGenerator. The embedded model's answers are rendered in test_end_to_end.py."""

from __future__ import annotations

import asyncio
import xml.etree.ElementTree as ET
from typing import Any

import pytest
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.response.schema import (
    AsyncStreamingResponse,
    PydanticResponse,
    Response,
    StreamingResponse,
)
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle, TextNode

import citeformer_llamaindex
from citeformer import build_request
from citeformer.errors import CiteformerError, InputTypeError, InvalidInputError
from citeformer.render import to_html, to_markdown
from citeformer.testing import FakeGenerator
from citeformer.types import Source, title_from
from citeformer_llamaindex import (
    CitationChatEngine,
    CitationSynthesizer,
    render_html,
    render_markdown,
)
from citeformer_llamaindex.render import core_answer

QUESTION = "When was the Eiffel Tower completed?"
ANSWER = "It was completed in March 1889 [1]. A script ran here [3]."
EIFFEL = "The Eiffel Tower stands in Paris. It was completed in March 1889 for the World's Fair."
PAGES = [
    TextNode(id_="eiffel-p12", text=EIFFEL,
             metadata={"file_name": "eiffel.pdf", "page_label": "12"}),
    TextNode(id_="bees-p4", text="Honey bees dance to show where the flowers are.",
             metadata={"file_name": "bees.pdf", "page_label": "iv"}),
    # No title and no file: the start of the text would label it, but the quote shows that.
    TextNode(id_="web", text="<script>alert('x')</script> A script ran here once."),
]


def scored() -> list[NodeWithScore]:
    return [NodeWithScore(node=node, score=1.0 - i / 10) for i, node in enumerate(PAGES)]


def synthesizer(**kwargs: Any) -> CitationSynthesizer:
    return CitationSynthesizer(FakeGenerator(ANSWER), max_new_tokens=32, **kwargs)


def answered(**kwargs: Any) -> Response:
    response = synthesizer(**kwargs).synthesize(QUESTION, scored())
    assert isinstance(response, Response)
    return response


def expected_core_markdown() -> str:
    """The core renderer on the same answer, with the nodes' metadata as source metadata."""
    sources = [Source(n.text, title=title_from(n.metadata), metadata=n.metadata) for n in PAGES]
    return to_markdown(FakeGenerator(ANSWER).answer(build_request(QUESTION, sources)))


def test_markdown_shows_file_page_and_supporting_sentence_of_the_cited_node() -> None:
    response = answered()
    markdown = render_markdown(response)
    assert markdown == expected_core_markdown()
    assert markdown.startswith("It was completed in March 1889 [[1]](#ref-1). ")
    (first,) = [line for line in markdown.splitlines() if 'id="ref-1"' in line]
    assert first.endswith("eiffel.pdf, page 12")
    assert '  - "It was completed in March 1889 for the World\'s Fair."' in markdown
    assert "[[3]](#ref-3)" in markdown and 'id="ref-3"' in markdown
    assert "bees.pdf" not in markdown  # not cited
    # Source text is escaped: the script is shown, not run.
    assert "<script>" not in markdown and "\\<script\\>" in markdown
    assert "**Sources**" in markdown
    assert "**Sources**" not in render_markdown(response, heading=None)
    assert 'id="answer2-ref-1"' in render_markdown(response, id_prefix="answer2-ref")


def test_html_parses_links_markers_and_escapes_node_text() -> None:
    response = answered()
    page = render_html(response)
    root = ET.fromstring(page)
    assert list(root.iter("script")) == []
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page
    items = {str(li.get("id")): li for li in root.iter("li") if li.get("id")}
    assert sorted(items) == ["ref-1", "ref-3"]
    eiffel = "".join(items["ref-1"].itertext())
    assert eiffel.startswith("eiffel.pdf, page 12")
    assert "It was completed in March 1889 for the World's Fair." in eiffel
    untitled = "".join(items["ref-3"].itertext())
    assert untitled.startswith("untitled source<script>alert('x')</script> A script")
    markers = [a.get("href") for a in root.iter("a") if a.get("class") == "citeformer-marker"]
    assert markers == ["#ref-1", "#ref-3"]
    assert page == to_html(core_answer(response))


def test_core_answer_rebuilds_the_answer_the_synthesizer_gave() -> None:
    response = answered()
    answer = core_answer(response)
    assert answer.text == response.response
    assert [c.source_id for c in answer.citations] == [1, 3]
    assert answer.cited_ids == [1, 3]
    assert [s.metadata for s in answer.sources] == [n.metadata for n in PAGES]
    assert [s.title for s in answer.sources] == ["eiffel.pdf", "bees.pdf", None]
    data = answer.to_dict()
    assert response.metadata is not None
    assert [{**c, "node_id": PAGES[c["source_id"] - 1].node_id} for c in data["citations"]] == (
        response.metadata["citations"]
    )
    assert data["finish_reason"] == response.metadata["finish_reason"]
    assert data["generated_tokens"] == response.metadata["generated_tokens"] > 0


def test_evidence_lines_up_with_the_text_the_model_read() -> None:
    # With metadata shown to the model, the evidence offsets are in the node's LLM content.
    response = answered(metadata_mode=MetadataMode.LLM)
    answer = core_answer(response)
    (first, _) = answer.citations
    assert first.evidence is not None
    source = answer.sources[0]
    assert source.text == PAGES[0].get_content(metadata_mode=MetadataMode.LLM) != EIFFEL
    assert source.text[first.evidence.source_start:first.evidence.source_end] == (
        first.evidence.text
    )
    assert "page 12" in render_markdown(response)


def test_quotes_come_back() -> None:
    quoting = CitationSynthesizer(
        FakeGenerator('It says "completed in March 1889" [1].'),
        policy="quotes_only", max_new_tokens=32,
    )
    (quote,) = core_answer(quoting.synthesize(QUESTION, scored())).quotes
    assert quote.text == "completed in March 1889"
    assert EIFFEL[quote.source_start:quote.source_end] == quote.text


def test_streaming_response_renders_once_read_to_the_end() -> None:
    response = synthesizer(streaming=True).synthesize(QUESTION, scored())
    assert isinstance(response, StreamingResponse)
    with pytest.raises(InvalidInputError, match=r"StreamingResponse whose stream has not ended.*"
                       r"read response.response_gen to the end"):
        render_markdown(response)
    next(response.response_gen)
    with pytest.raises(CiteformerError, match="has not ended"):
        render_html(response)
    assert "".join(response.response_gen) and render_markdown(response) == (
        expected_core_markdown()
    )


def test_async_streaming_response_renders_once_read_to_the_end() -> None:
    async def run() -> tuple[str, AsyncStreamingResponse]:
        response = await synthesizer(streaming=True).asynthesize(QUESTION, scored())
        assert isinstance(response, AsyncStreamingResponse)
        with pytest.raises(InvalidInputError, match="async_response_gen"):
            render_markdown(response)
        return "".join([token async for token in response.async_response_gen()]), response

    text, response = asyncio.run(run())
    assert text == ANSWER
    assert render_markdown(response) == expected_core_markdown()


class Pages(BaseRetriever):
    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return scored()


def test_chat_engine_turns_render() -> None:
    chat = CitationChatEngine(Pages(), synthesizer(), skip_condense=True)
    assert render_markdown(chat.chat(QUESTION)) == expected_core_markdown()
    streamed = chat.stream_chat(QUESTION)
    with pytest.raises(InvalidInputError, match="has not ended"):
        render_markdown(streamed)
    assert "".join(streamed.response_gen) == ANSWER
    assert render_markdown(streamed) == expected_core_markdown()


@pytest.mark.parametrize(
    "value", ["It was 1889 [1].", None, {"response": "x"}, PydanticResponse(None)]
)
def test_other_objects_are_refused_naming_their_type(value: Any) -> None:
    with pytest.raises(InputTypeError, match=rf"got {type(value).__name__}$"):
        render_markdown(value)
    with pytest.raises(TypeError, match=rf"render_html\(\) takes .* got {type(value).__name__}"):
        render_html(value)


def test_core_answer_is_refused_with_a_pointer() -> None:
    core = FakeGenerator(ANSWER).answer(build_request(QUESTION, [n.text for n in PAGES]))
    with pytest.raises(InputTypeError, match="got CitedAnswer"):
        render_markdown(core)  # type: ignore[arg-type]


def test_a_response_without_citeformer_metadata_is_refused() -> None:
    other = Response("It was 1889.", source_nodes=scored(), metadata={"eiffel-p12": {}})
    with pytest.raises(InvalidInputError, match=r"Response without metadata\['citations'\].*"
                       "CitationSynthesizer"):
        render_markdown(other)
    empty = synthesizer().synthesize(QUESTION, [])
    assert str(empty) == "Empty Response"
    with pytest.raises(InvalidInputError, match=r"without metadata\['citations'\]"):
        render_html(empty)
    foreign = StreamingResponse(response_gen=(token for token in ["It ", "was."]), metadata={})
    assert str(foreign) == "It was."  # read to the end, and still no citations
    with pytest.raises(InvalidInputError, match=r"without metadata\['citations'\]"):
        render_markdown(foreign)


def test_a_response_changed_after_synthesis_is_refused() -> None:
    response = answered()
    reordered = Response(response.response, list(reversed(response.source_nodes)),
                         response.metadata)
    with pytest.raises(InvalidInputError, match=r"\[1\] cites node 'eiffel-p12' but "
                       r"source_nodes\[0\] is 'web'"):
        render_markdown(reordered)
    rewritten = Response("Short [1].", response.source_nodes, response.metadata)
    with pytest.raises(InvalidInputError, match="text unchanged"):
        render_markdown(rewritten)
    fewer = Response(response.response, response.source_nodes[:1], response.metadata)
    with pytest.raises(InvalidInputError, match=r"\[3\] but the response has 1 source node"):
        render_markdown(fewer)
    broken = Response(response.response, response.source_nodes,
                      {"citations": [{"source_id": "one"}]})
    with pytest.raises(InvalidInputError, match="cannot read the citation"):
        render_markdown(broken)


def test_exported() -> None:
    assert {"render_markdown", "render_html"} <= set(citeformer_llamaindex.__all__)
    assert citeformer_llamaindex.render_markdown is render_markdown


def test_a_style_formats_nodes_with_bibliographic_metadata() -> None:
    pytest.importorskip("citeproc")
    node = TextNode(id_="paper", text=EIFFEL, metadata={
        "author": "Loyrette, Henri", "year": "1985", "title": "Gustave Eiffel",
        "publisher": "Rizzoli", "page_label": "12",
    })
    response = CitationSynthesizer(FakeGenerator("It was completed in 1889 [1]."),
                                   max_new_tokens=32).synthesize(
        QUESTION, [NodeWithScore(node=node, score=1.0)]
    )
    plain = render_markdown(response)
    styled = render_markdown(response, style="harvard-cite-them-right")
    assert styled == to_markdown(core_answer(response), style="harvard-cite-them-right")
    assert "Loyrette" not in plain and "Loyrette, H. (1985)" in styled
    assert "page 12" in styled
    assert "Loyrette, H. (1985)" in render_html(response, style="harvard-cite-them-right")


def test_the_response_keeps_the_core_answer_as_its_dict() -> None:
    import json

    from citeformer.types import CitedAnswer

    generator = FakeGenerator(ANSWER)
    response = CitationSynthesizer(generator, max_new_tokens=32,
                                   metadata_mode=MetadataMode.LLM).synthesize(QUESTION, scored())
    assert response.metadata is not None
    stored = response.metadata["cited_answer"]
    assert json.loads(json.dumps(stored)) == stored
    answer = CitedAnswer.from_dict(stored)
    assert answer.to_dict() == stored
    assert answer.sources == generator.requests[-1].sources  # what the model read, as it read it
    assert answer.text == response.response
    assert [c.source_id for c in answer.citations] == [1, 3]
