"""LlamaIndex integration: a response synthesizer, a query engine and a chat engine whose
citations cannot be fabricated, and the same model as a plain LLM for the rest of an app."""

from citeformer_llamaindex.chat_engine import CitationChatEngine, CitationStreamingChatResponse
from citeformer_llamaindex.embeddings import MiniLMEmbedding
from citeformer_llamaindex.llm import CiteformerLLM
from citeformer_llamaindex.local_llm import LocalLLM
from citeformer_llamaindex.query_engine import CitationQueryEngine
from citeformer_llamaindex.render import core_answer, render_html, render_markdown
from citeformer_llamaindex.splitting import PARENT_END_KEY, PARENT_START_KEY, CitationChunker
from citeformer_llamaindex.synthesizer import INSTRUCTIONS_PROMPT_KEY, CitationSynthesizer

__all__ = [
    "INSTRUCTIONS_PROMPT_KEY",
    "PARENT_END_KEY",
    "PARENT_START_KEY",
    "CitationChatEngine",
    "CitationChunker",
    "CitationQueryEngine",
    "CitationStreamingChatResponse",
    "CitationSynthesizer",
    "CiteformerLLM",
    "LocalLLM",
    "MiniLMEmbedding",
    "core_answer",
    "render_html",
    "render_markdown",
]
