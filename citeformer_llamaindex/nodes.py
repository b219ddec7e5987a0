"""Retrieved nodes as the core's sources, and a core answer as a response's metadata.

A node's source is its text in the synthesizer's ``metadata_mode``, titled by its metadata; its
node id and score travel in the source's metadata. The response's metadata is the answer's
``CitedAnswer.to_dict()`` under ``ANSWER_KEY``, which ``CitedAnswer.from_dict`` reads back, and
its citations and quotes with the node id of each (the keys users read).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from llama_index.core.schema import MetadataMode, NodeWithScore

from citeformer.errors import PromptTooLongError
from citeformer.integration import EmptySources, keep_with_text
from citeformer.types import TITLE_KEYS, CitedAnswer, Source, title_from
from citeformer_llamaindex.splitting import CitationChunker

__all__ = [
    "ANSWER_KEY",
    "cited_nodes",
    "metadata_title",
    "response_metadata",
    "to_source",
    "too_long",
]

logger = logging.getLogger(__name__)

ANSWER_KEY = "cited_answer"
"""The key of ``response.metadata`` that holds the answer as ``CitedAnswer.to_dict()`` wrote it:
its sources are exactly what the model read."""


def metadata_title(
    metadata: Mapping[str, Any], title_keys: Sequence[str] = TITLE_KEYS
) -> str | None:
    """The first non-blank value among ``metadata``'s ``title_keys`` (white space folded)."""
    return title_from(metadata, title_keys)


def cited_nodes(
    nodes: Sequence[NodeWithScore],
    empty_sources: EmptySources,
    chunker: CitationChunker | None = None,
) -> list[NodeWithScore]:
    """The nodes the model will see, numbered from 1 in this order: those with text, each
    re-split by ``chunker`` if there is one."""
    kept = keep_with_text(
        nodes, lambda node: node.node.get_content(metadata_mode=MetadataMode.NONE),
        empty_sources, noun="node", field="text",
        label=lambda node: f"id {node.node.node_id!r}", logger=logger,
    )
    return chunker.split(kept) if chunker is not None else kept


def to_source(
    node: NodeWithScore, metadata_mode: MetadataMode, title_keys: Sequence[str] = TITLE_KEYS
) -> Source:
    """The source a node is: its content as the model reads it, its title, its id and score."""
    return Source(
        text=node.node.get_content(metadata_mode=metadata_mode),
        title=metadata_title(node.node.metadata, title_keys),
        metadata={"node_id": node.node.node_id, "score": node.score},
    )


def response_metadata(
    answer: CitedAnswer, nodes: Sequence[NodeWithScore], metadata_mode: MetadataMode
) -> dict[str, Any]:
    """What the answer adds to ``response.metadata``; ``nodes`` are its sources' nodes.

    ``"citations"`` and ``"quotes"`` are ``to_dict()``'s with each node's ``"node_id"`` (and a
    quote's ``"document_start"``/``"document_end"`` in the original document, when the node
    knows where it starts there and the model read its text alone); then the finish reason, the
    token counts, ``"abstained"`` (the answer is the refusal sentence: the nodes do not answer the
    question), ``"refusal"`` (how their support of the question was weighed, and why the answer
    is or is not the refusal: ``citeformer.RefusalCheck`` as a dict, ``None`` with refusal off)
    and, under ``ANSWER_KEY``, the whole dict.
    """
    data = answer.to_dict()
    return {
        "citations": [
            {**c, "node_id": nodes[c["source_id"] - 1].node.node_id} for c in data["citations"]
        ],
        "quotes": [
            _quote(q, nodes[q["source_id"] - 1], metadata_mode) for q in data["quotes"]
        ],
        "finish_reason": data["finish_reason"],
        "prompt_tokens": data["prompt_tokens"],
        "generated_tokens": data["generated_tokens"],
        "abstained": data["abstained"],
        "refusal": data["refusal"],
        ANSWER_KEY: data,
    }


def _quote(quote: dict[str, Any], node: NodeWithScore, mode: MetadataMode) -> dict[str, Any]:
    entry = {**quote, "node_id": node.node.node_id}
    offset = getattr(node.node, "start_char_idx", None)
    if offset is not None and mode == MetadataMode.NONE:
        entry["document_start"] = offset + quote["source_start"]
        entry["document_end"] = offset + quote["source_end"]
    return entry


def too_long(
    error: PromptTooLongError, sources: Sequence[Source], nodes: Sequence[NodeWithScore]
) -> PromptTooLongError:
    """``error`` said of the nodes: which is the largest, and what to do about it."""
    largest = max(range(len(sources)), key=lambda i: len(sources[i].text))
    name = nodes[largest].node.node_id if nodes else f"chunk {largest + 1}"
    return PromptTooLongError(
        f"{error}. The {len(sources)} node(s) do not fit; the largest is {name!r} "
        f"({len(sources[largest].text)} characters). Retrieve fewer nodes "
        "(similarity_top_k), index with a smaller chunk_size, or lower max_new_tokens."
    )
