"""``CitingSynthesizer``: a LlamaIndex synthesizer whose source nodes are the nodes it cites."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import llama_index.core.instrumentation as instrument
from llama_index.core.base.response.schema import (
    RESPONSE_TYPE,
    AsyncStreamingResponse,
    Response,
    StreamingResponse,
)
from llama_index.core.callbacks.schema import CBEventType, EventPayload
from llama_index.core.instrumentation.events.synthesis import (
    SynthesizeEndEvent,
    SynthesizeStartEvent,
)
from llama_index.core.response_synthesizers.base import BaseSynthesizer, QueryTextType
from llama_index.core.schema import NodeWithScore, QueryBundle

from citeformer.errors import InputTypeError, shown

__all__ = ["CitingSynthesizer", "check_streaming"]

# LlamaIndex re-exports get_dispatcher without marking it public for type checkers.
dispatcher = instrument.get_dispatcher(__name__)  # type: ignore[attr-defined]


class CitingSynthesizer(BaseSynthesizer):
    """A synthesizer whose response lists, first and in order, the nodes the model was shown.

    ``synthesize``/``asynthesize`` do what ``BaseSynthesizer``'s do around the answer: the
    instrumentation events and span, the ``empty_response`` when no node is left (without
    calling the model), the callback manager's ``SYNTHESIZE`` event, and LlamaIndex's
    ``{node_id: node.metadata}`` in the response's metadata. A subclass says which nodes the
    model sees (``_cited_nodes``) and writes the response from them (``_respond``,
    ``_arespond``). ``additional_source_nodes`` come after the cited ones and are never cited.
    """

    def _cited_nodes(self, nodes: Sequence[NodeWithScore]) -> list[NodeWithScore]:
        """The nodes the model will see, numbered from 1 in this order."""
        raise NotImplementedError

    def _respond(
        self,
        query_str: str,
        cited: list[NodeWithScore],
        source_nodes: list[NodeWithScore],
        metadata: dict[str, Any],
        history: Sequence[tuple[str, str]],
        streaming: bool,
    ) -> RESPONSE_TYPE:
        """The response to ``query_str`` from ``cited``, with those source nodes and metadata."""
        raise NotImplementedError

    async def _arespond(
        self,
        query_str: str,
        cited: list[NodeWithScore],
        source_nodes: list[NodeWithScore],
        metadata: dict[str, Any],
        history: Sequence[tuple[str, str]],
        streaming: bool,
    ) -> RESPONSE_TYPE:
        """Async ``_respond``."""
        raise NotImplementedError

    @dispatcher.span
    def synthesize(
        self,
        query: QueryTextType,
        nodes: list[NodeWithScore],
        additional_source_nodes: Sequence[NodeWithScore] | None = None,
        *,
        history: Sequence[tuple[str, str]] = (),
        streaming: bool | None = None,
        **response_kwargs: Any,
    ) -> RESPONSE_TYPE:
        """Answer ``query`` from ``nodes``; ``[N]`` in the answer is ``source_nodes[N - 1]``.

        ``history``: the earlier turns of a conversation, ``("user" | "assistant", text)`` pairs,
        shown before the nodes without their citation markers (``CitationChatEngine`` passes
        them). ``streaming`` overrides the synthesizer's own setting for this call.
        """
        dispatcher.event(SynthesizeStartEvent(query=query))
        streaming = self._streaming if streaming is None else check_streaming(streaming)
        cited = self._cited_nodes(nodes)
        if not cited:
            return self._empty(query, StreamingResponse, streaming)
        bundle = QueryBundle(query_str=query) if isinstance(query, str) else query
        with self._callback_manager.event(
            CBEventType.SYNTHESIZE, payload={EventPayload.QUERY_STR: bundle.query_str}
        ) as event:
            source_nodes, metadata = self._source_nodes(cited, additional_source_nodes)
            response = self._respond(
                bundle.query_str, cited, source_nodes, metadata, history, streaming
            )
            event.on_end(payload={EventPayload.RESPONSE: response})
        dispatcher.event(SynthesizeEndEvent(query=query, response=response))
        return response

    @dispatcher.span
    async def asynthesize(
        self,
        query: QueryTextType,
        nodes: list[NodeWithScore],
        additional_source_nodes: Sequence[NodeWithScore] | None = None,
        *,
        history: Sequence[tuple[str, str]] = (),
        streaming: bool | None = None,
        **response_kwargs: Any,
    ) -> RESPONSE_TYPE:
        """Async ``synthesize``."""
        dispatcher.event(SynthesizeStartEvent(query=query))
        streaming = self._streaming if streaming is None else check_streaming(streaming)
        cited = self._cited_nodes(nodes)
        if not cited:
            return self._empty(query, AsyncStreamingResponse, streaming)
        bundle = QueryBundle(query_str=query) if isinstance(query, str) else query
        with self._callback_manager.event(
            CBEventType.SYNTHESIZE, payload={EventPayload.QUERY_STR: bundle.query_str}
        ) as event:
            source_nodes, metadata = self._source_nodes(cited, additional_source_nodes)
            response = await self._arespond(
                bundle.query_str, cited, source_nodes, metadata, history, streaming
            )
            event.on_end(payload={EventPayload.RESPONSE: response})
        dispatcher.event(SynthesizeEndEvent(query=query, response=response))
        return response

    def _source_nodes(
        self, cited: list[NodeWithScore], additional: Sequence[NodeWithScore] | None
    ) -> tuple[list[NodeWithScore], dict[str, Any]]:
        source_nodes = cited + list(additional or [])
        return source_nodes, self._get_metadata_for_response([n.node for n in source_nodes]) or {}

    def _empty(self, query: QueryTextType, stream_type: type, streaming: bool) -> RESPONSE_TYPE:
        response: RESPONSE_TYPE
        if not streaming:
            response = Response(self._empty_response)
        elif stream_type is AsyncStreamingResponse:
            response = AsyncStreamingResponse(response_gen=self._empty_response_agenerator())
        else:
            response = StreamingResponse(response_gen=self._empty_response_generator())
        dispatcher.event(SynthesizeEndEvent(query=query, response=response))
        return response


def check_streaming(value: object) -> bool:
    """``value`` if it is ``True`` or ``False``: any other value would stream when truthy."""
    if not isinstance(value, bool):
        raise InputTypeError(f"streaming must be True or False, got {shown(value)}")
    return value
