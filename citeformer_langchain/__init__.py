"""LangChain wrapper of citeformer: a Runnable whose citation markers can only point at the
Documents the retriever returned."""

from citeformer_langchain.answer import (
    CitationAnswer,
    CitationAnswerChunk,
    DocumentCitation,
    DocumentQuote,
)
from citeformer_langchain.conversation import StandaloneQuestion
from citeformer_langchain.embeddings import MiniLMEmbeddings
from citeformer_langchain.inputs import CitationInput
from citeformer_langchain.render import render_markdown
from citeformer_langchain.runnable import CitationRunnable

__all__ = [
    "CitationAnswer",
    "CitationAnswerChunk",
    "CitationInput",
    "CitationRunnable",
    "DocumentCitation",
    "DocumentQuote",
    "MiniLMEmbeddings",
    "StandaloneQuestion",
    "render_markdown",
]
