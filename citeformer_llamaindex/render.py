"""A LlamaIndex answer as Markdown or HTML: linked markers, then the cited nodes as references.

The rendering is ``citeformer.render``'s; this module only reads back the core ``CitedAnswer``
that a ``CitationSynthesizer`` or ``CitationChatEngine`` stored in the response's metadata
(``CitedAnswer.from_dict``), checks that the response still holds its text and nodes, and gives
each source its node's metadata.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any, TypeAlias

from llama_index.core.base.response.schema import (
    RESPONSE_TYPE,
    AsyncStreamingResponse,
    Response,
    StreamingResponse,
)
from llama_index.core.chat_engine.types import AgentChatResponse, StreamingAgentChatResponse

from citeformer.errors import InputTypeError, InvalidInputError
from citeformer.integration import short
from citeformer.render import to_html, to_markdown
from citeformer.types import CitedAnswer
from citeformer_llamaindex.nodes import ANSWER_KEY

__all__ = ["CitedResponse", "core_answer", "render_html", "render_markdown"]

CitedResponse: TypeAlias = RESPONSE_TYPE | AgentChatResponse | StreamingAgentChatResponse
"""What a query engine or chat engine returns, as LlamaIndex types it (so that
``render_markdown(engine.query(q))`` type-checks); a ``PydanticResponse`` is refused."""

_STREAMS = (StreamingResponse, AsyncStreamingResponse, StreamingAgentChatResponse)


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
    out; ``id_prefix`` keeps the anchors of several answers on one page apart; ``style``
    formats the references of nodes with bibliographic metadata in a CSL style
    (``citeformer.render.styles``).

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
    """``response`` as the core ``CitedAnswer``: the typed citations of a query engine's or chat
    engine's answer.

    ``core_answer(response).citations`` are ``citeformer.Citation`` objects equal to those the
    generator returned (``.quotes`` likewise ``citeformer.Quote``), evidence included, where
    ``response.metadata["citations"]`` holds them as dicts. ``[N]`` is ``sources[N - 1]``, the
    source of ``response.source_nodes[N - 1]``: the text the model read, its title, and the
    node's metadata. Raises as ``render_markdown`` does (a stream not read to the end, a
    response that no ``CitationSynthesizer`` wrote)."""
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
    answer = _stored(metadata, caller)
    text = _text(response)
    if text != answer.text:
        raise InvalidInputError(
            f"the response text is {short(text)}, not the {short(answer.text)} that its "
            "metadata's citations are offsets into; render the response with its text unchanged"
        )
    nodes = list(response.source_nodes)
    for citation in answer.citations:
        number = citation.source_id
        if number > len(nodes):
            raise InvalidInputError(
                f"metadata['citations'] has [{number}] but the response has {len(nodes)} source "
                "node(s); render the response with the source_nodes it came with"
            )
        node_id = answer.sources[number - 1].metadata.get("node_id")
        if node_id is not None and nodes[number - 1].node.node_id != node_id:
            raise InvalidInputError(
                f"[{number}] cites node {node_id!r} but source_nodes[{number - 1}] is "
                f"{nodes[number - 1].node.node_id!r}; render the response with its source_nodes "
                "in the order the synthesizer returned them"
            )
    # The node's metadata (file name, page, URL...) is what a reference shows.
    return dataclasses.replace(answer, sources=tuple(
        dataclasses.replace(source, metadata=dict(nodes[i].node.metadata))
        if i < len(nodes) else source
        for i, source in enumerate(answer.sources)
    ))


def _stored(metadata: Mapping[str, Any], caller: str) -> CitedAnswer:
    data = metadata.get(ANSWER_KEY)
    problem = f"it is {type(data).__name__}"
    if isinstance(data, Mapping):
        try:
            return CitedAnswer.from_dict(data)
        except InvalidInputError as error:
            problem = str(error)
    raise InvalidInputError(
        f"{caller}() cannot read the citations of the response: metadata[{ANSWER_KEY!r}] is not "
        f"the answer a CitationSynthesizer writes there ({problem}); render a response as it was "
        "returned"
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
