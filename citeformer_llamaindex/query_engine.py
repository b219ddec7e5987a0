"""``CitationQueryEngine``: an index's query engine whose ``[N]`` can only name its nodes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from llama_index.core.query_engine import RetrieverQueryEngine

from citeformer.errors import InputTypeError, InvalidInputError
from citeformer_llamaindex.synthesizer import CitationSynthesizer

if TYPE_CHECKING:
    from llama_index.core.base.base_retriever import BaseRetriever
    from llama_index.core.callbacks.base import CallbackManager
    from llama_index.core.indices.base import BaseIndex
    from llama_index.core.postprocessor.types import BaseNodePostprocessor

__all__ = ["DEFAULT_SIMILARITY_TOP_K", "CitationQueryEngine"]

DEFAULT_SIMILARITY_TOP_K = 3
"""Nodes ``from_args`` retrieves per query, as ``CitationChatEngine.from_index`` does."""


class CitationQueryEngine(RetrieverQueryEngine):
    """A retriever query engine answering with a ``CitationSynthesizer``: no OpenAI needed.

    LlamaIndex's own ``CitationQueryEngine.from_args(index, ...)`` asks the model to cite;
    this one's grammar lets it write only ``[1]``..``[N]`` for the N nodes it was shown. Nothing
    here reads ``Settings.llm`` (which resolves to OpenAI when unset), so no OpenAI key or
    package is needed. It is a ``RetrieverQueryEngine``: ``retrieve``, ``synthesize``, the node
    postprocessors, prompts (``"response_synthesizer:instructions"``), instrumentation and
    callbacks work as there.

    ``[N]`` in ``response.response`` is ``response.source_nodes[N - 1]``.
    ``citeformer_llamaindex.core_answer(response)`` is the core ``citeformer.CitedAnswer``:
    its ``citations`` are ``citeformer.Citation`` objects, equal to those the generator
    returned. ``response.metadata["citations"]`` holds the same citations as dicts, each with its
    node's ``"node_id"``, beside LlamaIndex's ``{node_id: node.metadata}`` entries.

    Each answer is reported as an LLM call (``LLMChatStartEvent``, an
    ``LLMChatInProgressEvent`` per streamed chunk, ``LLMChatEndEvent`` with the token counts),
    inside the synthesizer's span, and to the callback manager as ``CBEventType.LLM``.

    Setup:
        ```bash
        pip install '/path/to/citeformer[llamaindex,retrieval]'
        ```

    Instantiate:
        ```python
        from citeformer_llamaindex import CitationQueryEngine, MiniLMEmbedding

        index = VectorStoreIndex.from_documents(docs, embed_model=MiniLMEmbedding())
        engine = CitationQueryEngine.from_args(index)     # the embedded model, top 3 nodes
        engine = CitationQueryEngine.from_args(
            index, similarity_top_k=5, max_new_tokens=96, citation_chunk_size=128)
        engine = CitationQueryEngine.from_args(
            index, llm=OpenAILike(api_base="http://vllm:8000/v1", model=name), engine="vllm")
        engine = CitationQueryEngine(retriever, CitationSynthesizer(FakeGenerator()))  # tests
        ```

    Invoke:
        ```python
        response = engine.query("Who designed the Eiffel Tower?")
        response.response                          # 'Gustave Eiffel's company designed it [2].'
        response.source_nodes[2 - 1]               # the node [2] cites
        core_answer(response).citations            # (Citation(source_id=2, start=38, ...),)
        ```

    Stream:
        ```python
        engine = CitationQueryEngine.from_args(index, streaming=True)
        response = engine.query(question)          # a StreamingResponse
        for token in response.response_gen:
            print(token, end="")
        core_answer(response).citations            # once the stream has ended
        ```

    Async:
        ```python
        response = await engine.aquery(question)   # with streaming=True: AsyncStreamingResponse
        async for token in response.async_response_gen():
            print(token, end="")
        ```
    """

    def __init__(
        self,
        retriever: BaseRetriever,
        response_synthesizer: CitationSynthesizer | None = None,
        node_postprocessors: Sequence[BaseNodePostprocessor] | None = None,
        callback_manager: CallbackManager | None = None,
    ) -> None:
        """Answer from ``retriever``'s nodes with ``response_synthesizer`` (default: a
        ``CitationSynthesizer()`` on the embedded model, loaded on first use).

        ``node_postprocessors`` run on the retrieved nodes before the synthesizer numbers them.
        ``callback_manager`` defaults to the synthesizer's.
        """
        if not callable(getattr(retriever, "retrieve", None)):
            raise InputTypeError(
                f"retriever must be a LlamaIndex retriever (with retrieve()), got "
                f"{type(retriever).__name__}; from an index: CitationQueryEngine.from_args(index)"
            )
        if response_synthesizer is not None and not isinstance(
            response_synthesizer, CitationSynthesizer
        ):
            raise InputTypeError(
                f"response_synthesizer must be a CitationSynthesizer, got "
                f"{type(response_synthesizer).__name__}: only its answers carry citations that "
                "can name the retrieved nodes alone"
            )
        # Given, the synthesizer keeps RetrieverQueryEngine from building one on Settings.llm.
        self._synthesizer = response_synthesizer or CitationSynthesizer()
        super().__init__(
            retriever,
            response_synthesizer=self._synthesizer,
            node_postprocessors=list(node_postprocessors or []),
            callback_manager=callback_manager,
        )

    @classmethod
    def from_args(  # type: ignore[override]
        cls,
        index: BaseIndex[Any],
        *,
        similarity_top_k: int | None = None,
        retriever: BaseRetriever | None = None,
        node_postprocessors: Sequence[BaseNodePostprocessor] | None = None,
        callback_manager: CallbackManager | None = None,
        **synthesizer_options: Any,
    ) -> CitationQueryEngine:
        """A query engine over ``index``, as LlamaIndex's ``CitationQueryEngine.from_args``.

        The nodes come from ``index.as_retriever(similarity_top_k=...)`` (default
        ``DEFAULT_SIMILARITY_TOP_K``), or from ``retriever`` (whose own settings then hold).
        ``synthesizer_options`` are ``CitationSynthesizer``'s: ``generator`` or ``llm``
        (with ``engine``), ``policy``, ``max_new_tokens`` and the other generation options,
        ``citation_chunk_size``, ``metadata_mode``, ``streaming``, ``instructions``...; a
        misspelt one is refused, naming those it takes. ``callback_manager`` is given to the
        synthesizer and the engine both.

        LlamaIndex's ``response_mode``, ``use_async`` and QA/refine templates have no
        counterpart: the grammar-bound synthesizer answers from all nodes in one generation,
        ``aquery`` is async throughout, and ``instructions=`` replaces the prompt's
        instructions.
        """
        if retriever is not None and similarity_top_k is not None:
            raise InvalidInputError(
                "pass similarity_top_k= or retriever=, not both: set the number of nodes on "
                "your retriever"
            )
        if retriever is None:
            top_k = DEFAULT_SIMILARITY_TOP_K if similarity_top_k is None else similarity_top_k
            retriever = index.as_retriever(similarity_top_k=top_k)
        if callback_manager is not None:
            synthesizer_options["callback_manager"] = callback_manager
        return cls(
            retriever,
            CitationSynthesizer(**synthesizer_options),
            node_postprocessors=node_postprocessors,
            callback_manager=callback_manager,
        )

    @property
    def synthesizer(self) -> CitationSynthesizer:
        """What answers each query."""
        return self._synthesizer

    def with_retriever(self, retriever: BaseRetriever) -> CitationQueryEngine:
        """This engine over another retriever, with the same synthesizer and postprocessors."""
        return CitationQueryEngine(
            retriever,
            self._synthesizer,
            node_postprocessors=self._node_postprocessors,
            callback_manager=self.callback_manager,
        )
