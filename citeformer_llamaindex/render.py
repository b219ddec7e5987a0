"""A LlamaIndex answer as Markdown or HTML: linked markers, then the cited nodes as references.

The rendering is ``citeformer.render``'s; this module only turns what a ``CitationSynthesizer``
or ``CitationChatEngine`` returned (the text, ``source_nodes`` and ``metadata["citations"]``)
back into the core ``CitedAnswer`` whose sources are the nodes, with their metadata.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any, TypeAlias

from llama_index.core.base.response.schema import (
    RESPONSE_TYPE,
    AsyncStreamingResponse,
    Response,
    StreamingResponse,
)
from llama_index.core.chat_engine.types import AgentChatResponse, StreamingAgentChatResponse
from llama_index.core.schema import BaseNode, MetadataMode, NodeWithScore

from citeformer.errors import InputTypeError, InvalidInputError
from citeformer.render import to_html, to_markdown
from citeformer.types import Citation, CitedAnswer, EvidenceSpan, Quote, Source, title_from

CitedResponse: TypeAlias = RESPONSE_TYPE | AgentChatResponse | StreamingAgentChatResponse
"""What a query engine or chat engine returns, as LlamaIndex types it (so that
``render_markdown(engine.query(q))`` type-checks); a ``PydanticResponse`` is refused."""

_STREAMS = (StreamingResponse, AsyncStreamingResponse, StreamingAgentChatResponse)
# The synthesizer's metadata_mode is not on the response: a node's text is the content that its
# evidence offsets fit, tried in this order.
_MODES = (MetadataMode.NONE, MetadataMode.LLM, MetadataMode.ALL, MetadataMode.EMBED)


def render_markdown(
    response: CitedResponse,
    *,
    heading: str | None = "Sources",
    id_prefix: str = "ref",
    style: str | os.PathLike[str] | None = None,
) -> str:
    """The answer with each ``[N]`` linked to its reference, then the cited nodes.

    ``response`` is what a query engine with a ``CitationSynthesizer`` returns (a
    ``Response``, or a ``StreamingResponse``/``AsyncStreamingResponse`` read to the end), or a
    ``CitationChatEngine`` turn. Each reference shows the node's title (metadata ``title``,
    ``file_name`` or ``source``), its file or URL, its page (``page_label``, as LlamaIndex's PDF
    readers set it) and, quoted, the sentences of it the citations were located in; see
    ``citeformer.render.to_markdown``, which this calls. ``heading=None`` leaves the heading
    out; ``id_prefix`` keeps the anchors of several answers on one page apart; ``style`` formats
    the references of nodes with bibliographic metadata in a CSL style (``citeformer.styles``).

    Raises ``InputTypeError`` for any other object, and ``InvalidInputError`` for a stream not
    yet read to the end or a response without citeformer's ``metadata["citations"]``.
    """
    return to_markdown(
        _answer(response, "render_markdown"), heading=heading, id_prefix=id_prefix, style=style
    )


def render_html(
    response: CitedResponse,
    *,
    heading: str | None = "Sources",
    id_prefix: str = "ref",
    style: str | os.PathLike[str] | None = None,
) -> str:
    """``render_markdown``'s content as an HTML fragment (``citeformer.render.to_html``):
    ``<a href="#ref-N">[N]</a>`` markers, then an ``<ol>`` of the cited nodes, all text
    escaped."""
    return to_html(
        _answer(response, "render_html"), heading=heading, id_prefix=id_prefix, style=style
    )


def core_answer(response: CitedResponse) -> CitedAnswer:
    """``response`` as the core ``CitedAnswer``: ``[N]`` is ``sources[N - 1]``, the source of
    ``response.source_nodes[N - 1]`` (its text, title and metadata); the citations keep their
    evidence, the quotes their offsets. Raises as ``render_markdown`` does."""
    return _answer(response, "core_answer")


def _answer(response: object, caller: str) -> CitedAnswer:
    if not isinstance(response, (Response, AgentChatResponse, *_STREAMS)):
        raise InputTypeError(
            f"{caller}() takes what a query engine or chat engine over a CitationSynthesizer "
            f"returns (a Response, a StreamingResponse read to the end, a chat response); got "
            f"{type(response).__name__}"
        )
    # CitationStreamingChatResponse adds metadata to LlamaIndex's StreamingAgentChatResponse.
    metadata = getattr(response, "metadata", None) or {}
    if "citations" not in metadata:
        if _stream_open(response):
            raise InvalidInputError(
                f"{caller}() got a {type(response).__name__} whose stream has not ended; its "
                f"citations are known only at the end: {_how_to_finish(response)} first"
            )
        raise InvalidInputError(
            f"{caller}() got a {type(response).__name__} without metadata['citations']: it was "
            "not written by a CitationSynthesizer or CitationChatEngine (or had no nodes to "
            "answer from, or its stream was closed early); render an answer of theirs"
        )
    text = _text(response)
    nodes = list(response.source_nodes)
    citations = tuple(_citation(entry, text, nodes, caller) for entry in metadata["citations"])
    spans: dict[int, list[EvidenceSpan]] = {}
    for citation in citations:
        if citation.evidence is not None:
            spans.setdefault(citation.source_id, []).append(citation.evidence)
    return CitedAnswer(
        text=text,
        citations=citations,
        sources=tuple(
            _source(scored.node, spans.get(number, ()))
            for number, scored in enumerate(nodes, start=1)
        ),
        finish_reason="length" if metadata.get("finish_reason") == "length" else "stop",
        prompt_tokens=int(metadata.get("prompt_tokens") or 0),
        generated_tokens=int(metadata.get("generated_tokens") or 0),
        quotes=tuple(_quote(entry) for entry in metadata.get("quotes") or ()),
    )


def _stream_open(response: object) -> bool:
    if isinstance(response, (StreamingResponse, AsyncStreamingResponse)):
        stream: Any = response.response_gen
    elif isinstance(response, StreamingAgentChatResponse):
        stream = response.chat_stream if response.chat_stream is not None else (
            response.achat_stream
        )
    else:
        return False
    # A generator drops its frame once it has ended (read to the end, or closed).
    frame = getattr(stream, "gi_frame", getattr(stream, "ag_frame", None))
    return frame is not None


def _how_to_finish(response: object) -> str:
    if isinstance(response, AsyncStreamingResponse):
        return "read response.async_response_gen() to the end (or await response.get_response())"
    if isinstance(response, StreamingAgentChatResponse):
        return "read response.response_gen (or async_response_gen()) to the end"
    return "read response.response_gen to the end (or call response.get_response())"


def _text(response: CitedResponse) -> str:
    text: object
    if isinstance(response, (StreamingResponse, AsyncStreamingResponse)):
        text = response.response_txt
    elif isinstance(response, StreamingAgentChatResponse):
        # response.response is stripped; the citation offsets are in the text as streamed.
        text = response.unformatted_response
    else:
        text = response.response
    return text if isinstance(text, str) else ""


def _citation(
    entry: Mapping[str, Any], text: str, nodes: Sequence[NodeWithScore], caller: str
) -> Citation:
    try:
        number, start, end = int(entry["source_id"]), int(entry["start"]), int(entry["end"])
        evidence = _span(entry.get("evidence"))
    except (AttributeError, KeyError, TypeError, ValueError):
        raise InvalidInputError(
            f"{caller}() cannot read the citation {entry!r} of metadata['citations']; it "
            "needs source_id, start, end and evidence as the synthesizer writes them"
        ) from None
    if not 1 <= number <= len(nodes):
        raise InvalidInputError(
            f"metadata['citations'] has [{number}] but the response has {len(nodes)} source "
            "node(s); render the response with the source_nodes it came with"
        )
    node_id = entry.get("node_id")
    if node_id is not None and nodes[number - 1].node.node_id != node_id:
        raise InvalidInputError(
            f"[{number}] cites node {node_id!r} but source_nodes[{number - 1}] is "
            f"{nodes[number - 1].node.node_id!r}; render the response with its source_nodes "
            "in the order the synthesizer returned them"
        )
    if text[start:end] != f"[{number}]":
        raise InvalidInputError(
            f"the response text holds {text[start:end]!r} where metadata['citations'] puts "
            f"[{number}] ({start}:{end}); render the response with its text unchanged"
        )
    return Citation(number, start, end, evidence)


def _span(entry: Mapping[str, Any] | None) -> EvidenceSpan | None:
    if not entry:
        return None
    return EvidenceSpan(
        source_start=int(entry["source_start"]),
        source_end=int(entry["source_end"]),
        text=str(entry["text"]),
        score=float(entry["score"]),
        weak=bool(entry["weak"]),
    )


def _quote(entry: Mapping[str, Any]) -> Quote:
    return Quote(
        text=str(entry["text"]),
        source_id=int(entry["source_id"]),
        start=int(entry["start"]),
        end=int(entry["end"]),
        source_start=int(entry["source_start"]),
        source_end=int(entry["source_end"]),
    )


def _source(node: BaseNode, spans: Sequence[EvidenceSpan]) -> Source:
    return Source(
        text=_node_text(node, spans),
        title=title_from(node.metadata),
        metadata=dict(node.metadata),
    )


def _node_text(node: BaseNode, spans: Sequence[EvidenceSpan]) -> str:
    for mode in _MODES:
        text = node.get_content(metadata_mode=mode)
        if all(text[s.source_start:s.source_end] == s.text for s in spans):
            return text
    return node.get_content(metadata_mode=MetadataMode.NONE)
