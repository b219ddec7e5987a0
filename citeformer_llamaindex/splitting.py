"""Re-splitting retrieved nodes into citation-sized chunks that remember where they came from."""

from __future__ import annotations

from collections.abc import Sequence

from llama_index.core.node_parser import TextSplitter
from llama_index.core.schema import (
    BaseNode,
    MetadataMode,
    NodeRelationship,
    NodeWithScore,
    TextNode,
)

from citeformer.errors import InvalidInputError

__all__ = ["PARENT_END_KEY", "PARENT_START_KEY", "CitationChunker"]

PARENT_START_KEY = "citation_parent_start_char"
PARENT_END_KEY = "citation_parent_end_char"
"""Metadata keys of a chunk node: ``parent_text[start:end] == chunk.text``."""


class CitationChunker:
    """Turns each node into one node per chunk, so a marker can point at a short passage.

    This is what ``CitationQueryEngine`` does with ``citation_chunk_size``, with two differences:
    a chunk node's text is exactly a slice of its parent's text (no ``Source N:`` header; the
    number is added by citeformer's prompt), and it records where the slice is.

    Each chunk node:

    - has text ``parent.get_content(MetadataMode.NONE)[start:end]``, with ``start`` and ``end``
      in its metadata under ``citation_parent_start_char`` / ``citation_parent_end_char``
      (hidden from the LLM and the embedding model);
    - keeps the parent's metadata and score, and its document (``ref_doc_id``);
    - links to the parent through ``NodeRelationship.PARENT``;
    - has ``start_char_idx``/``end_char_idx`` in the document when the parent has them;
    - has the id ``f"{parent.node_id}:chunk-{i}"`` (i from 0), stable across queries.

    Instantiate:
        ```python
        from llama_index.core.node_parser import SentenceSplitter
        chunker = CitationChunker(SentenceSplitter(chunk_size=64, chunk_overlap=0))
        chunks = chunker.split(nodes_with_scores)
        ```
    """

    def __init__(self, text_splitter: TextSplitter) -> None:
        self.text_splitter = text_splitter

    def split(self, nodes: Sequence[NodeWithScore]) -> list[NodeWithScore]:
        """The chunk nodes of every node, in order; a node whose text is blank gives none."""
        chunked: list[NodeWithScore] = []
        for node_with_score in nodes:
            parent = node_with_score.node
            text = parent.get_content(metadata_mode=MetadataMode.NONE)
            for index, (start, end) in enumerate(self.spans(text)):
                chunked.append(
                    NodeWithScore(node=_chunk_node(parent, text, index, start, end),
                                  score=node_with_score.score)
                )
        return chunked

    def spans(self, text: str) -> list[tuple[int, int]]:
        """``(start, end)`` of each chunk the splitter makes of ``text``."""
        spans: list[tuple[int, int]] = []
        cursor = 0
        for chunk in self.text_splitter.split_text(text):
            if not chunk.strip():
                continue
            # Chunks come in order and may overlap, so the next one starts after the previous
            # start; searching from there keeps a repeated sentence matched to its own place.
            start = text.find(chunk, cursor)
            if start < 0:
                start = text.find(chunk)
            if start < 0:
                raise InvalidInputError(
                    f"the text splitter {type(self.text_splitter).__name__} returned a chunk that "
                    f"is not a slice of the node's text ({chunk[:60]!r}...), so its offsets cannot "
                    "be known; use a splitter that only cuts text, such as SentenceSplitter"
                )
            spans.append((start, start + len(chunk)))
            cursor = start + 1
        return spans


def _chunk_node(parent: BaseNode, text: str, index: int, start: int, end: int) -> TextNode:
    hidden = [PARENT_START_KEY, PARENT_END_KEY]
    relationships = {NodeRelationship.PARENT: parent.as_related_node_info()}
    if parent.source_node is not None:
        relationships[NodeRelationship.SOURCE] = parent.source_node
    doc_start = getattr(parent, "start_char_idx", None)
    return TextNode(
        id_=f"{parent.node_id}:chunk-{index}",
        text=text[start:end],
        metadata={**parent.metadata, PARENT_START_KEY: start, PARENT_END_KEY: end},
        excluded_llm_metadata_keys=[*parent.excluded_llm_metadata_keys, *hidden],
        excluded_embed_metadata_keys=[*parent.excluded_embed_metadata_keys, *hidden],
        relationships=relationships,
        start_char_idx=doc_start + start if doc_start is not None else None,
        end_char_idx=doc_start + end if doc_start is not None else None,
    )
